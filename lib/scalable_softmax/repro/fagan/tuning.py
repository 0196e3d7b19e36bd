"""Learning-rate tuning (the paper's Table 2) and sensitivity (its Appendix G, Figure 3).

Notebook ``03-learning-rate-tuning`` runs every method at every rate of a grid on 10% of
each training set and chooses a rate per data set and method; notebook
``04-learning-rate-sensitivity`` runs every method at every rate on the full training
set and compares the methods rate by rate. This module holds what the two notebooks
compute, so that each reads as claim, parameters, runs, tables, figures and findings:

* :func:`rate_grid`, :func:`tuning_specs`, :func:`grid_frame`, :func:`choose_rates`,
  :func:`agreement_counts`, :func:`table2_wide`, :func:`choose_by_score`,
  :func:`authors_code_comparison`, :func:`plot_tuning`, :func:`check_choice` (notebook 03);
* :func:`sensitivity_variants`, :func:`sensitivity_specs`, :func:`sensitivity_frames`,
  :func:`sensitivity_table`, :func:`best_method_table`, :func:`best_method_summary`,
  :func:`plot_sensitivity_curves`, :func:`plot_final_vs_rate`,
  :func:`check_sensitivity` (notebook 04);
* :func:`fmt_rate` and :func:`agreement` for both.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scalable_softmax.fit import default_eval_epochs
from scalable_softmax.repro.machinery import style
from scalable_softmax.repro.machinery.runs import (
    PAPER_METHODS,
    PAPER_TABLE2,
    RunSpec,
    histories_frame,
    results_frame,
)

__all__ = ["AGREEMENT_ORDER", "SAMPLED", "CHOSEN_MD_COLUMNS", "GRID_MD_COLUMNS",
           "SENSITIVITY_MD_COLUMNS", "fmt_rate", "agreement", "check_methods", "rate_grid",
           "tuning_specs", "grid_frame", "grid_overview", "dataset_label", "choose_rates",
           "agreement_counts", "agreement_report", "tuning_preamble", "table2_wide",
           "choose_by_score", "authors_code_comparison", "plot_tuning", "check_choice",
           "sensitivity_variants", "sensitivity_specs", "sensitivity_frames",
           "sensitivity_found_lines", "tuning_found_lines",
           "sensitivity_table", "sensitivity_preamble", "best_method_table",
           "best_method_summary", "plot_sensitivity_curves", "plot_final_vs_rate",
           "check_sensitivity", "sensitivity_seeds", "sensitivity_seed_claims"]

#: the agreement classes of a tuned rate with the paper's, closest first
AGREEMENT_ORDER = ["equal", "within 10x", "within 100x", "further", "no stable rate"]
#: the biased baselines, which the authors' code scored with its defective metric
SAMPLED = ("ove", "nce", "is")
#: the columns of the markdown table of notebook 03's chosen rates
CHOSEN_MD_COLUMNS = ["dataset", "method", "paper_lr", "compared", "our_lr", "decades_off",
                     "agreement", "best_lr", "best_log_loss", "largest_stable_lr",
                     "log_loss_at_paper_lr", "loss_ratio_paper_over_best",
                     "best_at_grid_edge", "rates_diverged"]
#: the columns of the markdown table of notebook 03's grid of runs
GRID_MD_COLUMNS = ["dataset", "data", "method", "lr", "train_log_loss", "train_error",
                   "diverged", "diverged_at"]
#: the columns of the markdown table of notebook 04's runs
SENSITIVITY_MD_COLUMNS = ["dataset", "method", "lr", "train_log_loss", "train_defective",
                          "train_error", "test_log_loss", "test_error", "diverged",
                          "diverged_at"]


# ---------------------------------------------------------------------------
# shared
# ---------------------------------------------------------------------------

def fmt_rate(lr) -> str:
    """A rate as shown in tables: a power of ten as ``"1ek"``, anything else with ``%g``;
    ``"none"`` for None or a non-finite rate."""
    if lr is None or not np.isfinite(lr):
        return "none"
    k = math.log10(lr)
    return f"1e{int(round(k))}" if abs(k - round(k)) < 1e-9 else f"{lr:g}"


def agreement(ours, paper_lr) -> str:
    """How close a tuned rate is to the paper's, in decades (:data:`AGREEMENT_ORDER`);
    ``"no stable rate"`` when ``ours`` is not finite."""
    if not np.isfinite(ours):
        return "no stable rate"
    k = abs(round(math.log10(ours / paper_lr)))
    return AGREEMENT_ORDER[min(k, 3)]


def check_methods(methods) -> None:
    """Raise ``ValueError`` naming ``methods`` when one is not among the paper's six."""
    unknown = sorted(set(methods) - set(PAPER_METHODS))
    if unknown:
        raise ValueError(f"methods: {unknown} are not among the paper's {PAPER_METHODS}")


def _diverged(frame: pd.DataFrame) -> pd.Series:
    """A run counts as diverged when it overflowed or its log-loss is not finite."""
    return frame.diverged.astype(bool) | ~np.isfinite(frame.train_log_loss.astype(float))


def _diverged_at(values) -> list[str]:
    return [str(tuple(v)) if isinstance(v, list) else "" for v in values]


# ---------------------------------------------------------------------------
# notebook 03: tuning on a fraction of the training data
# ---------------------------------------------------------------------------

def rate_grid(methods, learning_rates, vanilla_extra_rates=()) -> dict:
    """``{method: sorted initial rates}``: the grid, and for vanilla SGD also the extra
    low rates."""
    return {m: sorted(set(learning_rates) | set(vanilla_extra_rates if m == "vanilla" else []))
            for m in methods}


def tuning_specs(loader: dict, rates: dict, **options) -> list:
    """One :class:`RunSpec` per data set of ``loader`` (``{paper name: loader name}``),
    method and rate of ``rates`` (:func:`rate_grid`), in that order; only the final
    training evaluation (no monitoring, no test set). ``options`` go to
    :meth:`RunSpec.make` (seed, epochs, train_fraction, protocol, ...)."""
    return [RunSpec.make(loader[d], m, lr, monitor_rows=None, eval_epochs=[], test=False,
                         **options)
            for d in loader for m in rates for lr in rates[m]]


