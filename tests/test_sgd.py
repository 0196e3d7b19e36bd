"""Kernels of vanilla SGD, U-max and Raman's formulation (methods/sgd.py) against the
plain NumPy reference steps and the reference gradients of objectives.py."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax import objectives as ob
from scalable_softmax.fit import fit
from scalable_softmax.kernels import sgd as ksgd
from scalable_softmax.methods import sgd
from scalable_softmax.methods.sgd import (
    KIND_RAMAN_UMAX,
    KIND_RAMAN_VANILLA,
    KIND_UMAX,
    KIND_VANILLA,
    RamanTrainer,
    UmaxTrainer,
    VanillaTrainer,
)

KINDS = {
    KIND_VANILLA: (VanillaTrainer, {}),
    KIND_UMAX: (UmaxTrainer, {}),
    KIND_RAMAN_VANILLA: (RamanTrainer, {"variant": "vanilla"}),
    KIND_RAMAN_UMAX: (RamanTrainer, {"variant": "umax"}),
}


def _problem(N=40, D=8, K=6, density=0.5, dense=False, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    if dense:
        X = sp.csr_matrix(rng.standard_normal((N, D)) * scale)
    else:
        X = sp.random(N, D, density=density, random_state=seed, format="csr")
        X.data = rng.standard_normal(X.data.size) * scale
        X.sort_indices()
    y = rng.integers(0, K, N)
    return X, y, K


def _trainer(kind, X, y, K, mu=0.0, m=1, **opts):
    cls, base = KINDS[kind]
    t = cls(X, y, K, mu=mu, n_sampled=m, **base, **opts)
    t.init_params("zero")
    return t


def _set_params(t, W, u):
    t.set_params(W, u)


def _reference_run(t, order, seed, W0, u0, lr):
    """Apply the NumPy reference step along the classes the kernel draws (the trainer
    ``t``'s kind, ``X`` and ``y``)."""
    kind, X, y = t._kind(), t.X, t.y
    if t.n_sampled == 1:
        ks = ksgd.draw_classes_m1(seed, order, t._y, t.K)[:, None]
    else:
        ks = ksgd.draw_classes_multi(seed, order, t._y, t.K, t.n_sampled)
    u_lo, u_hi = t._u_bounds()
    B_W = t.B_W if t._project() else np.inf
    W, u = W0.copy(), u0.copy()
    for s, i in enumerate(order):
        W, u, info = sgd.reference_step(kind, i, ks[s], X, y, W, u, lr, t.mu, t.beta,
                                        t.delta0, u_lo, u_hi, B_W)
        if not info["finite"]:
            return W, u, s
    return W, u, -1


def _close(a, b, rtol=1e-10):
    scale = max(1.0, float(np.max(np.abs(b))))
    return float(np.max(np.abs(a - b))) <= rtol * scale


# ---------------------------------------------------------------------------
# kernels vs the NumPy reference step
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("mu", [0.0, 0.7])
@pytest.mark.parametrize("dense", [False, True])
def test_epoch_matches_reference_steps(kind, m, mu, dense):
    X, y, K = _problem(dense=dense, seed=kind + 10 * m, scale=0.5)
    t = _trainer(kind, X, y, K, mu=mu, m=m)
    assert t._dense == dense
    rng = np.random.default_rng(1)
    W0 = rng.standard_normal((K, X.shape[1])) * 0.3
    u0 = rng.random(X.shape[0]) * (2.0 if kind < 2 else 1.0) + (0.0 if kind < 2 else -0.5)
    _set_params(t, W0, u0)
    order = rng.integers(0, X.shape[0], 60)
    lr = 0.05
    rep = t.run_epoch(order, lr, 77)
    Wr, ur, bad = _reference_run(t, order, 77, W0, u0, lr)
    assert bad == -1 and rep.diverged_at == -1 and rep.steps == order.size
    assert _close(t.weights(), Wr)
    assert _close(t.u, ur)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("mu", [0.0, 0.7])
@pytest.mark.parametrize("dense", [False, True])
def test_the_two_step_bodies_agree_on_one_class_per_step(kind, mu, dense):
    """epoch_m1 and epoch_multi keep a step body each (kernels/sgd.py says why): run
    with m = 1 and the same stream of classes they give the same bits where their
    arithmetic is the same (sparse rows; vanilla SGD and Raman's vanilla variant), and
    agree to rounding where it is not (the U-max resets: softplus / logaddexp against
    a shifted log-sum-exp; the projection's O(1) norm update; dense rows: BLAS dots)."""
    X, y, K = _problem(N=60, dense=dense, seed=5 + kind, scale=0.5)
    rng = np.random.default_rng(2)
    W0 = rng.standard_normal((K, X.shape[1])) * 0.3
    u0 = rng.random(X.shape[0]) * (2.0 if kind < 2 else 1.0) + (0.0 if kind < 2 else -0.5)
    order = rng.integers(0, X.shape[0], 120)
    one, multi = _trainer(kind, X, y, K, mu=mu), _trainer(kind, X, y, K, mu=mu)
    for t in (one, multi):
        _set_params(t, W0, u0)
    assert one.run_epoch(order, 0.05, 9).steps == order.size       # epoch_m1
    u_lo, u_hi = multi._u_bounds()
    project = multi._project()
    out = np.zeros(5, dtype=np.int64)
    ksgd.epoch_multi(kind, multi._indptr, multi._indices, multi._data, multi._y, order,
                     multi.W, multi._rs, multi.u, np.int64(1), False, 0.05, mu / multi.N,
                     multi.delta0, u_lo, u_hi, multi.B_W ** 2 if project else np.inf,
                     project, np.int64(9), multi._pf_mode, out, multi._xmax, multi._guard)
    assert out[0] == order.size and out[1] == -1
    if not dense and kind in (KIND_VANILLA, KIND_RAMAN_VANILLA):
        assert np.array_equal(one.weights(), multi.weights())
        assert np.array_equal(one.u, multi.u)
    else:
        assert _close(one.weights(), multi.weights())
        assert _close(one.u, multi.u)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_single_step_matches_reference(kind):
    X, y, K = _problem(N=10, D=5, K=4, seed=3)
    t = _trainer(kind, X, y, K, mu=0.3)
    rng = np.random.default_rng(2)
    W0 = rng.standard_normal((K, 5))
    u0 = rng.random(10)
    _set_params(t, W0, u0)
    order = np.array([4])
    t.run_epoch(order, 0.2, 5)
    Wr, ur, bad = _reference_run(t, order, 5, W0, u0, 0.2)
    assert bad == -1
    assert _close(t.weights(), Wr, 1e-13) and _close(t.u, ur, 1e-13)
    changed = np.flatnonzero(np.any(t.weights() != W0, axis=1))
    k = ksgd.draw_classes_m1(5, order, t._y, K)[0]
    assert set(changed) <= {k, y[4]} and k != y[4]


@pytest.mark.parametrize("dense", [False, True])
def test_prefetch_modes_do_not_change_results(dense):
    X, y, K = _problem(N=300, D=30, K=20, density=0.2, seed=4, dense=dense, scale=0.3)
    res = []
    for pf in (0, 1, 2, 3, True):
        t = _trainer(KIND_UMAX, X, y, K, mu=0.1, prefetch=pf)
        rep = t.run_epoch(np.random.default_rng(0).permutation(300), 0.1, 9)
        assert rep.steps == 300
        res.append((t.weights().copy(), t.u.copy()))
    for W, u in res[1:]:
        assert np.array_equal(res[0][0], W) and np.array_equal(res[0][1], u)



@pytest.mark.parametrize("kind, m, mu, sample_from", [
    (KIND_UMAX, 5, 0.1, "others"), (KIND_UMAX, 5, 0.0, "all"),
    (KIND_VANILLA, 4, 0.0, "others"), (KIND_VANILLA, 5, 0.01, "all"),
    (KIND_RAMAN_UMAX, 3, 0.1, "others")])
def test_many_class_prefetch_modes_do_not_change_results(kind, m, mu, sample_from):
    """The pipelined m > 1 kernel (classes drawn ahead, rows prefetched) gives the plain
    loop's results bit for bit: same class stream, same arithmetic, same counters."""
    X, y, K = _problem(N=300, D=30, K=20, density=0.2, seed=5, scale=0.3)
    res = []
    for pf in (0, 1, 2, 3, True):
        t = _trainer(kind, X, y, K, mu=mu, m=m, prefetch=pf, sample_from=sample_from)
        lr = 0.01 if kind == KIND_VANILLA else 0.1
        rep = t.run_epoch(np.random.default_rng(1).permutation(300), lr, 7)
        assert rep.steps == 300
        res.append((t.weights().copy(), t.u.copy(), rep.extra))
    for W, u, extra in res[1:]:
        assert np.array_equal(res[0][0], W) and np.array_equal(res[0][1], u)
        assert extra == res[0][2]


def test_many_class_overflow_inside_the_row_update_is_detected():
    """m > 1: the per-entry check runs once the running bound on max |V| is large."""
    K = 6
    X = sp.csr_matrix(np.tile([0.5, 0.5, 0.0, 0.5], (10, 1)))
    y = np.arange(10) % K
    t = _trainer(KIND_UMAX, X, y, K, m=3)
    W0 = np.zeros((K, 4))
    W0[:, 0], W0[:, 1] = 1.75e308, -1.75e308      # scores x.w = 0 exactly
    t.set_params(W0, np.zeros(10))
    rep = t.run_epoch(np.arange(10), 1e307, 0)
    assert rep.diverged_at == 0 and rep.steps == 0
    assert not np.all(np.isfinite(t.weights()))

def test_projection_active_and_matches_reference():
    # large mu: B_W^2 = 2 N log K / mu is small, so the projection fires
    X, y, K = _problem(N=30, D=6, K=5, dense=True, seed=5)
    t = _trainer(KIND_UMAX, X, y, K, mu=300.0)
    assert np.isfinite(t.B_W) and np.isfinite(t.B_u)
    order = np.random.default_rng(0).integers(0, 30, 200)
    W0, u0 = t.W.copy(), t.u.copy()
    rep = t.run_epoch(order, 1.0, 3)
    assert rep.extra["w_projections"] > 0
    Wr, ur, bad = _reference_run(t, order, 3, W0, u0, 1.0)
    assert bad == -1
    W = t.weights()
    assert _close(W, Wr) and _close(t.u, ur)
    assert np.all(np.linalg.norm(W, axis=1) <= t.B_W * (1 + 1e-12))
    assert np.all((t.u >= 0) & (t.u <= t.B_u))


def test_bounds_match_objectives():
    X, y, K = _problem(seed=6)
    t = _trainer(KIND_UMAX, X, y, K, mu=0.5)
    B_x, B_W, B_u = ob.umax_bounds(X, K, 0.5)
    assert np.isclose(t.B_x, B_x, rtol=1e-14) and np.isclose(t.B_W, B_W, rtol=1e-14)
    assert np.isclose(t.B_u, B_u, rtol=1e-14)
    np.testing.assert_allclose(t.beta, ob.touch_weights(y, K), rtol=1e-14)
    t3 = _trainer(KIND_UMAX, X, y, K, mu=0.5, m=3)
    np.testing.assert_allclose(t3.beta, ob.touch_weights(y, K, m=3), rtol=1e-14)


@pytest.mark.parametrize("kind", [KIND_VANILLA, KIND_UMAX])
@pytest.mark.parametrize("dense", [False, True])
def test_lazy_scale_renormalisation_matches_reference(kind, dense):
    # lr mu beta / N close to 1: the row scales underflow 1e-100 within a few touches
    # (U-max: the running squared norms must survive the folds)
    X, y, K = _problem(N=20, D=5, K=3, dense=dense, density=0.6, seed=7, scale=0.2)
    beta = ob.touch_weights(y, K)
    lr = 0.5
    mu = (1 - 1e-7) / (lr * beta.max() / 20)
    t = _trainer(kind, X, y, K, mu=mu)
    rng = np.random.default_rng(3)
    W0 = rng.standard_normal((K, 5))
    _set_params(t, W0, np.ones(20) * 3)
    order = rng.integers(0, 20, 120)
    rep = t.run_epoch(order, lr, 1)
    assert rep.diverged_at == -1
    assert np.all(np.abs(t.scale) >= 1e-100)            # renormalised, never 0
    if kind == KIND_UMAX:
        # the running norms (the projection's) stay exact through the in-kernel folds
        np.testing.assert_allclose(t.sqnorm, np.einsum("kd,kd->k", t.W, t.W), rtol=1e-8)
    Wr, ur, bad = _reference_run(t, order, 1, W0, np.ones(20) * 3, lr)
    assert bad == -1
    np.testing.assert_allclose(t.weights(), Wr, rtol=1e-8, atol=1e-300)
    np.testing.assert_allclose(t.u, ur, rtol=1e-10)


@pytest.mark.parametrize("dense", [False, True])
def test_weights_fold_is_exact_and_idempotent(dense):
    X, y, K = _problem(N=50, D=10, K=5, seed=8, dense=dense, scale=0.5)
    t = _trainer(KIND_UMAX, X, y, K, mu=2.0)
    for e in range(3):
        t.run_epoch(np.random.default_rng(e).permutation(50), 0.3, e)
    V, s = t.W.copy(), t.scale.copy()
    assert np.any(s != 1.0)
    # the O(1) running squared norms of the unscaled rows are exact to rounding
    np.testing.assert_allclose(t.sqnorm, np.einsum("kd,kd->k", V, V), rtol=1e-10)
    W = t.weights()
    np.testing.assert_array_equal(W, V * s[:, None])
    np.testing.assert_allclose(t.sqnorm, np.einsum("kd,kd->k", W, W), rtol=1e-12)
    assert np.all(t.scale == 1.0)
    np.testing.assert_array_equal(t.weights(), W)


# ---------------------------------------------------------------------------
# against the reference gradients of objectives.py
# ---------------------------------------------------------------------------

def _one_step(kind, problem, start, i, lr, mu, m=1, delta0=1.0):
    """One step on datapoint ``i`` of ``problem = (X, y, K)`` from ``start = (W0, u0)``
    (class draws seeded by 11): the trainer and the classes it drew."""
    X, y, K = problem
    seed = 11
    t = _trainer(kind, X, y, K, mu=mu, m=m,
                 **({} if kind == KIND_VANILLA else {"delta0": delta0}))
    _set_params(t, *start)
    order = np.array([i])
    if m == 1:
        ks = ksgd.draw_classes_m1(seed, order, t._y, K)[0:1]
    else:
        ks = ksgd.draw_classes_multi(seed, order, t._y, K, m)[0]
    t.run_epoch(order, lr, seed)
    return t, ks


@pytest.mark.parametrize("mu", [0.0, 0.4])
def test_vanilla_step_is_minus_lr_times_f_ik_grad_scaled(mu):
    X, y, K = _problem(N=25, D=6, K=5, seed=9)
    rng = np.random.default_rng(4)
    W0, u0 = rng.standard_normal((K, 6)) * 0.2, 1.0 + rng.random(25)
    lr = 0.01
    for i in (0, 7, 13):
        t, ks = _one_step(KIND_VANILLA, (X, y, K), (W0, u0), i, lr, mu)
        dW, du = ob.f_ik_grad_scaled(i, int(ks[0]), u0, X, y, W0, mu=mu)
        np.testing.assert_allclose(t.weights(), W0 - lr * dW, rtol=1e-12, atol=1e-15)
        assert np.isclose(t.u[i], u0[i] - lr * du, rtol=1e-12)   # u stays > 0 here


def test_umax_multi_step_is_minus_lr_times_f_iS_grad_scaled():
    X, y, K = _problem(N=25, D=6, K=7, seed=10)
    rng = np.random.default_rng(5)
    W0, u0 = rng.standard_normal((K, 6)) * 0.2, 2.0 + rng.random(25)
    lr = 0.01
    for i in (1, 8):
        # delta0 huge: no reset, so the step is a plain gradient step
        t, ks = _one_step(KIND_UMAX, (X, y, K), (W0, u0), i, lr, 0.3, m=3, delta0=1e6)
        assert len(set(ks)) == 3 and y[i] not in ks
        dW, du = ob.f_iS_grad_scaled(i, ks, u0, X, y, W0, mu=0.3,
                                     beta=ob.touch_weights(y, K, m=3))
        np.testing.assert_allclose(t.weights(), W0 - lr * dW, rtol=1e-12, atol=1e-15)
        assert np.isclose(t.u[i], u0[i] - lr * du, rtol=1e-12)


@pytest.mark.parametrize("mu", [0.0, 0.4])
def test_raman_step_is_minus_lr_times_correct_gradient(mu):
    X, y, K = _problem(N=25, D=6, K=5, seed=11)
    rng = np.random.default_rng(6)
    W0, u0 = rng.standard_normal((K, 6)) * 0.2, rng.standard_normal(25)
    lr = 0.01
    for i in (2, 9):
        t, ks = _one_step(KIND_RAMAN_VANILLA, (X, y, K), (W0, u0), i, lr, mu)
        dW, du = ob.raman_f_ik_grad_scaled(i, int(ks[0]), u0, X, y, W0, mu=mu)
        np.testing.assert_allclose(t.weights(), W0 - lr * dW, rtol=1e-12, atol=1e-15)
        assert np.isclose(t.u[i], u0[i] - lr * du, rtol=1e-12)
        # and not the original code's defective gradient
        dWo, duo = ob.raman_f_ik_grad_original_code_scaled(i, int(ks[0]), u0, X, y, W0, mu=mu)
        assert not np.isclose(t.u[i], u0[i] - lr * duo, rtol=1e-9)


@pytest.mark.parametrize("kind,m", [(KIND_UMAX, 1), (KIND_UMAX, 3), (KIND_RAMAN_UMAX, 1),
                                    (KIND_RAMAN_UMAX, 3)])
def test_umax_reset_value_matches_objectives(kind, m):
    # u far below its reset target: the reset fires; lr tiny so u_new ~ target
    X, y, K = _problem(N=20, D=5, K=6, seed=12)
    rng = np.random.default_rng(7)
    W0 = rng.standard_normal((K, 5)) * 3
    u0 = np.full(20, -50.0 if kind == KIND_RAMAN_UMAX else 0.0)
    i = 3
    t, ks = _one_step(kind, (X, y, K), (W0, u0), i, 1e-12, 0.0, m=m)
    if kind == KIND_UMAX:
        target = ob.umax_reset_value(i, ks, X, y, W0)
    else:
        target = ob.raman_umax_reset_value(i, ks, X, y, W0)
    if target - u0[i] > 1.0:
        assert np.isclose(t.u[i], target, rtol=1e-9, atol=1e-9)
    else:  # pragma: no cover - the seed is chosen so that the reset fires
        pytest.fail("test problem does not trigger the reset")


# ---------------------------------------------------------------------------
# divergence, constraints, determinism, sampling
# ---------------------------------------------------------------------------

def _spiky_problem():
    # large-norm inputs: the exponential term explodes for vanilla SGD at u = 0
    return _problem(N=40, D=6, K=10, dense=True, seed=13, scale=6.0)


def test_vanilla_overflows_and_stops_at_last_finite_iterate():
    X, y, K = _spiky_problem()
    t = _trainer(KIND_VANILLA, X, y, K)
    rep = t.run_epoch(np.random.default_rng(0).permutation(40), 10.0, 1)
    assert rep.diverged_at >= 0 and rep.steps == rep.diverged_at
    assert np.all(np.isfinite(t.weights())) and np.all(np.isfinite(t.u))
    assert np.all(t.u >= 0)


@pytest.mark.parametrize("kind", [KIND_VANILLA, KIND_RAMAN_VANILLA])
@pytest.mark.parametrize("m", [1, 3])
def test_divergence_step_matches_reference(kind, m):
    X, y, K = _spiky_problem()
    t = _trainer(kind, X, y, K, m=m)
    order = np.random.default_rng(2).permutation(40)
    W0, u0 = t.W.copy(), t.u.copy()
    rep = t.run_epoch(order, 10.0, 4)
    Wr, ur, bad = _reference_run(t, order, 4, W0, u0, 10.0)
    assert bad >= 0 and rep.diverged_at == bad
    assert _close(t.weights(), Wr) and _close(t.u, ur)


@pytest.mark.parametrize("dense", [False, True])
def test_overflow_inside_the_row_update_is_detected(dense):
    # finite + finite = inf: the scalars are finite, the updated entry is not
    K = 3
    X = sp.csr_matrix(np.full((10, 4), 0.5)) if dense else \
        sp.csr_matrix(np.tile([0.5, 0.5, 0.0, 0.5], (10, 1)))
    y = np.arange(10) % K
    t = _trainer(KIND_UMAX, X, y, K)
    assert t._dense == dense
    W0 = np.zeros((K, 4))
    W0[:, 0], W0[:, 1] = 1.75e308, -1.75e308      # scores x.w = 0 exactly
    t.set_params(W0, np.zeros(10))
    rep = t.run_epoch(np.arange(10), 1e307, 0)     # step 1e307 per entry: overflows
    assert rep.diverged_at == 0 and rep.steps == 0
    assert not np.all(np.isfinite(t.weights()))


def test_umax_does_not_overflow_where_vanilla_does():
    X, y, K = _spiky_problem()
    t = _trainer(KIND_UMAX, X, y, K)
    rng = np.random.default_rng(0)
    for e in range(5):
        rep = t.run_epoch(rng.permutation(40), 10.0, e)
        assert rep.diverged_at == -1 and rep.steps == 40
    assert np.all(np.isfinite(t.weights())) and np.all(t.u >= 0)


@pytest.mark.parametrize("kind", [KIND_VANILLA, KIND_UMAX])
@pytest.mark.parametrize("m", [1, 2])
def test_u_nonnegative(kind, m):
    X, y, K = _problem(N=60, D=8, K=5, seed=14, scale=0.5)
    t = _trainer(kind, X, y, K, m=m)
    rng = np.random.default_rng(1)
    for e in range(3):
        rep = t.run_epoch(rng.permutation(60), 0.02 if kind == KIND_VANILLA else 0.5, e)
        assert rep.diverged_at == -1
        assert np.all(t.u >= 0.0)
    assert np.any(t.u > 0.0)


def test_same_seed_identical_different_seed_differs():
    X, y, K = _problem(N=100, D=10, K=8, seed=15)
    out = []
    for seed in (3, 3, 4):
        t = _trainer(KIND_UMAX, X, y, K)
        t.run_epoch(np.arange(100), 0.1, seed)
        out.append(t.weights().copy())
    assert np.array_equal(out[0], out[1])
    assert not np.array_equal(out[0], out[2])


def test_class_draws_uniform_and_exclude_label():
    K = 7
    y = np.repeat(np.arange(K), 1)
    order = np.random.default_rng(0).permutation(np.repeat(np.arange(K), 20000))
    ks = ksgd.draw_classes_m1(123, order, y, K)
    assert np.all(ks != y[order]) and ks.min() >= 0 and ks.max() < K
    for c in range(K):
        counts = np.bincount(ks[order == c], minlength=K)
        assert counts[c] == 0
        p = np.delete(counts, c) / 20000
        assert np.all(np.abs(p - 1 / (K - 1)) < 0.015)
    multi = ksgd.draw_classes_multi(5, order[:5000], y, K, 4)
    for t_ in range(5000):
        row = multi[t_]
        assert len(set(row)) == 4 and y[order[t_]] not in row
    # inclusion probability m/(K-1) for every class other than the label
    incl = np.array([[np.mean(np.any(multi[order[:5000] == c] == j, axis=1)) for j in range(K)]
                     for c in range(K)])
    off = incl[~np.eye(K, dtype=bool)]
    assert np.all(np.abs(off - 4 / 6) < 0.06)


def _learnable(N=400, D=20, K=5, seed=16):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D)) / np.sqrt(D)
    y = np.argmax(X @ rng.standard_normal((K, D)).T * 3 + rng.gumbel(size=(N, K)), axis=1)
    return sp.csr_matrix(X), y, K


