"""U-max on the proposed double sum against U-max on Raman et al.'s (the paper's Figure 2).

Notebook ``05-formulation-comparison`` fits both formulations with the same optimiser,
data and seed at each learning rate, over several seeds, and compares the final exact
training log-losses: :func:`run_formulations` trains, :func:`ratio_table` sets the two side
by side (averaged over the seeds) with the ratio ``raman / proposed``, its summaries per
data set and their range over the seeds, :func:`claims_table` judges the paper's claims on
the means and on each seed alone, :func:`plot_formulations` draws the figure and
:func:`check_formulations` asserts the invariants.
"""
from __future__ import annotations

import itertools
import math
import time
import warnings

import numpy as np
import pandas as pd

from scalable_softmax.fit import DivergenceWarning, fit
from scalable_softmax.progress import tqdm

__all__ = ["FORMULATIONS", "SUMMARY_RATES", "dataset_label", "run_formulations",
           "mean_over_seeds", "ratio_table", "claims_table", "preamble", "plot_formulations",
           "check_formulations", "found_lines"]

#: the two formulations as ``fit`` arguments: the paper's (F-5) and Raman's (F-8), both
#: optimised by U-max (Raman's with the correct gradient of docs/math.md section 6)
FORMULATIONS = {"proposed": dict(method="umax"),
                "raman": dict(method="raman", variant="umax")}
#: the ``rate`` labels of the summary rows of :func:`ratio_table`
SUMMARY_RATES = ("mean over rates", "best rate of each", "geometric mean")


def dataset_label(name: str, ds) -> str:
    """A data set's name as shown in the table (synthetic ones marked)."""
    return f"{name} (SYNTHETIC)" if ds.synthetic else name


def _fit_both(name: str, ds, lr: float, seed: int, settings: tuple) -> list[dict]:
    """Both formulations on ``ds`` at ``lr`` and ``seed``: the rows of
    :func:`run_formulations`. ``settings``: ``(epochs, lr_decay, mu, delta0, eval_rows)``,
    the same for every run."""
    epochs, lr_decay, mu, delta0, eval_rows = settings
    rows = []
    for form, spec in FORMULATIONS.items():
        t0 = time.perf_counter()
        with warnings.catch_warnings():   # recorded in the row (diverged, log_loss)
            warnings.simplefilter("ignore", DivergenceWarning)
            res = fit(ds.X, ds.y, lr=lr, epochs=epochs, lr_decay=lr_decay, mu=mu,
                      K=ds.K, seed=seed, eval_epochs=[epochs], eval_rows=eval_rows,
                      progress=False, delta0=delta0, **spec)
        last = res.history.iloc[-1]
        rows.append(dict(dataset=name, synthetic=bool(ds.synthetic), lr=lr,
                         seed=seed, formulation=form,
                         log_loss=float(last["train_log_loss"]),
                         diverged=res.diverged,
                         diverged_at=str(res.diverged_at) if res.diverged else "",
                         epochs_run=int(last["epoch"]),
                         seconds=time.perf_counter() - t0))
    return rows


