"""Time to quality against what a practitioner would use instead (notebook 12-peers).

Every method is trained with a cap on its training seconds and evaluated, exactly (all
``K`` classes, :func:`scalable_softmax.evaluate.evaluate`), on fixed sets of rows at
checkpoints spaced geometrically in training seconds. The clock runs only while the
method trains: evaluations pause it (as ``fit``'s ``seconds`` column does).

Methods (:data:`METHODS`), every one given the same ``threads`` (2 in notebook 12):

* ours, through the library's trainers (:mod:`scalable_softmax.methods`) under the
  ``"paper-text"`` protocol (:mod:`scalable_softmax.protocols`), ``mu = 0``, all at
  ``lr * 0.9**(epoch - 1)`` for at most ``max_epochs`` epochs: ``implicit`` (Implicit
  SGD), ``umax`` (U-max), ``is`` (importance sampling, minibatches of 100),
  ``implicit-batch`` and ``implicit-batch-5`` (the library's minibatch Implicit SGD,
  ``fit(..., "implicit-batch", ...)``, with the paper-text settings of ``implicit``:
  shuffled data, ``u = log K``; n and m from the job's options, else
  :data:`BATCH_IMPLICIT`; n = m = 1 runs Implicit SGD's own single-point kernel, the same
  step at ``mu = 0``), ``softmax-sgd`` (the library's exact full-softmax minibatch SGD,
  minibatches of 100 unless the job says otherwise, shuffled data); a job's
  ``batch_size`` / ``n_sampled`` options set the points and classes per step. Threads:
  :func:`_our_trainer` asks each trainer for ``threads`` (with the older switch of its
  threaded kernel, :data:`_LEGACY_THREAD_OPTIONS`) and falls back to one thread where
  the trainer refuses; the run's ``info`` says what it got. And ``exact``: full-batch
  L-BFGS on the exact objective (the library's
  :class:`~scalable_softmax.methods.full.ExactTrainer` objective kernel, driven here by
  one ``scipy.optimize.minimize(method="L-BFGS-B")`` call whose callback evaluates at the
  checkpoints, so the curvature pairs are kept throughout);
* scikit-learn ``LogisticRegression`` (multinomial, no penalty ``C=inf``, no intercept):
  ``sklearn-lbfgs`` and ``sklearn-saga``. ``fit`` has no callback, so (as benchopt
  does for such solvers) the curve is made of separate fits from scratch with
  ``max_iter = 1, 2, 4, ...``; a point's seconds are that fit's wall time, until a fit
  stops before its ``max_iter`` (sklearn's own ``tol``) or the next one would exceed
  the cap;
* PyTorch CPU, float32, minibatches of ``batch_size`` rows: ``torch-sgd`` and
  ``torch-adam`` (full softmax: cross-entropy over all ``K`` classes) on a sparse
  linear layer, ``W x`` for sparse ``x``; two standard layouts exist and a short timed
  pilot picks the faster one per data set (:func:`torch_layouts`): ``embedding-bag``
  (``nn.EmbeddingBag(D, K, mode="sum", sparse=True)`` with the feature values as
  ``per_sample_weights``: sparse gradients, ``optim.SGD`` / ``optim.SparseAdam``) and
  ``sparse-mm`` (``torch.sparse.mm`` of the COO minibatch with a dense ``D x K``
  parameter: dense gradients, ``optim.SGD`` / ``optim.Adam``); ``torch-sampled``:
  sampled softmax with ``negatives`` classes drawn uniformly per minibatch and shared
  by its rows (TensorFlow's ``sampled_softmax_loss`` convention: the label's logit
  against the negatives' logits, a negative equal to the row's label masked, the
  ``log Q`` correction constant for a uniform proposal and so dropped), class rows in
  ``nn.Embedding(K, D, sparse=True)``, ``optim.SGD``. The torch runs use the same
  schedule as ours, ``lr * 0.9**(epoch - 1)``, at most ``max_epochs`` epochs.

Isolation and memory: :func:`run_isolated` runs jobs in a child process (``python -m
scalable_softmax.repro.peers child ...``) with ``RLIMIT_AS`` set to ``memory_cap_gb`` (an
allocation beyond it fails at once with ``MemoryError``, reported with its message),
the thread variables set to ``threads``, and a hard wall-clock limit (the child is
killed, its points so far kept). The peak memory is the child's maximum resident set
size from ``os.wait4`` (``ru_maxrss``): the interpreter, the libraries, the data, the
method's state and the evaluations' working memory together.

Candidates (:func:`candidates`): each rate of a method's grid times each of its
structural options; :func:`choose_rates` picks the one of the lowest validation
log-loss (the reference runs of :mod:`scalable_softmax.repro.race.targets`).
"""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scalable_softmax._atomic import atomic_open
from scalable_softmax.protocols import LR_DECAY
from scalable_softmax.validation import check_options

__all__ = ["METHODS", "LABELS", "RATE_METHODS", "Job", "checkpoint_times", "run_job",
           "setup_ours", "run_jobs", "run_isolated", "available", "torch_layouts",
           "classify_failure", "choose_rates", "save_problem", "PEER_STYLES", "plan_methods",
           "BATCH_IMPLICIT", "config_label", "candidates", "piece_seed", "Pieces"]

