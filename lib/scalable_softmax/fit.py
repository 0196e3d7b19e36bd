"""One API for every optimiser: :func:`fit`.

``fit(X, y, method, lr, ...)`` validates every argument before doing any work, builds
the :class:`~scalable_softmax.methods.base.Trainer` registered under ``method``
(:mod:`scalable_softmax.methods`), runs it epoch by epoch with a seeded data order,
evaluates the exact log-loss, the error and the original code's defective metric on
the evaluation sets at chosen epochs, and returns a :class:`FitResult`.

Reproducibility: one ``numpy.random.default_rng(seed)`` draws, epoch after epoch, the
data order and then the kernel seed of that epoch, so the same arguments give
bit-identical results. Evaluation never draws from that generator (the evaluation
subsample, if any, is seeded by ``seed`` separately), so the training trajectory does
not depend on the evaluation settings -- except, at rounding level, for methods with
lazily scaled weights and ``mu > 0`` (folding the scales for an evaluation rounds
differently from folding them later).

Divergence: when a trainer reports a non-finite step, or ``u`` (checked every epoch)
or ``W`` (checked at evaluation epochs and at the end) holds a non-finite value, or an
evaluation gives a non-finite score or log-loss (finite but huge weights), the run
stops, the last history row gets ``diverged = True`` and ``log_loss = inf``
(error and defective ``NaN``) for every set, ``FitResult.diverged_at`` records where
and ``FitResult.diverged_reason`` on what, and ``fit`` issues a
:class:`DivergenceWarning` and returns normally so that a sweep goes on.

The driver's parts: :class:`~scalable_softmax.protocols.FitConfig` (the arguments,
resolved and validated once), :func:`fit_config` (a run of a configuration, which the
estimator and the notebooks' runs call too), ``_prepare`` (the data's checks, the
intercept column, the trainer), :func:`run_epochs` (the epoch loop, with the monitoring
evaluations of ``_Monitor``: the library's one epoch driver, which a caller with a
trainer of its own calls directly) and :func:`assemble_history` (the history table).

Checkpoints: ``fit(..., checkpoint=f, pieces=p)`` cuts each epoch into pieces (``p``:
datapoints per piece, or a chooser with ``piece_size(left)``) and calls
``f(point)`` (a :class:`Checkpoint`) after every piece and epoch, with the training
clock paused; a true return stops the run there. The pieces of an epoch keep its data
order; the piece at 0 runs with the epoch's kernel seed, a later one at ``start`` with
:func:`piece_seed` ``(seed, start)``. Without ``checkpoint`` and ``pieces`` a run is
bit-identical to one of a library without them.

Using a trained model: :meth:`FitResult.predict`, :meth:`FitResult.predict_proba` and
:meth:`FitResult.decision_function` score new data; :meth:`FitResult.save` and
:meth:`FitResult.load` store a result in one ``.npz`` file (arrays, plus a JSON record of
the settings and the library version). ``fit_intercept=True`` adds a per-class
intercept; ``init_W`` (and ``init_intercept``) start from given weights (a warm start),
``u_init="exact"`` from the optimal ``u`` of those weights (docs/math.md section 2.4).
"""
from __future__ import annotations

import json
import math
import numbers
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scalable_softmax._atomic import atomic_open
from scalable_softmax._version import __version__
from scalable_softmax.protocols import EPOCHS, FitConfig, default_eval_epochs
from scalable_softmax.validation import (
    ModelTooLargeError,
    as_csr,
    as_labels,
    check_fits_in_memory,
    check_label_range,
)

__all__ = ["fit", "fit_config", "FitResult", "Checkpoint", "piece_seed", "run_epochs",
           "EpochRun", "DivergenceWarning", "NoProgressWarning",
           "EmptyClassWarning", "ModelTooLargeError", "default_eval_epochs",
           "FORMAT_NAME", "FORMAT_VERSION"]

#: what :meth:`FitResult.save` writes in its JSON record (checked by :meth:`FitResult.load`)
FORMAT_NAME = "scalable_softmax.FitResult"
FORMAT_VERSION = 1

