"""Tests of the ``implicit`` method (docs/math.md section 4; Fagan & Iyengar 2018,
Appendix F.1, Propositions 2 and 4).

Ground truths:
* a direct numerical minimisation (scipy.optimize) of ``2η f̂_ik(θ) + ||θ - θ̃||²``,
  on the reduced problem in ``(u, a)`` (1,200 instances, ``δ̃ - ũ`` in [-1000, 1000],
  ``η`` in [1e-6, 1e6]) and in all coordinates ``(w_k, w_y, u)`` of small full
  problems, with and without ridge (no Lambert W and no reduction involved);
* the plain Python reference step (bisection, the paper's method, to full precision).

Tolerance ("same solution to 1e-8 relative"): ``|v - v_ref| <= 1e-8 max(1, |v_ref|)``
for every coordinate ``v``: relative for values above 1, absolute below (``u`` and ``a``
are O(1)-scaled quantities: a relative test on a value such as ``u = 1e-12`` would
only measure rounding).
"""
import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize, root

from scalable_softmax.fit import fit
from scalable_softmax.kernels.implicit import prop4_bound, solve_reduced
from scalable_softmax.methods import get_trainer_class
from scalable_softmax.methods.implicit import (
    ImplicitTrainer,
    class_touch_weights,
    implicit_step,
    reference_step,
    solve_reduced_reference,
)

REL = 1e-8
TOL = 1e-10   # the kernel's default root accuracy


def close(v, ref, rel=REL):
    v = np.asarray(v, dtype=float)
    ref = np.asarray(ref, dtype=float)
    return bool(np.all(np.abs(v - ref) <= rel * np.maximum(1.0, np.abs(ref))))


# --------------------------------------------------------------------------------------
# random instances of the reduced problem
# --------------------------------------------------------------------------------------

def reduced_instances(n=1200, seed=0):
    """(dt, ut, eta, K, s) with δ̃ - ũ over [-1000, 1000] and η over [1e-6, 1e6]."""
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        K = int(rng.choice([2, 3, 10, 1000, 18000, 100000]))
        eta = 10.0 ** rng.uniform(-6, 6)
        s = 1.0 if j % 3 == 0 else 10.0 ** rng.uniform(-2, 1)
        ut = float(rng.choice([0.0, math.log(K), 10.0 ** rng.uniform(-8, 2),
                               rng.uniform(0, 20)]))
        if j % 4 == 0:
            diff = rng.uniform(-30, 30)
        else:
            diff = rng.uniform(-1000, 1000)
        out.append((ut + diff, ut, eta, K, s))
    # the corners
    for diff in (-1000.0, 1000.0):
        for eta in (1e-6, 1e6):
            for ut in (0.0, 5.0):
                out.append((ut + diff, ut, eta, 18000, 1.0))
    return out


INSTANCES = reduced_instances()


def scipy_reduced(dt, ut, eta, K, s):
    """Direct minimisation of ``2η(u + e^{-u} + (K-1)e^{dt-a-u}) + (u-ut)² + a²/(2s)``
    over ``(u, a)`` (trust-region Newton with exact derivatives, then the gradient's
    root polished by scipy.optimize.root: minimising on function values alone cannot
    resolve 1e-8 when the objective is ~1e9)."""
    al = 2.0 * eta
    km1 = K - 1.0

    def E(v):
        with np.errstate(over="ignore"):
            return km1 * np.exp(dt - v[1] - v[0])

    def F(v):
        u, a = v
        return al * (u + np.exp(-u) + E(v)) + (u - ut) ** 2 + a * a / (2 * s)

    def G(v):
        u, a = v
        e = E(v)
        return np.array([al * (1 - np.exp(-u) - e) + 2 * (u - ut), -al * e + a / s])

    def H(v):
        u, a = v
        e = E(v)
        return np.array([[al * (np.exp(-u) + e) + 2, al * e], [al * e, al * e + 1 / s]])

    # a start where the exponential term is at most O(1)
    x0 = np.array([ut, max(0.0, dt - ut + math.log(al * km1 * s))])
    r = minimize(F, x0, jac=G, hess=H, method="trust-exact",
                 options=dict(gtol=1e-300, maxiter=1000))
    r2 = root(G, r.x, jac=H, method="hybr", options=dict(xtol=1e-15))
    x = r2.x if np.all(np.isfinite(r2.x)) and F(r2.x) <= F(r.x) + 1e-12 * abs(F(r.x)) \
        else r.x
    # the problem is convex and its unconstrained minimiser is feasible:
    # g(0) = -2ũ - a(0)/s < 0 for ũ >= 0, and a > 0
    assert x[0] >= -1e-12 and x[1] >= -1e-12
    return x


