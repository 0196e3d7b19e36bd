"""Reference mathematics in plain NumPy: the ground truth for every kernel.

Every quantity of ``docs/math.md`` is written here as directly as possible, favouring
readability over speed (dense ``N x K`` score matrices are formed; use small
problems). The numba kernels of the project are tested against these functions.

Conventions (docs/math.md section 0, "Notation")
---------------------------------
* ``X``: data, a dense ``ndarray`` or any ``scipy.sparse`` matrix/array, shape
  ``(N, D)``; both give identical results.
* ``y``: integer labels, shape ``(N,)``, values in ``0..K-1``.
* ``W``: weights, shape ``(K, D)``; row ``k`` is ``w_k``.
* ``u``: the double-sum auxiliary variables, shape ``(N,)``.
* Scores ``s_ik = x_i . w_k``, differences ``delta_ik = s_ik - s_{i, y_i}``.
* ``mu``: ridge parameter; ``beta``: the inverse touch probabilities of docs/math.md
  section 2 (:func:`touch_weights`).

Sections of docs/math.md and the functions that implement them:

1. objective and reported metrics: :func:`log_loss`, :func:`error_rate`,
   :func:`ridge_log_likelihood`, :func:`ridge_log_likelihood_grad`,
   :func:`defective_metric` (section 7's defect);
2. double sum (F-4 to F-7): :func:`double_sum`, :func:`double_sum_grad`,
   :func:`u_star`, :func:`f_ik`, :func:`f_ik_grad` and their per-datapoint
   ``*_scaled`` versions (``f_ik / N``, the learning-rate convention);
3. U-max: :func:`umax_bounds`, :func:`umax_reset_value`, the ``m > 1`` term
   :func:`f_iS` / :func:`f_iS_grad` (and ``*_scaled``);
5. the minibatch term of Appendix F.3: :func:`batch_touch_weights`,
   :func:`f_batch`, :func:`f_batch_grad` (and ``*_scaled``);
6. Raman et al.'s double sum (F-8): :func:`raman_double_sum`,
   :func:`raman_u_star`, :func:`raman_f_ik`, :func:`raman_f_ik_grad`,
   :func:`raman_f_ik_grad_original_code`, :func:`raman_umax_reset_value`;
7. biased baselines: :func:`ove_loss`, :func:`ove_grad`, :func:`is_loss`,
   :func:`is_grad`, :func:`nce_loss`, :func:`nce_grad`, and the exact
   :func:`ove_objective` / :func:`ove_objective_grad` / :func:`ove_per_point`;
8. Bouchard's bound: :func:`bouchard_bound`, :func:`bouchard_grad`,
   :func:`bouchard_optimal_alpha`, :func:`bouchard_alpha_k2`.

Two identities worth knowing (both are tested):

* ``min_{u >= 0} f(u, W) = -L(W) + N`` with ``u*_i = log(1 + sum_{k != y_i} e^{delta_ik})``.
* Raman's double sum is the *same function* as ours after the change of variable
  ``ubar_i = u_i + s_{i, y_i}``: ``raman_f_ik(i, k, ubar) = f_ik(i, k, ubar - s_{.,y})``
  term by term, so ``min_ubar f~(ubar, W) = -L(W) + N`` too (``ubar`` is
  unconstrained; ``ubar*_i = log sum_k e^{s_ik}``, which can be negative). The two
  formulations differ only through that parametrisation, i.e. through their
  gradients in ``W`` (the chain rule through ``s_{i, y_i}``).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, logsumexp

__all__ = [
    # helpers
    "softplus", "scores", "probabilities", "nll_per_point",
    # section 1
    "log_loss", "error_rate", "defective_metric",
    "ridge_log_likelihood", "ridge_log_likelihood_grad",
    # section 2
    "class_counts", "touch_weights", "u_star", "double_sum", "double_sum_grad",
    "f_ik", "f_ik_grad", "f_ik_scaled", "f_ik_grad_scaled",
    # section 3
    "umax_bounds", "umax_reset_value", "f_iS", "f_iS_grad", "f_iS_scaled",
    "f_iS_grad_scaled",
    # section 5
    "batch_touch_weights", "f_batch", "f_batch_grad", "f_batch_scaled",
    "f_batch_grad_scaled",
    # section 6
    "raman_u_star", "raman_double_sum", "raman_double_sum_grad", "raman_f_ik",
    "raman_f_ik_grad", "raman_f_ik_scaled", "raman_f_ik_grad_scaled",
    "raman_f_ik_grad_original_code", "raman_f_ik_grad_original_code_scaled",
    "raman_umax_reset_value",
    # section 7
    "ove_loss", "ove_grad", "is_loss", "is_grad", "nce_loss", "nce_grad",
    "ove_per_point", "ove_objective", "ove_objective_grad",
    # section 8
    "bouchard_bound", "bouchard_grad", "bouchard_optimal_alpha", "bouchard_alpha_k2",
]


# ---------------------------------------------------------------------------
# input checking
# ---------------------------------------------------------------------------

def _as_X(X):
    """Return ``X`` as float64 CSR (if sparse) or a 2-D float64 ndarray."""
    if sp.issparse(X):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (N x D); got shape {X.shape}")
        return X.tocsr().astype(np.float64)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array or sparse matrix (N x D); got shape {X.shape}")
    return X


def _as_W(W, D=None):
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2:
        raise ValueError(f"W must be a 2-D array of shape (K, D); got shape {W.shape}")
    if W.shape[0] < 2:
        raise ValueError(f"W must have at least K = 2 rows (classes); got K = {W.shape[0]}")
    if D is not None and W.shape[1] != D:
        raise ValueError(f"W has {W.shape[1]} columns but X has D = {D} columns; "
                         "W must be K x D with row k = w_k")
    return W


def _as_y(y, N, K):
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != N:
        raise ValueError(f"y must be a 1-D array of length N = {N}; got shape {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.equal(np.mod(y, 1), 0)):
            raise ValueError("y must hold integer class labels 0..K-1")
    y = y.astype(np.int64)
    if y.size and (y.min() < 0 or y.max() >= K):
        raise ValueError(f"labels in y must lie in 0..K-1 = 0..{K - 1}; "
                         f"found values in {y.min()}..{y.max()}")
    return y


def _as_u(u, N, name="u"):
    u = np.asarray(u, dtype=np.float64)
    if u.shape != (N,):
        raise ValueError(f"{name} must have shape (N,) = ({N},); got shape {u.shape}")
    return u


def _check(X, y, W):
    """Validate and convert ``(X, y, W)``; return them with ``N, D, K``."""
    X = _as_X(X)
    N, D = X.shape
    if N == 0:
        raise ValueError("X has no rows (N = 0)")
    W = _as_W(W, D)
    K = W.shape[0]
    y = _as_y(y, N, K)
    return X, y, W, N, D, K


def _check_index(i, N):
    if not (isinstance(i, (int, np.integer)) and 0 <= i < N):
        raise ValueError(f"datapoint index i must be an integer in 0..N-1 = 0..{N - 1}; got {i!r}")
    return int(i)


def _check_class(k, K, yi, name="k"):
    if not (isinstance(k, (int, np.integer)) and 0 <= k < K):
        raise ValueError(f"class {name} must be an integer in 0..K-1 = 0..{K - 1}; got {k!r}")
    if k == yi:
        raise ValueError(f"sampled class {name} = {k} equals the label y_i = {yi}; "
                         "classes are sampled from {0..K-1} minus {y_i}")
    return int(k)


def _check_classes(ks, K, yi, distinct=False):
    ks = np.atleast_1d(np.asarray(ks))
    if ks.ndim != 1 or ks.size == 0 or not np.issubdtype(ks.dtype, np.integer):
        raise ValueError(f"ks must be a non-empty 1-D integer array of sampled classes; got {ks!r}")
    ks = ks.astype(np.int64)
    if ks.min() < 0 or ks.max() >= K:
        raise ValueError(f"sampled classes ks must lie in 0..K-1 = 0..{K - 1}; got {ks}")
    if np.any(ks == yi):
        raise ValueError(f"sampled classes ks = {ks} contain the label y = {yi}; "
                         "sample from the classes other than y")
    if distinct and np.unique(ks).size != ks.size:
        raise ValueError(f"sampled classes ks = {ks} must be distinct "
                         "(sampling without replacement)")
    return ks


def _row(X, i):
    """Row ``i`` of ``X`` as a dense 1-D float64 vector."""
    if sp.issparse(X):
        return np.asarray(X[[i], :].toarray(), dtype=np.float64).ravel()
    return np.asarray(X[i], dtype=np.float64)


def _vec(x, D):
    """A single datapoint as a dense 1-D float64 vector of length ``D``."""
    if sp.issparse(x):
        x = x.toarray()
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.shape != (D,):
        raise ValueError(f"x must be a vector of length D = {D}; got {x.size} entries")
    return x


def _beta(y, K, mu, beta, m=1, replace=False):
    """The ridge weights to use: ``beta`` if given, else :func:`touch_weights`."""
    if mu == 0.0:
        return np.zeros(K) if beta is None else np.asarray(beta, dtype=np.float64)
    if beta is None:
        return touch_weights(y, K, m=m, replace=replace)
    beta = np.asarray(beta, dtype=np.float64)
    if beta.shape != (K,):
        raise ValueError(f"beta must have shape (K,) = ({K},); got {beta.shape}")
    return beta


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def softplus(z):
    """Stable ``log(1 + exp(z))``.

    Computed as ``max(z, 0) + log1p(exp(-|z|))``: never overflows, and is accurate
    for large negative ``z`` (where it equals ``exp(z)`` to rounding).

    Parameters
    ----------
    z : float or array_like

    Returns
    -------
    float or ndarray, same shape as ``z``.

    Examples
    --------
    >>> float(softplus(1e4)), float(softplus(0.0)) == float(np.log(2.0))
    (10000.0, True)
    """
    z = np.asarray(z, dtype=np.float64)
    out = np.maximum(z, 0.0) + np.log1p(np.exp(-np.abs(z)))
    return out[()] if out.ndim == 0 else out


def scores(X, W):
    """Score matrix ``S = X W^T``, ``S[i, k] = x_i . w_k``.

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (N, D)
    W : ndarray, shape (K, D)

    Returns
    -------
    ndarray, shape (N, K), float64.
    """
    X = _as_X(X)
    W = _as_W(W, X.shape[1])
    return np.asarray(X @ W.T, dtype=np.float64)


def probabilities(X, W):
    """Softmax probabilities ``p_ik = exp(s_ik - logsumexp_k s_ik)``, shape (N, K)."""
    S = scores(X, W)
    return np.exp(S - logsumexp(S, axis=1, keepdims=True))


def _true_scores(S, y):
    return S[np.arange(S.shape[0]), y]


def _deltas(S, y):
    """``delta_ik = s_ik - s_{i, y_i}`` (so ``delta_{i, y_i} = 0``)."""
    return S - _true_scores(S, y)[:, None]


def _logsumexp_rows(A):
    """Row-wise ``log sum_k exp(A_ik)``, accurate to relative rounding even when the
    result is tiny: with ``m_i = max_k A_ik`` attained at ``k*``, it is
    ``m_i + log1p(sum_{k != k*} exp(A_ik - m_i))`` (``log1p`` keeps
    ``log(1 + 1e-12)`` exact, where ``log(sum)`` would lose ~4 digits)."""
    A = np.asarray(A, dtype=np.float64)
    idx = np.argmax(A, axis=1)
    rows = np.arange(A.shape[0])
    m = A[rows, idx]
    E = np.exp(A - m[:, None])
    E[rows, idx] = 0.0
    return m + np.log1p(E.sum(axis=1))


def nll_per_point(X, y, W):
    """Exact ``-log p(y_i | x_i) = logsumexp_k s_ik - s_{i, y_i}`` for every ``i``.

    Evaluated as ``logsumexp_k delta_ik`` (``= u*_i``, :func:`u_star`) with ``log1p``
    below the maximum, so that a tiny loss keeps its relative accuracy.

    Returns
    -------
    ndarray, shape (N,), every entry ``>= 0``.
    """
    X, y, W, N, D, K = _check(X, y, W)
    return _logsumexp_rows(_deltas(scores(X, W), y))


# ---------------------------------------------------------------------------
# section 1: objective and reported metrics
# ---------------------------------------------------------------------------

def log_loss(X, y, W):
    """Mean exact negative log-likelihood ``-(1/N) sum_i log p(y_i | x_i)``.

    This is the "log-loss" reported everywhere (docs/math.md section 1): exact, with a
    stable log-sum-exp over all ``K`` classes, no ridge term. It stays finite for
    any finite scores (no overflow for scores of order 1e4 or more).

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (N, D)
    y : int array, shape (N,), labels in 0..K-1
    W : ndarray, shape (K, D)

    Returns
    -------
    float

    Examples
    --------
    >>> X = np.eye(2); y = np.array([0, 1]); W = np.zeros((3, 2))
    >>> bool(np.isclose(log_loss(X, y, W), np.log(3)))
    True
    """
    return float(np.mean(nll_per_point(X, y, W)))


def error_rate(X, y, W):
    """Fraction of points with ``argmax_k s_ik != y_i``.

    Ties go to the lowest class index (``np.argmax``), so at ``W = 0`` every point
    is predicted as class 0, as in the original code.
    """
    X, y, W, N, D, K = _check(X, y, W)
    S = scores(X, W)
    return float(np.mean(np.argmax(S, axis=1) != y))


def defective_metric(X, y, W):
    """The original code's defective "log-loss" (docs/math.md section 7).

    ``mean_i( -p_{i, y_i} + log sum_k exp(p_ik) )`` where ``p`` are the softmax
    *probabilities* (fed to a cross-entropy as if they were scores). It always lies
    in ``[log(K-1+e) - 1, log(K-1+e)]``: the lower end is attained when ``p_i`` is
    one-hot on the label, the upper end when it is one-hot on another class; it
    equals ``log K`` at ``W = 0``. Reproduced only to explain the published OVE, NCE
    and IS columns; it is not a log-loss.

    Returns
    -------
    float
    """
    X, y, W, N, D, K = _check(X, y, W)
    P = probabilities(X, W)
    return float(np.mean(-_true_scores(P, y) + logsumexp(P, axis=1)))


def ridge_log_likelihood(X, y, W, mu=0.0):
    """The ridge-penalised log-likelihood ``L(W)`` of (F-2, F-3), a **sum**.

    ``L(W) = sum_i [ s_{i, y_i} - log sum_k exp(s_ik) ] - (mu/2) ||W||_F^2``

    Returns
    -------
    float (``<= 0``)
    """
    X, y, W, N, D, K = _check(X, y, W)
    S = scores(X, W)
    return float(np.sum(_true_scores(S, y) - logsumexp(S, axis=1)) - 0.5 * mu * np.sum(W * W))


def ridge_log_likelihood_grad(X, y, W, mu=0.0):
    """Gradient of :func:`ridge_log_likelihood` in ``W``.

    ``dL/dw_k = sum_i (1[y_i = k] - p_ik) x_i - mu w_k``

    Returns
    -------
    ndarray, shape (K, D)
    """
    X, y, W, N, D, K = _check(X, y, W)
    G = -probabilities(X, W)
    G[np.arange(N), y] += 1.0
    return np.asarray(X.T @ G, dtype=np.float64).T - mu * W


# ---------------------------------------------------------------------------
# section 2: the double sum
# ---------------------------------------------------------------------------

def class_counts(y, K):
    """``n_j`` = number of points with label ``j``, shape (K,), int64."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-D array of labels; got shape {y.shape}")
    y = _as_y(y, y.shape[0], int(K))
    return np.bincount(y, minlength=int(K)).astype(np.int64)


