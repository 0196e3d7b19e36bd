"""Full-softmax optimisers: exact minibatch SGD, the exact L-BFGS optimum,
Bouchard's bound (docs/math.md section 8) and the full-batch One-vs-Each bound.

All three work with the per-datapoint objective of docs/math.md section 2 (learning-rate
convention): the mean negative log-likelihood plus the ridge divided by ``N``,

    F(W) = -L(W)/N = (1/N) sum_i [ log sum_k e^{s_ik} - s_{i,y_i} ] + (mu/(2N)) ||W||^2.

``softmax-sgd`` (:class:`SoftmaxSGDTrainer`)
    Plain minibatch SGD on ``F`` with the exact gradient of every datapoint (all
    ``K`` classes: O(K nnz(x_i)) per datapoint, unbiased). One step, with the
    minibatch's gradients all taken at the old ``W``:

        W <- W - lr [ (1/b) sum_{i in batch} (p_i - e_{y_i}) x_i^T + (mu/N) W ].

    Default minibatch ``n = 100``: the biased baselines' size, so that steps per
    epoch and learning rates compare directly. The weights are held feature-major
    (``D x K``, the layout the steps stream through, as PyTorch's embedding-bag
    does): each non-zero of a row adds one contiguous row of ``K`` weights to the
    row's scores, and the update writes, for each distinct feature of the minibatch,
    one contiguous row (its gradient summed over the minibatch first), never a dense
    ``K x D`` pass (:mod:`scalable_softmax.kernels.softmax_sgd`; ``threads`` splits a
    step over the minibatch's rows and the classes with bit-identical results). The
    former class-major kernel (``layout="class"``, which sweeps every class row per
    step, one cache line per class and feature) gives the same weights bit for bit.
    The ridge is applied lazily as one global scale factor ``W = c V`` (every row
    shrinks by the same ``1 - lr mu/N``), so it costs O(1) per step instead of O(KD).

``exact`` (:class:`ExactTrainer`)
    Full-batch L-BFGS on ``F`` (:func:`scalable_softmax.methods.lbfgs.lbfgs`, or
    ``scipy.optimize.minimize(method="L-BFGS-B")`` with ``solver="scipy"``). Each
    :meth:`~ExactTrainer.run_epoch` runs ``iters_per_epoch`` L-BFGS iterations from
    where the last one stopped (with the default solver the curvature pairs are kept
    across epochs, so the iterates are those of one uninterrupted run; L-BFGS-B starts
    afresh from the current ``W``), or, with ``iters_per_epoch=None``, the whole
    optimisation at once (up to ``maxiter``). It stops for good (``finished``; ``fit``
    then ends its epoch loop and its history there) once the largest absolute gradient
    component is ``<= gtol``, an iteration's relative decrease is ``<= ftol``, the line
    search fails or ``maxiter`` is spent. ``F`` with ``mu = 1/C`` is scikit-learn's
    ``LogisticRegression(C=C, fit_intercept=False)`` objective (mean loss plus
    ``||W||^2 / (2 C N)``), and ``gtol``, ``ftol`` are its units: its ``tol`` is
    L-BFGS-B's ``gtol`` and it sets ``ftol = 64 eps``. **With mu = 0 and
    linearly separable data the MLE does not exist** (``F`` decreases towards 0
    as ``||W|| -> infinity``, and so does its gradient): L-BFGS then either runs to
    ``maxiter`` with a growing ``W`` or stops on ``gtol`` at a large ``W`` that
    depends on ``gtol``; neither is an optimum (the report's message says so
    whenever ``mu = 0``). Use ``mu > 0`` for a reference optimum.

``bouchard`` (:class:`BouchardTrainer`)
    Bouchard's bound (T-11, T-12) with one variational ``alpha_i`` per datapoint,

        B(W, alpha) = (1/N) sum_i [ alpha_i + sum_k softplus(s_ik - alpha_i) - s_{i,y_i} ]
                      + (mu/(2N)) ||W||^2  >=  F(W),

    minimised jointly over ``(W, alpha)`` as in the One-vs-Each paper's Table 2.
    ``B`` is jointly convex, and for fixed ``W`` each ``alpha_i`` solves the 1-D
    convex problem ``sum_k sigma(s_ik - alpha_i) = 1`` (a root, found by safeguarded
    Newton on a log form of that equation inside the bracket
    ``[(s_(1)+s_(2))/2, s_(1) + log(K-1)]``, ``s_(1) >= s_(2)`` the two largest
    scores; accurate for any scores). We therefore minimise the *profile*
    ``B~(W) = min_alpha B(W, alpha)`` with L-BFGS over ``W`` alone, solving every
    ``alpha_i`` exactly at each evaluation (warm-started from the last values). By
    Danskin's theorem ``grad B~(W) = d_W B(W, alpha*(W))``, ``B~`` is convex and
    smooth, and its minimisers are exactly the ``W`` parts of the joint minimisers:
    the same optimum as a joint L-BFGS over ``(W, alpha)``, without ``N`` extra
    variables on a different scale from ``W`` (which slows joint quasi-Newton
    methods) and without alternating sweeps. The trainer's ``u`` holds ``alpha``.
    For ``K = 2`` the optimum is ``alpha = (s_1 + s_2)/2`` and, non-parametrically,
    ``f_k = 2 log N_k + c`` (T, Proposition 3).

``ove-exact`` (:class:`OVEExactTrainer`)
    Full-batch L-BFGS on the exact One-vs-Each bound (T-4, T-15; docs/math.md section 7)
    with the same per-datapoint convention,

        O(W) = (1/N) sum_i sum_{k != y_i} softplus(s_ik - s_{i,y_i})
               + (mu/(2N)) ||W||^2  >=  F(W),

    (each factor ``sigma(s_y - s_k)`` of (T-4) is a lower bound's factor, so ``O``
    bounds the mean NLL from above; equality for ``K = 2``). Convex and smooth; the
    non-stochastic "OVE" of the One-vs-Each paper's Table 2, whose doubly
    stochastic version is the ``ove`` method (:mod:`scalable_softmax.methods.sampled`).
    Gradient in the scores: ``sigma(s_ik - s_iy)`` for ``k != y_i`` and minus their
    sum for ``y_i``.

Kernels: :func:`full_objective` evaluates ``F``, ``B~`` or ``O`` and their gradients in
blocks of rows (numba, parallel over the block's rows for the scores and over
slices of the classes for the gradient; deterministic). Memory: the weights are
handled as a ``D x K`` array (a transposed copy), plus the gradient of the same
size, plus ``block x K`` scores (``block`` rows at a time; never ``N x K``), plus
L-BFGS's ``2 * memory`` correction vectors of ``K D`` floats each: about
``(4 + 2 memory) K D`` float64 in all (for ``K D = 10^7`` and ``memory = 10``,
about 2 GB). Use ``exact`` and ``bouchard`` on small and medium problems.
:func:`full_objective_reference` is the plain NumPy version.
"""
from __future__ import annotations

