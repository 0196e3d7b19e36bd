"""repro.race.report: what notebooks 12 and 14 and the pages say from the race's tables
(the crossover K per level, the level order of a run, the verdict sentences, the rows of
skipped methods)."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from scalable_softmax.repro.race import report, run


def _verdicts(per_k):
    return pd.DataFrame([{"workload": K, "level": lv, "verdict": v}
                         for K, vs in per_k.items() for lv, v in vs.items()])


def test_crossover_k_needs_every_larger_k():
    v = _verdicts({1000: {0.01: "full-softmax", 0.1: "double-sum"},
                   3000: {0.01: "double-sum", 0.1: "tie"},
                   10000: {0.01: "double-sum", 0.1: "double-sum"}})
    c = report.crossover_k(v).set_index("level")
    assert c.loc[0.01, "crossover_K"] == 3000
    assert c.loc[0.1, "crossover_K"] == 10000          # the tie at 3,000 breaks the run
    assert c.loc[0.1, "first_at"] == "1000,10000"
    none = report.crossover_k(_verdicts({1000: {0.05: "double-sum"},
                                         2000: {0.05: "none"}}))
    assert math.isnan(none.crossover_K.iloc[0])


def _rows(seconds):
    """One method, one seed, the levels 1/2/5/10% with the given seconds."""
    return pd.DataFrame({"workload": "a", "method": "m", "seed": 0,
                         "level": [0.01, 0.02, 0.05, 0.1], "seconds_to_target": seconds})


def test_check_levels_refuses_a_tight_level_before_a_loose_one():
    report.check_levels(_rows([3.0, 2.0, 1.0, 0.5]))
    report.check_levels(_rows([math.nan, math.nan, 1.0, 0.5]))
    with pytest.raises(AssertionError):
        report.check_levels(_rows([1.0, 2.0, 2.0, 0.5]))
    with pytest.raises(AssertionError):          # +1% reached but +5% not
        report.check_levels(_rows([3.0, 2.0, math.nan, 0.5]))


def test_page_verdict_and_pair_from_rows():
    rows = pd.DataFrame([
        {"workload": "a", "family": f, "method": m, "level": 0.05, "seed": s,
         "seconds_to_target": t, "threads": 2, "status": "target"}
        for f, m, ts in [("full-softmax", "softmax-sgd", [1.0, 2.0, 3.0]),
                         ("full-softmax", "torch-sgd", [4.0, 5.0, math.nan]),
                         ("double-sum", "umax", [6.0, 7.0, 8.0])]
        for s, t in enumerate(ts)])
    verdicts = run.verdict_table(rows)
    assert verdicts.verdict.tolist() == ["full-softmax"]
    assert report.page_verdict(rows, verdicts, "a", 0.05) == \
        "full-softmax (2.00 s, median of the seeds)"
    assert report.page_verdict(rows, verdicts, "a", 0.05, short=True) == "full-softmax"
    assert report.page_pair(rows, "a", 0.05) == \
        "ours 2.00 s against PyTorch's 5.00 s (medians of the seeds)"
    assert report.page_threads(rows) == "every run used its 2 threads"
    with pytest.raises(LookupError, match="no verdict"):
        report.page_verdict(rows, verdicts, "b", 0.05)
    assert report.verdict_lines(verdicts, {"a": "A"}) == ["A: +5%: full-softmax"]
    assert report.level_summary(verdicts) == [
        "target +5%: full-softmax first on 1 of 1 workloads"]


def test_skipped_rows_fill_every_level_and_seed():
    empty = pd.DataFrame(columns=run.TARGET_COLUMNS)
    out = report.skipped_rows(empty, ["a", "b"], {"torch-sgd": "no torch"}, [0, 1])
    assert len(out) == 2 * 4 * 2 and set(out.status) == {"skipped"}
    assert set(out.family) == {"full-softmax"} and list(out.columns) == run.TARGET_COLUMNS
    assert report.skipped_rows(empty, ["a"], {}, [0]) is empty


def test_target_rows_report_each_runs_own_peak_memory():
    gb = 2 ** 30
    base = {"job": {"method": "umax", "seed": 0, "lr": 0.1, "threads": 1},
            "workload": "a", "status": "time cap", "arrivals": {}, "test_at_target": {},
            "info": {"threads_used": 1}}
    reset = dict(base, peak_rss_bytes=3 * gb, peak_rss_reset=True, rss_at_reset_bytes=gb)
    stale = dict(base, peak_rss_bytes=3 * gb, peak_rss_reset=False)
    rows = run.target_rows([reset, stale], {0.01: 1.0})
    assert rows.peak_rss_gb.iloc[0] == 3.0 and rows.start_rss_gb.iloc[0] == 1.0
    # without a reset the process's peak would hold what it inherited: not reported
    assert math.isnan(rows.peak_rss_gb.iloc[1]) and math.isnan(rows.start_rss_gb.iloc[1])


def test_peak_after_a_reset_is_what_ran_since():
    import numpy as np

    from scalable_softmax.repro.fagan import timing

    if not timing.reset_peak_rss():
        pytest.skip("this system cannot reset the peak resident set (/proc/self/clear_refs)")
    start = timing.rss_bytes()
    block = np.ones(64 * 2 ** 20 // 8)             # 64 MiB, touched
    assert timing.peak_rss_bytes() - start >= 48 * 2 ** 20
    del block
    assert timing.reset_peak_rss()
    # after the reset the peak is the resident set now, not the 64 MiB freed before
    assert timing.peak_rss_bytes() - timing.rss_bytes() < 16 * 2 ** 20


@pytest.mark.parametrize("notebook", ["12-peers", "14-crossover"])
@pytest.mark.parametrize("profile", ["full", "smoke"])
def test_notebook_parameters_are_the_race_cli_s(notebook, profile):
    """params/12-peers.yaml and 14-crossover.yaml hold params/race.yaml's values (the
    notebook and python -m scalable_softmax.repro.race.cli run one race)."""
    from scalable_softmax.repro.machinery import runner
    from scalable_softmax.repro.race import cli

    race = runner.load_params("race", profile)
    nb = runner.load_params(notebook, profile)
    for key, value in race[cli.NOTEBOOKS[notebook]].items():
        assert nb[key] == value, (key, nb[key], value)
    # the smoke targets: each notebook makes its own workloads' first (build/targets-smoke-NN)
    common = set(race) - {"peers", "crossover"} - ({"targets"} if profile == "smoke" else set())
    for key in common:
        if key == "structures" and not race[key]:
            assert not nb[key]
            continue
        assert nb[key] == race[key], (key, nb[key], race[key])


def _limit_rows(edges, statuses, method="implicit-batch"):
    """Target rows of one method: one workload per entry of ``edges`` (its
    ``at_grid_edge``), two seeds each with ``statuses`` (per workload) and two levels."""
    out = []
    for w, (edge, status) in enumerate(zip(edges, statuses)):
        for seed in (0, 1):
            for level in (0.01, 0.05):
                out.append({"workload": f"w{w}", "method": method, "seed": seed,
                            "level": level, "at_grid_edge": edge, "status": status,
                            "reason": "50 epochs" if status == "completed" else "cap"})
    return pd.DataFrame(out)


def test_limits_count_grid_ends_and_schedules_from_the_rows():
    rows = _limit_rows(["lowest", None, "highest"], ["completed", "time cap", "completed"])
    assert report.edge_counts(rows, "implicit-batch") == (1, 1, 3)
    assert report.schedule_counts(rows, "implicit-batch") == (4, 6)
    text = report.limits_text(rows, None, {"implicit-batch": "Implicit SGD"})
    assert "Implicit SGD lowest on 1 and highest on 1 of 3 data sets" in text
    assert "(the rate times 0.9 per epoch, 50 epochs) before the cap: Implicit SGD 4 of 6" in text
    assert "bounded by the grid" in text and "stretched to the budget" in text
    short = report.limits_short(rows, None)
    assert short.startswith("Implicit SGD's chosen rate sits at an end of its grid on 2 of 3")
    assert "4 of 6 double-sum runs" in short


def test_limits_say_no_bound_when_the_grid_brackets_and_the_cap_binds():
    rows = _limit_rows(["", ""], ["time cap", "target"])
    text = report.limits_text(None, rows, {"implicit-batch": "Implicit SGD"})
    assert "lowest on 0 and highest on 0 of 2 values of K" in text
    assert "Implicit SGD 0 of 4" in text
    assert "bounded by the grid" not in text and "stretched" not in text
    assert report.limits_text(None, None, {}) == "not raced in this record"
