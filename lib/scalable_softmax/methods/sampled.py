"""The biased sampled-softmax baselines: One-vs-Each, NCE and importance sampling.

docs/math.md section 7. Each step takes a minibatch of ``n`` datapoints (default 100) and,
for every datapoint ``i`` with label ``y``, ``m`` sampled classes (default 5); the
per-datapoint losses are

* **OVE** (T-4, T-15): ``r sum_j softplus(s_{k_j} - s_y)``;
* **IS** (sampled softmax): ``-s_y + log(exp(s_y) + r sum_j exp(s_{k_j}))``, or with
  ``weighted=False`` TensorFlow's ``sampled_softmax_loss`` with a uniform sampler,
  ``-s_y + log(exp(s_y) + sum_j exp(s_{k_j}))`` (no ``r``: the ``log Q`` correction is
  the same for every logit and cancels);
* **NCE** (Mnih & Teh 2012), noise ``q = 1/K``, ``c = log(m q) = log(m/K)``:
  ``softplus(c - s_y) + sum_j softplus(s_{k_j} - c)`` (no ``r``);

the same functions as :func:`scalable_softmax.objectives.ove_loss`, ``is_loss`` and
``nce_loss``. All three are biased: they do not converge to the softmax MLE.

Sampling of the classes
-----------------------
``shared_negatives=False`` (default): every datapoint draws its own ``m`` *distinct*
classes uniformly from the ``K-1`` classes other than its label (Floyd's algorithm:
exactly ``m`` draws, ``m <= K-1``); the weight is ``r = (K-1)/m``, so
``r sum_j g(k_j)`` is an unbiased estimate of ``sum_{k != y} g(k)``.

``shared_negatives=True`` (the original experiment code's variant, which used
TensorFlow's candidate samplers): one set ``S`` of ``m`` distinct classes is drawn
uniformly from *all* ``K`` classes per minibatch and shared by its datapoints. The
labels of the batch are not excluded from the draw: a sampled class that equals the
label of *another* datapoint of the batch is an ordinary negative for this one. A
sampled class equal to the datapoint's *own* label (an "accidental hit") is handled
according to the option ``remove_accidental_hits``:

* ``None`` (default): as TensorFlow's loss functions' defaults do: dropped for IS
  (``sampled_softmax_loss``, ``remove_accidental_hits=True``) and for OVE (where that
  term has zero gradient anyway), kept as a noise sample for NCE (``nce_loss``,
  ``remove_accidental_hits=False``);
* ``True``: dropped for all three (for NCE the datapoint then has ``m - 1`` noise
  samples in that batch);
* ``False``: kept for all three, as an ordinary sampled class (the original
  experiment code called TF 1.3's ``_compute_sampled_logits`` with its default
  ``remove_accidental_hits=False``): for IS the label's logit ``s_y`` (plus ``log r``
  when weighted) appears in the softmax a second time, for NCE it is a noise sample,
  for OVE its term ``r softplus(s_y - s_y)`` has zero net gradient (the result equals
  that of dropping it, to rounding).

The weights are the same in every case: a class ``k != y`` is in ``S`` with
probability ``m/K``, so the unbiased weight is ``r = K/m`` (used by OVE and weighted
IS). NCE uses ``c = log(m/K)`` in both variants. With per-datapoint negatives the
label is never drawn, so ``remove_accidental_hits`` is meaningless there: setting it
to ``True`` or ``False`` without ``shared_negatives=True`` raises ``ValueError``.

Step, learning rate and ridge (docs/math.md section 2)
-------------------------------------------------
One step is true minibatch SGD: every gradient of the batch is computed at the old
``W``, then all are applied,

    W <- W - lr * (1/b) sum_{i in batch} [ grad l_i(W) + (mu/N) sum_{j in T_i} beta_j w_j ]

(``b`` = the batch's size, ``n`` except for the last chunk of an epoch) with the
default ``reduction="mean"``; with ``reduction="sum"`` (the original TensorFlow code,
whose optimizer minimised the sum of the per-example loss vector) the factor ``1/b``
is dropped, from the loss gradients and from the ridge part alike:

    W <- W - lr * sum_{i in batch} [ grad l_i(W) + (mu/N) sum_{j in T_i} beta_j w_j ]

(so, for a batch of size ``b``, ``"sum"`` with ``lr`` is ``"mean"`` with ``lr * b``). Here
``T_i`` is the set of classes datapoint ``i`` touches (its label and its sampled
classes) and ``beta_j = 1 / P(j in T_i)`` for ``i`` uniform: per-datapoint sampling
``beta_j = N / (n_j + (N - n_j) m/(K-1))`` (:func:`scalable_softmax.objectives.touch_weights`),
shared sampling ``beta_j = N / (n_j + (N - n_j) m/K)``. The ridge part is then an
unbiased estimate of ``(mu/N) W``, the gradient of the per-datapoint ridge
``(mu/(2N)) ||W||^2``, and a step touches only the ``<= b (m+1)`` class rows involved,
on the non-zero features of the batch. The ridge is applied lazily: each class row
is stored as ``w_j = c_j v_j`` with one scale factor ``c_j`` (folded back into
``v_j`` when it falls below ``1e-100`` or when ``lr`` makes the shrink factor
non-positive), so it costs O(1) per touched class instead of O(D).

Kernels
-------
One numba kernel runs a whole epoch over CSR arrays (``indptr, indices, data``).
``_sampled_epoch`` is the serial kernel. With ``fused=False`` it is the
straightforward loop: draw the batch's classes, score every datapoint at the old
``W``, then apply every update datapoint by datapoint. With ``fused=True`` (default)
the rows that several datapoints of the batch touch (with shared negatives: the ``m``
shared rows) are scored for every datapoint first; then each datapoint scores its own
rows (those no other datapoint of the batch touches: its label's, and its own
negatives') and applies its whole update at once, its own rows while their lines are
in cache. This is still true minibatch SGD (every gradient is taken at the old ``W``)
and each element receives the same operations in the same order as in the
straightforward loop: the results are bit-identical. Memory: the classes are drawn one
batch ahead (the same draws in the same order), so that while a datapoint is scored
the lines of the datapoint ``prefetch`` places ahead (its label's row; with
per-datapoint negatives all its rows) and the CSR lines of the one ``2 prefetch``
ahead are hinted to the memory system, across batch boundaries; with shared
negatives the batch's shared rows are first read in address order, one element per
cache line, so that the hardware streams them in at full bandwidth instead of
fetching them one random column at a time. ``_sampled_epoch_par`` is the fused kernel
on numba's threads (the datapoints of a batch in parallel; the updates of rows shared
within the batch after them, split by columns): bit-identical too, for any number of
threads.

The class draws are made serially with the splitmix64 generator of the U-max kernels
(:mod:`scalable_softmax.methods.sgd`), seeded inside the kernel by ``seed``; Floyd's
algorithm draws ``m`` distinct classes with exactly ``m`` draws.
:func:`epoch_draws` replays them. :func:`reference_step` is the plain NumPy step the
kernels are tested against. A step whose update makes a weight non-finite stops the
epoch (``EpochReport.diverged_at``); the losses' gradients are bounded (by
``r ||x||`` for OVE, ``||x||`` for NCE and IS), so this takes a huge learning rate or
data.

Speed (``benchmarks/bench_sampled.py``, beside U-max and loops that make only the
kernels' memory accesses): with per-datapoint negatives each datapoint reads and
writes ``(m+1) nnz(x)`` elements of ``W`` at random rows, about one cache line each;
when ``W`` is far larger than the caches the kernel runs close to a loop that makes
just those accesses in the same order. With shared negatives a datapoint touches
``nnz(x)`` random lines (its label's row) and the batch streams its ``m`` shared rows
in and out (about ``m D / (8 n)`` lines per datapoint); all their scores must be taken
before any of their updates, so the shared rows are passed over twice in cache.
"""
from __future__ import annotations

