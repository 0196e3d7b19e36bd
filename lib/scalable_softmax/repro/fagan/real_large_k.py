"""Notebook 13: the paper's study on real data at large K (``20news-words``, ours, not in
the paper; K = 10,000 next-word classes, :mod:`scalable_softmax.data.words`).

The paper has no rates for this set, so they are tuned the way notebook 03 tunes them
under ``authors-code`` (:func:`tune`: the grid on the first 10% of the rows in file
order, 50 epochs, one seed; the best rate by the final training log-loss, by the
defective metric the authors' code recorded for OVE, NCE and IS, the largest stable rate
for vanilla SGD). The study then runs at these rates under the three protocols of
notebook 06 (:func:`paper_tables.run_protocols`); this module turns its runs into the
data set's Table 3 row (:func:`row_table`) and judges the paper's Table 3 claims on it
(:func:`judge_claims`), one data set at a time: no claim here is an average over sets.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from scalable_softmax.repro.fagan import paper as authors
from scalable_softmax.repro.fagan import tuning
from scalable_softmax.repro.fagan.paper_tables import (
    BIASED,
    DOUBLE_SUM,
    claim_columns,
    ratio_tables,
    run_seeds,
    seed_used,
)
from scalable_softmax.repro.machinery.runs import EXTENSION_DATASETS, results_frame, run_all

__all__ = ["tune", "tuning_table", "row_table", "judge_claims", "ordering",
           "verdicts", "ratio_figure", "PUBLISHED_ORDER", "CLAIMS", "RANGE_TEMPLATES",
           "POOLED", "found_lines"]

#: the published Table 3's average ratio per method (the order the paper reports)
PUBLISHED_ORDER = dict(sorted(authors.PAPER_TABLE3_AVERAGE.items(), key=lambda kv: kv[1]))

#: the paper's Table 3 claims, judged here on one data set: key -> text
CLAIMS = {
    "implicit_lowest": "Implicit SGD has the lowest train log-loss (exact, all six methods)",
    "implicit_lowest_published": "the same, with the published metric for OVE/NCE/IS",
    "umax_beats_vanilla": "U-max beats vanilla SGD (exact train log-loss)",
    "double_sum_beats_biased": "every double-sum method (vanilla, U-max, Implicit) beats "
                               "every biased baseline (OVE, NCE, IS), exact",
    "double_sum_beats_biased_published": "the same, with the published metric for OVE/NCE/IS",
    "stable_at_tuned": "every method is stable at its tuned rate (no seed diverges)",
    "implicit_never_diverges": "Implicit SGD never diverges",
    "implicit_lowest_test": "Implicit SGD has the lowest test log-loss (ours; the paper "
                            "reports train only)",
}


def _check(dataset):
    if dataset not in EXTENSION_DATASETS:
        raise ValueError(f"dataset {dataset!r}: notebook 13 runs our real data sets "
                         f"{', '.join(EXTENSION_DATASETS)}; the paper's seven are notebook "
                         "02/06's")


def tune(dataset, methods, learning_rates, vanilla_extra_rates, *, epochs, train_fraction,
         seed, protocol, final_rows, workers, progress=True):
    """Notebook 03's tuning under ``protocol`` on one data set: every method and rate of
    :func:`tuning.rate_grid` on the first ``train_fraction`` of the rows (file order).
    Returns ``(frame, chosen)``: :func:`runs.results_frame` of the grid and
    :func:`tuning.choose_by_score` (OVE/NCE/IS scored by the defective metric)."""
    _check(dataset)
    loader = {dataset: dataset}
    rates = tuning.rate_grid(methods, learning_rates, vanilla_extra_rates)
    specs = tuning.tuning_specs(loader, rates, seed=seed, epochs=epochs,
                                train_fraction=train_fraction, subset="head",
                                protocol=protocol, final_rows=final_rows)
    frame = results_frame(run_all(specs, workers=workers, desc=f"13 tuning ({protocol})",
                                  progress=progress))
    chosen = tuning.choose_by_score(frame, loader, methods, sampled_score="train_defective")
    return frame, chosen


def tuning_table(frame: pd.DataFrame, chosen: pd.DataFrame) -> pd.DataFrame:
    """Every tuning run: method, rate, final training log-loss and defective metric,
    divergence, and ``chosen`` (the rate the study starts from)."""
    pick = {(m, float(lr)) for m, lr in zip(chosen.method, chosen.lr) if np.isfinite(lr)}
    out = pd.DataFrame({
        "method": frame.method, "lr": frame.lr.astype(float),
        "train_log_loss": frame.train_log_loss.astype(float),
        "train_defective": frame.train_defective.astype(float),
        "diverged": frame.diverged.astype(bool), "train_rows": frame.N.astype(int),
        "train_seconds": frame.train_seconds.astype(float)})
    out["chosen"] = [(m, float(lr)) in pick for m, lr in zip(out.method, out.lr)]
    return out.sort_values(["method", "lr"], kind="stable").reset_index(drop=True)


def row_table(used_of: dict, dataset: str, methods) -> pd.DataFrame:
    """The data set's Table 3 row per protocol in long form: the rate used, the mean
    (std) exact train log-loss over seeds, the test log-loss and error, the defective
    metric, and the ratios to Implicit SGD's exact train log-loss, as published (OVE, NCE,
    IS by the defective metric) and exact, with the rank of each method (1 = lowest)."""
    rows = []
    for name, used in used_of.items():
        pub, exact = ratio_tables(used, [dataset], methods)
        u = used[used.dataset == dataset].set_index("method")
        rank = exact.loc[dataset].rank(method="min")
        for m in methods:
            have = m in u.index
            rows.append(dict(
                protocol=name, method=m,
                tuned_lr=float(u.paper_lr[m]) if have else np.nan,
                lr_used=float(u.lr[m]) if have else np.nan,
                seeds=int(u.seeds[m]) if have else 0,
                train_log_loss_mean=float(u.train_log_loss_mean[m]) if have else np.nan,
                train_log_loss_std=float(u.train_log_loss_std[m]) if have else np.nan,
                train_defective_mean=float(u.train_defective_mean[m]) if have else np.nan,
                test_log_loss_mean=float(u.test_log_loss_mean[m]) if have else np.nan,
                test_error_mean=float(u.test_error_mean[m]) if have else np.nan,
                ratio_as_published=float(pub.loc[dataset, m]),
                ratio_exact=float(exact.loc[dataset, m]),
                rank_exact=float(rank[m])))
    return pd.DataFrame(rows)


def ordering(table: pd.DataFrame, protocol: str, column: str = "ratio_exact") -> list[str]:
    """The methods of one protocol from lowest to highest ``column``."""
    part = table[table.protocol == protocol].dropna(subset=[column])
    return list(part.sort_values(column, kind="stable").method)


#: how each claim's numbers read in the range over seeds (:func:`paper_tables.seed_range`)
RANGE_TEMPLATES = {
    "implicit_lowest": "Implicit {0} vs the others' lowest {1}",
    "implicit_lowest_published": "Implicit {0} vs the others' lowest {1}",
    "implicit_lowest_test": "Implicit {0} vs the others' lowest {1}",
    "umax_beats_vanilla": "{0} vs {1}", "double_sum_beats_biased": "<= {0} vs >= {1}",
    "double_sum_beats_biased_published": "<= {0} vs >= {1}",
    "stable_at_tuned": "{0} run(s) diverged", "implicit_never_diverges": "{0} of {1} runs diverged",
}
#: claims about every run (no run diverges): one diverged run in any seed refutes them
POOLED = ("stable_at_tuned", "implicit_never_diverges")


def judge_claims(table: pd.DataFrame, versions: dict, used_of: dict) -> pd.DataFrame:
    """Each claim of :data:`CLAIMS` per protocol of ``used_of``, on the means over seeds
    (``table``: :func:`row_table`) and on each seed alone (the seed's runs at the rates
    chosen over all seeds): the supporting numbers of the means, a verdict
    (``confirmed``, ``not confirmed`` when the means and every seed agree, ``inconclusive
    (k of n seeds)`` when they do not, the divergence claims of :data:`POOLED` judged on
    all runs; ``not judged`` when a method it is about was not run), the seeds that
    support the claim and the range of its numbers over seeds
    (:func:`paper_tables.claim_columns`)."""
    def judge(key, t, runs, used):
        t = t.set_index("method")
        have = set(t.index[t.ratio_exact.notna()])

        def lowest(col):
            if "implicit" not in have:
                return None, "needs Implicit SGD", ()
            best = t[col].idxmin()
            nums = (t[col]["implicit"], t[col].drop(index="implicit").min())
            return best == "implicit", f"lowest: {best} ({t[col].min():.4g})", nums
        if key == "implicit_lowest":
            return lowest("ratio_exact")
        if key == "implicit_lowest_published":
            return lowest("ratio_as_published")
        if key == "implicit_lowest_test":
            return lowest("test_log_loss_mean")
        if key == "umax_beats_vanilla":
            if not {"umax", "vanilla", "implicit"} <= have:
                return None, "needs U-max, vanilla and Implicit SGD", ()
            a, b = t.ratio_exact["umax"], t.ratio_exact["vanilla"]
            return a < b, f"{a:.2f} vs {b:.2f}", (a, b)
        if key.startswith("double_sum"):
            col = "ratio_as_published" if key.endswith("published") else "ratio_exact"
            if not (set(DOUBLE_SUM) | set(BIASED)) <= have:
                return None, "needs all six methods", ()
            hi, lo = t.loc[list(DOUBLE_SUM), col].max(), t.loc[list(BIASED), col].min()
            return hi < lo, f"<= {hi:.2f} vs >= {lo:.2f}", (hi, lo)
        if key == "stable_at_tuned":
            bad = runs[np.isclose(runs.lr, runs.paper_lr) & runs.diverged]
            cells = sorted({f"{m} {lr:g}" for m, lr in zip(bad.method, bad.lr)})
            return len(bad) == 0, (f"{len(bad)} run(s) diverged" + "".join(f"; {c}" for c in cells)
                                   if len(used) else "no runs"), (len(bad),)
        n = int((runs.method == "implicit").sum())
        if n == 0:
            return None, "needs Implicit SGD", ()
        k = int(((runs.method == "implicit") & runs.diverged).sum())
        return k == 0, f"{k} of {n} runs diverged", (k, n)

    dataset = used_of and next(iter(used_of.values())).dataset.iloc[0]
    methods = list(dict.fromkeys(table.method))
    per_seed = {}
    for name, used in used_of.items():
        runs = versions[name][0]
        per_seed[name] = []
        for s in run_seeds(runs):
            one = seed_used(runs, used, s)
            per_seed[name].append((row_table({name: one}, dataset, methods),
                                   runs[runs.seed == s], one))
    rows = []
    for key, text in CLAIMS.items():
        row = dict(claim=text)
        for name in used_of:
            ok, txt, _ = judge(key, table[table.protocol == name], versions[name][0],
                               used_of[name])
            seeds = [judge(key, t, r, u)[::2] for t, r, u in per_seed[name]]
            row.update(claim_columns(name, ok, txt, seeds, RANGE_TEMPLATES[key],
                                     pooled=key in POOLED))
        rows.append(row)
    return pd.DataFrame(rows)


def verdicts(claims: pd.DataFrame, protocol: str, verdict: str = "confirmed") -> dict:
    """``{claim key: True if its verdict is verdict}`` of one protocol of
    :func:`judge_claims` (``"not confirmed"``: refuted by the means and every seed; an
    inconclusive claim is neither)."""
    by_text = dict(zip(claims.claim, claims[f"verdict_{protocol}"]))
    return {key: by_text[text] == verdict for key, text in CLAIMS.items()}


def ratio_figure(table: pd.DataFrame, methods, title: str):
    """Two panels, the row's ratios to Implicit SGD per method (log scale): as published
    (with the published Table 3's averages over the paper's seven sets) and exact; one
    marker series per protocol of ``table`` (:func:`row_table`). Returns the figure."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    fig, axes = plt.subplots(1, 2, figsize=(style.FIG_WIDTH, 3.2), sharey=True)
    x = np.arange(len(methods))
    names = list(dict.fromkeys(table.protocol))
    width = 0.6 / max(1, len(names))
    for ax, col, head in zip(axes, ("ratio_as_published", "ratio_exact"),
                             ("as published (OVE/NCE/IS: defective metric)", "exact")):
        if col == "ratio_as_published":
            ax.plot(x - 0.3 - width, [PUBLISHED_ORDER.get(m, np.nan) for m in methods],
                    ls="none", marker="o", color=style.SERIES_COLORS[0], ms=6,
                    label="paper: Table 3 average (its 7 sets)")
        for i, name in enumerate(names):
            t = table[table.protocol == name].set_index("method")
            ax.plot(x - 0.3 + i * width, [t[col].get(m, np.nan) for m in methods], ls="none",
                    marker="s^v"[i % 3], color=style.SERIES_COLORS[1 + i], ms=6,
                    label=f"ours, {name}")
        ax.axhline(1.0, color="0.7", lw=0.8, zorder=0)
        ax.set_yscale("log")
        ax.set_xticks(x, [style.label(m) for m in methods], rotation=30, ha="right")
        ax.set_title(head, fontsize=9)
        style.log_ticks(ax)
    axes[0].set_ylabel("train log-loss / Implicit SGD's")
    style.legend_below(fig, axes[0].get_legend_handles_labels()[0], ncol=2)
    fig.suptitle(title)
    return fig