# --------------------------------------------------------------------------------------
# the reduced scalar problem
# --------------------------------------------------------------------------------------

def test_reduced_against_direct_minimisation():
    bad = []
    for (dt, ut, eta, K, s) in INSTANCES:
        u, a, _ = solve_reduced(dt, ut, eta, K - 1.0, s, TOL)
        assert math.isfinite(u) and math.isfinite(a) and u >= 0 and a >= 0
        ur, ar = scipy_reduced(dt, ut, eta, K, s)
        if not (close(u, ur) and close(a, ar)):
            bad.append((dt, ut, eta, K, s, u, ur, a, ar))
    assert len(INSTANCES) >= 1000
    assert not bad, bad[:5]


def test_reduced_against_bisection_reference():
    # the paper's method run to full precision; the kernel at a tight tolerance
    # agrees to rounding
    for (dt, ut, eta, K, s) in INSTANCES[::3]:
        u, a, _ = solve_reduced(dt, ut, eta, K - 1.0, s, 1e-14)
        ur, ar = solve_reduced_reference(dt, ut, eta, K, s)
        assert close(u, ur, 1e-12) and close(a, ar, 1e-12), (dt, ut, eta, K, s)
        # a is a(u): w + log w = z for the returned pair, relative to a itself
        if a > 1e-300:
            z = dt - u + math.log(2 * eta * (K - 1) * s)
            assert abs(a + math.log(a) - z) <= 1e-13 * max(1.0, abs(z))


def test_returned_a_is_a_of_u_at_default_tolerance():
    # a = W0(exp(dt - u + log(2η(K-1)s))) for the returned u, also when the kernel
    # updates a by its Taylor expansion after a small final root step
    for (dt, ut, eta, K, s) in INSTANCES:
        u, a, _ = solve_reduced(dt, ut, eta, K - 1.0, s, TOL)
        if a > 1e-300:
            z = dt - u + math.log(2 * eta * (K - 1) * s)
            assert abs(a + math.log(a) - z) <= 1e-13 * max(1.0, abs(z))


def test_optimality_conditions():
    # the returned (u, a) is stationary: g(u) = 0 to rounding relative to its terms
    for (dt, ut, eta, K, s) in INSTANCES[::2]:
        u, a, _ = solve_reduced(dt, ut, eta, K - 1.0, s, 1e-13)
        al = 2 * eta
        terms = [al * (-math.expm1(-u)), 2 * (u - ut), a / s]
        g = terms[0] + terms[1] - terms[2]
        gprime = al * math.exp(-u) + 2 + a / (1 + a) / s
        # |u - u*| ~ |g| / g' must be within the tolerance
        assert abs(g) / gprime <= 1e-12 * max(1.0, u) + 4e-16 * max(map(abs, terms)) / gprime


def test_proposition4_bound_on_evaluations():
    evals = []
    for (dt, ut, eta, K, s) in INSTANCES:
        u, a, ev = solve_reduced(dt, ut, eta, K - 1.0, s, TOL)
        # accuracy eps reached by the kernel: TOL * max(1, |u|) (>= TOL: the stricter
        # reading of the bound)
        bound = prop4_bound(dt, ut, eta, K - 1.0, s, TOL * max(1.0, abs(u)))
        assert ev <= bound, (dt, ut, eta, K, s, ev, bound)
        evals.append(ev)
    evals = np.array(evals)
    # far below the bound (>= 33 here) in practice: Halley, not bisection
    assert evals.mean() < 4 and evals.max() <= 15


def test_u_constraint_exact():
    # ũ >= 0 makes g(0) < 0, so u = 0 only when a(0) underflows: then u = 0, a = a(0)
    u, a, _ = solve_reduced(-1000.0, 0.0, 1e-3, 9.0, 1.0, TOL)
    assert u == 0.0 and a == 0.0
    # with ũ < 0 (outside the trainer's domain) the constraint binds: u = 0 and a is
    # recomputed at u = 0
    for (dt, ut, eta) in [(0.0, -3.0, 0.5), (2.0, -10.0, 1e-3), (-5.0, -1.0, 10.0)]:
        u, a, _ = solve_reduced(dt, ut, eta, 9.0, 1.0, TOL)
        ur, ar = solve_reduced_reference(dt, ut, eta, 10, 1.0)
        assert u == 0.0 and ur == 0.0
        assert a == pytest.approx(ar, rel=1e-14)
        from scalable_softmax.lambertw import lambertw_exp
        assert a == pytest.approx(lambertw_exp(dt + math.log(2 * eta * 9.0)), rel=1e-15)


