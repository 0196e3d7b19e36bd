"""The executed notebooks carry results, not the machine that made them.

Scanned: the committed executed copies ``notebooks/executed/*.ipynb`` and the smoke runs'
executed copies ``build/executed/smoke/*.ipynb`` (when there are none, one small
notebook's smoke profile is run here through the runner). In no cell output:

* an absolute path of the machine (the repository's own path, or a path under one of
  the machine prefixes of ``_MACHINE_PREFIXES``: home, root, temporary and workspace
  folders);
* a progress-bar fragment: a carriage return, a tqdm rate (``12.3it/s``, ``5.48s/it``,
  ``?it/s``) or bar (`` 40%|``), or more than one stderr stream output in a cell;
* in what a cell prints, a worker warning (loky's "A worker stopped while some jobs
  were given to the executor", any loky/joblib/resource-tracker message) or any Python
  warning line (``file:line: SomeWarning: ...``);
* a bare ``True``/``False`` result, or a stray scalar result: a cell whose value is a
  number, a numpy scalar or a string echoed by IPython (``27.875754354998207``,
  ``'findings: 8 checked, 8 hold'``) instead of a printed or displayed result.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from scalable_softmax import paths

EXECUTED = paths.NOTEBOOKS / "executed"
SMOKE = paths.BUILD / "executed" / "smoke"
#: the notebook run here when there is no smoke output (no data needed, a few seconds)
SMALL = "09-ove-toy-2d"

_MACHINE_PREFIXES = ("/work", "/home", "/root", "/tmp", "/Users", "/private", "/var/folders")
_ABSOLUTE = re.compile(r"(?<![\w.:/~-])(?:%s)/" % "|".join(map(re.escape, _MACHINE_PREFIXES)))
_BAR = re.compile(r"(?:\d|\?)\s*(?:it/s|s/it)\b|\d+%\|")
_WORKER = re.compile(r"A worker stopped|loky|joblib|resource_tracker|leaked semaphore|"
                     r"TerminatedWorkerError", re.I)
_PY_WARNING = re.compile(r"^\S+:\d+: \w*Warning: ", re.M)
_SCALAR = re.compile(r"""(?:True|False|None|np\.(?:True_|False_)
                        |[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)
                        |np\.\w+\(.*\)|'[^'\n]*'|"[^"\n]*")""", re.X)
#: the text mime types of outputs (images and widget state are not scanned)
_TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex", "application/json")


def _text(value) -> str:
    if isinstance(value, list):
        return "".join(value)
    return value if isinstance(value, str) else json.dumps(value)


def output_texts(output: dict) -> list[str]:
    """The text an output shows: a stream's text, the text mimes of a result, an error."""
    kind = output.get("output_type")
    if kind == "stream":
        return [_text(output.get("text", ""))]
    if kind == "error":
        return [output.get("ename", ""), output.get("evalue", ""),
                "\n".join(output.get("traceback", []))]
    data = output.get("data", {})
    return [_text(data[m]) for m in _TEXT_MIMES if m in data]


def problems(nb: dict, root: Path = paths.ROOT) -> list[str]:
    """Every way the outputs of ``nb`` (an executed notebook as JSON) carry the machine
    that ran them, one line each, naming the cell."""
    found = []
    repo = str(Path(root).resolve())
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        where = f"cell {i} (id {cell.get('id', '?')})"
        outputs = cell.get("outputs", [])
        stderr = [o for o in outputs if o.get("output_type") == "stream"
                  and o.get("name") == "stderr"]
        if len(stderr) > 1:
            found.append(f"{where}: {len(stderr)} stderr stream outputs (progress-bar "
                         "fragments?)")
        for output in outputs:
            for text in output_texts(output):
                m = _ABSOLUTE.search(text)
                if repo in text or m:
                    at = text.find(repo) if repo in text else m.start()
                    found.append(f"{where}: absolute path {text[at:at + 60]!r}")
                if "\r" in text:
                    found.append(f"{where}: carriage return (progress-bar fragment) in "
                                 f"{text[:60]!r}")
                m = _BAR.search(text)
                if m:
                    bar = text[max(0, m.start() - 30):m.end() + 10]
                    found.append(f"{where}: progress bar {bar!r}")
                m = (_WORKER.search(text) or _PY_WARNING.search(text)) \
                    if output.get("output_type") == "stream" else None
                if m:
                    found.append(f"{where}: warning {text[max(0, m.start() - 20):m.end() + 60]!r}")
            if output.get("output_type") == "execute_result":
                data = output.get("data", {})
                plain = _text(data.get("text/plain", "")).strip()
                rich = [m for m in data if m != "text/plain"]
                if not rich and _SCALAR.fullmatch(plain):
                    found.append(f"{where}: stray value {plain[:60]!r} (end the line with ';' "
                                 "or print it)")
    return found


def _executed(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("[0-9][0-9]-*.ipynb")
                  if not p.name.endswith(".failed.ipynb"))


# ----------------------------------------------------------------- the scanner itself
def _cell(outputs, i=0):
    return {"cell_type": "code", "id": f"c{i}", "source": "", "metadata": {},
            "execution_count": 1, "outputs": outputs}


def _stream(text, name="stdout"):
    return {"output_type": "stream", "name": name, "text": text}


def _result(plain, **more):
    return {"output_type": "execute_result", "execution_count": 1, "metadata": {},
            "data": {"text/plain": plain, **more}}


