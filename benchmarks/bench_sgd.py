"""Speed of the explicit-SGD kernels (vanilla, U-max, Raman; kernels/sgd.py).

Measures, in one run (so that ratios are side by side):

1. ``bound``: the best rate of loops that only read the ~100 W entries each step
   touches (same rows, columns and classes as the kernel; no writes, no arithmetic, no
   dependence between steps; plain and with prefetching): how fast the machine
   delivers a step's cache lines at the time of the run.
2. ``sparse``: the issue's shape, N=100,000, D=10,000, ~50 non-zeros per row (uniform
   random columns, L2-normalised rows), K=18,000; W written at initialisation. U-max with
   the straightforward loop (prefetch mode 0) beside the pipelined ones (modes 1, 2);
   vanilla and Raman; the lazy ridge (mu > 0, with the W projection) against mu = 0
   (interleaved with the others, and in back-to-back pairs of epochs on one permutation);
   Hogwild on 2 threads against serial; m = 5 classes; ``fit()`` overhead.
3. ``sparse_zipf``: the same shape with Zipf-distributed columns numbered by frequency
   (text-like; the preprocessing keeps the most frequent words), for context.
4. ``dense``: MNIST's shape, 60,000 x 784 dense rows, K = 10 (shuffled and file
   order), beside loops that only read each step's row (the bound for dense rows);
   ``mnist``: the real MNIST training set (CSR, ~150 non-zeros per row).
5. ``kscan``: seconds per epoch at K = 100, 1,000, 10,000, 100,000 (plain and pipelined).

Rates are updates (steps) per second, best and median over repeated epochs, each epoch
a fresh permutation; variants are interleaved epoch by epoch so that machine load
affects them alike. The machine is shared: the load average is recorded.

Usage: ``python benchmarks/bench_sgd.py [--quick] [--repeats R] [--runs 2]``; the
whole benchmark runs ``--runs`` times (default 2) and every run goes to
``benchmarks/results/sgd.json`` and ``sgd.md``.
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

from scalable_softmax import kernels, methods
from scalable_softmax.kernels import sgd as ksgd
from scalable_softmax.methods import sgd

RESULTS = Path(__file__).resolve().parent / "results"


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------

def sparse_data(N, D, nnz, K, seed=0, zipf=False):
    """CSR with ~``nnz`` distinct columns per row, L2-normalised rows, uniform labels."""
    rng = np.random.default_rng(seed)
    if zipf:
        p = 1.0 / np.arange(1, D + 1)
        p /= p.sum()
        cols = rng.choice(D, size=(N, nnz), p=p)
    else:
        cols = rng.integers(0, D, size=(N, nnz))
    cols.sort(axis=1)
    vals = rng.random((N, nnz)) + 0.1
    X = sp.csr_matrix((vals.ravel(), cols.ravel().astype(np.int32),
                       np.arange(N + 1, dtype=np.int64) * nnz), shape=(N, D))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = (sp.diags(1.0 / norms) @ X).tocsr()
    X.sort_indices()
    y = rng.integers(0, K, N)
    return X, y


def dense_data(N, D, K, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.random((N, D))
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    return sp.csr_matrix(A), rng.integers(0, K, N)


# ---------------------------------------------------------------------------
# the memory bound
# ---------------------------------------------------------------------------

@numba.njit(nogil=True, boundscheck=False)
def _gather(W, indptr, indices, data, y, order, ks):
    """Read W[k, c] and W[y_i, c] for every step's columns: the kernel's access
    pattern with no arithmetic, no writes and no dependence between steps."""
    s = 0.0
    for t in range(order.shape[0]):
        i = order[t]
        k = ks[t]
        yi = y[i]
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            s += W[k, c] + W[yi, c]
    return s


@numba.njit(nogil=True, boundscheck=False)
def _gather_prefetched(W, indptr, indices, data, y, order, ks, ahead):
    """:func:`_gather` with the entries of step ``t + ahead`` prefetched (write intent,
    as in the kernel) while step ``t`` is read."""
    s = 0.0
    n = order.shape[0]
    for t in range(n):
        if t + ahead < n:
            j = order[t + ahead]
            kk = ks[t + ahead]
            yj = y[j]
            for p in range(indptr[j], indptr[j + 1]):
                c = indices[p]
                kernels.prefetch_w(W, kk, c)
                kernels.prefetch_w(W, yj, c)
        i = order[t]
        k = ks[t]
        yi = y[i]
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            s += W[k, c] + W[yi, c]
    return s


@numba.njit(nogil=True, boundscheck=False)
def _read_rows(data, indptr, order, ahead):
    """Read every entry of each step's data row (dense rows: all ``D`` columns), four
    independent sums so that the adds do not chain, the row ``ahead`` steps later
    prefetched every 8 entries as the kernel does (``ahead = 0``: no prefetch). No
    ``W``, no writes: any kernel that reads ``x_i`` is slower, so this is an upper bound
    on the rate of a step on dense rows."""
    s = 0.0
    n = order.shape[0]
    for t in range(n):
        if ahead > 0 and t + ahead < n:
            j = order[t + ahead]
            for p in range(indptr[j], indptr[j + 1], 8):
                kernels.prefetch_r(data, p)
        i = order[t]
        p0 = indptr[i]
        p1 = indptr[i + 1]
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        p = p0
        while p + 3 < p1:
            a0 += data[p]
            a1 += data[p + 1]
            a2 += data[p + 2]
            a3 += data[p + 3]
            p += 4
        while p < p1:
            a0 += data[p]
            p += 1
        s += (a0 + a1) + (a2 + a3)
    return s


def read_rows_runner(trainer, ahead=0):
    """A :func:`time_variants` runner of :func:`_read_rows`."""
    indptr, _, data, _ = methods.csr_arrays(trainer)

    def run(order, e):
        _read_rows(data, indptr, order, ahead)
        return order.size
    return run


def gather_runner(trainer, ahead=0):
    """A :func:`time_variants` runner of the read-only loops (``ahead = 0``: plain)."""
    args = (trainer.W, *methods.csr_arrays(trainer))

    def run(order, e):
        ks = ksgd.draw_classes_m1(e, order, args[4], trainer.K)
        if ahead:
            _gather_prefetched(*args, order, ks, ahead)
        else:
            _gather(*args, order, ks)
        return order.size
    return run


def memory_bound(trainer, repeats=3, seed=0):
    """Steps/s of read-only loops over the W entries the steps touch (shuffled epochs,
    the kernel's class draws), plain and with the next steps' entries prefetched: how
    fast this machine, at this moment, delivers a step's cache lines."""
    rng = np.random.default_rng(seed)
    N, K = trainer.N, trainer.K
    args = (trainer.W, *methods.csr_arrays(trainer))
    _gather(*args, np.arange(2), np.zeros(2, np.int64))
    _gather_prefetched(*args, np.arange(2), np.zeros(2, np.int64), 1)
    best = {"plain": np.inf, "prefetch1": np.inf, "prefetch2": np.inf}
    for r in range(repeats):
        order = rng.permutation(N)
        ks = ksgd.draw_classes_m1(r, order, args[4], K)
        for name in best:
            t0 = time.perf_counter()
            if name == "plain":
                _gather(*args, order, ks)
            else:
                _gather_prefetched(*args, order, ks, int(name[-1]))
            best[name] = min(best[name], time.perf_counter() - t0)
    lines = 2 * args[2].size
    fastest = min(best.values())
    return {"steps_per_s": N / fastest, "W_lines_per_s": lines / fastest,
            "lines_per_step": lines / N,
            "variants_steps_per_s": {k: N / v for k, v in best.items()}}


# ---------------------------------------------------------------------------
# timing helpers
# ---------------------------------------------------------------------------

def time_variants(variants, N, repeats, seed=0):
    """``variants``: name -> callable(order, epoch) -> steps. Interleaved timing.

    Returns name -> {"best": M/s, "median": M/s, "epoch_s": [...]}."""
    rng = np.random.default_rng(seed)
    times = {k: [] for k in variants}
    cpus = {k: [] for k in variants}
    steps = {k: 0 for k in variants}
    for run in variants.values():               # warm-up epoch (compilation, pages)
        run(rng.permutation(N), 0)
    for r in range(repeats):
        for name, run in variants.items():
            order = rng.permutation(N)
            c0 = time.process_time()
            t0 = time.perf_counter()
            steps[name] = run(order, r + 1)
            times[name].append(time.perf_counter() - t0)
            cpus[name].append(time.process_time() - c0)
    out = {}
    for name, ts in times.items():
        ts = np.array(ts)
        cs = np.array(cpus[name])
        out[name] = {"best_M_per_s": steps[name] / ts.min() / 1e6,
                     "median_M_per_s": steps[name] / np.median(ts) / 1e6,
                     "cpu_best_M_per_s": steps[name] / max(cs.min(), 1e-9) / 1e6,
                     "epoch_s": ts.round(5).tolist(), "cpu_s": cs.round(5).tolist(),
                     "steps": int(steps[name])}
    return out


def paired_overhead(base, other, N, pairs, seed=0):
    """Time ``other`` against ``base`` in ``pairs`` back-to-back pairs of epochs on the
    same permutation (which runs first alternates), so that slow phases of a shared
    machine hit both alike. Returns the median and quartiles of the per-pair time
    ratios ``other / base`` minus 1 (the overhead), and every ratio."""
    rng = np.random.default_rng(seed)
    base(rng.permutation(N), 0)
    other(rng.permutation(N), 0)
    ratios = []
    for p in range(pairs):
        order = rng.permutation(N)
        t = {}
        for fn in ((base, other) if p % 2 == 0 else (other, base)):
            t0 = time.perf_counter()
            fn(order, p + 1)
            t[fn] = time.perf_counter() - t0
        ratios.append(t[other] / t[base])
    q1, med, q3 = np.percentile(ratios, [25, 50, 75])
    return {"pairs": pairs, "overhead_median": med - 1, "overhead_q1": q1 - 1,
            "overhead_q3": q3 - 1, "ratios": np.round(ratios, 4).tolist()}


def epoch_runner(trainer, lr=0.01, mode=None):
    def run(order, e):
        if mode is not None:
            methods.set_prefetch_mode(trainer, mode)
        rep = trainer.run_epoch(order, lr, 1000 + e)
        if rep.diverged_at >= 0:
            raise RuntimeError(f"diverged at {rep.diverged_at}")
        return rep.steps
    return run


def file_order_runner(trainer, lr=0.01, mode=0):
    """Like :func:`epoch_runner` but ignores the shuffled order (``order="file"``)."""
    run = epoch_runner(trainer, lr, mode)
    return lambda order, e: run(np.arange(order.size), e)


def make_trainer(cls, X, y, K, **kw):
    t = cls(X, y, K, **kw)
    t.init_params("zero")
    t.warmup()
    return t


def loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


# ---------------------------------------------------------------------------
# the benchmark
# ---------------------------------------------------------------------------

def run(quick=False, repeats=5, ridge_pairs=21):
    res = {"machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                       "cpu_count": os.cpu_count(), "numba": numba.__version__,
                       "numpy": np.__version__},
           "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load_start": loadavg(),
           "quick": quick, "repeats": repeats}
    N, D, nnz, K = (20_000, 10_000, 50, 18_000) if quick else (100_000, 10_000, 50, 18_000)
    print(f"sparse shape N={N} D={D} nnz~{nnz} K={K}", flush=True)
    X, y = sparse_data(N, D, nnz, K)
    res["sparse_shape"] = {"N": N, "D": D, "K": K, "nnz_per_row": X.nnz / N}

    # --- U-max modes, vanilla, raman, mu = 0 ---------------------------------------
    um = make_trainer(sgd.UmaxTrainer, X, y, K)
    res["bound"] = memory_bound(um)
    print("bound", res["bound"], flush=True)
    va = make_trainer(sgd.VanillaTrainer, X, y, K)
    variants = {
        "read_only_bound_plain": gather_runner(um, 0),
        "read_only_bound_prefetch2": gather_runner(um, 2),
        "umax_plain": epoch_runner(um, mode=0),
        "umax_prefetch_block": epoch_runner(um, mode=1),
        "umax_prefetch_interleaved": epoch_runner(um, mode=2),
        "vanilla_plain": epoch_runner(va, lr=1e-4, mode=0),
        "vanilla_fast": epoch_runner(va, lr=1e-4, mode=ksgd.PREFETCH_DEFAULT),
    }
    res["sparse"] = time_variants(variants, N, repeats)
    del va
    ra = make_trainer(sgd.RamanTrainer, X, y, K)
    res["sparse"].update(time_variants({
        "umax_fast": epoch_runner(um, mode=ksgd.PREFETCH_DEFAULT),
        "raman_umax_fast": epoch_runner(ra, mode=ksgd.PREFETCH_DEFAULT)}, N, repeats, 1))
    del ra
    print(json.dumps({k: round(v["best_M_per_s"], 3) for k, v in res["sparse"].items()}),
          flush=True)

    # --- lazy ridge ------------------------------------------------------------------
    ur = make_trainer(sgd.UmaxTrainer, X, y, K, mu=1e-3)
    v0 = make_trainer(sgd.VanillaTrainer, X, y, K)
    vr = make_trainer(sgd.VanillaTrainer, X, y, K, mu=1e-3)
    fast = ksgd.PREFETCH_DEFAULT
    res["ridge"] = time_variants({
        "umax_mu0": epoch_runner(um, mode=fast),
        "umax_mu1e-3_lazy_ridge_projection": epoch_runner(ur, mode=fast),
        "vanilla_mu0": epoch_runner(v0, lr=1e-4, mode=fast),
        "vanilla_mu1e-3_lazy_ridge": epoch_runner(vr, lr=1e-4, mode=fast),
    }, N, repeats, 2)
    r = res["ridge"]
    for m, a, b_ in (("umax", "umax_mu0", "umax_mu1e-3_lazy_ridge_projection"),
                     ("vanilla", "vanilla_mu0", "vanilla_mu1e-3_lazy_ridge")):
        r[f"{m}_overhead_best"] = r[a]["best_M_per_s"] / r[b_]["best_M_per_s"] - 1
        r[f"{m}_overhead_median"] = r[a]["median_M_per_s"] / r[b_]["median_M_per_s"] - 1
    # the same comparison in back-to-back pairs on one permutation (less noise)
    r["paired"] = {
        "umax": paired_overhead(epoch_runner(um, mode=fast), epoch_runner(ur, mode=fast),
                                N, ridge_pairs, 3),
        "vanilla": paired_overhead(epoch_runner(v0, lr=1e-4, mode=fast),
                                   epoch_runner(vr, lr=1e-4, mode=fast), N, ridge_pairs, 4)}
    del ur, v0, vr
    print("ridge overhead", {k: round(v, 3) for k, v in r.items() if "overhead" in k},
          flush=True)

    # --- hogwild ---------------------------------------------------------------------
    hw = make_trainer(sgd.UmaxTrainer, X, y, K, threads=2)
    res["hogwild"] = time_variants({
        "umax_serial": epoch_runner(um, mode=ksgd.PREFETCH_DEFAULT),
        "umax_hogwild_2threads": epoch_runner(hw),
    }, N, repeats, 3)
    res["hogwild"]["speedup_best"] = (res["hogwild"]["umax_hogwild_2threads"]["best_M_per_s"]
                                      / res["hogwild"]["umax_serial"]["best_M_per_s"])
    res["hogwild"]["speedup_median"] = (
        res["hogwild"]["umax_hogwild_2threads"]["median_M_per_s"]
        / res["hogwild"]["umax_serial"]["median_M_per_s"])
    del hw
    print("hogwild speedup", res["hogwild"]["speedup_best"], flush=True)

    # --- m = 5 classes and fit() overhead -------------------------------------------
    m5 = make_trainer(sgd.UmaxTrainer, X, y, K, n_sampled=5)
    res["multi"] = time_variants({"umax_m5": epoch_runner(m5)}, N, max(2, repeats // 2), 4)
    del m5
    from scalable_softmax.fit import fit
    ep = 3
    t0 = time.perf_counter()
    fr = fit(X, y, "umax", lr=0.01, epochs=ep, eval_epochs=[], progress=False, K=K)
    wall = time.perf_counter() - t0
    res["fit"] = {"epochs": ep, "wall_s": wall, "training_s": float(fr.history.seconds.iloc[-1]),
                  "M_per_s_training": ep * N / fr.history.seconds.iloc[-1] / 1e6}
    del fr
    del um

    # --- zipf columns ----------------------------------------------------------------
    Xz, yz = sparse_data(N, D, nnz, K, seed=1, zipf=True)
    uz = make_trainer(sgd.UmaxTrainer, Xz, yz, K)
    res["sparse_zipf"] = time_variants({
        "umax_plain": epoch_runner(uz, mode=0),
        "umax_fast": epoch_runner(uz, mode=ksgd.PREFETCH_DEFAULT)}, N, repeats, 5)
    res["sparse_zipf_nnz_per_row"] = Xz.nnz / N
    del uz, Xz, yz

    # --- dense MNIST shape -----------------------------------------------------------
    Nd, Dd, Kd = (20_000, 784, 10) if quick else (60_000, 784, 10)
    Xd, yd = dense_data(Nd, Dd, Kd)
    ud = make_trainer(sgd.UmaxTrainer, Xd, yd, Kd)
    assert methods.dense_rows(ud)
    res["dense"] = time_variants({
        "umax_plain": epoch_runner(ud, mode=0),
        "umax_fast": epoch_runner(ud, mode=methods.prefetch_mode(ud)),
        "umax_plain_file_order": file_order_runner(ud, mode=0),
        "read_rows_bound_plain": read_rows_runner(ud, 0),
        "read_rows_bound_prefetch4": read_rows_runner(ud, 4)}, Nd, repeats, 6)
    res["dense_shape"] = {"N": Nd, "D": Dd, "K": Kd}
    del ud, Xd, yd
    print("dense", {k: round(v["best_M_per_s"], 3) for k, v in res["dense"].items()}, flush=True)

    # --- real MNIST (sparse, ~150 nnz/row) ----------------------------------------
    try:
        from scalable_softmax.data import load_dataset
        ds = load_dataset("mnist", "train")
        Xm, ym, Km = ds.X, ds.y, ds.K
    except Exception as exc:  # no data: say so in the results
        res["mnist"] = {"skipped": f"{type(exc).__name__}: {exc}"}
    else:
        um_ = make_trainer(sgd.UmaxTrainer, Xm, ym, Km)
        res["mnist"] = time_variants({
            "umax_plain": epoch_runner(um_, mode=0),
            "umax_fast": epoch_runner(um_, mode=methods.prefetch_mode(um_))},
            Xm.shape[0], repeats, 8)
        res["mnist_shape"] = {"N": Xm.shape[0], "D": Xm.shape[1], "K": Km,
                              "nnz_per_row": Xm.nnz / Xm.shape[0]}
        del um_, Xm, ym, ds

    # --- K scan ----------------------------------------------------------------------
    avail = _mem_available_gb()
    Dk = D if (avail is not None and avail > 16) else 1_000
    res["kscan"] = {"D": Dk, "N": N, "mem_available_gb": avail, "rows": []}
    for Kk in ([100, 1_000, 10_000] if quick else [100, 1_000, 10_000, 100_000]):
        Xk, yk = sparse_data(N, Dk, nnz, Kk, seed=2)
        tk = make_trainer(sgd.UmaxTrainer, Xk, yk, Kk)
        r = time_variants({"plain": epoch_runner(tk, mode=0),
                           "fast": epoch_runner(tk, mode=ksgd.PREFETCH_DEFAULT)},
                          N, max(3, repeats // 2), 7)
        res["kscan"]["rows"].append({
            "K": Kk, "W_GB": Kk * Dk * 8 / 1e9,
            "plain_epoch_s": min(r["plain"]["epoch_s"]), "fast_epoch_s": min(r["fast"]["epoch_s"]),
            "plain_M_per_s": r["plain"]["best_M_per_s"], "fast_M_per_s": r["fast"]["best_M_per_s"]})
        print("kscan", res["kscan"]["rows"][-1], flush=True)
        del tk, Xk, yk

    res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    res["load_end"] = loadavg()
    return res


def _mem_available_gb():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1e6
    except OSError:
        return None
    return None


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------

def _atomic_write(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _table(items):
    L = ["| variant | best M/s | median M/s | CPU-time M/s |", "|---|---|---|---|"]
    for name, v in items:
        L.append(f"| {name} | {v['best_M_per_s']:.3f} | {v['median_M_per_s']:.3f} | "
                 f"{v['cpu_best_M_per_s']:.3f} |")
    return L


def _ratio(a, b, key="best_M_per_s"):
    return a[key] / b[key]


def markdown(res):
    s, L = res["sparse_shape"], []
    L.append("# Explicit-SGD kernels (vanilla, U-max, Raman): speed\n")
    L.append(f"Run {res['started']} .. {res['finished']}; load average (1, 5, 15 min) at "
             f"start {[round(x, 2) for x in res['load_start']]}, at end "
             f"{[round(x, 2) for x in res['load_end']]} (2 cores, shared). "
             f"{res['repeats']} timed epochs per variant, interleaved with the variants "
             "compared to it; M updates/s over wall time (best, median) and over process "
             "CPU time (best).\n")
    b = res["bound"]
    v = ", ".join(f"{k} {x / 1e6:.2f}" for k, x in b["variants_steps_per_s"].items())
    L.append(f"Memory bound measured in the same run: read-only loops over the W entries "
             f"the steps touch ({b['lines_per_step']:.0f} per step, no writes, no "
             f"arithmetic; M steps/s: {v}) reach at best {b['steps_per_s'] / 1e6:.2f} M "
             f"steps/s ({b['W_lines_per_s'] / 1e6:.0f} M random reads/s).\n")
    L.append(f"## Sparse: N={s['N']:,}, D={s['D']:,}, {s['nnz_per_row']:.1f} nnz/row "
             f"(uniform columns), K={s['K']:,}\n")
    sp_, r, h = res["sparse"], res["ridge"], res["hogwild"]
    L += _table(list(sp_.items()) + list(res["multi"].items())
                + [(f"ridge run: {k}", r[k]) for k in
                   ("umax_mu0", "umax_mu1e-3_lazy_ridge_projection", "vanilla_mu0",
                    "vanilla_mu1e-3_lazy_ridge")]
                + [(f"hogwild run: {k}", h[k]) for k in
                   ("umax_serial", "umax_hogwild_2threads")])
    L.append("")
    plain = sp_["umax_plain"]
    L.append(f"* U-max pipelined / plain (same run): interleaved "
             f"{_ratio(sp_['umax_prefetch_interleaved'], plain):.2f}x, block "
             f"{_ratio(sp_['umax_prefetch_block'], plain):.2f}x")
    fast = sp_["umax_prefetch_interleaved"]
    ratios = []
    for key in ("best_M_per_s", "median_M_per_s"):
        bnd = max(sp_["read_only_bound_plain"][key], sp_["read_only_bound_prefetch2"][key])
        ratios.append(fast[key] / bnd)
    L.append(f"* U-max pipelined kernel / read-only bound (same interleaved run): "
             f"{ratios[0]:.2f} (best), {ratios[1]:.2f} (median)")
    L.append(f"* lazy ridge overhead over mu = 0 (mu = 1e-3): U-max (ridge + W projection) "
             f"{100 * r['umax_overhead_best']:+.1f}% (best), "
             f"{100 * r['umax_overhead_median']:+.1f}% (median); vanilla (ridge) "
             f"{100 * r['vanilla_overhead_best']:+.1f}% (best), "
             f"{100 * r['vanilla_overhead_median']:+.1f}% (median)")
    pr = r["paired"]
    L.append(f"* lazy ridge overhead, {pr['umax']['pairs']} back-to-back pairs of epochs "
             "on the same permutation (median [quartiles] of the per-pair time ratios): "
             + "; ".join(f"{label} {100 * pr[m]['overhead_median']:+.1f}% "
                         f"[{100 * pr[m]['overhead_q1']:+.1f}%, "
                         f"{100 * pr[m]['overhead_q3']:+.1f}%]"
                         for m, label in (("umax", "U-max"), ("vanilla", "vanilla"))))
    L.append(f"* Hogwild 2 threads / serial: {h['speedup_best']:.2f}x (best), "
             f"{h['speedup_median']:.2f}x (median)")
    f = res["fit"]
    L.append(f"* through `fit()` ({f['epochs']} epochs, no evaluation): "
             f"{f['M_per_s_training']:.3f} M/s of training time; wall {f['wall_s']:.2f} s "
             "including setup and the final fold\n")
    L.append(f"## Sparse, Zipf-distributed columns numbered by frequency "
             f"({res['sparse_zipf_nnz_per_row']:.1f} nnz/row), same N, D, K\n")
    L += _table(res["sparse_zipf"].items())
    d = res["dense_shape"]
    L.append(f"\n## Dense MNIST shape: N={d['N']:,}, D={d['D']}, K={d['K']} (every row "
             "stores all D columns)\n")
    L += _table(res["dense"].items())
    dn = res["dense"]
    rr = []
    for key in ("best_M_per_s", "median_M_per_s"):
        bnd = max(dn["read_rows_bound_plain"][key], dn["read_rows_bound_prefetch4"][key])
        rr.append((bnd, dn["umax_fast"][key] / bnd))
    L.append(f"\n`read_rows_bound_*`: loops that only read each step's {d['D']} "
             "values of x_i (shuffled, no W, no writes), an upper bound on any "
             f"kernel's rate. Best {rr[0][0]:.2f} M rows/s, median {rr[1][0]:.2f}; "
             f"U-max pipelined / that bound: {rr[0][1]:.2f} (best), "
             f"{rr[1][1]:.2f} (median).")
    if "mnist_shape" in res:
        m = res["mnist_shape"]
        L.append(f"\n## Real MNIST (paper preprocessing, CSR): N={m['N']:,}, D={m['D']}, "
                 f"K={m['K']}, {m['nnz_per_row']:.1f} nnz/row\n")
        L += _table(res["mnist"].items())
    else:
        L.append(f"\n(Real MNIST skipped: {res['mnist']['skipped']})")
    ks = res["kscan"]
    L.append(f"\n## Time per epoch against K (U-max, N={ks['N']:,}, D={ks['D']:,}, "
             "~50 nnz/row)\n")
    L.append("| K | W (GB) | plain s/epoch | fast s/epoch | plain M/s | fast M/s |")
    L.append("|---|---|---|---|---|---|")
    for row in ks["rows"]:
        L.append(f"| {row['K']:,} | {row['W_GB']:.3f} | {row['plain_epoch_s']:.4f} | "
                 f"{row['fast_epoch_s']:.4f} | {row['plain_M_per_s']:.3f} | "
                 f"{row['fast_M_per_s']:.3f} |")
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller N (a smoke run)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ridge-pairs", type=int, default=21,
                    help="back-to-back epoch pairs of the paired lazy-ridge comparison")
    ap.add_argument("--runs", type=int, default=2,
                    help="repeat the whole benchmark (the machine is shared: compare runs)")
    ap.add_argument("--name", default="sgd", help="results file stem")
    args = ap.parse_args(argv)
    runs = []
    for r in range(args.runs):
        print(f"=== run {r + 1} of {args.runs}", flush=True)
        runs.append(run(quick=args.quick, repeats=args.repeats, ridge_pairs=args.ridge_pairs))
    _atomic_write(RESULTS / f"{args.name}.json", json.dumps({"runs": runs}, indent=1))
    md = "\n".join(f"<!-- run {r + 1} of {len(runs)} -->\n" + markdown(res).replace(
        "# Explicit-SGD kernels (vanilla, U-max, Raman): speed",
        f"# Explicit-SGD kernels (vanilla, U-max, Raman): speed, run {r + 1} of {len(runs)}")
        for r, res in enumerate(runs))
    _atomic_write(RESULTS / f"{args.name}.md", md)
    print(md)


if __name__ == "__main__":
    main()