def test_proposition2_step_linear_in_delta_minus_u():
    # the W step ||Δw_k|| = a / (2 ||x||) is O(δ̃ - ũ): a <= max(δ̃ - ũ + lc, 1, 2η s)
    # (F.1: a(u) <= a(ũ) = W0(e^{δ̃-ũ+lc}) <= max(δ̃-ũ+lc, 1) if u >= ũ; a <= 2ηs else)
    K, s, ut = 18000, 1.0, 0.5
    diffs = np.linspace(1.0, 1000.0, 200)
    for eta in (1e-6, 1e-3, 1.0, 1e3, 1e6):
        lc = math.log(2 * eta * (K - 1) * s)
        a = np.array([solve_reduced(ut + d, ut, eta, K - 1.0, s, TOL)[1] for d in diffs])
        assert np.all(np.isfinite(a)) and np.all(a > 0)
        assert np.all(a <= np.maximum(np.maximum(diffs + lc, 1.0), 2 * eta * s) + 1e-9)
        # linear growth, never exponential: the slope da/d(δ̃ - ũ) lies in (0, 1] and
        # is constant to 10% over [200, 1000]
        slope = np.diff(a) / np.diff(diffs)
        assert np.all(slope > 0) and np.all(slope <= 1 + 1e-9)
        far = slope[diffs[1:] >= 200]
        assert far.max() <= 1.1 * far.min()


def test_huge_and_tiny_learning_rates_always_finite():
    rng = np.random.default_rng(3)
    for eta in (1e-12, 1e-6, 1e6, 1e9, 1e12):
        for _ in range(50):
            ut = rng.uniform(0, 50)
            dt = ut + rng.uniform(-1000, 1000)
            u, a, ev = solve_reduced(dt, ut, eta, 17999.0, rng.uniform(0.01, 10), TOL)
            assert math.isfinite(u) and math.isfinite(a) and u >= 0 and a >= 0


def test_empty_row_limit():
    # ||x|| = 0: W cannot move (a = 0) and u solves 2η(1 - K e^{-u}) + 2(u - ũ) = 0
    for eta in (1e-3, 1.0, 1e3):
        u, a, _ = solve_reduced(0.0, 0.7, eta, 9.0, 0.0, 1e-13)
        assert a == 0.0
        assert 2 * eta * (1 - 10 * math.exp(-u)) + 2 * (u - 0.7) == pytest.approx(
            0.0, abs=1e-11 * max(1, eta))
        # and it is the limit of small norms
        u2, _, _ = solve_reduced(0.0, 0.7, eta, 9.0, 1e-12, 1e-13)
        assert u2 == pytest.approx(u, rel=1e-9)


# --------------------------------------------------------------------------------------
# the full step in all coordinates
# --------------------------------------------------------------------------------------

def full_problem(x, wk0, wy0, u0, eta, K, mu, bk, by, N):
    """Objective 2η f̂ + ||θ - θ̃||² over θ = (w_k, w_y, u), gradient and Hessian."""
    D = x.size
    km1 = K - 1.0

    def split(th):
        return th[:D], th[D:2 * D], th[2 * D]

    def E(th):
        wk, wy, u = split(th)
        with np.errstate(over="ignore"):
            return km1 * np.exp(x @ (wk - wy) - u)

    def F(th):
        wk, wy, u = split(th)
        f = u + np.exp(-u) + E(th) + mu / (2 * N) * (by * wy @ wy + bk * wk @ wk)
        return 2 * eta * f + np.sum((wk - wk0) ** 2) + np.sum((wy - wy0) ** 2) \
            + (u - u0) ** 2

    def G(th):
        wk, wy, u = split(th)
        e = E(th)
        gk = 2 * eta * (e * x + mu / N * bk * wk) + 2 * (wk - wk0)
        gy = 2 * eta * (-e * x + mu / N * by * wy) + 2 * (wy - wy0)
        gu = 2 * eta * (1 - np.exp(-u) - e) + 2 * (u - u0)
        return np.concatenate([gk, gy, [gu]])

    def H(th):
        wk, wy, u = split(th)
        e = E(th)
        v = np.concatenate([x, -x, [-1.0]])      # gradient of the exponent
        Hm = 2 * eta * e * np.outer(v, v)
        Hm[np.arange(D), np.arange(D)] += 2 * eta * mu / N * bk
        Hm[np.arange(D, 2 * D), np.arange(D, 2 * D)] += 2 * eta * mu / N * by
        Hm[2 * D, 2 * D] += 2 * eta * np.exp(-u)
        return Hm + 2 * np.eye(2 * D + 1)

    return F, G, H


