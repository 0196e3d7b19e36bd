"""Cached training runs for the notebooks: one :class:`RunSpec` -> one :class:`RunResult`.

The experiment notebooks (02 per-data-set runs, 03 learning-rate tuning, 04 sensitivity,
06 paper tables) describe every training run they need as a :class:`RunSpec` (data set,
method, learning rate, seed, epochs, training fraction, evaluation settings, method
options) and call :func:`run_all`. A run's result is stored in
``build/runs/<key>.json`` where ``key`` hashes the spec together with
:data:`CODE_VERSION` (a hash of the library sources a run depends on), so

* a notebook re-executed with the same settings and code reads its runs back instead of
  training again,
* two notebooks that need the same run (e.g. notebook 04's run at the tuned rate and
  notebook 02's seed 0) train it once,
* any change to the optimisers, the evaluator or the data layer invalidates every
  stored result (nothing stale is ever reused).

Evaluation (docs/math.md section 1: the exact log-loss over all ``K`` classes):

* **monitoring** at the paper's 10 evenly spaced epochs (and epoch 0) on a fixed,
  seeded subsample of ``monitor_rows`` training rows (all rows when the set is
  smaller): the learning curves;
* **final**: the exact log-loss, error and the original code's defective metric of the
  final weights on the *whole* training set (the training fraction used) and the whole
  test set, unless ``final_rows`` caps them.

Runs are independent, so :func:`run_all` can train ``workers`` of them at once in
separate processes (the training kernels are single-threaded). Timings measured that
way share the machine's memory bandwidth; notebook 07 measures runtimes alone.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from . import paths

__all__ = ["RunSpec", "RunResult", "run", "run_all", "results_frame", "histories_frame",
           "CODE_VERSION", "default_cache_dir", "PAPER_METHODS", "PAPER_DATASETS",
           "PAPER_TABLE2", "PAPER_TABLE3", "dataset_for", "load_split"]

#: the six methods of the paper's experiments, in its column order
PAPER_METHODS = ("ove", "nce", "is", "vanilla", "umax", "implicit")
#: the paper's seven data sets (our loader names of the real data; the four
#: XMLRepository sets fall back to their ``-surrogate``, see :func:`dataset_for`)
PAPER_DATASETS = ("mnist", "bibtex", "delicious", "eurlex", "amazoncat", "wiki10",
                  "wikismall")

#: the paper's Table 2 (tuned initial learning rates), docs/math.md section 10
PAPER_TABLE2 = {
    "mnist":     dict(ove=1e1, nce=1e1, **{"is": 1e1}, vanilla=1e-2, umax=1e1, implicit=1e-1),
    "bibtex":    dict(ove=1e2, nce=1e2, **{"is": 1e2}, vanilla=1e-2, umax=1e-1, implicit=1e1),
    "delicious": dict(ove=1e1, nce=1e3, **{"is": 1e3}, vanilla=1e-3, umax=1e-2, implicit=1e-2),
    "eurlex":    dict(ove=1e-1, nce=1e2, **{"is": 1e2}, vanilla=1e-3, umax=1e-1, implicit=1e1),
    "amazoncat": dict(ove=1e1, nce=1e3, **{"is": 1e3}, vanilla=1e-5, umax=1e-2, implicit=1e-3),
    "wiki10":    dict(ove=1e-2, nce=1e3, **{"is": 1e2}, vanilla=1e-4, umax=1e-2, implicit=1e0),
    "wikismall": dict(ove=1e3, nce=1e3, **{"is": 1e3}, vanilla=1e-4, umax=1e-3, implicit=1e-3),
}
#: the paper's Table 3 (train log-loss after 50 epochs / Implicit SGD's), docs/math.md
#: section 10; its OVE, NCE and IS columns used the defective metric (section 1)
PAPER_TABLE3 = {
    "mnist":     dict(ove=5.73, nce=6.05, **{"is": 5.74}, vanilla=1.43, umax=1.56, implicit=1.00),
    "bibtex":    dict(ove=29.03, nce=28.52, **{"is": 32.71}, vanilla=15.18, umax=9.77,
                      implicit=1.00),
    "delicious": dict(ove=1.90, nce=1.91, **{"is": 1.89}, vanilla=1.25, umax=1.11, implicit=1.00),
    "eurlex":    dict(ove=6.47, nce=6.39, **{"is": 6.38}, vanilla=3.59, umax=2.11, implicit=1.00),
    "amazoncat": dict(ove=2.12, nce=2.15, **{"is": 2.12}, vanilla=1.47, umax=0.98, implicit=1.00),
    "wiki10":    dict(ove=7.04, nce=7.13, **{"is": 6.97}, vanilla=5.99, umax=2.39, implicit=1.00),
    "wikismall": dict(ove=1.02, nce=1.36, **{"is": 1.35}, vanilla=1.15, umax=1.03, implicit=1.00),
}
#: the paper's "Average" row of Table 3
PAPER_TABLE3_AVERAGE = dict(ove=7.62, nce=7.64, **{"is": 8.17}, vanilla=4.29, umax=2.71,
                            implicit=1.00)

#: library sources whose change invalidates stored runs
_VERSIONED = ("fit.py", "evaluate.py", "lambertw.py", "_kernels.py", "_jit.py",
              "experiments.py", "protocols.py", "objectives.py", "methods", "data")


def _code_version() -> str:
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for entry in _VERSIONED:
        p = root / entry
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]


#: hash of the library sources a run depends on (part of every cache key)
CODE_VERSION = _code_version()


def default_cache_dir() -> Path:
    """``$SOFTMAX_RUN_CACHE`` or ``build/runs``."""
    env = os.environ.get("SOFTMAX_RUN_CACHE")
    return Path(env) if env else paths.BUILD / "runs"


def dataset_for(paper_name: str, prefer_real: bool = True) -> str:
    """Our loader name for one of the paper's data sets: the real files when they are in
    the data directory, else the synthetic ``-surrogate`` (for the four XMLRepository
    sets, which cannot be shipped)."""
    from .data import SURROGATE_DATASETS, MissingDataError, load_dataset

    if paper_name not in PAPER_DATASETS:
        raise ValueError(f"unknown paper data set {paper_name!r}; choose one of "
                         f"{', '.join(PAPER_DATASETS)}")
    sur = f"{paper_name}-surrogate"
    if sur not in SURROGATE_DATASETS:
        return paper_name
    if prefer_real:
        try:
            load_dataset(paper_name, "train")
            return paper_name
        except MissingDataError:
            pass
    return sur


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything that determines one training run.

    Attributes
    ----------
    dataset : loader name (``scalable_softmax.data.load_dataset``).
    method : a :data:`scalable_softmax.methods.METHODS` key.
    lr : initial learning rate (the per-datapoint units of docs/math.md section 2.3).
    seed : seed of the run (data order, sampled classes, monitoring subsample).
    epochs, lr_decay : 50 and 0.9 in the paper.
    train_fraction : train on a seeded random subset of this fraction of the training
        set (the paper tunes on 10%); the subset depends only on ``subset_seed`` so
        every method and rate sees the same points.
    subset_seed : seed of that subset.
    monitor_rows : rows of the (used) training set for the monitoring evaluations
        (None: all).
    eval_epochs : epochs to monitor (None: epoch 0 and 10 evenly spaced epochs).
    final_rows : cap on the rows of the final exact evaluation of each set (None: all).
    test : also evaluate the final weights on the test split.
    u_init : initial ``u`` of the double-sum methods: ``"logK"`` (default) as in the
        paper's Algorithm 1 (``u_i <- log K``, the optimal ``u`` at ``W = 0``), or
        ``"zero"``. Vanilla SGD at the paper's Table 2 rates overflows from ``u = 0``
        but not from ``u = log K`` (notebook 02).
    subset : how the ``train_fraction`` subset is chosen: ``"random"`` (seeded by
        ``subset_seed``, kept in file order) or ``"head"`` (the first rows in file
        order, as the authors' code tuned its rates).
    protocol : None, or a name of :data:`scalable_softmax.protocols.PROTOCOLS`: the
        run trains with ``fit_kwargs(protocol, method)`` (data order, class sampling,
        ``u`` start, passes, minibatch conventions); :meth:`make` copies the protocol's
        ``lr_decay`` and ``u_init`` into those fields. ``options`` override the
        protocol's other arguments.
    options : method options and ``batch_size`` / ``n_sampled`` / ``mu`` / ``order``,
        as a tuple of ``(name, value)`` pairs (use :meth:`make`).
    """

    dataset: str
    method: str
    lr: float
    seed: int = 0
    epochs: int = 50
    lr_decay: float = 0.9
    train_fraction: float = 1.0
    subset_seed: int = 0
    monitor_rows: int | None = 2000
    eval_epochs: tuple | None = None
    final_rows: int | None = None
    test: bool = True
    u_init: str = "logK"
    subset: str = "random"
    protocol: str | None = None
    options: tuple = ()

    @classmethod
    def make(cls, dataset, method, lr, **kw) -> "RunSpec":
        """Build a spec; keyword arguments that are not fields go to ``options``."""
        fields = {f.name for f in dataclasses.fields(cls)}
        opts = {k: kw.pop(k) for k in list(kw) if k not in fields}
        if "options" in kw:
            opts.update(dict(kw.pop("options")))
        if kw.get("eval_epochs") is not None:
            kw["eval_epochs"] = tuple(int(e) for e in kw["eval_epochs"])
        if kw.get("protocol") is not None:
            from .protocols import fit_kwargs

            pk = fit_kwargs(kw["protocol"], method)
            for nm in ("lr_decay", "u_init"):
                if nm in pk:
                    if nm in kw and kw[nm] != pk[nm]:
                        raise ValueError(
                            f"RunSpec.{nm}={kw[nm]!r} contradicts protocol "
                            f"{kw['protocol']!r}, which sets {nm}={pk[nm]!r}; leave it out")
                    kw[nm] = pk[nm]
        spec = cls(dataset=str(dataset), method=str(method), lr=float(lr),
                   options=tuple(sorted(opts.items())), **kw)
        spec.validate()
        return spec

    def validate(self) -> None:
        """Raise ``ValueError`` naming the bad field (before any work is done)."""
        from .methods import METHODS

        if self.method not in METHODS:
            raise ValueError(f"RunSpec.method: unknown method {self.method!r}; choose one "
                             f"of {', '.join(sorted(METHODS))}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"RunSpec.lr must be a finite number > 0; got {self.lr!r}")
        if not (isinstance(self.epochs, int) and self.epochs >= 1):
            raise ValueError(f"RunSpec.epochs must be an integer >= 1; got {self.epochs!r}")
        if not (0 < self.train_fraction <= 1):
            raise ValueError("RunSpec.train_fraction must lie in (0, 1]; got "
                             f"{self.train_fraction!r}")
        if self.u_init not in ("logK", "zero"):
            raise ValueError(f"RunSpec.u_init must be 'logK' or 'zero'; got {self.u_init!r}")
        if self.subset not in ("random", "head"):
            raise ValueError(f"RunSpec.subset must be 'random' or 'head'; got {self.subset!r}")
        if self.protocol is not None:
            from .protocols import fit_kwargs

            try:
                fit_kwargs(self.protocol, self.method)
            except ValueError as exc:
                raise ValueError(f"RunSpec.protocol: {exc}") from None
        for nm in ("monitor_rows", "final_rows"):
            v = getattr(self, nm)
            if v is not None and not (isinstance(v, int) and v >= 1):
                raise ValueError(f"RunSpec.{nm} must be None or an integer >= 1; got {v!r}")
        try:
            json.dumps(self.options)
        except TypeError:
            raise ValueError(f"RunSpec.options must hold plain values (numbers, strings); "
                             f"got {self.options!r}") from None

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["options"] = dict(self.options)
        d["eval_epochs"] = list(self.eval_epochs) if self.eval_epochs is not None else None
        return d

    @property
    def key(self) -> str:
        """Cache key: hash of the spec and :data:`CODE_VERSION`."""
        blob = json.dumps({"spec": self.as_dict(), "code": CODE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


@dataclasses.dataclass
class RunResult:
    """The stored outcome of one run.

    Attributes
    ----------
    spec : RunSpec
    history : DataFrame, :class:`~scalable_softmax.fit.FitResult.history` with the
        ``train_*`` metrics on the monitoring subsample at the monitored epochs.
    final : dict with ``train_log_loss``, ``train_error``, ``train_defective``,
        ``train_rows`` and (if ``spec.test``) the same for ``test_``; ``diverged``,
        ``diverged_at`` (epoch, step) or None, ``epochs_run``, ``train_seconds`` (training
        time, compilation and evaluation excluded), ``seconds_per_epoch``, ``N``, ``D``,
        ``K``, ``synthetic``, ``wall_seconds`` (the whole run with evaluations), and
        its parts: ``load_seconds`` (data), ``setup_seconds`` (trainer set-up and
        compilation), ``train_seconds``, ``monitor_eval_seconds`` (the monitoring
        evaluations), ``final_eval_seconds`` and ``other_seconds`` (bookkeeping).
    from_cache : bool, read back from the cache rather than trained now.
    """

    spec: RunSpec
    history: pd.DataFrame
    final: dict
    from_cache: bool = False


@functools.lru_cache(maxsize=16)
def load_split(dataset: str, split: str, train_fraction: float = 1.0, subset_seed: int = 0,
               subset: str = "random"):
    """``(X, y, K, synthetic)`` of a split; the training split can be cut to a
    ``train_fraction`` of its rows: a seeded random subset kept in file order
    (``subset="random"``) or the first rows (``"head"``)."""
    from .data import load_dataset

    ds = load_dataset(dataset, split)
    X, y = ds.X, ds.y
    if split == "train" and train_fraction < 1:
        n = max(1, int(round(train_fraction * ds.N)))
        if subset == "head":
            rows = np.arange(n)
        else:
            rows = np.sort(np.random.default_rng(subset_seed).choice(ds.N, n, replace=False))
        X, y = X[rows], y[rows]
    return X, y, ds.K, bool(ds.synthetic)


def _evaluate_set(X, y, W, cap, seed):
    from .evaluate import evaluate

    sub = cap if (cap is not None and cap < X.shape[0]) else None
    res = evaluate(X, y, W, subsample=sub, seed=seed)
    return dict(log_loss=float(res.log_loss), error=float(res.error),
                defective=float(res.defective), rows=int(res.n_rows))


def _train(spec: RunSpec) -> tuple[pd.DataFrame, dict]:
    from .fit import fit

    t0 = time.perf_counter()
    X, y, K, synthetic = load_split(spec.dataset, "train", spec.train_fraction,
                                    spec.subset_seed, spec.subset)
    t_loaded = time.perf_counter()
    opts = {}
    if spec.protocol is not None:
        from .protocols import fit_kwargs

        opts = fit_kwargs(spec.protocol, spec.method)
        opts.pop("lr_decay", None)
        opts.pop("u_init", None)
    opts.update(dict(spec.options))
    res = fit(X, y, spec.method, spec.lr, epochs=spec.epochs, lr_decay=spec.lr_decay,
              seed=spec.seed, K=K, progress=False, eval_rows=spec.monitor_rows,
              u_init=spec.u_init,
              eval_epochs=list(spec.eval_epochs) if spec.eval_epochs is not None else None,
              **opts)
    h = res.history
    epochs_run = int(h.epoch.iloc[-1])
    train_seconds = float(h.seconds.iloc[-1])
    final = dict(N=int(X.shape[0]), D=int(X.shape[1]), K=int(K), synthetic=synthetic,
                 diverged=bool(res.diverged),
                 diverged_at=list(res.diverged_at) if res.diverged else None,
                 epochs_run=epochs_run, train_seconds=train_seconds,
                 seconds_per_epoch=train_seconds / max(epochs_run, 1))
    t_fitted = time.perf_counter()
    sets = {"train": (X, y)}
    if spec.test:
        Xt, yt, _, _ = load_split(spec.dataset, "test")
        sets["test"] = (Xt, yt)
    t_final = time.perf_counter()
    for name, (Xe, ye) in sets.items():
        if res.diverged:
            m = dict(log_loss=math.inf, error=math.nan, defective=math.nan, rows=0)
        else:
            m = _evaluate_set(Xe, ye, res.W, spec.final_rows, spec.seed)
        final.update({f"{name}_{k}": v for k, v in m.items()})
    t_end = time.perf_counter()
    # where the run's wall time went (the parts add up to wall_seconds)
    fit_t = res.timings
    final.update(
        load_seconds=(t_loaded - t0) + (t_final - t_fitted),
        setup_seconds=fit_t["setup"],
        monitor_eval_seconds=fit_t["eval"],
        final_eval_seconds=t_end - t_final,
        other_seconds=(t_fitted - t_loaded) - fit_t["setup"] - fit_t["eval"] - train_seconds)
    final["wall_seconds"] = t_end - t0
    return h, final


def _to_json(v):
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)          # 'inf', 'nan'
    if isinstance(v, (np.floating, np.integer, np.bool_)):
        return _to_json(v.item())
    return v


def _from_json(v):
    if v in ("inf", "-inf", "nan"):
        return float(v)
    return v


def _store(path: Path, spec: RunSpec, history: pd.DataFrame, final: dict) -> None:
    payload = {"spec": spec.as_dict(), "code_version": CODE_VERSION,
               "final": {k: _to_json(v) for k, v in final.items()},
               "history": {c: [_to_json(v) for v in history[c].tolist()]
                           for c in history.columns}}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _load(path: Path, spec: RunSpec) -> RunResult | None:
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return None               # missing or unreadable: recompute (and overwrite)
    if payload.get("spec") != spec.as_dict() or payload.get("code_version") != CODE_VERSION:
        return None
    history = pd.DataFrame({c: [_from_json(v) for v in vals]
                            for c, vals in payload["history"].items()})
    final = {k: _from_json(v) for k, v in payload["final"].items()}
    return RunResult(spec, history, final, from_cache=True)


def run(spec: RunSpec, cache_dir=None, refresh: bool = False) -> RunResult:
    """Train ``spec`` (or read it back from the cache) and return its result.

    Parameters
    ----------
    spec : RunSpec
    cache_dir : folder of the stored runs (default :func:`default_cache_dir`); ``False``
        disables the cache.
    refresh : train again even if a stored result exists (and overwrite it).
    """
    spec.validate()
    path = None
    if cache_dir is not False:
        path = Path(cache_dir or default_cache_dir()) / f"{spec.key}.json"
        if not refresh:
            got = _load(path, spec)
            if got is not None:
                return got
    history, final = _train(spec)
    if path is not None:
        _store(path, spec, history, final)
    return RunResult(spec, history, final, from_cache=False)


def _worker_init(threads: int) -> None:
    import numba

    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))