import math

import numba
import numpy as np
import scipy.sparse as sp

from scalable_softmax._kernels import JIT, PJIT
from scalable_softmax._kernels import prefetch_r as _prefetch_r
from scalable_softmax._kernels import prefetch_w as _prefetch_w2
from scalable_softmax._kernels import sigmoid as _sigmoid
from scalable_softmax.methods.base import EpochReport, Trainer
from scalable_softmax.kernels.common import rand_below as _rand_below
from scalable_softmax.kernels.common import seed_state as _seed_state
from scalable_softmax.kernels.common import touched_zeros as _touched_zeros

__all__ = [
    "OVETrainer", "NCETrainer", "ISTrainer", "KIND_OVE", "KIND_NCE", "KIND_IS",
    "epoch_draws", "reference_step", "datapoint_coefficients", "touch_weights_shared",
]

KIND_OVE, KIND_NCE, KIND_IS = 0, 1, 2
_KIND_NAMES = {KIND_OVE: "ove", KIND_NCE: "nce", KIND_IS: "is"}

#: the values of the ``reduction`` option
_REDUCTIONS = ("mean", "sum")

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


# ---------------------------------------------------------------------------
# class sampling
# ---------------------------------------------------------------------------

@numba.njit(**IJIT)
def _floyd(state, M, m, out, r, off):
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
def _draw_batch(state, y, order, b0, nb, K, m, shared, drop_hits, cls, ncls, smp, b):
    """Draw the classes of one minibatch (``order[b0:b0+nb]``) with the generator
    ``state``; returns the new state.

    Row ``cls[b, t]`` gets the label of datapoint ``t`` in column 0 and its
    ``ncls[b, t] - 1`` sampled classes after it; with ``shared``, ``smp[b]`` gets the
    batch's sample.
    """
    if shared:
        state = _floyd(state, K, m, smp, b, 0)
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
            state = _floyd(state, K - 1, m, cls[b], t, 1)
            for q in range(1, m + 1):
                if cls[b, t, q] >= yt:
                    cls[b, t, q] += 1
            ncls[b, t] = m + 1
    return state


@numba.njit(**JIT)
def _epoch_draws(y, order, K, n, m, shared, drop_hits, seed):
    N = order.shape[0]
    cls = np.zeros((1, n, m + 1), dtype=np.int64)
    ncls = np.zeros((1, n), dtype=np.int64)
    smp = np.zeros((1, m), dtype=np.int64)
    out = np.zeros((N, m + 1), dtype=np.int64)
    nout = np.zeros(N, dtype=np.int64)
    state = _seed_state(seed)
    for b0 in range(0, N, n):
        nb = min(n, N - b0)
        state = _draw_batch(state, y, order, b0, nb, K, m, shared, drop_hits, cls, ncls, smp,
                            0)
        out[b0:b0 + nb] = cls[0, :nb]
        nout[b0:b0 + nb] = ncls[0, :nb]
    return out, nout


