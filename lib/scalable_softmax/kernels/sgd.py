"""The numba kernels of explicit SGD (``"vanilla"``, ``"umax"``, ``"raman"``;
:mod:`scalable_softmax.methods.sgd` holds the trainers, the plain NumPy
``reference_step`` and the description of the lazy ridge, the software pipelining and
the divergence checks these kernels implement).

``epoch_m1``, ``epoch_multi``, ``epoch_m1_hogwild``
    one epoch with one class per step, with ``m > 1`` classes per step, and Hogwild's
    parallel chunks of ``epoch_m1``. They take the same leading arguments and end in the
    same order: ``..., seed, prefetch, counters, xmax, guard``.
``draw_classes_m1(seed, order, y, K)``, ``draw_classes_multi(seed, order, y, K, m)``,
``draw_classes_all(seed, order, y, K, m)``
    the classes an epoch draws (the kernels' own stream), as int64 arrays.
``PREFETCH_DEFAULT``
    the kernel mode ``prefetch=True`` selects when ``W`` does not fit in the cache.
``KIND_VANILLA``, ``KIND_UMAX``, ``KIND_RAMAN_VANILLA``, ``KIND_RAMAN_UMAX``
    the ``kind`` argument of the epoch kernels.

The other functions are the pieces the epoch kernels are built from; all are numba code.
The datapoint pipeline (hints of the per-datapoint values and the CSR row a few steps
ahead) is :func:`scalable_softmax.kernels.common.prefetch_ahead`, shared with implicit
SGD and its Hogwild chunks; the step's scalars are :func:`m1_scalars` (``epoch_m1``)
and the class draws :func:`draw_m1` and :func:`draw_step`.

Why ``epoch_m1`` and ``epoch_multi`` keep a step body each: ``epoch_m1`` is the
two-row step specialised for speed (both rows' dot products and updates fused into one
pass over ``x``, the next step's rows prefetched inside that pass, a dense-row BLAS
path, ``O(1)`` norm updates for U-max's projection), ``epoch_multi`` loops over
``m + 1`` rows with the label row's dot product first. One body would be
``epoch_multi``'s loop (slower for ``m = 1``, the setting of every notebook) or carry
``epoch_m1``'s special cases as branches, and running ``m = 1`` through
``epoch_multi`` moves results: it gives ``epoch_m1``'s bits only on sparse rows for
vanilla SGD and Raman's vanilla variant, and differs in the last bits wherever the
arithmetic differs: U-max's reset threshold (``softplus(z_k - z_y)`` in ``epoch_m1``,
a shifted log-sum-exp in ``epoch_multi``; Raman's U-max variant: ``logaddexp``), the
projection's row norm (updated from the dot product in ``epoch_m1``, summed entry by
entry in ``epoch_multi``) and dense rows (BLAS's summation order). So the pair stays;
``tests/test_sgd.py::test_the_two_step_bodies_agree_on_one_class_per_step`` pins
where they agree bit for bit and where to rounding, and both are tested against the
same ``reference_step``. What the two bodies share bit for bit is written once:
the lazy ridge with its fold (:func:`decay_scale`), the overflow guard
(:func:`guard_step`) and the projection of a row's scale (:func:`project_scale`),
inlined into both.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from scalable_softmax.kernels.common import IJIT, JIT, PJIT, prefetch_ahead
from scalable_softmax.kernels.common import logaddexp as _logaddexp
from scalable_softmax.kernels.common import prefetch_w as _prefetch_w
from scalable_softmax.kernels.common import rand_below as _rand_below
from scalable_softmax.kernels.common import seed_state as _seed_state
from scalable_softmax.kernels.common import softplus as _softplus

__all__ = ["KIND_RAMAN_UMAX", "KIND_RAMAN_VANILLA", "KIND_UMAX", "KIND_VANILLA",
           "PREFETCH_DEFAULT", "axpy2", "axpy_checked", "draw_all_drop_label",
           "draw_classes_all", "draw_classes_m1", "draw_classes_multi", "draw_distinct",
           "decay_scale", "draw_m1", "draw_step", "epoch_m1", "epoch_m1_hogwild",
           "epoch_multi", "exp", "floyd", "fold_all", "fold_row", "guard_step", "m1_scalars",
           "prefetch_row_rest", "project_scale"]

# kernel "kinds"
KIND_VANILLA = 0
KIND_UMAX = 1
KIND_RAMAN_VANILLA = 2
KIND_RAMAN_UMAX = 3

# pipelining distances (in steps): W rows (and class draws), x row, indptr/y/u/xsq
_LW = 2
_LX = 4
_LI = 6
_RING = 8          # power of two > _LW
_LWM = 1           # the m > 1 kernel's distance (a step touches m + 1 rows)
PREFETCH_DEFAULT = 2   # mode used by prefetch=True (see epoch_m1) ...
_MASK = _RING - 1

# lazy-scale renormalisation window
_SCALE_LO = 1e-100
_SCALE_HI = 1e100

# the per-entry overflow check of the row update is skipped while a running bound on
# max |V| (guard) stays below this
_GUARD = 1e300


@numba.njit(**JIT)
def draw_m1(state, yi, K):
    """One class uniform on ``{0..K-1} minus {yi}``."""
    state, k = _rand_below(state, K - 1)
    if k >= yi:
        k += 1
    return state, k


@numba.njit(**JIT)
def floyd(state, n, m, out):
    """``m`` distinct values uniform on ``{0..n-1}`` into ``out[:m]`` (Robert Floyd's
    algorithm: exactly ``m`` draws; the *set* is uniform, its order is not)."""
    c = 0
    for j in range(n - m, n):
        state, t = _rand_below(state, j + 1)
        found = False
        for q in range(c):
            if out[q] == t:
                found = True
                break
        out[c] = j if found else t
        c += 1
    return state


@numba.njit(**JIT)
def draw_distinct(state, yi, K, m, out):
    """``m`` distinct classes uniform on ``{0..K-1} minus {yi}`` into ``out[:m]``."""
    state = floyd(state, K - 1, m, out)
    for q in range(m):
        if out[q] >= yi:
            out[q] += 1
    return state


@numba.njit(**JIT)
def draw_all_drop_label(state, yi, K, m, out):
    """The authors' code's draw: ``m`` distinct classes uniform on *all* ``K`` classes
    (``m <= K``), then the label ``yi`` removed if it was drawn. The remaining classes
    go to ``out[:c]``; returns ``(state, c)`` with ``c = m`` or ``m - 1``."""
    state = floyd(state, K, m, out)
    w = 0
    for q in range(m):
        if out[q] != yi:
            out[w] = out[q]
            w += 1
    return state, w


_EXP_MAX = 709.782712893384   # math.exp overflows above this


@numba.njit(**JIT)
def exp(x):
    """``exp(x)``, ``inf`` on overflow (also in plain Python, where ``math.exp``
    raises)."""
    if x > _EXP_MAX:
        return math.inf
    return math.exp(x)


@numba.njit(**JIT)
def fold_row(W, j, s, rs):
    """``W[j] *= s``; recompute ``rs[j, 1] = ||W[j]||^2``."""
    q = 0.0
    for c in range(W.shape[1]):
        w = W[j, c] * s
        W[j, c] = w
        q += w * w
    rs[j, 1] = q


@numba.njit(**JIT)
def axpy2(a, b, x, v, w):
    """``v += a x``, ``w += b x`` (contiguous, one pass over ``x``)."""
    for c in range(x.shape[0]):
        xc = x[c]
        v[c] += a * xc
        w[c] += b * xc


@numba.njit(**JIT)
def axpy_checked(a, x, w):
    """``w += a x``; returns 0, or NaN if an updated entry is non-finite."""
    chk = 0.0
    for c in range(x.shape[0]):
        new = w[c] + a * x[c]
        w[c] = new
        chk += new * 0.0
    return chk


@numba.njit(**JIT)
def fold_all(W, rs):
    """Fold every row whose scale ``rs[j, 0]`` is not 1; scales become 1."""
    for j in range(W.shape[0]):
        if rs[j, 0] != 1.0:
            fold_row(W, j, rs[j, 0], rs)
            rs[j, 0] = 1.0


@numba.njit(**IJIT)
def decay_scale(W, rs, j, s, lr_mu, guard):
    """The lazy ridge of one step on row ``j`` (both step bodies): its scale ``s``
    times ``1 - lr_mu beta_j`` (``lr_mu = lr * mu / N``); a scale outside
    ``[_SCALE_LO, _SCALE_HI]`` is folded into the row (:func:`fold_row`; ``guard``
    unbounded when it grew). Returns ``(scale, folded)``: the new scale (1 when
    folded) and the factor folded into ``W[j]`` (1: none)."""
    s = s * (1.0 - lr_mu * rs[j, 2])
    if not (_SCALE_LO <= abs(s) <= _SCALE_HI):
        if abs(s) > 1.0:
            guard[0] = np.inf
        fold_row(W, j, s, rs)
        return 1.0, s
    return s, 1.0


@numba.njit(**IJIT)
def guard_step(guard, step):
    """Add ``step`` (a bound on the change of any entry) to the running bound
    ``guard[0]`` on ``max |V|``; returns whether the update must check every entry
    (the bound before it does not keep ``guard + step`` below ``_GUARD``)."""
    checked = not (guard[0] + step < _GUARD)
    guard[0] += step
    return checked


@numba.njit(**IJIT)
def project_scale(s, q, bw2):
    """U-max's projection of a row (both step bodies): ``(s, 0)`` when the row's squared
    norm ``s^2 q`` (scale ``s``, ``q = ||V_j||^2``) is at most ``bw2``, else the scale
    that brings it onto the ball, and 1."""
    n2 = s * s * q
    if n2 > bw2:
        return s * math.sqrt(bw2 / n2), 1
    return s, 0


@numba.njit(**JIT)
def m1_scalars(kind, zk, zy, ui, Km1, lr, delta0, u_lo, u_hi):
    """The scalar part of one ``m = 1`` step.

    Returns ``(gk, gy, u_new, reset, ok)``: the gradient coefficients of ``x_i`` for
    ``w_k`` and ``w_{y_i}`` (per-datapoint units), the clipped new ``u_i``, whether the
    U-max reset fired, and whether every quantity is finite.
    """
    reset = False
    if kind <= KIND_UMAX:
        d = zk - zy
        if kind == KIND_UMAX:
            sp_ = _softplus(d)
            if ui < sp_ - delta0:
                ui = sp_
                reset = True
        g = Km1 * exp(d - ui)
        du = 1.0 - exp(-ui) - g
        gk = g
        gy = -g
    else:
        if kind == KIND_RAMAN_UMAX:
            lse = _logaddexp(zy, zk)
            if ui < lse - delta0:
                ui = lse
                reset = True
        ey = exp(zy - ui)
        gk = Km1 * exp(zk - ui)
        gy = ey - 1.0
        du = 1.0 - ey - gk
    un = ui - lr * du
    ok = (math.isfinite(zk) and math.isfinite(zy) and math.isfinite(gk)
          and math.isfinite(gy) and math.isfinite(un))
    if un < u_lo:
        un = u_lo
    elif un > u_hi:
        un = u_hi
    return gk, gy, un, reset, ok


@numba.njit(**JIT)
def epoch_m1(kind, indptr, indices, data, dense, y, order, W, rs, u,
             lr, mu_n, delta0, u_lo, u_hi, bw2, project, seed, prefetch, counters,
             xmax, guard, xsq):
    """One epoch of vanilla / U-max / Raman SGD with one class per step.

    Parameters
    ----------
    kind : int, one of ``KIND_*``
    indptr (int64), indices (int32), data (float64) : the CSR arrays of ``X``
    dense : bool, every row holds all ``D`` columns in order (contiguous ``W`` access)
    y : int64 (N,)
    order : int64 (n,), datapoints of this epoch
    W : float64 (K, D), the unscaled rows ``V`` (true ``w_j = rs[j, 0] V[j]``); updated
    rs : float64 (K, 4), per-class state in one cache line: lazy scale, ``||V_j||^2``,
        the ridge weight ``beta_j``, unused; columns 0 and 1 updated
    u : float64 (N,); updated
    lr : learning rate; mu_n : ``mu / N``
    delta0 : U-max threshold; u_lo, u_hi : clip interval of ``u`` after the step
    bw2 : ``B_W^2`` (projection of rows when ``project``)
    seed : int64, seeds the class stream
    prefetch : int, software pipelining: 0 off; 1 the next step's ``W`` rows
        prefetched in a block at the start of the step; 2 the same interleaved with this
        step's dot product (sparse rows; dense rows use 1); 3 only the ``x`` rows,
        ``indptr``, ``y`` and ``u`` (for a ``W`` that stays in cache). The ``x`` rows
        are prefetched in modes 1 to 3. Results are identical in every mode.
    counters : int64 (4,), out: steps, diverged step (-1), u resets, W projections
    xmax : ``max |x_ic|`` over the data
    guard : float64 (1,), a running upper bound on ``max |V|``: an entry cannot
        overflow while it stays below ``_GUARD``, so the per-entry check is skipped;
        updated
    xsq : float64 (N,), ``||x_i||^2`` (read by the dense path when ``project``; the
        sparse path sums it in its dot-product loop)
    """
    n = order.shape[0]
    K = W.shape[0]
    D = W.shape[1]
    Km1 = float(K - 1)
    ridge = mu_n > 0.0
    state = _seed_state(seed)
    ring = np.empty(_RING, np.int64)
    for t in range(min(_LW, n)):
        state, kk = draw_m1(state, y[order[t]], K)
        ring[t & _MASK] = kk
    resets = 0
    projections = 0
    diverged = -1
    steps = 0
    for t in range(n):
        # ---- pipeline: prefetch what later steps will touch ------------------------
        if prefetch:
            prefetch_ahead(indptr, indices, data, y, u, xsq, project and dense, order, t, n,
                           _LI, _LX, not dense)
        # next step's rows: q runs over its non-zeros (interleaved mode: in the dot loop)
        q = 0
        q1 = 0
        kk = 0
        yj = 0
        if t + _LW < n:
            j = order[t + _LW]
            yj = y[j]
            state, kk = draw_m1(state, yj, K)
            ring[(t + _LW) & _MASK] = kk
            if prefetch and ridge:
                _prefetch_w(rs, kk, 0)
                _prefetch_w(rs, yj, 0)
            if prefetch == 2 and not dense:
                q = indptr[j]
                q1 = indptr[j + 1]
            elif prefetch == 1 or prefetch == 2:
                b0 = indptr[j]
                b1 = indptr[j + 1]
                if dense:
                    for c in range(0, D, 8):
                        _prefetch_w(W, kk, c)
                        _prefetch_w(W, yj, c)
                else:
                    for p in range(b0, b1):
                        c = indices[p]
                        _prefetch_w(W, kk, c)
                        _prefetch_w(W, yj, c)
        # ---- step t -----------------------------------------------------------------
        i = order[t]
        yi = y[i]
        k = ring[t & _MASK]
        a0 = indptr[i]
        a1 = indptr[i + 1]
        sk = 1.0
        sy = 1.0
        if ridge:
            sk = rs[k, 0]
            sy = rs[yi, 0]
        dk = 0.0
        dy = 0.0
        xx = 0.0
        if dense:
            xr = data[a0:a0 + D]
            dk = np.dot(xr, W[k])        # BLAS ddot: vectorised, deterministic
            dy = np.dot(xr, W[yi])
            if project:
                xx = xsq[i]
        else:
            for p in range(a0, a1):
                c = indices[p]
                v = data[p]
                dk += v * W[k, c]
                dy += v * W[yi, c]
                xx += v * v
                if q < q1:
                    c2 = indices[q]
                    _prefetch_w(W, kk, c2)
                    _prefetch_w(W, yj, c2)
                    q += 1
            for qr in range(q, q1):
                c2 = indices[qr]
                _prefetch_w(W, kk, c2)
                _prefetch_w(W, yj, c2)
        zk = sk * dk
        zy = sy * dy
        gk, gy, un, reset, ok = m1_scalars(kind, zk, zy, u[i], Km1, lr, delta0, u_lo, u_hi)
        if not ok:
            diverged = t
            break
        if reset:
            resets += 1
        if ridge:
            sk, fk = decay_scale(W, rs, k, sk, lr * mu_n, guard)
            sy, fy = decay_scale(W, rs, yi, sy, lr * mu_n, guard)
            dk *= fk                          # x . V of the (folded) rows
            dy *= fy
        ak = -lr * gk / sk
        ay = -lr * gy / sy
        if not (math.isfinite(ak) and math.isfinite(ay)):
            diverged = t
            break
        chk = 0.0
        # a running bound on max |V|: below _GUARD no entry can overflow, so the
        # per-entry check is needed only above it
        checked = guard_step(guard, max(abs(ak), abs(ay)) * xmax)
        if dense:
            xr = data[a0:a0 + D]
            if checked:
                chk = axpy_checked(ak, xr, W[k]) + axpy_checked(ay, xr, W[yi])
            else:
                axpy2(ak, ay, xr, W[k], W[yi])
        elif checked:
            for p in range(a0, a1):
                c = indices[p]
                v = data[p]
                new = W[k, c] + ak * v
                W[k, c] = new
                chk += new * 0.0
                new = W[yi, c] + ay * v
                W[yi, c] = new
                chk += new * 0.0
        else:
            for p in range(a0, a1):
                c = indices[p]
                v = data[p]
                W[k, c] += ak * v
                W[yi, c] += ay * v
        qk = 0.0
        qy = 0.0
        if project:
            # ||V + a x||^2 = ||V||^2 + 2 a (x . V) + a^2 ||x||^2, with x . V from the
            # dot product above: O(1), no pass over the row
            qk = rs[k, 1] + ak * (2.0 * dk + ak * xx)
            qy = rs[yi, 1] + ay * (2.0 * dy + ay * xx)
        if project:
            qk = max(qk, 0.0)
            qy = max(qy, 0.0)
            rs[k, 1] = qk
            rs[yi, 1] = qy
            sk, pk = project_scale(sk, qk, bw2)
            sy, py = project_scale(sy, qy, bw2)
            projections += pk + py
        if ridge:
            rs[k, 0] = sk
            rs[yi, 0] = sy
        u[i] = un
        if chk != 0.0:       # NaN != 0: a row entry overflowed during the update
            diverged = t
            break
        steps = t + 1
    counters[0] = steps
    counters[1] = diverged
    counters[2] = resets
    counters[3] = projections


@numba.njit(**PJIT)
def epoch_m1_hogwild(kind, indptr, indices, data, dense, y, order, W, rs, u,
                     lr, mu_n, delta0, u_lo, u_hi, bw2, project, seeds, prefetch,
                     counters, xmax, guard, xsq):
    """Hogwild: ``len(seeds)`` contiguous chunks of ``order`` run in parallel (no locks).
    ``counters`` is ``(chunks, 4)``; the diverged index is local to the chunk."""
    nch = seeds.shape[0]
    n = order.shape[0]
    for c in numba.prange(nch):
        lo = (n * c) // nch
        hi = (n * (c + 1)) // nch
        epoch_m1(kind, indptr, indices, data, dense, y, order[lo:hi], W, rs,
                 u, lr, mu_n, delta0, u_lo, u_hi, bw2, project, seeds[c], prefetch,
                 counters[c], xmax, guard, xsq)


@numba.njit(**JIT)
def draw_step(state, yi, K, m, from_all, out):
    """The classes of one ``m > 1`` step into ``out[:mS]``; returns ``(state, mS)``
    (``mS = m``, or ``m - 1`` when ``from_all`` drew the label)."""
    if from_all:
        return draw_all_drop_label(state, yi, K, m, out)
    return draw_distinct(state, yi, K, m, out), m


@numba.njit(**JIT)
def prefetch_row_rest(W, k, indices, q, q1):
    """Prefetch (write intent) ``W[k, indices[q:q1]]``."""
    for p in range(q, q1):
        _prefetch_w(W, k, indices[p])


@numba.njit(**JIT)
def epoch_multi(kind, indptr, indices, data, y, order, W, rs, u, m, from_all,
                lr, mu_n, delta0, u_lo, u_hi, bw2, project, seed, prefetch, counters,
                xmax, guard):
    """One epoch with ``m`` distinct sampled classes per step (weight ``(K-1)/m``).

    Same arguments as :func:`epoch_m1` plus ``m`` (no ``dense``) and ``from_all``:
    draw the ``m`` classes from all ``K`` and drop the label when drawn (the authors'
    code), so a step has ``|S| = m`` or ``m - 1`` classes, each weighted
    ``(K-1)/|S|`` (``|S| = 0``, possible only for ``m = 1``: a step on ``u_i`` alone).
    ``counters[4]`` counts the steps whose draw hit the label.

    Software pipelining (``prefetch`` non-zero): the classes are drawn ``_LWM`` steps
    ahead (in step order, so the random stream is that of the plain loop), and the
    ``m + 1`` rows' entries of step ``t + _LWM`` are prefetched (modes 1 and 2), one row
    per dot-product loop of step ``t``; the ``x`` row of step ``t + _LX`` and ``indptr``/``y``/``u``
    of step ``t + _LI`` earlier still. The arithmetic is that of the plain loop, term by
    term in the same order, so every mode gives bit-identical results. The per-entry
    overflow check of the row update runs only once the running bound ``guard`` on
    ``max |V|`` passes ``_GUARD`` (as in :func:`epoch_m1`).
    """
    n = order.shape[0]
    K = W.shape[0]
    hits = 0
    ridge = mu_n > 0.0
    state = _seed_state(seed)
    ksr = np.empty((_RING, max(m, 1)), np.int64)   # classes of steps t .. t + _LWM
    msr = np.empty(_RING, np.int64)                # their |S|
    for t in range(min(_LWM, n)):
        state, ms_ = draw_step(state, y[order[t]], K, m, from_all, ksr[t & _MASK])
        msr[t & _MASK] = ms_
    z = np.empty(max(m, 1), np.float64)
    g = np.empty(max(m, 1), np.float64)
    resets = 0
    projections = 0
    diverged = -1
    steps = 0
    for t in range(n):
        # ---- pipeline: draw step t + _LWM, prefetch what later steps touch ----------
        if prefetch:
            prefetch_ahead(indptr, indices, data, y, u, u, False, order, t, n, _LI, _LX, True)
        f0 = 0
        f1 = 0
        fy = 0
        mf = 0
        kf = ksr[(t + _LWM) & _MASK]
        if t + _LWM < n:
            j = order[t + _LWM]
            fy = y[j]
            state, mf = draw_step(state, fy, K, m, from_all, kf)
            msr[(t + _LWM) & _MASK] = mf
            if prefetch == 1 or prefetch == 2:    # mode 3: W stays in cache
                f0 = indptr[j]
                f1 = indptr[j + 1]
                if ridge:
                    _prefetch_w(rs, fy, 0)
                    for q in range(mf):
                        _prefetch_w(rs, kf[q], 0)
        # ---- step t -----------------------------------------------------------------
        i = order[t]
        yi = y[i]
        ks = ksr[t & _MASK]
        mS = msr[t & _MASK]
        if from_all:
            if mS < m:
                hits += 1
            r = (K - 1) / mS if mS > 0 else 0.0
        else:
            r = (K - 1) / m
        a0 = indptr[i]
        a1 = indptr[i + 1]
        # the label's dot product, the next label row prefetched alongside
        dy = 0.0
        qf = f0
        for p in range(a0, a1):
            dy += data[p] * W[yi, indices[p]]
            if qf < f1:
                _prefetch_w(W, fy, indices[qf])
                qf += 1
        if f1 > f0:
            prefetch_row_rest(W, fy, indices, qf, f1)
        zy = rs[yi, 0] * dy
        ok = math.isfinite(zy)
        for q in range(mS):
            kq = ks[q]
            dq = 0.0
            qf = f0
            qe = f1 if q < mf else f0
            kfq = kf[q] if q < mf else 0
            for p in range(a0, a1):
                dq += data[p] * W[kq, indices[p]]
                if qf < qe:
                    _prefetch_w(W, kfq, indices[qf])
                    qf += 1
            if qe > f0:
                prefetch_row_rest(W, kfq, indices, qf, qe)
            z[q] = rs[kq, 0] * dq
            ok = ok and math.isfinite(z[q])
        if f1 > f0:
            for q in range(mS, mf):       # the next step has more rows than this one
                prefetch_row_rest(W, kf[q], indices, f0, f1)
        ui = u[i]
        if kind <= KIND_UMAX:
            if kind == KIND_UMAX:
                # log(1 + sum_q exp(z_q - zy)), stable
                mx = 0.0
                for q in range(mS):
                    mx = max(mx, z[q] - zy)
                acc = math.exp(-mx)
                for q in range(mS):
                    acc += math.exp(z[q] - zy - mx)
                target = mx + math.log(acc)
                if ui < target - delta0:
                    ui = target
                    resets += 1
            G = 0.0
            for q in range(mS):
                g[q] = r * exp(z[q] - zy - ui)
                G += g[q]
            gy = -G
            du = 1.0 - exp(-ui) - G
        else:
            if kind == KIND_RAMAN_UMAX:
                mx = zy
                for q in range(mS):
                    mx = max(mx, z[q])
                acc = math.exp(zy - mx)
                for q in range(mS):
                    acc += math.exp(z[q] - mx)
                target = mx + math.log(acc)
                if ui < target - delta0:
                    ui = target
                    resets += 1
            ey = exp(zy - ui)
            G = 0.0
            for q in range(mS):
                g[q] = r * exp(z[q] - ui)
                G += g[q]
            gy = ey - 1.0
            du = 1.0 - ey - G
        un = ui - lr * du
        ok = ok and math.isfinite(un) and math.isfinite(gy) and math.isfinite(G)
        if not ok:
            diverged = t
            break
        if un < u_lo:
            un = u_lo
        elif un > u_hi:
            un = u_hi
        chk = 0.0
        # the m sampled rows, then the label row; all distinct
        for q in range(mS + 1):
            if q < mS:
                j = ks[q]
                coef = g[q]
            else:
                j = yi
                coef = gy
            s = rs[j, 0]
            if ridge:
                s, _ = decay_scale(W, rs, j, s, lr * mu_n, guard)
            a = -lr * coef / s
            if not math.isfinite(a):
                diverged = t
                break
            # a running bound on max |V|: below _GUARD no entry can overflow
            checked = guard_step(guard, abs(a) * xmax)
            if project:
                qj = rs[j, 1]
                for p in range(a0, a1):
                    c = indices[p]
                    old = W[j, c]
                    new = old + a * data[p]
                    W[j, c] = new
                    chk += new * 0.0
                    qj += (new - old) * (new + old)
                qj = max(qj, 0.0)
                rs[j, 1] = qj
                s, pj = project_scale(s, qj, bw2)
                projections += pj
            elif checked:
                for p in range(a0, a1):
                    c = indices[p]
                    new = W[j, c] + a * data[p]
                    W[j, c] = new
                    chk += new * 0.0
            else:
                for p in range(a0, a1):
                    W[j, indices[p]] += a * data[p]
            rs[j, 0] = s
        if diverged >= 0:
            break
        u[i] = un
        if chk != 0.0:
            diverged = t
            break
        steps = t + 1
    counters[0] = steps
    counters[1] = diverged
    counters[2] = resets
    counters[3] = projections
    if counters.shape[0] > 4:
        counters[4] = hits


@numba.njit(**JIT)
def draw_classes_m1(seed, order, y, K):
    """The classes :func:`epoch_m1` draws for ``order`` with ``seed``."""
    state = _seed_state(seed)
    out = np.empty(order.shape[0], np.int64)
    for t in range(order.shape[0]):
        state, out[t] = draw_m1(state, y[order[t]], K)
    return out


@numba.njit(**JIT)
def draw_classes_multi(seed, order, y, K, m):
    """The classes :func:`epoch_multi` draws: shape ``(len(order), m)``."""
    state = _seed_state(seed)
    out = np.empty((order.shape[0], m), np.int64)
    ks = np.empty(m, np.int64)
    for t in range(order.shape[0]):
        state = draw_distinct(state, y[order[t]], K, m, ks)
        out[t] = ks
    return out


@numba.njit(**JIT)
def draw_classes_all(seed, order, y, K, m):
    """The classes :func:`epoch_multi` draws with ``from_all``: shape
    ``(len(order), m)``, the label removed and the row padded with ``-1``."""
    state = _seed_state(seed)
    out = np.full((order.shape[0], m), -1, np.int64)
    ks = np.empty(m, np.int64)
    for t in range(order.shape[0]):
        state, c = draw_all_drop_label(state, y[order[t]], K, m, ks)
        out[t, :c] = ks[:c]
    return out
