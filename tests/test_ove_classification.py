"""The computations of notebook 10 (``scalable_softmax.repro.titsias.ove_classification``) on a
tiny random problem: the four runs of a case, their assembly, the tables, the
invariants and the figures."""
from __future__ import annotations

import dataclasses

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from scalable_softmax.repro.titsias import ove_classification as oc  # noqa: E402


def _case(seed, N=60, Nt=30, D=6, K=4):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(K, D))

    def split(n):
        X = sp.random(n, D, density=0.6, format="csr", random_state=rng)
        X = sp.hstack([X, np.ones((n, 1))], format="csr")
        X.sort_indices()
        y = np.argmax(X[:, :D] @ W.T + rng.gumbel(size=(n, K)), axis=1).astype(np.int64)
        return X, y

    X, y = split(N)
    Xt, yt = split(Nt)
    return dict(X=X, y=y, Xt=Xt, yt=yt, K=K)


SETTINGS = oc.Settings(lam=1.0, gtol=1e-6, lbfgs_maxiter=200,
                       lbfgs_memory={"mnist": 10, "bibtex": 10},
                       sgd_settings={"mnist": {"lr": 0.5, "epochs": 8, "lr_decay": 0.95},
                                     "bibtex": {"lr": 0.5, "epochs": 8, "lr_decay": 0.95}},
                       sgd_batch=20, sgd_classes=1, sgd_checkpoints=4, path_every=2, seed=0)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def sweep(cache):
    data = {"bibtex": _case(0), "mnist": _case(1)}
    runs, weights, traces, sgd_paths, path_rows = oc.run_cases(data, SETTINGS, workers=1,
                                                                cache_dir=cache)
    return data, runs, weights, traces, sgd_paths, path_rows


def test_run_cases_goes_through_run_all_and_its_cache(sweep, cache, monkeypatch):
    data, runs, weights, *_ = sweep
    assert len(list((cache / "tasks").glob("*.pkl"))) == 2
    monkeypatch.setattr(oc, "run_case", lambda *a, **k: pytest.fail("not read back"))
    again = oc.run_cases(data, SETTINGS, workers=1, cache_dir=cache)
    pd.testing.assert_frame_equal(again[0], runs)
    for key, W in weights.items():
        np.testing.assert_array_equal(again[1][key], W)


def test_case_key_follows_settings_and_data():
    d = _case(0)
    a = oc.OveCase("bibtex", SETTINGS, d)
    assert a.key_inputs() == oc.OveCase("bibtex", SETTINGS, _case(0)).key_inputs()
    other_case = dataclasses.replace(SETTINGS, sgd_settings={**SETTINGS.sgd_settings,
                                                             "mnist": {"lr": 9.0}})
    assert oc.OveCase("bibtex", other_case, d).key_inputs() == a.key_inputs()
    assert oc.OveCase("bibtex", dataclasses.replace(SETTINGS, lam=2.0), d).key_inputs() \
        != a.key_inputs()
    assert oc.OveCase("bibtex", SETTINGS, _case(5)).key_inputs() != a.key_inputs()


def test_settings_from_namespace_takes_only_its_fields():
    ns = {f: getattr(SETTINGS, f) for f in SETTINGS.__dataclass_fields__}
    ns["unrelated"] = 3
    assert oc.Settings.from_namespace(ns) == SETTINGS
    del ns["gtol"]
    with pytest.raises(KeyError):
        oc.Settings.from_namespace(ns)


def test_run_cases_assembles_in_data_order_and_matches_run_case(sweep):
    data, runs, weights, traces, sgd_paths, path_rows = sweep
    assert list(runs.dataset) == ["bibtex"] * 4 + ["mnist"] * 4
    assert list(runs.method) == oc.METHODS * 2
    one = oc.run_case("mnist", data["mnist"], SETTINGS)       # deterministic, seeded
    for m in oc.METHODS:
        np.testing.assert_array_equal(one.weights[m], weights["mnist", m])
    pd.testing.assert_frame_equal(one.sgd_path, sgd_paths["mnist"])
    assert one.path_rows == [r for r in path_rows if r["dataset"] == "mnist"]
    assert set(traces) == {(c, m) for c in data for m in oc.EXACT}
    assert len(one.lines) == 4 and all(ln.startswith("mnist") for ln in one.lines)


def test_norms_and_invariants(sweep):
    data, runs, weights, traces, sgd_paths, _ = sweep
    for case in data:
        r = runs[runs.dataset == case].set_index("method")
        ws = weights[case, "SOFT"]
        for m in oc.METHODS:
            want = np.abs(ws - weights[case, m]).sum() / np.abs(ws).sum()
            assert r.loc[m, "norm"] == pytest.approx(want, rel=1e-12)
        assert r.loc["OVE", "dist_to_ove"] == 0
        assert r.loc["SOFT", "converged"] and r.loc["OVE", "converged"]
    oc.check_invariants(runs, weights, traces, sgd_paths, list(data))
    broken = runs.copy()
    broken.loc[0, "train_ove"] = broken.loc[0, "train_softmax"] - 1.0   # T-4 violated
    with pytest.raises(AssertionError):
        oc.check_invariants(broken, weights, traces, sgd_paths, list(data))


