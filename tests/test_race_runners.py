"""The race's runs (scalable_softmax.repro.race): checkpoints, the rate rule, the runners (ours,
scikit-learn, PyTorch) against the library's evaluator, and the child process's
memory and wall-clock limits. The sklearn and torch tests need the optional `peers`
extra and are skipped without it."""
from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scalable_softmax.evaluate import evaluate
from scalable_softmax.fit import piece_seed
from scalable_softmax.repro.fagan import timing
from scalable_softmax.repro.race import isolate as ISO
from scalable_softmax.repro.race import jobs as J
from scalable_softmax.repro.race import methods as RM
from scalable_softmax.repro.race import ours as OURS
from scalable_softmax.repro.race import problems as PR
from scalable_softmax.repro.race import run as RUN
from scalable_softmax.repro.race import sklearn_runner as SK
from scalable_softmax.repro.race import torch_runner as T


def _problem(N=300, D=12, K=4, seed=0, separable=False):
    """Small sparse data with overlapping classes (so the MLE exists) and a test split."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(K, D)) * (4.0 if separable else 1.0)
    X = sp.random(N, D, density=0.5, format="csr", random_state=seed) * 2
    X.data -= 1.0
    X = sp.csr_matrix(X)
    X.sort_indices()
    p = np.exp(X @ W.T)
    p /= p.sum(axis=1, keepdims=True)
    y = np.array([rng.choice(K, p=row) for row in p])
    y[:K] = np.arange(K)                                   # every class present
    return X, y.astype(np.int64), K


def _sets(X, y):
    return {"train": (X, y), "test": (X[: len(y) // 2], y[: len(y) // 2])}


# ---------------------------------------------------------------------------
# checkpoints, splits, jobs
# ---------------------------------------------------------------------------

def test_checkpoint_times_are_geometric_and_end_at_the_cap():
    t = J.checkpoint_times(8.0, per_doubling=2, first=8.0 / 64)
    assert t[-1] == 8.0 and len(t) == 13
    np.testing.assert_allclose(np.diff(np.log2(t)), 0.5)
    assert t[0] == pytest.approx(8.0 / 64)
    assert J.checkpoint_times(1.0, 1, 1.0) == [1.0]
    for bad in [dict(cap_seconds=0), dict(cap_seconds=1, per_doubling=0),
                dict(cap_seconds=1, first=2.0)]:
        with pytest.raises(ValueError):
            J.checkpoint_times(**bad)


@pytest.mark.parametrize("kw,msg", [
    (dict(method="nope"), "unknown method"),
    (dict(method="umax", lr=None), "lr"),
    (dict(method="umax", lr=-1.0), "lr"),
    (dict(split="val"), "split"),
    (dict(cap_seconds=0), "cap_seconds"),
    (dict(max_epochs=0), "max_epochs"),
    (dict(holdout=1.0), "holdout"),
])
def test_job_rejects_bad_fields(kw, msg):
    base = dict(data="bibtex", method="exact", lr=None, cap_seconds=1.0)
    with pytest.raises(ValueError, match=msg):
        J.Job(**{**base, **kw})


def test_classify_failure():
    assert J.classify_failure(MemoryError("Unable to allocate 12.3 GiB")) == "memory"
    assert J.classify_failure(RuntimeError("DefaultCPUAllocator: can't allocate memory: "
                                           "you tried to allocate 1 bytes")) == "memory"
    assert J.classify_failure(ValueError("bad shape")) == "error"


# ---------------------------------------------------------------------------
# the rate rule
# ---------------------------------------------------------------------------

def test_choose_rates_takes_the_lowest_finite_score_with_ties_to_the_smaller_rate():
    t = pd.DataFrame([
        dict(dataset="a", method="umax", lr=10.0, val_log_loss=1.0, layout=""),
        dict(dataset="a", method="umax", lr=0.1, val_log_loss=2.0, layout=""),
        dict(dataset="a", method="umax", lr=1.0, val_log_loss=1.0, layout=""),
        dict(dataset="a", method="is", lr=1.0, val_log_loss=math.inf, layout=""),
        dict(dataset="a", method="is", lr=10.0, val_log_loss=3.0, layout=""),
        dict(dataset="b", method="umax", lr=1.0, val_log_loss=math.inf, layout=""),
        dict(dataset="b", method="umax", lr=0.1, val_log_loss=math.inf, layout=""),
        dict(dataset="b", method="torch-sgd", lr=1.0, val_log_loss=0.5, layout="sparse-mm"),
    ])
    r = RUN.choose_rates(t).set_index(["dataset", "method"])
    assert r.lr[("a", "umax")] == 1.0 and r.at_grid_edge[("a", "umax")] == ""
    assert r.grid[("a", "umax")] == "0.1 1 10"
    assert r.lr[("a", "is")] == 10.0 and r.at_grid_edge[("a", "is")] == "highest"
    assert r.all_failed[("b", "umax")] and r.lr[("b", "umax")] == 0.1
    assert r.layout[("b", "torch-sgd")] == "sparse-mm"
    assert r.at_grid_edge[("b", "torch-sgd")] == ""            # a one-rate grid has no edge


# ---------------------------------------------------------------------------
# runners, in this process
# ---------------------------------------------------------------------------

def _job(method, lr=None, cap=60.0, **kw):
    return J.Job("in-memory", method, lr, cap, **kw)


def test_recorder_points_are_the_evaluator_on_the_weights():
    X, y, K = _problem()
    sets = _sets(X, y)
    rec = J._Recorder(sets, [0.0], 10.0)
    W = np.random.default_rng(1).normal(size=(K, X.shape[1]))
    row = rec.record(W, epoch=3)
    for name, (Xe, ye) in sets.items():
        ev = evaluate(Xe, ye, W)
        assert row[f"{name}_log_loss"] == ev.log_loss and row[f"{name}_error"] == ev.error
    # (weights, "feature"): the D x K weights of a feature-major model, the same point
    fm = rec.record((np.ascontiguousarray(W.T), "feature"), epoch=3)
    assert fm == row
    bad = rec.record(np.full((K, X.shape[1]), np.nan))
    assert bad["train_log_loss"] == math.inf and math.isnan(bad["test_error"])
    bad = rec.record((np.full((X.shape[1], K), np.nan), "feature"))
    assert bad["train_log_loss"] == math.inf and math.isnan(bad["test_error"])
    assert rec.seconds == 0.0 and rec.pending == []


def test_recorder_makes_the_weights_with_the_clock_stopped():
    # a function giving the weights is called after the training clock stops: the time
    # it takes (a copy, a transpose) is evaluation time, never training time
    X, y, K = _problem()
    W = np.random.default_rng(2).normal(size=(K, X.shape[1]))
    rec = J._Recorder(_sets(X, y), [], 10.0)
    rec.start()

    def slow():
        time.sleep(0.3)
        return np.ascontiguousarray(W.T), "feature"
    row = rec.record(slow, epoch=1)
    assert rec.now() < 0.25 and rec.eval_seconds >= 0.3
    assert row == dict(rec.record(W, epoch=1), seconds=row["seconds"])
    assert rec._t is not None        # the clock runs again after the point


@pytest.mark.parametrize("method,lr", [("umax", 0.1), ("implicit", 1.0), ("is", 10.0),
                                       ("implicit-batch", 1.0), ("implicit-batch-5", 1.0)])
def test_our_methods_run_and_start_at_log_k(method, lr):
    X, y, K = _problem(N=400, K=8)          # IS samples 5 classes besides the label
    res = J.run_job(_job(method, lr, max_epochs=4, checkpoints=[1e-9]),
                    problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "completed", res["reason"]
    pts = pd.DataFrame(res["points"])
    assert pts.epoch.iloc[0] == 0 and pts.epoch.iloc[-1] == 4
    assert pts.train_log_loss.iloc[0] == pytest.approx(math.log(K), rel=1e-6)
    assert np.isfinite(pts.train_log_loss).all()
    assert pts.train_log_loss.iloc[-1] < math.log(K)           # it learned something
    assert np.all(np.diff(pts.seconds) >= 0)


@pytest.mark.parametrize("method", ["implicit-batch", "implicit-batch-5"])
def test_minibatch_implicit_is_the_library_trainer_with_its_n_and_m(method):
    """A minibatch Implicit SGD job is the library's ``implicit-batch`` trainer with the
    (n, m) of ``BATCH_IMPLICIT`` and Implicit SGD's paper-text settings (shuffled data,
    u = log K, lr * 0.9**(epoch - 1)): replaying its two epochs gives its last point."""
    from scalable_softmax.fit import make_order
    from scalable_softmax.methods import get_trainer_class

    X, y, K = _problem(N=300, K=8)
    # one thread: the serial kernel, which a replay reproduces exactly (with 2 threads
    # the job runs the Hogwild kernel, whose races a replay cannot repeat)
    res = J.run_job(_job(method, 2.0, max_epochs=2, threads=1),
                    problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "completed", res["reason"]
    n, m = OURS.BATCH_IMPLICIT[method]
    tr = get_trainer_class("implicit-batch")(X, y, K, mu=0.0, batch_size=n, n_sampled=m)
    assert (tr.batch_size, tr.n_sampled) == (n, m)
    tr.init_params("logK")
    rng = np.random.default_rng(0)
    for e in (1, 2):
        tr.run_epoch(make_order(rng, X.shape[0], "shuffle"), 2.0 * 0.9 ** (e - 1),
                     int(rng.integers(0, 2 ** 63 - 1)))
    last = res["points"][-1]
    assert last["epoch"] == 2
    assert last["train_log_loss"] == pytest.approx(evaluate(X, y, tr.weights()).log_loss,
                                                   rel=1e-9)


def test_our_method_stops_at_the_time_cap():
    X, y, K = _problem(N=400)
    res = J.run_job(_job("umax", 0.5, cap=1e-6, max_epochs=50),
                    problem=(X, y, K, _sets(X, y)))
    # inside the first epoch: after its first piece (2 of 400 points)
    assert res["status"] == "time cap" and res["info"]["epochs"] == pytest.approx(2 / 400)
    assert "cap" in res["reason"]


def test_exact_lbfgs_reaches_the_library_optimum():
    from scalable_softmax.methods.full import exact_solution

    X, y, K = _problem()
    res = J.run_job(_job("exact", cap=60.0), problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "completed", res["reason"]
    W, info = exact_solution(X, y, K, mu=0.0)
    assert info["converged"]
    last = res["points"][-1]
    assert last["train_log_loss"] == pytest.approx(evaluate(X, y, W).log_loss, rel=1e-6)


def test_exact_lbfgs_stops_inside_the_objective_at_the_cap():
    X, y, K = _problem()
    res = J.run_job(_job("exact", cap=1e-9), problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "time cap"
    assert res["reason"] == "the cap passed before the first objective evaluation had finished"
    assert res["info"]["nfev"] == 0


def test_a_failure_is_reported_not_raised():
    X, y, K = _problem()
    res = J.run_job(_job("umax", 0.5, options={"no_such_option": 1}),
                    problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "error" and "no_such_option" in res["reason"]


# --- scikit-learn ----------------------------------------------------------

def test_sklearn_weights_give_sklearn_log_loss_under_our_evaluator():
    pytest.importorskip("sklearn")
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    X, y, K = _problem()
    for solver in ("lbfgs", "saga"):
        clf = LogisticRegression(C=np.inf, solver=solver, fit_intercept=False, max_iter=7,
                                 random_state=0).fit(X, y)
        W = SK._sklearn_W(clf, K, X.shape[1])
        assert W.shape == (K, X.shape[1])
        ours = evaluate(X, y, W, precision="float64").log_loss
        assert ours == pytest.approx(log_loss(y, clf.predict_proba(X)), rel=1e-9)
    # a class absent from the training rows gets a zero row; the others keep theirs
    keep = y != 2
    clf = LogisticRegression(C=np.inf, fit_intercept=False, max_iter=5).fit(X[keep], y[keep])
    W = SK._sklearn_W(clf, K, X.shape[1])
    assert np.all(W[2] == 0) and np.array_equal(W[[0, 1, 3]], clf.coef_)


def test_sklearn_lbfgs_runner_agrees_with_our_lbfgs():
    pytest.importorskip("sklearn")
    X, y, K = _problem()
    sets = _sets(X, y)
    res = J.run_job(_job("sklearn-lbfgs", cap=60.0, options={"tol": 1e-10}),
                    problem=(X, y, K, sets))
    assert res["status"] == "completed", res["reason"]
    pts = pd.DataFrame(res["points"])
    assert list(pts.max_iter) == [0] + [2 ** k for k in range(len(pts) - 1)]
    ours = J.run_job(_job("exact", cap=60.0), problem=(X, y, K, sets))
    assert pts.train_log_loss.iloc[-1] == pytest.approx(ours["points"][-1]["train_log_loss"],
                                                        rel=1e-5)


def test_sklearn_saga_runner_stops_before_the_cap():
    pytest.importorskip("sklearn")
    X, y, K = _problem()
    res = J.run_job(_job("sklearn-saga", cap=1e-6), problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "time cap" and len(res["points"]) == 2
    assert "max_iter=1" in res["reason"]


# --- PyTorch ---------------------------------------------------------------

def _torch_full_loss(X, y, W):
    """PyTorch's own mean cross-entropy over all classes, in float64."""
    import torch
    import torch.nn.functional as F

    logits = torch.from_numpy((X @ W.astype(np.float64).T))
    return float(F.cross_entropy(logits, torch.from_numpy(y)))


