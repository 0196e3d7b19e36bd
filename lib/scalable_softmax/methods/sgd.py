"""Explicit SGD on the double-sum objectives: vanilla SGD, U-max and Raman's formulation.

Three methods of :func:`scalable_softmax.fit.fit` live here (docs/math.md sections 2, 3, 6):

* ``"vanilla"`` (:class:`VanillaTrainer`): plain SGD on ``(w_k, w_{y_i}, u_i)`` with the
  gradient (F-7) of the per-datapoint term ``f_ik / N``; ``u_i`` clipped at 0. It is
  *allowed to overflow* (``exp(delta_ik - u_i)`` explodes when ``u_i << delta_ik``): the
  kernel stops at the first non-finite value and reports the step.
* ``"umax"`` (:class:`UmaxTrainer`): Algorithm 1 of Fagan & Iyengar. Before the step,
  ``u_i <- softplus(delta_ik)`` when ``u_i < softplus(delta_ik) - delta0``; after it the
  projections ``u_i <- clip(u_i, 0, B_u)`` and, when ``mu > 0``,
  ``w_j <- w_j min(1, B_W / ||w_j||)`` (Lemma 1; ``B_W^2 = 2 N log K / mu``). With
  ``n_sampled = m > 1`` the ``m`` terms are summed with weight ``(K-1)/m`` and ``u_i`` is
  reset from ``log(1 + sum_{k in S} exp(delta_ik))``.
* ``"raman"`` (:class:`RamanTrainer`): vanilla SGD or U-max on Raman et al.'s double sum
  (F-8) with the *correct* gradient of docs/math.md section 6 (not the original code's).

Conventions
-----------
Learning rates are per datapoint (docs/math.md section 2): every step drops the factor ``N``
and the ridge gradient is ``(mu/N) beta_j w_j``. Classes are sampled uniformly among the
``K - 1`` classes other than ``y_i``; for ``m > 1`` they are drawn **without
replacement** (Floyd's algorithm). Reasons: the U-max reset value
``log(1 + sum_{k in S} e^{delta_ik})`` is a lower bound on ``u_i*(W)`` only for distinct
classes (repeats could push ``u_i`` above its optimum); the weight ``(K-1)/m`` stays
unbiased (each class is included with probability ``m/(K-1)``); the variance is lower.
The ridge weights are ``beta_j = N / (n_j + (N - n_j) m/(K-1))``
(:func:`scalable_softmax.objectives.touch_weights`), which makes the sampled ridge term
an unbiased estimate of ``(mu/2)||W||^2``.

Implementation
--------------
* **Lazy ridge.** ``W`` is stored as ``scale[k] * V[k]`` (``self.W`` holds ``V``) so the
  ridge shrink ``(1 - lr mu beta_j / N)`` of a touched row costs O(1). The squared norms
  ``||V_j||^2`` the projection needs are kept in O(1) per step from the dot product the
  step computes anyway, ``||V + a x||^2 = ||V||^2 + 2 a (x . V) + a^2 ||x||^2`` (the
  ``m > 1`` kernel sums the change entry by entry). Scale, squared norm and ``beta_j``
  of a class sit together in one 32-byte record (``self._rs``, shape ``(K, 4)``), so
  the ridge costs no extra cache line per step. A row whose scale leaves
  ``[1e-100, 1e100]`` is folded into ``V`` at once (O(D), rare); :meth:`weights` folds
  every row whose scale is not 1 and recomputes the norms exactly. With ``mu = 0`` the
  scales stay exactly 1 and folding is a no-op.
* **Software pipelining** (option ``prefetch``, default True). The classes are drawn
  ``_LW = 2`` steps ahead, and the entries ``W[k, cols]``, ``W[y, cols]`` of step
  ``t + 2`` are prefetched (``llvm.prefetch``, write intent) interleaved with step
  ``t``'s dot product; the ``x`` row of step ``t + 4`` and ``indptr``/``y``/``u`` of step
  ``t + 6`` are prefetched earlier still. A ``W`` of at most 512 KiB stays in cache and
  only the data are prefetched. Prefetches are hints: the arithmetic is exactly that of
  the plain loop (``prefetch=False``), and the random draws happen in step order, so
  every mode gives bit-identical results. The ``m > 1`` kernel (:func:`_epoch_multi`)
  is pipelined the same way, one step ahead (``_LWM = 1``: a step of ``m + 1`` rows
  lasts longer than a memory access, and two steps' rows would overflow the L1 cache):
  its ``m`` classes drawn a step ahead, the ``m + 1`` rows of step ``t + 1`` prefetched
  one per dot-product loop of step ``t``; it too is
  bit-identical to its plain loop (``prefetch=False``) and to the kernel before it was
  pipelined, and it skips the per-entry overflow check below the ``max |V|`` bound.
* **Dense rows.** When every row of ``X`` stores all ``D`` columns (e.g. a dense
  MNIST), the kernel works on contiguous rows: dot products by BLAS ``ddot`` (numba's
  ``np.dot``; vectorised, so its summation order differs from the sparse path's by
  rounding only) and a vectorised update loop.
* **Hogwild** (option ``hogwild=True``, ``threads=2``; off by default, ``n_sampled = 1``
  only): the epoch's order is cut into ``threads`` contiguous chunks run in parallel
  without locks, each with its own random stream (``numpy.random.SeedSequence(seed)``).
  Races make it **not bit-identical** between runs (and may lose a few updates of the
  overflow guard below); a divergence is reported at the first failing step of any
  chunk, as an index into the epoch's order.
* **Random numbers**: a splitmix64 stream seeded by the epoch seed ``fit`` passes;
  ``uniform{0..n-1}`` is ``floor(U n)`` with a 53-bit ``U`` (bias below ``n 2^-53``).
* **Divergence**: before a step is applied, the scores, ``u`` and the step
  coefficients are checked; a non-finite one stops the epoch with ``W``, ``u`` left at
  the last finite iterate. An overflow inside the row update itself (``finite + finite
  = inf``) is detected after the update (the parameters then hold the non-finite
  value). That per-entry check runs only once a running bound on ``max |V|`` (the sum
  of ``|a| max|x|`` over the steps) passes ``1e300``; below it no entry can overflow.
* **The authors' code's class draw** (option ``sample_from="all"``, used by the
  ``"authors-code"`` protocol of :mod:`scalable_softmax.protocols`): ``m`` distinct
  classes uniform on all ``K``, the label removed when it was drawn, each remaining
  term weighted ``(K-1)/|S|`` and U-max's reset taken over that set. Each class
  ``k != y`` is then in ``S`` with probability ``m/K``; with weight ``(K-1)/|S|`` the
  estimate of ``sum_{k != y}`` is not exactly unbiased (it is for ``"others"``).
* **Memory**: ``W`` (``K x D``), the ``K x 4`` class records, ``u`` and per-row
  ``||x_i||^2`` (``N``), and the CSR arrays; nothing of size ``N x K`` or dense ``N x D``.
"""
from __future__ import annotations