#: what a label outside ``0..K-1`` calls for
_LARGER_K = " (pass a larger K)"
_METRICS = ("log_loss", "error", "defective")


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    W : ndarray, shape (K, D)
        The final weights (for a diverged run: the parameters where training stopped,
        usually the last finite iterate).
    u : ndarray, shape (N,), or None
        The double-sum variables of methods that have them.
    history : pandas.DataFrame
        One row per completed epoch (epoch 0 = the initial point) with columns
        ``epoch``, ``steps`` (cumulative), ``seconds`` (cumulative training time,
        evaluation and compilation excluded), ``lr`` (learning rate used during that
        epoch; NaN for epoch 0), ``evaluated``, ``diverged`` and, for every evaluation
        set ``<set>``, ``<set>_log_loss``, ``<set>_error``, ``<set>_defective`` (NaN
        where not evaluated). Use ``history[history.evaluated]`` for the evaluated
        epochs.
    diverged_at : tuple or None
        ``(epoch, step)``: the (1-based) epoch and the 0-based step within it where
        training stopped on a non-finite value (``step = -1`` when the non-finite value
        was found by the end-of-epoch checks).
    diverged_reason : str or None
        A sentence saying what was not finite (e.g. "a non-finite update at step 3",
        "the log-loss on the 'train' set is inf"); None in files saved before it was
        recorded.
    method : str
        The method trained.
    params : dict
        The call's arguments (arrays replaced by their shapes), with ``K``, ``N``,
        ``D`` and the resolved ``eval_epochs``.
    extra : pandas.DataFrame
        One row per epoch run: ``epoch`` and the method's counters
        (``EpochReport.extra``, e.g. ``u_resets``).
    timings : dict
        Wall seconds of the call split into ``setup`` (validation, trainer
        construction, initialisation and kernel compilation), ``train`` (the epochs,
        as ``history.seconds``), ``eval`` (the monitoring evaluations) and ``total``
        (the whole call; ``total - setup - train - eval`` is bookkeeping).
    intercept : ndarray, shape (K,), or None
        The per-class intercepts ``b_k`` of a fit with ``fit_intercept=True`` (scores
        ``x . w_k + b_k``); None otherwise.
    library_version : str
        The version of ``scalable_softmax`` that trained the model.

    Using the model: :meth:`decision_function` (scores), :meth:`predict_proba`
    (softmax probabilities), :meth:`predict` (class indices ``0..K-1``); :meth:`save`
    and :meth:`load` store and read it back.
    """

    W: np.ndarray
    u: np.ndarray | None
    history: pd.DataFrame
    diverged_at: tuple[int, int] | None
    method: str
    params: dict
    extra: pd.DataFrame = field(default_factory=pd.DataFrame)
    timings: dict = field(default_factory=dict)
    intercept: np.ndarray | None = None
    library_version: str = __version__
    diverged_reason: str | None = None

    @property
    def diverged(self) -> bool:
        """True if the run stopped on a non-finite value."""
        return self.diverged_at is not None

    @property
    def stalled(self) -> str | None:
        """None, or a sentence saying that a full-batch run stopped on a failure
        before converging (:class:`NoProgressWarning`)."""
        return self.params.get("stalled")

    @property
    def n_classes(self) -> int:
        """``K``, the number of classes (rows of :attr:`W`)."""
        return int(self.W.shape[0])

    @property
    def n_features(self) -> int:
        """``D``, the number of features a datapoint must have."""
        return int(self.W.shape[1])

    # -- using the model -------------------------------------------------------------

    def _check_usable(self):
        finite = _all_finite(self.W) and (self.intercept is None
                                          or bool(np.isfinite(self.intercept).all()))
        if not finite:
            where = (f" (training diverged at epoch {self.diverged_at[0]})"
                     if self.diverged else "")
            raise ValueError(f"the weights of this {self.method!r} model are not finite"
                             f"{where}, so it cannot score data; train again with a smaller "
                             "lr, or with method 'implicit' (stable at any rate)")

    def decision_function(self, X) -> np.ndarray:
        """The scores ``s_ik = x_i . w_k (+ b_k)`` of the rows of ``X``.

        Parameters
        ----------
        X : scipy.sparse matrix or 2-D array (n, D), finite values, with the ``D``
            features the model was trained on (in the same order and scaling).

        Returns
        -------
        ndarray (n, K), float64. Computed in blocks of rows, so no more than a few
        million scores are held besides the result.

        Raises
        ------
        ValueError
            If ``X`` has the wrong number of columns or non-finite values, or if the
            model's weights are not finite (a diverged run).
        """
        self._check_usable()
        Xc = as_csr(X, "X")
        n, D = Xc.shape
        if D != self.n_features:
            raise ValueError(f"X has {D} features (columns) but this model was trained on "
                             f"D = {self.n_features}; give it data with the same features")
        K = self.n_classes
        S = np.empty((n, K), dtype=np.float64)
        WT = self.W.T
        step = max(1, (1 << 22) // max(K, 1))
        for a in range(0, n, step):
            S[a:a + step] = Xc[a:a + step] @ WT
        if self.intercept is not None:
            S += self.intercept[None, :]
        _check_scores(S)
        return S

    def predict_proba(self, X) -> np.ndarray:
        """Softmax probabilities ``p(k | x_i)`` (n, K); each row sums to 1 (computed
        stably: the row's largest score is subtracted before exponentiating)."""
        S = self.decision_function(X)
        S -= S.max(axis=1, keepdims=True)
        np.exp(S, out=S)
        S /= S.sum(axis=1, keepdims=True)
        return S

    def predict_log_proba(self, X) -> np.ndarray:
        """``log p(k | x_i)`` (n, K), by a stable log-sum-exp."""
        S = self.decision_function(X)
        m = S.max(axis=1, keepdims=True)
        S -= m
        S -= np.log(np.exp(S).sum(axis=1, keepdims=True))
        return S

    def predict(self, X) -> np.ndarray:
        """The most probable class index (``0..K-1``, int64) of every row; ties go to
        the lowest index, as in the evaluator's error rate."""
        return np.argmax(self.decision_function(X), axis=1).astype(np.int64)

    # -- storing the model -----------------------------------------------------------

    def save(self, path) -> Path:
        """Store the result in one ``.npz`` file at ``path`` (written to a temporary
        file in the same folder, then renamed: an existing file is replaced only by a
        complete one).

        The archive holds ``W``, ``u`` and ``intercept`` (when present), the numeric
        columns of ``history`` and ``extra`` as arrays, and ``meta``: a JSON record with
        the format name and version, the library version that trained and the one that
        saved the model, the method, ``params``, ``diverged_at``, ``diverged_reason``
        and any non-numeric ``extra`` columns. Read it back with
        :meth:`FitResult.load`; no pickling is involved, so loading a file cannot run
        code.

        Returns
        -------
        pathlib.Path, the path written.
        """
        if not isinstance(path, (str, bytes)) and not hasattr(path, "__fspath__"):
            raise ValueError(f"FitResult.save needs a file path; got {path!r}")
        if str(path) == "" or Path(path).is_dir() or str(path).endswith(("/", "\\")):
            raise ValueError(f"cannot save to {str(path)!r}: it is a folder or empty, not "
                             "a file name; give a path like 'model.npz'")
        path = Path(path)
        folder = path.parent if str(path.parent) else Path(".")
        if not folder.is_dir():
            raise FileNotFoundError(f"cannot save to {path}: the folder {folder} does not "
                                    "exist (create it first)")
        arrays = {"W": np.ascontiguousarray(self.W, dtype=np.float64)}
        if self.u is not None:
            arrays["u"] = np.asarray(self.u, dtype=np.float64)
        if self.intercept is not None:
            arrays["intercept"] = np.asarray(self.intercept, dtype=np.float64)
        frames = {}
        for fname, frame in (("history", self.history), ("extra", self.extra)):
            cols, as_json = [], {}
            for c in frame.columns:
                col = frame[c]
                if col.dtype.kind in "biuf":
                    arrays[f"{fname}/{c}"] = col.to_numpy()
                    cols.append(str(c))
                else:
                    as_json[str(c)] = [_jsonable(v) for v in col.tolist()]
            frames[fname] = {"columns": [str(c) for c in frame.columns],
                             "array_columns": cols, "json_columns": as_json,
                             "rows": int(len(frame))}
        meta = {
            "format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "library_version": self.library_version, "saved_by_version": __version__,
            "method": self.method, "params": _jsonable(self.params),
            "diverged_at": None if self.diverged_at is None else list(self.diverged_at),
            "diverged_reason": self.diverged_reason,
            "K": self.n_classes, "D": self.n_features, "frames": frames,
        }
        arrays["meta"] = np.array(json.dumps(meta))
        try:
            with atomic_open(path, "wb", fsync=True) as fh:
                np.savez_compressed(fh, **arrays)
        except OSError as exc:          # name the target, not the temporary file
            raise type(exc)(exc.errno, f"cannot save the model to {path} "
                            f"({exc.strerror or exc}); choose a writable place",
                            str(path)) from None
        return path

    @classmethod
    def load(cls, path) -> "FitResult":
        """Read a result written by :meth:`save`.

        Raises
        ------
        FileNotFoundError
            If there is no file at ``path``.
        ValueError
            If the file is not a complete ``FitResult`` archive (not an ``.npz``
            archive, truncated, without the ``meta`` record, of another format or a
            newer format version, or with arrays whose shapes disagree); the message
            names the file and what is wrong.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file (expected a model written by "
                                    "FitResult.save)")

        def bad(why):
            return ValueError(f"{path}: not a usable saved FitResult: {why}. Save the "
                              "model again with FitResult.save")

        try:
            z = np.load(path, allow_pickle=False)
        except Exception as exc:   # not a zip / .npy, pickled data, truncated header
            raise bad(f"it is not an .npz archive ({type(exc).__name__}: {exc})") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise bad("it holds a single array (.npy), not an .npz archive")
        with z:
            if "meta" not in z.files:
                raise bad("the archive has no 'meta' record")
            try:
                with z.zip.open("meta.npy") as fh:   # the record's size, before reading it
                    version = np.lib.format.read_magic(fh)
                    shape, _, dtype = (np.lib.format.read_array_header_1_0(fh)
                                       if version == (1, 0)
                                       else np.lib.format.read_array_header_2_0(fh))
                if shape != () or dtype.kind != "U" or dtype.itemsize > 1 << 26:
                    raise ValueError(f"a {dtype} array of shape {shape}, not one string "
                                     "of at most 16 M characters")
                meta = json.loads(str(z["meta"][()]))
            except Exception as exc:
                raise bad(f"its 'meta' record is unreadable ({type(exc).__name__}: {exc})") \
                    from None
            if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
                got = meta.get("format") if isinstance(meta, dict) else meta
                raise bad(f"its 'meta' record names the format {got!r}, not {FORMAT_NAME!r}")
            version = meta.get("format_version")
            if not isinstance(version, int) or version < 1:
                raise bad(f"invalid format version {version!r}")
            if version > FORMAT_VERSION:
                raise ValueError(
                    f"{path}: written by a newer scalable_softmax "
                    f"({meta.get('saved_by_version')}, format {version}); this is "
                    f"{__version__} (format {FORMAT_VERSION}): upgrade to read it")
            return cls._from_archive(z, meta, bad)

    @classmethod
    def _from_archive(cls, z, meta, bad) -> "FitResult":
        """The result in the open archive ``z`` with record ``meta``: only the members
        the record names are read, each after its header's shape and dtype have been
        checked against the record (so a garbled archive allocates nothing large)."""
        def field(key, kinds, where=meta, label=None):
            v = where.get(key) if isinstance(where, dict) else None
            if not isinstance(v, kinds) or isinstance(v, bool) and bool not in kinds:
                raise bad(f"its record's field {label or key!r} is missing or not "
                          f"{'/'.join(k.__name__ for k in kinds)} (got {v!r})")
            return v

        K, D = field("K", (int,)), field("D", (int,))
        if not (1 <= K <= 2**40 and 1 <= D <= 2**40 and K * D <= 2**40):
            raise bad(f"its record's K = {K}, D = {D} are not a plausible model size")
        params_rec = meta.get("params")
        N = params_rec.get("N") if isinstance(params_rec, dict) else None
        if N is not None and (not isinstance(N, int) or isinstance(N, bool) or N < 1):
            raise bad(f"its record's field 'params.N' is not a positive integer (got {N!r})")
        sizes = {}              # member -> the bytes its header declares, all checked

        def member(name, shape, kinds="f", required=True, column=None, read_now=True):
            """Member ``name`` (or, with ``read_now=False``, its name) after checking
            its header and size (:func:`_check_member`)."""
            if name not in z.files:
                if required:
                    raise bad(f"the record lacks or garbles {name!r} (the archive has no "
                              "such array)")
                return None
            sizes[name] = _check_member(z, name, shape, kinds, column, bad)
            return load(name) if read_now else name

        def load(name):
            try:
                return z[name]
            except Exception as exc:   # damaged member: zlib.error, BadZipFile, ...
                raise bad(f"the array {name!r} could not be read "
                          f"({type(exc).__name__}: {exc})") from None

        W = member("W", (K, D), read_now=False)
        intercept = member("intercept", (K,), required=False)
        u = member("u", (None,) if N is None else (N,), required=False, read_now=False,
                   column=None if N is None else "u (one value per training row)")
        frames_rec = field("frames", (dict,))
        frames = {}
        for fname in ("history", "extra"):
            spec = field(fname, (dict,), frames_rec, f"frames.{fname}")
            rows = field("rows", (int,), spec, f"frames.{fname}.rows")
            columns = field("columns", (list,), spec, f"frames.{fname}.columns")
            as_array = field("array_columns", (list,), spec,
                             f"frames.{fname}.array_columns")
            as_json = field("json_columns", (dict,), spec, f"frames.{fname}.json_columns")
            data = {}
            for c in columns:
                if c in as_array:
                    data[c] = (member(f"{fname}/{c}", (rows,), "biuf", read_now=False,
                                      column=f"column {c!r} of {fname}"),)
                elif isinstance(as_json.get(c), list) and len(as_json[c]) == rows:
                    data[c] = as_json[c]
                else:
                    raise bad(f"column {c!r} of {fname} is not {rows} values in the "
                              "record")
            frames[fname] = (data, columns)
        check_fits_in_memory(sum(sizes.values()), f"the model in {z.zip.filename} (K = "
                             f"{K:,}, D = {D:,}; its arrays: "
                             + ", ".join(f"{k} {v:,} bytes" for k, v in sizes.items())
                             + ")", "load it on a machine with more memory")
        W = load(W)
        if W.dtype != np.float64:
            raise bad(f"W has dtype {W.dtype}; the record says float64 ({K}, {D})")
        u = None if u is None else load(u)
        frames = {fname: pd.DataFrame({c: load(v[0]) if isinstance(v, tuple) else v
                                       for c, v in data.items()}, columns=columns)
                  for fname, (data, columns) in frames.items()}
        div = meta.get("diverged_at")
        if div is not None and not (isinstance(div, list) and all(
                isinstance(v, int) for v in div)):
            raise bad(f"its record's field 'diverged_at' is not null or a list of "
                      f"integers (got {div!r})")
        return cls(W=W, u=u, history=frames["history"],
                   diverged_at=None if div is None else tuple(div),
                   method=field("method", (str,)), params=dict(field("params", (dict,))),
                   extra=frames["extra"], intercept=intercept,
                   library_version=str(meta.get("library_version")),
                   diverged_reason=meta.get("diverged_reason"))


def _check_scores(S):
    """Raise :class:`~scalable_softmax.evaluate.NonFiniteScoreError` (naming the row and
    the class) when a score is NaN or overflowed to ``+inf``, or every score of a row is
    ``-inf``: the probabilities would be NaN. The policy :func:`evaluate` follows
    (it raises when a row's metrics are not finite), shared by
    :meth:`FitResult.predict_proba`, :meth:`FitResult.predict` and the estimator, which
    never return NaN probabilities or a class chosen among NaN scores. A score of
    ``-inf`` next to finite ones is a probability of 0 (a log-probability of ``-inf``)."""
    if _all_finite(S):
        return
    from scalable_softmax.evaluate import NonFiniteScoreError

    with np.errstate(invalid="ignore"):
        bad = np.isnan(S) | (S == np.inf) | (S.max(axis=1, keepdims=True) == -np.inf)
    if bad.any():
        i, k = (int(v[0]) for v in np.nonzero(bad))
        raise NonFiniteScoreError(i, k, S[i, k], "a score is not finite")


def _check_member(z, name, shape, kinds, column, bad) -> int:
    """The bytes of member ``name`` of the open archive ``z``, after checking its .npy
    header against ``shape`` (None entries: any length) and dtype ``kinds``
    (``column``: a frame's column, named as such in the message), and its zip entry
    against the header (:func:`_member_bytes`); ``bad(why)`` makes the error."""
    try:
        got_shape, dtype, offset = _member_header(z, name)
    except Exception as exc:
        raise bad(f"the array {name!r} could not be read "
                  f"({type(exc).__name__}: {exc})") from None
    if len(got_shape) != len(shape) or any(
            w is not None and g != w for g, w in zip(got_shape, shape)) \
            or dtype.kind not in kinds or dtype.hasobject:
        want = tuple("n" if w is None else w for w in shape)
        if column and len(got_shape) == 1 and dtype.kind in kinds:
            raise bad(f"{column} has {got_shape[0]} rows, expected {shape[0]}")
        raise bad(f"{column or name} has shape {got_shape} and dtype {dtype}; "
                  f"the record says shape {want}, dtype kind {kinds!r}")
    try:
        return _member_bytes(z, name, got_shape, dtype, offset)
    except Exception as exc:
        raise bad(f"the array {name!r} could not be read "
                  f"({type(exc).__name__}: {exc})") from None


def _member_header(z, name):
    """``(shape, dtype, offset)`` of the .npy header of member ``name`` of the open
    archive ``z`` (``offset``: where its data begin), read without reading the data."""
    with z.zip.open(name + ".npy") as fh:
        version = np.lib.format.read_magic(fh)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        got_shape, _, dtype = read(fh)
        return got_shape, dtype, fh.tell()


def _member_bytes(z, name, got_shape, dtype, offset) -> int:
    """The bytes of member ``name``'s array (shape ``got_shape``, ``dtype``, data from
    ``offset``), after checking that its zip entry holds exactly that: the entry's
    declared size, what its compressed bytes can expand to (deflate: at most 1032-fold)
    and what it really holds (streamed, CRC checked), before anything of that size is
    allocated. ``ValueError`` saying which disagrees."""
    info = z.zip.getinfo(name + ".npy")
    nbytes = math.prod(got_shape) * dtype.itemsize
    if info.file_size != offset + nbytes:
        raise ValueError(f"its header declares {nbytes:,} bytes of data but the archive "
                         f"entry holds {info.file_size - offset:,}")
    limit = (info.compress_size if info.compress_type == 0
             else 1032 * info.compress_size + 1024)
    if info.file_size > limit:
        raise ValueError(f"{info.compress_size:,} compressed bytes cannot hold the "
                         f"{info.file_size:,} bytes its entry declares")
    with z.zip.open(info) as fh:
        fh.read(offset)
        got = 0             # what the entry really holds (and its CRC), streamed
        while chunk := fh.read(1 << 20):
            got += len(chunk)
    if got != nbytes:
        raise ValueError(f"its header declares {nbytes:,} bytes of data but the entry "
                         f"holds {got:,}")
    return nbytes


def _jsonable(v):
    """``v`` as plain JSON data (NumPy scalars and arrays to numbers and lists, tuples to
    lists, mapping keys to strings; anything else to its ``repr``)."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    if v is None or isinstance(v, str):
        return v
    return repr(v)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------

def _validate_data(config, X, y, eval_sets):
    """The training data and the evaluation sets, checked: ``(X, y, K, sets)`` with
    ``X`` canonical float64 CSR, ``y`` int64 and ``K`` the configuration's, else
    ``max(y) + 1``."""
    X = as_csr(X, "X")
    N, D = X.shape
    y = as_labels(y, N, "y")
    K = config.K
    if K is None:
        K = int(y.max()) + 1
        if K < 2:
            raise ValueError("all labels in y are 0, so K cannot be inferred; pass K >= 2")
    K = int(K)
    check_label_range(y, K, "y", _LARGER_K)
    if config.K is None:
        _warn_empty_classes(y, K)
    if eval_sets is None:
        return X, y, K, {"train": (X, y)}
    if not isinstance(eval_sets, dict):
        raise ValueError("eval_sets must be a dict mapping a name to an (X, y) pair")
    if not eval_sets:
        raise ValueError("eval_sets is empty; give at least one (X, y) set, None for the "
                         "training set, or eval_epochs=[] to evaluate nothing")
    sets = {}
    for name, pair in eval_sets.items():
        if not (isinstance(name, str) and name):
            raise ValueError(f"eval_sets keys must be non-empty strings; got {name!r}")
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ValueError(f"eval_sets[{name!r}] must be an (X, y) pair")
        Xe = as_csr(pair[0], f"eval_sets[{name!r}] X")
        if Xe.shape[1] != D:
            raise ValueError(f"eval_sets[{name!r}] X has {Xe.shape[1]} columns but the "
                             f"training X has D = {D}")
        ye = as_labels(pair[1], Xe.shape[0], f"eval_sets[{name!r}] y")
        check_label_range(ye, K, f"eval_sets[{name!r}] y", _LARGER_K)
        sets[name] = (Xe, ye)
    return X, y, K, sets


def _check_model_size(config, K, D, N):
    """Refuse, before anything of size ``K x D`` is allocated, a model the machine's
    available memory cannot hold: ``W`` (``K x D`` float64; the full-batch methods
    keep ``2 * memory + 6`` arrays of its size: L-BFGS's pairs, the gradient, the
    iterates), a few per-class vectors (class counts, scales) and ``u`` (``N``)."""
    cls = config.trainer_class
    copies = (2 * int(config.resolved_options.get("memory") or 10) + 6
              if cls.full_batch else 1)
    need = 8 * (K * D * copies + 4 * K + N)
    what = (f"a {config.method!r} model of K = {K:,} classes x D = {D:,} features "
            f"(W alone: {K:,} x {D:,} float64 = {8 * K * D:,} bytes"
            + (f", {copies} arrays of that size for L-BFGS" if copies > 1 else "") + ")")
    check_fits_in_memory(need, what, "reduce the number of features D (select or hash "
                         "them; a data file whose feature indices are huge declares a "
                         "huge D) or the number of classes K")
    n = int(config.batch_size or cls.default_batch_size)
    m = int(config.n_sampled or cls.default_n_sampled)
    if n > 1:       # a step's buffers: the minibatch's scores over K (or m) classes
        check_fits_in_memory(need + 8 * n * (K + D + m),
                             f"method {config.method!r} with batch_size = {n:,} (K = {K:,},"
                             f" D = {D:,}; the step's buffers grow with batch_size)",
                             f"use a batch_size of at most N = {N:,} rows")


class EmptyClassWarning(UserWarning):
    """:func:`fit` inferred ``K = max(y) + 1`` and some of the classes ``0..K-1`` have
    no label in ``y`` (labels not numbered from 0, or with gaps)."""


def _warn_empty_classes(y, K):
    """Warn when the labels ``y`` leave some of the inferred classes ``0..K-1`` empty:
    the model then has classes no datapoint belongs to, which a caller who numbered
    the labels ``5..14`` did not ask for (a caller who means them passes ``K=``)."""
    empty = np.flatnonzero(np.bincount(y, minlength=K) == 0)
    if empty.size:
        shown = ", ".join(map(str, empty[:10].tolist())) + (", ..." if empty.size > 10
                                                              else "")
        warnings.warn(
            f"y leaves {empty.size} of the K = max(y) + 1 = {K} classes without a label "
            f"(classes {shown}); the model gets a weight row for each of them. If your "
            "labels are not numbered 0..K-1, map them first with classes, y = "
            "numpy.unique(y, return_inverse=True) (or use SoftmaxSGDClassifier, which "
            "does); to keep empty classes, pass K= explicitly",
            EmptyClassWarning, stacklevel=6)


def _check_init_intercept(fit_intercept, init_intercept):
    if init_intercept is not None and not fit_intercept:
        raise ValueError("init_intercept needs fit_intercept=True (a model without "
                         "intercept has none to start from)")


def _real_array(a, name):
    """``a`` as a dense float64 array: refused (naming ``name``) when it is a sparse
    matrix, complex (its imaginary part would be dropped), or not numbers at all."""
    if sp.issparse(a):
        raise ValueError(f"{name} must be a dense array; got a scipy.sparse "
                         f"{a.format.upper()} matrix (use {name}.toarray())")
    try:
        arr = np.asarray(a)
    except Exception as exc:
        raise ValueError(f"{name} must be an array of real numbers ({exc})") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold real numbers; got dtype {arr.dtype}"
                         + (" (its imaginary part would be lost)" if arr.dtype.kind == "c"
                            else ""))
    with np.errstate(over="ignore"):
        return arr.astype(np.float64, copy=False)


def _initial_weights(init_W, init_intercept, K, D, fit_intercept, scaling):
    """The trainer's starting weights (``K x D``, or ``K x (D+1)`` with the intercept
    column divided by ``scaling``), or None for the default ``W = 0``."""
    if init_W is None and init_intercept is None:
        return None
    W0 = np.zeros((K, D)) if init_W is None else _real_array(init_W, "init_W")
    if W0.shape != (K, D):
        raise ValueError(f"init_W must have shape (K, D) = ({K}, {D}); got {W0.shape}")
    if not np.all(np.isfinite(W0)):
        raise ValueError("init_W contains non-finite values (NaN or inf)")
    if not fit_intercept:
        return np.ascontiguousarray(W0)
    b0 = np.zeros(K) if init_intercept is None else _real_array(init_intercept,
                                                                    "init_intercept")
    if b0.shape != (K,):
        raise ValueError(f"init_intercept must have shape (K,) = ({K},); got {b0.shape}")
    if not np.all(np.isfinite(b0)):
        raise ValueError("init_intercept contains non-finite values (NaN or inf)")
    return np.ascontiguousarray(np.hstack([W0, (b0 / scaling)[:, None]]))


def _with_intercept_column(X, value):
    """``[X, value]``: canonical CSR with one more column holding ``value``."""
    col = sp.csr_matrix(np.full((X.shape[0], 1), value, dtype=np.float64))
    out = sp.hstack([X, col], format="csr", dtype=np.float64)
    out.sort_indices()
    return out


def _exact_u(X, y, W, raman=False, chunk=None):
    """``u_i* = log sum_k exp(s_ik) - s_{i,y_i}`` (docs/math.md section 2.1), or
    ``ubar_i* = log sum_k exp(s_ik)`` for Raman's formulation, in blocks of rows."""
    N, K = X.shape[0], W.shape[0]
    out = np.empty(N)
    step = chunk or max(1, (1 << 22) // K)
    WT = W.T
    for a in range(0, N, step):
        S = X[a:a + step] @ WT
        m = S.max(axis=1)
        lse = m + np.log(np.exp(S - m[:, None]).sum(axis=1))
        out[a:a + step] = lse if raman else np.maximum(
            lse - S[np.arange(S.shape[0]), y[a:a + step]], 0.0)
    return out


# ---------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------

class DivergenceWarning(UserWarning):
    """:func:`fit` stopped a run on a non-finite (or overflowing) value; the result is
    returned (``FitResult.diverged`` is True) so that a sweep goes on."""


class NoProgressWarning(UserWarning):
    """A full-batch method (L-BFGS) stopped for good on a failure (its line search
    found no step, or it ran out of evaluations) before converging: the weights are
    where it stopped, often where it started (``W = 0``, log-loss ``log K``).
    ``FitResult.stalled`` holds the sentence; the run is returned so a sweep goes on."""


def _all_finite(A, chunk_rows=1024):
    """``np.isfinite(A).all()`` without a full-size temporary."""
    if A is None:
        return True
    if A.ndim == 1:
        return bool(np.isfinite(A).all())
    return all(bool(np.isfinite(A[r:r + chunk_rows]).all())
               for r in range(0, A.shape[0], chunk_rows))


def make_order(rng, N, order):
    """The datapoint order of one epoch (``order``: one of
    :data:`scalable_softmax.validation.ORDERS`), drawn from ``rng``."""
    if order == "shuffle":
        return rng.permutation(N).astype(np.int64)
    if order == "uniform":
        return rng.integers(0, N, size=N, dtype=np.int64)
    return np.arange(N, dtype=np.int64)


def metric_columns(set_names) -> list[str]:
    """``<set>_log_loss``, ``<set>_error``, ``<set>_defective`` for every set."""
    return [f"{name}_{mt}" for name in set_names for mt in _METRICS]


def empty_metrics(set_names) -> dict:
    """The metrics of an epoch that was not evaluated: NaN everywhere."""
    return {c: math.nan for c in metric_columns(set_names)}


def diverged_metrics(set_names) -> dict:
    """The metrics of the epoch where a run diverged: log-loss inf, error and defective
    NaN for every set."""
    return {c: (math.inf if c.endswith("_log_loss") else math.nan)
            for c in metric_columns(set_names)}


class _Monitor:
    """The monitoring evaluations of a run: the evaluation sets, the subsample size and
    seed, and the seconds spent (``seconds``)."""

    def __init__(self, sets, eval_rows, seed):
        self.sets, self.eval_rows, self.seed = sets, eval_rows, seed
        self.seconds = 0.0
        self.reason = None

    def evaluate(self, W):
        """The metrics row of weights ``W`` (``K x D``, or ``(array, layout)`` as
        :meth:`~scalable_softmax.methods.base.Trainer.native_weights` gives it), or None
        when the run has diverged: ``W`` is not finite, or a score or a log-loss is not
        finite (finite but huge weights); :attr:`reason` then says which."""
        from scalable_softmax.evaluate import NonFiniteScoreError, evaluate

        W, layout = W if isinstance(W, tuple) else (W, "class")

        if not _all_finite(W):
            self.reason = "the weights W hold a non-finite value"
            return None
        t_eval = time.perf_counter()
        row = {}
        for name, (Xe, ye) in self.sets.items():
            rows = self.eval_rows
            sub = rows if (rows is not None and rows < Xe.shape[0]) else None
            try:
                res = evaluate(Xe, ye, W, subsample=sub, seed=self.seed, layout=layout)
            except NonFiniteScoreError:
                self.reason = f"the scores on the {name!r} set overflow (huge weights)"
                return None
            if not math.isfinite(res.log_loss):
                self.reason = f"the log-loss on the {name!r} set is {res.log_loss}"
                return None
            row[f"{name}_log_loss"] = float(res.log_loss)
            row[f"{name}_error"] = float(res.error)
            row[f"{name}_defective"] = float(res.defective)
        self.seconds += time.perf_counter() - t_eval
        return row


#: errors of a step's arithmetic on huge values, which stop a run as a divergence
_NUMERIC_ERRORS = (ZeroDivisionError, OverflowError, FloatingPointError,
                   np.linalg.LinAlgError)


def piece_seed(seed: int, start: int) -> int:
    """The kernel seed of the piece of an epoch that starts at position ``start > 0`` of
    its order, for an epoch of kernel seed ``seed`` cut into pieces (:func:`run_epochs`'
    ``pieces``; the piece at 0 keeps ``seed``, so an epoch run whole draws what it draws
    uncut): a SeedSequence of the two, as a 63-bit integer."""
    s0, s1 = np.random.SeedSequence([int(seed), int(start)]).generate_state(2, np.uint32)
    return int((int(s0) << 31) ^ int(s1)) & (2 ** 63 - 1)


@dataclass(frozen=True)
class Checkpoint:
    """Where a run is, as :func:`fit`'s ``checkpoint`` callback is told after a piece of
    an epoch (and after every epoch).

    Attributes
    ----------
    epoch : int
        The epoch in progress (1-based); ``points`` of its ``n_rows`` are done.
    points, n_rows : int
        Datapoints of the epoch's order done, and ``N``; ``points == n_rows`` at an
        epoch's end (:attr:`epoch_end`).
    steps : int
        Optimiser steps so far (all epochs).
    seconds : float
        Training seconds so far (the history's clock: the callbacks, evaluations and
        compilation excluded).
    lr : float
        The epoch's learning rate.
    trainer : Trainer
        The trainer; :meth:`weights` gives its weights without a copy.
    """

    epoch: int
    points: int
    n_rows: int
    steps: int
    seconds: float
    lr: float
    trainer: object = field(repr=False)

    @property
    def epochs(self) -> float:
        """The epochs done, fractional: ``epoch - 1 + points / n_rows``."""
        return self.epoch - 1 + self.points / self.n_rows

    @property
    def epoch_end(self) -> bool:
        """True after the epoch's last piece (the epoch's checks and evaluation done)."""
        return self.points == self.n_rows

    def weights(self):
        """The trainer's weights as it keeps them, ``(array, layout)``
        (:meth:`~scalable_softmax.methods.base.Trainer.native_weights`: may be the
        trainer's own array; copy it to keep it)."""
        return self.trainer.native_weights()


class FixedPieces:
    """Pieces of ``size`` datapoints (the last piece of an epoch takes the rest): what
    ``pieces=size`` (an int) means to :func:`fit`."""

    def __init__(self, size: int):
        self.size = int(size)

    def piece_size(self, left: int) -> int:
        return min(self.size, left)


def check_pieces(pieces, full_batch=False):
    """``pieces`` of :func:`fit` as a chooser (an object with ``piece_size(left)``), or
    None for whole epochs; raises ``ValueError`` for anything else, and for pieces of a
    full-batch method (whose epoch is one L-BFGS iteration, which cannot be cut)."""
    if pieces is None:
        return None
    if isinstance(pieces, numbers.Integral) and not isinstance(pieces, bool):
        if pieces < 1:
            raise ValueError(f"pieces must be None, an int >= 1 (datapoints per piece) or "
                             f"an object with piece_size(left); got {pieces!r}")
        pieces = FixedPieces(pieces)
    elif not callable(getattr(pieces, "piece_size", None)):
        raise ValueError("pieces must be None, an int >= 1 (datapoints per piece) or an "
                         f"object with a method piece_size(left); got {pieces!r}")
    if full_batch:
        raise ValueError("pieces cannot cut the epochs of a full-batch method (an epoch is "
                         "one L-BFGS iteration); pass pieces=None")
    return pieces


def check_callbacks(on_epoch=None, checkpoint=None):
    """Raise ``ValueError`` unless ``on_epoch`` and ``checkpoint`` are None or callable."""
    if on_epoch is not None and not callable(on_epoch):
        raise ValueError(f"on_epoch must be None or a callable on_epoch(e); got {on_epoch!r}")
    if checkpoint is not None and not callable(checkpoint):
        raise ValueError("checkpoint must be None or a callable checkpoint(point) -> bool "
                         f"(True stops the run); got {checkpoint!r}")


def _next_piece(pieces, left):
    """The size of the next piece (``left`` datapoints of the epoch to go), checked."""
    size = pieces.piece_size(left)
    if not isinstance(size, numbers.Integral) or isinstance(size, bool) \
            or not 1 <= size <= left:
        raise ValueError(f"pieces.piece_size({left}) must return an int in 1..{left} (the "
                         f"datapoints of the next piece); it returned {size!r}")
    return int(size)


def _merge_extra(parts, steps):
    """One epoch's ``extra`` from those of its pieces: integer counters summed, other
    numbers averaged weighted by the pieces' steps, anything else the last piece's."""
    if len(parts) == 1:
        return parts[0]
    out = {}
    for key in dict.fromkeys(k for p in parts for k in p):
        vals = [(p[key], s) for p, s in zip(parts, steps) if key in p]
        if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v, _ in vals):
            out[key] = sum(int(v) for v, _ in vals)
        elif all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v, _ in vals):
            total = sum(s for _, s in vals)
            out[key] = (sum(float(v) * s for v, s in vals) / total if total
                        else float(vals[-1][0]))
        else:
            out[key] = vals[-1][0]
    return out


