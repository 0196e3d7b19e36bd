"""Is the double sum held back in the race by its schedule? (issue 56): the race's
double-sum methods with slower learning-rate decays and the time to fill the cap, on
the race's own training rows and validation targets.

In notebooks 12 and 14 every method of ours runs at ``lr * 0.9**(epoch - 1)`` for at most
50 epochs (the ``paper-text`` protocol of :mod:`scalable_softmax.protocols`). The double
sum's epochs are cheap, so its runs finish the 50 epochs long before the race's cap
(66 of 66 in the record) at a rate below 1% of the first, while the full-softmax runs go
on to the cap: its result at the tight levels (+1%, +2%) may be the schedule's, not the
method's. This script answers that on validation data only (nothing here reads a test
split): for each workload it trains Implicit SGD (``implicit``, the race's
``implicit-batch`` with n = m = 1) and U-max (``umax``, one sampled class) through the
library's ``fit`` under the race's settings (``protocol="paper-text"``, ``mu = 0``, seed
0), on the training rows the race's validation split leaves, at each rate of the race's
grid (``params/race.yaml``) and each decay of ``--decays``, for as many epochs as about
``--budget`` times the race's cap takes at the speed of a pilot epoch (at most
``--max-epochs``); the validation log-loss on the race's validation rows is read at about
``--evals`` checkpoints per run. Per workload, decay and method: the lowest validation
log-loss over the workload's reference (``tables/targets.csv``) within the cap and over
the whole run, and the training seconds (wall, evaluation excluded; one thread) to each
of the race's levels (the reference plus 1%, 2%, 5% and 10%), for the rate that is
first to the 5% level (the race's rule), else the rate of the lowest log-loss.

Writes ``benchmarks/results/race_schedule[-<out>].{json,md}``. Usage: ``python
benchmarks/bench_race_schedule.py [--workloads bibtex,20news-words,K=1000,...]
[--methods implicit,umax] [--decays 0.9,0.97,0.99] [--budget 1] [--max-epochs 2000]
[--evals 60] [--out NAME]``. Workloads ``K=<k>`` are notebook 14's (20news-words with
the k most frequent words as classes, built as the race builds them).
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import yaml

from _common import machine_info, machine_line, publish

ROOT = Path(__file__).resolve().parents[1]
#: the race's levels: the reference plus these fractions
LEVELS = (0.01, 0.02, 0.05, 0.10)
#: the race's method -> (library method, the race's grid in params/race.yaml)
METHODS = {"implicit": "implicit-batch", "umax": "umax"}


def _race_params():
    with open(ROOT / "params" / "race.yaml") as fh:
        return yaml.safe_load(fh)["full"]


def _workloads(names, params, workdir):
    """``[(workload, data, cap)]`` for ``names`` (data sets of notebook 12, ``K=<k>``
    for notebook 14's)."""
    from scalable_softmax.repro.race.problems import build_problems

    nb12, nb14 = params["peers"], params["crossover"]
    out = []
    for name in names:
        if name.startswith("K="):
            K = int(name[2:])
            if K not in nb14["Ks"]:
                raise SystemExit(f"--workloads: K = {K} is not one of notebook 14's "
                                 f"{nb14['Ks']}")
            i = nb14["Ks"].index(K)
            paths, _ = build_problems([K], {K: nb14["max_points"][i]}, workdir)
            out.append((str(K), paths[K], float(nb14["caps"][i])))
        elif name in nb12["datasets"]:
            out.append((name, name, float(nb12["caps"][name])))
        else:
            raise SystemExit(f"--workloads: {name!r} is neither a data set of notebook 12 "
                             f"({', '.join(nb12['datasets'])}) nor K=<k>")
    return out


def _reference(workload):
    t = pd.read_csv(ROOT / "tables" / "targets.csv")
    t = t[(t.workload.astype(str) == workload) & t.sets_target]
    if len(t) != 1:
        raise SystemExit(f"tables/targets.csv has no target of workload {workload!r}")
    return float(t.reference_val_log_loss.iloc[0])


def _problem(data, params):
    """The race's training rows and validation rows of ``data`` (its own job_problem)."""
    from scalable_softmax.repro.race.problems import job_problem

    job = SimpleNamespace(data=data, split="race", holdout=float(params["val_fraction"]),
                          seed=0, eval_rows=params["val_rows"],
                          split_seed=int(params["split_seed"]))
    X, y, K, sets = job_problem(job)
    return X, y, K, sets["val"]


def _fit(problem, method, lr, decay, epochs, eval_epochs):
    """``fit`` on ``problem`` (``(X, y, K, val)``) as the race trains ``method``."""
    from scalable_softmax.fit import fit

    X, y, K, val = problem
    extra = {"n_sampled": 1} if method == "umax" else {}
    return fit(X, y, method, lr, epochs=epochs, lr_decay=decay, mu=0.0, seed=0, K=K,
               protocol="paper-text", eval_sets={"val": val}, eval_epochs=eval_epochs,
               progress=False, **extra)


def _checkpoints(epochs, evals):
    """About ``evals`` epochs from 0 to ``epochs``, dense early (a geometric grid)."""
    pts = np.unique(np.round(np.geomspace(1, epochs, max(2, evals))).astype(int))
    return sorted({0, *map(int, pts), int(epochs)})


def run_one(problem, method, lr, decay, cap, ref, a):
    """One run on ``problem`` (``(X, y, K, val)``) at the race's ``cap`` and reference
    ``ref`` (``a``: the command line's ``budget``, ``max_epochs``, ``evals``): the pilot
    epoch's speed sets the epochs; the row of the results."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pilot = _fit(problem, method, lr, decay, 1, [])
        per_epoch = float(pilot.history.seconds.iloc[-1])
        epochs = int(min(a.max_epochs, max(1, math.ceil(a.budget * cap
                                                          / max(per_epoch, 1e-6)))))
        t0 = time.perf_counter()
        res = _fit(problem, method, lr, decay, epochs, _checkpoints(epochs, a.evals))
        wall = time.perf_counter() - t0
    h = res.history[res.history.evaluated]
    ll, sec = h.val_log_loss.to_numpy(float), h.seconds.to_numpy(float)
    ok = np.isfinite(ll)
    row = {"method": method, "lr": lr, "decay": decay, "epochs": epochs,
           "seconds_per_epoch": per_epoch, "diverged": bool(res.diverged),
           "run_wall_seconds": wall,
           "best_ratio": float(np.min(ll[ok]) / ref) if ok.any() else math.nan,
           "best_ratio_in_cap": (float(np.min(ll[ok & (sec <= cap)]) / ref)
                                 if (ok & (sec <= cap)).any() else math.nan),
           "last_ratio": float(ll[-1] / ref) if ok[-1] else math.nan}
    for lev in LEVELS:
        hit = np.flatnonzero(ok & (ll <= ref * (1 + lev)))
        row[f"seconds_to_{int(lev * 100)}pct"] = float(sec[hit[0]]) if hit.size else None
        row[f"epoch_to_{int(lev * 100)}pct"] = int(h.epoch.iloc[hit[0]]) if hit.size else None
    return row


def _chosen(rows):
    """The race's rule on the rows of one (workload, method, decay): first to the 5%
    level, else the lowest validation log-loss within the cap."""
    hit = [r for r in rows if r["seconds_to_5pct"] is not None
           and r["seconds_to_5pct"] <= r["cap"]]
    if hit:
        return min(hit, key=lambda r: r["seconds_to_5pct"])
    fin = [r for r in rows if not math.isnan(r["best_ratio_in_cap"])]
    return min(fin, key=lambda r: r["best_ratio_in_cap"]) if fin else rows[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default="bibtex,delicious,eurlex-surrogate,"
                    "wikismall-surrogate,20news-words")
    ap.add_argument("--methods", default="implicit,umax")
    ap.add_argument("--decays", default="0.9,0.97,0.99")
    ap.add_argument("--budget", type=float, default=1.0,
                    help="train for about this many times the race's cap")
    ap.add_argument("--max-epochs", type=int, default=2000)
    ap.add_argument("--evals", type=int, default=60, help="checkpoints per run")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    import numba

    numba.set_num_threads(1)
    params = _race_params()
    decays = [float(d) for d in a.decays.split(",")]
    methods = a.methods.split(",")
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"--methods: {m!r} is not one of {', '.join(METHODS)}")
    m0 = machine_info()
    rows = []
    workdir = ROOT / "build" / "bench-race-schedule"
    for workload, data, cap in _workloads(a.workloads.split(","), params, workdir):
        ref = _reference(workload)
        problem = _problem(data, params)
        for method in methods:
            for decay in decays:
                for lr in params["grids"][METHODS[method]]:
                    r = run_one(problem, method, float(lr), decay, cap, ref, a)
                    r.update(workload=workload, cap=cap, reference=ref)
                    rows.append(r)
                    print(f"{workload} {method} lr {lr:g} decay {decay:g}: "
                          f"{r['epochs']} epochs, best {r['best_ratio']:.4f}, in cap "
                          f"{r['best_ratio_in_cap']:.4f}, to 5% {r['seconds_to_5pct']}",
                          flush=True)
    m1 = machine_info()
    chosen = [_chosen(g.to_dict("records")) for _, g in pd.DataFrame(rows).groupby(
        ["workload", "method", "decay"], sort=False)]
    _publish(a, m0, m1, rows, chosen, decays)


def _publish(a, m0, m1, rows, chosen, decays):
    cols = ["workload", "cap", "method", "decay", "lr", "epochs", "best_ratio_in_cap",
            "best_ratio", "seconds_to_1pct", "seconds_to_2pct", "seconds_to_5pct",
            "seconds_to_10pct"]
    fmt = pd.DataFrame(chosen)[cols].to_markdown(index=False, floatfmt=".4g")
    every = pd.DataFrame(rows)[cols + ["seconds_per_epoch", "diverged"]].to_markdown(
        index=False, floatfmt=".4g")
    md = (f"# The double sum in the race with slower schedules (validation only)\n\n"
          f"Written by `benchmarks/bench_race_schedule.py`. {machine_line(m0, m1)} "
          f"The race's training rows and validation rows (`params/race.yaml`), its grids "
          f"of rates, decays {', '.join(f'{d:g}' for d in decays)} per epoch, about "
          f"{a.budget:g} x the race's cap of training (at most {a.max_epochs} epochs), "
          f"one thread, seed 0; ratios are validation log-loss over the workload's "
          f"reference in `tables/targets.csv`; seconds are training wall seconds "
          f"(evaluation excluded) to the first checkpoint at the level, or empty. The "
          f"race's own schedules are params/race.yaml's `decays` and `max_epochs` (0.9 and 50 "
          f"before this study).\n\n"
          f"## Per workload, method and decay: the rate the race's rule picks\n\n{fmt}\n\n"
          f"## Every run\n\n{every}\n")
    stem = "race_schedule" + (f"-{a.out}" if a.out else "")
    publish(stem, {"machine_start": m0, "machine_end": m1, "args": vars(a),
                   "rows": rows, "chosen": chosen}, md)


if __name__ == "__main__":
    main()