def epoch_draws(y, order, K, n, m, shared, drop_hits, seed):
    """Replay the class draws of one epoch of the kernels.

    Parameters
    ----------
    y : int64 array (N,); order : int64 array, the epoch's datapoint order
    K, n, m : classes, batch size, classes sampled per datapoint
    shared, drop_hits : the sampling variant (see the module docstring); with
        ``shared``, ``drop_hits=False`` keeps a sampled class equal to the label
        (an accidental hit) in the row, ``True`` drops it (the row is then
        one shorter); the trainers' value is their ``drop_hits`` attribute.
    seed : int, the epoch's seed

    Returns
    -------
    cls : int64 array (len(order), m + 1); row ``t``: the label of datapoint
        ``order[t]``, then its sampled classes.
    ncls : int64 array (len(order),); the number of valid entries of each row.
    """
    return _epoch_draws(np.asarray(y, dtype=np.int64), np.asarray(order, dtype=np.int64),
                        int(K), int(n), int(m), bool(shared), bool(drop_hits), int(seed))


# ---------------------------------------------------------------------------
# per-datapoint coefficients: d loss / d s_j for the touched classes
# ---------------------------------------------------------------------------

@numba.njit(**IJIT)
def _coefs(kind, logr, c_nce, s, sr, nc, g, gr):
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
def _shrink_row(V, scale, j, factor):
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
def _count_touched(cls, ncls, nb, cnt, touched):
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


# ---------------------------------------------------------------------------
# the epoch kernels
# ---------------------------------------------------------------------------
#
# Indices into V, indices and data are cast to unsigned integers (``_U``): numba then
# emits no negative-index wrap-around code, which otherwise doubles the instructions of
# these gather / scatter loops. Every dot product keeps :func:`_dot`'s summation order
# (four partial sums by position) and every element receives its updates in the order
# of the straightforward loop (datapoint by datapoint, class by class), so all the
# kernel variants give bit-identical results.

_U = np.uint64


@numba.njit(**IJIT)
def _hint_row(V, j, indices, q0, q1):
    """Hint the lines of row ``j`` of ``V`` at the columns ``indices[q0:q1]``."""
    r = _U(j)
    q = _U(q0)
    while q < _U(q1):
        _prefetch_w2(V, r, _U(indices[q]))
        q += _U(1)


@numba.njit(**IJIT)
def _hint_x(indptr, indices, data, i):
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
def _hint_ahead(indptr, indices, data, order, t, pf, N):
    """The CSR lines of datapoint ``order[t + 2 pf]`` and the ``indptr`` entry of
    ``order[t + 3 pf]``: the W rows of datapoint ``t + pf`` are hinted at its columns,
    so its columns must arrive first."""
    if t + 2 * pf < N:
        _hint_x(indptr, indices, data, order[t + 2 * pf])
    if t + 3 * pf < N:
        _prefetch_r(indptr, _U(order[t + 3 * pf]))


@numba.njit(**IJIT)
def _dot3(indices, data, p0, p1, V, j, k, l, q0, q1, hj, hk, hl):
    """The dot products of rows ``j``, ``k`` and ``l`` of ``V`` with the entries
    ``p0..p1``, each in :func:`_dot`'s order, loading every index and value once;
    meanwhile the lines of rows ``hj``, ``hk``, ``hl`` (when ``>= 0``) at the columns
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
            _hint_row(V, hj, indices, q, qe)
        if hk >= 0:
            _hint_row(V, hk, indices, q, qe)
        if hl >= 0:
            _hint_row(V, hl, indices, q, qe)
    return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3), (e0 + e1) + (e2 + e3)


@numba.njit(**IJIT)
def _dot2(indices, data, p0, p1, V, j, k, q0, q1, hj, hk):
    """The dot products of rows ``j`` and ``k`` of ``V`` with the entries ``p0..p1``,
    each in :func:`_dot`'s order, loading every index and value once; meanwhile the
    lines of rows ``hj`` and ``hk`` (when ``>= 0``) at the columns ``indices[q0:q1]``
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
            _hint_row(V, hj, indices, q, qe)
        if hk >= 0:
            _hint_row(V, hk, indices, q, qe)
    return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3)


@numba.njit(**IJIT)
def _dot1(indices, data, p0, p1, V, j, q0, q1, hj, hk):
    """:func:`_dot2` for one row ``j`` (same hints)."""
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
        _hint_row(V, hj, indices, q0, q1)
    if hk >= 0:
        _hint_row(V, hk, indices, q0, q1)
    return (a0 + a1) + (a2 + a3)


