"""Running the race on one workload: tuning to the 5% target on validation, seeds, and
the rows of the targets tables (notebooks 12 and 14).

1. **Tuning** (:func:`tune`, :func:`choose`): every method with a rate tries each
   candidate of its declared search space (a rate of ``grids[method]`` times a
   structural option of ``structures[method]`` times a decay of the schedule, ``decays``,
   the same for every method; the same number for every method, which
   :func:`check_search_spaces` enforces) with one seed, on the training rows the
   validation split leaves; a run stops at the 5% target or the cap. The candidate
   with the shortest time to the 5% target on validation wins (one that never got there
   ranks after every one that did, by its last validation log-loss; ties: the first
   structural option, then the smaller rate). A chosen rate at an end of its grid is
   flagged. Test rows are never loaded.
2. **Seeds** (:func:`run_seeds`): each chosen configuration runs with every seed of
   ``seeds`` (the order, the sampling and the initial state), stopping at the tightest
   target or the cap; the test log-loss is evaluated at the checkpoint where each level
   was first reached (:class:`~.scoring.SealedTest`), and nowhere else.
3. **Rows** (:func:`target_rows`): one per workload x method x level x seed, the columns
   of ``tables/12-peers-targets.csv`` and ``tables/14-crossover-targets.csv``
   (:data:`TARGET_COLUMNS`); the verdicts (:func:`verdict_table`) follow
   :func:`~.scoring.verdicts`.
4. **Curves** (:func:`curve_rows`): every seeded run's validation checkpoints (training
   seconds, epoch, validation log-loss: :data:`CURVE_COLUMNS`), the learning curves
   of ``<notebook>-targets-curves.csv``; never a test number.

Runs go through :func:`.isolate.run_isolated` (a child process with
a memory cap and the thread variables set), one child per method or per library.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from scalable_softmax.repro.race import families, scoring
from scalable_softmax.repro.race import isolate as _isolate
from scalable_softmax.repro.race import jobs as _jobs
from scalable_softmax.repro.race.methods import RATE_METHODS, library_of

__all__ = ["TUNE_LEVEL", "TARGET_COLUMNS", "VERDICT_COLUMNS", "config_label", "candidates",
           "choose_rates", "check_search_spaces", "run_grouped",
           "tune", "choose", "run_seeds", "target_rows", "verdict_table", "CURVE_COLUMNS",
           "curve_rows"]

#: the key of a candidate's options that holds its schedule's decay (a :class:`.jobs.Job`'s
#: ``lr_decay``, not a method option)
DECAY = "lr_decay"
#: the level whose time on validation chooses each method's configuration
TUNE_LEVEL = 0.05
#: the columns of the targets tables (one row per workload x method x level x seed)
TARGET_COLUMNS = ["workload", "family", "method", "level", "target", "seed",
                  "seconds_to_target", "test_log_loss_at_target", "threads", "status",
                  "reason", "lr", "lr_decay", "config", "at_grid_edge", "candidates",
                  "peak_rss_gb", "start_rss_gb"]
#: the columns of the verdicts tables
VERDICT_COLUMNS = ["workload", "level", "verdict"]
#: the columns of the curves tables (one row per seeded run x validation checkpoint)
CURVE_COLUMNS = ["workload", "family", "method", "seed", "lr", "lr_decay", "config", "status",
                 "checkpoint", "seconds", "epoch", "val_log_loss"]


def config_label(options) -> str:
    """A candidate configuration's structural options as text (``""`` for none):
    ``n=5 m=20`` for minibatch Implicit SGD's ``batch_size`` and ``n_sampled``, else
    ``name=value`` pairs (``batch_size=100``, ``negatives=100``, ``n_sampled=5``), then
    the schedule's decay when the candidate sets one (``decay=0.97``)."""
    options = dict(options or {})
    decay = options.pop(DECAY, None)
    if set(options) == {"batch_size", "n_sampled"}:
        text = f"n={options['batch_size']} m={options['n_sampled']}"
    else:
        text = " ".join(f"{k}={v}" for k, v in sorted(options.items()))
    return text if decay is None else f"{text} decay={decay:g}".strip()


