"""CONTRIBUTING.md's walk through adding a method, proved: a toy method registered inside
this test (its kernel, its trainer with ``reference_step``, one registry entry) is
picked up by ``fit``, the estimator, the generic tests that run every method and the API
page's method table, with no other file changed.

The toy is plain full-softmax SGD, one datapoint per step (its kernel is a numba loop;
``reference_step`` the same step in NumPy).
"""
from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax import methods
from scalable_softmax.fit import fit
from scalable_softmax.methods.base import EpochReport, StochasticTrainer

NAME = "toy-sgd"


# --- the kernel module's part -------------------------------------------------------

@numba.njit(cache=False)
def toy_epoch(indptr, indices, data, y, order, W, lr):
    """One epoch of full-softmax SGD steps over ``order``; returns the steps taken."""
    K = W.shape[0]
    s = np.empty(K)
    for t in range(order.shape[0]):
        i = order[t]
        for k in range(K):
            acc = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                acc += data[p] * W[k, indices[p]]
            s[k] = acc
        m = s.max()
        tot = 0.0
        for k in range(K):
            s[k] = np.exp(s[k] - m)
            tot += s[k]
        for k in range(K):
            g = s[k] / tot - (1.0 if k == y[i] else 0.0)
            for p in range(indptr[i], indptr[i + 1]):
                W[k, indices[p]] -= lr * g * data[p]
    return order.shape[0]


# --- the method module's part ----------------------------------------------------------

def reference_step(X, y, W, i, lr):
    """One toy step on datapoint ``i`` in plain NumPy: the new ``W``."""
    x = np.asarray(X[i].todense()).ravel()
    s = W @ x
    p = np.exp(s - s.max())
    p /= p.sum()
    p[y[i]] -= 1.0
    return W - lr * np.outer(p, x)


class ToyTrainer(StochasticTrainer):
    """Full-softmax SGD, one datapoint per step (a toy: no ridge, no sampling)."""

    name = NAME
    options = {**StochasticTrainer.options,
               "scale": (1.0, {"type": "number", "above": 0, "finite": True})}

    @classmethod
    def max_n_sampled(cls, K, options):
        return None

    def __init__(self, X, y, K, **kw):
        super().__init__(X, y, K, **kw)
        self._arrays = (np.ascontiguousarray(X.indptr, dtype=np.int64),
                        np.ascontiguousarray(X.indices, dtype=np.int64),
                        np.ascontiguousarray(X.data, dtype=np.float64),
                        np.ascontiguousarray(y, dtype=np.int64))

    def init_params(self, u_init="zero"):
        self.W = np.zeros((self.K, self.D))

    def run_epoch(self, order, lr, seed):
        steps = toy_epoch(*self._arrays, np.ascontiguousarray(order, dtype=np.int64),
                          self.W, float(lr) * self.opts["scale"])
        bad = not np.isfinite(self.W).all()
        return EpochReport(steps=int(steps), diverged_at=0 if bad else -1)


# --- the registry entry -----------------------------------------------------------------

@pytest.fixture
def registered(monkeypatch):
    """The one line a new method adds to ``methods.METHODS``."""
    monkeypatch.setitem(methods.METHODS, NAME, f"{__name__}:ToyTrainer")
    return NAME


def _data(N=60, D=5, K=4, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.6, format="csr", random_state=seed)
    X.data = rng.standard_normal(X.data.size)
    X = sp.csr_matrix(X + sp.eye(N, D, format="csr"))
    X.sort_indices()
    return X, rng.integers(0, K, N), K


def test_the_kernel_steps_like_its_reference(registered):
    X, y, K = _data()
    cls = methods.get_trainer_class(registered)
    assert cls.reference_function() is reference_step
    tr = cls(X, y, K)
    tr.init_params()
    W = tr.W.copy()
    order = np.array([3, 0, 7, 3], dtype=np.int64)
    tr.run_epoch(order, 0.5, 0)
    for i in order:
        W = reference_step(X, y, W, i, 0.5)
    np.testing.assert_allclose(tr.W, W, rtol=1e-12, atol=1e-14)


def test_fit_and_the_estimator_run_it(registered):
    pytest.importorskip("sklearn")
    from scalable_softmax.estimator import SoftmaxSGDClassifier

    X, y, K = _data()
    res = fit(X, y, registered, 0.5, epochs=3, progress=False)
    loss = res.history.train_log_loss.dropna().to_numpy()
    assert res.method == registered and loss[-1] < loss[0]
    clf = SoftmaxSGDClassifier(method=registered, lr=0.5, epochs=3, random_state=0).fit(X, y)
    assert clf.predict_proba(X).shape == (X.shape[0], K)
    # its options are checked by the one schema check, its sizes by fit
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'bogus' for method 'toy-sgd'"):
        fit(X, y, registered, 0.5, epochs=1, progress=False, bogus=1)
    with pytest.raises(ValueError, match="option 'scale' must be a finite number > 0"):
        fit(X, y, registered, 0.5, epochs=1, progress=False, scale=0)
    with pytest.raises(ValueError, match="batch_size must be 1"):
        fit(X, y, registered, 0.5, epochs=1, progress=False, batch_size=5)
    with pytest.raises(ValueError, match="'toy-sgd' has no parallel kernel"):
        fit(X, y, registered, 0.5, epochs=1, progress=False, threads=2)


def test_the_generic_tests_pick_it_up(registered):
    import test_model_api as api

    api.test_every_method_declares_its_facts()
    api.test_every_method_names_its_numpy_reference()
    api.test_every_method_fits_an_intercept(registered)
    api.test_warm_start_begins_at_the_given_weights(registered)


def test_the_method_table_and_the_figures_know_it(registered):
    from scalable_softmax.repro.machinery import site, style

    table = "\n".join(site.method_table())
    assert f'``"{registered}"``' in table and "``test_new_method.ToyTrainer``" in table
    assert style.color(registered) == style.color(registered)   # deterministic
    assert style.label(registered) == registered
    assert style.ordered([registered, "umax"]) == ["umax", registered]