import math

import numba
import numpy as np
import scipy.optimize
import scipy.sparse as sp

from scalable_softmax.kernels import common as kcommon
from scalable_softmax.kernels import softmax_sgd as ksgd
from scalable_softmax.kernels.common import touched_zeros as _touched_zeros
from scalable_softmax.kernels.full import KIND_MODES, full_pass, solve_alpha
from scalable_softmax.kernels.threads import numba_threads
from scalable_softmax.methods.base import THREADS_RULE, EpochReport, StochasticTrainer, Trainer
from scalable_softmax.methods.lbfgs import lbfgs
from scalable_softmax.validation import kernel_array, kernel_csr

__all__ = [
    "SoftmaxSGDTrainer", "ExactTrainer", "BouchardTrainer", "OVEExactTrainer",
    "reference_step", "full_objective", "full_objective_reference",
    "bouchard_alpha", "exact_solution",
]


def _csr_arrays(X):
    X = X if (sp.issparse(X) and X.format == "csr") else sp.csr_matrix(X)
    # one type per array, so one compile per kernel (validation.kernel_csr)
    return (X, *kernel_csr(X, np.int64))


#: the rule of an option that is a positive integer or None
_POS_INT_OR_NONE = {"type": "int", "min": 1, "nullable": True}
#: the rule of an option that is a non-negative finite number
_NONNEG = {"type": "number", "min": 0, "finite": True}


# ---------------------------------------------------------------------------
# softmax-sgd: exact full-softmax minibatch SGD
# ---------------------------------------------------------------------------