def touch_weights(y, K, m=1, replace=False):
    """Inverse probabilities ``beta_j`` that class ``j`` is touched by a sample.

    For ``m = 1`` (docs/math.md section 2): ``i ~ unif{1..N}``, ``k ~ unif(classes != y_i)``
    touch ``{y_i, k}``, and ``P(j touched) = (n_j + (N - n_j)/(K-1)) / N``, so

    ``beta_j = N / (n_j + (N - n_j)/(K-1))``.

    For ``m > 1`` classes sampled uniformly from the ``K-1`` classes other than
    ``y_i`` (the U-max variant of section 3), ``j != y_i`` is in the sample with
    probability ``q = m/(K-1)`` without replacement, ``q = 1 - (1 - 1/(K-1))^m`` with
    replacement, so ``beta_j = N / (n_j + (N - n_j) q)``. With these weights the
    sampled ridge term (each touched class counted once) is an unbiased estimate of
    ``(mu/2) ||W||^2``.

    Parameters
    ----------
    y : int array, shape (N,)
    K : int, number of classes
    m : int, classes sampled per datapoint (``1 <= m``; ``m <= K-1`` without replacement)
    replace : bool, whether the ``m`` classes are drawn with replacement

    Returns
    -------
    ndarray, shape (K,), float64
    """
    K = int(K)
    if K < 2:
        raise ValueError(f"K must be at least 2; got {K}")
    if m < 1 or (not replace and m > K - 1):
        raise ValueError(f"m (classes sampled per datapoint) must be in 1..K-1 = 1..{K - 1} "
                         f"(any m >= 1 with replace=True); got {m}")
    n = class_counts(y, K).astype(np.float64)
    N = n.sum()
    q = (1.0 - (1.0 - 1.0 / (K - 1)) ** m) if replace else m / (K - 1)
    return N / (n + (N - n) * q)


