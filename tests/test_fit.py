"""The one API, scalable_softmax.fit.fit: validation, history, determinism,
divergence handling and convergence of vanilla SGD and U-max to the ridge optimum."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import scipy.optimize as so
import scipy.sparse as sp

from scalable_softmax import objectives as ob
from scalable_softmax.fit import (
    DivergenceWarning,
    FitResult,
    assemble_history,
    default_eval_epochs,
    fit,
    run_epochs,
)
from scalable_softmax.protocols import FitConfig


def _learnable(N=200, D=5, K=4, seed=0, dense=True):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D)) / np.sqrt(D)
    y = np.argmax(X @ rng.standard_normal((K, D)).T * 3 + rng.gumbel(size=(N, K)), axis=1)
    return (X if dense else sp.csr_matrix(X)), y, K


@pytest.fixture(scope="module")
def data():
    return _learnable()


# ---------------------------------------------------------------------------
# validation: one case per bad argument, checked before any work
# ---------------------------------------------------------------------------

X0, Y0, _ = _learnable(N=30, D=4, K=3, seed=1)

BAD = [
    (dict(method="sgd-magic"), r"unknown method 'sgd-magic'; choose one of: .*umax.*vanilla"),
    (dict(lr=-0.1), r"lr \(learning rate\) must be a finite number > 0; got -0.1"),
    (dict(lr=0.0), r"lr .* > 0; got 0.0"),
    (dict(lr=float("nan")), r"lr .* finite"),
    (dict(lr=float("inf")), r"lr .* finite"),
    (dict(lr="0.1"), r"lr .* got '0.1'"),
    (dict(epochs=0), r"epochs must be an integer >= 1; got 0"),
    (dict(epochs=2.5), r"epochs must be an integer"),
    (dict(lr_decay=0.0), r"lr_decay must be a number in \(0, 1\]"),
    (dict(lr_decay=1.5), r"lr_decay must be a number in \(0, 1\].*got 1.5"),
    (dict(mu=-1.0), r"mu \(ridge parameter\) must be a finite number >= 0; got -1.0"),
    (dict(order="random"), r"unknown order 'random'; choose one of: shuffle, uniform, file"),
    (dict(seed=-3), r"seed must be an integer >= 0"),
    (dict(u_init="one"), r"unknown u_init 'one'; choose one of: zero, logK, exact"),
    (dict(batch_size=0), r"batch_size must be None or an integer >= 1"),
    (dict(n_sampled=0), r"n_sampled must be None or an integer >= 1"),
    (dict(eval_rows=0), r"eval_rows must be None or an integer >= 1"),
    (dict(eval_epochs=[0, 99]), r"eval_epochs must hold integers in 0..epochs = 0..3; got \[99\]"),
    (dict(y=np.r_[Y0[:-1], 3], K=3),
     r"labels in y must lie in 0..K-1 = 0..2; found values in 0..3"),
    (dict(y=np.r_[Y0[:-1], -1]), r"labels in y must lie in 0..K-1"),
    (dict(y=Y0 + 0.5), r"y must hold integer class labels"),
    (dict(y=Y0[:-1]), r"y has 29 labels but its X has 30 rows"),
    (dict(y=Y0.reshape(-1, 1)), r"y must be a 1-D array"),
    (dict(X=X0[:0], y=Y0[:0]), r"X is empty"),
    (dict(X=X0.ravel()), r"X must be 2-D \(N x D\)"),
    (dict(X=np.where(np.arange(30)[:, None] == 4, np.nan, X0)), r"X contains non-finite"),
    (dict(X=sp.csr_matrix(np.where(np.arange(30)[:, None] == 4, np.inf, X0))),
     r"X contains non-finite"),
    (dict(K=1), r"K \(number of classes\) must be an integer >= 2"),
    (dict(K=2), r"labels in y must lie in 0..K-1 = 0..1; found values in 0..2 \(pass a larger K\)"),
    (dict(eval_sets={"test": (X0[:, :3], Y0)}), r"eval_sets\['test'\] X has 3 columns"),
    (dict(eval_sets={"test": (X0, Y0 + 5)}), r"eval_sets\['test'\] y must lie|labels in eval_sets"),
    (dict(eval_sets=[(X0, Y0)]), r"eval_sets must be a dict"),
    (dict(bogus_option=3), r"unknown option\(s\) 'bogus_option' for method 'umax'; accepted"),
    (dict(delta0=0.0), r"delta0 .* > 0"),
]


@pytest.mark.parametrize("kwargs,match", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_invalid_arguments_raise_before_work(kwargs, match, monkeypatch):
    # any attempt to train would call Trainer.init_params: make that fail loudly
    from scalable_softmax.methods import sgd

    def boom(self, *a, **k):
        raise AssertionError("work started before validation")
    monkeypatch.setattr(sgd._DoubleSumTrainer, "init_params", boom)
    args = dict(X=X0, y=Y0, method="umax", lr=0.1, epochs=3, progress=False)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        fit(**args)


def test_all_zero_labels_need_K():
    with pytest.raises(ValueError, match="pass K >= 2"):
        fit(X0, np.zeros(30, int), "umax", lr=0.1, epochs=1, progress=False)


def test_float_integral_labels_accepted():
    res = fit(X0, Y0.astype(float), "umax", lr=0.1, epochs=1, progress=False, eval_epochs=[])
    assert res.W.shape == (3, 4)


# ---------------------------------------------------------------------------
# result, history, evaluation
# ---------------------------------------------------------------------------

def test_default_eval_epochs():
    assert default_eval_epochs(50) == [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50]
    assert default_eval_epochs(3) == [0, 1, 2, 3]


def test_history_columns_and_eval_sets(data):
    X, y, K = data
    Xt, yt, _ = _learnable(N=80, seed=5)
    res = fit(X, y, "umax", lr=0.3, epochs=6, eval_epochs=[0, 2, 6],
              eval_sets={"train": (X, y), "test": (Xt, yt)}, progress=False)
    assert isinstance(res, FitResult) and res.method == "umax" and not res.diverged
    h = res.history
    assert list(h.columns) == ["epoch", "steps", "seconds", "lr", "evaluated", "diverged",
                               "train_log_loss", "train_error", "train_defective",
                               "test_log_loss", "test_error", "test_defective"]
    assert list(h.epoch) == list(range(7))
    assert list(h.steps) == [200 * e for e in range(7)]
    assert list(h.epoch[h.evaluated]) == [0, 2, 6]
    assert h.seconds.is_monotonic_increasing and h.seconds.iloc[0] == 0.0
    np.testing.assert_allclose(h.lr.iloc[1:], 0.3 * 0.9 ** np.arange(6))
    assert not h.diverged.any()
    ev = h[h.evaluated]
    assert ev[["train_log_loss", "test_log_loss"]].notna().all().all()
    assert h[~h.evaluated][["train_log_loss", "test_error"]].isna().all().all()
    # the numbers are the exact metrics of the final weights (fit evaluates with the
    # evaluator's default float32 scores: agreement to ~1e-7, not 1e-12)
    last = h.iloc[-1]
    assert np.isclose(last.test_log_loss, ob.log_loss(Xt, yt, res.W), rtol=1e-6)
    assert np.isclose(last.train_error, ob.error_rate(X, y, res.W))
    assert np.isclose(last.train_defective, ob.defective_metric(X, y, res.W), rtol=1e-6)
    assert np.isclose(h.train_log_loss.iloc[0], np.log(K))
    assert last.train_log_loss < np.log(K) - 0.1
    assert res.u.shape == (200,)
    assert list(res.extra.columns[:1]) == ["epoch"] and len(res.extra) == 6
    assert "u_resets" in res.extra
    assert res.params["method"] == "umax" and res.params["K"] == K
    assert res.params["eval_epochs"] == [0, 2, 6] and res.params["eval_sets"] == ["train", "test"]


def test_default_eval_set_is_train_and_empty_eval(data):
    X, y, K = data
    res = fit(X, y, "vanilla", lr=0.01, epochs=2, progress=False)
    assert "train_log_loss" in res.history and res.history.evaluated.all()
    res = fit(X, y, "vanilla", lr=0.01, epochs=2, progress=False, eval_epochs=[])
    assert not res.history.evaluated.any()
    assert res.history.train_log_loss.isna().all()


def test_eval_rows_subsample(data):
    X, y, K = data
    res = fit(X, y, "umax", lr=0.1, epochs=2, progress=False, eval_rows=50, eval_epochs=[2])
    full = ob.log_loss(X, y, res.W)
    v = res.history.train_log_loss.iloc[-1]
    assert np.isfinite(v) and v != pytest.approx(full, rel=1e-12)
    # more rows than the set has: the whole set
    res = fit(X, y, "umax", lr=0.1, epochs=2, progress=False, eval_rows=10_000, eval_epochs=[2])
    assert res.history.train_log_loss.iloc[-1] == pytest.approx(ob.log_loss(X, y, res.W),
                                                                rel=1e-6)   # float32 scores


@pytest.mark.parametrize("order", ["shuffle", "uniform", "file"])
def test_same_seed_bit_identical_and_seeds_differ(data, order):
    X, y, K = data
    a = fit(X, y, "umax", lr=0.2, epochs=3, seed=7, order=order, progress=False)
    b = fit(X, y, "umax", lr=0.2, epochs=3, seed=7, order=order, progress=False,
            eval_epochs=[1])           # evaluation does not perturb training
    c = fit(X, y, "umax", lr=0.2, epochs=3, seed=8, order=order, progress=False)
    a2 = fit(X, y, "umax", lr=0.2, epochs=3, seed=7, order=order, progress=False)
    assert np.array_equal(a.W, b.W) and np.array_equal(a.u, b.u)
    assert np.array_equal(a.W, a2.W) and np.array_equal(a.u, a2.u)
    assert not np.array_equal(a.W, c.W)
    cols = [c_ for c_ in a.history.columns if c_ != "seconds"]
    pd.testing.assert_frame_equal(a.history[cols], a2.history[cols])
    pd.testing.assert_frame_equal(a.extra, a2.extra)


def test_raman_variants_run(data):
    X, y, K = data
    for variant in ("umax", "vanilla"):
        res = fit(X, y, "raman", lr=0.05, epochs=3, progress=False, variant=variant,
                  u_init="logK")
        assert not res.diverged and res.history.train_log_loss.iloc[-1] < np.log(K)


# ---------------------------------------------------------------------------
# divergence
# ---------------------------------------------------------------------------

def test_vanilla_diverges_and_returns_normally_umax_does_not():
    # u = 0 << delta quickly at this learning rate: exp(delta - u) overflows
    rng = np.random.default_rng(3)
    X = rng.standard_normal((60, 6)) * 3.0
    y = rng.integers(0, 10, 60)
    with pytest.warns(DivergenceWarning, match=r"diverged at epoch 1, step \d+.*smaller lr"):
        res = fit(X, y, "vanilla", lr=10.0, epochs=5, progress=False, K=10)
    assert res.diverged and res.diverged_at[0] == 1 and res.diverged_at[1] >= 0
    assert res.diverged_reason == "a training step produced a non-finite value"
    h = res.history
    assert h.diverged.iloc[-1] and not h.diverged.iloc[:-1].any()
    assert h.train_log_loss.iloc[-1] == math.inf and math.isnan(h.train_error.iloc[-1])
    assert len(h) == 2                              # nothing after the diverged epoch
    assert h.steps.iloc[-1] == res.diverged_at[1]
    ok = fit(X, y, "umax", lr=10.0, epochs=5, progress=False, K=10)
    assert not ok.diverged and np.all(np.isfinite(ok.history.train_log_loss))
    assert np.all(ok.u >= 0)


# ---------------------------------------------------------------------------
# convergence to the exact ridge optimum
# ---------------------------------------------------------------------------

def test_umax_and_vanilla_approach_lbfgs_ridge_optimum(data):
    X, y, K = data
    N, D = X.shape
    mu = 1.0

    def f(w):
        return -ob.ridge_log_likelihood(X, y, w.reshape(K, D), mu)

    def g(w):
        return -ob.ridge_log_likelihood_grad(X, y, w.reshape(K, D), mu).ravel()
    opt = so.minimize(f, np.zeros(K * D), jac=g, method="L-BFGS-B",
                      options=dict(gtol=1e-10, maxiter=2000))
    assert opt.success
    W_star, f_star = opt.x.reshape(K, D), opt.fun
    gap0 = (f(np.zeros(K * D)) - f_star) / N           # ~0.56 per datapoint
    for method, lr, tol_gap, tol_dist in (("umax", 0.3, 1e-3, 0.05),
                                          ("vanilla", 0.03, 1e-2, 0.15)):
        res = fit(X, y, method, lr=lr, epochs=100, lr_decay=0.95, mu=mu, progress=False,
                  eval_epochs=[])
        gap = (f(res.W.ravel()) - f_star) / N
        dist = np.linalg.norm(res.W - W_star) / np.linalg.norm(W_star)
        assert 0 <= gap < tol_gap < gap0 / 50, (method, gap)
        assert dist < tol_dist, (method, dist)


def test_fit_timings_split_the_call():
    """``FitResult.timings``: every part is non-negative and the parts never exceed the
    whole call (the remainder is bookkeeping)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 6))
    y = rng.integers(0, 4, 300)
    res = fit(X, y, "umax", lr=0.1, epochs=3, progress=False, eval_epochs=[0, 1, 2, 3])
    t = res.timings
    assert set(t) == {"setup", "train", "eval", "total"}
    assert all(v >= 0 for v in t.values())
    assert t["setup"] + t["train"] + t["eval"] <= t["total"] + 1e-9
    assert t["train"] == pytest.approx(float(res.history.seconds.iloc[-1]))
    assert t["eval"] > 0            # four evaluations were made
    no_eval = fit(X, y, "umax", lr=0.1, epochs=2, progress=False, eval_epochs=[])
    assert no_eval.timings["eval"] == 0.0


