"""The journal of an unfinished race: each workload's results kept as soon as it ends.

A race (:func:`~.cli.race_notebook`) runs its workloads one after the other, and a full
one takes the best part of an hour. Without a journal, anything that stops it before the
last workload (the runner's cell timeout, a killed kernel, a full disk) loses every
finished workload with it. With one, each finished workload's tuning candidates, seeded
runs and learning curves are written to ``<workdir>/journal/<notebook>/<workload>.pkl``
(atomically), and a rerun of the *same race* reads them back instead of racing those
workloads again, saying so for each one. A race that reaches its end clears its
journal, so the next run of a finished race always races afresh: the journal resumes a
stopped race, it is not a cache of results.

"The same race" is checked by a key stored in each entry (:func:`race_key`): the
notebook, the workload, the race's parameters, the workload's reference validation
log-loss, the sources of every library module the race imports (the import closure of
:mod:`scalable_softmax.repro.race.cli` and of every runner the method registry names,
:func:`scalable_softmax.repro.machinery.runs.run_modules`),
the versions of the numerical libraries and of the peers (scikit-learn, PyTorch), and
the content of the workload's data (its raw files' checksums, a surrogate's generator
settings, or the bytes of notebook 14's problem file). An entry with another key, or one
that cannot be read, is not used: a warning names the file, and the workload is raced.

Timing results read back were measured by the stopped run, on this machine; the lines
the race prints say which workloads were read back, and how long they had taken.
"""
from __future__ import annotations

import hashlib
import json
import pickle
import warnings
from pathlib import Path

import pandas as pd

__all__ = ["JournalWarning", "Journal", "race_key", "code_version"]

#: peers whose versions shape the race's results (besides runs.library_versions())
_PEER_LIBRARIES = ("scikit-learn", "torch")
#: what an entry holds besides its key
_FIELDS = ("tuning", "rows", "curves", "seconds")


class JournalWarning(UserWarning):
    """A journal entry could not be used (the message names the file); the workload is
    raced again."""


def code_version() -> str:
    """The training runs' code version (:func:`scalable_softmax.repro.machinery.runs.code_version`)
    over the race's modules (the import closure of :mod:`.cli` and of every runner the
    method registry names by string), with the peers' versions."""
    from importlib.metadata import PackageNotFoundError, version

    from scalable_softmax.repro.machinery import runs
    from scalable_softmax.repro.race import methods

    mods = runs.run_modules("scalable_softmax.repro.race.cli")
    for m in methods.METHODS.values():
        mods.update(runs.run_modules(m.runner.split(":")[0]))
    peers = {}
    for lib in _PEER_LIBRARIES:
        try:
            peers[lib] = version(lib)
        except PackageNotFoundError:
            peers[lib] = "missing"
    return json.dumps({"code": runs.code_version(modules=dict(sorted(mods.items()))),
                       "peers": peers}, sort_keys=True)


def _data_fingerprint(data) -> dict:
    from scalable_softmax.repro.machinery import runs

    if str(data).endswith(".npz"):
        return {"file": hashlib.sha256(Path(data).read_bytes()).hexdigest()}
    return runs.data_fingerprint(str(data))


def race_key(notebook: str, workload, params: dict, reference: float, data,
             code: str | None = None) -> str:
    """The sha256 (hex) of what a workload's race results depend on (module docstring);
    ``code``: :func:`code_version`'s value, when the caller has it already."""
    what = {"notebook": notebook, "workload": str(workload), "params": params,
            "reference": repr(float(reference)),
            "code": code_version() if code is None else code,
            "data": _data_fingerprint(data)}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


class Journal:
    """The journal of ``notebook``'s race under ``folder`` (``<workdir>/journal``)."""

    def __init__(self, folder, notebook: str):
        self.folder = Path(folder) / notebook

    def path(self, workload) -> Path:
        return self.folder / f"{workload}.pkl"

    def read(self, workload, key: str) -> dict | None:
        """The entry of ``workload`` written under ``key`` (``tuning``, ``rows``,
        ``curves``: DataFrames; ``seconds``: how long it took), or None when there is
        none, it was written under another key, or it cannot be read (then with a
        :class:`JournalWarning`)."""
        path = self.path(workload)
        if not path.is_file():
            return None
        try:
            with open(path, "rb") as fh:
                entry = pickle.load(fh)
            ok = (isinstance(entry, dict) and all(f in entry for f in ("key", *_FIELDS))
                  and all(isinstance(entry[f], pd.DataFrame) for f in _FIELDS[:3]))
        except Exception as e:  # any unreadable entry is raced again
            warnings.warn(f"{path}: unreadable race journal entry ({type(e).__name__}: "
                          f"{e}); racing workload {workload!r} again", JournalWarning,
                          stacklevel=2)
            return None
        if not ok:
            warnings.warn(f"{path}: not a race journal entry; racing workload "
                          f"{workload!r} again", JournalWarning, stacklevel=2)
            return None
        if entry["key"] != key:
            warnings.warn(f"{path}: written by another race (other parameters, code, "
                          f"libraries, targets or data); racing workload {workload!r} "
                          "again", JournalWarning, stacklevel=2)
            return None
        return entry

    def write(self, workload, key: str, *, tuning, rows, curves, seconds: float) -> Path:
        """Keep ``workload``'s results (atomically: a stop while writing leaves the
        previous state)."""
        from scalable_softmax._atomic import atomic_open

        path = self.path(workload)
        with atomic_open(path, "wb") as fh:
            pickle.dump({"key": key, "tuning": tuning, "rows": rows, "curves": curves,
                         "seconds": float(seconds)}, fh, protocol=pickle.HIGHEST_PROTOCOL)
        return path

    def clear(self) -> None:
        """Remove the journal: the race it kept reached its end."""
        if self.folder.is_dir():
            for p in self.folder.glob("*.pkl"):
                p.unlink()
            try:
                self.folder.rmdir()
            except OSError:
                pass  # something else lives there: leave it