def test_tables(sweep):
    data, runs, weights, traces, sgd_paths, path_rows = sweep
    t = oc.table2(runs, data)
    assert list(t.columns[:3]) == ["dataset", "features", "method"]
    assert np.isnan(t.norm[t.method == "SOFT"]).all()
    assert (t.reached_gtol[t.method == "OVE-SGD"] == "n/a: stochastic (see dist_to_ove)").all()
    assert (t.reached_gtol[t.method != "OVE-SGD"] == "yes").all()
    np.testing.assert_allclose(t.summed_objective, -data["bibtex"]["X"].shape[0] * t.objective)
    assert t.paper_error.tolist()[:4] == [oc.PAPER["bibtex"][m][1] for m in oc.METHODS]
    s = oc.sgd_table(sgd_paths, data)
    assert list(s.columns) == ["dataset", "epoch", "steps", "ove", "softmax", "dist_to_ove",
                               "summed_ove"]
    assert s.steps.is_monotonic_increasing or s.dataset.nunique() > 1
    p = oc.path_table(path_rows, runs)
    assert set(p.method) == {"BOUCHARD", "OVE"}
    assert not p.duplicated(["dataset", "method", "iteration"]).any()
    last = p.groupby(["dataset", "method"]).tail(1).set_index(["dataset", "method"])
    for (case, m), row in last.iterrows():      # every path ends at its optimum
        r = runs[(runs.dataset == case) & (runs.method == m)].iloc[0]
        assert row.iteration == r.iterations and row.norm == r.norm
    near = oc.bouchard_near_paper(p, list(data))
    assert list(near.dataset) == list(data)
    ext = oc.sgd_extrapolation(sgd_paths, runs)
    assert set(ext.dataset) == set(oc.sgd_slopes(sgd_paths)) == set(data)
    pre = oc.table2_preamble(list(data), SETTINGS, 100, True)
    assert "bibtex: binary; mnist: pixels / 255, constant bias feature." in pre
    assert "Minibatch 20, 1 sampled class" in oc.sgd_preamble(SETTINGS)


def test_gtol_status():
    row = pd.Series(dict(method="OVE", converged=False, message="cap"))
    assert oc.gtol_status(row) == "no: cap"
    assert oc.gtol_status(row.replace({"OVE": "SOFT", False: True})) == "yes"


def test_sgd_slopes_power_law():
    steps = np.array([10, 100, 1000, 10000])
    p = pd.DataFrame(dict(steps=steps, dist_to_ove=3.0 * steps ** -0.5))
    assert oc.sgd_slopes({"x": p})["x"] == pytest.approx(-0.5)
    assert oc.sgd_slopes({"x": p.head(1)}) == {}


def test_figures(sweep):
    data, runs, weights, traces, sgd_paths, path_rows = sweep
    t = oc.table2(runs, data)
    assert oc.plot_fig3([], data, traces, sgd_paths) is None
    fig3 = oc.plot_fig3(["mnist", "bibtex"], data, traces, sgd_paths)
    labels = [tx.get_text() for tx in fig3.legends[0].get_texts()]
    assert "L-BFGS final value, held" in labels and "OVE-SGD" in labels
    assert all(ax.get_xscale() == "log" for ax in fig3.axes)
    curves = oc.fig3_curves("mnist", data, traces, sgd_paths)
    assert set(curves) == set(oc.METHODS)
    for fig in (fig3, oc.plot_table2(t, list(data), 1.0),
                oc.plot_sgd(sgd_paths, runs, 20),
                oc.plot_paths(oc.path_table(path_rows, runs), runs, list(data))):
        assert fig.axes
        matplotlib.pyplot.close(fig)


def test_bad_arguments():
    with pytest.raises(ValueError, match="datasets: no such data set"):
        oc.load_cases(["nope"])
    with pytest.raises(ValueError, match="case: no such data set"):
        oc.load_case("nope", "train")
    with pytest.raises(ValueError, match="workers must be an integer"):
        oc.run_cases({}, SETTINGS, workers=0, cache_dir=False)


def test_worker_processes_give_the_same_numbers(sweep):
    data, runs, weights, *_ = sweep
    par = oc.run_cases(data, SETTINGS, workers=2, cache_dir=False)
    timing = ["seconds"]
    pd.testing.assert_frame_equal(par[0].drop(columns=timing), runs.drop(columns=timing))
    for key, W in weights.items():
        np.testing.assert_array_equal(par[1][key], W)