def run_formulations(data: dict, learning_rates, epochs: int, lr_decay: float, mu: float,
                     seeds, delta0: float, eval_rows=None,
                     progress: bool = True, workers: int = 1) -> pd.DataFrame:
    """Fit both :data:`FORMULATIONS` on every data set of ``data`` (``{name: Dataset}``)
    at every rate and seed of ``seeds`` (a seed or a list), the same seed for both (so they
    see the same data order), evaluated after the last epoch only. One row per run: data
    set, rate, seed, formulation, final training log-loss (``inf`` when the run
    overflowed), divergence, epochs run, seconds. ``workers`` > 1 trains that many
    (data set, rate, seed) pairs at once in separate processes (joblib's loky, one thread
    each); every run is the same as in one process (the rows, in the same order, differ
    only in their seconds)."""
    seeds = [int(seeds)] if np.ndim(seeds) == 0 else [int(s) for s in seeds]
    if int(workers) < 1:
        raise ValueError(f"workers must be at least 1, got {workers!r}")
    tasks = list(itertools.product(data.items(), learning_rates, seeds))
    args = (epochs, lr_decay, mu, delta0, eval_rows)
    bar = tqdm(total=len(tasks) * len(FORMULATIONS), desc="05 runs", disable=not progress)
    rows = []
    if int(workers) == 1:
        for (name, ds), lr, seed in tasks:
            rows += _fit_both(name, ds, lr, seed, args)
            bar.update(len(FORMULATIONS))
    else:
        from joblib import Parallel, delayed

        par = Parallel(n_jobs=int(workers), backend="loky", return_as="generator",
                       inner_max_num_threads=1)
        for part in par(delayed(_fit_both)(name, ds, lr, seed, args)
                        for (name, ds), lr, seed in tasks):
            rows += part
            bar.update(len(FORMULATIONS))
    bar.close()
    return pd.DataFrame(rows)


def _status(dp: bool, dr: bool) -> str:
    if not (dp or dr):
        return "both finite"
    if dp and dr:
        return "both diverged"
    return "proposed diverged" if dp else "raman diverged"