def found_lines(row: pd.DataFrame, grid: pd.DataFrame, K: int, methods) -> list[str]:
    """The numbers notebook 13's "What we found" rests on, as sentences built from this
    run's tables: ``grid`` (:func:`tuning_table`: the tuning runs and the rate chosen per
    method) and ``row`` (:func:`row_table`: per protocol and method the rate used, the
    train and test log-loss and the ratios to Implicit SGD), for a data set of ``K``
    classes."""
    from scalable_softmax.repro.machinery import style

    lines = []
    chosen = grid[grid.chosen].set_index("method").lr
    div = grid[grid.diverged].groupby("method").size()
    runs_of = grid.groupby("method").size()
    lines.append("Tuned rates: " + ", ".join(
        f"{style.label(m)} {chosen[m]:g} ({div.get(m, 0)} of {runs_of[m]} rates diverged)"
        for m in methods if m in chosen.index) + ".")
    lines.append(f"log K = {np.log(K):.2f}.")
    for name, t in row.groupby("protocol", sort=False):
        t = t.set_index("method")
        ms = [m for m in methods if m in t.index]
        stepped = [m for m in ms if t.lr_used[m] != t.tuned_lr[m]]
        lines.append(f"{name}: " + ", ".join(
            f"{style.label(m)} train {t.train_log_loss_mean[m]:.3g} / test "
            f"{t.test_log_loss_mean[m]:.3g} (lr {t.lr_used[m]:g})" for m in ms) + ".")
        lines.append("  ratios to Implicit SGD as published: " + ", ".join(
            f"{style.label(m)} {t.ratio_as_published[m]:.2f}" for m in ms)
            + "; exact: " + ", ".join(f"{style.label(m)} {t.ratio_exact[m]:.3g}" for m in ms)
            + "; reported below the tuned rate: "
            + (", ".join(f"{style.label(m)} {t.lr_used[m]:g}" for m in stepped) or "none")
            + ".")
    return lines