def test_hogwild_runs_and_learns():
    X, y, K = _learnable()
    t = _trainer(KIND_UMAX, X, y, K, threads=2)
    before = ob.log_loss(X, y, t.weights())
    rng = np.random.default_rng(0)
    for e in range(5):
        rep = t.run_epoch(rng.permutation(400), 0.1 * 0.9 ** e, e)
        assert rep.steps == 400 and rep.diverged_at == -1
    assert ob.log_loss(X, y, t.weights()) < before


def test_trainer_option_errors():
    X, y, K = _problem(seed=17)
    with pytest.raises(ValueError, match="unknown option.*'bogus'.*accepted options"):
        UmaxTrainer(X, y, K, bogus=1)
    with pytest.raises(ValueError, match="delta0"):
        UmaxTrainer(X, y, K, delta0=-1.0)
    with pytest.raises(ValueError, match="unknown option.*'delta0'"):
        VanillaTrainer(X, y, K, delta0=1.0)
    with pytest.raises(ValueError, match="variant"):
        RamanTrainer(X, y, K, variant="fast")
    # the sizes are fit's checks (Trainer.check_sizes), made once before a trainer exists
    with pytest.raises(ValueError, match="n_sampled .* 1..5"):
        fit(X, y, "umax", 0.1, K=K, n_sampled=6, epochs=1, progress=False)
    with pytest.raises(ValueError, match="batch_size must be 1"):
        fit(X, y, "umax", 0.1, K=K, batch_size=10, epochs=1, progress=False)
    with pytest.raises(ValueError, match="threads"), \
            pytest.warns(DeprecationWarning, match="hogwild=True"):
        UmaxTrainer(X, y, K, n_sampled=2, hogwild=True)
    with pytest.raises(ValueError, match="no parallel kernel for n_sampled > 1"):
        UmaxTrainer(X, y, K, n_sampled=2, threads=2)
    with pytest.raises(ValueError, match="'threads'.* at most NUMBA_NUM_THREADS"):
        UmaxTrainer(X, y, K, threads=10 ** 6)


def test_init_params_writes_memory_and_u_init():
    X, y, K = _problem(seed=18)
    t = _trainer(KIND_UMAX, X, y, K)
    assert t.W.shape == (K, X.shape[1]) and np.all(t.W == 0) and np.all(t.u == 0)
    t.init_params("logK")
    assert np.allclose(t.u, np.log(K))
    with pytest.raises(ValueError, match="u_init"):
        t.init_params("ones")
