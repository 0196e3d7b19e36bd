"""The bookkeeping of benchmarks/bench_race_schedule.py (issue 56): the race's rule
picking one rate per workload, method and decay; the checkpoints of a run; a run's row
read from ``fit``'s validation history (the levels' first checkpoints, the lowest ratio
within the cap and overall), on a small problem with the library's real trainers."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

import benchlib


@pytest.fixture(scope="module")
def bench():
    return benchlib.load("bench_race_schedule")


def _problem(N=150, D=10, K=5, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.5, format="csr", random_state=seed)
    X = sp.csr_matrix(X.multiply(1.0 / np.maximum(sp.linalg.norm(X, axis=1), 1e-12)[:, None]))
    y = np.argmax(X @ rng.normal(size=(K, D)).T * 3 + rng.gumbel(size=(N, K)), axis=1)
    y[:K] = np.arange(K)
    y = y.astype(np.int64)
    return X[:120], y[:120], K, (X[120:], y[120:])


def test_checkpoints_run_from_the_start_to_the_last_epoch(bench):
    got = bench._checkpoints(500, 20)
    assert got[0] == 0 and got[-1] == 500 and got == sorted(set(got))
    assert 15 <= len(got) <= 22 and got[1] == 1
    assert bench._checkpoints(1, 60) == [0, 1]


def _row(lr, s5, in_cap, cap=4.0):
    return {"lr": lr, "cap": cap, "seconds_to_5pct": s5, "best_ratio_in_cap": in_cap}


def test_the_race_rule_picks_the_first_to_five_percent_within_the_cap(bench):
    rows = [_row(0.1, None, 1.2), _row(0.3, 2.0, 1.01), _row(1.0, 0.5, 1.04),
            _row(3.0, 0.2 + 5.0, 1.03)]            # past the cap: not first
    assert bench._chosen(rows)["lr"] == 1.0
    # nobody at 5% within the cap: the lowest log-loss within the cap
    rows = [_row(0.1, None, 1.2), _row(0.3, None, 1.08), _row(1.0, 9.0, 1.09)]
    assert bench._chosen(rows)["lr"] == 0.3
    rows = [_row(0.1, None, math.nan), _row(0.3, None, math.nan)]
    assert bench._chosen(rows)["lr"] == 0.1


def test_a_runs_row_is_read_from_its_validation_history(bench):
    problem = _problem()
    ref = 0.5
    a = SimpleNamespace(budget=1.0, max_epochs=12, evals=6)
    row = bench.run_one(problem, "implicit", 1.0, 0.9, 30.0, ref, a)
    assert row["epochs"] == 12 and not row["diverged"]
    # the same run, by fit itself, at every epoch: the row's numbers are its numbers
    res = bench._fit(problem, "implicit", 1.0, 0.9, 12, list(range(13)))
    h = res.history
    at = h[h.epoch.isin(bench._checkpoints(12, 6))]
    ll = at.val_log_loss.to_numpy(float)
    assert row["best_ratio"] == pytest.approx(ll.min() / ref, rel=1e-12)
    assert row["last_ratio"] == pytest.approx(ll[-1] / ref, rel=1e-12)
    for lev in bench.LEVELS:
        hit = np.flatnonzero(ll <= ref * (1 + lev))
        want = int(at.epoch.iloc[hit[0]]) if hit.size else None
        assert row[f"epoch_to_{int(lev * 100)}pct"] == want
    # a cap no epoch fits in: within it only the start, W = 0, log-loss log K
    short = bench.run_one(problem, "implicit", 1.0, 0.9, 1e-9, ref, a)
    assert short["best_ratio_in_cap"] == pytest.approx(math.log(problem[2]) / ref,
                                                       rel=1e-12)
    assert short["best_ratio"] < short["best_ratio_in_cap"]
    # another decay trains another schedule
    other = bench.run_one(problem, "implicit", 1.0, 0.5, 30.0, ref, a)
    assert other["last_ratio"] != row["last_ratio"]
