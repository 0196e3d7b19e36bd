"""The full-batch trainers stop at convergence (issue 33, item 1): ``fit`` ends its epoch
loop and its history at the epoch where L-BFGS finished, an epoch split of the plain
L-BFGS gives the iterates of one uninterrupted run (its state carries over), nothing is
evaluated after convergence, and ``ftol`` is L-BFGS-B's relative-decrease test."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax.fit import fit
from scalable_softmax.methods.full import BouchardTrainer, ExactTrainer, OVEExactTrainer
from scalable_softmax.methods.lbfgs import lbfgs


def _problem(N=120, D=9, K=4, seed=1):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.5, random_state=seed, format="csr",
                  data_rvs=lambda n: rng.normal(size=n))
    X = sp.csr_matrix(X + sp.eye(N, D, format="csr"))
    y = rng.integers(0, K, N)
    return X, y, K


@pytest.mark.parametrize("method", ["exact", "ove-exact", "bouchard"])
def test_fit_stops_at_convergence_and_says_so(method):
    X, y, K = _problem()
    res = fit(X, y, method, None, mu=0.5, epochs=400, progress=False, iters_per_epoch=4)
    last = res.extra.iloc[-1]
    assert bool(last.converged) and last.grad_inf <= 1e-8
    e = int(res.params["stopped_at_epoch"])
    assert 1 <= e < 400
    assert len(res.history) == e + 1 and int(res.history.epoch.iloc[-1]) == e
    assert len(res.extra) == e
    assert bool(res.history.evaluated.iloc[-1])          # epoch 400 was due: e stands in
    # the same optimum as one uninterrupted run
    one = fit(X, y, method, None, mu=0.5, epochs=1, progress=False, iters_per_epoch=None)
    assert "stopped_at_epoch" not in one.params
    np.testing.assert_allclose(res.W, one.W, atol=1e-6)


def test_a_run_that_does_not_converge_within_epochs_is_not_marked_stopped():
    X, y, K = _problem()
    res = fit(X, y, "exact", None, mu=0.5, epochs=2, progress=False, iters_per_epoch=1)
    assert "stopped_at_epoch" not in res.params and len(res.history) == 3


@pytest.mark.parametrize("cls", [ExactTrainer, OVEExactTrainer, BouchardTrainer])
def test_epochs_of_the_plain_lbfgs_are_one_uninterrupted_run(cls):
    X, y, K = _problem()
    whole = cls(X, y, K, mu=0.5, iters_per_epoch=None, trace=True)
    whole.init_params()
    whole.run_epoch()
    split = cls(X, y, K, mu=0.5, iters_per_epoch=3, trace=True)
    split.init_params()
    while not split.finished:
        split.run_epoch()
    assert split.total_iters == whole.total_iters
    np.testing.assert_array_equal(split.W, whole.W)
    assert split.trace == whole.trace
    # after convergence an epoch does nothing, evaluations included
    rep = split.run_epoch()
    assert rep.steps == 0 and split.nfev == 0


def test_changed_weights_start_afresh():
    X, y, K = _problem()
    tr = ExactTrainer(X, y, K, mu=0.5, iters_per_epoch=2)
    tr.init_params()
    tr.run_epoch()
    tr.W[:] = 0.0                         # e.g. a warm start by hand: the state is stale
    tr.run_epoch()
    ref = ExactTrainer(X, y, K, mu=0.5, iters_per_epoch=2)
    ref.init_params()
    ref.run_epoch()
    np.testing.assert_array_equal(tr.W, ref.W)


def test_ftol_is_the_relative_decrease_test():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 6))
    A = A @ A.T + np.eye(6)
    b = rng.normal(size=6)
    fs = []

    def fun(x):
        return 0.5 * x @ A @ x - b @ x + 10.0, A @ x - b

    res = lbfgs(fun, np.zeros(6), gtol=0.0, ftol=1e-6, maxiter=500,
                callback=lambda k, x, f, g: fs.append(f))
    assert res.message == "converged: relative decrease of f <= ftol"
    dec = [(a - c) / max(abs(a), abs(c), 1.0) for a, c in zip(fs, fs[1:])]
    assert dec[-1] <= 1e-6 and all(d > 1e-6 for d in dec[:-1])
    # ftol = 0 (the default) is off: gtol decides
    res0 = lbfgs(fun, np.zeros(6), gtol=1e-10, maxiter=500)
    assert res0.success and res0.message == "converged: max |gradient| <= gtol"
