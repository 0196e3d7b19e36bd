"""Implicit SGD with n datapoints, m classes and ridge (``implicit-batch``, docs/math.md
section 5): the step against a direct numerical minimisation over all coordinates,
the numba kernel against the NumPy reference, the n = m = 1 case against the
single-point implicit step, unbiasedness of the batch estimator, and the trainer."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.optimize as so
import scipy.sparse as sp

from scalable_softmax import objectives as ob
from scalable_softmax.kernels import implicit_batch as kib
from scalable_softmax.methods import get_trainer_class
from scalable_softmax.methods import implicit_batch as ib
from scalable_softmax.methods.implicit_batch import (
    ImplicitBatchTrainer,
    batch_objective,
    reference_step,
    touch_beta,
)


# ------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------
def _structure(y, batch, classes, K):
    pts, counts, touched, logw, ypos, r = ib._batch_structure(y, batch, classes, K)
    return pts, counts, touched, ypos, r


def _fhat_grad(X, y, W, u, batch, classes, mu, beta):
    """Naive f̂ (per-datapoint units, multiplicities allowed) and its gradient with
    respect to (u[pts], W[touched]), written directly from the module docstring."""
    N = X.shape[0]
    K = W.shape[0]
    pts, counts, touched, ypos, r = _structure(y, batch, classes, K)
    ny = len(touched) - len(classes)
    omega = np.r_[np.ones(ny), np.full(len(classes), r)]
    s = len(batch)
    val = 0.0
    gu = np.zeros(len(pts))
    gW = np.zeros((len(touched), W.shape[1]))
    WT = W[touched]
    for a, i in enumerate(pts):
        x = X[i]
        c = counts[a] / s
        e = omega * np.exp(WT @ x - WT[ypos[a]] @ x - u[i])
        e[ypos[a]] = 0.0
        val += c * (u[i] + np.exp(-u[i]) + e.sum())
        gu[a] = c * (1.0 - np.exp(-u[i]) - e.sum())
        gW += c * e[:, None] * x[None, :]
        gW[ypos[a]] -= c * e.sum() * x
    if mu > 0:
        b = beta[touched]
        val += mu / (2 * N) * np.sum(b * np.sum(WT ** 2, 1))
        gW += mu / N * b[:, None] * WT
    return val, gu, gW


def _kernel_step(X, y, W, u, batch, classes, lr, mu=0.0, beta=None, tol=1e-12,
                 max_newton=100, dense=False):
    """One step of the numba epoch kernel with the classes prescribed (replay)."""
    K, D = W.shape
    N = X.shape[0]
    Xc = sp.csr_matrix(X)
    R = np.array(W, dtype=np.float64, copy=True)
    uu = np.array(u, dtype=np.float64, copy=True)
    gamma = np.ones(K)
    m = max(len(classes), 1)
    cls = np.full((1, m), -1, np.int64)
    cls[0, :len(classes)] = classes
    beta = np.ones(K) if beta is None else np.asarray(beta, float)
    out = kib.epoch_kernel(Xc.indptr.astype(np.int64), Xc.indices.astype(np.int64),
                           Xc.data.astype(np.float64), np.asarray(y, np.int64), R, gamma, uu,
                           np.asarray(batch, np.int64), len(batch), m, K, N, float(lr),
                           float(mu), beta, 0, tol, max_newton, dense, cls, True)
    return R * gamma[:, None], uu, out


def _random_instance(rng, duplicates=False):
    n = int(rng.integers(1, 4))
    m = int(rng.integers(1, 4))
    D = int(rng.integers(1, 7))
    K = int(rng.integers(2, 9))
    N = n + 3
    X = rng.normal(size=(N, D))
    if rng.random() < 0.5:
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = rng.integers(0, K, N)
    mu = float(rng.choice([0.0, 0.1, 1.0]))
    lr = float(10 ** rng.uniform(-4, 4))
    W = rng.normal(size=(K, D)) * 10 ** rng.uniform(-1, 1.3)
    if duplicates and n > 1:
        batch = rng.integers(0, N, n)
    else:
        batch = rng.choice(N, n, replace=False)
    Yset = set(y[batch].tolist())
    free = [k for k in range(K) if k not in Yset]
    classes = list(rng.choice(free, min(m, len(free)), replace=False)) if free else []
    S = X @ W.T
    dmax = np.max(S - S[np.arange(N), y][:, None], axis=1)
    target = rng.uniform(-50, 50, N)  # delta - u
    u = np.maximum(0.0, dmax - target)
    beta = rng.uniform(1.0, 10.0, K)
    return X, y, W, u, batch, classes, lr, mu, beta


def _theta(W, u, pts, touched):
    return np.r_[u[pts], W[touched].ravel()]


def _kkt_distance(X, y, W0, u0, W1, u1, batch, classes, lr, mu, beta):
    """Upper bound on the distance from (u1, W1) to the exact minimiser of
    F = 2η f̂ + ||θ - θ̃||² over all coordinates (F is 2-strongly convex, so the
    KKT residual / 2 bounds it), and the norm of the new point."""
    K = W0.shape[0]
    pts, counts, touched, ypos, r = _structure(y, batch, classes, K)
    _, gu, gW = _fhat_grad(X, y, W1, u1, batch, classes, mu, beta)
    gu = 2 * lr * gu + 2 * (u1[pts] - u0[pts])
    gW = 2 * lr * gW + 2 * (W1[touched] - W0[touched])
    gu = np.where(u1[pts] > 0, gu, np.minimum(gu, 0.0))
    res = math.sqrt(np.sum(gu ** 2) + np.sum(gW ** 2))
    return res / 2, np.linalg.norm(_theta(W1, u1, pts, touched))


# ------------------------------------------------------------------------------------
# the step
# ------------------------------------------------------------------------------------
def test_local_objective_matches_the_objectives_module():
    rng = np.random.default_rng(1)
    for _ in range(30):
        X, y, W, u, batch, classes, lr, mu, beta = _random_instance(rng)
        if not classes:
            continue
        ours = batch_objective(X, y, W, u, batch, classes, mu=mu, beta=beta)
        local = _fhat_grad(X, y, W, u, batch, classes, mu, beta)[0]
        ref = ob.f_batch_scaled(batch, classes, u, X, y, W, mu=mu, beta=beta)
        assert ours == pytest.approx(ref, rel=1e-12)
        assert local == pytest.approx(ref, rel=1e-12)
        dW, du = ob.f_batch_grad_scaled(batch, classes, u, X, y, W, mu=mu, beta=beta)
        pts, _, touched, _, _ = _structure(y, batch, classes, W.shape[0])
        _, gu, gW = _fhat_grad(X, y, W, u, batch, classes, mu, beta)
        np.testing.assert_allclose(gu, du[pts], rtol=1e-11, atol=1e-13 * np.abs(du).max())
        np.testing.assert_allclose(gW, dW[touched], rtol=1e-11, atol=1e-13 * np.abs(dW).max())


@pytest.mark.parametrize("dense", [False, True])
def test_kernel_step_matches_numpy_reference(dense):
    rng = np.random.default_rng(2)
    for trial in range(150):
        X, y, W, u, batch, classes, lr, mu, beta = _random_instance(rng, duplicates=trial % 3 == 0)
        Wk, uk, out = _kernel_step(X, y, W, u, batch, classes, lr, mu, beta, dense=dense)
        Wr, ur, _ = reference_step(X, y, W, u, batch, classes, lr, mu=mu,
                                   beta=beta)
        assert out[0] == -1 and out[4] == 0, (trial, out)
        scale = max(1.0, np.abs(Wr).max(), np.abs(ur).max())
        np.testing.assert_allclose(Wk, Wr, rtol=0, atol=1e-9 * scale, err_msg=str(trial))
        np.testing.assert_allclose(uk, ur, rtol=0, atol=1e-9 * scale, err_msg=str(trial))


@pytest.mark.parametrize("dense", [False, True])
def test_step_satisfies_the_full_kkt_conditions_to_1e_8(dense):
    """The exact optimality certificate over ALL coordinates (u of the batch and every
    touched row of W, not only the reduced problem): the KKT residual of the
    2-strongly convex F bounds the distance to the true minimiser."""
    rng = np.random.default_rng(3)
    worst = 0.0
    fallbacks = 0
    for trial in range(1000):
        X, y, W, u, batch, classes, lr, mu, beta = _random_instance(rng, duplicates=trial % 4 == 0)
        W1, u1, out = _kernel_step(X, y, W, u, batch, classes, lr, mu, beta, dense=dense)
        assert out[0] == -1 and out[4] == 0
        fallbacks += out[6]
        assert np.all(np.isfinite(W1)) and np.all(u1 >= 0)
        dist, norm = _kkt_distance(X, y, W, u, W1, u1, batch, classes, lr, mu, beta)
        worst = max(worst, dist / max(1.0, norm))
        assert dist <= 1e-8 * max(1.0, norm), (trial, dist, norm, lr)
        # rows and points outside the batch are untouched
        pts, _, touched, _, _ = _structure(y, batch, classes, W.shape[0])
        rest = np.setdiff1d(np.arange(W.shape[0]), touched)
        np.testing.assert_array_equal(W1[rest], W[rest])
        np.testing.assert_array_equal(np.delete(u1, pts), np.delete(u, pts))
    assert worst < 1e-8
    assert fallbacks <= 10  # the structured Newton solve almost never needs the dense one


def test_step_matches_direct_numerical_minimisation():
    """scipy's L-BFGS-B over all coordinates (u >= 0 as bounds) from the old iterate and
    from a random point; the best point found agrees with the step to 1e-6 (to 1e-8
    on most instances: the direct solver is the limit) and never has a lower
    objective."""
    rng = np.random.default_rng(4)
    reached_1e8 = 0
    ntrial = 60
    for trial in range(ntrial):
        X, y, W, u, batch, classes, lr, mu, beta = _random_instance(rng)
        K, D = W.shape
        pts, _, touched, _, _ = _structure(y, batch, classes, K)
        s, q = len(pts), len(touched)
        th0 = _theta(W, u, pts, touched)

        def F(th):
            uu = u.copy()
            uu[pts] = th[:s]
            WW = W.copy()
            WW[touched] = th[s:].reshape(q, D)
            v, gu, gW = _fhat_grad(X, y, WW, uu, batch, classes, mu, beta)
            d = th - th0
            return 2 * lr * v + d @ d, np.r_[2 * lr * gu, 2 * lr * gW.ravel()] + 2 * d

        W1, u1, _ = _kernel_step(X, y, W, u, batch, classes, lr, mu, beta)
        ours = _theta(W1, u1, pts, touched)
        bounds = [(0, None)] * s + [(None, None)] * (q * D)
        starts = [th0, ours + rng.normal(size=ours.size) * (1 + np.abs(ours))]
        best = None
        for st in starts:
            st = st.copy()
            st[:s] = np.maximum(st[:s], 0)
            with np.errstate(over="ignore", invalid="ignore"):
                res = so.minimize(F, st, jac=True, method="L-BFGS-B", bounds=bounds,
                                  options=dict(maxiter=20000, maxfun=40000, ftol=1e-16,
                                               gtol=1e-13, maxcor=30))
            if np.isfinite(res.fun) and (best is None or res.fun < best.fun):
                best = res
        f_ours = F(ours)[0]
        scale = max(1.0, np.linalg.norm(ours))
        assert f_ours <= best.fun + 1e-12 * max(1.0, abs(best.fun)), (trial, f_ours, best.fun)
        err = np.linalg.norm(best.x - ours) / scale
        assert err <= 1e-6, (trial, err, lr, mu)
        reached_1e8 += err <= 1e-8
    assert reached_1e8 >= 0.9 * ntrial, reached_1e8


def _single_point_reference(x, w_k, w_y, u, eta, K, mu, beta_k, beta_y, N):
    from scalable_softmax.methods.implicit import reference_step
    idx = np.flatnonzero(x)
    return reference_step(idx, x[idx], w_k, w_y, u, eta, K, mu=mu, beta_k=beta_k,
                          beta_y=beta_y, N=N)


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_n1_m1_is_the_single_point_implicit_step(mu):
    rng = np.random.default_rng(5)
    for _ in range(200):
        K = int(rng.integers(2, 9))
        D = int(rng.integers(1, 7))
        N = 4
        X = rng.normal(size=(N, D))
        y = rng.integers(0, K, N)
        W = rng.normal(size=(K, D)) * 3
        i = int(rng.integers(N))
        k = int(rng.choice([c for c in range(K) if c != y[i]]))
        delta = X[i] @ (W[k] - W[y[i]])
        u = np.full(N, max(0.0, delta - rng.uniform(-50, 50)))
        lr = float(10 ** rng.uniform(-4, 4))
        beta = rng.uniform(1, 10, K)
        W1, u1, _ = _kernel_step(X, y, W, u, [i], [k], lr, mu, beta)
        wk, wy, ui = _single_point_reference(X[i], W[k], W[y[i]], u[i], lr, K, mu, beta[k],
                                             beta[y[i]], N)
        scale = max(1.0, np.abs(W1).max(), u1[i])
        np.testing.assert_allclose(W1[k], wk, rtol=0, atol=1e-9 * scale)
        np.testing.assert_allclose(W1[y[i]], wy, rtol=0, atol=1e-9 * scale)
        assert u1[i] == pytest.approx(ui, rel=1e-9, abs=1e-9 * scale)


@pytest.mark.parametrize("lr", [1e6, 1e9, 1e12])
def test_finite_at_huge_learning_rates(lr):
    rng = np.random.default_rng(6)
    for trial in range(100):
        X, y, W, u, batch, classes, _, mu, beta = _random_instance(rng, duplicates=trial % 2 == 0)
        W = W * 30  # delta - u up to ~1000
        S = X @ W.T
        dmax = np.max(S - S[np.arange(len(y)), y][:, None], axis=1)
        u = np.maximum(0.0, dmax - rng.uniform(-1000, 1000, len(y)))
        W1, u1, out = _kernel_step(X, y, W, u, batch, classes, lr, mu, beta, tol=1e-10)
        assert out[0] == -1
        assert np.all(np.isfinite(W1)) and np.all(np.isfinite(u1)) and np.all(u1 >= 0)
        # Proposition 2's spirit: the step in W is linear in (delta - u), not exponential
        assert np.abs(W1 - W).max() <= 1e3 * (1 + np.abs(W).max() + np.abs(u).max())


def test_duplicate_and_collinear_points_in_a_batch():
    """A with-replacement order can repeat a point inside a chunk, and distinct points
    can have the same feature vector: the Gram matrix is then singular."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(5, 4))
    X[3] = X[1]
    X[4] = 2 * X[2]
    y = np.array([0, 1, 2, 1, 3])
    W = rng.normal(size=(6, 4))
    u = np.full(5, 0.5)
    beta = np.full(6, 2.0)
    for batch in ([1, 1, 3], [2, 4, 0], [1, 3, 2, 4]):
        W1, u1, out = _kernel_step(X, y, W, u, batch, [5], 3.0, 0.1, beta)
        assert out[0] == -1 and out[4] == 0
        dist, norm = _kkt_distance(X, y, W, u, W1, u1, batch, [5], 3.0, 0.1, beta)
        assert dist <= 1e-8 * max(1.0, norm)