def _worker(spec: RunSpec, cache_dir, refresh):
    r = run(spec, cache_dir=cache_dir, refresh=refresh)
    return r.history, r.final


def run_all(specs, workers: int = 1, cache_dir=None, refresh: bool = False,
            progress: bool = True, desc: str = "runs") -> list[RunResult]:
    """Run every spec (stored results are read back), ``workers`` at a time.

    Returns the results in the order of ``specs``. Runs that are not stored yet are
    trained in ``workers`` separate processes (``1``: in this process); the progress
    bar (``tqdm``, on stderr, updated at most every 30 s so that executed notebooks
    are not flooded) counts finished runs.
    """
    specs = list(specs)
    for s in specs:
        if not isinstance(s, RunSpec):
            raise ValueError(f"run_all needs RunSpec objects; got {type(s).__name__}")
        s.validate()
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers must be an integer >= 1; got {workers!r}")
    results: list[RunResult | None] = [None] * len(specs)
    todo = []
    for i, s in enumerate(specs):
        if cache_dir is not False and not refresh:
            got = _load(Path(cache_dir or default_cache_dir()) / f"{s.key}.json", s)
            if got is not None:
                results[i] = got
                continue
        todo.append(i)
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc=f"{desc} ({len(specs) - len(todo)} cached)",
               disable=not progress or not todo, mininterval=30, file=sys.stderr)
    try:
        if workers == 1 or len(todo) <= 1:
            for i in todo:
                results[i] = run(specs[i], cache_dir=cache_dir, refresh=refresh)
                bar.update(1)
        else:
            import concurrent.futures as cf
            import multiprocessing as mp

            ncpu = os.cpu_count() or 1
            with cf.ProcessPoolExecutor(max_workers=workers,
                                        mp_context=mp.get_context("spawn"),
                                        initializer=_worker_init,
                                        initargs=(max(1, ncpu // workers),)) as pool:
                futs = {pool.submit(_worker, specs[i], cache_dir, refresh): i for i in todo}
                for fut in cf.as_completed(futs):
                    i = futs[fut]
                    history, final = fut.result()
                    results[i] = RunResult(specs[i], history, final, from_cache=False)
                    bar.update(1)
    finally:
        bar.close()
    return results


def results_frame(results) -> pd.DataFrame:
    """One row per run: the spec's fields (options spread into columns) and ``final``."""
    rows = []
    for r in results:
        d = r.spec.as_dict()
        opts = d.pop("options")
        d.pop("eval_epochs")
        rows.append({**d, **opts, **r.final, "from_cache": r.from_cache})
    return pd.DataFrame(rows)


def histories_frame(results, evaluated_only: bool = True) -> pd.DataFrame:
    """The runs' histories stacked, with ``dataset``, ``method``, ``lr``, ``seed``
    columns (only the monitored epochs by default)."""
    parts = []
    for r in results:
        h = r.history
        if evaluated_only:
            h = h[h.evaluated.astype(bool) | h.diverged.astype(bool)]
        h = h.rename(columns={"lr": "epoch_lr"})
        h = h.assign(dataset=r.spec.dataset, method=r.spec.method, lr=r.spec.lr,
                     seed=r.spec.seed, train_fraction=r.spec.train_fraction,
                     protocol=r.spec.protocol)
        parts.append(h)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