# ---------------------------------------------------------------------------
# divergence is reported, and the driver's parts
# ---------------------------------------------------------------------------

def _diverging():
    rng = np.random.default_rng(0)
    return rng.standard_normal((300, 5)), rng.integers(0, 4, 300)


def test_divergence_warns_names_the_epoch_and_what_to_do(tmp_path):
    X, y = _diverging()
    with pytest.warns(DivergenceWarning) as rec:
        res = fit(X, y, "vanilla", lr=100, epochs=5, progress=False)
    assert len(rec) == 1 and issubclass(DivergenceWarning, UserWarning)
    msg = str(rec[0].message)
    assert f"epoch {res.diverged_at[0]}" in msg and "lr=100" in msg
    assert "non-finite" in msg and "smaller lr" in msg
    assert res.diverged and res.diverged_reason
    # stored and read back; a file written before the reason was recorded loads as None
    back = FitResult.load(res.save(tmp_path / "div.npz"))
    assert back.diverged_at == res.diverged_at
    assert back.diverged_reason == res.diverged_reason
    import json
    with np.load(tmp_path / "div.npz") as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"][()]))
    del meta["diverged_reason"]
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(tmp_path / "old.npz", **arrays)
    old = FitResult.load(tmp_path / "old.npz")
    assert old.diverged and old.diverged_reason is None