# ------------------------------------------------------------------------------------
# the pieces of the Newton solve against plain NumPy
# ------------------------------------------------------------------------------------
def _reduced_instance(rng, s, q, deficient=False):
    """A reduced problem as a step builds it: the basis B of a chunk's rows (some
    repeated or collinear when ``deficient``: then rank r < s), the ω-weighted
    softmax π of random scores, labels shared by several points, ψ', ψ'' from the
    kernel's ψ (both the u > 0 and the u = 0 branch) and a random gradient."""
    D = int(rng.integers(s, s + 8))
    X = rng.normal(size=(s, D)) * (rng.random((s, D)) < 0.6)
    X[np.abs(X).sum(1) == 0, 0] = 1.0
    if deficient and s > 1:
        X[-1] = X[0] if rng.random() < 0.5 else 2.0 * X[0]
        if s > 3:
            X[-2] = X[1] - 0.5 * X[2]
    lam, U = np.linalg.eigh(X @ X.T)
    keep = lam > kib.EIG_RTOL * lam[-1]
    Bm = np.ascontiguousarray(U[:, keep] * np.sqrt(lam[keep]))
    r = Bm.shape[1]
    ny = int(rng.integers(1, min(s, q) + 1))
    ypos = np.r_[np.arange(ny), rng.integers(0, ny, s - ny)].astype(np.int64)
    rng.shuffle(ypos)
    logw = np.r_[np.zeros(ny), np.full(q - ny, np.log(rng.uniform(1, 1e4)))]
    Z = rng.normal(size=(s, q)) * 10 ** rng.uniform(-1, 1.5)
    ex = np.exp(logw + Z - (logw + Z).max(1, keepdims=True))
    PI = ex / ex.sum(1, keepdims=True)
    D1 = np.empty(s)
    D2 = np.empty(s)
    for i in range(s):
        L = max(0.0, np.log(ex[i].sum()) + (logw + Z)[i].max() - Z[i, ypos[i]])
        al = 10 ** rng.uniform(-3, 4)
        ub = L + rng.uniform(-20, 20) if rng.random() < 0.8 else L + 40.0
        _, D1[i], D2[i], _ = kib.psi(L, ub, al)
    rho = rng.uniform(0, 3, q) * (rng.random() < 0.5)
    grad = rng.normal(size=(q, r)) * 10 ** rng.uniform(-3, 3)
    return Bm, PI, ypos, D1, D2, rho, grad


