"""Learning-rate tuning and sensitivity (scalable_softmax.repro.fagan.tuning): the choices of
notebooks 03 and 04 on small hand-made grids whose answers are known."""
import math
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest

from scalable_softmax.repro.fagan import tuning

matplotlib.use("Agg")

INF = math.inf
LOADER = {"bibtex": "bibtex", "eurlex": "eurlex-surrogate"}
PAPER = {"bibtex": {"ove": 1.0, "vanilla": 0.01}, "eurlex": {"ove": 10.0, "vanilla": 0.1}}


def _grid():
    """Two data sets x (OVE at 3 rates, vanilla at 4): OVE on bibtex is best at 1.0,
    vanilla on bibtex diverges above 0.1; everything diverges for vanilla on eurlex."""
    rows = []
    losses = {("bibtex", "ove"): {0.1: 2.0, 1.0: 1.0, 10.0: 3.0},
              ("bibtex", "vanilla"): {0.001: 2.5, 0.01: 2.0, 0.1: 1.5, 1.0: INF},
              ("eurlex", "ove"): {0.1: 5.0, 1.0: 4.0, 10.0: 3.0},
              ("eurlex", "vanilla"): {0.001: INF, 0.01: INF, 0.1: INF, 1.0: INF}}
    for (d, m), by_rate in losses.items():
        for lr, ll in by_rate.items():
            rows.append(dict(dataset=d, data=LOADER[d], synthetic=d == "eurlex", method=m,
                             lr=lr, train_log_loss=ll, train_error=0.5,
                             diverged=not math.isfinite(ll), diverged_at="",
                             epochs_run=2, train_rows=100, K=10, train_seconds=0.1,
                             wall_seconds=0.2, from_cache=False))
    return pd.DataFrame(rows)


RATES = {"ove": [0.1, 1.0, 10.0], "vanilla": [0.001, 0.01, 0.1, 1.0]}


def test_fmt_rate_and_agreement():
    assert tuning.fmt_rate(1e-3) == "1e-3" and tuning.fmt_rate(100.0) == "1e2"
    assert tuning.fmt_rate(0.5) == "0.5"
    assert tuning.fmt_rate(None) == "none" and tuning.fmt_rate(np.nan) == "none"
    assert tuning.agreement(1.0, 1.0) == "equal"
    assert tuning.agreement(0.1, 1.0) == "within 10x"
    assert tuning.agreement(100.0, 1.0) == "within 100x"
    assert tuning.agreement(1e-4, 1.0) == "further"
    assert tuning.agreement(np.nan, 1.0) == "no stable rate"


def test_check_methods_names_the_unknown_method():
    tuning.check_methods(["ove", "implicit"])
    with pytest.raises(ValueError, match=r"methods: \['sgd'\]"):
        tuning.check_methods(["ove", "sgd"])


def test_rate_grid_extends_only_vanilla():
    r = tuning.rate_grid(["ove", "vanilla"], [1.0, 0.1], [1e-4])
    assert r == {"ove": [0.1, 1.0], "vanilla": [1e-4, 0.1, 1.0]}


def test_tuning_specs_cover_the_grid_in_order():
    specs = tuning.tuning_specs({"bibtex": "bibtex"}, {"ove": [0.1, 1.0], "vanilla": [0.01]},
                                seed=3, epochs=2, train_fraction=0.1)
    assert [(s.method, s.lr) for s in specs] == [("ove", 0.1), ("ove", 1.0), ("vanilla", 0.01)]
    assert all(s.seed == 3 and s.epochs == 2 and s.train_fraction == 0.1 for s in specs)
    assert all(s.monitor_rows is None and not s.test for s in specs)