def u_star(X, y, W):
    """Optimal ``u`` for fixed ``W``: ``u*_i = log(1 + sum_{k != y_i} exp(delta_ik))``.

    Computed as ``logsumexp_k delta_ik`` (which includes ``delta_{i, y_i} = 0``), with
    ``log1p`` for the part below the maximum, so it never overflows, is ``>= 0``
    exactly in floating point, and keeps full relative accuracy when it is tiny.

    Returns
    -------
    ndarray, shape (N,)
    """
    X, y, W, N, D, K = _check(X, y, W)
    return _logsumexp_rows(_deltas(scores(X, W), y))


def _offlabel_exp(X, y, W, u):
    """``E[i, k] = exp(delta_ik - u_i)`` for ``k != y_i`` and 0 at ``k = y_i``."""
    S = scores(X, W)
    E = np.exp(_deltas(S, y) - u[:, None])
    E[np.arange(S.shape[0]), y] = 0.0
    return E


def double_sum(u, X, y, W, mu=0.0):
    """The double-sum objective ``f(u, W)`` of (F-5).

    ``f(u, W) = sum_i sum_{k != y_i} [ (u_i + e^{-u_i})/(K-1) + exp(delta_ik - u_i) ]
    + (mu/2) ||W||^2``
    ``       = sum_i [ u_i + e^{-u_i} + sum_{k != y_i} exp(delta_ik - u_i) ] + (mu/2) ||W||^2``

    ``min_{u >= 0} f(u, W) = -L(W) + N``, attained at :func:`u_star`. The terms are
    evaluated as written, so ``f`` is ``inf`` when ``delta_ik - u_i`` exceeds ~709
    (that is the true value in float64; it is the instability of docs/math.md section 2).

    Parameters
    ----------
    u : ndarray, shape (N,)
    X, y, W : see module docstring
    mu : float, ridge parameter

    Returns
    -------
    float
    """
    X, y, W, N, D, K = _check(X, y, W)
    u = _as_u(u, N)
    E = _offlabel_exp(X, y, W, u)
    return float(np.sum(u + np.exp(-u)) + np.sum(E) + 0.5 * mu * np.sum(W * W))


def double_sum_grad(u, X, y, W, mu=0.0):
    """Gradient of :func:`double_sum`.

    With ``e_ik = exp(delta_ik - u_i)`` for ``k != y_i``:

    * ``df/dw_k = sum_i [ 1[k != y_i] e_ik - 1[k = y_i] sum_{k' != y_i} e_ik' ] x_i + mu w_k``
    * ``df/du_i = 1 - e^{-u_i} - sum_{k != y_i} e_ik``

    Returns
    -------
    dW : ndarray, shape (K, D)
    du : ndarray, shape (N,)
    """
    X, y, W, N, D, K = _check(X, y, W)
    u = _as_u(u, N)
    E = _offlabel_exp(X, y, W, u)
    row = E.sum(axis=1)
    G = E.copy()
    G[np.arange(N), y] = -row
    dW = np.asarray(X.T @ G, dtype=np.float64).T + mu * W
    du = 1.0 - np.exp(-u) - row
    return dW, du


def f_ik(i, k, u, X, y, W, mu=0.0, beta=None):
    """The unbiased single-pair term ``f_ik(u, W)`` of (F-6), *with* the factor ``N``.

    ``f_ik = N [ u_i + e^{-u_i} + (K-1) exp(delta_ik - u_i) ]
    + (mu/2) [ beta_{y_i} ||w_{y_i}||^2 + beta_k ||w_k||^2 ]``

    With ``i ~ unif{0..N-1}`` and ``k ~ unif(classes != y_i)`` (probability
    ``1/(N(K-1))`` per pair), ``E[f_ik] = f(u, W)`` (:func:`double_sum`).

    Parameters
    ----------
    i : int, datapoint index
    k : int, sampled class, ``k != y_i``
    u, X, y, W : see module docstring
    mu : float, ridge parameter
    beta : ndarray (K,), optional; defaults to :func:`touch_weights` ``(y, K)``

    Returns
    -------
    float
    """
    X, y, W, N, D, K = _check(X, y, W)
    u = _as_u(u, N)
    i = _check_index(i, N)
    yi = int(y[i])
    k = _check_class(k, K, yi)
    b = _beta(y, K, mu, beta)
    x = _row(X, i)
    delta = x @ (W[k] - W[yi])
    val = N * (u[i] + np.exp(-u[i]) + (K - 1) * np.exp(delta - u[i]))
    ridge = 0.5 * mu * (b[yi] * W[yi] @ W[yi] + b[k] * W[k] @ W[k])
    return float(val + ridge)


