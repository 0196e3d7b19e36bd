"""Notebook 14's library (``scalable_softmax.repro.crossover``): the families, the
problems built at several K (on the small corpus of ``test_data_newsgroups``), the
table from notebook 12's machinery, each family's fastest member, the verdict and the
figure. The race itself is notebook 12's (tests/test_peers.py)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from scalable_softmax.data import load_dataset
from scalable_softmax.repro import crossover as C
from scalable_softmax.repro import peers as P
from test_data_newsgroups import make_corpus


def test_every_family_member_is_a_method_of_the_race_with_a_rate():
    members = [m for ms in C.FAMILIES.values() for m in ms]
    assert len(members) == len(set(members))
    assert set(members) <= set(P.RATE_METHODS)
    assert C.family_of("umax") == "double-sum" and C.family_of("is") == "sampled-softmax"
    with pytest.raises(ValueError, match="belongs to no family"):
        C.family_of("exact")


def test_problems_are_the_loader_at_every_k(tmp_path):
    root = tmp_path / "raw"
    make_corpus(root)
    opts = dict(data_dir=root, verify=False, cache_dir=tmp_path / "cache")
    paths, shapes = C.build_problems([3, 5], {3: None, 5: 40}, tmp_path / "work", **opts)
    assert list(shapes.K) == [3, 5] and set(paths) == {3, 5}
    for K in (3, 5):
        X, y, Xt, yt, K2 = P._load(paths[K])
        ref = load_dataset("20news-words", "train", classes=K,
                           max_points={3: None, 5: 40}[K], **opts)
        assert K2 == K and (X != ref.X).nnz == 0 and np.array_equal(y, ref.y)
        row = shapes.set_index("K").loc[K]
        assert row.N == X.shape[0] and row.N_test == Xt.shape[0]
        assert row.classes_in_train == np.unique(y).size <= K
    with pytest.raises(ValueError, match="max_points has no entry for K"):
        C.build_problems([3, 7], {3: None}, tmp_path / "work", **opts)
    with pytest.raises(ValueError, match="increasing"):
        C.build_problems([5, 3], {3: None, 5: None}, tmp_path / "work", **opts)


def _table(seconds):
    """A crossover table: ``seconds[K] = {method: seconds to within 1% or None}``."""
    rows = []
    for K, d in seconds.items():
        for m, s in d.items():
            rows.append(dict(K=K, method=m, label=P.LABELS[m], family=C.family_of(m),
                             status="time cap", seconds_to_1pct=np.nan if s is None else s,
                             best_test_log_loss=2.0 if s is not None else 2.5))
    return pd.DataFrame(rows)


@pytest.mark.parametrize("seconds,start", [
    ({1000: {"umax": 3.0, "torch-sgd": 1.0}, 3000: {"umax": 2.0, "torch-sgd": 4.0},
      30000: {"umax": 2.0, "torch-sgd": None}}, 3000),
    ({1000: {"umax": 3.0, "torch-sgd": 1.0}, 3000: {"umax": 2.0, "torch-sgd": 4.0},
      30000: {"umax": 5.0, "torch-sgd": 1.0}}, None),
    ({1000: {"umax": 1.0, "is": 2.0}, 3000: {"umax": 2.0, "is": None}}, 1000)])
def test_the_verdict_is_the_smallest_k_from_which_the_double_sum_is_first(seconds, start):
    table = _table(seconds)
    first, text = C.verdict(table)
    assert list(first.K) == sorted(seconds)
    for r in first.itertuples():
        d = {m: s for m, s in seconds[r.K].items() if s is not None}
        assert r.method == min(d, key=d.get) and r.seconds == min(d.values())
    if start is None:
        assert text.startswith("No double-sum method is first within 1%")
    elif start == min(seconds):
        assert text.startswith(f"A double-sum method is first within 1% of the best test "
                               f"log-loss at every K raced, from K = {start:,}")
    else:
        assert f"from K = {start:,} on" in text
    assert "K = 1,000: " in text


def test_family_best_is_the_fastest_member_or_none():
    table = _table({1000: {"umax": 3.0, "implicit-batch": 2.0, "torch-sgd": None,
                           "torch-adam": None}})
    best = C.family_best(table).set_index("family")
    assert best.loc["double-sum", "method"] == "implicit-batch"
    assert best.loc["double-sum", "seconds"] == 2.0
    assert best.loc["full-softmax", "method"] == "" and math.isnan(
        best.loc["full-softmax", "seconds"])
    assert "sampled-softmax" not in best.index


def test_crossover_table_is_notebook_12s_per_k():
    paths = {1000: "/x/a.npz", 3000: "/x/b.npz"}
    curves = pd.DataFrame([
        dict(dataset=d, method=m, seconds=s, test_log_loss=v, train_log_loss=v)
        for d in paths.values() for m, pts in (("umax", [(0.1, 3.0), (0.2, 2.0)]),
                                               ("softmax-sgd", [(0.1, 2.5), (0.4, 2.01)]))
        for s, v in pts])
    runs = pd.DataFrame([dict(dataset=d, method=m, lr=0.1, status="time cap", reason="",
                              threads=2, used_threads="yes", cpu_per_second=1.9, layout="",
                              peak_rss_gb=0.1, rss_scope="method", train_seconds=0.4,
                              points=2)
                         for d in paths.values() for m in ("umax", "softmax-sgd")])
    rates = pd.DataFrame([dict(dataset=d, method=m, lr=0.1, config="", grid="0.1",
                               at_grid_edge="", candidates=1)
                          for d in paths.values() for m in ("umax", "softmax-sgd")])
    table, ttq = C.crossover_table(runs, rates, curves, Ks=[1000, 3000], paths=paths,
                                   methods=["umax", "softmax-sgd"], tolerances=[0.05, 0.01])
    assert list(table.columns[:len(C.TABLE_COLUMNS)]) == C.TABLE_COLUMNS
    assert "dataset" not in table and not table.astype(str).apply(
        lambda c: c.str.contains("/x/")).any().any()
    assert list(table.K) == [1000, 1000, 3000, 3000]
    assert list(table.family) == ["double-sum", "full-softmax"] * 2
    t = table.set_index(["K", "method"])
    assert t.loc[(1000, "umax"), "within_1pct"] == "0.2"
    assert t.loc[(1000, "softmax-sgd"), "within_1pct"] == "0.4"
    C.check_results(table, curves.assign(K=[1000] * 4 + [3000] * 4), ttq, Ks=[1000, 3000],
                    methods=["umax", "softmax-sgd"], tolerances=[0.05, 0.01])
    with pytest.raises(AssertionError):
        C.check_results(table, curves, ttq, Ks=[1000], methods=["umax", "softmax-sgd"],
                        tolerances=[0.05, 0.01])


def test_figure_draws_a_line_per_family_and_marks_the_never():
    import matplotlib

    matplotlib.use("Agg")
    table = _table({1000: {"umax": 3.0, "torch-sgd": 1.0, "is": None},
                    3000: {"umax": 2.0, "torch-sgd": None, "is": None}})
    fig = C.figure(C.family_best(table), {1000: 4, 3000: 8})
    ax = fig.axes[0]
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert {"double-sum", "full-softmax", "sampled-softmax"} <= set(labels)
    assert "sampled-softmax: not within the cap" in labels
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    ds = ax.get_lines()[labels.index("double-sum")]
    assert list(ds.get_xdata()) == [1000, 3000] and list(ds.get_ydata()) == [3.0, 2.0]


def test_tuning_overshoot_is_the_median_ratio_to_the_budget():
    import pandas as pd

    from scalable_softmax.repro import crossover

    rates = pd.DataFrame({"K": [10, 10, 10, 20, 20],
                          "method": ["a", "a", "b", "a", "b"],
                          "train_seconds": [0.3, 0.5, 0.2, 2.0, None]})
    over = crossover.tuning_overshoot(rates, {10: 2.0, 20: 10.0}, 0.1)
    assert over.loc[10, "a"] == pytest.approx(2.0)      # median of 1.5 and 2.5
    assert over.loc[10, "b"] == pytest.approx(1.0)
    assert over.loc[20, "a"] == pytest.approx(2.0)
    assert pd.isna(over.loc[20, "b"])                    # no finished run
    with pytest.raises(ValueError, match="no cap for K"):
        crossover.tuning_overshoot(rates, {10: 2.0}, 0.1)


def test_close_calls_flag_a_near_second_family_by_seconds_or_by_its_end():
    """Another family is close when it got within 1% at most CLOSE_FACTOR x as late as
    the first, or never got there but ended within CLOSE_MARGIN x 1% of the best."""
    table = _table({1000: {"umax": 1.0, "torch-sgd": 1.5},
                    3000: {"umax": 1.0, "torch-sgd": None},
                    10000: {"umax": 1.0, "torch-sgd": None},
                    30000: {"umax": 1.0, "torch-sgd": 3.0, "is": None}})
    table.loc[(table.K == 3000) & (table.method == "torch-sgd"), "best_test_log_loss"] = 2.03
    table.loc[(table.K == 10000) & (table.method == "torch-sgd"), "best_test_log_loss"] = 2.05
    close = C.close_calls(table)
    assert list(close.K) == [1000, 3000]
    assert (close["first"] == "double-sum").all() and (close.family == "full-softmax").all()
    assert close.seconds_ratio.iloc[0] == pytest.approx(1.5)
    assert math.isnan(close.seconds_ratio.iloc[1])
    assert close.loss_ratio.iloc[1] == pytest.approx(2.03 / 2.0)
    assert C.close_at(table, 1000) == "K = 1,000: close, full-softmax got there at 1.50 x " \
                                      "the seconds"
    assert C.close_at(table, 3000) == "K = 3,000: close, full-softmax ended at 1.0150 x " \
                                      "the best"
    assert C.close_at(table, 10000) == "K = 10,000: not close"
    assert C.close_at(table, 30000) == "K = 30,000: not close"
    # the rule follows its constants
    assert len(C.close_calls(table, factor=1.2)) == 1
    assert list(C.close_calls(table, margin=3.0).K) == [1000, 3000, 10000]
    assert "2 x as late" in C.close_rule() and "within 2% of the best" in C.close_rule()