def test_choose_rates_best_stable_and_paper():
    grid = _grid()
    c = tuning.choose_rates(grid, LOADER, ["ove", "vanilla"], paper=PAPER)
    c = c.set_index(["data", "method"])
    ove = c.loc[("bibtex", "ove")]
    assert ove.best_lr == 1.0 and ove.our_lr == 1.0 and ove.agreement == "equal"
    assert ove.best_at_grid_edge == "" and ove.compared == "best"
    assert ove.loss_ratio_paper_over_best == 1.0
    van = c.loc[("bibtex", "vanilla")]
    assert van.largest_stable_lr == 0.1 and van.best_lr == 0.1 and van.our_lr == 0.1
    assert van.decades_off == 1 and van.agreement == "within 10x"
    assert van.rates_diverged == 1
    assert van.best_at_grid_edge == ""        # the edge counts the diverged rates too
    eo = c.loc[("eurlex-surrogate", "ove")]
    assert eo.dataset == "eurlex (SYNTHETIC surrogate)" and eo.best_at_grid_edge == "highest rate"
    ev = c.loc[("eurlex-surrogate", "vanilla")]
    assert ev.agreement == "no stable rate" and np.isnan(ev.our_lr)
    assert ev.best_log_loss == INF and ev.rates_diverged == 4
    tuning.check_choice(grid, c.reset_index(), RATES, epochs=2)


def test_check_choice_catches_a_wrong_choice():
    grid = _grid()
    c = tuning.choose_rates(grid, LOADER, ["ove", "vanilla"], paper=PAPER)
    bad = c.copy()
    bad.loc[0, "best_lr"] = 10.0
    with pytest.raises(AssertionError):
        tuning.check_choice(grid, bad, RATES, epochs=2)
    with pytest.raises(AssertionError):
        tuning.check_choice(grid.iloc[1:], c, RATES, epochs=2)


def test_agreement_counts_and_report():
    c = tuning.choose_rates(_grid(), LOADER, ["ove", "vanilla"], paper=PAPER)
    counts, per_method = tuning.agreement_counts(c)
    assert list(counts.columns) == tuning.AGREEMENT_ORDER
    assert counts.loc["all"].sum() == 4 and counts.loc["real", "equal"] == 1
    assert counts.loc["synthetic surrogate", "no stable rate"] == 1
    assert per_method.loc["ove", "equal"] == 2 and per_method.loc["vanilla", "within10"] == 1
    text = tuning.agreement_report(c)
    assert "of 4 cells: 2 equal" in text and "stable  1e-1" in text


def test_table2_wide_cells():
    c = tuning.choose_rates(_grid(), LOADER, ["ove", "vanilla"], paper=PAPER)
    w = tuning.table2_wide(c, LOADER, ["ove", "vanilla"])
    assert list(w.dataset) == ["bibtex", "eurlex (SYNTHETIC surrogate)"]
    assert w.ove[0] == "1e0 / 1e0"
    assert w.vanilla[0] == "1e-1 (best 1e-1) / 1e-2"
    assert w.vanilla[1] == "none (best none) / 1e-1"


def test_choose_by_score_uses_the_defective_metric_for_sampled_methods():
    frame = pd.DataFrame(dict(
        dataset="bibtex", method=["ove"] * 3 + ["vanilla"] * 3, lr=[0.1, 1.0, 10.0] * 2,
        train_log_loss=[3.0, 1.0, 2.0, 1.0, 2.0, INF],
        train_defective=[4.0, 4.5, 3.9, np.nan, np.nan, np.nan],
        diverged=[False] * 5 + [True]))
    exact = tuning.choose_by_score(frame, {"bibtex": "bibtex"}, ["ove", "vanilla"])
    assert list(exact.lr) == [1.0, 1.0]
    defective = tuning.choose_by_score(frame, {"bibtex": "bibtex"}, ["ove", "vanilla"],
                                       sampled_score="train_defective")
    assert list(defective.lr) == [10.0, 1.0]
    assert defective.best_log_loss[0] == 2.0 and defective.rates_diverged[1] == 1


