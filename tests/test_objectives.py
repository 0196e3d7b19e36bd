"""Tests of the NumPy reference mathematics (scalable_softmax.objectives).

Small seeded random problems; every gradient is checked against central finite
differences, every stochastic term against the exact expectation over all samples,
and the identities of docs/math.md (min over u of f = -L + N, the OVE and Bouchard bounds,
the range of the defective metric) are checked directly.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import expit

import scalable_softmax.objectives as ob

# ---------------------------------------------------------------------------
# fixtures and helpers
# ---------------------------------------------------------------------------

def make_problem(seed=0, N=7, D=4, K=5, scale=1.0, density=0.7, unused_class=True):
    """A small random problem. Some entries of X are zero (sparse-like rows) and,
    with ``unused_class``, class K-1 is never a label (n_j = 0, exercising beta)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D)) * (rng.random((N, D)) < density)
    X[np.arange(N), rng.integers(0, D, N)] += 1.0  # no empty row
    hi = K - 1 if unused_class else K
    y = rng.integers(0, hi, N).astype(np.int64)
    y[0], y[1] = 0, 1  # at least two distinct labels
    W = scale * rng.normal(size=(K, D))
    u = rng.random(N) * 2.0
    return X, y, W, u


def fd_grad(fun, x0, h=1e-6):
    """Central finite-difference gradient of scalar ``fun`` at array ``x0``."""
    x0 = np.array(x0, dtype=np.float64)
    g = np.zeros_like(x0)
    for idx in np.ndindex(x0.shape):
        xp = x0.copy()
        xm = x0.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = (fun(xp) - fun(xm)) / (2 * h)
    return g


def assert_grad(analytic, numeric, rtol=1e-6):
    scale = max(1.0, np.max(np.abs(numeric)))
    np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=rtol * scale)


def all_pairs(y, K):
    """Every (i, k != y_i), each with probability 1/(N (K-1))."""
    return [(i, k) for i in range(len(y)) for k in range(K) if k != y[i]]


LOGK_E = lambda K: math.log(K - 1 + math.e)  # noqa: E731


# ---------------------------------------------------------------------------
# helpers and section 1
# ---------------------------------------------------------------------------

def test_softplus_stable_and_accurate():
    z = np.linspace(-30, 30, 121)
    np.testing.assert_allclose(ob.softplus(z), np.log1p(np.exp(z)), rtol=1e-14, atol=0)
    with np.errstate(over="raise", invalid="raise"):
        assert ob.softplus(1e4) == 1e4
        assert ob.softplus(-1e4) == 0.0
        assert ob.softplus(800.0) == 800.0
    assert ob.softplus(-50.0) == pytest.approx(math.exp(-50.0), rel=1e-14)
    assert np.isscalar(ob.softplus(0.0)) and ob.softplus(0.0) == pytest.approx(math.log(2))


def test_log_loss_and_error_match_naive_formulas():
    X, y, W, _ = make_problem(1)
    S = X @ W.T
    P = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)
    assert ob.log_loss(X, y, W) == pytest.approx(-np.mean(np.log(P[np.arange(len(y)), y])),
                                                 rel=1e-13)
    assert ob.error_rate(X, y, W) == np.mean(S.argmax(axis=1) != y)
    np.testing.assert_allclose(ob.probabilities(X, W), P, rtol=1e-13)
    assert np.all(ob.nll_per_point(X, y, W) >= 0)


def test_log_loss_and_error_at_zero():
    X, y, W, _ = make_problem(2, K=6)
    W0 = np.zeros_like(W)
    assert ob.log_loss(X, y, W0) == pytest.approx(math.log(6), rel=1e-14)
    assert ob.error_rate(X, y, W0) == np.mean(y != 0)  # ties go to class 0


def test_log_loss_extreme_scores_no_overflow():
    X = np.ones((3, 1))
    y = np.array([0, 1, 2])
    W = np.array([[1e4], [0.0], [-1e4]])
    with np.errstate(over="raise", invalid="raise"):
        ll = ob.log_loss(X, y, W)
        nll = ob.nll_per_point(X, y, W)
    np.testing.assert_allclose(nll, [0.0, 1e4, 2e4], rtol=1e-15, atol=1e-300)
    assert ll == pytest.approx(1e4, rel=1e-15)
    # random extreme problem: finite, and agrees with a shifted-by-hand evaluation
    X, y, W, _ = make_problem(3, K=8, scale=1e4)
    with np.errstate(over="raise", invalid="raise"):
        ll = ob.log_loss(X, y, W)
    S = X @ W.T
    m = S.max(axis=1, keepdims=True)
    ref = np.mean(m[:, 0] + np.log(np.exp(S - m).sum(axis=1)) - S[np.arange(len(y)), y])
    assert np.isfinite(ll) and ll == pytest.approx(ref, rel=1e-12)
    assert 0.0 <= ob.error_rate(X, y, W) <= 1.0


@pytest.mark.parametrize("K", [2, 3, 10])
@pytest.mark.parametrize("scale", [0.0, 0.1, 1.0, 10.0, 1e3, 1e4])
def test_defective_metric_range(K, scale):
    X, y, W, _ = make_problem(4, N=20, K=K, scale=scale, unused_class=False)
    with np.errstate(over="raise", invalid="raise"):
        v = ob.defective_metric(X, y, W)
    lo, hi = LOGK_E(K) - 1.0, LOGK_E(K)
    assert lo - 1e-12 <= v <= hi + 1e-12
    if scale == 0.0:
        assert v == pytest.approx(math.log(K), rel=1e-14)
    # it is not the log-loss: for extreme scores the true log-loss leaves the range
    if scale >= 1e3:
        assert ob.log_loss(X, y, W) > hi


