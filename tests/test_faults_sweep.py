"""Sweeps that survive faults (issue 13, point 2): a sweep killed with SIGTERM or
SIGKILL leaves no process, no temporary file and an intact cache, and its rerun gives
the results of an uninterrupted sweep; a notebook run publishes all of its outputs or
none of them.

Smoke-size data: a 10-20%-scale synthetic surrogate (no data files needed)."""
from __future__ import annotations

import json
import signal
import textwrap
import warnings

import nbformat
import pytest

import faultlib as fl
from scalable_softmax import paths
from scalable_softmax.repro.machinery import runs as ex

SWEEP = textwrap.dedent("""
    import json
    from scalable_softmax.repro.machinery import runs as ex
    specs = [ex.RunSpec.make("eurlex-surrogate", m, 0.1, seed=s, epochs=EPOCHS,
                             monitor_rows=300, data_options={"scale": 0.1})
             for s in (0, 1, 2) for m in ("umax", "implicit")]
    res = ex.run_all(specs, workers=WORKERS, cache_dir=CACHE, progress=False)
    print(json.dumps([[r.final[k] for k in sorted(r.final) if not ex.is_timing(k)]
                      for r in res]))
""")


def _sweep_code(cache, epochs, workers=2):
    return (f"EPOCHS = {epochs}\nCACHE = {str(cache)!r}\n"
            f"WORKERS = {workers}\n" + SWEEP)


def _check_cache(folder):
    """Every entry of the cache is a complete, usable result."""
    files = sorted(folder.glob("*.json"))
    for f in files:
        payload = json.loads(f.read_text())
        spec = ex.RunSpec.make(**{k: v for k, v in payload["spec"].items()
                                  if k not in ("options", "data_options")},
                               options=payload["spec"]["options"],
                               data_options=payload["spec"]["data_options"])
        with warnings.catch_warnings():
            warnings.simplefilter("error", ex.RunCacheWarning)
            assert ex._load(f, spec) is not None, f
    return files


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=["SIGTERM", "SIGHUP", "SIGKILL"])
def test_killed_sweep_leaves_no_process_no_temp_file_and_a_usable_cache(tmp_path, sig):
    token = fl.new_token()
    cache = tmp_path / "runs"
    # 150 epochs keep the two workers busy for seconds after the first result
    proc = fl.start(_sweep_code(cache, 150), token, tmp_path)
    try:
        fl.wait_for(lambda: any(cache.glob("*.json")), proc, what="the first stored run")
        workers = [p for p, cmd in fl.marked_processes(token) if p != proc.pid]
        assert workers, "no pool worker was running"
        proc.send_signal(sig)
        proc.wait(timeout=30)
    finally:
        left = fl.wait_until_gone(token, timeout=10)
    assert not left, f"processes outlived the killed sweep: {left}"
    if sig != signal.SIGKILL:
        assert proc.returncode == 128 + sig                # stopped through SystemExit
    left_tmp = fl.temp_files(cache)
    if sig == signal.SIGKILL:
        # SIGKILL cannot be handled: a kill that lands while the sweep stores a result
        # leaves that write's dot-file (a fresh-clone CI run hit it once). It must be
        # named for the killed process, never be read as a result (below), and the next
        # sweep removes it
        assert all(f.name.split(".")[3] == str(proc.pid) for f in left_tmp), left_tmp
        ex._sweep_stale_tmp(cache)
        assert not fl.temp_files(cache), fl.temp_files(cache)
    else:
        assert not left_tmp, left_tmp
    assert not fl.joblib_shm(proc.pid)
    stored = _check_cache(cache)
    assert 1 <= len(stored) < 6


@pytest.mark.slow
def test_rerun_after_a_kill_equals_an_uninterrupted_sweep(tmp_path):
    token = fl.new_token()
    cache = tmp_path / "killed"
    proc = fl.start(_sweep_code(cache, 20), token, tmp_path)
    try:
        fl.wait_for(lambda: len(list(cache.glob("*.json"))) >= 2, proc,
                    what="two stored runs")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        assert not fl.wait_until_gone(token, timeout=10)
    done_before = {f.name for f in _check_cache(cache)}
    assert 2 <= len(done_before) < 6
    # (in one process each: the results do not depend on the engine)
    rerun = fl.start(_sweep_code(cache, 20, workers=1), token, tmp_path)
    ref = fl.start(_sweep_code(tmp_path / "uninterrupted", 20, workers=1), token, tmp_path)
    out_rerun, _ = rerun.communicate(timeout=300)
    out_ref, _ = ref.communicate(timeout=300)
    assert rerun.returncode == 0 and ref.returncode == 0, out_rerun + out_ref
    assert json.loads(out_rerun.splitlines()[-1]) == json.loads(out_ref.splitlines()[-1])
    assert {f.name for f in _check_cache(cache)} >= done_before
    assert not fl.temp_files(cache)
    assert not fl.wait_until_gone(token, timeout=10)


