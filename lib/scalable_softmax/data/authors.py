"""The authors' recorded results: ``table3-runs-6f9129b.csv`` built from their pickles.

The 34 files of ``Results/Complete/Tuned/`` in the authors' public experiment repository
(GitHub francoisfagan/Log-tricks at commit 6f9129b0dc9449a1fb45c72d7580db3e41fe8a5d) are
registered raw files (``authors-results/log-tricks-6f9129b/<name>`` in the data
directory, each with its sha256 and its raw-file URL at that commit). ``make data``
obtains them like every other raw file and then calls :func:`build_table3_csv`, which
writes ``authors-results/table3-runs-6f9129b.csv`` (the file
:func:`scalable_softmax.repro.fagan.paper.load_recorded` reads) from them: one row per recorded
point, columns :data:`COLUMNS`, each value printed with 6 significant digits (``%.6g``)
and ``epoch`` the pickle's zero-based recorded epoch + 1. The result is checked against
the registered sha256 of the CSV before it is written (atomically).

Pickles can run code when they are loaded, and these come from the network. They are
read only by :class:`RestrictedUnpickler`, which admits exactly the three globals the
files name (numpy's ``ndarray``, ``dtype`` and the array ``_reconstruct`` function) and
refuses any other, naming the file, before anything is called. Each file's bytes are
hashed and compared with the registry before they are unpickled, and the loaded arrays
are checked (numeric dtypes, the expected shapes).
"""
from __future__ import annotations

import csv
import hashlib
import io
import pickle
import re
from pathlib import Path

import numpy as np

from .. import paths
from .._atomic import atomic_path
from .errors import ChecksumError, DataFormatError

__all__ = ["UnsafePickleError", "RestrictedUnpickler", "ALLOWED_GLOBALS", "load_pickle",
           "load_run", "table3_csv_bytes", "build_table3_csv", "COLUMNS", "REPO", "COMMIT",
           "SOURCE_FOLDER", "PICKLE_DIR", "CSV_PATH"]

REPO = "francoisfagan/Log-tricks"
COMMIT = "6f9129b0dc9449a1fb45c72d7580db3e41fe8a5d"
SOURCE_FOLDER = "Results/Complete/Tuned"
#: where the pickles and the CSV live, relative to the data directory
PICKLE_DIR = "authors-results/log-tricks-6f9129b"
CSV_PATH = "authors-results/table3-runs-6f9129b.csv"

COLUMNS = ("source_file", "method", "dataset", "lr", "epoch", "metric_kind",
           "train_error", "train_metric", "test_error", "test_metric")

# the name's method prefix in their code -> ours
_METHODS = {"Implicit": "implicit", "Umax": "umax", "VanillaSGD": "vanilla", "ove": "ove",
            "nce": "nce", "sampled_softmax": "is"}
_EXACT = {"implicit", "umax", "vanilla"}   # the others record a defective quantity
_NAME = re.compile(r"(?P<method>" + "|".join(_METHODS) + r")_(?P<dataset>[A-Za-z0-9]+)"
                   r"_lr_(?P<lr>[0-9]+(?:\.[0-9]+)?)_prop_data_1\.0\.p")

# numpy's array-reconstruction function, whatever module this numpy keeps it in
_RECONSTRUCT = np.zeros(1).__reduce__()[0]
#: the only globals a pickle may name, (module, name) -> the object it gets
ALLOWED_GLOBALS = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,    # written by numpy 1.x
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,   # written by numpy 2.x
}