import math

import numba
import numpy as np
import scipy.sparse as sp

from scalable_softmax._kernels import JIT, PJIT
from scalable_softmax._kernels import logaddexp as _logaddexp
from scalable_softmax._kernels import prefetch_r as _prefetch_r
from scalable_softmax._kernels import prefetch_w as _prefetch_w
from scalable_softmax._kernels import softplus as _softplus
from scalable_softmax.methods.base import EpochReport, Trainer
from scalable_softmax.methods.common import rand_below as _rand_below
from scalable_softmax.methods.common import seed_state as _seed_state

__all__ = ["VanillaTrainer", "UmaxTrainer", "RamanTrainer", "reference_step", "draw_classes",
           "KIND_VANILLA", "KIND_UMAX", "KIND_RAMAN_VANILLA", "KIND_RAMAN_UMAX"]

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
_PREFETCH_DEFAULT = 2   # mode used by prefetch=True (see _epoch_m1) ...
_SMALL_W_BYTES = 1 << 19  # ... unless W is at most this big (then mode 3)
_MASK = _RING - 1
# lazy-scale renormalisation window
_SCALE_LO = 1e-100
_SCALE_HI = 1e100
# the per-entry overflow check of the row update is skipped while a running bound on
# max |V| (guard) stays below this
_GUARD = 1e300



# ---------------------------------------------------------------------------
# low-level helpers
# ---------------------------------------------------------------------------

@numba.njit(**JIT)
def _draw_m1(state, yi, K):
    """One class uniform on ``{0..K-1} minus {yi}``."""
    state, k = _rand_below(state, K - 1)
    if k >= yi:
        k += 1
    return state, k


@numba.njit(**JIT)
def _floyd(state, n, m, out):
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
def _draw_distinct(state, yi, K, m, out):
    """``m`` distinct classes uniform on ``{0..K-1} minus {yi}`` into ``out[:m]``."""
    state = _floyd(state, K - 1, m, out)
    for q in range(m):
        if out[q] >= yi:
            out[q] += 1
    return state


@numba.njit(**JIT)
def _draw_all_drop_label(state, yi, K, m, out):
    """The authors' code's draw: ``m`` distinct classes uniform on *all* ``K`` classes
    (``m <= K``), then the label ``yi`` removed if it was drawn. The remaining classes
    go to ``out[:c]``; returns ``(state, c)`` with ``c = m`` or ``m - 1``."""
    state = _floyd(state, K, m, out)
    w = 0
    for q in range(m):
        if out[q] != yi:
            out[w] = out[q]
            w += 1
    return state, w


_EXP_MAX = 709.782712893384   # math.exp overflows above this


@numba.njit(**JIT)
def _exp(x):
    """``exp(x)``, ``inf`` on overflow (also in plain Python, where ``math.exp``
    raises)."""
    if x > _EXP_MAX:
        return math.inf
    return math.exp(x)


@numba.njit(**JIT)
def _fold_row(W, j, s, rs):
    """``W[j] *= s``; recompute ``rs[j, 1] = ||W[j]||^2``."""
    q = 0.0
    for c in range(W.shape[1]):
        w = W[j, c] * s
        W[j, c] = w
        q += w * w
    rs[j, 1] = q


