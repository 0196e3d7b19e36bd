"""Benchmark of the exact evaluator (issue 2, section 4).

Shape of the issue: N = 100,000 rows, D = 10,000 features, about 50 non-zeros per
row (uniform random column indices, positive values, unit L2 rows), K = 18,000
classes, ``W`` drawn from N(0, 0.01^2) in float64, uniform random labels. Times one
full :func:`scalable_softmax.evaluate.evaluate` (log-loss, error and the defective
metric) with ``precision="float64"`` (the reference) and with ``precision="float32"`` (the default)
(float32 scores and exponentials, float64 running sums) and, side by side in the
same run, PyTorch CPU in float32 doing
the same log-loss and error the straightforward way: ``torch.sparse`` CSR rows times
a dense ``W^T`` (float32, ``D x K``), in blocks of rows whose ``block x K`` score
matrix takes at most 256 MB, then ``torch.logsumexp``; 2 threads. The torch side
runs in a child process (so that its OpenMP runtime and numba's never spin against
each other) that builds the same data from the same seed; its time includes
converting ``W`` to a float32 ``W^T`` and ``X`` to torch tensors (reported apart).
Every variant is timed ``--repeats`` times (default 2), alternating the order.

Also K = 2,000, and the error of the ``subsample=10,000`` estimate against the full
evaluation (several seeds; with the standard error predicted from the per-row
spread), including a ``W`` of larger scale whose per-row losses vary.

In the same run: the accuracy of float32 against float64 (whole data set, and per
row on 10,000 rows); two bounds for the float32 kernel, (a) its ``nnz(X) K``
multiply-adds at the machine's measured float32 FMA rate (:func:`fma_peak`) and (b)
a loop with its memory accesses and trivial arithmetic (:func:`stream_bound`); and
the vector instructions of the float32 kernels' assembly (:func:`simd_evidence`).

Writes ``benchmarks/results/evaluate.json`` and ``evaluate.md`` (``--quick``:
N = 10,000, ``evaluate-quick.*``), carrying over a summary of the earlier runs found
in the previous results file (the machine is shared: one run is not the whole story). If torch is
not installed the comparison is skipped with a message (``pip install torch==2.13.0``).

Usage: ``python benchmarks/bench_evaluate.py [--quick] [--repeats 2]``.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import scipy.sparse as sp
from numba import prange

import _common
from scalable_softmax.evaluate import evaluate, per_row, tile_width
from scalable_softmax.kernels.evaluate import transpose32

RESULTS = Path(__file__).resolve().parent / "results"
TORCH_SCORE_BYTES = 256 * 2**20  # float32 scores per torch block
TORCH_THREADS = 2
TORCH_MISSING = ("torch is not installed: the PyTorch comparison is skipped "
                 "(install it with `.venv/bin/pip install torch==2.13.0`)")


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------

def make_data(N, D, nnz, K, w_std=0.01, seed=0):
    """Seeded CSR rows (~``nnz`` uniform random columns, duplicates merged, positive
    values, unit L2 norm), uniform labels, and ``W ~ N(0, w_std^2)`` (K x D)."""
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.integers(0, D, size=(N, nnz)), axis=1)
    vals = rng.random((N, nnz)) + 0.05
    X = sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(0, N * nnz + 1, nnz)),
                      shape=(N, D))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags(1.0 / norms) @ X)
    y = rng.integers(0, K, size=N).astype(np.int64)
    W = rng.standard_normal((K, D))
    W *= w_std
    return X, y, W


# ---------------------------------------------------------------------------
# the torch side (child process)
# ---------------------------------------------------------------------------

_TORCH = {}


def _torch_init(N, D, nnz, K, w_std, seed):
    import torch
    torch.set_num_threads(TORCH_THREADS)
    X, y, W = make_data(N, D, nnz, K, w_std, seed)
    _TORCH.update(X=X, y=y, W=W)


def _torch_run(n_rows=None):
    """One torch float32 evaluation of the data built by :func:`_torch_init`
    (of its first ``n_rows`` rows if given: the warm-up)."""
    import torch
    X, y, W = _TORCH["X"], _TORCH["y"], _TORCH["W"]
    if n_rows is not None:
        X, y = X[:n_rows], y[:n_rows]
    N, K = X.shape[0], W.shape[0]
    t0, c0 = time.perf_counter(), time.process_time()
    WT = torch.from_numpy(W.T).to(torch.float32).contiguous()  # D x K float32
    crow = torch.from_numpy(X.indptr.astype(np.int64))
    col = torch.from_numpy(X.indices.astype(np.int64))
    val = torch.from_numpy(X.data.astype(np.float32))
    yt = torch.from_numpy(y)
    t_conv = time.perf_counter() - t0
    block = max(1, TORCH_SCORE_BYTES // (4 * K))
    nll_sum = 0.0
    n_err = 0
    with torch.no_grad():
        for s in range(0, N, block):
            e = min(N, s + block)
            a, b = int(X.indptr[s]), int(X.indptr[e])
            Xb = torch.sparse_csr_tensor(crow[s:e + 1] - a, col[a:b], val[a:b],
                                         size=(e - s, X.shape[1]))
            S = Xb @ WT
            yb = yt[s:e]
            nll = torch.logsumexp(S, dim=1) - S.gather(1, yb[:, None]).squeeze(1)
            nll_sum += float(nll.double().sum())
            n_err += int((S.argmax(dim=1) != yb).sum())
    return dict(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                convert_seconds=t_conv, block_rows=block, log_loss=nll_sum / N,
                error=n_err / N, threads=torch.get_num_threads())


def torch_version():
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------

def _numba_run(X, y, W, precision="float64"):
    t0, c0 = time.perf_counter(), time.process_time()
    ev = evaluate(X, y, W, precision=precision)
    return dict(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0,
                log_loss=ev.log_loss, error=ev.error, defective=ev.defective,
                threads=numba.get_num_threads())


# ---------------------------------------------------------------------------
# bounds: the machine's FMA rate, and the kernel's memory accesses alone
# ---------------------------------------------------------------------------

_FMA_LANES = 256  # float32 lanes per pass: 16 zmm (or 32 ymm) registers' worth, in L1
_FMA_CHAIN = 8    # dependent multiply-adds per lane and pass


@numba.njit(fastmath={"contract"}, nogil=True, cache=True)
def _fma_loop(acc, reps, a, b):
    """``reps`` passes over the L1-resident float32 ``acc`` (``_FMA_LANES``
    lanes), each lane ``_FMA_CHAIN`` dependent fused multiply-adds per pass:
    independent FMAs on vector registers, one load and one store per 8 FMAs."""
    for _ in range(reps):
        for t in range(_FMA_LANES):
            v = acc[t]
            v = v * a + b
            v = v * a + b
            v = v * a + b
            v = v * a + b
            v = v * a + b
            v = v * a + b
            v = v * a + b
            v = v * a + b
            acc[t] = v


@numba.njit(fastmath={"contract"}, parallel=True, nogil=True, cache=True)
def _fma_threads(accs, reps, a, b):
    for w in prange(accs.shape[0]):
        _fma_loop(accs[w], reps, a, b)


def fma_peak(threads=None, seconds=1.0):
    """Measured float32 multiply-add rate (multiply-adds per second) of the machine
    on ``threads`` numba threads (default: all), best of 5 timed calls."""
    nt = threads or numba.get_num_threads()
    accs = np.ones((nt, _FMA_LANES), dtype=np.float32)
    a, b = np.float32(0.999), np.float32(1e-3)
    _fma_threads(accs, 10, a, b)
    reps = 1000
    while True:  # calibrate to about seconds / 5 per call
        t0 = time.perf_counter()
        _fma_threads(accs, reps, a, b)
        dt = time.perf_counter() - t0
        if dt > seconds / 5 or reps > 1e9:
            break
        reps *= 4
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        _fma_threads(accs, reps, a, b)
        best = min(best, time.perf_counter() - t0)
    assert np.isfinite(accs).all()
    fmas = nt * reps * _FMA_LANES * _FMA_CHAIN
    return dict(threads=nt, fma_per_second=fmas / best, seconds=best, fmas=fmas)


@numba.njit(fastmath={"contract"}, parallel=True, nogil=True, cache=True)
def _stream_tiles(indptr, indices, rows, W, tile, block_rows, with_rows):
    """The float32 kernel's memory accesses with trivial arithmetic: every tile of
    ``W^T`` is transposed into the float32 buffer as the kernel does, then for each
    selected row and each of its non-zeros the row of the tile is read and added
    (eight non-zeros per pass over the tile's classes, as the kernel): no
    multiplications, exponentials or running state."""
    nr = rows.size
    K, D = W.shape
    tw = min(tile, K)
    buf = np.empty(D * tw, dtype=np.float32)
    out = np.zeros(nr, dtype=np.float32)
    nb = (nr + block_rows - 1) // block_rows
    for k0 in range(0, K, tile):
        kc = min(tile, K - k0)
        T = buf[: D * kc].reshape((D, kc))
        transpose32(W, k0, kc, T, False, np.empty(0, np.int64))
        if not with_rows:
            out[0] += T[0, 0]
            continue
        for b in prange(nb):
            acc = np.empty(kc, dtype=np.float32)
            for ii in range(b * block_rows, min(nr, (b + 1) * block_rows)):
                i = rows[ii]
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
                    for t in range(kc):
                        acc[t] += (((T[j0, t] + T[j1, t]) + (T[j2, t] + T[j3, t]))
                                   + ((T[j4, t] + T[j5, t]) + (T[j6, t] + T[j7, t])))
                    p += 8
                while p < p1:
                    j = indices[p]
                    for t in range(kc):
                        acc[t] += T[j, t]
                    p += 1
                out[ii] += acc[kc - 1]
    return out


def stream_bound(X, W, repeats=2):
    """Seconds of :func:`_stream_tiles` over all rows (min of ``repeats``), and of the
    transposes alone."""
    N, D = X.shape
    rows = np.arange(N, dtype=np.int64)
    tw = tile_width(W.shape[0], D, None, 4)
    _stream_tiles(X.indptr, X.indices, rows[:64], W, tw, 32, True)
    best, best_t = math.inf, math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        _stream_tiles(X.indptr, X.indices, rows, W, tw, 32, True)
        best = min(best, time.perf_counter() - t0)
        t0 = time.perf_counter()
        _stream_tiles(X.indptr, X.indices, rows, W, tw, 32, False)
        best_t = min(best_t, time.perf_counter() - t0)
    return dict(seconds=best, transpose_seconds=best_t, tile=tw,
                bytes_read_from_tiles=int(X.nnz) * W.shape[0] * 4)


def simd_evidence():
    """Counts of the vector instructions (fused multiply-adds, multiplies, adds,
    maxima, conversions) in the assembly of the float32 kernels and of the FMA-peak
    loop, from fresh uncached compilations (numba shows no assembly for cached code)."""
    import re

    from numba import types as nt

    from scalable_softmax.kernels import evaluate as evm
    f32a, i32a = nt.float32[::1], nt.int32[::1]
    cases = [(evm.scores32, evm.JIT32, (i32a, i32a, f32a, nt.int64, nt.float32[:, ::1], f32a,
                                        nt.int64)),
             (evm.vexp32_sum, evm.JIT32, (f32a, nt.float32, f32a, f32a, i32a, nt.int64)),
             (evm.max32, evm.JIT32, (i32a, nt.int64, i32a, f32a)),
             (evm.sum32to64, evm.JIT32R, (f32a, nt.int64)),
             (_fma_loop, dict(fastmath={"contract"}), (f32a, nt.int64, nt.float32, nt.float32))]
    out = {}
    for f, flags, sig in cases:
        try:
            g = numba.njit(**dict(flags, cache=False))(f.py_func)
            g.compile(sig)
            asm = g.inspect_asm(g.signatures[0])
        except Exception as exc:  # noqa: BLE001 - report, do not fail the benchmark
            out[f.__name__] = {"error": repr(exc)[:200]}
            continue
        cnt = {}
        for m in re.finditer(r"\b(v(?:fmadd|mul|add|max|pmax|cvt)\w*)\s[^\n]*?\b([xyz]mm)\d",
                             asm):
            key = f"{m.group(1)} {m.group(2)}"
            cnt[key] = cnt.get(key, 0) + 1
        out[f.__name__] = dict(sorted(cnt.items(), key=lambda kv: -kv[1])[:8])
    return out


def accuracy_study(X, y, W, n_rows=10_000):
    """Per-row float32 vs float64 on the first ``n_rows`` rows."""
    rows = np.arange(min(n_rows, X.shape[0]))
    n32, e32, d32, _ = per_row(X, y, W, rows=rows, precision="float32")
    n64, e64, d64, _ = per_row(X, y, W, rows=rows, precision="float64")
    return dict(n_rows=int(rows.size),
                max_rel_diff_log_loss_per_row=float(np.max(np.abs(n32 - n64) / n64)),
                rel_diff_mean_log_loss=float(abs(n32.mean() - n64.mean()) / n64.mean()),
                max_rel_diff_defective_per_row=float(np.max(np.abs(d32 - d64) / d64)),
                error_rows_differing=int(np.sum(e32 != e64)))


def _summary(runs):
    secs = [r["seconds"] for r in runs]
    return dict(min_seconds=min(secs), all_seconds=secs,
                min_cpu_seconds=min(r["cpu_seconds"] for r in runs), runs=runs)


def bench_config(N, D, nnz, K, repeats, seed, with_torch):
    print(f"\n== K = {K:,}: building data (N={N:,}, D={D:,}, ~{nnz} nnz/row)", flush=True)
    X, y, W = make_data(N, D, nnz, K, 0.01, seed)
    out = dict(K=K, N=N, D=D, nnz_per_row=X.nnz / N, w_std=0.01)
    evaluate(X[:64], y[:64], W, precision="float64")  # compile (or load the cache)
    evaluate(X[:64], y[:64], W, precision="float32")
    pool = None
    if with_torch:
        ctx = mp.get_context("spawn")
        pool = ctx.Pool(1, initializer=_torch_init, initargs=(N, D, nnz, K, 0.01, seed))
        pool.apply(_torch_run, (2000,))  # warm-up (the first sparse product sets torch up)
    res = {"numba": [], "numba32": [], "torch": []}
    try:
        for rep in range(repeats):
            order = ("numba", "numba32", "torch") if rep % 2 == 0 else ("torch", "numba32", "numba")
            for name in order:
                if name == "torch" and pool is None:
                    continue
                load = os.getloadavg()[0]
                if name == "torch":
                    r = pool.apply(_torch_run)
                else:
                    r = _numba_run(X, y, W, "float64" if name == "numba" else "float32")
                r["load_average_1min_before"] = load
                res[name].append(r)
                print(f"  {name:7s} run {rep}: {r['seconds']:.2f} s wall, "
                      f"{r['cpu_seconds']:.2f} s CPU, log-loss {r['log_loss']:.9f}, "
                      f"error {r['error']:.5f} (load {load:.1f})", flush=True)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    out["numba"] = _summary(res["numba"])
    out["numba32"] = _summary(res["numba32"])
    n64, n32 = res["numba"], res["numba32"]
    out["ratio_float64_over_float32_min"] = (out["numba"]["min_seconds"]
                                             / out["numba32"]["min_seconds"])
    out["float32_minus_float64"] = dict(
        log_loss=n32[0]["log_loss"] - n64[0]["log_loss"],
        rel_log_loss=(n32[0]["log_loss"] - n64[0]["log_loss"]) / n64[0]["log_loss"],
        error=n32[0]["error"] - n64[0]["error"],
        defective=n32[0]["defective"] - n64[0]["defective"])
    print("  accuracy (per row, first 10,000 rows) ...", flush=True)
    out["accuracy"] = accuracy_study(X, y, W)
    print(f"  {out['accuracy']}", flush=True)
    print("  bounds ...", flush=True)
    sb = stream_bound(X, W)
    out["stream_bound"] = sb
    out["multiply_adds"] = int(X.nnz) * K
    print(f"  stream bound {sb['seconds']:.2f} s (transposes {sb['transpose_seconds']:.2f} s)",
          flush=True)
    if pool is None:
        out["torch"] = dict(skipped=TORCH_MISSING)
    else:
        out["torch"] = _summary(res["torch"])
        out["torch"]["min_convert_seconds"] = min(r["convert_seconds"] for r in res["torch"])
        nb, tb = res["numba"], res["torch"]
        out["ratio_numba_over_torch_min"] = (out["numba"]["min_seconds"]
                                             / out["torch"]["min_seconds"])
        out["ratio_numba_over_torch_pairs"] = [a["seconds"] / b["seconds"] for a, b in zip(nb, tb)]
        out["torch_minus_numba_log_loss"] = tb[0]["log_loss"] - nb[0]["log_loss"]
        out["torch_minus_numba_error"] = tb[0]["error"] - nb[0]["error"]
        out["ratio_torch_over_numba32_min"] = (out["torch"]["min_seconds"]
                                               / out["numba32"]["min_seconds"])
        out["ratio_torch_over_numba32_pairs"] = [b["seconds"] / a["seconds"]
                                                 for a, b in zip(res["numba32"], tb)]
        out["torch_minus_numba32_log_loss"] = tb[0]["log_loss"] - n32[0]["log_loss"]
    # the subsample study uses the float32 path (the fast one, meant for the notebooks)
    out["subsample"] = [subsample_study(X, y, W, nb_full=res["numba32"][0], w_std=0.01,
                                        seed=seed)]
    return out, (X, y)


def subsample_study(X, y, W, nb_full=None, w_std=0.01, n_sub=10_000, seeds=(0, 1, 2, 3, 4),
                    seed=0):
    """Error of ``evaluate(subsample=n_sub, seed=s)`` against the full evaluation."""
    N = X.shape[0]
    n_sub = min(n_sub, N // 2)
    if nb_full is None:
        nb_full = _numba_run(X, y, W, "float32")
    rows = []
    for s in seeds:
        t0 = time.perf_counter()
        ev = evaluate(X, y, W, subsample=n_sub, seed=s, precision="float32")
        rows.append(dict(seed=s, seconds=time.perf_counter() - t0, log_loss=ev.log_loss,
                         error=ev.error, defective=ev.defective,
                         abs_diff_log_loss=abs(ev.log_loss - nb_full["log_loss"]),
                         abs_diff_error=abs(ev.error - nb_full["error"]),
                         abs_diff_defective=abs(ev.defective - nb_full["defective"])))
    # predicted standard error of a mean of n_sub rows out of N (no replacement): the
    # per-row spread of the loss (seed 0's rows), the binomial one for the error
    nll, _, _, _ = per_row(X, y, W, subsample=n_sub, seed=seeds[0], precision="float32")
    fpc = math.sqrt((N - n_sub) / (N - 1))
    p_err = nb_full["error"]
    return dict(K=W.shape[0], w_std=w_std, N=N, n_sub=n_sub,
                full=dict(log_loss=nb_full["log_loss"], error=nb_full["error"],
                          defective=nb_full["defective"], seconds=nb_full["seconds"]),
                predicted_se_log_loss=float(nll.std(ddof=1) / math.sqrt(n_sub) * fpc),
                predicted_se_error=math.sqrt(p_err * (1 - p_err) / n_sub) * fpc,
                runs=rows,
                mean_abs_diff_log_loss=float(np.mean([r["abs_diff_log_loss"] for r in rows])),
                max_abs_diff_log_loss=float(np.max([r["abs_diff_log_loss"] for r in rows])),
                mean_abs_diff_error=float(np.mean([r["abs_diff_error"] for r in rows])),
                max_abs_diff_error=float(np.max([r["abs_diff_error"] for r in rows])),
                min_seconds=min(r["seconds"] for r in rows))


def machine_info():
    info = _common.machine_info()
    info.update(platform=platform.platform(), torch=torch_version(),
                numba_threads=numba.get_num_threads(), numba_threading_layer=None)
    return info


def run(quick=False, repeats=2, seed=0):
    N, D, nnz = (10_000, 10_000, 50) if quick else (100_000, 10_000, 50)
    Ks = (1_800, 200) if quick else (18_000, 2_000)
    with_torch = torch_version() is not None
    if not with_torch:
        print(TORCH_MISSING, flush=True)
    res = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               quick=quick, repeats=repeats, seed=seed, machine=machine_info(),
               load_average_at_start=list(os.getloadavg()), configs=[])
    t_start = time.perf_counter()
    print("FMA peak ...", flush=True)
    res["fma_peak"] = fma_peak()
    res["fma_peak_1thread"] = fma_peak(threads=1)
    print(f"  {res['fma_peak']['fma_per_second'] / 1e9:.1f} G multiply-adds/s on "
          f"{res['fma_peak']['threads']} threads, "
          f"{res['fma_peak_1thread']['fma_per_second'] / 1e9:.1f} G on 1", flush=True)
    for K in Ks:
        out, (X, y) = bench_config(N, D, nnz, K, repeats, seed, with_torch)
        res["configs"].append(out)
        if K == Ks[-1]:
            # a W whose per-row losses vary (scores of order 1): a harder subsample test
            W1 = np.random.default_rng(seed + 1).standard_normal((K, D))
            out["subsample"].append(subsample_study(X, y, W1, w_std=1.0, seed=seed))
        del X, y
    try:
        res["machine"]["numba_threading_layer"] = numba.threading_layer()
    except ValueError:
        pass
    for c in res["configs"]:
        c["fma_bound_seconds"] = c["multiply_adds"] / res["fma_peak"]["fma_per_second"]
    res["simd"] = simd_evidence()
    res["load_average_at_end"] = list(os.getloadavg())
    res["total_seconds"] = time.perf_counter() - t_start
    return res


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------

def _fmt_all(v):
    return ", ".join(f"{x:.2f}" for x in v)


def report(res):
    m = res["machine"]
    c0 = res["configs"][0]
    lines = [f"# evaluate: exact evaluator vs PyTorch ({res['date']})", "",
             f"Machine: {m['cpu_model']}, {m['cpus']} CPUs; Python {m['python']}, numpy "
             f"{m['numpy']}, scipy {m['scipy']}, numba {m['numba']} ({m['numba_threads']} "
             f"threads, layer {m['numba_threading_layer']}), torch {m['torch'] or 'not installed'}"
             f" ({TORCH_THREADS} threads).", "",
             f"Data: N={c0['N']:,}, D={c0['D']:,}, {c0['nnz_per_row']:.2f} non-zeros per row "
             "(uniform random columns, unit L2 rows), W ~ N(0, 0.01^2) float64, uniform "
             "labels. `numba float64` = `evaluate(X, y, W, precision=\"float64\")` (the "
             "reference; log-loss, error and the defective metric); `numba float32` = "
             "`evaluate(X, y, W, precision=\"float32\")` (the default; float32 scores and "
             "exponentials, float64 running sums; the same three metrics); `torch` = float32 "
             "sparse CSR x dense "
             "W^T in row blocks + "
             "`logsumexp` (log-loss and error), including the conversion of W and X to "
             "float32 tensors. Each variant timed "
             f"{res['repeats']} times, alternating the order; min and all runs.", "",
             "Load average (1 min) at start: "
             f"{res['load_average_at_start'][0]:.1f}, at end: {res['load_average_at_end'][0]:.1f}"
             f" on {m['cpus']} CPUs. The machine is shared with other work: absolute times "
             "are noisy, the ratios measured side by side matter most.", "",
             "| K | variant | min wall s | all runs (s) | min CPU s | log-loss | error |",
             "|---|---|---|---|---|---|---|"]
    for c in res["configs"]:
        nb = c["numba"]
        r0 = nb["runs"][0]
        lines.append(f"| {c['K']:,} | numba float64 | {nb['min_seconds']:.2f} | "
                     f"{_fmt_all(nb['all_seconds'])} | {nb['min_cpu_seconds']:.2f} | "
                     f"{r0['log_loss']:.9f} | {r0['error']:.5f} |")
        if "numba32" in c:
            n3 = c["numba32"]
            r3 = n3["runs"][0]
            lines.append(f"| {c['K']:,} | numba float32 | {n3['min_seconds']:.2f} | "
                         f"{_fmt_all(n3['all_seconds'])} | {n3['min_cpu_seconds']:.2f} | "
                         f"{r3['log_loss']:.9f} | {r3['error']:.5f} |")
        tb = c["torch"]
        if "skipped" in tb:
            lines.append(f"| {c['K']:,} | torch | skipped: {tb['skipped']} | | | | |")
        else:
            t0 = tb["runs"][0]
            lines.append(f"| {c['K']:,} | torch float32 | {tb['min_seconds']:.2f} | "
                         f"{_fmt_all(tb['all_seconds'])} | {tb['min_cpu_seconds']:.2f} | "
                         f"{t0['log_loss']:.9f} | {t0['error']:.5f} |")
    lines += [""]
    for c in res["configs"]:
        if "numba32" not in c:
            continue
        sb = c["stream_bound"]
        lines.append(
            f"- K = {c['K']:,}: float64 / float32 time = {c['ratio_float64_over_float32_min']:.2f}"
            + (f"; torch / float32 time = {c['ratio_torch_over_numba32_min']:.2f} (min over "
               f"min; per pair: {_fmt_all(c['ratio_torch_over_numba32_pairs'])})"
               if "ratio_torch_over_numba32_min" in c else "")
            + f". Bounds: {c['multiply_adds'] / 1e9:.1f} G multiply-adds at the measured peak "
            f"= {c['fma_bound_seconds']:.2f} s; streaming the tiles with the kernel's memory "
            f"accesses (tile {sb['tile']}, {sb['bytes_read_from_tiles'] / 1e9:.0f} GB of "
            f"tile rows read) = {sb['seconds']:.2f} s, of which transposing W into float32 "
            f"tiles {sb['transpose_seconds']:.2f} s. float32 time / stream bound = "
            f"{c['numba32']['min_seconds'] / sb['seconds']:.2f}.")
        a, d = c["accuracy"], c["float32_minus_float64"]
        lines.append(
            f"- K = {c['K']:,}: accuracy of float32 against float64: mean log-loss relative "
            f"difference {d['rel_log_loss']:.1e} (all rows), error difference {d['error']:.1e}, "
            f"defective metric difference {d['defective']:.1e}; per row (first "
            f"{a['n_rows']:,} rows): max relative difference of the loss "
            f"{a['max_rel_diff_log_loss_per_row']:.1e}, of the defective metric "
            f"{a['max_rel_diff_defective_per_row']:.1e}, rows whose error differs: "
            f"{a['error_rows_differing']}.")
    fp, f1 = res.get("fma_peak"), res.get("fma_peak_1thread")
    if fp:
        lines.append(f"- Measured peak: {fp['fma_per_second'] / 1e9:.1f} G float32 "
                     f"multiply-adds/s on {fp['threads']} threads "
                     f"({f1['fma_per_second'] / 1e9:.1f} G "
                     "on 1): independent fused multiply-adds on vector registers in L1 "
                     "(`_fma_loop`).")
    if res.get("simd"):
        parts = []
        for k, v in res["simd"].items():
            parts.append(f"`{k}`: " + (", ".join(f"{n}x {i}" for i, n in v.items())
                                        if v else "(loaded from cache, not shown)"))
        lines.append("- Vector instructions in the float32 kernels' assembly (counts): "
                     + "; ".join(parts) + ".")
    lines += [""]
    for c in res["configs"]:
        if "skipped" in c["torch"]:
            continue
        lines.append(f"- K = {c['K']:,}: numba / torch time = "
                     f"{c['ratio_numba_over_torch_min']:.2f} (min over min; per pair: "
                     f"{_fmt_all(c['ratio_numba_over_torch_pairs'])}); torch's conversions "
                     f"took {c['torch']['min_convert_seconds']:.2f} s; torch - numba "
                     f"log-loss = {c['torch_minus_numba_log_loss']:.2e} (float32 rounding), "
                     f"error = {c['torch_minus_numba_error']:.2e}.")
    big = res["configs"][0]
    ok30 = big["numba"]["min_seconds"] <= 30.0
    lines += ["", f"Target (K = {big['K']:,}), float64: one full evaluation in at most 30 s: "
              f"{'met' if ok30 else 'NOT met'} ({big['numba']['min_seconds']:.2f} s)"]
    if "skipped" not in big["torch"]:
        faster = big["numba"]["min_seconds"] <= big["torch"]["min_seconds"]
        lines[-1] += (f"; no slower than torch float32: {'met' if faster else 'NOT met'} "
                      f"({big['ratio_numba_over_torch_min']:.2f}x).")
    if "numba32" in big:
        t32 = big["numba32"]["min_seconds"]
        lines += ["", f"Target (K = {big['K']:,}), float32 (log-loss, error and the defective "
                  f"metric): at most 8 s: {'met' if t32 <= 8.0 else 'NOT met'} ({t32:.2f} s)"]
        if "ratio_torch_over_numba32_min" in big:
            r = big["ratio_torch_over_numba32_min"]
            lines[-1] += (f"; at least 3x faster than torch float32 in the same run: "
                          f"{'met' if r >= 3.0 else 'NOT met'} ({r:.2f}x).")
    lines += ["", "Subsample estimate: `evaluate(..., subsample=n, seed=s, "
              "precision=\"float32\")` against the full float32 evaluation, seeds 0-4. "
              "Predicted standard error, with the finite-population "
              "factor sqrt((N-n)/(N-1)): log-loss, the per-row standard deviation (seed 0's "
              "rows) / sqrt(n); error, sqrt(e (1-e) / n) with e the full error. Labels are "
              "uniform, so the error is close to 1 - 1/K.", "",
              "| K | W std | n of N | full log-loss | mean abs diff log-loss | max | "
              "predicted SE | full error | mean abs diff error | max | predicted SE | "
              "s per subsample eval |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in res["configs"]:
        for s in c["subsample"]:
            lines.append(f"| {s['K']:,} | {s['w_std']:g} | {s['n_sub']:,} of {s['N']:,} | "
                         f"{s['full']['log_loss']:.6f} | {s['mean_abs_diff_log_loss']:.2e} | "
                         f"{s['max_abs_diff_log_loss']:.2e} | {s['predicted_se_log_loss']:.2e} | "
                         f"{s['full']['error']:.5f} | {s['mean_abs_diff_error']:.2e} | "
                         f"{s['max_abs_diff_error']:.2e} | {s['predicted_se_error']:.2e} | "
                         f"{s['min_seconds']:.2f} |")
    lines += ["", f"Total benchmark time: {res['total_seconds']:.0f} s.", ""]
    lines += history_lines(res)
    return "\n".join(lines)


def run_summary(res):
    """One line of history: when, how loaded, and the minimum times per K."""
    out = dict(date=res["date"], repeats=res["repeats"],
               load_average_at_start=res["load_average_at_start"][0],
               load_average_at_end=res["load_average_at_end"][0], configs=[])
    for c in res["configs"]:
        row = dict(K=c["K"], numba_min_seconds=c["numba"]["min_seconds"],
                   numba_all_seconds=c["numba"]["all_seconds"])
        if "numba32" in c:
            row.update(numba32_min_seconds=c["numba32"]["min_seconds"],
                       numba32_all_seconds=c["numba32"]["all_seconds"])
        if "skipped" not in c["torch"]:
            row.update(torch_min_seconds=c["torch"]["min_seconds"],
                       torch_all_seconds=c["torch"]["all_seconds"],
                       ratio_numba_over_torch_min=c["ratio_numba_over_torch_min"])
        out["configs"].append(row)
    return out


def with_history(res, path):
    """Carry the earlier runs of the same benchmark (same N) over from ``path``, so
    that the results file shows every run on this shared machine, not only the last."""
    hist = []
    try:
        old = json.loads(path.read_text())
        if old.get("configs") and old["configs"][0]["N"] == res["configs"][0]["N"]:
            hist = old.get("history", []) + [run_summary(old)]
    except (OSError, ValueError, KeyError, IndexError):
        pass
    res["history"] = hist
    return res


def history_lines(res):
    if not res.get("history"):
        return []
    lines = ["Every run of this benchmark kept in the results file (this one last; "
             "min wall seconds and all runs):", "",
             "| date | load at start | K | numba float64 min s (all) | numba float32 min s "
             "(all) | torch min s (all) | ratio float64 / torch |",
             "|---|---|---|---|---|---|---|"]
    for h in res["history"] + [run_summary(res)]:
        for c in h["configs"]:
            tt = (f"{c['torch_min_seconds']:.2f} ({_fmt_all(c['torch_all_seconds'])}) | "
                  f"{c['ratio_numba_over_torch_min']:.2f}" if "torch_min_seconds" in c
                  else "skipped | -")
            note = " (from its console log)" if h.get("from_log") else ""
            f32 = (f"{c['numba32_min_seconds']:.2f} ({_fmt_all(c['numba32_all_seconds'])})"
                   if "numba32_min_seconds" in c else "-")
            lines.append(f"| {h['date']}{note} | {h['load_average_at_start']:.1f} | {c['K']:,} | "
                         f"{c['numba_min_seconds']:.2f} ({_fmt_all(c['numba_all_seconds'])}) | "
                         f"{f32} | {tt} |")
    lines.append("")
    return lines


def write_atomic(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="N = 10,000 and K = 1,800 / 200 (writes evaluate-quick.*)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per variant (>= 2)")
    args = ap.parse_args(argv)
    if args.repeats < 2:
        ap.error("--repeats must be at least 2")
    res = run(quick=args.quick, repeats=args.repeats)
    name = "evaluate-quick" if args.quick else "evaluate"
    res = with_history(res, RESULTS / f"{name}.json")
    md = report(res)
    write_atomic(RESULTS / f"{name}.json", json.dumps(res, indent=1))
    write_atomic(RESULTS / f"{name}.md", md)
    print("\n" + md)
    print(f"written: {RESULTS / (name + '.json')}, {RESULTS / (name + '.md')}")


if __name__ == "__main__":
    sys.exit(main())