def _dense_hessian(Bm, PI, ypos, D1, D2, rho):
    """The Hessian of Φ exactly as the module docstring (and the NumPy reference)
    writes it, index ``k r + a``."""
    s, r = Bm.shape
    q = PI.shape[1]
    e = PI.copy()
    e[np.arange(s), ypos] -= 1.0
    Mi = (D2[:, None, None] * e[:, :, None] * e[:, None, :]
          - D1[:, None, None] * PI[:, :, None] * PI[:, None, :])
    Mi[:, np.arange(q), np.arange(q)] += D1[:, None] * PI
    H = np.einsum("ikl,ia,ib->kalb", Mi, Bm, Bm).reshape(q * r, q * r)
    return H + np.diag(np.repeat(2 * (1 + rho), r))


@pytest.mark.parametrize("deficient", [False, True])
def test_structured_direction_solves_the_dense_newton_system(deficient):
    rng = np.random.default_rng(11 + deficient)
    ranks = set()
    for trial in range(300):
        s = int(rng.integers(1, 12))
        q = int(rng.integers(1, 23))
        Bm, PI, ypos, D1, D2, rho, grad = _reduced_instance(rng, s, q, deficient)
        r = Bm.shape[1]
        ranks.add(r < s)
        p = np.full(q * r, np.nan)
        ok = kib.structured_direction(Bm, PI, ypos, D1, D2, rho, grad, p,
                                      kib.direction_workspace(s, r, q))
        assert ok, trial
        H = _dense_hessian(Bm, PI, ypos, D1, D2, rho)
        want = np.linalg.solve(H, -grad.ravel())
        np.testing.assert_allclose(p, want, rtol=0, atol=1e-9 * np.abs(want).max(),
                                   err_msg=str(trial))
    assert (True in ranks) if deficient else (False in ranks)  # r < s was exercised


