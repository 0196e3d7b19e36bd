"""The race's runs of our methods go through fit's epoch driver
(:func:`scalable_softmax.fit.run_epochs` with :class:`.ours.Checkpoints` as the
checkpoint callback and :class:`.ours.Pieces` as the piece chooser): on a fixed cut and
a scripted recorder (when the cap is over, when a checkpoint is due) they record the
same points, weights bit for bit, with the same statuses and reasons as the race's
former epoch loop, kept here as the reference."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax.fit import make_order, piece_seed
from scalable_softmax.repro.race import jobs as J
from scalable_softmax.repro.race import ours as OURS


class FixedCut:
    """A deterministic piece schedule: 3, 5, 7, 3, 5, 7, ... steps of ``batch``."""

    def __init__(self, N, batch, rec):
        self.batch, self.k = max(1, int(batch)), 0

    def piece_size(self, left):
        self.k += 1
        return min(left, self.batch * (3, 5, 7)[self.k % 3])

    def measured(self, points, seconds):
        pass


class ScriptedRec:
    """A recorder whose cap is over at the ``over_at``-th call of ``over()`` and whose
    checkpoints are due at every ``due_every``-th call of ``due()``; it keeps copies of
    the weights it records."""

    cap = 1.0

    def __init__(self, over_at=None, due_every=3):
        self.over_at, self.due_every = over_at, due_every
        self.n_over = self.n_due = 0
        self.points = []

    def start(self):
        pass

    def stop(self):
        pass

    def advance(self, wall, cpu):
        assert wall >= 0

    def until_next(self):
        return 1.0

    def over(self):
        self.n_over += 1
        return self.n_over == self.over_at

    def due(self):
        self.n_due += 1
        return self.n_due % self.due_every == 0

    def record_start(self, W, **info):
        self.record(W, **info)

    def record(self, W, **info):
        if callable(W):
            W = W()
        if isinstance(W, tuple):
            W = W[0]
        W = None if W is None else np.array(W)
        finite = W is not None and bool(np.isfinite(W).all())
        self.points.append((info, W))
        return {"train_log_loss": 0.0 if finite else math.inf}


def _former_run_ours(job, X, y, K, rec):
    """The race's epoch loop before it went through fit's driver (``run_ours`` of
    20a4405, with the cut of :class:`FixedCut`), as the reference; its schedule's decay
    is the job's ``lr_decay`` (then always the protocol's 0.9, the job's default)."""
    tr, order, decay, run_info = OURS.setup_ours(job.method, job.options, X, y, K,
                                                 job.threads)
    assert decay == J.Job.lr_decay == 0.9        # the protocol's, the job's default
    rng = np.random.default_rng(job.seed)
    N = X.shape[0]
    rec.record_start(tr.native_weights, epoch=0)
    pieces = FixedCut(N, tr.batch_size, rec)
    for e in range(1, job.max_epochs + 1):
        rec.start()
        idx = make_order(rng, N, order)
        lr, seed = job.lr * job.lr_decay ** (e - 1), int(rng.integers(0, 2 ** 63 - 1))
        a = 0
        while a < N:
            size = pieces.piece_size(N - a)
            if a:
                rec.start()
            rep = tr.run_epoch(idx[a:a + size], lr, seed if a == 0 else piece_seed(seed, a))
            rec.stop()
            a += size
            if rep.diverged_at is not None and rep.diverged_at >= 0:
                rec.record(None, epoch=e - 1 + a / N)
                return "diverged", f"non-finite parameters in epoch {e}", dict(
                    run_info, epochs=e - 1 + a / N)
            if a < N and rec.over():
                rec.record(tr.native_weights, epoch=e - 1 + a / N)
                return "time cap", (f"stopped at the cap in epoch {e} after {a} of "
                                    f"{N} points"), dict(run_info, epochs=e - 1 + a / N)
            if a < N and rec.due():
                rec.record(tr.native_weights, epoch=e - 1 + a / N)
        if tr.u is not None and not np.all(np.isfinite(tr.u)):
            rec.record(None, epoch=e)
            return "diverged", f"non-finite parameters in epoch {e}", dict(run_info, epochs=e)
        last = e == job.max_epochs
        if rec.over() and not last:
            rec.record(tr.native_weights, epoch=e)
            return "time cap", f"stopped after epoch {e} at the cap", dict(run_info, epochs=e)
        if rec.due() or last:
            row = rec.record(tr.native_weights, epoch=e)
            if not math.isfinite(next(v for k, v in row.items() if k.endswith("_log_loss"))):
                return "diverged", f"non-finite weights after epoch {e}", dict(run_info,
                                                                               epochs=e)
    return "completed", f"{job.max_epochs} epochs", dict(run_info, epochs=job.max_epochs)


