"""The numba kernels of :func:`scalable_softmax.evaluate.evaluate` (the module
:mod:`scalable_softmax.evaluate` holds the function, its input checks, the row selection
and the description of the algorithm and its precision).

``state_pass``, ``state_pass32``
    one pass over the selected rows and all classes in tiles (float64, float32), giving
    each row's maximum, arg-maximum, label score and the two sums the metrics need.
``finish``
    the per-row log-loss, error and defective metric from those.
``all_finite``
    whether an array holds only finite values (in parallel).
``state_pass_serial``, ``state_pass32_serial``, ``finish_serial``, ``transpose32_serial``
    the serial twins of the parallel kernels
    (:func:`~scalable_softmax.kernels.common.serial_twin`: the same code without
    ``parallel``, bit-identical results, about half the compile time), which
    :func:`scalable_softmax.evaluate.evaluate` runs on one thread or on a pass too small
    to split (``evaluate.SERIAL_WORK``).
``transpose32(W, k0, kc, T, fm, feats)``
    ``T[:, :kc] = float32(W[k0:k0+kc].T)`` in parallel (``fm``: ``W`` is ``D x K``,
    feature-major, and the tile's rows ``feats`` are ``float32(W[feats, k0:k0+kc])``).
``used_features(indptr, indices, rows, D)``
    the features the selected rows use (the rows of a feature-major tile copied).
``scores32``, ``vexp32_sum``, ``max32``, ``sum32to64``
    the float32 inner kernels (scores of one row against a tile, exponentials and their
    sum, maximum, float64 sum).
``lanemax``, ``mul_lanesum``, ``widen_mul_lanesum``, ``mul_lanesum_wide``
    their float64 and widening counterparts (the float64 exponential and sum, ``vexp``
    and ``lanesum``, are :mod:`scalable_softmax.kernels.common`'s).
``JIT32``, ``PJIT32``, ``JIT32R``
    the numba options of the float32 kernels (``fastmath`` contraction; with
    reassociation for the sums).

:func:`scalable_softmax.evaluate.per_row` (the per-row metrics ``evaluate`` averages) and
:func:`scalable_softmax.evaluate.tile_width` (the classes scored per tile) drive them.

Why the two precisions are written twice (``state_pass`` / ``state_pass32`` and their
inner kernels), not generated from one source: they differ in more than the dtype. The
float32 pass scores a float32 copy of each tile of ``W`` (``transpose32``) with fused
multiply-adds and sums with reassociation (``JIT32``, ``JIT32R``: ``fastmath``
contraction and reassociation), the float64 pass reads ``W`` in place under the
library's exact flags (``JIT``: no fastmath) with the eight-lane sums of
:mod:`~scalable_softmax.kernels.common`. One template would have to change either the
flags or the summation order of one of them, so the results would move; the pair is
kept, tested against the same NumPy reference (``tests/test_evaluate*.py``).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

# the vectorised exponential and sum, shared with softmax SGD's kernel
from scalable_softmax.kernels.common import IJIT, JIT, PJIT, inner, lanesum, serial_twin, vexp

__all__ = ["JIT32", "JIT32R", "PJIT32", "all_finite", "finish",
           "finish_serial", "lanemax", "max32", "mul_lanesum", "mul_lanesum_wide",
           "scores32", "state_pass", "state_pass32", "state_pass32_serial",
           "state_pass_serial", "sum32to64", "transpose32", "transpose32_serial",
           "used_features", "vexp32_sum", "widen_mul_lanesum"]

#: highest power n of the running sums S_n (the series for the defective metric)
_NPOW = 18


@inner(**JIT)
def lanemax(x, n):
    """``max(x[:n])`` (``n >= 1``, no NaN) with eight interleaved partial maxima."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = x[0]
    n8 = n - n % 8
    for c in range(0, n8, 8):
        m0 = x[c] if x[c] > m0 else m0
        m1 = x[c + 1] if x[c + 1] > m1 else m1
        m2 = x[c + 2] if x[c + 2] > m2 else m2
        m3 = x[c + 3] if x[c + 3] > m3 else m3
        m4 = x[c + 4] if x[c + 4] > m4 else m4
        m5 = x[c + 5] if x[c + 5] > m5 else m5
        m6 = x[c + 6] if x[c + 6] > m6 else m6
        m7 = x[c + 7] if x[c + 7] > m7 else m7
    for t in range(n8, n):
        m0 = x[t] if x[t] > m0 else m0
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    return m4 if m4 > m0 else m0