def reference_step(X, y, W, rows, lr, mu=0.0):
    """One exact-softmax minibatch step (``"softmax-sgd"``) in plain NumPy: the reference
    of its kernel (every method module names its NumPy step ``reference_step``; see
    :mod:`scalable_softmax.methods`). The full-batch methods of this module are checked
    against :func:`full_objective_reference` instead.

    ``W - lr [ (1/b) sum_{i in rows} (p_i - e_{y_i}) x_i^T + (mu/N) W ]``

    Parameters
    ----------
    X : csr_matrix (N, D); y : int array (N,); W : ndarray (K, D), not modified
    rows : the minibatch's datapoint indices; lr : learning rate; mu : ridge

    Returns
    -------
    ndarray (K, D)
    """
    N = X.shape[0]
    Xb = np.asarray(X[rows].toarray())
    S = Xb @ W.T
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    P[np.arange(len(rows)), np.asarray(y)[rows]] -= 1.0
    G = P.T @ Xb / len(rows) + (mu / N) * W
    return W - lr * G


class SoftmaxSGDTrainer(StochasticTrainer):
    """Exact full-softmax minibatch SGD (unbiased; O(K) per datapoint).

    See the module docstring for the step. ``n_sampled`` is not used.

    The weights: ``W`` is ``K x D`` as for every method, but with the default
    ``layout="feature"`` the trainer holds ``V^T`` (``D x K``, C-contiguous: the layout
    its steps stream through) and ``self.W`` is its transposed *view*
    (Fortran-ordered; writing into it writes the weights; assigning an array to
    ``self.W`` copies it in unless it is such a view already). :meth:`weights` returns
    a C-contiguous ``K x D`` array (a copy in this layout).

    Options
    -------
    threads : int, default 1
        numba threads of each step: the scores and the softmax split over the
        minibatch's rows, the update over slices of the classes (that many slices, run
        on at most numba's pool). Every value is computed by one thread in a fixed
        order, so the weights are bit-identical for every number of threads. The
        deprecated ``parallel=True`` means ``threads=numba.get_num_threads()`` (when
        the options are resolved); not with ``threads``.
    layout : ``"feature"`` (default), ``"class"`` or ``"class-rowwise"``
        ``"feature"``: the kernel of :mod:`scalable_softmax.kernels.softmax_sgd` on
        ``V^T``; ``"class"``: the former kernel on ``V`` (``K x D``), whose steps sweep
        every class row (one cache line per class and feature: 10-40x slower when
        ``K`` and ``D`` are large), each minibatch regrouped by feature: weights
        bit-identical to ``"feature"``; ``"class-rowwise"``: the class-major kernel's
        straightforward loop, one sparse dot product and update per (class,
        datapoint), equal to the others to rounding. The deprecated
        ``transposed=False`` means ``"class-rowwise"``.
    """

    name = "softmax-sgd"
    has_u = False
    minibatch = True
    parallel_kernel = True
    default_batch_size = 100
    default_n_sampled = 1
    deprecated_options = ("parallel", "transposed")
    # threads: slices of each step, any number (the kernel runs them on at most numba's
    # pool; the result does not depend on it)
    options = {**StochasticTrainer.options,
               "threads": (1, {"type": "int", "min": 1, "label": "option 'threads'"}),
               "layout": ("feature", {"one_of": ["feature", "class", "class-rowwise"]})}

    @classmethod
    def max_n_sampled(cls, K, options):
        """None: ``n_sampled`` is not used (every class enters each step)."""
        return None

    def __init__(self, X, y, K, *, mu=0.0, batch_size=None, n_sampled=None, **options):
        self._layout = None
        self._store = None
        super().__init__(X, y, K, mu=mu, batch_size=batch_size, n_sampled=n_sampled, **options)
        #: ``"feature"`` (``V^T`` stored) or ``"class"`` (``V`` stored)
        self._layout = "feature" if self.opts["layout"] == "feature" else "class"
        #: the class-major kernel regroups each minibatch by feature
        self._transposed = self.opts["layout"] != "class-rowwise"
        self.X, self._indptr, self._indices, self._data = _csr_arrays(X)
        # the feature-major kernel sums each row's features in the order of its
        # entries: sorted (stably) by feature, the class-major kernel's order
        self._fm_indices, self._fm_data = _rows_sorted(self._indptr, self._indices,
                                                       self._data)
        self._y = kernel_array(y, np.int64)
        self.cs = np.ones(1)

    @property
    def W(self):
        """The ``K x D`` weights ``V`` (lazy scale not folded in): the array itself
        with ``layout="class"``, the transposed view of ``V^T`` with
        ``layout="feature"``; None before :meth:`init_params`."""
        if self._store is None or self._layout == "class":
            return self._store
        return self._store.T

    @W.setter
    def W(self, value):
        if value is None or self._layout in (None, "class"):
            self._store = value
        else:
            self._store = np.ascontiguousarray(np.asarray(value, dtype=np.float64).T)

    def init_params(self, u_init: str = "zero") -> None:
        """``W = 0`` (every page written), scale 1; no ``u``."""
        if self._layout == "class":
            self._store = _touched_zeros(self.K, self.D)
        else:
            self._store = _touched_zeros(self.D, self.K)
        self.cs = np.ones(1)
        self.u = None

    def set_params(self, W0) -> None:
        """Start from the weights ``W0`` (``K x D``; a warm start after
        :meth:`init_params`)."""
        if self._store is None:
            self.init_params()
        self.W[...] = W0
        self.cs[0] = 1.0

    def run_epoch(self, order, lr, seed):
        """One epoch of minibatch steps over ``order`` (``seed`` unused: no sampling)."""
        if self._store is None:
            self.init_params()
        order = np.ascontiguousarray(order, dtype=np.int64)
        nthr = self.opts["threads"]
        with numba_threads(nthr):
            if self._layout == "class":
                # one slice of the classes per thread (the slicing does not change the
                # result)
                steps, div = ksgd.class_major_epoch(
                    self._indptr, self._indices, self._data, self._y, order, self._store,
                    self.cs, self.batch_size, float(lr), self.mu / self.N, nthr,
                    self._transposed)
            else:
                steps, div = ksgd.softmax_sgd_epoch(
                    self._indptr, self._fm_indices, self._fm_data, self._y, order,
                    self._store, self.cs, self.batch_size, float(lr), self.mu / self.N,
                    nthr)
        return EpochReport(steps=int(steps), diverged_at=int(div))

    def warmup(self):
        """Compile (or load) the kernel: an epoch over no datapoints (changes nothing)."""
        if self._store is None:
            self.init_params()
        self.run_epoch(np.zeros(0, dtype=np.int64), 0.0, 0)

    def weights(self):
        """``c V`` as a C-contiguous ``K x D`` array (``layout="class"``: ``V`` itself
        when the lazy scale ``c`` is 1, i.e. ``mu = 0``; else a copy)."""
        c = self.cs[0]
        if self._layout == "class":
            return self.W if c == 1.0 else self.W * c
        out = np.empty((self.K, self.D))
        with numba_threads(self.opts["threads"]):
            kcommon.transpose_scaled(self._store, float(c), out)
        return out

    def native_weights(self):
        """``(c V, layout)`` in the stored layout: ``layout="feature"`` gives ``D x K``
        (``V^T`` itself when ``c`` is 1, i.e. ``mu = 0``; else a scaled copy, one
        streaming pass instead of :meth:`weights`' transpose)."""
        c = self.cs[0]
        if self._layout == "class":
            return self.weights(), "class"
        return (self._store if c == 1.0 else self._store * c), "feature"


