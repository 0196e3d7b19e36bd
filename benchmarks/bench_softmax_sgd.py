"""Exact full-softmax minibatch SGD (``softmax-sgd``) against the cost of its memory
traffic (issue 41, item 2).

In one run, on one process:

* **the bound**: :func:`bound_epoch`, the plain feature-major loop (weights ``D x K``;
  for each row of a minibatch of 100 its scores by one contiguous axpy over the ``K``
  classes per non-zero, the softmax, and after the minibatch the same axpys for the
  update), one thread, against ``fit(X, y, "softmax-sgd", ..., threads=1)`` per
  datapoint on a synthetic shape (N rows, D = 10,000, K = 10,000, 5 non-zeros per row,
  uniform labels; ``bench_sgd.sparse_data``). Target: at most 1.5x the bound.
* ``fit(..., threads=2)`` against ``threads=1`` on the same data (target: at least
  1.5x faster), and, on the first rows only, the former class-major kernel
  (``layout="class"``) for scale.
* seconds per epoch on ``20news-words`` (notebook 12's real data set: K = 10,000,
  D = 10,000, 100,000 training rows; ``scalable_softmax.data.load_dataset``) and on
  Bibtex (K = 159) with threads 1 and 2, and PyTorch's full-softmax SGD epoch on the
  same data and minibatch when ``torch`` is importable (notebook 12's ``embedding-bag`` layout:
  ``nn.EmbeddingBag(D, K, mode="sum", sparse=True)``, float32, 2 threads).

Timing: ``fit(..., eval_epochs=[], lr_decay=1)``; the seconds per epoch are the
differences of ``history.seconds`` (training time only), the first epoch left out (page
faults of fresh weights). Cases are run in ``--rounds`` rounds in rotating order so that
the load of the shared machine spreads over them; the report gives the best and the
median per datapoint, and the load average at the start and end.

Usage: ``python benchmarks/bench_softmax_sgd.py [--quick] [--rounds R] [--epochs E]``;
writes ``benchmarks/results/softmax_sgd[-quick].{json,md}``.
"""
from __future__ import annotations

import argparse
import math
import time

import numba
import numpy as np

from _common import machine_info, machine_line, publish
from bench_sgd import sparse_data
from scalable_softmax.kernels.common import lanesum, vexp

#: minibatch size of every case
BATCH = 100
#: the synthetic shape: (N, D, K, non-zeros per row); quick: fewer rows and classes
SHAPE = (20_000, 10_000, 10_000, 5)
SHAPE_QUICK = (4_000, 10_000, 2_000, 5)
#: rate of the synthetic cases (uniform labels: never diverges)
LR = 0.5
#: the real data sets (notebook 12's): name -> (rate, at least this many timed epochs;
#: Bibtex's epoch is milliseconds long)
REAL = {"20news-words": (100.0, 2), "bibtex": (10.0, 10)}


@numba.njit(nogil=True, boundscheck=False)
def bound_epoch(indptr, indices, data, y, order, WT, lr, B):
    """The feature-major loop: minibatches of ``B`` rows of ``order``; per row the
    scores ``s = sum_p x_p WT[f_p, :]``, ``s <- softmax(s) - e_y``; then for every row
    and non-zero ``WT[f_p, :] -= lr / b x_p s``. Returns the steps."""
    N = order.shape[0]
    K = WT.shape[1]
    S = np.empty((B, K))
    steps = 0
    for b0 in range(0, N, B):
        nb = min(B, N - b0)
        for t in range(nb):
            i = order[b0 + t]
            s = S[t]
            s[:] = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                x = data[p]
                w = WT[indices[p]]
                for k in range(K):
                    s[k] += x * w[k]
            mx = s.max()
            z = 0.0
            for k in range(K):
                e = math.exp(s[k] - mx)
                s[k] = e
                z += e
            for k in range(K):
                s[k] /= z
            s[y[i]] -= 1.0
        for t in range(nb):
            i = order[b0 + t]
            s = S[t]
            for p in range(indptr[i], indptr[i + 1]):
                a = lr / nb * data[p]
                w = WT[indices[p]]
                for k in range(K):
                    w[k] -= a * s[k]
        steps += 1
    return steps


@numba.njit(nogil=True, boundscheck=False)
def exp_epoch(N, s):
    """The softmax's exponentials alone, with libm's scalar ``exp`` (one call per class,
    as the bound loop and, until they took ``vexp``, the kernels make them): for each of
    ``N`` rows, ``exp(s[k] - max)`` for every class of the score vector ``s`` and their
    sum in class order. Returns the sums' total."""
    K = s.shape[0]
    mx = s.max()
    tot = 0.0
    for _ in range(N):
        z = 0.0
        for k in range(K):
            z += math.exp(s[k] - mx)
        tot += z
    return tot


