"""The biased sampled-softmax baselines: One-vs-Each, NCE and importance sampling.

docs/math.md section 7. Each step takes a minibatch of ``n`` datapoints (default 100) and,
for every datapoint ``i`` with label ``y``, ``m`` sampled classes (default 5); the
per-datapoint losses are

* **OVE** (T-4, T-15): ``r sum_j softplus(s_{k_j} - s_y)``;
* **IS** (sampled softmax): ``-s_y + log(exp(s_y) + r sum_j exp(s_{k_j}))``, or with
  ``weighted=False`` TensorFlow's ``sampled_softmax_loss`` with a uniform sampler,
  ``-s_y + log(exp(s_y) + sum_j exp(s_{k_j}))`` (no ``r``: the ``log Q`` correction is
  the same for every logit and cancels);
* **NCE** (Mnih & Teh 2012), noise ``q = 1/K``, ``c = log(m q) = log(m/K)``:
  ``softplus(c - s_y) + sum_j softplus(s_{k_j} - c)`` (no ``r``);

the same functions as :func:`scalable_softmax.objectives.ove_loss`, ``is_loss`` and
``nce_loss``. All three are biased: they do not converge to the softmax MLE.

Sampling of the classes
-----------------------
``shared_negatives=False`` (default): every datapoint draws its own ``m`` *distinct*
classes uniformly from the ``K-1`` classes other than its label (Floyd's algorithm:
exactly ``m`` draws, ``m <= K-1``); the weight is ``r = (K-1)/m``, so
``r sum_j g(k_j)`` is an unbiased estimate of ``sum_{k != y} g(k)``.

``shared_negatives=True`` (the original experiment code's variant, which used
TensorFlow's candidate samplers): one set ``S`` of ``m`` distinct classes is drawn
uniformly from *all* ``K`` classes per minibatch and shared by its datapoints. The
labels of the batch are not excluded from the draw: a sampled class that equals the
label of *another* datapoint of the batch is an ordinary negative for this one. A
sampled class equal to the datapoint's *own* label (an "accidental hit") is handled
according to the option ``remove_accidental_hits``:

* ``None`` (default): as TensorFlow's loss functions' defaults do: dropped for IS
  (``sampled_softmax_loss``, ``remove_accidental_hits=True``) and for OVE (where that
  term has zero gradient anyway), kept as a noise sample for NCE (``nce_loss``,
  ``remove_accidental_hits=False``);
* ``True``: dropped for all three (for NCE the datapoint then has ``m - 1`` noise
  samples in that batch);
* ``False``: kept for all three, as an ordinary sampled class (the original
  experiment code called TF 1.3's ``_compute_sampled_logits`` with its default
  ``remove_accidental_hits=False``): for IS the label's logit ``s_y`` (plus ``log r``
  when weighted) appears in the softmax a second time, for NCE it is a noise sample,
  for OVE its term ``r softplus(s_y - s_y)`` has zero net gradient (the result equals
  that of dropping it, to rounding).

The weights are the same in every case: a class ``k != y`` is in ``S`` with
probability ``m/K``, so the unbiased weight is ``r = K/m`` (used by OVE and weighted
IS). NCE uses ``c = log(m/K)`` in both variants. With per-datapoint negatives the
label is never drawn, so ``remove_accidental_hits`` is meaningless there: setting it
to ``True`` or ``False`` without ``shared_negatives=True`` raises ``ValueError``.

Step, learning rate and ridge (docs/math.md section 2)
-------------------------------------------------
One step is true minibatch SGD: every gradient of the batch is computed at the old
``W``, then all are applied,

    W <- W - lr * (1/b) sum_{i in batch} [ grad l_i(W) + (mu/N) sum_{j in T_i} beta_j w_j ]

(``b`` = the batch's size, ``n`` except for the last chunk of an epoch) with the
default ``reduction="mean"``; with ``reduction="sum"`` (the original TensorFlow code,
whose optimizer minimised the sum of the per-example loss vector) the factor ``1/b``
is dropped, from the loss gradients and from the ridge part alike:

    W <- W - lr * sum_{i in batch} [ grad l_i(W) + (mu/N) sum_{j in T_i} beta_j w_j ]

(so, for a batch of size ``b``, ``"sum"`` with ``lr`` is ``"mean"`` with ``lr * b``). Here
``T_i`` is the set of classes datapoint ``i`` touches (its label and its sampled
classes) and ``beta_j = 1 / P(j in T_i)`` for ``i`` uniform: per-datapoint sampling
``beta_j = N / (n_j + (N - n_j) m/(K-1))`` (:func:`scalable_softmax.objectives.touch_weights`),
shared sampling ``beta_j = N / (n_j + (N - n_j) m/K)``. The ridge part is then an
unbiased estimate of ``(mu/N) W``, the gradient of the per-datapoint ridge
``(mu/(2N)) ||W||^2``, and a step touches only the ``<= b (m+1)`` class rows involved,
on the non-zero features of the batch. The ridge is applied lazily: each class row
is stored as ``w_j = c_j v_j`` with one scale factor ``c_j`` (folded back into
``v_j`` when it falls below ``1e-100`` or when ``lr`` makes the shrink factor
non-positive), so it costs O(1) per touched class instead of O(D).

Kernels
-------
One numba kernel runs a whole epoch over CSR arrays (``indptr, indices, data``).
``sampled_epoch`` is the serial kernel. With ``fused=False`` it is the
straightforward loop: draw the batch's classes, score every datapoint at the old
``W``, then apply every update datapoint by datapoint. With ``fused=True`` (default)
the rows that several datapoints of the batch touch (with shared negatives: the ``m``
shared rows) are scored for every datapoint first; then each datapoint scores its own
rows (those no other datapoint of the batch touches: its label's, and its own
negatives') and applies its whole update at once, its own rows while their lines are
in cache. This is still true minibatch SGD (every gradient is taken at the old ``W``)
and each element receives the same operations in the same order as in the
straightforward loop: the results are bit-identical. Memory: the classes are drawn one
batch ahead (the same draws in the same order), so that while a datapoint is scored
the lines of the datapoint ``prefetch`` places ahead (its label's row; with
per-datapoint negatives all its rows) and the CSR lines of the one ``2 prefetch``
ahead are hinted to the memory system, across batch boundaries; with shared
negatives the batch's shared rows are first read in address order, one element per
cache line, so that the hardware streams them in at full bandwidth instead of
fetching them one random column at a time. ``sampled_epoch_par`` is the fused kernel
on numba's threads (the datapoints of a batch in parallel; the updates of rows shared
within the batch after them, split by columns): bit-identical too, for any number of
threads.

The class draws are made serially with the splitmix64 generator of the U-max kernels
(:mod:`scalable_softmax.methods.sgd`), seeded inside the kernel by ``seed``; Floyd's
algorithm draws ``m`` distinct classes with exactly ``m`` draws.
:func:`epoch_draws` replays them. :func:`reference_step` is the plain NumPy step the
kernels are tested against. A step whose update makes a weight non-finite stops the
epoch (``EpochReport.diverged_at``); the losses' gradients are bounded (by
``r ||x||`` for OVE, ``||x||`` for NCE and IS), so this takes a huge learning rate or
data.

Speed (``benchmarks/bench_sampled.py``, beside U-max and loops that make only the
kernels' memory accesses): with per-datapoint negatives each datapoint reads and
writes ``(m+1) nnz(x)`` elements of ``W`` at random rows, about one cache line each;
when ``W`` is far larger than the caches the kernel runs close to a loop that makes
just those accesses in the same order. With shared negatives a datapoint touches
``nnz(x)`` random lines (its label's row) and the batch streams its ``m`` shared rows
in and out (about ``m D / (8 n)`` lines per datapoint); all their scores must be taken
before any of their updates, so the shared rows are passed over twice in cache.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from scalable_softmax.kernels.common import touched_zeros as _touched_zeros
from scalable_softmax.kernels.sampled import sample_epoch, sampled_epoch, sampled_epoch_par
from scalable_softmax.kernels.threads import numba_threads
from scalable_softmax.methods.base import EpochReport, StochasticTrainer
from scalable_softmax.validation import kernel_array, kernel_csr

__all__ = [
    "OVETrainer", "NCETrainer", "ISTrainer", "KIND_OVE", "KIND_NCE", "KIND_IS",
    "epoch_draws", "reference_step", "datapoint_coefficients", "touch_weights_shared",
]

KIND_OVE, KIND_NCE, KIND_IS = 0, 1, 2
_KIND_NAMES = {KIND_OVE: "ove", KIND_NCE: "nce", KIND_IS: "is"}

#: the values of the ``reduction`` option
_REDUCTIONS = ("mean", "sum")


# ---------------------------------------------------------------------------
# class sampling
# ---------------------------------------------------------------------------


def epoch_draws(y, order, K, n, m, shared, drop_hits, seed):
    """Replay the class draws of one epoch of the kernels.

    Parameters
    ----------
    y : int64 array (N,); order : int64 array, the epoch's datapoint order
    K, n, m : classes, batch size, classes sampled per datapoint
    shared, drop_hits : the sampling variant (see the module docstring); with
        ``shared``, ``drop_hits=False`` keeps a sampled class equal to the label
        (an accidental hit) in the row, ``True`` drops it (the row is then
        one shorter); the trainers' value is their ``drop_hits`` attribute.
    seed : int, the epoch's seed

    Returns
    -------
    cls : int64 array (len(order), m + 1); row ``t``: the label of datapoint
        ``order[t]``, then its sampled classes.
    ncls : int64 array (len(order),); the number of valid entries of each row.
    """
    return sample_epoch(np.asarray(y, dtype=np.int64), np.asarray(order, dtype=np.int64),
                        int(K), int(n), int(m), bool(shared), bool(drop_hits), int(seed))


# ---------------------------------------------------------------------------
# the epoch kernels' scratch arrays
# ---------------------------------------------------------------------------


def _buffers(n, m, K):
    """The serial kernel's scratch arrays (allocated here so that the kernel allocates
    nothing and runs without numba's reference counting)."""
    z = lambda *shape: np.zeros(shape)  # noqa: E731
    i = lambda *shape: np.zeros(shape, dtype=np.int64)  # noqa: E731
    return (i(2, n, m + 1), i(2, n), i(2, m), z(n, m + 1), z(n, m + 1), i(K), z(K),
            i(n * (m + 1)), i(n, m + 1), i(n, m + 1), z(n, m + 1), i(n), i(n, m + 1),
            i(n, m + 1), i(n), z(n, m + 1))