# --------------------------------------------------------------------------- notebooks
NOTEBOOK = "98-fault-sweep"


def _write_project(root):
    nbdir, pdir = root / "notebooks", root / "params"
    nbdir.mkdir(parents=True)
    pdir.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(textwrap.dedent("""
            import time
            from pathlib import Path
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            from scalable_softmax.repro.machinery import outputs as checks
            from scalable_softmax.repro.machinery import runs as ex""")),
        nbformat.v4.new_code_cell('cache_dir = ""\nout_dir = ""\nmarkers = ""\ntag = "a"\n'
                                  'pause = 0.0\nfail = False',
                                  metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(textwrap.dedent("""
            specs = [ex.RunSpec.make("eurlex-surrogate", "umax", 0.1, seed=s, epochs=3,
                                     monitor_rows=300, data_options={"scale": 0.1})
                     for s in (0, 1)]
            results = ex.run_all(specs, workers=2, cache_dir=cache_dir, progress=False)
            df = ex.results_frame(results)[["method", "seed", "train_log_loss"]]
            csv, md = checks.write_table(df.assign(tag=tag), "fault-sweep", out_dir)
            assert len(open(csv).read()) > 0          # the staged file can be read back
            Path(markers, "table-written").touch()
            time.sleep(pause)""")),
        nbformat.v4.new_code_cell(textwrap.dedent("""
            assert not fail, "failing on purpose"
            fig, ax = plt.subplots()
            ax.plot(df.train_log_loss.to_numpy())
            ax.set_title(tag)
            checks.save_figure(fig, "fault-sweep", out_dir, formats=("png",))""")),
    ]
    nbformat.write(nb, nbdir / f"{NOTEBOOK}.ipynb")


