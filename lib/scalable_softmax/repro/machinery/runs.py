"""Cached training runs for the notebooks: one :class:`RunSpec` -> one :class:`RunResult`.

The experiment notebooks (02 per-data-set runs, 03 learning-rate tuning, 04 sensitivity,
06 paper tables) describe every training run they need as a :class:`RunSpec` (data set,
method, learning rate, seed, epochs, training fraction, evaluation settings, method
options) and call :func:`run_all`. A run's result is stored in
``build/runs/<key>.json`` (:func:`default_cache_dir`) where ``key`` hashes everything
the result depends on (:func:`key_inputs`):

* the spec itself;
* the **content** of the data it reads: the sha256 of every raw file of the data set
  (hashed in full once per process, re-hashed whenever a file's size, mtime, ctime or
  inode changes; a registered file that no longer matches its checksum is refused),
  or, for a synthetic surrogate, the generator's version and options;
* the preprocessing settings (:data:`PREPROCESSING`) and the protocol's resolved
  ``fit()`` arguments;
* :data:`CODE_VERSION`: a hash of the source of every library module a run imports
  (the import closure of this module, found by reading the sources, see
  :func:`run_modules`) and of the numerical libraries' versions;

so a notebook re-executed with the same settings, code and data reads its runs back
instead of training again, two notebooks that need the same run train it once, and a
change of code or data never reuses a stale result. A cache file that cannot be used
(not JSON, not an object, missing or malformed fields, written for another run, content
that does not match the checksum stored with it) is recomputed with a
:class:`RunCacheWarning` naming the file. Entries are created readable by the group
(``0644``, ``0640`` under a strict umask), so a cache can be shared.

Evaluation (docs/math.md section 1: the exact log-loss over all ``K`` classes):

* **monitoring** at the paper's 10 evenly spaced epochs (and epoch 0) on a fixed,
  seeded subsample of ``monitor_rows`` training rows (all rows when the set is
  smaller): the learning curves;
* **final**: the exact log-loss, error and the original code's defective metric of the
  final weights on the *whole* training set (the training fraction used) and the whole
  test set, unless ``final_rows`` caps them.

Engines. Runs are independent; :func:`run_all` trains the runs that are not stored

* one after the other in this process (``workers=1``),
* in ``workers`` processes of a `joblib <https://joblib.readthedocs.io>`_ ``loky``
  pool (the training kernels are single-threaded), or
* on a `Dask distributed <https://distributed.dask.org>`_ cluster, when a scheduler
  address is given (``scheduler=`` or the environment variable
  ``SOFTMAX_DASK_SCHEDULER``, e.g. ``tls://10.0.0.5:8786``); docs/cluster.md shows
  how to start one safely. The workers must run this process's code: at the start of
  a sweep every worker reports its :func:`worker_report` (the hash of each module's
  source, the numerical libraries' versions, the fingerprint of the sweep's data) and
  every result carries it again; a worker whose code, libraries or data differ is
  refused with a :class:`WorkerMismatchError` naming it and the difference, and
  nothing of it is stored.

Threads: every run uses ``threads_per_task(cores, runs sharing the machine)`` numba and
BLAS threads (:func:`threads_per_task`): ``cores // workers`` in a loky pool, and on
Dask the host's cores divided by the Dask threads of all the workers on that host
(:func:`dask_thread_plan`), so no machine runs more threads than it has cores. A worker
without ``NUMBA_CACHE_DIR`` uses the checkout's ``build/numba-cache``
(:func:`worker_setup`). Cancellation: a Dask task checks after every epoch whether its
sweep still wants it (the client cancels its tasks on an error, Ctrl-C or ``SIGTERM``;
the scheduler releases a lost client's tasks) and stops with :class:`RunCancelled`.

Only this process writes the cache: every result is stored as soon as it arrives, by
a temporary file and a rename, so an interrupted sweep keeps what it finished and a
rerun trains only the rest. A worker process exits as soon as the process that started
it is gone (also after ``SIGKILL``), and ``SIGTERM``/``SIGHUP`` during :func:`run_all`
stop the pool and remove temporary files before the process exits. All engines give
identical results (training is seeded; the evaluator's result does not depend on the
number of threads). Timings measured with several workers share the machine's memory
bandwidth; notebook 07 measures runtimes alone.
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
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from scalable_softmax import paths
from scalable_softmax.protocols import EPOCHS, STUDY_DEFAULTS, FitConfig, resolve
from scalable_softmax.validation import check, violation

__all__ = ["RunSpec", "RunResult", "run", "run_all", "results_frame", "histories_frame",
           "CODE_VERSION", "default_cache_dir", "PAPER_METHODS", "PAPER_DATASETS",
           "PAPER_TABLE2", "PAPER_TABLE3", "EXTENSION_DATASETS", "dataset_for", "load_split",
           "key_inputs",
           "data_fingerprint", "run_modules", "code_version", "RunCacheWarning", "PREPROCESSING",
           "dask_scheduler", "WorkerMismatchError", "RunCancelled", "worker_report",
           "check_worker", "library_versions", "machine_cores", "threads_per_task",
           "dask_thread_plan", "worker_setup"]

from scalable_softmax.repro.fagan.paper import (  # noqa: E402,F401
    PAPER_DATASETS,
    PAPER_METHODS,
    PAPER_TABLE2,
    PAPER_TABLE3,
    PAPER_TABLE3_AVERAGE,
)

#: our real data sets that the study may run beside the paper's seven (no published rates:
#: their rates are tuned, notebook 13)
EXTENSION_DATASETS = ("20news-words",)

#: the preprocessing of every run's data (``load_dataset``'s defaults, made explicit:
#: part of every cache key)
PREPROCESSING = {"max_features": 10_000, "max_points": 100_000, "normalize": True}
#: numerical libraries whose version is part of :data:`CODE_VERSION`
_LIBRARIES = ("numpy", "scipy", "numba", "llvmlite")
_PKG = __name__.split(".")[0]
_ROOT = Path(__file__).resolve().parents[2]  # the package (scalable_softmax/)


def _module_path(name: str) -> Path | None:
    """Source file of the package module ``name`` (``pkg.a.b``), or None."""
    if name != _PKG and not name.startswith(_PKG + "."):
        return None
    rel = Path(*name.split(".")[1:])
    for cand in (_ROOT / rel / "__init__.py", (_ROOT / rel).with_suffix(".py")):
        if cand.is_file():
            return cand
    return None


def _imports_of(name: str, path: Path) -> set[str]:
    """Package modules that module ``name`` (file ``path``) may import: every
    ``import``/``from ... import`` anywhere in it (functions included, so lazy imports
    count) and every string naming a module of the package (``"pkg.mod:Class"``
    registries imported with ``importlib``), with the parent packages."""
    import ast
    import re

    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = base[:len(base) - (node.level - 1)]
                mod = ".".join(up + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in re.finditer(rf"\b{_PKG}(?:\.\w+)+", node.value):
                found.add(m.group(0))
    out = set()
    for mod in found:
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):          # the parents run their __init__
            if _module_path(".".join(parts[:i])) is not None:
                out.add(".".join(parts[:i]))
    return out


def run_modules(root: str = __name__) -> dict[str, Path]:
    """Every package module a training run may import: the import closure of ``root``
    (this module), read from the sources. ``{module name: file}``."""
    todo, seen = [root], {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = _module_path(name)
        if path is None:
            continue
        seen[name] = path
        todo.extend(_imports_of(name, path) - set(seen))
    return dict(sorted(seen.items()))


def library_versions() -> dict[str, str]:
    """``{library: version}`` of the numerical libraries that shape results
    (:data:`_LIBRARIES`; ``"missing"`` when one is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for lib in _LIBRARIES:
        try:
            out[lib] = version(lib)
        except PackageNotFoundError:
            out[lib] = "missing"
    return out


def code_version(sources: dict | None = None, modules: dict | None = None) -> str:
    """12 hex digits of the sha256 of the sources of ``modules`` (``{name: file}``;
    default :func:`run_modules`, a training run's) and of :func:`library_versions`;
    ``sources`` (a dict), when given, receives ``{module: sha256 of its source}`` (what a
    worker's fingerprint reports)."""
    h = hashlib.sha256()
    for name, path in (run_modules() if modules is None else modules).items():
        text = path.read_bytes()
        if sources is not None:
            sources[name] = hashlib.sha256(text).hexdigest()[:16]
        h.update(name.encode() + b"\0" + text + b"\0")
    for lib, ver in library_versions().items():
        h.update((f"{lib}=={ver}\0" if ver != "missing" else f"{lib} missing\0").encode())
    return h.hexdigest()[:12]


#: ``{module: sha256 of its source}`` of the modules hashed into :data:`CODE_VERSION`
#: (read once, when this module is imported: the code this process runs)
_SOURCE_SHA: dict = {}
#: hash of the sources of every library module a run imports (:func:`run_modules`) and
#: of the numerical libraries' versions (part of every cache key)
CODE_VERSION = code_version(_SOURCE_SHA)


class RunCacheWarning(UserWarning):
    """A stored run could not be used (the message names the file); it is recomputed."""


# --------------------------------------------------------------------------- data content
_FILE_SHA: dict = {}        # (path, inode, size, mtime_ns, ctime_ns) -> verified sha256


def _file_sha(path: Path, data_dir: Path) -> str:
    """sha256 of a raw data file, hashed in full (and checked against its registered
    or user-pinned checksum: :class:`~scalable_softmax.data.ChecksumError` naming the
    file otherwise) once per process and again whenever the file's size, mtime, ctime
    or inode changes."""
    from scalable_softmax.data import registry

    st = path.stat()
    memo = (str(path), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if memo not in _FILE_SHA:
        try:
            rel = path.relative_to(data_dir).as_posix()
        except ValueError:
            rel = path.name
        _FILE_SHA[memo] = registry.verify_file(path, rel, data_dir=data_dir,
                                               use_cache=False)
    return _FILE_SHA[memo]


def data_fingerprint(dataset: str) -> dict:
    """What identifies the content of ``dataset`` (a loader name): ``{"files": {role:
    sha256}}`` of its raw files in the data directory (``paths.raw_dir()``), or, for a
    synthetic surrogate, ``{"generator": ..., "options": ...}`` (generator version,
    seed and settings).

    Raises
    ------
    MissingDataError, ChecksumError
        As :func:`scalable_softmax.data.load_dataset` would.
    """
    from scalable_softmax.data import SURROGATE_DATASETS, core, registry, surrogate
    from scalable_softmax.data import cache as data_cache

    if dataset in SURROGATE_DATASETS:
        return {"generator": f"surrogate:{surrogate.PROFILE_SIZE}:{data_cache.CODE_VERSION}",
                "options": core.dataset_options(dataset)}
    data_dir = paths.raw_dir()
    files = registry.locate(dataset, data_dir=data_dir, verify=False)
    return {"files": {role: _file_sha(p, data_dir) for role, p in sorted(files.items())}}


def default_cache_dir() -> Path:
    """``$SOFTMAX_RUN_CACHE`` or ``build/runs``."""
    env = os.environ.get("SOFTMAX_RUN_CACHE")
    return Path(env) if env else paths.BUILD / "runs"


def dataset_for(paper_name: str, prefer_real: bool = True) -> str:
    """Our loader name for one of the paper's data sets: the real files when they are in
    the data directory, else the synthetic ``-surrogate`` (for the four XMLRepository
    sets, which cannot be shipped). A name of :data:`EXTENSION_DATASETS` (ours, real, not
    in the paper) is its own loader name."""
    from scalable_softmax.data import SURROGATE_DATASETS, MissingDataError, load_dataset

    if paper_name in EXTENSION_DATASETS:
        return paper_name
    if paper_name not in PAPER_DATASETS:
        raise ValueError(f"unknown data set {paper_name!r}; choose one of "
                         f"{', '.join(PAPER_DATASETS + EXTENSION_DATASETS)}")
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


@functools.lru_cache(maxsize=None)
def resolve_protocol(protocol: str | None, method: str) -> tuple:
    """The ``fit()`` keyword arguments with which ``method`` trains under ``protocol``
    (:func:`scalable_softmax.protocols.fit_kwargs`), as sorted ``(name, value)`` pairs;
    ``()`` for no protocol. The one place where runs resolve a protocol (kept per
    ``(protocol, method)``: the protocols are constants)."""
    if protocol is None:
        return ()
    from scalable_softmax.protocols import fit_kwargs

    return tuple(sorted(fit_kwargs(protocol, method).items()))


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything that determines one training run.

    Attributes
    ----------
    dataset : loader name (``scalable_softmax.data.load_dataset``).
    method : a :data:`scalable_softmax.methods.METHODS` key.
    lr : initial learning rate (the per-datapoint units of docs/math.md section 2.3).
    seed : seed of the run (data order, sampled classes, monitoring subsample).
    epochs, lr_decay : 50 and 0.9 in the paper (``lr_decay``: the protocol's, else
        :data:`scalable_softmax.protocols.STUDY_DEFAULTS`, which is ``fit``'s default).
    train_fraction : train on a seeded random subset of this fraction of the training
        set (the paper tunes on 10%); the subset depends only on ``subset_seed`` so
        every method and rate sees the same points.
    subset_seed : seed of that subset.
    monitor_rows : rows of the (used) training set for the monitoring evaluations
        (None: all).
    eval_epochs : epochs to monitor (None: epoch 0 and 10 evenly spaced epochs).
    final_rows : cap on the rows of the final exact evaluation of each set (None: all).
    test : also evaluate the final weights on the test split.
    u_init : initial ``u`` of the double-sum methods: the protocol's, else
        ``STUDY_DEFAULTS["u_init"]`` = ``"logK"`` as in the paper's Algorithm 1
        (``u_i <- log K``, the optimal ``u`` at ``W = 0``); or ``"zero"``. Vanilla SGD
        at the paper's Table 2 rates overflows from ``u = 0`` but not from
        ``u = log K`` (notebook 02).
    subset : how the ``train_fraction`` subset is chosen: ``"random"`` (seeded by
        ``subset_seed``, kept in file order) or ``"head"`` (the first rows in file
        order, as the authors' code tuned its rates).
    protocol : None, or a name of :data:`scalable_softmax.protocols.PROTOCOLS`: the
        run trains with ``fit_kwargs(protocol, method)`` (data order, class sampling,
        ``u`` start, passes, minibatch conventions); :meth:`make` copies the protocol's
        ``lr_decay`` and ``u_init`` into those fields unless they are given. As in
        ``fit`` (:func:`scalable_softmax.protocols.resolve`), what is given explicitly
        (these fields, ``options``) wins over the protocol.
    protocol_options : the protocol's ``fit()`` arguments as ``(name, value)`` pairs,
        resolved once when the spec is built (:func:`resolve_protocol`; ``()`` without
        a protocol); derived, so not part of :meth:`as_dict` or of equality.
    options : method options and ``batch_size`` / ``n_sampled`` / ``mu`` / ``order``,
        as a tuple of ``(name, value)`` pairs (use :meth:`make`).
    data_options : extra options of the data set's loader (e.g. ``(("scale", 0.02),)``
        for a small surrogate), passed to ``load_dataset``; ``make`` takes a dict.

    ``lr`` is None for the full-batch methods (``exact``, ``bouchard``, ``ove-exact``),
    which have no learning rate.
    """

    dataset: str
    method: str
    lr: float
    seed: int = 0
    epochs: int = EPOCHS
    lr_decay: float = STUDY_DEFAULTS["lr_decay"]
    train_fraction: float = 1.0
    subset_seed: int = 0
    monitor_rows: int | None = 2000
    eval_epochs: tuple | None = None
    final_rows: int | None = None
    test: bool = True
    u_init: str = STUDY_DEFAULTS["u_init"]
    subset: str = "random"
    protocol: str | None = None
    options: tuple = ()
    data_options: tuple = ()
    protocol_options: tuple = dataclasses.field(default=(), init=False, repr=False,
                                                compare=False)

    def __post_init__(self):
        """Resolve the protocol once into :attr:`protocol_options` (an unknown method is
        left to :meth:`validate`, which names it)."""
        from scalable_softmax.methods import METHODS

        resolved = ()
        if self.protocol is not None and self.method in METHODS:
            try:
                resolved = resolve_protocol(self.protocol, self.method)
            except ValueError as exc:
                raise ValueError(f"RunSpec.protocol: {exc}") from None
        object.__setattr__(self, "protocol_options", resolved)

    @classmethod
    def make(cls, dataset, method, lr, **kw) -> "RunSpec":
        """Build a spec; keyword arguments that are not fields go to ``options``.
        ``lr_decay`` and ``u_init`` not given (or None) become the protocol's (if it
        sets them), else :data:`scalable_softmax.protocols.STUDY_DEFAULTS`'s; given,
        they win over the protocol (:func:`scalable_softmax.protocols.resolve`)."""
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        opts = {k: kw.pop(k) for k in list(kw) if k not in fields}
        if "options" in kw:
            opts.update(dict(kw.pop("options")))
        if kw.get("eval_epochs") is not None:
            # fit's rule (integers; their range is checked by validate), before int()
            # could turn 1.5 into 1
            try:
                ev = list(kw["eval_epochs"])
            except TypeError:
                raise ValueError(f"RunSpec.eval_epochs must be a list of epochs; got "
                                 f"{kw['eval_epochs']!r}") from None
            bad = [e for e in ev if violation(e, {"type": "int", "min": 0}) is not None]
            if bad:
                raise ValueError(f"RunSpec.eval_epochs must hold integers >= 0 (epochs); "
                                 f"got {bad}")
            kw["eval_epochs"] = tuple(int(e) for e in ev)
        if lr is not None:
            check("lr", lr, "RunSpec.")         # fit's rule: no "0.1", no True
        if isinstance(kw.get("data_options"), dict):
            kw["data_options"] = tuple(sorted(kw["data_options"].items()))
        given = {nm: kw.pop(nm) for nm in ("lr_decay", "u_init") if nm in kw}
        spec = cls(dataset=str(dataset), method=str(method),
                   lr=None if lr is None else float(lr),
                   options=tuple(sorted(opts.items())), **kw)
        # explicit over the protocol's over the study's defaults: protocols.resolve
        # (the protocol's arguments resolved once, in __post_init__)
        fields = resolve(None, spec.method, given,
                         defaults={**STUDY_DEFAULTS, **dict(spec.protocol_options)})
        fixed = {nm: fields[nm] for nm in ("lr_decay", "u_init")
                 if fields[nm] != getattr(spec, nm)}
        if fixed:
            spec = dataclasses.replace(spec, **fixed)
        spec.validate()
        return spec

    def fit_config(self, K: int | None = None) -> FitConfig:
        """The :class:`~scalable_softmax.protocols.FitConfig` of the run (the one
        ``fit`` validates): the spec's fields and options (given) over the protocol's
        arguments (resolved once, when the spec was built); ``K`` when known."""
        opts = {**dict(self.protocol_options), "lr_decay": self.lr_decay,
                "u_init": self.u_init, **dict(self.options)}
        return FitConfig.make(self.method, self.lr, epochs=self.epochs, seed=self.seed,
                              K=K, progress=False, eval_rows=self.monitor_rows,
                              eval_epochs=self.eval_epochs, **opts)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the bad field (before any work is done)."""
        from scalable_softmax.methods import get_trainer_class

        try:
            cls = get_trainer_class(self.method)
        except ValueError as exc:
            raise ValueError(f"RunSpec.method: {exc}") from None
        if cls.full_batch:
            if self.lr is not None:
                raise ValueError(f"RunSpec.lr: {self.method!r} has no learning rate "
                                 f"(full-batch L-BFGS); give lr=None, not {self.lr!r}")
        else:
            check("lr", self.lr, "RunSpec.")
        # fit()'s rules for the fields fit() takes, and the runs' own (one table:
        # validation.PARAMETERS); the protocol was resolved (or rejected) when the spec
        # was built
        for nm in ("seed", "epochs", "lr_decay", "u_init", "train_fraction", "subset_seed",
                   "monitor_rows", "final_rows", "subset", "test"):
            check(nm, getattr(self, nm), "RunSpec.")
        for nm in ("options", "data_options"):
            try:
                json.dumps(getattr(self, nm))
            except TypeError:
                raise ValueError(f"RunSpec.{nm} must hold plain values (numbers, strings); "
                                 f"got {getattr(self, nm)!r}") from None
        self.fit_config().resolve()         # the method's options, as fit checks them

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        del d["protocol_options"]           # derived from protocol and method
        d["options"] = dict(self.options)
        d["data_options"] = dict(self.data_options)
        d["eval_epochs"] = list(self.eval_epochs) if self.eval_epochs is not None else None
        return d

    @property
    def key(self) -> str:
        """Cache key: 20 hex digits of the sha256 of :func:`key_inputs`."""
        blob = json.dumps(key_inputs(self), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]


def key_inputs(spec: RunSpec) -> dict:
    """Everything a run's result depends on: the spec, the content of its data
    (:func:`data_fingerprint`), the preprocessing, the protocol's resolved ``fit()``
    arguments and :data:`CODE_VERSION`."""
    fit_args = dict(spec.protocol_options) if spec.protocol is not None else None
    return {"spec": spec.as_dict(), "code": CODE_VERSION,
            "data": data_fingerprint(spec.dataset), "preprocessing": PREPROCESSING,
            "protocol_fit_kwargs": fit_args}


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


def load_split(dataset: str, split: str, train_fraction: float = 1.0, subset_seed: int = 0,
               subset: str = "random", data_options: tuple = ()):
    """``(X, y, K, synthetic)`` of a split (with :data:`PREPROCESSING`); the training
    split can be cut to a ``train_fraction`` of its rows: a seeded random subset kept in
    file order (``subset="random"``) or the first rows (``"head"``). Kept in memory
    (16 splits) under the data's content (:func:`data_fingerprint`), so replaced files
    are read again."""
    fp = json.dumps(data_fingerprint(dataset), sort_keys=True)
    return _load_split(dataset, fp, split, train_fraction, subset_seed, subset,
                       tuple(data_options))


@functools.lru_cache(maxsize=16)
def _load_split(dataset, fingerprint, split, train_fraction, subset_seed, subset,
                data_options):
    from scalable_softmax.data import load_dataset

    ds = load_dataset(dataset, split, **PREPROCESSING, **dict(data_options))
    X, y = ds.X, ds.y
    if split == "train" and train_fraction < 1:
        n = max(1, int(round(train_fraction * ds.N)))
        if subset == "head":
            rows = np.arange(n)
        else:
            rows = np.sort(np.random.default_rng(subset_seed).choice(ds.N, n, replace=False))
        X, y = X[rows], y[rows]
    return X, y, ds.K, bool(ds.synthetic)


load_split.cache_clear = _load_split.cache_clear


def _evaluate_set(X, y, W, cap, seed):
    """Final metrics of one set; None when the scores or the log-loss are not finite."""
    from scalable_softmax.evaluate import NonFiniteScoreError, evaluate

    sub = cap if (cap is not None and cap < X.shape[0]) else None
    try:
        res = evaluate(X, y, W, subsample=sub, seed=seed)
    except NonFiniteScoreError:
        return None
    if not math.isfinite(res.log_loss):
        return None
    return dict(log_loss=float(res.log_loss), error=float(res.error),
                defective=float(res.defective), rows=int(res.n_rows))


def _train(spec: RunSpec) -> tuple[pd.DataFrame, dict]:
    from scalable_softmax.fit import DivergenceWarning, fit_config

    t0 = time.perf_counter()
    X, y, K, synthetic = load_split(spec.dataset, "train", spec.train_fraction,
                                    spec.subset_seed, spec.subset, spec.data_options)
    t_loaded = time.perf_counter()
    with warnings.catch_warnings():     # a sweep expects some runs to diverge: the
        warnings.simplefilter("ignore", DivergenceWarning)    # result records it
        res = fit_config(spec.fit_config(K), X, y, on_epoch=_epoch_check)
    h = res.history
    epochs_run = int(h.epoch.iloc[-1])
    train_seconds = float(h.seconds.iloc[-1])
    diverged_at = list(res.diverged_at) if res.diverged else None
    final = dict(N=int(X.shape[0]), D=int(X.shape[1]), K=int(K), synthetic=synthetic,
                 diverged=bool(res.diverged), diverged_at=diverged_at,
                 epochs_run=epochs_run, train_seconds=train_seconds,
                 seconds_per_epoch=train_seconds / max(epochs_run, 1))
    t_fitted = time.perf_counter()
    sets = {"train": (X, y)}
    if spec.test:
        Xt, yt, _, _ = load_split(spec.dataset, "test", data_options=spec.data_options)
        sets["test"] = (Xt, yt)
    t_final = time.perf_counter()
    metrics = {}
    for name, (Xe, ye) in sets.items():
        metrics[name] = None if res.diverged else \
            _evaluate_set(Xe, ye, res.W, spec.final_rows, spec.seed)
        if metrics[name] is None and not final["diverged"]:
            # finite weights whose scores overflow: diverged (a non-finite log-loss
            # always is), found by the final evaluation
            final.update(diverged=True, diverged_at=[epochs_run, -1])
    for name in sets:
        m = metrics[name]
        if m is None or final["diverged"]:
            m = dict(log_loss=math.inf, error=math.nan, defective=math.nan, rows=0)
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


#: version of the cache file layout (3: with a ``checksum`` of the content)
CACHE_FORMAT = 3
#: fields every stored ``final`` holds (and ``test_*`` when the spec has ``test``)
_FINAL_KEYS = ("N", "D", "K", "synthetic", "diverged", "diverged_at", "epochs_run",
               "train_seconds", "seconds_per_epoch", "train_log_loss", "train_error",
               "train_defective", "train_rows", "wall_seconds")
_HISTORY_KEYS = ("epoch", "steps", "seconds", "lr", "evaluated", "diverged",
                 "train_log_loss", "train_error", "train_defective")


def is_timing(key: str) -> bool:
    """Whether a field of ``RunResult.final`` is a measured time (``*_seconds``,
    ``seconds_per_epoch``): the only fields that differ between two runs of a spec."""
    return "seconds" in key


def _tmp_prefix(path: Path) -> str:
    return f".{path.name}.{os.getpid()}."


def _store(path: Path, spec: RunSpec, history: pd.DataFrame, final: dict,
           inputs: dict | None = None) -> None:
    """Write a run's result atomically (temporary file named with this process's id in
    the same folder, then rename; the temporary file is removed on any error). The
    entry carries the sha256 of its content (:func:`_content_checksum`) and is readable
    by the group (:func:`_entry_mode`), so a shared cache serves colleagues."""
    inputs = inputs if inputs is not None else key_inputs(spec)
    payload = {"format": CACHE_FORMAT, "key": path.stem, "inputs": inputs,
               "spec": spec.as_dict(), "code_version": CODE_VERSION,
               "final": {k: _to_json(v) for k, v in final.items()},
               "history": {c: [_to_json(v) for v in history[c].tolist()]
                           for c in history.columns}}
    payload = json.loads(json.dumps(payload, default=str))     # as it will be read back
    payload["checksum"] = _content_checksum(payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _entry_mode())
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _content_checksum(payload: dict) -> str:
    """sha256 of a cache entry's canonical JSON without its ``checksum`` field."""
    body = {k: v for k, v in payload.items() if k != "checksum"}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


_UMASK: list = []


def _entry_mode() -> int:
    """Mode of a new cache entry: ``0644`` under this process's umask, but always
    readable and writable by its owner and readable by the group (``0640`` under a
    strict umask such as 077), never ``0600``."""
    if not _UMASK:
        mask = os.umask(0o022)
        os.umask(mask)
        _UMASK.append(mask)
    return (0o644 & ~_UMASK[0]) | 0o640


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) or \
        v in ("inf", "-inf", "nan")


def _check_payload(payload, spec: RunSpec, key: str, inputs: dict) -> str | None:
    """What is wrong with a stored payload for ``spec`` (None: usable)."""
    if not isinstance(payload, dict):
        return f"holds a JSON {type(payload).__name__}, not an object"
    missing = [k for k in ("format", "key", "inputs", "spec", "code_version", "final",
                           "history") if k not in payload]
    if missing:
        return f"lacks the field(s) {missing}"
    if payload["format"] != CACHE_FORMAT:
        return f"has cache format {payload['format']!r}, not {CACHE_FORMAT}"
    if payload["key"] != key or payload["spec"] != spec.as_dict() \
            or payload["code_version"] != CODE_VERSION \
            or payload["inputs"] != json.loads(json.dumps(inputs, default=str)):
        return "was written for another run (its spec, code or data differ)"
    if payload.get("checksum") != _content_checksum(payload):
        return ("does not match the checksum of its content (it was edited or damaged "
                "after it was written)")
    final, hist = payload["final"], payload["history"]
    if not isinstance(final, dict):
        return f"'final' is a {type(final).__name__}, not an object"
    need = list(_FINAL_KEYS) + ([f"test_{m}" for m in ("log_loss", "error", "defective",
                                                        "rows")] if spec.test else [])
    missing = [k for k in need if k not in final]
    if missing:
        return f"'final' lacks {missing}"
    bad = [k for k in need if k not in ("synthetic", "diverged", "diverged_at")
           and not _number(final[k])]
    bad += [k for k in ("synthetic", "diverged") if not isinstance(final[k], bool)]
    da = final["diverged_at"]
    if not (da is None or (isinstance(da, list) and len(da) == 2
                           and all(isinstance(v, int) for v in da))):
        bad.append("diverged_at")
    if bad:
        return f"'final' has values of the wrong type in {bad}"
    if not isinstance(hist, dict):
        return f"'history' is a {type(hist).__name__}, not an object"
    missing = [k for k in _HISTORY_KEYS if k not in hist]
    if missing:
        return f"'history' lacks the column(s) {missing}"
    cols = list(hist.values())
    if not all(isinstance(c, list) for c in cols):
        return "'history' has a column that is not a list"
    lengths = {len(c) for c in cols}
    if len(lengths) != 1 or 0 in lengths:
        return f"'history' columns have lengths {sorted(lengths)} (must be equal, > 0)"
    if not all(v is None or isinstance(v, (bool, int, float, str)) for c in cols for v in c):
        return "'history' holds values that are not numbers"
    return None


def _load(path: Path, spec: RunSpec, inputs: dict | None = None) -> RunResult | None:
    """The stored result of ``spec`` at ``path`` (``inputs``: its :func:`key_inputs`);
    None when there is none or it cannot be used (then a :class:`RunCacheWarning` names
    the file and says why)."""
    inputs = inputs if inputs is not None else key_inputs(spec)
    key = _key_of(inputs)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        warnings.warn(f"{path}: cannot be read ({exc}); recomputing this run",
                      RunCacheWarning, stacklevel=3)
        return None
    try:
        payload = json.loads(text)
    except ValueError as exc:
        warnings.warn(f"{path}: not valid JSON ({exc}); recomputing this run",
                      RunCacheWarning, stacklevel=3)
        return None
    problem = _check_payload(payload, spec, key, inputs)
    if problem is None:
        try:
            history = pd.DataFrame({c: [_from_json(v) for v in vals]
                                    for c, vals in payload["history"].items()})
            final = {k: _from_json(v) for k, v in payload["final"].items()}
            for c in ("epoch", "steps"):
                history[c] = history[c].astype(np.int64)
            for c in ("evaluated", "diverged"):
                history[c] = history[c].astype(bool)
            for c in history.columns.difference(["epoch", "steps", "evaluated",
                                                 "diverged"]):
                history[c] = history[c].astype(np.float64)
        except (TypeError, ValueError) as exc:
            problem = f"has a malformed history ({exc})"
    if problem is not None:
        warnings.warn(f"{path}: {problem}; recomputing this run", RunCacheWarning,
                      stacklevel=3)
        return None
    return RunResult(spec, history, final, from_cache=True)


def _sweep_stale_tmp(folder: Path) -> None:
    """Remove temporary cache files left by processes that were killed (the process id
    is in the name; files of live processes are kept)."""
    try:
        entries = list(folder.glob(".*.json.*.tmp"))
    except OSError:
        return
    for f in entries:
        parts = f.name.split(".")          # "", key, "json", pid, random, "tmp"
        pid = int(parts[3]) if len(parts) == 6 and parts[3].isdigit() else None
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        try:
            f.unlink()
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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
        inputs = key_inputs(spec)
        path = Path(cache_dir or default_cache_dir()) / f"{_key_of(inputs)}.json"
        if not refresh:
            got = _load(path, spec, inputs)
            if got is not None:
                return got
    history, final = _train(spec)
    if path is not None:
        _store(path, spec, history, final, inputs)
    return RunResult(spec, history, final, from_cache=False)


def _key_of(inputs: dict) -> str:
    blob = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


# --------------------------------------------------------------------------- engines
_WATCHDOG = {"started": False}


def _watch_parent(interval: float = 0.2) -> None:
    """In a worker process: exit at once when the process that started it is gone
    (its parent id changes), so that no worker outlives an interrupted sweep, even
    after ``SIGKILL``. The training kernels release the GIL, so this thread runs."""
    if _WATCHDOG["started"]:
        return
    import threading

    parent = os.getppid()

    def watch():
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(interval)

    threading.Thread(target=watch, name="softmax-parent-watch", daemon=True).start()
    _WATCHDOG["started"] = True


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where
    the system does not tell)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def threads_per_task(cores: int, slots: int) -> int:
    """Numba/BLAS threads of each run when ``slots`` runs share a machine of ``cores``
    cores: ``max(1, cores // slots)``, so that the machine never runs more threads
    than it has cores (no ``slots * cores`` oversubscription)."""
    return max(1, int(cores) // max(1, int(slots)))


def _numba_cache_default() -> None:
    """Give this process the shared numba cache of the checkout (``build/numba-cache``,
    as ``make`` does) when ``NUMBA_CACHE_DIR`` is not set, so that a worker started by
    hand loads the compiled kernels instead of compiling each again."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    os.environ["NUMBA_CACHE_DIR"] = str(paths.BUILD / "numba-cache")
    if "numba" in sys.modules:
        from numba.core import config

        config.reload_config()


def worker_setup(threads: int | None, watch: bool = True) -> None:
    """First call in a worker process (the sweeps here, notebook 10's data sets): with
    ``watch`` it exits at once when the process that started it is gone (so an
    interrupted run leaves no worker behind); its numba kernels and BLAS use
    ``threads`` threads (numba's capped by ``NUMBA_NUM_THREADS``; None: unchanged); and
    without ``NUMBA_CACHE_DIR`` it uses the checkout's shared numba cache
    (``build/numba-cache``)."""
    _numba_cache_default()
    if watch:
        _watch_parent()
    if threads is not None:
        from scalable_softmax.kernels.threads import pin_numba_threads

        pin_numba_threads(threads)
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:             # BLAS then keeps OPENBLAS_NUM_THREADS & co.
            return
        threadpool_limits(limits=max(1, int(threads)))


class WorkerMismatchError(RuntimeError):
    """A worker runs other code or other library versions than this process (or
    cannot read the sweep's data): its results are refused and nothing of it is stored."""


def _dask_worker():
    """The Dask worker this code runs in, or None."""
    if "distributed" not in sys.modules:
        return None
    try:
        from distributed import get_worker

        return get_worker()
    except (ValueError, ImportError):
        return None


def worker_report(datasets=(), dask_worker=None) -> dict:
    """What a worker process runs: its name (Dask address, else host and process id),
    host, cores, Dask threads, :data:`CODE_VERSION`, the sha256 of each module's source,
    :func:`library_versions` and, for each of ``datasets``, its
    :func:`data_fingerprint` (or the error reading it). Called in each worker at the
    start of a sweep (``Client.run`` passes ``dask_worker``) and returned with every
    result."""
    import socket

    _numba_cache_default()          # before the data readers import their kernels
    w = dask_worker if dask_worker is not None else _dask_worker()
    host = socket.gethostname()
    data = {}
    for ds in datasets:
        try:
            data[ds] = data_fingerprint(ds)
        except Exception as exc:                       # reported to the client
            data[ds] = {"error": f"{type(exc).__name__}: {exc}"}
    return {"worker": w.address if w is not None else f"{host} (process {os.getpid()})",
            "host": host, "cores": machine_cores(),
            "nthreads": getattr(getattr(w, "state", w), "nthreads", None) if w else None,
            "code": CODE_VERSION, "modules": dict(_SOURCE_SHA),
            "libraries": library_versions(), "data": data}


def check_worker(report: dict, here: dict | None = None) -> None:
    """Refuse a worker whose code fingerprint differs from this process's.

    Raises
    ------
    WorkerMismatchError
        Naming the worker and what differs: the modules whose source differs (or that
        only one side has), the library versions, or the data sets it read otherwise.
    """
    here = here if here is not None else worker_report()
    name = report.get("worker", "a worker")
    problems = []
    if report.get("code") != here["code"]:
        theirs, ours = report.get("modules") or {}, here["modules"]
        diff = sorted(m for m in set(theirs) | set(ours) if theirs.get(m) != ours.get(m))
        if diff:
            problems.append("the source of " + ", ".join(diff) + " differs")
        libs = [f"{lib} {report.get('libraries', {}).get(lib)} (there) != {v} (here)"
                for lib, v in here["libraries"].items()
                if (report.get("libraries") or {}).get(lib) != v]
        problems.extend(libs)
        if not problems:
            problems.append(f"code version {report.get('code')} != {here['code']}")
    for ds, fp in (report.get("data") or {}).items():
        ours = here["data"].get(ds) if ds in here["data"] else data_fingerprint(ds)
        if fp != ours:
            what = fp["error"] if isinstance(fp, dict) and "error" in fp else \
                f"{fp} != {ours}"
            problems.append(f"it read different data for {ds!r} ({what}): give every "
                            "worker the same data files (SOFTMAX_DATA_DIR)")
    if problems:
        raise WorkerMismatchError(
            f"worker {name} (code {report.get('code')}) does not run this process's code "
            f"(code {here['code']}): " + "; ".join(problems) + ". Start the worker on "
            "the same checkout of lib/ and the same library versions as the client; "
            "nothing of it was stored")


class RunCancelled(RuntimeError):
    """The sweep that asked for this run is gone (interrupted client, cancelled task)."""


_TASK = threading.local()      # the running task's cancellation check


def _epoch_check(epoch: int) -> None:
    """Called by ``fit`` after each epoch of a run: raise :class:`RunCancelled` when the
    task running it was cancelled (its client stopped or was lost)."""
    check = getattr(_TASK, "check", None)
    if check is not None:
        check(epoch)


def _dask_cancel_check():
    """In a Dask task: a check that raises :class:`RunCancelled` once the scheduler has
    released the task (the client cancelled it on Ctrl-C or ``SIGTERM``, or the client
    was lost: the scheduler forgets a gone client's tasks); None elsewhere."""
    w = _dask_worker()
    if w is None:
        return None
    from distributed.worker import thread_state

    key = getattr(thread_state, "key", None)
    state = getattr(w, "state", None)
    if key is None or state is None:
        return None

    def check(epoch):
        ts = state.tasks.get(key)
        if ts is None or ts.state not in ("executing", "long-running"):
            raise RunCancelled(f"run {key} stopped after epoch {epoch}: its sweep is gone "
                               f"({'released' if ts is None else ts.state})")
    return check


def _remote_train(index: int, spec: RunSpec, threads, watch: bool):
    """One run in a worker: ``(index, history, final, data fingerprint, worker report)``.
    ``threads``: an int, or ``{worker address: int}`` (a Dask sweep's plan; a worker
    not in it takes :func:`threads_per_task` of its cores and Dask threads). A Dask task
    stops at its next epoch once its sweep is gone (:func:`_dask_cancel_check`)."""
    if isinstance(threads, dict):
        w = _dask_worker()
        threads = threads.get(w.address) if w is not None else None
        if threads is None:
            threads = threads_per_task(machine_cores(), getattr(
                getattr(w, "state", w), "nthreads", 1) if w is not None else 1)
    worker_setup(threads, watch)
    _TASK.check = _dask_cancel_check()
    try:
        history, final = _train(spec)
    finally:
        _TASK.check = None
    return index, history, final, data_fingerprint(spec.dataset), worker_report()


def _serial(todo, specs):
    for i in todo:
        history, final = _train(specs[i])
        yield i, history, final, None, None


#: in a loky worker process: the data set (with its loader options) whose splits it holds
_POOL_DATA: dict = {}


def _keep_one_data_set(spec: RunSpec) -> None:
    """In a loky worker: when a run of another data set arrives, forget the splits of the
    previous one (:func:`load_split`'s in-memory cache), so that a worker holds one data
    set at a time.

    Why: loky measures a worker's memory after its first task and stops the worker,
    warning "A worker stopped while some jobs were given to the executor. This can be
    caused by a too short worker timeout or by a memory leak.", once it has grown by
    more than 300 MB. Kept for every data set of a sweep, the splits grew a worker from
    310 MB (after its first MNIST run) to 640 MB by the wiki10 surrogate, about 130 MB per
    large data set: not a leak, but loky could not tell, and the worker's replacement had
    to load its data and kernels again. The sweeps dispatch their runs data set by data
    set, so the cache still serves every run of the data set at hand."""
    key = (spec.dataset, tuple(spec.data_options))
    if _POOL_DATA.get("key", key) != key:
        _load_split.cache_clear()
    _POOL_DATA["key"] = key


def _pool_train(index: int, spec: RunSpec, threads: int):
    """One run in a loky worker (:func:`_remote_train`), holding one data set at a time
    (:func:`_keep_one_data_set`)."""
    _keep_one_data_set(spec)
    return _remote_train(index, spec, threads, True)


def _loky(todo, specs, workers):
    from joblib import Parallel, delayed

    threads = threads_per_task(machine_cores(), workers)
    par = Parallel(n_jobs=workers, backend="loky", return_as="generator_unordered",
                   pre_dispatch="n_jobs", inner_max_num_threads=threads)
    yield from par(delayed(_pool_train)(i, specs[i], threads) for i in todo)


def dask_thread_plan(reports: dict) -> dict:
    """``{worker address: threads}`` for a Dask sweep: the workers on one host share its
    cores, so each run gets ``threads_per_task(cores, Dask threads of all the host's
    workers)`` (``dask worker --nworkers 4 --nthreads 1`` on 8 cores: 2 each)."""
    slots: dict = {}
    for r in reports.values():
        slots[r["host"]] = slots.get(r["host"], 0) + int(r["nthreads"] or 1)
    return {addr: threads_per_task(r["cores"], slots[r["host"]])
            for addr, r in reports.items()}


def _ask_every_worker(client, datasets) -> dict:
    """``{address: worker_report(datasets)}`` of every worker of ``client``'s cluster,
    each computed by a task pinned to that worker (in its thread pool, so hashing large
    data files does not stall the worker's event loop)."""
    stamp = f"{os.getpid()}-{time.time_ns()}"
    futures = {addr: client.submit(worker_report, datasets, workers=[addr],
                                   allow_other_workers=False, pure=False,
                                   key=f"softmax-worker-report-{addr}-{stamp}")
               for addr in client.scheduler_info()["workers"]}
    if not futures:
        raise RuntimeError(f"the Dask cluster at {client.scheduler.address} has no "
                           "worker: start one (docs/cluster.md)")
    return dict(zip(futures, client.gather(list(futures.values()))))


def _dask(todo, specs, scheduler):
    from distributed import Client, as_completed

    own = not isinstance(scheduler, Client)
    client = Client(scheduler) if own else scheduler
    futures = []
    try:
        # fail fast: every worker proves its code, libraries and data before any run
        datasets = sorted({specs[i].dataset for i in todo})
        here = worker_report(datasets)
        reports = _ask_every_worker(client, datasets)
        for addr in sorted(reports):
            check_worker(reports[addr], here)
        plan = dask_thread_plan(reports)
        futures = [client.submit(_remote_train, i, specs[i], plan, False, pure=False,
                                 key=f"softmax-run-{i}-{specs[i].method}-{os.getpid()}-"
                                     f"{time.time_ns()}")
                   for i in todo]
        for fut in as_completed(futures):
            yield fut.result()
    finally:
        pending = [f for f in futures if not f.done()]
        if pending:
            client.cancel(pending)      # their tasks stop at their next epoch
        if own:
            client.close()


def dask_scheduler() -> str | None:
    """The Dask scheduler address of ``SOFTMAX_DASK_SCHEDULER`` (None if unset)."""
    return os.environ.get("SOFTMAX_DASK_SCHEDULER") or None


def run_all(specs, workers: int = 1, cache_dir=None, refresh: bool = False,
            progress: bool = True, desc: str = "runs", scheduler=None) -> list[RunResult]:
    """Run every spec (stored results are read back), ``workers`` at a time.

    Parameters
    ----------
    specs : iterable of RunSpec
    workers : int >= 1; with 1 the runs are trained in this process, with more in a
        joblib ``loky`` pool of that many processes (ignored with a Dask scheduler).
    cache_dir, refresh : as :func:`run`.
    progress : show a progress bar counting finished runs
        (:func:`scalable_softmax.progress.tqdm`: on stderr in a script, updated at most
        every 30 s; none in a notebook executed by the runner).
    desc : the bar's label.
    scheduler : a Dask ``distributed`` scheduler address (``"tcp://host:8786"``) or
        ``distributed.Client``: train the runs on that cluster's workers. Default: the
        environment variable ``SOFTMAX_DASK_SCHEDULER`` when set.

    Returns the results in the order of ``specs``. Each result is stored in the cache
    as soon as it arrives; if the sweep is interrupted (an error in a run, Ctrl-C,
    ``SIGTERM``) the pool's workers are stopped, no temporary file is left and a rerun
    trains only the runs that are not stored yet.
    """
    specs = list(specs)
    if specs and all(hasattr(s, "compute") and hasattr(s, "key_inputs") for s in specs):
        return run_tasks(specs, workers, cache_dir, refresh, progress, desc)   # not RunSpecs
    for s in specs:
        if not isinstance(s, RunSpec):
            raise ValueError(f"run_all needs RunSpec objects; got {type(s).__name__}")
        s.validate()
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers must be an integer >= 1; got {workers!r}")
    scheduler = scheduler if scheduler is not None else dask_scheduler()
    folder = None if cache_dir is False else Path(cache_dir or default_cache_dir())
    if folder is not None:
        _sweep_stale_tmp(folder)
    results: list[RunResult | None] = [None] * len(specs)
    inputs = [key_inputs(s) for s in specs]          # reads (hashes) the data
    keys = [_key_of(x) for x in inputs]
    todo = []
    for i, s in enumerate(specs):
        if folder is not None and not refresh:
            got = _load(folder / f"{keys[i]}.json", s, inputs[i])
            if got is not None:
                results[i] = got
                continue
        todo.append(i)
    from scalable_softmax.progress import tqdm
    from scalable_softmax.repro.machinery.runner import terminate_raises

    if scheduler is not None and todo:
        engine = _dask(todo, specs, scheduler)
    elif workers == 1 or len(todo) <= 1:
        engine = _serial(todo, specs)
    else:
        engine = _loky(todo, specs, workers)
    here = worker_report()
    bar = tqdm(total=len(todo), desc=f"{desc} ({len(specs) - len(todo)} cached)",
               disable=not progress or not todo, mininterval=30)
    try:
        with terminate_raises():
            for i, history, final, fingerprint, report in engine:
                spec = specs[i]
                if report is not None:      # from another process: its code, proven
                    check_worker(report, here)
                if fingerprint is not None and fingerprint != inputs[i]["data"]:
                    raise RuntimeError(
                        f"a worker read different data for {spec.dataset!r} than this "
                        f"process ({fingerprint} != {inputs[i]['data']}): give every "
                        "worker the same data files (SOFTMAX_DATA_DIR)")
                if folder is not None:
                    _store(folder / f"{keys[i]}.json", spec, history, final, inputs[i])
                results[i] = RunResult(spec, history, final, from_cache=False)
                bar.update(1)
    finally:
        engine.close()          # stops the pool (kills its workers if still busy)
        bar.close()
    return results


def results_frame(results) -> pd.DataFrame:
    """One row per run: the spec's fields (options spread into columns) and ``final``."""
    rows = []
    for r in results:
        d = r.spec.as_dict()
        opts = d.pop("options")
        d.pop("eval_epochs")
        d.pop("data_options")
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


def compile_kernels(methods=("ove", "nce", "is", "vanilla", "umax", "implicit"),
                    protocols=(None,), progress: bool = True) -> float:
    """Compile (or load from numba's cache) the kernels of ``methods`` by fitting each
    once, under each protocol of ``protocols`` (None: ``fit``'s defaults), on a tiny
    random problem for one epoch with an evaluation; returns the seconds taken.
    An entry of ``methods`` may be ``(method, options)`` with extra ``fit`` keyword
    arguments (e.g. ``("raman", {"variant": "umax"})``). A progress bar counts the
    fits; one line reports the total time."""
    import numpy as np
    import scipy.sparse as sp

    from scalable_softmax.fit import fit
    from scalable_softmax.progress import tqdm
    rng = np.random.default_rng(0)
    N, D, K = 48, 8, 8
    X = sp.random(N, D, density=0.5, format="csr", random_state=0) + sp.eye(N, D, format="csr")
    y = np.arange(N) % K
    methods = [(m, {}) if isinstance(m, str) else (m[0], dict(m[1])) for m in methods]
    jobs = [(m, opts, p) for p in protocols for m, opts in methods]
    start = time.perf_counter()
    bar = tqdm(total=len(jobs), desc="numba kernels (compiled once, then cached)",
               disable=not progress, mininterval=0.5, leave=True)
    try:
        for m, opts, p in jobs:
            kw = dict(resolve_protocol(p, m))
            kw.update(opts)
            lr = kw.pop("lr", 0.01)
            bar.set_postfix_str(f"{m}{' / ' + p if p else ''}", refresh=False)
            fit(X, y, m, lr, K=K, epochs=1, seed=int(rng.integers(1000)), eval_epochs=[1],
                progress=False, **kw)
            bar.update(1)
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    if progress:
        print(f"numba kernels of {len(methods)} method(s) ready in {seconds:.1f} s "
              f"(cache: {_numba_cache_shown()})")
    return seconds


def _numba_cache_shown() -> str:
    """Where numba caches the kernels, as printed in a notebook: relative to the
    repository (``build/numba-cache``), never an absolute path of the machine."""
    folder = os.environ.get("NUMBA_CACHE_DIR")
    if not folder:
        return "numba default"
    try:
        return str(Path(folder).resolve().relative_to(paths.ROOT.resolve()))
    except ValueError:
        return "NUMBA_CACHE_DIR, outside the repository"


# --------------------------------------------------------------------------- tasks
def task_key(task) -> str:
    """Cache key of a generic task: 20 hex digits of the sha256 of its ``key_inputs()``
    and :data:`CODE_VERSION`."""
    return _key_of({"task": task.key_inputs(), "code": CODE_VERSION})


def _compute_task(index: int, task, threads: int | None):
    """One task: ``(index, result)``; in a pool's worker process (``threads`` not
    None) after :func:`worker_setup`."""
    if threads is not None:
        worker_setup(threads)
    return index, task.compute()


def run_tasks(tasks, workers: int = 1, cache_dir=None, refresh: bool = False,
              progress: bool = True, desc: str = "tasks") -> list:
    """:func:`run_all` for work items that are not :class:`RunSpec` (e.g. notebook 10's
    data sets: dependent full-batch fits whose weights the notebook needs).

    A task has ``key_inputs()``, a JSON-able dict of everything its result depends on
    besides the code (:data:`CODE_VERSION` is added), and ``compute()``, which returns
    a picklable result. Results are stored in ``<cache_dir>/tasks/<key>.pkl`` (a pickle
    of this machine's own build folder; ``cache_dir=False``: no cache) as soon as each
    arrives, by a temporary file and a rename; an unreadable file is recomputed with a
    :class:`RunCacheWarning`. Tasks not stored run in this process (``workers=1``) or
    in a ``loky`` pool of ``workers`` processes with one numba thread each, in the
    order given. Returns the results in the order of ``tasks``.
    """
    import pickle

    tasks = list(tasks)
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers must be an integer >= 1; got {workers!r}")
    folder = None if cache_dir is False else Path(cache_dir or default_cache_dir()) / "tasks"
    files = [None if folder is None else folder / f"{task_key(t)}.pkl" for t in tasks]
    results, todo = [None] * len(tasks), []
    for i, f in enumerate(files):
        if f is not None and not refresh and f.exists():
            try:
                results[i] = pickle.loads(f.read_bytes())
                continue
            except Exception as exc:    # noqa: BLE001 (any unreadable file: recompute)
                warnings.warn(f"{f}: cannot be read back ({exc}); recomputing this task",
                              RunCacheWarning, stacklevel=2)
        todo.append(i)
    from joblib import Parallel, delayed

    from scalable_softmax.progress import tqdm
    from scalable_softmax.repro.machinery.runner import terminate_raises

    n_jobs = max(1, min(workers, len(todo)))
    par = Parallel(n_jobs=n_jobs, backend="loky" if n_jobs > 1 else "sequential",
                   return_as="generator_unordered")
    engine = par(delayed(_compute_task)(i, tasks[i], 1 if n_jobs > 1 else None)
                 for i in todo)
    bar = tqdm(total=len(todo), desc=f"{desc} ({len(tasks) - len(todo)} cached)",
               disable=not progress or not todo, mininterval=30)
    try:
        with terminate_raises():
            for i, result in engine:
                if files[i] is not None:
                    files[i].parent.mkdir(parents=True, exist_ok=True)
                    fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(files[i]), suffix=".tmp",
                                               dir=files[i].parent)
                    try:
                        with os.fdopen(fd, "wb") as fh:
                            pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
                        os.replace(tmp, files[i])
                    except BaseException:
                        if os.path.exists(tmp):
                            os.unlink(tmp)
                        raise
                results[i] = result
                bar.update(1)
    finally:
        engine.close()
        bar.close()
    return results