class EpochRun(NamedTuple):
    """What :func:`run_epochs` returns."""

    #: one history row per epoch (epoch 0 first); a run stopped inside epoch ``e`` (by
    #: the checkpoint callback or a divergence) ends with a row for epoch ``e`` holding
    #: the steps and seconds where it stopped
    rows: list
    #: one dict of the method's counters per epoch run
    extras: list
    #: ``(epoch, step)`` (step within the epoch; -1: found by an end-of-epoch check)
    diverged_at: tuple | None
    #: a sentence saying what was not finite, or None
    reason: str | None
    #: the epochs done when the run ended (``e - 1 + points / N`` of its last piece)
    stopped_at: float
    #: True when the checkpoint callback stopped the run
    stopped: bool


def _piece_divergence(rep):
    """``(step, reason)`` when the report of a piece shows a failed or non-finite step
    (``step`` within the piece), else ``(None, None)``."""
    if (rep.extra or {}).get("numeric_error"):
        return -1, (f"a training step failed on huge values ({rep.extra['numeric_error']})")
    if rep.diverged_at is not None and rep.diverged_at >= 0:
        return int(rep.diverged_at), "a training step produced a non-finite value"
    return None, None


def _epoch_divergence(rep, trainer):
    """``(step, reason)`` when epoch report ``rep`` or the trainer's ``u`` shows a
    non-finite value (``step = -1``: found after the epoch), else ``(None, None)``."""
    bad_step, why = _piece_divergence(rep)
    if bad_step is not None:
        return bad_step, why
    if not _all_finite(trainer.u):
        return -1, "u holds a non-finite value"
    return None, None