def test_defective_metric_attains_both_ends():
    K = 4
    X = np.eye(K)
    y = np.arange(K)
    W_right = 1e4 * np.eye(K)  # p_i one-hot on its label
    W_wrong = 1e4 * np.roll(np.eye(K), 1, axis=0)  # one-hot on another class
    assert ob.defective_metric(X, y, W_right) == pytest.approx(LOGK_E(K) - 1.0, abs=1e-12)
    assert ob.defective_metric(X, y, W_wrong) == pytest.approx(LOGK_E(K), abs=1e-12)
    assert ob.error_rate(X, y, W_right) == 0.0 and ob.error_rate(X, y, W_wrong) == 1.0


@pytest.mark.parametrize("mu", [0.0, 0.7])
def test_ridge_log_likelihood_and_grad(mu):
    X, y, W, _ = make_problem(5)
    N = len(y)
    L = ob.ridge_log_likelihood(X, y, W, mu)
    assert L == pytest.approx(-N * ob.log_loss(X, y, W) - 0.5 * mu * np.sum(W**2), rel=1e-13)
    g = ob.ridge_log_likelihood_grad(X, y, W, mu)
    assert_grad(g, fd_grad(lambda w: ob.ridge_log_likelihood(X, y, w, mu), W))


# ---------------------------------------------------------------------------
# section 2: double sum
# ---------------------------------------------------------------------------

def test_class_counts_and_touch_weights_by_hand():
    y = np.array([0, 0, 1])
    np.testing.assert_array_equal(ob.class_counts(y, 3), [2, 1, 0])
    np.testing.assert_allclose(ob.touch_weights(y, 3), [3 / 2.5, 3 / 2.0, 3 / 1.5])
    # m = 2 of K-1 = 2 other classes: every class is always touched
    np.testing.assert_allclose(ob.touch_weights(y, 3, m=2), [1.0, 1.0, 1.0])
    # with replacement, 2 draws from 2 classes miss a given one with probability 1/4
    np.testing.assert_allclose(ob.touch_weights(y, 3, m=2, replace=True),
                               [3 / (2 + 0.75), 3 / (1 + 2 * 0.75), 3 / (3 * 0.75)])