def _pieces(N, batch, epochs=1):
    """The pieces of the first ``epochs`` epochs of :class:`FixedCut` (a new one)."""
    cut, n = FixedCut(N, batch, None), 0
    for _ in range(epochs):
        a = 0
        while a < N:
            a, n = a + cut.piece_size(N - a), n + 1
    return n


def _problem(N=200, D=10, K=5, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.5, format="csr", random_state=seed) * 2
    X.data -= 1.0
    X = sp.csr_matrix(X)
    X.sort_indices()
    y = np.argmax(X @ rng.normal(size=(K, D)).T + rng.gumbel(size=(N, K)), axis=1)
    y[:K] = np.arange(K)
    return X, y.astype(np.int64), K


def _same(new, old):
    (s1, r1, i1), rec1 = new
    (s2, r2, i2), rec2 = old
    assert (s1, r1) == (s2, r2)
    assert i1 == i2
    assert len(rec1.points) == len(rec2.points)
    for (info1, W1), (info2, W2) in zip(rec1.points, rec2.points):
        assert info1 == info2
        if W2 is None:
            assert W1 is None
        else:
            np.testing.assert_array_equal(W1, W2)


CASES = [("umax", 0.5, {"n_sampled": 2}), ("is", 0.5, {"n_sampled": 2, "batch_size": 4}),
         ("implicit-batch", 0.5, {"batch_size": 5, "n_sampled": 3}),
         ("softmax-sgd", 0.5, {"batch_size": 10}), ("implicit", 0.5, {})]


@pytest.mark.parametrize("method, lr, options", CASES)
def test_our_runs_through_fits_driver_record_what_the_former_loop_recorded(
        method, lr, options, monkeypatch):
    monkeypatch.setattr(OURS, "Pieces", FixedCut)
    X, y, K = _problem()
    reasons, over_ats = set(), [None, 2, 5]
    for over_at in over_ats:
        job = J.Job("in-memory", method, lr, 60.0, max_epochs=3, threads=1,
                    options=dict(options))
        new_rec, old_rec = ScriptedRec(over_at), ScriptedRec(over_at)
        new = OURS.run_ours(job, X, y, K, new_rec), new_rec
        old = _former_run_ours(job, X, y, K, old_rec), old_rec
        _same(new, old)
        reasons.add(new[0][1].split(" in epoch")[0].split(" after epoch")[0])
        if over_at is None:
            # over() is asked at every piece end of epoch 1, the last one its end
            n = _pieces(X.shape[0], new[0][2]["batch_size"])
            over_ats += [n, n + 1]
    # the cases cover a completed run and a stop inside and after an epoch
    assert reasons >= {"3 epochs", "stopped at the cap", "stopped"}


def _breaking(original, at_call, kind):
    """``setup_ours`` whose trainer breaks at its ``at_call``-th kernel call: a
    non-finite step it reports (``kind="step"``), or, unreported, a non-finite ``u``
    (``"u"``) or ``W`` (``"W"``)."""
    from scalable_softmax.methods.base import EpochReport

    def setup(*args):
        tr, order, decay, info = original(*args)
        run, calls = tr.run_epoch, [0]

        def run_epoch(idx, lr, seed):
            rep = run(idx, lr, seed)
            calls[0] += 1
            if calls[0] != at_call:
                return rep
            if kind == "u":
                tr.u[0] = np.nan
                return rep
            tr.native_weights()[0][0, 0] = np.nan
            return rep if kind == "W" else EpochReport(rep.steps, rep.steps - 1, rep.extra)

        tr.run_epoch = run_epoch
        return tr, order, decay, info

    return setup