def _run_epoch(trainer, idx, lr_e, kseed):
    """``trainer.run_epoch``; a numeric breakdown in it is reported as a divergence at
    its first step (a kernel's float division by zero, which numba raises, or a singular
    system: the arithmetic broke down on huge values, as a divergence does)."""
    try:
        return trainer.run_epoch(idx, lr_e, kseed)
    except _NUMERIC_ERRORS as exc:
        from scalable_softmax.methods.base import EpochReport

        return EpochReport(steps=0, diverged_at=0, extra={
            "numeric_error": f"{type(exc).__name__}: {exc}"})


def _run_pieces(trainer, idx, lr_e, kseed, pieces, t0, on_piece):
    """Run one epoch's order ``idx`` in the pieces ``pieces`` chooses (None: whole) and
    return ``(report, seconds, points, stopped)``: one report for the epoch (steps summed,
    ``diverged_at`` within the epoch, counters merged), the training seconds from
    ``t0`` (the callbacks excluded), the datapoints run, and whether ``on_piece``
    stopped it: ``on_piece(points, steps, seconds)`` is called after every piece that
    ends inside the epoch, and True stops the epoch there."""
    from scalable_softmax.methods.base import EpochReport

    N = idx.shape[0]
    if pieces is None:
        rep = _run_epoch(trainer, idx, lr_e, kseed)
        return rep, time.perf_counter() - t0, N, False
    a, seconds, steps, parts, part_steps = 0, 0.0, 0, [], []
    diverged, stopped = -1, False
    while a < N:
        size = _next_piece(pieces, N - a)
        if a:
            t0 = time.perf_counter()
        t_kernel = time.perf_counter()
        rep = _run_epoch(trainer, idx[a:a + size], lr_e,
                         kseed if a == 0 else piece_seed(kseed, a))
        t1 = time.perf_counter()
        seconds += t1 - t0
        if hasattr(pieces, "measured"):
            pieces.measured(size, t1 - t_kernel)
        a += size
        parts.append(dict(rep.extra or {}))
        part_steps.append(int(rep.steps))
        bad_step, _ = _piece_divergence(rep)
        if bad_step is not None:
            diverged = steps + max(bad_step, 0)
        steps += int(rep.steps)
        if bad_step is not None:
            break
        if a < N and on_piece(a, steps, seconds):
            stopped = True
            break
    extra = _merge_extra(parts, part_steps)
    report = EpochReport(steps=steps, diverged_at=diverged, extra=extra or None)
    return report, seconds, a, stopped


