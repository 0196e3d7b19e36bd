"""The race's journal (repro.race.journal): a race stopped after some workloads resumes
from them when rerun, with the same tables as a race that never stopped; an entry of
another race, or an unreadable one, is raced again with a warning naming the file; a
race that reaches its end clears its journal."""
from __future__ import annotations

import math
import pickle
from pathlib import Path

import pandas as pd
import pytest

import racelib
from scalable_softmax.repro.race import cli, journal, run

TABLE = pd.DataFrame({"notebook": "12-peers", "workload": ["a", "b"],
                      "reference_method": "softmax-sgd", "lr": 1.0, "config": "",
                      "status": "time cap", "reference_seconds": 5.0, "cap_seconds": 1.0,
                      "reference_val_log_loss": [2.0, 3.0], "sets_target": True,
                      "val_rows": 10, "split_seed": 0})
PARAMS = {"peers": {"datasets": ["a", "b"], "caps": {"a": 1, "b": 1},
                    "methods": ["umax", "torch-sgd"]},
          "grids": {}, "val_fraction": 0.1, "split_seed": 0, "val_rows": 10,
          "max_epochs": 1, "threads": 1, "memory_cap_gb": 1.0, "first_checkpoint": 0.1,
          "seeds": [0, 1, 2]}


class Stop(Exception):
    """What stops the race in these tests (a timeout, a killed kernel)."""


@pytest.fixture
def race(monkeypatch):
    """A fake race (no training): ``calls`` lists the workloads tuned; a workload named
    in ``stop_at`` stops the race in its seeded runs."""
    calls, stop_at = [], set()

    def fake_tune(workload, data, methods, *, targets, **kw):
        calls.append(workload)
        return pd.DataFrame({"workload": workload, "method": "umax", "lr": [0.1, 1.0],
                             "config": "", "options": "{}",
                             "seconds_to_level": [0.5, math.nan],
                             "val_log_loss": [1.0, 2.0], "status": "target", "layout": ""})

    def fake_seeds(workload, data, methods, chosen, *, seeds, targets, **kw):
        if workload in stop_at:
            raise Stop(workload)
        return racelib.seeded_results(workload, methods, seeds, targets)
    monkeypatch.setattr(run, "tune", fake_tune)
    monkeypatch.setattr(run, "run_seeds", fake_seeds)
    # the fake workloads have no data files: their content is their name
    monkeypatch.setattr(journal, "_data_fingerprint", lambda data: {"name": str(data)})
    return calls, stop_at


def _race(tmp_path, params=PARAMS, table=TABLE, said=None):
    return cli.race_notebook("12-peers", params, table, tmp_path,
                             say=(said.append if said is not None else lambda s: None))


def test_a_stopped_race_resumes_from_its_finished_workloads(race, tmp_path):
    calls, stop_at = race
    whole = _race(tmp_path / "whole")
    assert calls == ["a", "b"]
    assert not (tmp_path / "whole" / "journal" / "12-peers").exists()   # cleared

    calls.clear()
    stop_at.add("b")
    with pytest.raises(Stop):
        _race(tmp_path)
    kept = tmp_path / "journal" / "12-peers"
    assert sorted(p.name for p in kept.iterdir()) == ["a.pkl"]

    calls.clear()
    stop_at.clear()
    said = []
    resumed = _race(tmp_path, said=said)
    assert calls == ["b"]                            # "a" was read back, not raced
    assert "read back from the journal" in said[0] and "a.pkl" in said[0]
    assert "read back" not in said[1]
    for got, want in zip(resumed, whole):
        pd.testing.assert_frame_equal(got, want)
    assert not kept.exists()                         # the race ended: journal cleared

    calls.clear()
    _race(tmp_path)                                  # a finished race races afresh
    assert calls == ["a", "b"]


@pytest.mark.parametrize("change", ["params", "reference", "data", "code"])
def test_an_entry_of_another_race_is_raced_again(race, tmp_path, monkeypatch, change):
    calls, stop_at = race
    stop_at.add("b")
    with pytest.raises(Stop):
        _race(tmp_path)
    stop_at.clear()
    calls.clear()
    params, table = PARAMS, TABLE
    if change == "params":
        params = {**PARAMS, "max_epochs": 2}
    elif change == "reference":
        table = TABLE.assign(reference_val_log_loss=[2.5, 3.0])
    elif change == "data":
        monkeypatch.setattr(journal, "_data_fingerprint", lambda data: {"name": "other"})
    else:
        real = journal.code_version()
        monkeypatch.setattr(journal, "code_version", lambda: real + "0")
    with pytest.warns(journal.JournalWarning, match=r"a\.pkl: written by another race"):
        _race(tmp_path, params=params, table=table)
    assert calls == ["a", "b"]


@pytest.mark.parametrize("content", [b"not a pickle", pickle.dumps({"key": "x"})])
def test_an_unreadable_entry_is_raced_again_with_a_warning(race, tmp_path, content):
    calls, _ = race
    entry = tmp_path / "journal" / "12-peers" / "a.pkl"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(content)
    with pytest.warns(journal.JournalWarning, match=r"a\.pkl: (unreadable|not a race)"):
        _race(tmp_path)
    assert calls == ["a", "b"] and not entry.exists()


def test_the_key_covers_the_race_code_and_the_trainers():
    """The code part of the key hashes every module the race may import: its runners,
    the trainers and their kernels (so a change in any of them is another race)."""
    seen = []
    real = Path.read_bytes

    def reading(path):
        seen.append(str(path))
        return real(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Path, "read_bytes", reading)
        journal.code_version()
    for name in ("scalable_softmax.repro.race.run", "scalable_softmax.repro.race.ours",
                 "scalable_softmax.repro.race.torch_runner",
                 "scalable_softmax.repro.race.isolate", "scalable_softmax.methods.sgd",
                 "scalable_softmax.kernels.implicit"):
        assert any(p.endswith(name.replace(".", "/") + ".py") for p in seen), name


def test_a_problem_file_is_fingerprinted_by_its_bytes(tmp_path):
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    a.write_bytes(b"one")
    b.write_bytes(b"two")
    assert journal._data_fingerprint(a) != journal._data_fingerprint(b)
    assert journal._data_fingerprint(str(a)) == journal._data_fingerprint(a)
