"""Explicit SGD on the double-sum objectives: vanilla SGD, U-max and Raman's formulation.

Three methods of :func:`scalable_softmax.fit.fit` live here (docs/math.md sections 2, 3, 6):

* ``"vanilla"`` (:class:`VanillaTrainer`): plain SGD on ``(w_k, w_{y_i}, u_i)`` with the
  gradient (F-7) of the per-datapoint term ``f_ik / N``; ``u_i`` clipped at 0. It is
  *allowed to overflow* (``exp(delta_ik - u_i)`` explodes when ``u_i << delta_ik``): the
  kernel stops at the first non-finite value and reports the step.
* ``"umax"`` (:class:`UmaxTrainer`): Algorithm 1 of Fagan & Iyengar. Before the step,
  ``u_i <- softplus(delta_ik)`` when ``u_i < softplus(delta_ik) - delta0``; after it the
  projections ``u_i <- clip(u_i, 0, B_u)`` and, when ``mu > 0``,
  ``w_j <- w_j min(1, B_W / ||w_j||)`` (Lemma 1; ``B_W^2 = 2 N log K / mu``). With
  ``n_sampled = m > 1`` the ``m`` terms are summed with weight ``(K-1)/m`` and ``u_i`` is
  reset from ``log(1 + sum_{k in S} exp(delta_ik))``.
* ``"raman"`` (:class:`RamanTrainer`): vanilla SGD or U-max on Raman et al.'s double sum
  (F-8) with the *correct* gradient of docs/math.md section 6 (not the original code's).

Conventions
-----------
Learning rates are per datapoint (docs/math.md section 2): every step drops the factor ``N``
and the ridge gradient is ``(mu/N) beta_j w_j``. Classes are sampled uniformly among the
``K - 1`` classes other than ``y_i``; for ``m > 1`` they are drawn **without
replacement** (Floyd's algorithm). Reasons: the U-max reset value
``log(1 + sum_{k in S} e^{delta_ik})`` is a lower bound on ``u_i*(W)`` only for distinct
classes (repeats could push ``u_i`` above its optimum); the weight ``(K-1)/m`` stays
unbiased (each class is included with probability ``m/(K-1)``); the variance is lower.
The ridge weights are ``beta_j = N / (n_j + (N - n_j) m/(K-1))``
(:func:`scalable_softmax.objectives.touch_weights`), which makes the sampled ridge term
an unbiased estimate of ``(mu/2)||W||^2``.

Implementation
--------------
* **Lazy ridge.** ``W`` is stored as ``scale[k] * V[k]`` (``self.W`` holds ``V``) so the
  ridge shrink ``(1 - lr mu beta_j / N)`` of a touched row costs O(1). The squared norms
  ``||V_j||^2`` the projection needs are kept in O(1) per step from the dot product the
  step computes anyway, ``||V + a x||^2 = ||V||^2 + 2 a (x . V) + a^2 ||x||^2`` (the
  ``m > 1`` kernel sums the change entry by entry). Scale, squared norm and ``beta_j``
  of a class sit together in one 32-byte record (``self._rs``, shape ``(K, 4)``), so
  the ridge costs no extra cache line per step. A row whose scale leaves
  ``[1e-100, 1e100]`` is folded into ``V`` at once (O(D), rare); :meth:`weights` folds
  every row whose scale is not 1 and recomputes the norms exactly. With ``mu = 0`` the
  scales stay exactly 1 and folding is a no-op.
* **Software pipelining** (option ``prefetch``, default True). The classes are drawn
  two steps ahead, and the entries ``W[k, cols]``, ``W[y, cols]`` of step
  ``t + 2`` are prefetched (``llvm.prefetch``, write intent) interleaved with step
  ``t``'s dot product; the ``x`` row of step ``t + 4`` and ``indptr``/``y``/``u`` of step
  ``t + 6`` are prefetched earlier still. A ``W`` of at most 512 KiB stays in cache and
  only the data are prefetched. Prefetches are hints: the arithmetic is exactly that of
  the plain loop (``prefetch=False``), and the random draws happen in step order, so
  every mode gives bit-identical results. The ``m > 1`` kernel
  (:func:`scalable_softmax.kernels.sgd.epoch_multi`) is pipelined the same way, one step
  ahead (a step of ``m + 1`` rows lasts longer than a memory access, and two steps' rows
  would overflow the L1 cache):
  its ``m`` classes drawn a step ahead, the ``m + 1`` rows of step ``t + 1`` prefetched
  one per dot-product loop of step ``t``; it too is
  bit-identical to its plain loop (``prefetch=False``) and to the kernel before it was
  pipelined, and it skips the per-entry overflow check below the ``max |V|`` bound.
* **Dense rows.** When every row of ``X`` stores all ``D`` columns (e.g. a dense
  MNIST), the kernel works on contiguous rows: dot products by BLAS ``ddot`` (numba's
  ``np.dot``; vectorised, so its summation order differs from the sparse path's by
  rounding only) and a vectorised update loop.
* **Hogwild** (option ``threads > 1``, or its deprecated alias ``hogwild=True``, which
  means ``threads=2`` unless ``threads`` is given; off by default, ``n_sampled = 1`` only): the
  epoch's order is cut into ``threads`` contiguous chunks run in parallel
  without locks, each with its own random stream (``numpy.random.SeedSequence(seed)``).
  Races make it **not bit-identical** between runs (and may lose a few updates of the
  overflow guard below); a divergence is reported at the first failing step of any
  chunk, as an index into the epoch's order.
* **Random numbers**: a splitmix64 stream seeded by the epoch seed ``fit`` passes;
  ``uniform{0..n-1}`` is ``floor(U n)`` with a 53-bit ``U`` (bias below ``n 2^-53``).
* **Divergence**: before a step is applied, the scores, ``u`` and the step
  coefficients are checked; a non-finite one stops the epoch with ``W``, ``u`` left at
  the last finite iterate. An overflow inside the row update itself (``finite + finite
  = inf``) is detected after the update (the parameters then hold the non-finite
  value). That per-entry check runs only once a running bound on ``max |V|`` (the sum
  of ``|a| max|x|`` over the steps) passes ``1e300``; below it no entry can overflow.
* **The authors' code's class draw** (option ``sample_from="all"``, used by the
  ``"authors-code"`` protocol of :mod:`scalable_softmax.protocols`): ``m`` distinct
  classes uniform on all ``K``, the label removed when it was drawn, each remaining
  term weighted ``(K-1)/|S|`` and U-max's reset taken over that set. Each class
  ``k != y`` is then in ``S`` with probability ``m/K``; with weight ``(K-1)/|S|`` the
  estimate of ``sum_{k != y}`` is not exactly unbiased (it is for ``"others"``).
* **Memory**: ``W`` (``K x D``), the ``K x 4`` class records, ``u`` and per-row
  ``||x_i||^2`` (``N``), and the CSR arrays; nothing of size ``N x K`` or dense ``N x D``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from scalable_softmax.kernels.sgd import (
    KIND_RAMAN_UMAX,
    KIND_RAMAN_VANILLA,
    KIND_UMAX,
    KIND_VANILLA,
    PREFETCH_DEFAULT,
    draw_classes_all,
    draw_classes_m1,
    draw_classes_multi,
    epoch_m1,
    epoch_m1_hogwild,
    epoch_multi,
    fold_all,
)
from scalable_softmax.kernels.threads import numba_threads
from scalable_softmax.methods.base import (
    EpochReport,
    StochasticTrainer,
    no_parallel_kernel,
)
from scalable_softmax.validation import kernel_array, kernel_csr

__all__ = ["VanillaTrainer", "UmaxTrainer", "RamanTrainer", "reference_step", "draw_classes",
           "KIND_VANILLA", "KIND_UMAX", "KIND_RAMAN_VANILLA", "KIND_RAMAN_UMAX"]

#: ``prefetch=True`` runs kernel mode PREFETCH_DEFAULT unless W is at most this big (then
#: mode 3: only the data are prefetched)
_SMALL_W_BYTES = 1 << 19


# ---------------------------------------------------------------------------
# class streams (what the kernels draw), for tests and diagnostics
# ---------------------------------------------------------------------------


def draw_classes(seed, order, y, K, m, sample_from="others"):
    """Replay the classes the epoch kernels draw for ``order`` with epoch seed ``seed``:
    a list with, per step, the array of sampled classes (``sample_from="all"``: the
    label removed, so 0 to ``m`` of them)."""
    order = np.ascontiguousarray(order, dtype=np.int64)
    y = np.ascontiguousarray(y, dtype=np.int64)
    if sample_from == "all":
        rows = draw_classes_all(np.int64(seed), order, y, int(K), int(m))
        return [r[r >= 0] for r in rows]
    if m == 1:
        return list(draw_classes_m1(np.int64(seed), order, y, int(K))[:, None])
    return list(draw_classes_multi(np.int64(seed), order, y, int(K), int(m)))


# ---------------------------------------------------------------------------
# plain NumPy reference steps (the ground truth the kernels are tested against)
# ---------------------------------------------------------------------------

def reference_step(kind, i, ks, X, y, W, u, lr, mu, beta, delta0, u_lo, u_hi, B_W):
    """One step of vanilla / U-max / Raman SGD in plain NumPy, on dense true weights: the
    ground truth the kernels are tested against (every method module names its NumPy
    step ``reference_step``; see :mod:`scalable_softmax.methods`).

    Parameters
    ----------
    kind : int, ``KIND_*``
    i : datapoint; ks : sequence of distinct classes ``!= y[i]`` (``m = len(ks)``)
    X : scipy.sparse or ndarray (N, D); y : int (N,)
    W : ndarray (K, D) true weights (not modified); u : ndarray (N,) (not modified)
    lr, mu : learning rate and ridge; beta : (K,) ridge weights
    delta0 : U-max threshold; u_lo, u_hi : clip interval of ``u``
    B_W : row-norm bound for the projection (``inf``: none)

    Returns
    -------
    (W_new, u_new, info) with ``info = {"reset": bool, "finite": bool}``; on a
    non-finite step ``W_new``, ``u_new`` are copies of the inputs.
    """
    N = X.shape[0]
    K = W.shape[0]
    x = X[[i]].toarray().ravel() if sp.issparse(X) else np.asarray(X[i], dtype=np.float64)
    ks = np.asarray(ks, dtype=np.int64)
    m = ks.size
    r = (K - 1) / m if m else 0.0      # m = 0: a step on u alone (authors' draw)
    yi = int(y[i])
    W2 = W.copy()
    u2 = u.copy()
    ui = float(u[i])
    sy = float(x @ W[yi])
    sk = W[ks] @ x
    reset = False
    with np.errstate(over="ignore", invalid="ignore"):
        if kind in (KIND_VANILLA, KIND_UMAX):
            d = sk - sy
            if kind == KIND_UMAX:
                target = float(np.logaddexp.reduce(np.concatenate(([0.0], d))))
                if ui < target - delta0:
                    ui, reset = target, True
            gk = r * np.exp(d - ui)
            gy = -gk.sum()
            du = 1.0 - np.exp(-ui) - gk.sum()
        else:
            if kind == KIND_RAMAN_UMAX:
                target = float(np.logaddexp.reduce(np.concatenate(([sy], sk))))
                if ui < target - delta0:
                    ui, reset = target, True
            ey = np.exp(sy - ui)
            gk = r * np.exp(sk - ui)
            gy = ey - 1.0
            du = 1.0 - ey - gk.sum()
        un = ui - lr * du
        finite = bool(np.all(np.isfinite(gk)) and np.isfinite(gy) and np.isfinite(un))
        if not finite:
            return W2, u2, {"reset": reset, "finite": False}
        for q, k in enumerate(ks):
            W2[k] = W[k] - lr * (gk[q] * x + mu / N * beta[k] * W[k])
        W2[yi] = W[yi] - lr * (gy * x + mu / N * beta[yi] * W[yi])
    u2[i] = min(max(un, u_lo), u_hi)
    if np.isfinite(B_W):
        for j in list(ks) + [yi]:
            nrm = np.linalg.norm(W2[j])
            if nrm > B_W:
                W2[j] *= B_W / nrm
    return W2, u2, {"reset": reset, "finite": bool(np.all(np.isfinite(W2)))}


# ---------------------------------------------------------------------------
# trainers
# ---------------------------------------------------------------------------

#: the rule of U-max's threshold ``delta0``
_DELTA0 = {"type": "number", "above": 0, "finite": True,
           "label": "option delta0 (U-max threshold)"}


def _touch_weights(y, K, m, from_all=False):
    """``beta_j``: inverse probability that a step touches class ``j`` (its label, or
    sampled: with probability ``m/(K-1)``, or ``m/K`` when drawn from all ``K``)."""
    n = np.bincount(y, minlength=K).astype(np.float64)
    N = float(y.shape[0])
    return N / (n + (N - n) * m / ((K if from_all else K - 1)))


def _hogwild_needs_one_class(cls, opts, n_sampled):
    """The Hogwild kernel (``threads > 1``) runs one class per step drawn among the
    others."""
    if opts["threads"] > 1 and (n_sampled != 1 or opts["sample_from"] == "all"):
        return no_parallel_kernel(cls.name, opts["threads"],
                                  " for n_sampled > 1 or sample_from='all'")
    return None


class _DoubleSumTrainer(StochasticTrainer):
    """Shared machinery of the three explicit-SGD methods (see the module docstring).

    Options (all methods): ``prefetch`` (bool, default True: software pipelining;
    results identical either way; or a kernel mode 0-3, see
    :func:`scalable_softmax.kernels.sgd.epoch_m1`), ``threads`` (int, default 1; ``> 1``:
    Hogwild on that many threads, ``n_sampled = 1`` with ``sample_from="others"`` only;
    the deprecated ``hogwild=True`` means ``threads=2`` when ``threads`` is not
    given), ``sample_from``
    (``"others"``, default: the ``m`` classes are drawn
    among the ``K-1`` classes other than the label; ``"all"``: the authors' code's
    draw, ``m`` distinct classes from all ``K`` with the label dropped when drawn, each
    remaining term weighted ``(K-1)/|S|``; the epoch's ``extra`` then counts
    ``label_draws``). With ``n_sampled > 1`` or ``sample_from="all"`` the many-class
    kernel runs (:func:`scalable_softmax.kernels.sgd.epoch_multi`: pipelined as well, no Hogwild).
    """

    has_u = True
    exact_u = "softmax"
    default_batch_size = 1
    default_n_sampled = 1
    parallel_kernel = True
    deprecated_options = ("hogwild",)
    option_rules = (*StochasticTrainer.option_rules, _hogwild_needs_one_class)
    options = {**StochasticTrainer.options,
               "prefetch": (True, {"one_of": [True, False, 0, 1, 2, 3]}),
               "sample_from": ("others", {"one_of": ["others", "all"]})}

    def __init__(self, X, y, K, *, mu=0.0, batch_size=None, n_sampled=None, **options):
        super().__init__(X, y, K, mu=mu, batch_size=batch_size, n_sampled=n_sampled,
                         **options)
        opts = self.opts
        self._from_all = opts["sample_from"] == "all"
        #: threads of the Hogwild kernel (1: the serial kernels)
        self._threads = opts["threads"]
        self._hogwild = self._threads > 1
        pf = opts["prefetch"]
        if isinstance(pf, (bool, np.bool_)):
            # a W that fits in the L2 cache gains nothing from prefetching its rows
            small = self.K * self.D * 8 <= _SMALL_W_BYTES
            self._pf_mode = (3 if small else PREFETCH_DEFAULT) if pf else 0
        else:
            self._pf_mode = int(pf)
        self.delta0 = float(opts.get("delta0", 1.0))
        X = self.X.tocsr() if sp.issparse(self.X) else sp.csr_matrix(self.X)
        # one type per array, so one compile per kernel (validation.kernel_csr)
        self._indptr, self._indices, self._data = kernel_csr(X, np.int32)
        self._y = kernel_array(self.y, np.int64)
        N, D = self.N, self.D
        # dense path: every row stores columns 0..D-1 in order
        self._dense = bool(
            N * D > 0 and self._indices.size == N * D
            and np.array_equal(self._indptr, np.arange(N + 1, dtype=np.int64) * D)
            and np.array_equal(self._indices.reshape(N, D),
                               np.broadcast_to(np.arange(D, dtype=np.int32), (N, D))))
        self.beta = _touch_weights(self._y, self.K, self.n_sampled, self._from_all)
        # Lemma 1 / 2 bounds
        rows = np.repeat(np.arange(N), np.diff(self._indptr))
        sq = np.bincount(rows, weights=self._data ** 2, minlength=N)
        self._xsq = np.ascontiguousarray(sq, dtype=np.float64)
        self.B_x = float(np.sqrt(sq.max())) if N else 0.0
        self._xmax = float(np.max(np.abs(self._data))) if self._data.size else 0.0
        if self.mu > 0:
            self.B_W = float(np.sqrt(2.0 * self.N * np.log(self.K) / self.mu))
            self.B_u = float(np.logaddexp(0.0, np.log(self.K - 1) + 2.0 * self.B_x * self.B_W))
        else:
            self.B_W = np.inf
            self.B_u = np.inf
        self.scale = None
        self.sqnorm = None

    # subclass hooks ----------------------------------------------------------
    def _kind(self) -> int:
        raise NotImplementedError

    def _u_bounds(self):
        raise NotImplementedError

    def _project(self) -> bool:
        return self._kind() in (KIND_UMAX, KIND_RAMAN_UMAX) and self.mu > 0

    # Trainer API -------------------------------------------------------------
    def init_params(self, u_init: str = "zero") -> None:
        if u_init not in ("zero", "logK"):
            raise ValueError(f"u_init must be 'zero' or 'logK'; got {u_init!r}")
        W = np.empty((self.K, self.D), dtype=np.float64)
        W.fill(0.0)                      # write every page now (np.zeros would not)
        self.W = W
        # per-class state, one 32-byte record per class (one cache line per touch):
        # lazy scale, ||V_j||^2, beta_j, unused
        self._rs = np.zeros((self.K, 4), dtype=np.float64)
        self._rs[:, 0] = 1.0
        self._rs[:, 2] = self.beta
        self.scale = self._rs[:, 0]      # views
        self.sqnorm = self._rs[:, 1]
        self.u = np.full(self.N, 0.0 if u_init == "zero" else np.log(self.K), dtype=np.float64)
        self._guard = np.zeros(1, dtype=np.float64)   # bound on max |V| (W = 0)

    def set_params(self, W, u=None) -> None:
        """Start from given weights ``W`` (K x D) and, optionally, ``u`` (N,) (copied);
        call after :meth:`init_params`."""
        W = np.asarray(W, dtype=np.float64)
        if W.shape != (self.K, self.D):
            raise ValueError(f"W must have shape (K, D) = ({self.K}, {self.D}); got {W.shape}")
        self.W[:] = W
        self.scale[:] = 1.0
        self.sqnorm[:] = np.einsum("kd,kd->k", self.W, self.W)
        self._guard[0] = float(np.max(np.abs(self.W))) if self.W.size else 0.0
        if u is not None:
            u = np.asarray(u, dtype=np.float64)
            if u.shape != (self.N,):
                raise ValueError(f"u must have shape (N,) = ({self.N},); got {u.shape}")
            self.u[:] = u

    def _call(self, order, lr, seed):
        order = np.ascontiguousarray(order, dtype=np.int64)
        u_lo, u_hi = self._u_bounds()
        project = self._project()
        bw2 = self.B_W ** 2 if project else np.inf
        mu_n = self.mu / self.N
        kind = self._kind()
        if self._hogwild:
            threads = self._threads
            seeds = np.random.SeedSequence(int(seed)).generate_state(threads, np.uint64)
            seeds = seeds.astype(np.int64)
            counters = np.zeros((threads, 4), dtype=np.int64)
            with numba_threads(threads):
                epoch_m1_hogwild(kind, self._indptr, self._indices, self._data, self._dense,
                                 self._y, order, self.W, self._rs, self.u,
                                 float(lr), mu_n, self.delta0, u_lo, u_hi, bw2,
                                 project, seeds, self._pf_mode, counters, self._xmax,
                                 self._guard, self._xsq)
            n = order.size
            bounds = [(n * c) // threads for c in range(threads + 1)]
            div = [bounds[c] + counters[c, 1] for c in range(threads) if counters[c, 1] >= 0]
            out = np.array([counters[:, 0].sum(), min(div) if div else -1,
                            counters[:, 2].sum(), counters[:, 3].sum()])
        elif self.n_sampled == 1 and not self._from_all:
            out = np.zeros(4, dtype=np.int64)
            epoch_m1(kind, self._indptr, self._indices, self._data, self._dense, self._y,
                     order, self.W, self._rs, self.u, float(lr), mu_n,
                     self.delta0, u_lo, u_hi, bw2, project, np.int64(seed),
                     self._pf_mode, out, self._xmax, self._guard, self._xsq)
        else:
            out = np.zeros(5, dtype=np.int64)
            epoch_multi(kind, self._indptr, self._indices, self._data, self._y, order,
                        self.W, self._rs, self.u, np.int64(self.n_sampled),
                        self._from_all, float(lr), mu_n, self.delta0, u_lo, u_hi, bw2, project,
                        np.int64(seed), self._pf_mode, out, self._xmax, self._guard)
        return out

    def run_epoch(self, order: np.ndarray, lr: float, seed: int) -> EpochReport:
        out = self._call(order, lr, seed)
        extra = {"u_resets": int(out[2]), "w_projections": int(out[3])}
        if self._from_all:
            extra["label_draws"] = int(out[4])
        return EpochReport(steps=int(out[0]), diverged_at=int(out[1]), extra=extra)

    def warmup(self) -> None:
        self._call(np.empty(0, dtype=np.int64), 1.0, 0)

    def weights(self) -> np.ndarray:
        """Fold the lazy scales into ``self.W`` (rows whose scale is not 1; exact norms
        recomputed) and return it. With ``mu = 0`` nothing changes."""
        if self.scale is not None:
            if np.any(np.abs(self.scale) > 1.0):
                self._guard[0] = np.inf
            fold_all(self.W, self._rs)
        return self.W

    @property
    def prefetch_mode(self) -> int:
        """The kernel mode this trainer runs (0 plain, 1 to 3 pipelined; see
        :func:`scalable_softmax.kernels.sgd.epoch_m1`). Every mode gives bit-identical
        results, only the memory hints differ; settable (0 to 3), effective from the next
        epoch."""
        return self._pf_mode

    @prefetch_mode.setter
    def prefetch_mode(self, mode: int) -> None:
        if mode not in (0, 1, 2, 3):
            raise ValueError(f"mode must be 0, 1, 2 or 3; got {mode!r}")
        self._pf_mode = int(mode)

    @property
    def dense_rows(self) -> bool:
        """True when this trainer runs its dense-row path (every row of ``X`` stores all
        ``D`` columns)."""
        return self._dense


class VanillaTrainer(_DoubleSumTrainer):
    """Vanilla SGD on the double sum (F-6, F-7); ``u`` clipped at 0, no projection.

    Options: ``prefetch``, ``threads``, ``hogwild``, ``sample_from`` (see
    :class:`_DoubleSumTrainer`).
    Overflows at large learning rates (by design): the epoch stops at the first
    non-finite value and reports it.
    """

    name = "vanilla"

    def _kind(self):
        return KIND_VANILLA

    def _u_bounds(self):
        return 0.0, np.inf


class UmaxTrainer(_DoubleSumTrainer):
    """U-max (Algorithm 1): reset ``u_i`` when it is more than ``delta0`` below
    ``log(1 + sum_{k in S} exp(delta_ik))``, then SGD, then project ``u`` onto
    ``[0, B_u]`` and (``mu > 0``) every touched row onto the ball of radius ``B_W``.

    Options: ``delta0`` (float > 0, default 1), ``prefetch``, ``hogwild``, ``threads``.
    ``extra`` per epoch: ``u_resets``, ``w_projections``.
    """

    name = "umax"
    options = {**_DoubleSumTrainer.options, "delta0": (1.0, _DELTA0)}

    def _kind(self):
        return KIND_UMAX

    def _u_bounds(self):
        return 0.0, self.B_u


class RamanTrainer(_DoubleSumTrainer):
    """SGD on Raman et al.'s double sum (F-8) with the correct gradient (docs/math.md section 6).

    Options: ``variant`` (``"umax"``, default: reset ``ubar_i`` to
    ``log(exp(s_{i,y_i}) + sum_{k in S} exp(s_ik))`` when more than ``delta0`` below it,
    and with ``mu > 0`` project the touched rows onto the ``B_W`` ball and ``ubar`` onto
    ``[log K - B_x B_W, log K + B_x B_W]``, which holds ``ubar*``; ``"vanilla"``: plain
    SGD, ``ubar`` unconstrained), ``delta0``, ``prefetch``, ``hogwild``, ``threads``.
    ``ubar`` is unconstrained in sign (``ubar*_i = log sum_k exp(s_ik)``).
    """

    name = "raman"
    exact_u = "raman"
    options = {**_DoubleSumTrainer.options, "delta0": (1.0, _DELTA0),
               "variant": ("umax", {"one_of": ["umax", "vanilla"]})}

    def _kind(self):
        return KIND_RAMAN_UMAX if self.opts["variant"] == "umax" else KIND_RAMAN_VANILLA

    def _u_bounds(self):
        if self._kind() == KIND_RAMAN_UMAX and self.mu > 0:
            half = self.B_x * self.B_W
            return float(np.log(self.K) - half), float(np.log(self.K) + half)
        return -np.inf, np.inf