def scipy_full(x, wk0, wy0, u0, eta, K, mu=0.0, bk=1.0, by=1.0, N=1):
    F, G, H = full_problem(x, wk0, wy0, u0, eta, K, mu, bk, by, N)
    s = x @ x
    m = max(0.0, x @ (wk0 - wy0) - u0 + math.log(2 * eta * (K - 1) * s))
    th0 = np.concatenate([wk0 - m * x / (2 * s), wy0 + m * x / (2 * s), [u0]])
    r = minimize(F, th0, jac=G, hess=H, method="trust-exact",
                 options=dict(gtol=1e-300, maxiter=2000))
    r2 = root(G, r.x, jac=H, method="hybr", options=dict(xtol=1e-15))
    th = r2.x if np.all(np.isfinite(r2.x)) and F(r2.x) <= F(r.x) + 1e-12 * abs(F(r.x)) \
        else r.x
    D = x.size
    return th[:D], th[D:2 * D], th[2 * D]


def full_instances(n=60, seed=11):
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        D = int(rng.integers(2, 6))
        nnz = int(rng.integers(1, D + 1))
        idx = np.sort(rng.choice(D, nnz, replace=False))
        val = rng.normal(size=nnz) * 10.0 ** rng.uniform(-1, 0.5)
        wk = rng.normal(size=D) * 3
        wy = rng.normal(size=D) * 3
        u0 = float(rng.choice([0.0, rng.uniform(0, 10)]))
        K = int(rng.choice([2, 5, 1000]))
        eta = 10.0 ** rng.uniform(-6, 6)
        mu = 0.0 if j % 2 == 0 else 10.0 ** rng.uniform(-3, 1)
        N = int(rng.integers(5, 1000))
        bk, by = rng.uniform(1, 50, 2)
        # push δ̃ - ũ to the extremes in a quarter of the instances
        x = np.zeros(D)
        x[idx] = val
        if j % 4 == 1:
            shift = rng.choice([-1000.0, 1000.0]) * rng.uniform(0.2, 1)
            wk = wk + shift * x / (x @ x)
        out.append((idx, val, wk, wy, u0, eta, K, mu, bk, by, N))
    return out


@pytest.mark.parametrize("inst", full_instances(), ids=lambda _: "")
def test_full_step_against_direct_minimisation(inst):
    idx, val, wk, wy, u0, eta, K, mu, bk, by, N = inst
    x = np.zeros(wk.size)
    x[idx] = val
    wk_r, wy_r, u_r = scipy_full(x, wk, wy, u0, eta, K, mu, bk, by, N)
    wk_n, wy_n, u_n, _ = implicit_step(idx, val, wk, wy, u0, eta, K, mu=mu, beta_k=bk,
                                       beta_y=by, N=N)
    assert np.all(np.isfinite(wk_n)) and np.all(np.isfinite(wy_n)) and np.isfinite(u_n)
    assert close(u_n, u_r), (u_n, u_r)
    assert close(wk_n, wk_r) and close(wy_n, wy_r)


@pytest.mark.parametrize("mu", [0.0, 0.3])
def test_kernel_step_equals_reference_step(mu):
    rng = np.random.default_rng(5)
    for _ in range(200):
        D = 8
        nnz = int(rng.integers(1, D + 1))
        idx = rng.choice(D, nnz, replace=False)          # unsorted on purpose
        val = rng.normal(size=nnz)
        wk = rng.normal(size=D) * 10 ** rng.uniform(-2, 2)
        wy = rng.normal(size=D) * 10 ** rng.uniform(-2, 2)
        u0 = rng.uniform(0, 30)
        eta = 10.0 ** rng.uniform(-6, 6)
        K = int(rng.choice([2, 7, 18000]))
        kw = dict(mu=mu, beta_k=rng.uniform(1, 9), beta_y=rng.uniform(1, 9), N=50)
        a = implicit_step(idx, val, wk, wy, u0, eta, K, tol=1e-14, **kw)
        b = reference_step(idx, val, wk, wy, u0, eta, K, **kw)
        for v, r in zip(a[:3], b):
            assert close(v, r, 1e-12)
        # the orthogonal part only shrinks
        x = np.zeros(D)
        x[idx] = val
        Ak = 1 + eta * mu * kw["beta_k"] / kw["N"]
        P = np.eye(D) - np.outer(x, x) / (x @ x)
        assert close(P @ a[0], P @ wk / Ak, 1e-12)