def _epoch_checks(trainer, monitor, rep, *, evaluate, last):
    """The checks after an epoch of report ``rep``: ``(bad_step, reason, metrics)``,
    ``bad_step`` None unless the epoch diverged (:func:`_epoch_divergence`; or the
    evaluation, done when ``evaluate``, or at the ``last`` epoch the check of ``W``,
    found a non-finite value), ``metrics`` the evaluation's row or None."""
    bad_step, why = _epoch_divergence(rep, trainer)
    metrics = None
    if bad_step is None and evaluate:
        metrics = monitor.evaluate(trainer.native_weights())
        if metrics is None:
            bad_step, why = -1, monitor.reason
    elif bad_step is None and last and not _all_finite(trainer.native_weights()[0]):
        bad_step, why = -1, "the weights W hold a non-finite value"
    return bad_step, why, metrics


def run_epochs(trainer, monitor, config, n_rows, on_epoch=None, *, checkpoint=None,
               pieces=None) -> EpochRun:
    """Train ``trainer`` for up to ``config.epochs`` epochs and monitor it: the library's
    one epoch driver (:func:`fit` calls it on the trainer it builds; a caller that
    builds its own trainer, as the race of notebooks 12 and 14 does, calls it directly).

    ``config``: a resolved :class:`~scalable_softmax.protocols.FitConfig` (``epochs``,
    ``lr``, ``lr_decay``, ``seed``, ``order``, ``eval_epochs``, ``method``,
    ``progress`` are read). One ``numpy.random.default_rng(config.seed)`` draws, epoch
    after epoch, the data order (``config.order``) and then the kernel seed; epoch ``e``
    runs at ``lr * lr_decay**(e-1)`` (NaN when ``lr`` is None). ``monitor`` (a
    ``_Monitor``, or None: no evaluation sets) evaluates the epochs of
    ``config.eval_epochs`` (0 = the initial point); ``W`` is also checked at the last
    epoch.
    The loop stops at the first divergence, and after the epoch in which a full-batch
    trainer has finished (:attr:`~scalable_softmax.methods.base.Trainer.finished`:
    converged or stopped for good), so that no work is done after convergence whatever
    ``epochs`` is; that epoch is evaluated
    when a later epoch of ``eval_epochs`` was due, and the history ends there.
    ``n_rows``: the datapoints ``N``.
    ``on_epoch``: None or a callable ``on_epoch(e)`` called after each epoch (it may
    raise to stop training, e.g. a cancelled sweep's run).
    ``checkpoint``, ``pieces``: :func:`fit`'s (``pieces`` as :func:`check_pieces`
    makes it, or as given).

    Returns
    -------
    :class:`EpochRun` ``(rows, extras, diverged_at, reason, stopped_at, stopped)``.
    """
    check_callbacks(on_epoch, checkpoint)
    pieces = check_pieces(pieces, bool(trainer.full_batch))
    names = list(monitor.sets) if monitor is not None else []
    ev = set(config.eval_epochs) if monitor is not None else set()
    epochs, lr, lr_decay = config.epochs, config.lr, config.lr_decay
    rows, extras = [], []
    steps, seconds, diverged_at, reason = 0, 0.0, None, None
    stopped_at, stopped = 0.0, False
    row0 = dict(epoch=0, steps=0, seconds=0.0, lr=math.nan, evaluated=False, diverged=False)
    m0 = monitor.evaluate(trainer.native_weights()) if 0 in ev else empty_metrics(names)
    if m0 is None:               # cannot happen with a sane init_params
        row0.update(diverged_metrics(names), diverged=True)
        diverged_at, reason = (0, -1), monitor.reason
    else:
        row0.update(m0, evaluated=0 in ev)
    rows.append(row0)
    rng = np.random.default_rng(config.seed)

    from scalable_softmax.progress import shows_progress, tqdm
    bar = tqdm(total=epochs, desc=f"fit {config.method}",
               disable=not shows_progress(config.progress), leave=False,
               mininterval=1.0, dynamic_ncols=True)
    try:
        for e in range(1, epochs + 1):
            if diverged_at is not None:
                break
            lr_e = math.nan if lr is None else lr * lr_decay ** (e - 1)
            t0 = time.perf_counter()
            idx = make_order(rng, n_rows, config.order)
            kseed = int(rng.integers(0, 2 ** 63 - 1))

            def on_piece(points, piece_steps, piece_seconds, e=e, lr_e=lr_e, s0=steps,
                         t=seconds):
                return bool(checkpoint(Checkpoint(e, points, n_rows, s0 + piece_steps,
                                                  t + piece_seconds, lr_e, trainer)))

            rep, dt, done_points, stopped = _run_pieces(
                trainer, idx, lr_e, kseed, pieces, t0,
                on_piece if checkpoint is not None else lambda *a: False)
            seconds += dt
            steps += int(rep.steps)
            extras.append({"epoch": e, **(rep.extra or {})})
            row = dict(epoch=e, steps=steps, seconds=seconds, lr=lr_e, evaluated=False,
                       diverged=False)
            stopped_at = e - 1 + done_points / n_rows
            if stopped:                          # by the checkpoint, inside the epoch
                row.update(empty_metrics(names))
                rows.append(row)
                break
            done = bool(trainer.finished) and e < epochs
            bad_step, why, metrics = _epoch_checks(
                trainer, monitor, rep, evaluate=e in ev or (done and any(x > e for x in ev)),
                last=e == epochs)
            if bad_step is not None:
                diverged_at, reason = (e, bad_step), why
                row.update(diverged_metrics(names), diverged=True)
            elif metrics is not None:
                row.update(metrics, evaluated=True)
            else:
                row.update(empty_metrics(names))
            rows.append(row)
            bar.update(1)
            if on_epoch is not None:
                on_epoch(e)
            if metrics is not None:
                first = names[0]
                bar.set_postfix({f"{first} log-loss": f"{metrics[f'{first}_log_loss']:.4g}"},
                                refresh=False)
            if diverged_at is None and checkpoint is not None and checkpoint(
                    Checkpoint(e, n_rows, n_rows, steps, seconds, lr_e, trainer)):
                stopped = True
                break
            if done:
                break
    finally:
        bar.close()
    return EpochRun(rows, extras, diverged_at, reason, stopped_at, stopped)


