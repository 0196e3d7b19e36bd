"""The race's targets (repro.race.targets): the reference runs train on the rows the
validation split leaves and are scored on its validation rows; the table marks each
workload's lowest reference; the file round-trips and a missing one says what to run."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import racelib
from scalable_softmax.repro.race import jobs, problems, split, targets


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    rng = np.random.default_rng(0)
    N, D, K = 300, 6, 4
    W = rng.standard_normal((K, D))
    X = rng.standard_normal((N, D))
    y = np.argmax(X @ W.T + rng.gumbel(size=(N, K)), axis=1)
    Xt = rng.standard_normal((50, D))
    yt = np.argmax(Xt @ W.T, axis=1)
    path = tmp_path_factory.mktemp("race") / "toy.npz"
    problems.save_problem(path, X, y, Xt, yt, K)
    return str(path), X, y


def test_a_race_job_trains_on_the_split_and_evaluates_only_validation_rows(problem):
    path, X, y = problem
    job = jobs.Job(path, "softmax-sgd", 1.0, 5.0, split="race", holdout=0.2,
                    split_seed=3, eval_rows=None, max_epochs=2, threads=1,
                    checkpoints=[1e-9], options={"batch_size": 10})
    Xf, yf, K, sets = problems._make_problem(job)
    fit, val = split.validation_split(300, 0.2, 3)
    assert set(sets) == {"val"} and K == 4
    assert np.array_equal(sets["val"][1], y[val]) and np.array_equal(yf, y[fit])
    assert np.allclose(sets["val"][0].toarray(), X[val])
    r = jobs.run_job(job, problem=(Xf, yf, K, sets))
    assert r["status"] == "completed", r["reason"]
    assert all(set(p) >= {"seconds", "val_log_loss"} and "test_log_loss" not in p
               for p in r["points"])
    assert math.isfinite(r["points"][-1]["val_log_loss"])


def test_make_targets_marks_each_workloads_lowest_reference(monkeypatch, tmp_path):
    ws = [{"notebook": "12-peers", "workload": "a", "data": "a", "cap": 1.0},
          {"notebook": "14-crossover", "workload": 1000, "data": "x.npz", "cap": 2.0}]
    losses = {("a", "softmax-sgd"): 2.0, ("a", "torch-sgd"): 1.9, ("a", "exact"): math.nan,
              (1000, "softmax-sgd"): 5.0, (1000, "torch-sgd"): 5.5, (1000, "exact"): 4.9}

    def fake_runs(w, *, methods, factor, **kw):
        assert factor >= targets.MIN_FACTOR
        return [{"notebook": w["notebook"], "workload": w["workload"],
                 "reference_method": m, "lr": 1.0, "config": "", "status": "time cap",
                 "reference_seconds": factor * w["cap"], "cap_seconds": w["cap"],
                 "reference_val_log_loss": losses[(w["workload"], m)],
                 "val_rows": 10, "split_seed": 0} for m in methods]

    monkeypatch.setattr(targets, "workloads", lambda params, workdir: ws)
    monkeypatch.setattr(targets, "reference_runs", fake_runs)
    t = targets.make_targets({"grids": {}, "val_fraction": 0.1, "factor": 5}, tmp_path)
    assert list(t.columns) == targets.COLUMNS
    assert t[t.sets_target].reference_method.tolist() == ["torch-sgd", "exact"]
    path = targets.write_targets(t, tmp_path / "targets.csv")
    back = targets.load_targets(path)
    assert targets.reference_of(back, "12-peers", "a") == 1.9
    assert targets.reference_of(back, "14-crossover", 1000) == 4.9
    with pytest.raises(LookupError, match="no target for 14-crossover workload 30000"):
        targets.reference_of(back, "14-crossover", 30000)


def test_reference_runs_refuse_a_budget_under_five_caps():
    with pytest.raises(ValueError, match="at least 5"):
        targets.reference_runs({"notebook": "12-peers", "workload": "a", "data": "a",
                                "cap": 1.0}, methods=["exact"], grids={}, structures=None,
                               options={}, factor=2.0, holdout=0.1, split_seed=0,
                               eval_rows=None, max_epochs=1, threads=1, memory_cap_gb=1.0)


def test_a_missing_or_short_targets_file_says_what_to_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="make targets"):
        targets.load_targets(tmp_path / "none.csv")
    pd.DataFrame({"workload": ["a"]}).to_csv(tmp_path / "short.csv", index=False)
    with pytest.raises(ValueError, match="lacks the columns"):
        targets.load_targets(tmp_path / "short.csv")


def test_a_race_run_stops_at_its_tightest_target_and_reads_test_only_there(problem,
                                                                           monkeypatch):
    """A race job with targets: the validation checkpoints decide when each level was
    first reached and when the run stops; the sealed test rows are evaluated once per
    level reached, at that checkpoint, and the rows of the targets table follow."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.race import plots, report, run, scoring

    path, X, y = problem
    evaluated = []
    real = problems.sealed_test

    def spy(job):
        s = real(job)
        inner = s._evaluate
        s._evaluate = lambda X, y, m: evaluated.append(1) or inner(X, y, m)
        return s
    monkeypatch.setattr(problems, "sealed_test", spy)
    base = dict(split="race", holdout=0.2, split_seed=0, eval_rows=None, max_epochs=30,
                threads=1, options={"batch_size": 10},
                checkpoints=jobs.checkpoint_times(2.0, 2, 2.0 / 4096))
    # a reachable reference: this softmax model trains to a validation log-loss of
    # 0.77 to 0.81 (log K = 1.39 at the start), so 0.85 and its levels are reached
    targets = scoring.target_levels(0.85)
    res = [dict(jobs.run_job(jobs.Job(path, "softmax-sgd", 1.0, 2.0, seed=s,
                                        targets=targets, report_test=True, **base)),
                workload="toy") for s in (0, 1)]
    for r in res:
        assert r["status"] == "target", r["reason"]
        assert set(r["arrivals"]) == {str(lv) for lv in targets}
        last = r["points"][-1]["seconds"]
        assert max(r["arrivals"].values()) <= last
        assert all(math.isfinite(v) for v in r["test_at_target"].values())
    assert len(evaluated) <= 2 * len(targets)       # once per level reached at most
    rows = run.target_rows(res, targets)
    assert list(rows.columns) == run.TARGET_COLUMNS and len(rows) == 2 * len(targets)
    # the curves: every validation checkpoint of both runs, no test column or number
    curves = run.curve_rows(res)
    assert list(curves.columns) == run.CURVE_COLUMNS
    assert len(curves) == sum(len(r["points"]) for r in res)
    assert curves.val_log_loss.tolist() == [p["val_log_loss"] for r in res
                                            for p in r["points"]]
    tests = [v for r in res for v in r["test_at_target"].values()]
    assert not np.isin(curves.select_dtypes("number").to_numpy(float), tests).any()
    report.check_curves(rows, curves)             # the times read again from the curves
    fig = plots.curves_figure(curves, plots.targets_of(rows))
    lo, hi = fig.axes[0].get_ylim()
    assert lo <= curves.val_log_loss.min() and lo < 0.85 < targets[0.05] < hi
    plt.close(fig)
    assert (rows.family == "full-softmax").all() and rows.seconds_to_target.notna().all()
    v = run.verdict_table(rows)
    assert (v.verdict == "full-softmax").all()      # the only family, every seed


