"""PROVENANCE.md's run facts are measured by make, never typed: make reproduce records
its start, the runner records the end and writes the end-to-end time."""
from __future__ import annotations

import pytest
import yaml

from scalable_softmax import paths
from scalable_softmax.repro import runner


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
    assert "| `make reproduce` | 2026-11-26T05:00:00+00:00 | 2026-11-26T05:47:12+00:00 | 47 min 12 s |" in text
    assert "| `make reproduce-extra` |" in text and "22 min 40 s" in text


def test_bad_times_are_refused_with_the_argument_named(build, capsys):
    with pytest.raises(ValueError, match="--started 'yesterday' is not an ISO 8601 time"):
        runner.record_make_run("reproduce", "yesterday")
    with pytest.raises(ValueError, match="ended .* before it started"):
        runner.record_make_run("reproduce", "2026-11-26T05:00:00Z", ended="2026-11-26T04:00:00Z")
    assert runner.main(["provenance", "--run", "reproduce"]) == 2
    assert "--run and --started go together" in capsys.readouterr().err
    assert not (build / "build/executed/full/make-runs.yaml").exists()