def assemble_history(rows, set_names) -> pd.DataFrame:
    """The history DataFrame of :class:`FitResult` from the rows of :func:`run_epochs`:
    columns ``epoch``, ``steps``, ``seconds``, ``lr``, ``evaluated``, ``diverged`` and
    the metrics of every set, in that order, with integer and boolean dtypes."""
    history = pd.DataFrame(rows)
    cols = ["epoch", "steps", "seconds", "lr", "evaluated", "diverged"] + \
        metric_columns(set_names)
    history = history[cols]
    history["epoch"] = history["epoch"].astype(np.int64)
    history["steps"] = history["steps"].astype(np.int64)
    history["evaluated"] = history["evaluated"].astype(bool)
    history["diverged"] = history["diverged"].astype(bool)
    return history


def assemble_extra(extras) -> pd.DataFrame:
    """The ``extra`` DataFrame of :class:`FitResult`: one row per epoch run."""
    return pd.DataFrame(extras) if extras else pd.DataFrame({"epoch": []})


def warn_divergence(method, lr, diverged_at, reason, stacklevel=3, defaulted=False):
    """Issue a :class:`DivergenceWarning` saying where run ``method`` at rate ``lr``
    stopped, on what, and what to do (``defaulted``: ``lr`` was the method's default,
    :data:`scalable_softmax.protocols.DEFAULT_LR`, not given by the caller)."""
    epoch, step = diverged_at
    where = f"epoch {epoch}" + (f", step {step}" if step >= 0 else "")
    rate = "" if lr is None else f" lr={lr!r}"
    what = "Use a smaller lr"
    if defaulted and lr is not None:
        rate += " (the method's default rate)"
        what = (f"No default rate suits every data set for {method!r}: pass a smaller "
                f"lr, e.g. lr={lr / 10:g}")
    warnings.warn(
        f"fit({method!r},{rate}) diverged at {where}: {reason or 'a non-finite value'}; "
        f"the run stopped there (FitResult.diverged is True). {what}, scale the "
        "features (unit-L2 rows, as the default rates were tuned on), or method "
        "'implicit' (stable at any rate)",
        DivergenceWarning, stacklevel=stacklevel)


