"""The numba kernels of the implicit SGD method (``"implicit"``;
:mod:`scalable_softmax.methods.implicit` holds the trainer, the plain NumPy
``reference_step`` and ``implicit_epoch_reference``, and the derivation of the step these
kernels take).

``solve_reduced(dt, ut, eta, km1, s, tol)``
    the root of the one-dimensional problem of one step: ``(u, a, evaluations)``.
``prop4_bound(dt, ut, eta, km1, s, eps)``
    the bound of Proposition 4 on the evaluations of ``solve_reduced``.
``apply_step``, ``apply_u_only``
    one step on ``(w_k, w_y, u_i)``, and a step on ``u_i`` alone (drawn class = label).
``epoch_simple``, ``epoch_fast``
    one pass over an order, plain and software-pipelined (bit-identical).
``draw_class``, ``draw_classes_epoch``
    the classes the epoch kernels draw.
``row_sqnorms``, ``fill``, ``fold_row``, ``g_eval``, ``solve_core``
    the smaller pieces. All are numba code.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from scalable_softmax.kernels.common import JIT, inner, prefetch_ahead
from scalable_softmax.kernels.common import prefetch_r as _prefetch_r
from scalable_softmax.kernels.common import prefetch_w as _prefetch_w
from scalable_softmax.kernels.common import softplus as _softplus
from scalable_softmax.kernels.lambertw import lambertw_exp

__all__ = ["apply_step", "apply_u_only", "draw_class", "draw_classes_epoch", "epoch_fast",
           "epoch_simple", "fill", "fold_row", "g_eval", "prop4_bound", "row_sqnorms",
           "solve_core", "solve_reduced"]

#: hard cap on root-finder evaluations (never reached: the bisection fallback
#: halves the bracket at least every other evaluation)
_MAX_EVALS = 400
#: largest final root step after which a(u) is updated by its Taylor expansion
_TAYLOR_MAX = 3e-4
#: fold a lazy ridge scale into its row when it falls below this
_SCALE_FLOOR = 1e-150


@inner(**JIT)
def g_eval(u, ut, alpha, lc, dt, inv_s, T0):
    """``g(u)``, its first three derivatives, and ``a(u)``.

    ``alpha = 2η``, ``lc = log(2η(K-1)s')``, ``dt = δ₀``, ``inv_s = 1/s'``. For an
    empty row (``inv_s = 0``) ``a = 0`` and ``a/s'`` is replaced by its limit
    ``T0 e^{-u}`` with ``T0 = 2η(K-1)e^{δ₀}``.
    """
    e = math.exp(-u)
    ae = alpha * e
    if inv_s > 0.0:
        a = lambertw_exp(dt - u + lc)
        T = a * inv_s
        r = 1.0 / (1.0 + a)
        r2 = r * r
        T1 = T * r                   # -dT/du
        T2 = T1 * r2                 # g'' = -ae - T2
        T3 = T2 * r2 * (1.0 - 2.0 * a)
    else:
        a = 0.0
        T = T0 * e
        T1 = T
        T2 = T
        T3 = T
    g = alpha * (1.0 - e) + 2.0 * (u - ut) - T
    return g, ae + 2.0 + T1, -ae - T2, ae + T3, a


@inner(**JIT)
def solve_core(dt, ut, alpha, km1, lkm1, s, lc, tol):
    """Root of ``g`` (see :func:`solve_reduced`); ``lkm1 = log(K-1)``,
    ``lc = log(2η(K-1)s)`` precomputed by the caller. Returns ``(u, a, evals)``."""
    if s > 0.0:
        inv_s = 1.0 / s
        T0 = 0.0
    else:
        inv_s = 0.0
        T0 = alpha * km1 * math.exp(dt)
    # --- g at ũ decides the side of the bracket (Appendix F.1) ------------------------
    u = ut
    g, g1, g2, g3, a = g_eval(u, ut, alpha, lc, dt, inv_s, T0)
    evals = 1
    if g == 0.0:
        return u, a, evals
    slack = 1e-14 * (1.0 + abs(dt) + alpha * s + lkm1 + abs(ut))
    if g < 0.0:
        lo = ut
        lo_checked = True
        hi = np.inf  # log(1 + (K-1)e^{δ₀}), computed only if a bisection needs it
    else:
        hi = ut
        lo_checked = False
        lo = lkm1 + dt - alpha * s - slack
        if lo < 0.0:
            lo = 0.0
        if lo > hi:
            lo = hi
    zero_checked = False
    d_old = np.inf
    d_older = np.inf
    while True:
        scale = abs(u) if abs(u) > 1.0 else 1.0
        # Halley step (Newton's when Halley's denominator is not safely positive)
        ig1 = 1.0 / g1
        q = g2 * ig1
        den = 1.0 - 0.5 * g * q * ig1         # Halley's denominator / g'
        if den < 0.5:
            d = -g * ig1
        else:
            d = -g * ig1 / den
        ad = abs(d)
        # predicted error after the step (cubic convergence, safety factor 2)
        if ad < 0.1:
            err = (0.5 * q * q + abs(g3) * ig1 * (1.0 / 3.0)) * ad * ad * ad
        else:
            err = np.inf
        if err <= tol * scale or ad <= 0.5 * tol * scale:
            un = u + d
            un = lo if un < lo else (hi if un > hi else un)
            if un >= 0.0 and abs(un - u) <= _TAYLOR_MAX and s > 0.0:
                # a(un) by Taylor from a(u) (saves a Lambert W): with r = 1/(1+a), the
                # derivatives in u are -a r, a r^3, -a (1 - 2a) r^5; relative error
                # ~ d^4 < 1e-14 (checked in the tests)
                dd = un - u
                r = 1.0 / (1.0 + a)
                r2 = r * r
                a = a * (1.0 - dd * r * (1.0 - dd * r2 * (0.5 - dd * (1.0 / 6.0) * (
                    1.0 - 2.0 * a) * r2)))
                return un, a, evals
            u = un
            break
        un = u + d
        if not (lo < un < hi) or ad > 0.5 * d_older:
            # the step leaves the bracket, or is too slow: bisect
            if hi == np.inf:
                hi = _softplus(lkm1 + dt) + slack
                if hi <= lo:
                    hi = lo + slack
            if lo < un < hi and ad <= 0.5 * d_older:
                pass  # inside the bracket after all
            elif lo == 0.0 and not lo_checked and not zero_checked:
                un = 0.0  # try the constraint: u = 0 is optimal when g(0) >= 0
            else:
                un = 0.5 * (lo + hi)
                if hi - lo <= tol * scale:
                    u = un
                    break
        d_older = d_old
        d_old = abs(un - u)
        u = un
        g, g1, g2, g3, a = g_eval(u, ut, alpha, lc, dt, inv_s, T0)
        evals += 1
        if u == 0.0:
            zero_checked = True
            if g >= 0.0:
                return 0.0, a, evals
        if g == 0.0 or evals >= _MAX_EVALS or not (g == g):
            if u >= 0.0:
                return u, a, evals
            break
        if g < 0.0:
            lo = u
            lo_checked = True
        else:
            hi = u
    if u < 0.0:
        u = 0.0
    a = lambertw_exp(dt - u + lc) if s > 0.0 else 0.0
    return u, a, evals


@numba.njit(**JIT)
def solve_reduced(dt, ut, eta, km1, s, tol):
    """Solve the reduced implicit problem in ``(a, u)`` (numba kernel).

    Minimises ``2η(u + e^{-u} + (K-1)e^{dt-a-u}) + (u-ut)² + a²/(2s)`` over
    ``u >= 0``, ``a >= 0``; the optimal ``a`` is ``a(u) = W0(exp(dt - u +
    log(2η(K-1)s)))``.

    Parameters
    ----------
    dt : float
        ``δ₀`` (``δ̃ = x·(w̃_k - w̃_y)`` when ``μ = 0``).
    ut : float
        ``ũ``, the current ``u_i``.
    eta : float
        Learning rate ``η > 0`` (per-datapoint units).
    km1 : float
        ``K - 1 >= 1``.
    s : float
        ``s' = ||x||² H / 2`` (``||x||²`` when ``μ = 0``), ``>= 0``.
    tol : float
        Accuracy of ``u``: ``|u - u*| <= tol * max(1, |u*|)``.

    Returns
    -------
    u : float
    a : float
        ``a(u) >= 0``.
    evals : int
        Number of evaluations of ``g`` (each one Lambert W).
    """
    alpha = 2.0 * eta
    lkm1 = math.log(km1)
    lc = math.log(alpha) + lkm1 + math.log(s) if s > 0.0 else 0.0
    return solve_core(dt, ut, alpha, km1, lkm1, s, lc, tol)


@numba.njit(**JIT)
def prop4_bound(dt, ut, eta, km1, s, eps):
    """Proposition 4's bound on bisection evaluations for accuracy ``eps``, as printed
    in the paper: ``log2(1/eps) + log2(|δ̃ - ũ| + 2η||x||² + log(K-1))``.

    Note: Appendix F.1's own bracket width in the case ``g(ũ) < 0`` is
    ``log(2(K-1)) + |δ̃ - ũ|``; the printed bound drops the ``log 2`` and can be
    ``<= 0`` (e.g. ``K = 2``, ``δ̃ = ũ``, tiny ``η``), although one evaluation (at
    ``ũ``) is always needed. Returns ``-inf`` when the logarithm's argument is 0.
    """
    arg = abs(dt - ut) + 2.0 * eta * s + math.log(km1)
    if arg <= 0.0:
        return -np.inf
    return math.log2(1.0 / eps) + math.log2(arg)


#: pipeline distances of the fast kernel (steps ahead): rows of W, the CSR row of x,
#: the per-datapoint values (indptr, y, u, ||x||^2)
_LW = 1
_LX = 2
_LI = 4
_RING = 8          # power of two > _LW
_MASK = _RING - 1


@inner(**JIT)
def apply_step(indptr, indices, data, sqnorm, W, u, scale, rho, i, yi, k, eta, km1,
               lkm1, lc_base, tol, ridge, q, q1, kn, yn):
    """Apply the implicit step for datapoint ``i``, label ``yi``, class ``k`` in place.
    Returns ``(evals, ok)``; ``ok`` is False if a non-finite value appeared.

    ``W[kn, indices[q:q1]]`` and ``W[yn, indices[q:q1]]`` (a later step's rows) are
    prefetched, interleaved with this step's dot products (``q = q1``: none)."""
    start = indptr[i]
    end = indptr[i + 1]
    dk = 0.0
    dy = 0.0
    for p in range(start, end):
        j = indices[p]
        v = data[p]
        dk += v * W[k, j]
        dy += v * W[yi, j]
        if q < q1:
            c = indices[q]
            _prefetch_w(W, kn, c)
            _prefetch_w(W, yn, c)
            q += 1
    for qr in range(q, q1):
        c = indices[qr]
        _prefetch_w(W, kn, c)
        _prefetch_w(W, yn, c)
    s = sqnorm[i]
    ut = u[i]
    if ridge:
        sk = scale[k]
        sy = scale[yi]
        Ak = 1.0 + eta * rho[k]
        Ay = 1.0 + eta * rho[yi]
        H = 1.0 / Ak + 1.0 / Ay
        delta0 = sk * dk / Ak - sy * dy / Ay
        sp_ = 0.5 * s * H
    else:
        delta0 = dk - dy
        H = 2.0
        sp_ = s
    lc = lc_base + math.log(sp_) if sp_ > 0.0 else 0.0
    un, a, evals = solve_core(delta0, ut, 2.0 * eta, km1, lkm1, sp_, lc, tol)
    c = a / (s * H) if s > 0.0 else 0.0
    if not (math.isfinite(un) and math.isfinite(c)):
        u[i] = un
        return evals, False
    u[i] = un
    if ridge:
        ck = c / sk
        cy = c / sy
        for p in range(start, end):
            j = indices[p]
            v = data[p]
            W[k, j] -= ck * v
            W[yi, j] += cy * v
        sk /= Ak
        sy /= Ay
        scale[k] = sk
        scale[yi] = sy
        if sk < _SCALE_FLOOR:
            fold_row(W, scale, k)
        if sy < _SCALE_FLOOR:
            fold_row(W, scale, yi)
    else:
        if c != 0.0:
            for p in range(start, end):
                j = indices[p]
                v = c * data[p]
                W[k, j] -= v
                W[yi, j] += v
    return evals, True


@inner(**JIT)
def apply_u_only(sqnorm, u, i, eta, km1, lkm1, lc_base, tol):
    """The u-only step (``sample_from="all"``, drawn class = label): ``u_i`` becomes
    the root of ``g`` with ``δ₀ = 0`` and ``s' = ||x_i||²``; ``W`` is not touched.
    Returns ``(evals, ok)`` like :func:`apply_step`."""
    s = sqnorm[i]
    lc = lc_base + math.log(s) if s > 0.0 else 0.0
    un, a, evals = solve_core(0.0, u[i], 2.0 * eta, km1, lkm1, s, lc, tol)
    u[i] = un
    return evals, math.isfinite(un)


@inner(**JIT)
def draw_class(yi, K, sample_all):
    """The class of one step, from numba's global NumPy random state: uniform on
    ``{0..K-1} \\ {yi}`` (``randint(0, K-1)`` shifted past ``yi``) or, when
    ``sample_all``, uniform on ``{0..K-1}`` (``randint(0, K)``)."""
    if sample_all:
        return np.random.randint(0, K)
    k = np.random.randint(0, K - 1)
    if k >= yi:
        k += 1
    return k


@numba.njit(**JIT)
def draw_classes_epoch(seed, order, y, K, sample_all):
    out = np.empty(order.shape[0], np.int64)
    np.random.seed(seed)
    for t in range(order.shape[0]):
        out[t] = draw_class(y[order[t]], K, sample_all)
    return out


@inner(**JIT)
def fold_row(W, scale, j):
    sj = scale[j]
    for q in range(W.shape[1]):
        W[j, q] *= sj
    scale[j] = 1.0


@numba.njit(**JIT)
def epoch_simple(indptr, indices, data, y, sqnorm, W, u, scale, rho, order, eta, K,
                 tol, seed, ridge, sample_all):
    """Straightforward epoch: one step after the other, no prefetching.

    Returns ``(steps, diverged, total_evals, max_evals, u_only_steps)``."""
    np.random.seed(seed)
    km1 = K - 1.0
    lkm1 = math.log(km1)
    lc_base = math.log(2.0 * eta) + lkm1
    n = order.shape[0]
    total = 0
    emax = 0
    diverged = -1
    steps = 0
    n_u = 0
    for t in range(n):
        i = order[t]
        yi = y[i]
        k = draw_class(yi, K, sample_all)
        if k == yi:
            evals, ok = apply_u_only(sqnorm, u, i, eta, km1, lkm1, lc_base, tol)
            n_u += 1
        else:
            evals, ok = apply_step(indptr, indices, data, sqnorm, W, u, scale, rho, i,
                                   yi, k, eta, km1, lkm1, lc_base, tol, ridge, 0, 0, 0,
                                   0)
        steps += 1
        total += evals
        if evals > emax:
            emax = evals
        if not ok:
            diverged = t
            break
    return steps, diverged, total, emax, n_u


@numba.njit(**JIT)
def epoch_fast(indptr, indices, data, y, sqnorm, W, u, scale, rho, order, eta, K, tol,
               seed, ridge, sample_all):
    """Pipelined epoch: while step ``t`` runs, the rows of ``W`` that step ``t + _LW``
    will touch are prefetched (its class is drawn ``_LW`` steps early; the draws stay
    in step order, so the random stream, and hence every result, is identical to
    :func:`epoch_simple`), as are the CSR row of step ``t + _LX`` and the
    per-datapoint values of step ``t + _LI``. Same arguments and results as
    :func:`epoch_simple`."""
    np.random.seed(seed)
    km1 = K - 1.0
    lkm1 = math.log(km1)
    lc_base = math.log(2.0 * eta) + lkm1
    n = order.shape[0]
    total = 0
    emax = 0
    diverged = -1
    steps = 0
    n_u = 0
    ring = np.empty(_RING, np.int64)
    for t in range(min(_LW, n)):
        ring[t & _MASK] = draw_class(y[order[t]], K, sample_all)
    for t in range(n):
        prefetch_ahead(indptr, indices, data, y, u, sqnorm, True, order, t, n, _LI, _LX, True)
        q = 0
        q1 = 0
        kk = 0
        yj = 0
        if t + _LW < n:
            j = order[t + _LW]
            yj = y[j]
            kk = draw_class(yj, K, sample_all)
            ring[(t + _LW) & _MASK] = kk
            q = indptr[j]
            q1 = indptr[j + 1]
            if ridge:
                _prefetch_r(scale, kk)
                _prefetch_r(scale, yj)
        i = order[t]
        yi = y[i]
        k = ring[t & _MASK]
        if k == yi:
            evals, ok = apply_u_only(sqnorm, u, i, eta, km1, lkm1, lc_base, tol)
            n_u += 1
        else:
            evals, ok = apply_step(indptr, indices, data, sqnorm, W, u, scale, rho, i,
                                   yi, k, eta, km1, lkm1, lc_base, tol, ridge, q, q1,
                                   kk, yj)
        steps += 1
        total += evals
        if evals > emax:
            emax = evals
        if not ok:
            diverged = t
            break
    return steps, diverged, total, emax, n_u


@numba.njit(**JIT)
def row_sqnorms(indptr, data):
    n = indptr.shape[0] - 1
    out = np.empty(n, np.float64)
    for i in range(n):
        acc = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            acc += data[p] * data[p]
        out[i] = acc
    return out


@numba.njit(**JIT)
def fill(W, value):
    # writes every page (untouched zero pages would make timings lie)
    for r in range(W.shape[0]):
        for q in range(W.shape[1]):
            W[r, q] = value
