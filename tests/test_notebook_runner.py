"""The papermill runner: parameters from params/*.yaml, misspelt ones fail, outputs stripped."""
from __future__ import annotations

import json

import nbformat
import pytest

from scalable_softmax import notebooks, paths


def _write_notebook(folder, name):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import math"),
        nbformat.v4.new_code_cell("epochs = 50\nseed = 0", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("result = epochs * 2"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / f"{name}.ipynb")


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "params").mkdir()
    monkeypatch.setattr(paths, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(paths, "PARAMS", tmp_path / "params")
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    _write_notebook(tmp_path / "notebooks", "99-demo")
    return tmp_path


def test_prepare_injects_the_profile_parameters(project):
    (project / "params" / "99-demo.yaml").write_text("full: {}\nsmoke:\n  epochs: 2\n")
    out = notebooks.prepare("99-demo", "smoke")
    nb = json.loads(out.read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1 and "epochs = 2" in "".join(injected[0]["source"])
    assert not list(out.parent.glob(".*tmp*")), "temporary file left behind"


def test_misspelt_parameter_fails(project):
    (project / "params" / "99-demo.yaml").write_text("smoke:\n  epoch: 2\n")
    with pytest.raises(notebooks.NotebookParameterError, match=r"\['epoch'\]"):
        notebooks.prepare("99-demo", "smoke")


def test_unknown_profile_and_missing_notebook_are_errors(project):
    (project / "params" / "99-demo.yaml").write_text("quick:\n  epochs: 2\n")
    with pytest.raises(ValueError, match="unknown profile"):
        notebooks.load_params("99-demo", "smoke")
    with pytest.raises(FileNotFoundError, match="99-demo"):
        notebooks.notebook_path("98-missing")


def test_source_notebooks_are_committed_without_outputs():
    for path in sorted(paths.NOTEBOOKS.glob("*.ipynb")):
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert not cell.get("outputs"), f"{path.name} has outputs: strip them"
                assert cell.get("execution_count") is None, f"{path.name} has execution counts"


def test_every_notebook_has_a_parameters_cell_and_settings():
    for path in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")):
        nb = json.loads(path.read_text())
        tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
        assert len(tagged) == 1, f"{path.name}: exactly one cell must be tagged 'parameters'"
        assert (paths.PARAMS / f"{path.stem}.yaml").exists(), f"params/{path.stem}.yaml missing"
        notebooks.check_params(path.stem, notebooks.load_params(path.stem, "smoke"))


def test_provenance_lists_durations_and_notebook_02_time_breakdown(project):
    executed = project / "build" / "executed" / "full"
    executed.mkdir(parents=True)
    (executed / "durations.yaml").write_text("02-dataset-run: 812.5\n06-paper-tables: 306.0\n")
    out = project / "tables" / "PROVENANCE.md"
    out.parent.mkdir()
    notebooks.write_provenance("full", out=out)
    text = out.read_text()
    assert "| 02-dataset-run | 812.5 |" in text and "| total | 1118.5 |" in text
    assert "time goes" not in text            # no breakdown written yet
    (out.parent / "02-dataset-run-time.md").write_text(
        "# title\n\npreamble\n\n| method | training |\n|---|---|\n| U-max | 1.5 |\n")
    notebooks.write_provenance("full", out=out)
    text = out.read_text()
    assert "Where notebook 02's time goes" in text and "| U-max | 1.5 |" in text
    assert "# title" not in text