@numba.njit(nogil=True, boundscheck=False)
def vexp_epoch(N, s):
    """The softmax's exponentials as the kernels make them
    (``kernels.softmax_sgd.softmax_gradient``): :func:`scalable_softmax.kernels.common.vexp`
    into a buffer, summed by :func:`~scalable_softmax.kernels.common.lanesum`, for each
    of ``N`` rows. Returns the sums' total."""
    K = s.shape[0]
    mx = s.max()
    e = np.empty(K)
    tmpf = np.empty(K)
    tot = 0.0
    for _ in range(N):
        vexp(s, mx, e, tmpf, tmpf.view(np.int64), K)
        tot += lanesum(e, K)
    return tot


def _exp_seconds(N, K):
    """Seconds of ``N x K`` exponentials, one thread: the kernels' vectorised ``vexp``
    and eight-lane sum (:func:`vexp_epoch`), numba's libm calls (:func:`exp_epoch`) and
    NumPy's vectorised ``np.exp`` (AVX2 on this machine) over the same values, 100 rows
    at a time."""
    s = np.random.default_rng(0).standard_normal(K) * 3.0
    exp_epoch(1, s)
    vexp_epoch(1, s)
    t0 = time.perf_counter()
    vexp_epoch(N, s)
    t_vexp = time.perf_counter() - t0
    t0 = time.perf_counter()
    exp_epoch(N, s)
    t_libm = time.perf_counter() - t0
    block = np.tile(s - s.max(), (100, 1))
    out = np.empty_like(block)
    t0 = time.perf_counter()
    for _ in range(-(-N // 100)):
        np.exp(block, out=out)
        out.sum()
    return {"vexp": t_vexp, "libm": t_libm, "numpy": time.perf_counter() - t0}


def _per_epoch_fit(X, y, K, lr, epochs, **opts):
    from scalable_softmax.fit import fit
    res = fit(X, y, "softmax-sgd", lr, epochs=epochs + 1, eval_epochs=[], progress=False,
              K=K, lr_decay=1.0, batch_size=BATCH, **opts)
    if res.diverged_at is not None:
        raise RuntimeError(f"softmax-sgd diverged at {res.diverged_at} ({opts})")
    secs = np.diff(res.history.seconds.to_numpy())
    return secs[1:].tolist()


def _per_epoch_bound(X, y, K, lr, epochs, dtype=np.float64):
    """Seconds of each epoch (after one) of :func:`bound_epoch`, one thread, with the
    weights ``WT`` in ``dtype`` (float32: the bytes PyTorch's float32 weights move; the
    scores stay float64)."""
    indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
    indices = np.ascontiguousarray(X.indices, dtype=np.int64)
    data = np.ascontiguousarray(X.data, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.int64)
    WT = np.zeros((X.shape[1], K), dtype=dtype)
    rng = np.random.default_rng(0)
    bound_epoch(indptr, indices, data, y, np.zeros(0, dtype=np.int64), WT, lr, BATCH)
    out = []
    for _ in range(epochs + 1):
        order = rng.permutation(X.shape[0])
        t0 = time.perf_counter()
        bound_epoch(indptr, indices, data, y, order, WT, lr, BATCH)
        out.append(time.perf_counter() - t0)
    if not np.isfinite(WT).all():
        raise RuntimeError("the bound loop diverged")
    return out[1:]


def _per_epoch_class_major(X, y, K, lr, rows):
    """The former class-major kernel (``layout="class"``) on the first ``rows`` rows,
    one thread: seconds of one epoch over them (after one untimed epoch)."""
    from scalable_softmax.methods import get_trainer_class
    Xs, ys = X[:rows], y[:rows]
    tr = get_trainer_class("softmax-sgd")(Xs, ys, K, batch_size=BATCH, layout="class")
    tr.init_params()
    tr.warmup()
    order = np.arange(rows, dtype=np.int64)
    tr.run_epoch(order, lr, 0)
    t0 = time.perf_counter()
    tr.run_epoch(order, lr, 0)
    return time.perf_counter() - t0


def _torch_epoch(X, y, K, batches=200, threads=2):
    """Seconds of one PyTorch full-softmax SGD epoch of minibatches of ``BATCH``
    (notebook 12's models: ``scalable_softmax.repro.race.torch_runner.torch_layouts`` times each
    layout over the first ``batches`` minibatches; times the number of minibatches of
    an epoch), or None and the reason when torch is not importable."""
    from scalable_softmax.repro.race.methods import available
    from scalable_softmax.repro.race.torch_runner import torch_layouts
    ok, why = available("torch")
    if not ok:
        return None, why
    per, _ = torch_layouts(X, y, K, "torch-sgd", batch_size=BATCH, batches=batches,
                           max_seconds=60.0, threads=threads, dense_bound=False)
    steps = -(-X.shape[0] // BATCH)
    return {k: v * steps for k, v in per.items()}, f"{batches} minibatches timed per layout"


def run(quick=False, rounds=2, epochs=2, real=REAL):
    res = {"machine": machine_info(), "quick": quick, "rounds": rounds, "epochs": epochs,
           "numba_threads": numba.config.NUMBA_NUM_THREADS}
    res.update(run_synthetic(quick, rounds, epochs))
    res["real"] = {name: run_real(name, quick, rounds, epochs) for name in real}
    res["machine_end"] = machine_info()
    return res


def run_synthetic(quick, rounds, epochs):
    N, D, K, nnz = SHAPE_QUICK if quick else SHAPE
    X, y = sparse_data(N, D, nnz, K)
    cases = {
        "bound": lambda: _per_epoch_bound(X, y, K, LR, epochs),
        "fit_threads1": lambda: _per_epoch_fit(X, y, K, LR, epochs, threads=1),
        "fit_threads2": lambda: _per_epoch_fit(X, y, K, LR, epochs, threads=2),
    }
    times = {c: [] for c in cases}
    names = list(cases)
    for r in range(rounds):
        k = r % len(names)
        for c in names[k:] + names[:k]:
            times[c] += cases[c]()
            print(c, f"{1e6 * min(times[c]) / N:.1f} us/datapoint", flush=True)
    rows = 1_000 if quick else 2_000
    cm = {"rows": rows, "seconds": _per_epoch_class_major(X, y, K, LR, rows)}
    print("class-major", f"{1e6 * cm['seconds'] / rows:.1f} us/datapoint")
    return {"shape": {"N": N, "D": D, "K": K, "nnz_per_row": nnz, "batch": BATCH, "lr": LR},
            "synthetic": times, "class_major": cm}


def run_real(name, quick, rounds, epochs):
    """Seconds per epoch of ``fit`` on 1 and 2 threads and of PyTorch's full-softmax SGD
    (when importable) on the training split of the real data set ``name``."""
    from scalable_softmax.data import load_dataset
    lr, min_epochs = REAL[name]
    epochs = max(epochs, min_epochs)
    tr = load_dataset(name, "train")
    X, y, K = tr.X, tr.y, int(tr.K)
    if quick:
        X, y = X[:20_000], y[:20_000]
    out = {"N": X.shape[0], "D": X.shape[1], "K": K, "nnz": int(X.nnz), "lr": lr,
           "epochs": epochs, "times": {"fit_threads1": [], "fit_threads2": []}}
    for r in range(rounds):
        for c in (("fit_threads1", 1), ("fit_threads2", 2))[::(1 if r % 2 == 0 else -1)]:
            out["times"][c[0]] += _per_epoch_fit(X, y, K, lr, epochs, threads=c[1])
            print(name, c[0], f"{min(out['times'][c[0]]):.3g} s/epoch", flush=True)
    # the bound loop on this data, one thread: float64 weights (ours) and float32 (the
    # bytes PyTorch's weights move), one timed epoch each, to say what the memory costs
    out["bound"] = {"float64": _per_epoch_bound(X, y, K, lr, 1),
                    "float32": _per_epoch_bound(X, y, K, lr, 1, np.float32)}
    print(name, "bound loop, 1 thread:", out["bound"], flush=True)
    # which part of an epoch is the softmax's N x K exponentials (one thread)
    out["exp"] = _exp_seconds(X.shape[0], K)
    print(name, "N x K exponentials:", out["exp"], flush=True)
    t, why = _torch_epoch(X, y, K)
    out["torch"] = {"seconds_per_epoch": t, "note": why}
    print(name, "torch:", why if t is None else t)
    return out


def _stats(ts, n):
    return 1e6 * min(ts) / n, 1e6 * float(np.median(ts)) / n


def markdown(res):
    s = res["shape"]
    N = s["N"]
    syn = res["synthetic"]
    b, bm = _stats(syn["bound"], N)
    f1, f1m = _stats(syn["fit_threads1"], N)
    f2, f2m = _stats(syn["fit_threads2"], N)
    cm = res["class_major"]
    L = ["# Exact full-softmax minibatch SGD against its memory traffic", "",
         "Written by `benchmarks/bench_softmax_sgd.py`. "
         + machine_line(res["machine"], res["machine_end"]) + " "
         f"{res['rounds']} rounds in rotating order, {res['epochs']} timed epochs per case "
         "and round (the first epoch of every run left out); minibatch "
         f"{s['batch']}, rate {s['lr']}, `lr_decay=1`.", "",
         f"## Synthetic: N = {N:,}, D = {s['D']:,}, K = {s['K']:,}, {s['nnz_per_row']} "
         "non-zeros per row, uniform labels", "",
         "| case | us per datapoint (best) | median | ratio to the bound (best) |",
         "|---|---:|---:|---:|",
         f"| bound: feature-major numba loop, 1 thread | {b:.1f} | {bm:.1f} | 1.00 |",
         f"| `fit(..., threads=1)` | {f1:.1f} | {f1m:.1f} | {f1 / b:.2f} |",
         f"| `fit(..., threads=2)` | {f2:.1f} | {f2m:.1f} | {f2 / b:.2f} |",
         f"| former class-major kernel (`layout=\"class\"`), 1 thread, first "
         f"{cm['rows']:,} rows | {1e6 * cm['seconds'] / cm['rows']:.1f} | | "
         f"{1e6 * cm['seconds'] / cm['rows'] / b:.1f} |", "",
         f"threads=2 over threads=1: {f1 / f2:.2f}x (best), {f1m / f2m:.2f}x (median).", ""]
    for name, n in res.get("real", {}).items():
        t1 = n["times"]["fit_threads1"]
        t2 = n["times"]["fit_threads2"]
        L += [f"## {name}: N = {n['N']:,}, D = {n['D']:,}, K = {n['K']:,}, "
              f"{n['nnz'] / n['N']:.2f} non-zeros per row, rate {n['lr']}", "",
              "| case | seconds per epoch (best) | median |", "|---|---:|---:|",
              f"| `fit(..., threads=1)` | {min(t1):.4g} | {np.median(t1):.4g} |",
              f"| `fit(..., threads=2)` | {min(t2):.4g} | {np.median(t2):.4g} |"]
        for dt, v in n.get("bound", {}).items():
            L.append(f"| bound: feature-major numba loop, {dt} weights, 1 thread | "
                     f"{min(v):.4g} | |")
        tt = n["torch"]["seconds_per_epoch"]
        for lay, v in (tt or {}).items():
            L.append(f"| PyTorch SGD, full softmax, `{lay}`, float32, 2 threads "
                     f"({n['torch']['note']}) | {v:.4g} | |")
        L += ["", f"threads=2 over threads=1: {min(t1) / min(t2):.2f}x (best)."]
        if n.get("bound"):
            b64, b32 = min(n["bound"]["float64"]), min(n["bound"]["float32"])
            L += ["", f"One thread: `fit` at {min(t1) / b64:.2f}x the float64 bound loop; "
                  f"the same loop with float32 weights is {b64 / b32:.2f}x faster."]
        if n.get("exp"):
            e = n["exp"]
            L += ["", f"The epoch's {n['N']:,} x {n['K']:,} exponentials and their sums alone, "
                  f"one thread: {e['vexp']:.3g} s as the kernels make them (`vexp` and "
                  f"`lanesum`, {e['vexp'] / min(t1):.0%} of `fit`'s one-thread epoch), "
                  f"{e['libm']:.3g} s with libm's scalar `exp` summed in class order, "
                  f"{e['numpy']:.3g} s with NumPy's vectorised `np.exp` over the same values."]
        if tt:
            lay, v = min(tt.items(), key=lambda kv: kv[1])
            L += ["", f"PyTorch's fastest layout (`{lay}`) over `fit(..., threads=2)`, "
                  f"seconds per epoch: {v / min(t2):.2f}x (above 1: ours is faster)."]
        else:
            L += ["", f"PyTorch not timed: {n['torch']['note']}."]
        L.append("")
    return "\n".join(L)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small shapes, a smoke run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--real", nargs="*", choices=list(REAL), default=list(REAL),
                    help="the real data sets to time (none: --real with no name)")
    a = ap.parse_args(argv)
    res = run(a.quick, a.rounds, a.epochs, real=tuple(a.real))
    publish("softmax_sgd" + ("-quick" if a.quick else ""), res, markdown(res))


if __name__ == "__main__":
    main()