def test_tuning_chooses_the_fastest_to_the_five_percent_target_and_flags_edges():
    from scalable_softmax.repro.race import run

    t = pd.DataFrame({"workload": "w", "method": "umax", "lr": [0.1, 0.3, 1.0, 0.1],
                      "config": ["a", "a", "a", "b"], "options": "{}",
                      "seconds_to_level": [2.0, 1.0, math.nan, 1.0],
                      "val_log_loss": [1.0, 1.1, 0.9, 1.05], "status": "target",
                      "layout": ""})
    c = run.choose(t).iloc[0]
    # 1.0 s: lr 0.3 of "a" and lr 0.1 of "b" tie; "b" ends lower on validation
    assert (c.lr, c.config, c.at_grid_edge, c.candidates) == (0.1, "b", "", 4)
    same = t.assign(val_log_loss=[1.0, 1.1, 0.9, 1.1])         # a full tie: "a" first
    assert run.choose(same).iloc[0][["lr", "config"]].tolist() == [0.3, "a"]
    t2 = t.assign(seconds_to_level=[math.nan, math.nan, math.nan, math.nan])
    c2 = run.choose(t2).iloc[0]                     # nobody got there: lowest val loss
    assert (c2.lr, c2.config, c2.at_grid_edge) == (1.0, "a", "highest")
    with pytest.raises(ValueError, match="same number of candidates"):
        run.check_search_spaces(["umax", "is"], {"umax": [1, 2], "is": [1]}, None)