def test_u_star_formula_and_nonnegative():
    X, y, W, _ = make_problem(6)
    S = X @ W.T
    D = S - S[np.arange(len(y)), y][:, None]
    naive = np.log(1 + np.exp(D).sum(axis=1) - 1.0)  # sum over k != y_i (delta_yy = 0)
    np.testing.assert_allclose(ob.u_star(X, y, W), naive, rtol=1e-13)
    # extreme: the label dominates by 1e4, so u* = log(1 + ~0) must still be >= 0
    X = np.ones((2, 1))
    y = np.array([0, 1])
    W = np.array([[1e4], [1e4], [-1e4]])
    W[1] = 1e4  # tie between 0 and 1: u* = log 2
    us = ob.u_star(X, y, W)
    assert np.all(us >= 0) and us == pytest.approx([math.log(2)] * 2)
    W = np.array([[1e4], [-1e4], [-1e4]])
    us = ob.u_star(X, np.array([0, 0]), W)
    assert np.all(us >= 0.0) and np.all(us < 1e-300)
    for seed in range(5):
        Xr, yr, Wr, _ = make_problem(seed, scale=100.0)
        assert np.all(ob.u_star(Xr, yr, Wr) >= 0.0)


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_min_over_u_of_double_sum_is_minus_L_plus_N(mu):
    X, y, W, _ = make_problem(7)
    N = len(y)
    target = -ob.ridge_log_likelihood(X, y, W, mu) + N
    us = ob.u_star(X, y, W)
    assert ob.double_sum(us, X, y, W, mu) == pytest.approx(target, rel=1e-13)
    _, du = ob.double_sum_grad(us, X, y, W, mu)
    np.testing.assert_allclose(du, 0.0, atol=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(20):
        d = rng.normal(size=N)
        for eps in (1e-3, -1e-3, 0.3):
            up = np.maximum(us + eps * d, 0.0)
            assert ob.double_sum(up, X, y, W, mu) > target
    # numerical minimisation over u >= 0, from two starts
    for u0 in (np.zeros(N), 3.0 * rng.random(N)):
        res = minimize(lambda u: ob.double_sum(u, X, y, W, mu), u0,
                       jac=lambda u: ob.double_sum_grad(u, X, y, W, mu)[1],
                       method="L-BFGS-B", bounds=[(0, None)] * N,
                       options=dict(ftol=1e-15, gtol=1e-12))
        assert res.fun == pytest.approx(target, rel=1e-10)
        np.testing.assert_allclose(res.x, us, atol=1e-5)


@pytest.mark.parametrize("mu", [0.0, 0.3])
def test_double_sum_grad_fd(mu):
    X, y, W, u = make_problem(8)
    dW, du = ob.double_sum_grad(u, X, y, W, mu)
    assert_grad(dW, fd_grad(lambda w: ob.double_sum(u, X, y, w, mu), W))
    assert_grad(du, fd_grad(lambda v: ob.double_sum(v, X, y, W, mu), u))


@pytest.mark.parametrize("mu", [0.0, 0.4])
def test_f_ik_grad_fd(mu):
    X, y, W, u = make_problem(9)
    K = W.shape[0]
    beta = ob.touch_weights(y, K)
    for i, k in [(0, 2), (3, 4), (5, (y[5] + 1) % K)]:
        if k == y[i]:
            k = (k + 1) % K
        dW, du_i = ob.f_ik_grad(i, k, u, X, y, W, mu)
        assert_grad(dW, fd_grad(lambda w: ob.f_ik(i, k, u, X, y, w, mu), W))
        du_fd = fd_grad(lambda v: ob.f_ik(i, k, v, X, y, W, mu), u)
        assert du_i == pytest.approx(du_fd[i], rel=1e-6)
        np.testing.assert_allclose(np.delete(du_fd, i), 0.0, atol=1e-6)
        # rows other than k and y_i untouched
        others = [j for j in range(K) if j not in (k, y[i])]
        assert np.all(dW[others] == 0.0)
        # default beta is touch_weights
        dW2, _ = ob.f_ik_grad(i, k, u, X, y, W, mu, beta=beta)
        np.testing.assert_array_equal(dW, dW2)


@pytest.mark.parametrize("mu", [0.0, 0.6])
def test_f_ik_is_unbiased(mu):
    """Exact expectation over all (i, k != y_i), probability 1/(N(K-1)), with the
    class K-1 never a label (n_j = 0) so that beta matters."""
    X, y, W, u = make_problem(10)
    N, K = len(y), W.shape[0]
    assert ob.class_counts(y, K)[K - 1] == 0
    pairs = all_pairs(y, K)
    p = 1.0 / (N * (K - 1))
    assert len(pairs) * p == pytest.approx(1.0)
    Ef = sum(p * ob.f_ik(i, k, u, X, y, W, mu) for i, k in pairs)
    EdW = np.zeros_like(W)
    Edu = np.zeros(N)
    for i, k in pairs:
        dW, du_i = ob.f_ik_grad(i, k, u, X, y, W, mu)
        EdW += p * dW
        Edu[i] += p * du_i
    dW, du = ob.double_sum_grad(u, X, y, W, mu)
    assert Ef == pytest.approx(ob.double_sum(u, X, y, W, mu), rel=1e-12)
    np.testing.assert_allclose(EdW, dW, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(Edu, du, rtol=1e-11, atol=1e-12)
    if mu:
        # a uniform beta (= 1) is biased once the classes are unbalanced
        Ef1 = sum(p * ob.f_ik(i, k, u, X, y, W, mu, beta=np.ones(K)) for i, k in pairs)
        assert abs(Ef1 - ob.double_sum(u, X, y, W, mu)) > 1e-3


def test_f_ik_scaled_is_per_datapoint():
    X, y, W, u = make_problem(11)
    N = len(y)
    mu = 0.3
    assert ob.f_ik_scaled(2, 4, u, X, y, W, mu) == pytest.approx(ob.f_ik(2, 4, u, X, y, W, mu) / N)
    dW, du = ob.f_ik_grad(2, 4, u, X, y, W, mu)
    dWs, dus = ob.f_ik_grad_scaled(2, 4, u, X, y, W, mu)
    np.testing.assert_allclose(dWs, dW / N, rtol=1e-15)
    assert dus == pytest.approx(du / N, rel=1e-15)
    # the F-7 formula written out per datapoint, including (mu/N) beta_j w_j
    x = X[2]
    e = math.exp(x @ (W[4] - W[y[2]]) - u[2])
    beta = ob.touch_weights(y, W.shape[0])
    np.testing.assert_allclose(dWs[4], (W.shape[0] - 1) * e * x + mu / N * beta[4] * W[4],
                               rtol=1e-13)


def test_f_ik_overflows_when_u_far_below_delta():
    """The instability of docs/math.md section 2 is visible in the reference, not hidden."""
    X = np.array([[1.0]])
    y = np.array([0])
    W = np.array([[0.0], [800.0]])
    u = np.zeros(1)
    with np.errstate(over="ignore"):
        dW, du = ob.f_ik_grad(0, 1, u, X, y, W)
        assert not np.isfinite(du) and not np.all(np.isfinite(dW))
    assert np.isfinite(ob.u_star(X, y, W)).all()


# ---------------------------------------------------------------------------
# section 3: U-max
# ---------------------------------------------------------------------------

def test_umax_bounds_values():
    X, y, W, _ = make_problem(12)
    N, K = X.shape[0], 5
    Bx, BW, Bu = ob.umax_bounds(X, K, 0.5)
    assert Bx == pytest.approx(np.max(np.linalg.norm(X, axis=1)), rel=1e-14)
    assert BW == pytest.approx(math.sqrt(2 * N * math.log(K) / 0.5), rel=1e-14)
    assert Bu == pytest.approx(math.log1p((K - 1) * math.exp(2 * Bx * BW)), rel=1e-12)
    assert ob.umax_bounds(X, K, 0.0)[1:] == (math.inf, math.inf)
    # huge exponent: computed stably, no overflow
    _, BW, Bu = ob.umax_bounds(1e3 * X, K, 1e-6)
    assert np.isfinite(Bu) and Bu == pytest.approx(math.log(K - 1) + 2 * 1e3 * Bx * BW, rel=1e-12)


def test_umax_bounds_lemmas_hold():
    """Lemma 1: the ridge MLE has ||W*||_F <= B_W. Lemma 2: u*(W) <= B_u when every
    row has norm <= B_W."""
    X, y, W, _ = make_problem(13, N=12, K=4)
    K = 4
    for mu in (0.05, 1.0, 20.0):
        _, BW, Bu = ob.umax_bounds(X, K, mu)
        res = minimize(lambda w: -ob.ridge_log_likelihood(X, y, w.reshape(W.shape), mu),
                       np.zeros(W.size),
                       jac=lambda w: -ob.ridge_log_likelihood_grad(X, y, w.reshape(W.shape),
                                                                   mu).ravel(),
                       method="L-BFGS-B", options=dict(gtol=1e-10))
        assert np.linalg.norm(res.x) <= BW
        # adversarial W: rows of norm B_W pointing along +/- x_i
        i = int(np.argmax(np.linalg.norm(X, axis=1)))
        xi = X[i] / np.linalg.norm(X[i])
        Wa = np.tile(BW * xi, (K, 1))
        Wa[y[i]] = -BW * xi
        assert ob.u_star(X, y, Wa)[i] <= Bu * (1 + 1e-12)


def test_umax_reset_values():
    X, y, W, _ = make_problem(14)
    K = W.shape[0]
    i = 3
    k = (y[i] + 1) % K
    x = X[i]
    assert ob.umax_reset_value(i, k, X, y, W) == pytest.approx(ob.softplus(x @ (W[k] - W[y[i]])),
                                                               rel=1e-14)
    others = [j for j in range(K) if j != y[i]]
    assert ob.umax_reset_value(i, others, X, y, W) == pytest.approx(ob.u_star(X, y, W)[i],
                                                                    rel=1e-13)
    assert ob.raman_umax_reset_value(i, [k], X, y, W) == pytest.approx(
        ob.umax_reset_value(i, [k], X, y, W) + x @ W[y[i]], rel=1e-13)
    assert ob.raman_umax_reset_value(i, others, X, y, W) == pytest.approx(
        ob.raman_u_star(X, y, W)[i], rel=1e-13)


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_f_iS_unbiased_and_reduces_to_f_ik(mu):
    X, y, W, u = make_problem(15, N=5, K=5)
    N, K, m = len(y), W.shape[0], 2
    # m = 1 is f_ik exactly
    assert ob.f_iS(0, [3], u, X, y, W, mu) == pytest.approx(ob.f_ik(0, 3, u, X, y, W, mu),
                                                            rel=1e-14)
    g1, d1 = ob.f_iS_grad(0, [3], u, X, y, W, mu)
    g2, d2 = ob.f_ik_grad(0, 3, u, X, y, W, mu)
    np.testing.assert_allclose(g1, g2, rtol=1e-14)
    assert d1 == pytest.approx(d2, rel=1e-14)
    # m = 2: all subsets of the K-1 other classes, without replacement
    Ef, EdW, Edu = 0.0, np.zeros_like(W), np.zeros(N)
    for i in range(N):
        subsets = list(itertools.combinations([k for k in range(K) if k != y[i]], m))
        p = 1.0 / (N * len(subsets))
        for S in subsets:
            Ef += p * ob.f_iS(i, list(S), u, X, y, W, mu)
            dW, du_i = ob.f_iS_grad(i, list(S), u, X, y, W, mu)
            EdW += p * dW
            Edu[i] += p * du_i
    dW, du = ob.double_sum_grad(u, X, y, W, mu)
    assert Ef == pytest.approx(ob.double_sum(u, X, y, W, mu), rel=1e-12)
    np.testing.assert_allclose(EdW, dW, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(Edu, du, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_f_iS_with_replacement_unbiased(mu):
    """m = 2 draws with replacement: all ordered pairs, duplicates allowed."""
    X, y, W, u = make_problem(33, N=4, K=4)
    N, K, m = len(y), W.shape[0], 2
    Ef, EdW, Edu = 0.0, np.zeros_like(W), np.zeros(N)
    for i in range(N):
        others = [k for k in range(K) if k != y[i]]
        tuples = list(itertools.product(others, repeat=m))
        p = 1.0 / (N * len(tuples))
        for S in tuples:
            Ef += p * ob.f_iS(i, list(S), u, X, y, W, mu, replace=True)
            dW, du_i = ob.f_iS_grad(i, list(S), u, X, y, W, mu, replace=True)
            EdW += p * dW
            Edu[i] += p * du_i
    dW, du = ob.double_sum_grad(u, X, y, W, mu)
    assert Ef == pytest.approx(ob.double_sum(u, X, y, W, mu), rel=1e-12)
    np.testing.assert_allclose(EdW, dW, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(Edu, du, rtol=1e-11, atol=1e-12)
    ks = [k for k in range(K) if k != y[0]][:1] * 2  # a repeated class
    g, _ = ob.f_iS_grad(0, ks, u, X, y, W, mu, replace=True)
    assert_grad(g, fd_grad(lambda w: ob.f_iS(0, ks, u, X, y, w, mu, replace=True), W))


def test_f_iS_grad_fd_and_scaled():
    X, y, W, u = make_problem(16)
    mu, i = 0.3, 4
    ks = [k for k in range(5) if k != y[i]][:3]
    dW, du_i = ob.f_iS_grad(i, ks, u, X, y, W, mu)
    assert_grad(dW, fd_grad(lambda w: ob.f_iS(i, ks, u, X, y, w, mu), W))
    assert du_i == pytest.approx(fd_grad(lambda v: ob.f_iS(i, ks, v, X, y, W, mu), u)[i], rel=1e-6)
    N = len(y)
    assert ob.f_iS_scaled(i, ks, u, X, y, W, mu) == pytest.approx(
        ob.f_iS(i, ks, u, X, y, W, mu) / N)
    np.testing.assert_allclose(ob.f_iS_grad_scaled(i, ks, u, X, y, W, mu)[0], dW / N)
    with pytest.raises(ValueError, match="distinct"):
        ob.f_iS(i, [ks[0], ks[0]], u, X, y, W)


# ---------------------------------------------------------------------------
# section 5: minibatch term (Appendix F.3)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("mu", [0.0, 0.8])
def test_f_batch_unbiased(mu):
    X, y, W, u = make_problem(17, N=6, K=6)
    y = np.array([0, 0, 1, 2, 3, 1])  # the first batch has a repeated label
    batches = [np.array([0, 1]), np.array([2, 3]), np.array([4, 5])]
    N, K, m = len(y), W.shape[0], 2
    beta = ob.batch_touch_weights(y, K, batches, m)
    Ef, EdW, Edu = 0.0, np.zeros_like(W), np.zeros(N)
    for b in batches:
        L = np.unique(y[b])
        rest = [k for k in range(K) if k not in L]
        subsets = list(itertools.combinations(rest, m))
        p = (b.size / N) / len(subsets)
        for C in subsets:
            Ef += p * ob.f_batch(b, list(C), u, X, y, W, mu, beta)
            dW, du = ob.f_batch_grad(b, list(C), u, X, y, W, mu, beta)
            EdW += p * dW
            Edu += p * du
    dW, du = ob.double_sum_grad(u, X, y, W, mu)
    assert Ef == pytest.approx(ob.double_sum(u, X, y, W, mu), rel=1e-12)
    np.testing.assert_allclose(EdW, dW, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(Edu, du, rtol=1e-11, atol=1e-12)


def test_f_batch_grad_fd_and_singletons():
    X, y, W, u = make_problem(18, N=6, K=6)
    b, C, mu = np.array([1, 4, 5]), None, 0.5
    L = np.unique(y[b])
    C = [k for k in range(6) if k not in L][:2]
    beta = np.linspace(1.0, 2.0, 6)
    dW, du = ob.f_batch_grad(b, C, u, X, y, W, mu, beta)
    assert_grad(dW, fd_grad(lambda w: ob.f_batch(b, C, u, X, y, w, mu, beta), W))
    assert_grad(du, fd_grad(lambda v: ob.f_batch(b, C, v, X, y, W, mu, beta), u))
    N = len(y)
    assert ob.f_batch_scaled(b, C, u, X, y, W, mu, beta) == pytest.approx(
        ob.f_batch(b, C, u, X, y, W, mu, beta) / N)
    np.testing.assert_allclose(ob.f_batch_grad_scaled(b, C, u, X, y, W, mu, beta)[1], du / N)
    # singleton batches: f_batch is f_iS, and the batch betas are touch_weights(m)
    singles = [np.array([i]) for i in range(N)]
    np.testing.assert_allclose(ob.batch_touch_weights(y, 6, singles, 2),
                               ob.touch_weights(y, 6, m=2), rtol=1e-14)
    ks = [k for k in range(6) if k != y[2]][:2]
    assert ob.f_batch([2], ks, u, X, y, W) == pytest.approx(ob.f_iS(2, ks, u, X, y, W), rel=1e-14)
    with pytest.raises(ValueError, match="beta"):
        ob.f_batch(b, C, u, X, y, W, mu=0.5)
    with pytest.raises(ValueError, match="label"):
        ob.f_batch(b, [int(y[1])], u, X, y, W)
    with pytest.raises(ValueError, match="partition"):
        ob.batch_touch_weights(y, 6, [np.array([0, 1])], 1)


# ---------------------------------------------------------------------------
# section 6: Raman et al.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_raman_min_over_ubar_is_minus_L_plus_N(mu):
    X, y, W, _ = make_problem(19)
    N = len(y)
    W = W - 3.0  # make scores negative so ubar* < 0 somewhere: no constraint on ubar
    target = -ob.ridge_log_likelihood(X, y, W, mu) + N
    ub = ob.raman_u_star(X, y, W)
    assert np.any(ub < 0)
    assert ob.raman_double_sum(ub, X, y, W, mu) == pytest.approx(target, rel=1e-13)
    np.testing.assert_allclose(ob.raman_double_sum_grad(ub, X, y, W, mu)[1], 0.0, atol=1e-12)
    res = minimize(lambda v: ob.raman_double_sum(v, X, y, W, mu), np.zeros(N),
                   jac=lambda v: ob.raman_double_sum_grad(v, X, y, W, mu)[1], method="BFGS",
                   options=dict(gtol=1e-12))
    assert res.fun == pytest.approx(target, rel=1e-10)
    np.testing.assert_allclose(res.x, ub, atol=1e-5)
    rng = np.random.default_rng(1)
    for _ in range(10):
        assert ob.raman_double_sum(ub + 1e-3 * rng.normal(size=N), X, y, W, mu) > target


def test_raman_is_a_reparametrisation_of_f():
    X, y, W, u = make_problem(20)
    sy = (X @ W.T)[np.arange(len(y)), y]
    ubar = u + sy
    assert ob.raman_double_sum(ubar, X, y, W, 0.3) == pytest.approx(ob.double_sum(u, X, y, W, 0.3),
                                                                    rel=1e-13)
    for i, k in all_pairs(y, W.shape[0])[::3]:
        assert ob.raman_f_ik(i, k, ubar, X, y, W, 0.3) == pytest.approx(
            ob.f_ik(i, k, u, X, y, W, 0.3), rel=1e-12)
    np.testing.assert_allclose(ob.raman_u_star(X, y, W), ob.u_star(X, y, W) + sy, rtol=1e-13)


@pytest.mark.parametrize("mu", [0.0, 0.4])
def test_raman_grads_fd_and_unbiased(mu):
    X, y, W, u = make_problem(21)
    N, K = len(y), W.shape[0]
    ubar = u - 0.5
    dW, du = ob.raman_double_sum_grad(ubar, X, y, W, mu)
    assert_grad(dW, fd_grad(lambda w: ob.raman_double_sum(ubar, X, y, w, mu), W))
    assert_grad(du, fd_grad(lambda v: ob.raman_double_sum(v, X, y, W, mu), ubar))
    i, k = 3, (y[3] + 2) % K
    gW, gu = ob.raman_f_ik_grad(i, k, ubar, X, y, W, mu)
    assert_grad(gW, fd_grad(lambda w: ob.raman_f_ik(i, k, ubar, X, y, w, mu), W))
    assert gu == pytest.approx(fd_grad(lambda v: ob.raman_f_ik(i, k, v, X, y, W, mu), ubar)[i],
                               rel=1e-6)
    pairs = all_pairs(y, K)
    p = 1.0 / (N * (K - 1))
    Ef, EdW, Edu = 0.0, np.zeros_like(W), np.zeros(N)
    for i, k in pairs:
        Ef += p * ob.raman_f_ik(i, k, ubar, X, y, W, mu)
        gW, gu = ob.raman_f_ik_grad(i, k, ubar, X, y, W, mu)
        EdW += p * gW
        Edu[i] += p * gu
    assert Ef == pytest.approx(ob.raman_double_sum(ubar, X, y, W, mu), rel=1e-12)
    np.testing.assert_allclose(EdW, dW, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(Edu, du, rtol=1e-11, atol=1e-12)
    # scaled versions
    assert ob.raman_f_ik_scaled(i, k, ubar, X, y, W, mu) == pytest.approx(
        ob.raman_f_ik(i, k, ubar, X, y, W, mu) / N)
    np.testing.assert_allclose(ob.raman_f_ik_grad_scaled(i, k, ubar, X, y, W, mu)[0],
                               ob.raman_f_ik_grad(i, k, ubar, X, y, W, mu)[0] / N)


def test_raman_original_code_defect():
    X, y, W, u = make_problem(22, density=0.5)
    N, K = len(y), W.shape[0]
    ubar = u
    i = next(j for j in range(N) if np.any(X[j] == 0))
    k = (y[i] + 1) % K
    x = X[i]
    ey = math.exp(x @ W[y[i]] - ubar[i])
    ek = math.exp(x @ W[k] - ubar[i])
    gW, gu = ob.raman_f_ik_grad(i, k, ubar, X, y, W)
    bW, bu = ob.raman_f_ik_grad_original_code(i, k, ubar, X, y, W)
    # the u-derivative has an extra exp around exp(s_y - ubar)
    assert bu == pytest.approx(N * (1 - math.exp(ey) - (K - 1) * ek), rel=1e-13)
    assert bu - gu == pytest.approx(N * (ey - math.exp(ey)), rel=1e-12)
    # the w_y step is the scalar N(e_y - 1) on the support of x_i, without x_i
    np.testing.assert_allclose(bW[y[i]], N * (ey - 1) * (x != 0), rtol=1e-13)
    assert np.any(bW[y[i]] == 0) and np.any(bW[y[i]] != 0)
    aW, au = ob.raman_f_ik_grad_original_code(i, k, ubar, X, y, W, scope="all")
    np.testing.assert_allclose(aW[y[i]], np.full(W.shape[1], N * (ey - 1)), rtol=1e-13)
    assert au == bu
    # the w_k step is correct
    np.testing.assert_allclose(bW[k], gW[k], rtol=1e-15)
    # ... and the whole is not the gradient
    assert not np.allclose(bW[y[i]], gW[y[i]])
    assert not np.isclose(bu, gu)
    # per-datapoint version, and agreement of the two scopes on a row with no zeros
    np.testing.assert_allclose(ob.raman_f_ik_grad_original_code_scaled(i, k, ubar, X, y, W)[0],
                               bW / N)
    Xd = X.copy()
    Xd[i] = np.where(x == 0, 0.5, x)
    s1 = ob.raman_f_ik_grad_original_code(i, k, ubar, Xd, y, W, scope="support")[0]
    s2 = ob.raman_f_ik_grad_original_code(i, k, ubar, Xd, y, W, scope="all")[0]
    np.testing.assert_array_equal(s1, s2)
    with pytest.raises(ValueError, match="scope"):
        ob.raman_f_ik_grad_original_code(i, k, ubar, X, y, W, scope="every")


# ---------------------------------------------------------------------------
# section 7: biased baselines
# ---------------------------------------------------------------------------

def _point(seed=23, K=6, D=4, scale=1.0):
    rng = np.random.default_rng(seed)
    W = scale * rng.normal(size=(K, D))
    x = rng.normal(size=D)
    y = 2
    return x, y, W, K


@pytest.mark.parametrize("ks", [[0], [4, 1, 5], [1, 1, 3]])
def test_baseline_grads_fd(ks):
    x, y, W, K = _point()
    r = (K - 1) / len(ks)
    cases = [
        (lambda w: ob.ove_loss(x, y, w, ks, r), ob.ove_grad(x, y, W, ks, r)),
        (lambda w: ob.is_loss(x, y, w, ks, r), ob.is_grad(x, y, W, ks, r)),
        (lambda w: ob.is_loss(x, y, w, ks, r, weighted=False),
         ob.is_grad(x, y, W, ks, r, weighted=False)),
        (lambda w: ob.nce_loss(x, y, w, ks, K), ob.nce_grad(x, y, W, ks, K)),
    ]
    for fun, g in cases:
        assert g.shape == W.shape
        assert_grad(g, fd_grad(fun, W))


def test_baselines_match_written_formulas():
    x, y, W, K = _point(24)
    s = W @ x
    ks = np.array([0, 5, 3])
    m = len(ks)
    r = (K - 1) / m
    assert ob.ove_loss(x, y, W, ks, r) == pytest.approx(
        r * np.sum(np.log1p(np.exp(s[ks] - s[y]))), rel=1e-13)
    assert ob.is_loss(x, y, W, ks, r) == pytest.approx(
        -s[y] + np.log(np.exp(s[y]) + r * np.exp(s[ks]).sum()), rel=1e-13)
    assert ob.is_loss(x, y, W, ks, r, weighted=False) == pytest.approx(
        -s[y] + np.log(np.exp(s[y]) + np.exp(s[ks]).sum()), rel=1e-13)
    c = math.log(m / K)
    nce = -np.log(expit(s[y] - c)) - np.sum(np.log(expit(-(s[ks] - c))))
    assert ob.nce_loss(x, y, W, ks, K) == pytest.approx(nce, rel=1e-13)
    # all other classes with weight 1: OVE is the exact OVE term, IS the exact NLL
    X1 = x[None, :]
    y1 = np.array([y])
    others = [k for k in range(K) if k != y]
    assert ob.ove_loss(x, y, W, others, 1.0) == pytest.approx(ob.ove_per_point(X1, y1, W)[0],
                                                              rel=1e-13)
    assert ob.is_loss(x, y, W, others, 1.0) == pytest.approx(ob.nll_per_point(X1, y1, W)[0],
                                                             rel=1e-13)
    with pytest.raises(ValueError, match="label"):
        ob.ove_loss(x, y, W, [y], 1.0)


def test_ove_estimate_unbiased_is_not():
    x, y, W, K = _point(25)
    X1, y1 = x[None, :], np.array([y])
    others = [k for k in range(K) if k != y]
    E_ove = np.mean([ob.ove_loss(x, y, W, [k], K - 1) for k in others])
    assert E_ove == pytest.approx(ob.ove_per_point(X1, y1, W)[0], rel=1e-13)
    E_ove_g = np.mean([ob.ove_grad(x, y, W, [k], K - 1) for k in others], axis=0)
    np.testing.assert_allclose(E_ove_g, ob.ove_objective_grad(X1, y1, W), rtol=1e-12, atol=1e-14)
    E_is = np.mean([ob.is_loss(x, y, W, [k], K - 1) for k in others])
    assert E_is < ob.nll_per_point(X1, y1, W)[0]  # Jensen: the sampled log is biased low


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 1e3])
def test_ove_bound_dominates_nll(scale):
    """(T-4): p(y|x) >= prod_{k != y} sigma(s_y - s_k), i.e. -log p <= OVE term."""
    X, y, W, _ = make_problem(26, N=30, K=7, scale=scale)
    nll = ob.nll_per_point(X, y, W)
    ove = ob.ove_per_point(X, y, W)
    assert np.all(ove >= nll - 1e-12 * np.maximum(1, nll))
    assert ob.ove_objective(X, y, W) >= ob.log_loss(X, y, W)
    # equality for K = 2
    X2, y2, W2, _ = make_problem(27, K=2, unused_class=False, scale=scale)
    np.testing.assert_allclose(ob.ove_per_point(X2, y2, W2), ob.nll_per_point(X2, y2, W2),
                               rtol=1e-12, atol=1e-300)


def test_ove_objective_grad_fd():
    X, y, W, _ = make_problem(28)
    assert_grad(ob.ove_objective_grad(X, y, W), fd_grad(lambda w: ob.ove_objective(X, y, w), W))


def test_ove_nonparametric_optimum_is_mle():
    """Titsias Proposition 2: with scores free (x = 1), the OVE optimum is
    f_k = log N_k + c, the softmax MLE."""
    y = np.repeat(np.arange(4), [5, 3, 8, 2])
    X = np.ones((y.size, 1))
    res = minimize(lambda w: ob.ove_objective(X, y, w.reshape(4, 1)), np.zeros(4),
                   jac=lambda w: ob.ove_objective_grad(X, y, w.reshape(4, 1)).ravel(),
                   method="BFGS", options=dict(gtol=1e-12))
    f = res.x
    np.testing.assert_allclose(f - f[0], np.log(np.array([5, 3, 8, 2]) / 5), atol=1e-6)


# ---------------------------------------------------------------------------
# section 8: Bouchard
# ---------------------------------------------------------------------------

def test_bouchard_bound_and_grad():
    X, y, W, u = make_problem(29)
    alpha = u - 1.0
    ll = ob.log_loss(X, y, W)
    assert ob.bouchard_bound(X, y, W, alpha) >= ll
    dW, da = ob.bouchard_grad(X, y, W, alpha)
    assert_grad(dW, fd_grad(lambda w: ob.bouchard_bound(X, y, w, alpha), W))
    assert_grad(da, fd_grad(lambda a: ob.bouchard_bound(X, y, W, a), alpha))
    a_opt = ob.bouchard_optimal_alpha(X, W)
    np.testing.assert_allclose(ob.bouchard_grad(X, y, W, a_opt)[1], 0.0, atol=1e-14)
    b_opt = ob.bouchard_bound(X, y, W, a_opt)
    assert ll <= b_opt <= ob.bouchard_bound(X, y, W, alpha)
    rng = np.random.default_rng(2)
    for _ in range(10):
        assert ob.bouchard_bound(X, y, W, a_opt + 1e-3 * rng.normal(size=a_opt.size)) > b_opt
    # extreme scores: bisection still brackets the root
    a_ext = ob.bouchard_optimal_alpha(X, 1e4 * W)
    assert np.all(np.isfinite(a_ext))
    assert ob.bouchard_bound(X, y, 1e4 * W, a_ext) >= ob.log_loss(X, y, 1e4 * W) * (1 - 1e-12)


def test_bouchard_k2_alpha_and_proposition_3():
    X, y, W, _ = make_problem(30, K=2, unused_class=False)
    S = X @ W.T
    np.testing.assert_allclose(ob.bouchard_optimal_alpha(X, W),
                               ob.bouchard_alpha_k2(S[:, 0], S[:, 1]), rtol=1e-12, atol=1e-12)
    # Proposition 3 (non-parametric, K = 2): joint optimum has f1 - f2 = 2 log(N1/N2)
    N1, N2 = 9, 3
    yy = np.repeat([0, 1], [N1, N2])
    Xo = np.ones((N1 + N2, 1))

    def obj(t):
        return ob.bouchard_bound(Xo, yy, t[:2].reshape(2, 1), t[2:])

    def jac(t):
        dW, da = ob.bouchard_grad(Xo, yy, t[:2].reshape(2, 1), t[2:])
        return np.concatenate((dW.ravel(), da))

    res = minimize(obj, np.zeros(2 + N1 + N2), jac=jac, method="BFGS", options=dict(gtol=1e-12))
    f = res.x[:2]
    assert f[0] - f[1] == pytest.approx(2 * math.log(N1 / N2), abs=1e-5)
    np.testing.assert_allclose(res.x[2:], ob.bouchard_alpha_k2(f[0], f[1]), atol=1e-5)


# ---------------------------------------------------------------------------
# dense and sparse X agree; bad input
# ---------------------------------------------------------------------------

def _calls():
    def c(name, *a, **kw):
        def call(X, y, W, u):
            named = {"X": X, "y": y, "W": W, "u": u}
            return getattr(ob, name)(*[named.get(v, v) if isinstance(v, str) else v for v in a],
                                     **kw)
        return name, call
    return [
        c("scores", "X", "W"),
        c("probabilities", "X", "W"),
        c("log_loss", "X", "y", "W"),
        c("error_rate", "X", "y", "W"),
        c("defective_metric", "X", "y", "W"),
        c("ridge_log_likelihood", "X", "y", "W", 0.3),
        c("ridge_log_likelihood_grad", "X", "y", "W", 0.3),
        c("u_star", "X", "y", "W"),
        c("double_sum", "u", "X", "y", "W", 0.3),
        c("double_sum_grad", "u", "X", "y", "W", 0.3),
        c("f_ik", 1, 3, "u", "X", "y", "W", 0.3),
        c("f_ik_grad", 1, 3, "u", "X", "y", "W", 0.3),
        c("f_ik_grad_scaled", 1, 3, "u", "X", "y", "W", 0.3),
        c("f_iS_grad", 1, [0, 3], "u", "X", "y", "W", 0.3),
        c("f_batch_grad", [0, 2], [4], "u", "X", "y", "W"),
        c("umax_bounds", "X", 5, 0.3),
        c("umax_reset_value", 1, [0, 3], "X", "y", "W"),
        c("raman_u_star", "X", "y", "W"),
        c("raman_double_sum_grad", "u", "X", "y", "W", 0.3),
        c("raman_f_ik_grad", 1, 3, "u", "X", "y", "W", 0.3),
        c("raman_f_ik_grad_original_code", 1, 3, "u", "X", "y", "W"),
        c("ove_per_point", "X", "y", "W"),
        c("ove_objective_grad", "X", "y", "W"),
        c("bouchard_bound", "X", "y", "W", "u"),
        c("bouchard_grad", "X", "y", "W", "u"),
        c("bouchard_optimal_alpha", "X", "W"),
    ]


def _parts(result):
    """A result (value, array or tuple of them) as a list of float arrays."""
    items = result if isinstance(result, tuple) else (result,)
    return [np.asarray(r, dtype=np.float64) for r in items]


@pytest.mark.parametrize("name,call", _calls(), ids=[n for n, _ in _calls()])
def test_dense_and_sparse_agree(name, call):
    X, y, W, u = make_problem(31, density=0.5)
    y[2] = 0  # batch [0, 2] has labels {0}; class 4 is not one of them
    dense = _parts(call(X, y, W, u))
    for S in (sp.csr_matrix(X), sp.csr_array(X), sp.csc_matrix(X)):
        sparse = _parts(call(S, y, W, u))
        assert len(sparse) == len(dense)
        for a, b in zip(dense, sparse):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


def test_bad_input_errors_name_the_argument():
    X, y, W, u = make_problem(32)
    with pytest.raises(ValueError, match="columns"):
        ob.log_loss(X, y, W[:, :2])
    with pytest.raises(ValueError, match="labels in y"):
        ob.log_loss(X, np.full_like(y, 9), W)
    with pytest.raises(ValueError, match="length N"):
        ob.log_loss(X, y[:3], W)
    with pytest.raises(ValueError, match="u must have shape"):
        ob.double_sum(u[:2], X, y, W)
    with pytest.raises(ValueError, match="equals the label"):
        ob.f_ik(0, int(y[0]), u, X, y, W)
    with pytest.raises(ValueError, match="index i"):
        ob.f_ik(99, 1, u, X, y, W)
    with pytest.raises(ValueError, match="K = 2"):
        ob.log_loss(X, np.zeros_like(y), W[:1])
    with pytest.raises(ValueError, match="2-D"):
        ob.scores(X[0], W)
    with pytest.raises(ValueError, match="beta must have shape"):
        ob.f_ik(0, 3, u, X, y, W, mu=1.0, beta=np.ones(2))
    with pytest.raises(ValueError, match="m \\(classes"):
        ob.touch_weights(y, 5, m=5)
