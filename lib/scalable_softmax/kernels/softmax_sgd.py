"""Exact full-softmax minibatch SGD on feature-major weights (``"softmax-sgd"``,
:class:`scalable_softmax.methods.full.SoftmaxSGDTrainer`).

The weights are held as ``V^T`` (``D x K``, C-contiguous: row ``f`` holds feature ``f``'s
weight for every class), with the lazy ridge scale ``W = c V`` of the trainer
(``cs[0] = c``). One step on the minibatch ``B`` (``b = |B|`` rows of ``order``):

1. scores, one row of ``S`` (``b x K``) per datapoint: ``S[t, :] = c sum_p x_p V^T[f_p, :]``
   over the row's non-zeros (contiguous axpys over the ``K`` classes), then
   ``S[t, :] <- softmax(S[t, :]) - e_{y_t}`` (max subtracted, ``K`` vectorised
   exponentials and their sum in eight lanes, then a division);
2. the lazy ridge: ``c <- c (1 - lr mu/N)`` (folded into ``V`` when it gets tiny);
3. the update, one write per (distinct feature of the minibatch, class):
   ``V^T[f, k] -= lr / (b c) sum_{t: x_tf != 0} x_tf S[t, k]``, the sum over the
   minibatch's entries of feature ``f`` taken before the write. Every score of the
   minibatch is computed before any weight changes, so the step is the minibatch
   gradient at the old weights, also when several rows share a feature
   (:func:`scalable_softmax.methods.full.reference_step` is the NumPy reference).

Arithmetic order: every score, probability and weight is computed with the same
operations in the same order as the class-major kernel with ``transposed=True`` of
:mod:`scalable_softmax.methods.full` (scores summed over a row's features in the order
of its CSR entries, which are sorted in canonical CSR; the exponentials and their sum
made by the same functions; each weight's update summed over the minibatch's entries
of its feature in minibatch order, then subtracted once), so the two give bit-identical
weights. No fast-math flags: the axpys vectorise without reordering any sum (each
class's value is its own chain). The exponentials are
:func:`scalable_softmax.kernels.common.vexp` (Cody-Waite reduction and a degree-13
polynomial, about 1 ulp from libm's; numba has no vector ``exp`` without Intel's SVML,
which this environment lacks) and the normaliser is
:func:`~scalable_softmax.kernels.common.lanesum` (eight interleaved partial sums): on
20news-words (``K = 10,000``) libm's scalar ``exp`` and a sequential sum took a third of
an epoch. Until this change they were libm's, summed in increasing class order; the
weights differ from those at rounding level (the NumPy reference agrees with both to
about 1e-12).

Threads (``nchunk`` slices, numba's ``prange``): the scores and the softmax are split
over the minibatch's rows, the update over contiguous slices of the classes (columns of
``V^T``), boundaries rounded to whole cache lines. Every value is computed by one thread
in a fixed order, with no reduction across threads, so the weights are bit-identical for
every number of threads (and to the serial run).

Names (numba code, except where said):

``softmax_sgd_epoch(indptr, indices, data, y, order, VT, cs, n, lr, muN, nchunk)``
    one epoch over ``order`` in minibatches of ``n``; ``VT`` and ``cs`` updated in
    place; returns ``(steps, diverged_at)`` (``-1``: every written weight finite).
(The minibatch is regrouped by feature with the class-major kernel's own
:func:`batch_transpose`.)
``row_scores(indices, data, p0, p1, VT, c, s)``
    ``s = c sum_p data[p] VT[indices[p], :]``.
``softmax_gradient(s, y, e, tmpf)``
    ``s <- softmax(s) - e_y`` in place (``e``, ``tmpf``: ``K`` floats of scratch each).
``update_classes(VT, S, a_scale, k0, k1, nf, fptr, feat, tt, vv, buf)``
    the update of the classes ``k0..k1-1``; returns 1 if a written value is not finite.
``fold_classes(VT, c, k0, k1)``
    ``VT[:, k0:k1] *= c``; returns 1 if a written value is not finite.
``class_bounds(K, nchunk, q)``
    the class slice of thread ``q`` (plain Python too).

The class-major kernel (weights ``V``, ``K x D``: the layouts ``"class"`` and
``"class-rowwise"``; it was ``scalable_softmax.kernels.full.softmax_sgd_epoch``):

``class_major_epoch(indptr, indices, data, y, order, V, cs, n, lr, muN, nchunk,
transposed)``
    one epoch; ``transposed``: the minibatch regrouped by feature (``"class"``,
    bit-identical to the feature-major kernel), else the straightforward loop.
``batch_buffers``, ``batch_transpose``, ``sgd_scores``, ``softmax_cols``,
``sgd_update``, ``fold_rows``
    its pieces (``batch_buffers`` and ``batch_transpose`` shared with the
    feature-major kernel).
"""
from __future__ import annotations

