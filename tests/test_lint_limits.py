"""The complexity (C901) and argument-count (PLR0913) limits of pyproject.toml only
tighten: the functions that exceed them today are listed, by file, function and rule,
in ``tests/lint-limits-baseline.txt``; a function that newly exceeds a limit fails here
(and the per-file ignores that keep ``ruff check`` clean name only files of that list),
and a listed function that no longer exceeds must leave the list, so it shrinks."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tests" / "lint-limits-baseline.txt"
RULES = ("C901", "PLR0913")
#: numba kernels take their arrays one by one (no objects in nopython code): exempt
#: from the argument count by a rule of pyproject.toml, not listed
KERNELS = "lib/scalable_softmax/kernels/"


PYPROJECT = ROOT / "pyproject.toml"


def _config():
    return tomllib.loads(PYPROJECT.read_text())["tool"]["ruff"]


def _functions(path: Path) -> dict[int, str]:
    """Line of each ``def`` -> its qualified name (``Class.method``, ``outer.inner``)."""
    out = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out[child.lineno] = name
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(), str(path)), "")
    return out


def exceeding(paths=("lib", "tests", "benchmarks")) -> Counter:
    """``path:function:rule`` of every function over a limit of pyproject.toml (its
    thresholds, without the per-file ignores), kernels' argument counts left out."""
    lint = _config()["lint"]
    cmd = [sys.executable, "-m", "ruff", "check", "--isolated", "--exit-zero",
           "--output-format", "json", "--select", ",".join(RULES),
           "--config", f"lint.mccabe.max-complexity={lint['mccabe']['max-complexity']}",
           "--config", f"lint.pylint.max-args={lint['pylint']['max-args']}", *paths]
    found = json.loads(subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                      check=True).stdout)
    names: dict[str, dict[int, str]] = {}
    out = Counter()
    for f in found:
        rel = Path(f["filename"]).resolve().relative_to(ROOT).as_posix()
        if f["code"] == "PLR0913" and rel.startswith(KERNELS):
            continue
        if rel not in names:
            names[rel] = _functions(ROOT / rel)
        out[f"{rel}:{names[rel][f['location']['row']]}:{f['code']}"] += 1
    return out


def _baseline() -> Counter:
    return Counter(line.strip() for line in BASELINE.read_text().splitlines()
                   if line.strip() and not line.startswith("#"))


def test_no_new_function_exceeds_a_limit_and_the_list_only_shrinks():
    now, listed = exceeding(), _baseline()
    new = now - listed
    assert not new, (f"over the complexity or argument-count limit (pyproject.toml): "
                     f"{sorted(new)}; split the function or pass a config object")
    fixed = listed - now
    assert not fixed, (f"no longer over a limit: remove {sorted(fixed)} from "
                       f"{BASELINE.name} (the list only shrinks)")


def test_the_per_file_ignores_of_the_limits_name_only_listed_files():
    ignores = _config()["lint"]["per-file-ignores"]
    files = {entry.split(":")[0] for entry in _baseline()}
    rules = {entry.rsplit(":", 1)[1] for entry in _baseline()}
    assert rules <= set(RULES)
    extra = sorted(pattern for pattern, codes in ignores.items()
                   if set(codes) & set(RULES) and pattern not in files
                   and pattern != KERNELS + "*.py")
    assert not extra, f"per-file ignores of {RULES} for files not in {BASELINE.name}: {extra}"


def test_the_check_sees_a_function_over_the_limits(tmp_path, monkeypatch):
    """The check can fail: a function with too many arguments and branches is found."""
    lint = _config()["lint"]
    n = lint["pylint"]["max-args"] + 1
    body = "".join(f"    if a{i}:\n        return {i}\n"
                   for i in range(lint["mccabe"]["max-complexity"] + 1))
    bad = tmp_path / "bad.py"
    bad.write_text(f"def many({', '.join(f'a{i}' for i in range(n))}):\n{body}")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert exceeding(("bad.py",)) == Counter({"bad.py:many:C901": 1, "bad.py:many:PLR0913": 1})
