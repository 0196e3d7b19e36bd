"""The race's scoring (repro.race.scoring) and validation split (repro.race.split):
targets, time to each level at validation checkpoints, the sealed test set, family
verdicts over seeds and performance profiles, on hand-made numbers."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scalable_softmax.repro.race import families, scoring, split


def test_target_levels_are_the_reference_plus_each_level():
    t = scoring.target_levels(2.0)
    assert list(t) == [0.01, 0.02, 0.05, 0.10]
    assert t[0.01] == pytest.approx(2.02) and t[0.10] == pytest.approx(2.2)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="reference_val_log_loss"):
            scoring.target_levels(bad)
    with pytest.raises(ValueError, match="distinct"):
        scoring.target_levels(1.0, (0.01, 0.01))


def test_seconds_to_targets_reads_the_first_checkpoint_at_or_below_each_target():
    targets = scoring.target_levels(1.0)            # 1.01, 1.02, 1.05, 1.10
    s = scoring.seconds_to_targets([0, 1, 2, 4, 8], [3.0, 1.08, math.inf, 1.02, 1.011],
                                   targets)
    assert s[0.10] == 1 and s[0.05] == 4 and s[0.02] == 4   # 1.02 <= 1.02: reached
    assert math.isnan(s[0.01])                              # 1.011 > 1.01: never
    with pytest.raises(ValueError, match="non-decreasing"):
        scoring.seconds_to_targets([1, 0], [1, 1], targets)


def test_a_run_stops_at_the_tightest_target_or_the_cap():
    targets = scoring.target_levels(1.0)
    assert not scoring.should_stop(1.02, 3.0, targets, cap=5.0)
    assert scoring.should_stop(1.01, 3.0, targets, cap=5.0)
    assert scoring.should_stop(9.0, 5.0, targets, cap=5.0)
    assert not scoring.should_stop(math.nan, 3.0, targets, cap=5.0)


def test_target_watch_reports_each_level_once_at_its_first_checkpoint():
    w = scoring.TargetWatch(scoring.target_levels(1.0), cap=10.0)
    assert w.observe(0.5, 1.3) == []
    first = w.observe(1.0, 1.04)                    # 10% and 5% at once
    assert [a.level for a in first] == [0.10, 0.05] and all(a.seconds == 1.0 for a in first)
    assert w.observe(2.0, 1.03) == [] and not w.stop
    assert [a.level for a in w.observe(3.0, 1.0)] == [0.02, 0.01] and w.stop
    with pytest.raises(ValueError, match="training order"):
        w.observe(2.5, 1.0)


def _sealed(calls):
    def evaluate(X, y, W):
        calls.append(W)
        return float(W)
    return scoring.SealedTest(np.zeros((3, 2)), np.zeros(3, int), evaluate)


def test_the_race_cannot_read_test_rows_before_its_reporting_step():
    """A run driven by validation numbers only: the test rows raise on access while it
    runs, are evaluated exactly once per level reached (at its first checkpoint, with
    that checkpoint's model), and are readable only after release."""
    calls = []
    test = _sealed(calls)
    with pytest.raises(scoring.SealedTestError, match="before its reporting step"):
        _ = test.X
    with pytest.raises(scoring.SealedTestError):
        _ = test.y
    w = scoring.TargetWatch(scoring.target_levels(1.0), cap=10.0)
    # (seconds, validation log-loss, model): the model stands for the weights there
    # 10% at 1 s, 5% at 2 s, 2% and 1% at 4 s: the run stops there, before 5 s
    for seconds, val, model in [(0, 2.0, 20.0), (1, 1.06, 21.0), (2, 1.04, 22.0),
                                (3, 1.045, 23.0), (4, 1.005, 24.0), (5, 1.0, 25.0)]:
        for arrival in w.observe(seconds, val):
            test.report(arrival, model)
        with pytest.raises(scoring.SealedTestError):
            _ = test.X
        if w.stop:
            break
    assert calls == [21.0, 22.0, 24.0, 24.0]
    assert test.release() == {0.10: 21.0, 0.05: 22.0, 0.02: 24.0, 0.01: 24.0}
    assert test.X.shape == (3, 2)                   # readable after release
    with pytest.raises(TypeError, match="Arrival"):
        _sealed([]).report((0.01, 1.0), 1.0)


def test_sealed_test_refuses_a_second_report_of_a_level_and_reports_after_release():
    test = _sealed([])
    a = scoring.Arrival(0.05, 1.05, 1.0, 1.04)
    test.report(a, 1.0)
    with pytest.raises(ValueError, match="already reported"):
        test.report(a, 2.0)
    test.release()
    with pytest.raises(scoring.SealedTestError, match="after release"):
        test.report(scoring.Arrival(0.01, 1.01, 2.0, 1.0), 3.0)


def _rows(times):
    """times: {(workload, family, method, seed): seconds or None} at level 0.05."""
    return pd.DataFrame([{"workload": w, "family": f, "method": m, "level": 0.05,
                          "seed": s, "seconds_to_target": t}
                         for (w, f, m, s), t in times.items()])


def test_family_time_is_its_fastest_method_per_seed():
    ft = scoring.family_times(_rows({("a", "double-sum", "umax", 0): 3.0,
                                     ("a", "double-sum", "implicit-batch", 0): 2.0,
                                     ("a", "double-sum", "umax", 1): None,
                                     ("a", "double-sum", "implicit-batch", 1): None}))
    assert ft.seconds_to_target.iloc[0] == 2.0 and math.isnan(ft.seconds_to_target.iloc[1])
    with pytest.raises(ValueError, match="lack the columns"):
        scoring.family_times(pd.DataFrame({"workload": ["a"]}))


def test_a_family_is_first_only_when_its_slowest_seed_beats_every_other_fastest():
    rows = {}
    for s, (d, f) in enumerate([(1.0, 2.0), (1.5, 3.0), (1.9, 2.5)]):   # clear: 1.9 < 2.0
        rows[("clear", "double-sum", "umax", s)] = d
        rows[("clear", "full-softmax", "softmax-sgd", s)] = f
    for s, (d, f) in enumerate([(1.0, 2.0), (2.1, 3.0), (1.2, 2.5)]):   # 2.1 > 2.0: tie
        rows[("overlap", "double-sum", "umax", s)] = d
        rows[("overlap", "full-softmax", "softmax-sgd", s)] = f
    for s in range(3):                                                  # nobody
        rows[("hard", "double-sum", "umax", s)] = None
        rows[("hard", "full-softmax", "softmax-sgd", s)] = None
    for s, d in enumerate([1.0, None, 1.0]):       # a seed that missed: never, so tie
        rows[("missed", "double-sum", "umax", s)] = d
        rows[("missed", "full-softmax", "softmax-sgd", s)] = None
    for s in range(3):                             # alone in every seed: first
        rows[("alone", "double-sum", "umax", s)] = None
        rows[("alone", "sampled-softmax", "is", s)] = 4.0 + s
    v = scoring.verdicts(scoring.family_times(_rows(rows))).set_index("workload").verdict
    assert v.to_dict() == {"alone": "sampled-softmax", "clear": "double-sum",
                           "hard": "none", "missed": "tie", "overlap": "tie"}


def test_performance_profile_is_the_share_of_workloads_within_tau_of_the_fastest():
    rows = _rows({("a", "double-sum", "umax", 0): 1.0,
                  ("a", "full-softmax", "softmax-sgd", 0): 3.0,
                  ("b", "double-sum", "umax", 0): 4.0,
                  ("b", "full-softmax", "softmax-sgd", 0): 2.0,
                  ("c", "double-sum", "umax", 0): None,
                  ("c", "full-softmax", "softmax-sgd", 0): 5.0})
    p = scoring.performance_profile(rows, "family", taus=[1, 2, 3])
    got = {(r.family, r.tau): r.fraction for r in p.itertuples()}
    assert got[("double-sum", 1)] == pytest.approx(1 / 3)     # fastest on a
    assert got[("double-sum", 2)] == pytest.approx(2 / 3)     # b within 2x; c never
    assert got[("full-softmax", 1)] == pytest.approx(2 / 3)   # b and c
    assert got[("full-softmax", 3)] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="taus"):
        scoring.performance_profile(rows, taus=[0.5])


