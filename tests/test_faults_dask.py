"""Sweeps on a Dask cluster (issue 13, point 3): with a ``distributed`` scheduler the
runs are trained on the cluster's workers, the results are those of the same sweep run
serially, and the cache works as for a local sweep. A local cluster of two worker
processes, smoke-size synthetic data."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scalable_softmax.repro.machinery import runs as ex

distributed = pytest.importorskip("distributed")


def _specs():
    return [ex.RunSpec.make("eurlex-surrogate", m, 0.1, seed=s, epochs=3, monitor_rows=200,
                            data_options={"scale": 0.05})
            for s in (0, 1) for m in ("umax", "implicit", "ove")]


def _same(a, b):
    assert a.spec == b.spec
    fa = {k: v for k, v in a.final.items() if not ex.is_timing(k)}
    fb = {k: v for k, v in b.final.items() if not ex.is_timing(k)}
    assert fa == fb
    cols = [c for c in a.history.columns if c != "seconds"]
    pd.testing.assert_frame_equal(a.history[cols], b.history[cols])


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, worker_dashboard_address=None) \
            as cl:
        yield cl


@pytest.mark.slow
def test_a_sweep_on_a_dask_cluster_equals_the_serial_sweep(cluster, tmp_path, monkeypatch):
    specs = _specs()
    serial = ex.run_all(specs, workers=1, cache_dir=tmp_path / "serial", progress=False)
    def not_here(spec):
        raise AssertionError("a run was trained in the client process")

    with distributed.Client(cluster.scheduler_address) as client, \
            monkeypatch.context() as m:
        m.setattr(ex, "_train", not_here)        # the workers have their own copy
        on_dask = ex.run_all(specs, cache_dir=tmp_path / "dask", scheduler=client,
                             progress=False)
        assert len(client.scheduler_info()["workers"]) == 2
    for a, b in zip(on_dask, serial):
        assert not a.from_cache
        _same(a, b)
    # the cache works: the address in the environment (SOFTMAX_DASK_SCHEDULER), a
    # rerun reads every run back; a new run joins them
    monkeypatch.setenv("SOFTMAX_DASK_SCHEDULER", cluster.scheduler_address)
    assert ex.dask_scheduler() == cluster.scheduler_address
    more = specs + [ex.RunSpec.make("eurlex-surrogate", "vanilla", 0.1, seed=0, epochs=3,
                                    monitor_rows=200, data_options={"scale": 0.05})]
    again = ex.run_all(more, cache_dir=tmp_path / "dask", progress=False)
    assert [r.from_cache for r in again] == [True] * len(specs) + [False]
    for a, b in zip(again, on_dask):
        _same(a, b)
    assert np.isfinite(again[-1].final["train_log_loss"])
    assert len(list((tmp_path / "dask").glob("*.json"))) == len(more)


def test_a_worker_that_read_other_data_is_an_error(tmp_path, monkeypatch):
    """The result of a worker whose data differ from this process's is refused."""
    def wrong(todo, specs):
        for i in todo:
            h, f = ex._train(specs[i])
            yield i, h, f, {"files": {"train": "0" * 64}}, None

    monkeypatch.setattr(ex, "_serial", wrong)
    with pytest.raises(RuntimeError, match="worker read different data.*SOFTMAX_DATA_DIR"):
        ex.run_all(_specs()[:1], cache_dir=tmp_path, progress=False)
    assert not list(tmp_path.glob("*.json"))


# ----------------------------------------------------------------- issue 23, points 1, 3
def test_a_result_from_other_code_is_refused_and_nothing_is_stored(tmp_path, monkeypatch):
    """Every result carries its worker's code fingerprint; one from a worker whose
    source or library versions differ (say, a worker whose files were edited during the
    sweep) is refused with an error naming the worker and the difference."""
    def other_code(todo, specs):
        for i in todo:
            h, f = ex._train(specs[i])
            report = ex.worker_report()
            report.update(worker="tcp://10.0.0.9:40000", code="0" * 12)
            report["modules"] = dict(report["modules"],
                                     **{"scalable_softmax.evaluate": "f" * 16})
            report["libraries"] = dict(report["libraries"], numba="0.0.1")
            yield i, h, f, ex.data_fingerprint(specs[i].dataset), report

    monkeypatch.setattr(ex, "_serial", other_code)
    with pytest.raises(ex.WorkerMismatchError,
                       match=r"worker tcp://10\.0\.0\.9:40000 .*scalable_softmax\.evaluate "
                             r"differs; numba 0\.0\.1 \(there\) != .*nothing of it was stored"):
        ex.run_all(_specs()[:1], cache_dir=tmp_path, progress=False)
    assert not list(tmp_path.glob("*.json"))


def test_threads_follow_the_cores_of_each_machine():
    """No machine runs more numba threads than it has cores: a host's cores are shared
    by the Dask threads of all its workers."""
    assert ex.threads_per_task(8, 2) == 4
    assert ex.threads_per_task(8, 8) == 1
    assert ex.threads_per_task(2, 16) == 1
    reports = {"tcp://a:1": {"host": "a", "cores": 8, "nthreads": 1},
               "tcp://a:2": {"host": "a", "cores": 8, "nthreads": 3},
               "tcp://b:1": {"host": "b", "cores": 4, "nthreads": 1}}
    assert ex.dask_thread_plan(reports) == {"tcp://a:1": 2, "tcp://a:2": 2, "tcp://b:1": 4}
