"""The sentences the notebooks print for their "What we found" sections are built from
the tables: each helper, given the record's tables (``tables/NN-*.csv``), prints the
values those tables hold, at the precision it states (and leaves a part out, rather than
failing, when its table is missing from a run)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from scalable_softmax import paths
from scalable_softmax.repro.fagan import (
    formulations,
    instability,
    real_large_k,
    timing,
    tuning,
)
from scalable_softmax.repro.titsias import nonparametric, toy2d


def _table(name: str, **kwargs) -> pd.DataFrame:
    path = paths.TABLES / f"{name}.csv"
    if not path.is_file():
        pytest.skip(f"{path.name} is not in this checkout")
    return pd.read_csv(path, **kwargs)


def test_05_mean_ratio_and_best_rate_come_from_the_table():
    t = _table("05-formulation-comparison", dtype={"rate": str})
    data = {"eurlex-surrogate": SimpleNamespace(synthetic=True, K=838),
            "bibtex": SimpleNamespace(synthetic=False, K=146)}
    text = "\n".join(formulations.found_lines(t, data))
    for lab, g in t.groupby("dataset"):
        mean = g[g.rate == "mean over rates"].ratio_raman_over_proposed.iloc[0]
        best = g[g.rate == "best rate of each"].iloc[0]
        assert f"{lab}: mean ratio raman / proposed over the rates {mean:.2f}" in text
        assert f"(ratio {best.ratio_raman_over_proposed:.2f})" in text


def test_08_errors_come_from_the_table():
    t = _table("08-ove-nonparametric")
    text = "\n".join(nonparametric.found_lines(t))
    l1 = t[(t.part == "fig1a") & (t.row == "L1 vs true p")].iloc[0]
    assert f"Bouchard {l1.bouchard:.3f}" in text and f"MLE {l1.exact_mle:.3f}" in text
    end = t[(t.part == "fig2") & t.row.str.startswith("L1 vs exact MLE")].ove.iloc[0]
    assert f"at the end {end:.4f}" in text


def test_09_bounds_and_distances_come_from_the_table():
    t = _table("09-ove-toy-2d")
    fits = {m: {"res": SimpleNamespace(jac=np.array([0.0]))} for m in t.method}
    text = "\n".join(toy2d.found_lines(t, fits))
    r = t.set_index("method")
    for m in ("OVE", "Bouchard"):
        assert f"{m} bound {r.bound_at_optimum[m]:.3f}" in text
        assert f"{m} {r.param_distance[m]:.3f}" in text
    assert f"Bouchard {int(r.iterations['Bouchard'])} " in text


def test_01_overflow_steps_and_log_losses_come_from_the_tables():
    t = _table("01-instability-demo")
    text = "\n".join(instability.overflow_found_lines(t, 146))
    for r in t[t.diverged].itertuples():
        assert f"{r.lr:g} (epoch {int(r.diverged_epoch)}, after {int(r.steps_before_overflow)} " \
               "steps)" in text
    u = _table("01-instability-demo-u-init")
    text = "\n".join(instability.u_init_found_lines(u))
    for r in u[~u.diverged].itertuples():
        assert f"{r.lr:g} (log-loss {r.final_train_log_loss:.3g})" in text
    g = _table("01-instability-demo-gradients")
    lines = instability.replay_found_lines(g, {}, methods=("umax",))
    assert sum(line.startswith("umax at lr") for line in lines) == (g.method == "umax").sum()
    assert not any(line.startswith("vanilla") for line in lines)


def test_03_and_04_counts_come_from_the_tables():
    chosen = _table("03-learning-rate-tuning")
    grid = _table("03-learning-rate-tuning-grid")
    both = _table("03-learning-rate-tuning-authors-code")
    text = "\n".join(tuning.tuning_found_lines(chosen, grid, both))
    assert f"Runs: {len(grid)}; diverged: {int(grid.diverged.sum())}." in text
    equal = int((both.authors_code_agreement == "equal").sum())
    assert f"{equal} of {len(both)} published rates found exactly" in text
    table = _table("04-learning-rate-sensitivity")
    best = _table("04-learning-rate-sensitivity-best")
    text = "\n".join(tuning.sensitivity_found_lines(table, best))
    for d, b in best.groupby("dataset", sort=False):
        n = int((b.best_method == "implicit").sum())
        assert f"{d} (log K = {b.log_K.iloc[0]:.2f}): Implicit SGD best at {n} of {len(b)}" in text


def test_07_costs_and_slopes_come_from_the_tables():
    runs = _table("07-runtime-and-scaling-runs")
    scan = _table("07-runtime-and-scaling-k")
    slopes = {m: {"all_K": g.slope_all_K.iloc[0], "two_largest_K": g.slope_two_largest_K.iloc[0]}
              for m, g in scan.groupby("method", sort=False)}
    text = "\n".join(timing.found_lines(runs, scan, slopes))
    for m, s in slopes.items():
        assert f"{m} {s['all_K']:.2f} / {s['two_largest_K']:.2f}" in text
    assert f"Runs diverged: {int(runs.diverged.sum())}" in text


def test_13_rows_come_from_the_tables():
    row = _table("13-real-large-k")
    grid = _table("13-real-large-k-tuning")
    methods = list(dict.fromkeys(row.method))
    text = "\n".join(real_large_k.found_lines(row, grid, 10_000, methods))
    for r in row.itertuples():
        assert f"train {r.train_log_loss_mean:.3g} / test {r.test_log_loss_mean:.3g}" in text
    assert f"log K = {np.log(10_000):.2f}." in text


def test_06_mean_abs_log_ratio():
    from scalable_softmax.repro.fagan import paper_tables as pt
    pub = pd.DataFrame({"ove": [2.0, 4.0], "umax": [1.0, np.nan]}, index=["a", "b"])
    assert pt.mean_abs_log_ratio(pub, pub, ["a", "b"], ["ove", "umax"]) == 0.0
    # the cells finite in both: a, ove; a, umax; b, ove (b, umax is NaN)
    assert pt.mean_abs_log_ratio(pub * 2, pub, ["a", "b"], ["ove", "umax"]) == \
        pytest.approx(np.log(2))
    assert np.isnan(pt.mean_abs_log_ratio(pub, pub * np.nan, ["a"], ["ove"]))


def test_06_lines_on_a_small_study():
    from scalable_softmax.repro.fagan import paper_tables as pt
    methods = ["ove", "umax", "implicit"]
    t = pd.DataFrame({"ove": [2.0, 3.0], "umax": [1.5, 1.2], "implicit": [1.0, 1.0]},
                     index=["bibtex", "delicious"])
    t.loc["Average"] = t.mean()
    tables = {"published": t, "recorded": t,
              **{f"{n}, {k}": t * f for n, f in (("authors-code", 1.1), ("paper-text", 2.0),
                                                ("authors-code-1pass", 0.5))
                 for k in ("as published", "exact")}}
    versions = {n: (pd.DataFrame({"seed": [0, 1]}), []) for n in
                ("authors-code", "authors-code-1pass", "paper-text")}
    match = pd.DataFrame({"dataset": ["bibtex"] * 2, "method": ["ove", "umax"],
                          "metric": ["defective", "exact log-loss"], "recorded": np.nan,
                          "ours_mean": [4.1, 1.4], "rel_diff": np.nan,
                          "diverged_seeds": [0, 0]})
    claims = pd.DataFrame(columns=["claim"])
    args = (tables, claims, versions, match, "authors-code", "authors-code-1pass",
            "paper-text", methods, ["bibtex", "delicious"])
    text = "\n".join(pt.what_we_found_lines(*args))
    assert "ours 2.20 / 1.65 against the published 2.00 / 1.50" in text
    assert f"{np.log(1.1):.2f} under `authors-code`" in text
    assert "the authors recorded no value at this run's last epoch" in text
    match["recorded"] = [4.0, 1.4]
    match["rel_diff"] = match.ours_mean / match.recorded - 1
    text = "\n".join(pt.what_we_found_lines(*args))
    assert "1 of 2 comparable values within 1.5%" in text
    assert "ours 1.400 against 1.400" in text