@pytest.mark.parametrize("method, options, at_call, kind", [
    ("umax", {"n_sampled": 2}, 7, "step"), ("is", {"n_sampled": 2, "batch_size": 4}, 3,
                                            "step"),
    ("umax", {"n_sampled": 2}, 12, "u"), ("softmax-sgd", {"batch_size": 10}, 9, "W"),
    ("softmax-sgd", {"batch_size": 10}, 1, "W"),
    ("softmax-sgd", {"batch_size": 10}, _pieces(200, 10, epochs=3), "W")])
def test_a_diverging_run_reports_as_the_former_loop_did(method, options, at_call, kind,
                                                        monkeypatch):
    monkeypatch.setattr(OURS, "Pieces", FixedCut)
    monkeypatch.setattr(OURS, "setup_ours", _breaking(OURS.setup_ours, at_call, kind))
    X, y, K = _problem()
    job = J.Job("in-memory", method, 0.5, 60.0, max_epochs=3, threads=1,
                options=dict(options))
    new_rec, old_rec = ScriptedRec(due_every=10 ** 9), ScriptedRec(due_every=10 ** 9)
    new = OURS.run_ours(job, X, y, K, new_rec), new_rec
    old = _former_run_ours(job, X, y, K, old_rec), old_rec
    assert new[0][0] == "diverged", new[0]
    if at_call == _pieces(200, 10, epochs=3):        # W broken by the last piece
        assert new[0][1] == "non-finite weights after epoch 3"
    _same(new, old)


def test_the_recorder_is_charged_fits_training_clock():
    class Point:
        epoch, points, n_rows, epoch_end, epochs = 1, 10, 100, False, 0.1

        def __init__(self, seconds):
            self.seconds = seconds

        def weights(self):
            raise AssertionError("no point is due")

    rec = J._Recorder({}, [50.0], cap=100.0)
    check = OURS.Checkpoints(rec, 3)
    assert check(Point(1.5)) is False and rec.seconds == 1.5
    assert check(Point(4.0)) is False and rec.seconds == 4.0
    assert rec.busy_seconds == 4.0 and rec.points == []


@pytest.mark.parametrize("method, options", [("implicit-batch", {"batch_size": 1, "n_sampled": 1}),
                                             ("softmax-sgd", {"batch_size": 10})])
def test_a_runs_schedule_is_its_jobs_decay(method, options, monkeypatch):
    """The race searches the schedule's decay (params/race.yaml ``decays``): a job's
    ``lr_decay`` is the decay its run trains with, epoch after epoch, as the reference
    loop computes the rates, and another decay trains other weights."""
    monkeypatch.setattr(OURS, "Pieces", FixedCut)
    X, y, K = _problem()
    got = {}
    for decay in (0.9, 0.5):
        job = J.Job("in-memory", method, 0.5, 60.0, max_epochs=3, threads=1,
                    options=dict(options), lr_decay=decay)
        new_rec, old_rec = ScriptedRec(), ScriptedRec()
        new = OURS.run_ours(job, X, y, K, new_rec), new_rec
        _same(new, (_former_run_ours(job, X, y, K, old_rec), old_rec))
        got[decay] = new_rec.points[-1][1]
    assert not np.array_equal(got[0.9], got[0.5])


def test_a_jobs_decay_is_checked():
    for bad in (0.0, -0.5, 1.5, "0.9", float("nan")):
        with pytest.raises(ValueError, match="lr_decay"):
            J.Job("in-memory", "umax", 0.5, 60.0, lr_decay=bad)
