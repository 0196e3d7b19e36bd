"""Many-class steps through the public path, ``fit``, against the harness of
``bench_many_classes.py`` (issue 33, item 3).

``bench_many_classes.py`` times U-max (m = 1 and 10) and implicit-batch (n = m = 10)
epoch by epoch interleaved with its bound loops, all sharing one 1.4 GB weight matrix.
A user runs ``fit`` instead, one method per process. This script times the same three
steps on the same data (N 20,000, D 10,000, K 18,000, 50 non-zeros per row, uniform
labels, same generator and seed) three ways, each case in a process of its own (fresh
memory), cases run in ``--rounds`` rounds in rotating order so that the load of the
shared machine spreads over them:

* ``fit``: ``fit(X, y, method, lr, epochs=E, eval_epochs=[], progress=False,
  lr_decay=1)`` (the harness's constant rate); the
  seconds per epoch are the differences of ``history.seconds`` (training time, no
  monitoring), first epoch left out (page faults of the fresh weights);
* ``alone``: the harness's runner (``trainer.run_epoch`` on a random permutation,
  constant rate) for that one method in its own process, its own weights;
* ``shared``: the harness's setting before this measurement, the three methods on one
  shared weight matrix, epochs interleaved (without the bound loops). On the matrix
  U-max trains, implicit-batch's Newton solve needed about half its iterations, which
  made it look cheaper than through ``fit``; the harness now gives it its own matrix.

Per case it also reports the process's minor page faults during the timed epochs and
how much of its memory sits in transparent huge pages (``AnonHugePages`` of
``/proc/self/smaps_rollup``): random reads of a 1.4 GB matrix miss the TLB on 4 KB
pages and mostly hit it on 2 MB pages.

Usage: ``python benchmarks/bench_many_classes_fit.py [--quick] [--epochs E]
[--rounds R]``; writes ``benchmarks/results/many_classes_fit[-quick].{json,md}``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from _common import RESULTS, machine_info, machine_line, publish

METHODS = {  # name -> (fit method, lr, options of fit and of the trainer)
    "umax_m1": ("umax", 0.01, {"n_sampled": 1}),
    "umax_m10": ("umax", 0.01, {"n_sampled": 10}),
    "implicit_batch_n10_m10": ("implicit-batch", 10.0, {"batch_size": 10, "n_sampled": 10}),
}
SETTINGS = ("fit", "alone", "shared")


def _shape(quick):
    return (5_000, 10_000, 50, 18_000) if quick else (20_000, 10_000, 50, 18_000)


def _huge_kb():
    """``AnonHugePages`` of this process in kB (0 where the kernel does not say)."""
    try:
        for line in open("/proc/self/smaps_rollup"):
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _trainer(name, X, y, K, W=None):
    from scalable_softmax.methods import sgd
    from scalable_softmax.methods.implicit_batch import ImplicitBatchTrainer
    lr, opts = METHODS[name][1:]
    if name.startswith("umax"):
        t = sgd.UmaxTrainer(X, y, K, n_sampled=opts["n_sampled"])
        t.init_params("zero")
    else:
        t = ImplicitBatchTrainer(X, y, K, batch_size=opts["batch_size"],
                                 n_sampled=opts["n_sampled"])
        t.init_params("zero")
    if W is not None:
        t.W = W
    t.warmup()
    return t, lr


def _epoch(trainer, lr, order, e):
    rep = trainer.run_epoch(order, lr, 1000 + e)
    if rep.diverged_at >= 0:
        raise RuntimeError(f"{trainer.name} diverged at {rep.diverged_at}")
    return (rep.extra or {}).get("newton_iterations_mean")


def run_case(setting, name, quick, epochs):
    """One case in this process; returns seconds per epoch (wall, CPU) and memory facts."""
    from bench_sgd import sparse_data
    N, D, nnz, K = _shape(quick)
    X, y = sparse_data(N, D, nnz, K)
    out = {"setting": setting, "method": name}
    if setting == "fit":
        from scalable_softmax.fit import fit
        method, lr, opts = METHODS[name]
        f0 = _faults()
        c0 = time.process_time()
        res = fit(X, y, method, lr, epochs=epochs + 1, eval_epochs=[], progress=False,
                  K=K, lr_decay=1.0, **opts)
        cpu = time.process_time() - c0
        secs = np.diff(res.history.seconds.to_numpy())
        out.update(epoch_s=secs[1:].tolist(), first_epoch_s=float(secs[0]),
                   faults_all=_faults() - f0, cpu_all_s=cpu,
                   cpu_train_share=float(res.history.seconds.iloc[-1]) / cpu)
        if "newton_iterations_mean" in res.extra:
            out["newton"] = res.extra["newton_iterations_mean"].iloc[1:].tolist()
    else:
        rng = np.random.default_rng(0)
        names = [name] if setting == "alone" else list(METHODS)
        W = None
        trainers = {}
        for n in names:
            trainers[n] = _trainer(n, X, y, K, W)
            W = trainers[n][0].W if setting == "shared" else None
        if setting == "shared":
            trainers["implicit_batch_n10_m10"][0].u = np.zeros(N)
        for t, lr in trainers.values():            # the harness's warm-up epoch
            _epoch(t, lr, rng.permutation(N), 0)
        times = {n: [] for n in names}
        cpus = {n: [] for n in names}
        faults = {n: 0 for n in names}
        newton = {n: [] for n in names}
        for e in range(epochs):
            for n, (t, lr) in trainers.items():
                order = rng.permutation(N)
                f0, c0, t0 = _faults(), time.process_time(), time.perf_counter()
                newton[n].append(_epoch(t, lr, order, e + 1))
                times[n].append(time.perf_counter() - t0)
                cpus[n].append(time.process_time() - c0)
                faults[n] += _faults() - f0
        out.update(epoch_s=times[name], cpu_epoch_s=cpus[name], faults_timed=faults[name])
        if newton[name][0] is not None:
            out["newton"] = newton[name]
    out["anon_huge_MB"] = _huge_kb() / 1024
    out["maxrss_MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["N"] = N
    return out


def run(quick=False, epochs=8, rounds=2):
    cases = [(s, m) for m in METHODS for s in SETTINGS]
    results = {f"{s}/{m}": [] for s, m in cases}
    res = {"machine": machine_info(), "quick": quick, "epochs": epochs, "rounds": rounds,
           "shape": dict(zip(("N", "D", "nnz_per_row", "K"), _shape(quick)))}
    for r in range(rounds):
        k = r % len(cases)
        for s, m in cases[k:] + cases[:k]:
            cmd = [sys.executable, __file__, "--case", s, m, "--epochs", str(epochs)]
            if quick:
                cmd.append("--quick")
            p = subprocess.run(cmd, capture_output=True, text=True, check=True,
                               cwd=os.path.dirname(os.path.abspath(__file__)))
            one = json.loads(p.stdout.strip().splitlines()[-1])
            results[f"{s}/{m}"].append(one)
            print(s, m, f"{1e6 * min(one['epoch_s']) / one['N']:.3f} us/datapoint",
                  flush=True)
    res["cases"] = results
    res["machine_end"] = machine_info()
    return res


def us_best(runs):
    """Best seconds per epoch over every round, as microseconds per datapoint."""
    return min(min(r["epoch_s"]) for r in runs) * 1e6 / runs[0]["N"]


def us_median(runs):
    return float(np.median([t for r in runs for t in r["epoch_s"]])) * 1e6 / runs[0]["N"]


def _newton(runs):
    its = [x for r in runs for x in r.get("newton", [])]
    return f"{np.mean(its):.2f}" if its else ""


def markdown(res):
    c = res["cases"]
    s = res["shape"]
    L = ["# Many-class steps through `fit` and in the benchmark harness", "",
         "Written by `benchmarks/bench_many_classes_fit.py`. "
         + machine_line(res["machine"], res["machine_end"]) + " "
         f"N = {s['N']:,}, D = {s['D']:,}, K = {s['K']:,}, {s['nnz_per_row']} non-zeros "
         f"per row; {res['epochs']} timed epochs per case and round, {res['rounds']} "
         "rounds, every case in a fresh process.", "",
         "`fit`: the public path, one method per process; `alone`: the harness's runner "
         "for one method in its own process; `shared`: the harness's setting before this "
         "measurement (one weight matrix for the three methods, epochs interleaved; it now "
         "gives implicit-batch its own). Huge pages: the process's "
         "`AnonHugePages` at the end; faults: minor page faults during the timed epochs "
         "(for `fit`, of the whole call); Newton iterations: implicit-batch's mean per step "
         "over the timed epochs (every setting keeps the rate constant: `lr_decay=1` in "
         "`fit`).", "",
         "| method | setting | us/datapoint (best) | us/datapoint (median) | huge pages (MB) "
         "| page faults | Newton iterations per step |", "|---|---|---|---|---|---|---|"]
    for m in METHODS:
        for st in SETTINGS:
            runs = c[f"{st}/{m}"]
            fl = [r.get("faults_timed", r.get("faults_all")) for r in runs]
            L.append(f"| {m} | {st} | {us_best(runs):.3f} | {us_median(runs):.3f} | "
                     f"{min(r['anon_huge_MB'] for r in runs):.0f}-"
                     f"{max(r['anon_huge_MB'] for r in runs):.0f} | "
                     f"{min(fl):,}-{max(fl):,} | {_newton(runs)} |")
    L += ["", "| ratio | fit | alone | shared |", "|---|---|---|---|"]
    for m in ("umax_m10", "implicit_batch_n10_m10"):
        vals = [us_best(c[f"{st}/{m}"]) / us_best(c[f"{st}/umax_m1"]) for st in SETTINGS]
        L.append(f"| {m} / umax_m1 (best) | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 5,000, a smoke run")
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--case", nargs=2, metavar=("SETTING", "METHOD"),
                    help="run one case in this process and print its JSON (internal)")
    ap.add_argument("--markdown-only", action="store_true")
    args = ap.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(*args.case, args.quick, args.epochs)))
        return
    stem = "many_classes_fit-quick" if args.quick else "many_classes_fit"
    if args.markdown_only:
        res = json.loads((RESULTS / f"{stem}.json").read_text())
    else:
        res = run(args.quick, args.epochs, args.rounds)
    publish(stem, res, markdown(res))


if __name__ == "__main__":
    main()
