"""``make`` without the data, and with a .venv of the wrong Python (issue 13, point 5):
``make test`` runs the tests when the data cannot be fetched (the data tests are then
skipped, see conftest.py), except under CI; a .venv made with the wrong Python is made
again with the right one, or the problem is explained; never left broken.

Runs ``make`` in a scratch copy of the Makefile with stand-in Pythons (shell scripts
that report a version and record what they were asked to do), and pytest on scratch
tests with the project's conftest.py."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import uuid

import pytest

from scalable_softmax import paths

FAKE = """#!/bin/bash
# a stand-in Python {version} (and, copied into a venv, a stand-in ruff: it only logs)
echo "$0 $*" >> "{log}"
case "$1" in
  -c) echo "{version}" ;;
  --version) echo "Python {version}.0" ;;
  -m) case "$2" in
        venv) mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && cp "$0" "$3/bin/ruff" &&
                echo "home = /fake" > "$3/pyvenv.cfg" ;;
        pip|pytest) ;;
        scalable_softmax.repro.machinery.runner)
          if [ "$3" = run ]; then
            mkdir -p build/executed/full && touch "build/executed/full/$4.ipynb"
          fi ;;
        scalable_softmax.data)
          case "$3" in
            fetch) [ -n "$FAKE_DATA" ] || {{ echo "error: no data here (offline)" >&2; exit 1; }} ;;
            stamp) mkdir -p "$(dirname "$4")"; printf '%s\n' "$FAKE_DATA" > "$4.new"
                   cmp -s "$4.new" "$4" || cp "$4.new" "$4"; rm -f "$4.new" ;;
          esac ;;
        *) exit 1 ;;
      esac ;;
esac
"""


@pytest.fixture
def project(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(paths.ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(paths.ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copy(paths.ROOT / "requirements.lock", tmp_path / "requirements.lock")
    log = tmp_path / "calls.log"
    for version in ("3.11", "3.12"):
        exe = tmp_path / "bin" / f"python{version}"
        exe.parent.mkdir(exist_ok=True)
        exe.write_text(FAKE.format(version=version, log=log))
        exe.chmod(0o755)
    return tmp_path


def _make(project, python):
    return subprocess.run(["make", "--no-print-directory", "venv",
                           f"PYTHON={project / 'bin' / ('python' + python)}"],
                          cwd=project, capture_output=True, text=True, timeout=60)


def _venv_version(project):
    return subprocess.run([project / ".venv" / "bin" / "python", "-c", "v"],
                          capture_output=True, text=True).stdout.strip()


def _make_wrong_venv(project):
    subprocess.run([project / "bin" / "python3.12", "-m", "venv", ".venv"], cwd=project,
                   check=True)
    assert _venv_version(project) == "3.12"


def test_a_venv_of_the_wrong_python_is_made_again(project):
    _make_wrong_venv(project)
    got = _make(project, "3.11")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "made with Python 3.12" in got.stdout and "making it again" in got.stdout
    assert _venv_version(project) == "3.11"
    assert (project / ".venv" / ".installed-stamp").exists()
    # and then it is left alone
    calls = (project / "calls.log").read_text()
    again = _make(project, "3.11")
    assert again.returncode == 0, again.stdout + again.stderr
    new_calls = (project / "calls.log").read_text()[len(calls):]
    assert "-m pip" not in new_calls and "-m venv" not in new_calls


def test_the_wrong_python_is_explained(project):
    _make_wrong_venv(project)
    got = _make(project, "3.12")
    assert got.returncode != 0
    out = got.stdout + got.stderr
    assert "is Python 3.12; the project needs Python 3.11" in out and "PYTHON=" in out
    assert _venv_version(project) == "3.12"              # nothing destroyed on the way


def test_a_foreign_venv_folder_is_not_deleted(project):
    (project / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(project / "bin" / "python3.12", project / ".venv" / "bin" / "python")
    got = _make(project, "3.11")
    assert got.returncode != 0
    assert "not a virtual environment" in got.stdout + got.stderr
    assert (project / ".venv" / "bin" / "python").exists()


def _venv_ready(project):
    got = _make(project, "3.11")
    assert got.returncode == 0, got.stdout + got.stderr


@pytest.mark.parametrize("ci", [False, True], ids=["local", "CI"])
def test_make_test_runs_without_the_data_except_under_ci(project, ci):
    _venv_ready(project)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    calls = (project / "calls.log").read_text()
    got = subprocess.run(["make", "--no-print-directory", "test"], cwd=project, env=env,
                         capture_output=True, text=True, timeout=60)
    out = got.stdout + got.stderr
    new_calls = (project / "calls.log").read_text()[len(calls):]
    assert "-m scalable_softmax.data fetch" in new_calls
    # the lint runs first
    lint = new_calls.find("bin/ruff check lib tests benchmarks")
    assert 0 <= lint < new_calls.find("-m scalable_softmax.data fetch"), new_calls
    if ci:
        assert got.returncode != 0 and "under CI" in out
        assert "-m pytest" not in new_calls
    else:
        assert got.returncode == 0, out
        assert "will be reported as skipped" in out
        assert "-m pytest" in new_calls


def test_the_notebooks_rerun_when_the_data_change_and_only_then(project):
    _venv_ready(project)
    (project / "notebooks").mkdir()
    (project / "params").mkdir()
    (project / "notebooks" / "00-x.ipynb").write_text("{}")
    (project / "params" / "00-x.yaml").write_text("full: {}\n")
    target = "build/executed/full/00-x.ipynb"

    def make(data):
        before = (project / "calls.log").read_text()
        env = dict(os.environ, FAKE_DATA=data)
        got = subprocess.run(["make", "--no-print-directory", target], cwd=project,
                             env=env, capture_output=True, text=True, timeout=60)
        assert got.returncode == 0, got.stdout + got.stderr
        new = (project / "calls.log").read_text()[len(before):]
        return "-m scalable_softmax.repro.machinery.runner run 00-x" in new

    assert make("sha-a  bibtex/bibtex-train.arff.gz")
    assert not make("sha-a  bibtex/bibtex-train.arff.gz")     # nothing changed
    assert make("sha-b  bibtex/bibtex-train.arff.gz")         # the data changed
    assert not make("sha-b  bibtex/bibtex-train.arff.gz")


SCRATCH_TEST = """
from scalable_softmax.data import MissingDataError