def _runner(root, **params):
    (root / "params" / f"{NOTEBOOK}.yaml").write_text(
        # the full profile lists every parameter at the parameters cell's value
        'full:\n  cache_dir: ""\n  out_dir: ""\n  markers: ""\n  tag: a\n  pause: 0.0\n'
        "  fail: false\nsmoke:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in params.items()))
    return textwrap.dedent(f"""
        from pathlib import Path
        from scalable_softmax import paths
        from scalable_softmax.repro.machinery import runner as notebooks
        root = Path({str(root)!r})
        paths.NOTEBOOKS, paths.PARAMS, paths.BUILD = (root / "notebooks", root / "params",
                                                      root / "build")
        notebooks.run({NOTEBOOK!r}, "smoke")
    """)


def _outputs(out):
    return {p.name: p.read_bytes() for p in sorted(out.glob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A project with the test notebook, run once to its end (tag "a")."""
    root = tmp_path_factory.mktemp("nbproject")
    _write_project(root)
    (root / "markers").mkdir()
    token = fl.new_token()
    proc = fl.start(_runner(root, cache_dir=str(root / "cache-a"), out_dir=str(root / "out"),
                            markers=str(root / "markers"), tag="a"), token, root)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    assert not fl.wait_until_gone(token)
    return root


def test_a_notebook_run_publishes_all_its_outputs_and_no_temp_file(published):
    root = published
    outs = _outputs(root / "out")
    assert set(outs) == {"fault-sweep.csv", "fault-sweep.md", "fault-sweep.png"}
    executed = root / "build" / "executed" / "smoke" / f"{NOTEBOOK}.ipynb"
    meta = json.loads(executed.read_text())["metadata"]["papermill"]
    assert meta["output_path"] == str(executed)         # not the stage's path
    assert not fl.temp_files(root / "out", root / "build")
    assert not any((root / "build" / "tmp").iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_notebook_killed_after_its_table_publishes_nothing(published, tmp_path, sig):
    """Killed between its table and its figure: the old table and figure stay (never a
    new table beside an old figure); no process is left; the rerun publishes both."""
    import shutil

    root = tmp_path / "project"
    shutil.copytree(published, root)
    before = _outputs(root / "out")
    executed = root / "build" / "executed" / "smoke" / f"{NOTEBOOK}.ipynb"
    executed_before = executed.read_bytes()
    for m in (root / "markers").glob("*"):
        m.unlink()
    token = fl.new_token()
    # an empty cache: the sweep trains in two pool workers, which then wait idle
    params = dict(cache_dir=str(root / "cache-b"), out_dir=str(root / "out"),
                  markers=str(root / "markers"), tag="b", pause=600.0)
    proc = fl.start(_runner(root, **params), token, root)
    try:
        fl.wait_for(lambda: (root / "markers" / "table-written").exists(), proc,
                    timeout=300, what="the table to be written")
        assert len(fl.marked_processes(token)) >= 3      # runner, kernel, pool workers
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        left = fl.wait_until_gone(token, timeout=15)
    assert not left, f"processes outlived the killed run: {left}"
    assert _outputs(root / "out") == before              # nothing new was published
    assert executed.read_bytes() == executed_before
    assert not fl.temp_files(root / "out", root / "cache-b")
    stages = list((root / "build" / "tmp").iterdir())
    if sig == signal.SIGTERM:                            # cleaned up on the way out
        assert not stages and not fl.temp_files(root / "build")
    _check_cache(root / "cache-b")
    if sig == signal.SIGTERM:
        return           # (the rerun matters after SIGKILL, which leaves a stage behind)
    # the rerun (from the cache the killed run filled) finishes the leftover stage and
    # publishes the table and the figure together
    rerun = fl.start(_runner(root, **dict(params, pause=0.0)), token, root)
    out, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, out
    assert not fl.wait_until_gone(token)
    after = _outputs(root / "out")
    assert set(after) == set(before)
    assert after["fault-sweep.png"] != before["fault-sweep.png"]     # title "b"
    old = before["fault-sweep.csv"].decode().replace(",a\n", ",b\n")
    assert after["fault-sweep.csv"].decode() == old     # same results as the "a" run
    assert not fl.temp_files(root / "out", root / "build", root / "cache-b")
    assert not any((root / "build" / "tmp").iterdir())


def test_a_failing_notebook_publishes_nothing(published, tmp_path):
    import shutil

    root = tmp_path / "project"
    shutil.copytree(published, root)
    before = _outputs(root / "out")
    token = fl.new_token()
    proc = fl.start(_runner(root, cache_dir=str(root / "cache-a"), out_dir=str(root / "out"),
                            markers=str(root / "markers"), tag="c", fail=True), token, root)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode != 0 and "failing on purpose" in out
    assert not fl.wait_until_gone(token)
    assert _outputs(root / "out") == before
    assert (root / "build" / "executed" / "smoke" / f"{NOTEBOOK}.failed.ipynb").is_file()
    assert not fl.temp_files(root / "out", root / "build")
    assert not any((root / "build" / "tmp").iterdir())


def test_recover_publishes_a_committed_stage_and_drops_an_unfinished_one(tmp_path,
                                                                         monkeypatch):
    """The two states a SIGKILL can leave a stage in, made without a kill."""
    from scalable_softmax.repro.machinery import outputs as publish

    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    out = tmp_path / "out"
    out.mkdir()
    (out / "t.csv").write_text("old")
    (out / "f.png").write_text("old")

    def orphan(stage):                       # as if its process had been killed
        stage._lock.close()
        stage._lock = None

    # killed while the notebook ran: no manifest -> dropped
    st = publish.Stage("x")
    st.path_for(out / "t.csv").write_text("new")
    orphan(st)
    # killed during the renames: manifest written, one file moved -> finished
    st2 = publish.Stage("y")
    st2.path_for(out / "t.csv").write_text("new2")
    st2.path_for(out / "f.png").write_text("new2")
    entries = [{"staged": str(p.relative_to(st2.dir)),
                "destination": str(publish._destination(st2.dir, p))}
               for p in st2.staged_files()]
    (st2.dir / "MANIFEST.json").write_text(json.dumps(entries))
    publish._move(st2.dir / entries[0]["staged"], out / "f.png")
    assert (out / "t.csv").read_text() == "old"       # half published ...
    orphan(st2)
    live = publish.Stage("z")                # a live stage (lock held) is left alone
    done = publish.recover()
    assert len(done) == 2
    assert (out / "t.csv").read_text() == "new2" and (out / "f.png").read_text() == "new2"
    assert [p.name for p in (tmp_path / "build" / "tmp").iterdir()] == [live.dir.name]
    live.abort()
    assert not any((tmp_path / "build" / "tmp").iterdir())