def test_the_scan_finds_each_kind_of_problem():
    root = paths.ROOT.resolve()
    cases = {
        "absolute path": [_stream(f"numba kernels ready (cache: {root}/build/numba-cache)\n")],
        "absolute path ": [_stream("inputs: /tmp/x/tables/03.csv\n")],
        "carriage return": [_stream("\rstep 1\rstep 2\n")],
        "progress bar": [_stream("paper rates: 100%|##########| 126/126 [11:30<00:00, "
                                 "5.48s/it]\n", "stderr")],
        "stderr stream outputs": [_stream("a\n", "stderr"), _stream("b\n", "stderr")],
        "warning": [_stream("/x/loky/process_executor.py:787: UserWarning: A worker "
                            "stopped while some jobs were given to the executor.\n",
                            "stderr")],
        "warning ": [_stream("lib/mod.py:12: RuntimeWarning: overflow\n", "stderr")],
        "stray value 'True'": [_result("True")],
        "stray value '27.875754354998207'": [_result("27.875754354998207")],
        "stray value \"'findings: 8 checked, 8 hold'\"": [_result("'findings: 8 checked, 8 hold'")],
        "stray value 'np.float64(0.5)'": [_result("np.float64(0.5)")],
    }
    for what, outputs in cases.items():
        found = problems({"cells": [_cell(outputs)]})
        assert found and all(what.strip() in line for line in found[:1]), (what, found)
    # results, tables and printed lines are not problems
    clean = [_stream("profile: smoke -> writes under build/smoke/; findings are asserted\n"
                     "wrote tables/09-ove-toy-2d.csv\nsee https://example.org/home/page\n"),
             _result("   method  nll\n0  OVE  0.3", **{"text/html": "<table></table>"}),
             _stream("total time 2.0 s\n", "stderr")]
    assert problems({"cells": [_cell(clean)]}) == []


def test_merge_streams_joins_consecutive_outputs_of_one_stream():
    from scalable_softmax.repro.machinery.runner import merge_streams

    nb = {"cells": [_cell([_stream("a\n"), _stream(["b\n", "c\n"]), _stream("e1\n", "stderr"),
                           _stream("d\n"), _result("x", **{"text/html": "<b>x</b>"}),
                           _stream("e\n"), _stream("f\n")]),
                    {"cell_type": "markdown", "source": "text", "metadata": {}}]}
    assert merge_streams(nb) == 2
    outs = nb["cells"][0]["outputs"]
    assert [(o["output_type"], o.get("name"), o.get("text")) for o in outs] == [
        ("stream", "stdout", "a\nb\nc\n"), ("stream", "stderr", "e1\n"),
        ("stream", "stdout", "d\n"), ("execute_result", None, None),
        ("stream", "stdout", "e\nf\n")]


def test_a_pool_worker_holds_one_data_set_at_a_time(monkeypatch):
    """The cause of loky's "A worker stopped ..." warnings: a worker kept the splits of
    every data set of a sweep and outgrew loky's memory-leak allowance (300 MB)."""
    from scalable_softmax.repro.machinery import runs

    cleared = []

    class Cache:
        def cache_clear(self):
            cleared.append(True)

    monkeypatch.setattr(runs, "_load_split", Cache())
    monkeypatch.setattr(runs, "_POOL_DATA", {})
    spec = lambda d: runs.RunSpec.make(d, "ove", 0.1)   # noqa: E731
    for d, clears in [("bibtex", 0), ("bibtex", 0), ("delicious", 1), ("delicious", 1),
                      ("mnist", 2)]:
        runs._keep_one_data_set(spec(d))
        assert len(cleared) == clears, (d, cleared)


# ----------------------------------------------------------------- the notebooks
@pytest.mark.parametrize("path", _executed(EXECUTED), ids=lambda p: p.stem)
def test_committed_executed_notebook_is_clean(path):
    found = problems(json.loads(path.read_text()))
    assert not found, (f"{path.relative_to(paths.ROOT)} ({len(found)}; republish it with "
                       "make reproduce):\n" + "\n".join(found[:40]))


def test_every_notebook_has_its_committed_executed_copy_or_awaits_the_record():
    """The record is one run of every notebook: each has ``notebooks/executed/NAME.ipynb``
    except those added since, listed in one place (``runner.AWAITING_RECORD``) until the
    next record run publishes them, when they must leave the list."""
    from scalable_softmax.repro.machinery import runner

    names = runner.known_notebooks()
    assert set(runner.AWAITING_RECORD) <= set(names), runner.AWAITING_RECORD
    missing = sorted(n for n in names if not (EXECUTED / f"{n}.ipynb").exists())
    assert missing == sorted(runner.AWAITING_RECORD), (
        f"notebooks without an executed copy: {missing}; awaiting the record: "
        f"{list(runner.AWAITING_RECORD)} (a new notebook goes into runner.AWAITING_RECORD "
        "until make reproduce publishes it; a published one leaves it)")


@pytest.fixture(scope="module")
def smoke_outputs(tmp_path_factory):
    """The smoke runs' executed copies; without any, notebook 09's smoke profile run here
    (its tables under a build/ folder of its own, removed afterwards)."""
    found = _executed(SMOKE)
    if found:
        return found
    from scalable_softmax.repro.machinery import runner

    own = paths.BUILD / f"test-executed-clean-{os.getpid()}"
    out = tmp_path_factory.mktemp("smoke") / f"{SMALL}.ipynb"
    try:
        runner.run(SMALL, "smoke", out=out,
                   overrides={"output_root": str(own.relative_to(paths.ROOT))})
    finally:
        shutil.rmtree(own, ignore_errors=True)
    return [out]


@pytest.mark.slow
def test_smoke_outputs_are_clean(smoke_outputs):
    bad = {}
    for path in smoke_outputs:
        found = problems(json.loads(path.read_text()))
        if found:
            bad[path.name] = found
    assert not bad, "\n".join(f"{name}:\n  " + "\n  ".join(found[:20])
                              for name, found in bad.items())
