"""What a stopped or failing notebook run prints: one clear line, not a bare
``AssertionError`` (``runner run 09-ove-toy-2d -p spread 1e300``) nor asyncio's stray
``Task exception was never retrieved ... DeadKernelError`` after a ``SIGTERM``."""
from __future__ import annotations

import asyncio
import gc
import logging

import numpy as np
import pytest

from scalable_softmax.repro.machinery import runner
from scalable_softmax.repro.titsias import toy2d

papermill_exceptions = pytest.importorskip("papermill.exceptions")
nbclient_exceptions = pytest.importorskip("nbclient.exceptions")


@pytest.mark.parametrize("spread", [1e300, 1e100])
def test_points_beyond_float64_get_a_clear_error(spread):
    X, y, _ = toy2d.make_blobs(5, 40, 2.0, spread, 0)
    problem = toy2d.Toy2D(X, y, 5, 1.0)
    with pytest.raises(ValueError, match=r"L-BFGS on the softmax objective made no step "
                                         r"from W = 0 .*the points reach \|x\| = "):
        with np.errstate(all="ignore"):
            problem.fit("softmax", 50, 1e-9)


def test_the_notebooks_own_scale_still_fits():
    X, y, _ = toy2d.make_blobs(5, 40, 2.0, 1.0, 0)
    res, trace = toy2d.Toy2D(X, y, 5, 1.0).fit("OVE", 5, 1e-9)
    assert len(trace) >= 2 and np.isfinite(res.fun)


def test_a_failing_cell_is_one_line(monkeypatch, capsys):
    def failing_run(name, profile, **kw):
        raise papermill_exceptions.PapermillExecutionError(
            8, 8, "assert len(t) >= 2", "ValueError", "L-BFGS made no step", [])

    monkeypatch.setattr(runner, "run", failing_run)
    code = runner.main(["run", "09-ove-toy-2d", "--profile", "smoke", "-p", "spread",
                        "1e300"])
    err = capsys.readouterr().err
    assert code == 1
    assert "error: 09-ove-toy-2d stopped in cell In [8]: ValueError: L-BFGS made no step" \
        in err
    assert "Traceback" not in err


def _unretrieved(exc_type):
    """Make asyncio report a task whose exception nobody retrieved (as it does for
    nbclient's tasks after a SIGTERM'd run's kernel is shut down)."""
    async def boom():
        raise exc_type("Kernel died")

    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(boom())
        loop.run_until_complete(asyncio.sleep(0.01))
        assert task.done()
        del task
        gc.collect()
    finally:
        loop.close()


def test_a_stopped_run_drops_only_the_dead_kernel_reports(monkeypatch, caplog):
    logger = logging.getLogger("asyncio")
    monkeypatch.setattr(logger, "filters", [])          # leave the logger as found
    caplog.set_level(logging.ERROR, logger="asyncio")
    _unretrieved(nbclient_exceptions.DeadKernelError)
    assert "Task exception was never retrieved" in caplog.text   # what was printed
    caplog.clear()
    runner.quiet_dead_kernel_tasks()
    runner.quiet_dead_kernel_tasks()                     # idempotent
    assert len(logger.filters) == 1
    _unretrieved(nbclient_exceptions.DeadKernelError)
    assert "never retrieved" not in caplog.text
    _unretrieved(RuntimeError)                           # other reports are kept
    assert "Task exception was never retrieved" in caplog.text