@pytest.mark.parametrize("method,layout", [("torch-sgd", "embedding-bag"),
                                           ("torch-sgd", "sparse-mm"),
                                           ("torch-adam", "embedding-bag"),
                                           ("torch-adam", "sparse-mm")])
def test_torch_weights_give_torch_loss_under_our_evaluator(method, layout):
    pytest.importorskip("torch")
    X, y, K = _problem()
    data = T._TorchData(X, y)
    data.epoch(np.arange(X.shape[0]))
    loss, opt, weights = T._torch_model(method, layout, X.shape[1], K, 0.05)
    for a in range(0, X.shape[0], 50):
        opt.zero_grad()
        loss(data, a, a + 50).backward()
        opt.step()
    V, wl = weights()
    # the weights as torch stores them (D x K), evaluated without a transpose
    assert wl == "feature"
    assert V.shape == (X.shape[1], K) and V.dtype == np.float32 and V.flags.c_contiguous
    assert np.abs(V).max() > 0
    W = V.T
    assert evaluate(X, y, V, layout=wl, precision="float64").log_loss == pytest.approx(
        _torch_full_loss(X, y, W), rel=1e-9)
    for precision in ("float32", "float64"):
        a = evaluate(X, y, np.ascontiguousarray(W), precision=precision)
        assert a == evaluate(X, y, V, layout=wl, precision=precision)


