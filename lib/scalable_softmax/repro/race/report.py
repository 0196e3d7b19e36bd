"""What notebooks 12 and 14 say and draw from the race's tables (``<notebook>-targets``
and ``<notebook>-targets-verdicts``): the verdicts as sentences (:func:`verdict_lines`,
:func:`level_summary`), notebook 14's crossover ``K`` per level (:func:`crossover_k`)
and its figure with the seeds' range as error bars (:func:`crossover_figure`), and the
notebooks' checks of the tables (:func:`check_levels`, :func:`check_curves`).
Everything here is computed from the tables, so that the printed text cannot fall
behind a rerun.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scalable_softmax.repro.race import scoring

__all__ = ["verdict_lines", "level_summary", "crossover_k", "crossover_figure",
           "check_levels", "check_curves"]


def _pct(level) -> str:
    return f"+{100 * float(level):g}%"


def verdict_lines(verdicts: pd.DataFrame, shown=None) -> list[str]:
    """One sentence per workload: its verdict at every level (a family, ``tie`` or
    ``none``). ``shown`` maps a workload to its label."""
    shown = shown or {}
    out = []
    for w, g in verdicts.groupby("workload", sort=False):
        parts = [f"{_pct(r.level)}: {r.verdict}" for r in g.sort_values("level").itertuples()]
        out.append(f"{shown.get(w, w)}: " + "; ".join(parts))
    return out


def level_summary(verdicts: pd.DataFrame) -> list[str]:
    """One sentence per level: how many workloads each verdict holds, e.g. ``"target
    +1%: full-softmax first on 2 of 5 workloads, tie on 3"``."""
    out = []
    for lv, g in verdicts.groupby("level", sort=True):
        n = len(g)
        counts = g.verdict.value_counts()
        firsts = [f"{v} first on {c} of {n} workloads" for v, c in counts.items()
                  if v not in ("tie", "none")]
        rest = [f"{v} on {counts[v]} of {n}" for v in ("tie", "none") if v in counts]
        out.append(f"target {_pct(lv)}: " + ", ".join(firsts + rest))
    return out


def crossover_k(verdicts: pd.DataFrame, family: str = "double-sum") -> pd.DataFrame:
    """Per level, the smallest ``K`` (the workloads of notebook 14) from which
    ``family`` is the verdict at it and at every larger ``K`` raced (NaN: none).
    Columns ``level``, ``crossover_K``, ``first_at`` (the ``K`` where ``family`` is the
    verdict, comma-separated)."""
    rows = []
    v = verdicts.assign(K=pd.to_numeric(verdicts.workload).astype(int))
    for lv, g in v.groupby("level", sort=True):
        g = g.sort_values("K")
        ks, wins = list(g.K), list(g.verdict == family)
        cross = math.nan
        for i in range(len(ks) - 1, -1, -1):
            if not wins[i]:
                break
            cross = float(ks[i])
        rows.append({"level": float(lv), "crossover_K": cross,
                     "first_at": ",".join(str(k) for k, w in zip(ks, wins) if w)})
    return pd.DataFrame(rows, columns=["level", "crossover_K", "first_at"])