#: method -> family ("ours", "sklearn", "torch")
METHODS = {
    "implicit": "ours", "umax": "ours", "is": "ours", "exact": "ours",
    "implicit-batch": "ours", "implicit-batch-5": "ours", "softmax-sgd": "ours",
    "sklearn-lbfgs": "sklearn", "sklearn-saga": "sklearn",
    "torch-sgd": "torch", "torch-adam": "torch", "torch-sampled": "torch",
}
#: labels for tables and figures
LABELS = {
    "implicit": "Implicit SGD", "umax": "U-max",
    "implicit-batch": "Implicit SGD (n, m chosen)", "implicit-batch-5": "Implicit SGD (n=m=5)",
    "is": "IS (n chosen)",
    "exact": "L-BFGS (ours, exact)", "softmax-sgd": "softmax SGD (ours, full softmax)",
    "sklearn-lbfgs": "sklearn lbfgs",
    "sklearn-saga": "sklearn saga", "torch-sgd": "torch SGD (full softmax)",
    "torch-adam": "torch Adam (full softmax)",
    "torch-sampled": "torch sampled softmax (uniform)",
}
#: methods with a learning rate to choose
RATE_METHODS = ("implicit", "umax", "is", "implicit-batch", "implicit-batch-5", "softmax-sgd",
                "torch-sgd", "torch-adam", "torch-sampled")

_OUR_PROTOCOL = "paper-text"
#: the older switches of our trainers' threaded kernels, tried together with ``threads``
#: (and alone when a trainer does not know ``threads``): U-max's Hogwild kernel and
#: softmax SGD's class-parallel one; see :func:`_our_trainer`
_LEGACY_THREAD_OPTIONS = {"umax": {"hogwild": True}, "softmax-sgd": {"parallel": True}}
#: our runs' epochs are cut into pieces (:class:`Pieces`): the first is this fraction
#: of an epoch, the others last about PIECE_FRACTION of the cap (at least
#: MIN_PIECE_SECONDS: a kernel call costs tens of microseconds)
FIRST_PIECES = 256
PIECE_FRACTION = 1 / 64
MIN_PIECE_SECONDS = 0.01
#: minibatch Implicit SGD of notebook 12: method -> (batch_size n, n_sampled m); the
#: library trainer is ``implicit-batch``, with the paper-text settings of ``implicit``
BATCH_IMPLICIT = {"implicit-batch": (10, 10), "implicit-batch-5": (5, 5)}


def available(family: str) -> tuple[bool, str]:
    """``(True, version)`` if the peers of ``family`` can run here, else ``(False,
    reason)`` (the optional ``peers`` extra: ``pip install -e '.[peers]'``)."""
    mod = {"ours": None, "sklearn": "sklearn", "torch": "torch"}[family]
    if mod is None:
        return True, "scalable_softmax"
    import importlib.util
    try:
        found = importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return False, (f"{mod} is not installed (the optional 'peers' extra: "
                       "pip install -e '.[peers]')")
    import importlib.metadata
    return True, importlib.metadata.version("scikit-learn" if mod == "sklearn" else mod)


# ---------------------------------------------------------------------------
# jobs and the curve recorder
# ---------------------------------------------------------------------------