@inner(**JIT)
def mul_lanesum(pw, e, n):
    """``pw[:n] *= e[:n]`` and return ``sum(pw[:n])`` (eight partial sums)."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    n8 = n - n % 8
    for c in range(0, n8, 8):
        q0 = pw[c] * e[c]
        q1 = pw[c + 1] * e[c + 1]
        q2 = pw[c + 2] * e[c + 2]
        q3 = pw[c + 3] * e[c + 3]
        q4 = pw[c + 4] * e[c + 4]
        q5 = pw[c + 5] * e[c + 5]
        q6 = pw[c + 6] * e[c + 6]
        q7 = pw[c + 7] * e[c + 7]
        pw[c] = q0
        pw[c + 1] = q1
        pw[c + 2] = q2
        pw[c + 3] = q3
        pw[c + 4] = q4
        pw[c + 5] = q5
        pw[c + 6] = q6
        pw[c + 7] = q7
        s0 += q0
        s1 += q1
        s2 += q2
        s3 += q3
        s4 += q4
        s5 += q5
        s6 += q6
        s7 += q7
    for t in range(n8, n):
        q = pw[t] * e[t]
        pw[t] = q
        s0 += q
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@numba.njit(**PJIT)
def all_finite(a):
    """True if every entry of the C-contiguous float array ``a`` is finite (no copy)."""
    flat = a.reshape(-1)
    n = flat.size
    nb = (n + 65535) // 65536
    bad = 0
    for b in prange(nb):
        cnt = 0
        for t in range(b * 65536, min(n, (b + 1) * 65536)):
            v = flat[t]
            if not (v - v == 0.0):  # NaN or +-inf
                cnt += 1
        bad += cnt
    return bad == 0


@numba.njit(**JIT)
def used_features(indptr, indices, rows, D):
    """The features (sorted, int64) with a non-zero in at least one of ``rows``: the
    only rows of a tile the scores read."""
    seen = np.zeros(D, dtype=np.bool_)
    for ii in range(rows.size):
        i = rows[ii]
        for p in range(indptr[i], indptr[i + 1]):
            seen[indices[p]] = True
    return np.flatnonzero(seen).astype(np.int64)


@numba.njit(**IJIT)
def _new_state(nr, npw):
    """The passes' running state of ``nr`` rows, initialised: ``mx`` (-inf), ``am``,
    ``sy``, ``s1p`` (0) and the ``nr x npw`` power sums ``spw`` (0).

    Allocated by ``np.empty(n, dtype)`` alone, then filled, and inlined (``IJIT``) into
    the pass that calls it: numba compiles its ``np.empty`` once per dtype and per set
    of the caller's flags, so these share the pass's own scratch allocations, while
    ``np.zeros``, ``np.full`` and a 2-D shape would each compile one more
    (``benchmarks/bench_first_fit_profile.py`` lists them)."""
    mx = np.empty(nr, np.float64)
    am = np.empty(nr, np.int64)
    sy = np.empty(nr, np.float64)
    s1p = np.empty(nr, np.float64)
    spw = np.empty(nr * npw, np.float64)
    for i in range(nr):
        mx[i] = -np.inf
        am[i] = 0
        sy[i] = 0.0
        s1p[i] = 0.0
    for t in range(nr * npw):
        spw[t] = 0.0
    return mx, am, sy, s1p, spw.reshape((nr, npw))


@numba.njit(**PJIT)
def state_pass(indptr, indices, data, rows, y, W, tile, block_rows, fm, feats):
    """Online per-row state over all ``K`` classes, tile by tile (module docstring).
    ``W`` is ``K x D`` (row ``k`` is ``w_k``), or ``D x K`` with ``fm`` (feature-major:
    row ``j`` holds feature ``j``'s weight of every class; each tile is then a copy of
    contiguous slices, not a transpose, of the features the rows use: ``feats``, int64,
    :func:`used_features` of ``rows``; ignored without ``fm``). ``feats`` is computed by
    the caller so that a class-major evaluation does not compile :func:`used_features`.

    Returns ``(mx, am, sy, s1p, spw)`` for each selected row: the maximum score, the
    first index attaining it, the label's score, ``S' = sum_{k != argmax}
    exp(s_k - mx)`` and ``spw[:, n-2] = S_n = sum_k exp(n (s_k - mx))`` for
    ``n = 2.._NPOW`` (up to the skipped negligible terms).
    """
    nr = rows.size
    if fm:
        D, K = W.shape
    else:
        K, D = W.shape
    npw = _NPOW - 1
    mx, am, sy, s1p, spw = _new_state(nr, npw)
    buf = np.empty(D * min(tile, K), np.float64)
    nb = (nr + block_rows - 1) // block_rows
    if not fm:
        feats = np.arange(D)
    nu = feats.size
    ndb = (nu + 255) // 256
    for k0 in range(0, K, tile):
        kc = min(tile, K - k0)
        T = buf[: D * kc].reshape((D, kc))
        for db in prange(ndb):  # T = W[k0:k0+kc].T (fm: W[:, k0:k0+kc], used rows)
            for jj in range(db * 256, min(nu, (db + 1) * 256)):
                j = feats[jj]
                if fm:
                    src = W[j, k0:k0 + kc]
                    for t in range(kc):
                        T[j, t] = src[t]
                else:
                    for t in range(kc):
                        T[j, t] = W[k0 + t, j]
        for b in prange(nb):
            acc = np.empty(kc, np.float64)
            e = np.empty(kc, np.float64)
            pw = np.empty(kc, np.float64)
            tf = np.empty(kc, np.float64)
            ti = tf.view(np.int64)
            for ii in range(b * block_rows, min(nr, (b + 1) * block_rows)):
                i = rows[ii]
                # scores of row i against the tile: contiguous updates, eight (then
                # four, then one) non-zeros at a time, summed as a tree (fewer loads
                # and stores of acc, shorter dependency chains)
                for t in range(kc):
                    acc[t] = 0.0
                p = indptr[i]
                p1 = indptr[i + 1]
                while p + 7 < p1:
                    j0 = indices[p]
                    j1 = indices[p + 1]
                    j2 = indices[p + 2]
                    j3 = indices[p + 3]
                    j4 = indices[p + 4]
                    j5 = indices[p + 5]
                    j6 = indices[p + 6]
                    j7 = indices[p + 7]
                    v0 = data[p]
                    v1 = data[p + 1]
                    v2 = data[p + 2]
                    v3 = data[p + 3]
                    v4 = data[p + 4]
                    v5 = data[p + 5]
                    v6 = data[p + 6]
                    v7 = data[p + 7]
                    for t in range(kc):
                        acc[t] += (((v0 * T[j0, t] + v1 * T[j1, t])
                                    + (v2 * T[j2, t] + v3 * T[j3, t]))
                                   + ((v4 * T[j4, t] + v5 * T[j5, t])
                                      + (v6 * T[j6, t] + v7 * T[j7, t])))
                    p += 8
                if p + 3 < p1:
                    j0 = indices[p]
                    j1 = indices[p + 1]
                    j2 = indices[p + 2]
                    j3 = indices[p + 3]
                    v0 = data[p]
                    v1 = data[p + 1]
                    v2 = data[p + 2]
                    v3 = data[p + 3]
                    for t in range(kc):
                        acc[t] += (v0 * T[j0, t] + v1 * T[j1, t]) + (v2 * T[j2, t] + v3 * T[j3, t])
                    p += 4
                while p < p1:
                    j = indices[p]
                    v = data[p]
                    for t in range(kc):
                        acc[t] += v * T[j, t]
                    p += 1
                yy = y[i] - k0
                if yy >= 0 and yy < kc:
                    sy[ii] = acc[yy]
                tm = lanemax(acc, kc)
                m = mx[ii]
                skip = -1
                if tm > m:  # new maximum: rescale the running sums
                    if m == -np.inf:
                        s1p[ii] = 0.0
                    else:
                        r = math.exp(m - tm)
                        s1p[ii] = s1p[ii] * r + r  # the old maximum becomes an ordinary term
                        rn = r
                        for n in range(npw):
                            rn *= r
                            spw[ii, n] *= rn
                    m = tm
                    mx[ii] = tm
                    for t in range(kc):
                        if acc[t] == tm:
                            skip = t
                            break
                    am[ii] = k0 + skip
                vexp(acc, m, e, tf, ti, kc)
                if skip >= 0:
                    e[skip] = 0.0  # the argmax is counted apart (exactly 1)
                s1p[ii] += lanesum(e, kc)
                # power sums S_n, n = 2.._NPOW, until the tile's share of
                # S_n / S_1^n / n! is certainly below 1e-20 (module docstring)
                emax = 1.0 if skip >= 0 else math.exp(tm - m)
                one = 1.0 if skip >= 0 else 0.0
                for t in range(kc):
                    pw[t] = e[t]
                ratio = emax / (1.0 + s1p[ii])
                q = kc * ratio
                for n in range(npw):
                    q *= ratio / (n + 2)
                    if q < 1e-20:
                        break
                    spw[ii, n] += mul_lanesum(pw, e, kc) + one
    return mx, am, sy, s1p, spw


#: flags of the float32 kernels: as JIT/PJIT, plus LLVM's ``contract`` (a product and
#: the sum it feeds may become one fused multiply-add, rounded once; no reassociation)
JIT32 = dict(JIT, fastmath={"contract"})
PJIT32 = dict(PJIT, fastmath={"contract"})
#: flags of the float32 path's sums: may also reassociate (so that LLVM vectorises them)
JIT32R = dict(JIT, fastmath={"contract", "reassoc"})
_F0 = np.float32(0.0)
_F1 = np.float32(1.0)
_LOG2E32 = np.float32(1.4426950408889634)
_LN2_HI32 = np.float32(0.693359375)  # 0x3f318000: 11 significant bits, k * hi is exact
_LN2_LO32 = np.float32(-2.12194440e-4)
_SHIFT32 = np.float32(12582912.0)  # 1.5 * 2**23
_EXP_MIN32 = np.float32(-87.0)  # exp(-87) ~ 1.6e-38 is still a normal float32
_C2 = np.float32(1.0 / 2.0)
_C3 = np.float32(1.0 / 6.0)
_C4 = np.float32(1.0 / 24.0)
_C5 = np.float32(1.0 / 120.0)
_C6 = np.float32(1.0 / 720.0)
_C7 = np.float32(1.0 / 5040.0)
_I127 = np.int32(127)
_I23 = np.int32(23)
_I31 = np.int32(31)
_I7F = np.int32(0x7FFFFFFF)


@inner(**JIT32)
def vexp32_sum(x, shift, out, tmpf, tmpi, n):
    """``out[t] = exp(x[t] - shift)`` in float32 for ``t < n``, ``x[t] <= shift``
    (``x`` and ``shift`` float32), to about 1 ulp of float32; returns ``sum(out[:n])``
    accumulated in float64 (:func:`sum32to64`). Vectorised (16 lanes with AVX-512).

    Cody-Waite reduction, degree-7 Taylor polynomial (truncation < 5e-9 relative on
    ``|r| <= log(2)/2``). Arguments below -87 give 0 (``exp(-87) ~ 1.6e-38``, always
    added to a sum of at least 1). ``tmpi`` must be ``tmpf.view(np.int32)``.
    """
    for t in range(n):
        xx = x[t] - shift
        xx = xx if xx > _EXP_MIN32 else _EXP_MIN32
        kf = xx * _LOG2E32 + _SHIFT32
        tmpf[t] = kf
        k = kf - _SHIFT32
        r = (xx - k * _LN2_HI32) - k * _LN2_LO32
        p = _C7
        p = p * r + _C6
        p = p * r + _C5
        p = p * r + _C4
        p = p * r + _C3
        p = p * r + _C2
        p = p * r + _F1
        p = p * r + _F1
        out[t] = p
    for t in range(n):
        tmpi[t] = (tmpi[t] + _I127) << _I23  # 2**k
    for t in range(n):
        v = out[t] * tmpf[t]
        out[t] = v if x[t] - shift >= _EXP_MIN32 else _F0
    return sum32to64(out, n)


@inner(**JIT32R)
def sum32to64(x, n):
    """``sum(x[:n])`` of a float32 array, in float64 (vectorised: the order of the
    additions is LLVM's, fixed at compile time)."""
    s = 0.0
    for t in range(n):
        s += np.float64(x[t])
    return s


@inner(**JIT32)
def max32(xi, n, tmpi, tmpf):
    """``max(x[:n])`` of the float32 array ``x`` (``n >= 1``, no NaN) given as
    ``xi = x.view(np.int32)``; ``tmpi = tmpf.view(np.int32)`` is scratch.

    Vectorised as a maximum of integers: ``i ^ ((i >> 31) & 0x7fffffff)`` orders
    the bit patterns of float32 numbers as the numbers (-0.0 below +0.0); LLVM does
    not vectorise a float maximum without fast-math flags that numba cannot give it.
    """
    m = -2147483648
    for t in range(n):
        i = xi[t]
        k = i ^ ((i >> _I31) & _I7F)
        m = max(m, k)
    tmpi[0] = np.int32(m ^ ((m >> 31) & 0x7fffffff))
    return tmpf[0]


@inner(**JIT32)
def scores32(indptr, indices, data, i, T, acc, kc):
    """``acc[:kc] = x_i . T[:, :kc]`` in float32: eight (then four, then one)
    non-zeros per pass over the contiguous ``acc``, each a fused multiply-add in the
    order of the non-zeros (a sequential dot product, one rounding per term)."""
    p = indptr[i]
    p1 = indptr[i + 1]
    for t in range(kc):
        acc[t] = _F0
    while p + 7 < p1:
        j0 = indices[p]
        j1 = indices[p + 1]
        j2 = indices[p + 2]
        j3 = indices[p + 3]
        j4 = indices[p + 4]
        j5 = indices[p + 5]
        j6 = indices[p + 6]
        j7 = indices[p + 7]
        v0 = data[p]
        v1 = data[p + 1]
        v2 = data[p + 2]
        v3 = data[p + 3]
        v4 = data[p + 4]
        v5 = data[p + 5]
        v6 = data[p + 6]
        v7 = data[p + 7]
        for t in range(kc):
            a = acc[t] + v0 * T[j0, t]
            a = a + v1 * T[j1, t]
            a = a + v2 * T[j2, t]
            a = a + v3 * T[j3, t]
            a = a + v4 * T[j4, t]
            a = a + v5 * T[j5, t]
            a = a + v6 * T[j6, t]
            acc[t] = a + v7 * T[j7, t]
        p += 8
    if p + 3 < p1:
        j0 = indices[p]
        j1 = indices[p + 1]
        j2 = indices[p + 2]
        j3 = indices[p + 3]
        v0 = data[p]
        v1 = data[p + 1]
        v2 = data[p + 2]
        v3 = data[p + 3]
        for t in range(kc):
            a = acc[t] + v0 * T[j0, t]
            a = a + v1 * T[j1, t]
            a = a + v2 * T[j2, t]
            acc[t] = a + v3 * T[j3, t]
        p += 4
    while p < p1:
        j = indices[p]
        v = data[p]
        for t in range(kc):
            acc[t] += v * T[j, t]
        p += 1


@inner(**JIT32R)
def widen_mul_lanesum(pw, e, n):
    """``pw[:n] = float64(e[:n])**2`` and return ``sum(pw[:n])``: the first power sum
    from the float32 exponentials, in float64 (vectorised)."""
    s = 0.0
    for t in range(n):
        q = np.float64(e[t])
        q = q * q
        pw[t] = q
        s += q
    return s


@inner(**JIT32R)
def mul_lanesum_wide(pw, e, n):
    """``pw[:n] *= float64(e[:n])`` and return ``sum(pw[:n])`` (float64, vectorised)."""
    s = 0.0
    for t in range(n):
        q = pw[t] * np.float64(e[t])
        pw[t] = q
        s += q
    return s


@numba.njit(**PJIT32)
def transpose32(W, k0, kc, T, fm, feats):
    """``T[:, :kc] = float32(W[k0:k0+kc].T)`` in parallel over blocks of features
    (``fm``: ``W`` is ``D x K``, and only the rows ``feats`` of ``T[:, :kc] =
    float32(W[:, k0:k0+kc])`` are written)."""
    if fm:
        nu = feats.size
        for db in prange((nu + 255) // 256):
            for jj in range(db * 256, min(nu, (db + 1) * 256)):
                j = feats[jj]
                src = W[j, k0:k0 + kc]
                for t in range(kc):
                    T[j, t] = np.float32(src[t])
        return
    D = W.shape[1]
    ndb = (D + 255) // 256
    for db in prange(ndb):
        for j in range(db * 256, min(D, (db + 1) * 256)):
            for t in range(kc):
                T[j, t] = np.float32(W[k0 + t, j])


@numba.njit(**PJIT32)
def state_pass32(indptr, indices, data, rows, y, W, tile, block_rows, fm, feats):
    """:func:`state_pass` with float32 scores: the tile of ``W^T`` and ``data`` in
    float32, each score a float32 sum of fused multiply-adds, the exponentials in
    float32; the running state (maximum, sums, power sums) in float64. ``W``, ``fm``
    and ``feats`` as in :func:`state_pass`."""
    nr = rows.size
    if fm:
        D, K = W.shape
    else:
        K, D = W.shape
    npw = _NPOW - 1
    mx, am, sy, s1p, spw = _new_state(nr, npw)
    tw = min(tile, K)
    buf = np.empty(D * tw, dtype=np.float32)
    nb = (nr + block_rows - 1) // block_rows
    for k0 in range(0, K, tile):
        kc = min(tile, K - k0)
        T = buf[: D * kc].reshape((D, kc))
        transpose32(W, k0, kc, T, fm, feats)
        for b in prange(nb):
            acc = np.empty(kc, dtype=np.float32)
            acci = acc.view(np.int32)
            e = np.empty(kc, dtype=np.float32)
            tf = np.empty(kc, dtype=np.float32)
            ti = tf.view(np.int32)
            pw = np.empty(kc, np.float64)
            for ii in range(b * block_rows, min(nr, (b + 1) * block_rows)):
                i = rows[ii]
                scores32(indptr, indices, data, i, T, acc, kc)
                yy = y[i] - k0
                if yy >= 0 and yy < kc:
                    sy[ii] = np.float64(acc[yy])
                tm32 = max32(acci, kc, ti, tf)
                tm = np.float64(tm32)
                m = mx[ii]
                skip = -1
                if tm > m:  # new maximum: rescale the running sums
                    if m == -np.inf:
                        s1p[ii] = 0.0
                    else:
                        r = math.exp(m - tm)
                        s1p[ii] = s1p[ii] * r + r
                        rn = r
                        for n in range(npw):
                            rn *= r
                            spw[ii, n] *= rn
                    m = tm
                    mx[ii] = tm
                    for t in range(kc):
                        if acc[t] == tm32:
                            skip = t
                            break
                    am[ii] = k0 + skip
                    acc[skip] = -np.inf  # the argmax is counted apart (exactly 1)
                s = vexp32_sum(acc, np.float32(m), e, tf, ti, kc)
                if skip >= 0:
                    acc[skip] = tm32
                s1p[ii] += s
                emax = 1.0 if skip >= 0 else math.exp(tm - m)
                one = 1.0 if skip >= 0 else 0.0
                ratio = emax / (1.0 + s1p[ii])
                q = kc * ratio * ratio / 2.0
                if q < 1e-20:
                    continue
                spw[ii, 0] += widen_mul_lanesum(pw, e, kc) + one
                for n in range(1, npw):
                    q *= ratio / (n + 2)
                    if q < 1e-20:
                        break
                    spw[ii, n] += mul_lanesum_wide(pw, e, kc) + one
    return mx, am, sy, s1p, spw


@numba.njit(**PJIT)
def finish(mx, am, sy, s1p, spw, y_sel, K):
    """Per-row loss, error indicator and defective metric from the online state."""
    nr = mx.size
    npw = spw.shape[1]
    nll = np.empty(nr, np.float64)
    err = np.empty(nr, np.float64)
    dfc = np.empty(nr, np.float64)
    for ii in prange(nr):
        li = (mx[ii] - sy[ii]) + math.log1p(s1p[ii])
        nll[ii] = li
        err[ii] = 1.0 if am[ii] != y_sel[ii] else 0.0
        s1 = 1.0 + s1p[ii]
        tail = 0.0
        fact = 1.0
        for n in range(2, npw + 2):
            fact *= n
        for n in range(npw + 1, 1, -1):  # smallest terms first
            tail += spw[ii, n - 2] / s1**n / fact
            fact /= n
        dfc[ii] = -math.exp(-li) + math.log((K + 1.0) + tail)
    return nll, err, dfc


# the serial twins (module docstring): made here, after everything they call
state_pass_serial = serial_twin(state_pass, JIT)
transpose32_serial = serial_twin(transpose32, JIT32, inner_only=True)
state_pass32_serial = serial_twin(state_pass32, JIT32, transpose32=transpose32_serial)
finish_serial = serial_twin(finish, JIT)