@numba.njit(**IJIT)
def _axpy3(indices, data, p0, p1, V, j, k, l, a, b, c):
    """:func:`_axpy2` for three rows (``j``, ``k``, ``l`` in that order, entry by
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
def _axpy2(indices, data, p0, p1, V, j, k, a, b):
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
def _axpy1(indices, data, p0, p1, V, j, a):
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
def _axpy_list(indices, data, p0, p1, V, rows, coefs, r, nr):
    """:func:`_axpy3` over the rows ``rows[r, :nr]`` (coefficients ``coefs[r, :nr]``)
    three at a time, in list order."""
    bad = 0
    f = 0
    while f + 2 < nr:
        bad |= _axpy3(indices, data, p0, p1, V, rows[r, f], rows[r, f + 1], rows[r, f + 2],
                      coefs[r, f], coefs[r, f + 1], coefs[r, f + 2])
        f += 3
    if f + 1 < nr:
        bad |= _axpy2(indices, data, p0, p1, V, rows[r, f], rows[r, f + 1], coefs[r, f],
                      coefs[r, f + 1])
    elif f < nr:
        bad |= _axpy1(indices, data, p0, p1, V, rows[r, f], coefs[r, f])
    return bad


@numba.njit(**IJIT)
def _score(indptr, indices, data, i, V, scale, lj, lp, r, nr, s, sr, i2, cls, b2, t2, nh):
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
            x, y, z = _dot3(indices, data, p0, p1, V, j, jb, jc, q0, q1, hj, hk, hl)
            s[sr, lp[r, k]] = scale[j] * x
            s[sr, lp[r, k + 1]] = scale[jb] * y
            s[sr, lp[r, k + 2]] = scale[jc] * z
            k += 3
        elif k + 1 < nr:
            jb = lj[r, k + 1]
            x, y = _dot2(indices, data, p0, p1, V, j, jb, q0, q1, hj, hk)
            s[sr, lp[r, k]] = scale[j] * x
            s[sr, lp[r, k + 1]] = scale[jb] * y
            if hl >= 0:
                _hint_row(V, hl, indices, q0, q1)
            k += 2
        else:
            s[sr, lp[r, k]] = scale[j] * _dot1(indices, data, p0, p1, V, j, q0, q1, hj, hk)
            if hl >= 0:
                _hint_row(V, hl, indices, q0, q1)
            k += 1
    while h < nh:
        _hint_row(V, cls[b2, t2, h], indices, q0, q1)
        h += 1


@numba.njit(**IJIT)
def _split(cls, ncls, b, t, cnt, fused, pj, pp, dj, dp, r):
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
def _apply_private(indptr, indices, data, i, V, scale, y0, pj, pp, t, nr, g, step, ridge,
                   ridged, coefs):
    """Apply datapoint ``i``'s update (coefficients ``g[t]``) to its rows that no other
    datapoint of the batch touches, listed by :func:`_split` (``pj[t, :nr]``, at the
    positions ``pp[t, :nr]``; ``y0``: its label): with ``ridged``, the lazy ridge
    shrink, then ``w_j -= step g_j x_i``. Returns 1 if a weight became non-finite.
    ``coefs``: scratch (row ``t``)."""
    bad = 0
    for k in range(nr):
        j = pj[t, k]
        jj = pp[t, k]
        if ridged and ridge[j] != 0.0 and (jj == 0 or j != y0):
            bad |= _shrink_row(V, scale, j, 1.0 - ridge[j])
        coefs[t, k] = step * g[t, jj] / scale[j]
    bad |= _axpy_list(indices, data, indptr[i], indptr[i + 1], V, pj, coefs, t, nr)
    return bad


@numba.njit(**IJIT)
def _deferred_prepare(nb, cls, ncls, b, coef, V, scale, cnt, touched, nt, step, ridge, fused,
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
            bad |= _shrink_row(V, scale, j, 1.0 - ridge[j])
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
def _deferred_rows(indptr, indices, data, order, b0, nb, V, dj, da, dn):
    """Apply the listed updates datapoint by datapoint."""
    bad = 0
    for t in range(nb):
        if dn[t] > 0:
            i = order[b0 + t]
            bad |= _axpy_list(indices, data, indptr[i], indptr[i + 1], V, dj, da, t, dn[t])
    return bad


@numba.njit(**IJIT)
def _deferred_cols(indptr, indices, data, order, b0, nb, V, dj, da, dn, c_lo, c_hi):
    """The listed updates at the columns ``c_lo <= c < c_hi`` only, datapoint by
    datapoint (one thread's share in the parallel kernel). Each element receives the
    same updates in the same order as in :func:`_deferred_rows`. Needs the indices of
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
            bad |= _axpy_list(indices, data, p, q, V, dj, da, t, nr)
    return bad


@numba.njit(**IJIT)
def _touch_rows(V, rows, nr):
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
def _batch_count(nb, cls, ncls, cnt, touched, ridge, lr, muN, beta, red_sum):
    """Count who touches what in the drawn batch and set the shrink rates."""
    nt = _count_touched(cls, ncls, nb, cnt, touched)
    if muN > 0.0:
        for a in range(nt):
            j = touched[a]
            if red_sum:
                ridge[j] = lr * float(cnt[j]) * muN * beta[j]
            else:
                ridge[j] = lr * (cnt[j] / nb) * muN * beta[j]
    return nt


@numba.njit(**IJIT)
def _step_size(lr, nb, red_sum):
    """The batch's step coefficient: ``lr / b`` (mean) or ``lr`` (sum)."""
    if red_sum:
        return lr
    return lr / nb


@numba.njit(**IJIT)
def _batch_reset(cnt, ridge, touched, nt):
    for a in range(nt):
        cnt[touched[a]] = 0
        ridge[touched[a]] = 0.0


def _buffers(n, m, K):
    """The serial kernel's scratch arrays (allocated here so that the kernel allocates
    nothing and runs without numba's reference counting)."""
    z = lambda *shape: np.zeros(shape)  # noqa: E731
    i = lambda *shape: np.zeros(shape, dtype=np.int64)  # noqa: E731
    return (i(2, n, m + 1), i(2, n), i(2, m), z(n, m + 1), z(n, m + 1), i(K), z(K),
            i(n * (m + 1)), i(n, m + 1), i(n, m + 1), z(n, m + 1), i(n), i(n, m + 1),
            i(n, m + 1), i(n), z(n, m + 1))


@numba.njit(**NJIT)
def _sampled_epoch(indptr, indices, data, y, order, V, scale, beta, n, m, lr, muN, kind,
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
    ``buf``: scratch arrays from :func:`_buffers` (``cnt`` and ``ridge`` zero on entry;
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
        state = _draw_batch(state, y, order, 0, min(n, N), K, m, shared, drop_hits, cls, ncls,
                            smp, 0)
        if ahead:
            for t in range(min(pf, n, N)):
                i = order[t]
                for jj in range(ncls[0, t] if not shared else 1):
                    _hint_row(V, cls[0, t, jj], indices, indptr[i], indptr[i + 1])
    steps = 0
    bi = 0
    for b0 in range(0, N, n):
        nb = min(n, N - b0)
        nn = min(n, N - b0 - nb)  # the next batch's size (0: none)
        if nn > 0:
            state = _draw_batch(state, y, order, b0 + nb, nn, K, m, shared, drop_hits, cls,
                                ncls, smp, 1 - bi)
        nt = _batch_count(nb, cls[bi], ncls[bi], cnt, touched, ridge, lr, muN, beta,
                          red_sum)
        step = _step_size(lr, nb, red_sum)
        bad = 0
        if not fused:
            # the straightforward loop: score everything at the old W, then apply
            for t in range(nb):
                pn[t], dn[t] = _split(cls, ncls, bi, t, cnt, False, pj, pp, dj, dp, t)
                _score(indptr, indices, data, order[b0 + t], V, scale, dj, dp, t, dn[t], s,
                       t, -1, cls, bi, t, 0)
                _coefs(kind, logr, c_nce, s, t, ncls[bi, t], coef, t)
            b2, tot = _deferred_prepare(nb, cls, ncls, bi, coef, V, scale, cnt, touched, nt,
                                        step, ridge, False, dj, da, dn)
            bad |= b2
            bad |= _deferred_rows(indptr, indices, data, order, b0, nb, V, dj, da, dn)
        else:
            # rows touched by several datapoints of the batch (with shared negatives: the
            # shared rows) are scored for every datapoint first, at the old W; then each
            # datapoint scores its own rows and applies its whole update: to its own rows
            # while their lines are in cache, and to the others in datapoint order, which
            # is the order of the straightforward loop
            nd = 0
            for t in range(nb):
                pn[t], dn[t] = _split(cls, ncls, bi, t, cnt, True, pj, pp, dj, dp, t)
                nd += dn[t]
            if nd > 0:
                if shared and ahead:
                    sink += _touch_rows(V, smp[bi], m)
                for t in range(nb):
                    if dn[t] > 0:
                        if ahead and t + 4 < nb:
                            _hint_x(indptr, indices, data, order[b0 + t + 4])
                        _score(indptr, indices, data, order[b0 + t], V, scale, dj, dp, t,
                               dn[t], s, t, -1, cls, bi, t, 0)
                for a in range(nt):
                    j = touched[a]
                    if cnt[j] > 1 and ridge[j] != 0.0:
                        bad |= _shrink_row(V, scale, j, 1.0 - ridge[j])
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
                    _hint_ahead(indptr, indices, data, order, b0 + t, pf, N)
                i = order[b0 + t]
                _score(indptr, indices, data, i, V, scale, pj, pp, t, pn[t], s, t, i2, cls, b2,
                       t2, 1 if shared else ncls[b2, t2])
                _coefs(kind, logr, c_nce, s, t, ncls[bi, t], coef, t)
                bad |= _apply_private(indptr, indices, data, i, V, scale, cls[bi, t, 0], pj,
                                      pp, t, pn[t], coef, step, ridge, muN > 0.0, pa)
                if dn[t] > 0:
                    for k in range(dn[t]):
                        da[t, k] = step * coef[t, dp[t, k]] / scale[dj[t, k]]
                    bad |= _axpy_list(indices, data, indptr[i], indptr[i + 1], V, dj, da, t,
                                      dn[t])
        _batch_reset(cnt, ridge, touched, nt)
        steps += 1
        if bad:
            return steps, steps - 1, sink
        bi = 1 - bi
    return steps, -1, sink


@numba.njit(**PJIT)
def _sampled_epoch_par(indptr, indices, data, y, order, V, scale, beta, n, m, lr, muN, kind,
                       shared, drop_hits, logr, c_nce, seed, fused, pf, red_sum, sorted_idx,
                       nthr):
    """:func:`_sampled_epoch` on ``nthr`` threads: the batch's datapoints in parallel
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
        state = _draw_batch(state, y, order, b0, nb, K, m, shared, drop_hits, cls, ncls, smp,
                            0)
        nt = _batch_count(nb, cls[0], ncls[0], cnt, touched, ridge, lr, muN, beta, red_sum)
        step = _step_size(lr, nb, red_sum)
        for tp in numba.prange(nb):
            t = np.int64(tp)  # numba types the prange index unsigned
            i2 = -1
            t2 = t
            if fused and pf > 0 and t + pf < nb:
                t2 = t + pf
                i2 = order[b0 + t2]
                _hint_ahead(indptr, indices, data, order, b0 + t, pf, b0 + nb)
            nall = ncls[0, t]  # every class of the datapoint, at the old W
            for jj in range(nall):
                lj[t, jj] = cls[0, t, jj]
                lp[t, jj] = jj
            _score(indptr, indices, data, order[b0 + t], V, scale, lj, lp, t, nall, s, t, i2,
                   cls, 0, t2, 1 if shared else ncls[0, t2])
            _coefs(kind, logr, c_nce, s, t, ncls[0, t], coef, t)
            bads[t] = 0
            if fused:
                na, _ = _split(cls, ncls, 0, t, cnt, True, rows, rp, lj, lp, t)
                bads[t] = _apply_private(indptr, indices, data, order[b0 + t], V, scale,
                                         cls[0, t, 0], rows, rp, t, na, coef, step, ridge,
                                         muN > 0.0, rcoef)
        b2, tot = _deferred_prepare(nb, cls, ncls, 0, coef, V, scale, cnt, touched, nt, step,
                                    ridge, fused, dj, da, dn)
        dbads[:] = 0
        if sorted_idx and tot > 0:
            for qp in numba.prange(nthr):
                q = np.int64(qp)
                dbads[q] = _deferred_cols(indptr, indices, data, order, b0, nb, V, dj, da,
                                             dn, (D * q) // nthr, (D * (q + 1)) // nthr)
        elif tot > 0:
            dbads[0] = _deferred_rows(indptr, indices, data, order, b0, nb, V, dj, da, dn)
        _batch_reset(cnt, ridge, touched, nt)
        steps += 1
        if b2 or bads[:nb].any() or dbads.any():
            return steps, steps - 1, 0.0
    return steps, -1, 0.0


# ---------------------------------------------------------------------------
# NumPy reference
# ---------------------------------------------------------------------------

def touch_weights_shared(y, K, m):
    """``beta_j = N / (n_j + (N - n_j) m/K)``: inverse probability that class ``j`` is
    touched by a datapoint (its label, or in the shared sample of ``m`` distinct
    classes drawn from all ``K``)."""
    n = np.bincount(np.asarray(y, dtype=np.int64), minlength=K).astype(np.float64)
    N = n.sum()
    return N / (n + (N - n) * m / K)


def datapoint_coefficients(kind, s_y, s_neg, weight, c_nce, weighted=True):
    """Plain NumPy derivatives of one datapoint's loss in its scores.

    Parameters
    ----------
    kind : ``KIND_OVE``, ``KIND_NCE`` or ``KIND_IS``
    s_y : float, the label's score; s_neg : 1-D array, the sampled classes' scores
    weight : float, ``r`` (OVE, weighted IS); c_nce : float, ``log(m/K)`` (NCE)
    weighted : bool, IS only

    Returns
    -------
    g_y : float; g_neg : 1-D array (``d loss / d s``).
    """
    s_neg = np.asarray(s_neg, dtype=np.float64)
    sig = lambda z: 0.5 * (1.0 + np.tanh(0.5 * z))  # noqa: E731  (another form than the kernel's)
    if kind == KIND_OVE:
        g = weight * sig(s_neg - s_y)
        return -g.sum(), g
    if kind == KIND_NCE:
        return -sig(c_nce - s_y), sig(s_neg - c_nce)
    if kind == KIND_IS:
        z = np.concatenate(([s_y], s_neg + (np.log(weight) if weighted else 0.0)))
        q = np.exp(z - z.max())
        q /= q.sum()
        return q[0] - 1.0, q[1:]
    raise ValueError(f"kind must be one of {sorted(_KIND_NAMES)}; got {kind!r}")


def reference_step(X, y, W, rows, cls, ncls, lr, kind, weight, c_nce, weighted=True,
                   mu=0.0, beta=None, reduction="mean"):
    """One minibatch step in plain NumPy (dense ``K x D`` gradient).

    ``W_new = W - lr * (1/b) sum_t [ grad l_t(W) + (mu/N) sum_{j in T_t} beta_j w_j ]``
    (``reduction="mean"``) or the same without ``1/b`` (``reduction="sum"``), with
    ``T_t`` the distinct classes touched by datapoint ``t``. A row of ``cls`` may hold
    the label again among its sampled classes (draws with accidental hits kept): that
    entry is then an ordinary sampled class of the loss, and the ridge of the label's
    row is still counted once.

    Parameters
    ----------
    X : csr_matrix (N, D); y : int array (N,); W : ndarray (K, D), not modified
    rows : the batch's datapoint indices (length b)
    cls, ncls : the batch's classes as returned by :func:`epoch_draws`
    lr, kind, weight, c_nce, weighted : as in :func:`datapoint_coefficients`
    mu : ridge; beta : ndarray (K,) of inverse touch probabilities (needed if mu > 0)
    reduction : ``"mean"`` (default) or ``"sum"``

    Returns
    -------
    ndarray (K, D), the new weights.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}; got {reduction!r}")
    N = X.shape[0]
    G = np.zeros_like(W)
    b = len(rows)
    for t, i in enumerate(rows):
        x = np.asarray(X[[i]].toarray()).ravel()
        c = np.asarray(cls[t][: ncls[t]])
        s = W[c] @ x
        g_y, g_neg = datapoint_coefficients(kind, s[0], s[1:], weight, c_nce, weighted)
        G[c[0]] += g_y * x
        for j, gj in zip(c[1:], g_neg):
            G[j] += gj * x
        if mu > 0:
            for j in np.unique(c):
                G[j] += (mu / N) * beta[j] * W[j]
    if reduction == "sum":
        return W - lr * G
    return W - lr * G / b


# ---------------------------------------------------------------------------
# trainers
# ---------------------------------------------------------------------------

#: options whose value is one of a fixed set of strings
_CHOICES = {"reduction": _REDUCTIONS}


def _check_options(cls_name, options, allowed):
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for method {cls_name!r}; "
            f"its options are: {', '.join(sorted(allowed)) or '(none)'}")
    out = dict(allowed)
    for k, v in options.items():
        if k in _CHOICES:
            if not isinstance(v, str) or v not in _CHOICES[k]:
                raise ValueError(f"option {k!r} of method {cls_name!r} must be one of "
                                 f"{', '.join(map(repr, _CHOICES[k]))}; got {v!r}")
            out[k] = str(v)
        elif allowed[k] is None:  # a tri-state flag: None (the default behaviour) or a bool
            if v is not None and not isinstance(v, (bool, np.bool_)):
                raise ValueError(f"option {k!r} of method {cls_name!r} must be None, True or "
                                 f"False; got {v!r}")
            out[k] = None if v is None else bool(v)
        elif isinstance(allowed[k], bool):
            if not isinstance(v, (bool, np.bool_)):
                raise ValueError(f"option {k!r} of method {cls_name!r} must be True or False; "
                                 f"got {v!r}")
            out[k] = bool(v)
        else:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"option {k!r} of method {cls_name!r} must be an integer >= 0; "
                                 f"got {v!r}")
            out[k] = int(v)
    return out