def crossover_figure(rows: pd.DataFrame, crossover: pd.DataFrame, caps: dict):
    """One panel per level: each family's time to the target against ``K`` (its
    fastest method per seed; the marker at the median over seeds, the error bar the
    seeds' range; a seed that missed is drawn at the cap with a hollow marker), and the
    crossover ``K`` of :func:`crossover_k` as a dashed vertical line. Returns the
    figure."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style
    from scalable_softmax.repro.race.plots import FAMILY_STYLES, legend_below

    ft = scoring.family_times(rows)
    ft = ft.assign(K=pd.to_numeric(ft.workload).astype(int))
    levels = sorted(ft.level.unique())
    fig, axes = plt.subplots(1, len(levels), figsize=(style.FIG_WIDTH, 2.8), sharey=True,
                             squeeze=False)
    for ax, lv in zip(axes[0], levels):
        g = ft[ft.level == lv]
        for fam, h in g.groupby("family", sort=True):
            ci, ls, mk = FAMILY_STYLES.get(fam, (0, "-", "o"))
            color = style.SERIES_COLORS[ci]
            xs, med, lo, hi, missed = [], [], [], [], []
            for K, s in h.groupby("K", sort=True):
                cap = float(caps[K])
                v = np.where(np.isfinite(s.seconds_to_target.to_numpy(float)),
                             s.seconds_to_target.to_numpy(float), cap)
                xs.append(K)
                med.append(float(np.median(v)))
                lo.append(float(np.median(v) - v.min()))
                hi.append(float(v.max() - np.median(v)))
                missed.append(bool(np.isnan(s.seconds_to_target.to_numpy(float)).any()))
            ax.errorbar(xs, med, yerr=[lo, hi], color=color, linestyle=ls, marker=mk,
                        markersize=4, capsize=2, label=fam)
            mx = [x for x, m in zip(xs, missed) if m]
            if mx:
                ax.plot(mx, [float(caps[x]) for x in mx], linestyle="none", marker=mk,
                        markersize=7, markerfacecolor="none", color=color)
        c = crossover[crossover.level == lv]
        if len(c) and np.isfinite(c.crossover_K.iloc[0]):
            ax.axvline(c.crossover_K.iloc[0], color="0.4", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"target {_pct(lv)}", fontsize=9)
        ax.set_xlabel("K")
    axes[0][0].set_ylabel("seconds to the target")
    return legend_below(fig, axes, -0.1)


def skipped_rows(rows: pd.DataFrame, workloads, skipped: dict, seeds,
                 levels=scoring.LEVELS) -> pd.DataFrame:
    """``rows`` with one row per workload x skipped method x level x seed (status
    ``skipped``, the reason why: its library is not installed here), so that the table
    has a row for every method requested."""
    from scalable_softmax.repro.race import families
    from scalable_softmax.repro.race.run import TARGET_COLUMNS

    extra = [{"workload": w, "family": families.family_of(m), "method": m,
              "level": float(lv), "seed": int(s), "status": "skipped", "reason": why,
              "candidates": 0}
             for w in workloads for m, why in skipped.items() for lv in levels
             for s in seeds]
    if not extra:
        return rows
    return pd.concat([rows, pd.DataFrame(extra)], ignore_index=True)[TARGET_COLUMNS]


def tuning_line(rows: pd.DataFrame) -> str:
    """What the tuning chose, from the targets rows: the candidates per method and how
    many of the chosen rates sit at an end of their grid."""
    ch = rows[pd.to_numeric(rows.candidates, errors="coerce").fillna(0) > 0]
    ch = ch.drop_duplicates(["workload", "method"])
    if not len(ch):
        return "tuning: no method with a rate ran"
    n = sorted(set(ch.candidates.astype(int)))
    edge = int(ch.at_grid_edge.fillna("").astype(str).ne("").sum())
    return (f"tuning: {'/'.join(map(str, n))} candidates per method with a rate; "
            f"{edge} of {len(ch)} chosen rates at an end of their grid")


def edge_counts(rows: pd.DataFrame, method: str) -> tuple[int, int, int]:
    """``(lowest, highest, workloads)``: on how many workloads ``method``'s chosen rate
    sits at the lowest and the highest end of its grid (the ``at_grid_edge`` column),
    out of the workloads it ran on."""
    ch = rows[rows.method == method].drop_duplicates("workload")
    edge = ch.at_grid_edge.fillna("").astype(str)
    return int((edge == "lowest").sum()), int((edge == "highest").sum()), len(ch)


def schedule_counts(rows: pd.DataFrame, method: str) -> tuple[int, int]:
    """``(ended, runs)``: how many of ``method``'s seeded runs (one per workload and
    seed) ended their epoch schedule (status ``completed``: every epoch of the rate
    schedule done) before the cap or the tightest target, out of its runs."""
    r = rows[rows.method == method].drop_duplicates(["workload", "seed"])
    r = r[r.status != "skipped"]
    return int((r.status == "completed").sum()), len(r)


def limits_short(rows12: pd.DataFrame | None, rows14: pd.DataFrame | None) -> str:
    """:func:`limits_text` in one sentence for the README: Implicit SGD's (``implicit-
    batch``) rates at an end of its grid, and the double-sum runs that ended their
    schedule before the cap."""
    tabs = [(t, what) for t, what in ((rows12, "data sets"), (rows14, "values of K"))
            if t is not None]
    if not tabs:
        return "not raced in this record"
    e = [edge_counts(t, "implicit-batch") for t, _ in tabs]
    edges = " and ".join(f"{lo + hi} of {n} {what}" for (lo, hi, n), (_, what)
                         in zip(e, tabs))
    s = [schedule_counts(t, m) for t, _ in tabs for m in ("implicit-batch", "umax")]
    return (f"Implicit SGD's chosen rate sits at an end of its grid on {edges}, and "
            f"{sum(a for a, _ in s)} of {sum(b for _, b in s)} double-sum runs ended "
            "their epoch schedule before the cap")


def limits_text(rows12: pd.DataFrame | None, rows14: pd.DataFrame | None,
                names: dict) -> str:
    """The race's limits, as the pages state them, from notebook 12's and 14's rows
    (either may be None): per method of ``names`` (method -> label), on how many
    workloads its chosen rate sits at an end of its grid, and how many of its runs ended
    their epoch schedule before the cap; then what that bounds. Every count is read
    from the rows."""
    tabs = [(t, what) for t, what in ((rows12, "data sets"), (rows14, "values of K"))
            if t is not None]
    if not tabs:
        return "not raced in this record"
    edges, ends, any_edge, any_end = [], [], False, False
    for m, label in names.items():
        e = [(edge_counts(t, m), what) for t, what in tabs if (t.method == m).any()]
        if e:
            bits = []
            for (lo, hi, n), what in e:
                bits.append(f"lowest on {lo} and highest on {hi} of {n} {what}")
                any_edge |= (lo + hi) > 0
            edges.append(f"{label} " + ", ".join(bits))
        s = [schedule_counts(t, m) for t, _ in tabs if (t.method == m).any()]
        if s:
            done, runs = sum(a for a, _ in s), sum(b for _, b in s)
            ends.append(f"{label} {done} of {runs}")
            any_end |= done > 0
    reasons = sorted({str(r) for t, _ in tabs
                      for r in t[(t.status == "completed") & t.method.isin(list(names))].reason})
    sched = f", {' or '.join(reasons)}" if reasons else ""
    decays = sorted({float(d) for t, _ in tabs if "lr_decay" in t
                     for d in pd.to_numeric(t[t.method.isin(list(names))].lr_decay,
                                            errors="coerce").dropna()})
    per = " or ".join(f"{d:g}" for d in decays) or "0.9"
    out = ("Chosen rates at an end of their grid: " + "; ".join(edges) + ". Runs that "
           f"ended their epoch schedule (the rate times {per} per epoch{sched}) before "
           "the cap: " + "; ".join(ends) + ".")
    if any_edge:
        out += (" A rate beyond an end of the grid may be faster, so a verdict against "
                "such a method is bounded by the grid params/race.yaml declares.")
    if any_end:
        out += (" A run that ends its schedule early leaves the rest of its time unused: "
                f"the verdicts hold for the schedules this race searched (decay {per} per "
                "epoch), not for one stretched to the budget.")
    return out


def check_levels(rows: pd.DataFrame) -> None:
    """AssertionError when a run reached a tighter level before a looser one (the time
    to +1% below the time to +10%, say)."""
    r = rows.assign(s=pd.to_numeric(rows.seconds_to_target, errors="coerce"))
    for key, g in r.groupby(["workload", "method", "seed"], sort=False):
        s = g.sort_values("level").s.to_numpy(float)     # tight to loose
        ok = s[np.isfinite(s)]
        assert (np.diff(ok) <= 1e-12).all(), (key, list(s))
        # a tighter level reached means every looser one was
        if np.isfinite(s).any():
            first = int(np.argmax(np.isfinite(s)))
            assert np.isfinite(s[first:]).all(), (key, list(s))


def check_curves(rows: pd.DataFrame, curves: pd.DataFrame) -> None:
    """AssertionError unless ``curves`` (:func:`~.run.curve_rows`) are the validation
    checkpoints of the runs of ``rows`` (:data:`~.run.TARGET_COLUMNS`): the columns of
    :data:`~.run.CURVE_COLUMNS` (no test column), no run that ``rows`` lacks, and the
    seconds to every level read again from each run's curve
    (:func:`~.scoring.seconds_to_targets`) the ``seconds_to_target`` of ``rows`` (a run
    without a checkpoint reached nothing)."""
    from scalable_softmax.repro.race.run import CURVE_COLUMNS

    assert list(curves.columns) == CURVE_COLUMNS, list(curves.columns)
    key = ["workload", "method", "seed"]
    runs = {k: g.sort_values("checkpoint") for k, g in curves.groupby(key, sort=False)}
    r = rows.assign(s=pd.to_numeric(rows.seconds_to_target, errors="coerce"),
                    t=pd.to_numeric(rows.target, errors="coerce"))
    known = set()
    for k, g in r.groupby(key, sort=False):
        known.add(k)
        c = runs.get(k)
        got = scoring.seconds_to_targets(
            [] if c is None else c.seconds.to_numpy(float),
            [] if c is None else c.val_log_loss.to_numpy(float),
            dict(zip(g.level.astype(float), g.t.astype(float))))
        for lv, want in zip(g.level.astype(float), g.s):
            assert (math.isnan(want) and math.isnan(got[lv])) or \
                math.isclose(want, got[lv], rel_tol=1e-9), (k, lv, want, got[lv])
    extra = set(runs) - known
    assert not extra, f"curves of runs the targets rows lack: {sorted(map(str, extra))}"


# --- the pages (README, results page), rendered by repro.machinery.numbers from the record ---

def _median_seconds(rows: pd.DataFrame, workload, level, by: str, who) -> float:
    """The median over seeds of ``who``'s (a family or a method) time to ``level`` on
    ``workload``; inf when a seed missed it."""
    r = rows[(rows.workload.astype(str) == str(workload))
             & np.isclose(pd.to_numeric(rows.level), float(level))]
    if by == "family":
        t = scoring.family_times(r)
        t = t[t.family == who]
    else:
        t = r[r.method == who]
    s = pd.to_numeric(t.seconds_to_target, errors="coerce").fillna(math.inf)
    return float(np.median(s)) if len(s) else math.nan


def page_verdict(rows: pd.DataFrame, verdicts: pd.DataFrame, workload, level,
                 short: bool = False) -> str:
    """The verdict at ``workload`` and ``level`` as a page states it: the family (with
    the median over seeds of its seconds to the target unless ``short``), ``tie`` or
    ``none``."""
    v = verdicts[(verdicts.workload.astype(str) == str(workload))
                 & np.isclose(pd.to_numeric(verdicts.level), float(level))]
    if not len(v):
        raise LookupError(f"no verdict for workload {workload!r} at level {level}")
    verdict = str(v.verdict.iloc[0])
    if short or verdict in ("tie", "none"):
        return {"tie": "tie (the seeds overlap)", "none": "no family reached it"}.get(
            verdict, verdict)
    s = _median_seconds(rows, workload, level, "family", verdict)
    return f"{verdict} ({s:.2f} s, median of the seeds)"


def page_pair(rows: pd.DataFrame, workload, level, ours="softmax-sgd",
              theirs="torch-sgd") -> str:
    """Our and PyTorch's full-softmax SGD: the median over seeds of each one's seconds
    to ``level`` on ``workload`` ("never" when a median seed missed it)."""
    def sec(m):
        s = _median_seconds(rows, workload, level, "method", m)
        return "not run" if s != s else ("never" if math.isinf(s) else f"{s:.2f} s")
    return f"ours {sec(ours)} against PyTorch's {sec(theirs)} (medians of the seeds)"


def page_threads(rows: pd.DataFrame, threads: int = 2) -> str:
    """The methods whose runs used fewer than ``threads`` threads, with how many runs."""
    r = rows[~rows.status.isin(["skipped"])].drop_duplicates(["workload", "method", "seed"])
    low = r[pd.to_numeric(r.threads, errors="coerce") < threads]
    if not len(low):
        return f"every run used its {threads} threads"
    parts = [f"{m}: {int(pd.to_numeric(g.threads).min())} thread on {len(g)} of "
             f"{len(r[r.method == m])} runs" for m, g in low.groupby("method", sort=True)]
    return "; ".join(parts)


def page_crossover(verdicts: pd.DataFrame) -> str:
    """Notebook 14's crossover ``K`` per level, as one sentence."""
    c = crossover_k(verdicts)
    return "; ".join(f"target {_pct(r.level)}: " + (
        f"the double-sum family is first from K = {int(r.crossover_K):,} on"
        if r.crossover_K == r.crossover_K else "no crossover up to the largest K raced")
        for r in c.itertuples()) + "."