@numba.njit(**JIT)
def _axpy2(a, b, x, v, w):
    """``v += a x``, ``w += b x`` (contiguous, one pass over ``x``)."""
    for c in range(x.shape[0]):
        xc = x[c]
        v[c] += a * xc
        w[c] += b * xc


@numba.njit(**JIT)
def _axpy_checked(a, x, w):
    """``w += a x``; returns 0, or NaN if an updated entry is non-finite."""
    chk = 0.0
    for c in range(x.shape[0]):
        new = w[c] + a * x[c]
        w[c] = new
        chk += new * 0.0
    return chk


@numba.njit(**JIT)
def _fold_all(W, rs):
    """Fold every row whose scale ``rs[j, 0]`` is not 1; scales become 1."""
    for j in range(W.shape[0]):
        if rs[j, 0] != 1.0:
            _fold_row(W, j, rs[j, 0], rs)
            rs[j, 0] = 1.0


@numba.njit(**JIT)
def _m1_scalars(kind, zk, zy, ui, Km1, lr, delta0, u_lo, u_hi):
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
        g = Km1 * _exp(d - ui)
        du = 1.0 - _exp(-ui) - g
        gk = g
        gy = -g
    else:
        if kind == KIND_RAMAN_UMAX:
            lse = _logaddexp(zy, zk)
            if ui < lse - delta0:
                ui = lse
                reset = True
        ey = _exp(zy - ui)
        gk = Km1 * _exp(zk - ui)
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


# ---------------------------------------------------------------------------
# the m = 1 epoch kernel (pipelined)
# ---------------------------------------------------------------------------