def test_divergence_found_by_an_evaluation_names_the_set(monkeypatch):
    """Finite weights whose log-loss is not finite: the reason names the set."""
    import importlib

    ev_mod = importlib.import_module("scalable_softmax.evaluate")

    X, y = _diverging()
    real = ev_mod.evaluate

    def inf_on_epoch_2(Xe, ye, W, **kw):
        out = real(Xe, ye, W, **kw)
        calls.append(1)
        if len(calls) == 3:                    # epochs 0, 1, then 2
            return dataclasses.replace(out, log_loss=math.inf)
        return out

    calls = []
    monkeypatch.setattr(ev_mod, "evaluate", inf_on_epoch_2)
    with pytest.warns(DivergenceWarning, match="epoch 2: the log-loss on the 'train' set"):
        res = fit(X, y, "umax", lr=0.1, epochs=4, progress=False, eval_epochs=[0, 1, 2, 4])
    assert res.diverged_at == (2, -1) and len(res.history) == 3


def test_a_run_that_does_not_diverge_does_not_warn():
    X, y = _diverging()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DivergenceWarning)
        res = fit(X, y, "umax", lr=0.1, epochs=3, progress=False)
    assert not res.diverged and res.diverged_reason is None


def test_run_epochs_and_assemble_history_give_fits_history():
    """The epoch loop and the history assembly, called on their own, give ``fit``'s
    history and weights bit for bit."""
    from scalable_softmax.fit import _Monitor
    from scalable_softmax.methods import get_trainer_class

    X, y, K = _learnable(N=120, D=5, K=4, seed=4, dense=False)
    res = fit(X, y, "umax", lr=0.2, epochs=4, seed=7, progress=False, K=K,
              eval_epochs=[0, 2, 4])
    Xc = sp.csr_matrix(X, dtype=np.float64)
    trainer = get_trainer_class("umax")(Xc, y, K, mu=0.0, batch_size=None, n_sampled=None)
    trainer.init_params("zero")
    trainer.warmup()
    sets = {"train": (Xc, y)}
    config = FitConfig.make("umax", 0.2, epochs=4, lr_decay=0.9, order="shuffle", seed=7,
                            eval_epochs=[0, 2, 4], progress=False).resolve()
    run = run_epochs(trainer, _Monitor(sets, None, 7), config, 120)
    rows, extras, diverged_at, reason = run[:4]
    assert diverged_at is None and reason is None and len(extras) == 4
    assert run.stopped_at == 4 and not run.stopped
    h = assemble_history(rows, sets)
    pd.testing.assert_frame_equal(h.drop(columns="seconds"),
                                  res.history.drop(columns="seconds"), check_exact=True)
    np.testing.assert_array_equal(trainer.weights(), res.W)
    assert list(h.columns[:6]) == ["epoch", "steps", "seconds", "lr", "evaluated",
                                   "diverged"]
    assert h.epoch.dtype == np.int64 and h.diverged.dtype == bool