@pytest.mark.parametrize("deficient", [False, True])
def test_factored_hessian_solves_for_any_gradient(deficient):
    """A chord step: the Hessian factored once (`_ls_factor`) and applied to other
    gradients (`_ls_solve`) gives np.linalg.solve of that Hessian, and a refactored
    `_structured_direction` gives the same direction as factor + solve."""
    rng = np.random.default_rng(21 + deficient)
    for trial in range(200):
        s = int(rng.integers(1, 12))
        q = int(rng.integers(1, 23))
        Bm, PI, ypos, D1, D2, rho, grad = _reduced_instance(rng, s, q, deficient)
        r = Bm.shape[1]
        ws = kib.direction_workspace(s, r, q)
        assert kib.ls_factor(Bm, PI, ypos, D1, D2, rho, ws), trial
        H = _dense_hessian(Bm, PI, ypos, D1, D2, rho)
        for _ in range(3):
            g2 = rng.normal(size=(q, r)) * 10 ** rng.uniform(-8, 2)
            p = np.full(q * r, np.nan)
            assert kib.ls_solve(Bm, PI, D1, D2, g2, p, ws)
            want = np.linalg.solve(H, -g2.ravel())
            np.testing.assert_allclose(p, want, rtol=0, atol=1e-9 * np.abs(want).max(),
                                       err_msg=str(trial))
        p1 = np.empty(q * r)
        assert kib.structured_direction(Bm, PI, ypos, D1, D2, rho, grad, p1,
                                        kib.direction_workspace(s, r, q))
        p2 = np.empty(q * r)
        assert kib.ls_solve(Bm, PI, D1, D2, grad, p2, ws)
        np.testing.assert_array_equal(p1, p2)


