"""Helpers shared by the benchmark scripts: machine description, atomic writes and
random CSR data of a given shape."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from scalable_softmax.repro.fagan.timing import machine_info  # noqa: F401  (one description of the machine)

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


def run_child(code: str, arg: str, lib, cache_dir) -> dict:
    """Run ``code`` (a Python program printing one JSON line last) with ``arg`` in a new
    process whose numba cache is ``cache_dir`` (JIT on), importing the library of the
    source tree ``lib`` when given (else the installed one); its last line, parsed."""
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    env.pop("NUMBA_DISABLE_JIT", None)
    if lib is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(lib), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code, arg], env=env,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{arg} ({lib or 'this tree'}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def tree_label(lib) -> str:
    """A source tree's name for the results: its git commit (and whether it has
    uncommitted changes), never a path of the machine it ran on; ``"this tree"`` when
    ``lib`` is None."""
    if not lib:
        return "this tree"
    import subprocess

    def git(*args):
        out = subprocess.run(["git", "-C", str(lib), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    commit = git("rev-parse", "--short=12", "HEAD")
    dirty = git("status", "--porcelain", "--", ".")
    return (f"commit {commit}" + (" with uncommitted changes" if dirty else "")
            if commit else "a tree outside git")


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