import numba
import numpy as np

from scalable_softmax.kernels.common import JIT, PJIT, lanesum, vexp
from scalable_softmax.kernels.common import axpy_check as _axpy_check
from scalable_softmax.kernels.common import dot as _dot

__all__ = ["softmax_sgd_epoch", "row_scores", "softmax_gradient",
           "update_classes", "fold_classes", "class_bounds", "TILE", "class_major_epoch",
           "batch_buffers", "batch_transpose", "sgd_scores", "softmax_cols", "sgd_update",
           "fold_rows"]

#: classes per tile of the scores and of the update (a tile of every minibatch row's
#: gradient, ``n x TILE`` floats, stays in the level-2 cache while the tile of every
#: feature row is updated)
TILE = 512
#: the lazy ridge scale is folded into the weights below this magnitude
_TINY_SCALE = 1e-100


@numba.njit(**JIT)
def class_bounds(K, nchunk, q):
    """``(k0, k1)``: the classes of slice ``q`` of ``nchunk``, boundaries on multiples
    of 8 (a 64-byte cache line of float64), the last one ``K``."""
    k0 = ((q * K // nchunk + 7) // 8) * 8
    k1 = ((((q + 1) * K) // nchunk + 7) // 8) * 8
    return min(k0, K), (K if q == nchunk - 1 else min(k1, K))


@numba.njit(**JIT)
def row_scores(indices, data, p0, p1, VT, c, s):
    """``s[k] = c * (0 + sum_p data[p] VT[indices[p], k])``, the sum in the order of
    the entries ``p0..p1-1``; one tile of ``TILE`` classes at a time, so that the tile
    of ``s`` stays in the level-1 cache while every feature row is added."""
    K = s.shape[0]
    for k0 in range(0, K, TILE):
        k1 = min(k0 + TILE, K)
        st = s[k0:k1]        # views indexed from 0: the loops below vectorise
        m = k1 - k0
        for k in range(m):
            st[k] = 0.0
        for p in range(p0, p1):
            x = data[p]
            w = VT[indices[p], k0:k1]
            for k in range(m):
                st[k] += x * w[k]
        if c != 1.0:
            for k in range(m):
                st[k] *= c


@numba.njit(**JIT)
def softmax_gradient(s, y, e, tmpf):
    """``s <- softmax(s) - e_y`` in place: the largest score subtracted, the
    exponentials (:func:`~scalable_softmax.kernels.common.vexp`, into ``e``; ``tmpf``
    scratch) summed in eight lanes, then divided by that sum."""
    K = s.shape[0]
    # the maximum in four lanes (four independent chains; a maximum does not depend
    # on the order)
    m0 = s[0]
    m1 = s[0]
    m2 = s[0]
    m3 = s[0]
    k = 1
    while k + 4 <= K:
        if s[k] > m0:
            m0 = s[k]
        if s[k + 1] > m1:
            m1 = s[k + 1]
        if s[k + 2] > m2:
            m2 = s[k + 2]
        if s[k + 3] > m3:
            m3 = s[k + 3]
        k += 4
    while k < K:
        if s[k] > m0:
            m0 = s[k]
        k += 1
    mx = max(max(m0, m1), max(m2, m3))
    vexp(s, mx, e, tmpf, tmpf.view(np.int64), K)
    z = lanesum(e, K)
    if not z >= 1.0:    # non-finite scores (a diverged step): the gradient is NaN
        z = np.nan
    for k in range(K):
        s[k] = e[k] / z
    s[y] -= 1.0


@numba.njit(**JIT)
def update_classes(VT, S, a_scale, k0, k1, nf, fptr, feat, tt, vv, buf):
    """``VT[f, k] -= a_scale * (0 + sum_q vv[q] S[tt[q], k])`` for the minibatch's
    features ``f = feat[a]`` (entries ``q`` in ``fptr[a]..fptr[a+1]-1``) and the classes
    ``k0..k1-1``, a tile of ``TILE`` classes at a time over every feature (the
    minibatch's tile of ``S`` stays in cache). ``buf``: at least ``TILE`` floats of
    scratch. Returns 1 if a written value is not finite."""
    bad = False
    for c0 in range(k0, k1, TILE):
        c1 = min(c0 + TILE, k1)
        m = c1 - c0
        for a in range(nf):
            row = VT[feat[a], c0:c1]   # views indexed from 0: the loops vectorise
            q0 = fptr[a]
            q1 = fptr[a + 1]
            x = vv[q0]
            g = S[tt[q0], c0:c1]
            if q1 - q0 == 1:
                for k in range(m):
                    v = row[k] - a_scale * (0.0 + x * g[k])
                    row[k] = v
                    bad |= not (abs(v) < np.inf)
            else:
                for k in range(m):
                    buf[k] = 0.0 + x * g[k]
                for q in range(q0 + 1, q1):
                    x = vv[q]
                    g = S[tt[q], c0:c1]
                    for k in range(m):
                        buf[k] += x * g[k]
                for k in range(m):
                    v = row[k] - a_scale * buf[k]
                    row[k] = v
                    bad |= not (abs(v) < np.inf)
    return 1 if bad else 0


@numba.njit(**JIT)
def fold_classes(VT, c, k0, k1):
    """``VT[:, k0:k1] *= c``; returns 1 if a written value is not finite."""
    bad = False
    for f in range(VT.shape[0]):
        row = VT[f, k0:k1]
        for k in range(k1 - k0):
            v = row[k] * c
            row[k] = v
            bad |= not (abs(v) < np.inf)
    return 1 if bad else 0


@numba.njit(**PJIT)
def softmax_sgd_epoch(indptr, indices, data, y, order, VT, cs, n, lr, muN, nchunk):
    """One epoch of exact-softmax minibatch SGD on ``W = cs[0] * VT.T`` (module
    docstring): minibatches of ``n`` consecutive entries of ``order``, rate ``lr``,
    ridge ``muN = mu / N``, ``nchunk`` slices (numba threads; the result does not
    depend on it). ``indices`` int64, each row's entries in increasing feature order
    for the same sums as the class-major kernel. Returns ``(steps, diverged_at)``."""
    N = order.shape[0]
    D, K = VT.shape
    S = np.empty((n, K))
    scr = np.empty((nchunk, 2, K))
    bads = np.zeros(nchunk, dtype=np.int64)
    bufs = np.empty((nchunk, TILE))
    cnt, fptr, feat, tt, vv = batch_buffers(indptr, order, D, n)
    factor = 1.0 - lr * muN
    steps = 0
    for b0 in range(0, N, n):
        nb = min(n, N - b0)
        nf = batch_transpose(indptr, indices, data, order, b0, nb, cnt, fptr, feat, tt, vv)
        c = cs[0]
        for q in numba.prange(nchunk):
            for t in range(q * nb // nchunk, (q + 1) * nb // nchunk):
                i = order[b0 + t]
                row_scores(indices, data, indptr[i], indptr[i + 1], VT, c, S[t])
                softmax_gradient(S[t], y[i], scr[q, 0], scr[q, 1])
        c_new = c * factor
        if factor <= 0.0 or abs(c_new) < _TINY_SCALE:
            for q in numba.prange(nchunk):
                k0, k1 = class_bounds(K, nchunk, q)
                bads[q] = fold_classes(VT, c_new, k0, k1)
            c_new = 1.0
        else:
            bads[:] = 0
        cs[0] = c_new
        a_scale = lr / nb / c_new
        for q in numba.prange(nchunk):
            k0, k1 = class_bounds(K, nchunk, q)
            bads[q] |= update_classes(VT, S, a_scale, k0, k1, nf, fptr, feat, tt, vv,
                                      bufs[q])
        steps += 1
        if bads.any() or not abs(c_new) < np.inf:
            return steps, steps - 1
    return steps, -1


# ---------------------------------------------------------------------------
# the class-major kernel
# ---------------------------------------------------------------------------

@numba.njit(**JIT)
def softmax_cols(ST, y, order, b0, t0, t1):
    """Columns ``t0..t1-1`` of the batch's scores ``ST`` (``K x n``) become
    ``p_tk - 1[k = y_t]``."""
    K = ST.shape[0]
    col = np.empty(K)
    e = np.empty(K)
    tmpf = np.empty(K)
    for t in range(t0, t1):
        mx = ST[0, t]
        for k in range(K):
            col[k] = ST[k, t]
            if col[k] > mx:
                mx = col[k]
        # the exponentials and their sum as the feature-major kernel makes them
        # (kernels.softmax_sgd.softmax_gradient), so that the two agree bit for bit
        vexp(col, mx, e, tmpf, tmpf.view(np.int64), K)
        z = lanesum(e, K)
        if not z >= 1.0:    # non-finite scores (a diverged step): the gradient is NaN
            z = np.nan
        for k in range(K):
            ST[k, t] = e[k] / z
        ST[y[order[b0 + t]], t] -= 1.0


@numba.njit(**JIT)
def batch_buffers(indptr, order, D, n):
    """The buffers of :func:`batch_transpose` for minibatches of ``n`` rows of
    ``order``: ``(cnt, fptr, feat, tt, vv)``, sized by the largest row's non-zeros."""
    cnt = np.zeros(D, dtype=np.int64)
    fptr = np.zeros(D + 1, dtype=np.int64)
    feat = np.zeros(D, dtype=np.int64)
    mx_nnz = 0
    for t in range(order.shape[0]):
        i = order[t]
        mx_nnz = max(mx_nnz, indptr[i + 1] - indptr[i])
    tt = np.zeros(n * mx_nnz, dtype=np.int64)
    vv = np.zeros(n * mx_nnz)
    return cnt, fptr, feat, tt, vv


@numba.njit(**JIT)
def batch_transpose(indptr, indices, data, order, b0, nb, cnt, fptr, feat, tt, vv):
    """The minibatch as lists by feature: the ``nf`` distinct features in increasing
    order (``feat``), and for feature ``feat[a]`` the entries ``fptr[a]..fptr[a+1]-1``
    of ``tt`` (position in the batch) and ``vv`` (value), in batch order. ``cnt``
    (length D, zero) is left zero. Returns ``nf``."""
    nf = 0
    for t in range(nb):
        i = order[b0 + t]
        for p in range(indptr[i], indptr[i + 1]):
            f = indices[p]
            if cnt[f] == 0:
                feat[nf] = f
                nf += 1
            cnt[f] += 1
    feat[:nf].sort()
    fptr[0] = 0
    for a in range(nf):
        fptr[a + 1] = fptr[a] + cnt[feat[a]]
        cnt[feat[a]] = fptr[a]  # next free slot of feature feat[a]
    for t in range(nb):
        i = order[b0 + t]
        for p in range(indptr[i], indptr[i + 1]):
            f = indices[p]
            q = cnt[f]
            tt[q] = t
            vv[q] = data[p]
            cnt[f] = q + 1
    for a in range(nf):
        cnt[feat[a]] = 0
    return nf


@numba.njit(**JIT)
def sgd_scores(indptr, indices, data, order, b0, nb, V, c, ST, k0, k1, transposed, nf, fptr,
               feat, tt, vv):
    """``ST[k, t] = c x_t . v_k`` for the classes ``k0..k1-1``; ``transposed``: sweep
    each class row once in increasing feature order (streaming), else one sparse dot
    product per (class, datapoint) (random gathers)."""
    for k in range(k0, k1):
        row = V[k]
        st = ST[k]
        if transposed:
            for t in range(nb):
                st[t] = 0.0
            for a in range(nf):
                w = row[feat[a]]
                for q in range(fptr[a], fptr[a + 1]):
                    st[tt[q]] += vv[q] * w
            for t in range(nb):
                st[t] *= c
        else:
            for t in range(nb):
                i = order[b0 + t]
                st[t] = c * _dot(indices, data, indptr[i], indptr[i + 1], row)


@numba.njit(**JIT)
def sgd_update(indptr, indices, data, order, b0, nb, V, ST, a_scale, k0, k1, transposed, nf,
               fptr, feat, tt, vv):
    """``v_k -= a_scale sum_t ST[k, t] x_t`` for the classes ``k0..k1-1``; returns 1 if
    a written value is not finite."""
    bad = 0
    for k in range(k0, k1):
        row = V[k]
        st = ST[k]
        if transposed:
            for a in range(nf):
                g = 0.0
                for q in range(fptr[a], fptr[a + 1]):
                    g += vv[q] * st[tt[q]]
                f = feat[a]
                v = row[f] - a_scale * g
                row[f] = v
                if not abs(v) < np.inf:
                    bad = 1
        else:
            for t in range(nb):
                i = order[b0 + t]
                bad |= _axpy_check(indices, data, indptr[i], indptr[i + 1], row,
                                   a_scale * st[t])
    return bad


@numba.njit(**JIT)
def fold_rows(V, c, k0, k1):
    """Rows ``k0..k1-1`` of ``V`` times ``c`` in place; 1 if a value is not finite."""
    bad = 0
    for k in range(k0, k1):
        row = V[k]
        for f in range(row.shape[0]):
            v = row[f] * c
            row[f] = v
            if not abs(v) < np.inf:
                bad = 1
    return bad


@numba.njit(**PJIT)
def class_major_epoch(indptr, indices, data, y, order, V, cs, n, lr, muN, nchunk, transposed):
    """One epoch of exact-softmax minibatch SGD on class-major weights ``V`` (``K x D``;
    the layouts ``"class"`` and ``"class-rowwise"``); ``W = cs[0] * V`` (lazy ridge).

    ``transposed=False``: the straightforward loop (a sparse dot product and a sparse
    update per class and datapoint, gathering at random in each class row);
    ``transposed=True``: the minibatch is first regrouped by feature, so that each
    class row is swept once in increasing feature order for the scores and once for
    the update (streaming access; the update of ``w_k[f]`` sums the minibatch's
    contributions before writing). Scores and updates are split over ``nchunk``
    slices of the classes (numba threads; every element is computed by one thread in
    a fixed order, so the result does not depend on the number of threads). Returns
    ``(steps, diverged_at)``.
    """
    N = order.shape[0]
    K, D = V.shape
    ST = np.zeros((K, n))
    bads = np.zeros(nchunk, dtype=np.int64)
    cnt, fptr, feat, tt, vv = batch_buffers(indptr, order, D, n)
    factor = 1.0 - lr * muN
    steps = 0
    for b0 in range(0, N, n):
        nb = min(n, N - b0)
        nf = 0
        if transposed:
            nf = batch_transpose(indptr, indices, data, order, b0, nb, cnt, fptr, feat, tt, vv)
        c = cs[0]
        for q in numba.prange(nchunk):
            sgd_scores(indptr, indices, data, order, b0, nb, V, c, ST,
                       q * K // nchunk, (q + 1) * K // nchunk, transposed, nf, fptr, feat,
                       tt, vv)
        for q in numba.prange(nchunk):
            softmax_cols(ST, y, order, b0, q * nb // nchunk, (q + 1) * nb // nchunk)
        c_new = c * factor
        if factor <= 0.0 or abs(c_new) < _TINY_SCALE:
            for q in numba.prange(nchunk):
                bads[q] = fold_rows(V, c_new, q * K // nchunk, (q + 1) * K // nchunk)
            c_new = 1.0
        else:
            bads[:] = 0
        cs[0] = c_new
        a_scale = lr / nb / c_new
        for q in numba.prange(nchunk):
            bads[q] |= sgd_update(indptr, indices, data, order, b0, nb, V, ST, a_scale,
                                  q * K // nchunk, (q + 1) * K // nchunk, transposed, nf,
                                  fptr, feat, tt, vv)
        steps += 1
        if bads.any() or not abs(c_new) < np.inf:
            return steps, steps - 1
    return steps, -1
