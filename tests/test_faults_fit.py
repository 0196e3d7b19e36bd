"""fit and evaluate on bad input (issue 13, point 6): a learning rate given to a method
that has none is an error, a non-finite log-loss always means ``diverged``, and
``evaluate`` raises on non-finite scores naming the row and the class."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax.evaluate import NonFiniteScoreError, evaluate
from scalable_softmax.fit import fit


def _data(N=300, D=40, K=12, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.2, random_state=seed, format="csr")
    X.data = np.abs(X.data) + 0.1
    y = rng.integers(0, K, N)
    y[:K] = np.arange(K)
    return X, y, K


@pytest.mark.parametrize("method", ["exact", "bouchard", "ove-exact"])
def test_lr_given_to_a_full_batch_method_is_an_error(method):
    X, y, K = _data(N=60, D=8, K=4)
    with pytest.raises(ValueError, match=rf"lr=0.1 is not used by '{method}'.*lr=None"):
        fit(X, y, method, lr=0.1, epochs=1, K=K, mu=1.0, progress=False)
    res = fit(X, y, method, lr=None, epochs=2, K=K, mu=1.0, progress=False,
              iters_per_epoch=5)
    assert res.params["lr"] is None          # the history does not show an unused rate
    assert res.history.lr.isna().all()
    assert np.isfinite(res.history.train_log_loss.iloc[-1])


def test_a_stochastic_method_without_a_rate_takes_its_default_and_a_bad_rate_still_fails():
    """lr=None is the method's default rate (protocols.DEFAULT_LR), recorded as the run's
    lr; a rate that is not a number > 0 is still refused by name."""
    from scalable_softmax.protocols import DEFAULT_LR

    X, y, K = _data(N=60, D=8, K=4)
    res = fit(X, y, "umax", lr=None, epochs=1, K=K, progress=False)
    assert res.params["lr"] == DEFAULT_LR["umax"]
    for bad in (0.0, -1.0, "0.1", True):
        with pytest.raises(ValueError, match="lr"):
            fit(X, y, "umax", lr=bad, epochs=1, K=K, progress=False)


@pytest.mark.parametrize("method", ["umax", "raman", "vanilla", "implicit", "ove"])
def test_a_non_finite_log_loss_always_means_diverged(method):
    """At lr = 1e305 the weights blow up; every evaluated log-loss that is not finite
    must come with ``diverged`` (the documented invariant of FitResult)."""
    X, y, K = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)   # no NaN with a bare warning
        res = fit(X, y, method, lr=1e305, epochs=3, K=K, progress=False)
    h = res.history
    evaluated = h[h.evaluated | h.diverged]
    finite = np.isfinite(evaluated.train_log_loss.to_numpy())
    assert (finite | evaluated.diverged.to_numpy()).all(), h
    if not finite.all():
        assert res.diverged and res.diverged_at is not None
        assert h.diverged.iloc[-1] and h.train_log_loss.iloc[-1] == math.inf


def test_evaluate_raises_on_a_score_overflow_naming_row_and_class():
    X, y, K = _data(N=50, D=6, K=3)
    X.data[:] = 2.0
    W = np.zeros((K, 6))
    W[2, 4] = 1e308                           # finite, but x . w overflows
    rows = np.flatnonzero(X[:, 4].toarray().ravel() > 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for precision in ("float64", "float32"):
            with pytest.raises(NonFiniteScoreError, match=rf"row {rows[0]} of X, class 2") \
                    as err:
                evaluate(X, y, W, precision=precision)
            assert (err.value.row, err.value.klass) == (rows[0], 2)


def test_evaluate_raises_when_the_log_loss_overflows_with_finite_scores():
    X = sp.csr_matrix(np.ones((3, 1)))
    y = np.array([0, 0, 0])
    W = np.array([[-1e308], [1e308]])          # s_1 - s_0 = 2e308 = inf
    with pytest.raises(NonFiniteScoreError, match="log-loss overflows.*row 0 of X, class 1"):
        evaluate(X, y, W, precision="float64")
    # a finite evaluation is unchanged
    ev = evaluate(X, np.array([1, 1, 1]), W, precision="float64")
    assert ev.log_loss == 0.0 and ev.error == 0.0
