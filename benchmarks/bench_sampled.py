"""Speed of the biased baselines (OVE, NCE, IS; kernels/sampled.py) and of exact
softmax SGD (kernels/full.py), plus the converged-point comparison.

Measures, in one run (ratios side by side):

1. ``headline``: on the issue's shape (N=100,000, D=10,000, ~50 non-zeros per row,
   uniform random columns, L2-normalised rows, K=18,000, n=100, m=5; one W written at
   initialisation and shared by every variant), interleaved epoch by epoch: U-max (one
   class per step, its default pipelined kernel), the nine sampled kernels (ove, nce,
   is; own negatives, shared negatives, and shared with the authors' TensorFlow
   settings: accidental hits kept, summed loss, IS unweighted), and the bound loops of
   their three access patterns (:func:`_pattern`, :func:`_pattern_kernel_order`): the
   kernels' own draws, every entry a kernel writes read-modified-written and nothing
   else, in several orders (one pass; hints ahead; the kernels' own two passes). With
   ``--baseline REV`` the kernels of an earlier revision are timed in the same run
   (the "before").
2. ``bound``: context, the machine's rate of single-element read-modify-writes at
   independent random places of W.
3. ``sparse``: every kernel variant of ove, nce, is with own and shared negatives:
   the straightforward kernel (``fused=False``), ``fused=True`` without and with
   ``prefetch=1`` (the default), and the default on numba's threads
   (``threads`` = numba's thread count). Also ove with ``mu > 0`` (lazy ridge) against ``mu = 0``.
4. ``sparse_zipf``: ove on the same shape with Zipf-distributed columns and labels
   (text-like), for context.
5. ``softmax_sgd``: exact softmax SGD (n = 100), O(K) per datapoint, at K = 18,000
   and K = 1,000 (20 and 200 minibatches, not whole epochs): the straightforward
   kernel (``layout="class-rowwise"``) beside the class-major default one, serial and on threads.
6. ``converged``: on a small ridge problem (N=200, D=10, K=5, mu=1), the distance of
   each method's end point to the exact optimum (L-BFGS), as in tests/test_sampled.py.

Rates are datapoints per second (datapoint-updates/s), best and median over repeated
epochs, each on a fresh permutation; variants are interleaved epoch by epoch so that
machine load affects them alike. Also the CPU-time rate (process time) of the serial
variants, less sensitive to other processes. The machine is shared (2 cores): the
load average is recorded.

Usage: ``python benchmarks/bench_sampled.py [--quick] [--repeats R] [--baseline REV]``;
results go to
``benchmarks/results/sampled.json`` and ``sampled.md`` (``sampled-quick.*`` with
``--quick``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp

from scalable_softmax import methods
from scalable_softmax import objectives as ob
from scalable_softmax.kernels import prefetch_r as _prefetch_r
from scalable_softmax.kernels import prefetch_w as _prefetch_w
from scalable_softmax.kernels import sampled as ksampled
from scalable_softmax.kernels import sgd as ksgd
from scalable_softmax.methods import full, sampled, sgd
from scalable_softmax.repro.fagan.timing import peak_rss_bytes

RESULTS = Path(__file__).resolve().parent / "results"


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------

@numba.njit(boundscheck=False)
def _distinct_rows(N, D, nnz, cdf, perm, seed):
    """``nnz`` distinct columns per row: uniform (empty ``cdf``) or drawn from the
    cumulative weights ``cdf`` and renamed by ``perm``."""
    np.random.seed(seed)
    idx = np.empty(N * nnz, dtype=np.int64)
    mark = np.zeros(D, dtype=np.int64)
    for i in range(N):
        c = 0
        while c < nnz:
            if cdf.shape[0] == 0:
                f = np.random.randint(0, D)
            else:
                f = perm[np.searchsorted(cdf, np.random.random() * cdf[-1])]
            if mark[f] == i + 1:
                continue
            mark[f] = i + 1
            idx[i * nnz + c] = f
            c += 1
        idx[i * nnz:(i + 1) * nnz].sort()
    return idx


def sparse_data(N, D, nnz, K, seed=0, zipf=False):
    """CSR with ``nnz`` distinct columns per row, L2-normalised rows; uniform columns
    and labels, or (``zipf``) Zipf(1) columns (randomly numbered) and labels."""
    rng = np.random.default_rng(seed)
    if zipf:
        cdf = np.cumsum(1.0 / np.arange(1, D + 1))
        perm = rng.permutation(D)
    else:
        cdf, perm = np.zeros(0), np.arange(D)
    idx = _distinct_rows(N, D, nnz, cdf, perm, seed)
    vals = rng.random((N, nnz)) + 0.1
    vals /= np.linalg.norm(vals, axis=1, keepdims=True)
    X = sp.csr_matrix((vals.ravel(), idx, np.arange(N + 1, dtype=np.int64) * nnz),
                      shape=(N, D))
    if zipf:
        p = 1.0 / np.arange(1, K + 1)
        y = rng.choice(K, size=N, p=p / p.sum())
    else:
        y = rng.integers(0, K, N)
    return X, y


# ---------------------------------------------------------------------------
# the bounds: loops that make the kernels' memory accesses and nothing else
# ---------------------------------------------------------------------------

@numba.njit(nogil=True, boundscheck=False)
def _rmw_random(W, rows, cols):
    for t in range(rows.shape[0]):
        W[rows[t], cols[t]] += 1e-300


def memory_bound(W, lines_per_datapoint, n=5_000_000, repeats=3, seed=0):
    """The rate of read-modify-writes of single elements at independent uniformly
    random places of ``W`` (a random row and column each): the machine's random-access
    rate with no locality at all (context for the pattern bounds below, which are
    faster: a datapoint's ~50 entries of one row share its pages)."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, W.shape[0], n)
    cols = rng.integers(0, W.shape[1], n)
    _rmw_random(W, rows[:10], cols[:10])
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        _rmw_random(W, rows, cols)
        best = min(best, time.perf_counter() - t0)
    W[rows, cols] = 0.0
    lines = n / best
    return {"random_lines_per_s": lines, "ns_per_line": 1e9 / lines,
            "lines_per_datapoint": lines_per_datapoint,
            "datapoints_per_s": lines / lines_per_datapoint}


@numba.njit(nogil=True, boundscheck=False)
def _pattern(indptr, indices, data, order, cls, ncls, W, n, m, pf, hint_all, touch, read_first,
             xpf, inc):
    """The memory accesses of the sampled kernels with trivial arithmetic.

    For every datapoint ``t`` of the epoch (``order``) and each of its classes
    ``j = cls[t, :ncls[t]]`` (label first; the kernels' draws), at the columns ``c`` of
    ``x_t``: ``W[j, c] += inc``, a read-modify-write of every entry the kernel writes.
    Options, each a way the kernel may order the same accesses:

    * ``read_first``: first read all the datapoint's entries (summed, as the kernel's
      scores), then read-modify-write them (the kernel's two passes);
    * ``pf > 0``: the lines of datapoint ``t + pf`` (its label's row, or all its rows
      with ``hint_all``) are hinted, one hint per entry of the first pass;
    * ``xpf`` (with ``pf > 0``): the CSR lines (indices and values) of datapoint
      ``t + 2 pf`` are hinted too, and the ``indptr`` entry of ``t + 3 pf`` (the hints of
      datapoint ``t + pf`` read its columns);
    * ``touch``: at the start of each batch of ``n``, one element per cache line of the
      batch's ``m`` shared rows is read in address order (the shared-negatives kernel);
      the shared rows are the first datapoint's sampled classes, plus its label when
      ``ncls < m + 1`` (a dropped accidental hit).

    Returns the sum of the elements read (so that the reads happen)."""
    U = np.uint64
    N = order.shape[0]
    D = W.shape[1]
    sink = 0.0
    for t in range(N):
        if touch and t % n == 0:
            nc0 = ncls[t]
            for jj in range(1 if nc0 > m else 0, nc0):
                r = U(cls[t, jj])
                for c in range(0, D, 8):
                    sink += W[r, U(c)]
        if xpf and pf > 0:
            if t + 2 * pf < N:
                i3 = order[t + 2 * pf]
                for p in range(indptr[i3], indptr[i3 + 1], 8):
                    _prefetch_r(indices, U(p))
                    _prefetch_r(data, U(p))
            if t + 3 * pf < N:
                _prefetch_r(indptr, U(order[t + 3 * pf]))
        i = order[t]
        p0 = indptr[i]
        p1 = indptr[i + 1]
        nh = 0
        q0 = 0
        q1 = 0
        if pf > 0 and t + pf < N:
            i2 = order[t + pf]
            q0 = indptr[i2]
            q1 = indptr[i2 + 1]
            nh = ncls[t + pf] if hint_all else 1
        h = 0
        q = q0
        if q1 == q0:
            nh = 0
        nc = ncls[t]
        if read_first:
            for jj in range(nc):
                r = U(cls[t, jj])
                for p in range(p0, p1):
                    sink += W[r, U(indices[p])]
                    if h < nh:
                        _prefetch_w(W, U(cls[t + pf, h]), U(indices[q]))
                        q += 1
                        if q == q1:
                            q = q0
                            h += 1
        for jj in range(nc):
            r = U(cls[t, jj])
            for p in range(p0, p1):
                c = U(indices[p])
                W[r, c] += inc
                if h < nh:
                    _prefetch_w(W, U(cls[t + pf, h]), U(indices[q]))
                    q += 1
                    if q == q1:
                        q = q0
                        h += 1
        while h < nh:
            _prefetch_w(W, U(cls[t + pf, h]), U(indices[q]))
            q += 1
            if q == q1:
                q = q0
                h += 1
    return sink


@numba.njit(nogil=True, boundscheck=False)
def _rmw_rows(indices, p0, p1, W, cls, t, j0, j1, inc):
    """``W[j, c] += inc`` at the columns ``indices[p0:p1]`` for the rows
    ``j = cls[t, j0:j1]``, three rows per pass (the kernels' update loops)."""
    U = np.uint64
    jj = j0
    while jj < j1:
        a = U(cls[t, jj])
        b = U(cls[t, jj + 1]) if jj + 1 < j1 else a
        c = U(cls[t, jj + 2]) if jj + 2 < j1 else a
        k = min(3, j1 - jj)
        for p in range(p0, p1):
            f = U(indices[p])
            W[a, f] += inc
            if k > 1:
                W[b, f] += inc
            if k > 2:
                W[c, f] += inc
        jj += 3


@numba.njit(nogil=True, boundscheck=False)
def _read_rows(indptr, indices, data, i, W, cls, t, j0, j1, i2, cls2, t2, h0, nh):
    """Sum ``data * W[j, c]`` over the entries of datapoint ``i`` for the rows
    ``j = cls[t, j0:j1]`` with the kernels' own dot-product loops (three rows per pass,
    :func:`scalable_softmax.kernels.sampled.dot3`), hinting the rows ``cls2[t2, h0:h0 + nh]`` at the
    columns of datapoint ``i2`` (``-1``: none), as the kernels do."""
    p0 = indptr[i]
    p1 = indptr[i + 1]
    q0 = 0
    q1 = 0
    if i2 >= 0:
        q0 = indptr[i2]
        q1 = indptr[i2 + 1]
    else:
        nh = 0
    tot = 0.0
    jj = j0
    h = 0
    while jj < j1:
        hj = cls2[t2, h0 + h] if h < nh else -1
        hk = cls2[t2, h0 + h + 1] if h + 1 < nh else -1
        hl = cls2[t2, h0 + h + 2] if h + 2 < nh else -1
        h += 3
        a = cls[t, jj]
        b = cls[t, jj + 1] if jj + 1 < j1 else a
        c = cls[t, jj + 2] if jj + 2 < j1 else a
        x, y, z = ksampled.dot3(indices, data, p0, p1, W, a, b, c, q0, q1, hj, hk, hl)
        tot += x + y + z
        jj += 3
    while h < nh:
        ksampled.hint_row(W, cls2[t2, h0 + h], indices, q0, q1)
        h += 1
    return tot


@numba.njit(nogil=True, boundscheck=False)
def _pattern_kernel_order(indptr, indices, data, order, cls, ncls, W, n, m, pf, shared, inc):
    """The sampled kernels' memory accesses in the kernels' own order and loops, with no
    arithmetic beyond the dot products' multiply-adds: per batch of ``n`` (shared
    negatives) the shared rows are read one element per line, then scored for every
    datapoint; then per datapoint: the CSR lines of ``t + 2 pf`` hinted, its own rows
    read (with the rows of ``t + pf`` hinted, three rows per pass), then every entry it
    touches read-modified-written. ``cls[t, 0]`` is the label (its own row); the
    shared rows are ``cls[t, 1:]`` (``shared``), otherwise every row is the
    datapoint's own. Returns the sum read."""
    U = np.uint64
    N = order.shape[0]
    D = W.shape[1]
    sink = 0.0
    for b0 in range(0, N, n):
        nb = min(n, N - b0)
        if shared:
            nc0 = ncls[b0]
            for jj in range(1 if nc0 > m else 0, nc0):
                r = U(cls[b0, jj])
                for c in range(0, D, 8):
                    sink += W[r, U(c)]
            for t in range(b0, b0 + nb):
                if t + 4 < b0 + nb:
                    ksampled.hint_x(indptr, indices, data, order[t + 4])
                sink += _read_rows(indptr, indices, data, order[t], W, cls, t, 1, ncls[t], -1,
                                   cls, t, 0, 0)
        for t in range(b0, b0 + nb):
            if pf > 0:
                ksampled.hint_ahead(indptr, indices, data, order, t, pf, N)
            i = order[t]
            own = 1 if shared else ncls[t]
            i2 = order[t + pf] if (pf > 0 and t + pf < N) else -1
            t2 = t + pf if i2 >= 0 else t
            sink += _read_rows(indptr, indices, data, i, W, cls, t, 0, own, i2, cls, t2, 0,
                               1 if shared else ncls[t2])
            _rmw_rows(indices, indptr[i], indptr[i + 1], W, cls, t, 0, ncls[t], inc)
    return sink


def kernel_order_runner(trainer, W, pf, shared, drop_hits=True):
    """A :func:`time_variants` runner of :func:`_pattern_kernel_order` on the kernel's
    draws (drawn before the clock starts)."""
    ip, ix, xd, y = methods.csr_arrays(trainer)

    def run(order, e):
        order = np.ascontiguousarray(order, dtype=np.int64)
        cls, ncls = sampled.epoch_draws(y, order, trainer.K, trainer.batch_size,
                                        trainer.n_sampled, shared, drop_hits, 1000 + e)
        c0, t0 = time.process_time(), time.perf_counter()
        _pattern_kernel_order(ip, ix, xd, order, cls, ncls, W, trainer.batch_size,
                              trainer.n_sampled, pf, shared, 1e-300)
        return order.size, time.perf_counter() - t0, time.process_time() - c0
    return run


#: the bound loops timed beside the kernels: name -> (pf, hint_all, touch, read_first, xpf)
PATTERN_LOOPS = {
    "own": {"rmw": (0, True, False, False, False), "rmw_hint2": (2, True, False, False, False),
            "rmw_hint1_x": (1, True, False, False, True),
            "rmw_hint2_x": (2, True, False, False, True),
            "rmw_hint4_x": (4, True, False, False, True),
            "read_rmw_hint2_x": (2, True, False, True, True)},
    "shared": {"rmw": (0, False, False, False, False),
               "rmw_hint2": (2, False, False, False, False),
               "rmw_hint2_touch": (2, False, True, False, False),
               "rmw_hint2_x_touch": (2, False, True, False, True),
               "read_rmw_hint2_x_touch": (2, False, True, True, True)},
    "umax": {"rmw": (0, True, False, False, False), "rmw_hint2": (2, True, False, False, False),
             "rmw_hint2_x": (2, True, False, False, True),
             "read_rmw_hint2_x": (2, True, False, True, True)},
}


def pattern_runner(trainer, W, loop, shared, drop_hits=True, umax=False):
    """A :func:`time_variants` runner of :func:`_pattern` with the options ``loop``
    (a value of :data:`PATTERN_LOOPS`) on the draws the kernel would make for the
    epoch (drawn before the clock starts): the sampled trainer's, or with ``umax`` a
    label and one class uniform among the others per step (U-max's access pattern)."""
    pf, hint_all, touch, read_first, xpf = loop
    ip, ix, xd, y = methods.csr_arrays(trainer)
    n, m = trainer.batch_size, trainer.n_sampled

    def run(order, e):
        order = np.ascontiguousarray(order, dtype=np.int64)
        if umax:
            cls = np.empty((order.size, 2), dtype=np.int64)
            cls[:, 0] = y[order]
            cls[:, 1] = ksgd.draw_classes_m1(np.int64(1000 + e), order, y, trainer.K)
            ncls = np.full(order.size, 2, dtype=np.int64)
        else:
            cls, ncls = sampled.epoch_draws(y, order, trainer.K, n, m, shared, drop_hits,
                                            1000 + e)
        c0, t0 = time.process_time(), time.perf_counter()
        _pattern(ip, ix, xd, order, cls, ncls, W, n, m, pf, hint_all, touch, read_first, xpf,
                 1e-300)
        return order.size, time.perf_counter() - t0, time.process_time() - c0
    return run


# ---------------------------------------------------------------------------
# timing helpers
# ---------------------------------------------------------------------------

def time_variants(variants, N, repeats, seed=0):
    """``variants``: name -> callable(order, epoch) -> datapoints done, or
    ``(datapoints, wall seconds, CPU seconds)`` when it times its own loop (to leave
    out preparations such as the bound loops' draws).

    Interleaved timing; returns name -> rates in M datapoints/s (wall: best and
    median; process time: best)."""
    rng = np.random.default_rng(seed)
    wall = {k: [] for k in variants}
    cpu = {k: [] for k in variants}
    done = {}
    for run in variants.values():               # warm-up (compilation, caches)
        run(rng.permutation(N)[: max(N // 20, 1000)], 0)
    for r in range(repeats):
        for name, run in variants.items():
            order = rng.permutation(N)
            c0, t0 = time.process_time(), time.perf_counter()
            out = run(order, r + 1)
            w, c = time.perf_counter() - t0, time.process_time() - c0
            if isinstance(out, tuple):      # the runner timed its own loop
                out, w, c = out
            done[name] = out
            wall[name].append(w)
            cpu[name].append(c)
    out = {}
    for name in variants:
        w, c = np.array(wall[name]), np.array(cpu[name])
        out[name] = {"best_M_per_s": done[name] / w.min() / 1e6,
                     "median_M_per_s": done[name] / np.median(w) / 1e6,
                     "cpu_best_M_per_s": done[name] / c.min() / 1e6,
                     "epoch_s": w.round(4).tolist(), "datapoints": int(done[name])}
    return out


def runner(trainer, lr=0.05, frac=1.0):
    """Run an epoch (or its first ``frac``) of ``trainer`` (its options are fixed when it
    is built: one trainer per variant)."""
    def run(order, e):
        order = order[: max(1, int(frac * len(order)))]
        rep = trainer.run_epoch(order, lr, 1000 + e)
        if rep.diverged_at >= 0:
            raise RuntimeError(f"diverged at {rep.diverged_at}")
        return len(order)
    return run


def loadavg():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def rss_gb():
    peak = peak_rss_bytes()
    return None if peak is None else peak / 2**30


# ---------------------------------------------------------------------------
# the headline comparison: the kernels against U-max and the bound loops, one run
# ---------------------------------------------------------------------------

#: the three sampled methods' default kernels and the authors' TensorFlow settings
#: (shared negatives, accidental hits kept, summed loss; IS without the weight)
HEADLINE_KERNELS = {
    "own": {},
    "shared": {"shared_negatives": True},
    "shared_tf": {"shared_negatives": True, "remove_accidental_hits": False,
                  "reduction": "sum"},
}


def load_baseline(rev):
    """``methods/sampled.py`` as of the git revision ``rev``, imported as a separate
    module (its kernels are then timed beside the current ones). Where the revision
    keeps the kernels apart (``kernels/sampled.py``), that module of the revision is
    loaded as well and the method module's import of it points there."""
    import importlib.util
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]

    def show(path):
        got = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=root,
                             capture_output=True, text=True)
        return got.stdout if got.returncode == 0 else None

    src = show("lib/scalable_softmax/methods/sampled.py")
    if src is None:
        raise SystemExit(f"no lib/scalable_softmax/methods/sampled.py at revision {rev}")
    sha = subprocess.run(["git", "rev-parse", rev], cwd=root, check=True, capture_output=True,
                         text=True).stdout.strip()
    d = Path(tempfile.mkdtemp(prefix="sampled_baseline_"))

    def load(name, text):
        f = d / f"{name}.py"
        f.write_text(text)
        spec = importlib.util.spec_from_file_location(name, f)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod

    kern = show("lib/scalable_softmax/kernels/sampled.py")
    if kern is not None:     # (revisions before the flags moved to kernels.common)
        kern = kern.replace("from scalable_softmax._kernels import",
                            "from scalable_softmax.kernels.common import")
    if kern is not None and "def sampled_epoch" in kern:
        load("sampled_kernels_baseline", kern)
        src = src.replace("from scalable_softmax.kernels.sampled import",
                          "from sampled_kernels_baseline import")
    return load("sampled_baseline", src), sha


def headline(X, y, K, n, m, W, um, repeats, baseline=None):
    """U-max (one class per step, the default pipelined kernel), the nine sampled
    kernels (ove / nce / is with their default options: own negatives, shared negatives,
    and the TensorFlow settings), the bound loops of their three access patterns, and
    (``baseline = (module, sha)``) the same kernels of an earlier revision, all
    interleaved epoch by epoch in one run on the same ``W``."""
    variants = {"umax": lambda order, e: um.run_epoch(order, 0.01, 1000 + e).steps}
    mods = [("", sampled)] + ([("before_", baseline[0])] if baseline else [])
    proto = {}
    for prefix, mod in mods:
        for name, cls in (("ove", "OVETrainer"), ("nce", "NCETrainer"), ("is", "ISTrainer")):
            for tag, opts in HEADLINE_KERNELS.items():
                opts = dict(opts)
                if tag == "shared_tf" and name == "is":
                    opts["weighted"] = False
                t = getattr(mod, cls)(X, y, K, batch_size=n, n_sampled=m, **opts)
                t.W, t.scale = W, np.ones(K)
                lr = 0.05 / n if opts.get("reduction") == "sum" else 0.05
                key = f"{prefix}{name}" + ("" if tag == "own" else f"_{tag}")
                variants[key] = runner(t, lr=lr)
                proto.setdefault(tag, t)
    for pat, loops in PATTERN_LOOPS.items():
        for lname, loop in loops.items():
            tr = proto["own" if pat in ("own", "umax") else "shared"]
            variants[f"bound_{pat}_{lname}"] = pattern_runner(
                tr, W, loop, shared=pat == "shared", umax=pat == "umax")
        if pat != "umax":
            tr = proto[pat]
            variants[f"bound_{pat}_kernel_order"] = kernel_order_runner(
                tr, W, tr.opts["prefetch"], pat == "shared")
    out = {"rates": time_variants(variants, X.shape[0], repeats, 11)}
    if baseline:
        out["baseline_rev"] = baseline[1]
    out["summary"] = headline_summary(out["rates"])
    return out


def headline_summary(rates):
    """Per-datapoint times, ratios to U-max and to the fastest bound loop of each
    kernel's access pattern (best and median epochs)."""
    summ = {}
    for key in ("best_M_per_s", "median_M_per_s"):
        um = rates["umax"][key]
        bounds = {pat: max(v[key] for k, v in rates.items() if k.startswith(f"bound_{pat}_"))
                  for pat in PATTERN_LOOPS}
        which = {pat: max((k for k in rates if k.startswith(f"bound_{pat}_")),
                          key=lambda k: rates[k][key]) for pat in PATTERN_LOOPS}
        rows = {}
        for k, v in rates.items():
            if k.startswith("bound_"):
                continue
            pat = "umax" if k == "umax" else ("shared" if "_shared" in k else "own")
            rows[k] = {"us_per_datapoint": 1.0 / v[key],
                       "over_umax": um / v[key],
                       "bound": which[pat],
                       "bound_us_per_datapoint": 1.0 / bounds[pat],
                       "over_bound": bounds[pat] / v[key]}
            ko = rates.get(f"bound_{pat}_kernel_order")
            if ko is not None:
                rows[k]["over_kernel_order_bound"] = ko[key] / v[key]
        summ[key.split("_")[0]] = {
            "kernels": rows, "bounds_over_umax": {p: um / b for p, b in bounds.items()},
            "kernel_order_bounds_over_umax": {
                p: um / rates[f"bound_{p}_kernel_order"][key] for p in PATTERN_LOOPS
                if f"bound_{p}_kernel_order" in rates}}
    return summ


# ---------------------------------------------------------------------------
# the converged point (small ridge problem)
# ---------------------------------------------------------------------------

def converged_point(epochs_biased=1500, epochs_sgd=300):
    rng = np.random.default_rng(0)
    N, D, K, mu = 200, 10, 5, 1.0
    X = sp.csr_matrix(rng.normal(size=(N, D)))
    S = X @ rng.normal(size=(K, D)).T
    P = np.exp(S - logsumexp(S, axis=1, keepdims=True))
    y = np.array([rng.choice(K, p=p) for p in P])
    W_star, info = full.exact_solution(X, y, K, mu=mu)
    F_star = full.full_objective(X, y, W_star, mu)[0]
    ll_star = ob.log_loss(X, y, W_star)
    out = {"problem": {"N": N, "D": D, "K": K, "mu": mu, "batch_size": 20, "n_sampled": 2,
                       "lr": "1/(1 + epoch/10)"},
           "exact": {"converged": info["converged"], "grad_inf": info["grad_inf"],
                     "objective": F_star, "log_loss": ll_star}}
    cases = [("softmax-sgd", full.SoftmaxSGDTrainer, {}, epochs_sgd),
             ("ove", sampled.OVETrainer, {}, epochs_biased),
             ("nce", sampled.NCETrainer, {}, epochs_biased),
             ("is", sampled.ISTrainer, {}, epochs_biased),
             ("is (unweighted)", sampled.ISTrainer, {"weighted": False}, epochs_biased),
             ("ove (shared)", sampled.OVETrainer, {"shared_negatives": True}, epochs_biased),
             ("nce (shared)", sampled.NCETrainer, {"shared_negatives": True}, epochs_biased),
             ("is (shared)", sampled.ISTrainer, {"shared_negatives": True}, epochs_biased)]
    for name, cls, opts, epochs in cases:
        kw = {} if cls is full.SoftmaxSGDTrainer else {"n_sampled": 2}
        tr = cls(X, y, K, mu=mu, batch_size=20, **kw, **opts)
        tr.init_params()
        r = np.random.default_rng(1)
        for e in range(epochs):
            tr.run_epoch(r.permutation(N), 1.0 / (1 + e / 10), 1000 + e)
        W = tr.weights()
        out[name] = {"epochs": epochs,
                     "rel_dist": float(np.linalg.norm(W - W_star) / np.linalg.norm(W_star)),
                     "objective_gap": float(full.full_objective(X, y, W, mu)[0] - F_star),
                     "log_loss_gap": float(ob.log_loss(X, y, W) - ll_star),
                     "error": float(ob.error_rate(X, y, W))}
    out["exact"]["error"] = float(ob.error_rate(X, y, W_star))
    return out


# ---------------------------------------------------------------------------
# the benchmark
# ---------------------------------------------------------------------------

def run(quick=False, repeats=3, baseline=None):
    res = {"machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                       "cpu_count": os.cpu_count(), "numba": numba.__version__,
                       "numpy": np.__version__, "numba_threads": numba.get_num_threads(),
                       "threading_layer": None},
           "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_start": loadavg(),
           "quick": quick, "repeats": repeats}
    N, D, nnz, K, n, m = (20_000, 10_000, 50, 18_000, 100, 5) if quick else \
        (100_000, 10_000, 50, 18_000, 100, 5)
    print(f"sparse shape N={N} D={D} nnz={nnz} K={K} n={n} m={m}", flush=True)
    X, y = sparse_data(N, D, nnz, K)
    res["sparse_shape"] = {"N": N, "D": D, "K": K, "nnz_per_row": X.nnz / N, "n": n, "m": m,
                           "W_GB": K * D * 8 / 1e9}

    # one W shared by every trainer (its values do not matter for the timing): U-max's
    um = sgd.UmaxTrainer(X, y, K)
    um.init_params("zero")
    um.warmup()
    W = um.W
    res["bound"] = memory_bound(W, lines_per_datapoint=(m + 1) * nnz)
    print("random RMW", {k: round(v, 3) for k, v in res["bound"].items()}, flush=True)
    res["headline"] = headline(X, y, K, n, m, W, um, max(repeats, 5), baseline)
    W.fill(0.0)
    del um
    print(json.dumps({k: round(v["best_M_per_s"], 3)
                      for k, v in res["headline"]["rates"].items()}), flush=True)

    def trainer(cls, Xs=X, ys=y, Ws=W, **kw):
        t = cls(Xs, ys, K, batch_size=n, n_sampled=m, **kw)
        t.W, t.scale = Ws, np.ones(K)
        return t

    nthr = numba.get_num_threads()      # the "parallel" variants' threads
    res["sparse"] = {}
    for name, cls in (("ove", sampled.OVETrainer), ("nce", sampled.NCETrainer),
                      ("is", sampled.ISTrainer)):
        variants = {}
        for shared in (False, True):
            tag = f"{name}{'_shared' if shared else ''}"
            for kind, kw, frac in (("plain", dict(fused=False, threads=1), 1.0),
                                   ("fused", dict(fused=True, prefetch=0, threads=1), 1.0),
                                   ("fused_prefetch", dict(fused=True, prefetch=1, threads=1),
                                    1.0),
                                   ("fused_prefetch_parallel",
                                    dict(fused=True, prefetch=1, threads=nthr), 0.2)):
                tr = trainer(cls, shared_negatives=shared, **kw)
                variants[f"{tag}_{kind}"] = runner(tr, frac=frac)
        res["sparse"].update(time_variants(variants, N, repeats))
        print(json.dumps({k: round(v["best_M_per_s"], 3) for k, v in res["sparse"].items()
                          if k.startswith(name)}), flush=True)
    res["threading_layer"] = numba.threading_layer()

    # --- lazy ridge ------------------------------------------------------------------
    t0, t1 = trainer(sampled.OVETrainer), trainer(sampled.OVETrainer)
    t1.mu = 1e-3
    res["ridge"] = time_variants({"ove_mu0": runner(t0), "ove_mu1e-3_lazy_ridge": runner(t1)},
                                 N, repeats, 1)
    W.fill(0.0)
    b0, b1 = res["ridge"]["ove_mu0"], res["ridge"]["ove_mu1e-3_lazy_ridge"]
    res["ridge_overhead_best"] = b0["best_M_per_s"] / b1["best_M_per_s"] - 1
    res["ridge_overhead_median"] = b0["median_M_per_s"] / b1["median_M_per_s"] - 1

    # --- Zipf columns and labels -------------------------------------------------------
    Xz, yz = sparse_data(N, D, nnz, K, seed=1, zipf=True)
    variants = {}
    for shared in (False, True):
        tag = f"ove{'_shared' if shared else ''}"
        for kind, kw in (("plain", dict(fused=False)), ("fused_prefetch",
                                                        dict(fused=True, prefetch=1))):
            tr = trainer(sampled.OVETrainer, Xz, yz, shared_negatives=shared, **kw)
            variants[f"{tag}_{kind}"] = runner(tr)
    res["sparse_zipf"] = time_variants(variants, N, repeats, 2)
    del Xz, yz, variants, tr

    # --- exact softmax SGD, O(K) ---------------------------------------------------------
    res["softmax_sgd"] = {}
    for Ks, nb in ((18_000, 10 if quick else 20), (1_000, 100 if quick else 200)):
        sub = nb * n
        ys = y % Ks
        # the class-major kernel's variants (transposed or not) on the shared W;
        # benchmarks/bench_softmax_sgd.py times the default feature-major one
        tss = {}
        for tag, layout, threads in (("plain", "class-rowwise", 1),
                                     ("transposed", "class", 1),
                                     ("transposed_parallel", "class", nthr)):
            ts = full.SoftmaxSGDTrainer(X, ys, Ks, batch_size=n, layout=layout,
                                        threads=threads)
            ts.W, ts.cs = W[:Ks], np.ones(1)
            tss[f"softmax_sgd_K{Ks}_{tag}"] = runner(ts)
        r = time_variants(tss, sub, max(2, repeats - 1), 3)
        for v in r.values():
            v["minibatches"] = nb
        res["softmax_sgd"].update(r)
        print(json.dumps({k: round(v["best_M_per_s"] * 1e6) for k, v in r.items()}), flush=True)
    del W, trainer, t0, t1, ts, tss  # every holder of the shared W, before the converged point

    # --- the converged point ---------------------------------------------------------------
    res["converged"] = converged_point(epochs_biased=500 if quick else 1500)
    res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    res["load_end"] = loadavg()
    res["peak_rss_GB"] = rss_gb()
    return res


def _table(rows, unit="M/s", cpu=True):
    head = f"| variant | best {unit} | median {unit} |" + (f" CPU-time {unit} |" if cpu else "")
    lines = [head, "|---|---|---|" + ("---|" if cpu else "")]
    for k, v in rows.items():
        line = f"| {k} | {v['best_M_per_s']:.3f} | {v['median_M_per_s']:.3f} |"
        if cpu:
            line += f" {v['cpu_best_M_per_s']:.3f} |" if "parallel" not in k else " (threads) |"
        lines.append(line)
    return lines


def headline_markdown(h, sh):
    """The headline table: per-datapoint times, ratios to U-max and to the bounds."""
    r = h["rates"]
    sb, sm = h["summary"]["best"], h["summary"]["median"]
    L = ["Every variant below ran in one call, interleaved epoch by epoch on the same W: "
         "U-max (one class per step, its default pipelined kernel), the sampled kernels "
         "with default options (`own`: each datapoint its own m negatives; `shared`: m "
         "shared by the minibatch) and with the authors' TensorFlow settings (`shared_tf`: "
         "shared, accidental hits kept, summed loss, IS unweighted), and the bound loops "
         "of the three access patterns (U-max's: label row and one random row per step; "
         "`own`: label row and m random rows; `shared`: label row and the batch's m "
         "shared rows): the kernels' own draws, every entry a kernel writes "
         "read-modified-written (`W[j, c] += tiny`) and no other work. `_pattern` makes "
         "them in one pass per datapoint, in several orders (`rmw`: plain; `hintD`: the "
         "lines of the datapoint D ahead hinted; `x`: also the CSR lines of the datapoint "
         "2D ahead; `touch`: the batch's shared rows first read in address order; "
         "`read_rmw`: a datapoint's entries all read, then written). "
         "`_pattern_kernel_order` makes them in the kernels' own order with the kernels' "
         "own loops: the shared rows scored for the whole batch before any of them is "
         "written (true minibatch SGD takes every gradient at the old W), then per "
         "datapoint its own rows read and every entry it touches written; it does the "
         "dot products' multiply-adds and nothing else. The bound of a pattern is its "
         "fastest loop; `/ kernel-order` compares with the kernel-order loop. Times are "
         "per datapoint (per step for U-max).",
         "",
         "| variant | best M/s | median M/s | us / datapoint (best) | / U-max (best) | "
         "/ U-max (median) | fastest bound loop | / bound (best) | / bound (median) | "
         "/ kernel-order (best) | / kernel-order (median) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for k, v in sb["kernels"].items():
        w = sm["kernels"][k]
        ko = (f"{v['over_kernel_order_bound']:.2f} | {w['over_kernel_order_bound']:.2f}"
              if "over_kernel_order_bound" in v else "- | -")
        L.append(f"| {k} | {r[k]['best_M_per_s']:.3f} | {r[k]['median_M_per_s']:.3f} | "
                 f"{v['us_per_datapoint']:.3f} | {v['over_umax']:.2f} | {w['over_umax']:.2f} "
                 f"| {v['bound']} | {v['over_bound']:.2f} | {w['over_bound']:.2f} | {ko} |")
    L += ["", "| bound loop | best M/s | median M/s | us / datapoint (best) | / U-max (best) "
          "| / U-max (median) |", "|---|---|---|---|---|---|"]
    for k, v in r.items():
        if k.startswith("bound_"):
            L.append(f"| {k} | {v['best_M_per_s']:.3f} | {v['median_M_per_s']:.3f} | "
                     f"{1 / v['best_M_per_s']:.3f} | "
                     f"{r['umax']['best_M_per_s'] / v['best_M_per_s']:.2f} | "
                     f"{r['umax']['median_M_per_s'] / v['median_M_per_s']:.2f} |")
    L += ["", "Fastest bound loop per pattern, per datapoint, over U-max's time per step: "
          + "; ".join(f"{p} {sb['bounds_over_umax'][p]:.2f} (best), "
                      f"{sm['bounds_over_umax'][p]:.2f} (median)" for p in sb['bounds_over_umax'])
          + ". Kernel-order loops over U-max: "
          + "; ".join(f"{p} {sb['kernel_order_bounds_over_umax'][p]:.2f} (best), "
                      f"{sm['kernel_order_bounds_over_umax'][p]:.2f} (median)"
                      for p in sb.get('kernel_order_bounds_over_umax', {})) + "."]
    if "baseline_rev" in h:
        L += ["", f"`before_*`: the kernels of revision {h['baseline_rev'][:10]} (the module "
              "loaded from git), timed in the same run."]
    return L


def to_markdown(res):
    sh = res["sparse_shape"]
    b = res["bound"]
    L = ["# Biased baselines (OVE, NCE, IS) and exact softmax SGD: speed", "",
         f"Run {res['started']} .. {res['finished']}; load average at start "
         f"{res['load_start']}, at end {res['load_end']} ({res['machine']['cpu_count']} shared "
         f"cores, numba {res['machine']['numba_threads']} threads, layer "
         f"{res['threading_layer']}). "
         f"{len(res['headline']['rates']['umax']['epoch_s'])} timed epochs per variant in the "
         f"headline comparison, {res['repeats']} elsewhere, interleaved; "
         "rates in M datapoints/s (datapoint-updates/s): best, median (wall clock) and best "
         "by process time (serial variants only). Peak RSS "
         f"{res['peak_rss_GB']:.1f} GB.", "",
         f"Shape: N={sh['N']:,}, D={sh['D']:,}, {sh['nnz_per_row']:.1f} nnz/row (L2 rows), "
         f"K={sh['K']:,} (W = {sh['W_GB']:.2f} GB, written at initialisation), minibatch "
         f"n={sh['n']}, m={sh['m']} classes per datapoint.", "",
         "## Against U-max and the bounds (one interleaved run)", ""]
    L += headline_markdown(res["headline"], sh)
    L += ["", f"Context: single elements read-modified-written at independent uniformly random "
          f"places of W (random row and column each, no locality): "
          f"{b['random_lines_per_s'] / 1e6:.0f} M/s ({b['ns_per_line']:.1f} ns each); the "
          "pattern loops above are faster because a datapoint's entries of one row share "
          "its pages.", "",
         "## Every kernel variant: uniform columns and labels", ""]
    L += _table(res["sparse"])
    L += ["", "`plain` = straightforward (score the minibatch, then apply every update); "
          "`fused` = a row no other datapoint of the minibatch touches is updated while in "
          "cache; `fused_prefetch` = the default (fused, and the next datapoint's lines "
          "hinted to the memory system); `parallel` = the default on numba's threads, timed "
          "on the first 20% of each epoch (it synchronises its threads twice per minibatch, "
          "which costs whole scheduler slices when other processes hold the cores). All "
          "variants give bit-identical results.", ""]
    L += [f"Lazy ridge (mu = 1e-3, one scale factor per class row) against mu = 0 (ove): "
          f"overhead {100 * res['ridge_overhead_best']:+.1f}% (best), "
          f"{100 * res['ridge_overhead_median']:+.1f}% (median).", ""]
    L += _table(res["ridge"])
    L += ["", "## Zipf columns and labels (text-like)", ""]
    L += _table(res["sparse_zipf"])
    L += ["", "## Exact softmax SGD (O(K) per datapoint), n = 100", "",
          "`plain` = straightforward (a sparse dot product and update per class and "
          "datapoint: random gathers in each class row); `transposed` = the default (the "
          "minibatch regrouped by feature, each class row swept once in feature order for "
          "the scores and once for the update); `parallel` = by slices of the classes on "
          "numba's threads.", ""]
    L += ["| variant | minibatches timed | best datapoints/s | median datapoints/s |",
          "|---|---|---|---|"]
    for k, v in res["softmax_sgd"].items():
        L.append(f"| {k} | {v['minibatches']} | {v['best_M_per_s'] * 1e6:,.0f} | "
                 f"{v['median_M_per_s'] * 1e6:,.0f} |")
    c = res["converged"]
    p = c["problem"]
    L += ["", "## Converged point on a small ridge problem", "",
          f"N={p['N']}, D={p['D']}, K={p['K']}, mu={p['mu']}, minibatch {p['batch_size']}, "
          f"m={p['n_sampled']} (biased methods), learning rate {p['lr']}. Exact optimum W* "
          f"by L-BFGS (largest gradient component {c['exact']['grad_inf']:.1e}): objective "
          f"{c['exact']['objective']:.6f}, log-loss {c['exact']['log_loss']:.6f}, error "
          f"{c['exact']['error']:.3f}.", "",
          "| method | epochs | \\|\\|W - W*\\|\\| / \\|\\|W*\\|\\| | objective gap | "
          "log-loss gap | error |", "|---|---|---|---|---|---|"]
    for k, v in c.items():
        if k in ("problem", "exact"):
            continue
        L.append(f"| {k} | {v['epochs']} | {v['rel_dist']:.4f} | {v['objective_gap']:.2e} | "
                 f"{v['log_loss_gap']:+.2e} | {v['error']:.3f} |")
    L += ["", "Objective = mean NLL + (mu/2N)||W||^2 (the minimised ridge objective); the "
          "biased methods stop at their own fixed points (tests/test_sampled.py checks that "
          "each approaches the minimiser of its expected sampled loss), softmax SGD at W*."]
    return "\n".join(L) + "\n"


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N = 20,000 and fewer epochs")
    ap.add_argument("--repeats", type=int, default=3, help="timed epochs per variant")
    ap.add_argument("--baseline", metavar="REV", default=None,
                    help="also time methods/sampled.py of this git revision (the 'before')")
    ap.add_argument("--markdown-only", action="store_true",
                    help="rewrite the .md from the existing .json (no timing)")
    a = ap.parse_args(argv)
    stem = "sampled-quick" if a.quick else "sampled"
    if a.markdown_only:
        res = json.loads((RESULTS / f"{stem}.json").read_text())
        res["headline"]["summary"] = headline_summary(res["headline"]["rates"])
        _write(RESULTS / f"{stem}.json", json.dumps(res, indent=1) + "\n")
        _write(RESULTS / f"{stem}.md", to_markdown(res))
        return
    baseline = load_baseline(a.baseline) if a.baseline else None
    res = run(quick=a.quick, repeats=a.repeats, baseline=baseline)
    if baseline:
        res["baseline_rev"] = baseline[1]
    _write(RESULTS / f"{stem}.json", json.dumps(res, indent=1) + "\n")
    _write(RESULTS / f"{stem}.md", to_markdown(res))
    print(to_markdown(res))


if __name__ == "__main__":
    main()