# --------------------------------------------------------------------------------------
# the trainer
# --------------------------------------------------------------------------------------

def small_problem(N=240, D=12, K=4, seed=0, sparse=True):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(K, D)) * 2.0
    y = rng.integers(0, K, N)
    X = centers[y] + rng.normal(size=(N, D))
    X[rng.random((N, D)) < 0.3] = 0.0
    X[np.arange(N), rng.integers(0, D, N)] += 0.5      # no empty row
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return (sp.csr_matrix(X) if sparse else X), y.astype(np.int64), K


def exact_log_loss(X, y, W):
    try:
        from scalable_softmax.objectives import log_loss
        return log_loss(X, y, W)
    except ImportError:  # pragma: no cover
        from scipy.special import logsumexp
        S = np.asarray(X @ W.T)
        return float(np.mean(logsumexp(S, axis=1) - S[np.arange(len(y)), y]))


def train(X, y, K, epochs, lr, seed=0, mu=0.0, u_init="zero", **opts):
    tr = ImplicitTrainer(X, y, K, mu=mu, **opts)
    tr.init_params(u_init)
    tr.warmup()
    rng = np.random.default_rng(seed)
    reps = []
    for e in range(epochs):
        reps.append(tr.run_epoch(rng.permutation(X.shape[0]), lr * 0.9 ** e, seed + e))
    return tr, reps


def test_registry_and_attributes():
    assert get_trainer_class("implicit") is ImplicitTrainer
    assert ImplicitTrainer.name == "implicit" and ImplicitTrainer.has_u


def test_init_params():
    X, y, K = small_problem()
    tr = ImplicitTrainer(X, y, K)
    tr.init_params()
    assert tr.W.shape == (K, X.shape[1]) and tr.W.flags.c_contiguous
    assert np.all(tr.W == 0) and np.all(tr.u == 0)
    tr.init_params("logK")
    assert np.allclose(tr.u, math.log(K))
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'u_init'"):
        ImplicitTrainer(X, y, K, u_init="logK")      # fit's u_init is the one way


def test_options_validated():
    X, y, K = small_problem()
    with pytest.raises(ValueError, match="bogus"):
        ImplicitTrainer(X, y, K, bogus=1)
    with pytest.raises(ValueError, match="tol"):
        ImplicitTrainer(X, y, K, tol=0.0)
    with pytest.raises(ValueError, match="u_init"):
        ImplicitTrainer(X, y, K, u_init="one")
    with pytest.raises(ValueError, match="kernel"):
        ImplicitTrainer(X, y, K, kernel="turbo")
    with pytest.raises(ValueError, match="batch_size"):
        fit(X, y, "implicit", 1.0, K=K, batch_size=2, epochs=1, progress=False)
    with pytest.raises(ValueError, match="n_sampled"):
        fit(X, y, "implicit", 1.0, K=K, n_sampled=2, epochs=1, progress=False)
    with pytest.raises(ValueError, match="threads"):
        ImplicitTrainer(X, y, K, threads=0)
    tr = ImplicitTrainer(X, y, K)
    tr.init_params()
    with pytest.raises(ValueError, match="learning rate"):
        tr.run_epoch(np.arange(X.shape[0]), -1.0, 0)
    with pytest.raises(ValueError, match="order"):
        tr.run_epoch(np.array([X.shape[0]]), 1.0, 0)