# ---------------------------------------------------------------------------
# NumPy reference
# ---------------------------------------------------------------------------

def touch_weights_shared(y, K, m):
    """``beta_j = N / (n_j + (N - n_j) m/K)``: inverse probability that class ``j`` is
    touched by a datapoint (its label, or in the shared sample of ``m`` distinct
    classes drawn from all ``K``)."""
    n = np.bincount(np.asarray(y, dtype=np.int64), minlength=K).astype(np.float64)
    N = n.sum()
    return N / (n + (N - n) * m / K)


def datapoint_coefficients(kind, s_y, s_neg, weight, c_nce, weighted=True):
    """Plain NumPy derivatives of one datapoint's loss in its scores.

    Parameters
    ----------
    kind : ``KIND_OVE``, ``KIND_NCE`` or ``KIND_IS``
    s_y : float, the label's score; s_neg : 1-D array, the sampled classes' scores
    weight : float, ``r`` (OVE, weighted IS); c_nce : float, ``log(m/K)`` (NCE)
    weighted : bool, IS only

    Returns
    -------
    g_y : float; g_neg : 1-D array (``d loss / d s``).
    """
    s_neg = np.asarray(s_neg, dtype=np.float64)
    sig = lambda z: 0.5 * (1.0 + np.tanh(0.5 * z))  # noqa: E731  (another form than the kernel's)
    if kind == KIND_OVE:
        g = weight * sig(s_neg - s_y)
        return -g.sum(), g
    if kind == KIND_NCE:
        return -sig(c_nce - s_y), sig(s_neg - c_nce)
    if kind == KIND_IS:
        z = np.concatenate(([s_y], s_neg + (np.log(weight) if weighted else 0.0)))
        q = np.exp(z - z.max())
        q /= q.sum()
        return q[0] - 1.0, q[1:]
    raise ValueError(f"kind must be one of {sorted(_KIND_NAMES)}; got {kind!r}")


