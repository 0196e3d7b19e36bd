"""The run cache (issue 13, points 1 and 4): keyed on the content of the data and on
every library module a run imports; every unusable entry is recomputed with a warning
naming the file. No data files needed (the data sets are written by the tests)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import faultlib as fl
from scalable_softmax.repro.machinery import runs as ex


@pytest.fixture
def eurlex_dir(tmp_path, monkeypatch):
    """A data directory holding a (small, random) copy of EURLex of a user's own."""
    raw = tmp_path / "raw"
    fl.write_xmlrepo(raw / "eurlex" / "eurlex_train.txt", seed=0)
    fl.write_xmlrepo(raw / "eurlex" / "eurlex_test.txt", N=80, seed=1)
    monkeypatch.setenv("SOFTMAX_DATA_DIR", str(raw))
    monkeypatch.setenv("SOFTMAX_CACHE_DIR", str(tmp_path / "processed"))
    return raw


def _spec(**kw):
    return ex.RunSpec.make("eurlex", "umax", 0.5, **{"epochs": 2, "monitor_rows": 100, **kw})


def test_replacing_the_data_files_recomputes_the_run(eurlex_dir, tmp_path):
    runs = tmp_path / "runs"
    first = ex.run(_spec(), cache_dir=runs)
    assert not first.from_cache and ex.run(_spec(), cache_dir=runs).from_cache
    assert ex.run_all([_spec()], cache_dir=runs, progress=False)[0].from_cache
    # another copy of the data set dropped in: the stored run must not be reused
    fl.write_xmlrepo(eurlex_dir / "eurlex" / "eurlex_train.txt", seed=7)
    second = ex.run(_spec(), cache_dir=runs)
    assert not second.from_cache
    assert second.final["train_log_loss"] != first.final["train_log_loss"]
    assert ex.run_all([_spec()], cache_dir=runs, progress=False)[0].from_cache
    # one digit changed, with the size and the mtime restored: still recomputed
    f = eurlex_dir / "eurlex" / "eurlex_train.txt"
    st = f.stat()
    text = f.read_text()
    i = text.index(":0.") + 3
    f.write_text(text[:i] + ("1" if text[i] != "1" else "2") + text[i + 1:])
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    third = ex.run(_spec(), cache_dir=runs)
    assert not third.from_cache
    assert third.final["train_log_loss"] != second.final["train_log_loss"]
    assert len(list(runs.glob("*.json"))) == 3


def test_the_key_holds_data_preprocessing_protocol_and_code(eurlex_dir):
    s = _spec(protocol="authors-code")
    inputs = ex.key_inputs(s)
    assert set(inputs["data"]["files"]) == {"train", "test"}
    assert all(v.startswith("unverified:") for v in inputs["data"]["files"].values())
    assert inputs["preprocessing"] == ex.PREPROCESSING
    assert inputs["protocol_fit_kwargs"]
    assert inputs["code"] == ex.CODE_VERSION
    sur = ex.key_inputs(ex.RunSpec.make("eurlex-surrogate", "umax", 0.5))
    assert sur["data"]["generator"].startswith("surrogate:")
    assert sur["data"]["options"]["seed"] == 2018
    assert ex.RunSpec.make("eurlex-surrogate", "umax", 0.5, data_options={"scale": 0.1}).key \
        != ex.RunSpec.make("eurlex-surrogate", "umax", 0.5).key


