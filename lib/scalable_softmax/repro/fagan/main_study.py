"""The paper's main study as one function: every method on every data set at the tuned
rates, several seeds, with the step-down rule for diverging runs.

Notebook 02 runs it and draws the learning curves; notebook 06 calls it with the same
settings and gets every run back from the run cache (:mod:`scalable_softmax.repro.machinery.runs`)
to assemble Table 3. The rest of notebook 02 is here too: its monitoring plan
(:func:`monitoring`), the columns and preamble of its tables, Figure 1
(:func:`plot_figure1`), the numbers its findings quote (:func:`best_report`), where the
time goes (:func:`time_table`) and its invariants (:func:`check_dataset_run`).
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pandas as pd

from scalable_softmax.repro.fagan import reporting as rp
from scalable_softmax.repro.machinery import runs as ex

__all__ = ["resolve_datasets", "run_paper_methods", "choose_used", "SAMPLED_METHODS",
           "SUMMARY_COLUMNS", "RUNS_MD_COLUMNS", "CURVES_MD_COLUMNS", "TIME_PARTS",
           "dataset_label", "monitoring", "summary_preamble", "named_histories",
           "plot_figure1", "best_report", "found_lines", "time_table", "check_dataset_run"]

#: the biased baselines (minibatch n = 100, m = 5 sampled classes)
SAMPLED_METHODS = ("ove", "nce", "is")


def resolve_datasets(datasets) -> pd.DataFrame:
    """One row per paper data set (or one of :data:`runs.EXTENSION_DATASETS`): the loader
    name used (real, or SYNTHETIC surrogate), ``synthetic``, ``N``, ``N_test``, ``D``,
    ``K``; indexed by the paper name."""
    known = ex.PAPER_DATASETS + ex.EXTENSION_DATASETS
    unknown = sorted(set(datasets) - set(known))
    if unknown:
        raise ValueError(f"unknown data set(s) {unknown}; choose from {', '.join(known)}")
    rows = []
    for d in datasets:
        name = ex.dataset_for(d)
        X, y, K, synthetic = ex.load_split(name, "train")
        Xt, _, _, _ = ex.load_split(name, "test")
        rows.append(dict(dataset=d, loaded=name, synthetic=synthetic, N=X.shape[0],
                         N_test=Xt.shape[0], D=X.shape[1], K=K))
    return pd.DataFrame(rows).set_index("dataset", drop=False)


def _rate(d, m, overrides):
    given = (overrides or {}).get(d, {})
    if m in given:
        return float(given[m])
    if d not in ex.PAPER_TABLE2:
        raise ValueError(f"{d} has no published Table 2 rate for {m}: give one in "
                         f"rate_overrides[{d!r}][{m!r}] (notebook 13 tunes them)")
    return float(ex.PAPER_TABLE2[d][m])


#: the defaults of :class:`experiments.RunSpec`'s fields (the study's defaults are the
#: spec's, not literals of their own)
_SPEC = {f.name: f.default for f in dataclasses.fields(ex.RunSpec) if f.init}


def run_paper_methods(datasets, methods=ex.PAPER_METHODS, seeds=(0, 1, 2),
                      epochs=_SPEC["epochs"], lr_decay=None, u_init=None,
                      monitor_rows=_SPEC["monitor_rows"], final_rows=20000,
                      step_down=3,
                      workers=2, rate_overrides=None, rate_label="paper", progress=True,
                      protocol=None, eval_epochs=None):
    """Run ``methods x datasets x seeds`` under ``protocol`` (a name of
    :data:`scalable_softmax.protocols.PROTOCOLS`, which then supplies ``lr_decay``,
    ``u_init``, the data order and the sampling; None: the study's defaults,
    :data:`scalable_softmax.protocols.STUDY_DEFAULTS`; ``lr_decay`` and ``u_init``, when
    given, win over both, as in :meth:`experiments.RunSpec.make`) at the paper's Table 2
    rates (or
    ``rate_overrides[dataset][method]``); where a ``(dataset, method)`` diverges in some
    seed, run all seeds again at 10x smaller rates, one step at a time, until every
    seed is finite (at most ``step_down`` steps). The final exact evaluation uses at most
    ``final_rows`` rows of each set (a seeded subsample, the same rows for every method
    of a seed, so the ratios of Table 3 are paired; all rows of the smaller sets).

    Returns
    -------
    runs : DataFrame, :func:`experiments.results_frame` with the paper's data-set name
        in ``dataset``, ``loaded`` (the loader name), ``paper_lr`` (the starting rate:
        Table 2's, or the override) and ``rate`` (``rate_label`` at the starting rate,
        ``"stepped down"`` below it; ``rate_label`` also names the progress bar).
    results : list of :class:`experiments.RunResult` (same order).
    shapes : DataFrame of :func:`resolve_datasets`.
    seconds : wall time of the runs (mostly 0 when read from the cache).

    ``monitor_rows`` may be a dict ``{paper data set: rows or None}`` (None: all rows);
    ``eval_epochs`` the monitored epochs (None: epoch 0 and 10 evenly spaced).
    """
    unknown = sorted(set(methods) - set(ex.PAPER_METHODS))
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; the paper's are "
                         f"{', '.join(ex.PAPER_METHODS)}")
    if not (isinstance(step_down, int) and step_down >= 0):
        raise ValueError(f"step_down must be an integer >= 0; got {step_down!r}")
    shapes = resolve_datasets(datasets)
    loader = dict(zip(shapes.dataset, shapes.loaded))
    name_of = {v: k for k, v in loader.items()}

    def cost(d, m):
        s = shapes.loc[d]
        return s.N * s.K ** 0.3 * (5 if m in SAMPLED_METHODS else 1)

    def mrows(d):
        return monitor_rows.get(d) if isinstance(monitor_rows, dict) else monitor_rows

    common = dict(epochs=epochs, final_rows=final_rows, protocol=protocol,
                  lr_decay=lr_decay, u_init=u_init,
                  eval_epochs=tuple(eval_epochs) if eval_epochs is not None else None)

    def specs_for(triples):
        out = [ex.RunSpec.make(loader[d], m, lr, seed=int(s), monitor_rows=mrows(d),
                               **common)
               for d, m, lr in triples for s in seeds]
        return sorted(out, key=lambda sp: -cost(name_of[sp.dataset], sp.method))

    t0 = time.perf_counter()
    results = ex.run_all(specs_for([(d, m, _rate(d, m, rate_overrides))
                                    for d in datasets for m in methods]),
                         workers=workers, desc=f"{rate_label} rates", progress=progress)
    pending = {(name_of[r.spec.dataset], r.spec.method, r.spec.lr)
               for r in results if r.final["diverged"]}
    for step in range(step_down):
        if not pending:
            break
        lower = sorted({(d, m, lr / 10) for d, m, lr in pending})
        new = ex.run_all(specs_for(lower), workers=workers, desc=f"step-down {step + 1}",
                         progress=progress)
        results += new
        pending = {(name_of[r.spec.dataset], r.spec.method, r.spec.lr)
                   for r in new if r.final["diverged"]}
    seconds = time.perf_counter() - t0
    runs = ex.results_frame(results)
    runs["loaded"] = runs.dataset
    runs["dataset"] = runs.dataset.map(name_of)
    runs["paper_lr"] = [_rate(d, m, rate_overrides) for d, m in zip(runs.dataset, runs.method)]
    runs["rate"] = np.where(np.isclose(runs.lr, runs.paper_lr), rate_label, "stepped down")
    return runs, results, shapes, seconds


def choose_used(runs: pd.DataFrame, datasets, methods, rate_label="paper") -> pd.DataFrame:
    """Per ``(dataset, method, lr)`` summary over seeds (:func:`reporting.summarise_runs`)
    with ``rate`` (``rate_label`` at the starting rate ``paper_lr``, else ``"stepped
    down"``), ``paper_lr`` and ``used``: the largest rate at which every seed is finite
    (the starting rate when it is stable; vanilla SGD's "largest stable rate"), sorted in
    the paper's order."""
    summary = rp.summarise_runs(runs, keys=("dataset", "method", "lr"))
    first = runs.drop_duplicates(["dataset", "method"]).set_index(["dataset", "method"])
    summary["paper_lr"] = [first.paper_lr[(d, m)] for d, m in
                           zip(summary.dataset, summary.method)]
    summary["rate"] = np.where(np.isclose(summary.lr, summary.paper_lr), rate_label,
                               "stepped down")
    summary["used"] = False
    for _, g in summary.groupby(["dataset", "method"], sort=False):
        stable = g[g.diverged_seeds == 0]
        if len(stable):
            summary.loc[stable.lr.idxmax(), "used"] = True
    dorder = {d: i for i, d in enumerate(datasets)}
    morder = {m: i for i, m in enumerate(methods)}
    summary = summary.assign(_d=summary.dataset.map(dorder), _m=summary.method.map(morder),
                             _l=-summary.lr)
    return summary.sort_values(["_d", "_m", "_l"]).drop(columns=["_d", "_m", "_l"]) \
        .reset_index(drop=True)


# ---------------------------------------------------------------------------
# notebook 02: the tables, Figure 1 and the checks of the study's runs
# ---------------------------------------------------------------------------

#: the leading columns of notebook 02's summary table (and of its markdown)
SUMMARY_COLUMNS = ["dataset", "method", "lr", "rate", "used", "seeds", "diverged_seeds",
                   "train_log_loss_mean", "train_log_loss_std", "test_log_loss_mean",
                   "test_log_loss_std", "train_error_mean", "test_error_mean",
                   "train_defective_mean", "seconds_per_epoch_mean"]
#: the markdown columns of notebook 02's table of every run
RUNS_MD_COLUMNS = ["dataset", "method", "lr", "seed", "diverged", "train_log_loss",
                   "test_log_loss", "train_error", "test_error", "train_defective",
                   "seconds_per_epoch"]
#: the markdown columns of notebook 02's table of learning curves
CURVES_MD_COLUMNS = ["dataset", "method", "lr", "seed", "epoch", "train_log_loss",
                     "train_error", "train_defective"]
#: a run's timing columns and their names in notebook 02's time table
TIME_PARTS = {"train_seconds": "training", "monitor_eval_seconds": "monitoring evaluation",
              "final_eval_seconds": "final evaluation",
              "setup_seconds": "set-up and compilation", "load_seconds": "data loading",
              "other_seconds": "bookkeeping"}


def dataset_label(shapes: pd.DataFrame, d: str) -> str:
    """A data set's name as tables and figures show it (synthetic ones marked)."""
    return f"{d} (SYNTHETIC)" if shapes.synthetic[d] else d


def monitoring(shapes: pd.DataFrame, epochs: int, eval_every: int, monitor_rows,
               monitor_all_real: bool = True, datasets=None) -> tuple[dict, list]:
    """``(monitor, eval_epochs)``: the monitoring rows per data set of ``datasets``
    (default: every data set of ``shapes``; None: all rows, for the real data sets when
    ``monitor_all_real``) and the monitored epochs (0, every ``eval_every``-th and the
    last). The one implementation of the study's monitoring (notebooks 02, 06, 11, 13)."""
    if not (isinstance(eval_every, int) and eval_every >= 1):
        raise ValueError(f"eval_every must be an integer >= 1; got {eval_every!r}")
    names = shapes.dataset if datasets is None else datasets
    monitor = {d: (None if (monitor_all_real and not shapes.synthetic[d]) else monitor_rows)
               for d in names}
    return monitor, sorted({0, epochs, *range(0, epochs + 1, eval_every)})


def summary_preamble(protocol: str, description: str, epochs, seeds, final_rows,
                     workers) -> str:
    """The settings paragraph of notebook 02's summary table (``description``: the
    protocol's one-line description)."""
    return (
        f"Written by `notebooks/02-dataset-run.ipynb`: protocol `{protocol}` "
        f"({description}), {epochs} epochs, "
        f"mu = 0, seeds {seeds}; mean and standard deviation over seeds of the exact log-loss "
        "(all K classes) of the final weights on the whole train and test sets; error rates; "
        f"(at most {final_rows} rows per set, a seeded subsample); "
        "`train_defective_mean` = the original code's defective metric (docs/math.md section 7); "
        "`rate` = the paper's Table 2 rate or a 10x step down after a divergence; `used` marks "
        "the rate reported in Table 3 (notebook 06). Seconds per epoch were measured with "
        f"{workers} runs sharing the machine. Data sets marked SYNTHETIC are surrogates.")


def named_histories(results, shapes: pd.DataFrame) -> pd.DataFrame:
    """The monitored learning curves of ``results`` with the paper's data-set names."""
    hist = ex.histories_frame(results)
    hist["dataset"] = hist.dataset.map(dict(zip(shapes.loaded, shapes.dataset)))
    return hist


def plot_figure1(hist: pd.DataFrame, summary: pd.DataFrame, shapes: pd.DataFrame, methods):
    """The paper's Figure 1: a row per data set, each method at its ``used`` rate (the
    rates are in notebook 02's summary table), the mean over seeds (line) and range
    (band) of the exact log-loss (left) and of what the original code plotted (right: the
    defective metric for OVE, NCE and IS). One legend for the figure (with each method's
    rate when there is one data set); the left column's
    log axes run between powers of ten, labelled as such, the right column's (under two
    decades) carry plain numbers."""
    import matplotlib.pyplot as plt
    import matplotlib.ticker as mt

    from scalable_softmax.repro.machinery import style

    datasets = list(shapes.dataset)
    used = summary[summary.used]
    lr_used = {(d, m): lr for d, m, lr in zip(used.dataset, used.method, used.lr)}
    hist_used = hist[[lr_used.get((d, m)) == lr for d, m, lr in
                      zip(hist.dataset, hist.method, hist.lr)]]
    bands = rp.curve_bands(hist_used, "train_log_loss")
    hist_def = hist_used.copy()
    biased = hist_def.method.isin(list(SAMPLED_METHODS))
    hist_def.loc[biased, "train_log_loss"] = hist_def.loc[biased, "train_defective"]
    bands_def = rp.curve_bands(hist_def, "train_log_loss")
    fig, axes = plt.subplots(len(datasets), 2, figsize=(style.FIG_WIDTH,
                                                        1.1 + 1.6 * len(datasets)),
                             squeeze=False, sharex=True)
    shown = []
    for i, d in enumerate(datasets):
        lrs = {m: lr_used[(d, m)] for m in methods if (d, m) in lr_used}
        shown += [m for m in lrs if m not in shown]
        for j, b in enumerate((bands, bands_def)):
            ax = axes[i, j]
            rp.plot_curves(ax, b, d, [m for m in methods if m in lrs], lr_of=lrs)
            if j == 0:
                lo, hi = ax.dataLim.y0, ax.dataLim.y1       # the data, not the margins
                ax.set_ylim(10 ** np.floor(np.log10(lo)), 10 ** np.ceil(np.log10(hi)))
                ax.yaxis.set_major_locator(mt.LogLocator(base=10, numticks=6))
                ax.yaxis.set_major_formatter(mt.LogFormatterSciNotation())
                ax.yaxis.set_minor_formatter(mt.NullFormatter())
            else:
                style.log_ticks(ax)
            if i < len(datasets) - 1:
                ax.set_xlabel("")
        axes[i, 0].set_ylabel(dataset_label(shapes, d).replace(" (", "\n("), fontsize=8.5)
    axes[0, 0].set_title("exact train log-loss")
    axes[0, 1].set_title("as the original code plotted\n(OVE, NCE, IS: its defective metric)")
    if len(datasets) == 1:      # one row: its legend can name each method's rate
        style.legend_right(axes[0, 1], title="initial rate η₀", fontsize=7, title_fontsize=7)
    else:
        style.legend_below(fig, style.handles(shown, ms=4), ncol=6)
    fig.suptitle("Train log-loss against epoch at the rates of Table 3: mean over seeds "
                 "(line) and range (band)")
    return fig


def best_report(summary: pd.DataFrame, shapes: pd.DataFrame, methods) -> str:
    """The numbers notebook 02's findings quote: per data set the method with the lowest
    final train log-loss at its ``used`` rate and every method's value, then every
    configuration with a diverged seed."""
    from scalable_softmax.repro.machinery import style

    used = summary[summary.used]
    best = used.loc[used.groupby("dataset").train_log_loss_mean.idxmin(), ["dataset", "method"]]
    best_of = dict(zip(best.dataset, best.method))
    lines = []
    for d in shapes.dataset:
        u = used[used.dataset == d].set_index("method")
        vals = ", ".join(f"{style.label(m)} {u.train_log_loss_mean[m]:.4g}"
                         for m in methods if m in u.index)
        lines.append(f"{dataset_label(shapes, d)}: lowest = {style.label(best_of[d])}; "
                     f"final train log-loss: {vals}")
    div = summary[summary.diverged_seeds > 0]
    lines += ["", "configurations with a diverged seed:",
              div[["dataset", "method", "lr", "diverged_seeds"]].to_string(index=False)
              if len(div) else "none"]
    return "\n".join(lines)


def found_lines(summary: pd.DataFrame, shapes: pd.DataFrame, methods) -> list[str]:
    """The numbers notebook 02's "What we found" rests on, as sentences built from this
    run's ``summary`` (:func:`choose_used`, with every rate run): per data set the lowest
    and the next lowest final train log-loss at the ``used`` rates, the configurations
    with a diverged seed, the biased baselines' exact log-loss, errors and defective
    metric, the double-sum methods' test log-loss, the seeds' spread and the seconds per
    epoch. The data sets are ``shapes``' (:func:`resolve_datasets`)."""
    from scalable_softmax.repro.machinery import style

    used = summary[summary.used]
    lines = []
    lowest = {}
    for d in shapes.dataset:
        u = used[used.dataset == d].set_index("method").train_log_loss_mean.dropna()
        if not len(u):
            continue
        order = u.sort_values()
        lowest[d] = order.index[0]
        line = (f"{dataset_label(shapes, d)}: lowest {style.label(order.index[0])} "
                f"{order.iloc[0]:.3g}")
        if len(order) > 1:
            line += f", next {style.label(order.index[1])} {order.iloc[1]:.3g}"
        if order.index[0] != "implicit" and "implicit" in u.index:
            line += (f"; Implicit SGD {u['implicit']:.3g} (ratio to it "
                     f"{order.iloc[0] / u['implicit']:.2f})")
        lines.append(line + ".")
    lines.append(f"Implicit SGD lowest on {sum(m == 'implicit' for m in lowest.values())} of "
                 f"{len(lowest)} data sets.")
    div = summary[summary.diverged_seeds > 0]
    lines.append("Diverged seeds: " + ("; ".join(
        f"{dataset_label(shapes, d)} {style.label(m)} at {lr:g}: {k} of {n}"
        for d, m, lr, k, n in zip(div.dataset, div.method, div.lr, div.diverged_seeds,
                                  div.seeds)) or "none") + ".")
    biased = [m for m in methods if m in SAMPLED_METHODS]
    double = [m for m in methods if m not in SAMPLED_METHODS]
    for d in shapes.dataset:
        u = used[used.dataset == d].set_index("method")
        b = [m for m in biased if m in u.index]
        if b:
            names = " / ".join(style.label(m) for m in b)
            lines.append(
                f"{dataset_label(shapes, d)}, {names}: exact train log-loss "
                + " / ".join(f"{u.train_log_loss_mean[m]:,.4g}" for m in b)
                + ", train error " + " / ".join(f"{u.train_error_mean[m]:.3g}" for m in b)
                + ", defective metric " + " / ".join(f"{u.train_defective_mean[m]:.3g}"
                                                     for m in b)
                + (f" (log K = {np.log(shapes.K[d]):.2f})" if "K" in shapes else "")
                + ", train log-loss std over seeds "
                + " / ".join(f"{u.train_log_loss_std[m]:,.3g}" for m in b) + ".")
        dm = [m for m in double if m in u.index]
        if dm:
            names = " / ".join(style.label(m) for m in dm)
            lines.append(f"{dataset_label(shapes, d)}, {names}: test log-loss "
                         + " / ".join(f"{u.test_log_loss_mean[m]:.3g}" for m in dm)
                         + ", train error " + " / ".join(f"{u.train_error_mean[m]:.3g}"
                                                         for m in dm) + ".")
    dm_used = used[used.method.isin(double)]
    if len(dm_used):
        lines.append("Largest standard deviation over the seeds of the double-sum methods' "
                     f"final train log-loss: {dm_used.train_log_loss_std.max():.3g}.")
    if "seconds_per_epoch_mean" in used:
        spe = used.groupby("method").seconds_per_epoch_mean.agg(["min", "max"])
        lines.append("Seconds per epoch (at the used rates): " + ", ".join(
            f"{style.label(m)} {spe.loc[m, 'min']:.2g} to {spe.loc[m, 'max']:.2g}"
            for m in methods if m in spe.index) + ".")
    return lines


def time_table(runs: pd.DataFrame, methods, workers: int, run_seconds: float):
    """CPU-minutes of the runs trained now (not read from the cache) by method and part
    (:data:`TIME_PARTS`), with a total row and the workers' idle worker-minutes
    (``workers x run_seconds`` minus the runs' summed wall time); None when every run
    came from the cache."""
    fresh = runs[~runs.from_cache]
    if not (len(fresh) and all(c in fresh for c in TIME_PARTS)):
        return None
    table = (fresh.groupby("method")[list(TIME_PARTS)].sum() / 60).reindex(
        [m for m in methods if m in set(fresh.method)]).rename(columns=TIME_PARTS)
    table["runs"] = fresh.groupby("method").size()
    table.loc["all methods"] = table.sum()
    table["all parts"] = table[list(TIME_PARTS.values())].sum(axis=1)
    idle = workers * run_seconds / 60 - fresh.wall_seconds.sum() / 60
    table.loc["workers idle or in the pool"] = np.nan
    table.loc["workers idle or in the pool", "all parts"] = idle
    table = table.reset_index().rename(columns={"index": "method"})
    table["method"] = [rp.METHOD_LABELS.get(m, m) for m in table.method]
    return table


def check_dataset_run(runs: pd.DataFrame, summary: pd.DataFrame, seeds, n_cells: int,
                      epochs: int, final_rows) -> None:
    """Notebook 02's invariants (``AssertionError`` when one fails): every run finite or
    diverged with ``inf``; finished runs ran every epoch; every configuration has all
    ``seeds``; each of the ``n_cells`` (data set, method) is reported at one rate at
    most, stable in every seed; the final evaluation used every row or ``final_rows``;
    the defective metric lies in ``[log(K-1+e) - 1, log(K-1+e)]`` (docs/math.md
    section 7)."""
    assert (np.isfinite(runs.train_log_loss) | runs.diverged).all()
    assert (runs.train_log_loss[runs.diverged] == np.inf).all()
    ok = ~runs.diverged
    assert (runs.train_log_loss[ok] > 0).all()
    assert (runs.epochs_run[ok] == epochs).all()
    assert (summary.seeds == len(seeds)).all()
    n_used = summary.groupby(["dataset", "method"]).used.sum()
    assert (n_used <= 1).all() and len(n_used) == n_cells
    assert (summary.diverged_seeds[summary.used] == 0).all()
    assert (runs.train_rows[ok] == np.minimum(runs.N[ok], final_rows or np.inf)).all()
    assert (runs.test_rows[ok] > 0).all()
    K, dm = runs.K[ok], runs.train_defective[ok]
    assert ((dm >= np.log(K - 1 + np.e) - 1 - 1e-9) & (dm <= np.log(K - 1 + np.e) + 1e-9)).all()
