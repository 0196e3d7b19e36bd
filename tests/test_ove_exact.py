"""The full-batch One-vs-Each bound (``full_objective(kind="ove")`` and the
``ove-exact`` L-BFGS trainer of scalable_softmax.methods.full)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
from scipy.special import logsumexp

from scalable_softmax import objectives as ob
from scalable_softmax.fit import fit
from scalable_softmax.methods import get_trainer_class
from scalable_softmax.methods.full import (
    OVEExactTrainer,
    full_objective,
    full_objective_reference,
)


def _problem(N=80, D=9, K=6, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.6, random_state=seed, format="csr",
                  data_rvs=lambda n: rng.normal(size=n))
    X = sp.csr_matrix(X + sp.eye(N, D, format="csr"))
    S = X @ (scale * rng.normal(size=(K, D))).T
    P = np.exp(S - logsumexp(S, axis=1, keepdims=True))
    y = np.array([rng.choice(K, p=p) for p in P])
    return X, y, rng


def _ove_by_hand(X, y, W, mu):
    """The bound written out loop by loop (independent of both implementations)."""
    Xd = X.toarray()
    N = Xd.shape[0]
    tot = 0.0
    for i in range(N):
        s = W @ Xd[i]
        for k in range(W.shape[0]):
            if k != y[i]:
                tot += np.logaddexp(0.0, s[k] - s[y[i]])
    return tot / N + 0.5 * mu / N * np.sum(W * W)


@pytest.mark.parametrize("block", [None, 7])
@pytest.mark.parametrize("mu", [0.0, 1.7])
def test_ove_kernel_matches_numpy_reference(block, mu):
    X, y, rng = _problem()
    W = 2.0 * rng.normal(size=(6, 9))
    val, G, alpha = full_objective(X, y, W, mu=mu, kind="ove", block=block)
    val_r, G_r, alpha_r = full_objective_reference(X, y, W, mu=mu, kind="ove")
    assert alpha is None and alpha_r is None
    assert val == pytest.approx(val_r, rel=1e-13)
    assert val == pytest.approx(_ove_by_hand(X, y, W, mu), rel=1e-12)
    np.testing.assert_allclose(G, G_r, rtol=1e-11, atol=1e-14)
    # the gradient's rows sum to the ridge part only: the score gradients of every
    # datapoint sum to zero over the classes
    np.testing.assert_allclose(G.sum(axis=0), (mu / X.shape[0]) * W.sum(axis=0), atol=1e-12)


def test_ove_kernel_is_accurate_for_extreme_scores():
    # scores hundreds apart: softplus and sigmoid must neither overflow nor lose the
    # small terms
    X, y, rng = _problem(N=30, K=4)
    W = 300.0 * rng.normal(size=(4, 9))
    val, G, _ = full_objective(X, y, W, kind="ove")
    val_r, G_r, _ = full_objective_reference(X, y, W, kind="ove")
    assert np.isfinite(val) and np.all(np.isfinite(G))
    assert val == pytest.approx(val_r, rel=1e-12)
    np.testing.assert_allclose(G, G_r, rtol=1e-10, atol=1e-12)


def test_ove_gradient_by_finite_differences():
    X, y, rng = _problem(N=40, D=5, K=4, seed=3)
    W = rng.normal(size=(4, 5))
    mu = 0.9
    _, G, _ = full_objective(X, y, W, mu=mu, kind="ove")
    h = 1e-6
    fd = np.empty_like(W)
    for k in range(4):
        for d in range(5):
            E = np.zeros_like(W)
            E[k, d] = h
            fd[k, d] = (full_objective(X, y, W + E, mu=mu, kind="ove")[0]
                        - full_objective(X, y, W - E, mu=mu, kind="ove")[0]) / (2 * h)
    np.testing.assert_allclose(G, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("K", [2, 3, 10])
def test_ove_bound_is_above_the_softmax_nll(K):
    # T-4: p(y|x) >= prod_{k != y} sigma(s_y - s_k), so O(W) >= F(W) at every W,
    # with equality for K = 2
    X, y, rng = _problem(N=60, K=K, seed=K)
    for scale in (0.1, 1.0, 5.0):
        W = scale * rng.normal(size=(K, 9))
        o = full_objective(X, y, W, mu=0.5, kind="ove")[0]
        f = full_objective(X, y, W, mu=0.5, kind="softmax")[0]
        per_o = ob.ove_per_point(X, y, W)
        per_f = ob.nll_per_point(X, y, W)
        if K == 2:
            assert o == pytest.approx(f, rel=1e-12)
            np.testing.assert_allclose(per_o, per_f, rtol=1e-10, atol=1e-14)
        else:
            assert o > f
            assert np.all(per_o >= per_f - 1e-12)


def test_ove_exact_trainer_minimises_the_bound():
    X, y, _ = _problem(N=60, D=7, K=5, seed=1)
    mu = 1.0
    tr = OVEExactTrainer(X, y, 5, mu=mu, iters_per_epoch=None, maxiter=500, gtol=1e-7)
    tr.init_params()
    start = tr.objective()
    assert start == pytest.approx(4 * np.log(2.0), rel=1e-12)   # W = 0: (K-1) log 2
    rep = tr.run_epoch()
    assert rep.diverged_at == -1
    assert rep.extra["grad_inf"] <= 1e-7 and rep.extra["converged"]
    assert tr.objective() < start - 0.1
    # the same optimum as scipy on the NumPy reference objective
    def fun(v):
        val, G, _ = full_objective_reference(X, y, v.reshape(5, 7), mu=mu, kind="ove")
        return val, G.ravel()
    ref = scipy.optimize.minimize(fun, np.zeros(35), jac=True, method="L-BFGS-B",
                                  options=dict(gtol=1e-11, ftol=0.0, maxiter=2000))
    np.testing.assert_allclose(tr.W, ref.x.reshape(5, 7), rtol=1e-5, atol=1e-6)
    assert tr.objective() == pytest.approx(ref.fun, rel=1e-10)


def test_ove_exact_through_fit_and_registry():
    X, y, _ = _problem(N=50, D=6, K=4, seed=2)
    assert get_trainer_class("ove-exact") is OVEExactTrainer
    assert OVEExactTrainer.full_batch and not OVEExactTrainer.has_u
    res = fit(X, y, "ove-exact", lr=None, epochs=3, mu=1.0, eval_epochs=[0, 3],
              progress=False, iters_per_epoch=5)
    funs = res.extra["fun"].to_numpy()
    assert len(funs) == 3 and np.all(np.diff(funs) < 0)          # decreases epoch by epoch
    assert res.u is None and not res.diverged
    ev = res.history[res.history.evaluated]
    assert ev.train_log_loss.iloc[-1] < ev.train_log_loss.iloc[0]
    # the bound is above the mean NLL (plus ridge) at the trained weights
    f = full_objective(X, y, res.W, mu=1.0, kind="softmax")[0]
    assert funs[-1] > f


def test_bad_kind_is_rejected():
    X, y, rng = _problem(N=10)
    W = rng.normal(size=(6, 9))
    with pytest.raises(ValueError, match="'ove'"):
        full_objective(X, y, W, kind="one-vs-each")
    with pytest.raises(ValueError, match="'ove'"):
        full_objective_reference(X, y, W, kind="one-vs-each")