@dataclass
class Job:
    """One training run.

    data : a loader name (``scalable_softmax.data.load_dataset``) or the path of an
        ``.npz`` made by :func:`save_problem`.
    method : a key of :data:`METHODS`.
    lr : learning rate (None for ``exact`` and the sklearn methods).
    cap_seconds : training seconds after which the run stops (at the end of the piece
        of an epoch (ours, :class:`Pieces`), minibatch, L-BFGS iteration or fit that
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
    max_epochs : epochs of the stochastic methods (the schedule ``lr * 0.9**(e-1)``).
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


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------

def save_problem(path, X, y, Xt, yt, K):
    """Write a problem (training and test split) as an ``.npz`` a :class:`Job` can name."""
    import scipy.sparse as sp

    X, Xt = sp.csr_matrix(X), sp.csr_matrix(Xt)
    np.savez(path, indptr=X.indptr, indices=X.indices, data=X.data, shape=X.shape,
             y=np.asarray(y), t_indptr=Xt.indptr, t_indices=Xt.indices, t_data=Xt.data,
             t_shape=Xt.shape, t_y=np.asarray(yt), K=int(K))


def _load(data):
    """``(X, y, Xt, yt, K)`` of a loader name or an ``.npz`` of :func:`save_problem`."""
    import scipy.sparse as sp

    if str(data).endswith(".npz"):
        z = np.load(data)
        X = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        Xt = sp.csr_matrix((z["t_data"], z["t_indices"], z["t_indptr"]),
                           shape=tuple(z["t_shape"]))
        return X, z["y"].astype(np.int64), Xt, z["t_y"].astype(np.int64), int(z["K"])
    from scalable_softmax.data import load_dataset

    tr, te = load_dataset(data, "train"), load_dataset(data, "test")
    return tr.X, tr.y, te.X, te.y, int(tr.K)


def _subsample(X, y, rows, seed):
    if rows is None or rows >= X.shape[0]:
        return X, y
    sel = np.sort(np.random.default_rng([seed, 34]).choice(X.shape[0], rows, replace=False))
    return X[sel], y[sel]


def _problem(job: Job):
    """Training data and evaluation sets of a job (kept for the next job of the same
    child process that needs the same ones)."""
    key = (job.data, job.split, job.holdout, job.seed, job.eval_rows, job.split_seed)
    if _PROBLEM_CACHE.get("key") != key:
        _PROBLEM_CACHE.clear()                # one problem at a time: bounded memory
        _PROBLEM_CACHE.update(key=key, value=_make_problem(job))
    return _PROBLEM_CACHE["value"]


_PROBLEM_CACHE: dict = {}


def _make_problem(job: Job):
    from scalable_softmax.fit import as_csr

    X, y, Xt, yt, K = _load(job.data)
    X = as_csr(X, "X")
    if job.split == "race":
        from scalable_softmax.repro.race.split import validation_split

        fit_rows, val_rows = validation_split(X.shape[0], job.holdout, job.split_seed)
        # the validation subsample is the same for every seed of the race
        sets = {"val": _subsample(X[val_rows], y[val_rows], job.eval_rows, job.split_seed)}
        X, y = X[fit_rows], y[fit_rows]
    else:
        sets = {"train": _subsample(X, y, job.eval_rows, job.seed),
                "test": _subsample(as_csr(Xt, "Xt"), yt, job.eval_rows, job.seed)}
    return X, np.asarray(y, dtype=np.int64), K, sets


def _sealed_test(job: Job):
    """The test rows of a race job (``eval_rows`` of them, the same subsample for every
    seed), sealed (:class:`~scalable_softmax.repro.race.scoring.SealedTest`)."""
    from scalable_softmax.evaluate import evaluate
    from scalable_softmax.fit import as_csr
    from scalable_softmax.repro.race.scoring import SealedTest

    key = (job.data, job.eval_rows, job.split_seed)
    if _TEST_CACHE.get("key") != key:
        _TEST_CACHE.clear()
        _, _, Xt, yt, _ = _load(job.data)
        _TEST_CACHE.update(key=key, value=_subsample(as_csr(Xt, "Xt"), np.asarray(yt),
                                                     job.eval_rows, job.split_seed))
    Xt, yt = _TEST_CACHE["value"]

    def log_loss(X, y, model):
        W, layout = model
        return evaluate(X, y, W() if callable(W) else W, layout=layout).log_loss
    return SealedTest(Xt, yt, log_loss)


_TEST_CACHE: dict = {}


# ---------------------------------------------------------------------------
# runners: each returns (status, reason, info) and records points
# ---------------------------------------------------------------------------

def _our_trainer(method, library, X, y, K, threads, *, batch_size, n_sampled, kw):
    """Our ``library`` trainer for a job of ``method`` on ``threads`` threads.

    With ``threads > 1`` the trainer is asked for them by its ``threads`` option,
    together with the older switch of its threaded kernel (:data:`_LEGACY_THREAD_OPTIONS`);
    a trainer that refuses that (it does not know ``threads``, or not with its other
    options) is asked with ``threads`` alone, then with the older switch alone (which
    runs on the process's numba threads, ``threads`` of them in a child of
    :func:`run_isolated`), and at last with neither: it then runs on one thread.

    Returns ``(trainer, threads_used, thread_options, note)``: ``note`` says which
    requests were refused and why ("" if the first was taken).
    """
    from scalable_softmax.methods import get_trainer_class

    cls = get_trainer_class(library)
    legacy = dict(_LEGACY_THREAD_OPTIONS.get(method, {}))
    tries = [({}, 1)] if threads <= 1 else \
        [(dict(legacy, threads=threads), threads), ({"threads": threads}, threads)] \
        + ([(legacy, threads)] if legacy else []) + [({}, 1)]
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
        # benchmarks/bench_peers_configs.py); without them, BATCH_IMPLICIT's
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
    tr, used, thread_opts, note = _our_trainer(method, library, X, y, K, threads,
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


def _run_ours(job, X, y, K, rec):
    from scalable_softmax.fit import make_order

    tr, order, decay, run_info = setup_ours(job.method, job.options, X, y, K, job.threads)
    rng = np.random.default_rng(job.seed)
    N = X.shape[0]
    rec.record_start(tr.native_weights, epoch=0)
    status, reason = "completed", f"{job.max_epochs} epochs"
    pieces = Pieces(N, tr.batch_size, rec)
    for e in range(1, job.max_epochs + 1):
        rec.start()
        idx = make_order(rng, N, order)
        lr, seed = job.lr * decay ** (e - 1), int(rng.integers(0, 2 ** 63 - 1))
        a = 0
        while a < N:
            size = pieces.next_size(N - a)
            if a:
                rec.start()
            t0 = time.perf_counter()
            rep = tr.run_epoch(idx[a:a + size], lr, seed if a == 0 else piece_seed(seed, a))
            pieces.measured(size, time.perf_counter() - t0)
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
    return status, reason, dict(run_info, epochs=job.max_epochs)


def piece_seed(seed: int, start: int) -> int:
    """The seed of the piece of an epoch that starts at position ``start > 0`` of its
    order (the piece at 0 keeps the epoch's ``seed``, so an epoch run whole draws what
    ``fit`` draws): a SeedSequence of the two, as a 63-bit integer."""
    s0, s1 = np.random.SeedSequence([int(seed), int(start)]).generate_state(2, np.uint32)
    return int((int(s0) << 31) ^ int(s1)) & (2 ** 63 - 1)


class Pieces:
    """How many points of an epoch's order the next kernel call of one of our runs
    takes: whole steps (``batch``), meant to last about :data:`PIECE_FRACTION` of the
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

    def next_size(self, left):
        if self.rate is not None:
            target = max(MIN_PIECE_SECONDS, min(self.rec.cap * PIECE_FRACTION,
                                                self.rec.until_next()))
            want = self.batch * max(1, int(self.rate * target / self.batch))
            self.size = min(want, 4 * self.size)
        return min(self.size, left)

    def measured(self, points, seconds):
        if seconds > 0:
            self.rate = points / seconds


class _CapReached(Exception):
    """Raised inside the L-BFGS objective once the time cap has passed."""


