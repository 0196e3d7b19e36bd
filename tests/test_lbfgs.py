"""The plain L-BFGS of ``scalable_softmax.methods.lbfgs`` and the trainers' ``solver`` and
``trace`` options: the two-loop direction is the dense BFGS inverse-Hessian matrix
applied to the gradient; every step satisfies the strong Wolfe conditions; the optimum
is the one SciPy's L-BFGS-B finds, for the three full-batch objectives."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp

from scalable_softmax.methods.full import (
    BouchardTrainer,
    ExactTrainer,
    OVEExactTrainer,
    full_objective,
)
from scalable_softmax.methods.lbfgs import bfgs_inverse_reference, lbfgs, two_loop


def _problem(N=90, D=8, K=5, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.5, random_state=seed, format="csr",
                  data_rvs=lambda n: rng.normal(size=n) * 2)
    X = sp.csr_matrix(X + sp.eye(N, D, format="csr"))
    y = rng.integers(0, K, N)
    return X, y, K


@pytest.mark.parametrize("npairs", [0, 1, 3, 6])
def test_two_loop_is_the_bfgs_inverse_matrix_times_g(npairs):
    rng = np.random.default_rng(npairs)
    n, m = 7, 6
    A = rng.normal(size=(n, n))
    A = A @ A.T + n * np.eye(n)          # SPD Hessian: y = A s gives s^T y > 0
    pairs = []
    for _ in range(npairs):
        s = rng.normal(size=n)
        pairs.append((s, A @ s))
    S, Y, rho = np.zeros((m, n)), np.zeros((m, n)), np.zeros(m)
    order = []
    slots = rng.permutation(m)[:npairs]   # storage order is independent of age
    for slot, (s, yv) in zip(slots, pairs):
        S[slot], Y[slot], rho[slot] = s, yv, 1.0 / (s @ yv)
        order.append(int(slot))
    g = rng.normal(size=n)
    np.testing.assert_allclose(two_loop(g, S, Y, rho, order),
                               bfgs_inverse_reference(pairs, n) @ g, rtol=1e-11, atol=1e-13)


def test_minimises_a_quadratic_and_every_step_is_strong_wolfe():
    rng = np.random.default_rng(3)
    n = 40
    A = rng.normal(size=(n, n))
    A = A @ A.T / n + np.diag(np.logspace(-2, 1, n))
    b = rng.normal(size=n)
    evals = []

    def fun(x):
        evals.append(x.copy())
        return 0.5 * x @ A @ x - b @ x, A @ x - b

    steps = []
    res = lbfgs(fun, np.zeros(n), gtol=1e-10, maxiter=1000, memory=5,
                callback=lambda k, x, f, g: steps.append((x.copy(), f, g.copy())))
    assert res.success and "converged" in res.message
    np.testing.assert_allclose(res.x, np.linalg.solve(A, b), rtol=0, atol=1e-8)
    assert res.nit == len(steps) and res.nfev == len(evals)
    # strong Wolfe: sufficient decrease and curvature along each step's direction
    prev = (np.zeros(n), 0.0, -b)
    for x, f, g in steps:
        x0, f0, g0 = prev
        s = x - x0
        assert f <= f0 + 1e-4 * (g0 @ s) + 1e-12
        assert abs(g @ s) <= 0.9 * abs(g0 @ s) + 1e-12
        prev = (x, f, g)


def test_stops_at_maxiter_and_maxfun():
    def fun(x):  # Rosenbrock
        f = np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
        return f, scipy.optimize.rosen_der(x)

    res = lbfgs(fun, np.zeros(6), gtol=1e-12, maxiter=5)
    assert res.nit == 5 and not res.success and "iterations" in res.message
    res = lbfgs(fun, np.zeros(6), gtol=1e-12, maxiter=1000, maxfun=7)
    assert res.nfev >= 7 and not res.success and "evaluations" in res.message
    res = lbfgs(fun, np.zeros(6), gtol=1e-7, maxiter=1000)
    assert res.success
    np.testing.assert_allclose(res.x, 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="memory"):
        lbfgs(fun, np.zeros(3), memory=0)


@pytest.mark.parametrize("cls", [ExactTrainer, OVEExactTrainer, BouchardTrainer])
def test_trainer_solvers_reach_the_same_optimum(cls):
    X, y, K = _problem()
    out = {}
    # L-BFGS-B stops on its relative-reduction test below about 1e-8 here (the decrease
    # of a step is under the rounding of f); the plain L-BFGS goes on with the
    # approximate Wolfe conditions, down to 1e-10
    for solver, gtol in (("scipy", 1e-8), ("lbfgs", 1e-10)):
        tr = cls(X, y, K, mu=1.0, iters_per_epoch=None, gtol=gtol, solver=solver,
                 trace=True)
        tr.init_params()
        rep = tr.run_epoch()
        assert rep.extra["converged"] and rep.extra["grad_inf"] <= gtol
        its, vals = zip(*tr.trace)
        # one entry per iteration from 0, non-increasing, the last the final objective
        assert list(its) == list(range(rep.extra["nit"] + 1))
        # non-increasing up to the approximate Wolfe allowance of 1e-10 |f|
        assert np.all(np.diff(vals) <= 1e-10 * np.abs(vals[:-1]))
        assert vals[-1] == pytest.approx(rep.extra["fun"], rel=1e-13)
        assert vals[0] == pytest.approx(np.log(K) if cls is not OVEExactTrainer
                                        else (K - 1) * np.log(2.0), rel=1e-12) \
            if cls is not BouchardTrainer else True
        out[solver] = tr.W.copy()
    scale = np.abs(out["scipy"]).max()
    np.testing.assert_allclose(out["lbfgs"], out["scipy"], rtol=0, atol=1e-5 * scale)
    kind = {ExactTrainer: "softmax", OVEExactTrainer: "ove", BouchardTrainer: "bouchard"}[cls]
    v1 = full_objective(X, y, out["lbfgs"], mu=1.0, kind=kind)[0]
    v2 = full_objective(X, y, out["scipy"], mu=1.0, kind=kind)[0]
    assert v1 == pytest.approx(v2, rel=1e-12)


def test_trace_spans_epochs_and_solver_option_is_checked():
    X, y, K = _problem()
    tr = ExactTrainer(X, y, K, mu=1.0, iters_per_epoch=3, gtol=1e-9, solver="lbfgs",
                      trace=True)
    tr.init_params()
    for _ in range(3):
        tr.run_epoch()
    assert [i for i, _ in tr.trace] == list(range(10))
    tr.init_params()
    assert tr.trace == []
    with pytest.raises(ValueError, match="'solver' must be 'scipy' or 'lbfgs'"):
        ExactTrainer(X, y, K, solver="newton")
    with pytest.raises(ValueError, match="'trace'"):
        ExactTrainer(X, y, K, trace=1)
    with pytest.raises(ValueError, match="'callback' must be None or a callable"):
        ExactTrainer(X, y, K, callback=3)


@pytest.mark.parametrize("solver", ["scipy", "lbfgs"])
def test_callback_sees_every_iterate(solver):
    X, y, K = _problem()
    seen = []

    def cb(it, W):
        seen.append((it, W.copy(), full_objective(X, y, W, mu=1.0)[0]))

    tr = ExactTrainer(X, y, K, mu=1.0, iters_per_epoch=None, gtol=1e-8, solver=solver,
                      trace=True, callback=cb)
    tr.init_params()
    rep = tr.run_epoch()
    assert [i for i, _, _ in seen] == list(range(1, rep.extra["nit"] + 1))
    # the iterate handed over is the one whose objective the trace records
    np.testing.assert_allclose([v for _, _, v in seen], [v for _, v in tr.trace[1:]],
                               rtol=1e-12)
    np.testing.assert_array_equal(seen[-1][1], tr.W)
