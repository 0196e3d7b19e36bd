"""Lock-free (Hogwild) epoch kernels of Implicit SGD (``"implicit"``) and minibatch
Implicit SGD (``"implicit-batch"``): what the trainers run with the option
``threads > 1`` (``threads = 1`` runs the serial kernels, unchanged).

The scheme
----------
As U-max's Hogwild kernel (:func:`scalable_softmax.kernels.sgd.epoch_m1_hogwild`): the
epoch's order is cut into ``T`` contiguous chunks (for ``"implicit-batch"`` at
minibatch boundaries, so the minibatches, and hence the ridge weights ``β``, are those
of the serial epoch), run in parallel by ``numba.prange`` without locks. Chunk ``c``
draws its classes from its own stream, ``np.random.seed(seeds[c])`` (numba's
thread-local generator) with ``seeds = numpy.random.SeedSequence(seed)
.generate_state(T)``, exactly as the serial kernel seeded with ``seeds[c]`` would draw
them on that chunk alone. The classes of the whole chunk are drawn first (one ``int64``
per step, or per minibatch and class), then the steps run. Counters are kept per
chunk; a divergence stops every chunk at the end of the round it happened in and is
reported at the first failing step of any chunk, as an index into the epoch's order
(``"implicit"``) or into its minibatches (``"implicit-batch"``).

Where chunks touch disjoint class rows and disjoint datapoints (and no ridge scale
needs folding) the result is **bit-identical** to the serial kernel run chunk after
chunk with the chunks' seeds (tested); where they collide, a race loses or interleaves
updates of a shared row entry, of a row's scale or of ``u_i`` (the usual Hogwild
staleness), so results are **not reproducible** between runs.

The lazy ridge scales
---------------------
With ``mu > 0`` both methods keep ``W[k] = scale[k] * V[k]`` and a step that touches
row ``k`` multiplies ``scale[k]`` by ``1/A_k`` (``A_k = 1 + η ρ_k``) and writes ``V[k]``
at the step's columns divided by the scale it read. Two threads stepping on the same
row at once can then only lose one factor ``1/A_k`` (both write ``sk/A_k``) or use a
scale one factor ``A_k`` stale for their own update: a lost or interleaved update.
A *fold* (``V[k] *= scale[k]``, ``scale[k] = 1``, done by the serial kernels when a
scale underflows towards ``1e-150`` resp. ``1e-100``) is different: a thread that read
the scale before a concurrent fold would write its update ``1/scale`` (up to ``1e150``)
times too large, or write the old tiny scale back over the folded row. So the parallel
kernels never fold while threads run: the epoch runs in *rounds* of at most ``L`` steps
per chunk, separated by the parallel loop's barrier, and between rounds (and before the
first) one thread folds every row whose scale is below ``FOLD_BELOW``. A row is
touched at most once per step, so in one round its scale shrinks at most by
``A_max^(T L)``; ``L`` is the largest length with ``A_max^(T L) <= 10^ROUND_DECADES``
(:func:`round_steps`), so no scale reaches the serial kernels' fold threshold inside a
round (a lost or stale write only leaves a scale larger) and their fold code, shared
with these kernels, never runs here. With ``mu = 0`` (no scales) an epoch is one round.

Everything here is numba code except :func:`round_steps`; the NumPy references are the
serial kernels' own (``implicit_epoch_reference`` and ``reference_step`` of
:mod:`scalable_softmax.methods.implicit` and :mod:`scalable_softmax.methods.implicit_batch`),
against which the serial kernels are tested, and these kernels are tested against the
serial kernels (``tests/test_threads.py``).

``implicit_epoch(...)``, ``implicit_draw(...)``
    the Hogwild epoch of ``"implicit"`` and the class draws of one chunk.
``batch_epoch(...)``, ``batch_draw(...)``
    the Hogwild epoch of ``"implicit-batch"`` and the class draws of one chunk.
``chunk_seeds(seed, chunks)``, ``round_steps(rate_max, chunks, decades)``
    the chunks' seeds and the round length (Python). The trainers run the epochs inside
    :func:`scalable_softmax.kernels.threads.numba_threads` ``(T)``.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from scalable_softmax.kernels.common import JIT, PJIT, prefetch_ahead
from scalable_softmax.kernels.common import prefetch_r as _prefetch_r
from scalable_softmax.kernels.implicit import apply_step as _implicit_step
from scalable_softmax.kernels.implicit import apply_u_only as _implicit_u_only
from scalable_softmax.kernels.implicit import draw_class as _implicit_draw_class
from scalable_softmax.kernels.implicit_batch import chunk_labels as _batch_labels
from scalable_softmax.kernels.implicit_batch import epoch_kernel as _batch_kernel
from scalable_softmax.kernels.implicit_batch import sample_classes as _batch_sample

#: pipeline distances of the chunks' step loop (steps ahead; those of the serial fast
#: kernel): the CSR row of ``x`` and the per-datapoint values (indptr, y, u, ||x||^2)
_LX = 2
_LI = 4

__all__ = ["implicit_epoch", "implicit_draw", "batch_epoch", "batch_draw",
           "chunk_seeds", "round_steps", "FOLD_BELOW_IMPLICIT",
           "FOLD_BELOW_BATCH", "ROUND_DECADES"]

#: between rounds, rows whose lazy scale is below this are folded (``"implicit"``;
#: its serial kernel folds below ``1e-150``)
FOLD_BELOW_IMPLICIT = 1e-100
#: the same for ``"implicit-batch"`` (its serial kernel folds below ``1e-100``)
FOLD_BELOW_BATCH = 1e-60
#: decades a scale may shrink by in one round: 40 (resp. 30) keep every scale above
#: ``1e-140`` (``1e-90``), clear of the serial kernels' fold thresholds
ROUND_DECADES = {"implicit": 40.0, "implicit-batch": 30.0}


def chunk_seeds(seed: int, chunks: int) -> np.ndarray:
    """The seeds (``int64`` in ``0..2**32-1``) of the ``chunks`` chunks of an epoch
    seeded with ``seed``: ``numpy.random.SeedSequence(seed % 2**32)
    .generate_state(chunks, numpy.uint32)``."""
    ss = np.random.SeedSequence(int(seed) % (2 ** 32))
    return ss.generate_state(int(chunks), np.uint32).astype(np.int64)


def round_steps(rate_max: float, chunks: int, decades: float) -> int:
    """Steps per chunk and round so that no lazy scale shrinks by more than
    ``10**decades`` in one round.

    Parameters
    ----------
    rate_max : float
        The largest ``η ρ_k`` (a touch multiplies a scale by ``1/(1 + η ρ_k)``); 0 or
        less: no ridge, one round.
    chunks : int
        Chunks running at once (each touches a row at most once per step).
    decades : float
        The budget (:data:`ROUND_DECADES`).

    Returns
    -------
    int
        ``floor(decades log 10 / (chunks log1p(rate_max)))``, at most ``2**62``.

    Raises
    ------
    ValueError
        When not even one step per chunk fits the budget (``η ρ_k`` astronomically
        large); run with ``threads=1`` then.
    """
    if not rate_max > 0.0:
        return 2 ** 62
    lam = math.log1p(rate_max)
    steps = math.floor(decades * math.log(10.0) / (chunks * lam))
    if steps < 1:
        raise ValueError(
            f"threads={chunks}: a step shrinks a ridge scale by 1 + lr*mu*beta/N = "
            f"{1.0 + rate_max:.3g}, too much for the parallel kernels' rounds (one step "
            f"per thread may not shrink a scale by more than 10^{decades:g}); use "
            "threads=1 or a smaller learning rate or mu")
    return int(min(steps, 2 ** 62))


# ------------------------------------------------------------------------------------
# implicit
# ------------------------------------------------------------------------------------

@numba.njit(**JIT)
def implicit_draw(seed, order, y, K, sample_all, out):
    """The classes of the serial kernel seeded with ``seed`` on ``order`` into ``out``
    (``np.random.seed(seed)`` then one draw per step, in step order)."""
    np.random.seed(seed)
    for t in range(order.shape[0]):
        out[t] = _implicit_draw_class(y[order[t]], K, sample_all)


@numba.njit(**JIT)
def _implicit_steps(indptr, indices, data, y, sqnorm, W, u, scale, rho, order, classes,
                    a, b, eta, km1, lkm1, lc_base, tol, ridge, cnt):
    """Steps ``a..b-1`` of ``order`` with the drawn ``classes``, pipelined as the
    serial fast kernel (the next step's rows prefetched during this one). Adds to
    ``cnt`` (steps, diverged index into ``order``, root evaluations, their maximum,
    u-only steps) at the end only: the chunks' counters share a cache line."""
    steps = 0
    total = 0
    emax = 0
    n_u = 0
    diverged = -1
    for t in range(a, b):
        prefetch_ahead(indptr, indices, data, y, u, sqnorm, True, order, t, b, _LI, _LX, True)
        q = 0
        q1 = 0
        kk = 0
        yj = 0
        if t + 1 < b:
            j = order[t + 1]
            yj = y[j]
            kk = classes[t + 1]
            q = indptr[j]
            q1 = indptr[j + 1]
            if ridge:
                _prefetch_r(scale, kk)
                _prefetch_r(scale, yj)
        i = order[t]
        yi = y[i]
        k = classes[t]
        if k == yi:
            evals, ok = _implicit_u_only(sqnorm, u, i, eta, km1, lkm1, lc_base, tol)
            n_u += 1
        else:
            evals, ok = _implicit_step(indptr, indices, data, sqnorm, W, u, scale, rho,
                                       i, yi, k, eta, km1, lkm1, lc_base, tol, ridge, q,
                                       q1, kk, yj)
        steps += 1
        total += evals
        emax = max(emax, evals)
        if not ok:
            diverged = t
            break
    cnt[0] += steps
    cnt[1] = diverged if diverged >= 0 else cnt[1]
    cnt[2] += total
    cnt[3] = max(cnt[3], emax)
    cnt[4] += n_u


@numba.njit(**JIT)
def _fold_small(V, scale, below):
    """Fold every row whose scale is below ``below`` (``V[k] *= scale[k]``,
    ``scale[k] = 1``); returns how many."""
    folds = 0
    for k in range(scale.shape[0]):
        sk = scale[k]
        if sk < below:
            for q in range(V.shape[1]):
                V[k, q] *= sk
            scale[k] = 1.0
            folds += 1
    return folds


@numba.njit(**PJIT)
def implicit_epoch(indptr, indices, data, y, sqnorm, W, u, scale, rho, order, eta, K,
                   tol, seeds, ridge, sample_all, round_len, fold_below, counters):
    """One Hogwild pass of implicit steps over ``order`` in ``len(seeds)`` chunks.

    Same arrays as the serial kernel (``scalable_softmax.methods.implicit``), plus
    ``seeds`` (one per chunk, :func:`chunk_seeds`), ``round_len`` (steps per chunk and
    round, :func:`round_steps`), ``fold_below`` (:data:`FOLD_BELOW_IMPLICIT`) and
    ``counters`` (``chunks x 5``, zeros on entry; per chunk: steps, diverged index into
    ``order`` or ``-1``, root evaluations, their maximum, u-only steps). Returns the
    number of rows folded between rounds.
    """
    nch = seeds.shape[0]
    n = order.shape[0]
    km1 = K - 1.0
    lkm1 = math.log(km1)
    lc_base = math.log(2.0 * eta) + lkm1
    classes = np.empty(n, np.int64)
    for c in numba.prange(nch):
        lo = (n * c) // nch
        hi = (n * (c + 1)) // nch
        implicit_draw(seeds[c], order[lo:hi], y, K, sample_all, classes[lo:hi])
        counters[c, 1] = -1
    longest = (n + nch - 1) // nch
    folds = 0
    r0 = 0
    while r0 < longest:
        r1 = r0 + round_len if round_len < longest - r0 else longest
        if ridge:
            folds += _fold_small(W, scale, fold_below)
        for c in numba.prange(nch):
            lo = (n * c) // nch
            hi = (n * (c + 1)) // nch
            a = lo + r0
            b = lo + r1 if lo + r1 < hi else hi
            if a < b:
                _implicit_steps(indptr, indices, data, y, sqnorm, W, u, scale, rho,
                                order, classes, a, b, eta, km1, lkm1, lc_base, tol,
                                ridge, counters[c])
        stop = False
        for c in range(nch):
            if counters[c, 1] >= 0:
                stop = True
        if stop:
            break
        r0 = r1
    return folds


# ------------------------------------------------------------------------------------
# implicit-batch
# ------------------------------------------------------------------------------------

@numba.njit(**JIT)
def batch_draw(seed, order, y, n, m, K, classes):
    """The classes the serial ``implicit-batch`` kernel seeded with ``seed`` draws on
    ``order`` (minibatches of ``n``, ``m`` classes each, ``-1`` padded) into
    ``classes`` (``steps x m``): the same calls on numba's generator in the same
    order."""
    np.random.seed(seed)
    total = order.shape[0]
    mark = np.full(K, -1, np.int64)
    pts = np.empty(n, np.int64)
    cnt = np.empty(n, np.int64)
    cls = np.empty(n + m, np.int64)
    sampled = np.empty(m, np.int64)
    ypos = np.empty(n, np.int64)
    step = 0
    for start in range(0, total, n):
        stop = min(start + n, total)
        s, ny = _batch_labels(order, start, stop, y, pts, cnt, cls, ypos)
        for b in range(ny):
            mark[cls[b]] = step
        mm = _batch_sample(K, K - ny, m, mark, step, sampled)
        for c in range(m):
            classes[step, c] = sampled[c] if c < mm else -1
        step += 1


@numba.njit(**PJIT)
def batch_epoch(indptr, indices, data, y, R, gamma, u, order, n, m, K, N, lr, mu, beta,
                seeds, tol, max_newton, dense, classes, round_len, fold_below, out):
    """One Hogwild epoch of ``implicit-batch`` steps in ``len(seeds)`` chunks of whole
    minibatches.

    Same arrays as the serial kernel (``scalable_softmax.methods.implicit_batch``),
    plus ``seeds`` (one per chunk), ``round_len`` (minibatches per chunk and round),
    ``fold_below`` (:data:`FOLD_BELOW_BATCH`) and ``out`` (``chunks x 8``; per chunk
    the serial kernel's eight results: diverged minibatch (into the epoch's
    minibatches) or ``-1``, steps, Newton iterations, their maximum, unconverged
    steps, clamped ``u``, dense fallbacks, chord iterations). Chunk ``c`` holds the
    minibatches ``nb c / T .. nb (c + 1) / T - 1`` of the ``nb`` of the epoch. Every
    round runs the serial kernel on the round's minibatches with their drawn classes
    (its replay mode). Returns the number of rows folded between rounds.
    """
    nch = seeds.shape[0]
    total = order.shape[0]
    nb = (total + n - 1) // n
    for c in numba.prange(nch):
        b0 = (nb * c) // nch
        b1 = (nb * (c + 1)) // nch
        s1 = b1 * n if b1 * n < total else total
        batch_draw(seeds[c], order[b0 * n:s1], y, n, m, K, classes[b0:b1])
        out[c, 0] = -1
    longest = (nb + nch - 1) // nch
    folds = 0
    r0 = 0
    while r0 < longest:
        r1 = r0 + round_len if round_len < longest - r0 else longest
        if mu > 0.0:
            folds += _fold_small(R, gamma, fold_below)
        for c in numba.prange(nch):
            b0 = (nb * c) // nch
            b1 = (nb * (c + 1)) // nch
            a = b0 + r0
            b = b0 + r1 if b0 + r1 < b1 else b1
            if a < b:
                s1 = b * n if b * n < total else total
                res = _batch_kernel(indptr, indices, data, y, R, gamma, u,
                                    order[a * n:s1], n, m, K, N, lr, mu, beta, 0, tol,
                                    max_newton, dense, classes[a:b], True)
                if res[0] >= 0:
                    out[c, 0] = a + res[0]
                out[c, 1] += res[1]
                out[c, 2] += res[2]
                if res[3] > out[c, 3]:
                    out[c, 3] = res[3]
                out[c, 4] += res[4]
                out[c, 5] += res[5]
                out[c, 6] += res[6]
                out[c, 7] += res[7]
        stop = False
        for c in range(nch):
            if out[c, 0] >= 0:
                stop = True
        if stop:
            break
        r0 = r1
    return folds
