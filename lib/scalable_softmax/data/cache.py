"""On-disk cache of preprocessed data sets.

A cache file is ``<processed dir>/<name>-<split>-<key>.npz`` where ``key`` is the first
16 hex digits of the sha256 of the canonical JSON of everything the result depends on:
the data set name and split, the preprocessing parameters, the sha256 of the raw input
files, and :data:`CODE_VERSION` (bump it whenever a reader, the preprocessing or a
surrogate generator changes its output). Changing any of them selects another file, so
a stale cache is never read. Files are written to a temporary file in the same folder
and renamed (``os.replace``), so a reader never sees a half-written cache.
"""
from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from .._atomic import atomic_open

__all__ = ["CODE_VERSION", "cache_key", "cache_path", "save", "load"]

#: version of everything that shapes a cached array; part of every cache key
CODE_VERSION = "data-4"


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


def load(path):
    """Read a cache file: ``(X, y, arrays, meta)``; ``None`` if it is unreadable."""
    try:
        with np.load(path, allow_pickle=False) as z:
            X = sp.csr_matrix((z["X_data"], z["X_indices"], z["X_indptr"]),
                              shape=tuple(int(v) for v in z["X_shape"]))
            y = z["y"]
            arrays = {k[2:]: z[k] for k in z.files if k.startswith("a_")}
            meta = json.loads(str(z["meta"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    X.has_sorted_indices = True
    return X, y, arrays, meta