def f_ik_grad(i, k, u, X, y, W, mu=0.0, beta=None):
    """Gradient (F-7) of :func:`f_ik`, with the factor ``N``.

    With ``e = exp(delta_ik - u_i)``:

    * ``grad_{w_k}     =  N (K-1) e x_i + mu beta_k w_k``
    * ``grad_{w_{y_i}} = -N (K-1) e x_i + mu beta_{y_i} w_{y_i}``
    * ``d/du_i         =  N [ 1 - e^{-u_i} - (K-1) e ]``

    all other rows of ``W`` and entries of ``u`` have zero gradient.

    Returns
    -------
    dW : ndarray, shape (K, D), dense (zero outside rows ``k`` and ``y_i``)
    du_i : float, the derivative in ``u_i``
    """
    X, y, W, N, D, K = _check(X, y, W)
    u = _as_u(u, N)
    i = _check_index(i, N)
    yi = int(y[i])
    k = _check_class(k, K, yi)
    b = _beta(y, K, mu, beta)
    x = _row(X, i)
    e = np.exp(x @ (W[k] - W[yi]) - u[i])
    dW = np.zeros((K, D))
    dW[k] = N * (K - 1) * e * x + mu * b[k] * W[k]
    dW[yi] = -N * (K - 1) * e * x + mu * b[yi] * W[yi]
    du_i = N * (1.0 - np.exp(-u[i]) - (K - 1) * e)
    return dW, float(du_i)


def f_ik_scaled(i, k, u, X, y, W, mu=0.0, beta=None):
    """Per-datapoint term ``f_ik / N`` (the optimisers' learning-rate convention).

    The ridge part becomes ``(mu/(2N)) [beta_{y_i} ||w_{y_i}||^2 + beta_k ||w_k||^2]``.
    ``E[f_ik_scaled] = f(u, W) / N``.
    """
    N = _as_X(X).shape[0]
    return f_ik(i, k, u, X, y, W, mu=mu, beta=beta) / N


def f_ik_grad_scaled(i, k, u, X, y, W, mu=0.0, beta=None):
    """Gradient of :func:`f_ik_scaled`: :func:`f_ik_grad` divided by ``N``.

    ``grad_{w_k} = (K-1) e x_i + (mu/N) beta_k w_k``, ``d/du_i = 1 - e^{-u_i} - (K-1) e``.

    Returns
    -------
    dW : ndarray (K, D); du_i : float
    """
    N = _as_X(X).shape[0]
    dW, du = f_ik_grad(i, k, u, X, y, W, mu=mu, beta=beta)
    return dW / N, du / N


# ---------------------------------------------------------------------------
# section 3: U-max
# ---------------------------------------------------------------------------

def umax_bounds(X, K, mu):
    """The U-max projection bounds of Lemmas 1 and 2 (docs/math.md section 3).

    * ``B_x = max_i ||x_i||_2``
    * ``B_W = sqrt(2 N log(K) / mu)`` (``inf`` when ``mu = 0``: no projection of ``W``)
    * ``B_u = log(1 + (K-1) exp(2 B_x B_W))``, computed stably as
      ``softplus(log(K-1) + 2 B_x B_W)`` (``inf`` when ``mu = 0``).

    Lemma 1 gives ``||W*||_F <= B_W`` for the ridge optimum; if every row satisfies
    ``||w_j|| <= B_W`` then ``u*_i(W) <= B_u`` (Lemma 2).

    Parameters
    ----------
    X : ndarray or scipy.sparse matrix, shape (N, D)
    K : int
    mu : float, ``>= 0``

    Returns
    -------
    (B_x, B_W, B_u) : tuple of float
    """
    X = _as_X(X)
    K = int(K)
    if K < 2:
        raise ValueError(f"K must be at least 2; got {K}")
    if mu < 0:
        raise ValueError(f"mu must be >= 0; got {mu}")
    N = X.shape[0]
    if sp.issparse(X):
        sq = np.asarray(X.multiply(X).sum(axis=1)).ravel()
    else:
        sq = np.einsum("ij,ij->i", X, X)
    B_x = float(np.sqrt(sq.max()))
    if mu == 0:
        return B_x, np.inf, np.inf
    B_W = float(np.sqrt(2.0 * N * np.log(K) / mu))
    B_u = float(softplus(np.log(K - 1) + 2.0 * B_x * B_W))
    return B_x, B_W, B_u


def umax_reset_value(i, ks, X, y, W):
    """The U-max reset target ``log(1 + sum_{k in S} exp(delta_ik))`` (section 3).

    For a single class ``k`` this is ``softplus(delta_ik)``. U-max sets ``u_i`` to
    this value when ``u_i`` is more than ``delta_0`` below it.

    Parameters
    ----------
    i : int; ks : int or 1-D int array of sampled classes (none equal to ``y_i``)

    Returns
    -------
    float
    """
    X, y, W, N, D, K = _check(X, y, W)
    i = _check_index(i, N)
    yi = int(y[i])
    ks = _check_classes(ks, K, yi)
    x = _row(X, i)
    d = (W[ks] - W[yi]) @ x
    return float(logsumexp(np.concatenate(([0.0], d))))


def f_iS(i, ks, u, X, y, W, mu=0.0, beta=None, replace=False):
    """The ``m``-class term of U-max (section 3), with the factor ``N``.

    For ``m`` classes ``S = (k_1..k_m)`` sampled uniformly from the classes other
    than ``y_i`` (distinct when ``replace=False``; with ``replace=True`` a repeated
    class counts once per draw in the data term):

    ``f_iS = N [ u_i + e^{-u_i} + ((K-1)/m) sum_{j=1..m} exp(delta_{i k_j} - u_i) ]
    + (mu/2) sum_{c in {y_i} u set(S)} beta_c ||w_c||^2``

    with ``beta = touch_weights(y, K, m, replace)`` by default; ``E[f_iS] = f(u, W)``.
    For ``m = 1`` this is :func:`f_ik`.
    """
    X, y, W, N, D, K = _check(X, y, W)
    u = _as_u(u, N)
    i = _check_index(i, N)
    yi = int(y[i])
    ks = _check_classes(ks, K, yi, distinct=not replace)
    m = ks.size
    b = _beta(y, K, mu, beta, m=m, replace=replace)
    x = _row(X, i)
    e = np.exp((W[ks] - W[yi]) @ x - u[i])
    val = N * (u[i] + np.exp(-u[i]) + (K - 1) / m * e.sum())
    touched = np.concatenate(([yi], np.unique(ks)))
    ridge = 0.5 * mu * np.sum(b[touched] * np.einsum("jd,jd->j", W[touched], W[touched]))
    return float(val + ridge)


