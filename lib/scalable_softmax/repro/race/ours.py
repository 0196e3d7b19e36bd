"""Our methods in the race: the library's trainers (:mod:`scalable_softmax.methods`)
under the ``"paper-text"`` protocol (:mod:`scalable_softmax.protocols`), ``mu = 0``, all
at ``lr * lr_decay**(epoch - 1)`` (the job's decay; the protocol's is 0.9) for at most
``max_epochs`` epochs: ``implicit`` (Implicit
SGD), ``umax`` (U-max), ``is`` (importance sampling, minibatches of 100),
``implicit-batch`` and ``implicit-batch-5`` (the library's minibatch Implicit SGD,
``fit(..., "implicit-batch", ...)``, with the paper-text settings of ``implicit``:
shuffled data, ``u = log K``; n and m from the job's options, else
:data:`BATCH_IMPLICIT`; n = m = 1 runs Implicit SGD's own single-point kernel, the same
step at ``mu = 0``), ``softmax-sgd`` (the library's exact full-softmax minibatch SGD,
minibatches of 100 unless the job says otherwise, shuffled data); a job's
``batch_size`` / ``n_sampled`` options set the points and classes per step. Threads:
:func:`_our_trainer` asks each trainer for ``threads`` (the library's one thread knob)
and falls back to one thread where the trainer refuses; the run's ``info`` says what it
got.

A run is driven by the library's own epoch driver, :func:`scalable_softmax.fit.run_epochs`
(``fit``'s), on the trainer :func:`setup_ours` builds: its epochs are cut into pieces
(:class:`Pieces`, the piece chooser) and :class:`Checkpoints` (the checkpoint callback,
run with ``fit``'s training clock paused) evaluates the run and stops it at the first
piece end past the cap or a checkpoint. The piece at the start of an epoch runs with the
epoch's kernel seed, a later one with :func:`scalable_softmax.fit.piece_seed`.
"""
from __future__ import annotations

import math
import time

__all__ = ["BATCH_IMPLICIT", "FIRST_PIECES", "PIECE_FRACTION", "MIN_PIECE_SECONDS",
           "setup_ours", "run_ours", "Checkpoints", "Pieces"]


_OUR_PROTOCOL = "paper-text"
#: our runs' epochs are cut into pieces (:class:`Pieces`): the first is this fraction
#: of an epoch, the others last about PIECE_FRACTION of the cap (at least
#: MIN_PIECE_SECONDS: a kernel call costs tens of microseconds)
FIRST_PIECES = 256
PIECE_FRACTION = 1 / 64
MIN_PIECE_SECONDS = 0.01
#: minibatch Implicit SGD of notebook 12: method -> (batch_size n, n_sampled m); the
#: library trainer is ``implicit-batch``, with the paper-text settings of ``implicit``
BATCH_IMPLICIT = {"implicit-batch": (10, 10), "implicit-batch-5": (5, 5)}


def _our_trainer(library, X, y, K, threads, *, batch_size, n_sampled, kw):
    """Our ``library`` trainer (a method of the library's registry) on ``threads``
    threads.

    With ``threads > 1`` the trainer is asked for them by its ``threads`` option; a
    trainer that refuses (it does not run on several threads, or not with its other
    options) runs on one thread.

    Returns ``(trainer, threads_used, thread_options, note)``: ``note`` says which
    request was refused and why ("" if the first was taken).
    """
    from scalable_softmax.methods import get_trainer_class

    cls = get_trainer_class(library)
    tries = [({}, 1)] if threads <= 1 else [({"threads": threads}, threads), ({}, 1)]
    refused = []
    for i, (opts, used) in enumerate(tries):
        try:
            tr = cls(X, y, K, mu=0.0, batch_size=batch_size, n_sampled=n_sampled,
                     **dict(kw, **opts))
        except (ValueError, TypeError) as exc:
            if i == len(tries) - 1:
                raise
            refused.append(f"{opts}: {str(exc)[:160]}")
            continue
        return tr, used, opts, "; ".join(refused)
    raise AssertionError("unreachable")