def mean_over_seeds(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs averaged over their seeds: one row per data set, rate and formulation,
    the mean final log-loss (``inf`` when a seed's run diverged), ``diverged`` when any
    seed's did."""
    if "seed" not in runs.columns:
        return runs
    keys = ["dataset", "synthetic", "lr", "formulation"]
    return (runs.groupby(keys, sort=False)
            .agg(log_loss=("log_loss", "mean"), diverged=("diverged", "any"),
                 epochs_run=("epochs_run", "min"), seconds=("seconds", "sum"))
            .reset_index())


def ratio_table(runs: pd.DataFrame, data: dict, epochs: int, paper_ratio: float) -> pd.DataFrame:
    """Per data set and rate both log-losses (averaged over the seeds) and ``ratio =
    raman / proposed`` (``inf`` or undefined where a run diverged), then per data set the
    mean ratio over the rates where both runs are finite (beside ``paper_ratio``), the
    ratio of the two best log-losses (each at its own best rate) and the geometric mean
    ratio. With a ``seed`` column, ``ratio_min`` and ``ratio_max`` give the range of each
    row's ratio over the seeds (each seed's table alone) and ``seeds`` their number."""
    table = _ratio_table(mean_over_seeds(runs), data, epochs, paper_ratio)
    seeds = sorted(runs.seed.unique()) if "seed" in runs.columns else []
    if seeds:
        each = np.column_stack([
            _ratio_table(runs[runs.seed == s], data, epochs, paper_ratio)
            .ratio_raman_over_proposed.to_numpy() for s in seeds])
        table["ratio_min"] = each.min(axis=1)
        table["ratio_max"] = each.max(axis=1)
        table["seeds"] = len(seeds)
    return table


def _ratio_table(runs, data, epochs, paper_ratio) -> pd.DataFrame:
    cols = ["dataset", "lr", "log_loss", "diverged"]
    wide = runs.loc[runs.formulation == "proposed", cols].merge(
        runs.loc[runs.formulation == "raman", cols], on=["dataset", "lr"],
        suffixes=("_proposed", "_raman"))
    with np.errstate(invalid="ignore", divide="ignore"):
        wide["ratio"] = wide.log_loss_raman / wide.log_loss_proposed
    wide["status"] = [_status(dp, dr) for dp, dr in
                      zip(wide.diverged_proposed, wide.diverged_raman)]
    rows = []
    for name, ds in data.items():
        lab = dataset_label(name, ds)
        part = wide[wide.dataset == name]
        for _, r in part.iterrows():
            rows.append(dict(dataset=lab, rate=f"{r.lr:.0e}", epochs=epochs,
                             proposed_log_loss=r.log_loss_proposed,
                             raman_log_loss=r.log_loss_raman, ratio_raman_over_proposed=r.ratio,
                             paper_ratio=np.nan, status=r.status))
        ok = part[part.status == "both finite"]
        ratios = ok.ratio.to_numpy()
        n_ok = f"{len(ok)} of {len(part)} rates both finite"
        rows.append(dict(dataset=lab, rate=SUMMARY_RATES[0], epochs=epochs,
                         proposed_log_loss=np.nan, raman_log_loss=np.nan,
                         ratio_raman_over_proposed=float(ratios.mean()) if len(ratios) else np.nan,
                         paper_ratio=paper_ratio, status=n_ok))
        best_p, best_r = part.log_loss_proposed.min(), part.log_loss_raman.min()
        rows.append(dict(dataset=lab, rate=SUMMARY_RATES[1], epochs=epochs,
                         proposed_log_loss=best_p, raman_log_loss=best_r,
                         ratio_raman_over_proposed=best_r / best_p, paper_ratio=np.nan,
                         status=(f"proposed at {part.lr[part.log_loss_proposed.idxmin()]:.0e}, "
                                 f"raman at {part.lr[part.log_loss_raman.idxmin()]:.0e}")))
        rows.append(dict(dataset=lab, rate=SUMMARY_RATES[2], epochs=epochs,
                         proposed_log_loss=np.nan, raman_log_loss=np.nan,
                         ratio_raman_over_proposed=float(np.exp(np.log(ratios).mean()))
                         if len(ratios) else np.nan,
                         paper_ratio=np.nan, status=n_ok))
    return pd.DataFrame(rows)


def claims_table(runs: pd.DataFrame, data: dict, epochs: int, paper_ratio: float,
                 tolerance: float = 0.1) -> pd.DataFrame:
    """The paper's Figure 2 claims per data set, judged on the seed means and on each
    seed alone (``reporting.seed_claim``): the proposed sum beats Raman's by
    ``paper_ratio`` on average over the rates (within ``tolerance`` of it, or more); it is
    better at every rate; it is better when each formulation's rate is tuned (the ratio of
    the two best log-losses)."""
    from scalable_softmax.repro.fagan.reporting import seed_claim

    seeds = sorted(runs.seed.unique()) if "seed" in runs.columns else [None]
    one = {s: (_ratio_table(runs if s is None else runs[runs.seed == s], data, epochs,
                            paper_ratio)) for s in seeds}
    mean = ratio_table(runs, data, epochs, paper_ratio)

    def stats(t, lab):
        part = t[t.dataset == lab].set_index("rate")
        per_rate = part.drop(index=list(SUMMARY_RATES))
        r = per_rate.ratio_raman_over_proposed
        return (float(part.ratio_raman_over_proposed[SUMMARY_RATES[0]]),
                int((r > 1).sum()), len(r),
                float(part.ratio_raman_over_proposed[SUMMARY_RATES[1]]))

    rows = []
    for name, ds in data.items():
        lab = dataset_label(name, ds)
        m, k, n, b = stats(mean, lab)
        each = [stats(t, lab) for t in one.values()]
        rows.append(seed_claim(
            "the proposed double sum beats Raman's by the paper's factor, on average over "
            "the rates", f"{paper_ratio:g}", f"{m:.2f}", m >= (1 - tolerance) * paper_ratio,
            [e[0] >= (1 - tolerance) * paper_ratio for e in each], dataset=lab))
        rows.append(seed_claim(
            "the proposed double sum is better at every rate", "every rate",
            f"{k} of {n} rates", k == n, [e[1] == e[2] for e in each], dataset=lab))
        rows.append(seed_claim(
            "the proposed double sum is better at each formulation's best rate", "-",
            f"{b:.2f}", b > 1, [e[3] > 1 for e in each], dataset=lab))
    return pd.DataFrame(rows)


def preamble(epochs, delta0, lr_decay, mu, seeds) -> str:
    """The settings paragraph of notebook 05's table."""
    seeds = [seeds] if np.ndim(seeds) == 0 else list(seeds)
    return (
        "Written by `notebooks/05-formulation-comparison.ipynb`: final training log-loss after "
        f"{epochs} epochs (the paper: 50) of U-max (n = m = 1, delta0 = {delta0}, "
        f"lr * {lr_decay}^(epoch-1), mu = {mu}) on each formulation, averaged over seeds "
        f"{', '.join(str(s) for s in seeds)}; "
        "`ratio = raman / proposed` of the means; the mean is over the rates where both runs "
        "are finite; `ratio_min`, `ratio_max`: the range of the row's ratio over the seeds. "
        "Raman's formulation uses the CORRECT gradient (docs/math.md section 6); why the "
        "paper's 3.08 (Figure 2, real Eurlex) is larger is not known (that it used the "
        "original code's defective gradient is a hypothesis). "
        "Rows marked SYNTHETIC are the eurlex-surrogate data set (Eurlex's shape, random data), "
        "not Eurlex. `inf` = the run diverged (overflow).")


def plot_formulations(runs: pd.DataFrame, data: dict, epochs: int):
    """Final training log-loss against the rate, a panel per data set, a line per
    formulation; a diverged run is a cross at the top; ``log K`` dotted."""
    from matplotlib.lines import Line2D

    from scalable_softmax.repro.machinery import style

    runs = mean_over_seeds(runs)
    fig, axes = style.panel_grid(len(data), ncols=2, panel_height=3.0)
    styles = {"proposed": dict(color=style.color("umax"), marker=style.marker("umax"),
                               label="U-max, proposed double sum (F-5)"),
              "raman": dict(color=style.color("raman"), marker=style.marker("raman"),
                            label="U-max, Raman's double sum (F-8)")}
    for ax, (name, ds) in zip(axes, data.items()):
        part = runs[runs.dataset == name]
        finite = part.log_loss[np.isfinite(part.log_loss)]
        top = finite.max() * 1.5 if len(finite) else 1.0
        for form, st in styles.items():
            r = part[part.formulation == form]
            ok = np.isfinite(r.log_loss)
            ax.plot(r.lr[ok], r.log_loss[ok], **st)
            if (~ok).any():
                ax.plot(r.lr[~ok], np.full((~ok).sum(), top), ls="none", marker="x",
                        color=st["color"], ms=8, mew=2)
        ax.axhline(np.log(ds.K), color="0.4", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        style.log_ticks(ax)
        ax.set_xlabel("initial learning rate")
        ax.set_ylabel(f"train log-loss after {epochs} epochs")
        title = f"{name} (SYNTHETIC, Eurlex's shape)" if ds.synthetic else f"{name} (real)"
        ax.set_title(f"{title}\nN={ds.X.shape[0]:,}, D={ds.X.shape[1]:,}, K={ds.K}")
    handles = [Line2D([], [], **st) for st in styles.values()]
    if runs.diverged.any():
        handles.append(Line2D([], [], ls="none", marker="x", mew=2, color="0.3",
                              label="diverged"))
    handles.append(Line2D([], [], ls=":", color="0.4", label="log K (uniform predictor)"))
    style.legend_below(fig, handles, ncol=2)
    fig.suptitle("U-max on the two double-sum formulations (correct Raman gradient)")
    return fig


def check_formulations(runs: pd.DataFrame, table: pd.DataFrame, data: dict,
                       learning_rates, epochs: int) -> None:
    """Notebook 05's invariants (``AssertionError`` when one fails): every run finite or
    diverged with ``inf`` and finished runs ran every epoch; the per-rate ratios are
    those of the runs and the mean row is their mean over the rates where both are
    finite."""
    n_seeds = runs.seed.nunique() if "seed" in runs.columns else 1
    assert len(runs) == len(FORMULATIONS) * len(data) * len(learning_rates) * n_seeds
    assert (np.isfinite(runs.log_loss) | runs.diverged).all(), runs[~np.isfinite(runs.log_loss)]
    assert (runs.log_loss[runs.diverged] == np.inf).all()
    assert (runs.log_loss[~runs.diverged] > 0).all()
    assert (runs.epochs_run[~runs.diverged] == epochs).all()
    per_rate = table[~table.rate.isin(SUMMARY_RATES)]
    assert len(per_rate) == len(data) * len(learning_rates)
    fin = np.isfinite(per_rate.proposed_log_loss) & np.isfinite(per_rate.raman_log_loss)
    np.testing.assert_allclose(per_rate.ratio_raman_over_proposed[fin],
                               per_rate.raman_log_loss[fin] / per_rate.proposed_log_loss[fin])
    for name, ds in data.items():
        lab = dataset_label(name, ds)
        sub = per_rate[per_rate.dataset == lab]
        r = sub.ratio_raman_over_proposed[np.isfinite(sub.proposed_log_loss)
                                          & np.isfinite(sub.raman_log_loss)]
        mean_row = table[(table.dataset == lab) & (table.rate == SUMMARY_RATES[0])]
        assert len(mean_row) == 1
        if len(r):
            assert math.isclose(mean_row.ratio_raman_over_proposed.iloc[0], r.mean(),
                                rel_tol=1e-12)
        else:
            assert np.isnan(mean_row.ratio_raman_over_proposed.iloc[0])


def _span(values: pd.Series, fmt: str) -> str:
    lo, hi = values.min(), values.max()
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)} to {fmt.format(hi)}"


def found_lines(table: pd.DataFrame, data: dict) -> list[str]:
    """The numbers notebook 05's "What we found" rests on, as sentences built from this
    run's ``table`` (:func:`ratio_table`) over the data sets of ``data``: per data set the
    mean and geometric mean ratio ``raman / proposed``, the rates where each formulation
    is better with the range of the ratios there, the proposed formulation's log-loss
    beside ``log K`` at those rates, and the two best log-losses."""
    lines = []
    for name, ds in data.items():
        lab = dataset_label(name, ds)
        part = table[table.dataset == lab].set_index("rate")
        per_rate = part.drop(index=[r for r in SUMMARY_RATES if r in part.index])
        finite = per_rate[per_rate.status == "both finite"]
        mean = part.ratio_raman_over_proposed.get(SUMMARY_RATES[0], np.nan)
        geo = part.ratio_raman_over_proposed.get(SUMMARY_RATES[2], np.nan)
        diverged = int((per_rate.status != "both finite").sum())
        lines.append(f"{lab}: mean ratio raman / proposed over the rates {mean:.2f} "
                     f"(geometric mean {geo:.2f}; {len(finite)} of {len(per_rate)} rates both "
                     f"finite, {diverged} with a diverged run).")
        for better, sel in (("proposed", finite.ratio_raman_over_proposed > 1),
                            ("raman", finite.ratio_raman_over_proposed <= 1)):
            part_ = finite[sel]
            if not len(part_):
                lines.append(f"  {better} better at no rate.")
                continue
            lines.append(f"  {better} better at {', '.join(part_.index)} (ratio "
                         f"{_span(part_.ratio_raman_over_proposed, '{:.2f}')}); the proposed "
                         f"log-loss there {_span(part_.proposed_log_loss, '{:.3g}')}, "
                         f"log K = {np.log(ds.K):.2f}.")
        if SUMMARY_RATES[1] in part.index:
            b = part.loc[SUMMARY_RATES[1]]
            lines.append(f"  at each formulation's best rate ({b.status}): proposed "
                         f"{b.proposed_log_loss:.3g}, raman {b.raman_log_loss:.3g} (ratio "
                         f"{b.ratio_raman_over_proposed:.2f}).")
        if "seeds" in part.columns:
            lines.append("  over the " + f"{int(part.seeds.iloc[0])} seeds: " + ", ".join(
                f"{r} {part.ratio_min[r]:.2f} to {part.ratio_max[r]:.2f}"
                for r in SUMMARY_RATES if r in part.index) + ".")
    return lines
