"""Implicit SGD with one datapoint and one sampled class (docs/math.md section 4;
Fagan & Iyengar 2018, Appendix F.1 and Propositions 2 and 4).

The step
--------
For datapoint ``i`` (label ``y``) and class ``k != y``, with ``f̂ = f_ik / N`` (the
per-datapoint learning-rate units of docs/math.md section 2), the implicit step is

    θ⁺ = argmin_θ  2η f̂(θ) + ||θ - θ̃||²,   θ = (w_k, w_y, u_i),
    f̂ = u + e^{-u} + (K-1) exp(x·(w_k - w_y) - u) + (μ/2N)(β_y ||w_y||² + β_k ||w_k||²).

Write ``A_j = 1 + ημβ_j/N``, ``H = 1/A_k + 1/A_y``, ``s = ||x||²`` and ``x̂ = x/√s``.
Derivation: ``w_j`` enters the objective as ``ηρ_j||w_j||² + ||w_j - w̃_j||²``
(``ρ_j = μβ_j/N``) plus, through ``δ``, its component ``p_j = x̂·w_j``. So the part
orthogonal to ``x`` is ``w̃_j⊥ / A_j``. For the parallel parts, minimise
``A_k p_k² - 2p̃_k p_k + A_y p_y² - 2p̃_y p_y`` subject to ``√s (p_k - p_y) = δ``: with a
multiplier, ``p_k = (p̃_k - a/(√s H))/A_k``, ``p_y = (p̃_y + a/(√s H))/A_y`` and the
minimum is ``a²/(sH)`` plus a constant, where ``δ = δ₀ - a``. Hence

    w_k⁺ = (w̃_k - a x / (sH)) / A_k,     w_y⁺ = (w̃_y + a x / (sH)) / A_y,

with ``δ₀ = x·(w̃_k/A_k - w̃_y/A_y)``, and ``(a, u)`` minimise

    2η (u + e^{-u} + (K-1) e^{δ₀ - a - u}) + (u - ũ)² + a² / (2 s'),   s' = s H / 2.

This is exactly the ``μ = 0`` problem of docs/math.md section 4 (where ``A = 1``, ``H = 2``,
``s' = s``) with ``δ̃ → δ₀`` and ``||x||² → s'``. For fixed ``u`` the optimal ``a`` is
``a(u) = W0(exp(δ₀ - u + log(2η(K-1)s')))`` (log-domain Lambert W), and ``u`` is the
root of the increasing, concave function

    g(u) = 2η (1 - e^{-u}) + 2 (u - ũ) - a(u) / s'.

The root is bracketed as in Appendix F.1 (``[ũ, log(1 + (K-1)e^{δ₀})]`` when
``g(ũ) < 0``, else ``[max(0, log(K-1) + δ₀ - 2ηs'), ũ]``, both widened by a few
rounding units) and found by Halley's method from ``ũ`` with a bisection fallback
whenever a step leaves the bracket or fails to halve it; it stops when the predicted
error of the last step (from ``g''`` and ``g'''``) is below the tolerance, and then
updates ``a`` by its Taylor expansion in ``u`` when that step is small (so a typical
step costs two evaluations of ``g``, each one exponential and one Lambert W, the
latter a polynomial start and one logarithm). The constraint ``u >= 0``
is handled exactly (``u = 0``, ``a = a(0)`` when ``g(0) >= 0``); note that for
``ũ >= 0``, ``g(0) = -2ũ - a(0)/s' < 0``, so it can only bind when ``a(0)`` underflows.

The step size in ``W`` is ``a / (s H) ||x|| / A``, linear in ``δ₀ - ũ``
(Proposition 2): the step never overflows, at any learning rate.

Ridge is applied lazily: ``W[j] = scale[j] * V[j]``; a step multiplies ``scale[k]``
and ``scale[y]`` by ``1/A`` and touches ``V`` only at the non-zeros of ``x``.

The authors' code's conventions
-------------------------------
By default (``sample_from="others"``, ``passes=1``) the class ``k`` is uniform on the
``K - 1`` classes other than ``y_i`` and an epoch is one pass over the datapoint order.
The authors' experiment code differs in two ways, both available as options of
:class:`ImplicitTrainer`:

* ``sample_from="all"``: ``k`` is uniform on all ``K`` classes. When ``k = y_i`` their
  step computes ``δ̃ = x·(w_k - w_y) = 0``, solves the scalar problem for ``u`` and
  applies two updates of ``W`` that cancel. Here such a step is a *u-only step*:
  ``u_i`` becomes the root of ``g`` with ``δ₀ = 0`` and ``s' = ||x||²`` (no ridge
  factors, also when ``μ > 0``), and ``W`` (and the lazy ridge scales) are left
  exactly unchanged. The epoch report counts them in ``extra["u_only_steps"]``.
* ``passes=P``: one "epoch" runs the datapoint order ``P`` times in sequence at the
  same learning rate (the authors used ``P = 3``: ``3N`` steps per epoch at the
  epoch's constant rate). Pass ``p`` draws its classes from the seed
  :func:`pass_seeds` ``(seed, P)[p]`` (pass 0 uses ``seed`` itself, so ``P = 1`` is
  today's epoch).

:func:`implicit_epoch_reference` (plain NumPy, classes given explicitly) and
:func:`draw_classes` (the kernels' class draws replayed) test both.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from scalable_softmax.kernels.common import touched_zeros
from scalable_softmax.kernels.implicit import (
    apply_step,
    draw_classes_epoch,
    epoch_fast,
    epoch_simple,
    row_sqnorms,
)
from scalable_softmax.methods.base import EpochReport, StochasticTrainer
from scalable_softmax.objectives import touch_weights
from scalable_softmax.validation import kernel_array, kernel_csr

__all__ = ["ImplicitTrainer", "implicit_step", "reference_step",
           "solve_reduced_reference",
           "class_touch_weights", "implicit_epoch_reference", "draw_classes",
           "pass_seeds", "SAMPLE_FROM"]

def check_row_norms(sqnorm, method):
    """Raise ``ValueError`` naming the first row whose squared norm ``||x_i||^2``
    (``sqnorm``) is not finite: the implicit step divides by it, and an overflowing
    norm (entries beyond about 1e154, or an ``intercept_scaling`` that large) would
    make every step a silent no-op."""
    bad = np.flatnonzero(~np.isfinite(sqnorm))
    if bad.size:
        raise ValueError(
            f"row {int(bad[0])} of X (and {bad.size - 1} other row(s)) has a squared norm "
            f"||x||^2 beyond the float64 range, which method {method!r} needs for its "
            "implicit step; scale the features down (e.g. MaxAbsScaler), or use a "
            "smaller intercept_scaling")


#: default accuracy of the root ``u``: ``|u - u*| <= tol * max(1, |u*|)``
DEFAULT_TOL = 1e-10
#: accepted values of the ``sample_from`` option (the class ``k`` of a step is uniform
#: on the classes other than ``y_i``, or on all ``K`` classes as in the authors' code)
SAMPLE_FROM = ("others", "all")


# --------------------------------------------------------------------------------------
# Plain NumPy / Python reference (readable, independent root finder: bisection)
# --------------------------------------------------------------------------------------

def _lambertw_exp_reference(z: float) -> float:
    """W0(e^z) in plain Python: ``x`` domain through scipy for moderate ``z``,
    Newton on ``w + log w = z`` beyond."""
    from scipy.special import lambertw
    if z < 300.0:
        return float(lambertw(math.exp(z)).real)
    w = z - math.log(z)
    for _ in range(100):
        w_new = w - (w + math.log(w) - z) / (1.0 + 1.0 / w)
        if w_new == w:
            break
        w = w_new
    return w


def solve_reduced_reference(dt: float, ut: float, eta: float, K: int, s: float):
    """Reference solution of the reduced problem (``u``, ``a``) by the paper's method:
    bisection on ``g`` inside the bracket of Appendix F.1, run to full precision.

    Same arguments as :func:`scalable_softmax.kernels.implicit.solve_reduced` (with
    ``K``, not ``K - 1``).
    """
    alpha = 2.0 * eta
    km1 = K - 1.0

    def a_of(u):
        if s == 0.0:
            return 0.0
        return _lambertw_exp_reference(dt - u + math.log(alpha * km1 * s))

    def g(u):
        term = a_of(u) / s if s > 0 else alpha * km1 * math.exp(dt - u)
        return alpha * (-math.expm1(-u)) + 2.0 * (u - ut) - term

    if g(0.0) >= 0.0:
        return 0.0, a_of(0.0)  # g is increasing: the constraint u >= 0 binds
    g_ut = g(ut)
    if g_ut == 0.0:
        return ut, a_of(ut)
    if g_ut < 0.0:
        ut_ = max(ut, 0.0)
        lo, hi = ut_, math.log1p(km1 * math.exp(dt)) if dt < 700 else dt + math.log(km1)
        width = max(hi - lo, 1.0)
        while g(hi) <= 0.0:  # widen if rounding broke the bracket
            hi += width
            width *= 2.0
    else:
        lo, hi = max(0.0, math.log(km1) + dt - alpha * s), ut
        width = max(hi - lo, 1.0)
        while lo > 0.0 and g(lo) > 0.0:
            lo = max(0.0, lo - width)
            width *= 2.0
    while True:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi or hi - lo <= 1e-17 * max(1.0, abs(mid)):
            break
        if g(mid) < 0.0:
            lo = mid
        else:
            hi = mid
    u = 0.5 * (lo + hi)
    return u, a_of(u)


def reference_step(x_idx, x_val, w_k, w_y, u, eta, K, *, mu=0.0, beta_k=1.0, beta_y=1.0,
                   N=1):
    """One implicit step in plain NumPy: the reference of the kernel (every method
    module names its NumPy step ``reference_step``; see :mod:`scalable_softmax.methods`).

    Parameters
    ----------
    x_idx, x_val : ndarray
        Non-zeros of ``x_i`` (indices into ``0..D-1`` and values).
    w_k, w_y : ndarray, shape (D,)
        Current rows of the sampled class and of the label (not modified).
    u : float
        Current ``u_i``.
    eta : float
        Learning rate (per-datapoint units, docs/math.md section 2).
    K : int
        Number of classes.
    mu, beta_k, beta_y, N : float
        Ridge ``μ``, the classes' ``β_j`` and the number of datapoints ``N``.

    Returns
    -------
    (w_k_new, w_y_new, u_new) : new arrays and float.
    """
    x = np.zeros(w_k.shape[0])
    x[np.asarray(x_idx)] = np.asarray(x_val, dtype=float)
    A_k = 1.0 + eta * mu * beta_k / N
    A_y = 1.0 + eta * mu * beta_y / N
    H = 1.0 / A_k + 1.0 / A_y
    s = float(x @ x)
    delta0 = float(x @ (w_k / A_k - w_y / A_y))
    u_new, a = solve_reduced_reference(delta0, u, eta, K, s * H / 2.0)
    c = a / (s * H) if s > 0 else 0.0
    return (w_k - c * x) / A_k, (w_y + c * x) / A_y, u_new


def implicit_epoch_reference(X, y, W, u, order, lr, K, classes, passes=1, *, mu=0.0,
                             beta=None):
    """Plain NumPy reference of :meth:`ImplicitTrainer.run_epoch` with the classes
    drawn given explicitly (see :func:`draw_classes`).

    Parameters
    ----------
    X : sparse matrix or ndarray, shape (N, D)
    y : ndarray of int, shape (N,)
    W : ndarray, shape (K, D); u : ndarray, shape (N,)
        Start values (not modified).
    order : ndarray of int
        The datapoint order of one pass.
    lr : float
        Learning rate ``η`` (per-datapoint units), the same for every pass.
    K : int
    classes : ndarray of int, shape (passes * len(order),)
        The class drawn at each step (passes concatenated). A step with
        ``classes[t] != y_i`` is :func:`reference_step`; with
        ``classes[t] == y_i`` it is a u-only step: ``u_i`` becomes
        ``solve_reduced_reference(0.0, u_i, lr, K, ||x_i||²)[0]`` and ``W`` is unchanged.
    passes : int
        Number of passes over ``order``.
    mu : float
        Ridge ``μ``; ``beta`` (default :func:`class_touch_weights` ``(y, K)``) are the
        classes' ``β_j``.

    Returns
    -------
    (W_new, u_new, u_only_steps)
    """
    X = sp.csr_matrix(X)
    X.sort_indices()
    y = np.asarray(y, dtype=np.int64)
    N = X.shape[0]
    W = np.array(W, dtype=np.float64, copy=True)
    u = np.array(u, dtype=np.float64, copy=True)
    order = np.asarray(order, dtype=np.int64)
    classes = np.asarray(classes, dtype=np.int64)
    if classes.shape != (passes * order.size,):
        raise ValueError("classes must have one entry per step (passes * len(order))")
    if beta is None:
        beta = class_touch_weights(y, K) if mu > 0 else np.ones(K)
    n_u_only = 0
    for t in range(passes * order.size):
        i = int(order[t % order.size])
        yi = int(y[i])
        k = int(classes[t])
        lo, hi = X.indptr[i], X.indptr[i + 1]
        idx, val = X.indices[lo:hi], X.data[lo:hi]
        if k == yi:
            s = float(val @ val)
            u[i] = solve_reduced_reference(0.0, float(u[i]), lr, K, s)[0]
            n_u_only += 1
            continue
        W[k], W[yi], u[i] = reference_step(
            idx, val, W[k], W[yi], float(u[i]), lr, K, mu=mu, beta_k=float(beta[k]),
            beta_y=float(beta[yi]), N=N)
    return W, u, n_u_only


def implicit_step(x_idx, x_val, w_k, w_y, u, eta, K, *, mu=0.0, beta_k=1.0,
                  beta_y=1.0, N=1, tol=DEFAULT_TOL):
    """One implicit step through the epoch kernels' step function (for tests and
    examples): same arguments and results as :func:`reference_step`, plus
    the number of root-finder evaluations.

    Returns
    -------
    (w_k_new, w_y_new, u_new, evals)
    """
    D = w_k.shape[0]
    W = np.ascontiguousarray(np.stack([w_k, w_y]).astype(np.float64))
    order = np.argsort(np.asarray(x_idx), kind="stable")
    indices = np.ascontiguousarray(np.asarray(x_idx, dtype=np.int64)[order])
    if indices.size and (indices[0] < 0 or indices[-1] >= D):
        raise ValueError(f"x_idx must lie in 0..{D - 1}")
    data = np.ascontiguousarray(np.asarray(x_val, dtype=np.float64)[order])
    indptr = np.array([0, indices.size], dtype=np.int64)
    sqnorm = row_sqnorms(indptr, data)
    uu = np.array([float(u)])
    scale = np.ones(2)
    rho = np.array([mu * beta_k / N, mu * beta_y / N], dtype=np.float64)
    km1 = K - 1.0
    evals, ok = apply_step(indptr, indices, data, sqnorm, W, uu, scale, rho, 0, 1, 0,
                           float(eta), km1, math.log(km1), math.log(2.0 * eta) +
                           math.log(km1), float(tol), mu > 0.0, 0, 0, 0, 0)
    return W[0] * scale[0], W[1] * scale[1], float(uu[0]), int(evals)


def class_touch_weights(y: np.ndarray, K: int) -> np.ndarray:
    """``β_j = N / (n_j + (N - n_j)/(K-1))`` (docs/math.md section 2); see
    :func:`scalable_softmax.objectives.touch_weights`."""
    return touch_weights(y, K)


# --------------------------------------------------------------------------------------
# The epoch kernels' seeds and class draws
# --------------------------------------------------------------------------------------


def pass_seeds(seed: int, passes: int) -> list[int]:
    """The seeds (in ``0..2**32-1``) of the ``passes`` passes of one
    :meth:`ImplicitTrainer.run_epoch` call with ``seed``.

    Pass 0 uses ``int(seed) % 2**32`` (the seed a one-pass epoch has always used, so
    ``passes=1`` is unchanged); pass ``p >= 1`` uses
    ``np.random.SeedSequence([int(seed) % 2**32, p]).generate_state(1)[0]``. Pass
    ``p``'s seed does not depend on ``passes``.
    """
    s0 = int(seed) % (2 ** 32)
    out = [s0]
    for p in range(1, int(passes)):
        out.append(int(np.random.SeedSequence([s0, p]).generate_state(1, np.uint32)[0]))
    return out


def draw_classes(seed, order, y, K, sample_from="others"):
    """The classes the epoch kernels draw, step by step, for one pass over ``order``
    seeded with ``seed`` (an int in ``0..2**32-1``, e.g. an entry of
    :func:`pass_seeds`). ``sample_from`` as the trainer's option. A drawn class equal to
    the step's label (possible only with ``"all"``) is a u-only step."""
    if sample_from not in SAMPLE_FROM:
        raise ValueError(f"implicit: sample_from={sample_from!r} must be one of "
                         f"{', '.join(map(repr, SAMPLE_FROM))}")
    return draw_classes_epoch(int(seed) % (2 ** 32),
                              np.ascontiguousarray(order, np.int64),
                              np.ascontiguousarray(y, np.int64), int(K),
                              sample_from == "all")


