"""evaluate() of a model with an intercept: ``evaluate(X, y, W, intercept=b)`` and
``evaluate(X, y, fit_result)`` score ``x . w_k + b_k``, as ``FitResult.predict_proba``
does, and agree with scikit-learn's ``log_loss`` of those probabilities; a ``W`` whose
width is not ``X``'s gets an error saying what to pass instead."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import scalable_softmax
import scalable_softmax.objectives as ob
from scalable_softmax.evaluate import evaluate
from scalable_softmax.fit import FitResult, fit

metrics = pytest.importorskip("sklearn.metrics")


def _shifted_blobs(N=300, D=6, K=4, seed=0):
    """Classes of very different frequencies and features far from 0: a model without
    an intercept scores them worse than one with."""
    rng = np.random.default_rng(seed)
    y = rng.choice(K, size=N, p=[0.55, 0.25, 0.15, 0.05]).astype(np.int64)
    centers = rng.standard_normal((K, D))
    X = 3.0 + centers[y] + rng.standard_normal((N, D))
    X[rng.random(X.shape) < 0.3] = 0.0
    return sp.csr_matrix(X), y


@pytest.fixture(scope="module", params=[1.0, 2.5], ids=["scaling1", "scaling2.5"])
def model(request):
    X, y = _shifted_blobs()
    res = fit(X, y, "implicit", 1.0, epochs=5, progress=False, fit_intercept=True,
              intercept_scaling=request.param)
    assert res.intercept is not None and np.any(res.intercept != 0)
    return X, y, res


def _sklearn_metrics(X, y, res):
    P = res.predict_proba(X)
    return (metrics.log_loss(y, P, labels=np.arange(res.n_classes)),
            float(np.mean(res.predict(X) != y)))


@pytest.mark.parametrize("how", ["fit_result", "intercept"])
def test_equals_log_loss_of_predict_proba(model, how):
    X, y, res = model
    ll, err = _sklearn_metrics(X, y, res)
    kw = dict(precision="float64")            # the reference arithmetic
    ev = (evaluate(X, y, res, **kw) if how == "fit_result"
          else evaluate(X, y, res.W, intercept=res.intercept, **kw))
    assert abs(ev.log_loss - ll) <= 1e-9
    assert ev.error == err
    # the default (float32 scores) is within its documented 1e-6 relative
    fast = (evaluate(X, y, res) if how == "fit_result"
            else evaluate(X, y, res.W, intercept=res.intercept))
    assert fast.log_loss == pytest.approx(ll, rel=1e-6)
    assert fast.error == err
    assert ev.n_rows == X.shape[0]
    # the defective metric of the same scores, by the NumPy reference on [X, 1]
    Xb = sp.hstack([X, np.ones((X.shape[0], 1))], format="csr")
    Wb = np.hstack([res.W, res.intercept[:, None]])
    assert ev.defective == pytest.approx(ob.defective_metric(Xb, y, Wb), rel=1e-12)
    # the history's final train log-loss is the same model's (fit evaluates [X, s])
    assert fast.log_loss == pytest.approx(res.history.train_log_loss.iloc[-1], rel=1e-6)
    # without the intercept the loss is another (what evaluate(X, y, res.W) gave)
    assert abs(evaluate(X, y, res.W, **kw).log_loss - ll) > 1e-3


def test_rows_float32_and_dense_with_intercept(model):
    X, y, res = model
    rows = np.arange(0, X.shape[0], 3)
    P = res.predict_proba(X[rows])
    ev = evaluate(X.toarray(), y, res.W, intercept=res.intercept, rows=rows,
                  precision="float64")
    assert abs(ev.log_loss - metrics.log_loss(y[rows], P, labels=np.arange(4))) <= 1e-9
    ev32 = evaluate(X, y, res, precision="float32")
    assert ev32.log_loss == pytest.approx(evaluate(X, y, res).log_loss, rel=1e-5)


def test_fit_result_without_intercept_is_its_W():
    X, y = _shifted_blobs(seed=1)
    res = fit(X, y, "umax", 0.01, epochs=2, progress=False)
    assert res.intercept is None
    assert evaluate(X, y, res) == evaluate(X, y, res.W)
    ll, err = _sklearn_metrics(X, y, res)
    ev = evaluate(X, y, res, precision="float64")
    assert abs(ev.log_loss - ll) <= 1e-9 and ev.error == err


def test_errors_say_what_to_pass(model):
    X, y, res = model
    D = X.shape[1]
    Wb = np.hstack([res.W, res.intercept[:, None]])
    with pytest.raises(ValueError, match=r"shape mismatch.*W\[:, :-1\] and "
                                         r"intercept=W\[:, -1\]"):
        evaluate(X, y, Wb)
    with pytest.raises(ValueError, match=rf"\(300, {D}\).*\(4, {D - 1}\)"):
        evaluate(X, y, res.W[:, 1:], intercept=res.intercept)
    with pytest.raises(ValueError, match=r"intercept must have shape \(K,\) = \(4,\)"):
        evaluate(X, y, res.W, intercept=res.intercept[:3])
    with pytest.raises(ValueError, match="intercept contains NaN"):
        evaluate(X, y, res.W, intercept=np.array([0.0, np.nan, 0.0, 0.0]))
    with pytest.raises(ValueError, match="not both"):
        evaluate(X, y, res, intercept=res.intercept)
    with pytest.raises(ValueError, match="real numeric"):
        evaluate(X, y, res.W, intercept=np.array(["a"] * 4))


def test_top_level_names_are_lazy():
    import subprocess
    import sys

    code = ("import sys, scalable_softmax as s; "
            "assert 'scalable_softmax.fit' not in sys.modules; "
            "assert 'scalable_softmax.data' not in sys.modules; "
            "from scalable_softmax import fit, FitResult, evaluate, load_dataset; "
            "print(fit.__module__, FitResult.__module__, evaluate.__module__, "
            "load_dataset.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["scalable_softmax.fit", "scalable_softmax.fit",
                   "scalable_softmax.evaluate", "scalable_softmax.data.core"]
    assert scalable_softmax.fit is fit and scalable_softmax.FitResult is FitResult
    assert scalable_softmax.evaluate is evaluate
    assert {"fit", "FitResult", "evaluate", "load_dataset"} <= set(scalable_softmax.__all__)
    assert {"fit", "evaluate"} <= set(dir(scalable_softmax))
