"""Helpers shared by the benchmark scripts: machine description, atomic writes and
random CSR data of a given shape."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from scalable_softmax.repro.timing import machine_info  # noqa: F401  (one description of the machine)

RESULTS = Path(__file__).resolve().parent / "results"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def machine_line(start: dict, end: dict) -> str:
    """One sentence naming the machine, the load average at the start and end of a run
    (``machine_info()`` then and at the end) and the run's date."""
    return (f"Machine: {start['cpu_model']}, {start['cpus']} cores (shared); load average "
            f"at start {start['load_average']}, at end {end['load_average']}; "
            f"{start['date']}.")


def publish(stem: str, res: dict, md: str) -> None:
    """Write ``results/<stem>.json`` (``res``) and ``results/<stem>.md`` (``md``)
    atomically, and print the markdown. Values JSON does not know (NumPy scalars,
    timestamps) are written as their ``str``."""
    write_atomic(RESULTS / f"{stem}.json", json.dumps(res, indent=1, default=str))
    write_atomic(RESULTS / f"{stem}.md", md)
    print(md)


def random_rows(N: int, D: int, nnz: int, seed: int = 0) -> sp.csr_matrix:
    """CSR matrix with about ``nnz`` uniformly placed non-zeros per row, unit L2 rows."""
    rng = np.random.default_rng(seed)
    cols = np.sort(rng.integers(0, D, size=(N, nnz)), axis=1)
    X = sp.csr_matrix((rng.exponential(1.0, N * nnz), cols.ravel(),
                       np.arange(0, N * nnz + 1, nnz)), shape=(N, D))
    X.sum_duplicates()
    X.sort_indices()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return sp.csr_matrix(sp.diags(1.0 / norms) @ X)
