"""nbval as it is meant: the smoke runs' key cells (tables, findings) are compared with
stored outputs (tests/nbval/NAME.json, written by make smoke-record), so a changed number
fails make test; timings and paths are sanitized (tests/nbval/sanitize.cfg)."""
from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from scalable_softmax import paths
from scalable_softmax.repro import runner

SANITIZE = paths.ROOT / "tests" / "nbval" / "sanitize.cfg"


@pytest.fixture
def project(tmp_path, monkeypatch):
    for d in ("notebooks", "params"):
        (tmp_path / d).mkdir()
    monkeypatch.setattr(paths, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(paths, "PARAMS", tmp_path / "params")
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    monkeypatch.setattr(paths, "ROOT", tmp_path)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("n = 3", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print(f'| n | squared |\\n|---|---|\\n| {n} | {n * n} |')"),
        nbformat.v4.new_code_cell("import time\nprint(f'ran in {time.time() % 7:.1f} s')"),
        nbformat.v4.new_code_cell("print('finding holds: n > 0', f'({n} > 0)')"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, tmp_path / "notebooks" / "99-demo.ipynb")
    (tmp_path / "params" / "99-demo.yaml").write_text("full:\n  n: 3\nsmoke:\n  n: 2\n")
    return tmp_path


def _nbval(notebook) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with",
                           str(SANITIZE), str(notebook)], capture_output=True, text=True,
                          cwd=notebook.parent, timeout=300)


def test_key_cells_are_tables_and_findings_without_timings():
    def cell(text):
        return {"cell_type": "code", "outputs": [
            {"output_type": "stream", "name": "stdout", "text": text}]}
    assert runner.is_key_cell(cell("| a |\n|---|\n| 1 |"))
    assert runner.is_key_cell(cell("finding holds: x"))
    assert not runner.is_key_cell(cell("| seconds |\n|---|\n| 1 |"))
    assert not runner.is_key_cell(cell("done in 3.2 s"))
    assert not runner.is_key_cell(cell("no result here"))


def test_a_changed_number_fails_and_a_record_passes(project):
    runner.run("99-demo", "smoke", timeout=120)
    record = runner.record_nbval("99-demo")
    stored = json.loads(record.read_text())
    assert record == project / "tests" / "nbval" / "99-demo.json"
    assert len(stored["cells"]) == 2 and "make smoke-record" in stored["regenerate"]
    # the prepared smoke copy carries the stored outputs; nbval compares them
    prepared = runner.prepare("99-demo", "smoke")
    nb = json.loads(prepared.read_text())
    checked = [c for c in nb["cells"] if runner.NBVAL_CHECK in c["metadata"].get("tags", [])]
    assert len(checked) == 2
    done = _nbval(prepared)
    assert done.returncode == 0, done.stdout[-2000:]
    # a changed number: make test fails, naming the cell
    text = "".join(stored["cells"][0]["outputs"][0]["text"])
    assert "| 4 |" in text
    stored["cells"][0]["outputs"][0]["text"] = text.replace("| 4 |", "| 5 |")
    record.write_text(json.dumps(stored))
    prepared = runner.prepare("99-demo", "smoke")
    done = _nbval(prepared)
    assert done.returncode != 0 and "| 5 |" in done.stdout
    # an exploring run (-p) is never compared
    explore = runner.prepare("99-demo", "smoke", overrides={"n": 9},
                             out=project / "build" / "x.ipynb")
    assert runner.NBVAL_CHECK not in explore.read_text()


def test_every_stored_record_names_cells_of_its_notebook():
    for record in sorted((paths.ROOT / runner.NBVAL_DIR).glob("*.json")):
        name = record.stem
        ids = {c.get("id") for c in json.loads(runner.notebook_path(name).read_text())["cells"]}
        stored = json.loads(record.read_text())["cells"]
        missing = [c["id"] for c in stored if c["id"] not in ids]
        assert not missing, f"{record.name}: cells {missing} are gone; run make smoke-record"