def test_race_notebook_races_every_workload_to_its_own_targets(monkeypatch, tmp_path):
    """The end-to-end driver: each workload's targets come from its row of the targets
    table, tuning and seeds get them, and the rows and verdicts are assembled; a targets
    table made on another split is refused."""
    from scalable_softmax.repro.race import cli, journal, run

    table = pd.DataFrame({"notebook": "12-peers", "workload": ["a", "b"],
                          "reference_method": "softmax-sgd", "lr": 1.0, "config": "",
                          "status": "time cap", "reference_seconds": 5.0,
                          "cap_seconds": 1.0, "reference_val_log_loss": [2.0, 3.0],
                          "sets_target": True, "val_rows": 10, "split_seed": 0})
    seen = {}

    def fake_tune(workload, data, methods, *, targets, **kw):
        seen[workload] = targets
        return pd.DataFrame({"workload": workload, "method": "umax", "lr": [0.1, 1.0],
                             "config": "", "options": "{}",
                             "seconds_to_level": [0.5, math.nan],
                             "val_log_loss": [1.0, 2.0], "status": "target",
                             "layout": ""})

    def fake_seeds(workload, data, methods, chosen, *, seeds, targets, **kw):
        assert chosen.lr.tolist() == [0.1]
        return racelib.seeded_results(workload, methods, seeds, targets, edge="lowest",
                                      extra_point={"val_error": 0.5})
    monkeypatch.setattr(run, "tune", fake_tune)
    monkeypatch.setattr(run, "run_seeds", fake_seeds)
    # the fake workloads have no data files (the race's journal keys on their content)
    monkeypatch.setattr(journal, "_data_fingerprint", lambda data: {"name": str(data)})
    params = {"peers": {"datasets": ["a", "b"], "caps": {"a": 1, "b": 1},
                        "methods": ["umax", "torch-sgd"]},
              "grids": {}, "val_fraction": 0.1, "split_seed": 0, "val_rows": 10,
              "max_epochs": 1, "threads": 1, "memory_cap_gb": 1.0,
              "first_checkpoint": 0.1, "seeds": [0, 1, 2]}
    rows, verdicts, tuning, curves = cli.race_notebook("12-peers", params, table, tmp_path,
                                                       say=lambda s: None)
    assert seen["a"][0.05] == pytest.approx(2.1) and seen["b"][0.01] == pytest.approx(3.03)
    assert len(rows) == 2 * 2 * 4 * 3 and set(rows.family) == {"double-sum",
                                                               "full-softmax"}
    assert set(verdicts.verdict) == {"tie"}        # the same times in both families
    # one checkpoint per seeded run, at the workload's own tightest target
    assert len(curves) == 2 * 2 * 3 and list(curves.columns) == run.CURVE_COLUMNS
    assert curves.groupby("workload").val_log_loss.first().to_dict() == \
        pytest.approx({"a": 2.02, "b": 3.03})
    written = cli.write_tables("12-peers", rows, verdicts, tuning, tmp_path / "out")
    assert [p.name for p in written] == ["12-peers-targets.csv",
                                         "12-peers-targets-verdicts.csv",
                                         "12-peers-targets-tuning.csv"]
    written = cli.write_tables("12-peers", rows, verdicts, tuning, tmp_path / "out",
                               curves=curves)
    assert written[-1].name == "12-peers-targets-curves.csv"
    assert len(pd.read_csv(written[-1])) == len(curves)
    with pytest.raises(ValueError, match="split_seed"):
        cli._check_split(table.assign(split_seed=1), params, "targets.csv")


def test_tuning_runs_never_touch_the_test_rows(problem, monkeypatch):
    """A tuning job (targets, no report_test) and a reference job (no targets) run
    without the test rows ever being loaded or sealed."""
    from scalable_softmax.repro.race import scoring

    path, _, _ = problem

    def refuse(job):
        raise AssertionError("the test rows were loaded")
    monkeypatch.setattr(problems, "sealed_test", refuse)
    base = dict(split="race", holdout=0.2, split_seed=0, eval_rows=None, max_epochs=3,
                threads=1, options={"batch_size": 10}, checkpoints=[1e-9])
    tune = jobs.run_job(jobs.Job(path, "softmax-sgd", 1.0, 2.0,
                                   targets={0.05: scoring.target_levels(0.85)[0.05]},
                                   **base))
    ref = jobs.run_job(jobs.Job(path, "softmax-sgd", 1.0, 2.0, **base))
    for r in (tune, ref):
        assert r["status"] in ("completed", "target"), r["reason"]
        assert "test_at_target" not in r
    with pytest.raises(ValueError, match="report_test needs targets"):
        jobs.Job(path, "softmax-sgd", 1.0, 2.0, report_test=True, **base)
    with pytest.raises(ValueError, match="needs split='race'"):
        jobs.Job(path, "softmax-sgd", 1.0, 2.0, targets={0.05: 1.0})