def test_torch_layouts_take_the_same_sgd_steps():
    pytest.importorskip("torch")
    X, y, K = _problem()
    out = []
    for layout in T.TORCH_LAYOUTS:
        data = T._TorchData(X, y)
        data.epoch(np.arange(X.shape[0]))
        loss, opt, weights = T._torch_model("torch-sgd", layout, X.shape[1], K, 0.5)
        for a in range(0, X.shape[0], 30):
            opt.zero_grad()
            loss(data, a, a + 30).backward()
            opt.step()
        out.append(weights()[0])
    np.testing.assert_allclose(out[0], out[1], rtol=1e-4, atol=1e-5)


_OOM = ("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 2400000000 bytes")


def _patch_torch_model(monkeypatch, *, fail=(), steps=None, built=None):
    """Wrap ``T._torch_model``: layouts in ``fail`` raise PyTorch's out-of-memory error;
    ``steps`` collects the layout of every loss evaluated; ``built(layout, opt)`` is
    called with every model built."""
    model = T._torch_model

    def build(method, layout, D, K, lr):
        if layout in fail:
            raise RuntimeError(_OOM)
        loss, opt, weights = model(method, layout, D, K, lr)
        if built is not None:
            built(layout, opt)
        if steps is None:
            return loss, opt, weights

        def counted(data, a, b):
            steps.append(layout)
            return loss(data, a, b)
        return counted, opt, weights

    monkeypatch.setattr(T, "_torch_model", build)


@pytest.mark.parametrize("give_up, second_steps", [(0.0, 1), (math.inf, 1 + 5)])
def test_the_layout_pilot_gives_up_on_a_slow_first_step(give_up, second_steps, monkeypatch):
    """A layout whose first step took PILOT_GIVE_UP times the best seconds per step so
    far takes no timed step (PILOT_GIVE_UP = 0: every second layout); otherwise each
    layout takes its untimed step and ``batches`` timed ones."""
    pytest.importorskip("torch")
    X, y, K = _problem(N=400)
    calls = []
    _patch_torch_model(monkeypatch, steps=calls)
    monkeypatch.setattr(T, "PILOT_GIVE_UP", give_up)
    out, notes = T.torch_layouts(X, y, K, "torch-sgd", batch_size=20, batches=5,
                                 max_seconds=60, threads=1, dense_bound=False)
    first, second = T.TORCH_LAYOUTS
    assert calls.count(first) == 1 + 5 and calls.count(second) == second_steps
    assert all(v > 0 and math.isfinite(v) for v in out.values())
    assert (second in notes) == (second_steps == 1) and first not in notes


def test_the_layout_pilot_skips_the_dense_layout_below_its_bound(monkeypatch):
    """With the bound on, the dense layout is not built when DENSE_FIRST_STEP_PASSES
    D x K passes already take PILOT_GIVE_UP times the best step (PILOT_GIVE_UP = 0:
    always); its entry is that bound, with a note."""
    pytest.importorskip("torch")
    X, y, K = _problem(N=200)
    built = []
    _patch_torch_model(monkeypatch, built=lambda layout, opt: built.append(layout))
    monkeypatch.setattr(T, "PILOT_GIVE_UP", 0.0)
    out, notes = T.torch_layouts(X, y, K, "torch-adam", batch_size=20, batches=3,
                                 threads=1)
    assert built == ["embedding-bag"]
    assert 0 < out["sparse-mm"] < math.inf and notes["sparse-mm"].startswith("not built")
    built.clear()
    monkeypatch.setattr(T, "PILOT_GIVE_UP", math.inf)
    out, notes = T.torch_layouts(X, y, K, "torch-adam", batch_size=20, batches=3,
                                 threads=1)
    assert built == list(T.TORCH_LAYOUTS) and notes == {}