def setup_ours(method, options, X, y, K, threads):
    """Our trainer for a job of ``method`` with ``options`` (a candidate configuration's
    ``batch_size`` / ``n_sampled`` among them) on ``threads`` threads, set up as the
    notebooks run it: minibatch Implicit SGD and softmax SGD with Implicit SGD's
    paper-text settings (shuffled data, ``lr * 0.9**(epoch - 1)``; softmax SGD has no
    ``u``), ``n = m = 1`` on Implicit SGD's own single-point kernel; parameters
    initialised and kernels compiled.

    Returns ``(trainer, order, lr_decay, run_info)``: the epoch order and rate decay of
    the protocol, and what the run reports (library, batch size, classes per step,
    threads used and asked for).
    """
    from scalable_softmax.protocols import fit_kwargs

    options = dict(options)
    batched = method in BATCH_IMPLICIT
    if batched:
        # a job's options may set n and m (notebook 12's candidate configurations,
        # benchmarks/bench_pieces.py); without them, BATCH_IMPLICIT's
        n = options.pop("batch_size", BATCH_IMPLICIT[method][0])
        m = options.pop("n_sampled", BATCH_IMPLICIT[method][1])
    # n = m = 1 is Implicit SGD's own step (mu = 0): its single-point kernel runs it
    library = method if not batched else "implicit" if (n, m) == (1, 1) \
        else "implicit-batch"
    kw = fit_kwargs(_OUR_PROTOCOL, "implicit" if batched or method == "softmax-sgd"
                    else method)
    order, u_init, decay = kw.pop("order"), kw.pop("u_init"), kw.pop("lr_decay")
    batch_size, n_sampled = kw.pop("batch_size", None), kw.pop("n_sampled", None)
    if batched:
        batch_size, n_sampled = (None, None) if library == "implicit" else (n, m)
    else:
        # the structural option of a candidate configuration (points or classes per step)
        batch_size = options.pop("batch_size", batch_size)
        n_sampled = options.pop("n_sampled", n_sampled)
    if method == "softmax-sgd":
        u_init = "zero"
    kw.update(options)
    tr, used, thread_opts, note = _our_trainer(library, X, y, K, threads,
                                               batch_size=batch_size, n_sampled=n_sampled,
                                               kw=kw)
    run_info = {"library": library, "batch_size": int(tr.batch_size),
                "n_sampled": int(tr.n_sampled), "threads_used": int(used),
                "thread_options": thread_opts}
    if note:
        run_info["threads_refused"] = note
    tr.init_params(u_init)
    tr.warmup()
    return tr, order, decay, run_info


def run_ours(job, X, y, K, rec):
    """Run ``job`` with our trainer (:func:`setup_ours`) through the library's epoch
    driver, :func:`scalable_softmax.fit.run_epochs` (``fit``'s), with epochs cut by
    :class:`Pieces` and :class:`Checkpoints` as the checkpoint callback: the data order,
    kernel seeds and rates are ``fit``'s (``job.seed``, the protocol's order and
    ``job.lr * job.lr_decay**(e - 1)``); the run's clock is ``fit``'s (training only), and
    ``rec`` evaluates at its checkpoints, at the first piece end past the cap (or a
    target) and after the last epoch. Returns ``(status, reason, info)``."""
    from scalable_softmax.fit import run_epochs
    from scalable_softmax.protocols import FitConfig

    tr, order, _, run_info = setup_ours(job.method, job.options, X, y, K, job.threads)
    N = X.shape[0]
    rec.record_start(tr.native_weights, epoch=0)
    config = FitConfig(method=run_info["library"], lr=job.lr, epochs=job.max_epochs,
                       lr_decay=job.lr_decay, seed=job.seed, order=order, eval_epochs=(),
                       progress=False)
    check = Checkpoints(rec, job.max_epochs)
    run = run_epochs(tr, None, config, N, checkpoint=check,
                     pieces=Pieces(N, tr.batch_size, rec))
    if run.stopped:
        return check.status, check.reason, dict(run_info, epochs=check.epochs)
    if run.diverged_at is not None:
        check.charge(run.rows[-1]["seconds"])
        e = run.diverged_at[0]
        if run.diverged_at[1] < 0 and run.reason.startswith("the weights W"):
            # fit's check of the last epoch's W: the race's point there (log-loss inf)
            rec.record(tr.native_weights, epoch=e)
            return "diverged", f"non-finite weights after epoch {e}", dict(run_info,
                                                                           epochs=e)
        rec.record(None, epoch=run.stopped_at)
        return "diverged", f"non-finite parameters in epoch {e}", dict(
            run_info, epochs=run.stopped_at)
    return "completed", f"{job.max_epochs} epochs", dict(run_info, epochs=job.max_epochs)