def candidates(method, grids, structures=None, decays=None):
    """The candidate configurations of ``method`` in the race: every rate
    of ``grids[method]`` times every structural option of ``structures[method]`` (a list
    of option dicts; none: one, ``{}``) times every decay of the schedule in ``decays``
    (a list of numbers in (0, 1], the same for every method; none: the job's default,
    :data:`scalable_softmax.protocols.LR_DECAY`), as ``[(lr, options), ...]`` in
    structure-major, then decay-major order; a decay is the options' ``lr_decay``."""
    structs = (structures or {}).get(method) or [{}]
    if decays is not None:
        bad = [d for d in decays if not (isinstance(d, (int, float)) and 0 < d <= 1)]
        if not decays or bad:
            raise ValueError(f"decays must be a non-empty list of numbers in (0, 1]; got "
                             f"{decays!r}")
        structs = [dict(s, **{DECAY: float(d)}) for s in structs for d in decays]
    return [(float(lr), dict(s)) for s in structs for lr in grids[method]]




def choose_rates(tuning: pd.DataFrame) -> pd.DataFrame:
    """The rule: per data set and method, the candidate configuration (rate, and
    structural option when ``tuning`` has a ``config`` column) with the lowest held-out
    log-loss at the end of the tuning budget (ties: the first structural option in the
    order tried, then the smaller rate; a diverged or failed run scores inf).

    Columns ``dataset``, ``method``, ``lr``, ``val_log_loss``, ``grid`` (the rates of
    the chosen structural option), ``at_grid_edge`` (the chosen rate at the
    ``"lowest"`` or ``"highest"`` end of that grid, or ``""``), ``layout``,
    ``all_failed`` (every candidate scored inf: the first structural option's smallest
    rate is used), ``config``, ``options`` (JSON of the chosen structural options,
    ``"{}"`` for none), ``candidates`` (how many were tried) and ``configs`` (the
    structural options tried, ``" | "``-separated)."""
    out = []
    tuning = tuning.copy()
    if "config" not in tuning:
        tuning["config"], tuning["options"] = "", "{}"
    for (d, m), g in tuning.groupby(["dataset", "method"], sort=False):
        configs = list(dict.fromkeys(g.config))
        g = g.assign(_c=g.config.map({c: i for i, c in enumerate(configs)}))
        g = g.sort_values(["_c", "lr"], kind="stable")
        v = g.val_log_loss.to_numpy(dtype=float)
        i = int(np.argmin(np.where(np.isfinite(v), v, np.inf))) if np.isfinite(v).any() else 0
        best = g.iloc[i]
        same = g[g.config == best.config]
        lrs = same.lr.to_list()
        j = lrs.index(best.lr)
        edge = "" if len(lrs) < 2 else ("lowest" if j == 0 else
                                        "highest" if j == len(lrs) - 1 else "")
        out.append(dict(dataset=d, method=m, lr=float(best.lr), val_log_loss=float(v[i]),
                        grid=" ".join(f"{x:g}" for x in lrs), at_grid_edge=edge,
                        layout=best.layout if "layout" in g else "",
                        all_failed=not np.isfinite(v).any(), config=best.config,
                        options=best.options, candidates=len(g),
                        configs=" | ".join(configs)))
    return pd.DataFrame(out)


def check_search_spaces(methods, grids, structures) -> int:
    """The number of candidates every method with a rate tries; ValueError naming the
    methods when they differ (every method gets the same tuning budget)."""
    counts = {m: len(candidates(m, grids, structures)) for m in methods
              if m in RATE_METHODS}
    if len(set(counts.values())) > 1:
        raise ValueError(f"every method must try the same number of candidates; got "
                         f"{counts} (params: grids x structures)")
    return next(iter(counts.values()), 0)


def _job(data, method, lr, cap, opts, targets, *, seed, report_test, common):
    opts = dict(opts)
    decay = {DECAY: float(opts.pop(DECAY))} if DECAY in opts else {}
    return _jobs.Job(data, method, lr, cap, split="race", seed=seed, options=opts,
                     targets=targets, report_test=report_test, **decay,
                     checkpoints=_jobs.checkpoint_times(cap, 2, common["first"] * cap),
                     **{k: v for k, v in common.items() if k != "first"})