class UnsafePickleError(DataFormatError):
    """A pickle that names a global outside :data:`ALLOWED_GLOBALS`; it was not loaded
    and nothing it names was imported or called."""


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only :data:`ALLOWED_GLOBALS` (numpy arrays and dtypes).

    Every opcode that could call or build an object of another type (``GLOBAL``,
    ``STACK_GLOBAL``, ``INST``, the extension registry) goes through :meth:`find_class`,
    which raises :class:`UnsafePickleError` naming the file for anything else, before
    the object is imported. Persistent ids are refused too.
    """

    def __init__(self, file, *, path="<pickle>"):
        super().__init__(file)
        self._path = str(path)

    def find_class(self, module, name):
        try:
            return ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            allowed = ", ".join(f"{m}.{n}" for m, n in ALLOWED_GLOBALS)
            raise UnsafePickleError(
                self._path, f"the pickle names {module}.{name}, which is not allowed: "
                f"only {allowed} are admitted. Nothing was executed; the file is not "
                f"one of the authors' results (delete it and run "
                f"{paths.fetch_command('authors-results')})") from None

    def persistent_load(self, pid):
        raise UnsafePickleError(self._path, "the pickle uses a persistent id, which is "
                                "not allowed; nothing was executed")


def load_pickle(payload: bytes, path="<pickle>"):
    """Unpickle ``payload`` with :class:`RestrictedUnpickler`; a malformed pickle is a
    :class:`DataFormatError` naming ``path``."""
    try:
        return RestrictedUnpickler(io.BytesIO(payload), path=path).load()
    except DataFormatError:
        raise
    except Exception as exc:   # truncated or garbled stream, bad arguments, ...
        raise DataFormatError(path, f"not a readable pickle ({type(exc).__name__}: "
                              f"{exc}); delete it and run "
                              f"{paths.fetch_command('authors-results')}") from None


def load_run(payload: bytes, path="<pickle>") -> dict:
    """One recorded run: the dict ``{"train", "test", "epochs"}`` of a pickle, checked.

    ``train`` and ``test`` are float arrays of shape (1, n, 2) (error, metric per
    recorded point), ``epochs`` an integer array of shape (1, n) (zero-based).
    """
    obj = load_pickle(payload, path)
    if not isinstance(obj, dict) or set(obj) != {"train", "test", "epochs"}:
        keys = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
        raise DataFormatError(path, f"expected a dict with keys epochs, test, train; "
                              f"got {keys}")
    ep = obj["epochs"]
    if not (isinstance(ep, np.ndarray) and ep.dtype.kind in "iu" and ep.ndim == 2
            and ep.shape[0] == 1):
        raise DataFormatError(path, f"'epochs' must be an integer array of shape (1, n); "
                              f"got {getattr(ep, 'dtype', type(ep))} "
                              f"{getattr(ep, 'shape', '')}")
    n = ep.shape[1]
    for key in ("train", "test"):
        a = obj[key]
        if not (isinstance(a, np.ndarray) and a.dtype.kind == "f"
                and a.shape == (1, n, 2)):
            raise DataFormatError(path, f"{key!r} must be a float array of shape "
                                  f"(1, {n}, 2); got {getattr(a, 'dtype', type(a))} "
                                  f"{getattr(a, 'shape', '')}")
    return obj


def _parse_name(name: str, path) -> tuple[str, str, str]:
    m = _NAME.fullmatch(name)
    if m is None:
        raise DataFormatError(path, "the file name is not <method>_<dataset>_lr_<rate>"
                              "_prop_data_1.0.p with a method among "
                              + ", ".join(_METHODS))
    return _METHODS[m["method"]], m["dataset"].lower(), m["lr"]


def table3_csv_bytes(runs) -> bytes:
    """The CSV of the recorded runs.

    Parameters
    ----------
    runs : iterable of (name, payload, path)
        The pickle's file name in the authors' folder, its bytes (already verified)
        and where they were read from (for messages). Rows follow the order given.
    """
    buf = io.StringIO()
    out = csv.writer(buf)   # the CSV's line ends are \r\n, the csv module's default
    out.writerow(COLUMNS)
    for name, payload, path in runs:
        method, dataset, lr = _parse_name(name, path)
        run = load_run(payload, path)
        kind = "exact_log_loss" if method in _EXACT else "defective"
        for i, ep in enumerate(run["epochs"][0]):
            tr, te = run["train"][0, i], run["test"][0, i]
            out.writerow([f"{SOURCE_FOLDER}/{name}", method, dataset, lr, str(int(ep) + 1),
                          kind] + ["%.6g" % v for v in (tr[0], tr[1], te[0], te[1])])
    return buf.getvalue().encode()


def build_table3_csv(data_dir, spec, inputs) -> str:
    """Write the CSV ``spec.path`` into ``data_dir`` from the pickles ``inputs``.

    Each input (a :class:`~scalable_softmax.data.registry.RegisteredFile`) is read
    from ``data_dir`` once; its bytes must match its registered sha256 before they are
    unpickled, and the CSV's bytes must match ``spec.sha256`` before it is written
    (through a temporary file and a rename). Returns the CSV's sha256.

    Raises
    ------
    ChecksumError
        An input or the result does not match the registry; nothing is written.
    DataFormatError
        A pickle that is malformed or names a forbidden global (:class:`UnsafePickleError`).
    """
    data_dir = Path(data_dir)
    runs = []
    for f in sorted(inputs, key=lambda f: Path(f.path).name):
        p = data_dir / f.path
        payload = p.read_bytes()
        actual = hashlib.sha256(payload).hexdigest()
        if actual != f.sha256:
            raise ChecksumError(p, f.sha256, actual, hint="The CSV was not built; delete "
                                "the file and run "
                                f"{paths.fetch_command('authors-results')}.")
        runs.append((Path(f.path).name, payload, p))
    text = table3_csv_bytes(runs)
    actual = hashlib.sha256(text).hexdigest()
    target = data_dir / spec.path
    if actual != spec.sha256:
        raise ChecksumError(target, spec.sha256, actual, hint=(
            f"The CSV built from {len(runs)} verified pickles differs from the registered "
            "one, so it was not written: the builder "
            "(scalable_softmax.data.authors) no longer reproduces it."))
    with atomic_path(target, fsync=True) as tmp:
        Path(tmp).write_bytes(text)
    return actual
