"""fit's checkpoint callback and piece chooser (``fit(..., checkpoint=, pieces=)``):
without them fit is the plain epoch loop bit for bit; whole-epoch pieces and a callback
that never stops change nothing; a callback stops the run where it says; the pieces of
an epoch run with the epoch's seed at 0 and ``piece_seed`` after; the clock excludes
the callback's time."""
from __future__ import annotations

import importlib
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scalable_softmax.fit import Checkpoint, DivergenceWarning, fit, make_order, piece_seed
from scalable_softmax.methods import get_trainer_class

FIT = importlib.import_module("scalable_softmax.fit")     # the module (the package's fit
                                                          # is the function)


def _data(N=150, D=6, K=4, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D)) / np.sqrt(D)
    y = np.argmax(X @ rng.standard_normal((K, D)).T * 3 + rng.gumbel(size=(N, K)), axis=1)
    return sp.csr_matrix(X), y.astype(np.int64), K


def _reference(X, y, K, method, lr, epochs, cuts, seed=0):
    """The plain loop, written out: one default_rng(seed) draws each epoch's shuffled
    order and then its kernel seed; epoch e at lr * 0.9**(e-1); ``cuts(e)`` the piece
    starts of epoch e (after 0), the piece at 0 with the epoch's seed, a later one with
    piece_seed(seed, start)."""
    tr = get_trainer_class(method)(X, y, K, mu=0.0, batch_size=None, n_sampled=None)
    tr.init_params("zero")
    rng, N = np.random.default_rng(seed), X.shape[0]
    for e in range(1, epochs + 1):
        idx = make_order(rng, N, "shuffle")
        s = int(rng.integers(0, 2 ** 63 - 1))
        starts = [0] + list(cuts(e)) + [N]
        for a, b in zip(starts, starts[1:]):
            tr.run_epoch(idx[a:b], lr * 0.9 ** (e - 1), s if a == 0 else piece_seed(s, a))
    return tr.weights()


@pytest.mark.parametrize("method", ["umax", "implicit", "softmax-sgd"])
def test_fit_without_a_checkpoint_is_the_plain_epoch_loop(method):
    X, y, K = _data()
    res = fit(X, y, method, lr=0.3, epochs=3, seed=5, progress=False, eval_epochs=[])
    np.testing.assert_array_equal(res.W, _reference(X, y, K, method, 0.3, 3, lambda e: [],
                                                    seed=5))
    assert "stopped_at" not in res.params and list(res.history.epoch) == [0, 1, 2, 3]


@pytest.mark.parametrize("pieces", [None, 150, 10 ** 6])
def test_a_checkpoint_that_never_stops_on_whole_epochs_changes_nothing(pieces):
    X, y, K = _data()
    kw = dict(lr=0.3, epochs=3, seed=2, progress=False, eval_epochs=[0, 2, 3])
    plain = fit(X, y, "umax", **kw)
    seen = []
    res = fit(X, y, "umax", checkpoint=lambda p: seen.append(p) and False,
              pieces=pieces, **kw)
    np.testing.assert_array_equal(res.W, plain.W)
    np.testing.assert_array_equal(res.u, plain.u)
    pd.testing.assert_frame_equal(res.history.drop(columns="seconds"),
                                  plain.history.drop(columns="seconds"), check_exact=True)
    pd.testing.assert_frame_equal(res.extra, plain.extra, check_exact=True)
    assert res.params == plain.params
    # called once per epoch, at its end (whole epochs: no piece ends inside one)
    assert [(p.epoch, p.points, p.epoch_end) for p in seen] == \
        [(1, 150, True), (2, 150, True), (3, 150, True)]
    assert [p.seconds for p in seen] == list(res.history.seconds[1:])


def test_pieces_run_with_the_epochs_seed_at_zero_and_piece_seed_after():
    X, y, K = _data()
    res = fit(X, y, "umax", lr=0.3, epochs=2, seed=4, progress=False, pieces=40,
              eval_epochs=[])
    ref = _reference(X, y, K, "umax", 0.3, 2, lambda e: [40, 80, 120], seed=4)
    np.testing.assert_array_equal(res.W, ref)
    assert list(res.history.steps) == [0, 150, 300]          # the steps of whole epochs
    assert list(res.extra.epoch) == [1, 2]


def test_a_piece_chooser_is_told_the_kernel_seconds_and_sets_the_cut():
    class Chooser:
        def __init__(self):
            self.asked, self.told = [], []

        def piece_size(self, left):
            self.asked.append(left)
            return min(left, 30 if left == 150 else 50)

        def measured(self, points, seconds):
            self.told.append((points, seconds))

    X, y, K = _data()
    ch, points = Chooser(), []
    res = fit(X, y, "implicit", lr=0.5, epochs=1, seed=1, progress=False, pieces=ch,
              checkpoint=lambda p: points.append((p.points, p.epochs)) and False)
    assert ch.asked == [150, 120, 70, 20]
    assert [n for n, _ in ch.told] == [30, 50, 50, 20]
    assert all(s >= 0 for _, s in ch.told)
    assert points == [(30, 0.2), (80, 80 / 150), (130, 130 / 150), (150, 1.0)]
    ref = _reference(X, y, K, "implicit", 0.5, 1, lambda e: [30, 80, 130], seed=1)
    np.testing.assert_array_equal(res.W, ref)