def run_grouped(jobs, *, isolate, memory_cap_gb, threads, wall_extra):
    """Run ``jobs`` in child processes, one per method (``isolate="method"``) or per
    library (``"library"``: ours, scikit-learn, PyTorch), or in this process
    (``"none"``: no memory cap and no child start-up, for the smoke profile); the
    results in the order of ``jobs`` (a job its child did not finish has status
    ``killed`` or ``crashed``)."""
    if isolate not in ("method", "library", "none"):
        raise ValueError(f"isolate must be 'method', 'library' or 'none'; got "
                         f"{isolate!r}")
    if isolate == "none":       # in this process: no memory cap, the process's threads
        return _jobs.run_jobs(jobs)     # each job's own peak after a reset
    key = (lambda j: j.method) if isolate == "method" else \
        (lambda j: library_of(j.method))
    groups: dict = {}
    for i, j in enumerate(jobs):
        groups.setdefault(key(j), []).append(i)
    out = [None] * len(jobs)
    for idx in groups.values():
        group = [jobs[i] for i in idx]
        res = _isolate.run_isolated(group, memory_cap_gb=memory_cap_gb, threads=threads,
                                 wall_seconds=wall_extra + 3 * sum(j.cap_seconds
                                                                   for j in group))
        for i, r in zip(idx, res["results"]):
            out[i] = r
        for i in idx[len(res["results"]):]:
            out[i] = {"job": {"method": jobs[i].method, "seed": jobs[i].seed,
                              "lr": jobs[i].lr, "lr_decay": jobs[i].lr_decay,
                              "threads": jobs[i].threads},
                      "status": "killed" if res.get("killed") else "crashed",
                      "reason": str(res.get("log", ""))[-200:], "points": [], "info": {}}
    return out


def _common(holdout, split_seed, eval_rows, max_epochs, threads, first_checkpoint):
    return dict(holdout=holdout, split_seed=split_seed, eval_rows=eval_rows,
                max_epochs=max_epochs, threads=threads, first=first_checkpoint)


def tune(workload, data, methods, *, grids, structures, options, targets, cap, decays=None,
         holdout, split_seed, eval_rows, max_epochs=50, threads=2, memory_cap_gb=8.0,
         first_checkpoint=1 / 256, wall_extra=90.0, isolate="method") -> pd.DataFrame:
    """Every candidate of every method with a rate on ``workload`` (seed 0), stopping
    at the :data:`TUNE_LEVEL` target or ``cap``. One row per candidate: ``workload``,
    ``method``, ``lr``, ``lr_decay``, ``config``, ``options`` (JSON),
    ``seconds_to_level`` (NaN if not reached), ``val_log_loss`` (the last checkpoint's;
    inf for a failed run), ``status``, ``layout``."""
    if TUNE_LEVEL not in targets:
        raise ValueError(f"targets must hold the tuning level {TUNE_LEVEL}; got "
                         f"{sorted(targets)}")
    check_search_spaces(methods, grids, structures)
    common = _common(holdout, split_seed, eval_rows, max_epochs, threads, first_checkpoint)
    jobs, structs = [], []
    for m in [m for m in methods if m in RATE_METHODS]:
        for lr, st in candidates(m, grids, structures, decays):
            jobs.append(_job(data, m, lr, cap, dict(options.get(m, {}), **st),
                             {TUNE_LEVEL: targets[TUNE_LEVEL]}, seed=0, report_test=False,
                             common=common))
            structs.append(st)
    results = run_grouped(jobs, isolate=isolate, memory_cap_gb=memory_cap_gb,
                           threads=threads, wall_extra=wall_extra)
    rows = []
    for j, st, r in zip(jobs, structs, results):
        ok = r["status"] in ("completed", "time cap", "target")
        pts = r["points"]
        rows.append({"workload": workload, "method": j.method, "lr": j.lr,
                     "lr_decay": j.lr_decay, "config": config_label(st),
                     "options": json.dumps(st, sort_keys=True),
                     "seconds_to_level": float(r.get("arrivals", {}).get(
                         str(TUNE_LEVEL), math.nan)),
                     "val_log_loss": float(pts[-1].get("val_log_loss", math.inf))
                     if ok and pts else math.inf,
                     "status": r["status"],
                     "layout": r.get("info", {}).get("layout", "")})
    return pd.DataFrame(rows)