def _prepare(config, X, y, eval_sets, init_W, init_intercept):
    """Check the data against the (resolved) configuration ``config``, add the
    intercept column, build and initialise the trainer. Returns ``(trainer, config,
    sets, params)`` (``config`` with ``K`` set)."""
    _check_init_intercept(config.fit_intercept, init_intercept)
    X, y, K, sets = _validate_data(config, X, y, eval_sets)
    config = config.for_classes(K)
    N, D = X.shape
    _check_model_size(config, K, D + (1 if config.fit_intercept else 0), N)
    scaling = float(config.intercept_scaling)
    W_start = _initial_weights(init_W, init_intercept, K, D, config.fit_intercept, scaling)
    if config.fit_intercept:
        X_orig, X = X, _with_intercept_column(X, scaling)
        sets = {name: (X if Xe is X_orig else _with_intercept_column(Xe, scaling), ye)
                for name, (Xe, ye) in sets.items()}
    cls = config.trainer_class
    trainer = cls(X, y, K, mu=float(config.mu), batch_size=config.batch_size,
                  n_sampled=config.n_sampled, resolved=config.resolved_options)
    params = dict(method=config.method, lr=config.lr, epochs=config.epochs,
                  lr_decay=float(config.lr_decay), mu=float(config.mu),
                  batch_size=config.batch_size, n_sampled=config.n_sampled,
                  seed=config.seed, order=config.order,
                  eval_epochs=list(config.eval_epochs), eval_sets=list(sets),
                  eval_rows=config.eval_rows, u_init=config.u_init, K=K, N=N, D=D,
                  options=dict(config.options))
    if config.fit_intercept:
        params.update(fit_intercept=True, intercept_scaling=scaling)
    if W_start is not None:
        params["warm_start"] = True
    if config.protocol is not None:
        params["protocol"] = config.protocol
    exact_u = config.u_init == "exact"
    trainer.init_params("zero" if exact_u else config.u_init)
    if W_start is not None:
        trainer.set_params(W_start)
    if exact_u and trainer.has_u and cls.exact_u is not None:
        trainer.u[:] = _exact_u(X, y, trainer.weights(), raman=(cls.exact_u == "raman"))
    trainer.warmup()
    return trainer, config, sets, params