def grid_frame(results, loader: dict) -> pd.DataFrame:
    """Notebook 03's table of every run: paper name, loader name, method, rate, final
    training log-loss and error, divergence, shape and seconds."""
    frame = results_frame(results)
    name_of = {v: k for k, v in loader.items()}
    return pd.DataFrame({
        "dataset": frame.dataset.map(name_of),
        "data": frame.dataset,
        "synthetic": frame.synthetic.astype(bool),
        "method": frame.method,
        "lr": frame.lr,
        "train_log_loss": frame.train_log_loss.astype(float),
        "train_error": frame.train_error.astype(float),
        "diverged": _diverged(frame),
        "diverged_at": _diverged_at(frame.diverged_at),
        "epochs_run": frame.epochs_run.astype(int),
        "train_rows": frame.N.astype(int),
        "K": frame.K.astype(int),
        "train_seconds": frame.train_seconds.astype(float),
        "wall_seconds": frame.wall_seconds.astype(float),
        "from_cache": frame.from_cache.astype(bool),
    })


def grid_overview(grid: pd.DataFrame) -> pd.DataFrame:
    """Runs, diverged runs and seconds per data set (rows) and method (columns)."""
    return (grid.groupby(["dataset", "method"], sort=False)
            .agg(runs=("lr", "size"), diverged=("diverged", "sum"),
                 seconds=("wall_seconds", "sum")).unstack("method"))


def dataset_label(grid: pd.DataFrame, d: str) -> str:
    """A data set's name as the tables show it (surrogates marked SYNTHETIC)."""
    sub = grid[grid.dataset == d]
    return f"{d} (SYNTHETIC surrogate)" if sub.synthetic.any() else d


def _edge(best_lr, grid_rates) -> str:
    if best_lr == grid_rates.min():
        return "lowest rate"
    return "highest rate" if best_lr == grid_rates.max() else ""


def _chosen_row(part: pd.DataFrame, method: str, paper_lr: float) -> dict:
    ok = part[~part.diverged]
    best = ok.loc[ok.train_log_loss.idxmin()] if len(ok) else None
    best_lr = float(best.lr) if best is not None else np.nan
    stable_lr = float(ok.lr.max()) if len(ok) else np.nan
    compared = stable_lr if method == "vanilla" else best_lr
    at_paper = part[np.isclose(part.lr, paper_lr, rtol=1e-12)]
    loss_at_paper = float(at_paper.train_log_loss.iloc[0]) if len(at_paper) else np.nan
    off = math.log10(compared / paper_lr) if np.isfinite(compared) else np.nan
    return dict(
        method=method, paper_lr=paper_lr,
        compared="largest stable" if method == "vanilla" else "best",
        our_lr=compared, decades_off=round(off) if np.isfinite(off) else np.nan,
        agreement=agreement(compared, paper_lr),
        best_lr=best_lr,
        best_log_loss=float(best.train_log_loss) if best is not None else np.inf,
        largest_stable_lr=stable_lr,
        log_loss_at_paper_lr=loss_at_paper,
        loss_ratio_paper_over_best=(loss_at_paper / float(best.train_log_loss)
                                    if best is not None else np.nan),
        best_at_grid_edge="" if best is None else _edge(best_lr, part.lr.to_numpy()),
        rates_tried=len(part), rates_diverged=int(part.diverged.sum()))


def choose_rates(grid: pd.DataFrame, loader: dict, methods, paper=None) -> pd.DataFrame:
    """Per data set of ``loader`` and method: the **best** rate (lowest final log-loss
    among the runs that did not diverge), the **largest stable** rate, the one compared
    with the paper's (``paper[d][m]``, default Table 2; vanilla SGD: the largest stable
    one), the agreement in decades, the log-loss at the paper's rate and whether the best
    rate is at the edge of the grid."""
    paper = PAPER_TABLE2 if paper is None else paper
    rows = []
    for d in loader:
        for m in methods:
            part = grid[(grid.dataset == d) & (grid.method == m)].sort_values("lr")
            row = dict(dataset=dataset_label(grid, d), data=loader[d],
                       synthetic=bool(part.synthetic.any()))
            row.update(_chosen_row(part, m, paper[d][m]))
            rows.append(row)
    return pd.DataFrame(rows)