def test_span_basis_is_orthonormal_on_both_routes():
    """`_span_basis`: ``V = X_Sᵀ Ur`` has orthonormal columns spanning the chunk's rows
    and ``X_S V = B``, by the Cholesky route (full rank, ``B`` lower triangular) and
    by the eigendecomposition (a duplicate, collinear or empty row: rank dropped)."""
    rng = np.random.default_rng(22)
    routes = set()
    for trial in range(300):
        s = int(rng.integers(1, 12))
        D = int(rng.integers(s, s + 10))
        X = rng.normal(size=(s, D)) * (rng.random((s, D)) < 0.5)
        X[np.abs(X).sum(1) == 0, 0] = 1.0
        kind = trial % 4
        if kind == 1 and s > 1:
            X[-1] = X[0]
        elif kind == 2 and s > 2:
            X[-1] = 3.0 * X[0] - X[1]
        elif kind == 3 and s > 1:
            X[-1] = 0.0
        r, Bm, Ur = kib.span_basis(X @ X.T)
        rank = np.linalg.matrix_rank(X)
        assert r == rank, trial
        V = X.T @ Ur
        np.testing.assert_allclose(V.T @ V, np.eye(r), atol=1e-8, err_msg=str(trial))
        np.testing.assert_allclose(X @ V, Bm, atol=1e-9 * max(1.0, np.abs(X).max()) ** 2)
        # the span is all of X's rows: projecting them onto V changes nothing
        np.testing.assert_allclose(X @ V @ V.T, X, atol=1e-8 * np.abs(X).max())
        cholesky = r == s and np.allclose(np.triu(Bm, 1), 0.0)
        routes.add(cholesky)
    assert routes == {True, False}


def test_newton_reuses_factorisations_and_keeps_its_stopping_rule():
    """On steps of a real epoch the solve takes chord steps (`chord_iterations_mean`
    > 0, fewer factorisations than iterations) and still lands on the reference's
    step: the same epoch replayed step by step against the NumPy reference."""
    rng = np.random.default_rng(23)
    N, D, K = 60, 30, 12
    X = rng.normal(size=(N, D)) * (rng.random((N, D)) < 0.3)
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    y = rng.integers(0, K, N)
    tr = ImplicitBatchTrainer(X, y, K, batch_size=5, n_sampled=4, tol=1e-12)
    tr.init_params()
    order = rng.permutation(N)
    for e in range(3):
        rep = tr.run_epoch(order, 5.0, e)
    assert rep.extra["chord_iterations_mean"] > 0
    assert rep.extra["chord_iterations_mean"] < rep.extra["newton_iterations_mean"]
    W, u = tr.W.copy(), tr.u.copy()
    rep = tr.run_epoch(order, 5.0, 99)
    for j, start in enumerate(range(0, N, 5)):
        classes = [c for c in tr.last_epoch_classes[j] if c >= 0]
        W, u, _ = reference_step(X, y, W, u, order[start:start + 5],
                                 classes, 5.0, tol=1e-12)
    np.testing.assert_allclose(tr.W, W, rtol=0, atol=1e-9 * max(1.0, np.abs(W).max()))
    np.testing.assert_allclose(tr.u, u, rtol=0, atol=1e-9 * max(1.0, np.abs(u).max()))