def _rows_sorted(indptr, indices, data):
    """``(indices, data)`` with each row's entries sorted by feature, stably (the given
    arrays themselves when they already are)."""
    if indices.size < 2:
        return indices, data
    down = np.flatnonzero(np.diff(indices) < 0) + 1  # entries below their predecessor
    if np.isin(down, indptr).all():                   # ... only at the start of a row
        return indices, data
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
    perm = np.lexsort((indices, rows))
    return np.ascontiguousarray(indices[perm]), np.ascontiguousarray(data[perm])


# ---------------------------------------------------------------------------
# full-batch objective: softmax NLL or Bouchard's profile bound, in blocks
# ---------------------------------------------------------------------------


def _default_block(K):
    return int(max(1, min(4096, (1 << 21) // max(K, 1))))


def full_objective(X, y, W, mu=0.0, kind="softmax", alpha=None, block=None, max_iter=100):
    """``F(W)`` (``kind="softmax"``), Bouchard's profile bound ``B~(W)``
    (``kind="bouchard"``) or the One-vs-Each bound ``O(W)`` (``kind="ove"``) and the
    gradient, with the numba kernel (module docstring).

    Parameters
    ----------
    X : csr_matrix (N, D); y : int array (N,); W : ndarray (K, D)
    mu : ridge (the objective carries ``mu/(2N) ||W||^2``)
    kind : ``"softmax"``, ``"bouchard"`` or ``"ove"``
    alpha : ndarray (N,), Bouchard only: start values, overwritten with the optimal
        ``alpha`` (a new array starting at ``log(K-1)`` if None)
    block : rows per block (default: about 2^21 / K)
    max_iter : Newton iterations per ``alpha`` (Bouchard)

    Returns
    -------
    value : float; grad : ndarray (K, D); alpha : ndarray (N,) or None
    """
    if kind not in KIND_MODES:
        raise ValueError(f"kind must be 'softmax', 'bouchard' or 'ove'; got {kind!r}")
    X, indptr, indices, data = _csr_arrays(X)
    N = X.shape[0]
    W = np.asarray(W, dtype=np.float64)
    K = W.shape[0]
    y = np.ascontiguousarray(y, dtype=np.int64)
    WT = np.ascontiguousarray(W.T)
    GT = np.empty_like(WT)
    mode = KIND_MODES[kind]
    if mode == 1 and alpha is None:
        alpha = np.full(N, math.log(K - 1.0))
    a = alpha if alpha is not None else np.zeros(1)
    block = block or _default_block(K)
    total, _ = full_pass(indptr, indices, data, y, WT, GT, mode, a, block,
                         max(1, numba.get_num_threads()), max_iter)
    val = total / N + 0.5 * mu / N * float(np.sum(W * W))
    G = GT.T / N + (mu / N) * W
    return val, np.ascontiguousarray(G), alpha


def full_objective_reference(X, y, W, mu=0.0, kind="softmax", alpha=None):
    """Plain NumPy ``F(W)``, ``B(W, alpha)`` or ``O(W)`` and gradient in ``W`` (dense
    ``N x K``).

    ``kind="ove"`` uses :func:`scalable_softmax.objectives.ove_objective` and
    :func:`~scalable_softmax.objectives.ove_objective_grad` (``alpha`` is ignored).

    For ``kind="bouchard"`` and ``alpha=None`` the optimal ``alpha`` is found by
    :func:`scalable_softmax.objectives.bouchard_optimal_alpha` (bisection).

    Returns
    -------
    value : float; grad : ndarray (K, D); alpha : ndarray (N,) or None
    """
    from scalable_softmax import objectives as ob
    N = X.shape[0]
    W = np.asarray(W, dtype=np.float64)
    if kind not in KIND_MODES:
        raise ValueError(f"kind must be 'softmax', 'bouchard' or 'ove'; got {kind!r}")
    if kind == "softmax":
        val = -ob.ridge_log_likelihood(X, y, W, mu) / N
        G = -ob.ridge_log_likelihood_grad(X, y, W, mu) / N
        return val, G, None
    if kind == "ove":
        val = ob.ove_objective(X, y, W) + 0.5 * mu / N * float(np.sum(W * W))
        G = ob.ove_objective_grad(X, y, W) + (mu / N) * W
        return val, G, None
    if alpha is None:
        alpha = ob.bouchard_optimal_alpha(X, W)
    val = ob.bouchard_bound(X, y, W, alpha) + 0.5 * mu / N * float(np.sum(W * W))
    dW, _ = ob.bouchard_grad(X, y, W, alpha)
    return val, dW + (mu / N) * W, alpha


def bouchard_alpha(scores, alpha0=None, max_iter=100):
    """The optimal Bouchard ``alpha`` of each row of a score matrix (the numba
    Newton solver of the kernels). ``scores``: ndarray (n, K); returns ndarray (n,)."""
    S = np.ascontiguousarray(scores, dtype=np.float64)
    out = np.empty(S.shape[0])
    for i in range(S.shape[0]):
        a0 = np.nan if alpha0 is None else float(alpha0[i])
        out[i] = solve_alpha(S[i], a0, max_iter)[0]
    return out


# ---------------------------------------------------------------------------
# L-BFGS trainers
# ---------------------------------------------------------------------------

class _LBFGSTrainer(Trainer):
    """Full-batch L-BFGS on ``F`` (softmax), ``B~`` (Bouchard) or ``O`` (One-vs-Each).

    Options
    -------
    iters_per_epoch : int or None, default 50
        L-BFGS iterations per :meth:`run_epoch` (warm start from the current ``W``);
        None: the whole optimisation in the first call (up to ``maxiter``).
    maxiter : int or None, default None
        total L-BFGS iterations over all epochs (None: no limit with
        ``iters_per_epoch``, 15,000 without).
    gtol : float, default 1e-8
        stop when the largest absolute gradient component is ``<= gtol`` (the units of
        scikit-learn's ``tol``: its L-BFGS-B ``gtol`` on the same per-datapoint
        objective).
    ftol : float, default 0.0
        stop when an iteration's relative decrease ``(f_k - f_{k+1}) /
        max(|f_k|, |f_{k+1}|, 1)`` is ``<= ftol`` (L-BFGS-B's test; scikit-learn uses
        ``64 * np.finfo(float).eps``; 0: off, only ``gtol``, the iteration limits or a
        line-search failure at machine precision stop it).
    memory : int, default 10
        L-BFGS correction pairs.
    block : int or None
        rows per block of the objective kernel (default about 2^21 / K).
    threads : int or None, default None
        numba threads of the objective kernel (identical results for any number);
        None: numba's thread count when an evaluation is big enough to pay for the
        threads' synchronisation (``nnz(X) * K >= 2e6``), else 1. The deprecated
        ``parallel=True`` means ``threads=numba.get_num_threads()``, ``parallel=False``
        ``threads=1``.
    solver : ``"lbfgs"`` (default) or ``"scipy"``
        ``"lbfgs"``: the plain L-BFGS of :mod:`scalable_softmax.methods.lbfgs` (same
        algorithm as L-BFGS-B without bounds, same stopping tests; less time of its
        own per iteration when ``K D`` is large, ``benchmarks/bench_lbfgs.py``; its
        state, curvature pairs included, carries over from epoch to epoch);
        ``"scipy"``: ``scipy.optimize.minimize(method="L-BFGS-B")``, restarted at every
        epoch.
    trace : bool, default False
        record ``(iteration, objective)`` after every L-BFGS iteration in
        :attr:`trace` (a list, iterations counted over all epochs; iteration 0 is the
        start of the first epoch).
    callback : callable or None
        called as ``callback(iteration, W)`` after every L-BFGS iteration, ``W`` the
        ``K x D`` iterate as a view of the optimiser's vector (read it, do not keep or
        change it).

    ``order``, ``lr`` and ``seed`` of :meth:`run_epoch` are not used.
    """

    has_u = False
    full_batch = True
    reference = "full_objective_reference"
    default_batch_size = 1
    default_n_sampled = 1
    _kind = "softmax"
    deprecated_options = ("parallel",)

    options = {
        "iters_per_epoch": (50, _POS_INT_OR_NONE),
        "maxiter": (None, _POS_INT_OR_NONE),
        "gtol": (1e-8, _NONNEG),
        "ftol": (0.0, _NONNEG),
        "memory": (10, {"type": "int", "min": 1}),
        "block": (None, _POS_INT_OR_NONE),
        "threads": (None, dict(THREADS_RULE, nullable=True)),
        "solver": ("lbfgs", {"one_of": ["scipy", "lbfgs"]}),
        "trace": (False, {"type": "bool"}),
        "callback": (None, {"type": "callable", "nullable": True}),
    }

    @classmethod
    def max_n_sampled(cls, K, options):
        """None: ``n_sampled`` is not used (every class enters the objective)."""
        return None

    def __init__(self, X, y, K, *, mu=0.0, batch_size=None, n_sampled=None, **options):
        super().__init__(X, y, K, mu=mu, batch_size=batch_size, n_sampled=n_sampled, **options)
        self.X, self._indptr, self._indices, self._data = _csr_arrays(X)
        self._y = kernel_array(y, np.int64)
        self._block = self.opts["block"] or _default_block(self.K)
        #: threads of the objective kernel (option ``threads``; None: by size)
        self._threads = self.opts["threads"]
        if self._threads is None:
            big = self.X.nnz * self.K >= 2e6
            self._threads = int(numba.get_num_threads()) if big else 1
        self.total_iters = 0
        self.converged = False
        self._state: dict = {}
        self._fx = None
        #: the objective at the first point evaluated (fit's "no progress" check)
        self.start_fun = None
        self.nfev = 0
        self.alpha_iters = 0
        self.history: list[dict] = []
        self.trace: list[tuple[int, float]] = []

    # the objective on the flattened D x K layout
    def _fun(self, x):
        WT = x.reshape(self.D, self.K)
        GT = np.empty_like(WT)
        mode = KIND_MODES[self._kind]
        a = self.u if mode == 1 else np.zeros(1)
        with numba_threads(self._threads):
            total, it = full_pass(self._indptr, self._indices, self._data, self._y, WT, GT,
                                  mode, a, self._block, self._threads, 200)
        self.nfev += 1
        self.alpha_iters += it
        self._fx = x.copy()          # where u (alpha) was last solved
        N, mu = self.N, self.mu
        val = total / N + 0.5 * mu / N * float(x @ x)
        if self.start_fun is None:
            self.start_fun = float(val)      # the objective where the run started
        g = GT.ravel()
        g /= N
        if mu:
            g += (mu / N) * x
        return val, g

    def init_params(self, u_init: str = "zero") -> None:
        """``W = 0``; Bouchard: ``alpha = 0`` (``"zero"``) or ``log K`` (``"logK"``);
        ``alpha`` is re-solved exactly at every evaluation, so this is only a start."""
        self.W = _touched_zeros(self.K, self.D)
        if self.has_u:
            if u_init not in ("zero", "logK"):
                raise ValueError(f"u_init must be 'zero' or 'logK'; got {u_init!r}")
            self.u = np.full(self.N, 0.0 if u_init == "zero" else math.log(self.K))
        else:
            self.u = None
        self.total_iters = 0
        self.converged = False
        self.finished = False
        self._state = {}
        self.trace = []

    def run_epoch(self, order=None, lr=None, seed=None):
        """Run L-BFGS iterations from the current ``W`` (see the options)."""
        if self.W is None:
            self.init_params()
        o = self.opts
        budget = o["iters_per_epoch"]
        if o["maxiter"] is not None:
            left = o["maxiter"] - self.total_iters
            budget = left if budget is None else min(budget, left)
        elif budget is None:
            budget = 15000
        self.nfev = 0
        self.alpha_iters = 0
        x0 = np.ascontiguousarray(self.W.T).ravel()
        if self.finished or budget <= 0:
            # nothing left to do (fit stops its epoch loop before this): the last
            # epoch's numbers, without evaluating again when W has not changed
            last = self._state
            if "x" in last and np.array_equal(last["x"], x0):
                val, g = last["f"], last["g"]
            else:
                val, g = self._fun(x0)
            self.finished = True
            return EpochReport(steps=0, extra=self._extra(val, g, 0, "nothing to do: "
                               + ("converged" if self.converged else "stopped")))
        start = self.total_iters
        if o["trace"] and not self.trace:
            self.trace.append((start, float(self._fun(x0)[0])))
        if o["solver"] == "lbfgs":
            def record(nit, x, f, g):
                if o["trace"]:
                    self.trace.append((start + nit, float(f)))
                if o["callback"] is not None:
                    o["callback"](start + nit, x.reshape(self.D, self.K).T)

            res = lbfgs(self._fun, x0, gtol=o["gtol"], maxiter=int(budget),
                        memory=o["memory"], maxfun=max(20 * int(budget), 100),
                        callback=record if (o["trace"] or o["callback"]) else None,
                        ftol=o["ftol"], state=self._state)
        else:
            done = [start]

            def record_scipy(intermediate_result):
                done[0] += 1
                if o["trace"]:
                    self.trace.append((done[0], float(intermediate_result.fun)))
                if o["callback"] is not None:
                    o["callback"](done[0], intermediate_result.x.reshape(self.D, self.K).T)

            res = scipy.optimize.minimize(
                self._fun, x0, jac=True, method="L-BFGS-B",
                callback=record_scipy if (o["trace"] or o["callback"]) else None,
                options=dict(maxiter=int(budget), gtol=o["gtol"], ftol=o["ftol"],
                             maxcor=o["memory"], maxfun=max(20 * int(budget), 100)))
        if o["solver"] == "lbfgs" and np.array_equal(self._fx, res.x):
            val, g = res.fun, res.jac   # the last evaluation was at res.x (u belongs to it)
        else:
            # re-evaluate at the returned point: u (alpha) must belong to this W
            val, g = self._fun(res.x)
        self.W[:] = res.x.reshape(self.D, self.K).T
        self.total_iters += int(res.nit)
        ginf = float(np.max(np.abs(g))) if g.size else 0.0
        self.converged = ginf <= o["gtol"]
        msg = str(res.message)
        # finished for good: converged (either test), or the solver stopped before the
        # epoch's budget for another reason (line search, evaluations), or maxiter spent
        self.finished = (self.converged or msg.startswith("converged")
                         or int(res.nit) < int(budget)
                         or (o["maxiter"] is not None and self.total_iters >= o["maxiter"]))
        if o["solver"] == "scipy":
            self.finished = self.finished or bool(res.success)
        if self.finished:
            self._state = {"x": res.x, "f": float(val), "g": g}
        if self.mu == 0.0:
            msg += (" (mu = 0: on linearly separable data the optimum does not exist and the"
                    " gradient only vanishes as ||W|| grows)")
        div = -1 if (np.isfinite(val) and np.all(np.isfinite(res.x))) else max(int(res.nit) - 1, 0)
        rep = EpochReport(steps=int(res.nit), diverged_at=div,
                          extra=self._extra(val, g, int(res.nit), msg))
        self.history.append(rep.extra)
        return rep

    def stalled(self):
        """None, or a sentence when L-BFGS stopped for good on a failure (its line
        search found no step, it ran out of evaluations) before converging: not on
        convergence, and not on its iteration budget (``maxiter``)."""
        if not self.finished or self.converged or not self.history:
            return None
        last = self.history[-1]
        msg = str(last.get("message", ""))
        head = msg.upper()
        if head.startswith(("CONVERGE", "NOTHING TO DO")) or "NUMBER OF ITERATIONS" in head \
                or "ITERATIONS REACHED" in head:
            return None
        change = ""
        if self.start_fun is not None and math.isfinite(self.start_fun):
            change = f"; the objective went from {self.start_fun:.6g} to {last['fun']:.6g}"
        return (f"stopped without converging after {self.total_iters} L-BFGS "
                f"iteration(s): {msg.split(' (mu = 0')[0]} (max |gradient| "
                f"{last['grad_inf']:.3g}, gtol {self.opts['gtol']!r}){change}")

    def _extra(self, val, g, nit, msg):
        return {"fun": float(val), "grad_inf": float(np.max(np.abs(g))) if g.size else 0.0,
                "grad_norm": float(np.linalg.norm(g)), "nit": nit, "nfev": self.nfev,
                "total_iters": self.total_iters, "converged": bool(self.converged),
                "message": msg, "alpha_newton_iters": int(self.alpha_iters)}

    def warmup(self):
        """Compile (or load) the objective kernel on an empty problem of the same types
        (changes nothing)."""
        e = np.zeros(0, dtype=np.int64)
        full_pass(np.zeros(1, dtype=np.int64), e, np.zeros(0), e, np.zeros((1, 2)),
                  np.zeros((1, 2)), 0, np.zeros(1), 1, 1, 1)

    def objective(self):
        """The current value of the minimised objective (``F``, ``B~`` or ``O``)."""
        return self._fun(np.ascontiguousarray(self.W.T).ravel())[0]

    def objective_at(self, x):
        """The value and gradient of the minimised objective at the flat parameter vector
        ``x`` (``W^T`` raveled): what each L-BFGS iteration evaluates.

        Returns
        -------
        value : float
        gradient : ndarray, the shape of ``x``
        """
        return self._fun(x)


class ExactTrainer(_LBFGSTrainer):
    """The exact ridge-softmax optimum by full-batch L-BFGS (module docstring)."""

    name = "exact"
    _kind = "softmax"


class BouchardTrainer(_LBFGSTrainer):
    """Bouchard's bound with one ``alpha_i`` per datapoint (``u`` holds ``alpha``);
    L-BFGS on ``W`` with every ``alpha_i`` solved exactly (module docstring)."""

    name = "bouchard"
    has_u = True
    _kind = "bouchard"


class OVEExactTrainer(_LBFGSTrainer):
    """The full-batch One-vs-Each bound ``O(W)`` (T-4, T-15) minimised by L-BFGS
    (module docstring); no variational parameters, so no ``u``."""

    name = "ove-exact"
    _kind = "ove"


def exact_solution(X, y, K, mu=0.0, gtol=1e-8, maxiter=15000, **options):
    """Convenience: run :class:`ExactTrainer` to convergence.

    Returns
    -------
    W : ndarray (K, D); info : dict (``fun``, ``grad_inf``, ``nit``, ``converged``, ...)
    """
    tr = ExactTrainer(X, y, K, mu=mu, iters_per_epoch=None, maxiter=maxiter, gtol=gtol,
                      **options)
    tr.init_params()
    rep = tr.run_epoch()
    return tr.W.copy(), rep.extra
