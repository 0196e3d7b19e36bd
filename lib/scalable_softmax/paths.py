"""Absolute paths of the project, so that the working directory never matters.

In a checkout of the collection (the library imported from ``lib/scalable_softmax``
beside ``pyproject.toml``, :data:`IN_CHECKOUT`) the data live in the repository:
raw files in ``data/raw``, the preprocessed cache in ``data/processed``. An installed
library (a wheel in a virtual environment) never writes into its install: its raw
files go to the user data directory and its cache to the user cache directory
(``platformdirs``: ``~/.local/share/scalable_softmax/raw`` and
``~/.cache/scalable_softmax/processed`` on Linux).

``SOFTMAX_DATA_DIR`` overrides where raw data files are looked for, ``SOFTMAX_CACHE_DIR``
where the cache is written; ``DATA_MIRROR`` names a local folder holding copies of the
raw files (default ``../shared/data`` beside a checkout; none for an installed library).
"""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: True when the library is imported from a checkout of the collection (not installed)
IN_CHECKOUT = ((ROOT / "pyproject.toml").is_file()
               and (ROOT / "lib" / "scalable_softmax" / "__init__.py").is_file())
DATA = ROOT / "data"
PROCESSED = DATA / "processed"
FIGURES = ROOT / "figures"
TABLES = ROOT / "tables"
BUILD = ROOT / "build"
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"

_APP = "scalable_softmax"


def _user_dir(kind: str) -> Path:
    import platformdirs

    return Path(platformdirs.user_data_dir(_APP, appauthor=False) if kind == "data"
                else platformdirs.user_cache_dir(_APP, appauthor=False))


def default_raw_dir() -> Path:
    """Where raw files are looked for without ``SOFTMAX_DATA_DIR``: ``data/raw`` of a
    checkout, else ``<user data dir>/raw``."""
    return DATA / "raw" if IN_CHECKOUT else _user_dir("data") / "raw"


def default_processed_dir() -> Path:
    """Where the cache goes without ``SOFTMAX_CACHE_DIR``: ``data/processed`` of a
    checkout, else ``<user cache dir>/processed``."""
    return PROCESSED if IN_CHECKOUT else _user_dir("cache") / "processed"


def raw_dir() -> Path:
    """Folder searched for raw data files (``SOFTMAX_DATA_DIR``, default
    :func:`default_raw_dir`)."""
    return Path(os.environ.get("SOFTMAX_DATA_DIR") or default_raw_dir()).expanduser().resolve()


def mirror_dir() -> Path:
    """Local mirror of the public data files (``DATA_MIRROR``, default ``../shared/data``
    beside a checkout; for an installed library, a folder that does not exist)."""
    default = (ROOT.parent / "shared" / "data" if IN_CHECKOUT
               else _user_dir("data") / "mirror")
    return Path(os.environ.get("DATA_MIRROR") or default).expanduser().resolve()


def processed_dir() -> Path:
    """Cache of preprocessed arrays (``SOFTMAX_CACHE_DIR``, default
    :func:`default_processed_dir`)."""
    return Path(os.environ.get("SOFTMAX_CACHE_DIR")
                or default_processed_dir()).expanduser().resolve()


def fetch_command(dataset: str | None = None) -> str:
    """The command that fills the data directory: ``make data`` in a checkout (it sets
    the mirror), ``python -m scalable_softmax.data fetch [NAME]`` for an installed
    library."""
    cli = "python -m scalable_softmax.data fetch" + (f" {dataset}" if dataset else "")
    return f"`make data` (or `{cli}`)" if IN_CHECKOUT else f"`{cli}`"