def test_epochs_decrease_exact_log_loss():
    X, y, K = small_problem()
    tr = ImplicitTrainer(X, y, K)
    tr.init_params()
    losses = [exact_log_loss(X, y, tr.weights())]
    rng = np.random.default_rng(0)
    for e in range(6):
        rep = tr.run_epoch(rng.permutation(X.shape[0]), 1.0 * 0.9 ** e, e)
        assert rep.steps == X.shape[0] and rep.diverged_at == -1
        assert 1.0 <= rep.extra["root_iterations_mean"] <= rep.extra["root_iterations_max"]
        losses.append(exact_log_loss(X, y, tr.weights()))
    assert losses[0] == pytest.approx(math.log(K))
    assert losses[1] < losses[0] and losses[-1] < 0.6 * losses[1], losses
    # and u tracks u*(W) = log(1 + sum_{k != y} e^{δ_ik}) from below/near
    assert np.all(tr.u >= 0)


@pytest.mark.parametrize("mu", [0.0, 0.05])
def test_same_seed_bit_identical_and_kernels_agree(mu):
    X, y, K = small_problem(K=6)
    a, _ = train(X, y, K, 3, 0.5, seed=7, mu=mu)
    b, _ = train(X, y, K, 3, 0.5, seed=7, mu=mu)
    c, _ = train(X, y, K, 3, 0.5, seed=7, mu=mu, kernel="simple")
    d, _ = train(X, y, K, 3, 0.5, seed=8, mu=mu)
    for other in (b, c):
        assert np.array_equal(a.weights(), other.weights())
        assert np.array_equal(a.u, other.u)
    assert not np.array_equal(a.weights(), d.weights())


@pytest.mark.parametrize("mu", [0.0, 1e-2, 10.0])
def test_huge_learning_rate_never_overflows(mu):
    X, y, K = small_problem(K=5)
    for u_init in ("zero", "logK"):
        tr, reps = train(X, y, K, 4, 1e6, mu=mu, u_init=u_init)
        assert all(r.diverged_at == -1 for r in reps)
        assert np.all(np.isfinite(tr.weights())) and np.all(np.isfinite(tr.u))
        assert np.isfinite(exact_log_loss(X, y, tr.weights()))


def test_trainer_matches_reference_steps_with_ridge():
    # K = 2: the sampled class is determined, so a run can be replayed step by step
    # with the Python reference; the ridge is strong enough that the lazy scales
    # fall below their floor and are folded several times
    X, y, _ = small_problem(N=40, D=6, K=2, seed=3)
    K = 2
    mu, lr = 50.0, 1e3
    tr = ImplicitTrainer(X, y, K, mu=mu)
    tr.init_params()
    rng = np.random.default_rng(1)
    W = np.zeros((K, X.shape[1]))
    W[:] = rng.normal(size=W.shape)
    tr.W[:] = W
    u = rng.uniform(0, 3, X.shape[0])
    tr.u[:] = u
    beta = class_touch_weights(y, K)
    order = rng.integers(0, X.shape[0], 300)
    rep = tr.run_epoch(order, lr, 0)
    assert rep.diverged_at == -1
    Xc = X.tocsr()
    for i in order:
        yi = y[i]
        k = 1 - yi
        row = Xc[i]
        W[k], W[yi], u[i] = reference_step(row.indices, row.data, W[k], W[yi],
                                           u[i], lr, K, mu=mu, beta_k=beta[k],
                                           beta_y=beta[yi], N=X.shape[0])
    got = tr.weights()
    assert np.all(np.abs(got - W) <= 1e-9 * np.maximum(1e-200, np.abs(W)) + 1e-300)
    assert close(tr.u, u, 1e-9)


def test_trainer_one_step_without_ridge_matches_reference():
    X, y, _ = small_problem(N=30, D=5, K=2, seed=4)
    tr = ImplicitTrainer(X, y, 2)
    tr.init_params()
    tr.W[:] = np.random.default_rng(0).normal(size=tr.W.shape) * 5
    W = tr.W.copy()
    i = 7
    tr.run_epoch(np.array([i]), 3.0, 0)
    row = X.tocsr()[i]
    k, yi = 1 - y[i], y[i]
    wk, wyy, ui = reference_step(row.indices, row.data, W[k], W[yi], 0.0, 3.0, 2)
    assert close(tr.W[k], wk, 1e-9) and close(tr.W[yi], wyy, 1e-9)
    assert close(tr.u[i], ui, 1e-9)
    others = np.arange(X.shape[0]) != i
    assert np.all(tr.u[others] == 0)


def test_dense_input_accepted():
    X, y, K = small_problem(sparse=False)
    a, _ = train(X, y, K, 2, 0.3)
    b, _ = train(sp.csr_matrix(X), y, K, 2, 0.3)
    assert np.array_equal(a.weights(), b.weights())
