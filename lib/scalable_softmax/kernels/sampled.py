"""The numba kernels of the sampled-softmax methods (``"ove"``, ``"nce"``, ``"is"``;
:mod:`scalable_softmax.methods.sampled` holds the trainers, the plain NumPy
``reference_step`` and the description of the sampling, the step and the kernels'
layout).

``sampled_epoch``, ``sampled_epoch_par``
    one epoch of minibatch steps, serial and with the deferred row updates in parallel.
``sample_epoch(y, order, K, n, m, shared, drop_hits, seed)``
    the classes an epoch draws (the kernels' own stream).
``hint_row(V, j, indices, q0, q1)``
    hint the lines of row ``j`` of ``V`` at the columns ``indices[q0:q1]``.
``hint_x(indptr, indices, data, i)``
    hint the lines of row ``i`` of ``X`` (its indices and values) for reading.
``hint_ahead(indptr, indices, data, order, t, pf, N)``
    hint the CSR lines of datapoint ``order[t + 2 pf]`` and the ``indptr`` entry of
    ``order[t + 3 pf]``.
``dot3(indices, data, p0, p1, V, j, k, l, q0, q1, hj, hk, hl)``
    the dot products of rows ``j``, ``k``, ``l`` of ``V`` with the non-zeros
    ``p0..p1``, hinting rows ``hj``, ``hk``, ``hl`` at ``indices[q0:q1]`` meanwhile
    (``dot2``, ``dot1``: the same for two rows and one).
``IJIT``, ``NJIT``
    the numba options of the inlined pieces and of the serial epoch kernel.

The others are the pieces the epoch kernels are built from; all are numba code.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from scalable_softmax.kernels.common import JIT, PJIT
from scalable_softmax.kernels.common import prefetch_r as _prefetch_r
from scalable_softmax.kernels.common import prefetch_w as _prefetch_w2
from scalable_softmax.kernels.common import rand_below as _rand_below
from scalable_softmax.kernels.common import seed_state as _seed_state
from scalable_softmax.kernels.common import sigmoid as _sigmoid

__all__ = ["IJIT", "NJIT", "apply_private", "axpy1", "axpy2", "axpy3", "axpy_list",
           "batch_count", "batch_reset", "coefs", "count_touched", "deferred_cols",
           "deferred_prepare", "deferred_rows", "dot1", "dot2", "dot3", "draw_batch",
           "floyd", "hint_ahead", "hint_row", "hint_x", "sample_epoch", "sampled_epoch",
           "sampled_epoch_par", "score", "shrink_row", "split", "step_size", "touch_rows"]

#: fold a lazy scale factor back into its row when it falls below this magnitude
_TINY_SCALE = 1e-100
#: flags of the kernels' helpers: inlined by numba itself. A call that LLVM does not
#: inline costs an atomic reference-count increment and decrement of every array
#: argument, more than the work of a short helper.
IJIT = dict(JIT, inline="always")
#: flags of the serial epoch kernel: it allocates nothing (scratch from the caller), so
#: it runs without numba's reference counting, whose atomic increments and decrements
#: of the arrays' counts the helpers' inlined calls otherwise pay for on every datapoint
NJIT = dict(JIT, _nrt=False)


@numba.njit(**IJIT)
def floyd(state, M, m, out, r, off):
    """Write a uniformly random ``m``-subset of ``{0..M-1}`` into ``out[r, off:off+m]``
    (Floyd's algorithm: exactly ``m`` draws of the splitmix64 generator ``state``);
    returns the new state."""
    first = M - m
    for j in range(first, M):
        state, t = _rand_below(state, j + 1)
        filled = off + (j - first)
        dup = False
        for q in range(off, filled):
            if out[r, q] == t:
                dup = True
                break
        out[r, filled] = j if dup else t
    return state


@numba.njit(**IJIT)
def draw_batch(state, y, order, b0, nb, K, m, shared, drop_hits, cls, ncls, smp, b):
    """Draw the classes of one minibatch (``order[b0:b0+nb]``) with the generator
    ``state``; returns the new state.

    Row ``cls[b, t]`` gets the label of datapoint ``t`` in column 0 and its
    ``ncls[b, t] - 1`` sampled classes after it; with ``shared``, ``smp[b]`` gets the
    batch's sample.
    """
    if shared:
        state = floyd(state, K, m, smp, b, 0)
    for t in range(nb):
        yt = y[order[b0 + t]]
        cls[b, t, 0] = yt
        if shared:
            c = 1
            for q in range(m):
                j = smp[b, q]
                if drop_hits and j == yt:
                    continue
                cls[b, t, c] = j
                c += 1
            ncls[b, t] = c
        else:
            state = floyd(state, K - 1, m, cls[b], t, 1)
            for q in range(1, m + 1):
                if cls[b, t, q] >= yt:
                    cls[b, t, q] += 1
            ncls[b, t] = m + 1
    return state


@numba.njit(**JIT)
def sample_epoch(y, order, K, n, m, shared, drop_hits, seed):
    N = order.shape[0]
    cls = np.zeros((1, n, m + 1), dtype=np.int64)
    ncls = np.zeros((1, n), dtype=np.int64)
    smp = np.zeros((1, m), dtype=np.int64)
    out = np.zeros((N, m + 1), dtype=np.int64)
    nout = np.zeros(N, dtype=np.int64)
    state = _seed_state(seed)
    for b0 in range(0, N, n):
        nb = min(n, N - b0)
        state = draw_batch(state, y, order, b0, nb, K, m, shared, drop_hits, cls, ncls, smp,
                           0)
        out[b0:b0 + nb] = cls[0, :nb]
        nout[b0:b0 + nb] = ncls[0, :nb]
    return out, nout


@numba.njit(**IJIT)
def coefs(kind, logr, c_nce, s, sr, nc, g, gr):
    """Derivatives ``g[gr, j] = d loss / d s[sr, j]`` for ``s[sr, 0] = s_y`` and the
    sampled classes' scores ``s[sr, 1:nc]``; the gradient in ``w_{cls[j]}`` is
    ``g[gr, j] x``. (Rows of 2-D arrays rather than 1-D views: numba reference-counts
    views, atomically, which costs more than this whole function.)"""
    if kind == 0:  # OVE: logr = log r
        r = math.exp(logr)
        tot = 0.0
        for j in range(1, nc):
            gj = r * _sigmoid(s[sr, j] - s[sr, 0])
            g[gr, j] = gj
            tot += gj
        g[gr, 0] = -tot
    elif kind == 1:  # NCE
        g[gr, 0] = -_sigmoid(c_nce - s[sr, 0])
        for j in range(1, nc):
            g[gr, j] = _sigmoid(s[sr, j] - c_nce)
    else:  # IS: logits s_y, s_k + log r
        mx = s[sr, 0]
        for j in range(1, nc):
            if s[sr, j] + logr > mx:
                mx = s[sr, j] + logr
        z = math.exp(s[sr, 0] - mx)
        g[gr, 0] = z
        for j in range(1, nc):
            e = math.exp(s[sr, j] + logr - mx)
            g[gr, j] = e
            z += e
        for j in range(nc):
            g[gr, j] /= z
        g[gr, 0] -= 1.0


@numba.njit(**IJIT)
def shrink_row(V, scale, j, factor):
    """Lazy ridge: ``w_j <- factor * w_j`` by updating its scale factor ``c_j``; the
    factor is folded into the row when ``c_j`` gets tiny or ``factor <= 0``.
    Returns 1 if the row became non-finite."""
    c_new = scale[j] * factor
    bad = 0
    if factor <= 0.0 or abs(c_new) < _TINY_SCALE:
        row = V[j]
        for f in range(row.shape[0]):
            v = row[f] * c_new
            row[f] = v
            if not abs(v) < np.inf:
                bad = 1
        c_new = 1.0
    scale[j] = c_new
    return bad


@numba.njit(**IJIT)
def count_touched(cls, ncls, nb, cnt, touched):
    """``cnt[j]`` = number of the batch's datapoints touching class ``j`` (a datapoint
    counts a class once); ``touched`` lists the distinct classes; returns how many."""
    nt = 0
    for t in range(nb):
        yt = cls[t, 0]
        for jj in range(ncls[t]):
            j = cls[t, jj]
            if jj > 0 and j == yt:  # a kept accidental hit: y is touched once
                continue
            if cnt[j] == 0:
                touched[nt] = j
                nt += 1
            cnt[j] += 1
    return nt


# Indices into V, indices and data are cast to unsigned integers (``_U``): numba then
# emits no negative-index wrap-around code, which otherwise doubles the instructions of
# these gather / scatter loops. Every dot product keeps the summation order of
# scalable_softmax.kernels.common.dot (four partial sums by position) and every element
# receives its updates in the order of the straightforward loop (datapoint by
# datapoint, class by class), so all the kernel variants give bit-identical results.
_U = np.uint64


@numba.njit(**IJIT)
def hint_row(V, j, indices, q0, q1):
    """Hint the lines of row ``j`` of ``V`` at the columns ``indices[q0:q1]``."""
    r = _U(j)
    q = _U(q0)
    while q < _U(q1):
        _prefetch_w2(V, r, _U(indices[q]))
        q += _U(1)


@numba.njit(**IJIT)
def hint_x(indptr, indices, data, i):
    """Hint the lines of row ``i`` of ``X`` (its indices and values) for reading."""
    p0 = indptr[i]
    p1 = indptr[i + 1]
    if p1 > p0:
        for p in range(p0, p1, 8):
            _prefetch_r(indices, _U(p))
            _prefetch_r(data, _U(p))
        _prefetch_r(indices, _U(p1 - 1))
        _prefetch_r(data, _U(p1 - 1))


@numba.njit(**IJIT)
def hint_ahead(indptr, indices, data, order, t, pf, N):
    """The CSR lines of datapoint ``order[t + 2 pf]`` and the ``indptr`` entry of
    ``order[t + 3 pf]``: the W rows of datapoint ``t + pf`` are hinted at its columns,
    so its columns must arrive first."""
    if t + 2 * pf < N:
        hint_x(indptr, indices, data, order[t + 2 * pf])
    if t + 3 * pf < N:
        _prefetch_r(indptr, _U(order[t + 3 * pf]))


@numba.njit(**IJIT)
def dot3(indices, data, p0, p1, V, j, k, l, q0, q1, hj, hk, hl):
    """The dot products of rows ``j``, ``k`` and ``l`` of ``V`` with the entries
    ``p0..p1``, each in :func:`scalable_softmax.kernels.common.dot`'s order, loading every index and
    value once; meanwhile the lines of rows ``hj``, ``hk``, ``hl`` (when ``>= 0``) at the columns
    ``indices[q0:q1]`` (another datapoint's) are hinted, four of each per four
    entries."""
    rj = _U(j)
    rk = _U(k)
    rl = _U(l)
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    b0 = 0.0
    b1 = 0.0
    b2 = 0.0
    b3 = 0.0
    e0 = 0.0
    e1 = 0.0
    e2 = 0.0
    e3 = 0.0
    p = _U(p0)
    pe = _U(p1)
    q = _U(q0)
    qe = _U(q1) if (hj >= 0 or hk >= 0 or hl >= 0) else _U(q0)
    uj = _U(max(hj, 0))
    uk = _U(max(hk, 0))
    ul = _U(max(hl, 0))
    while p + _U(4) <= pe:
        c0 = _U(indices[p])
        c1 = _U(indices[p + _U(1)])
        c2 = _U(indices[p + _U(2)])
        c3 = _U(indices[p + _U(3)])
        x0 = data[p]
        x1 = data[p + _U(1)]
        x2 = data[p + _U(2)]
        x3 = data[p + _U(3)]
        a0 += x0 * V[rj, c0]
        a1 += x1 * V[rj, c1]
        a2 += x2 * V[rj, c2]
        a3 += x3 * V[rj, c3]
        b0 += x0 * V[rk, c0]
        b1 += x1 * V[rk, c1]
        b2 += x2 * V[rk, c2]
        b3 += x3 * V[rk, c3]
        e0 += x0 * V[rl, c0]
        e1 += x1 * V[rl, c1]
        e2 += x2 * V[rl, c2]
        e3 += x3 * V[rl, c3]
        if q + _U(4) <= qe:
            d0 = _U(indices[q])
            d1 = _U(indices[q + _U(1)])
            d2 = _U(indices[q + _U(2)])
            d3 = _U(indices[q + _U(3)])
            if hj >= 0:
                _prefetch_w2(V, uj, d0)
                _prefetch_w2(V, uj, d1)
                _prefetch_w2(V, uj, d2)
                _prefetch_w2(V, uj, d3)
            if hk >= 0:
                _prefetch_w2(V, uk, d0)
                _prefetch_w2(V, uk, d1)
                _prefetch_w2(V, uk, d2)
                _prefetch_w2(V, uk, d3)
            if hl >= 0:
                _prefetch_w2(V, ul, d0)
                _prefetch_w2(V, ul, d1)
                _prefetch_w2(V, ul, d2)
                _prefetch_w2(V, ul, d3)
            q += _U(4)
        p += _U(4)
    while p < pe:
        c0 = _U(indices[p])
        x0 = data[p]
        a0 += x0 * V[rj, c0]
        b0 += x0 * V[rk, c0]
        e0 += x0 * V[rl, c0]
        p += _U(1)
    if q < qe:
        if hj >= 0:
            hint_row(V, hj, indices, q, qe)
        if hk >= 0:
            hint_row(V, hk, indices, q, qe)
        if hl >= 0:
            hint_row(V, hl, indices, q, qe)
    return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3), (e0 + e1) + (e2 + e3)


@numba.njit(**IJIT)
def dot2(indices, data, p0, p1, V, j, k, q0, q1, hj, hk):
    """The dot products of rows ``j`` and ``k`` of ``V`` with the entries ``p0..p1``,
    each in :func:`scalable_softmax.kernels.common.dot`'s order, loading every index and value once;
    meanwhile the lines of rows ``hj`` and ``hk`` (when ``>= 0``) at the columns ``indices[q0:q1]``
    (another datapoint's) are hinted, four of each per four entries."""
    rj = _U(j)
    rk = _U(k)
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    b0 = 0.0
    b1 = 0.0
    b2 = 0.0
    b3 = 0.0
    p = _U(p0)
    pe = _U(p1)
    q = _U(q0)
    qe = _U(q1) if (hj >= 0 or hk >= 0) else _U(q0)
    uj = _U(max(hj, 0))
    uk = _U(max(hk, 0))
    while p + _U(4) <= pe:
        c0 = _U(indices[p])
        c1 = _U(indices[p + _U(1)])
        c2 = _U(indices[p + _U(2)])
        c3 = _U(indices[p + _U(3)])
        x0 = data[p]
        x1 = data[p + _U(1)]
        x2 = data[p + _U(2)]
        x3 = data[p + _U(3)]
        a0 += x0 * V[rj, c0]
        a1 += x1 * V[rj, c1]
        a2 += x2 * V[rj, c2]
        a3 += x3 * V[rj, c3]
        b0 += x0 * V[rk, c0]
        b1 += x1 * V[rk, c1]
        b2 += x2 * V[rk, c2]
        b3 += x3 * V[rk, c3]
        if q + _U(4) <= qe:
            d0 = _U(indices[q])
            d1 = _U(indices[q + _U(1)])
            d2 = _U(indices[q + _U(2)])
            d3 = _U(indices[q + _U(3)])
            if hj >= 0:
                _prefetch_w2(V, uj, d0)
                _prefetch_w2(V, uj, d1)
                _prefetch_w2(V, uj, d2)
                _prefetch_w2(V, uj, d3)
            if hk >= 0:
                _prefetch_w2(V, uk, d0)
                _prefetch_w2(V, uk, d1)
                _prefetch_w2(V, uk, d2)
                _prefetch_w2(V, uk, d3)
            q += _U(4)
        p += _U(4)
    while p < pe:
        c0 = _U(indices[p])
        x0 = data[p]
        a0 += x0 * V[rj, c0]
        b0 += x0 * V[rk, c0]
        p += _U(1)
    if q < qe:
        if hj >= 0:
            hint_row(V, hj, indices, q, qe)
        if hk >= 0:
            hint_row(V, hk, indices, q, qe)
    return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3)


@numba.njit(**IJIT)
def dot1(indices, data, p0, p1, V, j, q0, q1, hj, hk):
    """:func:`dot2` for one row ``j`` (same hints)."""
    rj = _U(j)
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    p = _U(p0)
    pe = _U(p1)
    while p + _U(4) <= pe:
        a0 += data[p] * V[rj, _U(indices[p])]
        a1 += data[p + _U(1)] * V[rj, _U(indices[p + _U(1)])]
        a2 += data[p + _U(2)] * V[rj, _U(indices[p + _U(2)])]
        a3 += data[p + _U(3)] * V[rj, _U(indices[p + _U(3)])]
        p += _U(4)
    while p < pe:
        a0 += data[p] * V[rj, _U(indices[p])]
        p += _U(1)
    if hj >= 0:
        hint_row(V, hj, indices, q0, q1)
    if hk >= 0:
        hint_row(V, hk, indices, q0, q1)
    return (a0 + a1) + (a2 + a3)


@numba.njit(**IJIT)
def axpy3(indices, data, p0, p1, V, j, k, l, a, b, c):
    """:func:`axpy2` for three rows (``j``, ``k``, ``l`` in that order, entry by
    entry; equal rows allowed)."""
    rj = _U(j)
    rk = _U(k)
    rl = _U(l)
    bad = 0
    p = _U(p0)
    pe = _U(p1)
    while p < pe:
        f = _U(indices[p])
        x = data[p]
        u = V[rj, f] - a * x
        V[rj, f] = u
        v = V[rk, f] - b * x
        V[rk, f] = v
        w = V[rl, f] - c * x
        V[rl, f] = w
        if not (abs(u) < np.inf and abs(v) < np.inf and abs(w) < np.inf):
            bad = 1
        p += _U(1)
    return bad


@numba.njit(**IJIT)
def axpy2(indices, data, p0, p1, V, j, k, a, b):
    """``V[j, indices[p]] -= a * data[p]``, then the same for row ``k`` with ``b``,
    entry by entry (``j == k`` is allowed: the two updates then apply in that order).
    Returns 1 if a written value is not finite."""
    rj = _U(j)
    rk = _U(k)
    bad = 0
    p = _U(p0)
    pe = _U(p1)
    while p < pe:
        c = _U(indices[p])
        x = data[p]
        v = V[rj, c] - a * x
        V[rj, c] = v
        w = V[rk, c] - b * x
        V[rk, c] = w
        if not (abs(v) < np.inf and abs(w) < np.inf):
            bad = 1
        p += _U(1)
    return bad


@numba.njit(**IJIT)
def axpy1(indices, data, p0, p1, V, j, a):
    """``V[j, indices[p]] -= a * data[p]``; returns 1 if a written value is not finite."""
    rj = _U(j)
    bad = 0
    p = _U(p0)
    pe = _U(p1)
    while p < pe:
        c = _U(indices[p])
        v = V[rj, c] - a * data[p]
        V[rj, c] = v
        if not abs(v) < np.inf:
            bad = 1
        p += _U(1)
    return bad


@numba.njit(**IJIT)
def axpy_list(indices, data, p0, p1, V, rows, coefs, r, nr):
    """:func:`axpy3` over the rows ``rows[r, :nr]`` (coefficients ``coefs[r, :nr]``)
    three at a time, in list order."""
    bad = 0
    f = 0
    while f + 2 < nr:
        bad |= axpy3(indices, data, p0, p1, V, rows[r, f], rows[r, f + 1], rows[r, f + 2],
                     coefs[r, f], coefs[r, f + 1], coefs[r, f + 2])
        f += 3
    if f + 1 < nr:
        bad |= axpy2(indices, data, p0, p1, V, rows[r, f], rows[r, f + 1], coefs[r, f],
                     coefs[r, f + 1])
    elif f < nr:
        bad |= axpy1(indices, data, p0, p1, V, rows[r, f], coefs[r, f])
    return bad


@numba.njit(**IJIT)
def score(indptr, indices, data, i, V, scale, lj, lp, r, nr, s, sr, i2, cls, b2, t2, nh):
    """Scores ``s[sr, lp[r, k]] = w_j . x_i`` of the listed classes ``j = lj[r, k]``
    (``k < nr``) at the current ``W``, three rows per pass over ``x_i``. Meanwhile the
    lines of datapoint ``i2`` (``-1``: none) are hinted, at the rows of its first ``nh``
    classes ``cls[b2, t2, :nh]``."""
    p0 = indptr[i]
    p1 = indptr[i + 1]
    q0 = 0
    q1 = 0
    if i2 >= 0:
        q0 = indptr[i2]
        q1 = indptr[i2 + 1]
    else:
        nh = 0
    k = 0
    h = 0
    while k < nr:
        hj = cls[b2, t2, h] if h < nh else -1
        hk = cls[b2, t2, h + 1] if h + 1 < nh else -1
        hl = cls[b2, t2, h + 2] if h + 2 < nh else -1
        h += 3
        j = lj[r, k]
        if k + 2 < nr:
            jb = lj[r, k + 1]
            jc = lj[r, k + 2]
            x, y, z = dot3(indices, data, p0, p1, V, j, jb, jc, q0, q1, hj, hk, hl)
            s[sr, lp[r, k]] = scale[j] * x
            s[sr, lp[r, k + 1]] = scale[jb] * y
            s[sr, lp[r, k + 2]] = scale[jc] * z
            k += 3
        elif k + 1 < nr:
            jb = lj[r, k + 1]
            x, y = dot2(indices, data, p0, p1, V, j, jb, q0, q1, hj, hk)
            s[sr, lp[r, k]] = scale[j] * x
            s[sr, lp[r, k + 1]] = scale[jb] * y
            if hl >= 0:
                hint_row(V, hl, indices, q0, q1)
            k += 2
        else:
            s[sr, lp[r, k]] = scale[j] * dot1(indices, data, p0, p1, V, j, q0, q1, hj, hk)
            if hl >= 0:
                hint_row(V, hl, indices, q0, q1)
            k += 1
    while h < nh:
        hint_row(V, cls[b2, t2, h], indices, q0, q1)
        h += 1


@numba.njit(**IJIT)
def split(cls, ncls, b, t, cnt, fused, pj, pp, dj, dp, r):
    """Split the classes ``cls[b, t]`` into those no other datapoint of the batch
    touches (``cnt == 1``; ``pj[r]``, their positions ``pp[r]``) and the others (all of
    them unless ``fused``; ``dj[r]``, ``dp[r]``). Returns the two counts."""
    a = 0
    d = 0
    for jj in range(ncls[b, t]):
        j = cls[b, t, jj]
        if fused and cnt[j] == 1:
            pj[r, a] = j
            pp[r, a] = jj
            a += 1
        else:
            dj[r, d] = j
            dp[r, d] = jj
            d += 1
    return a, d


@numba.njit(**IJIT)
def apply_private(indptr, indices, data, i, V, scale, y0, pj, pp, t, nr, g, step, ridge,
                  ridged, coefs):
    """Apply datapoint ``i``'s update (coefficients ``g[t]``) to its rows that no other
    datapoint of the batch touches, listed by :func:`split` (``pj[t, :nr]``, at the
    positions ``pp[t, :nr]``; ``y0``: its label): with ``ridged``, the lazy ridge
    shrink, then ``w_j -= step g_j x_i``. Returns 1 if a weight became non-finite.
    ``coefs``: scratch (row ``t``)."""
    bad = 0
    for k in range(nr):
        j = pj[t, k]
        jj = pp[t, k]
        if ridged and ridge[j] != 0.0 and (jj == 0 or j != y0):
            bad |= shrink_row(V, scale, j, 1.0 - ridge[j])
        coefs[t, k] = step * g[t, jj] / scale[j]
    bad |= axpy_list(indices, data, indptr[i], indptr[i + 1], V, pj, coefs, t, nr)
    return bad


@numba.njit(**IJIT)
def deferred_prepare(nb, cls, ncls, b, coef, V, scale, cnt, touched, nt, step, ridge, fused,
                     dj, da, dn):
    """The batch's remaining updates: the ridge shrink of every row they touch (all the
    touched rows, or with ``fused`` those touched by more than one datapoint), then,
    per datapoint ``t``, the list of its rows ``dj[t, :dn[t]]`` and their coefficients
    ``da[t, :dn[t]] = step g / c_j``. Returns ``(bad, number of entries)``."""
    bad = 0
    for a in range(nt):
        j = touched[a]
        if fused and cnt[j] == 1:
            continue
        if ridge[j] != 0.0:
            bad |= shrink_row(V, scale, j, 1.0 - ridge[j])
    tot = 0
    for t in range(nb):
        k = 0
        for jj in range(ncls[b, t]):
            j = cls[b, t, jj]
            if fused and cnt[j] == 1:
                continue
            dj[t, k] = j
            da[t, k] = step * coef[t, jj] / scale[j]
            k += 1
        dn[t] = k
        tot += k
    return bad, tot


@numba.njit(**IJIT)
def deferred_rows(indptr, indices, data, order, b0, nb, V, dj, da, dn):
    """Apply the listed updates datapoint by datapoint."""
    bad = 0
    for t in range(nb):
        if dn[t] > 0:
            i = order[b0 + t]
            bad |= axpy_list(indices, data, indptr[i], indptr[i + 1], V, dj, da, t, dn[t])
    return bad


@numba.njit(**IJIT)
def deferred_cols(indptr, indices, data, order, b0, nb, V, dj, da, dn, c_lo, c_hi):
    """The listed updates at the columns ``c_lo <= c < c_hi`` only, datapoint by
    datapoint (one thread's share in the parallel kernel). Each element receives the
    same updates in the same order as in :func:`deferred_rows`. Needs the indices of
    every row sorted."""
    bad = 0
    for t in range(nb):
        nr = dn[t]
        if nr == 0:
            continue
        i = order[b0 + t]
        p0 = indptr[i]
        p1 = indptr[i + 1]
        p = p0 + np.searchsorted(indices[p0:p1], c_lo)
        q = p0 + np.searchsorted(indices[p0:p1], c_hi)
        if q > p:
            bad |= axpy_list(indices, data, p, q, V, dj, da, t, nr)
    return bad


@numba.njit(**IJIT)
def touch_rows(V, rows, nr):
    """Read one element per cache line of the rows ``rows[:nr]`` of ``V``, in address
    order (the hardware prefetcher then streams them in); returns their sum."""
    D = V.shape[1]
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    for jj in range(nr):
        r = _U(rows[jj])
        c = 0
        while c + 32 <= D:
            a0 += V[r, _U(c)]
            a1 += V[r, _U(c + 8)]
            a2 += V[r, _U(c + 16)]
            a3 += V[r, _U(c + 24)]
            c += 32
        while c < D:
            a0 += V[r, _U(c)]
            c += 8
    return (a0 + a1) + (a2 + a3)


@numba.njit(**IJIT)
def batch_count(nb, cls, ncls, cnt, touched, ridge, lr, muN, beta, red_sum):
    """Count who touches what in the drawn batch and set the shrink rates."""
    nt = count_touched(cls, ncls, nb, cnt, touched)
    if muN > 0.0:
        for a in range(nt):
            j = touched[a]
            if red_sum:
                ridge[j] = lr * float(cnt[j]) * muN * beta[j]
            else:
                ridge[j] = lr * (cnt[j] / nb) * muN * beta[j]
    return nt


@numba.njit(**IJIT)
def step_size(lr, nb, red_sum):
    """The batch's step coefficient: ``lr / b`` (mean) or ``lr`` (sum)."""
    if red_sum:
        return lr
    return lr / nb


@numba.njit(**IJIT)
def batch_reset(cnt, ridge, touched, nt):
    """Zero the counts and ridge sums of the ``nt`` classes a batch touched."""
    for a in range(nt):
        cnt[touched[a]] = 0
        ridge[touched[a]] = 0.0


@numba.njit(**NJIT)
def sampled_epoch(indptr, indices, data, y, order, V, scale, beta, n, m, lr, muN, kind,
                  shared, drop_hits, logr, c_nce, seed, fused, pf, red_sum, sorted_idx, buf):
    """One epoch of minibatch SGD on the OVE / NCE / IS loss (serial kernel).

    ``fused=False`` is the straightforward loop: draw the batch's classes, score every
    datapoint at the old ``W``, then apply every update datapoint by datapoint.

    ``fused=True``: the classes are drawn one batch ahead (the same draws in the same
    order). A datapoint's rows that no other datapoint of the batch touches are updated
    right after it is scored, while their lines are in cache; with ``pf > 0`` the lines
    of the datapoint ``pf`` places ahead (in this batch or the next) are hinted while
    the current one is scored: its label's row, and with per-datapoint negatives all its
    rows. With shared negatives (and ``pf > 0``) the batch's ``m`` shared rows are first
    read in address order, one element per cache line, so that the hardware streams
    them into the cache at full bandwidth instead of fetching their lines one random
    column at a time. The remaining updates (the shared rows, rows touched by several
    datapoints) follow the batch, datapoint by datapoint. ``sorted_idx`` (the indices of
    every CSR row are sorted) is used by the parallel kernel only.

    Same arithmetic in every variant, in the same order: bit-identical results.
    ``red_sum``: ``reduction="sum"`` (no ``1/b`` in the step and the ridge rates).
    ``buf``: the scratch arrays the trainer allocates (``cnt`` and ``ridge`` zero on entry;
    zero again on return).

    Returns ``(steps, diverged_at, sink)``; ``sink`` is the sum the row reads produced
    (returned so that the reads are not optimised away; meaningless).
    """
    N = order.shape[0]
    K = V.shape[0]
    cls, ncls, smp, coef, s, cnt, ridge, touched, dj, dp, da, dn, pj, pp, pn, pa = buf
    sink = 0.0
    state = _seed_state(seed)
    ahead = fused and pf > 0
    if N > 0:
        state = draw_batch(state, y, order, 0, min(n, N), K, m, shared, drop_hits, cls, ncls,
                           smp, 0)
        if ahead:
            for t in range(min(pf, n, N)):
                i = order[t]
                for jj in range(ncls[0, t] if not shared else 1):
                    hint_row(V, cls[0, t, jj], indices, indptr[i], indptr[i + 1])
    steps = 0
    bi = 0
    for b0 in range(0, N, n):
        nb = min(n, N - b0)
        nn = min(n, N - b0 - nb)  # the next batch's size (0: none)
        if nn > 0:
            state = draw_batch(state, y, order, b0 + nb, nn, K, m, shared, drop_hits, cls,
                               ncls, smp, 1 - bi)
        nt = batch_count(nb, cls[bi], ncls[bi], cnt, touched, ridge, lr, muN, beta,
                         red_sum)
        step = step_size(lr, nb, red_sum)
        bad = 0
        if not fused:
            # the straightforward loop: score everything at the old W, then apply
            for t in range(nb):
                pn[t], dn[t] = split(cls, ncls, bi, t, cnt, False, pj, pp, dj, dp, t)
                score(indptr, indices, data, order[b0 + t], V, scale, dj, dp, t, dn[t], s,
                      t, -1, cls, bi, t, 0)
                coefs(kind, logr, c_nce, s, t, ncls[bi, t], coef, t)
            b2, tot = deferred_prepare(nb, cls, ncls, bi, coef, V, scale, cnt, touched, nt,
                                       step, ridge, False, dj, da, dn)
            bad |= b2
            bad |= deferred_rows(indptr, indices, data, order, b0, nb, V, dj, da, dn)
        else:
            # rows touched by several datapoints of the batch (with shared negatives: the
            # shared rows) are scored for every datapoint first, at the old W; then each
            # datapoint scores its own rows and applies its whole update: to its own rows
            # while their lines are in cache, and to the others in datapoint order, which
            # is the order of the straightforward loop
            nd = 0
            for t in range(nb):
                pn[t], dn[t] = split(cls, ncls, bi, t, cnt, True, pj, pp, dj, dp, t)
                nd += dn[t]
            if nd > 0:
                if shared and ahead:
                    sink += touch_rows(V, smp[bi], m)
                for t in range(nb):
                    if dn[t] > 0:
                        if ahead and t + 4 < nb:
                            hint_x(indptr, indices, data, order[b0 + t + 4])
                        score(indptr, indices, data, order[b0 + t], V, scale, dj, dp, t,
                              dn[t], s, t, -1, cls, bi, t, 0)
                for a in range(nt):
                    j = touched[a]
                    if cnt[j] > 1 and ridge[j] != 0.0:
                        bad |= shrink_row(V, scale, j, 1.0 - ridge[j])
            for t in range(nb):
                i2 = -1
                b2 = bi
                t2 = t
                if ahead:
                    if t + pf < nb:
                        t2 = t + pf
                        i2 = order[b0 + t2]
                    elif t + pf - nb < nn:
                        b2 = 1 - bi
                        t2 = t + pf - nb
                        i2 = order[b0 + t + pf]
                if ahead:
                    hint_ahead(indptr, indices, data, order, b0 + t, pf, N)
                i = order[b0 + t]
                score(indptr, indices, data, i, V, scale, pj, pp, t, pn[t], s, t, i2, cls, b2,
                      t2, 1 if shared else ncls[b2, t2])
                coefs(kind, logr, c_nce, s, t, ncls[bi, t], coef, t)
                bad |= apply_private(indptr, indices, data, i, V, scale, cls[bi, t, 0], pj,
                                     pp, t, pn[t], coef, step, ridge, muN > 0.0, pa)
                if dn[t] > 0:
                    for k in range(dn[t]):
                        da[t, k] = step * coef[t, dp[t, k]] / scale[dj[t, k]]
                    bad |= axpy_list(indices, data, indptr[i], indptr[i + 1], V, dj, da, t,
                                     dn[t])
        batch_reset(cnt, ridge, touched, nt)
        steps += 1
        if bad:
            return steps, steps - 1, sink
        bi = 1 - bi
    return steps, -1, sink


@numba.njit(**PJIT)
def sampled_epoch_par(indptr, indices, data, y, order, V, scale, beta, n, m, lr, muN, kind,
                      shared, drop_hits, logr, c_nce, seed, fused, pf, red_sum, sorted_idx,
                      nthr):
    """:func:`sampled_epoch` on ``nthr`` threads: the batch's datapoints in parallel
    (with ``fused``, each row with ``cnt == 1`` is written by the one thread that reads
    it), then the remaining updates split by columns (sorted indices; otherwise
    serially). Every element receives the same operations in the same order as in the
    serial kernel: bit-identical. Returns ``(steps, diverged_at, 0.0)``."""
    N = order.shape[0]
    K = V.shape[0]
    D = V.shape[1]
    cls = np.zeros((1, n, m + 1), dtype=np.int64)
    ncls = np.zeros((1, n), dtype=np.int64)
    coef = np.zeros((n, m + 1))
    s = np.zeros((n, m + 1))
    cnt = np.zeros(K, dtype=np.int64)
    ridge = np.zeros(K)
    touched = np.zeros(n * (m + 1), dtype=np.int64)
    dj = np.zeros((n, m + 1), dtype=np.int64)
    da = np.zeros((n, m + 1))
    dn = np.zeros(n, dtype=np.int64)
    rows = np.zeros((n, m + 1), dtype=np.int64)
    rcoef = np.zeros((n, m + 1))
    lj = np.zeros((n, m + 1), dtype=np.int64)
    lp = np.zeros((n, m + 1), dtype=np.int64)
    rp = np.zeros((n, m + 1), dtype=np.int64)
    bads = np.zeros(n, dtype=np.int64)
    dbads = np.zeros(nthr, dtype=np.int64)
    smp = np.zeros((1, m), dtype=np.int64)
    state = _seed_state(seed)
    steps = 0
    for b0 in range(0, N, n):
        nb = min(n, N - b0)
        state = draw_batch(state, y, order, b0, nb, K, m, shared, drop_hits, cls, ncls, smp,
                           0)
        nt = batch_count(nb, cls[0], ncls[0], cnt, touched, ridge, lr, muN, beta, red_sum)
        step = step_size(lr, nb, red_sum)
        for tp in numba.prange(nb):
            t = np.int64(tp)  # numba types the prange index unsigned
            i2 = -1
            t2 = t
            if fused and pf > 0 and t + pf < nb:
                t2 = t + pf
                i2 = order[b0 + t2]
                hint_ahead(indptr, indices, data, order, b0 + t, pf, b0 + nb)
            nall = ncls[0, t]  # every class of the datapoint, at the old W
            for jj in range(nall):
                lj[t, jj] = cls[0, t, jj]
                lp[t, jj] = jj
            score(indptr, indices, data, order[b0 + t], V, scale, lj, lp, t, nall, s, t, i2,
                  cls, 0, t2, 1 if shared else ncls[0, t2])
            coefs(kind, logr, c_nce, s, t, ncls[0, t], coef, t)
            bads[t] = 0
            if fused:
                na, _ = split(cls, ncls, 0, t, cnt, True, rows, rp, lj, lp, t)
                bads[t] = apply_private(indptr, indices, data, order[b0 + t], V, scale,
                                        cls[0, t, 0], rows, rp, t, na, coef, step, ridge,
                                        muN > 0.0, rcoef)
        b2, tot = deferred_prepare(nb, cls, ncls, 0, coef, V, scale, cnt, touched, nt, step,
                                   ridge, fused, dj, da, dn)
        dbads[:] = 0
        if sorted_idx and tot > 0:
            for qp in numba.prange(nthr):
                q = np.int64(qp)
                dbads[q] = deferred_cols(indptr, indices, data, order, b0, nb, V, dj, da,
                                             dn, (D * q) // nthr, (D * (q + 1)) // nthr)
        elif tot > 0:
            dbads[0] = deferred_rows(indptr, indices, data, order, b0, nb, V, dj, da, dn)
        batch_reset(cnt, ridge, touched, nt)
        steps += 1
        if b2 or bads[:nb].any() or dbads.any():
            return steps, steps - 1, 0.0
    return steps, -1, 0.0
