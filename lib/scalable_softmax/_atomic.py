"""Write a file completely or not at all: into a temporary file beside it, then rename.

One helper for every writer of the library (tables, figures, saved models, processed
data, staged outputs): the temporary file is ``.<name>.<random>.tmp`` in the target's
folder (so the rename is atomic and a crash leaves only a dot-file that the next run
ignores), it gets the permissions of a normally created file (``mkstemp`` makes
``0o600``), and it is removed on every error, ``Ctrl-C`` included.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["file_mode", "atomic_path", "atomic_open"]


def file_mode() -> int:
    """``0o666`` minus the process umask: the mode of a normally created file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path, fsync: bool = False):
    """Yield the name of a temporary file beside ``path`` (created, empty); when the
    block ends normally it replaces ``path``, otherwise it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", fsync: bool = False):
    """``open(path, mode)`` for writing, through :func:`atomic_path`."""
    with atomic_path(path, fsync=fsync) as tmp:
        with open(tmp, mode) as fh:
            yield fh