def test_authors_code_comparison():
    c = tuning.choose_rates(_grid(), LOADER, ["ove", "vanilla"], paper=PAPER)
    ca = pd.DataFrame(dict(lr=[1.0, 0.01, 10.0, np.nan], best_log_loss=[1.0, 2.0, 3.0, INF],
                           rates_diverged=[0, 1, 0, 4]))
    both, agree = tuning.authors_code_comparison(c, ca, "authors-code")
    assert list(both.authors_code_agreement) == ["equal", "equal", "equal", "no stable rate"]
    assert agree["authors-code (first 10%)"]["equal"] == 3
    assert agree.sum().tolist() == [4, 4]
    with pytest.raises(ValueError, match="same data sets"):
        tuning.authors_code_comparison(c, ca.iloc[:2], "authors-code")


def test_plot_tuning_draws_a_panel_per_data_set():
    grid = _grid()
    c = tuning.choose_rates(grid, LOADER, ["ove", "vanilla"], paper=PAPER)
    fig = tuning.plot_tuning(grid, c, LOADER, ["ove", "vanilla"], 2, 0.1, 0)
    assert "10% of the training data" in fig._suptitle.get_text()
    assert fig.axes[0].get_title().startswith("bibtex")


# ---------------------------------------------------------------------------
# notebook 04
# ---------------------------------------------------------------------------

def _frame():
    """One data set, three variants (ove, implicit, nce (1,1)) at two rates."""
    rows = []
    for v, losses in {"ove": [2.0, INF], "implicit": [1.5, 0.5], "nce (1,1)": [2.5, 2.2]}.items():
        for lr, ll in zip([0.1, 1.0], losses):
            rows.append(dict(dataset="bibtex", paper_dataset="bibtex", variant=v,
                             method="nce" if v == "nce (1,1)" else v, synthetic=False,
                             lr=lr, train_log_loss=ll, train_defective=2.5 if ll < INF else INF,
                             train_error=0.2, test_log_loss=2.0 if ll < INF else INF,
                             test_error=0.3, K=20, N=100, diverged=ll == INF,
                             diverged_at=[1, 5] if ll == INF else None,
                             seconds_per_epoch=0.01, train_seconds=0.1, wall_seconds=0.2,
                             from_cache=True))
    return pd.DataFrame(rows)


def test_sensitivity_variants_and_specs():
    v = tuning.sensitivity_variants(["ove", "nce"], nce_11=True)
    assert v == {"ove": ("ove", {}), "nce": ("nce", {}),
                 "nce (1,1)": ("nce", {"batch_size": 1, "n_sampled": 1})}
    assert "nce (1,1)" not in tuning.sensitivity_variants(["ove"], nce_11=False)
    specs, keys = tuning.sensitivity_specs({"bibtex": "bibtex"}, v, [0.1, 1.0], seed=0,
                                           epochs=2)
    assert len(specs) == len(keys) == 6
    assert keys[4] == ("bibtex", "nce (1,1)", 0.1)
    assert specs[4].method == "nce" and specs[4].lr == 0.1


def test_sensitivity_table_and_best_method():
    table = tuning.sensitivity_table(_frame())
    assert list(table.diverged) == [False, True, False, False, False, False]
    assert table.diverged_at[1] == "(1, 5)" and table.diverged_at[0] == ""
    assert table.log_K[0] == pytest.approx(math.log(20))
    variants = ["ove", "implicit", "nce (1,1)"]
    best = tuning.best_method_table(table, {"bibtex": "bibtex"}, [0.1, 1.0],
                                    ["ove", "implicit"], variants)
    assert list(best.best_method) == ["implicit", "implicit"]
    assert list(best.best_log_loss) == [1.5, 0.5]
    assert best.implicit_over_best.tolist() == [1.0, 1.0]
    assert best.ove[1] == INF
    text = tuning.best_method_summary(best, variants)
    assert text.startswith("bibtex: Implicit SGD best at 2 of 2 rates")


def test_sensitivity_table_marks_surrogates():
    f = _frame().assign(synthetic=True, paper_dataset="eurlex")
    assert set(tuning.sensitivity_table(f).dataset) == {"eurlex (SYNTHETIC surrogate)"}