# --------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------

class ImplicitTrainer(StochasticTrainer):
    """Implicit SGD, one datapoint and one sampled class per step (docs/math.md section 4).

    Options
    -------
    tol : float, default 1e-10
        Accuracy of the root ``u`` of each step: ``|u - u*| <= tol * max(1, |u*|)``.
    kernel : {"fast", "simple"}, default "fast"
        ``"fast"`` prefetches the next step's rows; ``"simple"`` is the plain loop.
        Both give bit-identical results.
    sample_from : {"others", "all"}, default "others"
        Distribution of the sampled class ``k``: uniform on the ``K - 1`` classes other
        than ``y_i`` (``"others"``), or uniform on all ``K`` classes as in the authors'
        code (``"all"``). With ``"all"``, a step that draws ``k = y_i`` is a *u-only
        step*: ``u_i`` is updated as a step with ``δ₀ = 0`` and ``s' = ||x_i||²``
        would (no ridge factors) and ``W`` (with its ridge scales) is left unchanged.
    passes : int >= 1, default 1
        Passes over the datapoint order per :meth:`run_epoch` call, all at the same
        learning rate (the authors' code: 3). Pass ``p`` uses the seed
        :func:`pass_seeds` ``(seed, passes)[p]`` (pass 0: ``seed`` itself).
    threads : int >= 1, default 1
        Threads of an epoch. ``1``: the serial kernels above. ``T > 1``: the lock-free
        (Hogwild) kernel :func:`scalable_softmax.kernels.hogwild.implicit_epoch`: each
        pass's order cut into ``T`` contiguous chunks run in parallel, chunk ``c``
        drawing its classes from the seed
        :func:`~scalable_softmax.kernels.hogwild.chunk_seeds` ``(pass seed, T)[c]``;
        not bit-reproducible (races), see that module for how the ridge scales stay
        safe.

    The initial ``u`` is ``fit``'s ``u_init`` (:meth:`init_params`).
    ``extra`` of the epoch report holds ``root_iterations_mean`` and
    ``root_iterations_max`` (evaluations of ``g`` per step, each one Lambert W) and
    ``u_only_steps`` (always 0 with ``sample_from="others"``).
    With ``mu > 0`` the ridge shrinkage is kept as one scale factor per class row;
    :meth:`weights` folds it in.
    """

    name = "implicit"
    has_u = True
    exact_u = "softmax"
    default_batch_size = 1
    default_n_sampled = 1

    @classmethod
    def max_n_sampled(cls, K, options):
        """1: one sampled class per step (``"implicit-batch"`` takes more)."""
        return 1

    options = {**StochasticTrainer.options,
               "tol": (DEFAULT_TOL, {"type": "number", "above": 0.0, "below": 1e-2}),
               "kernel": ("fast", {"one_of": ["fast", "simple"]}),
               "sample_from": ("others", {"one_of": list(SAMPLE_FROM)}),
               "passes": (1, {"type": "int", "min": 1})}

    #: threads > 1 runs the Hogwild kernel (kernels.hogwild.implicit_epoch)
    parallel_kernel = True

    def __init__(self, X, y, K, *, mu=0.0, batch_size=None, n_sampled=None, **options):
        super().__init__(X, y, K, mu=mu, batch_size=batch_size, n_sampled=n_sampled,
                         **options)
        self.tol = self.opts["tol"]
        self.kernel = self.opts["kernel"]
        self.sample_from = self.opts["sample_from"]
        self.passes = self.opts["passes"]
        self.threads = self.opts["threads"]
        if not (sp.issparse(X) and X.format == "csr"):
            X = sp.csr_matrix(X)
        # one type per array (int32 indices when they fit, whatever X's), so one
        # compile per kernel (validation.kernel_csr)
        self._indptr, self._indices, self._data = kernel_csr(X)
        self._y = kernel_array(y, np.int64)
        self._sqnorm = row_sqnorms(self._indptr, self._data)
        check_row_norms(self._sqnorm, self.name)
        # rho_j = mu beta_j / N, so that A_j = 1 + eta rho_j
        self._rho = np.ascontiguousarray(
            self.mu * class_touch_weights(self._y, self.K) / self.N)
        self._scale = None

    def init_params(self, u_init: str = "zero") -> None:
        """Write ``W = 0`` (every page touched) and ``u`` (0, or ``log K`` when
        ``u_init == "logK"``)."""
        if u_init not in ("zero", "logK"):
            raise ValueError(f"implicit: u_init={u_init!r} must be 'zero' or 'logK'")
        # NumPy's fill, not the kernel kernels.implicit.fill: the same zeros, no compile
        self.W = touched_zeros(self.K, self.D)
        self.u = np.full(self.N, math.log(self.K) if u_init == "logK" else 0.0)
        self._scale = np.ones(self.K)

    def warmup(self) -> None:
        """Compile (or load from cache) the epoch kernel by running it on an empty
        order; the parameters are not changed."""
        if self.W is None:
            raise ValueError("implicit: call init_params() before warmup()")
        self._run(np.empty(0, np.int64), 1.0, 0)

    def _run(self, order, lr, seed):
        """One pass over ``order`` seeded with ``seed``; returns the kernel's
        ``(steps, diverged, total_evals, max_evals, u_only_steps)``."""
        if self.threads > 1:
            return self._run_hogwild(order, lr, seed)
        kern = epoch_fast if self.kernel == "fast" else epoch_simple
        return kern(self._indptr, self._indices, self._data, self._y, self._sqnorm,
                    self.W, self.u, self._scale, self._rho, order, lr, self.K, self.tol,
                    int(seed) % (2 ** 32), self.mu > 0.0, self.sample_from == "all")

    def _run_hogwild(self, order, lr, seed):
        """:meth:`_run` on ``threads`` threads (the kernel's per-chunk counters
        summed; the divergence is the first failing step of any chunk)."""
        from scalable_softmax.kernels import hogwild
        from scalable_softmax.kernels.threads import numba_threads
        T = self.threads
        ridge = self.mu > 0.0
        rate = lr * float(self._rho.max()) if ridge and self.K else 0.0
        rounds = hogwild.round_steps(rate, T, hogwild.ROUND_DECADES["implicit"])
        counters = np.zeros((T, 5), np.int64)
        with numba_threads(T):
            hogwild.implicit_epoch(
                self._indptr, self._indices, self._data, self._y,
                self._sqnorm, self.W, self.u, self._scale, self._rho, order, lr, self.K,
                self.tol, hogwild.chunk_seeds(seed, T), ridge, self.sample_from == "all",
                rounds, hogwild.FOLD_BELOW_IMPLICIT, counters)
        div = counters[:, 1]
        return (int(counters[:, 0].sum()), int(div[div >= 0].min()) if (div >= 0).any()
                else -1, int(counters[:, 2].sum()), int(counters[:, 3].max()),
                int(counters[:, 4].sum()))

    def run_epoch(self, order: np.ndarray, lr: float, seed: int) -> EpochReport:
        """One epoch: ``passes`` passes of implicit steps over ``order``, all with
        learning rate ``lr``, pass ``p`` seeded with ``pass_seeds(seed, passes)[p]``.

        ``steps`` counts the steps of all passes; ``diverged_at`` is
        ``p * len(order) + t`` for step ``t`` of pass ``p`` (the index in the
        concatenated step sequence; ``-1`` if none diverged), and no later pass runs.
        """
        if self.W is None:
            raise ValueError("implicit: call init_params() before run_epoch()")
        lr = float(lr)
        if not (lr > 0.0 and math.isfinite(lr)):
            raise ValueError(f"implicit: learning rate lr={lr!r} must be finite and > 0")
        order = np.ascontiguousarray(order, dtype=np.int64)
        if order.size and (order.min() < 0 or order.max() >= self.N):
            raise ValueError(f"implicit: order has indices outside 0..{self.N - 1}")
        if self._scale is None:
            self._scale = np.ones(self.K)
        steps = total = emax = n_u = 0
        diverged = -1
        for p, s in enumerate(pass_seeds(seed, self.passes)):
            st, dv, tot, em, nu = self._run(order, lr, s)
            steps += int(st)
            total += int(tot)
            emax = max(emax, int(em))
            n_u += int(nu)
            if dv >= 0:
                diverged = p * order.size + int(dv)
                break
        return EpochReport(steps=steps, diverged_at=diverged, extra={
            "root_iterations_mean": total / steps if steps else 0.0,
            "root_iterations_max": emax,
            "u_only_steps": n_u})

    def weights(self) -> np.ndarray:
        """The ``K x D`` weights with the lazy ridge scale factors folded in."""
        if self.W is not None and self._scale is not None and self.mu > 0.0:
            if np.any(self._scale != 1.0):
                self.W *= self._scale[:, None]
                self._scale[:] = 1.0
        return self.W