def test_the_code_version_covers_every_module_a_run_imports(tmp_path):
    """Train every registered method in a fresh process: each package module it has
    imported must be among those hashed into CODE_VERSION."""
    code = textwrap.dedent("""
        import json, sys
        from scalable_softmax.repro.machinery import runs as ex
        from scalable_softmax.methods import METHODS, get_trainer_class
        for m in METHODS:
            full = getattr(get_trainer_class(m), "full_batch", False)
            spec = ex.RunSpec.make("eurlex-surrogate", m, None if full else 0.1, epochs=1,
                                   monitor_rows=50, data_options={"scale": 0.02},
                                   **({"iters_per_epoch": 2} if full else {}))
            ex.run(spec, cache_dir=False)
        # (a namespace package without an __init__.py has no source to hash)
        print(json.dumps(sorted(k for k, m in sys.modules.items() if k.split(".")[0] ==
                                "scalable_softmax" and getattr(m, "__file__", None))))
    """)
    env = dict(os.environ, SOFTMAX_CACHE_DIR=str(tmp_path / "processed"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    imported = set(json.loads(out.stdout.splitlines()[-1]))
    hashed = set(ex.run_modules())
    assert "scalable_softmax.objectives" in imported   # via methods/implicit.py
    assert imported <= hashed, f"not in CODE_VERSION: {sorted(imported - hashed)}"


BAD_ENTRIES = {
    "null": "null", "list": "[1, 2]", "number": "42", "string": '"x"', "empty": "{}",
    "not json": "{not json", "binary": b"\x00\xff\xfe garbage",
    "truncated": None,                       # a real entry cut in half
    "no history": "DROP:history", "history not an object": "SET:history=[1]",
    "final not an object": "SET:final=3", "final lacks a key": "DELFINAL:train_log_loss",
    "ragged history": "RAGGED", "wrong types": "SET:final.diverged=\"yes\"",
    "another run": "SET:key=\"0000\"",
}


@pytest.mark.parametrize("kind", list(BAD_ENTRIES))
def test_every_bad_cache_entry_is_recomputed_with_a_warning_naming_the_file(kind, tmp_path):
    spec = ex.RunSpec.make("eurlex-surrogate", "umax", 0.5, epochs=2, monitor_rows=50,
                           data_options={"scale": 0.02})
    runs = tmp_path / "runs"
    good = ex.run(spec, cache_dir=runs)
    path = runs / f"{spec.key}.json"
    payload = json.loads(path.read_text())
    how = BAD_ENTRIES[kind]
    if how is None:
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
    elif isinstance(how, bytes):
        path.write_bytes(how)
    elif how.startswith("DROP:"):
        del payload[how[5:]]
        path.write_text(json.dumps(payload))
    elif how.startswith("DELFINAL:"):
        del payload["final"][how[9:]]
        path.write_text(json.dumps(payload))
    elif how.startswith("SET:"):
        target, value = how[4:].split("=", 1)
        obj, *sub = target.split(".")
        if sub:
            payload[obj][sub[0]] = json.loads(value)
        else:
            payload[obj] = json.loads(value)
        path.write_text(json.dumps(payload))
    elif how == "RAGGED":
        payload["history"]["epoch"] = payload["history"]["epoch"][:-1]
        path.write_text(json.dumps(payload))
    else:
        path.write_text(how)
    with pytest.warns(ex.RunCacheWarning, match=rf"{path}.*recomputing"):
        got = ex.run_all([spec], cache_dir=runs, progress=False)[0]
    assert not got.from_cache
    assert got.final["train_log_loss"] == good.final["train_log_loss"]
    back = ex.run(spec, cache_dir=runs)                  # the entry was rewritten
    assert back.from_cache


def test_stale_temporary_files_of_killed_processes_are_removed(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = runs / f".abc.json.{dead}.x1y2.tmp"
    live = runs / f".abc.json.{os.getppid()}.x1y2.tmp"
    stale.write_text("{")
    live.write_text("{")
    spec = ex.RunSpec.make("eurlex-surrogate", "umax", 0.5, epochs=1, monitor_rows=50,
                           data_options={"scale": 0.02})
    ex.run_all([spec], cache_dir=runs, progress=False)
    assert not stale.exists() and live.exists()


# ----------------------------------------------------------------- issue 23, points 2, 5
_LOAD = textwrap.dedent("""
    import json
    import numpy as np
    from scalable_softmax.data import CODE_VERSION, load_dataset
    ds = load_dataset("eurlex", "train")
    norms = np.sqrt(np.asarray(ds.X.multiply(ds.X).sum(axis=1)).ravel())
    print(json.dumps([CODE_VERSION, bool(ds.info["from_cache"]), float(norms.max())]))
""")


def _load_with(lib, eurlex_dir, processed):
    env = dict(os.environ, PYTHONPATH=str(lib), SOFTMAX_DATA_DIR=str(eurlex_dir),
               SOFTMAX_CACHE_DIR=str(processed), NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", _LOAD], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_changed_preprocessing_gives_new_processed_arrays(eurlex_dir, tmp_path):
    """The processed-data cache is keyed by the source of the code that shapes the
    arrays: a copy of lib/ whose normalize_rows scales rows to norm 2 gets new arrays
    (not the cached unit rows), and the original code still reads its own."""
    import shutil

    from scalable_softmax.data import cache as data_cache

    lib = ex._ROOT.parent
    shared = tmp_path / "processed"
    version, cached, norm = _load_with(lib, eurlex_dir, shared)
    assert (cached, round(norm, 9)) == (False, 1.0)
    assert _load_with(lib, eurlex_dir, shared) == [version, True, norm]
    other = tmp_path / "other-lib"
    shutil.copytree(lib / "scalable_softmax", other / "scalable_softmax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    pre = other / "scalable_softmax" / "data" / "preprocess.py"
    text = pre.read_text()
    assert "    return X\n\n\ndef _take_columns" in text
    pre.write_text(text.replace("    return X\n\n\ndef _take_columns",
                                "    X.data *= 2.0\n    return X\n\n\ndef _take_columns"))
    v2, cached2, norm2 = _load_with(other, eurlex_dir, shared)
    assert v2 != version and not cached2 and round(norm2, 9) == 2.0
    assert _load_with(lib, eurlex_dir, shared) == [version, True, norm]
    assert len(list(shared.glob("eurlex-train-*.npz"))) == 2
    assert "scalable_softmax.data.preprocess" in data_cache.shaping_modules()


def test_an_edited_cache_entry_is_recomputed_and_entries_are_group_readable(tmp_path):
    """An entry whose content was edited (a number changed, still well formed) does not
    match its checksum: recomputed with a warning. Entries are 0644 (0640 under a
    strict umask), never 0600."""
    spec = ex.RunSpec.make("eurlex-surrogate", "umax", 0.5, epochs=2, monitor_rows=50,
                           data_options={"scale": 0.02})
    runs = tmp_path / "runs"
    good = ex.run(spec, cache_dir=runs)
    path = runs / f"{spec.key}.json"
    assert path.stat().st_mode & 0o777 == ex._entry_mode()
    assert path.stat().st_mode & 0o040                     # readable by the group
    payload = json.loads(path.read_text())
    payload["final"]["train_log_loss"] += 1.0              # well formed, but edited
    path.write_text(json.dumps(payload))
    with pytest.warns(ex.RunCacheWarning, match=rf"{path}.*checksum.*recomputing"):
        got = ex.run_all([spec], cache_dir=runs, progress=False)[0]
    assert not got.from_cache
    assert got.final["train_log_loss"] == good.final["train_log_loss"]
    old = os.umask(0o077)
    try:
        ex._UMASK.clear()
        assert ex._entry_mode() == 0o640
    finally:
        os.umask(old)
        ex._UMASK.clear()
