"""Two threads against one, through ``fit``, per datapoint (issue 41, item 1).

For each data set and method this times ``fit(..., threads=1)`` and
``fit(..., threads=2)`` in the same run, alternating which goes first from seed to
seed, on

* ``many-classes``: the K = 18,000 shape of ``bench_many_classes*.py`` (N 20,000
  training rows, D 10,000, 50 non-zeros per row, uniform labels; ``bench_sgd.sparse_data``
  with seed 0), plus 5,000 held-out rows of the same generator as the test set (the
  labels carry no signal: the test log-loss only checks that both thread counts end at
  the same place);
* ``20news-words``: the real data set of notebooks 12 and 13 (K = 10,000, D = 10,000,
  4.35 non-zeros per row, 100,000 training rows), its test split as the test set.

Methods: ``umax`` (its Hogwild kernel: ``hogwild=True, threads=2``, or ``threads=2``
where the trainer has no ``hogwild`` option any more), ``implicit`` and
``implicit-batch`` (``n = m = 10``), and ``softmax-sgd`` when its trainer accepts
``threads`` (rows capped, see ``ROWS_CAP``). Rates: notebook 12's choices on
20news-words (U-max 0.01, Implicit SGD 0.1, n = m = 10 rate 10) and the many-class
harness's (0.01 and 10; Implicit SGD 1) on the synthetic shape; constant rate
(``lr_decay=1``), no evaluation during training.

Per run: microseconds per datapoint of training (``history.seconds`` differences over
epochs 2..E, the first epoch left out: page faults of the fresh weights), the test
log-loss after E epochs (``evaluate`` on 5,000 test rows, the same for every run)
and the load average after the run. At the start and the end it measures what two
threads can gain on the machine at that moment (:func:`ceiling`: pure arithmetic in a
``prange``, 1 thread's time over 2 threads'); on a loaded machine that ratio falls
towards 1 and the speedups with it. Per data set and method: the speedup (median
over seeds of the per-seed ratio ``t1 / t2``) and the test log-loss mean and spread
(min..max) of each thread count. The targets are 1.6x (the issue) and 1.5x (its
"done when"); the machine is shared, so the load average is reported with the results.

Usage: ``python benchmarks/bench_threads.py [--quick] [--epochs E] [--seeds S]
[--data NAME ...] [--methods NAME ...]``; writes
``benchmarks/results/threads[-quick].{json,md}``. ``--quick``: 5,000 synthetic and
20,000 20news-words training rows, 2 epochs, 2 seeds.
"""
from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import time

import numba
import numpy as np
import scipy.sparse as sp

from _common import machine_info, machine_line, publish

#: method -> (rate on many-classes, rate on 20news-words, fit options)
METHODS = {
    "umax": (0.01, 0.01, {}),
    "implicit": (1.0, 0.1, {}),
    "implicit-batch": (10.0, 10.0, {"batch_size": 10, "n_sampled": 10}),
    "softmax-sgd": (10.0, 100.0, {"batch_size": 100}),
}
#: training rows at most, per method (the full softmax costs K per datapoint)
ROWS_CAP = {"softmax-sgd": 2_000}
DATA = ("many-classes", "20news-words")
TEST_ROWS = 5_000


@numba.njit(parallel=True, cache=True)
def _busy(n, out):
    for c in numba.prange(out.shape[0]):
        acc = 0.0
        for i in range(n):
            acc += math.sqrt(i + c)
        out[c] = acc