def test_check_sensitivity_monitoring_and_band():
    frame = _frame()
    table = tuning.sensitivity_table(frame)
    best = tuning.best_method_table(table, {"bibtex": "bibtex"}, [0.1, 1.0],
                                    ["ove", "implicit"], list(frame.variant.unique()))
    epochs = 10
    from scalable_softmax.fit import default_eval_epochs

    def result(diverged):
        ep = default_eval_epochs(epochs)
        if diverged:
            ep = [e for e in ep if e < 1]
        h = pd.DataFrame(dict(epoch=ep, evaluated=True, train_log_loss=1.0))
        return SimpleNamespace(history=h, final={"diverged": diverged, "diverged_at": [1, 5]})

    results = [result(d) for d in table.diverged]
    keys = list(zip(frame.paper_dataset, frame.variant, frame.lr))
    tuning.check_sensitivity(table, best, results, keys, ["ove", "implicit"], epochs)
    bad = table.copy()
    bad.loc[0, "train_defective"] = 10.0      # outside [log(K-1+e) - 1, log(K-1+e)]
    with pytest.raises(AssertionError):
        tuning.check_sensitivity(bad, best, results, keys, ["ove", "implicit"], epochs)


def test_sensitivity_figures():
    frame = _frame()
    table = tuning.sensitivity_table(frame)
    variants = ["ove", "implicit", "nce (1,1)"]
    history = pd.DataFrame(dict(paper_dataset="bibtex", variant=np.repeat(variants, 2),
                                lr=[0.1, 0.1, 0.1, 0.1, 1.0, 1.0], epoch=[0, 1] * 3,
                                train_log_loss=[3.0, 2.0, 3.0, 1.5, 3.0, np.inf]))
    fig = tuning.plot_sensitivity_curves(history, frame, table, "bibtex", variants,
                                         [0.1, 1.0], 0)
    assert "N = 100, K = 20" in fig._suptitle.get_text()
    fig = tuning.plot_final_vs_rate(table, {"bibtex": "bibtex"}, variants, 2)
    assert fig.axes[0].get_title() == "bibtex"


def test_sensitivity_seed_claims_judge_the_means_and_every_seed():
    import numpy as np
    import pandas as pd

    from scalable_softmax.repro.fagan import tuning as tu

    methods = ["umax", "implicit"]
    variants = tu.sensitivity_variants(methods, nce_11=False)

    def table(implicit_at_1):
        rows = []
        for lr, umax, impl in ((0.1, 2.0, 1.0), (1.0, 50.0, implicit_at_1), (10.0, 90.0, 1.0)):
            for m, ll in (("umax", umax), ("implicit", impl)):
                rows.append(dict(dataset="bibtex", data="bibtex", method=m, lr=lr,
                                 train_log_loss=ll, log_K=np.log(146.0),
                                 diverged=not np.isfinite(ll)))
        return pd.DataFrame(rows)

    tables = {0: table(1.0), 1: table(np.inf)}
    c = tu.sensitivity_seed_claims(tables, {"bibtex": "bibtex"}, [0.1, 1.0, 10.0], methods,
                                   variants).set_index("claim")
    best = c.loc["Implicit SGD is best at most rates"]
    assert (best.verdict, best.seeds) == ("confirmed", "2 of 2 seeds")
    never = c.loc["Implicit SGD never diverges"]
    assert (never.verdict, never.seeds, never.ours) == ("not confirmed", "1 of 2 seeds",
                                                        "1 of 6 runs diverged")
    large = c.loc["U-max's log-loss is extremely large at the largest rate"]
    assert large.verdict == "confirmed" and large.ours.startswith("18.1 times log K")
    every = tu.sensitivity_seeds(tables, {"bibtex": "bibtex"}, [0.1, 1.0, 10.0], methods,
                                 variants)
    assert list(every.seed) == [0, 0, 0, 1, 1, 1]
    assert list(every.best_method) == ["implicit"] * 3 + ["implicit", "umax", "implicit"]