def test_lu_solve_matches_numpy():
    rng = np.random.default_rng(13)
    for trial in range(200):
        n = int(rng.integers(1, 25))
        M = rng.normal(size=(n, n))
        if n > 1 and trial % 3 == 0:
            M[0, 0] = 0.0  # needs a row exchange
        b = rng.normal(size=n)
        want = np.linalg.solve(M, b)
        x = b.copy()
        assert kib.lu_solve(M.copy(), x, np.empty(n))
        np.testing.assert_allclose(x, want, rtol=1e-9,
                                   atol=1e-11 * np.abs(want).max())
    assert not kib.lu_solve(np.zeros((3, 3)), np.ones(3), np.empty(3))


def test_scores_value_gradient_and_score_change_match_numpy():
    """The pieces `solve_reduced` evaluates Φ with (scores carried along the
    iterations) against the NumPy reference's formulas, ψ by its bisection route."""
    rng = np.random.default_rng(14)
    for trial in range(100):
        s = int(rng.integers(1, 12))
        q = int(rng.integers(1, 23))
        Bm, PI, ypos, _, _, rho, _ = _reduced_instance(rng, s, q, trial % 2 == 1)
        r = Bm.shape[1]
        ny = int(ypos.max()) + 1
        logw = np.r_[np.zeros(ny), np.full(q - ny, np.log(rng.uniform(1, 1e4)))]
        S0 = rng.normal(size=(s, q)) * 5
        Cm = rng.normal(size=(q, r))
        g = rng.normal(size=(q, r))
        alpha = 10 ** rng.uniform(-3, 3, s)
        ub = rng.uniform(0, 30, s)
        Z = S0 + Bm @ Cm.T
        # NumPy
        zz = logw + Z
        mx = zz.max(1, keepdims=True)
        ex = np.exp(zz - mx)
        tot = ex.sum(1, keepdims=True)
        L = np.maximum((mx + np.log(tot))[:, 0] - Z[np.arange(s), ypos], 0.0)
        val, d1, d2, uu = ib._psi_reference(L, ub, alpha)
        ridge = np.sum((1 + rho) * np.sum(Cm ** 2, 1) + 2 * rho * np.sum(Cm * g, 1))
        pi = ex / tot
        e = pi.copy()
        e[np.arange(s), ypos] -= 1.0
        grad = (d1[:, None] * e).T @ Bm + 2 * (1 + rho)[:, None] * Cm + 2 * rho[:, None] * g
        # kernel pieces
        PIk = np.empty((s, q))
        D1k, D2k, uk = np.empty(s), np.empty(s), np.empty(s)
        v = kib.scores_value(Z, ypos, logw, alpha, ub, 1, PIk, D1k, D2k, uk)
        assert v == pytest.approx(val.sum(), rel=1e-10, abs=1e-12)
        assert kib.ridge_value(Cm, rho, g) == pytest.approx(ridge, rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(PIk, pi, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(D1k, d1, rtol=1e-9)
        np.testing.assert_allclose(D2k, d2, rtol=1e-9)
        np.testing.assert_allclose(uk, uu, rtol=1e-9, atol=1e-9)
        gk = np.empty((q, r))
        kib.gradient(Bm, PIk, D1k, ypos, Cm, rho, g, gk)
        np.testing.assert_allclose(gk, grad, rtol=0, atol=1e-9 * np.abs(grad).max())
        P = rng.normal(size=(q, r))
        ZP = np.empty((s, q))
        kib.score_change(Bm, P.ravel(), np.empty((r, q)), ZP)
        np.testing.assert_allclose(ZP, Bm @ P.T, rtol=1e-12, atol=1e-12 * np.abs(Bm @ P.T).max())


# ------------------------------------------------------------------------------------
# the estimator and its weights
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("N, n, m, mu", [(6, 2, 2, 0.0), (7, 3, 2, 0.7), (7, 3, 4, 0.7),
                                         (5, 1, 1, 1.0)])
def test_batch_estimator_is_unbiased(N, n, m, mu):
    """Exact expectation over the chunks (probability |S_j|/N) and over every
    class subset equals f/N; m = 4 exceeds K - |Y_j| for some chunks (all free
    classes are then taken with weight 1)."""
    rng = np.random.default_rng(8)
    K, D = 5, 3
    X = rng.normal(size=(N, D))
    y = np.array([0, 0, 1, 2, 1, 3, 4][:N])
    W = rng.normal(size=(K, D))
    u = rng.uniform(0, 2, N)
    order = rng.permutation(N)
    beta = touch_beta(order, y, K, n, m)
    expect = 0.0
    for start in range(0, N, n):
        chunk = order[start:start + n]
        labels = set(y[chunk].tolist())
        free = [k for k in range(K) if k not in labels]
        mj = min(m, len(free))
        subsets = list(itertools.combinations(free, mj))
        for C in subsets:
            expect += (len(chunk) / N) / len(subsets) * batch_objective(
                X, y, W, u, chunk, list(C), mu=mu, beta=beta)
    assert expect == pytest.approx(ob.double_sum(u, X, y, W, mu=mu) / N, rel=1e-12)


def test_touch_beta_kernel_and_paper_weights():
    rng = np.random.default_rng(9)
    for _ in range(20):
        N, K = int(rng.integers(5, 40)), int(rng.integers(2, 12))
        y = rng.integers(0, K, N)
        n, m = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        order = rng.permutation(N) if rng.random() < 0.7 else rng.integers(0, N, N)
        ref = touch_beta(order, y, K, n, m)
        np.testing.assert_allclose(kib.touch_beta_kernel(order, y, K, n, m), ref, rtol=1e-13)
        assert np.all(ref >= 1.0 - 1e-12)
        # same as the objectives module where its assumptions hold (a partition,
        # m <= K - |Y_j| for every chunk)
        if len(np.unique(order)) == N:
            chunks = [order[s:s + n] for s in range(0, N, n)]
            if all(m <= K - len(np.unique(y[c])) for c in chunks):
                np.testing.assert_allclose(ob.batch_touch_weights(y, K, chunks, m), ref,
                                           rtol=1e-13)


# ------------------------------------------------------------------------------------
# the trainer
# ------------------------------------------------------------------------------------
def _data(N=300, D=8, K=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D)) * (rng.random((N, D)) < 0.6)
    X[np.abs(X).sum(1) == 0, 0] = 1.0
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Wt = rng.normal(size=(K, D)) * 3
    y = np.argmax(X @ Wt.T + rng.gumbel(size=(N, K)), axis=1)
    return sp.csr_matrix(X), y.astype(np.int64), K


def test_registry_and_attributes():
    cls = get_trainer_class("implicit-batch")
    assert cls is ImplicitBatchTrainer
    assert cls.name == "implicit-batch" and cls.has_u
    assert cls.default_batch_size == 10 and cls.default_n_sampled == 10


def test_through_fit():
    from scalable_softmax.fit import fit
    X, y, K = _data(N=200, seed=4)
    res = fit(X, y, "implicit-batch", lr=1.0, epochs=3, n_sampled=3, progress=False,
              eval_epochs=[0, 3], seed=2)
    again = fit(X, y, "implicit-batch", lr=1.0, epochs=3, n_sampled=3, progress=False,
                eval_epochs=[0, 3], seed=2)
    assert np.array_equal(res.W, again.W) and np.array_equal(res.u, again.u)
    ll = res.history["train_log_loss"].to_numpy()
    assert ll[-1] < ll[0]
    assert not res.history["diverged"].any()


def test_epoch_replays_with_the_reference():
    """An epoch of the trainer (shuffled chunks with repeats, ridge, lazy scales)
    equals the NumPy reference applied step by step with the recorded classes."""
    X, y, K = _data(N=40, D=5, K=7, seed=1)
    rng = np.random.default_rng(3)
    tr = ImplicitBatchTrainer(X, y, K, mu=0.5, batch_size=4, n_sampled=3, tol=1e-12)
    tr.init_params(u_init="logK")
    tr.run_epoch(rng.permutation(40), 2.0, seed=1)  # move away from W = 0
    W, u = tr.weights().copy(), tr.u.copy()
    order = rng.integers(0, 40, 40)  # with replacement: repeats inside chunks
    rep = tr.run_epoch(order, 5.0, seed=2)
    assert rep.steps == 10 and rep.diverged_at == -1
    beta = touch_beta(order, y, K, 4, 3)
    np.testing.assert_allclose(tr.beta, beta, rtol=1e-13)
    Xd = X.toarray()
    for j in range(10):
        chunk = order[4 * j:4 * j + 4]
        cls = [int(c) for c in tr.last_epoch_classes[j] if c >= 0]
        assert len(set(cls)) == len(cls) and not set(cls) & set(y[chunk].tolist())
        W, u, _ = reference_step(Xd, y, W, u, chunk, cls, 5.0, mu=0.5,
                                 beta=beta)
    np.testing.assert_allclose(tr.weights(), W, rtol=0, atol=1e-9 * max(1, np.abs(W).max()))
    np.testing.assert_allclose(tr.u, u, rtol=0, atol=1e-9 * max(1, np.abs(u).max()))


def test_few_free_classes_takes_them_all():
    X, y, K = _data(N=60, D=5, K=4, seed=2)
    tr = ImplicitBatchTrainer(X, y, K, batch_size=5, n_sampled=3)
    tr.init_params()
    order = np.arange(60)
    tr.run_epoch(order, 1.0, seed=0)
    nfree_seen = set()
    for j, row in enumerate(tr.last_epoch_classes):
        labels = set(y[order[5 * j:5 * j + 5]].tolist())
        free = set(range(K)) - labels
        got = [int(c) for c in row if c >= 0]
        assert len(got) == len(set(got)) == min(3, len(free))
        assert set(got) <= free
        nfree_seen.add(len(free))
    assert min(nfree_seen) < 3  # the case "fewer than m free classes" was exercised


def test_class_sampling_is_uniform_over_the_free_classes():
    N, K = 2000, 10
    rng = np.random.default_rng(0)
    X = sp.csr_matrix(np.ones((N, 1)))
    y = np.zeros(N, np.int64)
    tr = ImplicitBatchTrainer(X, y, K, batch_size=1, n_sampled=2)
    tr.init_params()
    tr.run_epoch(rng.permutation(N), 1e-3, seed=5)
    cls = tr.last_epoch_classes
    assert np.all(cls != 0) and np.all(cls[:, 0] != cls[:, 1])
    freq = np.bincount(cls.ravel(), minlength=K)[1:] / cls.size
    assert np.abs(freq - 1 / 9).max() < 0.02


def test_a_few_epochs_decrease_the_log_loss():
    X, y, K = _data()
    tr = ImplicitBatchTrainer(X, y, K, batch_size=10, n_sampled=3)
    tr.init_params()
    losses = [ob.log_loss(X, y, tr.weights())]
    rng = np.random.default_rng(0)
    for ep in range(4):
        rep = tr.run_epoch(rng.permutation(X.shape[0]), 1.0 * 0.9 ** ep, seed=ep)
        assert rep.diverged_at == -1 and rep.extra["newton_unconverged"] == 0
        assert rep.extra["dense_fallbacks"] == 0
        assert 1 <= rep.extra["newton_iterations_mean"] <= 20
        losses.append(ob.log_loss(X, y, tr.weights()))
    assert losses[0] == pytest.approx(math.log(K))
    assert losses[-1] < 0.8 * losses[0]
    assert all(b < a + 1e-3 for a, b in zip(losses, losses[1:]))


def test_approaches_the_exact_ridge_optimum():
    """With ridge the minimiser exists; implicit-batch SGD with a decaying learning
    rate approaches it (the estimator, with its β weights, is unbiased)."""
    X, y, K = _data(N=300, D=8, K=6, seed=0)
    N, D = X.shape
    mu = 1.0

    def negll(w):
        W = w.reshape(K, D)
        return (-ob.ridge_log_likelihood(X, y, W, mu),
                -ob.ridge_log_likelihood_grad(X, y, W, mu).ravel())

    res = so.minimize(negll, np.zeros(K * D), jac=True, method="L-BFGS-B",
                      options=dict(ftol=1e-15, gtol=1e-10, maxiter=10000))
    Wopt = res.x.reshape(K, D)
    tr = ImplicitBatchTrainer(X, y, K, mu=mu, batch_size=10, n_sampled=3)
    tr.init_params()
    rng = np.random.default_rng(0)
    for ep in range(60):
        tr.run_epoch(rng.permutation(N), 10.0 * 0.93 ** ep, seed=ep)
    subopt = (negll(tr.weights().ravel())[0] - res.fun) / N
    assert 0 <= subopt < 2e-4
    assert np.linalg.norm(tr.weights() - Wopt) < 0.02 * np.linalg.norm(Wopt)


def test_same_seed_is_bit_identical_and_huge_lr_stays_finite():
    X, y, K = _data(N=120, seed=3)
    order = np.random.default_rng(1).permutation(120)

    def run(seed, lr):
        tr = ImplicitBatchTrainer(X, y, K, mu=0.1, batch_size=7, n_sampled=2)
        tr.init_params()
        reps = [tr.run_epoch(order, lr, seed=seed + e) for e in range(2)]
        return tr.weights().copy(), tr.u.copy(), reps

    W1, u1, _ = run(0, 3.0)
    W2, u2, _ = run(0, 3.0)
    W3, _, _ = run(1, 3.0)
    assert np.array_equal(W1, W2) and np.array_equal(u1, u2)
    assert not np.array_equal(W1, W3)
    Wh, uh, reps = run(0, 1e8)
    assert all(r.diverged_at == -1 for r in reps)
    assert np.all(np.isfinite(Wh)) and np.all(np.isfinite(uh)) and np.all(uh >= 0)


def test_bad_arguments_raise():
    X, y, K = _data(N=20)
    with pytest.raises(ValueError, match="unknown option"):
        ImplicitBatchTrainer(X, y, K, tolerance=1e-3)
    with pytest.raises(ValueError, match="tol"):
        ImplicitBatchTrainer(X, y, K, tol=0.0)
    with pytest.raises(ValueError, match="max_newton"):
        ImplicitBatchTrainer(X, y, K, max_newton=0)
    with pytest.raises(ValueError, match="u_init"):
        ImplicitBatchTrainer(X, y, K, u_init="one")
    with pytest.raises(ValueError, match="linear_solver"):
        ImplicitBatchTrainer(X, y, K, linear_solver="lu")
    tr = ImplicitBatchTrainer(X, y, K)
    tr.init_params()
    with pytest.raises(ValueError, match="lr"):
        tr.run_epoch(np.arange(20), -1.0, 0)
    with pytest.raises(ValueError, match="order"):
        tr.run_epoch(np.arange(21), 1.0, 0)
    with pytest.raises(ValueError, match="classes"):
        reference_step(X.toarray(), y, np.zeros((K, 8)), np.zeros(20), [0],
                       [int(y[0])], 1.0)
