"""The bookkeeping of benchmarks/bench_peers_configs.py's --oracle search (issue 33,
item 2): which score is the lowest, which counts as within the cap, when a run stops and
why. The scores are scripted so that every expected number is known in advance; the
trainer is the library's real ``implicit-batch`` on a small problem."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

import benchlib


@pytest.fixture(scope="module")
def bench():
    return benchlib.load("bench_peers_configs")


def _problem(N=120, D=10, K=6, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.5, format="csr", random_state=seed)
    X.sort_indices()
    y = rng.integers(0, K, N).astype(np.int64)
    y[:K] = np.arange(K)
    return X, y, K


def _scripted(scores):
    it = iter(scores)
    return lambda W: next(it)


def _run(bench, scores, **kw):
    X, y, K = _problem()
    tr, order, _ = bench._trainer(X, y, K, 4, 3)
    clock_values = itertools.count(0.0, 0.5)       # start/end of each part: +1 per part
    args = dict(best=1.0, cap=3.0, epochs=8, evals=1, patience=2, seed=0,
                clock=lambda: next(clock_values))
    args.update(kw)
    return bench.oracle_run(tr, order, X.shape[0], 1.0, 0.9, _scripted(scores), **args)


def test_lowest_score_its_epoch_and_the_first_within_one_percent(bench):
    # one evaluation per epoch; the scores fall to 1.005 at epoch 4, then rise
    r = _run(bench, [1.5, 1.2, 1.02, 1.005, 1.03, 1.04, 1.05, 1.06], patience=10)
    assert r["status"] == "epochs" and r["epochs_run"] == 8
    assert r["best_ratio"] == 1.005 and r["best_epoch"] == 4.0
    assert r["epoch_1pct"] == 4.0 and r["cpu_to_1pct"] == pytest.approx(2.0)
    # the cap (3 s at 0.5 s per part) admits the first 6 scores only
    assert r["best_ratio_in_cap"] == 1.005


def test_within_the_cap_counts_only_the_parts_trained_before_it(bench):
    scores = [1.5, 1.4, 1.3, 1.2, 1.1, 1.0, 0.99, 0.98]
    r = _run(bench, scores, patience=10, cap=1.5)  # parts end at 0.5, 1.0, 1.5, 2.0, ...
    assert r["best_ratio"] == 0.98 and r["best_epoch"] == 8.0
    assert r["best_ratio_in_cap"] == 1.3
    assert r["epoch_1pct"] == 6.0


def test_stops_patience_epochs_after_its_lowest_score(bench):
    r = _run(bench, [1.5, 1.2, 1.3, 1.4, 1.5, 1.6], patience=2)
    assert r["status"] == "no gain for 2 epochs" and r["epochs_run"] == 4
    assert r["best_ratio"] == 1.2 and r["epoch_1pct"] is None and r["cpu_to_1pct"] is None


def test_stops_past_the_cpu_factor_at_the_end_of_that_epoch(bench):
    # two parts per epoch of 0.5 s each: 1 s per epoch; cap 1 s x factor 2 -> stops
    # after epoch 3 (3 s > 2 s), with 6 scores taken
    scores = [2.0 - 0.1 * k for k in range(16)]
    r = _run(bench, scores, evals=2, cap=1.0, cpu_factor=2.0, patience=10)
    assert r["status"] == "past 2 x the cap" and r["epochs_run"] == 3
    assert r["best_ratio"] == pytest.approx(1.5) and r["best_epoch"] == 3.0
    assert r["best_ratio_in_cap"] == pytest.approx(1.9)   # the first two parts
    assert r["cpu_per_epoch"] == pytest.approx(1.0)


def test_a_non_finite_score_ends_the_run_as_diverged_and_is_not_the_lowest(bench):
    r = _run(bench, [1.5, 1.2, math.inf, 0.5], patience=10)
    assert r["status"] == "diverged" and r["epochs_run"] == 3
    assert r["best_ratio"] == 1.2


def test_scores_the_trainers_real_weights_after_each_part(bench):
    # with the real evaluation, the lowest score is one the weights really had: the
    # last part's score is the log-loss of the final weights
    from scalable_softmax.evaluate import evaluate
    X, y, K = _problem()
    tr, order, _ = bench._trainer(X, y, K, 4, 3)
    seen = []

    def score(W):
        seen.append(float(evaluate(X, y, W).log_loss))
        return seen[-1]

    r = bench.oracle_run(tr, order, X.shape[0], 1.0, 0.9, score, best=1.0, cap=100.0,
                         epochs=3, evals=2, patience=10, seed=0)
    assert len(seen) == 6 and r["epochs_run"] == 3
    assert r["best_ratio"] == min(seen)
    assert seen[-1] == float(evaluate(X, y, tr.weights()).log_loss)
    assert len(set(seen)) == 6              # every part moved the weights
