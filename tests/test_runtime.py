"""scalable_softmax.repro.fagan.timing: synthetic data, epoch seconds, slopes, row targets and the
timing wrapper around fit (structure only: no assertion depends on the machine's speed)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scalable_softmax.repro.fagan import timing as rt

# ---------------------------------------------------------------------------
# synthetic_sparse
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("N,D,nnz,K", [(500, 1000, 50, 7), (300, 40, 30, 3), (50, 5, 5, 2),
                                       (200, 20, 1, 4)])
def test_synthetic_sparse_shape_and_rows(N, D, nnz, K):
    X, y = rt.synthetic_sparse(N, D, nnz, K, seed=3)
    assert sp.isspmatrix_csr(X) and X.shape == (N, D) and X.dtype == np.float64
    assert np.array_equal(np.diff(X.indptr), np.full(N, nnz))      # exactly nnz per row
    Xc = X.copy()
    Xc.sum_duplicates()
    assert Xc.nnz == N * nnz                                        # all columns distinct
    for i in range(0, N, max(1, N // 20)):                          # sorted within rows
        cols = X.indices[X.indptr[i]:X.indptr[i + 1]]
        assert np.all(np.diff(cols) > 0)
    assert np.all(X.data > 0)
    np.testing.assert_allclose(np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel()), 1.0,
                               rtol=1e-12)
    assert y.dtype == np.int64 and y.shape == (N,)
    assert y.min() >= 0 and y.max() < K


def test_synthetic_sparse_deterministic_and_uniform():
    a = rt.synthetic_sparse(2000, 100, 10, 5, seed=1)
    b = rt.synthetic_sparse(2000, 100, 10, 5, seed=1)
    c = rt.synthetic_sparse(2000, 100, 10, 5, seed=2)
    assert (a[0] != b[0]).nnz == 0 and np.array_equal(a[1], b[1])
    assert (a[0] != c[0]).nnz > 0
    # columns and labels roughly uniform (20,000 column draws over 100 columns)
    counts = np.bincount(a[0].indices, minlength=100)
    assert counts.min() > 120 and counts.max() < 280
    assert np.bincount(a[1], minlength=5).min() > 300


@pytest.mark.parametrize("args,msg", [
    ((0, 10, 2, 3), "n_rows must be an integer >= 1"),
    ((10, 10, 11, 3), "nnz_per_row = 11 exceeds n_features = 10"),
    ((10, 10, 2, 1), "n_classes must be an integer >= 2"),
    ((10, 10.0, 2, 3), "n_features must be an integer"),
    ((10, 10, 0, 3), "nnz_per_row must be an integer >= 1"),
])
def test_synthetic_sparse_bad_input(args, msg):
    with pytest.raises(ValueError, match=msg):
        rt.synthetic_sparse(*args)


# ---------------------------------------------------------------------------
# epoch_seconds, loglog_slope, rows_for_target
# ---------------------------------------------------------------------------

def test_epoch_seconds_differences():
    h = pd.DataFrame({"epoch": [0, 1, 2, 3], "seconds": [0.0, 0.5, 1.25, 1.5]})
    np.testing.assert_allclose(rt.epoch_seconds(h), [0.5, 0.75, 0.25])
    np.testing.assert_allclose(rt.epoch_seconds(h.iloc[::-1]), [0.5, 0.75, 0.25])
    assert rt.epoch_seconds(h.iloc[:1]).size == 0
    with pytest.raises(ValueError, match="columns 'epoch' and 'seconds'"):
        rt.epoch_seconds(pd.DataFrame({"epoch": [0]}))


def test_loglog_slope_power_laws_and_reference():
    x = np.array([100, 1000, 10_000, 100_000])
    assert math.isclose(rt.loglog_slope(x, 3e-6 * x), 1.0, rel_tol=1e-12)
    assert abs(rt.loglog_slope(x, np.full(4, 2e-6))) < 1e-12
    assert math.isclose(rt.loglog_slope(x, 5 * x ** 0.25), 0.25, rel_tol=1e-12)
    rng = np.random.default_rng(0)
    y = rng.random(4) + 0.1
    ref = np.polyfit(np.log(x), np.log(y), 1)[0]
    assert math.isclose(rt.loglog_slope(x, y), ref, rel_tol=1e-10)


@pytest.mark.parametrize("x,y,msg", [
    ([1], [1], "at least two points"),
    ([1, 2], [1, 2, 3], "same length"),
    ([1, 2], [1, 0], "finite and > 0"),
    ([1, np.nan], [1, 2], "finite and > 0"),
    ([3, 3], [1, 2], "all x are equal"),
])
def test_loglog_slope_bad_input(x, y, msg):
    with pytest.raises(ValueError, match=msg):
        rt.loglog_slope(x, y)


def test_rows_for_target():
    assert rt.rows_for_target(1e-3, 0.5, 100_000) == 500
    assert rt.rows_for_target(1e-3, 0.5549, 100_000) == 500      # down to whole batches
    assert rt.rows_for_target(1e-6, 10.0, 90_737) == 90_737      # capped at n_max
    assert rt.rows_for_target(1.0, 0.5, 10_000) == 100           # at least one batch
    assert rt.rows_for_target(1.0, 0.5, 10_000, min_rows=300) == 300
    assert rt.rows_for_target(1e-3, 0.5, 50) == 50               # n_max below one batch
    with pytest.raises(ValueError, match="seconds_per_datapoint must be a finite number > 0"):
        rt.rows_for_target(0.0, 0.5, 10)
    with pytest.raises(ValueError, match="target_seconds"):
        rt.rows_for_target(1e-3, float("inf"), 10)


# ---------------------------------------------------------------------------
# time_fit
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small():
    return rt.synthetic_sparse(400, 30, 5, 6, seed=0)


def test_time_fit_structure(small):
    X, y = small
    r = rt.time_fit(X, y, "umax", 0.01, K=6, epochs=3)
    assert r["method"] == "umax" and r["rows"] == 400 and r["epochs"] == 3
    assert r["steps_per_epoch"] == 400 and not r["diverged"] and r["retries"] == 0
    assert r["lr"] == r["lr_requested"] == 0.01
    assert r["seconds_min"] <= r["seconds_per_epoch"] <= r["seconds_max"]
    assert r["seconds_per_epoch"] > 0 and math.isfinite(r["seconds_per_epoch"])
    assert math.isclose(r["seconds_per_datapoint"], r["seconds_per_epoch"] / 400)
    assert math.isclose(r["seconds_per_step"], r["seconds_per_epoch"] / 400)


def test_time_fit_rows_subset_and_minibatch(small):
    X, y = small
    r = rt.time_fit(X, y, "softmax-sgd", 0.1, K=6, epochs=2, rows=250)
    assert r["rows"] == 250 and r["epochs"] == 2
    assert r["steps_per_epoch"] == 3                         # 100 + 100 + 50
    assert math.isclose(r["seconds_per_datapoint"], r["seconds_per_epoch"] / 250)
    assert math.isclose(r["seconds_per_step"], r["seconds_per_epoch"] / 3)
    assert rt.time_fit(X, y, "umax", 0.01, K=6, epochs=1, rows=10_000)["rows"] == 400


def test_time_fit_retries_after_divergence():
    # vanilla SGD overflows at a huge rate on separable data; a small rate is stable
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.standard_normal((200, 4)) * 30)
    y = (X.toarray()[:, 0] > 0).astype(np.int64)
    bad = rt.time_fit(X, y, "vanilla", 1e6, K=2, epochs=3)
    assert bad["diverged"] and bad["retries"] == 0 and bad["epochs"] < 3
    good = rt.time_fit(X, y, "vanilla", 1e6, K=2, epochs=3, lr_retries=12, lr_retry_factor=0.1)
    assert not good["diverged"] and good["retries"] >= 1 and good["epochs"] == 3
    assert math.isclose(good["lr"], 1e6 * 0.1 ** good["retries"])


def test_time_fit_bad_input(small):
    X, y = small
    with pytest.raises(ValueError, match="rows must be an integer >= 1"):
        rt.time_fit(X, y, "umax", 0.01, K=6, rows=0)
    with pytest.raises(ValueError, match="lr_retry_factor must lie in"):
        rt.time_fit(X, y, "umax", 0.01, K=6, lr_retry_factor=2.0)
    with pytest.raises(ValueError, match="unknown method"):
        rt.time_fit(X, y, "nope", 0.01, K=6)


def test_machine_info_keys():
    info = rt.machine_info()
    assert {"cpu_model", "cpus", "numba_threads", "load_average", "date"} <= set(info)
    assert len(info["load_average"]) == 3


# ---------------------------------------------------------------------------
# notebook 07's studies: rates, memory check, the two timing loops, tables, checks, figures
# ---------------------------------------------------------------------------

def test_start_rate_paper_reference_and_number():
    assert rt.start_rate("bibtex", "umax") == 0.1                       # Table 2
    assert rt.start_rate("wikismall-surrogate", "implicit") == \
        rt.start_rate("wikismall", "implicit")                          # imitated set's rate
    assert rt.start_rate("bibtex", "softmax-sgd", reference_lr=0.3) == 0.3
    assert rt.start_rate("bibtex", "umax", learning_rate=0.5) == 0.5
    with pytest.raises(ValueError, match="no rate for data set 'toy'"):
        rt.start_rate("toy", "umax")


def test_scan_weight_gb():
    assert math.isclose(rt.scan_weight_gb([100, 100_000], 1000, 2.0), 0.8)
    with pytest.raises(ValueError, match="max_weight_gb = 2.0"):
        rt.scan_weight_gb([100_000], 10_000, 2.0)


def test_time_reference_sizes_rows_by_pilot(small):
    X, y = small
    r = rt.time_reference(X, y, 6, lr=0.1, target_seconds=1e-9, pilot_rows=100, epochs=2)
    assert r["method"] == "softmax-sgd" and r["rows"] == 100 and r["epochs"] == 2
    r = rt.time_reference(X, y, 6, lr=0.1, target_seconds=1e6, pilot_rows=100, epochs=1)
    assert r["rows"] == 400                                   # the whole set fits


class _FakeData:
    def __init__(self, X, y, K, synthetic):
        self.X, self.y, self.K, self.synthetic = X, y, K, synthetic


@pytest.fixture()
def fake_datasets(monkeypatch, small):
    X, y = small
    sets = {"alpha": _FakeData(X, y, 6, False),
            "beta-surrogate": _FakeData(X[:300], y[:300], 6, True)}
    import scalable_softmax.data as data
    monkeypatch.setattr(data, "load_dataset", lambda name, split: sets[name])
    return list(sets)


def test_time_datasets_table_and_checks(fake_datasets, tmp_path):
    runs, info = rt.time_datasets(fake_datasets, ["umax", "ove"], learning_rate=0.01,
                                  reference_options=dict(lr=0.1, target_seconds=1e-9,
                                                         pilot_rows=100),
                                  epochs=2, progress=False)
    assert len(runs) == 6 and list(runs.method[:3]) == ["umax", "ove", "softmax-sgd"]
    assert info["beta-surrogate"]["dataset"] == "beta-surrogate (SYNTHETIC)"
    assert info["alpha"]["N"] == 400 and info["beta-surrogate"]["nnz_per_row"] == 5
    ref = runs[runs.method == "softmax-sgd"]
    assert ref.extrapolated.all() and (ref.rows == 100).all()
    assert not runs[runs.method != "softmax-sgd"].extrapolated.any()
    np.testing.assert_allclose(runs.seconds_per_epoch_full, runs.seconds_per_datapoint * runs.N)
    rt.check_runs(runs, epochs=2)
    with pytest.raises(AssertionError):
        rt.check_runs(runs, epochs=3)
    table = rt.dataset_table(runs, info, fake_datasets, ["umax", "ove"])
    assert list(table.dataset) == ["alpha", "beta-surrogate (SYNTHETIC)"]
    assert {"umax_s_per_epoch", "ove_s_per_epoch", "softmax-sgd_s_per_epoch",
            "softmax-sgd_extrapolated", "softmax-sgd_rows_timed",
            "softmax-sgd_over_umax"} <= set(table)
    um = runs[runs.method == "umax"].seconds_per_datapoint.to_numpy()
    np.testing.assert_allclose(table["softmax-sgd_over_umax"],
                               ref.seconds_per_datapoint.to_numpy() / um)
    assert "softmax-sgd_over_umax" not in rt.dataset_table(runs, info, fake_datasets, ["ove"])
    runs_table = runs[rt.RUNS_COLUMNS]
    from scalable_softmax.repro.machinery import outputs
    csv, md = outputs.write_table(runs_table, "t", tmp_path, title="t")
    rt.check_written([(csv, runs_table), (md, runs_table)])
    with pytest.raises(AssertionError):
        rt.check_written([(csv, runs_table.iloc[:2])])
    import matplotlib
    matplotlib.use("Agg")
    fig = rt.plot_datasets(runs, info, fake_datasets, ["umax", "ove"])
    assert fig.axes[0].get_yscale() == "log"


def test_scan_k_slopes_and_checks():
    scan, slopes = rt.scan_k([10, 40], ["umax", "softmax-sgd"], n_rows=300, n_features=30,
                             nnz_per_row=5, lr=0.01, epochs=2, progress=False,
                             reference_options=dict(lr=0.1, target_seconds=1e-9,
                                                    pilot_rows=100))
    assert list(scan.columns[:1]) == ["data"] and len(scan) == 4
    assert scan.data.iloc[0] == "SYNTHETIC D=30, 5 nnz/row, N=300"
    assert set(rt.scan_columns("umax")) <= set(scan.columns)
    np.testing.assert_allclose(scan[scan.method == "umax"].ratio_to_umax, 1.0)
    assert (scan[scan.method == "softmax-sgd"].rows == 100).all()
    assert scan[scan.method == "softmax-sgd"].extrapolated.all()
    np.testing.assert_allclose(scan.W_GB, scan.K * 30 * 8 / 1e9)
    for m in ("umax", "softmax-sgd"):
        s = scan[scan.method == m].sort_values("K")
        assert math.isclose(slopes[m]["all_K"], rt.loglog_slope(s.K, s.seconds_per_datapoint))
        assert math.isclose(slopes[m]["two_largest_K"], slopes[m]["all_K"])   # two K only
    rt.check_scan(scan, slopes, epochs=2)
    bad = {m: dict(v, all_K=v["all_K"] + 1) for m, v in slopes.items()}
    with pytest.raises(AssertionError):
        rt.check_scan(scan, bad, epochs=2)
    import matplotlib
    matplotlib.use("Agg")
    fig = rt.plot_k_scan(scan, slopes, n_features=30, nnz_per_row=5)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert any("slope 1" in line.get_label() for line in ax.get_lines())


def test_machine_note():
    note = rt.machine_note(dict(cpu_model="cpu X", cpus=2, numba="0.1", date="today",
                                load_average=[1.234, 0.5, 0]))
    assert note.startswith("Machine: cpu X, 2 cores (shared), numba 0.1, today")
    assert "1.23, 0.50, 0.00" in note
