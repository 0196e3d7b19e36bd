"""The race of notebook 12 or 14 to the targets of ``tables/targets.csv``, end to end::

    python -m scalable_softmax.repro.race.cli 12-peers     [--profile full|smoke] [--out DIR]
    python -m scalable_softmax.repro.race.cli 14-crossover [--profile full|smoke] [--out DIR]

Per workload (:func:`race_notebook`): the reference of ``tables/targets.csv`` gives the
target levels (:func:`~.scoring.target_levels`), every method with a rate is tuned by
its time to the 5% target on validation within ``tune_fraction`` of the cap (then by its
last validation log-loss; :func:`~.run.tune`, :func:`~.run.choose`), and
every chosen configuration runs with every seed (:func:`~.run.run_seeds`). Writes
``<notebook>-targets.csv`` (one row per workload x method x level x seed),
``<notebook>-targets-verdicts.csv`` (per workload and level: a family, ``tie`` or
``none``), ``<notebook>-targets-tuning.csv`` (every candidate) and
``<notebook>-targets-curves.csv`` (every seeded run's validation checkpoints) to ``DIR``
(default: ``tables/`` for full, ``build/race-smoke/`` for smoke), the performance
profiles per family and per method (``<notebook>-targets-profile-{family,method}.png``)
and the learning curves (``<notebook>-targets-curves.png``), in ``figures/`` for full.
Parameters: ``params/race.yaml``. A race stopped before its end (a timeout, a killed
kernel) resumes when rerun: each finished workload is kept in a journal until the race
ends (:mod:`~.journal`).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from scalable_softmax.repro.race import journal, run, scoring, targets

__all__ = ["NOTEBOOKS", "RaceTables", "race_workloads", "race_notebook", "write_tables",
           "main"]

#: notebook -> its section of params/race.yaml
NOTEBOOKS = {"12-peers": "peers", "14-crossover": "crossover"}


class RaceTables(NamedTuple):
    """What :func:`race_notebook` returns: the targets rows
    (:data:`~.run.TARGET_COLUMNS`), the verdicts (:data:`~.run.VERDICT_COLUMNS`), every
    tuning candidate, and the seeded runs' learning curves on validation
    (:data:`~.run.CURVE_COLUMNS`)."""

    rows: pd.DataFrame
    verdicts: pd.DataFrame
    tuning: pd.DataFrame
    curves: pd.DataFrame


def race_workloads(notebook: str, params: dict, workdir) -> list[dict]:
    """The workloads of ``notebook`` under ``params``: ``workload``, ``data``, ``cap``,
    ``methods``."""
    from scalable_softmax.repro.race import problems

    sec = params[NOTEBOOKS[notebook]]
    if notebook == "12-peers":
        return [{"workload": d, "data": d, "cap": float(sec["caps"][d]),
                 "methods": list(sec["methods"])} for d in sec["datasets"]]
    Ks = [int(k) for k in sec["Ks"]]
    paths, _ = problems.build_problems(Ks, dict(zip(Ks, sec["max_points"])),
                                        Path(workdir) / "crossover")
    return [{"workload": K, "data": paths[K], "cap": float(c), "methods": list(sec["methods"])}
            for K, c in zip(Ks, sec["caps"])]


def _check_split(table, params, path):
    for col, key in (("split_seed", "split_seed"), ("val_rows", "val_rows")):
        got = set(pd.to_numeric(table[col], errors="coerce").dropna().astype(int))
        if got and got != {int(params[key])}:
            raise ValueError(f"{path}: made with {col} {sorted(got)}, but the race uses "
                             f"{params[key]} (params/race.yaml); rerun make targets or "
                             "align the parameters")


def race_notebook(notebook: str, params: dict, targets_table: pd.DataFrame, workdir,
                  say=print):
    """Race every workload of ``notebook``: returns :class:`RaceTables` ``(rows,
    verdicts, tuning, curves)``.

    Each finished workload is kept in the journal ``<workdir>/journal/<notebook>/``
    (:mod:`~.journal`) until the whole race ends, so a rerun of a stopped race (same
    parameters, code, libraries, targets and data) reads its finished workloads back,
    saying so, instead of racing them again; the journal is cleared at the end."""
    if notebook not in NOTEBOOKS:
        raise ValueError(f"notebook must be one of {list(NOTEBOOKS)}; got {notebook!r}")
    common = dict(holdout=float(params["val_fraction"]), split_seed=int(params["split_seed"]),
                  eval_rows=params.get("val_rows"), max_epochs=int(params["max_epochs"]),
                  threads=int(params["threads"]),
                  memory_cap_gb=float(params["memory_cap_gb"]),
                  first_checkpoint=float(params["first_checkpoint"]),
                  isolate=params.get("isolate", "method"))
    book = journal.Journal(Path(workdir) / "journal", notebook)
    code = journal.code_version()
    all_rows, all_tuning, all_curves = [], [], []
    for w in race_workloads(notebook, params, workdir):
        t0 = time.perf_counter()
        ref = targets.reference_of(targets_table, notebook, w["workload"])
        key = journal.race_key(notebook, w["workload"], params, ref, w["data"], code)
        kept = book.read(w["workload"], key)
        if kept is not None:
            all_rows.append(kept["rows"])
            all_curves.append(kept["curves"])
            all_tuning.append(kept["tuning"])
            say(f"race {notebook} {w['workload']}: read back from the journal of a stopped "
                f"run of this race ({book.path(w['workload'])}): {len(kept['tuning'])} "
                f"tuning runs, {len(kept['rows'])} targets rows, {kept['seconds']:.1f} s when "
                "it ran")
            continue
        levels = scoring.target_levels(ref)
        tuning = run.tune(w["workload"], w["data"], w["methods"], grids=params["grids"],
                          structures=params.get("structures") or None,
                          decays=params.get("decays"),
                          options=params.get("options", {}), targets=levels,
                          cap=w["cap"] * float(params.get("tune_fraction", 1.0)), **common)
        chosen = run.choose(tuning) if len(tuning) else tuning
        results = run.run_seeds(w["workload"], w["data"], w["methods"], chosen,
                                seeds=list(params["seeds"]),
                                options=params.get("options", {}), targets=levels,
                                cap=w["cap"], **common)
        all_rows.append(run.target_rows(results, levels))
        all_curves.append(run.curve_rows(results))
        all_tuning.append(tuning)
        seconds = time.perf_counter() - t0
        book.write(w["workload"], key, tuning=tuning, rows=all_rows[-1],
                   curves=all_curves[-1], seconds=seconds)
        say(f"race {notebook} {w['workload']}: {len(tuning)} tuning runs, "
            f"{len(results)} seeded runs, {seconds:.1f} s")
    book.clear()
    rows = pd.concat(all_rows, ignore_index=True)
    return RaceTables(rows, run.verdict_table(rows), pd.concat(all_tuning, ignore_index=True),
                      pd.concat(all_curves, ignore_index=True))


def write_tables(notebook, rows, verdicts, tuning, out_dir, curves=None) -> list[Path]:
    """Write the three tables (and ``curves``, when given) atomically under
    ``out_dir``."""
    from scalable_softmax._atomic import atomic_open

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, t in ((f"{notebook}-targets", rows), (f"{notebook}-targets-verdicts", verdicts),
                    (f"{notebook}-targets-tuning", tuning),
                    *([(f"{notebook}-targets-curves", curves)] if curves is not None
                      else [])):
        path = out_dir / f"{name}.csv"
        with atomic_open(path, "w") as fh:
            t.to_csv(fh, index=False)
        written.append(path)
    return written


def main(argv=None) -> int:
    from scalable_softmax import paths
    from scalable_softmax.repro.machinery import runner

    ap = argparse.ArgumentParser(prog="python -m scalable_softmax.repro.race.cli",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("notebook", choices=list(NOTEBOOKS))
    ap.add_argument("--profile", default="full", choices=["full", "smoke"])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    params = runner.load_params("race", args.profile)
    tpath = paths.ROOT / params["targets"]
    if args.profile == "smoke" and not tpath.is_file():
        targets.write_targets(targets.make_targets(runner.load_params("targets", "smoke"),
                                                   paths.ROOT / "build" / "targets"), tpath)
    table = targets.load_targets(tpath)
    _check_split(table, params, tpath)
    out = Path(args.out) if args.out else (paths.TABLES if args.profile == "full"
                                           else paths.ROOT / "build" / "race-smoke")
    t0 = time.perf_counter()
    rows, verdicts, tuning, curves = race_notebook(args.notebook, params, table,
                                                   paths.ROOT / "build" / "race")
    for p in write_tables(args.notebook, rows, verdicts, tuning, out, curves=curves):
        print(f"wrote {p}")
    import matplotlib
    matplotlib.use("Agg")
    from scalable_softmax.repro.race import plots

    figs = paths.FIGURES if args.profile == "full" else out
    figs.mkdir(parents=True, exist_ok=True)
    for by in ("family", "method"):
        path = figs / f"{args.notebook}-targets-profile-{by}.png"
        plots.profile_figure(rows, by=by).savefig(path, dpi=150, bbox_inches="tight")
        print(f"wrote {path}")
    path = figs / f"{args.notebook}-targets-curves.png"
    plots.curves_figure(curves, plots.targets_of(rows)).savefig(path, dpi=150,
                                                                bbox_inches="tight")
    print(f"wrote {path}")
    print(f"{args.notebook}: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
