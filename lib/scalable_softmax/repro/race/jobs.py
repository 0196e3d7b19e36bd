"""The race's runs: a job (:class:`Job`), its checkpoints, the recorder that keeps the
training clock and evaluates, and running jobs in this process (:func:`run_job`,
:func:`run_jobs`; in a child process: :mod:`.isolate`).

Every method is trained with a cap on its training seconds and evaluated, exactly (all
``K`` classes, :func:`scalable_softmax.evaluate.evaluate`), on fixed sets of rows at
checkpoints spaced geometrically in training seconds. The clock runs only while the
method trains: evaluations pause it (as ``fit``'s ``seconds`` column does). A job's
method is a key of the race's registry (:data:`.methods.METHODS`), whose runner
(:mod:`.ours`, :mod:`.exact`, :mod:`.sklearn_runner`, :mod:`.torch_runner`) trains it
and records its points.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from scalable_softmax._atomic import atomic_open
from scalable_softmax.protocols import LR_DECAY
from scalable_softmax.repro.race import problems
from scalable_softmax.repro.race.methods import METHODS, RATE_METHODS, runner_of

__all__ = ["Job", "checkpoint_times", "classify_failure", "run_job", "run_jobs", "write_json"]


@dataclass
class Job:
    """One training run.

    data : a loader name (``scalable_softmax.data.load_dataset``) or the path of an
        ``.npz`` made by :func:`.problems.save_problem`.
    method : a key of :data:`.methods.METHODS`.
    lr : learning rate (None for ``exact`` and the sklearn methods).
    cap_seconds : training seconds after which the run stops (at the end of the piece
        of an epoch (ours, :class:`.ours.Pieces`), minibatch, L-BFGS iteration or fit that
        crosses it).
    split : ``"final"`` (train on the training split, evaluate on ``train`` and
        ``test`` rows) or ``"race"`` (train on the rows
        :func:`scalable_softmax.repro.race.split.validation_split` leaves for training,
        ``holdout`` its fraction and ``split_seed`` its seed, evaluate on its validation
        rows as ``val``; the test rows are not loaded into the sets).
    targets : for ``split="race"``: ``{level: validation log-loss}``
        (:func:`scalable_softmax.repro.race.scoring.target_levels`); the run records
        when each is first reached and stops at the tightest
        (:class:`~scalable_softmax.repro.race.scoring.TargetWatch`).
    report_test : with ``targets``: evaluate the test rows (sealed,
        :class:`~scalable_softmax.repro.race.scoring.SealedTest`) at the checkpoint where
        each level was first reached, and nowhere else.
    max_epochs : epochs of the stochastic methods (the schedule ``lr * lr_decay**(e-1)``).
    lr_decay : the schedule's decay per epoch (default
        :data:`scalable_softmax.protocols.LR_DECAY`, 0.9, the papers' schedule).
    eval_rows : rows of each evaluation set (a seeded subsample; None: all).
    checkpoints : training seconds at which to evaluate (None: only the end); a final
        run also evaluates at its start (``seconds = 0``), every run at its end.
    options : method options (``batch_size``, ``negatives``, ``layout`` for torch).
    """

    data: str
    method: str
    lr: float | None
    cap_seconds: float
    split: str = "final"
    max_epochs: int = 50
    eval_rows: int | None = 5000
    checkpoints: list | None = None
    holdout: float = 0.2
    seed: int = 0
    threads: int = 2
    options: dict = field(default_factory=dict)
    split_seed: int = 0
    targets: dict | None = None
    report_test: bool = False
    lr_decay: float = LR_DECAY

    def __post_init__(self):
        if self.targets is not None:        # JSON keys come back as text
            self.targets = {float(k): float(v) for k, v in self.targets.items()}
            if self.split != "race":
                raise ValueError("Job.targets needs split='race' (targets are read on "
                                 "the validation rows)")
        if self.report_test and not self.targets:
            raise ValueError("Job.report_test needs targets: the test rows are evaluated "
                             "only where a target was first reached")
        if self.method not in METHODS:
            raise ValueError(f"Job.method: unknown method {self.method!r}; choose one of "
                             f"{', '.join(METHODS)}")
        if self.split not in ("final", "race"):
            raise ValueError(f"Job.split must be 'final' or 'race'; got "
                             f"{self.split!r}")
        if self.method in RATE_METHODS:
            if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr)
                    and self.lr > 0):
                raise ValueError(f"Job.lr of {self.method} must be a number > 0; got "
                                 f"{self.lr!r}")
        if not (self.cap_seconds > 0):
            raise ValueError(f"Job.cap_seconds must be > 0; got {self.cap_seconds!r}")
        if not (isinstance(self.max_epochs, int) and self.max_epochs >= 1):
            raise ValueError(f"Job.max_epochs must be an integer >= 1; got "
                             f"{self.max_epochs!r}")
        if not (isinstance(self.lr_decay, (int, float)) and 0 < self.lr_decay <= 1):
            raise ValueError(f"Job.lr_decay must lie in (0, 1]; got {self.lr_decay!r}")
        if not (0 < self.holdout < 1):
            raise ValueError(f"Job.holdout must lie in (0, 1); got {self.holdout!r}")


def checkpoint_times(cap_seconds: float, per_doubling: int = 2, first: float | None = None):
    """Training seconds ``cap * 2**(-k / per_doubling)`` for ``k = 0, 1, ...`` down to
    ``first`` (default ``cap / 512``), increasing."""
    if not cap_seconds > 0:
        raise ValueError(f"cap_seconds must be > 0; got {cap_seconds!r}")
    if not (isinstance(per_doubling, int) and per_doubling >= 1):
        raise ValueError(f"per_doubling must be an integer >= 1; got {per_doubling!r}")
    first = cap_seconds / 512 if first is None else float(first)
    if not 0 < first <= cap_seconds:
        raise ValueError(f"first must lie in (0, cap_seconds]; got {first!r}")
    n = int(math.floor(per_doubling * math.log2(cap_seconds / first) + 1e-9))
    return [cap_seconds * 2.0 ** (-k / per_doubling) for k in range(n, -1, -1)]


class _Recorder:
    """Keeps the training clock (paused while evaluating) and the evaluated points."""

    def __init__(self, sets, checkpoints, cap, on_point=None, watch=None, sealed=None):
        self.sets = sets                      # name -> (X, y)
        self.watch = watch                    # race.scoring.TargetWatch on "val", or None
        self.sealed = sealed                  # race.scoring.SealedTest, or None
        self.pending = sorted(checkpoints or [])
        self.cap = float(cap)
        self.seconds = 0.0
        self.points = []
        self.on_point = on_point
        self.start_point = True
        self.eval_seconds = 0.0
        self.busy_seconds = 0.0               # wall seconds between start and stop
        self.cpu_seconds = 0.0                # the process's CPU seconds (all threads) then
        self._t = None
        self._c = None

    def start(self):
        self._c = time.process_time()
        self._t = time.perf_counter()

    def stop(self):
        if self._t is not None:
            dt = time.perf_counter() - self._t
            self.seconds += dt
            self.add_busy(dt, time.process_time() - self._c)
            self._t = None

    def advance(self, wall, cpu):
        """Charge ``wall`` training seconds measured by someone else (``fit``'s clock,
        :func:`.ours.run_ours`) during which the process used ``cpu`` CPU seconds; the
        clock must be stopped."""
        self.seconds += float(wall)
        self.add_busy(wall, cpu)

    def add_busy(self, wall, cpu):
        """Count ``wall`` training seconds during which the process used ``cpu`` CPU
        seconds (all its threads): their ratio says whether a run used its threads."""
        self.busy_seconds += float(wall)
        self.cpu_seconds += float(cpu)

    def now(self):
        return self.seconds + (time.perf_counter() - self._t if self._t is not None else 0.0)

    def due(self):
        return bool(self.pending) and self.now() >= self.pending[0]

    def over(self):
        """The cap has passed, or the run reached its tightest target."""
        return self.now() >= self.cap or (self.watch is not None and self.watch.stop)

    def until_next(self):
        """Training seconds left until the next checkpoint or the cap."""
        return min([self.cap] + self.pending[:1]) - self.now()

    def record_start(self, W, **info):
        """The point at ``seconds = 0`` (skipped when ``self.start_point`` is False).
        ``W`` may be a function returning the weights, called only when the point is
        recorded (a tuning run records no start point, and at ``K = 30,000`` making the
        ``K x D`` weights of a feature-major or torch model is a 2.4 GB pass)."""
        if self.start_point:
            self.record(W, **info)

    def record(self, W, **info):
        """Evaluate ``W`` (K x D, or ``(array, layout)`` as
        :meth:`~scalable_softmax.methods.base.Trainer.native_weights` gives it; None: a
        diverged point, log-loss inf) on every set. ``W`` may be a function returning
        them: it is called once the training clock is stopped, so that making the
        weights (a copy, a transpose) is never charged to the run."""
        from scalable_softmax.evaluate import NonFiniteWeightsError, evaluate_sets

        running = self._t is not None
        self.stop()
        t_eval = time.perf_counter()
        if callable(W):
            W = W()
        layout = "class"
        if isinstance(W, tuple):
            W, layout = W       # a feature-major model is evaluated without a transpose
        while self.pending and self.pending[0] <= self.seconds:
            self.pending.pop(0)
        row = dict(seconds=self.seconds, **info)
        evs = None
        if W is not None:
            try:
                # one pass over W for every set (at K = 30,000 a pass is 2.4 GB), whose
                # finiteness check is the one of the point
                evs = evaluate_sets(self.sets, W, layout=layout)
            except NonFiniteWeightsError:
                pass            # a diverged point: log-loss inf, below
        for name in self.sets:
            if evs is None:
                row[f"{name}_log_loss"] = math.inf
                row[f"{name}_error"] = math.nan
            else:
                row[f"{name}_log_loss"] = float(evs[name].log_loss)
                row[f"{name}_error"] = float(evs[name].error)
        if self.watch is not None:
            arrivals = self.watch.observe(self.seconds, row["val_log_loss"])
            row["reached"] = [a.level for a in arrivals]
            if self.sealed is not None:
                for a in arrivals:
                    self.sealed.report(a, (W, layout))
        self.points.append(row)
        self.eval_seconds += time.perf_counter() - t_eval
        if self.on_point is not None:
            self.on_point(self.points)
        if running:
            self.start()
        return row


def classify_failure(exc: BaseException) -> str:
    """``"memory"`` for an allocation failure (Python's ``MemoryError``, PyTorch's
    allocator or numba's), else ``"error"``."""
    msg = str(exc).lower()
    if isinstance(exc, MemoryError) or "can't allocate memory" in msg \
            or "allocation failed" in msg or "out of memory" in msg \
            or "unable to allocate" in msg:
        return "memory"
    return "error"


def run_job(job: Job, on_point=None, problem=None) -> dict:
    """Run one job in this process; returns ``{"job", "status", "reason", "points",
    "info", "seconds_total"}`` (``status``: completed, time cap, diverged, memory,
    error). ``problem`` = ``(X, y, K, sets)`` skips loading ``job.data``."""
    t0 = time.perf_counter()
    out = {"job": asdict(job), "status": None, "reason": "", "points": [], "info": {}}
    rec = None
    try:
        X, y, K, sets = problem if problem is not None else problems.job_problem(job)
        out["load_seconds"] = time.perf_counter() - t0
        watch = sealed = None
        if job.targets:
            from scalable_softmax.repro.race.scoring import TargetWatch

            watch = TargetWatch(job.targets, job.cap_seconds)
            sealed = problems.sealed_test(job) if job.report_test else None
        rec = _Recorder(sets, job.checkpoints, job.cap_seconds, on_point, watch, sealed)
        rec.start_point = job.split == "final"     # a race run scores from its first checkpoint
        status, reason, info = runner_of(job.method)(job, X, y, K, rec)
        if watch is not None and len(watch.arrivals) == len(watch.targets):
            status, reason = "target", (f"reached the tightest target at "
                                        f"{watch.arrivals[min(watch.targets)].seconds:.3g} "
                                        "training seconds")
        out.update(status=status, reason=reason, info=info)
    except (Exception, MemoryError) as exc:   # noqa: BLE001 -- reported, not hidden
        if rec is not None:
            rec.stop()
        out.update(status=classify_failure(exc),
                   reason=f"{type(exc).__name__}: {str(exc)[:300]}"
                   + (f" (after {rec.now():.3g} training seconds)" if rec is not None else
                      " (while loading the data)"))
    if rec is not None and rec.watch is not None:
        out["arrivals"] = {str(lv): a.seconds for lv, a in rec.watch.arrivals.items()}
        if rec.sealed is not None:
            out["test_at_target"] = {str(lv): v for lv, v in rec.sealed.release().items()}
    if rec is not None:
        out["points"] = rec.points
        out["eval_seconds"] = rec.eval_seconds
        out["train_seconds"] = rec.seconds
        out["busy_seconds"] = rec.busy_seconds
        out["cpu_seconds"] = rec.cpu_seconds
    out["seconds_total"] = time.perf_counter() - t0
    return out


def run_jobs(jobs, out_path=None):
    """Run ``jobs`` one after another in this process; after every point and job the
    results so far are written to ``out_path`` (JSON, atomically).

    Before each job the process's peak resident set size is reset
    (:func:`~scalable_softmax.repro.fagan.timing.reset_peak_rss`), so that each result's
    ``peak_rss_bytes`` is that job's own peak (its ``peak_rss_reset`` says whether the
    reset took effect; where it did not, the peak is the process's so far), and
    ``rss_at_reset_bytes`` the resident set it started from. Reference
    cycles are collected after the first job (PyTorch's first optimiser step in a
    process leaves its model in a cycle, once: 1.2 GB at K = 30,000) and after a job's
    memory failure, so that the next job starts without them.
    """
    import gc

    from scalable_softmax.repro.fagan.timing import peak_rss_bytes, reset_peak_rss, rss_bytes

    results = []

    def flush(partial=None):
        if out_path is None:
            return
        write_json(out_path, results + ([partial] if partial else []))

    for i, job in enumerate(jobs):
        current = {"job": asdict(job), "status": "running", "reason": "", "points": []}
        reset = reset_peak_rss()
        at_reset = rss_bytes()      # what the job starts with (inherited at fork included)
        res = run_job(job, on_point=lambda pts, cur=current: flush(dict(cur, points=list(pts))))
        res["peak_rss_bytes"] = peak_rss_bytes()
        res["peak_rss_reset"] = reset
        res["rss_at_reset_bytes"] = at_reset
        results.append(res)
        flush()
        if i == 0 or res["status"] == "memory":
            gc.collect()
    return results


def write_json(path, payload):
    """Write ``payload`` to ``path`` as JSON, atomically (NumPy scalars and arrays as
    numbers and lists)."""
    with atomic_open(path, "w") as fh:
        json.dump(payload, fh, default=_json_default)


def _json_default(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.ndarray):
        return v.tolist()
    raise TypeError(f"cannot store {type(v).__name__} in JSON")