def agreement_counts(chosen: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(counts, per_method)``: cells per agreement class for the real data sets, the
    synthetic surrogates and ``all``; per method the cells equal and within 10x."""
    kind = np.where(chosen.synthetic, "synthetic surrogate", "real")
    counts = (chosen.assign(kind=kind).groupby(["kind", "agreement"]).size()
              .unstack(fill_value=0).reindex(columns=AGREEMENT_ORDER, fill_value=0))
    counts.loc["all"] = counts.sum()
    per_method = (chosen.assign(within10=chosen.agreement.isin(["equal", "within 10x"]),
                                equal=chosen.agreement == "equal")
                  .groupby("method", sort=False)[["equal", "within10"]].sum())
    return counts, per_method


def agreement_report(chosen: pd.DataFrame) -> str:
    """The numbers the findings quote: cells equal / within 10x / further, cells above
    and below the paper's rate, and vanilla SGD's largest stable and best rates."""
    n_cells = len(chosen)
    n_equal = int((chosen.agreement == "equal").sum())
    n_within10 = int(chosen.agreement.isin(["equal", "within 10x"]).sum())
    lines = [f"of {n_cells} cells: {n_equal} equal to the paper's rate, {n_within10} within "
             f"10x (equal included), {n_cells - n_within10} further or without a stable rate",
             f"our rate higher than the paper's in {int((chosen.decades_off > 0).sum())} "
             f"cells, lower in {int((chosen.decades_off < 0).sum())}",
             "vanilla SGD, largest stable / best / paper:"]
    for _, r in chosen[chosen.method == "vanilla"].iterrows():
        lines.append(f"  {r.dataset:32s} stable {fmt_rate(r.largest_stable_lr):>5s}  best "
                     f"{fmt_rate(r.best_lr):>5s}  paper {fmt_rate(r.paper_lr)}")
    return "\n".join(lines)


def tuning_preamble(epochs, lr_decay, train_fraction, seed, final_rows) -> str:
    """The settings sentence every table of notebook 03 starts with."""
    return (
        f"Written by `notebooks/03-learning-rate-tuning.ipynb`: {epochs} epochs (the paper: 50) "
        f"at lr * {lr_decay}^(epoch-1) on a seeded {train_fraction:.0%} of each training set, "
        f"seed {seed}; OVE/NCE/IS n = 100, m = 5; vanilla/U-max/Implicit n = m = 1; mu = 0; "
        "score = exact training log-loss of the final weights on that subset"
        + (" (all its rows)" if final_rows is None else f" (a seeded sample of {final_rows} rows)")
        + "; diverged runs (overflow) score inf and are never chosen. Rows marked SYNTHETIC are "
        "surrogates of the paper's data set (random data of its shape), not the real data.")


def table2_wide(chosen: pd.DataFrame, loader: dict, methods) -> pd.DataFrame:
    """The paper's Table 2 shape: a row per data set, a column per method, each cell
    ``our rate / the paper's`` (vanilla SGD: largest stable rate, best rate in brackets)."""
    rows = []
    for d in loader:
        sub = chosen[chosen.data == loader[d]]
        row = {"dataset": sub.dataset.iloc[0]}
        for m in methods:
            r = sub[sub.method == m].iloc[0]
            if m == "vanilla":
                row[m] = (f"{fmt_rate(r.largest_stable_lr)} (best {fmt_rate(r.best_lr)}) "
                          f"/ {fmt_rate(r.paper_lr)}")
            else:
                row[m] = f"{fmt_rate(r.our_lr)} / {fmt_rate(r.paper_lr)}"
        rows.append(row)
    return pd.DataFrame(rows)


def choose_by_score(frame: pd.DataFrame, loader: dict, methods,
                    sampled_score: str = "train_log_loss") -> pd.DataFrame:
    """Per data set and method of a :func:`results_frame`: the best rate (largest stable
    for vanilla SGD), scored by the exact log-loss, or for OVE/NCE/IS by
    ``sampled_score`` (``"train_defective"``: as the authors' code recorded them), with
    the exact log-loss at the chosen rate and the number of diverged rates."""
    out = []
    for d in loader:
        for m in methods:
            part = frame[(frame.dataset == loader[d]) & (frame.method == m)]
            bad = _diverged(part)
            ok = part[~bad]
            col = sampled_score if m in SAMPLED else "train_log_loss"
            at = ok[col].astype(float).idxmin() if len(ok) else None
            best_lr = float(ok.lr[at]) if len(ok) else np.nan
            stable = float(ok.lr.max()) if len(ok) else np.nan
            out.append(dict(dataset=d, method=m, lr=stable if m == "vanilla" else best_lr,
                            best_log_loss=float(ok.train_log_loss[at]) if len(ok) else np.inf,
                            rates_diverged=int(bad.sum())))
    return pd.DataFrame(out)


def authors_code_comparison(chosen: pd.DataFrame, authors: pd.DataFrame,
                            protocol: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(both, agree)``: notebook 03's choice under the paper's text beside the choice
    ``authors`` (:func:`choose_by_score`, same cells in the same order) under
    ``protocol``, and the count of cells per agreement class under each."""
    if len(authors) != len(chosen):
        raise ValueError(f"authors: {len(authors)} cells, chosen: {len(chosen)}; both must "
                         "cover the same data sets and methods")
    both = chosen[["dataset", "data", "method", "paper_lr", "our_lr", "agreement"]].rename(
        columns={"our_lr": "paper_text_lr", "agreement": "paper_text_agreement"})
    both["authors_code_lr"] = authors.lr.to_numpy()
    both["authors_code_log_loss"] = authors.best_log_loss.to_numpy()
    both["authors_code_agreement"] = [agreement(o, p) for o, p in
                                      zip(both.authors_code_lr, both.paper_lr)]
    both["authors_code_rates_diverged"] = authors.rates_diverged.to_numpy()
    agree = pd.DataFrame({
        "paper-text (random 10%)": both.paper_text_agreement.value_counts(),
        f"{protocol} (first 10%)": both.authors_code_agreement.value_counts(),
    }).reindex(AGREEMENT_ORDER).fillna(0).astype(int)
    return both, agree


def plot_tuning(grid, chosen, loader: dict, methods, epochs, train_fraction, seed):
    """Final log-loss against the initial rate: a panel per data set, a line per method,
    a cross for a diverged run, a star at the paper's rate, a ring at our best rate."""
    from matplotlib.lines import Line2D

    datasets = list(loader)
    fig, axes = style.panel_grid(len(datasets) + 1, ncols=3, panel_height=2.45)
    for ax, d in zip(axes, datasets):
        part = grid[grid.dataset == d]
        finite = part.train_log_loss[~part.diverged]
        top = finite.max() * 2 if len(finite) else 10.0
        crosses = []          # (rate, colour) of every diverged run: stacked where rates meet
        for m in style.ordered(methods):
            r = part[part.method == m].sort_values("lr")
            ok = ~r.diverged
            ax.plot(r.lr[ok], r.train_log_loss[ok], **style.line(m, ms=3, lw=1.2))
            if (~ok).any():
                crosses += [(x, style.color(m)) for x in r.lr[~ok]]
            c = chosen[(chosen.data == loader[d]) & (chosen.method == m)].iloc[0]
            if np.isfinite(c.best_lr):
                ax.plot([c.best_lr], [c.best_log_loss], ls="none", marker="o", ms=9,
                        mfc="none", mew=1.2, color=style.color(m))
            if np.isfinite(c.log_loss_at_paper_lr):
                ax.plot([c.paper_lr], [c.log_loss_at_paper_lr], ls="none", marker="*", ms=10,
                        color=style.color(m), mec="k", mew=0.5)
        for (x, col), y in zip(crosses, style.stacked([x for x, _ in crosses], top)):
            ax.plot([x], [y], ls="none", marker="x", color=col, ms=6, mew=1.5)
        ax.set_xscale("log")
        ax.set_yscale("log")
        style.log_ticks(ax)
        n, K = int(part.train_rows.iloc[0]), int(part.K.iloc[0])
        ax.set_title(f"{style.dataset_label(d, part.synthetic.any())}\n{n:,} rows, K = {K:,}")
        ax.set_xlabel("initial learning rate")
    for ax in axes[:len(datasets):3]:
        ax.set_ylabel(f"train log-loss\nafter {epochs} epochs")
    handles = style.handles(methods, ms=4)
    handles += [Line2D([], [], ls="none", marker="x", color="k", mew=1.5,
                       label="diverged (overflow)"),
                Line2D([], [], ls="none", marker="*", ms=10, color="w", mec="k",
                       label="the paper's rate (Table 2)"),
                Line2D([], [], ls="none", marker="o", ms=9, mfc="none", color="k",
                       label="our best rate")]
    style.legend_panel(axes[-1], handles, ncol=2 if len(datasets) % 3 == 2 else 1)
    fig.suptitle(f"Learning-rate tuning on {train_fraction:.0%} of the training data "
                 f"({epochs} epochs, seed {seed})")
    return fig


def check_choice(grid: pd.DataFrame, chosen: pd.DataFrame, rates: dict, epochs: int) -> None:
    """Notebook 03's invariants (``AssertionError`` when one fails): every planned run is
    in the grid once, finite or diverged with ``inf``; a chosen rate is never a diverged
    run and has the lowest log-loss of its cell; vanilla's largest stable rate is at least
    its best rate; a cell without a stable rate says so."""
    n_data = grid.dataset.nunique()
    assert len(grid) == n_data * sum(len(r) for r in rates.values())
    assert not grid.duplicated(["dataset", "method", "lr"]).any()
    assert (np.isfinite(grid.train_log_loss) | grid.diverged).all()
    assert (grid.train_log_loss[grid.diverged] == np.inf).all()
    assert (grid.train_log_loss[~grid.diverged] > 0).all()
    assert (grid.epochs_run[~grid.diverged] == epochs).all()
    assert len(chosen) == n_data * len(rates)
    for _, c in chosen.iterrows():
        part = grid[(grid.data == c.data) & (grid.method == c.method)]
        assert len(part) == len(rates[c.method])
        ok = part[~part.diverged]
        if len(ok):
            winner = part.sort_values(["train_log_loss", "lr"]).iloc[0]
            assert not winner.diverged and winner.lr == c.best_lr, (c.dataset, c.method)
            assert c.best_log_loss == ok.train_log_loss.min()
            assert c.largest_stable_lr == ok.lr.max() >= c.best_lr
            assert c.our_lr == (c.largest_stable_lr if c.method == "vanilla" else c.best_lr)
            assert math.isclose(10 ** c.decades_off, c.our_lr / c.paper_lr, rel_tol=1e-9)
        else:
            assert c.agreement == "no stable rate" and np.isnan(c.our_lr)


# ---------------------------------------------------------------------------
# notebook 04: sensitivity on the full training set
# ---------------------------------------------------------------------------

def sensitivity_variants(methods, nce_11: bool = True) -> dict:
    """``{variant name: (method, extra RunSpec options)}``: the methods, and with
    ``nce_11`` the paper's NCE (1,1) (``n = m = 1``)."""
    variants = {m: ("nce" if m == "nce (1,1)" else m, {}) for m in methods}
    if nce_11:
        variants["nce (1,1)"] = ("nce", dict(batch_size=1, n_sampled=1))
    return variants


def sensitivity_specs(loader: dict, variants: dict, learning_rates, **options):
    """``(specs, keys)``: a :class:`RunSpec` per data set of ``loader``, variant and rate
    (``options`` go to :meth:`RunSpec.make`), and its ``(paper name, variant, rate)``."""
    specs, keys = [], []
    for d in loader:
        for v, (m, opts) in variants.items():
            for lr in learning_rates:
                specs.append(RunSpec.make(loader[d], m, lr, **options, **opts))
                keys.append((d, v, lr))
    return specs, keys


def sensitivity_frames(results, keys, loader: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(frame, history)``: :func:`results_frame` and :func:`histories_frame` of the
    runs with their paper data-set name (``paper_dataset``) and ``variant``."""
    frame = results_frame(results)
    frame["paper_dataset"] = [k[0] for k in keys]
    frame["variant"] = [k[1] for k in keys]
    history = histories_frame(results)
    history["paper_dataset"] = history.dataset.map({v: k for k, v in loader.items()})
    history["variant"] = np.concatenate(
        [[k[1]] * int((r.history.evaluated.astype(bool) | r.history.diverged.astype(bool)).sum())
         for k, r in zip(keys, results)])
    return frame, history


def sensitivity_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Notebook 04's table of every run: final exact train/test log-loss and error, the
    defective metric, ``log K``, divergence and seconds per epoch."""
    synthetic = frame.groupby("paper_dataset").synthetic.any()
    label = {d: f"{d} (SYNTHETIC surrogate)" if bool(s) else d for d, s in synthetic.items()}
    return pd.DataFrame({
        "dataset": [label[d] for d in frame.paper_dataset],
        "data": frame.dataset,
        "synthetic": frame.synthetic.astype(bool),
        "method": frame.variant,
        "lr": frame.lr,
        "train_log_loss": frame.train_log_loss.astype(float),
        "train_defective": frame.train_defective.astype(float),
        "train_error": frame.train_error.astype(float),
        "test_log_loss": frame.test_log_loss.astype(float),
        "test_error": frame.test_error.astype(float),
        "log_K": np.log(frame.K.astype(float)),
        "diverged": _diverged(frame),
        "diverged_at": _diverged_at(frame.diverged_at),
        "seconds_per_epoch": frame.seconds_per_epoch.astype(float),
    })


def sensitivity_preamble(protocol: str, description: str, epochs, seed) -> str:
    """The settings paragraph of notebook 04's run table (``description``: the
    protocol's one-line description)."""
    return (
        f"Written by `notebooks/04-learning-rate-sensitivity.ipynb`: protocol `{protocol}` "
        f"({description}), {epochs} epochs (the "
        f"paper: 50) at lr * 0.9^(epoch-1) on the full training set, seed {seed}; OVE/NCE/IS "
        "n = 100, m = 5, `nce (1,1)` n = m = 1; mu = 0. "
        "`train_log_loss`, `test_log_loss`: exact log-loss of the final weights on the whole "
        "set; `train_defective`: the original code's defective metric (docs/math.md section 7), "
        "what the paper plotted for OVE, NCE and IS. Rows marked SYNTHETIC are a surrogate "
        "of the paper's data set (random data of its shape), not the real data. `inf` = "
        "the run diverged (overflow) at `diverged_at` = (epoch, step).")


def best_method_table(table: pd.DataFrame, loader: dict, learning_rates, methods,
                      variants) -> pd.DataFrame:
    """Per data set and rate: every variant's final training log-loss, the best of
    ``methods`` (the paper's six; ``"none"`` when all diverged), Implicit SGD's log-loss
    over the best one and ``log K``."""
    rows = []
    for d in loader:
        for lr in learning_rates:
            part = table[(table.data == loader[d]) & (table.lr == lr)].set_index("method")
            ll = part.train_log_loss
            finite = ll[np.isfinite(ll)]
            paper_six = finite[finite.index.isin(methods)]
            row = {"dataset": part.dataset.iloc[0], "lr": lr}
            row.update({m: float(ll[m]) for m in variants})
            row["best_method"] = paper_six.idxmin() if len(paper_six) else "none"
            row["best_log_loss"] = float(paper_six.min()) if len(paper_six) else np.inf
            if "implicit" in methods:
                row["implicit_over_best"] = float(ll["implicit"]) / row["best_log_loss"]
            row["log_K"] = float(part.log_K.iloc[0])
            rows.append(row)
    return pd.DataFrame(rows)


def best_method_summary(best: pd.DataFrame, variants) -> str:
    """Per data set: at how many rates Implicit SGD is best, the wins of each method,
    U-max's final log-loss over ``log K`` and NCE (1,1) over NCE per rate."""
    lines = []
    for name, sub in best.groupby("dataset", sort=False):
        n_impl = int((sub.best_method == "implicit").sum())
        wins = sub.best_method.value_counts().to_dict()
        lines.append(f"{name}: Implicit SGD best at {n_impl} of {len(sub)} rates; wins {wins}")
        if "umax" in variants:
            lines.append("  U-max final log-loss / log K per rate: " + ", ".join(
                f"{fmt_rate(r.lr)}: {r.umax / r.log_K:.3g}" for r in sub.itertuples()))
        if "nce (1,1)" in variants and "nce" in variants:
            ratio = sub["nce (1,1)"] / sub["nce"]
            lines.append("  NCE (1,1) / NCE final log-loss per rate: " + ", ".join(
                f"{fmt_rate(lr)}: {q:.3g}" for lr, q in zip(sub.lr, ratio)))
    return "\n".join(lines)


def plot_sensitivity_curves(history, frame, table, d: str, variants, learning_rates, seed):
    """The paper's Figure 3 for data set ``d`` (its paper name): a panel per variant, a
    line per rate of the exact log-loss per epoch, a cross where a run overflowed,
    ``log K`` dotted; the panels share the y axis. ``history``, ``frame``: of
    :func:`sensitivity_frames`; ``table``: of :func:`sensitivity_table`."""
    from matplotlib.lines import Line2D

    rate_color = style.rate_colors(learning_rates)
    hd = history[history.paper_dataset == d]
    runs = frame[frame.paper_dataset == d]
    rows = table[table.data == runs.dataset.iloc[0]]
    logK = float(rows.log_K.iloc[0])
    fin = hd.train_log_loss[np.isfinite(hd.train_log_loss)]
    lo, hi = max(fin.min() * 0.8, 1e-3), fin.max() * 2
    order = style.ordered(variants)
    last_epoch = float(hd.epoch.max())
    fig, axes = style.panel_grid(len(order) + 1, ncols=3, panel_height=2.2, sharey=True)
    for ax, v in zip(axes, order):
        crosses = []          # (epoch, colour) of each rate's first non-finite epoch
        for lr in learning_rates:
            h = hd[(hd.variant == v) & (hd.lr == lr)].sort_values("epoch")
            ok = np.isfinite(h.train_log_loss)
            ax.plot(h.epoch[ok], h.train_log_loss[ok], marker=".", ms=3, lw=1.2,
                    color=rate_color[float(lr)])
            if (~ok).any():
                crosses.append((float(h.epoch[~ok].iloc[0]), rate_color[float(lr)]))
        n_diverged = len(crosses)
        # rates that diverge at the same epoch: their crosses stacked, not hidden
        for (x, col), y in zip(crosses, style.stacked([x for x, _ in crosses], hi)):
            ax.plot([x], [y], ls="none", marker="x", ms=7, mew=1.5, color=col,
                    clip_on=False)
        if n_diverged == len(learning_rates):
            ax.text(0.5, 0.5, "diverged at every rate\n(\u00d7: the first monitored epoch\n"
                              "with a non-finite log-loss)", transform=ax.transAxes,
                    ha="center", va="center", fontsize=8, color="0.25")
        ax.axhline(logK, ls=":", color="0.4", lw=1)
        ax.set_yscale("log")
        ax.set_ylim(lo, hi * 1.3)
        # every panel on the same epoch axis, also one whose runs all diverged early
        ax.set_xlim(-0.03 * last_epoch, 1.03 * last_epoch)
        ax.set_title(style.label(v), color=style.text_color(v))
        ax.set_xlabel("epoch")
        ax.tick_params(labelleft=True)
    for ax in axes[:len(order):3]:
        ax.set_ylabel("train log-loss (exact)")
    handles = [Line2D([], [], color=rate_color[float(lr)], marker=".", label=fmt_rate(lr))
               for lr in learning_rates]
    handles += [Line2D([], [], ls="none", marker="x", mew=1.5, color="k", label="diverged"),
                Line2D([], [], ls=":", color="0.4", label="log K")]
    style.legend_panel(axes[-1], handles, title="initial rate", ncol=2)
    kind = ("SYNTHETIC surrogate of Eurlex's shape" if "SYNTHETIC" in rows.dataset.iloc[0]
            else "real data")
    n, K = int(runs.N.iloc[0]), int(runs.K.iloc[0])
    fig.suptitle(f"{d} ({kind}, N = {n:,}, K = {K:,}): "
                 f"log-loss per epoch for each initial rate, seed {seed}")
    return fig


def plot_final_vs_rate(table: pd.DataFrame, loader: dict, variants, epochs):
    """Top: the exact final training log-loss of every variant against the rate, a panel
    per data set; bottom: the defective metric of OVE/NCE/IS with its band
    ``[log(K-1+e) - 1, log(K-1+e)]``."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    datasets = list(loader)
    fig, axes = plt.subplots(2, len(datasets), figsize=(style.FIG_WIDTH, 5.6), squeeze=False,
                             sharex=True, height_ratios=(1.6, 1))
    sampled = [v for v in variants if v in SAMPLED]
    for j, d in enumerate(datasets):
        part = table[table.data == loader[d]]
        fin = part.train_log_loss[np.isfinite(part.train_log_loss)]
        top = fin.max() * 2 if len(fin) else 10.0
        ax, bx = axes[0, j], axes[1, j]
        crosses = []          # (rate, colour) of every diverged run: stacked where rates meet
        for v in style.ordered(variants):
            r = part[part.method == v].sort_values("lr")
            ok = np.isfinite(r.train_log_loss)
            # a method with few finite points (vanilla SGD diverges at most rates) is
            # drawn on top, larger and edged, so that other markers do not hide it
            few = int(ok.sum()) <= 2
            ax.plot(r.lr[ok], r.train_log_loss[ok], zorder=4 if few else 2,
                    **style.line(v, ms=6.5 if few else 4, mec="0.15" if few else None,
                                 mew=0.8 if few else None))
            if (~ok).any():
                crosses += [(x, style.color(v)) for x in r.lr[~ok]]
            if v in sampled:
                bx.plot(r.lr[ok], r.train_defective[ok], **style.line(v, ms=4, lw=1.2))
        for (x, col), y in zip(crosses, style.stacked([x for x, _ in crosses], top)):
            ax.plot([x], [y], ls="none", marker="x", ms=7, mew=1.5, color=col)
        logK = float(part.log_K.iloc[0])
        K_ = float(np.exp(logK))
        ax.axhline(logK, ls=":", color="0.4", lw=1)
        bx.axhline(np.log(K_ - 1 + np.e), ls="--", color="0.4", lw=0.8)
        bx.axhline(np.log(K_ - 1 + np.e) - 1, ls="--", color="0.4", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        style.log_ticks(ax)
        ax.set_title(part.dataset.iloc[0])
        bx.set_xlabel("initial learning rate")
        if j == 0:
            ax.set_ylabel(f"exact train log-loss\nafter {epochs} epochs")
            bx.set_ylabel("defective metric\n(what the paper plotted)")
    handles = style.handles(variants, ms=4)
    if table.diverged.any():
        handles.append(Line2D([], [], ls="none", marker="x", mew=1.5, color="k",
                              label="diverged (drawn at the top)"))
    handles += [Line2D([], [], ls=":", color="0.4", label="log K (uniform predictor)"),
                Line2D([], [], ls="--", color="0.4", lw=0.8,
                       label="the defective metric's range\n[log(K-1+e) - 1, log(K-1+e)]")]
    style.legend_below(fig, handles, ncol=4)
    fig.suptitle("Final training log-loss against the initial rate")
    return fig


def check_sensitivity(table, best, results, keys, methods, epochs) -> None:
    """Notebook 04's invariants (``AssertionError`` when one fails): every run once,
    finite or diverged with ``inf``; finished runs have a positive log-loss, a finite test
    log-loss, an error in [0, 1] and a defective metric in ``[log(K-1+e) - 1,
    log(K-1+e)]`` (docs/math.md section 7); the monitored epochs are the paper's
    recording points (up to a divergence); the best-method table agrees with the runs."""
    assert len(table) == len(results) == len(keys)
    assert not table.duplicated(["data", "method", "lr"]).any()
    assert (np.isfinite(table.train_log_loss) | table.diverged).all()
    assert (table.train_log_loss[table.diverged] == np.inf).all()
    done = table[~table.diverged]
    assert (done.train_log_loss > 0).all() and np.isfinite(done.test_log_loss).all()
    assert ((done.train_error >= 0) & (done.train_error <= 1)).all()
    band_hi = np.log(np.exp(done.log_K) - 1 + math.e)
    assert (done.train_defective <= band_hi + 1e-9).all()
    assert (done.train_defective >= band_hi - 1 - 1e-9).all()
    expected = default_eval_epochs(epochs)
    for k, r in zip(keys, results):
        h = r.history
        ev = h.epoch[h.evaluated.astype(bool)].tolist()
        if r.final["diverged"]:
            assert ev == [e for e in expected if e < r.final["diverged_at"][0]], k
        else:
            assert ev == expected, k
            assert np.isfinite(h.train_log_loss[h.evaluated.astype(bool)]).all(), k
    for _, row in best.iterrows():
        part = table[(table.dataset == row.dataset) & (table.lr == row.lr)
                     & table.method.isin(methods) & ~table.diverged]
        if len(part):
            assert row.best_method == part.loc[part.train_log_loss.idxmin(), "method"]
            assert row.best_log_loss == part.train_log_loss.min()


def sensitivity_found_lines(table: pd.DataFrame, best: pd.DataFrame) -> list[str]:
    """The numbers notebook 04's "What we found" rests on, as sentences built from this
    run's tables: ``table`` (:func:`sensitivity_table`, every method at every rate) and
    ``best`` (:func:`best_method_table`): per data set how often Implicit SGD is best and
    who wins elsewhere, its range at the large rates, the lowest test log-loss, U-max
    against ``log K``, vanilla SGD's diverged rates, NCE (1,1) against NCE, the defective
    metric's range against the exact log-loss, and the seconds per epoch."""
    lines = [f"Runs: {len(table)}; diverged: {int(table.diverged.sum())}."]
    for d, t in table.groupby("dataset", sort=False):
        b = best[best.dataset == d]
        log_k = float(t.log_K.iloc[0])
        fin = t[~t.diverged]
        pv = fin.pivot_table(index="lr", columns="method", values="train_log_loss")
        others = b[b.best_method != "implicit"]
        lines.append(f"{d} (log K = {log_k:.2f}): Implicit SGD best at "
                     f"{int((b.best_method == 'implicit').sum())} of {len(b)} rates; elsewhere "
                     + (", ".join(f"{r.best_method} at {fmt_rate(r.lr)} ({r.best_log_loss:.3g} "
                                  f"against Implicit's {r.implicit:.3g})"
                                  for r in others.itertuples()) or "none") + ".")
        if "implicit" in pv:
            big = pv.implicit[pv.index >= 1]
            lines.append(f"  Implicit SGD from rate 1 up: {big.min():.2g} to {big.max():.2g}; "
                         f"its runs diverged: {int(t[t.method == 'implicit'].diverged.sum())}.")
        low = fin.loc[fin.test_log_loss.idxmin()]
        lines.append(f"  lowest test log-loss: {low.method} at {fmt_rate(low.lr)} "
                     f"({low.test_log_loss:.3g}).")
        if "umax" in pv:
            below = pv.umax[pv.umax < log_k]
            lines.append(f"  U-max below log K up to rate "
                         f"{fmt_rate(below.index.max()) if len(below) else '-'}; at "
                         f"{fmt_rate(pv.index.max())} {pv.umax.iloc[-1] / log_k:,.0f} times "
                         "log K.")
        van = t[t.method == "vanilla"]
        if len(van):
            lines.append("  vanilla SGD diverged at: " + (", ".join(
                fmt_rate(lr) for lr in van.lr[van.diverged]) or "none") + ".")
        if {"nce", "nce (1,1)"} <= set(pv):
            r = pv["nce (1,1)"] / pv["nce"]
            lines.append("  NCE (1,1) / NCE: " + ", ".join(
                f"{fmt_rate(lr)} {v:.2f}" for lr, v in r.items()) + ".")
        sampled = fin[fin.method.isin(("ove", "nce", "is", "nce (1,1)"))]
        if len(sampled):
            lines.append(f"  defective metric {sampled.train_defective.min():.2f} to "
                         f"{sampled.train_defective.max():.2f}; OVE's exact log-loss at "
                         f"{fmt_rate(pv.index.max())}: "
                         f"{pv.ove.iloc[-1] if 'ove' in pv else np.nan:,.0f}.")
        spe = fin.groupby("method", sort=False).seconds_per_epoch.median()
        lines.append("  seconds per epoch (median over the rates that did not diverge): "
                     + ", ".join(f"{m} {v:.2g}" for m, v in spe.items()) + ".")
    return lines


def _num(v) -> str:
    """``v`` with three significant digits, a large one as a whole number with commas."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def tuning_found_lines(chosen: pd.DataFrame, grid: pd.DataFrame,
                       both: pd.DataFrame | None = None) -> list[str]:
    """The numbers notebook 03's "What we found" rests on beyond
    :func:`agreement_report`, as sentences built from this run's tables: ``chosen``
    (:func:`choose_rates`), ``grid`` (:func:`grid_frame`, every tuning run) and, when
    the authors' code's conventions were tuned too, ``both``
    (:func:`authors_code_comparison`)."""
    lines = [f"Runs: {len(grid)}; diverged: {int(grid.diverged.sum())}."]
    real = chosen[~chosen.synthetic]
    lines.append(f"Real data sets ({len(real)} cells): " + ", ".join(
        f"{int((real.agreement == a).sum())} {a}" for a in AGREEMENT_ORDER
        if (real.agreement == a).any()) + ".")
    top = grid.lr[grid.method.isin(("nce", "is"))].max()
    ni = chosen[chosen.method.isin(("nce", "is"))]
    if len(ni):
        lines.append(f"NCE and IS: best rate at the top of the grid ({fmt_rate(top)}) in "
                     f"{int((ni.best_lr == top).sum())} of {len(ni)} cells; elsewhere "
                     + (", ".join(f"{r.dataset} {r.method} {fmt_rate(r.best_lr)}"
                                  for r in ni[ni.best_lr != top].itertuples()) or "none") + ".")
        small = grid[grid.method.isin(("nce", "is")) & (grid.lr <= 1e-2) & ~grid.diverged]
        if len(small):
            share = (small.train_log_loss / np.log(small.K)).min()
            lines.append(f"NCE and IS at rates up to 1e-2 end at {share:.1%} of log K or more.")
    imp = grid[(grid.method == "implicit") & ~grid.diverged]
    if len(imp):
        parts = []
        for d, g in imp.groupby("dataset", sort=False):
            best = g.train_log_loss.min()
            hi = g[g.lr >= 10].train_log_loss
            parts.append(f"{d} {hi.max() / best:.3g}" if len(hi) else f"{d} -")
        lines.append("Implicit SGD, largest final log-loss from 1e1 to 1e3 over its best: "
                     + ", ".join(parts) + f"; its runs diverged: "
                     f"{int(grid[grid.method == 'implicit'].diverged.sum())}.")
        ci = chosen[chosen.method == "implicit"]
        lines.append("Implicit SGD at the paper's rate, log-loss over our best: " + ", ".join(
            f"{r.dataset} {r.loss_ratio_paper_over_best:.3g} (paper {fmt_rate(r.paper_lr)}, "
            f"ours {fmt_rate(r.best_lr)})" for r in ci.itertuples()) + ".")
    pv = grid[~grid.diverged].pivot_table(index=["dataset", "lr"], columns="method",
                                          values="train_log_loss", sort=False)
    if {"umax", "vanilla"} <= set(pv):
        both_fin = pv[["umax", "vanilla"]].dropna()
        rel = (both_fin.umax / both_fin.vanilla - 1).abs()
        diff = rel[rel > 1e-6]
        lines.append("U-max against vanilla SGD where both finished: equal to 6 digits in "
                     f"{int((rel <= 1e-6).sum())} of {len(rel)} (data set, rate) pairs; "
                     "otherwise " + (", ".join(
                         f"{d} {fmt_rate(lr)} ({both_fin.umax[(d, lr)]:.4f} against "
                         f"{both_fin.vanilla[(d, lr)]:.4f})" for d, lr in diff.index[:6])
                         or "none") + ".")
    um = grid[(grid.method == "umax") & ~grid.diverged]
    if len(um):
        lines.append("U-max's final log-loss / log K at the largest rate: " + ", ".join(
            f"{d} {_num(g.train_log_loss.iloc[-1] / np.log(g.K.iloc[-1]))}"
            for d, g in um.groupby("dataset", sort=False)) + ".")
    ove = grid[(grid.method == "ove") & ~grid.diverged]
    if len(ove):
        lines.append(f"OVE's final log-loss at {fmt_rate(ove.lr.max())}: " + ", ".join(
            f"{d} {_num(g.train_log_loss.iloc[-1])}" for d, g in ove.groupby("dataset",
                                                                            sort=False)) + ".")
    if both is not None and len(both):
        equal = both[both.authors_code_agreement == "equal"]
        lines.append(f"Under the authors' code's conventions: {len(equal)} of {len(both)} "
                     "published rates found exactly, "
                     f"{int(both.authors_code_agreement.isin(['equal', 'within 10x']).sum())} "
                     "within 10x; vanilla SGD equal in "
                     f"{int((equal.method == 'vanilla').sum())} of "
                     f"{int((both.method == 'vanilla').sum())}; Implicit SGD (ours / the "
                     "paper's): " + ", ".join(
                         f"{r.dataset} {fmt_rate(r.authors_code_lr)} / {fmt_rate(r.paper_lr)}"
                         for r in both[both.method == "implicit"].itertuples()) + ".")
    return lines


def _mean_table(tables: dict) -> pd.DataFrame:
    """Notebook 04's run tables of several seeds averaged: the mean final training
    log-loss per data set, method and rate (``inf`` when a seed's run diverged)."""
    all_ = pd.concat(tables.values(), ignore_index=True)
    return (all_.groupby(["dataset", "data", "method", "lr"], sort=False)
            .agg(train_log_loss=("train_log_loss", "mean"), log_K=("log_K", "first"),
                 diverged=("diverged", "any"))
            .reset_index())


def sensitivity_seeds(tables: dict, loader: dict, learning_rates, methods,
                      variants) -> pd.DataFrame:
    """Per seed of ``tables`` (``{seed: sensitivity_table}``), data set and rate: the best
    of ``methods`` and Implicit SGD's log-loss over the best one
    (:func:`best_method_table` of that seed's runs)."""
    parts = [best_method_table(t, loader, learning_rates, methods, variants)
             .assign(seed=s) for s, t in sorted(tables.items())]
    out = pd.concat(parts, ignore_index=True)
    keep = ["seed", "dataset", "lr", "best_method", "best_log_loss", "implicit_over_best",
            "log_K"]
    return out[[c for c in keep if c in out.columns]]


def sensitivity_seed_claims(tables: dict, loader: dict, learning_rates, methods, variants,
                            nce_tolerance: float = 0.05,
                            umax_factor: float = 10.0) -> pd.DataFrame:
    """Notebook 04's claims per data set, judged on the log-losses averaged over the seeds
    of ``tables`` (``{seed: sensitivity_table}``) and on each seed alone
    (``reporting.seed_claim``): Implicit SGD is best at most rates; it never diverges (one
    diverged run in any seed refutes it); U-max's log-loss at the largest rate is
    extremely large (at least ``umax_factor`` times ``log K``); NCE (1,1) is nearly
    identical to NCE (within ``nce_tolerance`` at every rate where both are finite)."""
    from scalable_softmax.repro.fagan.reporting import seed_claim

    seeds = sorted(tables)
    mean = _mean_table(tables)
    top = max(learning_rates)

    def best_count(t, d):
        b = best_method_table(t, {d: loader[d]}, learning_rates, methods, variants)
        return int((b.best_method == "implicit").sum()), len(b)

    def part(t, d, m):
        return t[(t.data == loader[d]) & (t.method == m)].set_index("lr")

    rows = []
    for d in loader:
        lab = mean[mean.data == loader[d]].dataset.iloc[0]
        if "implicit" in methods:
            k, n = best_count(mean, d)
            each = [best_count(tables[s], d) for s in seeds]
            rows.append(seed_claim(
                "Implicit SGD is best at most rates", "most rates",
                f"{k} of {n} rates (seeds: {', '.join(str(e[0]) for e in each)})",
                k > n / 2, [e[0] > e[1] / 2 for e in each], dataset=lab))
            div = [int(part(tables[s], d, "implicit").diverged.sum()) for s in seeds]
            runs = sum(len(part(tables[s], d, "implicit")) for s in seeds)
            rows.append(seed_claim(
                "Implicit SGD never diverges", "never", f"{sum(div)} of {runs} runs diverged",
                sum(div) == 0, [x == 0 for x in div], pooled=True, dataset=lab))
        if "umax" in methods:
            def over(t, d=d):
                u = part(t, d, "umax")
                return float(u.train_log_loss[top] / u.log_K[top])
            rows.append(seed_claim(
                "U-max's log-loss is extremely large at the largest rate",
                f"extremely large at {top:g}",
                f"{over(mean):.3g} times log K at {top:g}", over(mean) >= umax_factor,
                [over(tables[s]) >= umax_factor for s in seeds], dataset=lab))
        if "nce (1,1)" in variants and "nce" in variants:
            def near(t, d=d):
                a, b = part(t, d, "nce (1,1)").train_log_loss, part(t, d, "nce").train_log_loss
                ok = np.isfinite(a) & np.isfinite(b)
                close = (np.abs(a[ok] / b[ok] - 1) <= nce_tolerance)
                return int(close.sum()), int(ok.sum())
            k, n = near(mean)
            each = [near(tables[s]) for s in seeds]
            rows.append(seed_claim(
                "NCE (1,1) performs nearly identically to NCE", "nearly identical",
                f"within {nce_tolerance:.0%} at {k} of {n} rates", k == n,
                [e[0] == e[1] for e in each], dataset=lab))
    return pd.DataFrame(rows)