def _run_exact(job, X, y, K, rec):
    import scipy.optimize

    from scalable_softmax.methods.full import ExactTrainer

    opts = dict(gtol=1e-8, memory=10)
    opts.update(job.options)
    tr = ExactTrainer(X, y, K, mu=0.0, iters_per_epoch=None, **opts)
    tr.init_params()
    tr.warmup()
    D = X.shape[1]
    rec.record_start(tr.W, iteration=0)
    state = {"it": 0, "stopped": False}

    def callback(intermediate_result):
        rec.stop()
        state["it"] += 1
        x = intermediate_result.x
        state["x"] = x.copy()    # (the clock is stopped here)
        if rec.over():
            rec.record((x.reshape(D, K), "feature"), iteration=state["it"])
            state["stopped"] = True
            raise StopIteration
        if rec.due():
            rec.record((x.reshape(D, K), "feature"), iteration=state["it"])
        rec.start()

    def fun(x):
        # a line search may evaluate several times per iteration: stop there too
        if rec.over():
            raise _CapReached
        return tr._fun(x)

    rec.start()
    x0 = np.ascontiguousarray(tr.W.T).ravel()
    try:
        res = scipy.optimize.minimize(
            fun, x0, jac=True, method="L-BFGS-B", callback=callback,
            options=dict(maxiter=100000, gtol=tr.opts["gtol"], ftol=0.0,
                         maxcor=tr.opts["memory"], maxfun=10 ** 7))
    except _CapReached:
        rec.stop()
        if "x" in state:       # the last accepted iterate, at the time the cap passed
            rec.record((state["x"].reshape(D, K), "feature"), iteration=state["it"])
        why = (f"the cap passed during L-BFGS iteration {state['it'] + 1} (after "
               f"{tr.nfev} objective evaluations)" if tr.nfev else
               "the cap passed before the first objective evaluation had finished")
        return "time cap", why, {"iterations": state["it"], "nfev": tr.nfev}
    rec.stop()
    info = {"iterations": int(res.nit), "message": str(res.message), "nfev": tr.nfev}
    if state["stopped"]:
        return "time cap", f"stopped after L-BFGS iteration {state['it']} at the cap", info
    rec.record((res.x.reshape(D, K), "feature"), iteration=int(res.nit))
    return "completed", f"L-BFGS stopped: {res.message} after {res.nit} iterations", info


def _sklearn_W(clf, K, D):
    """``K x D`` weights of a fitted LogisticRegression (a class absent from the training
    rows gets a zero row)."""
    coef = np.asarray(clf.coef_, dtype=np.float64)
    classes = np.asarray(clf.classes_, dtype=np.int64)
    if len(classes) == K and np.array_equal(classes, np.arange(K)):
        return np.ascontiguousarray(coef)
    W = np.zeros((K, D))
    if len(classes) == 2 and coef.shape[0] == 1:     # binary: sklearn keeps one row
        W[classes[1]] = coef[0] / 2
        W[classes[0]] = -coef[0] / 2
    else:
        W[classes] = coef
    return W


