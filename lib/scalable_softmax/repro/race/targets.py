"""The race's targets, fixed before it from reference runs (``make targets``).

For every workload of notebooks 12 (a data set) and 14 (``20news-words`` at a number of
classes K), each reference method (full-softmax SGD, ours and PyTorch's, and exact
L-BFGS where it fits in memory) is

1. tuned: every rate of its grid (times its structural options, if any) trains for the
   race's cap on the training rows the validation split leaves
   (:func:`~.split.validation_split`), and the lowest validation log-loss at the end
   chooses (:func:`.run.choose_rates`; L-BFGS has no rate);
2. run: the chosen configuration trains for ``factor`` (at least 5) times the cap,
   evaluated on the validation rows at checkpoints ``sqrt(2)`` apart; its reference is
   the lowest validation log-loss of those checkpoints.

The workload's reference validation log-loss is the lowest of its methods' references
(``sets_target`` marks it); the race's levels are that reference plus 1%, 2%, 5% and 10%
(:func:`~.scoring.target_levels`). The test rows are never loaded.

``tables/targets.csv`` has one row per workload and reference method: ``notebook``,
``workload``, ``reference_method``, ``lr``, ``config``, ``status``,
``reference_seconds`` (the training seconds the reference run got), ``cap_seconds`` (the
race's cap), ``reference_val_log_loss``, ``sets_target``, ``val_rows`` and
``split_seed``. ``make targets`` writes it; it is not part of ``make reproduce-extra``::

    python -m scalable_softmax.repro.race.targets [--profile full|smoke] [--out CSV]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

__all__ = ["REFERENCE_METHODS", "MIN_FACTOR", "COLUMNS", "workloads", "reference_runs",
           "make_targets", "write_targets", "load_targets", "reference_of", "main"]

#: the methods whose tuned long runs fix the targets
REFERENCE_METHODS = ("softmax-sgd", "torch-sgd", "exact")
#: the reference runs get at least this many times the race's cap
MIN_FACTOR = 5.0
COLUMNS = ["notebook", "workload", "reference_method", "lr", "config", "status",
           "reference_seconds", "cap_seconds", "reference_val_log_loss", "sets_target",
           "val_rows", "split_seed"]


def workloads(params: dict, workdir) -> list[dict]:
    """The workloads of ``params`` (a profile of ``params/targets.yaml``): one dict per
    workload, ``notebook``, ``workload`` (a data set name, or K as an int), ``data``
    (a loader name or the ``.npz`` of a built problem) and ``cap`` (the race's cap)."""
    from scalable_softmax.repro.race import problems

    out = []
    nb12 = params.get("peers") or {}
    for d in nb12.get("datasets", []):
        out.append({"notebook": "12-peers", "workload": d, "data": d,
                    "cap": float(nb12["caps"][d])})
    nb14 = params.get("crossover") or {}
    if nb14.get("Ks"):
        Ks = [int(k) for k in nb14["Ks"]]
        caps = dict(zip(Ks, nb14["caps"]))
        paths, _ = problems.build_problems(Ks, dict(zip(Ks, nb14["max_points"])),
                                            Path(workdir) / "crossover")
        for K in Ks:
            out.append({"notebook": "14-crossover", "workload": K, "data": paths[K],
                        "cap": float(caps[K])})
    return out


def reference_runs(w: dict, *, methods, grids, structures, options, factor, holdout,
                   split_seed, eval_rows, max_epochs, threads, memory_cap_gb,
                   wall_extra=90.0, isolate="method", say=print) -> list[dict]:
    """Tune and run every reference method of ``methods`` on the workload ``w``
    (:func:`workloads`); one row per method (see :data:`COLUMNS`). ``isolate``: one
    child process per method, or ``"none"`` (in this process, :func:`.run.run_grouped`)."""
    from scalable_softmax.repro.race import jobs as _jobs
    from scalable_softmax.repro.race.methods import RATE_METHODS, available, library_of
    from scalable_softmax.repro.race.run import candidates, choose_rates, config_label, run_grouped

    iso = "none" if isolate == "none" else "method"

    if factor < MIN_FACTOR:
        raise ValueError(f"factor must be at least {MIN_FACTOR:g} (the references run at "
                         f"least 5x the race's cap); got {factor!r}")
    rows = []
    common = dict(split="race", holdout=holdout, split_seed=split_seed,
                  eval_rows=eval_rows, max_epochs=max_epochs, threads=threads, seed=0)
    for m in methods:
        ok, why = available(library_of(m))
        base = {"notebook": w["notebook"], "workload": w["workload"],
                "reference_method": m, "cap_seconds": w["cap"], "val_rows": eval_rows,
                "split_seed": split_seed}
        if not ok:
            rows.append({**base, "lr": math.nan, "config": "", "status": f"skipped: {why}",
                         "reference_seconds": math.nan,
                         "reference_val_log_loss": math.nan})
            continue
        lr, opts, config = None, dict(options.get(m, {})), ""
        if m in RATE_METHODS:
            jobs, structs = [], []
            for rate, st in candidates(m, grids, structures):
                jobs.append(_jobs.Job(w["data"], m, rate, w["cap"],
                                      options=dict(opts, **st), **common))
                structs.append(st)
            results = run_grouped(jobs, isolate=iso, memory_cap_gb=memory_cap_gb,
                                  threads=threads, wall_extra=wall_extra)
            tuning = []
            for r, st in zip(results, structs):
                pts = r["points"]
                val = pts[-1].get("val_log_loss", math.inf) if pts and r["status"] in (
                    "completed", "time cap") else math.inf
                tuning.append({"dataset": str(w["workload"]), "method": m,
                               "lr": r["job"]["lr"], "config": config_label(st),
                               "options": json.dumps(st, sort_keys=True),
                               "val_log_loss": float(val),
                               "layout": r.get("info", {}).get("layout", "")})
            chosen = choose_rates(pd.DataFrame(tuning)).iloc[0]
            lr, config = float(chosen.lr), chosen.config
            opts.update(json.loads(chosen.options))
            if chosen.layout:
                opts["layout"] = chosen.layout
        seconds = factor * w["cap"]
        job = _jobs.Job(w["data"], m, lr, seconds, options=opts,
                        checkpoints=_jobs.checkpoint_times(seconds), **common)
        res = run_grouped([job], isolate=iso, memory_cap_gb=memory_cap_gb,
                          threads=threads, wall_extra=wall_extra)[0]
        vals = [p.get("val_log_loss", math.inf) for p in res["points"]]
        vals = [v for v in vals if math.isfinite(v)]
        ran = res["status"] in ("completed", "time cap")
        rows.append({**base, "lr": math.nan if lr is None else lr, "config": config,
                     "status": res["status"] if ran and vals else
                     f"{res['status']}: {res.get('reason', '')[:120]}",
                     "reference_seconds": float(res.get("train_seconds", math.nan)),
                     "reference_val_log_loss": min(vals) if ran and vals else math.nan})
        say(f"targets {w['notebook']} {w['workload']} / {m}: "
            f"{rows[-1]['reference_val_log_loss']:.4f} after "
            f"{rows[-1]['reference_seconds']:.1f} s ({rows[-1]['status']})")
    return rows


def make_targets(params: dict, workdir, say=print) -> pd.DataFrame:
    """Every workload's reference runs (:func:`reference_runs`) under ``params``, with
    ``sets_target`` on each workload's lowest reference."""
    rows = []
    for w in workloads(params, workdir):
        rows += reference_runs(
            w, methods=params.get("methods", REFERENCE_METHODS), grids=params["grids"],
            structures=params.get("structures"), options=params.get("options", {}),
            factor=float(params.get("factor", MIN_FACTOR)), holdout=params["val_fraction"],
            split_seed=int(params.get("split_seed", 0)), eval_rows=params.get("val_rows"),
            max_epochs=int(params.get("max_epochs", 50)),
            threads=int(params.get("threads", 2)),
            memory_cap_gb=float(params.get("memory_cap_gb", 8.0)),
            isolate=params.get("isolate", "method"), say=say)
    t = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "sets_target"])
    v = pd.to_numeric(t.reference_val_log_loss, errors="coerce")
    best = v.groupby([t.notebook, t.workload.astype(str)]).transform("min")
    t.insert(COLUMNS.index("sets_target"), "sets_target", (v == best) & v.notna())
    return t[COLUMNS]


