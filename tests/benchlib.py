"""Load a script of ``benchmarks/`` as a module, for the tests of its loops and
bookkeeping (the scripts are not a package; they import ``benchmarks/_common`` and each
other by name, so the folder is on ``sys.path`` while one loads)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str):
    """The module of ``benchmarks/<name>.py``."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return mod