def choose(tuning: pd.DataFrame) -> pd.DataFrame:
    """Per workload and method, the candidate with the shortest ``seconds_to_level``
    (then the lowest ``val_log_loss``; ties: the first structural option tried, then
    the smaller rate). Columns ``workload``, ``method``, ``lr``, ``config``,
    ``options``, ``layout``, ``seconds_to_level``, ``at_grid_edge`` (``lowest``,
    ``highest`` or ``""``) and ``candidates``."""
    out = []
    for (w, m), g in tuning.groupby(["workload", "method"], sort=False):
        configs = list(dict.fromkeys(g.config))
        g = g.assign(_c=g.config.map({c: i for i, c in enumerate(configs)}),
                     _s=pd.to_numeric(g.seconds_to_level).fillna(math.inf),
                     _v=pd.to_numeric(g.val_log_loss).replace(np.nan, math.inf))
        best = g.sort_values(["_s", "_v", "_c", "lr"], kind="stable").iloc[0]
        lrs = sorted(g[g.config == best.config].lr)
        j = lrs.index(best.lr)
        edge = "" if len(lrs) < 2 else ("lowest" if j == 0 else
                                        "highest" if j == len(lrs) - 1 else "")
        out.append({"workload": w, "method": m, "lr": float(best.lr),
                    "config": best.config, "options": best.options,
                    "layout": best.layout, "seconds_to_level": float(best._s),
                    "at_grid_edge": edge, "candidates": len(g)})
    return pd.DataFrame(out, columns=["workload", "method", "lr", "config", "options",
                                      "layout", "seconds_to_level", "at_grid_edge",
                                      "candidates"])


def run_seeds(workload, data, methods, chosen: pd.DataFrame, *, seeds, options, targets,
              cap, holdout, split_seed, eval_rows, max_epochs=50, threads=2,
              memory_cap_gb=8.0, first_checkpoint=1 / 256, wall_extra=90.0,
              isolate="method") -> list:
    """Every method of ``methods`` with its chosen configuration (``chosen`` from
    :func:`choose`; a method without a rate runs as it is) for every seed of ``seeds``
    (children per ``isolate``, :func:`run_grouped`). Returns the runs' results
    (:func:`.jobs.run_job`'s dicts) with ``workload`` and the chosen row."""
    if len(seeds) < 1 or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one; got {seeds!r}")
    common = _common(holdout, split_seed, eval_rows, max_epochs, threads, first_checkpoint)
    pick = {r.method: r for r in chosen.itertuples()} if len(chosen) else {}
    jobs, rows = [], []
    for m in methods:
        opts, lr, row = dict(options.get(m, {})), None, None
        if m in RATE_METHODS:
            row = pick[m]
            lr = row.lr
            opts.update(json.loads(row.options))
            if row.layout and "layout" not in opts:
                opts["layout"] = row.layout
        for s in seeds:
            jobs.append(_job(data, m, lr, cap, opts, targets, seed=int(s),
                             report_test=True, common=common))
            rows.append(row._asdict() if row is not None else {})
    results = run_grouped(jobs, isolate=isolate, memory_cap_gb=memory_cap_gb,
                           threads=threads, wall_extra=wall_extra)
    return [{**r, "workload": workload, "chosen": ch} for r, ch in zip(results, rows)]


def _memory(r) -> dict:
    """A run's ``peak_rss_gb``: its own high-water mark after the reset before it
    (``peak_rss_reset``; NaN where the system could not reset it, rather than the
    process's peak since its start, which holds what a forked child inherited), and
    ``start_rss_gb``: the resident set it started from (interpreter, libraries and what
    the child inherited at fork), so that the run's own share is the difference."""
    gb = 2.0 ** 30
    own = r.get("peak_rss_bytes") if r.get("peak_rss_reset") else None
    start = r.get("rss_at_reset_bytes") if r.get("peak_rss_reset") else None
    return {"peak_rss_gb": own / gb if own else math.nan,
            "start_rss_gb": start / gb if start else math.nan}


