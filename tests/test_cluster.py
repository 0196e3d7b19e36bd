"""Sweeps on a cluster of two "nodes" (issue 23): a Dask scheduler on 127.0.0.1 and
worker processes started by hand (``dask worker``), each with its own working directory,
environment and processed-data cache, as separate machines would be; the raw data lie
under one shared path; the client (this process) has its own directories.

* the sweep equals the serial one, and each worker runs ``cores // Dask threads of
  its host`` numba threads;
* a worker on other code (a copy of ``lib/`` that differs by one comment) is refused
  before any run, naming it and the module, and nothing is stored;
* a worker that reads other data is refused, and nothing is stored;
* a client stopped by ``SIGTERM`` or killed (a lost connection) leaves no run
  training on the workers: they stop at their next epoch, within seconds.

Small runs of a small random data set of a user's own (no data files needed)."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

import faultlib as fl
from scalable_softmax import paths
from scalable_softmax.repro.machinery import runs as ex

distributed = pytest.importorskip("distributed")

DASK = Path(sys.executable).with_name("dask")
#: the package source the client runs (the nodes run it too, unless told otherwise)
LIB = Path(ex.__file__).resolve().parents[3]   # lib/ (repro/machinery/runs.py is 4 deep)


def _write_data(raw: Path, seed: int, N: int = 300) -> Path:
    fl.write_xmlrepo(raw / "eurlex" / "eurlex_train.txt", N=N, seed=seed)
    fl.write_xmlrepo(raw / "eurlex" / "eurlex_test.txt", N=80, seed=seed + 1)
    return raw


def _node_env(home: Path, data: Path, lib: Path | None = None) -> dict:
    """The environment of a worker "machine": its own home and processed-data cache,
    the shared raw data; no NUMBA_CACHE_DIR (the worker set-up supplies the shared
    one); ``lib``: the package source this node runs (default: the client's)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SOFTMAX_", "NUMBA_CACHE", "PYTHONPATH", "DASK_"))}
    env.update(HOME=str(home), SOFTMAX_DATA_DIR=str(data),
               SOFTMAX_CACHE_DIR=str(home / "processed"), OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=str(lib if lib is not None else LIB))
    return env


class Cluster:
    """A scheduler on 127.0.0.1 and hand-started workers (the commands of
    docs/cluster.md), each a process group of its own."""

    def __init__(self, root: Path):
        self.root = root
        self.file = root / "scheduler.json"
        self.procs: dict[str, subprocess.Popen] = {}
        sched_dir = root / "scheduler"
        sched_dir.mkdir(parents=True)
        self.procs["scheduler"] = subprocess.Popen(
            [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0",
             "--no-dashboard", "--scheduler-file", str(self.file)],
            cwd=sched_dir, env=_node_env(sched_dir, sched_dir), start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not self.file.is_file():
            if time.monotonic() > deadline or self.procs["scheduler"].poll() is not None:
                raise RuntimeError("the Dask scheduler did not start")
            time.sleep(0.1)
        self.client = distributed.Client(scheduler_file=str(self.file), timeout=60)

    def start_worker(self, name: str, data: Path, lib: Path | None = None) -> str:
        """Start worker ``name`` in its own directory; return its address."""
        home = self.root / name
        home.mkdir(parents=True)
        before = set(self.client.scheduler_info()["workers"])
        self.procs[name] = subprocess.Popen(
            [str(DASK), "worker", "--scheduler-file", str(self.file), "--host",
             "127.0.0.1", "--nworkers", "1", "--nthreads", "1", "--no-dashboard",
             "--name", name, "--local-directory", str(home / "dask")],
            cwd=home, env=_node_env(home, data, lib), start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.client.wait_for_workers(len(before) + 1, timeout=120)
        (addr,) = set(self.client.scheduler_info()["workers"]) - before
        return addr

    def stop(self, name: str) -> None:
        """Stop worker (or scheduler) ``name`` and wait until the scheduler forgets it."""
        proc = self.procs.pop(name)
        n = len(self.client.scheduler_info()["workers"])
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        deadline = time.monotonic() + 30
        while name != "scheduler" and len(self.client.scheduler_info()["workers"]) >= n:
            assert time.monotonic() < deadline, f"the scheduler still lists {name}"
            time.sleep(0.1)

    def close(self) -> None:
        self.client.close()
        for name in [n for n in self.procs if n != "scheduler"] + ["scheduler"]:
            if name in self.procs:
                proc = self.procs.pop(name)
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The shared data path and the client's own directories."""
    root = tmp_path_factory.mktemp("two-nodes")
    return {"root": root, "data": _write_data(root / "shared" / "raw", seed=0)}


@pytest.fixture(scope="module")
def cluster(shared):
    cl = Cluster(shared["root"] / "cluster")
    try:
        cl.start_worker("node-a", shared["data"])
        cl.start_worker("node-b", shared["data"])
        yield cl
    finally:
        cl.close()


@pytest.fixture
def client_env(shared, tmp_path, monkeypatch):
    """This process as the client: the shared data, its own processed cache."""
    monkeypatch.setenv("SOFTMAX_DATA_DIR", str(shared["data"]))
    monkeypatch.setenv("SOFTMAX_CACHE_DIR", str(tmp_path / "client-processed"))
    monkeypatch.delenv("SOFTMAX_DASK_SCHEDULER", raising=False)
    return tmp_path


def _specs(epochs=3):
    return [ex.RunSpec.make("eurlex", m, 0.1, seed=s, epochs=epochs, monitor_rows=100)
            for s in (0, 1) for m in ("umax", "implicit")]


def _same(a, b):
    assert a.spec == b.spec
    fa = {k: v for k, v in a.final.items() if not ex.is_timing(k)}
    fb = {k: v for k, v in b.final.items() if not ex.is_timing(k)}
    assert fa == fb
    cols = [c for c in a.history.columns if c != "seconds"]
    pd.testing.assert_frame_equal(a.history[cols], b.history[cols])


def test_the_sweep_on_two_nodes_equals_the_serial_sweep(cluster, client_env, monkeypatch):
    specs = _specs()
    serial = ex.run_all(specs, workers=1, cache_dir=client_env / "serial", progress=False)

    def not_here(spec):
        raise AssertionError("a run was trained in the client process")

    with monkeypatch.context() as m:
        m.setattr(ex, "_train", not_here)
        on_nodes = ex.run_all(specs, cache_dir=client_env / "nodes",
                              scheduler=cluster.client, progress=False)
    for a, b in zip(on_nodes, serial):
        assert not a.from_cache
        _same(a, b)
    # each worker proves the client's code; its runs get cores // (Dask threads on
    # its host) numba threads
    reports = cluster.client.run(ex.worker_report, ["eurlex"])
    assert len(reports) == 2
    for r in reports.values():
        ex.check_worker(r)
    plan = ex.dask_thread_plan(reports)
    assert set(plan.values()) == {ex.threads_per_task(ex.machine_cores(), 2)}
    # the workers found the shared numba cache without being told
    caches = cluster.client.run(lambda: os.environ.get("NUMBA_CACHE_DIR"))
    assert set(caches.values()) == {str(paths.BUILD / "numba-cache")}
    # the entries carry a checksum and are readable by the group
    entries = sorted((client_env / "nodes").glob("*.json"))
    assert len(entries) == len(specs)
    for f in entries:
        assert f.stat().st_mode & stat.S_IRGRP, oct(f.stat().st_mode)
        assert '"checksum"' in f.read_text()


def test_a_worker_on_code_that_differs_by_a_comment_is_refused(cluster, shared,
                                                                client_env):
    lib = shared["root"] / "other-lib"
    shutil.copytree(LIB / "scalable_softmax", lib / "scalable_softmax",
                    ignore=shutil.ignore_patterns("__pycache__"))
    ev = lib / "scalable_softmax" / "evaluate.py"
    ev.write_text(ev.read_text() + "\n# a comment only this worker has\n")
    addr = cluster.start_worker("node-other-code", shared["data"], lib=lib)
    try:
        report = cluster.client.run(ex.worker_report, workers=[addr])[addr]
        assert report["code"] != ex.CODE_VERSION       # it does import the copy
        with pytest.raises(ex.WorkerMismatchError,
                           match=rf"worker {addr} .*scalable_softmax\.evaluate differs"):
            ex.run_all(_specs(), cache_dir=client_env / "runs",
                       scheduler=cluster.client, progress=False)
        assert not list((client_env / "runs").glob("*.json"))
    finally:
        cluster.stop("node-other-code")


def test_a_worker_that_reads_other_data_is_refused(cluster, shared, client_env):
    other = _write_data(shared["root"] / "other-data" / "raw", seed=5)
    addr = cluster.start_worker("node-other-data", other)
    try:
        with pytest.raises(ex.WorkerMismatchError,
                           match=rf"worker {addr} .*different data for 'eurlex'"):
            ex.run_all(_specs(), cache_dir=client_env / "runs",
                       scheduler=cluster.client, progress=False)
        assert not list((client_env / "runs").glob("*.json"))
    finally:
        cluster.stop("node-other-data")


CLIENT = textwrap.dedent("""
    from scalable_softmax.repro.machinery import runs as ex
    specs = [ex.RunSpec.make("eurlex", "umax", 0.01, seed=s, epochs=100_000,
                             monitor_rows=100, test=False) for s in (0, 1)]
    ex.run_all(specs, cache_dir=CACHE, scheduler=SCHEDULER, progress=False)
""")


def _executing(client) -> int:
    """Tasks the workers are executing."""
    return sum(client.run(lambda dask_worker: sum(
        ts.state == "executing" for ts in dask_worker.state.tasks.values())).values())


def _busy(client) -> int:
    """Tasks the workers still hold (running, or cancelled but not yet returned) and
    threads still executing a task."""
    return sum(client.run(lambda dask_worker: len(dask_worker.state.tasks) +
                          len(dask_worker.active_threads)).values())


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL],
                         ids=["SIGTERM", "SIGKILL"])
def test_a_stopped_client_stops_the_runs_on_the_workers(cluster, shared, client_env, sig):
    """The runs last minutes; once their client is gone they stop within seconds."""
    code = f"CACHE = {str(client_env / 'runs')!r}\n" \
           f"SCHEDULER = {cluster.client.scheduler.address!r}\n" + CLIENT
    env = dict(os.environ, SOFTMAX_DATA_DIR=str(shared["data"]),
               SOFTMAX_CACHE_DIR=str(client_env / "client-processed"))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=client_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while _executing(cluster.client) < 2:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the runs did not start"
            time.sleep(0.2)
        time.sleep(2)                       # the runs are training
        proc.send_signal(sig)
        t0 = time.monotonic()
        while _busy(cluster.client):
            assert time.monotonic() - t0 < 15, "the runs kept training after the client"
            time.sleep(0.1)
        stopped = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    print(f"runs stopped {stopped:.2f} s after {sig.name} of the client")
    assert not list((client_env / "runs").glob("*.json"))
