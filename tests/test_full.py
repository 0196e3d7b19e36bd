"""Full-softmax methods (scalable_softmax.methods.full): exact minibatch SGD, the
exact L-BFGS optimum and Bouchard's bound."""
from __future__ import annotations

import math

import numba
import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
from scipy.special import expit, logsumexp

from scalable_softmax import objectives as ob
from scalable_softmax.methods import get_trainer_class
from scalable_softmax.methods.full import (
    BouchardTrainer,
    ExactTrainer,
    SoftmaxSGDTrainer,
    bouchard_alpha,
    exact_solution,
    full_objective,
    full_objective_reference,
    reference_step,
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


# --- softmax-sgd ------------------------------------------------------------------

@pytest.mark.parametrize("mu", [0.0, 3.0])
@pytest.mark.parametrize("threads", [1, numba.get_num_threads()])
@pytest.mark.parametrize("layout", ["class-rowwise", "feature"])
def test_softmax_sgd_step_matches_reference(mu, threads, layout):
    X, y, rng = _problem()
    tr = SoftmaxSGDTrainer(X, y, 6, mu=mu, batch_size=16, threads=threads, layout=layout)
    tr.init_params()
    W0 = rng.normal(size=tr.W.shape)
    tr.W[:] = W0
    rows = rng.permutation(80)[:16]
    rep = tr.run_epoch(rows, 0.8, 0)
    assert rep.steps == 1 and rep.diverged_at == -1
    np.testing.assert_allclose(tr.weights(), reference_step(X, y, W0, rows, 0.8, mu),
                               rtol=1e-12, atol=1e-13)


def test_softmax_sgd_epoch_matches_repeated_reference_steps_and_fold():
    # several steps (last minibatch short), with a ridge strong enough that the lazy
    # scale gets folded (lr mu / N >= 1)
    X, y, rng = _problem(N=45)
    for lr, mu, layout in ((0.5, 2.0, "feature"), (30.0, 2.0, "feature"),
                           (30.0, 2.0, "class-rowwise")):
        tr = SoftmaxSGDTrainer(X, y, 6, mu=mu, batch_size=10, layout=layout)
        tr.init_params()
        W = rng.normal(size=tr.W.shape)
        tr.W[:] = W
        order = rng.permutation(45)
        rep = tr.run_epoch(order, lr, 0)
        assert rep.steps == 5
        for b0 in range(0, 45, 10):
            W = reference_step(X, y, W, order[b0:b0 + 10], lr, mu)
        np.testing.assert_allclose(tr.weights(), W, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("layout", ["class-rowwise", "feature"])
def test_softmax_sgd_deterministic_and_thread_independent(layout):
    X, y, _ = _problem(N=70)
    out = []
    for threads in (1, numba.get_num_threads(), 1):
        tr = SoftmaxSGDTrainer(X, y, 6, mu=0.5, batch_size=8, threads=threads,
                               layout=layout)
        tr.init_params()
        for e in range(3):
            tr.run_epoch(np.random.default_rng(e).permutation(70), 0.4, e)
        out.append(tr.weights().copy())
    assert np.array_equal(out[0], out[1]) and np.array_equal(out[0], out[2])


def test_softmax_sgd_reports_divergence():
    X, y, _ = _problem(N=30)
    X = X.tolil()
    X[14, 2] = 1e200  # second minibatch of 10
    tr = SoftmaxSGDTrainer(X.tocsr(), y, 6, batch_size=10)
    tr.init_params()
    rep = tr.run_epoch(np.arange(30), 1e200, 0)
    assert rep.diverged_at == 1 and rep.steps == 2


# --- the blocked objective kernel --------------------------------------------------

@pytest.mark.parametrize("kind", ["softmax", "bouchard"])
@pytest.mark.parametrize("block", [None, 7])
def test_full_objective_matches_numpy_reference(kind, block):
    X, y, rng = _problem()
    W = 2.0 * rng.normal(size=(6, 9))
    val, G, alpha = full_objective(X, y, W, mu=1.7, kind=kind, block=block)
    val_r, G_r, alpha_r = full_objective_reference(X, y, W, mu=1.7, kind=kind)
    assert val == pytest.approx(val_r, rel=1e-13)
    np.testing.assert_allclose(G, G_r, rtol=1e-11, atol=1e-14)
    if kind == "bouchard":
        np.testing.assert_allclose(alpha, alpha_r, rtol=1e-12, atol=1e-12)
    else:
        N = X.shape[0]
        assert val == pytest.approx(-ob.ridge_log_likelihood(X, y, W, 1.7) / N, rel=1e-13)


def test_bouchard_alpha_solves_its_equation_even_for_extreme_scores():
    rng = np.random.default_rng(3)
    S = np.concatenate([rng.normal(size=(50, 8)), 300 * rng.normal(size=(50, 8)),
                        np.tile([1e4, -1e4, 0, 0, 0, 0, 0, 0.0], (5, 1))])
    a = bouchard_alpha(S)
    assert np.all(np.isfinite(a))
    h = expit(S - a[:, None]).sum(axis=1) - 1.0
    assert np.max(np.abs(h)) < 1e-12
    # warm starts give the same root
    np.testing.assert_allclose(bouchard_alpha(S, alpha0=a + 3.0), a, rtol=1e-13, atol=1e-13)
    # K = 2: alpha = (f1 + f2)/2 exactly (T, Proposition 3)
    F = rng.normal(size=(20, 2)) * 5
    np.testing.assert_array_equal(bouchard_alpha(F), ob.bouchard_alpha_k2(F[:, 0], F[:, 1]))


def test_bouchard_alpha_newton_stops_once_converged():
    # a warm start near the root takes a few Newton steps, not a bisection run: a step
    # that rounds to zero once left a_new == lo and sent the solver bisecting (17.5
    # iterations per solve on Bibtex instead of about 4)
    from scalable_softmax.kernels.full import solve_alpha
    rng = np.random.default_rng(5)
    its_cold, its_warm = [], []
    for _ in range(200):
        s = rng.normal(0.0, 3.0, size=146)
        a, it = solve_alpha(s, np.nan, 200)
        its_cold.append(it)
        assert abs(expit(s - a).sum() - 1.0) < 1e-13
        a2, it2 = solve_alpha(s, a + 1e-3 * rng.normal(), 200)
        its_warm.append(it2)
        assert abs(a2 - a) <= 4e-15 * max(1.0, abs(a))
    assert max(its_warm) <= 5 and np.mean(its_warm) <= 3.5
    assert max(its_cold) <= 12 and np.mean(its_cold) <= 7


def test_bouchard_bound_is_above_the_exact_nll():
    X, y, rng = _problem()
    N = X.shape[0]
    for scale in (0.1, 1.0, 10.0):
        W = scale * rng.normal(size=(6, 9))
        exact = ob.log_loss(X, y, W)
        for alpha in (rng.normal(size=N) * 3, full_objective(X, y, W, kind="bouchard")[2]):
            assert ob.bouchard_bound(X, y, W, alpha) >= exact - 1e-12
        # the profile bound (optimal alpha) is the smallest of them and still above
        B = full_objective(X, y, W, kind="bouchard")[0]
        assert exact - 1e-12 <= B <= ob.bouchard_bound(X, y, W, rng.normal(size=N)) + 1e-12


def test_bouchard_profile_gradient_by_finite_differences():
    X, y, rng = _problem(N=40)
    W = rng.normal(size=(6, 9))
    val, G, _ = full_objective(X, y, W, mu=0.3, kind="bouchard")
    E = rng.normal(size=W.shape)
    h = 1e-6
    fd = (full_objective(X, y, W + h * E, mu=0.3, kind="bouchard")[0]
          - full_objective(X, y, W - h * E, mu=0.3, kind="bouchard")[0]) / (2 * h)
    assert fd == pytest.approx(np.sum(G * E), rel=1e-6)


# --- exact ----------------------------------------------------------------------

def test_exact_reaches_gtol_and_matches_direct_scipy_minimisation():
    X, y, _ = _problem()
    N, K, D, mu = 80, 6, 9, 0.8
    tr = ExactTrainer(X, y, K, mu=mu, iters_per_epoch=None, gtol=1e-9)
    tr.init_params()
    rep = tr.run_epoch()
    assert rep.extra["converged"] and rep.extra["grad_inf"] <= 1e-9

    def f(w):
        W = w.reshape(K, D)
        return (-ob.ridge_log_likelihood(X, y, W, mu) / N,
                (-ob.ridge_log_likelihood_grad(X, y, W, mu) / N).ravel())

    res = scipy.optimize.minimize(f, np.zeros(K * D), jac=True, method="BFGS",
                                  options=dict(gtol=1e-10, maxiter=10000))
    W_direct = res.x.reshape(K, D)
    assert np.max(np.abs(f(res.x)[1])) < 1e-8
    np.testing.assert_allclose(tr.W, W_direct, rtol=0, atol=1e-6 * np.abs(W_direct).max())
    assert tr.objective() == pytest.approx(res.fun, rel=1e-12)
    # later epochs have nothing left to do
    assert tr.run_epoch().steps == 0


def test_exact_in_epochs_of_few_iterations_reaches_the_same_point():
    X, y, _ = _problem()
    W1, info = exact_solution(X, y, 6, mu=0.8, gtol=1e-9)
    tr = ExactTrainer(X, y, 6, mu=0.8, iters_per_epoch=4, gtol=1e-9)
    tr.init_params()
    values = []
    for _ in range(60):
        rep = tr.run_epoch(None, None, None)
        values.append(rep.extra["fun"])
        if rep.extra["converged"]:
            break
    assert rep.extra["converged"]
    assert np.all(np.diff(values) <= 1e-15)
    np.testing.assert_allclose(tr.W, W1, atol=1e-6 * np.abs(W1).max())


def test_exact_with_mu_zero_on_separable_data_has_no_optimum():
    rng = np.random.default_rng(1)
    X = sp.csr_matrix(rng.normal(size=(40, 3)))
    y = (X.toarray()[:, 0] > 0).astype(int)  # linearly separable
    norms, funs = [], []
    for gtol in (1e-3, 1e-6, 1e-9):
        tr = ExactTrainer(X, y, 2, mu=0.0, iters_per_epoch=None, maxiter=500, gtol=gtol)
        tr.init_params()
        rep = tr.run_epoch()
        assert "does not exist" in rep.extra["message"]
        norms.append(np.linalg.norm(tr.W))
        funs.append(rep.extra["fun"])
    # where it stops is set by the tolerance: ||W|| grows, the log-loss goes to 0
    assert norms[0] < norms[1] < norms[2] and funs[0] > funs[1] > funs[2] and funs[2] < 1e-6
    # with a ridge the optimum exists and does not depend on the tolerance
    W1, i1 = exact_solution(X, y, 2, mu=0.5, gtol=1e-6)
    W2, i2 = exact_solution(X, y, 2, mu=0.5, gtol=1e-10)
    assert i1["converged"] and i2["converged"]
    np.testing.assert_allclose(W1, W2, atol=1e-5)


# --- bouchard ---------------------------------------------------------------------

@pytest.mark.parametrize("n1,n2", [(30, 10), (7, 50)])
def test_bouchard_k2_nonparametric_proposition_3(n1, n2):
    # non-parametric: one constant feature, so f_k = w_k; T Prop. 3:
    # alpha = (f1 + f2)/2 and f_k = 2 log N_k + c
    X = sp.csr_matrix(np.ones((n1 + n2, 1)))
    y = np.array([0] * n1 + [1] * n2)
    tr = BouchardTrainer(X, y, 2, iters_per_epoch=None, gtol=1e-12)
    tr.init_params()
    rep = tr.run_epoch()
    assert rep.extra["converged"]
    f1, f2 = tr.W[:, 0]
    assert f1 - f2 == pytest.approx(2 * math.log(n1 / n2), rel=1e-9)
    np.testing.assert_allclose(tr.u, (f1 + f2) / 2, rtol=0, atol=1e-12)
    # the exact MLE instead has f1 - f2 = log(N1/N2): Bouchard is biased
    W_soft, _ = exact_solution(X, y, 2, mu=0.0, gtol=1e-12)
    assert W_soft[0, 0] - W_soft[1, 0] == pytest.approx(math.log(n1 / n2), rel=1e-8)


def test_bouchard_trainer_optimum_is_a_joint_optimum():
    X, y, _ = _problem(N=60)
    # gtol 1e-9, not 1e-10: below about 1e-9 the decrease an L-BFGS step can make
    # (~ |grad|^2) is under the rounding of the objective (~2e-16 here) and the line
    # search stops without converging (measured on 12 seeds: only 1 reached 1e-10)
    tr = BouchardTrainer(X, y, 6, mu=1.0, iters_per_epoch=None, gtol=1e-9)
    tr.init_params()
    assert tr.run_epoch().extra["converged"]
    W, alpha = tr.W, tr.u
    N = 60
    # both partial gradients of B(W, alpha) vanish at (W, alpha)
    dW, dalpha = ob.bouchard_grad(X, y, W, alpha)
    assert np.max(np.abs(dW + W / N)) < 1e-9 and np.max(np.abs(dalpha)) < 1e-13
    # and it is a bound: above the exact ridge objective at the same W, which is
    # itself above the exact optimum
    F = full_objective(X, y, W, mu=1.0)[0]
    W_star, _ = exact_solution(X, y, 6, mu=1.0)
    assert tr.objective() >= F >= full_objective(X, y, W_star, mu=1.0)[0]


@pytest.mark.parametrize("cls", [SoftmaxSGDTrainer, ExactTrainer, BouchardTrainer])
def test_warmup_changes_nothing(cls):
    X, y, rng = _problem()
    tr = cls(X, y, 6, mu=1.0)
    tr.init_params("logK")
    tr.W[:] = rng.normal(size=tr.W.shape)
    W0, u0 = tr.W.copy(), None if tr.u is None else tr.u.copy()
    tr.warmup()
    assert np.array_equal(tr.W, W0)
    assert (tr.u is None) == (u0 is None) and (u0 is None or np.array_equal(tr.u, u0))


# --- registry and options ------------------------------------------------------------

def test_registry_and_options():
    X, y, _ = _problem()
    assert get_trainer_class("exact") is ExactTrainer
    assert get_trainer_class("bouchard") is BouchardTrainer
    assert get_trainer_class("softmax-sgd") is SoftmaxSGDTrainer
    assert ExactTrainer.full_batch and BouchardTrainer.full_batch and BouchardTrainer.has_u
    with pytest.raises(ValueError, match="'iter_per_epoch'"):
        ExactTrainer(X, y, 6, iter_per_epoch=3)
    with pytest.raises(ValueError, match="'maxiter'"):
        BouchardTrainer(X, y, 6, maxiter=0)
    with pytest.raises(ValueError, match="'gtol'"):
        ExactTrainer(X, y, 6, gtol=-1.0)
    with pytest.raises(ValueError, match="'shared_negatives'"):
        SoftmaxSGDTrainer(X, y, 6, shared_negatives=True)
    with pytest.raises(ValueError, match="u_init"):
        BouchardTrainer(X, y, 6).init_params("ones")