def write_targets(table: pd.DataFrame, path) -> Path:
    """Write ``table`` (:func:`make_targets`) to ``path`` atomically."""
    from scalable_softmax._atomic import atomic_open

    missing = set(COLUMNS) - set(table.columns)
    if missing:
        raise ValueError(f"the targets table lacks the columns {sorted(missing)}")
    path = Path(path)
    with atomic_open(path, "w") as fh:
        table[COLUMNS].to_csv(fh, index=False)
    return path


def load_targets(path) -> pd.DataFrame:
    """``tables/targets.csv`` as written by :func:`write_targets`; a clear error when it
    is missing or lacks a column."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no targets; run `make targets` (the reference "
                                "runs, python -m scalable_softmax.repro.race.targets)")
    t = pd.read_csv(path)
    missing = set(COLUMNS) - set(t.columns)
    if missing:
        raise ValueError(f"{path}: lacks the columns {sorted(missing)}; rerun make targets")
    return t


def reference_of(table: pd.DataFrame, notebook: str, workload) -> float:
    """The workload's reference validation log-loss (its ``sets_target`` row); a
    LookupError naming the file's workloads when it has none."""
    sel = table[(table.notebook == notebook) & (table.workload.astype(str) == str(workload))
                & table.sets_target.astype(bool)]
    if not len(sel):
        have = sorted(set(table.workload[table.notebook == notebook].astype(str)))
        raise LookupError(f"no target for {notebook} workload {workload!r} (targets for "
                          f"{have}); run make targets")
    return float(sel.reference_val_log_loss.iloc[0])


def main(argv=None) -> int:
    from scalable_softmax import paths
    from scalable_softmax.repro.machinery import runner

    ap = argparse.ArgumentParser(prog="python -m scalable_softmax.repro.race.targets",
                                 description="Run the race's reference runs and write "
                                             "tables/targets.csv (make targets).")
    ap.add_argument("--profile", default="full", choices=["full", "smoke"])
    ap.add_argument("--out", default=None, help="default: tables/targets.csv (full), "
                    "build/targets-smoke.csv (smoke)")
    args = ap.parse_args(argv)
    params = runner.load_params("targets", args.profile)
    if not params:
        print(f"params/targets.yaml has no profile {args.profile!r}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else (
        paths.TABLES / "targets.csv" if args.profile == "full"
        else paths.ROOT / "build" / "targets-smoke.csv")
    table = make_targets(params, paths.ROOT / "build" / "targets")
    write_targets(table, out)
    print(f"wrote {out} ({len(table)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
