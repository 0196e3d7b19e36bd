"""fit()'s progress bar appears only where a person watches: ``progress=None`` (the
default) draws it in a terminal or a notebook and never into a log file or a pipe."""
from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest

from scalable_softmax import progress
from scalable_softmax.fit import fit


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


@pytest.mark.parametrize("tty", [True, False])
def test_auto_follows_the_terminal(monkeypatch, tty):
    monkeypatch.setattr(sys, "stderr", _Stream(tty))
    assert progress.shows_progress(None) is tty
    assert progress.shows_progress(True) is True
    assert progress.shows_progress(False) is False


def test_auto_without_a_stream(monkeypatch):
    monkeypatch.setattr(sys, "stderr", None)
    assert progress.shows_progress(None) is False


def test_auto_in_a_notebook(monkeypatch):
    monkeypatch.setattr(progress, "in_kernel", lambda: True)
    monkeypatch.setattr(sys, "stderr", _Stream(False))
    assert progress.shows_progress(None) is True


def test_fit_with_default_arguments_writes_no_bar_into_a_log(tmp_path):
    """A script's stderr sent to a file: fit's default draws nothing there; asked for
    (progress=True) the bar does write, so the check would see one."""
    env = {k: v for k, v in os.environ.items() if k != progress.ENV}
    code = ("import numpy as np\n"
            "from scalable_softmax.fit import fit\n"
            "rng = np.random.default_rng(0)\n"
            "X = rng.standard_normal((50, 4)); y = rng.integers(0, 3, 50)\n"
            "fit(X, y, 'umax', 0.1, epochs=3{extra})\n")
    logs = {}
    for extra in ("", ", progress=True"):
        log = tmp_path / f"log{len(logs)}.txt"
        with open(log, "w") as fh:
            subprocess.run([sys.executable, "-c", code.format(extra=extra)], env=env,
                           stdout=fh, stderr=subprocess.STDOUT, check=True)
        logs[extra] = log.read_text()
    assert "fit umax" not in logs[""] and "%|" not in logs[""], logs[""]
    assert "fit umax" in logs[", progress=True"]


def test_progress_must_be_a_bool_or_none():
    with pytest.raises(ValueError, match="progress"):
        fit([[1.0, 0.0], [0.0, 1.0]], [0, 1], "umax", 0.1, epochs=1, progress="yes")