def test_validation_split_is_seeded_disjoint_and_independent_of_the_race_seed():
    fit, val = split.validation_split(1000, 0.1, 0)
    assert len(val) == 100 and len(fit) == 900
    assert np.array_equal(np.union1d(fit, val), np.arange(1000))
    again = split.validation_split(1000, 0.1, 0)
    assert np.array_equal(again[1], val)
    assert not np.array_equal(split.validation_split(1000, 0.1, 1)[1], val)
    assert len(split.validation_split(3, 0.01, 0)[1]) == 1     # at least one row
    assert len(split.validation_split(3, 0.99, 0)[0]) == 1     # at least one to train on
    for bad in [dict(n_rows=1), dict(n_rows=10, fraction=1.0), dict(n_rows=10, split_seed=-1)]:
        with pytest.raises(ValueError):
            split.validation_split(**{"n_rows": 10, **bad})


def test_race_problem_seals_the_test_rows_and_validates_on_training_rows():
    X = sp.csr_matrix(np.arange(40, dtype=float).reshape(20, 2))
    y = np.arange(20) % 3
    Xt = sp.csr_matrix(np.ones((5, 2)))
    p = split.race_problem(X, y, Xt, np.zeros(5, int), 3, fraction=0.25, split_seed=7)
    fit, val = split.validation_split(20, 0.25, 7)
    assert np.array_equal(p.val[0].toarray(), X[val].toarray())
    assert np.array_equal(p.X.toarray(), X[fit].toarray()) and p.K == 3
    with pytest.raises(scoring.SealedTestError):
        _ = p.test.X
    a = scoring.Arrival(0.05, 1.0, 0.0, 1.0)
    p.test.report(a, np.zeros((3, 2)))              # the library's exact log-loss
    assert p.test.release()[0.05] == pytest.approx(math.log(3))