def test_a_layout_out_of_memory_in_the_pilot_leaves_the_other(monkeypatch):
    """A layout whose pilot runs out of memory gets inf and a note; the job runs on the
    other layout and says why in its info; the pilot runs once per key."""
    pytest.importorskip("torch")
    X, y, K = _problem(N=200)
    _patch_torch_model(monkeypatch, fail={"sparse-mm"})
    monkeypatch.setattr(T, "PILOT_GIVE_UP", math.inf)
    monkeypatch.setattr(T, "_LAYOUT_CACHE", {})
    out, notes = T.torch_layouts(X, y, K, "torch-sgd", batch_size=20, batches=3, threads=1)
    assert out["sparse-mm"] == math.inf and math.isfinite(out["embedding-bag"])
    assert notes["sparse-mm"].startswith("out of memory: RuntimeError")
    job = J.Job("toy", "torch-sgd", 0.5, 60.0, split="final", max_epochs=1, threads=1,
                options={"batch_size": 20})
    layout, t, notes = T._choose_layout(job, X, y, K, 20)
    assert layout == "embedding-bag" and "sparse-mm" in notes
    assert T._choose_layout(job, X, y, K, 20)[2] is notes          # cached


def test_every_layout_out_of_memory_is_a_memory_failure(monkeypatch):
    pytest.importorskip("torch")
    X, y, K = _problem(N=200)
    _patch_torch_model(monkeypatch, fail=set(T.TORCH_LAYOUTS))
    monkeypatch.setattr(T, "_LAYOUT_CACHE", {})
    job = J.Job("toy", "torch-sgd", 0.5, 60.0, split="final", max_epochs=1, threads=1,
                options={"batch_size": 20})
    with pytest.raises(MemoryError, match="every torch layout ran out of memory"):
        T._choose_layout(job, X, y, K, 20)
    assert J.classify_failure(MemoryError("x")) == "memory"


def test_the_pilot_frees_each_layout_by_reference_counts(monkeypatch):
    """Each layout's model (weights, gradient, optimiser state) is freed when the pilot
    is done with it, by reference counts alone (the garbage collector off): a model
    kept alive would hold K x D floats while the next is built."""
    pytest.importorskip("torch")
    import gc
    import weakref

    X, y, K = _problem(N=200)
    refs = []
    _patch_torch_model(monkeypatch, built=lambda layout, opt: refs.extend(
        weakref.ref(p) for g in opt.param_groups for p in g["params"]))
    monkeypatch.setattr(T, "PILOT_GIVE_UP", math.inf)
    T.torch_layouts(X, y, K, "torch-sgd", batch_size=20, batches=2, threads=1)  # warm-up
    refs.clear()
    gc.collect()
    gc.disable()
    try:
        T.torch_layouts(X, y, K, "torch-sgd", batch_size=20, batches=2, threads=1)
        assert len(refs) == 2 and all(r() is None for r in refs)
    finally:
        gc.enable()


def test_torch_sampled_softmax_step_and_weights():
    pytest.importorskip("torch")
    import torch

    X, y, K = _problem(K=6)
    data = T._TorchData(X, y)
    data.epoch(np.arange(X.shape[0]))
    torch.manual_seed(0)
    loss, opt, weights = T._torch_sampled(X.shape[1], K, 0.5, m=3)
    W0 = weights().copy()
    opt.zero_grad()
    L = loss(data, 0, 40)
    L.backward()
    # from W = 0 every candidate logit is 0: the loss is log(1 + non-masked negatives)
    assert 0 < float(L.detach()) <= math.log(1 + 3) + 1e-6
    g = opt.param_groups[0]["params"][0].grad.coalesce()
    touched = set(g.indices()[0].tolist())
    assert touched <= set(range(K)) and touched
    opt.step()
    W1 = weights()
    assert set(np.nonzero(np.abs(W1 - W0).sum(axis=1))[0]) <= touched
    assert evaluate(X, y, W1, precision="float64").log_loss == pytest.approx(
        _torch_full_loss(X, y, W1), rel=1e-9)


@pytest.mark.parametrize("method,lr", [("torch-sgd", 0.5), ("torch-adam", 0.01),
                                       ("torch-sampled", 0.5)])
