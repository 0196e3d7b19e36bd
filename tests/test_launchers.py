"""Same numbers from any launcher: a notebook run through nbclient in a plain
environment (no thread variables, as Run All in JupyterLab or nbconvert) writes the
same tables, byte for byte, as the runner (what make runs); the notebooks pin their
threads themselves (repro.machinery.runner.pin_threads)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from scalable_softmax import paths
from scalable_softmax.repro.machinery import runner

pytestmark = pytest.mark.slow

#: a fast notebook (seconds under its smoke settings) whose table comes from L-BFGS
#: iterations, which move with the BLAS's summation order
NOTEBOOK = "09-ove-toy-2d"

_NBCLIENT = """
import sys
import nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, kernel_name="python3", timeout=600,
               resources={"metadata": {"path": sys.argv[2]}}).execute()
"""


def _plain_env() -> dict:
    """The environment of a reader's shell: no thread settings, no staging, no publish."""
    drop = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "BLIS_NUM_THREADS", "NUMBA_NUM_THREADS", runner.PUBLISH_ENV, "SOFTMAX_STAGE_DIR"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def test_nbclient_in_a_plain_environment_writes_the_runners_tables(tmp_path):
    base = paths.BUILD / "test-launchers" / f"{os.getpid()}"
    ours, theirs = base / "runner", base / "nbclient"
    rel = lambda p: str(p.relative_to(paths.ROOT))    # noqa: E731
    runner.run(NOTEBOOK, "smoke", out=tmp_path / "runner.ipynb",
               overrides={runner.OUTPUT_ROOT: rel(ours)})
    prepared = runner.prepare(NOTEBOOK, "smoke", out=tmp_path / "prepared.ipynb",
                              overrides={runner.OUTPUT_ROOT: rel(theirs)})
    subprocess.run([sys.executable, "-c", _NBCLIENT, str(prepared), str(paths.NOTEBOOKS)],
                   env=_plain_env(), check=True, cwd=paths.ROOT, timeout=900)
    try:
        tables = sorted(p.name for p in (ours / "tables").iterdir())
        assert tables and tables == sorted(p.name for p in (theirs / "tables").iterdir())
        for name in tables:
            assert (ours / "tables" / name).read_bytes() == \
                (theirs / "tables" / name).read_bytes(), name
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_pin_threads_fixes_blas_and_numba():
    import numba

    got = runner.pin_threads()
    assert got == {"blas": 1, "numba": numba.config.NUMBA_NUM_THREADS}
    assert numba.get_num_threads() == got["numba"]
    threadpoolctl = pytest.importorskip("threadpoolctl")
    blas = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert blas and all(i["num_threads"] == 1 for i in blas)