def fit(X, y, method, lr=None, epochs=EPOCHS, lr_decay=None, mu=0.0, batch_size=None,
        n_sampled=None, seed=0, order=None, eval_epochs=None, eval_sets=None,
        eval_rows=None, progress=None, u_init=None, K=None, fit_intercept=False,
        intercept_scaling=1.0, init_W=None, init_intercept=None, on_epoch=None,
        protocol=None, checkpoint=None, pieces=None, **method_options):
    """Train a softmax model with one of the registered optimisers.

    The conventions ``lr_decay``, ``order``, ``u_init``, ``batch_size``,
    ``n_sampled`` and the method options follow one rule
    (:func:`scalable_softmax.protocols.resolve`): an argument given (not None) wins;
    else ``protocol``'s value, when a protocol is named and sets it; else the library's
    default (:data:`scalable_softmax.protocols.LIBRARY_DEFAULTS`: ``lr_decay=0.9``,
    ``order="shuffle"``, ``u_init="zero"``; the method's own ``batch_size``,
    ``n_sampled`` and options).

    Parameters
    ----------
    X : scipy.sparse matrix or 2-D array, shape (N, D)
        Finite values (converted once to canonical float64 CSR).
    y : array of int, shape (N,)
        Labels in ``0..K-1``.
    method : str
        A key of :data:`scalable_softmax.methods.METHODS` (the API page's method
        table lists them with their facts).
    lr : float > 0 or None
        The initial learning rate in the per-datapoint units of docs/math.md section 2
        (the paper's Table 2 values apply as published). None (the default): the
        method's default rate, :data:`scalable_softmax.protocols.DEFAULT_LR`, tuned by
        the record on unit-L2 rows (each method's rate and the table it comes from:
        :data:`~scalable_softmax.protocols.DEFAULT_LR_SOURCES`; scale your rows to unit
        L2 norm, or tune the rate, for data unlike those); always None for the
        full-batch methods (``Trainer.full_batch``), which have no rate.
    epochs : int >= 1, default :data:`scalable_softmax.protocols.EPOCHS`
        For the full-batch methods a cap: they stop after the epoch in which L-BFGS
        converged (or stopped for good), the history ends with that epoch (evaluated
        when a later epoch was to be) and ``params["stopped_at_epoch"]`` says which it
        was.
    lr_decay : float in (0, 1] or None
        0.9, or the protocol's; epoch ``e`` runs at ``lr * lr_decay**(e-1)``.
    mu : float >= 0
        Ridge parameter.
    batch_size, n_sampled : int or None
        Datapoints per step and classes per datapoint (None: the protocol's, else the
        method's default).
    seed : int >= 0
        The same seed gives bit-identical results.
    order : {"shuffle", "uniform", "file"} or None
        ``"shuffle"`` (a fresh permutation each epoch; the default), ``"uniform"`` (N
        draws with replacement), ``"file"`` (``0..N-1``) or None (the protocol's, else
        ``"shuffle"``).
    eval_epochs : list of int, optional
        Epochs in ``0..epochs`` to evaluate (0 = the initial point); default
        :func:`default_eval_epochs`; ``[]`` evaluates nothing.
    eval_sets : dict, optional
        Name -> (X, y), default ``{"train": (X, y)}``.
    eval_rows : int, optional
        Evaluate a fixed subsample (seeded by ``seed``) of this many rows of each set.
    progress : bool or None
        Show a progress bar over epochs (cleared at the end). None (the default):
        only where a person watches, in a notebook or when standard error is a
        terminal, never in a log file or a pipe
        (:func:`scalable_softmax.progress.shows_progress`).
    on_epoch : callable or None
        ``on_epoch(e)`` called after each epoch ``e``; an exception it raises stops
        training (a cancelled sweep's run stops this way).
    checkpoint : callable or None
        ``checkpoint(point) -> bool``, called with a :class:`Checkpoint` (the epoch,
        the datapoints of it done, the steps, the training ``seconds``, the rate, and
        ``point.weights()``) after every piece that ends inside an epoch (see
        ``pieces``) and after every epoch (its checks, evaluation and ``on_epoch``
        done) that did not diverge. A true return stops the run there: ``FitResult.W``
        is the weights at that point, ``params["stopped_at"]`` the epochs done
        (fractional, ``epoch - 1 + points / N``), and the history ends with that epoch
        (inside an epoch: a row for it with the steps and seconds at the stop, not
        evaluated). The training clock (``history.seconds``) is paused while the
        callback runs, so it may evaluate, record or sleep at no cost to the run. It
        is not called at a divergence (the run stops and reports it as always).
    pieces : None, int >= 1, or an object with ``piece_size(left) -> int``
        How each epoch's order is cut into kernel calls. None (the default): whole
        epochs, one call each. An int: pieces of that many datapoints (the last piece
        of an epoch takes the rest). An object: ``piece_size(left)`` gives the
        datapoints of the next piece (an int in ``1..left``, ``left`` the datapoints
        of the epoch still to run; whole steps of ``batch_size`` keep the steps those of
        the uncut epoch), and its ``measured(points, seconds)``, if it has one, is told
        the kernel seconds of every piece (a chooser aiming at a duration). The piece at
        position 0 runs with the epoch's kernel seed and a piece at ``start > 0`` with
        :func:`piece_seed` ``(seed, start)``, so an epoch run in one piece is the uncut
        epoch bit for bit; a cut epoch draws other samples than the uncut one (the
        steps' data are the same). Not for the full-batch methods. The epoch's
        ``extra`` counters are summed over its pieces (means averaged by steps).
    u_init : {"zero", "logK", "exact"} or None
        ``"zero"`` (the default), ``"logK"``, ``"exact"`` (the optimum ``u_i*(W)`` of the
        initial weights: the natural start of a warm start, for the methods whose
        ``Trainer.exact_u`` is set) or None (the protocol's, else ``"zero"``), for the
        double-sum methods.
    protocol : str or None
        A name of :data:`scalable_softmax.protocols.PROTOCOLS` (``"authors-code"``,
        ``"authors-code-1pass"``, ``"paper-text"``; defined for the paper's six
        methods): supplies the defaults of the conventions above.
    K : int >= 2, optional
        Number of classes (default ``max(y) + 1``).
    fit_intercept, intercept_scaling : bool, float
        Learn a per-class intercept ``b_k`` through a constant feature of value
        ``intercept_scaling`` (> 0) appended to every row; the ridge ``mu`` shrinks it
        too (less so for a larger ``intercept_scaling``). Default False, as in
        :class:`~scalable_softmax.SoftmaxSGDClassifier`: the papers' model (and every
        result of the collection) has no intercept. Pass True for data whose classes
        need an offset (features far from zero, classes of very different frequencies).
    init_W, init_intercept : ndarray, optional
        Start from these weights (K, D) and intercepts (K,) instead of 0 (a warm start,
        e.g. ``previous.W``).
    **method_options
        Passed to the trainer (e.g. ``delta0`` for ``umax``), checked against the
        method's option schema (``Trainer.options``); unknown options and bad values
        raise ``ValueError``. Every stochastic method takes ``threads`` (int >= 1,
        default 1: one thread, bit-identical runs); methods without a parallel kernel
        refuse ``threads > 1`` (``Trainer.parallel_kernel``).

    Returns
    -------
    FitResult
        A run that diverges (see the module's notes) stops, issues a
        :class:`DivergenceWarning` and returns with ``FitResult.diverged`` True.

    Raises
    ------
    ValueError
        For any invalid argument, before any work is done.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 5)); y = rng.integers(0, 3, 200)
    >>> res = fit(X, y, "umax", lr=0.1, epochs=5, progress=False)
    >>> list(res.history.columns[:4])
    ['epoch', 'steps', 'seconds', 'lr']
    """
    config = FitConfig(method=method, lr=lr, epochs=epochs, lr_decay=lr_decay, mu=mu,
                       batch_size=batch_size, n_sampled=n_sampled, seed=seed, order=order,
                       u_init=u_init, K=K, eval_epochs=eval_epochs, eval_rows=eval_rows,
                       progress=progress, fit_intercept=fit_intercept,
                       intercept_scaling=intercept_scaling, protocol=protocol,
                       options=method_options)
    return fit_config(config, X, y, eval_sets=eval_sets, init_W=init_W,
                      init_intercept=init_intercept, on_epoch=on_epoch,
                      checkpoint=checkpoint, pieces=pieces)


def fit_config(config, X, y, *, eval_sets=None, init_W=None, init_intercept=None,
               on_epoch=None, **driving):
    """:func:`fit` of a :class:`~scalable_softmax.protocols.FitConfig` (the estimator
    and the notebooks' runs build one): ``config`` is resolved and validated
    (:meth:`~scalable_softmax.protocols.FitConfig.resolve`), then the data; the other
    arguments, ``checkpoint`` and ``pieces`` (``driving``) among them, are :func:`fit`'s.
    Returns the :class:`FitResult`."""
    t_call = time.perf_counter()
    unknown = sorted(set(driving) - {"checkpoint", "pieces"})
    if unknown:
        raise ValueError(f"fit_config got unknown arguments {unknown}; it takes "
                         "checkpoint and pieces besides its named ones")
    checkpoint, pieces = driving.get("checkpoint"), driving.get("pieces")
    check_callbacks(on_epoch, checkpoint)
    defaulted = config.lr is None
    config = config.resolve()
    pieces = check_pieces(pieces, config.trainer_class.full_batch)
    trainer, config, sets, params = _prepare(config, X, y, eval_sets, init_W,
                                             init_intercept)
    setup = time.perf_counter() - t_call
    monitor = _Monitor(sets, config.eval_rows, config.seed)
    run = run_epochs(trainer, monitor, config, params["N"], on_epoch=on_epoch,
                     checkpoint=checkpoint, pieces=pieces)
    rows, extras, diverged_at, reason = run.rows, run.extras, run.diverged_at, run.reason
    if diverged_at is not None:
        warn_divergence(config.method, config.lr, diverged_at, reason, stacklevel=4,
                        defaulted=defaulted)
    if run.stopped:
        params["stopped_at"] = run.stopped_at
    elif len(rows) - 1 < config.epochs and diverged_at is None:
        params["stopped_at_epoch"] = len(rows) - 1
    stalled = trainer.stalled() if diverged_at is None else None
    if stalled is not None:
        params["stalled"] = stalled
        warnings.warn(f"fit({config.method!r}) {stalled}; FitResult.stalled says so. "
                      "Scale the features (e.g. MaxAbsScaler), or add a ridge (mu > 0)",
                      NoProgressWarning, stacklevel=3)
    W_final, intercept = trainer.weights(), None
    if config.fit_intercept:
        D = params["D"]
        intercept = W_final[:, D] * float(config.intercept_scaling)
        W_final = np.ascontiguousarray(W_final[:, :D])
    history = assemble_history(rows, sets)
    timings = dict(setup=setup, train=float(history.seconds.iloc[-1]), eval=monitor.seconds,
                   total=time.perf_counter() - t_call)
    return FitResult(W=W_final, u=trainer.u if trainer.has_u else None, history=history,
                     diverged_at=diverged_at, method=config.method, params=params,
                     extra=assemble_extra(extras), intercept=intercept, timings=timings,
                     diverged_reason=reason)