def f_iS_grad(i, ks, u, X, y, W, mu=0.0, beta=None, replace=False):
    """Gradient of :func:`f_iS`: ``(dW (K, D), du_i)``.

    ``grad_{w_k} = N ((K-1)/m) e_k x_i + mu beta_k w_k`` for ``k in S``,
    ``grad_{w_{y_i}} = -N ((K-1)/m) (sum_k e_k) x_i + mu beta_{y_i} w_{y_i}``,
    ``d/du_i = N [1 - e^{-u_i} - ((K-1)/m) sum_k e_k]``.
    """
    X, y, W, N, D, K = _check(X, y, W)
    u = _as_u(u, N)
    i = _check_index(i, N)
    yi = int(y[i])
    ks = _check_classes(ks, K, yi, distinct=not replace)
    m = ks.size
    b = _beta(y, K, mu, beta, m=m, replace=replace)
    x = _row(X, i)
    c = N * (K - 1) / m * np.exp((W[ks] - W[yi]) @ x - u[i])
    dW = np.zeros((K, D))
    np.add.at(dW, ks, c[:, None] * x[None, :])
    uk = np.unique(ks)
    dW[uk] += mu * b[uk, None] * W[uk]
    dW[yi] = -c.sum() * x + mu * b[yi] * W[yi]
    du_i = N * (1.0 - np.exp(-u[i])) - c.sum()
    return dW, float(du_i)


def f_iS_scaled(i, ks, u, X, y, W, mu=0.0, beta=None, replace=False):
    """:func:`f_iS` divided by ``N`` (per-datapoint convention)."""
    return f_iS(i, ks, u, X, y, W, mu=mu, beta=beta, replace=replace) / _as_X(X).shape[0]


def f_iS_grad_scaled(i, ks, u, X, y, W, mu=0.0, beta=None, replace=False):
    """:func:`f_iS_grad` divided by ``N`` (per-datapoint convention)."""
    N = _as_X(X).shape[0]
    dW, du = f_iS_grad(i, ks, u, X, y, W, mu=mu, beta=beta, replace=replace)
    return dW / N, du / N


# ---------------------------------------------------------------------------
# section 5: minibatches of n points and m classes (Appendix F.3)
# ---------------------------------------------------------------------------

def _check_batches(batches, N):
    batches = [np.asarray(b, dtype=np.int64).ravel() for b in batches]
    allidx = np.concatenate(batches) if batches else np.array([], dtype=np.int64)
    if allidx.size != N or not np.array_equal(np.sort(allidx), np.arange(N)):
        raise ValueError("batches must partition 0..N-1: every datapoint in exactly one batch")
    return batches


def batch_touch_weights(y, K, batches, m):
    """Ridge weights ``beta_k`` for the fixed-partition minibatch term (F.3).

    Batch ``S_j`` is drawn with probability ``p_j = |S_j| / N``; its label set is
    ``L_j``; then ``m`` distinct classes ``C`` are drawn uniformly from the
    ``K - |L_j|`` classes not in ``L_j``. Class ``k`` is touched (``k in L_j u C``)
    with probability ``sum_j p_j [ 1[k in L_j] + 1[k not in L_j] m / (K - |L_j|) ]``,
    and ``beta_k`` is its inverse (the paper's
    ``beta_k^{-1} = 1 - (1/J) sum_j 1[k not in S_j] (1 - m/(K-n))`` for equal batch
    sizes with distinct labels).

    Parameters
    ----------
    y : int array, shape (N,)
    K : int
    batches : sequence of int arrays partitioning ``0..N-1``
    m : int, classes sampled per batch (``m <= K - |L_j|`` for every batch)

    Returns
    -------
    ndarray, shape (K,)
    """
    y = np.asarray(y, dtype=np.int64)
    N = y.shape[0]
    batches = _check_batches(batches, N)
    prob = np.zeros(K)
    for b in batches:
        L = np.unique(y[b])
        R = K - L.size
        if not (1 <= m <= R):
            raise ValueError(f"m = {m} classes cannot be sampled outside the {L.size} labels of "
                             f"a batch: need 1 <= m <= K - |L_j| = {R}")
        inL = np.zeros(K, dtype=bool)
        inL[L] = True
        prob += b.size / N * np.where(inL, 1.0, m / R)
    return 1.0 / prob


def _batch_terms(batch, ks, u, X, y, W):
    X, y, W, N, D, K = _check(X, y, W)
    u = _as_u(u, N)
    batch = np.asarray(batch, dtype=np.int64).ravel()
    if (batch.size == 0 or batch.min() < 0 or batch.max() >= N
            or np.unique(batch).size != batch.size):
        raise ValueError(f"batch must be non-empty distinct indices in 0..N-1 = 0..{N - 1}")
    L = np.unique(y[batch])
    ks = np.atleast_1d(np.asarray(ks, dtype=np.int64))
    if ks.size == 0 or np.unique(ks).size != ks.size or ks.min() < 0 or ks.max() >= K \
            or np.isin(ks, L).any():
        raise ValueError(f"ks must be distinct classes in 0..K-1 none of which is a label of the "
                         f"batch (labels {L}); got {ks}")
    return X, y, W, N, D, K, u, batch, L, ks


def f_batch(batch, ks, u, X, y, W, mu=0.0, beta=None):
    """Minibatch, multi-class unbiased term of Appendix F.3, with the factor ``N``.

    For batch ``B`` (one block of a fixed partition, drawn with probability
    ``|B|/N``) with label set ``L_B`` and ``m`` distinct sampled classes ``C``
    outside ``L_B``:

    ``f_BC = (N/|B|) sum_{i in B} [ u_i + e^{-u_i} + sum_{k in L_B minus y_i} e^{delta_ik - u_i}
    + ((K - |L_B|)/m) sum_{k in C} e^{delta_ik - u_i} ]
    + (mu/2) sum_{k in L_B u C} beta_k ||w_k||^2``

    The labels of the other points of the batch are always included (weight 1),
    the rest are sampled (weight ``(K - |L_B|)/m``). ``E[f_BC] = f(u, W)`` with
    ``beta = batch_touch_weights(y, K, batches, m)``, which must be passed when
    ``mu > 0`` (it depends on the partition). The paper writes ``K - n`` for
    ``K - |L_B|``, which assumes the ``n`` labels of a batch are distinct.
    """
    X, y, W, N, D, K, u, batch, L, ks = _batch_terms(batch, ks, u, X, y, W)
    if mu != 0.0 and beta is None:
        raise ValueError("f_batch with mu > 0 needs beta = batch_touch_weights(y, K, batches, m)")
    m = ks.size
    total = 0.0
    for i in batch:
        x = _row(X, i)
        yi = y[i]
        others = L[L != yi]
        e_L = np.exp((W[others] - W[yi]) @ x - u[i])
        e_C = np.exp((W[ks] - W[yi]) @ x - u[i])
        total += u[i] + np.exp(-u[i]) + e_L.sum() + (K - L.size) / m * e_C.sum()
    val = N / batch.size * total
    if mu != 0.0:
        b = np.asarray(beta, dtype=np.float64)
        touched = np.concatenate((L, ks))
        val += 0.5 * mu * np.sum(b[touched] * np.einsum("jd,jd->j", W[touched], W[touched]))
    return float(val)


