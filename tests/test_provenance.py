"""PROVENANCE.md's run facts are measured by make, never typed: make reproduce records
its start, the runner records the end and writes the end-to-end time."""
from __future__ import annotations

import pytest
import yaml

from scalable_softmax import paths
from scalable_softmax.repro.machinery import runner


@pytest.fixture()
def build(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    return tmp_path


def test_a_make_run_is_recorded_and_written_to_provenance(build):
    e = runner.record_make_run("reproduce", "2026-11-26T05:00:00Z", ended="2026-11-26T05:47:12Z")
    assert e["seconds"] == 47 * 60 + 12
    runner.record_make_run("reproduce-extra", "2026-11-26T05:47:20Z",
                           ended="2026-11-26T06:10:00Z")
    log = yaml.safe_load((build / "build/executed/full/make-runs.yaml").read_text())
    assert set(log) == {"reproduce", "reproduce-extra"}
    out = runner.write_provenance("full", out=build / "PROVENANCE.md")
    text = out.read_text()
    assert ("| `make reproduce` | 2026-11-26T05:00:00+00:00 | 2026-11-26T05:47:12+00:00 "
            "| 47 min 12 s |") in text
    assert "| `make reproduce-extra` |" in text and "22 min 40 s" in text


def test_bad_times_are_refused_with_the_argument_named(build, capsys):
    with pytest.raises(ValueError, match="--started 'yesterday' is not an ISO 8601 time"):
        runner.record_make_run("reproduce", "yesterday")
    with pytest.raises(ValueError, match="ended .* before it started"):
        runner.record_make_run("reproduce", "2026-11-26T05:00:00Z", ended="2026-11-26T04:00:00Z")
    assert runner.main(["provenance", "--run", "reproduce"]) == 2
    assert "--run and --started go together" in capsys.readouterr().err
    assert not (build / "build/executed/full/make-runs.yaml").exists()


def test_provenance_names_the_blas_kernel_cpu_and_library_versions(build, monkeypatch):
    import numba
    import numpy
    import scipy
    from threadpoolctl import threadpool_info

    from scalable_softmax.repro.fagan.timing import cpu_model
    from scalable_softmax.repro.machinery import blaskernel

    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")   # named as set (not applied here)
    text = runner.write_provenance("full", out=build / "PROVENANCE.md").read_text()
    blas = blaskernel.recorded_blas(text)
    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            assert f"{lib['internal_api']} {lib['version']}" in blas
            if lib.get("architecture"):
                assert f"kernel {lib['architecture']}" in blas
    assert blas.endswith("(OPENBLAS_CORETYPE=Haswell)")
    assert f", {cpu_model()}, " in text
    assert (f"- libraries: numba {numba.__version__}, numpy {numpy.__version__}, "
            f"scipy {scipy.__version__}") in text


def test_describe_blas_of_given_libraries():
    info = [{"user_api": "blas", "internal_api": "openblas", "version": "0.3.30",
             "architecture": "Haswell"},
            {"user_api": "blas", "internal_api": "openblas", "version": "0.3.30",
             "architecture": "Haswell"},
            {"user_api": "openmp", "internal_api": "openmp", "version": None}]
    from scalable_softmax.repro.machinery import blaskernel
    assert blaskernel.describe_blas(info, None) == \
        "openblas 0.3.30, kernel Haswell (OPENBLAS_CORETYPE not set)"
    assert blaskernel.describe_blas([], "Prescott") == "no BLAS library found by threadpoolctl"


def test_a_record_without_the_kernel_line_says_not_recorded():
    from scalable_softmax.repro.machinery import blaskernel
    committed = (paths.TABLES / "PROVENANCE.md").read_text()
    got = blaskernel.recorded_blas(committed)
    if blaskernel.BLAS_LINE in committed:       # a record made since the line exists
        assert got != "not recorded" and "kernel" in got
    else:
        assert got == "not recorded"
    assert blaskernel.recorded_blas(None) == "not recorded"


def test_a_record_from_two_commits_names_each_notebooks(tmp_path, monkeypatch):
    # notebooks run at different commits: the table gets a commit column, the commit
    # line says so; one commit: the plain two-column table
    import yaml

    from scalable_softmax.repro.machinery import runner

    monkeypatch.setattr(runner.paths, "BUILD", tmp_path / "build")
    folder = tmp_path / "build" / "executed" / "full"
    folder.mkdir(parents=True)
    (folder / "durations.yaml").write_text(yaml.safe_dump({"00-a": 1.5, "14-crossover": 2.0}))
    head = runner._git_head()
    (folder / "commits.yaml").write_text(yaml.safe_dump({"00-a": "a" * 40,
                                                         "14-crossover": head}))
    out = runner.write_provenance("full", out=tmp_path / "PROVENANCE.md")
    text = out.read_text()
    assert "| notebook | seconds | commit |" in text
    assert f"| 00-a | 1.5 | {'a' * 12} |" in text
    assert f"| 14-crossover | 2.0 | {head[:12]}" in text
    assert "the commit column below" in text
    assert "numba's target CPU: " in text
    # the pages read each notebook's seconds and commit back (repro.machinery.numbers)
    from scalable_softmax.repro.machinery import numbers

    got = numbers.Tables(tmp_path).provenance()
    assert got["seconds"] == {"00-a": 1.5, "14-crossover": 2.0}
    assert got["commits"] == {"00-a": "a" * 7, "14-crossover": head[:7]}
    assert got["commit"] == head[:7]
    (folder / "commits.yaml").write_text(yaml.safe_dump({"00-a": head, "14-crossover": head}))
    text = runner.write_provenance("full", out=tmp_path / "P2.md").read_text()
    assert "| notebook | seconds |\n|---|---|" in text and "commit column" not in text


def test_a_notebooks_run_records_its_commit(tmp_path, monkeypatch):
    import yaml

    from scalable_softmax.repro.machinery import runner

    monkeypatch.setattr(runner.paths, "BUILD", tmp_path / "build")
    runner._record_duration("07-x", "full", 3.14159)
    folder = tmp_path / "build" / "executed" / "full"
    assert yaml.safe_load((folder / "durations.yaml").read_text()) == {"07-x": 3.1}
    assert yaml.safe_load((folder / "commits.yaml").read_text()) == {
        "07-x": runner._git_head()}
