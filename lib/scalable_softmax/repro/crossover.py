"""From which number of classes does the double sum pay off on real data? (notebook
14-crossover).

The same real task, ``20news-words`` (next-word prediction on the 20 Newsgroups bodies,
:mod:`scalable_softmax.data.words`), posed with ``K`` = the ``K`` most frequent training
words as classes (the loader's ``classes`` option; its default, 10,000, is notebook
12's data set), raced at every ``K`` under notebook 12's rules by notebook 12's machinery
(:mod:`scalable_softmax.repro.peers`: every method with a rate chooses among the same
number of candidate configurations, a rate times a structural option of its own, on
held-out rows of the training split; :func:`~scalable_softmax.repro.peers.tune_rates`,
:func:`~scalable_softmax.repro.peers.choose_rates`,
:func:`~scalable_softmax.repro.peers.run_final`,
:func:`~scalable_softmax.repro.peers.peer_table`), with a cap on the training seconds
that grows with ``K``.

The methods form three families (:data:`FAMILIES`):

* ``double-sum``: the paper's O(D)-per-step methods on the double-sum formulation,
  U-max (``umax``) and Implicit SGD (``implicit-batch``, whose candidates include n = m =
  1, Implicit SGD's single-point step, run by its own kernel);
* ``full-softmax``: the exact softmax, O(K D) per step: our minibatch SGD
  (``softmax-sgd``), PyTorch's SGD and Adam (``torch-sgd``, ``torch-adam``);
* ``sampled-softmax``: sampled softmax estimates of the softmax gradient, O(m D) per
  step: PyTorch's with uniform negatives (``torch-sampled``) and our importance
  sampling (``is``). One-vs-each and NCE are left out: they minimise other objectives
  (a bound, a binary surrogate), not the softmax log-loss the race scores.

A family's time to within 1% at a ``K`` is that of its fastest member
(:func:`family_best`), and the verdict (:func:`verdict`) names the smallest ``K`` of the
race from which a double-sum method is the first of all to within 1% of the best test
log-loss at every larger ``K`` of the race too.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from scalable_softmax.repro import peers
from scalable_softmax.repro.race import families as _race_families
from scalable_softmax.repro.race import plots as _race_plots

__all__ = ["FAMILIES", "FAMILY_STYLES", "DATASET", "family_of", "build_problems",
           "race", "crossover_table", "family_best", "verdict", "close_calls",
           "close_rule", "close_at", "figure", "check_results", "TABLE_COLUMNS", "CLOSE_FACTOR",
           "CLOSE_MARGIN"]

#: the data set raced at every K (its ``classes`` option is K)
DATASET = "20news-words"
#: the methods notebook 14 can race (keys of :data:`scalable_softmax.repro.peers.METHODS`)
RACED = ("umax", "implicit-batch", "softmax-sgd", "torch-sgd", "torch-adam", "torch-sampled",
         "is")
#: family -> its methods: the race's one registry
#: (:data:`scalable_softmax.repro.race.families.FAMILIES`) restricted to :data:`RACED`
FAMILIES = {fam: tuple(m for m in RACED if m in ms)
            for fam, ms in _race_families.FAMILIES.items()
            if any(m in ms for m in RACED)}
#: family -> (index into the collection's series colours, line style, marker): the
#: race's (:data:`scalable_softmax.repro.race.plots.FAMILY_STYLES`)
FAMILY_STYLES = {fam: _race_plots.FAMILY_STYLES[fam] for fam in FAMILIES}
#: the columns of ``tables/14-crossover.{csv,md}`` (the CSV has these first, then the rest)
TABLE_COLUMNS = ["K", "label", "family", "status", "lr", "config", "threads", "used_threads",
                 "within_5pct", "within_1pct", "best_test_log_loss", "ratio_to_best",
                 "peak_rss_gb", "train_seconds", "reason"]


def family_of(method: str) -> str:
    """The family of ``method`` (:data:`FAMILIES`); ValueError for another method."""
    for fam, ms in FAMILIES.items():
        if method in ms:
            return fam
    raise ValueError(f"method {method!r} belongs to no family of the crossover; choose "
                     f"from {[m for ms in FAMILIES.values() for m in ms]}")


def _check_ks(Ks, caps, max_points):
    if not Ks or any(not isinstance(k, (int, np.integer)) or k < 2 for k in Ks):
        raise ValueError(f"Ks must be a non-empty list of integers >= 2; got {Ks!r}")
    if list(Ks) != sorted(set(Ks)):
        raise ValueError(f"Ks must be increasing and distinct; got {Ks!r}")
    for what, d in (("caps", caps), ("max_points", max_points)):
        missing = [k for k in Ks if k not in d]
        if missing:
            raise ValueError(f"{what} has no entry for K = {missing}: give every K one")


def build_problems(Ks, max_points, workdir, *, seed=0, dataset=DATASET, **load_options):
    """Build ``dataset`` at every ``K`` of ``Ks`` (``load_dataset(dataset, split,
    classes=K, max_points=max_points[K], seed=seed, **load_options)``) and write each as
    an ``.npz`` (:func:`scalable_softmax.repro.peers.save_problem`) under ``workdir``,
    for the race's child processes. With ``K = 10,000``, ``max_points = 100,000`` and
    ``seed = 0`` the problem is the loader's default ``20news-words``, notebook 12's.

    Returns ``(paths, shapes)``: ``{K: path}`` and one row per ``K`` (``K``, ``N``,
    ``N_test``, ``D``, ``nnz_per_row``, ``classes_in_train``, ``classes_in_test``: the
    classes drawn at least once, ``eligible_points``: the training positions
    ``max_points`` were drawn from).
    """
    from scalable_softmax._atomic import atomic_open
    from scalable_softmax.data import load_dataset

    _check_ks(list(Ks), dict.fromkeys(Ks, 1), max_points)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    paths, rows = {}, []
    for K in Ks:
        tr = load_dataset(dataset, "train", classes=int(K), max_points=max_points[K],
                          seed=seed, **load_options)
        te = load_dataset(dataset, "test", classes=int(K), max_points=max_points[K],
                          seed=seed, **load_options)
        path = workdir / f"{dataset}-K{K}.npz"
        with atomic_open(path, "wb") as fh:
            peers.save_problem(fh, tr.X, tr.y, te.X, te.y, tr.K)
        paths[K] = str(path)
        rows.append({"K": int(K), "N": int(tr.N), "N_test": int(te.N),
                     "D": int(tr.X.shape[1]), "nnz_per_row": round(tr.X.nnz / tr.N, 2),
                     "classes_in_train": int(np.unique(tr.y).size),
                     "classes_in_test": int(np.unique(te.y).size),
                     "eligible_points": int(tr.original["N"])})
    return paths, pd.DataFrame(rows)


def race(paths, methods, *, grids, structures, caps, tune_fraction, max_epochs, eval_rows,
         holdout, seed, memory_cap_gb, threads, options, isolate="method",
         first_checkpoint=1 / 256, wall_extra=90.0, say=print):
    """Notebook 12's race at every ``K`` of ``paths`` (:func:`build_problems`): the
    candidates of every method with a rate tuned on held-out rows
    (:func:`~scalable_softmax.repro.peers.tune_rates` for ``tune_fraction * caps[K]``
    training seconds each), the rule's choice
    (:func:`~scalable_softmax.repro.peers.chosen_rates`), then the timed runs
    (:func:`~scalable_softmax.repro.peers.run_final`, cap ``caps[K]``).

    Returns ``(tuning, rates, curves, runs)`` with a ``K`` column added to each (their
    ``dataset`` column is the problem's file; :func:`crossover_table` drops it).
    ``first_checkpoint`` (a fraction of the cap) is where the checkpoints, ``sqrt(2)``
    apart, start; ``wall_extra`` the seconds each child process may take beyond three
    times its training seconds (at large K most of a run's wall time is the exact
    evaluations at the checkpoints, which the training clock excludes).
    """
    Ks = list(paths)
    data = [paths[K] for K in Ks]
    kcap = {paths[K]: float(caps[K]) for K in Ks}
    kof = {paths[K]: K for K in Ks}
    tunings, curves_all, runs_all, rates_all = [], [], [], []
    for K in Ks:
        d = paths[K]
        tuning = peers.tune_rates([d], methods, grids, {d: tune_fraction * kcap[d]},
                                  max_epochs=max_epochs, eval_rows=eval_rows,
                                  holdout=holdout, seed=seed, memory_cap_gb=memory_cap_gb,
                                  threads=threads, options=options, structures=structures,
                                  wall_extra=wall_extra, progress=False)
        rates = peers.chosen_rates(tuning)
        say(f"K = {K:,}: {len(tuning)} tuning runs")
        curves, runs = peers.run_final([d], methods, rates, {d: kcap[d]},
                                       max_epochs=max_epochs, eval_rows=eval_rows, seed=seed,
                                       memory_cap_gb=memory_cap_gb, threads=threads,
                                       options=options, isolate=isolate,
                                       first_checkpoint=first_checkpoint,
                                       wall_extra=wall_extra, progress=False)
        for r in runs.itertuples():
            say(f"K = {K:,} / {r.method}: {r.status}, {r.points} points")
        tunings.append(tuning)
        rates_all.append(rates)
        curves_all.append(curves)
        runs_all.append(runs)

    def cat(frames):
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame(columns=["dataset", "K"])
        out = pd.concat(frames, ignore_index=True)
        out.insert(1, "K", [kof[d] for d in out.dataset])
        return out

    assert set(data) == set(kof)
    return cat(tunings), cat(rates_all), cat(curves_all), cat(runs_all)


def crossover_table(runs, rates, curves, *, Ks, paths, methods, tolerances):
    """One row per ``K`` and method (the requested order) from notebook 12's table
    (:func:`~scalable_softmax.repro.peers.peer_table`), with ``K`` and ``family``
    first and no file names. Returns ``(table, ttq)``."""
    shown = {paths[K]: f"K = {K:,}" for K in Ks}
    strip = [c for c in ("K",) if c in runs]
    table, ttq = peers.peer_table(runs.drop(columns=strip), rates.drop(columns=strip),
                                  curves.drop(columns=strip) if len(curves) else curves,
                                  datasets=[paths[K] for K in Ks], methods=methods,
                                  shown=shown, tolerances=tolerances)
    kof = {paths[K]: K for K in Ks}
    table.insert(0, "K", [kof[d] for d in table.dataset])
    table.insert(3, "family", [family_of(m) for m in table.method])
    table = table.drop(columns=["dataset", "data"])
    if len(ttq):
        ttq = ttq.assign(K=[kof[d] for d in ttq.dataset]).drop(columns=["dataset"])
    first = TABLE_COLUMNS + [c for c in table.columns if c not in TABLE_COLUMNS]
    return table[first].reset_index(drop=True), ttq


def family_best(table, tolerance_pct="1"):
    """Per ``K`` and family, the family's fastest method to within ``tolerance_pct``
    percent of the best test log-loss at that ``K`` (NaN seconds and an empty label when
    none of its methods got there; a family with no method that ran is left out).

    Columns ``K``, ``family``, ``method``, ``label``, ``seconds`` and ``best_test_log_loss``
    (the family's best, whether or not it got there)."""
    col = f"seconds_to_{tolerance_pct}pct"
    rows = []
    ran = table[~table.status.isin(["skipped"])]
    for (K, fam), g in ran.groupby(["K", "family"], sort=True):
        s = g[col].astype(float)
        best = g.best_test_log_loss.astype(float)
        if s.notna().any():
            r = g.loc[s.idxmin()]
            rows.append({"K": K, "family": fam, "method": r.method, "label": r.label,
                         "seconds": float(r[col]), "best_test_log_loss": best.min()})
        else:
            rows.append({"K": K, "family": fam, "method": "", "label": "",
                         "seconds": math.nan, "best_test_log_loss": best.min()})
    return pd.DataFrame(rows, columns=["K", "family", "method", "label", "seconds",
                                       "best_test_log_loss"])


def tuning_overshoot(rates, caps, tune_fraction):
    """How far the rule's tuning runs overran their budget: the median over each
    method's candidates, per ``K``, of ``train_seconds / (tune_fraction * caps[K])``
    (``rates``: the ``14-crossover-rates`` table). A run stops at the first piece end
    (ours: pieces of whole steps lasting about 1/64 of its cap, at least 10 ms) or
    minibatch (PyTorch) past its budget, so the ratio is at least about 1 and the size
    of the overrun says how much more training a method's candidates were scored after.
    Returns a ``K x method`` frame."""
    r = rates.dropna(subset=["train_seconds"])
    budget = r.K.map({int(k): float(v) for k, v in caps.items()}) * float(tune_fraction)
    if budget.isna().any():
        missing = sorted(set(r.K[budget.isna()]))
        raise ValueError(f"no cap for K = {missing} in caps {caps}")
    return (r.train_seconds / budget).groupby([r.K, r.method]).median().unstack()


def verdict(table, tolerance_pct="1"):
    """The race's answer, computed from ``table`` (:func:`crossover_table`).

    Returns ``(first, text)``: ``first`` one row per ``K`` (``K``, ``method``,
    ``label``, ``family``, ``seconds``: the first method of all to within
    ``tolerance_pct`` percent), and one sentence: the smallest ``K`` from which a
    double-sum method is first at that and every larger ``K`` of the race, or that none
    is up to the largest ``K``.
    """
    col = f"seconds_to_{tolerance_pct}pct"
    rows = []
    for K, g in table.groupby("K", sort=True):
        s = g[col].astype(float)
        if s.notna().any():
            r = g.loc[s.idxmin()]
            rows.append({"K": K, "method": r.method, "label": r.label,
                         "family": r.family, "seconds": float(r[col])})
        else:
            rows.append({"K": K, "method": "", "label": "", "family": "",
                         "seconds": math.nan})
    first = pd.DataFrame(rows, columns=["K", "method", "label", "family", "seconds"])
    if not len(first):
        return first, "No K was raced."
    per_k = "; ".join(first_line(r) for r in first.itertuples())
    return first, f"{headline(first, tolerance_pct)}: {per_k}."


#: close calls (:func:`close_calls`): another family reached the tolerance within this
#: factor of the first one's seconds (two checkpoints, which are sqrt(2) apart) ...
CLOSE_FACTOR = 2.0
#: ... or ended within this many times the tolerance of the best without reaching it
CLOSE_MARGIN = 2.0


def close_calls(table, tolerance_pct="1", factor=None, margin=None):
    """The K values whose first family is within the race's resolution. Another family
    is close when its fastest method got within ``tolerance_pct`` percent of the best
    test log-loss at most ``factor`` (default :data:`CLOSE_FACTOR`) times the first
    method's seconds, or when it never got there but its best ended within ``margin``
    (default :data:`CLOSE_MARGIN`) times that tolerance of the best. Which family is
    first there can change between runs of the same code: the checkpoints are
    ``sqrt(2)`` apart, the training seconds are wall-clock times, and a run that ends
    just above the bar in one run may end just below it in the next.

    Returns one row per such ``K`` and close family: ``K``, ``first`` (the first
    family), ``family`` (the close one), ``seconds_ratio`` (its seconds over the first's;
    NaN if it never got there) and ``loss_ratio`` (its best over the best)."""
    factor = CLOSE_FACTOR if factor is None else float(factor)
    margin = CLOSE_MARGIN if margin is None else float(margin)
    bar = 1 + margin * float(tolerance_pct) / 100
    fb = family_best(table, tolerance_pct)
    first = verdict(table, tolerance_pct)[0].set_index("K")
    rows = []
    for K, g in fb.groupby("K", sort=True):
        lead = first.loc[K]
        if not lead.family:
            continue
        best = float(table.loc[table.K == K, "best_test_log_loss"].astype(float).min())
        for r in g.itertuples():
            if r.family == lead.family:
                continue
            sr = r.seconds / lead.seconds if lead.seconds > 0 else math.inf
            lr = r.best_test_log_loss / best
            if (math.isfinite(r.seconds) and sr <= factor) or \
                    (not math.isfinite(r.seconds) and lr <= bar):
                rows.append({"K": int(K), "first": lead.family, "family": r.family,
                             "seconds_ratio": sr if math.isfinite(r.seconds) else math.nan,
                             "loss_ratio": lr})
    return pd.DataFrame(rows, columns=["K", "first", "family", "seconds_ratio",
                                       "loss_ratio"])


def close_rule(tolerance_pct="1", factor=None, margin=None):
    """The rule of :func:`close_calls`, in words (one short line)."""
    factor = CLOSE_FACTOR if factor is None else float(factor)
    margin = CLOSE_MARGIN if margin is None else float(margin)
    return (f"another family within {tolerance_pct}% at most {factor:g} x as late, or "
            f"ending within {margin * float(tolerance_pct):g}% of the best without getting "
            "there")


def close_at(table, K, tolerance_pct="1"):
    """One ``K`` of :func:`close_calls` in words: ``K = 3,000: close, full-softmax ended
    at 1.0139 x the best`` (the closest family), or ``K = 30,000: not close``."""
    close = close_calls(table, tolerance_pct)
    c = close[close.K == int(K)]
    if not len(c):
        return f"K = {int(K):,}: not close"
    c = c.assign(key=c.seconds_ratio.fillna(math.inf)).sort_values(["key", "loss_ratio"])
    r = c.iloc[0]
    how = (f"got there at {r.seconds_ratio:.2f} x the seconds"
           if math.isfinite(r.seconds_ratio) else f"ended at {r.loss_ratio:.4f} x the best")
    return f"K = {int(K):,}: close, {r.family} {how}"


def headline(first, tolerance_pct="1"):
    """The verdict's claim without its per-K list (``first`` from :func:`verdict`): from
    which K a double-sum method is first at that and every larger K, or that none is at
    the largest."""
    wins = (first.family == "double-sum").to_numpy()
    Ks = first.K.tolist()
    start = None
    for i in range(len(Ks) - 1, -1, -1):
        if not wins[i]:
            break
        start = Ks[i]
    lead = f"first within {tolerance_pct}% of the best test log-loss"
    if start is None:
        return f"No double-sum method is {lead} at the largest K raced (K = {Ks[-1]:,})"
    if start == Ks[0]:
        return f"A double-sum method is {lead} at every K raced, from K = {start:,}"
    return f"A double-sum method is {lead} from K = {start:,} on (and at every larger K raced)"


def first_line(r):
    """One row of :func:`verdict`'s ``first``: ``K = 3,000: label (family, 1.27 s)``."""
    return (f"K = {int(r.K):,}: {r.label} ({r.family}, {r.seconds:.3g} s)" if r.label
            else f"K = {int(r.K):,}: no method")


def figure(best, caps, *, tolerance_pct="1"):
    """Seconds to within ``tolerance_pct`` percent against ``K`` (log-log), one line per
    family (:func:`family_best`), a hollow marker at the cap where the family never got
    there; the caps as a grey line. Returns the figure."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro import style

    fig, ax = plt.subplots(figsize=(style.FIG_WIDTH * 0.62, 3.4))
    Ks = sorted(caps)
    ax.plot(Ks, [caps[k] for k in Ks], color="0.6", lw=1, ls=(0, (1, 2)),
            label="the cap on training seconds")
    for fam in FAMILIES:
        b = best[best.family == fam].sort_values("K")
        if not len(b):
            continue
        col, ls, mk = FAMILY_STYLES[fam]
        color = style.SERIES_COLORS[col]
        got = b[b.seconds.notna()]
        ax.plot(got.K, got.seconds, color=color, ls=ls, marker=mk, ms=5, lw=1.4, label=fam)
        never = b[b.seconds.isna()]
        if len(never):
            ax.plot(never.K, [caps[k] for k in never.K], ls="none", marker=mk, ms=7,
                    mfc="white", mec=color, mew=1.2, label=f"{fam}: not within the cap")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(Ks)
    ax.set_xticklabels([f"{k:,}" for k in Ks])
    ax.minorticks_off()
    peers.log_axis_ticks(ax, "y")
    ax.set_xlabel("K (classes: the K most frequent words)")
    ax.set_ylabel(f"training seconds to within {tolerance_pct}%\nof the best test log-loss")
    ax.set_title("20news-words: the fastest method of each family")
    ax.grid(True, which="both", alpha=0.25)
    style.legend_below(fig, ncol=2)
    return fig


def check_results(table, curves, ttq, *, Ks, methods, tolerances):
    """The invariants of notebook 14's results (raise ``AssertionError``): one row per
    ``K`` and method, with a known status, a family, threads between 1 and the
    maximum where it ran, and notebook 12's checks
    (:func:`scalable_softmax.repro.peers.check_results`) per ``K``."""
    assert len(table) == len(Ks) * len(methods), (len(table), len(Ks), len(methods))
    assert sorted(table.K.unique()) == sorted(Ks)
    assert table.family.isin(list(FAMILIES)).all()
    assert table.status.isin(peers.STATUSES).all(), table.status.unique()
    ran = table[table.status.isin(["completed", "time cap"])]
    assert (ran.threads.astype(float) >= 1).all()
    for K in Ks:
        t = ttq[ttq.K == K].assign(dataset=K) if len(ttq) else ttq
        c = curves[curves.K == K] if len(curves) else curves
        peers.check_results(table[table.K == K], c, t, n_rows=len(methods),
                            tolerances=tolerances)