def _decay_of(job: dict):
    """The schedule's decay of a run's job (a dict of :class:`.jobs.Job`), or NaN for a
    method without a rate (L-BFGS, scikit-learn: no schedule)."""
    d = job.get("lr_decay")
    return float(d) if d is not None and job.get("method") in RATE_METHODS else math.nan


def target_rows(results, targets: dict) -> pd.DataFrame:
    """One row per run x level (:data:`TARGET_COLUMNS`): the seconds to the level read
    at validation checkpoints (empty when not reached) and the test log-loss at that
    checkpoint. A run that failed (out of memory, diverged, killed) has neither: its
    ``status`` and ``reason`` (a memory failure's says what it asked for) stand in.
    ``peak_rss_gb`` and ``start_rss_gb``: :func:`_memory`."""
    rows = []
    for r in results:
        m = r["job"]["method"]
        arr, test = r.get("arrivals", {}), r.get("test_at_target", {})
        ch = r.get("chosen") or {}
        for lv, t in sorted(targets.items()):
            rows.append({"workload": r["workload"], "family": families.family_of(m),
                         "method": m, "level": lv, "target": t, "seed": r["job"]["seed"],
                         "seconds_to_target": arr.get(str(lv), math.nan),
                         "test_log_loss_at_target": test.get(str(lv), math.nan),
                         "threads": int(r.get("info", {}).get("threads_used",
                                                              r["job"].get("threads", 1))),
                         "status": r["status"],
                         "reason": str(r.get("reason", ""))[:200],
                         "lr": r["job"].get("lr"),
                         "lr_decay": _decay_of(r["job"]),
                         "config": ch.get("config", ""),
                         "at_grid_edge": ch.get("at_grid_edge", ""),
                         "candidates": ch.get("candidates", 0),
                         **_memory(r)})
    return pd.DataFrame(rows, columns=TARGET_COLUMNS)


def verdict_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The verdicts (:data:`VERDICT_COLUMNS`) of the targets rows: per workload and level
    a family, ``tie`` or ``none`` (:func:`~.scoring.verdicts`)."""
    return scoring.verdicts(scoring.family_times(rows))[VERDICT_COLUMNS]


def curve_rows(results) -> pd.DataFrame:
    """The learning curves of seeded runs (:func:`run_seeds`' results): one row per run x
    validation checkpoint (:data:`CURVE_COLUMNS`), in training order: ``checkpoint``
    its index in the run, ``seconds`` the training seconds, ``epoch`` how far the run
    had got (NaN for a method without epochs: L-BFGS, scikit-learn), ``val_log_loss``
    the validation log-loss (inf: a diverged point). ``status`` is the run's. A run
    without a checkpoint (it failed first) has no row; its status is in the targets
    table.

    Only the validation numbers of each point are read: a point that carries a test
    (or training) number means the run evaluated other rows at its checkpoints, which a
    race run never does (only :class:`~.scoring.SealedTest` reads test rows, at the
    arrivals), and is refused with a ValueError naming the run."""
    rows = []
    for r in results:
        job = r["job"]
        ch = r.get("chosen") or {}
        for i, p in enumerate(r.get("points") or []):
            other = sorted(k for k in p if k.endswith(("_log_loss", "_error"))
                           and not k.startswith("val_"))
            if other or "val_log_loss" not in p:
                raise ValueError(
                    f"curve_rows: {r.get('workload')!r} {job['method']} seed "
                    f"{job['seed']} checkpoint {i} has "
                    + (f"{other}: a race run evaluates only its validation rows at "
                       "checkpoints (the test rows only at an arrival)" if other else
                       "no val_log_loss: not a race run (split='race')"))
            rows.append({"workload": r["workload"],
                         "family": families.family_of(job["method"]),
                         "method": job["method"], "seed": job["seed"],
                         "lr": job.get("lr"), "lr_decay": _decay_of(job),
                         "config": ch.get("config", ""),
                         "status": r["status"], "checkpoint": i,
                         "seconds": float(p["seconds"]),
                         "epoch": float(p["epoch"]) if "epoch" in p else math.nan,
                         "val_log_loss": float(p["val_log_loss"])})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)
