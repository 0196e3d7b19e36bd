"""Publish all of a notebook run's outputs together, or none of them.

``python -m scalable_softmax.repro.machinery.runner run NAME`` executes a notebook inside a
:class:`Stage`: a private folder ``build/tmp/<NAME>.<pid>.<random>/`` whose path is
given to the kernel in the environment variable :data:`ENV`. While it is set,
:func:`scalable_softmax.repro.machinery.outputs.write_table` and
:func:`~scalable_softmax.repro.machinery.outputs.save_figure` write into the stage (mirroring the
destination's absolute path under ``files/``) instead of ``tables/`` and ``figures/``, and return
the staged paths (so a notebook can read back what it wrote). When the notebook has run to its
end, :meth:`Stage.commit`

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
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from scalable_softmax import paths
from scalable_softmax._atomic import atomic_open, atomic_path

__all__ = ["ENV", "Stage", "StagedPath", "staged_path", "recover", "stage_root", "format_number",
           "to_markdown", "write_text", "write_table", "save_figure"]

#: environment variable holding the folder of the stage in use (unset: no staging)
ENV = "SOFTMAX_STAGE_DIR"
_MANIFEST = "MANIFEST.json"
_LOCK = ".lock"


def stage_root() -> Path:
    """Folder holding the stages (``build/tmp``)."""
    return paths.BUILD / "tmp"


class StagedPath(type(Path())):
    """A file's place in a stage that remembers its destination: it opens, reads and
    stats the staged file, while :meth:`relative_to` (what a notebook prints: ``wrote
    tables/...``) answers for the destination, so no stage folder shows in a notebook."""

    destination: Path | None = None

    def relative_to(self, *other, **kwargs):
        """The destination's path relative to ``other`` (the staged one's if the
        destination is not below ``other``)."""
        if self.destination is not None:
            try:
                return Path(self.destination).relative_to(*other, **kwargs)
            except ValueError:
                pass
        return Path(self).relative_to(*other, **kwargs)


def staged_path(path) -> Path:
    """Where a file meant for ``path`` is written now: ``path`` itself, or, inside a
    notebook run (:data:`ENV` set), its place in the stage (a :class:`StagedPath`,
    whose ``relative_to`` gives the destination's relative path)."""
    path = Path(path)
    stage = os.environ.get(ENV)
    if not stage:
        return path
    absolute = Path(os.path.abspath(path))
    staged = StagedPath(Path(stage) / "files" / absolute.relative_to(absolute.anchor))
    staged.destination = absolute
    return staged


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


# ---------------------------------------------------------------------------
# tables and figures
# ---------------------------------------------------------------------------

def format_number(v) -> str:
    """A float as a table shows it: 4 significant digits, scientific outside [1e-3, 1e4)."""
    v = float(v)
    if not math.isfinite(v):
        return str(v)
    if v == 0.0:
        return "0"
    if 1e-3 <= abs(v) < 1e4:
        return f"{v:.4g}"
    return f"{v:.3e}"


def to_markdown(df: pd.DataFrame, columns=None) -> str:
    """A GitHub-flavoured markdown table of ``df`` (``|`` in cells escaped)."""
    cols = list(columns) if columns is not None else list(df.columns)

    def cell(v):
        if isinstance(v, (bool, np.bool_)):
            return "yes" if v else "**no**"
        if isinstance(v, float):
            return format_number(v)
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df[cols].iterrows():
        lines.append("| " + " | ".join(cell(r[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file, then a rename)."""
    with atomic_open(path, "w") as fh:
        fh.write(text)


def write_table(df: pd.DataFrame, stem: str, folder, title: str | None = None,
                md_columns=None, preamble: str = "") -> tuple[Path, Path]:
    """Write ``folder/stem.csv`` (all columns) and ``folder/stem.md`` atomically.

    Inside a notebook run (``python -m scalable_softmax.repro.machinery.runner run``) the
    files go to the run's stage and are published with the run's other outputs when it
    ends (:mod:`scalable_softmax.repro.machinery.outputs`); the returned paths are the
    staged ones.

    Parameters
    ----------
    df : the table
    stem : file name without extension
    folder : str or Path (e.g. :data:`scalable_softmax.paths.TABLES`)
    title : optional heading of the markdown file
    md_columns : columns shown in the markdown table (default: all)
    preamble : optional paragraph between the heading and the table (provenance)

    Returns
    -------
    (csv_path, md_path)
    """
    folder = Path(folder)
    csv = staged_path(folder / f"{stem}.csv")
    md = staged_path(folder / f"{stem}.md")
    write_text(csv, df.to_csv(index=False))
    head = (f"# {title}\n\n" if title else "") + (f"{preamble.strip()}\n\n" if preamble else "")
    notes = ""
    if "note" in df.columns:
        noted = df[df["note"].astype(str) != ""]
        if len(noted):
            notes = "\nNotes:\n\n" + "".join(f"- **{r['check']}**: {r['note']}\n"
                                             for _, r in noted.iterrows())
    write_text(md, head + to_markdown(df, md_columns) + notes)
    return csv, md


def save_figure(fig, stem: str, folder, formats=("pdf", "png"), dpi=150) -> list[Path]:
    """Save ``fig`` as ``folder/stem.<fmt>`` for each format, atomically.

    Inside a notebook run (``python -m scalable_softmax.repro.machinery.runner run``) the
    files go to the run's stage and are published with the run's other outputs when it
    ends (:mod:`scalable_softmax.repro.machinery.outputs`); the returned paths are the
    staged ones."""
    out = []
    for fmt in formats:
        path = staged_path(Path(folder) / f"{stem}.{fmt}")
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight",
                        metadata={"CreationDate": None} if fmt == "pdf" else None)
        out.append(path)
    return out