def test_torch_runner(method, lr):
    pytest.importorskip("torch")
    X, y, K = _problem(N=400)
    res = J.run_job(_job(method, lr, max_epochs=3, checkpoints=[1e-9],
                         options={"batch_size": 50}),
                    problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "completed", res["reason"]
    pts = pd.DataFrame(res["points"])
    assert pts.train_log_loss.iloc[0] == pytest.approx(math.log(K), rel=1e-6)
    assert pts.epoch.iloc[-1] == 3 and res["info"]["steps"] == 3 * 8
    assert pts.train_log_loss.iloc[-1] < math.log(K)
    if method != "torch-sampled":
        assert res["info"]["layout"] in T.TORCH_LAYOUTS
        assert set(res["info"]["layout_pilot_seconds_per_step"]) == set(T.TORCH_LAYOUTS)


# ---------------------------------------------------------------------------
# the child process: memory cap, wall-clock kill, peak memory
# ---------------------------------------------------------------------------

def test_isolated_run_reports_points_and_peak_memory(tmp_path):
    X, y, K = _problem()
    path = tmp_path / "p.npz"
    PR.save_problem(path, X, y, X[:100], y[:100], K)
    out = ISO.run_isolated([J.Job(str(path), "umax", 0.5, 30.0, max_epochs=3,
                                  checkpoints=[1e-9]),
                          J.Job(str(path), "exact", None, 30.0)],
                         memory_cap_gb=4, wall_seconds=300, workdir=tmp_path)
    assert out["returncode"] == 0 and not out["killed"]
    assert [r["status"] for r in out["results"]] == ["completed", "completed"]
    assert 50 * 2 ** 20 < out["max_rss_bytes"] < 4 * 2 ** 30
    pts = out["results"][0]["points"]
    assert pts[0]["test_log_loss"] == pytest.approx(math.log(K), rel=1e-6)


def test_isolated_run_reports_the_allocation_that_breaks_the_memory_cap(tmp_path):
    # K x D = 3,000 x 40,000 float64 is 0.9 GiB; L-BFGS needs several such arrays
    rng = np.random.default_rng(0)
    N, D, K = 200, 40_000, 3_000
    X = sp.csr_matrix((np.ones(N), (np.arange(N), rng.integers(0, D, N))), shape=(N, D))
    y = np.arange(N) % K
    path = tmp_path / "big.npz"
    PR.save_problem(path, X, y, X, y, K)
    out = ISO.run_isolated([J.Job(str(path), "exact", None, 30.0, eval_rows=50)],
                           memory_cap_gb=2.5, wall_seconds=300, workdir=tmp_path)
    r = out["results"][0]
    assert r["status"] == "memory", (r["reason"], out["log"])
    assert "allocate" in r["reason"]
    assert out["max_rss_bytes"] < 2.5 * 2 ** 30


def test_run_jobs_reports_each_jobs_own_peak_memory(monkeypatch):
    """The peak resident set size is reset before each job: a small job after a big one
    reports its own peak, not the process's."""
    if not timing.reset_peak_rss():
        pytest.skip("this system cannot reset the peak resident set size")
    before = timing.peak_rss_bytes()

    def fake(job, on_point=None, problem=None):
        if job.method == "exact":
            a = np.ones(400 * 2 ** 20 // 8)      # 400 MiB, touched
            del a
        return {"job": {}, "status": "completed", "reason": "", "points": []}

    monkeypatch.setattr(J, "run_job", fake)
    out = J.run_jobs([J.Job("d", "exact", None, 1.0), J.Job("d", "umax", 0.1, 1.0)])
    big, small = (r["peak_rss_bytes"] for r in out)
    assert all(r["peak_rss_reset"] for r in out)
    assert big > before + 300 * 2 ** 20 and small < big - 300 * 2 ** 20


def test_run_jobs_collects_cycles_after_the_first_job_and_memory_failures(monkeypatch):
    import gc

    calls = []
    statuses = iter(["completed", "completed", "memory", "completed"])

    def fake(job, on_point=None, problem=None):
        calls.append("job")
        return {"job": {}, "status": next(statuses), "reason": "", "points": []}

    monkeypatch.setattr(J, "run_job", fake)
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append("gc") or 0)
    J.run_jobs([J.Job("d", "umax", 0.1, 1.0)] * 4)
    assert calls == ["job", "gc", "job", "job", "gc", "job"]


def test_isolated_run_is_killed_at_the_wall_clock_limit(tmp_path):
    X, y, K = _problem(N=2000, D=50)
    path = tmp_path / "p.npz"
    PR.save_problem(path, X, y, X, y, K)
    out = ISO.run_isolated([J.Job(str(path), "umax", 0.01, 1e6, max_epochs=10 ** 6,
                                  checkpoints=list(np.linspace(0.01, 1000, 10 ** 5)))],
                         memory_cap_gb=4, wall_seconds=6, workdir=tmp_path)
    assert out["killed"] and out["returncode"] != 0
    r = out["results"][0]
    assert r["status"] == "killed" and "wall-clock limit of 6 s" in r["reason"]
    assert out["wall_seconds"] < 30


# ---------------------------------------------------------------------------
# notebook 12's plan
# ---------------------------------------------------------------------------

def test_plan_methods_skips_a_missing_library_and_refuses_bad_requests(monkeypatch):
    monkeypatch.setattr(RM, "available", lambda fam: (fam != "torch", "no torch here"
                                                      if fam == "torch" else f"{fam} 1.0"))
    run, skipped, versions = RM.plan_methods(["umax", "torch-sgd", "sklearn-lbfgs"], ["a"],
                                             {"a": 1})
    assert run == ["umax", "sklearn-lbfgs"] and skipped == {"torch-sgd": "no torch here"}
    assert set(versions) == {"ours", "sklearn"}
    with pytest.raises(ValueError, match=r"unknown method\(s\) \['nope'\]"):
        RM.plan_methods(["nope"], ["a"], {"a": 1})
    with pytest.raises(ValueError, match=r"caps has no entry for \['b'\]"):
        RM.plan_methods(["umax"], ["a", "b"], {"a": 1})


def test_minibatch_implicit_takes_n_and_m_from_the_job_options_when_given():
    # the notebook's jobs carry no such options and run BATCH_IMPLICIT's n and m; a job
    # that names them (a candidate configuration of params/race.yaml, benchmarks/bench_pieces.py)
    # runs those instead
    X, y, K = _problem(K=8)
    problem = (X, y, K, {"test": (X, y)})

    def final(options):
        res = J.run_job(J.Job("unused", "implicit-batch", 1.0, 60.0, max_epochs=2,
                              options=options, threads=1), problem=problem)
        assert res["status"] == "completed", res["reason"]
        return res["points"][-1]["test_log_loss"]

    n, m = OURS.BATCH_IMPLICIT["implicit-batch"]
    assert final({}) == final({"batch_size": n, "n_sampled": m})
    assert final({}) != final({"batch_size": 5, "n_sampled": 3})


# ---------------------------------------------------------------------------
# one rule over equal candidate sets, softmax SGD, threads
# ---------------------------------------------------------------------------

def test_candidates_are_every_rate_times_every_structural_option():
    grids = {"umax": [0.01, 0.1], "exact": None}
    structures = {"umax": [{"n_sampled": 1}, {"n_sampled": 5}]}
    got = RUN.candidates("umax", grids, structures)
    assert got == [(0.01, {"n_sampled": 1}), (0.1, {"n_sampled": 1}),
                   (0.01, {"n_sampled": 5}), (0.1, {"n_sampled": 5})]
    assert RUN.candidates("umax", grids) == [(0.01, {}), (0.1, {})]
    from scalable_softmax.repro.race.run import check_search_spaces
    assert check_search_spaces(["umax", "exact"], grids, structures) == 4
    assert RUN.config_label({"batch_size": 5, "n_sampled": 20}) == "n=5 m=20"
    assert RUN.config_label({"negatives": 100}) == "negatives=100"
    assert RUN.config_label({}) == ""


def test_candidates_search_the_schedules_decay_for_every_method():
    """``decays`` (params/race.yaml) multiplies every method's candidates alike; a
    candidate's decay is its options' ``lr_decay``, which the job takes as its
    schedule (not a method option) and the labels and tables show."""
    grids = {"umax": [0.01, 0.1], "softmax-sgd": [30, 100]}
    structures = {"umax": [{"n_sampled": 1}], "softmax-sgd": [{"batch_size": 100}]}
    got = RUN.candidates("umax", grids, structures, decays=[0.9, 0.97])
    assert got == [(0.01, {"n_sampled": 1, "lr_decay": 0.9}),
                   (0.1, {"n_sampled": 1, "lr_decay": 0.9}),
                   (0.01, {"n_sampled": 1, "lr_decay": 0.97}),
                   (0.1, {"n_sampled": 1, "lr_decay": 0.97})]
    assert RUN.check_search_spaces(["umax", "softmax-sgd"], grids, structures) == 2
    assert len(RUN.candidates("softmax-sgd", grids, structures, [0.9, 0.97])) == 4
    assert RUN.config_label(got[2][1]) == "n_sampled=1 decay=0.97"
    assert RUN.config_label({"batch_size": 1, "n_sampled": 1, "lr_decay": 0.9}) == \
        "n=1 m=1 decay=0.9"
    assert RUN.config_label({"lr_decay": 0.97}) == "decay=0.97"
    for bad in ([], [0.0], [1.5], ["0.9"]):
        with pytest.raises(ValueError, match="decays"):
            RUN.candidates("umax", grids, structures, decays=bad)
    job = RUN._job("d", "umax", 0.1, 1.0, got[2][1], None, seed=0, report_test=False,
                   common=dict(holdout=0.1, split_seed=0, eval_rows=None, max_epochs=5,
                               threads=1, first=1 / 8))
    assert job.lr_decay == 0.97 and job.options == {"n_sampled": 1}
    assert J.Job("d", "umax", 0.1, 1.0).lr_decay == 0.9     # the papers' schedule


def test_tuning_and_seeds_carry_the_chosen_decay(monkeypatch):
    """A tuning table has each candidate's decay; the seeds run the chosen one, and the
    targets and curves rows say which decay each run trained with."""
    seen = []

    def fake_grouped(jobs, **kw):
        seen.extend(jobs)
        return [{"job": dataclasses.asdict(j), "status": "target", "reason": "",
                 "arrivals": {"0.05": 1.0 if j.lr_decay == 0.97 else 2.0},
                 "points": [{"seconds": 1.0, "epoch": 1.0, "val_log_loss": 1.0}],
                 "info": {}} for j in jobs]

    monkeypatch.setattr(RUN, "run_grouped", fake_grouped)
    common = dict(holdout=0.1, split_seed=0, eval_rows=None, max_epochs=5, threads=1)
    tuning = RUN.tune("w", "d", ["umax", "exact"], grids={"umax": [0.1, 1.0]},
                      structures={"umax": [{"n_sampled": 1}]}, options={},
                      targets={0.05: 1.0}, cap=1.0, decays=[0.9, 0.97], **common)
    assert list(tuning.lr_decay) == [0.9, 0.9, 0.97, 0.97]
    chosen = RUN.choose(tuning)
    assert chosen.iloc[0].config == "n_sampled=1 decay=0.97"
    seen.clear()
    res = RUN.run_seeds("w", "d", ["umax", "exact"], chosen, seeds=[0, 1], options={},
                        targets={0.05: 1.0}, cap=1.0, **common)
    assert [j.lr_decay for j in seen if j.method == "umax"] == [0.97, 0.97]
    rows = RUN.target_rows(res, {0.05: 1.0})
    assert set(rows[rows.method == "umax"].lr_decay) == {0.97}
    assert rows[rows.method == "exact"].lr_decay.isna().all()
    assert set(RUN.curve_rows(res).query("method == 'umax'").lr_decay) == {0.97}


def test_choose_rates_chooses_the_rate_and_the_structure_together():
    rows = [("n=1 m=1", 1.0, 3.0), ("n=1 m=1", 10.0, 2.5), ("n=5 m=20", 1.0, 2.4),
            ("n=5 m=20", 10.0, 2.6), ("n=10 m=10", 1.0, 2.4), ("n=10 m=10", 10.0, np.inf)]
    tuning = pd.DataFrame([dict(dataset="a", method="implicit-batch", config=c, lr=lr,
                                options=json.dumps({"c": c}), val_log_loss=v, layout="")
                           for c, lr, v in rows])
    r = RUN.choose_rates(tuning).iloc[0]
    # the lowest score wins; its tie with n=10 m=10 goes to the structure tried first
    assert (r.config, r.lr, r.val_log_loss) == ("n=5 m=20", 1.0, 2.4)
    assert json.loads(r.options) == {"c": "n=5 m=20"}
    assert r.candidates == 6 and r.configs == "n=1 m=1 | n=5 m=20 | n=10 m=10"
    assert r.grid == "1 10" and r.at_grid_edge == "lowest"
    # a table without structures is chosen as before (one candidate per rate)
    plain = RUN.choose_rates(tuning[tuning.config == "n=1 m=1"].drop(columns=["config",
                                                                          "options"]))
    assert plain.iloc[0].lr == 10.0 and plain.iloc[0].config == ""


def test_our_trainer_asks_for_threads_then_falls_back(monkeypatch):
    """threads > 1: the trainer is asked for ``threads`` (the library's one thread knob,
    never an older alias, which would warn), then with nothing (one thread), saying
    why; threads = 1 asks nothing."""
    import scalable_softmax.methods as M

    asked = []

    def fake(accepts):
        class T:
            def __init__(self, X, y, K, *, mu, batch_size, n_sampled, **opts):
                asked.append(dict(opts))
                if not set(opts) <= accepts:
                    raise ValueError(f"unknown option(s) {sorted(set(opts) - accepts)}")
                self.batch_size, self.n_sampled = batch_size or 1, n_sampled or 1
        return T

    X, y, K = _problem(N=50, K=4)
    for accepts, used, opts in [({"threads"}, 2, {"threads": 2}), (set(), 1, {})]:
        asked.clear()
        monkeypatch.setattr(M, "get_trainer_class", lambda name, a=accepts: fake(a))
        tr, got, got_opts, note = OURS._our_trainer("umax", X, y, K, 2,
                                                    batch_size=None, n_sampled=1, kw={})
        assert (got, got_opts) == (used, opts), accepts
        assert asked[-1] == opts and (note == "") == (len(asked) == 1)
        assert note == "" or "unknown option(s) ['threads']" in note
    asked.clear()
    OURS._our_trainer("implicit", X, y, K, 1, batch_size=None, n_sampled=None, kw={})
    assert asked == [{}]
    # a genuine error of the last request is raised, not hidden
    monkeypatch.setattr(M, "get_trainer_class", lambda name: fake(set()))
    with pytest.raises(ValueError, match="unknown option"):
        OURS._our_trainer("is", X, y, K, 2, batch_size=None, n_sampled=None,
                          kw={"bogus": 1})


def test_our_threaded_trainers_take_threads_without_a_deprecation_warning():
    """The race's threaded runs of U-max and softmax SGD get their 2 threads from
    ``threads`` alone: no older alias, so no DeprecationWarning and no refusal."""
    import warnings

    X, y, K = _problem(N=60, K=4)
    for library, kw in (("umax", {"n_sampled": 1}), ("softmax-sgd", {"batch_size": 10})):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            tr, used, opts, note = OURS._our_trainer(
                library, X, y, K, 2, batch_size=kw.get("batch_size"),
                n_sampled=kw.get("n_sampled"), kw={})
        assert (used, opts, note) == (2, {"threads": 2}, ""), (library, note)


def test_implicit_batch_with_one_point_and_one_class_is_implicit_sgd():
    X, y, K = _problem(N=300, K=8)
    problem = (X, y, K, _sets(X, y))
    # one thread: the serial kernels, equal bit for bit (2 threads run Hogwild, racy)
    one = J.run_job(_job("implicit-batch", 1.0, max_epochs=2, threads=1,
                         options={"batch_size": 1, "n_sampled": 1}), problem=problem)
    ref = J.run_job(_job("implicit", 1.0, max_epochs=2, threads=1), problem=problem)
    assert one["status"] == ref["status"] == "completed", (one["reason"], ref["reason"])
    assert one["info"]["library"] == "implicit"
    assert [p["train_log_loss"] for p in one["points"]] == \
        [p["train_log_loss"] for p in ref["points"]]


@pytest.mark.parametrize("method,options,library_kw", [
    ("softmax-sgd", {"batch_size": 30}, {"batch_size": 30}),
    ("umax", {"n_sampled": 3}, {"n_sampled": 3}),
    ("is", {"n_sampled": 2}, {"batch_size": 100, "n_sampled": 2})])
def test_a_structural_option_reaches_our_trainer(method, options, library_kw, monkeypatch):
    """A job's structural option is the library trainer's: replaying the same epochs
    through ``fit``'s trainer with those settings gives the job's last point (its
    epochs run whole here: the first piece is the epoch, and so is every later one)."""
    from scalable_softmax.fit import make_order
    from scalable_softmax.methods import get_trainer_class

    monkeypatch.setattr(OURS, "FIRST_PIECES", 1)
    monkeypatch.setattr(OURS, "MIN_PIECE_SECONDS", 1e9)
    X, y, K = _problem(N=300, K=8)
    res = J.run_job(_job(method, 0.5, max_epochs=2, options=options),
                    problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "completed", res["reason"]
    info = res["info"]
    assert {k: info[k] for k in library_kw} == library_kw
    assert 1 <= info["threads_used"] <= 2
    if info["threads_used"] > 1 and method != "softmax-sgd":
        return    # lock-free on 2 threads: not reproducible step by step
    tr = get_trainer_class(method)(X, y, K, mu=0.0, **library_kw, **info["thread_options"])
    tr.init_params("zero" if method == "softmax-sgd" else "logK")
    rng = np.random.default_rng(0)
    for e in (1, 2):
        tr.run_epoch(make_order(rng, X.shape[0], "shuffle"), 0.5 * 0.9 ** (e - 1),
                     int(rng.integers(0, 2 ** 63 - 1)))
    last = res["points"][-1]
    assert last["train_log_loss"] == pytest.approx(evaluate(X, y, tr.weights()).log_loss,
                                                   rel=1e-9)


def test_the_recorder_counts_the_process_cpu_seconds_while_training():
    rec = J._Recorder({}, [], 10.0)
    rec.start()
    t = time.perf_counter()
    while time.perf_counter() - t < 0.05:
        pass
    rec.stop()
    assert rec.busy_seconds == rec.seconds > 0.04
    assert 0 < rec.cpu_seconds
    rec.add_busy(1.0, 2.0)
    assert rec.busy_seconds == pytest.approx(rec.seconds + 1.0)


@pytest.mark.parametrize("method, options", [
    ("softmax-sgd", {"batch_size": 10}), ("implicit-batch", {"batch_size": 5, "n_sampled": 3}),
    ("umax", {}), ("is", {"n_sampled": 3})])
def test_our_runs_stop_inside_an_epoch_at_the_cap(method, options):
    """Every one of our runs cuts its epochs into pieces of whole steps (the first 1/256
    of an epoch), so a run whose epoch outlasts the cap stops at the first piece end
    past it, with a point there (as a PyTorch run stops at the first minibatch)."""
    X, y, K = _problem(N=3000, K=8)
    res = J.run_job(_job(method, 0.5, cap=1e-9, max_epochs=3, options=options),
                    problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "time cap", res["reason"]
    batch = res["info"]["batch_size"]
    first = batch * math.ceil(3000 / batch / OURS.FIRST_PIECES)
    assert f"after {first} of 3000 points" in res["reason"]
    assert res["points"][-1]["epoch"] == pytest.approx(first / 3000)


def test_pieces_follow_the_measured_speed_and_the_checkpoints():
    rec = J._Recorder({}, [1.0], cap=6.4)
    pieces = OURS.Pieces(N=10_000, batch=10, rec=rec)
    assert pieces.piece_size(10_000) == 40                 # 1/256 of the epoch, in steps
    pieces.measured(40, 0.004)                            # 10,000 points per second
    assert pieces.piece_size(10_000) == 160                # at most 4x the piece before
    pieces.size = 10_000
    assert pieces.piece_size(10_000) == 1000               # cap / 64 = 0.1 s
    rec.seconds = 0.97                                    # 0.03 s to the checkpoint
    assert pieces.piece_size(10_000) == 300
    rec.seconds, rec.pending = 0.9995, [1.0]              # at least MIN_PIECE_SECONDS
    assert pieces.piece_size(10_000) == 100
    assert pieces.piece_size(70) == 70                     # the rest of the epoch


@pytest.mark.parametrize("method, options", [
    ("umax", {"n_sampled": 3}), ("is", {"n_sampled": 2, "batch_size": 4}),
    ("implicit-batch", {"batch_size": 5, "n_sampled": 3})])
def test_a_run_in_pieces_is_the_trainer_on_those_pieces(method, options, monkeypatch):
    """With pieces of one step after the first (PIECE_FRACTION = MIN_PIECE_SECONDS = 0)
    the cut is known, and replaying it through the trainer, the piece at 0 with the
    epoch's seed and every other with piece_seed(seed, start), gives the run's points."""
    from scalable_softmax.fit import make_order
    from scalable_softmax.methods import get_trainer_class
    from scalable_softmax.protocols import fit_kwargs

    monkeypatch.setattr(OURS, "PIECE_FRACTION", 0.0)
    monkeypatch.setattr(OURS, "MIN_PIECE_SECONDS", 0.0)
    X, y, K = _problem(N=300, K=8)
    res = J.run_job(_job(method, 0.5, max_epochs=2, threads=1, options=options),
                    problem=(X, y, K, _sets(X, y)))
    assert res["status"] == "completed", res["reason"]
    info = res["info"]
    library = info["library"]
    kw = fit_kwargs("paper-text", "implicit" if method == "implicit-batch" else method)
    order, u_init = kw.pop("order"), kw.pop("u_init")
    kw.pop("lr_decay"), kw.pop("batch_size", None), kw.pop("n_sampled", None)
    tr = get_trainer_class(library)(X, y, K, mu=0.0, batch_size=info["batch_size"],
                                    n_sampled=info["n_sampled"], **kw)
    tr.init_params(u_init)
    rng, N, B = np.random.default_rng(0), X.shape[0], info["batch_size"]
    for e in (1, 2):
        # the run's first piece is 1 / FIRST_PIECES of an epoch, every later one a step
        first = B * math.ceil(N / B / OURS.FIRST_PIECES) if e == 1 else B
        idx = make_order(rng, N, order)
        lr, seed = 0.5 * 0.9 ** (e - 1), int(rng.integers(0, 2 ** 63 - 1))
        tr.run_epoch(idx[:first], lr, seed)
        for a in range(first, N, B):
            tr.run_epoch(idx[a:a + B], lr, piece_seed(seed, a))
    assert res["points"][-1]["train_log_loss"] == pytest.approx(
        evaluate(X, y, tr.weights()).log_loss, rel=1e-12)


def test_piece_seeds_differ_and_are_reproducible():
    seeds = [piece_seed(12345, a) for a in (40, 200, 1000)]
    assert len(set(seeds)) == 3 and all(0 <= s < 2 ** 63 for s in seeds)
    assert seeds == [piece_seed(12345, a) for a in (40, 200, 1000)]
    assert piece_seed(12346, 40) != seeds[0]


def test_the_pages_quote_the_piece_rule_from_the_code(monkeypatch):
    from scalable_softmax.repro.machinery.numbers import Tables

    assert Tables.piece_rule() == {"per_cap": 64, "min_ms": 10}
    monkeypatch.setattr(OURS, "PIECE_FRACTION", 1 / 32)
    monkeypatch.setattr(OURS, "MIN_PIECE_SECONDS", 0.025)
    assert Tables.piece_rule() == {"per_cap": 32, "min_ms": 25}


def test_setup_ours_is_the_notebooks_trainer():
    # the set-up the notebooks' runs and benchmarks/bench_pieces.py share
    X, y, K = _problem(N=120, K=6)
    tr, order, decay, info = OURS.setup_ours("implicit-batch", {"batch_size": 1,
                                                                "n_sampled": 1}, X, y, K, 1)
    assert info["library"] == "implicit" and type(tr).__name__ == "ImplicitTrainer"
    assert (order, decay) == ("shuffle", 0.9)
    tr, _, _, info = OURS.setup_ours("implicit-batch", {"batch_size": 5, "n_sampled": 20},
                                     X, y, K, 2)
    assert info["library"] == "implicit-batch" and (tr.batch_size, tr.n_sampled) == (5, 20)
    assert info["threads_used"] == 2
    tr, _, _, info = OURS.setup_ours("softmax-sgd", {"batch_size": 7}, X, y, K, 1)
    assert tr.batch_size == 7 and tr.u is None and info["threads_used"] == 1
    assert np.array_equal(tr.weights(), np.zeros((K, X.shape[1])))
    # the same trainer as a notebook job's run starts from
    res = J.run_job(_job("softmax-sgd", 0.5, max_epochs=1, options={"batch_size": 7}),
                    problem=(X, y, K, _sets(X, y)))
    assert res["info"]["batch_size"] == 7 and res["info"]["library"] == "softmax-sgd"