def f_batch_grad(batch, ks, u, X, y, W, mu=0.0, beta=None):
    """Gradient of :func:`f_batch`.

    Returns
    -------
    dW : ndarray, shape (K, D), zero outside rows ``L_B u C``
    du : ndarray, shape (N,), zero outside ``B``
    """
    X, y, W, N, D, K, u, batch, L, ks = _batch_terms(batch, ks, u, X, y, W)
    if mu != 0.0 and beta is None:
        raise ValueError("f_batch_grad with mu > 0 needs "
                         "beta = batch_touch_weights(y, K, batches, m)")
    m = ks.size
    scale = N / batch.size
    dW = np.zeros((K, D))
    du = np.zeros(N)
    for i in batch:
        x = _row(X, i)
        yi = y[i]
        others = L[L != yi]
        c_L = scale * np.exp((W[others] - W[yi]) @ x - u[i])
        c_C = scale * (K - L.size) / m * np.exp((W[ks] - W[yi]) @ x - u[i])
        dW[others] += c_L[:, None] * x[None, :]
        dW[ks] += c_C[:, None] * x[None, :]
        dW[yi] -= (c_L.sum() + c_C.sum()) * x
        du[i] = scale * (1.0 - np.exp(-u[i])) - c_L.sum() - c_C.sum()
    if mu != 0.0:
        b = np.asarray(beta, dtype=np.float64)
        touched = np.concatenate((L, ks))
        dW[touched] += mu * b[touched, None] * W[touched]
    return dW, du


def f_batch_scaled(batch, ks, u, X, y, W, mu=0.0, beta=None):
    """:func:`f_batch` divided by ``N``: the ``f-hat`` whose implicit step is
    ``argmin 2 eta f-hat + ||theta - theta~||^2`` in the per-datapoint convention."""
    return f_batch(batch, ks, u, X, y, W, mu=mu, beta=beta) / _as_X(X).shape[0]


def f_batch_grad_scaled(batch, ks, u, X, y, W, mu=0.0, beta=None):
    """:func:`f_batch_grad` divided by ``N``."""
    N = _as_X(X).shape[0]
    dW, du = f_batch_grad(batch, ks, u, X, y, W, mu=mu, beta=beta)
    return dW / N, du / N


# ---------------------------------------------------------------------------
# section 6: Raman et al.'s double sum (F-8)
# ---------------------------------------------------------------------------

def raman_u_star(X, y, W):
    """Optimal ``ubar`` of Raman's formulation: ``ubar*_i = log sum_k exp(s_ik)``.

    Unconstrained (it can be negative). Equals ``u_star + s_{i, y_i}``.
    """
    X, y, W, N, D, K = _check(X, y, W)
    return logsumexp(scores(X, W), axis=1)


def raman_double_sum(ubar, X, y, W, mu=0.0):
    """Raman et al.'s double sum ``f~(ubar, W)`` (the mean of (F-8) over pairs).

    ``f~ = sum_i [ ubar_i - s_{i,y_i} + exp(s_{i,y_i} - ubar_i)
    + sum_{k != y_i} exp(s_ik - ubar_i) ] + (mu/2) ||W||^2``

    ``min_ubar f~(ubar, W) = -L(W) + N`` at :func:`raman_u_star` (the same identity as
    for :func:`double_sum`; indeed ``f~(ubar, W) = f(ubar - s_{., y}, W)``).
    """
    X, y, W, N, D, K = _check(X, y, W)
    ubar = _as_u(ubar, N, "ubar")
    S = scores(X, W)
    sy = _true_scores(S, y)
    return float(np.sum(ubar - sy) + np.sum(np.exp(S - ubar[:, None])) + 0.5 * mu * np.sum(W * W))


def raman_double_sum_grad(ubar, X, y, W, mu=0.0):
    """Gradient of :func:`raman_double_sum`: ``(dW (K, D), dubar (N,))``.

    ``d/dw_k = sum_i [exp(s_ik - ubar_i) - 1[k = y_i]] x_i + mu w_k``,
    ``d/dubar_i = 1 - sum_k exp(s_ik - ubar_i)``.
    """
    X, y, W, N, D, K = _check(X, y, W)
    ubar = _as_u(ubar, N, "ubar")
    E = np.exp(scores(X, W) - ubar[:, None])
    G = E.copy()
    G[np.arange(N), y] -= 1.0
    dW = np.asarray(X.T @ G, dtype=np.float64).T + mu * W
    return dW, 1.0 - E.sum(axis=1)


def raman_f_ik(i, k, ubar, X, y, W, mu=0.0, beta=None):
    """Raman's single-pair term (F-8), with the factor ``N``.

    ``f~_ik = N [ ubar_i - s_{i,y_i} + exp(s_{i,y_i} - ubar_i) + (K-1) exp(s_ik - ubar_i) ]
    + (mu/2) [ beta_{y_i} ||w_{y_i}||^2 + beta_k ||w_k||^2 ]``

    ``E[f~_ik] = raman_double_sum``. Numerically equal to
    ``f_ik(i, k, ubar - s_{., y}, ...)``.
    """
    X, y, W, N, D, K = _check(X, y, W)
    ubar = _as_u(ubar, N, "ubar")
    i = _check_index(i, N)
    yi = int(y[i])
    k = _check_class(k, K, yi)
    b = _beta(y, K, mu, beta)
    x = _row(X, i)
    sy, sk = x @ W[yi], x @ W[k]
    val = N * (ubar[i] - sy + np.exp(sy - ubar[i]) + (K - 1) * np.exp(sk - ubar[i]))
    ridge = 0.5 * mu * (b[yi] * W[yi] @ W[yi] + b[k] * W[k] @ W[k])
    return float(val + ridge)


def _raman_pair(i, k, ubar, X, y, W, mu, beta):
    """Checked inputs of one Raman pair term: ``(x_i, y_i, k, beta, e_y, e_k, N, D, K)``
    with ``e_y = exp(s_{i,y_i} - ubar_i)`` and ``e_k = exp(s_ik - ubar_i)``."""
    X, y, W, N, D, K = _check(X, y, W)
    ubar = _as_u(ubar, N, "ubar")
    i = _check_index(i, N)
    yi = int(y[i])
    k = _check_class(k, K, yi)
    b = _beta(y, K, mu, beta)
    x = _row(X, i)
    return x, yi, k, b, np.exp(x @ W[yi] - ubar[i]), np.exp(x @ W[k] - ubar[i]), N, D, K


def raman_f_ik_grad(i, k, ubar, X, y, W, mu=0.0, beta=None):
    """The **correct** gradient of :func:`raman_f_ik` (docs/math.md section 6).

    * ``d/dubar_i     = N [ 1 - exp(s_{i,y_i} - ubar_i) - (K-1) exp(s_ik - ubar_i) ]``
    * ``grad_{w_{y_i}} = N [ exp(s_{i,y_i} - ubar_i) - 1 ] x_i + mu beta_{y_i} w_{y_i}``
    * ``grad_{w_k}     = N (K-1) exp(s_ik - ubar_i) x_i + mu beta_k w_k``

    Returns
    -------
    dW : ndarray, shape (K, D); dubar_i : float
    """
    x, yi, k, b, ey, ek, N, D, K = _raman_pair(i, k, ubar, X, y, W, mu, beta)
    dW = np.zeros((K, D))
    dW[k] = N * (K - 1) * ek * x + mu * b[k] * W[k]
    dW[yi] = N * (ey - 1.0) * x + mu * b[yi] * W[yi]
    dubar = N * (1.0 - ey - (K - 1) * ek)
    return dW, float(dubar)


