"""On-disk cache of preprocessed data sets.

A cache file is ``<processed dir>/<name>-<split>-<key>.npz`` where ``key`` is the first
16 hex digits of the sha256 of the canonical JSON of everything the result depends on:
the data set name and split, the preprocessing parameters, the sha256 of the raw input
files, and :data:`CODE_VERSION`: a hash of the **source** of the code that shapes the
arrays (:func:`shaping_modules`: ``data.core`` and every module of the package it
imports, i.e. the readers, the preprocessing, the surrogate generators, this module's
file format, the numba helpers), so an edited reader or preprocessing step gets new
arrays without anyone bumping a version. Changing any of them selects another file, so
a stale cache is never read. Files are written to a temporary file in the same folder
and renamed (``os.replace``), so a reader never sees a half-written cache.
"""
from __future__ import annotations

import ast
import hashlib
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._atomic import atomic_open
from ..validation import check_sparse

__all__ = ["CODE_VERSION", "CacheWarning", "cache_key", "cache_path", "save", "load",
           "check_entry", "shaping_modules"]

_PKG_ROOT = Path(__file__).resolve().parents[1]          # scalable_softmax/
_PKG = _PKG_ROOT.name


def _module_file(name: str) -> Path | None:
    """Source file of the package module ``name`` (``scalable_softmax.a.b``), or None."""
    if name != _PKG and not name.startswith(_PKG + "."):
        return None
    rel = Path(*name.split(".")[1:])
    for cand in (_PKG_ROOT / rel / "__init__.py", (_PKG_ROOT / rel).with_suffix(".py")):
        if cand.is_file():
            return cand
    return None


def _package_imports(name: str, path: Path) -> set[str]:
    """Package modules that module ``name`` (file ``path``) imports anywhere (lazy
    imports in functions included)."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base[:len(base) - (node.level - 1)] + ([mod] if mod else []))
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    # the package itself only re-exports (``from .. import paths`` names a module)
    return {mod for mod in found if mod != _PKG and _module_file(mod) is not None}


def shaping_modules(root: str = f"{_PKG}.data.core") -> dict[str, Path]:
    """The modules whose source shapes a processed array: ``root`` (``load_dataset``)
    and every package module it imports, recursively (the readers, the preprocessing,
    the surrogate generators, this module). ``{module name: file}``."""
    todo, seen = [root, __name__], {}
    while todo:
        name = todo.pop()
        path = _module_file(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        todo.extend(_package_imports(name, path) - set(seen))
    return dict(sorted(seen.items()))


def _source_version() -> str:
    """``data-`` and 12 hex digits of the sha256 of the sources of :func:`shaping_modules`."""
    h = hashlib.sha256()
    for name, path in shaping_modules().items():
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return "data-" + h.hexdigest()[:12]


#: hash of the source of everything that shapes a cached array (:func:`shaping_modules`,
#: read when this module is imported); part of every cache key
CODE_VERSION = _source_version()


def cache_key(payload: dict) -> str:
    """16 hex digits of the sha256 of ``payload`` (canonical JSON) and the code version."""
    blob = json.dumps({"code_version": CODE_VERSION, **payload}, sort_keys=True,
                      separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_path(cache_dir, name: str, split: str, key: str) -> Path:
    """Where the cache file of (name, split, key) lives."""
    return Path(cache_dir) / f"{name}-{split}-{key}.npz"


def save(path, *, X: sp.csr_matrix, y: np.ndarray, arrays: dict, meta: dict) -> None:
    """Write a cache file atomically (temporary file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "X_data": X.data, "X_indices": X.indices, "X_indptr": X.indptr,
        "X_shape": np.asarray(X.shape, dtype=np.int64), "y": y,
        "meta": np.asarray(json.dumps(meta, sort_keys=True, default=_json_default)),
    }
    for k, v in arrays.items():
        payload["a_" + k] = v
    with atomic_open(path, "wb", fsync=True) as fh:
        np.savez(fh, **payload)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


class CacheWarning(UserWarning):
    """A processed-data cache file was unusable (tampered, corrupt or inconsistent) and
    is rebuilt from the raw files."""


def _csr_from(z, prefix, name):
    shape = np.asarray(z[f"{prefix}_shape"])
    if shape.shape != (2,) or shape.dtype.kind not in "iu" or shape.min() < 0:
        raise ValueError(f"{name} shape record {shape!r}")
    X = sp.csr_matrix(tuple(int(v) for v in shape), dtype=np.float64)
    X.data, X.indices, X.indptr = (np.asarray(z[f"{prefix}_data"]),
                                   np.asarray(z[f"{prefix}_indices"]),
                                   np.asarray(z[f"{prefix}_indptr"]))
    if X.data.dtype != np.float64:
        raise ValueError(f"{name} values of dtype {X.data.dtype}, not float64")
    check_sparse(X, name)          # every index inside the shape, indptr consistent
    return X


def check_entry(X, y, arrays: dict, meta: dict) -> None:
    """Raise ``ValueError`` (saying what is off) unless a cache entry's arrays agree
    with each other and with its record: float64 CSR with every index inside its shape,
    one int label per row in ``0..K-1``, ``K`` class names, one feature index per
    column (distinct, increasing, non-negative), a planted ``K x D`` matrix if any."""
    if not isinstance(meta, dict) or not isinstance(meta.get("K"), int):
        raise ValueError("its record has no integer K")
    K = meta["K"]
    N, D = X.shape
    if y.ndim != 1 or y.dtype.kind not in "iu" or y.shape[0] != N:
        raise ValueError(f"labels of dtype {y.dtype} and shape {y.shape} for {N} rows")
    if N and (int(y.min()) < 0 or int(y.max()) >= K):
        raise ValueError(f"labels in {int(y.min())}..{int(y.max())}, outside 0..{K - 1}")
    names = arrays.get("class_names")
    if names is None or names.ndim != 1 or names.shape[0] != K:
        raise ValueError(f"class_names does not hold K = {K} names")
    fi = arrays.get("feature_index")
    if fi is None or fi.ndim != 1 or fi.dtype.kind not in "iu" or fi.shape[0] != D \
            or (D and (int(fi.min()) < 0 or np.any(fi[1:] <= fi[:-1]))):
        raise ValueError(f"feature_index is not {D} increasing column numbers")
    W = arrays.get("planted_W")
    if W is not None and W.shape != (K, D):
        raise ValueError(f"planted weights of shape {W.shape}, not K x D = {K} x {D}")


def load(path):
    """Read a cache file: ``(X, y, arrays, meta)``; ``None`` if it is unreadable or its
    arrays are not consistent (:func:`check_entry`: index bounds, label range, shapes,
    dtypes), with a :class:`CacheWarning` naming the file: the caller rebuilds it."""
    try:
        with np.load(path, allow_pickle=False) as z:
            X = _csr_from(z, "X", "X")
            y = np.asarray(z["y"])
            arrays = {k[2:]: z[k] for k in z.files if k.startswith("a_")}
            if "a_W_data" in z.files:
                arrays["planted_W"] = _csr_from(z, "a_W", "planted W")
            meta = json.loads(str(z["meta"]))
        check_entry(X, y, arrays, meta)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        if Path(path).is_file():
            warnings.warn(f"{path}: unusable processed-data cache file ({exc}); "
                          "rebuilding it from the raw files", CacheWarning, stacklevel=3)
        return None
    return X, y, arrays, meta
