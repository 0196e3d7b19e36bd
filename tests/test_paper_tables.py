"""Table 3 from runs (scalable_softmax.repro.fagan.paper_tables), on small synthetic inputs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scalable_softmax.repro.fagan import paper as authors
from scalable_softmax.repro.fagan import paper_tables as pt

METHODS = ["ove", "nce", "is", "vanilla", "umax", "implicit"]
DATASETS = ["mnist", "eurlex"]
SYNTHETIC = pd.Series({"mnist": False, "eurlex": True})


def _used(scale=1.0):
    """choose_used()-like rows: on data set number k (1, 2) the exact log-loss of the i-th
    method (from 1) is k * i * scale, the defective metric 5 * k."""
    rows = []
    for d, k in zip(DATASETS, (1.0, 2.0)):
        for i, m in enumerate(METHODS):
            rows.append(dict(dataset=d, method=m, lr=0.1 * (i + 1),
                             train_log_loss_mean=k * (i + 1) * scale,
                             train_defective_mean=5.0 * k, diverged_seeds=0,
                             paper_lr=0.1 * (i + 1)))
    return pd.DataFrame(rows)


def test_labellers_mark_surrogates_and_keep_real_names():
    label = pt.surrogate_labeller(SYNTHETIC)
    assert label("mnist") == "mnist" and label("eurlex") == "eurlex (SYNTHETIC)"
    title = pt.panel_title_labeller(SYNTHETIC, theirs="paper")
    assert title("mnist") == "mnist"
    assert "paper (real data)" in title("eurlex") and "synthetic surrogate" in title("eurlex")
    assert title("Average").endswith("(ours: 1 of 2 on synthetic surrogates)")
    real = pt.panel_title_labeller({"mnist": False})
    assert real("Average") == "Average over the data sets"


def test_study_settings_monitors_real_sets_fully_and_lists_epochs():
    shapes = pd.DataFrame({"synthetic": SYNTHETIC})
    monitor, epochs = pt.study_settings(shapes, DATASETS, 5, 2, 500, True)
    assert monitor == {"mnist": None, "eurlex": 500}
    assert epochs == [0, 2, 4, 5]
    monitor, _ = pt.study_settings(shapes, DATASETS, 5, 2, 500, False)
    assert monitor == {"mnist": 500, "eurlex": 500}
    with pytest.raises(ValueError, match="eval_every"):
        pt.study_settings(shapes, DATASETS, 5, 0, 500, True)


def test_with_average_reindexes_and_appends_the_mean():
    t = pd.DataFrame({"a": [1.0, 3.0], "b": [2.0, np.nan]}, index=["x", "y"])
    out = pt.with_average(t, ["y", "x", "z"], ["b", "a"])
    assert list(out.index) == ["y", "x", "z", "Average"] and list(out.columns) == ["b", "a"]
    assert out.loc["Average", "a"] == 2.0 and out.loc["Average", "b"] == 2.0
    assert np.isnan(out.loc["z", "a"])


def test_ratio_tables_divide_by_implicit_and_use_the_defective_metric_as_published():
    pub, exact = pt.ratio_tables(_used(), DATASETS, METHODS)
    np.testing.assert_allclose(exact.loc[DATASETS, "implicit"], 1.0)
    np.testing.assert_allclose(exact.loc["mnist", "vanilla"], 4 / 6)
    np.testing.assert_allclose(pub.loc["mnist", "ove"], 5 / 6)        # defective / exact
    np.testing.assert_allclose(pub.loc["mnist", "umax"], 5 / 6)       # exact / exact
    np.testing.assert_allclose(pub.loc["eurlex", "ove"], 10 / 12)
    np.testing.assert_allclose(exact.loc["Average", "ove"], 1 / 6)
    no_implicit = _used()[lambda u: u.method != "implicit"]
    pub, exact = pt.ratio_tables(no_implicit, DATASETS, METHODS)
    assert pub.isna().all().all() and exact.isna().all().all()
    with pytest.raises(ValueError, match="train_defective_mean"):
        pt.ratio_tables(_used().drop(columns="train_defective_mean"), DATASETS, METHODS)


def _recorded():
    rows = []
    for d in DATASETS:
        for m in METHODS:
            for e in (2, 50):
                v = authors.PAPER_TABLE3[d][m] * (1.0 if e == 50 else 2.0)
                rows.append(dict(dataset=d, method=m, lr=authors.PAPER_TABLE2[d][m], epoch=e,
                                 train_metric=v, train_error=0.1, test_metric=2 * v,
                                 test_error=0.3 if e == 50 else 0.4))
    return pd.DataFrame(rows)


def test_table3_versions_long_form_and_checks():
    used_of = {"p-a": _used(), "p-b": _used(2.0)}
    tables = pt.table3_versions(used_of, DATASETS, METHODS, _recorded())
    assert list(tables) == ["published", "recorded", "p-a, as published", "p-a, exact",
                            "p-b, as published", "p-b, exact"]
    assert tables["published"].loc["mnist", "ove"] == authors.PAPER_TABLE3["mnist"]["ove"]
    np.testing.assert_allclose(tables["recorded"].loc[DATASETS], tables["published"].loc[DATASETS])
    label = pt.surrogate_labeller(SYNTHETIC)
    long = pt.table3_long(tables, used_of, DATASETS, METHODS, label)
    assert len(long) == (len(DATASETS) + 1) * len(METHODS)
    assert {"published", "recorded", "p_a_as_published", "p_b_exact", "lr_p_a"} <= set(long)
    assert "eurlex (SYNTHETIC)" in set(long.dataset)
    assert np.isnan(long[long.dataset == "Average"].lr_p_a).all()
    K = {"mnist": 10, "eurlex": 3993}
    with pytest.raises(AssertionError):          # defective metric 5 / 10 outside its range
        pt.check_table3(tables, used_of, DATASETS, METHODS, K)
    ok = {k: u.assign(train_defective_mean=[np.log(K[d] - 1 + np.e) - 0.5 for d in u.dataset])
          for k, u in used_of.items()}
    pt.check_table3(pt.table3_versions(ok, DATASETS, METHODS, _recorded()), ok, DATASETS,
                    METHODS, K)


def test_titles_and_captions_cover_every_version_and_table():
    titles = pt.table3_titles("a", "b", "c", [0])
    assert {"published", "recorded", "a, exact", "b, as published", "c, exact"} <= set(titles)
    cap = pt.notebook06_captions("authors-code", [0, 1], 3, 100)
    assert set(cap) == {"table1", "table3", "recorded", "bibtex-implicit", "recorded-test",
                        "bibtex-test-map", "claims"}
    assert "seeds [0, 1]" in cap["bibtex-implicit"]["preamble"]
    assert pt.table3_preamble("a", [0], "b", "c", [0], 3, ["X", "Y"]).endswith("X\n\nY")


def _runs():
    rows = []
    for m in METHODS:
        lr = authors.PAPER_TABLE2["mnist"][m]
        for s, f in enumerate((0.99, 1.01, np.nan)):
            rows.append(dict(dataset="mnist", method=m, lr=lr, seed=s, diverged=np.isnan(f),
                             train_log_loss=authors.PAPER_TABLE3["mnist"][m] * f,
                             train_defective=authors.PAPER_TABLE3["mnist"][m] * f,
                             train_error=0.1, test_log_loss=4.0, test_error=0.25))
        rows.append(dict(dataset="mnist", method=m, lr=lr / 10, seed=0, diverged=False,
                         train_log_loss=100.0, train_defective=100.0, train_error=0.5,
                         test_log_loss=9.0, test_error=0.9))
    return pd.DataFrame(rows)


def test_recorded_comparison_uses_the_finite_seeds_at_the_authors_rate():
    match = pt.recorded_comparison(_runs(), _recorded(), ["mnist"], METHODS, 50)
    assert len(match) == len(METHODS)
    assert (match.finite_seeds == 2).all() and (match.diverged_seeds == 1).all()
    np.testing.assert_allclose(match.rel_diff, 0.0, atol=1e-12)
    assert match.within_5pct.all()
    assert set(match.metric) == {"defective", "exact log-loss"}
    test = pt.recorded_test_comparison(_runs(), _recorded(), ["mnist"], METHODS, 50)
    assert list(test.method) == ["vanilla", "umax", "implicit"]
    np.testing.assert_allclose(test.test_error_diff, 0.25 - 0.3)
    assert pt.recorded_test_comparison(_runs(), _recorded(), [], METHODS, 50).empty


def test_class_maps_number_test_classes_by_their_own_rank():
    import scipy.sparse as sp

    first_train = np.array([3, 5, 7, 7])
    first_test = np.array([5, 7, 9, 7])
    X = sp.csr_matrix(np.eye(4))
    maps, facts = pt.class_maps(first_train, X, first_test)
    assert maps["right"][1].tolist() == [1, 2, 2]          # 9 is unknown to training
    assert maps["own"][1].tolist() == [0, 1, 2, 1]
    assert facts == dict(rows=4, classes=3, test_only=1, train_only=1, moved=1.0)
    test_map = pd.DataFrame(dict(method=["umax", "umax"], epoch=[2, 50],
                                 test_error_recorded=[0.5, 0.7],
                                 test_error_own_map=[0.5, 0.68],
                                 test_error_right_map=[0.4, 0.6]))
    own, right = pt.class_map_gaps(test_map, 50)
    assert own["umax"] == pytest.approx(0.02) and right["umax"] == pytest.approx(0.1)


def _seed_runs(used, seeds=(0, 1, 2), umax=None, diverged=()):
    """run_paper_methods()-like runs: every row of ``used`` once per seed, with its values;
    ``umax``: U-max's exact log-loss per seed as a multiple of the used one; ``diverged``:
    the (method, seed) runs that diverged at the starting rate (every seed of that method
    then runs again 10x lower, finite, as run_paper_methods steps down)."""
    rows = []
    for s in seeds:
        for u in used.itertuples():
            f = umax[s] if (umax is not None and u.method == "umax") else 1.0
            bad = (u.method, s) in diverged
            rows.append(dict(dataset=u.dataset, method=u.method, lr=u.lr, paper_lr=u.paper_lr,
                             seed=s, diverged=bad,
                             train_log_loss=np.inf if bad else u.train_log_loss_mean * f,
                             train_defective=u.train_defective_mean))
            if u.method in {m for m, _ in diverged}:
                rows.append(dict(rows[-1], lr=u.lr / 10, diverged=False,
                                 train_log_loss=u.train_log_loss_mean))
    return pd.DataFrame(rows)


def _judge(runs, methods=METHODS):
    from scalable_softmax.repro.fagan import main_study
    summary_of = {"p-a": main_study.choose_used(runs, DATASETS, methods)}
    used_of = {"p-a": summary_of["p-a"][summary_of["p-a"].used]}
    tables = pt.table3_versions(used_of, DATASETS, methods, _recorded())
    label = pt.surrogate_labeller(SYNTHETIC)
    return pt.judge_claims(tables, summary_of, {"p-a": (runs, [])}, methods, DATASETS,
                           SYNTHETIC, label)


def test_judge_claims_gives_a_verdict_per_protocol():
    claims = _judge(_seed_runs(_used()))
    assert len(claims) == len(authors.PAPER_TABLE3_CLAIMS)
    assert list(claims.columns) == ["claim", "paper", "p-a", "verdict_p-a", "seeds_p-a",
                                    "range_over_seeds_p-a"]
    c = claims.set_index("claim")
    v = c["verdict_p-a"]
    # ours: OVE lowest everywhere (ratios rise with the method's index), U-max above vanilla
    umax = "U-max beats vanilla SGD on average"
    assert v[umax] == "not confirmed" and c.loc[umax, "seeds_p-a"] == "0 of 3 seeds"
    # every seed gives the same numbers: one value, no range
    assert c.loc[umax, "range_over_seeds_p-a"] == c.loc[umax, "p-a"] == "0.83 vs 0.67"
    assert v["Implicit SGD never diverges"] == "confirmed"
    assert c.loc["Implicit SGD never diverges", "seeds_p-a"] == "3 of 3 seeds"
    assert v["every method is stable at its Table 2 rate"] == "confirmed"
    assert claims.loc[0, "p-a"].startswith("0 of 2")
    assert claims.loc[0, "range_over_seeds_p-a"] == "0 of 2"
    partial = _judge(_seed_runs(_used()[lambda u: u.method.isin(["ove", "implicit"])]),
                     ["ove", "implicit"])
    assert "not judged" in set(partial["verdict_p-a"])
    with pytest.raises(ValueError, match="seed"):
        _judge(_seed_runs(_used()).drop(columns="seed"))


def test_a_claim_whose_seeds_disagree_is_inconclusive():
    umax = "U-max beats vanilla SGD on average"
    # U-max's exact log-loss 5 (x the data set's k) against vanilla's 4: seed 0 alone puts
    # U-max below vanilla (3.5), the mean (4.5) above it (ratios to Implicit's 6)
    claims = _judge(_seed_runs(_used(), umax={0: 0.7, 1: 1.0, 2: 1.0})).set_index("claim")
    assert claims.loc[umax, "verdict_p-a"] == "inconclusive (1 of 3 seeds)"
    assert claims.loc[umax, "seeds_p-a"] == "1 of 3 seeds"
    assert claims.loc[umax, "p-a"] == "0.75 vs 0.67"
    assert claims.loc[umax, "range_over_seeds_p-a"] == "0.58 to 0.83 vs 0.67"
    # the same split the other way: the means confirm, one seed does not
    claims = _judge(_seed_runs(_used(), umax={0: 0.7, 1: 0.7, 2: 1.0})).set_index("claim")
    assert claims.loc[umax, "verdict_p-a"] == "inconclusive (2 of 3 seeds)"
    # every seed below: confirmed
    claims = _judge(_seed_runs(_used(), umax={0: 0.7, 1: 0.7, 2: 0.7})).set_index("claim")
    assert claims.loc[umax, "verdict_p-a"] == "confirmed"
    assert claims.loc[umax, "seeds_p-a"] == "3 of 3 seeds"


def test_one_diverged_seed_refutes_the_divergence_claims_and_is_counted():
    claims = _judge(_seed_runs(_used(), diverged={("implicit", 1)})).set_index("claim")
    never = "Implicit SGD never diverges"
    assert claims.loc[never, "verdict_p-a"] == "not confirmed"
    assert claims.loc[never, "seeds_p-a"] == "2 of 3 seeds"
    # seed 1 on both data sets; 2 data sets x 3 seeds at the starting rate and 10x lower
    assert claims.loc[never, "p-a"] == "2 of 12 runs diverged"
    assert claims.loc[never, "range_over_seeds_p-a"] == "0 to 2 of 4 runs diverged"
    stable = "every method is stable at its Table 2 rate"
    assert claims.loc[stable, "verdict_p-a"] == "not confirmed"
    assert claims.loc[stable, "seeds_p-a"] == "2 of 3 seeds"


def test_seed_verdict_and_range():
    assert pt.seed_verdict(True, [True, True]) == ("confirmed", "2 of 2 seeds")
    assert pt.seed_verdict(False, [False, True]) == ("inconclusive (1 of 2 seeds)",
                                                     "1 of 2 seeds")
    # the means disagreeing with unanimous seeds is a disagreement too
    assert pt.seed_verdict(True, [False, False])[0] == "inconclusive (0 of 2 seeds)"
    assert pt.seed_verdict(False, [True, False], pooled=True)[0] == "not confirmed"
    assert pt.seed_verdict(None, []) == ("not judged", "-")
    assert pt.seed_range("{0} vs {1}", [(1.0, 2.0), (1.5, 2.0)]) == "1.00 to 1.50 vs 2.00"
    assert pt.seed_range("{0} of 7", [(6,), (5,)]) == "5 to 6 of 7"
    assert pt.seed_range("{0}", []) == "-"


def test_printed_claims_match_the_printed_table():
    avg = authors.PAPER_TABLE3_AVERAGE
    claims = authors.PAPER_TABLE3_CLAIMS
    assert claims["umax_beats_vanilla"][1] == f"{avg['umax']:.2f} vs {avg['vanilla']:.2f}"
    hi = max(avg[m] for m in ("vanilla", "umax", "implicit"))
    lo = min(avg[m] for m in ("ove", "nce", "is"))
    assert claims["double_sum_beats_biased"][1] == f"<= {hi:.2f} vs >= {lo:.2f}"
    lowest = {d: min(r, key=r.get) for d, r in authors.PAPER_TABLE3.items()}
    n = sum(m == "implicit" for m in lowest.values())
    assert claims["implicit_lowest"][1].startswith(f"{n} of {len(lowest)}")
    for d, m in authors.PAPER_TABLE3_MISPRINTS:
        assert m in authors.PAPER_TABLE3[d]


def test_tuned_rates_read_notebook_03s_table_and_name_what_is_missing():
    tuned = pd.DataFrame(dict(dataset=["mnist", "eurlex (SYNTHETIC surrogate)"],
                              method=["ove", "ove"], best=[1.0, 10.0]))
    assert pt.tuned_rates(tuned, "best", DATASETS, ["ove"]) == {"mnist": {"ove": 1.0},
                                                                "eurlex": {"ove": 10.0}}
    with pytest.raises(ValueError, match="t.csv: no column 'lr'"):
        pt.tuned_rates(tuned, "lr", DATASETS, ["ove"], source="t.csv")
    with pytest.raises(ValueError, match="no tuned rate for"):
        pt.tuned_rates(tuned, "best", DATASETS, ["ove", "nce"])
    rates = pd.DataFrame({"ove": [1.0, 10.0]}, index=DATASETS)
    md = pt.initial_rates_md(rates, rates / 10, DATASETS, ["ove"])
    assert "| mnist | 1 / 0.1 |" in md and "| eurlex | 10 / 1 |" in md


def test_read_table3_columns_and_the_long_form_of_notebook_11(tmp_path):
    used = _used()
    tables = pt.table3_versions({"authors-code": used}, DATASETS, METHODS)
    long = pt.table3_long(tables, {"authors-code": used}, DATASETS, METHODS,
                          pt.surrogate_labeller(SYNTHETIC))
    path = tmp_path / "t3.csv"
    long.to_csv(path, index=False)
    exact, pub, published = pt.read_table3_columns(path, "authors-code", DATASETS, METHODS)
    pd.testing.assert_frame_equal(exact, tables["authors-code, exact"], check_names=False)
    pd.testing.assert_frame_equal(published, tables["published"], check_names=False)
    with pytest.raises(ValueError, match="t3.csv: no column 'paper_text_exact'"):
        pt.read_table3_columns(path, "paper-text", DATASETS, METHODS)
    rates = pd.DataFrame(0.1, index=DATASETS, columns=METHODS)
    out = pt.tuned_table3_long(dict(ours=exact, paper=published), rates, used, rates,
                               DATASETS, METHODS, pt.surrogate_labeller(SYNTHETIC))
    assert list(out.columns) == ["dataset", "method", "tuned_lr", "lr_used", "paper_lr",
                                 "ours", "paper"]
    assert len(out) == (len(DATASETS) + 1) * len(METHODS)
    assert out[out.dataset == "Average"].tuned_lr.isna().all()


def test_lowest_method_and_summary_lines():
    t = pd.DataFrame({"umax": [0.5, np.nan, 2.0], "implicit": [1.0, np.nan, 1.0]},
                     index=["mnist", "eurlex", "Average"])
    w = pt.lowest_method(t)
    assert w.to_dict() == {"mnist": "umax", "eurlex": "none"}
    lines = pt.tuned_summary_lines({"exact": w}, _used(), DATASETS, ["umax", "implicit"],
                                   pt.surrogate_labeller(SYNTHETIC))
    assert lines[0].startswith("mnist: lowest exact: U-max")
    assert lines[1].startswith("eurlex (SYNTHETIC): lowest exact: none")
    assert lines[-1] == "Implicit lowest (exact): 0 of 2"


def test_figures_draw_one_panel_per_data_set(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tables = pt.table3_versions({"p": _used()}, DATASETS, METHODS)
    series = [("published", tables["published"], "C0", "o"),
              ("ours", tables["p, as published"], "C1", "s")]
    fig = pt.series_figure(series, DATASETS + ["Average"], METHODS,
                           pt.panel_title_labeller(SYNTHETIC), "title")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[0] == "mnist" and "synthetic surrogate" in titles[1]
    assert titles[2].startswith("Average over the data sets")
    fig.savefig(tmp_path / "table3.png")
    plt.close(fig)
    hist = pd.DataFrame([dict(dataset="mnist", method=m, lr=0.1 * (i + 1), seed=0, epoch=e,
                              train_log_loss=1.0 / (e + 1), train_defective=2.0)
                         for i, m in enumerate(METHODS) for e in (0, 2, 4)])
    fig = pt.recorded_curves_figure(hist, _recorded(), _used(), ["mnist"], METHODS,
                                    pt.surrogate_labeller(SYNTHETIC))
    assert len(fig.axes) == 2
    plt.close(fig)