def raman_f_ik_grad_original_code(i, k, ubar, X, y, W, mu=0.0, beta=None, scope="support"):
    """The original experiment code's **defective** gradient of Raman's term.

    Our reading of the defect (docs/math.md section 6), taken from the published code's
    ``tilde_Umax.update`` (``u_grad = 1 - np.exp(coef_true) - np.sum(coef_sampled)``;
    ``w_true_grad = coef_true - 1`` applied as ``W[x_col_idx, y] -= lr * w_true_grad``),
    with ``e_y = exp(s_{i,y_i} - ubar_i)`` and ``e_k = exp(s_ik - ubar_i)``:

    * ``d/dubar_i = N [ 1 - exp(e_y) - (K-1) e_k ]`` -- an extra ``exp`` around
      ``e_y`` (correct: ``1 - e_y - (K-1) e_k``);
    * ``grad_{w_{y_i}} = N [ e_y - 1 ] * 1[x_id != 0]`` -- the scalar ``N (e_y - 1)`` is
      added to every coordinate ``d`` of ``w_{y_i}`` where ``x_i`` is non-zero
      (``scope="support"``, what the code does with sparse rows), i.e. the factor
      ``x_id`` is missing. ``scope="all"`` adds it to every coordinate of
      ``w_{y_i}``; the two agree when ``x_i`` has no zero entry;
    * ``grad_{w_k} = N (K-1) e_k x_i`` -- unchanged (correct in the code).

    The ridge terms (the paper's experiments use ``mu = 0``) are those of the correct
    gradient. The original code works per datapoint (no factor ``N``); see
    :func:`raman_f_ik_grad_original_code_scaled`.

    Parameters
    ----------
    scope : {"support", "all"}

    Returns
    -------
    dW : ndarray, shape (K, D); dubar_i : float
    """
    if scope not in ("support", "all"):
        raise ValueError(f"scope must be 'support' or 'all'; got {scope!r}")
    x, yi, k, b, ey, ek, N, D, K = _raman_pair(i, k, ubar, X, y, W, mu, beta)
    mask = (x != 0).astype(np.float64) if scope == "support" else np.ones(D)
    dW = np.zeros((K, D))
    dW[k] = N * (K - 1) * ek * x + mu * b[k] * W[k]
    dW[yi] = N * (ey - 1.0) * mask + mu * b[yi] * W[yi]
    with np.errstate(over="ignore"):  # exp(e_y) overflows for e_y > 709: the defect's own
        dubar = N * (1.0 - np.exp(ey) - (K - 1) * ek)
    return dW, float(dubar)


def raman_f_ik_scaled(i, k, ubar, X, y, W, mu=0.0, beta=None):
    """:func:`raman_f_ik` divided by ``N`` (per-datapoint convention)."""
    return raman_f_ik(i, k, ubar, X, y, W, mu=mu, beta=beta) / _as_X(X).shape[0]


def raman_f_ik_grad_scaled(i, k, ubar, X, y, W, mu=0.0, beta=None):
    """:func:`raman_f_ik_grad` divided by ``N``."""
    N = _as_X(X).shape[0]
    dW, du = raman_f_ik_grad(i, k, ubar, X, y, W, mu=mu, beta=beta)
    return dW / N, du / N


def raman_f_ik_grad_original_code_scaled(i, k, ubar, X, y, W, mu=0.0, beta=None, scope="support"):
    """:func:`raman_f_ik_grad_original_code` divided by ``N``: the step direction of
    the original code (which had no factor ``N``)."""
    N = _as_X(X).shape[0]
    dW, du = raman_f_ik_grad_original_code(i, k, ubar, X, y, W, mu=mu, beta=beta, scope=scope)
    return dW / N, du / N


def raman_umax_reset_value(i, ks, X, y, W):
    """U-max reset target on Raman's formulation:
    ``log(exp(s_{i,y_i}) + sum_{k in S} exp(s_ik))`` (``= umax_reset_value + s_{i,y_i}``)."""
    X, y, W, N, D, K = _check(X, y, W)
    i = _check_index(i, N)
    yi = int(y[i])
    ks = _check_classes(ks, K, yi)
    x = _row(X, i)
    return float(logsumexp(W[np.concatenate(([yi], ks))] @ x))


# ---------------------------------------------------------------------------
# section 7: biased baselines, per datapoint
# ---------------------------------------------------------------------------

def _point(x, y, W, ks):
    W = _as_W(W)
    K, D = W.shape
    x = _vec(x, D)
    if not (isinstance(y, (int, np.integer)) and 0 <= y < K):
        raise ValueError(f"label y must be an integer in 0..K-1 = 0..{K - 1}; got {y!r}")
    ks = _check_classes(ks, K, int(y))
    return x, int(y), W, K, D, ks


def ove_loss(x, y, W, ks, weight):
    """One-vs-each estimate for one datapoint (T-4, T-15):
    ``weight * sum_j softplus(s_{k_j} - s_y)``.

    With ``ks`` uniform over classes ``!= y`` and ``weight = (K-1)/m`` it is an
    unbiased estimate of ``sum_{k != y} softplus(s_k - s_y)``.

    Parameters
    ----------
    x : 1-D array, length D (a dense datapoint)
    y : int, its label
    W : ndarray (K, D)
    ks : 1-D int array of sampled classes (none equal to ``y``; repeats count twice)
    weight : float, ``r = (K-1)/m``

    Returns
    -------
    float
    """
    x, y, W, K, D, ks = _point(x, y, W, ks)
    s = W @ x
    return float(weight * np.sum(softplus(s[ks] - s[y])))


def ove_grad(x, y, W, ks, weight):
    """Gradient of :func:`ove_loss` in ``W`` (T-16), shape (K, D).

    ``grad_{w_{k_j}} += r sigma(s_{k_j} - s_y) x``,
    ``grad_{w_y} = -r sum_j sigma(s_{k_j} - s_y) x``.
    """
    x, y, W, K, D, ks = _point(x, y, W, ks)
    s = W @ x
    c = weight * expit(s[ks] - s[y])
    g = np.zeros(K)
    np.add.at(g, ks, c)
    g[y] -= c.sum()
    return np.outer(g, x)


def _is_logits(s, y, ks, weight, weighted):
    if weighted:
        if not weight > 0:
            raise ValueError(f"weight must be > 0 for the weighted IS loss; got {weight}")
        return np.concatenate(([s[y]], s[ks] + np.log(weight)))
    return np.concatenate(([s[y]], s[ks]))


def is_loss(x, y, W, ks, weight, weighted=True):
    """Importance-sampling / sampled-softmax loss for one datapoint (Bengio & Senecal).

    ``weighted=True``:  ``-s_y + log( exp(s_y) + r sum_j exp(s_{k_j}) )``, ``r = weight``.
    ``weighted=False``: ``-s_y + log( exp(s_y) + sum_j exp(s_{k_j}) )`` -- the
    TensorFlow ``sampled_softmax_loss`` variant with a uniform sampler, whose ``log Q``
    correction is the same for every logit and cancels (``weight`` is ignored).

    With ``ks`` = all classes ``!= y`` and ``weight = 1`` both equal the exact NLL.
    """
    x, y, W, K, D, ks = _point(x, y, W, ks)
    s = W @ x
    z = _is_logits(s, y, ks, weight, weighted)
    return float(logsumexp(z) - s[y])