class Checkpoints:
    """The checkpoint callback of our runs (:func:`scalable_softmax.fit.fit`'s
    ``checkpoint``): charges ``rec`` the training seconds of ``fit``'s clock since the
    last call (and the process's CPU seconds), then, inside an epoch, stops the run
    with a point at the cap (or a target: ``rec.over()``) and records a point at a due
    checkpoint; after an epoch, stops with a point at the cap unless it was the last
    (``max_epochs``), and records a point at a due checkpoint and after the last epoch,
    stopping as diverged if its log-loss is not finite. ``status``, ``reason`` and
    ``epochs`` say why and where it stopped the run."""

    def __init__(self, rec, max_epochs):
        self.rec, self.max_epochs = rec, int(max_epochs)
        self.charged, self.cpu = 0.0, time.process_time()
        self.status = self.reason = self.epochs = None

    def charge(self, seconds):
        """Charge ``rec`` the training seconds up to ``seconds`` (``fit``'s clock)."""
        cpu = time.process_time()
        self.rec.advance(seconds - self.charged, cpu - self.cpu)
        self.charged, self.cpu = seconds, cpu

    def __call__(self, point) -> bool:
        self.charge(point.seconds)
        try:
            return self._check(point)
        finally:
            self.cpu = time.process_time()      # the evaluations' CPU is not the run's

    def _stop(self, status, reason, epochs):
        self.status, self.reason, self.epochs = status, reason, epochs
        return True

    def _check(self, point) -> bool:
        rec, e = self.rec, point.epoch
        if not point.epoch_end:
            where = point.epochs
            if rec.over():
                rec.record(point.weights, epoch=where)
                return self._stop("time cap", f"stopped at the cap in epoch {e} after "
                                  f"{point.points} of {point.n_rows} points", where)
            if rec.due():
                rec.record(point.weights, epoch=where)
            return False
        last = e == self.max_epochs
        if rec.over() and not last:
            rec.record(point.weights, epoch=e)
            return self._stop("time cap", f"stopped after epoch {e} at the cap", e)
        if rec.due() or last:
            row = rec.record(point.weights, epoch=e)
            if not math.isfinite(next(v for k, v in row.items() if k.endswith("_log_loss"))):
                return self._stop("diverged", f"non-finite weights after epoch {e}", e)
        return False


class Pieces:
    """How many points of an epoch's order the next kernel call of one of our runs
    takes (the piece chooser of :func:`scalable_softmax.fit.run_epochs`): whole steps
    (``batch``), meant to last about :data:`PIECE_FRACTION` of the
    run's cap and at most until its next checkpoint (but at least
    :data:`MIN_PIECE_SECONDS`), at the speed measured on the pieces so far; the first
    piece is ``1 / FIRST_PIECES`` of an epoch and a piece at most 4 times the one
    before. So a run stops, and is evaluated, at the first piece end past the cap or a
    checkpoint, as PyTorch's runs stop at the first minibatch past it, whatever an
    epoch costs. The cut depends on the measured speed, not on the data: a run's points
    are a function of its seed only where it runs its epochs whole."""

    def __init__(self, N, batch, rec):
        self.batch, self.rec = max(1, int(batch)), rec
        self.size = self.batch * max(1, math.ceil(N / self.batch / FIRST_PIECES))
        self.rate = None                      # points per training second

    def piece_size(self, left):
        if self.rate is not None:
            target = max(MIN_PIECE_SECONDS, min(self.rec.cap * PIECE_FRACTION,
                                                self.rec.until_next()))
            want = self.batch * max(1, int(self.rate * target / self.batch))
            self.size = min(want, 4 * self.size)
        return min(self.size, left)

    def measured(self, points, seconds):
        if seconds > 0:
            self.rate = points / seconds