def test_the_checkpoint_stops_the_run_inside_an_epoch_and_the_history_ends_there():
    X, y, K = _data()
    seen = []

    def stop_at_1_6(p):
        seen.append(p.epochs)
        return p.epochs >= 1.6

    res = fit(X, y, "umax", lr=0.3, epochs=4, seed=6, progress=False, pieces=30,
              checkpoint=stop_at_1_6, eval_epochs=[0, 1, 2, 4])
    assert seen == [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6]
    assert res.params["stopped_at"] == pytest.approx(1.6)
    assert "stopped_at_epoch" not in res.params and not res.diverged
    h = res.history
    assert list(h.epoch) == [0, 1, 2] and list(h.steps) == [0, 150, 240]
    assert not h.evaluated.iloc[-1] and np.isnan(h.train_log_loss.iloc[-1])
    assert res.timings["train"] == h.seconds.iloc[-1]
    # the plain loop on the same pieces, epoch 2 up to its first 90 points
    tr = get_trainer_class("umax")(X, y, K, mu=0.0, batch_size=None, n_sampled=None)
    tr.init_params("zero")
    rng = np.random.default_rng(6)
    for e, stop in ((1, 150), (2, 90)):
        idx = make_order(rng, 150, "shuffle")
        s = int(rng.integers(0, 2 ** 63 - 1))
        for a in range(0, stop, 30):
            tr.run_epoch(idx[a:a + 30], 0.3 * 0.9 ** (e - 1), s if a == 0 else piece_seed(s, a))
    np.testing.assert_array_equal(res.W, tr.weights())


def test_the_checkpoint_stops_the_run_after_an_epoch():
    X, y, K = _data()
    res = fit(X, y, "umax", lr=0.3, epochs=5, seed=6, progress=False,
              checkpoint=lambda p: p.epoch == 2)
    assert list(res.history.epoch) == [0, 1, 2] and res.params["stopped_at"] == 2
    full = fit(X, y, "umax", lr=0.3, epochs=2, seed=6, progress=False)
    np.testing.assert_array_equal(res.W, full.W)


def test_the_clock_excludes_the_callbacks_time(monkeypatch):
    """A fake perf_counter that moves 1 ms per reading; the callback moves it 1000 s
    (a long evaluation, or a sleep): no training second of the history, nor any
    checkpoint's, holds any of it."""
    clock = {"now": 0.0}

    def perf_counter():
        clock["now"] += 1e-3
        return clock["now"]

    class FakeTime:
        pass

    fake = FakeTime()
    fake.perf_counter = perf_counter
    monkeypatch.setattr(FIT, "time", fake)
    X, y, K = _data()
    seen = []

    def slow(p):
        seen.append(p.seconds)
        clock["now"] += 1000.0
        return False

    res = fit(X, y, "umax", lr=0.3, epochs=3, seed=0, progress=False, pieces=50,
              checkpoint=slow)
    assert len(seen) == 9 and clock["now"] > 9000
    assert res.history.seconds.iloc[-1] < 1.0 and max(seen) < 1.0
    assert list(np.diff(seen) > 0) == [True] * 8


def test_a_divergence_inside_a_piece_stops_the_run_as_always():
    X, y, K = _data()
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DivergenceWarning)
        res = fit(X, y, "vanilla", lr=1e200, epochs=3, progress=False, pieces=10,
                  checkpoint=lambda p: seen.append(p) and False, eval_epochs=[])
    assert res.diverged and res.history.diverged.iloc[-1]
    e, step = res.diverged_at
    assert e == 1 and step >= 0
    # the callback saw only the pieces before the one that diverged
    assert all(p.epoch == 1 and p.steps <= step for p in seen)


@pytest.mark.parametrize("kw, match", [
    (dict(checkpoint=3), "checkpoint must be None or a callable"),
    (dict(pieces=0), "pieces must be None, an int >= 1"),
    (dict(pieces=True), "pieces must be None, an int >= 1"),
    (dict(pieces="auto"), "piece_size"),
    (dict(pieces=object()), "piece_size"),
])
def test_bad_checkpoint_arguments_are_refused_before_any_work(kw, match):
    X, y, K = _data()
    with pytest.raises(ValueError, match=match):
        fit(X, y, "umax", lr=0.3, epochs=1, progress=False, **kw)


def test_a_full_batch_method_refuses_pieces_and_a_bad_piece_size_is_named():
    X, y, K = _data()
    with pytest.raises(ValueError, match="full-batch"):
        fit(X, y, "exact", epochs=2, progress=False, pieces=10)

    class Bad:
        def piece_size(self, left):
            return left + 1

    with pytest.raises(ValueError, match=r"piece_size\(150\) must return an int in 1..150"):
        fit(X, y, "umax", lr=0.3, epochs=1, progress=False, pieces=Bad())
    with pytest.raises(ValueError, match="unknown arguments"):
        FIT.fit_config(None, X, y, piece=3)


def test_a_checkpoint_tells_where_the_run_is():
    p = Checkpoint(epoch=3, points=50, n_rows=200, steps=450, seconds=1.5, lr=0.1,
                   trainer=None)
    assert p.epochs == 2.25 and not p.epoch_end
    assert Checkpoint(3, 200, 200, 0, 0.0, 0.1, None).epoch_end
