"""Publish all of a notebook run's outputs together, or none of them.

``python -m scalable_softmax.notebooks run NAME`` executes a notebook inside a
:class:`Stage`: a private folder ``build/tmp/<NAME>.<pid>.<random>/`` whose path is
given to the kernel in the environment variable :data:`ENV`. While it is set,
:func:`scalable_softmax.checks.write_table` and :func:`~scalable_softmax.checks.save_figure`
write into the stage (mirroring the destination's absolute path under ``files/``)
instead of ``tables/`` and ``figures/``, and return the staged paths (so a notebook can
read back what it wrote). When the notebook has run to its end, :meth:`Stage.commit`

1. writes ``MANIFEST.json`` (every staged file and its destination; the executed
   notebook last) atomically: the commit point;
2. renames every staged file onto its destination (``os.replace``; across file
   systems: a copy to a temporary file beside the destination, then a rename);
3. removes the stage.

On any error, ``Ctrl-C``, ``SIGTERM`` or ``SIGHUP`` the stage is removed and nothing is
published (:meth:`Stage.abort`). A process killed outright (``SIGKILL``, power loss)
cannot clean up: its stage stays in ``build/tmp`` and the next run of any notebook
(:func:`recover`) finishes it, all or nothing: a stage with a manifest is published
(the kill came during step 2), one without is deleted. A stage is known to be
abandoned when no process holds its lock (``fcntl.flock`` on ``.lock``), so a run in
progress is never touched.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path

from . import paths
from ._atomic import atomic_open

__all__ = ["ENV", "Stage", "staged_path", "recover", "stage_root"]

#: environment variable holding the folder of the stage in use (unset: no staging)
ENV = "SOFTMAX_STAGE_DIR"
_MANIFEST = "MANIFEST.json"
_LOCK = ".lock"


def stage_root() -> Path:
    """Folder holding the stages (``build/tmp``)."""
    return paths.BUILD / "tmp"


def staged_path(path) -> Path:
    """Where a file meant for ``path`` is written now: ``path`` itself, or, inside a
    notebook run (:data:`ENV` set), its place in the stage."""
    path = Path(path)
    stage = os.environ.get(ENV)
    if not stage:
        return path
    absolute = Path(os.path.abspath(path))
    return Path(stage) / "files" / absolute.relative_to(absolute.anchor)


def _destination(stage: Path, staged: Path) -> Path:
    rel = staged.relative_to(stage / "files")
    return Path(os.path.abspath(os.sep)) / rel




def _move(src: Path, dst: Path) -> None:
    """``os.replace(src, dst)``; across file systems: copy to a temporary file in
    ``dst``'s folder, then rename (the destination is never half-written)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(src, dst)
        return
    except OSError as exc:
        import errno

        if exc.errno != errno.EXDEV:
            raise
    with atomic_open(dst, "wb") as out, open(src, "rb") as inp:
        shutil.copyfileobj(inp, out, 1 << 20)
    os.unlink(src)


def _apply(stage: Path) -> list[Path]:
    """Publish a committed stage (idempotent: files already moved are skipped)."""
    entries = json.loads((stage / _MANIFEST).read_text())
    out = []
    for item in entries:
        src, dst = stage / item["staged"], Path(item["destination"])
        if src.exists():
            _move(src, dst)
        out.append(dst)
    return out


class Stage:
    """A private folder collecting one notebook run's outputs (module docstring).

    Use as a context manager; :meth:`commit` publishes, leaving the ``with`` block
    without it (an exception, a signal) removes everything.

    Parameters
    ----------
    name : label of the run (the notebook's name), part of the folder's name.
    """

    def __init__(self, name: str):
        root = stage_root()
        root.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{name}.{os.getpid()}.", dir=root))
        self._lock = open(self.dir / _LOCK, "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        (self.dir / "files").mkdir()
        self._old_env = None
        self.published: list[Path] = []

    # -- environment ---------------------------------------------------------------
    def __enter__(self) -> "Stage":
        self._old_env = os.environ.get(ENV)
        os.environ[ENV] = str(self.dir)
        return self

    def __exit__(self, *exc) -> None:
        if self._old_env is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = self._old_env
        self.abort()                      # no-op after a commit

    def path_for(self, destination) -> Path:
        """Where to write a file of this run meant for ``destination``."""
        absolute = Path(os.path.abspath(destination))
        p = self.dir / "files" / absolute.relative_to(absolute.anchor)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def staged_files(self) -> list[Path]:
        """Every file staged so far (temporary files of an interrupted write excluded)."""
        return sorted(p for p in (self.dir / "files").rglob("*")
                      if p.is_file() and not p.name.endswith(".tmp"))

    # -- outcome -------------------------------------------------------------------
    def commit(self, last: tuple | None = None) -> list[Path]:
        """Publish every staged file, and then ``last`` (a ``(staged file,
        destination)`` pair, e.g. the executed notebook, so that it is the newest
        output); returns the published destinations."""
        if not self.dir.exists():
            raise RuntimeError(f"stage {self.dir} is gone; nothing to publish")
        entries = [{"staged": str(p.relative_to(self.dir)),
                    "destination": str(_destination(self.dir, p))}
                   for p in self.staged_files()]
        if last is not None:
            src, dst = Path(last[0]), Path(last[1])
            entries.append({"staged": str(src.relative_to(self.dir)),
                            "destination": str(Path(os.path.abspath(dst)))})
        with atomic_open(self.dir / _MANIFEST, "w", fsync=True) as fh:   # the commit point
            json.dump(entries, fh, indent=1)
        self.published = _apply(self.dir)
        self._remove()
        return self.published

    def abort(self) -> None:
        """Remove the stage and everything in it (nothing is published)."""
        self._remove()

    def _remove(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        shutil.rmtree(self.dir, ignore_errors=True)


def recover(root: Path | None = None) -> list[str]:
    """Finish the stages of runs that were killed (no process holds their lock): publish
    a committed one (it has a manifest), delete the others. Returns a line per stage
    handled (for the log)."""
    root = Path(root) if root is not None else stage_root()
    done = []
    if not root.is_dir():
        return done
    for stage in sorted(p for p in root.iterdir() if p.is_dir()):
        lock_path = stage / _LOCK
        try:
            fh = open(lock_path, "a")
        except OSError:
            fh = None
        try:
            if fh is not None:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue                       # a live run owns it
            if (stage / _MANIFEST).is_file():
                _apply(stage)
                done.append(f"published the outputs of an interrupted run ({stage.name})")
            else:
                done.append(f"removed the unfinished outputs of a killed run ({stage.name})")
            shutil.rmtree(stage, ignore_errors=True)
        finally:
            if fh is not None:
                fh.close()
    return done