def test_needs_data():
    raise MissingDataError("bibtex: missing raw file(s) in the data directory /nowhere")


def test_without_data():
    assert True
"""


def _scratch(tmp_name, files):
    """A folder inside the repository (so the project's conftest.py applies)."""
    folder = paths.BUILD / f"conftest-check-{tmp_name}-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _pytest(folder, ci, *args):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs",
                           "-q", *args, str(folder)], cwd=paths.ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("ci", [False, True], ids=["local", "CI"])
def test_a_test_without_its_data_is_skipped_with_the_reason_or_fails_under_ci(ci):
    folder = _scratch("unit", {"test_scratch.py": SCRATCH_TEST})
    try:
        got = _pytest(folder, ci)
    finally:
        shutil.rmtree(folder)
    if ci:
        assert got.returncode == 1 and "1 failed, 1 passed" in got.stdout, got.stdout
    else:
        assert got.returncode == 0, got.stdout
        assert "1 passed, 1 skipped" in got.stdout
        assert "needs data that are not in the data directory" in got.stdout
        assert "bibtex: missing raw file(s)" in got.stdout


def test_a_notebook_without_its_data_is_skipped_cell_by_cell():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_code_cell(textwrap.dedent("""
                    from scalable_softmax.data import MissingDataError
                    raise MissingDataError("bibtex: missing raw file(s) in /nowhere")""")),
                nbformat.v4.new_code_cell("print(x + y)")]
    folder = _scratch("nb", {"scratch.ipynb": nbformat.writes(nb)})
    try:
        got = _pytest(folder, False, "--nbval-lax", "--nbval-current-env")
    finally:
        shutil.rmtree(folder)
    assert got.returncode == 0, got.stdout
    assert "1 passed, 2 skipped" in got.stdout
    assert "bibtex: missing raw file(s)" in got.stdout