def _run_sklearn(job, X, y, K, rec):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    solver = job.method.split("-", 1)[1]
    D = X.shape[1]
    rec.record_start(lambda: np.zeros((K, D)), max_iter=0)
    max_iter, last_fit = 1, 0.0
    info = {"fits": 0}
    while True:
        clf = LogisticRegression(C=np.inf, solver=solver, fit_intercept=False,
                                 max_iter=max_iter, random_state=job.seed,
                                 **job.options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            c0, t0 = time.process_time(), time.perf_counter()
            clf.fit(X, y)
            last_fit = time.perf_counter() - t0
            rec.add_busy(last_fit, time.process_time() - c0)
        info["fits"] += 1
        n_iter = int(np.max(clf.n_iter_))
        # the point's seconds are this fit's wall time (from scratch)
        rec.seconds = last_fit
        rec.record(_sklearn_W(clf, K, D), max_iter=max_iter, n_iter=n_iter)
        if n_iter < max_iter:
            return "completed", (f"converged (sklearn tol) after {n_iter} iterations in "
                                 f"{last_fit:.3g} s"), info
        if last_fit >= rec.cap:
            return "time cap", f"the fit with max_iter={max_iter} took {last_fit:.3g} s", info
        if 2 * last_fit > rec.cap:
            return "time cap", (f"the next fit (max_iter={2 * max_iter}) would take about "
                                f"{2 * last_fit:.3g} s > the cap"), info
        max_iter *= 2


# --- torch -----------------------------------------------------------------

class _TorchData:
    """The CSR arrays as torch tensors, reordered once per epoch."""

    def __init__(self, X, y):
        import torch

        self.N, self.D = X.shape
        self.X = X
        self.y = y
        self.torch = torch

    def epoch(self, perm):
        torch = self.torch
        Xp = self.X[perm]
        self.indptr = torch.from_numpy(Xp.indptr.astype(np.int64))
        self.indices = torch.from_numpy(Xp.indices.astype(np.int64))
        self.values = torch.from_numpy(Xp.data.astype(np.float32))
        self.labels = torch.from_numpy(self.y[perm].astype(np.int64))

    def batch(self, a, b):
        s, e = int(self.indptr[a]), int(self.indptr[b])
        return (self.indices[s:e], self.indptr[a:b] - s, self.values[s:e],
                self.labels[a:b])

    def coo(self, a, b):
        torch = self.torch
        ind, off, val, lab = self.batch(a, b)
        counts = self.indptr[a + 1:b + 1] - self.indptr[a:b]
        rows = torch.repeat_interleave(torch.arange(b - a), counts)
        Xb = torch.sparse_coo_tensor(torch.stack([rows, ind]), val, size=(b - a, self.D),
                                     is_coalesced=True, check_invariants=False)
        return Xb, lab


def _torch_model(method, layout, D, K, lr):
    """``(params, forward(data, a, b) -> loss, optimizer, weights() -> (D x K float32,
    "feature"))``."""
    import torch
    import torch.nn.functional as F

    if method == "torch-sampled":
        raise AssertionError("use _run_torch_sampled")
    if layout == "embedding-bag":
        # zeros given as the weight: the default init draws D x K normals (1.9 s at
        # K = 30,000) that the zeros would overwrite; nothing later draws from torch's
        # generator in these runs (the order comes from NumPy)
        emb = torch.nn.EmbeddingBag(D, K, mode="sum", sparse=True,
                                    _weight=torch.zeros(D, K))
        params = list(emb.parameters())

        def loss(data, a, b):
            ind, off, val, lab = data.batch(a, b)
            return F.cross_entropy(emb(ind, off, per_sample_weights=val), lab)

        opt = (torch.optim.SGD(params, lr=lr) if method == "torch-sgd"
               else torch.optim.SparseAdam(params, lr=lr))
        weight = emb.weight
    elif layout == "sparse-mm":
        weight = torch.nn.Parameter(torch.zeros(D, K))
        params = [weight]

        def loss(data, a, b):
            Xb, lab = data.coo(a, b)
            return F.cross_entropy(torch.sparse.mm(Xb, weight), lab)

        opt = (torch.optim.SGD(params, lr=lr) if method == "torch-sgd"
               else torch.optim.Adam(params, lr=lr))
    else:
        raise ValueError(f"unknown torch layout {layout!r}; use 'embedding-bag' or "
                         "'sparse-mm'")

    def weights():    # D x K as stored: evaluated without a transpose
        return weight.detach().numpy(), "feature"

    return loss, opt, weights


#: the two layouts of the full-softmax torch models
TORCH_LAYOUTS = ("embedding-bag", "sparse-mm")

_BATCH = (100, {"type": "int", "min": 1})
#: the options of the torch peers: name -> (default, rule)
_TORCH_OPTIONS = {
    "torch-sampled": {"batch_size": _BATCH, "negatives": (100, {"type": "int", "min": 1})},
    **{m: {"batch_size": _BATCH, "layout": ("auto", {"one_of": ["auto", *TORCH_LAYOUTS]})}
       for m in ("torch-sgd", "torch-adam")},
}


_LAYOUT_CACHE: dict = {}


def torch_layouts(X, y, K, method, batch_size=100, batches=10, max_seconds=None,
                  threads=2, lr=1e-3, dense_bound=True):
    """Seconds per minibatch of each layout of ``method`` (``torch-sgd`` or
    ``torch-adam``): one untimed step, then up to ``batches`` timed steps (fewer if a
    layout has used ``max_seconds``, default :data:`PILOT_SECONDS`), on the first rows.

    A layout is not timed further (its entry is then its first step's seconds) when
    that untimed first step already took :data:`PILOT_GIVE_UP` times the best seconds
    per step so far (at K = 30,000 a step of the dense-gradient layout takes 1-4 s,
    against 0.01-1.7 s). The dense layout ("sparse-mm") is not built at all when a
    timed lower bound of its first step, :data:`DENSE_FIRST_STEP_PASSES` passes that
    allocate and zero a ``D x K`` array (its weights, their gradient and the
    optimiser's state each are one), already exceeds that bar (``dense_bound=False``:
    it is always built, for a benchmark of both layouts). A layout that runs out
    of memory (a child's address-space cap) gets ``inf``. Each layout's model is freed
    before the next one is built.

    Returns ``(seconds, notes)``: ``{layout: seconds per step}`` and ``{layout: why it
    was skipped or failed}`` for the layouts that were not timed in full.
    """
    import gc

    import torch

    if max_seconds is None:
        max_seconds = PILOT_SECONDS
    torch.set_num_threads(threads)
    data = _TorchData(X, y)
    n = min(X.shape[0], batch_size * (batches + 1))
    data.epoch(np.arange(n))
    D = X.shape[1]
    out, notes = {}, {}
    for layout in TORCH_LAYOUTS:
        best = min([v for v in out.values() if math.isfinite(v)], default=math.inf)
        if layout == "sparse-mm" and dense_bound and math.isfinite(best):
            t0 = time.perf_counter()
            for _ in range(DENSE_FIRST_STEP_PASSES):
                z = torch.zeros(D, K)
                del z
            bound = time.perf_counter() - t0
            if bound > PILOT_GIVE_UP * best:
                out[layout] = bound
                notes[layout] = (f"not built: {DENSE_FIRST_STEP_PASSES} D x K passes took "
                                 f"{bound:.3g} s, above {PILOT_GIVE_UP:g} x the best "
                                 f"{best:.3g} s per step")
                continue
        failed = None
        try:
            out[layout], note = _time_layout(method, layout, data, n, D, K, lr,
                                             batch_size, best, max_seconds)
            if note:
                notes[layout] = note
        except (Exception, MemoryError) as exc:  # noqa: BLE001 -- memory only
            if classify_failure(exc) != "memory":
                raise
            # the message, not the exception: its traceback's frames hold the failed
            # layout's tensors
            failed = f"{type(exc).__name__}: {str(exc)[:200]}"
        if failed is not None:
            out[layout] = math.inf
            notes[layout] = "out of memory: " + failed
            gc.collect()     # after the except clause, which kept the frames alive
    return out, notes


def _time_layout(method, layout, data, n, D, K, lr, batch_size, best, max_seconds):
    """``(seconds per step, note)`` of one layout in :func:`torch_layouts` (its model is
    freed when this returns)."""
    loss, opt, _ = _torch_model(method, layout, D, K, lr)
    t0, steps, t_first = time.perf_counter(), 0, math.nan
    note = ""
    for s, a in enumerate(range(0, n, batch_size)):
        opt.zero_grad()
        loss(data, a, min(a + batch_size, n)).backward()
        opt.step()
        if s == 0:
            t_first = time.perf_counter() - t0
            if t_first > PILOT_GIVE_UP * best:
                note = (f"first step only: {t_first:.3g} s, above {PILOT_GIVE_UP:g} x the "
                        f"best {best:.3g} s per step")
                break
            t0 = time.perf_counter()
            continue
        steps += 1
        if time.perf_counter() - t0 > max_seconds:
            break
    return ((time.perf_counter() - t0) / steps if steps else t_first), note


#: see :func:`torch_layouts`
PILOT_GIVE_UP = 3.0
#: the seconds of timed steps a layout gets at most in :func:`torch_layouts`
PILOT_SECONDS = 0.5
#: ``D x K`` passes in the lower bound of the dense layout's first step (its weights,
#: their gradient, and the optimiser's state: one for SGD, two for Adam, of which one is
#: counted; the product of the sparse minibatch with the weights is not)
DENSE_FIRST_STEP_PASSES = 3


def _choose_layout(job, X, y, K, B):
    """``(layout, seconds, notes)``: the faster layout by :func:`torch_layouts` (cached
    per data set, method and minibatch size within this process, failures included).
    Raises ``MemoryError`` when every layout ran out of memory."""
    key = (job.data, job.split, job.method, B)
    if key not in _LAYOUT_CACHE:
        t, notes = torch_layouts(X, y, K, job.method, batch_size=B, threads=job.threads)
        _LAYOUT_CACHE[key] = (min(t, key=lambda k: t[k]), t, notes)
    layout, t, notes = _LAYOUT_CACHE[key]
    if not math.isfinite(t[layout]):
        raise MemoryError("every torch layout ran out of memory in the pilot: "
                          + "; ".join(f"{k}: {v}" for k, v in notes.items()))
    return layout, t, notes


def _run_torch(job, X, y, K, rec):
    import torch

    torch.set_num_threads(job.threads)
    torch.manual_seed(job.seed)
    opts = check_options(_TORCH_OPTIONS[job.method], job.options, job.method)
    B = opts["batch_size"]
    N, D = X.shape
    data = _TorchData(X, y)
    info = {"batch_size": B}
    if job.method == "torch-sampled":
        m = opts["negatives"]
        info["negatives"] = m
        loss, opt, weights = _torch_sampled(D, K, job.lr, m)
    else:
        layout = opts["layout"]
        if layout == "auto":
            layout, pilot, notes = _choose_layout(job, X, y, K, B)
            info["layout_pilot_seconds_per_step"] = pilot
            if notes:
                info["layout_pilot_notes"] = notes
        info["layout"] = layout
        loss, opt, weights = _torch_model(job.method, layout, D, K, job.lr)
    rng = np.random.default_rng(job.seed)
    rec.record_start(weights, epoch=0, steps=0)
    steps = 0
    for e in range(1, job.max_epochs + 1):
        for g in opt.param_groups:
            g["lr"] = job.lr * LR_DECAY ** (e - 1)
        rec.start()
        data.epoch(rng.permutation(N))
        for a in range(0, N, B):
            opt.zero_grad()
            L = loss(data, a, min(a + B, N))
            if not torch.isfinite(L):
                rec.stop()
                rec.record(None, epoch=e - 1 + a / N, steps=steps)
                return "diverged", f"non-finite loss in epoch {e}", dict(info, steps=steps)
            L.backward()
            opt.step()
            steps += 1
            end = a + B >= N
            if rec.over() and not (end and e == job.max_epochs):
                rec.stop()
                rec.record(weights, epoch=e - 1 + min(a + B, N) / N, steps=steps)
                return "time cap", (f"stopped at the cap in epoch {e} after {steps} "
                                    "minibatches"), dict(info, steps=steps)
            if rec.due() and not end:
                rec.record(weights, epoch=e - 1 + (a + B) / N, steps=steps)
        rec.stop()
        if rec.due() or e == job.max_epochs:
            rec.record(weights, epoch=e, steps=steps)
    return "completed", f"{job.max_epochs} epochs", dict(info, steps=steps)


def _torch_sampled(D, K, lr, m):
    import torch
    import torch.nn.functional as F

    # class rows, from given zeros: the default init draws K x D normals (2.8 s at
    # K = 30,000) that zeros would overwrite, and moves the generator the negatives
    # are then drawn from
    emb = torch.nn.Embedding(K, D, sparse=True, _weight=torch.zeros(K, D))
    opt = torch.optim.SGD(emb.parameters(), lr=lr)

    def loss(data, a, b):
        ind, off, val, lab = data.batch(a, b)
        neg = torch.randint(0, K, (m,))
        cand, inv = torch.unique(torch.cat([lab, neg]), return_inverse=True)
        Wc = emb(cand)                                          # |cand| x D
        # the sparse gradient of emb must be built from a contiguous gradient (torch
        # 2.13 otherwise fails in the optimiser step with "a view of a leaf Variable")
        Wc.register_hook(lambda g: g.contiguous())
        logits = F.embedding_bag(ind, Wc.t(), off, per_sample_weights=val,
                                 mode="sum")                    # B x |cand|
        n = b - a
        true = logits.gather(1, inv[:n, None])
        negl = logits[:, inv[n:]]
        negl = negl.masked_fill(neg[None, :] == lab[:, None], float("-inf"))
        z = torch.cat([true, negl], dim=1)
        return F.cross_entropy(z, torch.zeros(n, dtype=torch.long))

    def weights():
        return emb.weight.detach().numpy()

    return loss, opt, weights


_RUNNERS = {"ours": _run_ours, "sklearn": _run_sklearn, "torch": _run_torch}


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
        X, y, K, sets = problem if problem is not None else _problem(job)
        out["load_seconds"] = time.perf_counter() - t0
        watch = sealed = None
        if job.targets:
            from scalable_softmax.repro.race.scoring import TargetWatch

            watch = TargetWatch(job.targets, job.cap_seconds)
            sealed = _sealed_test(job) if job.report_test else None
        rec = _Recorder(sets, job.checkpoints, job.cap_seconds, on_point, watch, sealed)
        rec.start_point = job.split == "final"     # a race run scores from its first checkpoint
        family = METHODS[job.method]
        runner = _run_exact if job.method == "exact" else _RUNNERS[family]
        status, reason, info = runner(job, X, y, K, rec)
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
    (:func:`~scalable_softmax.repro.timing.reset_peak_rss`), so that each result's
    ``peak_rss_bytes`` is that job's own peak (its ``peak_rss_reset`` says whether the
    reset took effect; where it did not, the peak is the process's so far), and
    ``rss_at_reset_bytes`` the resident set it started from. Reference
    cycles are collected after the first job (PyTorch's first optimiser step in a
    process leaves its model in a cycle, once: 1.2 GB at K = 30,000) and after a job's
    memory failure, so that the next job starts without them.
    """
    import gc

    from scalable_softmax.repro.timing import peak_rss_bytes, reset_peak_rss, rss_bytes

    results = []

    def flush(partial=None):
        if out_path is None:
            return
        _atomic_json(out_path, results + ([partial] if partial else []))

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


def _atomic_json(path, payload):
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


# ---------------------------------------------------------------------------
# the child process
# ---------------------------------------------------------------------------

def run_isolated(jobs, *, memory_cap_gb: float = 8.0, wall_seconds: float = 600.0,
                 threads: int = 2, workdir=None) -> dict:
    """Run ``jobs`` (a list of :class:`Job`) in a child process.

    The child sets ``RLIMIT_AS`` to ``memory_cap_gb`` before importing anything heavy,
    runs with ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` /
    ``NUMBA_NUM_THREADS`` set to ``threads``, and is killed after ``wall_seconds``.

    Returns ``{"results": [...], "max_rss_bytes", "returncode", "killed", "wall_seconds",
    "log"}``: the results of the jobs that ran (a job cut short by the kill keeps its
    points, with ``status = "killed"`` and the reason), the child's peak resident set
    size (``os.wait4``), and the tail of its output.
    """
    import subprocess

    jobs = [j if isinstance(j, Job) else Job(**j) for j in jobs]
    work = Path(workdir or tempfile.mkdtemp(prefix="peers-"))
    work.mkdir(parents=True, exist_ok=True)
    fd, jobs_path = tempfile.mkstemp(prefix="jobs-", suffix=".json", dir=work)
    os.close(fd)
    out_path = Path(jobs_path).with_name(Path(jobs_path).stem + "-out.json")
    log_path = Path(jobs_path).with_suffix(".log")
    _atomic_json(jobs_path, {"memory_cap_bytes": int(memory_cap_gb * 2 ** 30),
                             "jobs": [asdict(j) for j in jobs]})
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS"):
        env[var] = str(threads)
    lib = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = lib + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "scalable_softmax.repro.peers", "child",
                                 jobs_path, str(out_path)], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
        killed = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > wall_seconds:
                proc.kill()
                killed = True
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    try:
        results = json.loads(out_path.read_text())
    except (OSError, ValueError):
        results = []
    tail = log_path.read_text()[-2000:] if log_path.exists() else ""
    done = len([r for r in results if r.get("status") != "running"])
    for r in results:
        if r.get("status") == "running":
            r["status"] = "killed" if killed else "crashed"
            r["reason"] = (f"killed at the wall-clock limit of {wall_seconds:.0f} s"
                           if killed else f"the child died (exit code {proc.returncode})")
    for j in jobs[len(results):]:
        results.append({"job": asdict(j), "points": [], "info": {},
                        "status": "killed" if killed else "crashed",
                        "reason": (f"not started: the child was killed at the wall-clock "
                                   f"limit of {wall_seconds:.0f} s" if killed else
                                   f"not started: the child died (exit code "
                                   f"{proc.returncode}): {tail[-300:]}")})
    for p in (jobs_path, out_path):
        try:
            os.unlink(p)
        except OSError:
            pass
    return {"results": results, "max_rss_bytes": int(usage.ru_maxrss) * 1024,
            "returncode": proc.returncode, "killed": killed, "wall_seconds": wall,
            "jobs_done": done, "log": tail}


def _child(jobs_path, out_path):
    import resource

    spec = json.loads(Path(jobs_path).read_text())
    cap = int(spec["memory_cap_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    jobs = [Job(**j) for j in spec["jobs"]]
    _atomic_json(out_path, [])
    run_jobs(jobs, out_path)
    return 0



def config_label(options) -> str:
    """A candidate configuration's structural options as text (``""`` for none):
    ``n=5 m=20`` for minibatch Implicit SGD's ``batch_size`` and ``n_sampled``, else
    ``name=value`` pairs (``batch_size=100``, ``negatives=100``, ``n_sampled=5``)."""
    options = dict(options or {})
    if set(options) == {"batch_size", "n_sampled"}:
        return f"n={options['batch_size']} m={options['n_sampled']}"
    return " ".join(f"{k}={v}" for k, v in sorted(options.items()))


def candidates(method, grids, structures=None):
    """The candidate configurations of ``method`` under notebook 12's rule: every rate
    of ``grids[method]`` times every structural option of ``structures[method]`` (a list
    of option dicts; none: one, ``{}``), as ``[(lr, options), ...]`` in structure-major
    order."""
    structs = (structures or {}).get(method) or [{}]
    return [(float(lr), dict(s)) for s in structs for lr in grids[method]]


def choose_rates(tuning: pd.DataFrame) -> pd.DataFrame:
    """The rule: per data set and method, the candidate configuration (rate, and
    structural option when ``tuning`` has a ``config`` column) with the lowest held-out
    log-loss at the end of the tuning budget (ties: the first structural option in the
    order tried, then the smaller rate; a diverged or failed run scores inf).

    Columns ``dataset``, ``method``, ``lr``, ``val_log_loss``, ``grid`` (the rates of
    the chosen structural option), ``at_grid_edge`` (the chosen rate at the
    ``"lowest"`` or ``"highest"`` end of that grid, or ``""``), ``layout``,
    ``all_failed`` (every candidate scored inf: the first structural option's smallest
    rate is used), ``config``, ``options`` (JSON of the chosen structural options,
    ``"{}"`` for none), ``candidates`` (how many were tried) and ``configs`` (the
    structural options tried, ``" | "``-separated)."""
    out = []
    tuning = tuning.copy()
    if "config" not in tuning:
        tuning["config"], tuning["options"] = "", "{}"
    for (d, m), g in tuning.groupby(["dataset", "method"], sort=False):
        configs = list(dict.fromkeys(g.config))
        g = g.assign(_c=g.config.map({c: i for i, c in enumerate(configs)}))
        g = g.sort_values(["_c", "lr"], kind="stable")
        v = g.val_log_loss.to_numpy(dtype=float)
        i = int(np.argmin(np.where(np.isfinite(v), v, np.inf))) if np.isfinite(v).any() else 0
        best = g.iloc[i]
        same = g[g.config == best.config]
        lrs = same.lr.to_list()
        j = lrs.index(best.lr)
        edge = "" if len(lrs) < 2 else ("lowest" if j == 0 else
                                        "highest" if j == len(lrs) - 1 else "")
        out.append(dict(dataset=d, method=m, lr=float(best.lr), val_log_loss=float(v[i]),
                        grid=" ".join(f"{x:g}" for x in lrs), at_grid_edge=edge,
                        layout=best.layout if "layout" in g else "",
                        all_failed=not np.isfinite(v).any(), config=best.config,
                        options=best.options, candidates=len(g),
                        configs=" | ".join(configs)))
    return pd.DataFrame(out)




#: the peers' line styles in the figures (colour index into the collection's series
#: colours, line style, marker); ours use the collection's method styles. The torch
#: methods take the series' green and cyan: its wine and purple were hard to tell from
#: each other and from IS's pink and the minibatch Implicit SGD's dark brown
PEER_STYLES = {"sklearn-lbfgs": (2, "--", "D"), "sklearn-saga": (3, "--", "v"),
               "torch-sgd": (8, ":", "o"), "torch-adam": (5, ":", "s"),
               "torch-sampled": (7, ":", "^")}


#: our methods drawn in a series colour instead of their method colour (index into the
#: collection's series colours): softmax SGD's method colour is the exact softmax's
#: black, which L-BFGS (``exact``) has too; its grey is 35 or more (CIE76) from every
#: other series of the figures
OUR_SERIES_COLORS = {"softmax-sgd": 0}


def series_color(method: str) -> str:
    """The colour of ``method``'s series in notebook 12's figures: the peers' from
    :data:`PEER_STYLES`, ours from :data:`OUR_SERIES_COLORS` or the method styles."""
    from scalable_softmax.repro import style

    if method in PEER_STYLES:
        return style.SERIES_COLORS[PEER_STYLES[method][0]]
    if method in OUR_SERIES_COLORS:
        return style.SERIES_COLORS[OUR_SERIES_COLORS[method]]
    return style.color(method)


def plan_methods(methods, datasets, caps):
    """Check the requested ``methods`` and ``caps`` and find which methods can run here.

    Returns ``(run_methods, skipped, versions)``: the methods whose library is
    installed (in the requested order), ``{method: reason}`` for the others, and
    ``{family: versions}`` of the available families.

    Raises
    ------
    ValueError
        On a method not in :data:`METHODS` or a data set without a cap.
    """
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    missing = [d for d in datasets if d not in caps]
    if missing:
        raise ValueError(f"caps has no entry for {missing}: give every data set a cap "
                         "in training seconds")
    skipped, versions = {}, {}
    for family in ("ours", "sklearn", "torch"):
        ok, what = available(family)
        if ok:
            versions[family] = what
        else:
            skipped.update({m: what for m in methods if METHODS[m] == family})
    return [m for m in methods if m not in skipped], skipped, versions


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 3 and argv[0] == "child":
        return _child(argv[1], argv[2])
    print("usage: python -m scalable_softmax.repro.peers child JOBS.json OUT.json "
          "(used by scalable_softmax.repro.peers.run_isolated)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
