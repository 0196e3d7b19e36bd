r"""Implicit SGD with ``n`` datapoints, ``m`` sampled classes and ridge (the paper's
Appendix F.3, docs/math.md section 5). The paper derives this update but never runs it.

Learning rates follow docs/math.md section 2: they belong to the per-datapoint objective
``f / N``, so with ``n = m = 1`` and ``mu = 0`` a step is exactly the single-point
implicit step of docs/math.md section 4.

Derivation
----------
**Batches and the estimator.** An epoch's ``order`` is cut into consecutive chunks
``S_1, .., S_J`` of ``n`` entries (the last one may be shorter). A chunk may repeat a
datapoint (``order="uniform"`` samples with replacement); write ``c_i`` for the number
of times point ``i`` occurs in ``S_j`` and ``s_j = |S_j| = Σ_i c_i``. Let
``Y_j = {y_i : i ∈ S_j}`` be the distinct labels of the chunk, ``T_j = Y_j ∪ C`` the
touched classes, ``m_j = min(m, K - |Y_j|)`` and ``C`` a uniformly random
``m_j``-subset of the classes not in ``Y_j``. If fewer than ``m`` such classes exist,
``C`` is all of them (``m_j = K - |Y_j|`` and the estimate of the sum over them is
exact); if none exist, ``C`` is empty. The stochastic objective of one step is

.. math::

    \hat f(u, W) = \sum_{i \in S_j} \frac{c_i}{s_j}\Big[u_i + e^{-u_i}
        + \sum_{k \in Y_j \setminus \{y_i\}} e^{\delta_{ik} - u_i}
        + r_j \sum_{k \in C} e^{\delta_{ik} - u_i}\Big]
        + \frac{\mu}{2N} \sum_{k \in T_j} \beta_k \lVert w_k \rVert^2,
    \qquad r_j = \frac{K - |Y_j|}{m_j},

with :math:`\beta_k^{-1} = P(k \in T_j) = \sum_j p_j\,[\mathbb 1(k \in Y_j)
+ \mathbb 1(k \notin Y_j)\, m_j / (K - |Y_j|)]` and ``p_j = s_j / len(order)``.
Unbiasedness: the class sum is a uniform ``m_j``-subset estimate of the sum over the
``K - |Y_j|`` classes outside ``Y_j`` (each such class has inclusion probability
``m_j / (K - |Y_j|) = 1 / r_j``); drawing chunk ``j`` with probability ``p_j`` gives
``E[(c_i / s_j)·1(i ∈ S_j)] = (# occurrences of i in order) / len(order)``, i.e. ``1/N``
for a permutation; and ``E[1(k ∈ T_j) β_k] = 1``. Hence ``E_{j,C} f̂ = f / N`` (docs/math.md
section 2) for a permutation order, and in expectation over the order for a
with-replacement order. In the paper's notation ``c_i / s_j = p_j^{-1} / N``.
``β`` is recomputed at the start of every epoch from that epoch's chunks (with
``order="file"`` the chunks, hence ``β``, are the paper's fixed mini-batches).
Writing ``ω_k = 1`` for ``k ∈ Y_j`` (including ``k = y_i``, whose ``δ_{i y_i} = 0``
gives the leading ``1``) and ``ω_k = r_j`` for ``k ∈ C``, the bracket is
``u_i + e^{-u_i} d_i`` with ``d_i = Σ_{k∈T_j} ω_k e^{δ_ik}`` and
``L_i = log d_i = logsumexp_k(log ω_k + s_ik) - s_{i y_i} ≥ 0``.

**The implicit step** is ``θ⁺ = argmin 2η f̂(θ) + ||θ - θ̃||²`` over ``u_i (i ∈ S_j)``,
``u_i ≥ 0``, and ``w_k (k ∈ T_j)``. Let ``α_i = η c_i / s_j`` (the paper's ``η p^{-1}``
in these units).

*u in closed form.* For fixed ``W`` each ``u_i`` solves
``min_{u≥0} 2α_i(u + e^{L_i - u}) + (u - ũ_i)²``. Stationarity gives
``u - ũ_i + α_i = α_i e^{L_i - u}``; with ``t = u - ũ_i + α_i``, ``t e^t =
α_i e^{L_i + α_i - ũ_i}``, so ``t = W₀(exp(log α_i + L_i + α_i - ũ_i))`` and
``u_i = ũ_i - α_i + t`` (F.3.2, confirmed; the Lambert W is evaluated in the log
domain, never forming the exponential). The problem is convex in ``u``, so the
constrained optimum is ``max(0, ·)`` of it. The eliminated term
``ψ_i(L) = min_{u≥0} ...`` is convex, increasing and C¹ in ``L``:
``ψ = 2α u + 2t + (u - ũ)²``, ``ψ' = 2t``, ``ψ'' = 2t/(1+t)`` when ``u > 0``, and
``ψ = 2α e^L + ũ²``, ``ψ' = ψ'' = 2α e^L`` when ``u = 0`` (then ``L ≤ 0``). In the
first case ``ψ = (1 + t)² - 1 + 2αũ - α²``: the paper's ``(1 + P(·))²`` up to a
constant, which it uses without the constraint.

*W: the orthogonal complement.* With ``P`` the projector onto ``span{x_i : i ∈ S_j}``,
the data term depends on ``W`` only through ``P w_k``; the rest,
``ρ_k ||P^⊥w_k||² + ||P^⊥(w_k - w̃_k)||²`` with ``ρ_k = η μ β_k / N``, gives
``P^⊥ w_k = P^⊥ w̃_k / (1 + ρ_k)``. (The paper's ``1/(1 + μβ_k/2)`` omits the learning
rate; in its units, ``f`` with the factor ``N``, the factor is ``1/(1 + ημβ_k)``.)

*W: the span.* Take an orthonormal basis ``V = X_Sᵀ U_r`` of the span from the chunk's
Gram matrix ``G = X_S X_Sᵀ``, so ``x_iᵀ V = b_iᵀ``: from its Cholesky factor
``G = L Lᵀ`` (``U_r = L⁻ᵀ``, ``B = L``) when no point is nearly in the span of the
ones before it, else from its eigendecomposition ``G = U Λ Uᵀ`` (``U_r = U Λ^{-1/2}``,
``B = U Λ^{1/2}``, eigenvalues below ``1e-12·λ_max`` dropped: duplicate or collinear
points); see :func:`~scalable_softmax.kernels.implicit_batch.span_basis`. Write
``P w_k = P w̃_k + V c_k`` and ``g_k = Vᵀ w̃_k = U_rᵀ (X_S w̃_k)``. The reduced problem in
``C = [c_k]_{k∈T_j}`` (``|T_j|·rank ≤ n(n+m)`` unknowns) is

.. math::

    \Phi(C) = \sum_{i} \psi_i\big(L_i(\tilde s_i + B_i C^\top)\big)
        + \sum_{k \in T_j} (1 + \rho_k)\lVert c_k\rVert^2 + 2\rho_k\, g_k^\top c_k,

strongly convex (modulus ``2``) and smooth, with gradient
``Σ_i ψ'_i (π_ik - 1[k = y_i]) b_i + 2(1+ρ_k)c_k + 2ρ_k g_k`` (``π_i`` the
``ω``-weighted softmax of the scores over ``T_j``) and Hessian blocks
``Σ_i [ψ''_i e_ik e_il + ψ'_i(π_ik 1[k=l] - π_ik π_il)] b_i b_iᵀ + 2(1+ρ_k)1[k=l] I``,
``e_i = π_i - 1_{y_i}``. It is solved by damped Newton (Armijo backtracking) from
``C = 0`` (the old iterate) until ``||∇Φ||₂ ≤ 2 tol (1 + max|C|)``, which certifies
``||C - C*|| ≤ tol (1 + max|C|)`` by strong convexity. The Newton system uses the
Hessian's structure, block diagonal over the classes plus ``2n`` rank-one terms
(Woodbury: ``q`` Cholesky factors of ``r x r`` blocks, carried out for all classes in
lockstep, and one ``2s x 2s`` capacitance system; ``O(q(s r² + s² r) + s³)``, i.e.
``O(n³(n+m))``, per iteration), with the dense Cholesky as a fallback; while the
iterates converge fast the factorisation is reused (chord steps, a quarter of the
arithmetic, see :func:`~scalable_softmax.kernels.implicit_batch.solve_reduced`). The scores
``S̃ + B Cᵀ`` are carried along the iterations, so a trial point of the line search
costs ``O(s q)`` plus its exponentials.
Because ``ψ`` is evaluated in the log domain, every term at the start point is finite
and grows linearly in ``δ - u``: the paper's F.3.5 linear-programming initialisation
is not needed. Finally ``w_k⁺ = w̃_k / (1 + ρ_k) + X_Sᵀ a_k`` with
``a_k = U_r (c_k + ρ_k g_k / (1 + ρ_k))`` (a sparse update plus one lazily
applied scale factor per class row) and ``u_i⁺`` from the closed form at the new scores.

Cost per step: ``O(n(n+m)·nnz)`` for the scores and the Gram matrix (``nnz`` = non-zeros
of a row), ``O(n³)`` for its factorisation and ``O(n³(n+m))`` per fresh Newton iteration
(2 to 6 iterations per step in our benchmarks, about half of them chord steps; with
``s = r = 10``, ``q = 20`` a fresh iteration is about 120 kflop and a chord one 29,
``newton_flops`` in ``benchmarks/bench_many_classes.py``). The basis is rebuilt every step from the
``n x n`` Gram matrix, so the chunks need not be fixed across epochs (the paper fixes
them to precompute a Gram-Schmidt basis in ``O(n²D)``).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from scalable_softmax.kernels import implicit as implicit_kernels
from scalable_softmax.kernels.common import touched_zeros
from scalable_softmax.kernels.implicit_batch import EIG_RTOL, epoch_kernel, touch_beta_kernel
from scalable_softmax.methods.base import EpochReport, StochasticTrainer
from scalable_softmax.methods.implicit import check_row_norms
from scalable_softmax.validation import kernel_array, kernel_csr

__all__ = [
    "ImplicitBatchTrainer",
    "batch_objective",
    "reference_step",
    "touch_beta",
]


# ----------------------------------------------------------------------------------
# NumPy references
# ----------------------------------------------------------------------------------
def touch_beta(order, y, K, batch_size, n_sampled):
    """Inverse touch probabilities ``β_k = 1 / P(k ∈ T_j)`` of the ridge weights.

    The chunks are consecutive runs of ``batch_size`` entries of ``order``; chunk
    ``j`` is drawn with probability ``p_j = |S_j| / len(order)`` and then
    ``min(n_sampled, K - |Y_j|)`` classes uniformly among those not in its labels
    ``Y_j``. Plain NumPy reference of the kernel used by the trainer.

    Parameters
    ----------
    order : array of int, the epoch's datapoint order.
    y : array of int, labels of all datapoints.
    K : int, number of classes.
    batch_size, n_sampled : int, ``n`` and ``m``.

    Returns
    -------
    ndarray, shape (K,)
    """
    order = np.asarray(order)
    y = np.asarray(y)
    total = len(order)
    prob = np.zeros(K)
    for start in range(0, total, batch_size):
        chunk = order[start:start + batch_size]
        pj = len(chunk) / total
        labels = np.unique(y[chunk])
        free = K - len(labels)
        inside = np.zeros(K, bool)
        inside[labels] = True
        cj = min(n_sampled, free) / free if free > 0 else 0.0
        prob += pj * np.where(inside, 1.0, cj)
    return 1.0 / prob


def _dense_rows(X, idx):
    rows = X[idx]
    if sp.issparse(rows):
        rows = rows.toarray()
    return np.asarray(rows, dtype=np.float64)


def _batch_structure(y, batch, classes, K):
    """Distinct points (first-appearance order) with counts, distinct labels, touched
    classes, ``log ω`` and the weight ``r``."""
    batch = np.asarray(batch, dtype=np.int64)
    pts, first, counts = np.unique(batch, return_index=True, return_counts=True)
    o = np.argsort(first)
    pts, counts = pts[o], counts[o]
    labels = []
    for i in pts:
        if y[i] not in labels:
            labels.append(int(y[i]))
    classes = [int(k) for k in classes]
    if len(set(classes)) != len(classes) or set(classes) & set(labels):
        raise ValueError("classes: the sampled classes must be distinct and differ from "
                         "every label of the batch")
    if any(k < 0 or k >= K for k in classes):
        raise ValueError(f"classes: values must lie in 0..{K - 1}")
    touched = np.array(labels + classes, dtype=np.int64)
    rweight = (K - len(labels)) / len(classes) if classes else 1.0
    logw = np.r_[np.zeros(len(labels)), np.full(len(classes), np.log(rweight))]
    ypos = np.array([labels.index(int(y[i])) for i in pts], dtype=np.int64)
    return pts, counts, touched, logw, ypos, rweight


def batch_objective(X, y, W, u, batch, classes, *, mu=0.0, beta=None):
    """The stochastic objective ``f̂`` of one step (per-datapoint units; see the module
    docstring), evaluated naively in NumPy.

    Parameters
    ----------
    X : (N, D) array or sparse matrix; y : (N,) labels; W : (K, D); u : (N,).
    batch : indices of the chunk (may repeat); classes : the sampled classes ``C``
        (distinct, none equal to a label of the batch; ``r = (K - |Y|) / |C|``).
    mu : ridge; beta : (K,) inverse touch probabilities (needed when ``mu > 0``).

    Returns
    -------
    float
    """
    N = X.shape[0]
    K = W.shape[0]
    pts, counts, touched, logw, ypos, _ = _batch_structure(y, batch, classes, K)
    Xs = _dense_rows(X, pts)
    S = Xs @ W[touched].T
    val = 0.0
    for a, i in enumerate(pts):
        d = np.exp(logw + S[a] - S[a, ypos[a]]).sum()
        val += counts[a] / len(batch) * (u[i] + np.exp(-u[i]) * d)
    if mu > 0:
        if beta is None:
            raise ValueError("beta: required when mu > 0")
        val += mu / (2 * N) * np.sum(beta[touched] * np.sum(W[touched] ** 2, axis=1))
    return float(val)


def _psi_reference(L, ub, al):
    """Vectorised ``ψ`` through the u-equation ``u + log1p((u - ub)/al) = L`` solved by
    bisection (an independent route from the kernel's Lambert W)."""
    L = np.asarray(L, float)
    lo = np.maximum(np.minimum(L, ub), ub - al)
    hi = np.maximum(L, ub)
    for _ in range(2100):  # ends when no bracket can be halved any more
        mid = 0.5 * (lo + hi)
        if np.all((mid <= lo) | (mid >= hi)):
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            gm = mid + np.log1p((mid - ub) / al) - L
        pos = gm > 0
        hi = np.where(pos, mid, hi)
        lo = np.where(pos, lo, mid)
    u = np.maximum(0.5 * (lo + hi), 0.0)
    t = al * np.exp(L - u)
    val = 2 * al * (u + t / al) + (u - ub) ** 2
    d1 = 2 * t
    d2 = np.where(u > 0, 2 * t / (1 + t), 2 * t)
    return val, d1, d2, u


def reference_step(X, y, W, u, batch, classes, lr, *, mu=0.0, beta=None, tol=1e-12,
                   max_iter=200):
    """One implicit-batch step in plain NumPy: the reference for the numba kernel (every
    method module names its NumPy step ``reference_step``; see
    :mod:`scalable_softmax.methods`).

    Parameters
    ----------
    X : (N, D) array or sparse matrix; y : (N,) int labels; W : (K, D); u : (N,).
    batch : indices of the chunk (may repeat).
    classes : the sampled classes ``C`` (distinct, not labels of the batch).
    lr : learning rate ``η`` (per-datapoint units).
    mu : ridge; beta : (K,) inverse touch probabilities (required when ``mu > 0``).

    Returns
    -------
    W_new : (K, D) array, u_new : (N,) array (copies; inputs untouched)
    iterations : int, Newton iterations used
    """
    N = X.shape[0]
    K = W.shape[0]
    y = np.asarray(y)
    pts, counts, touched, logw, ypos, _ = _batch_structure(y, batch, classes, K)
    if mu > 0 and beta is None:
        raise ValueError("beta: required when mu > 0")
    s, q = len(pts), len(touched)
    Xs = _dense_rows(X, pts)
    S0 = Xs @ W[touched].T
    lam, U = np.linalg.eigh(Xs @ Xs.T)
    keep = lam > EIG_RTOL * lam[-1] if lam[-1] > 0 else np.zeros(s, bool)
    lam, U = lam[keep], U[:, keep]
    Bm = U * np.sqrt(lam)
    Ur = U / np.sqrt(lam)
    r = len(lam)
    g = (Ur.T @ S0).T
    rho = lr * mu * (beta[touched] if mu > 0 else np.zeros(q)) / N
    alpha = lr * counts / len(batch)
    ub = np.asarray(u, float)[pts]
    onehot = np.zeros((s, q))
    onehot[np.arange(s), ypos] = 1.0

    def evaluate(Cm, order):
        Sc = S0 + Bm @ Cm.T
        Z = logw + Sc
        mx = Z.max(axis=1, keepdims=True)
        ex = np.exp(Z - mx)
        tot = ex.sum(axis=1, keepdims=True)
        L = np.maximum((mx + np.log(tot))[:, 0] - Sc[np.arange(s), ypos], 0.0)
        val, d1, d2, uu = _psi_reference(L, ub, alpha)
        f = val.sum() + np.sum((1 + rho) * np.sum(Cm ** 2, 1) + 2 * rho * np.sum(Cm * g, 1))
        if order == 0:
            return f, uu
        pi = ex / tot
        e = pi - onehot
        grad = (d1[:, None] * e).T @ Bm + 2 * (1 + rho)[:, None] * Cm + 2 * rho[:, None] * g
        Mi = (d2[:, None, None] * e[:, :, None] * e[:, None, :]
              - d1[:, None, None] * pi[:, :, None] * pi[:, None, :])
        Mi[:, np.arange(q), np.arange(q)] += d1[:, None] * pi
        H = np.einsum("ikl,ia,ib->kalb", Mi, Bm, Bm).reshape(q * r, q * r)
        H += np.diag(np.repeat(2 * (1 + rho), r))
        return f, uu, grad.ravel(), H

    Cm = np.zeros((q, r))
    it = 0
    for _ in range(max_iter):
        it += 1
        if q * r == 0:
            break
        f, uu, grad, H = evaluate(Cm, 2)
        if np.linalg.norm(grad) <= 2 * tol * (1 + np.abs(Cm).max()):
            break
        p = -np.linalg.solve(H, grad)
        if np.abs(p).max() <= 1e-3 * tol * (1 + np.abs(Cm).max()):
            break
        tau = 1.0
        while tau > 1e-18:
            ft, _ = evaluate(Cm + tau * p.reshape(q, r), 0)
            if ft <= f + 1e-4 * tau * grad @ p + 1e-13 * (1 + abs(f)):
                break
            tau *= 0.5
        Cm = Cm + tau * p.reshape(q, r)
    _, unew = evaluate(Cm, 0)
    W_new = np.array(W, dtype=np.float64, copy=True)
    shrink = 1.0 / (1.0 + rho)
    A = Ur @ (Cm + (rho * shrink)[:, None] * g).T  # s x q
    W_new[touched] = W_new[touched] * shrink[:, None] + A.T @ Xs
    u_new = np.array(u, dtype=np.float64, copy=True)
    u_new[pts] = unew
    return W_new, u_new, it


# ----------------------------------------------------------------------------------
# the trainer
# ----------------------------------------------------------------------------------
class ImplicitBatchTrainer(StochasticTrainer):
    """Implicit SGD with ``n`` datapoints and ``m`` sampled classes per step and ridge
    (Appendix F.3; derivation in the module docstring).

    Defaults ``batch_size = 10``, ``n_sampled = 10`` (the paper runs none; these keep
    the reduced problem at most ``n(n+m) = 200`` unknowns, solved by Newton's method
    to high accuracy in well under a millisecond). With ``batch_size = n_sampled = 1``
    and ``mu = 0`` a step is the single-point implicit step of docs/math.md section 4.

    Options
    -------
    tol : float, default 1e-10
        Newton stops when ``||∇Φ||₂ ≤ 2 tol (1 + max|C|)``: since Φ is 2-strongly
        convex this certifies that the coefficients (Euclidean coordinates of the
        change of ``W`` in the span of the batch) are within ``tol (1 + max|C|)`` of
        the exact minimiser.
    max_newton : int, default 50
        Newton iterations per step; steps that hit it are counted in
        ``extra["newton_unconverged"]`` (their result is still a descent step).
    linear_solver : {"structured", "dense"}, default "structured"
        How the Newton system is solved: Woodbury on the Hessian's structure (block
        diagonal over the classes plus ``2n`` rank-one terms, ``O(n²(n+m)·n)`` per
        iteration), falling back to the dense Cholesky when it fails; or always the
        dense Cholesky (``O((n(n+m))³)``). Both give the same step to the tolerance.
    threads : int >= 1, default 1
        Threads of an epoch. ``1``: the serial kernel. ``T > 1``: the lock-free
        (Hogwild) kernel :func:`scalable_softmax.kernels.hogwild.batch_epoch`: the
        epoch's minibatches (the same as with one thread) cut into ``T`` contiguous
        runs stepped in parallel, run ``c`` drawing its classes from the seed
        :func:`~scalable_softmax.kernels.hogwild.chunk_seeds` ``(seed, T)[c]``; not
        bit-reproducible (races), see that module for how the ridge scales stay safe.

    The initial ``u`` is ``fit``'s ``u_init`` (:meth:`init_params`).

    Attributes
    ----------
    last_epoch_classes : ndarray (steps, m) of int
        The classes sampled in each step of the last epoch (``-1`` pads steps that
        had fewer than ``m`` classes available), so an epoch can be replayed.
    beta : ndarray (K,)
        The ridge weights of the last epoch.
    """

    name = "implicit-batch"
    has_u = True
    exact_u = "softmax"
    minibatch = True
    default_batch_size = 10
    default_n_sampled = 10

    @classmethod
    def max_n_sampled(cls, K, options):
        """None: a step draws at most the classes there are (``-1`` pads the rest), so
        any ``n_sampled`` is accepted."""
        return None

    options = {**StochasticTrainer.options,
               "tol": (1e-10, {"type": "number", "above": 0.0, "below": 1e-2}),
               "max_newton": (50, {"type": "int", "min": 1}),
               "linear_solver": ("structured", {"one_of": ["structured", "dense"]})}
    #: threads > 1 runs the Hogwild kernel (kernels.hogwild.batch_epoch)
    parallel_kernel = True

    def __init__(self, X, y, K, *, mu=0.0, batch_size=None, n_sampled=None, **options):
        super().__init__(X, y, K, mu=mu, batch_size=batch_size, n_sampled=n_sampled,
                         **options)
        self.tol = self.opts["tol"]
        self.max_newton = self.opts["max_newton"]
        self.linear_solver = self.opts["linear_solver"]
        self.threads = self.opts["threads"]
        Xc = sp.csr_matrix(X)
        # one type per array, so one compile per kernel (validation.kernel_csr)
        self._indptr, self._indices, self._data = kernel_csr(Xc, np.int64)
        self._y = kernel_array(y, np.int64)
        # the rows' squared norms by the one-datapoint family's kernel
        check_row_norms(implicit_kernels.row_sqnorms(self._indptr, self._data), self.name)
        if self._y.shape != (self.N,):
            raise ValueError(f"y: expected shape ({self.N},), got {self._y.shape}")
        self.last_epoch_classes = np.empty((0, self.n_sampled), np.int64)
        self.beta = None

    def init_params(self, u_init="zero"):
        """Write ``W = 0`` (every page touched) and ``u`` (``"zero"`` or ``"logK"``)."""
        if u_init not in ("zero", "logK"):
            raise ValueError(f"u_init: must be 'zero' or 'logK', got {u_init!r}")
        self.W = touched_zeros(self.K, self.D)
        self.u = np.full(self.N, 0.0 if u_init == "zero" else math.log(self.K))

    def run_epoch(self, order, lr, seed):
        """One epoch: consecutive chunks of ``batch_size`` entries of ``order``, one
        implicit step each. Class sampling uses numba's RNG seeded with ``seed``.

        Returns
        -------
        EpochReport with ``extra = {"newton_iterations_mean", "chord_iterations_mean",
        "newton_iterations_max", "newton_unconverged", "u_clamped",
        "dense_fallbacks"}`` (``chord_iterations_mean``: of the Newton iterations per
        step, those that reused an earlier factorisation; ``u_clamped``: point
        updates that ended on the constraint ``u = 0``; ``dense_fallbacks``: Newton
        iterations where the structured solve failed and the dense one was used).
        """
        if self.W is None:
            self.init_params()
        order = np.ascontiguousarray(order)
        if order.ndim != 1 or not np.issubdtype(order.dtype, np.integer):
            raise ValueError("order: must be a 1-D integer array of datapoint indices")
        order = order.astype(np.int64, copy=False)
        if len(order) and (order.min() < 0 or order.max() >= self.N):
            raise ValueError(f"order: indices must lie in 0..{self.N - 1}")
        lr = float(lr)
        if not (lr > 0 and math.isfinite(lr)):
            raise ValueError(f"lr: must be a positive finite number, got {lr!r}")
        if len(order) == 0:
            return EpochReport(steps=0, diverged_at=-1, extra={"newton_iterations_mean": 0.0})
        n, m = self.batch_size, self.n_sampled
        self.beta = touch_beta_kernel(order, self._y, self.K, n, m)
        gamma = np.ones(self.K)
        nsteps = -(-len(order) // n)
        classes = np.full((nsteps, m), -1, np.int64)
        if self.threads > 1:
            div, steps, ntot, nmax, nunc, ncl, nfb, nch = self._run_hogwild(
                order, lr, seed, gamma, classes)
        else:
            div, steps, ntot, nmax, nunc, ncl, nfb, nch = epoch_kernel(
                self._indptr, self._indices, self._data, self._y, self.W, gamma, self.u,
                order, n, m, self.K, self.N, lr, self.mu, self.beta,
                int(seed) & 0xFFFFFFFF, self.tol, self.max_newton,
                self.linear_solver == "dense", classes, False)
        scaled = gamma != 1.0
        self.W[scaled] *= gamma[scaled, None]
        # with threads > 1 every minibatch's classes were drawn before the steps (after a
        # divergence, steps of other chunks may have run past it): keep them all
        self.last_epoch_classes = classes[:steps] if self.threads == 1 else classes
        return EpochReport(steps=int(steps), diverged_at=int(div), extra={
            "newton_iterations_mean": ntot / max(steps, 1),
            "chord_iterations_mean": nch / max(steps, 1),
            "newton_iterations_max": int(nmax),
            "newton_unconverged": int(nunc),
            "u_clamped": int(ncl),
            "dense_fallbacks": int(nfb),
        })

    def _run_hogwild(self, order, lr, seed, gamma, classes):
        """The epoch on ``threads`` threads; returns the serial kernel's eight results
        (per-chunk counters summed, the first diverged minibatch of any chunk). With
        a divergence, minibatches of other chunks may have run after it: ``steps``
        counts every step taken."""
        from scalable_softmax.kernels import hogwild
        from scalable_softmax.kernels.threads import numba_threads
        n, m = self.batch_size, self.n_sampled
        T = min(self.threads, max(1, classes.shape[0]))
        rate = lr * self.mu * float(self.beta.max()) / self.N if self.mu > 0 else 0.0
        rounds = hogwild.round_steps(rate, T, hogwild.ROUND_DECADES["implicit-batch"])
        out = np.zeros((T, 8), np.int64)
        with numba_threads(T):
            hogwild.batch_epoch(
                self._indptr, self._indices, self._data, self._y,
                self.W, gamma, self.u, order, n, m, self.K, self.N, lr, self.mu, self.beta,
                hogwild.chunk_seeds(seed, T), self.tol, self.max_newton,
                self.linear_solver == "dense", classes, rounds, hogwild.FOLD_BELOW_BATCH, out)
        div = out[:, 0]
        return (int(div[div >= 0].min()) if (div >= 0).any() else -1,
                int(out[:, 1].sum()), int(out[:, 2].sum()), int(out[:, 3].max()),
                int(out[:, 4].sum()), int(out[:, 5].sum()), int(out[:, 6].sum()),
                int(out[:, 7].sum()))

    def warmup(self):
        """Compile (or load from numba's cache) the kernels on a two-class, one-point
        problem of the same types (the parameters are not touched)."""
        order = np.zeros(1, np.int64)
        y = np.zeros(1, np.int64)
        beta = touch_beta_kernel(order, y, 2, 1, 1)
        epoch_kernel(np.array([0, 1], np.int64), np.zeros(1, np.int64), np.ones(1), y,
                      np.zeros((2, 1)), np.ones(2), np.zeros(1), order, 1, 1, 2, 1, 1.0,
                      0.0, beta, 0, self.tol, self.max_newton,
                      self.linear_solver == "dense", np.full((1, 1), -1, np.int64), False)
        if self.threads > 1:
            from scalable_softmax.kernels import hogwild
            hogwild.batch_epoch(
                np.array([0, 1], np.int64), np.zeros(1, np.int64), np.ones(1), y,
                np.zeros((2, 1)), np.ones(2), np.zeros(1), order, 1, 1, 2, 1, 1.0, 0.0,
                beta, np.zeros(1, np.int64), self.tol, self.max_newton,
                self.linear_solver == "dense", np.full((1, 1), -1, np.int64), 1,
                hogwild.FOLD_BELOW_BATCH, np.zeros((1, 8), np.int64))

    def weights(self):
        """The current ``K x D`` weights (scale factors are folded in after every
        epoch)."""
        return self.W