def test_every_race_method_has_one_family():
    seen = [m for ms in families.FAMILIES.values() for m in ms]
    assert len(seen) == len(set(seen))
    assert families.family_of("torch-sgd") == "full-softmax"
    with pytest.raises(ValueError, match="belongs to no family"):
        families.family_of("nope")


def test_curve_limits_follow_the_targets_and_mark_outliers_at_the_edge():
    from scalable_softmax.repro.race import plots

    targets = scoring.target_levels(2.0)                  # 2.02 .. 2.2
    lo, hi = plots.curve_ylim(targets, [2.1, 9.0, math.inf, 1.9])
    assert lo == pytest.approx(1.9 * 0.98) and hi == pytest.approx(2.2 * 1.25)
    shown, clipped = plots.clip_to_ylim([2.1, 9.0, math.inf], (lo, hi))
    assert clipped.tolist() == [False, True, True] and shown[1] == hi


def test_the_performance_profile_figure_has_a_panel_per_level(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    from scalable_softmax.repro.race import plots

    rows = pd.DataFrame([{"workload": w, "family": f, "method": m, "level": lv, "seed": 0,
                          "seconds_to_target": t}
                         for lv in (0.01, 0.05)
                         for w, f, m, t in [("a", "double-sum", "umax", 1.0),
                                            ("a", "full-softmax", "torch-sgd", 2.0),
                                            ("b", "double-sum", "umax", None),
                                            ("b", "full-softmax", "torch-sgd", 3.0)]])
    for by in ("family", "method"):
        fig = plots.profile_figure(rows, by=by, taus=[1, 2, 4])
        assert len(fig.axes) == 2
        fig.savefig(tmp_path / f"{by}.png")
    assert len(fig.axes[0].get_lines()) == 2