def test_assemble_history_marks_a_diverged_row():
    from scalable_softmax.fit import diverged_metrics, empty_metrics

    rows = [dict(epoch=0, steps=0, seconds=0.0, lr=math.nan, evaluated=False,
                 diverged=False, **empty_metrics(["a", "b"])),
            dict(epoch=1, steps=3, seconds=0.1, lr=0.5, evaluated=False, diverged=True,
                 **diverged_metrics(["a", "b"]))]
    h = assemble_history(rows, ["a", "b"])
    assert list(h.columns[6:]) == ["a_log_loss", "a_error", "a_defective",
                                   "b_log_loss", "b_error", "b_defective"]
    assert h.a_log_loss.iloc[1] == math.inf and math.isnan(h.b_error.iloc[1])
    assert h.diverged.tolist() == [False, True] and h.steps.dtype == np.int64


# -- issue 53, item 4: labels that leave inferred classes empty --------------------------

def test_fit_warns_when_labels_leave_classes_empty():
    import warnings

    from scalable_softmax.fit import EmptyClassWarning

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4))
    y = 5 + np.arange(60) % 10                     # labels 5..14: classes 0..4 empty
    with pytest.warns(EmptyClassWarning, match=r"5 of the K = max\(y\) \+ 1 = 15 classes"
                      r".*classes 0, 1, 2, 3, 4.*numpy.unique") as rec:
        res = fit(X, y, "umax", lr=0.1, epochs=1, progress=False)
    assert res.n_classes == 15
    assert rec[0].filename == __file__             # points at the caller's line
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyClassWarning)
        fit(X, y, "umax", lr=0.1, epochs=1, progress=False, K=15)   # asked for: silent
        fit(X, y - 5, "umax", lr=0.1, epochs=1, progress=False)     # 0..9 all used