def reference_step(X, y, W, rows, cls, ncls, lr, kind, weight, c_nce, weighted=True,
                   mu=0.0, beta=None, reduction="mean"):
    """One minibatch step in plain NumPy (dense ``K x D`` gradient).

    ``W_new = W - lr * (1/b) sum_t [ grad l_t(W) + (mu/N) sum_{j in T_t} beta_j w_j ]``
    (``reduction="mean"``) or the same without ``1/b`` (``reduction="sum"``), with
    ``T_t`` the distinct classes touched by datapoint ``t``. A row of ``cls`` may hold
    the label again among its sampled classes (draws with accidental hits kept): that
    entry is then an ordinary sampled class of the loss, and the ridge of the label's
    row is still counted once.

    Parameters
    ----------
    X : csr_matrix (N, D); y : int array (N,); W : ndarray (K, D), not modified
    rows : the batch's datapoint indices (length b)
    cls, ncls : the batch's classes as returned by :func:`epoch_draws`
    lr, kind, weight, c_nce, weighted : as in :func:`datapoint_coefficients`
    mu : ridge; beta : ndarray (K,) of inverse touch probabilities (needed if mu > 0)
    reduction : ``"mean"`` (default) or ``"sum"``

    Returns
    -------
    ndarray (K, D), the new weights.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}; got {reduction!r}")
    N = X.shape[0]
    G = np.zeros_like(W)
    b = len(rows)
    for t, i in enumerate(rows):
        x = np.asarray(X[[i]].toarray()).ravel()
        c = np.asarray(cls[t][: ncls[t]])
        s = W[c] @ x
        g_y, g_neg = datapoint_coefficients(kind, s[0], s[1:], weight, c_nce, weighted)
        G[c[0]] += g_y * x
        for j, gj in zip(c[1:], g_neg):
            G[j] += gj * x
        if mu > 0:
            for j in np.unique(c):
                G[j] += (mu / N) * beta[j] * W[j]
    if reduction == "sum":
        return W - lr * G
    return W - lr * G / b


# ---------------------------------------------------------------------------
# trainers
# ---------------------------------------------------------------------------

def _hits_need_shared_negatives(cls, opts, n_sampled):
    """``remove_accidental_hits`` is a choice of shared negatives only."""
    rah = opts["remove_accidental_hits"]
    if rah is not None and not opts["shared_negatives"]:
        return (f"option 'remove_accidental_hits' of method {cls.name!r} applies only with "
                f"shared_negatives=True (per-datapoint negatives never draw the label); "
                f"got remove_accidental_hits={rah!r} with shared_negatives=False")
    return None


class _SampledTrainer(StochasticTrainer):
    """Shared machinery of :class:`OVETrainer`, :class:`NCETrainer` and :class:`ISTrainer`.

    Options
    -------
    shared_negatives : bool, default False
        one set of ``m`` classes per minibatch instead of per datapoint (module
        docstring).
    remove_accidental_hits : None, True or False; default None
        with ``shared_negatives=True``: what happens to a sampled class equal to the
        datapoint's own label. ``None``: dropped for OVE and IS, kept for NCE
        (TensorFlow's loss functions' defaults); ``True``: dropped for all;
        ``False``: kept for all, as an ordinary sampled class (the original
        experiment code). Setting ``True`` or ``False`` without shared negatives
        (where the label is never drawn) raises ``ValueError``.
    reduction : ``"mean"`` (default) or ``"sum"``
        a step uses the mean of the batch's gradients (``lr/b`` per datapoint) or
        their sum (``lr`` per datapoint; the original TensorFlow code); the ridge
        part scales alike (module docstring).
    fused : bool, default True
        apply each row's update while it is in cache (``False``: the straightforward
        two-phase loop; identical results).
    prefetch : int, default 1
        with ``fused``: hint the cache lines of the datapoint this many places ahead
        (and the CSR lines of the one twice as far) while the current one is
        processed; with shared negatives also stream the batch's shared rows in first
        (0: none of this; no effect on results).
    threads : int, default 1
        ``> 1``: the parallel kernel on that many numba threads (bit-identical
        results). Off by default: the kernel synchronises its threads twice per
        minibatch, which only pays on idle cores. The deprecated ``parallel=True``
        means ``threads=numba.get_num_threads()`` (when the options are resolved).
    """

    kind: int = -1
    has_u = False
    minibatch = True
    default_batch_size = 100
    default_n_sampled = 5
    parallel_kernel = True
    deprecated_options = ("parallel",)
    option_rules = (*StochasticTrainer.option_rules, _hits_need_shared_negatives)
    options = {**StochasticTrainer.options,
               "shared_negatives": (False, {"type": "bool"}),
               "fused": (True, {"type": "bool"}),
               "prefetch": (1, {"type": "int", "min": 0}),
               "remove_accidental_hits": (None, {"type": "bool", "nullable": True}),
               "reduction": ("mean", {"one_of": list(_REDUCTIONS)})}

    def __init__(self, X, y, K, *, mu=0.0, batch_size=None, n_sampled=None, **options):
        super().__init__(X, y, K, mu=mu, batch_size=batch_size, n_sampled=n_sampled, **options)
        K, m = self.K, self.n_sampled
        self.shared = self.opts["shared_negatives"]
        self.X = X if (sp.issparse(X) and X.format == "csr") else sp.csr_matrix(X)
        # 32-bit column indices when they fit: half the lines of a datapoint's indices;
        # one type per array, so one compile per kernel (validation.kernel_csr)
        self._indptr, self._indices, self._data = kernel_csr(self.X)
        self._y = kernel_array(y, np.int64)
        #: the indices of every CSR row are sorted (the kernels then apply the shared
        #: rows' updates by blocks of columns)
        self._sorted = bool(self.X.has_sorted_indices)
        #: weight r of the sampled terms
        self.weight = K / m if self.shared else (K - 1) / m
        self.c_nce = math.log(m / K)
        rah = self.opts["remove_accidental_hits"]
        #: drop a sampled class equal to the datapoint's label (shared negatives only)
        self.drop_hits = self.shared and (self.kind != KIND_NCE if rah is None else rah)
        #: ``reduction="sum"``: no 1/b in the step
        self.reduction = self.opts["reduction"]
        if self.shared:
            self.beta = touch_weights_shared(self._y, K, m)
        else:
            nj = np.bincount(self._y, minlength=K).astype(np.float64)
            self.beta = self.N / (nj + (self.N - nj) * m / (K - 1))
        self.scale = None

    @property
    def _logr(self):
        return math.log(self.weight)

    def init_params(self, u_init: str = "zero") -> None:
        """``W = 0`` (every page written), all lazy scale factors 1; no ``u``."""
        self.W = _touched_zeros(self.K, self.D)
        self.scale = np.ones(self.K)
        self.u = None

    def run_epoch(self, order, lr, seed):
        """One epoch of minibatch steps over ``order`` (chunks of ``batch_size``)."""
        if self.W is None:
            self.init_params()
        order = np.ascontiguousarray(order, dtype=np.int64)
        args = (self._indptr, self._indices, self._data, self._y, order, self.W, self.scale,
                self.beta, self.batch_size, self.n_sampled, float(lr), self.mu / self.N,
                self.kind, self.shared, self.drop_hits, self._logr, self.c_nce, int(seed),
                self.opts["fused"], self.opts["prefetch"], self.reduction == "sum",
                self._sorted)
        nthr = self.opts["threads"]
        if nthr > 1:
            with numba_threads(nthr):
                steps, div, _ = sampled_epoch_par(*args, nthr)
        else:
            buf = _buffers(self.batch_size, self.n_sampled, self.K)
            steps, div, _ = sampled_epoch(*args, buf)
        return EpochReport(steps=int(steps), diverged_at=int(div))

    def warmup(self):
        """Compile (or load) the kernel :meth:`run_epoch` uses: an epoch over no
        datapoints, which changes nothing."""
        if self.W is None:
            self.init_params()
        self.run_epoch(np.zeros(0, dtype=np.int64), 0.0, 0)

    def weights(self):
        """The ``K x D`` weights: the stored rows times their lazy scale factors (a
        folded copy when some factor differs from 1, i.e. only when ``mu > 0``)."""
        if self.scale is None or np.all(self.scale == 1.0):
            return self.W
        return self.W * self.scale[:, None]


class OVETrainer(_SampledTrainer):
    """One-vs-Each (T-4, T-15, T-16) by doubly stochastic minibatch SGD.

    Loss per datapoint ``r sum_j softplus(s_{k_j} - s_y)``; see the module docstring
    for the sampling, the step and the options (``shared_negatives``,
    ``remove_accidental_hits``, ``reduction``, ``fused``, ``prefetch``, ``threads``).
    """

    name = "ove"
    kind = KIND_OVE


class NCETrainer(_SampledTrainer):
    """Noise-contrastive estimation with uniform noise ``q = 1/K`` (Mnih & Teh 2012).

    Loss per datapoint ``softplus(c - s_y) + sum_j softplus(s_{k_j} - c)``,
    ``c = log(m/K)``; options ``shared_negatives``, ``remove_accidental_hits``,
    ``reduction``, ``fused``, ``prefetch``, ``threads``.
    """

    name = "nce"
    kind = KIND_NCE


class ISTrainer(_SampledTrainer):
    """Importance sampling / sampled softmax (Bengio & Senecal).

    Loss per datapoint ``-s_y + log(exp(s_y) + r sum_j exp(s_{k_j}))``.

    Options
    -------
    weighted : bool, default True
        ``False``: no ``r`` (TensorFlow's ``sampled_softmax_loss`` with a uniform
        sampler).
    shared_negatives, remove_accidental_hits, reduction, fused, prefetch, threads :
        as for every sampled method (:class:`_SampledTrainer`).
    """

    name = "is"
    kind = KIND_IS
    options = {**_SampledTrainer.options, "weighted": (True, {"type": "bool"})}

    @property
    def _logr(self):
        return math.log(self.weight) if self.opts["weighted"] else 0.0