class _SampledTrainer(Trainer):
    """Shared machinery of :class:`OVETrainer`, :class:`NCETrainer` and :class:`ISTrainer`.

    Options
    -------
    shared_negatives : bool, default False
        one set of ``m`` classes per minibatch instead of per datapoint (module
        docstring).
    remove_accidental_hits : None, True or False; default None
        with ``shared_negatives=True``: what happens to a sampled class equal to the
        datapoint's own label. ``None``: dropped for OVE and IS, kept for NCE
        (TensorFlow's loss functions' defaults); ``True``: dropped for all;
        ``False``: kept for all, as an ordinary sampled class (the original
        experiment code). Setting ``True`` or ``False`` without shared negatives
        (where the label is never drawn) raises ``ValueError``.
    reduction : ``"mean"`` (default) or ``"sum"``
        a step uses the mean of the batch's gradients (``lr/b`` per datapoint) or
        their sum (``lr`` per datapoint; the original TensorFlow code); the ridge
        part scales alike (module docstring).
    fused : bool, default True
        apply each row's update while it is in cache (``False``: the straightforward
        two-phase loop; identical results).
    prefetch : int, default 1
        with ``fused``: hint the cache lines of the datapoint this many places ahead
        (and the CSR lines of the one twice as far) while the current one is
        processed; with shared negatives also stream the batch's shared rows in first
        (0: none of this; no effect on results).
    parallel : bool, default False
        use numba's threads (bit-identical results). Off by default: the kernel
        synchronises its threads twice per minibatch, which only pays on idle cores.
    """

    kind: int = -1
    has_u = False
    minibatch = True
    default_batch_size = 100
    default_n_sampled = 5
    _options: dict = {"shared_negatives": False, "fused": True, "parallel": False,
                      "prefetch": 1, "remove_accidental_hits": None, "reduction": "mean"}

    def __init__(self, X, y, K, *, mu=0.0, batch_size=None, n_sampled=None, **options):
        super().__init__(X, y, K, mu=mu, batch_size=batch_size, n_sampled=n_sampled, **options)
        self.opts = _check_options(self.name, options, self._options)
        K, m, n = self.K, self.n_sampled, self.batch_size
        self.shared = self.opts["shared_negatives"]
        if K < 2:
            raise ValueError(f"K must be at least 2; got {K}")
        if n < 1:
            raise ValueError(f"batch_size must be a positive integer; got {n}")
        mmax = K if self.shared else K - 1
        if not 1 <= m <= mmax:
            where = ("shared negatives are drawn from all K classes" if self.shared
                     else "drawn from the K-1 classes other than the label")
            raise ValueError(f"n_sampled (classes per datapoint) must be in 1..{mmax} for "
                             f"K = {K} ({where}); got {m}")
        self.X = X if (sp.issparse(X) and X.format == "csr") else sp.csr_matrix(X)
        self._indptr = np.ascontiguousarray(self.X.indptr, dtype=np.int64)
        # 32-bit column indices when they fit: half the lines of a datapoint's indices
        self._indices = np.ascontiguousarray(
            self.X.indices, dtype=np.int32 if self.D < 2**31 else np.int64)
        self._data = np.ascontiguousarray(self.X.data, dtype=np.float64)
        self._y = np.ascontiguousarray(y, dtype=np.int64)
        #: the indices of every CSR row are sorted (the kernels then apply the shared
        #: rows' updates by blocks of columns)
        self._sorted = bool(self.X.has_sorted_indices)
        #: weight r of the sampled terms
        self.weight = K / m if self.shared else (K - 1) / m
        self.c_nce = math.log(m / K)
        rah = self.opts["remove_accidental_hits"]
        if rah is not None and not self.shared:
            raise ValueError(
                f"option 'remove_accidental_hits' of method {self.name!r} applies only with "
                f"shared_negatives=True (per-datapoint negatives never draw the label); "
                f"got remove_accidental_hits={rah!r} with shared_negatives=False")
        #: drop a sampled class equal to the datapoint's label (shared negatives only)
        self.drop_hits = self.shared and (self.kind != KIND_NCE if rah is None else rah)
        #: ``reduction="sum"``: no 1/b in the step
        self.reduction = self.opts["reduction"]
        if self.shared:
            self.beta = touch_weights_shared(self._y, K, m)
        else:
            nj = np.bincount(self._y, minlength=K).astype(np.float64)
            self.beta = self.N / (nj + (self.N - nj) * m / (K - 1))
        self.scale = None

    @property
    def _logr(self):
        return math.log(self.weight)

    def init_params(self, u_init: str = "zero") -> None:
        """``W = 0`` (every page written), all lazy scale factors 1; no ``u``."""
        self.W = _touched_zeros(self.K, self.D)
        self.scale = np.ones(self.K)
        self.u = None

    def run_epoch(self, order, lr, seed):
        """One epoch of minibatch steps over ``order`` (chunks of ``batch_size``)."""
        if self.W is None:
            self.init_params()
        order = np.ascontiguousarray(order, dtype=np.int64)
        args = (self._indptr, self._indices, self._data, self._y, order, self.W, self.scale,
                self.beta, self.batch_size, self.n_sampled, float(lr), self.mu / self.N,
                self.kind, self.shared, self.drop_hits, self._logr, self.c_nce, int(seed),
                self.opts["fused"], self.opts["prefetch"], self.reduction == "sum",
                self._sorted)
        nthr = numba.get_num_threads()
        if self.opts["parallel"] and nthr > 1:
            steps, div, _ = _sampled_epoch_par(*args, nthr)
        else:
            buf = _buffers(self.batch_size, self.n_sampled, self.K)
            steps, div, _ = _sampled_epoch(*args, buf)
        return EpochReport(steps=int(steps), diverged_at=int(div))

    def warmup(self):
        """Compile (or load) the kernel :meth:`run_epoch` uses: an epoch over no
        datapoints, which changes nothing."""
        if self.W is None:
            self.init_params()
        self.run_epoch(np.zeros(0, dtype=np.int64), 0.0, 0)

    def weights(self):
        """The ``K x D`` weights: the stored rows times their lazy scale factors (a
        folded copy when some factor differs from 1, i.e. only when ``mu > 0``)."""
        if self.scale is None or np.all(self.scale == 1.0):
            return self.W
        return self.W * self.scale[:, None]


