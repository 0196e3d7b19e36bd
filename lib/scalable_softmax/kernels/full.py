"""The numba kernels of the full-batch objectives of the L-BFGS methods (``"exact"``,
``"bouchard"``, ``"ove-exact"``). :mod:`scalable_softmax.methods.full` holds the
trainers, the plain NumPy ``full_objective_reference``, and the description of the
blocked layout these kernels use. (Minibatch softmax SGD's kernels, both layouts, are in
:mod:`scalable_softmax.kernels.softmax_sgd`.)

``full_pass(indptr, indices, data, y, WT, GT, mode, alpha, block, nchunk, max_iter)``
    the value and gradient of a full-batch objective, ``mode`` one of ``KIND_MODES``.
``solve_alpha(s, a0, max_iter)``
    Bouchard's optimal ``alpha`` of one row of scores.
``KIND_MODES``
    objective name (``"softmax"``, ``"bouchard"``, ``"ove"``) -> ``mode``.

The others are the pieces these are built from; all are numba code.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from scalable_softmax.kernels.common import JIT, PJIT
from scalable_softmax.kernels.common import sigmoid as _sigmoid
from scalable_softmax.kernels.common import softplus as _softplus

__all__ = ["KIND_MODES", "alpha_g", "full_pass", "row_coef", "solve_alpha"]

#: objective kind -> mode of the kernel :func:`full_pass`
KIND_MODES = {"softmax": 0, "bouchard": 1, "ove": 2}


@numba.njit(**JIT)
def alpha_g(s, k1, s2, a):
    """``g(a) = log sum_{k != k1} sigma(s_k - a) - log sigma(a - s_k1)`` and ``g'(a)``.

    ``g`` has the root of ``sum_k sigma(s_k - a) = 1`` (``k1`` = the largest score,
    ``s2`` the largest of the others), written so that no ``1 - sigma`` cancels:
    accurate even when the scores are hundreds apart. For ``a >= s2`` (always, inside
    the bracket of :func:`solve_alpha`) every ``t_k = s_k - a``, ``k != k1``, is
    ``<= t_max = s2 - a <= 0``; with ``u_k = exp(t_k - t_max)`` in ``(0, 1]`` and
    ``v_k = exp(t_k) = exp(t_max) u_k <= 1``,

        sum_{k != k1} sigma(t_k) = exp(t_max) B,   B = sum u_k / (1 + v_k) >= 1/2,
        d/da log(that) = -(1/B) sum u_k / (1 + v_k)^2,

    one exponential per class (the value can underflow only in ``u_k``, harmlessly)."""
    K = s.shape[0]
    tmax = s2 - a
    etm = math.exp(tmax)
    B = 0.0
    dB = 0.0
    for k in range(K):
        if k != k1:
            u = math.exp(s[k] - s2)
            r = 1.0 / (1.0 + etm * u)
            B += u * r
            dB += u * r * r
    return tmax + math.log(B) + _softplus(s[k1] - a), -dB / B - _sigmoid(s[k1] - a)


@numba.njit(**JIT)
def solve_alpha(s, a0, max_iter):
    """The optimal Bouchard ``alpha`` for scores ``s``: the root of
    ``sum_k sigma(s_k - alpha) = 1`` (strictly decreasing in ``alpha``).

    Bracket ``[(s1 + s2)/2, s1 + log(K-1)]`` (``s1 >= s2`` the two largest scores:
    the two largest terms already sum to 1 at the left end; every term is
    ``<= 1/K`` at the right end). Safeguarded Newton on the log form
    :func:`alpha_g` (slope ``<= -1/2`` inside the bracket), started from ``a0``
    when it lies inside, bisection when a step leaves the bracket. ``K = 2``:
    ``(s1 + s2)/2`` exactly. Returns ``(alpha, iterations)``.
    """
    K = s.shape[0]
    k1 = 0
    for k in range(1, K):
        if s[k] > s[k1]:
            k1 = k
    s2 = -np.inf
    for k in range(K):
        if k != k1 and s[k] > s2:
            s2 = s[k]
    lo = 0.5 * (s[k1] + s2)
    hi = s[k1] + math.log(K - 1.0)
    if K == 2 or not hi > lo:
        return lo, 0
    a = a0 if (a0 > lo and a0 < hi) else 0.5 * (lo + hi)
    for it in range(1, max_iter + 1):
        g, dg = alpha_g(s, k1, s2, a)
        if g == 0.0:
            return a, it
        if g > 0.0:
            lo = a
        else:
            hi = a
        tol = 1e-15 * max(1.0, abs(a))
        if dg < 0.0:
            step = g / dg
            # converged: the Newton step is below the tolerance (|g'| >= 1/2 in the
            # bracket, so |a - root| <= 2 |g| is as small). Tested before the bracket
            # check: a step that rounds to 0 leaves a_new == a == lo (or hi), which
            # the strict test below would turn into a needless bisection step.
            if abs(step) <= tol:
                return a - step, it
            a_new = a - step
        else:
            a_new = lo
        if not (a_new > lo and a_new < hi):
            a_new = 0.5 * (lo + hi)  # bisection fallback
        if abs(a_new - a) <= tol or hi - lo <= tol:
            return a_new, it
        a = a_new
    return a, max_iter


@numba.njit(**JIT)
def row_coef(st, yi, mode, alpha, i, max_iter):
    """Turn scores into ``d loss_i / d s`` in place; return ``(loss_i, iterations)``.

    ``mode``: 0 softmax NLL, 1 Bouchard's bound at the optimal ``alpha_i`` (stored in
    ``alpha[i]``), 2 the One-vs-Each bound ``sum_{k != y} softplus(s_k - s_y)``."""
    K = st.shape[0]
    if mode == 2:
        sy = st[yi]
        loss = 0.0
        tot = 0.0
        for k in range(K):
            if k != yi:
                d = st[k] - sy
                loss += _softplus(d)
                g = _sigmoid(d)
                st[k] = g
                tot += g
        st[yi] = -tot
        return loss, 0
    if mode == 0:
        mx = st[0]
        for k in range(1, K):
            if st[k] > mx:
                mx = st[k]
        z = 0.0
        for k in range(K):
            z += math.exp(st[k] - mx)
        lse = mx + math.log(z)
        loss = lse - st[yi]
        for k in range(K):
            st[k] = math.exp(st[k] - lse)
        st[yi] -= 1.0
        return loss, 0
    a, it = solve_alpha(st, alpha[i], max_iter)
    alpha[i] = a
    loss = a - st[yi]
    for k in range(K):
        loss += _softplus(st[k] - a)
        st[k] = _sigmoid(st[k] - a)
    st[yi] -= 1.0
    return loss, it


@numba.njit(**PJIT)
def full_pass(indptr, indices, data, y, WT, GT, mode, alpha, block, nchunk, max_iter):
    """Sum over datapoints of the loss (``mode`` 0: softmax NLL, 1: Bouchard's bound at
    the optimal ``alpha``, 2: the One-vs-Each bound) and its gradient ``GT`` (``D x K``,
    overwritten). Blocks of ``min(block, N)`` rows: scores and ``d loss / d s`` in
    parallel over the block's rows, then the gradient ``GT[f] += x_if (d loss_i / d s_i)``
    in parallel over ``nchunk`` slices of the classes (``nchunk = 1``: one serial sweep
    over all ``K`` classes). Every element is summed in the same order whatever the
    number of threads. Returns ``(loss_sum, alpha_iterations)``."""
    D, K = WT.shape
    N = y.shape[0]
    block = max(1, min(block, N))
    for q in numba.prange(nchunk):
        for f in range(q * D // nchunk, (q + 1) * D // nchunk):
            for k in range(K):
                GT[f, k] = 0.0
    S = np.empty((block, K))
    L = np.zeros(block)
    its = np.zeros(block, dtype=np.int64)
    total = 0.0
    total_it = 0
    for b0 in range(0, N, block):
        nb = min(block, N - b0)
        for t in numba.prange(nb):
            i = b0 + t
            for k in range(K):
                S[t, k] = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                v = data[p]
                f = indices[p]
                for k in range(K):
                    S[t, k] += v * WT[f, k]
            L[t], its[t] = row_coef(S[t], y[i], mode, alpha, i, max_iter)
        for t in range(nb):
            total += L[t]
            total_it += its[t]
        if nchunk == 1:
            for t in range(nb):
                i = b0 + t
                for p in range(indptr[i], indptr[i + 1]):
                    v = data[p]
                    f = indices[p]
                    for k in range(K):
                        GT[f, k] += v * S[t, k]
        else:
            for q in numba.prange(nchunk):
                k0 = q * K // nchunk
                k1 = (q + 1) * K // nchunk
                for t in range(nb):
                    i = b0 + t
                    for p in range(indptr[i], indptr[i + 1]):
                        v = data[p]
                        f = indices[p]
                        for k in range(k0, k1):
                            GT[f, k] += v * S[t, k]
    return total, total_it