@numba.njit(**JIT)
def _epoch_m1(kind, indptr, indices, data, dense, y, order, W, rs, u,
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
        state, kk = _draw_m1(state, y[order[t]], K)
        ring[t & _MASK] = kk
    resets = 0
    projections = 0
    diverged = -1
    steps = 0
    for t in range(n):
        # ---- pipeline: prefetch what later steps will touch ------------------------
        if prefetch:
            if t + _LI < n:
                j = order[t + _LI]
                _prefetch_r(indptr, j)
                _prefetch_r(y, j)
                _prefetch_r(u, j)
                if project and dense:
                    _prefetch_r(xsq, j)
            if t + _LX < n:
                j = order[t + _LX]
                b0 = indptr[j]
                b1 = indptr[j + 1]
                if b1 > b0:
                    for p in range(b0, b1, 8):
                        _prefetch_r(data, p)
                    _prefetch_r(data, b1 - 1)
                    if not dense:
                        for p in range(b0, b1, 16):
                            _prefetch_r(indices, p)
                        _prefetch_r(indices, b1 - 1)
        # next step's rows: q runs over its non-zeros (interleaved mode: in the dot loop)
        q = 0
        q1 = 0
        kk = 0
        yj = 0
        if t + _LW < n:
            j = order[t + _LW]
            yj = y[j]
            state, kk = _draw_m1(state, yj, K)
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
            for q in range(q, q1):
                c2 = indices[q]
                _prefetch_w(W, kk, c2)
                _prefetch_w(W, yj, c2)
        zk = sk * dk
        zy = sy * dy
        gk, gy, un, reset, ok = _m1_scalars(kind, zk, zy, u[i], Km1, lr, delta0, u_lo, u_hi)
        if not ok:
            diverged = t
            break
        if reset:
            resets += 1
        if ridge:
            sk = sk * (1.0 - lr * mu_n * rs[k, 2])
            sy = sy * (1.0 - lr * mu_n * rs[yi, 2])
            if not (_SCALE_LO <= abs(sk) <= _SCALE_HI):
                if abs(sk) > 1.0:
                    guard[0] = np.inf
                _fold_row(W, k, sk, rs)
                dk *= sk                      # x . V of the folded row
                sk = 1.0
            if not (_SCALE_LO <= abs(sy) <= _SCALE_HI):
                if abs(sy) > 1.0:
                    guard[0] = np.inf
                _fold_row(W, yi, sy, rs)
                dy *= sy
                sy = 1.0
        ak = -lr * gk / sk
        ay = -lr * gy / sy
        if not (math.isfinite(ak) and math.isfinite(ay)):
            diverged = t
            break
        chk = 0.0
        # a running bound on max |V|: below _GUARD no entry can overflow, so the
        # per-entry check is needed only above it
        step = max(abs(ak), abs(ay)) * xmax
        checked = not (guard[0] + step < _GUARD)
        guard[0] += step
        if dense:
            xr = data[a0:a0 + D]
            if checked:
                chk = _axpy_checked(ak, xr, W[k]) + _axpy_checked(ay, xr, W[yi])
            else:
                _axpy2(ak, ay, xr, W[k], W[yi])
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
            nk2 = sk * sk * qk
            if nk2 > bw2:
                sk *= math.sqrt(bw2 / nk2)
                projections += 1
            ny2 = sy * sy * qy
            if ny2 > bw2:
                sy *= math.sqrt(bw2 / ny2)
                projections += 1
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
def _epoch_m1_hogwild(kind, indptr, indices, data, dense, y, order, W, rs, u,
                      lr, mu_n, delta0, u_lo, u_hi, bw2, project, seeds, prefetch,
                      counters, xmax, guard, xsq):
    """Hogwild: ``len(seeds)`` contiguous chunks of ``order`` run in parallel (no locks).
    ``counters`` is ``(chunks, 4)``; the diverged index is local to the chunk."""
    nch = seeds.shape[0]
    n = order.shape[0]
    for c in numba.prange(nch):
        lo = (n * c) // nch
        hi = (n * (c + 1)) // nch
        _epoch_m1(kind, indptr, indices, data, dense, y, order[lo:hi], W, rs,
                  u, lr, mu_n, delta0, u_lo, u_hi, bw2, project, seeds[c], prefetch,
                  counters[c], xmax, guard, xsq)


# ---------------------------------------------------------------------------
# the m > 1 epoch kernel (pipelined)
# ---------------------------------------------------------------------------

@numba.njit(**JIT)
def _draw_step(state, yi, K, m, from_all, out):
    """The classes of one ``m > 1`` step into ``out[:mS]``; returns ``(state, mS)``
    (``mS = m``, or ``m - 1`` when ``from_all`` drew the label)."""
    if from_all:
        return _draw_all_drop_label(state, yi, K, m, out)
    return _draw_distinct(state, yi, K, m, out), m


@numba.njit(**JIT)
def _prefetch_row_rest(W, k, indices, q, q1):
    """Prefetch (write intent) ``W[k, indices[q:q1]]``."""
    for p in range(q, q1):
        _prefetch_w(W, k, indices[p])


@numba.njit(**JIT)
def _epoch_multi(kind, indptr, indices, data, y, order, W, rs, u, m, from_all,
                 lr, mu_n, delta0, u_lo, u_hi, bw2, project, seed, counters,
                 prefetch, xmax, guard):
    """One epoch with ``m`` distinct sampled classes per step (weight ``(K-1)/m``).

    Same arguments as :func:`_epoch_m1` plus ``m`` (no ``dense``) and ``from_all``:
    draw the ``m`` classes from all ``K`` and drop the label when drawn (the authors'
    code), so a step has ``|S| = m`` or ``m - 1`` classes, each weighted
    ``(K-1)/|S|`` (``|S| = 0``, possible only for ``m = 1``: a step on ``u_i`` alone).
    ``counters[4]`` counts the steps whose draw hit the label.

    Software pipelining (``prefetch`` non-zero): the classes are drawn ``_LWM`` steps
    ahead (in step order, so the random stream is that of the plain loop), and the
    ``m + 1`` rows' entries of step ``t + _LWM`` are prefetched (modes 1 and 2), one row
    per dot-product loop of step ``t``; the ``x`` row of step ``t + _LX`` and ``indptr``/``y``/``u`` of
    step ``t + _LI`` earlier still. The arithmetic is that of the plain loop, term by
    term in the same order, so every mode gives bit-identical results. The per-entry
    overflow check of the row update runs only once the running bound ``guard`` on
    ``max |V|`` passes ``_GUARD`` (as in :func:`_epoch_m1`).
    """
    n = order.shape[0]
    K = W.shape[0]
    hits = 0
    ridge = mu_n > 0.0
    state = _seed_state(seed)
    ksr = np.empty((_RING, max(m, 1)), np.int64)   # classes of steps t .. t + _LWM
    msr = np.empty(_RING, np.int64)                # their |S|
    for t in range(min(_LWM, n)):
        state, ms_ = _draw_step(state, y[order[t]], K, m, from_all, ksr[t & _MASK])
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
            if t + _LI < n:
                j = order[t + _LI]
                _prefetch_r(indptr, j)
                _prefetch_r(y, j)
                _prefetch_r(u, j)
            if t + _LX < n:
                j = order[t + _LX]
                b0 = indptr[j]
                b1 = indptr[j + 1]
                if b1 > b0:
                    for p in range(b0, b1, 8):
                        _prefetch_r(data, p)
                    _prefetch_r(data, b1 - 1)
                    for p in range(b0, b1, 16):
                        _prefetch_r(indices, p)
                    _prefetch_r(indices, b1 - 1)
        f0 = 0
        f1 = 0
        fy = 0
        mf = 0
        kf = ksr[(t + _LWM) & _MASK]
        if t + _LWM < n:
            j = order[t + _LWM]
            fy = y[j]
            state, mf = _draw_step(state, fy, K, m, from_all, kf)
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
            _prefetch_row_rest(W, fy, indices, qf, f1)
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
                _prefetch_row_rest(W, kfq, indices, qf, qe)
            z[q] = rs[kq, 0] * dq
            ok = ok and math.isfinite(z[q])
        if f1 > f0:
            for q in range(mS, mf):       # the next step has more rows than this one
                _prefetch_row_rest(W, kf[q], indices, f0, f1)
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
                g[q] = r * _exp(z[q] - zy - ui)
                G += g[q]
            gy = -G
            du = 1.0 - _exp(-ui) - G
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
            ey = _exp(zy - ui)
            G = 0.0
            for q in range(mS):
                g[q] = r * _exp(z[q] - ui)
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
                s = s * (1.0 - lr * mu_n * rs[j, 2])
                if not (_SCALE_LO <= abs(s) <= _SCALE_HI):
                    if abs(s) > 1.0:
                        guard[0] = np.inf
                    _fold_row(W, j, s, rs)
                    s = 1.0
            a = -lr * coef / s
            if not math.isfinite(a):
                diverged = t
                break
            # a running bound on max |V|: below _GUARD no entry can overflow
            step = abs(a) * xmax
            checked = not (guard[0] + step < _GUARD)
            guard[0] += step
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
                nj2 = s * s * qj
                if nj2 > bw2:
                    s *= math.sqrt(bw2 / nj2)
                    projections += 1
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


# ---------------------------------------------------------------------------
# class streams (what the kernels draw), for tests and diagnostics
# ---------------------------------------------------------------------------

@numba.njit(**JIT)
def _draw_classes_m1(seed, order, y, K):
    """The classes :func:`_epoch_m1` draws for ``order`` with ``seed``."""
    state = _seed_state(seed)
    out = np.empty(order.shape[0], np.int64)
    for t in range(order.shape[0]):
        state, out[t] = _draw_m1(state, y[order[t]], K)
    return out


@numba.njit(**JIT)
def _draw_classes_multi(seed, order, y, K, m):
    """The classes :func:`_epoch_multi` draws: shape ``(len(order), m)``."""
    state = _seed_state(seed)
    out = np.empty((order.shape[0], m), np.int64)
    ks = np.empty(m, np.int64)
    for t in range(order.shape[0]):
        state = _draw_distinct(state, y[order[t]], K, m, ks)
        out[t] = ks
    return out


@numba.njit(**JIT)
def _draw_classes_all(seed, order, y, K, m):
    """The classes :func:`_epoch_multi` draws with ``from_all``: shape
    ``(len(order), m)``, the label removed and the row padded with ``-1``."""
    state = _seed_state(seed)
    out = np.full((order.shape[0], m), -1, np.int64)
    ks = np.empty(m, np.int64)
    for t in range(order.shape[0]):
        state, c = _draw_all_drop_label(state, y[order[t]], K, m, ks)
        out[t, :c] = ks[:c]
    return out


def draw_classes(seed, order, y, K, m, sample_from="others"):
    """Replay the classes the epoch kernels draw for ``order`` with epoch seed ``seed``:
    a list with, per step, the array of sampled classes (``sample_from="all"``: the
    label removed, so 0 to ``m`` of them)."""
    order = np.ascontiguousarray(order, dtype=np.int64)
    y = np.ascontiguousarray(y, dtype=np.int64)
    if sample_from == "all":
        rows = _draw_classes_all(np.int64(seed), order, y, int(K), int(m))
        return [r[r >= 0] for r in rows]
    if m == 1:
        return list(_draw_classes_m1(np.int64(seed), order, y, int(K))[:, None])
    return list(_draw_classes_multi(np.int64(seed), order, y, int(K), int(m)))


# ---------------------------------------------------------------------------
# plain NumPy reference steps (the ground truth the kernels are tested against)
# ---------------------------------------------------------------------------

def reference_step(kind, i, ks, X, y, W, u, lr, mu, beta, delta0, u_lo, u_hi, B_W):
    """One step of vanilla / U-max / Raman SGD in plain NumPy, on dense true weights: the
    ground truth the kernels are tested against (every method module names its NumPy
    step ``reference_step``; see :mod:`scalable_softmax.methods`).

    Parameters
    ----------
    kind : int, ``KIND_*``
    i : datapoint; ks : sequence of distinct classes ``!= y[i]`` (``m = len(ks)``)
    X : scipy.sparse or ndarray (N, D); y : int (N,)
    W : ndarray (K, D) true weights (not modified); u : ndarray (N,) (not modified)
    lr, mu : learning rate and ridge; beta : (K,) ridge weights
    delta0 : U-max threshold; u_lo, u_hi : clip interval of ``u``
    B_W : row-norm bound for the projection (``inf``: none)

    Returns
    -------
    (W_new, u_new, info) with ``info = {"reset": bool, "finite": bool}``; on a
    non-finite step ``W_new``, ``u_new`` are copies of the inputs.
    """
    N = X.shape[0]
    K = W.shape[0]
    x = X[[i]].toarray().ravel() if sp.issparse(X) else np.asarray(X[i], dtype=np.float64)
    ks = np.asarray(ks, dtype=np.int64)
    m = ks.size
    r = (K - 1) / m if m else 0.0      # m = 0: a step on u alone (authors' draw)
    yi = int(y[i])
    W2 = W.copy()
    u2 = u.copy()
    ui = float(u[i])
    sy = float(x @ W[yi])
    sk = W[ks] @ x
    reset = False
    with np.errstate(over="ignore", invalid="ignore"):
        if kind in (KIND_VANILLA, KIND_UMAX):
            d = sk - sy
            if kind == KIND_UMAX:
                target = float(np.logaddexp.reduce(np.concatenate(([0.0], d))))
                if ui < target - delta0:
                    ui, reset = target, True
            gk = r * np.exp(d - ui)
            gy = -gk.sum()
            du = 1.0 - np.exp(-ui) - gk.sum()
        else:
            if kind == KIND_RAMAN_UMAX:
                target = float(np.logaddexp.reduce(np.concatenate(([sy], sk))))
                if ui < target - delta0:
                    ui, reset = target, True
            ey = np.exp(sy - ui)
            gk = r * np.exp(sk - ui)
            gy = ey - 1.0
            du = 1.0 - ey - gk.sum()
        un = ui - lr * du
        finite = bool(np.all(np.isfinite(gk)) and np.isfinite(gy) and np.isfinite(un))
        if not finite:
            return W2, u2, {"reset": reset, "finite": False}
        for q, k in enumerate(ks):
            W2[k] = W[k] - lr * (gk[q] * x + mu / N * beta[k] * W[k])
        W2[yi] = W[yi] - lr * (gy * x + mu / N * beta[yi] * W[yi])
    u2[i] = min(max(un, u_lo), u_hi)
    if np.isfinite(B_W):
        for j in list(ks) + [yi]:
            nrm = np.linalg.norm(W2[j])
            if nrm > B_W:
                W2[j] *= B_W / nrm
    return W2, u2, {"reset": reset, "finite": bool(np.all(np.isfinite(W2)))}



# ---------------------------------------------------------------------------
# trainers
# ---------------------------------------------------------------------------

def _touch_weights(y, K, m, from_all=False):
    """``beta_j``: inverse probability that a step touches class ``j`` (its label, or
    sampled: with probability ``m/(K-1)``, or ``m/K`` when drawn from all ``K``)."""
    n = np.bincount(y, minlength=K).astype(np.float64)
    N = float(y.shape[0])
    return N / (n + (N - n) * m / ((K if from_all else K - 1)))


class _DoubleSumTrainer(Trainer):
    """Shared machinery of the three explicit-SGD methods (see the module docstring).

    Options (all methods): ``prefetch`` (bool, default True: software pipelining;
    results identical either way; or a kernel mode 0-3, see :func:`_epoch_m1`),
    ``hogwild`` (bool, default False), ``threads`` (int, default 2, used only with
    ``hogwild``), ``sample_from`` (``"others"``, default: the ``m`` classes are drawn
    among the ``K-1`` classes other than the label; ``"all"``: the authors' code's
    draw, ``m`` distinct classes from all ``K`` with the label dropped when drawn, each
    remaining term weighted ``(K-1)/|S|``; the epoch's ``extra`` then counts
    ``label_draws``). With ``n_sampled > 1`` or ``sample_from="all"`` the many-class
    kernel runs (:func:`_epoch_multi`: pipelined as well, no Hogwild).
    """

    has_u = True
    exact_u = "softmax"
    default_batch_size = 1
    default_n_sampled = 1
    _defaults: dict = {"prefetch": True, "hogwild": False, "threads": 2,
                       "sample_from": "others"}

    def __init__(self, X, y, K, *, mu=0.0, batch_size=None, n_sampled=None, **options):
        super().__init__(X, y, K, mu=mu, batch_size=batch_size, n_sampled=n_sampled,
                         **options)
        opts = self.check_options(self._defaults)
        self.opts = opts
        if self.K < 2:
            raise ValueError(f"K must be at least 2 for method {self.name!r}; got {self.K}")
        if self.batch_size != 1:
            raise ValueError(
                f"method {self.name!r} takes one datapoint per step: batch_size must be 1 "
                f"(or None); got {self.batch_size}. Use 'implicit-batch', 'ove', 'nce', "
                "'is' or 'softmax-sgd' for minibatches")
        if opts["sample_from"] not in ("others", "all"):
            raise ValueError(f"option sample_from of method {self.name!r} must be 'others' "
                             f"(classes uniform among the K-1 other than the label) or "
                             f"'all' (from all K, the label dropped when drawn: the "
                             f"authors' code); got {opts['sample_from']!r}")
        self._from_all = opts["sample_from"] == "all"
        mmax = self.K if self._from_all else self.K - 1
        if not (1 <= self.n_sampled <= mmax):
            raise ValueError(f"n_sampled (classes per step) must be in 1..{mmax} for "
                             f"K = {self.K} with sample_from={opts['sample_from']!r}; "
                             f"got {self.n_sampled}")
        threads = opts["threads"]
        if not isinstance(threads, (int, np.integer)) or threads < 1:
            raise ValueError(f"option threads must be a positive integer; got {threads!r}")
        if opts["hogwild"]:
            if self.n_sampled != 1 or self._from_all:
                raise ValueError("option hogwild=True supports n_sampled=1 with "
                                 "sample_from='others' only")
            if threads > numba.config.NUMBA_NUM_THREADS:
                raise ValueError(f"option threads={threads} exceeds numba's thread count "
                                 f"{numba.config.NUMBA_NUM_THREADS} (NUMBA_NUM_THREADS)")
        pf = opts["prefetch"]
        if isinstance(pf, (bool, np.bool_)):
            # a W that fits in the L2 cache gains nothing from prefetching its rows
            small = self.K * self.D * 8 <= _SMALL_W_BYTES
            self._pf_mode = (3 if small else _PREFETCH_DEFAULT) if pf else 0
        elif isinstance(pf, (int, np.integer)) and pf in (0, 1, 2, 3):
            self._pf_mode = int(pf)
        else:
            raise ValueError(f"option prefetch must be True, False or a mode 0, 1, 2, 3; "
                             f"got {pf!r}")
        delta0 = float(opts.get("delta0", 1.0))
        if not (math.isfinite(delta0) and delta0 > 0):
            raise ValueError(f"option delta0 (U-max threshold) must be a finite number > 0; "
                             f"got {opts.get('delta0')!r}")
        self.delta0 = delta0
        X = self.X.tocsr() if sp.issparse(self.X) else sp.csr_matrix(self.X)
        self._indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
        self._indices = np.ascontiguousarray(X.indices, dtype=np.int32)
        self._data = np.ascontiguousarray(X.data, dtype=np.float64)
        self._y = np.ascontiguousarray(self.y, dtype=np.int64)
        N, D = self.N, self.D
        # dense path: every row stores columns 0..D-1 in order
        self._dense = bool(
            N * D > 0 and self._indices.size == N * D
            and np.array_equal(self._indptr, np.arange(N + 1, dtype=np.int64) * D)
            and np.array_equal(self._indices.reshape(N, D),
                               np.broadcast_to(np.arange(D, dtype=np.int32), (N, D))))
        self.beta = _touch_weights(self._y, self.K, self.n_sampled, self._from_all)
        # Lemma 1 / 2 bounds
        rows = np.repeat(np.arange(N), np.diff(self._indptr))
        sq = np.bincount(rows, weights=self._data ** 2, minlength=N)
        self._xsq = np.ascontiguousarray(sq, dtype=np.float64)
        self.B_x = float(np.sqrt(sq.max())) if N else 0.0
        self._xmax = float(np.max(np.abs(self._data))) if self._data.size else 0.0
        if self.mu > 0:
            self.B_W = float(np.sqrt(2.0 * self.N * np.log(self.K) / self.mu))
            self.B_u = float(np.logaddexp(0.0, np.log(self.K - 1) + 2.0 * self.B_x * self.B_W))
        else:
            self.B_W = np.inf
            self.B_u = np.inf
        self.scale = None
        self.sqnorm = None

    # subclass hooks ----------------------------------------------------------
    def _kind(self) -> int:
        raise NotImplementedError

    def _u_bounds(self):
        raise NotImplementedError

    def _project(self) -> bool:
        return self._kind() in (KIND_UMAX, KIND_RAMAN_UMAX) and self.mu > 0

    # Trainer API -------------------------------------------------------------
    def init_params(self, u_init: str = "zero") -> None:
        if u_init not in ("zero", "logK"):
            raise ValueError(f"u_init must be 'zero' or 'logK'; got {u_init!r}")
        W = np.empty((self.K, self.D), dtype=np.float64)
        W.fill(0.0)                      # write every page now (np.zeros would not)
        self.W = W
        # per-class state, one 32-byte record per class (one cache line per touch):
        # lazy scale, ||V_j||^2, beta_j, unused
        self._rs = np.zeros((self.K, 4), dtype=np.float64)
        self._rs[:, 0] = 1.0
        self._rs[:, 2] = self.beta
        self.scale = self._rs[:, 0]      # views
        self.sqnorm = self._rs[:, 1]
        self.u = np.full(self.N, 0.0 if u_init == "zero" else np.log(self.K), dtype=np.float64)
        self._guard = np.zeros(1, dtype=np.float64)   # bound on max |V| (W = 0)

    def set_params(self, W, u=None) -> None:
        """Start from given weights ``W`` (K x D) and, optionally, ``u`` (N,) (copied);
        call after :meth:`init_params`."""
        W = np.asarray(W, dtype=np.float64)
        if W.shape != (self.K, self.D):
            raise ValueError(f"W must have shape (K, D) = ({self.K}, {self.D}); got {W.shape}")
        self.W[:] = W
        self.scale[:] = 1.0
        self.sqnorm[:] = np.einsum("kd,kd->k", self.W, self.W)
        self._guard[0] = float(np.max(np.abs(self.W))) if self.W.size else 0.0
        if u is not None:
            u = np.asarray(u, dtype=np.float64)
            if u.shape != (self.N,):
                raise ValueError(f"u must have shape (N,) = ({self.N},); got {u.shape}")
            self.u[:] = u

    def _call(self, order, lr, seed):
        order = np.ascontiguousarray(order, dtype=np.int64)
        u_lo, u_hi = self._u_bounds()
        project = self._project()
        bw2 = self.B_W ** 2 if project else np.inf
        mu_n = self.mu / self.N
        kind = self._kind()
        if self.n_sampled == 1 and self.opts["hogwild"]:
            threads = int(self.opts["threads"])
            seeds = np.random.SeedSequence(int(seed)).generate_state(threads, np.uint64)
            seeds = seeds.astype(np.int64)
            counters = np.zeros((threads, 4), dtype=np.int64)
            prev = numba.get_num_threads()
            numba.set_num_threads(threads)
            try:
                _epoch_m1_hogwild(kind, self._indptr, self._indices, self._data, self._dense,
                                  self._y, order, self.W, self._rs, self.u,
                                  float(lr), mu_n, self.delta0, u_lo, u_hi, bw2,
                                  project, seeds, self._pf_mode, counters, self._xmax,
                                  self._guard, self._xsq)
            finally:
                numba.set_num_threads(prev)
            n = order.size
            bounds = [(n * c) // threads for c in range(threads + 1)]
            div = [bounds[c] + counters[c, 1] for c in range(threads) if counters[c, 1] >= 0]
            out = np.array([counters[:, 0].sum(), min(div) if div else -1,
                            counters[:, 2].sum(), counters[:, 3].sum()])
        elif self.n_sampled == 1 and not self._from_all:
            out = np.zeros(4, dtype=np.int64)
            _epoch_m1(kind, self._indptr, self._indices, self._data, self._dense, self._y,
                      order, self.W, self._rs, self.u, float(lr), mu_n,
                      self.delta0, u_lo, u_hi, bw2, project, np.int64(seed),
                      self._pf_mode, out, self._xmax, self._guard, self._xsq)
        else:
            out = np.zeros(5, dtype=np.int64)
            _epoch_multi(kind, self._indptr, self._indices, self._data, self._y, order,
                         self.W, self._rs, self.u, np.int64(self.n_sampled),
                         self._from_all, float(lr), mu_n, self.delta0, u_lo, u_hi, bw2, project,
                         np.int64(seed), out, self._pf_mode, self._xmax, self._guard)
        return out

    def run_epoch(self, order: np.ndarray, lr: float, seed: int) -> EpochReport:
        out = self._call(order, lr, seed)
        extra = {"u_resets": int(out[2]), "w_projections": int(out[3])}
        if self._from_all:
            extra["label_draws"] = int(out[4])
        return EpochReport(steps=int(out[0]), diverged_at=int(out[1]), extra=extra)

    def warmup(self) -> None:
        self._call(np.empty(0, dtype=np.int64), 1.0, 0)

    def weights(self) -> np.ndarray:
        """Fold the lazy scales into ``self.W`` (rows whose scale is not 1; exact norms
        recomputed) and return it. With ``mu = 0`` nothing changes."""
        if self.scale is not None:
            if np.any(np.abs(self.scale) > 1.0):
                self._guard[0] = np.inf
            _fold_all(self.W, self._rs)
        return self.W


class VanillaTrainer(_DoubleSumTrainer):
    """Vanilla SGD on the double sum (F-6, F-7); ``u`` clipped at 0, no projection.

    Options: ``prefetch``, ``hogwild``, ``threads`` (see :class:`_DoubleSumTrainer`).
    Overflows at large learning rates (by design): the epoch stops at the first
    non-finite value and reports it.
    """

    name = "vanilla"

    def _kind(self):
        return KIND_VANILLA

    def _u_bounds(self):
        return 0.0, np.inf


class UmaxTrainer(_DoubleSumTrainer):
    """U-max (Algorithm 1): reset ``u_i`` when it is more than ``delta0`` below
    ``log(1 + sum_{k in S} exp(delta_ik))``, then SGD, then project ``u`` onto
    ``[0, B_u]`` and (``mu > 0``) every touched row onto the ball of radius ``B_W``.

    Options: ``delta0`` (float > 0, default 1), ``prefetch``, ``hogwild``, ``threads``.
    ``extra`` per epoch: ``u_resets``, ``w_projections``.
    """

    name = "umax"
    _defaults = {**_DoubleSumTrainer._defaults, "delta0": 1.0}

    def _kind(self):
        return KIND_UMAX

    def _u_bounds(self):
        return 0.0, self.B_u


class RamanTrainer(_DoubleSumTrainer):
    """SGD on Raman et al.'s double sum (F-8) with the correct gradient (docs/math.md section 6).

    Options: ``variant`` (``"umax"``, default: reset ``ubar_i`` to
    ``log(exp(s_{i,y_i}) + sum_{k in S} exp(s_ik))`` when more than ``delta0`` below it,
    and with ``mu > 0`` project the touched rows onto the ``B_W`` ball and ``ubar`` onto
    ``[log K - B_x B_W, log K + B_x B_W]``, which holds ``ubar*``; ``"vanilla"``: plain
    SGD, ``ubar`` unconstrained), ``delta0``, ``prefetch``, ``hogwild``, ``threads``.
    ``ubar`` is unconstrained in sign (``ubar*_i = log sum_k exp(s_ik)``).
    """

    name = "raman"
    exact_u = "raman"
    _defaults = {**_DoubleSumTrainer._defaults, "delta0": 1.0, "variant": "umax"}

    def __init__(self, X, y, K, **kw):
        super().__init__(X, y, K, **kw)
        if self.opts["variant"] not in ("umax", "vanilla"):
            raise ValueError(f"option variant of method 'raman' must be 'umax' or "
                             f"'vanilla'; got {self.opts['variant']!r}")

    def _kind(self):
        return KIND_RAMAN_UMAX if self.opts["variant"] == "umax" else KIND_RAMAN_VANILLA

    def _u_bounds(self):
        if self._kind() == KIND_RAMAN_UMAX and self.mu > 0:
            half = self.B_x * self.B_W
            return float(np.log(self.K) - half), float(np.log(self.K) + half)
        return -np.inf, np.inf
