"""The race's learning curves (issue 56 item 8): the curves table holds every seeded
run's validation checkpoints and never a test number; the figure's y-limits are set by
the targets, and an outlier (a diverged run's 1e3) is drawn at the panel's edge instead
of setting the scale."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from scalable_softmax.repro.race import run, scoring


def _result(workload, method, seed, seconds, values, *, test=7.77, status="time cap",
            epochs=True, **extra):
    points = [dict(seconds=s, val_log_loss=v, val_error=0.5, reached=[],
                   **({"epoch": s / 2} if epochs else {"iteration": i}))
              for i, (s, v) in enumerate(zip(seconds, values))]
    return {"workload": workload, "job": {"method": method, "seed": seed, "lr": 0.1,
                                          "threads": 1},
            "status": status, "points": points, "info": {"threads_used": 1},
            "arrivals": {"0.05": seconds[-1]} if seconds else {},
            "test_at_target": {"0.05": test} if seconds else {},
            "chosen": {"config": "n=1 m=1", "at_grid_edge": "", "candidates": 4},
            **extra}


def test_curve_rows_are_the_validation_checkpoints_and_never_a_test_number():
    res = [_result("a", "umax", s, [0.1, 0.2, 0.4], [1.5, 1.2, 1.0 + s]) for s in (0, 1)]
    res.append(_result("a", "exact", 0, [0.3, 0.9], [1.1, math.inf], status="diverged",
                       epochs=False))
    res.append(_result("a", "torch-sgd", 0, [], [], status="memory"))  # no checkpoint
    c = run.curve_rows(res)
    assert list(c.columns) == run.CURVE_COLUMNS
    assert not [col for col in c.columns if "test" in col]
    assert len(c) == 3 + 3 + 2                    # the failed run has no row
    assert not np.isclose(c.select_dtypes("number").to_numpy(float), 7.77).any()
    u1 = c[(c.method == "umax") & (c.seed == 1)]
    assert u1.val_log_loss.tolist() == [1.5, 1.2, 2.0]
    assert u1.checkpoint.tolist() == [0, 1, 2] and u1.epoch.tolist() == [0.05, 0.1, 0.2]
    assert (u1.family == "double-sum").all() and (u1.config == "n=1 m=1").all()
    ex = c[c.method == "exact"]
    assert ex.epoch.isna().all() and math.isinf(ex.val_log_loss.iloc[-1])
    assert (ex.status == "diverged").all() and (ex.family == "full-batch").all()


@pytest.mark.parametrize("key", ["test_log_loss", "train_log_loss", "test_error"])
def test_curve_rows_refuse_a_run_that_evaluated_other_rows_at_its_checkpoints(key):
    r = _result("a", "umax", 0, [0.1, 0.2], [1.5, 1.2])
    r["points"][1][key] = 0.9
    with pytest.raises(ValueError, match=f"'a' umax seed 0 checkpoint 1 has \\['{key}'\\]"):
        run.curve_rows([r])
    r["points"][1] = {"seconds": 0.2, "test_log_loss": 0.9}
    with pytest.raises(ValueError, match="validation rows"):
        run.curve_rows([r])


def test_edge_points_skip_the_start_above_and_mark_what_comes_after():
    from scalable_softmax.repro.race.plots import _edge_points

    assert _edge_points([True, True, False, True, False, True]).tolist() == \
        [False, False, False, True, False, True]
    assert _edge_points([True, True]).tolist() == [False, True]   # never inside
    assert _edge_points([False, False]).tolist() == [False, False]
    assert _edge_points([]).tolist() == []


def _panel(ref=2.0):
    targets = scoring.target_levels(ref)
    # umax comes down into the panel then diverges (1e3, then a non-finite point);
    # torch-sgd comes down and stays
    res = [_result("a", "umax", 0, [0.01, 0.1, 1.0, 2.0, 3.0], [9.0, 2.3, 2.05, 1e3,
                                                                 math.inf]),
           _result("a", "torch-sgd", 0, [0.01, 0.1, 1.0], [9.0, 2.5, 2.03])]
    rows = run.target_rows(res, targets)
    return run.curve_rows(res), rows, targets


def test_the_curves_figure_is_scaled_by_the_targets_and_marks_the_outlier_at_the_edge(
        tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.race import plots

    curves, rows, targets = _panel()
    tg = plots.targets_of(rows)
    assert tg == {"a": pytest.approx(targets)}
    fig = plots.curves_figure(curves, tg)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert lo < 2.0 < targets[0.01] < targets[0.05] < hi < 3.0   # 1e3 does not set it
    assert ax.get_xscale() == "log"
    hollow = [ln for ln in ax.get_lines() if ln.get_markerfacecolor() == "none"]
    edge = np.concatenate([ln.get_xydata() for ln in hollow])
    # the 1e3 and the diverged point at the top edge; not the start far above (9.0)
    assert sorted(edge[:, 0].tolist()) == [2.0, 3.0] and np.allclose(edge[:, 1], hi)
    lines = {round(float(ln.get_ydata()[0]), 9) for ln in ax.get_lines()
             if len(ln.get_ydata()) == 2 and ln.get_ydata()[0] == ln.get_ydata()[1]}
    assert {round(v, 9) for v in (2.0, targets[0.01], targets[0.05])} <= lines
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[:2] == ["U-max", "torch SGD (full softmax)"]     # families grouped
    assert {"reference", "target +1%", "target +5%"} <= set(labels)
    fig.savefig(tmp_path / "curves.png")
    plt.close(fig)
    with pytest.raises(ValueError, match="no target for levels"):
        plots.curves_figure(curves, {"a": {0.01: 2.02}})


def test_every_race_method_is_drawn_in_a_colour_a_reader_tells_apart():
    """Distinct colours (CIE76 30 or more apart, and from the target lines), and each
    family its own line style."""
    from itertools import combinations

    from scalable_softmax.repro.machinery import style
    from scalable_softmax.repro.race import plots
    from scalable_softmax.repro.race.methods import METHODS

    race = ["implicit-batch", "umax", "is", "softmax-sgd", "exact", "sklearn-lbfgs",
            "sklearn-saga", "torch-sgd", "torch-adam", "torch-sampled"]
    assert set(race) <= set(METHODS)
    colour = {m: plots._curve_style(m)[2] for m in race}
    close = [(a, b) for a, b in combinations(race, 2)
             if style.color_distance(colour[a], colour[b]) < 30]
    assert not close, close
    assert min(style.color_distance(plots.TARGET_COLOR, c) for c in colour.values()) >= 30
    by_family = {METHODS[m].family: plots._curve_style(m)[0] for m in race}
    assert len(set(by_family.values())) == len(by_family) == 4


def test_race_tables_keep_their_first_three_values():
    """Callers that read ``rows, verdicts, tuning`` by position or name still can."""
    from scalable_softmax.repro.race import cli

    t = cli.RaceTables(*(pd.DataFrame({"x": [i]}) for i in range(4)))
    rows, verdicts, tuning, curves = t
    assert (rows.x[0], verdicts.x[0], tuning.x[0], curves.x[0]) == (0, 1, 2, 3)
    assert t.curves is curves and t[:3] == (rows, verdicts, tuning)


def test_check_curves_reads_the_times_to_each_level_again_from_the_curves():
    from scalable_softmax.repro.race import report

    targets = scoring.target_levels(2.0)                   # 2.02, 2.04, 2.1, 2.2
    res = []
    for s, vals in ((0, [3.0, 2.15, 2.03, 2.01]), (1, [3.0, 2.5, 2.3, 2.25])):
        r = _result("a", "umax", s, [0.1, 0.2, 0.4, 0.8], vals)
        w = scoring.TargetWatch(targets, 10.0)
        for p in r["points"]:
            w.observe(p["seconds"], p["val_log_loss"])
        r["arrivals"] = {str(lv): a.seconds for lv, a in w.arrivals.items()}
        res.append(r)
    res.append(_result("a", "torch-sgd", 0, [], [], status="memory"))
    rows, curves = run.target_rows(res, targets), run.curve_rows(res)
    report.check_curves(rows, curves)
    assert rows[rows.seed == 1].seconds_to_target.isna().all()
    moved = rows.copy()
    moved.loc[(moved.seed == 0) & (moved.level == 0.05), "seconds_to_target"] = 0.4
    with pytest.raises(AssertionError, match="0.05"):
        report.check_curves(moved, curves)
    with pytest.raises(AssertionError, match="lack"):
        report.check_curves(rows[rows.seed == 0], curves)
    with pytest.raises(AssertionError):
        report.check_curves(rows, curves.assign(test_log_loss=1.0))


def test_the_race_cli_writes_the_curves_table_and_figure(monkeypatch, tmp_path):
    """``python -m scalable_softmax.repro.race.cli`` (the race run end to end; here
    with the race replaced by synthetic tables) writes the curves beside the others."""
    import matplotlib
    matplotlib.use("Agg")

    from scalable_softmax.repro.machinery import runner
    from scalable_softmax.repro.race import cli, targets

    curves, rows, _ = _panel()
    fake = cli.RaceTables(rows, run.verdict_table(rows), pd.DataFrame({"x": [1]}), curves)
    (tmp_path / "targets.csv").write_text("")       # present: the smoke run makes none
    params = {"targets": str(tmp_path / "targets.csv"), "split_seed": 0, "val_rows": 10}
    monkeypatch.setattr(runner, "load_params", lambda name, profile: params)
    monkeypatch.setattr(targets, "make_targets", None)     # never called
    monkeypatch.setattr(targets, "load_targets",
                        lambda path: pd.DataFrame({"split_seed": [0], "val_rows": [10]}))
    monkeypatch.setattr(cli, "race_notebook", lambda *a, **kw: fake)
    assert cli.main(["12-peers", "--profile", "smoke", "--out", str(tmp_path)]) == 0
    got = pd.read_csv(tmp_path / "12-peers-targets-curves.csv")
    assert list(got.columns) == run.CURVE_COLUMNS and len(got) == len(curves)
    assert (tmp_path / "12-peers-targets-curves.png").stat().st_size > 0