def ceiling(n=100_000_000, repeats=2):
    """What two threads can gain on this machine now: the wall time of a fixed amount
    of pure arithmetic (two independent halves in a ``prange``) on 1 thread over that
    on 2, best of ``repeats`` alternating runs (about 2 on two idle cores; about 1 when
    the machine gives this process one core's share or less)."""
    out = np.zeros(2)
    _busy(10, out)
    best = {1: np.inf, 2: np.inf}
    from scalable_softmax.kernels.threads import numba_threads

    for _ in range(repeats):
        for T in (1, 2):
            with numba_threads(T):
                t0 = time.perf_counter()
                _busy(n // 2, out)
                best[T] = min(best[T], time.perf_counter() - t0)
    return {"seconds_1": best[1], "seconds_2": best[2], "ratio": best[1] / best[2]}


def _probe():
    X = sp.csr_matrix(np.eye(4))
    return X, np.arange(4)


def accepts(method: str, opts: dict) -> bool:
    """Whether ``method``'s trainer takes the options ``opts`` (an unknown option is a
    ``ValueError`` naming it)."""
    from scalable_softmax.methods import get_trainer_class
    X, y = _probe()
    try:
        get_trainer_class(method)(X, y, 4, **opts)
    except ValueError as exc:
        if "option" in str(exc):
            return False
        raise
    return True


def thread_options(method: str, threads: int):
    """The options that make ``method`` run on ``threads`` threads, or None when its
    trainer has no such option."""
    if method == "umax" and accepts("umax", {"hogwild": True, "threads": 2}):
        return {"hogwild": threads > 1, "threads": threads}
    if accepts(method, {"threads": 2}):
        return {"threads": threads}
    return None


def load(name: str, quick: bool):
    """``(X, y, Xt, yt, K)`` of a data set (training rows cut for ``--quick``)."""
    if name == "many-classes":
        from bench_sgd import sparse_data
        N, D, nnz, K = (5_000 if quick else 20_000), 10_000, 50, 18_000
        X, y = sparse_data(N + TEST_ROWS, D, nnz, K)
        return X[:N], y[:N], X[N:], y[N:], K
    from scalable_softmax.data import load_dataset
    tr, te = load_dataset(name, "train"), load_dataset(name, "test")
    n = 20_000 if quick else tr.X.shape[0]
    rows = np.random.default_rng(0).choice(te.X.shape[0], TEST_ROWS, replace=False)
    return tr.X[:n], tr.y[:n], te.X[rows], te.y[rows], tr.K


def run_one(X, y, Xt, yt, K, method, lr, opts, epochs, seed):
    """One ``fit``: microseconds per datapoint (epochs 2..E) and the test log-loss."""
    from scalable_softmax.evaluate import evaluate
    from scalable_softmax.fit import fit
    res = fit(X, y, method, lr, epochs=epochs, eval_epochs=[], progress=False, K=K,
              lr_decay=1.0, seed=seed, **opts)
    secs = np.diff(np.r_[0.0, res.history.seconds.to_numpy()])
    timed = secs[1:] if secs.size > 1 else secs
    out = {"us_per_point": float(timed.mean() / X.shape[0] * 1e6),
           "epoch_s": secs.tolist(),
           "diverged": bool(res.history["diverged"].any())}
    out["test_log_loss"] = (float(evaluate(Xt, yt, res.W).log_loss)
                            if not out["diverged"] else float("nan"))
    out["load_average"] = [round(v, 2) for v in os.getloadavg()]
    del res
    gc.collect()
    return out


def run(quick=False, epochs=None, seeds=None, data=DATA, methods=tuple(METHODS)):
    epochs = epochs or (2 if quick else 3)
    seeds = seeds or (2 if quick else 3)
    start = machine_info()
    res = {"machine": start, "quick": quick, "epochs": epochs, "seeds": seeds,
           "cases": {}, "skipped": {}, "ceiling_start": ceiling()}
    for name in data:
        X, y, Xt, yt, K = load(name, quick)
        for method in methods:
            o1, o2 = thread_options(method, 1), thread_options(method, 2)
            if o1 is None:
                res["skipped"][f"{name}/{method}"] = "the trainer takes no threads option"
                continue
            r_many, r_words, extra = METHODS[method]
            lr = r_many if name == "many-classes" else r_words
            n = min(X.shape[0], ROWS_CAP.get(method, X.shape[0]))
            runs = {1: [], 2: []}
            for s in range(seeds):
                for T in ((1, 2) if s % 2 == 0 else (2, 1)):
                    t0 = time.perf_counter()
                    r = run_one(X[:n], y[:n], Xt, yt, K, method, lr,
                                {**extra, **(o1 if T == 1 else o2)}, epochs, s)
                    r["wall_s"] = time.perf_counter() - t0
                    runs[T].append(r)
                    print(f"{name} {method} threads={T} seed={s}: "
                          f"{r['us_per_point']:.3g} us/point, test log-loss "
                          f"{r['test_log_loss']:.4f}, load {r['load_average']}",
                          file=sys.stderr, flush=True)
            ratio = [a["us_per_point"] / b["us_per_point"]
                     for a, b in zip(runs[1], runs[2])]
            res["cases"][f"{name}/{method}"] = {
                "data": name, "method": method, "lr": lr, "rows": n, "K": K,
                "options_1": o1, "options_2": o2, "runs": runs,
                "speedup_per_seed": ratio, "speedup": float(np.median(ratio))}
        del X, y, Xt, yt
        gc.collect()
    res["ceiling_end"] = ceiling()
    res["machine_end"] = machine_info()
    return res


def _loss(runs):
    v = np.array([r["test_log_loss"] for r in runs])
    return f"{v.mean():.4f} ({v.min():.4f}..{v.max():.4f})"


def markdown(res):
    lines = [f"# Two threads against one, through `fit` (issue 41, item 1)"
             f"{' (quick)' if res['quick'] else ''}", "",
             machine_line(res["machine"], res["machine_end"]), "",
             f"{res['epochs']} epochs at a constant rate, {res['seeds']} seeds; "
             "us/point: training time per datapoint over epochs 2..E (median over "
             "seeds); speedup: median of the per-seed ratios (targets 1.6x, at least "
             "1.5x); test log-loss: mean (min..max) over the seeds.", "",
             "What 2 threads can gain on this machine during the run (pure arithmetic "
             "in a numba prange, 1 thread's time over 2 threads'): "
             f"{res['ceiling_start']['ratio']:.2f}x at the start, "
             f"{res['ceiling_end']['ratio']:.2f}x at the end.", "",
             "| data | method | rows | us/point, 1 thread | us/point, 2 threads | "
             "speedup | test log-loss, 1 thread | test log-loss, 2 threads | "
             "load average (1 min) |",
             "|---|---|---:|---:|---:|---:|---|---|---|"]
    for c in res["cases"].values():
        t1 = np.median([r["us_per_point"] for r in c["runs"][1]])
        t2 = np.median([r["us_per_point"] for r in c["runs"][2]])
        load = [r["load_average"][0] for T in (1, 2) for r in c["runs"][T]]
        lines.append(f"| {c['data']} | {c['method']} | {c['rows']:,} | {t1:.3g} | "
                     f"{t2:.3g} | {c['speedup']:.2f}x | {_loss(c['runs'][1])} | "
                     f"{_loss(c['runs'][2])} | {min(load):.1f}..{max(load):.1f} |")
    if res["skipped"]:
        lines += ["", "Not run: " + "; ".join(f"{k} ({v})" for k, v in
                                              res["skipped"].items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--data", nargs="+", choices=DATA, default=list(DATA))
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    a = p.parse_args(argv)
    if a.epochs is not None and a.epochs < 1 or a.seeds is not None and a.seeds < 1:
        p.error("--epochs and --seeds must be at least 1")
    res = run(a.quick, a.epochs, a.seeds, tuple(a.data), tuple(a.methods))
    publish("threads" + ("-quick" if a.quick else ""), res, markdown(res))


if __name__ == "__main__":
    main()