class OVETrainer(_SampledTrainer):
    """One-vs-Each (T-4, T-15, T-16) by doubly stochastic minibatch SGD.

    Loss per datapoint ``r sum_j softplus(s_{k_j} - s_y)``; see the module docstring
    for the sampling, the step and the options (``shared_negatives``,
    ``remove_accidental_hits``, ``reduction``, ``fused``, ``prefetch``, ``parallel``).
    """

    name = "ove"
    kind = KIND_OVE


class NCETrainer(_SampledTrainer):
    """Noise-contrastive estimation with uniform noise ``q = 1/K`` (Mnih & Teh 2012).

    Loss per datapoint ``softplus(c - s_y) + sum_j softplus(s_{k_j} - c)``,
    ``c = log(m/K)``; options ``shared_negatives``, ``remove_accidental_hits``,
    ``reduction``, ``fused``, ``prefetch``, ``parallel``.
    """

    name = "nce"
    kind = KIND_NCE


class ISTrainer(_SampledTrainer):
    """Importance sampling / sampled softmax (Bengio & Senecal).

    Loss per datapoint ``-s_y + log(exp(s_y) + r sum_j exp(s_{k_j}))``.

    Options
    -------
    weighted : bool, default True
        ``False``: no ``r`` (TensorFlow's ``sampled_softmax_loss`` with a uniform
        sampler).
    shared_negatives, remove_accidental_hits, reduction, fused, prefetch, parallel :
        as for every sampled method (:class:`_SampledTrainer`).
    """

    name = "is"
    kind = KIND_IS
    _options = {"shared_negatives": False, "fused": True, "parallel": False, "prefetch": 1,
                "remove_accidental_hits": None, "reduction": "mean", "weighted": True}

    @property
    def _logr(self):
        return math.log(self.weight) if self.opts["weighted"] else 0.0