def is_grad(x, y, W, ks, weight, weighted=True):
    """Gradient of :func:`is_loss` in ``W``, shape (K, D).

    With ``q = softmax(s_y, s_{k_1} + log r, ...)``: ``grad_{w_y} = (q_0 - 1) x``,
    ``grad_{w_{k_j}} += q_j x``.
    """
    x, y, W, K, D, ks = _point(x, y, W, ks)
    s = W @ x
    z = _is_logits(s, y, ks, weight, weighted)
    q = np.exp(z - logsumexp(z))
    g = np.zeros(K)
    g[y] += q[0] - 1.0
    np.add.at(g, ks, q[1:])
    return np.outer(g, x)


def nce_loss(x, y, W, ks, K):
    """Noise-contrastive estimation loss for one datapoint (Mnih & Teh 2012).

    Noise ``q = 1/K``, ``m = len(ks)`` noise samples, ``c = log(m q) = log(m/K)``:

    ``-log sigma(s_y - c) - sum_j log sigma(-(s_{k_j} - c))
    = softplus(c - s_y) + sum_j softplus(s_{k_j} - c)``
    """
    x, y, W, Kw, D, ks = _point(x, y, W, ks)
    if K < 2:
        raise ValueError(f"K must be at least 2; got {K}")
    s = W @ x
    c = np.log(ks.size / K)
    return float(softplus(c - s[y]) + np.sum(softplus(s[ks] - c)))


def nce_grad(x, y, W, ks, K):
    """Gradient of :func:`nce_loss` in ``W``, shape (K_W, D).

    ``grad_{w_y} = (sigma(s_y - c) - 1) x``, ``grad_{w_{k_j}} += sigma(s_{k_j} - c) x``.
    """
    x, y, W, Kw, D, ks = _point(x, y, W, ks)
    if K < 2:
        raise ValueError(f"K must be at least 2; got {K}")
    s = W @ x
    c = np.log(ks.size / K)
    g = np.zeros(Kw)
    g[y] = expit(s[y] - c) - 1.0
    np.add.at(g, ks, expit(s[ks] - c))
    return np.outer(g, x)


# exact full sums ------------------------------------------------------------

def ove_per_point(X, y, W):
    """Exact one-vs-each term ``sum_{k != y_i} softplus(s_ik - s_{i, y_i})`` per point.

    By (T-4) (``p(y|x) >= prod_{k != y} sigma(s_y - s_k)``) it is ``>=``
    :func:`nll_per_point` for every point, with equality when ``K = 2``.

    Returns
    -------
    ndarray, shape (N,)
    """
    X, y, W, N, D, K = _check(X, y, W)
    Sp = softplus(_deltas(scores(X, W), y))
    Sp[np.arange(N), y] = 0.0
    return Sp.sum(axis=1)


def ove_objective(X, y, W):
    """Mean exact OVE objective ``(1/N) sum_i sum_{k != y_i} softplus(s_ik - s_{i,y_i})``.

    An upper bound on :func:`log_loss` (the OVE lower bound on the likelihood, T-15).
    """
    return float(np.mean(ove_per_point(X, y, W)))


def ove_objective_grad(X, y, W):
    """Gradient of :func:`ove_objective` in ``W``, shape (K, D)."""
    X, y, W, N, D, K = _check(X, y, W)
    G = expit(_deltas(scores(X, W), y))
    G[np.arange(N), y] = 0.0
    G[np.arange(N), y] = -G.sum(axis=1)
    return np.asarray(X.T @ G, dtype=np.float64).T / N


# ---------------------------------------------------------------------------
# section 8: Bouchard's bound
# ---------------------------------------------------------------------------

def bouchard_bound(X, y, W, alpha):
    """Bouchard's upper bound on the mean NLL (T-11, T-12), one ``alpha_i`` per point.

    From ``log sum_k e^{s_k} <= alpha + sum_k log(1 + e^{s_k - alpha})``:

    ``B(W, alpha) = (1/N) sum_i [ -s_{i,y_i} + alpha_i + sum_k softplus(s_ik - alpha_i) ]
    >= log_loss(X, y, W)`` for every ``alpha``.

    Parameters
    ----------
    alpha : ndarray, shape (N,)

    Returns
    -------
    float
    """
    X, y, W, N, D, K = _check(X, y, W)
    alpha = _as_u(alpha, N, "alpha")
    S = scores(X, W)
    return float(np.mean(-_true_scores(S, y) + alpha + softplus(S - alpha[:, None]).sum(axis=1)))


def bouchard_grad(X, y, W, alpha):
    """Gradient of :func:`bouchard_bound`.

    ``dB/dw_k = (1/N) sum_i [ sigma(s_ik - alpha_i) - 1[k = y_i] ] x_i``,
    ``dB/dalpha_i = (1/N) [ 1 - sum_k sigma(s_ik - alpha_i) ]``.

    Returns
    -------
    dW : ndarray (K, D); dalpha : ndarray (N,)
    """
    X, y, W, N, D, K = _check(X, y, W)
    alpha = _as_u(alpha, N, "alpha")
    Sig = expit(scores(X, W) - alpha[:, None])
    dalpha = (1.0 - Sig.sum(axis=1)) / N
    Sig[np.arange(N), y] -= 1.0
    dW = np.asarray(X.T @ Sig, dtype=np.float64).T / N
    return dW, dalpha


def bouchard_optimal_alpha(X, W, tol=0.0, max_iter=200):
    """The ``alpha_i`` minimising Bouchard's bound for fixed ``W``.

    Solves ``sum_k sigma(s_ik - alpha_i) = 1`` (strictly decreasing in ``alpha_i``) by
    bisection on the bracket ``[min_k s_ik, max_k s_ik + log K]``: at the left end
    every term is ``>= 1/2`` (the sum is ``>= K/2 >= 1``), at the right end every term
    is ``<= 1/(K+1)``.

    Parameters
    ----------
    X : ndarray or sparse, (N, D); W : ndarray (K, D)
    tol : float, stop when every bracket is narrower than this (0: until the
        bracket stops shrinking in float64)
    max_iter : int

    Returns
    -------
    ndarray, shape (N,)
    """
    S = scores(X, W)
    K = S.shape[1]
    lo = S.min(axis=1)
    hi = S.max(axis=1) + np.log(K)
    for _ in range(max_iter):
        mid = 0.5 * (lo + hi)
        g = expit(S - mid[:, None]).sum(axis=1) - 1.0
        pos = g > 0
        new_lo = np.where(pos, mid, lo)
        new_hi = np.where(pos, hi, mid)
        if np.array_equal(new_lo, lo) and np.array_equal(new_hi, hi):
            break
        lo, hi = new_lo, new_hi
        if np.all(hi - lo <= tol):
            break
    return 0.5 * (lo + hi)


def bouchard_alpha_k2(f1, f2):
    """Optimal Bouchard ``alpha`` for ``K = 2`` (T, Proposition 3): ``(f1 + f2)/2``.

    At ``alpha = (f1+f2)/2``, ``sigma(f1 - alpha) + sigma(f2 - alpha) = 1`` exactly.
    """
    return 0.5 * (np.asarray(f1, dtype=np.float64) + np.asarray(f2, dtype=np.float64))
