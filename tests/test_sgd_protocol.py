"""The authors' code's class draw for vanilla SGD and U-max (option ``sample_from="all"``):
``m`` distinct classes from all ``K``, the label dropped when drawn, weight ``(K-1)/|S|``.
Kernel against the NumPy reference step on the replayed draws."""
import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax.fit import fit
from scalable_softmax.kernels import sgd as ksgd
from scalable_softmax.methods import sgd
from scalable_softmax.methods.sgd import KIND_UMAX, KIND_VANILLA, UmaxTrainer, VanillaTrainer


def _problem(N=60, D=9, K=4, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.5, random_state=seed, format="csr")
    X.data = rng.standard_normal(X.data.size)
    X.sort_indices()
    y = rng.integers(0, K, N)
    return X, y, K


def test_draws_drop_the_label_and_are_uniform_on_all_classes():
    K, m, n = 6, 3, 60000
    y = np.random.default_rng(0).integers(0, K, n)
    order = np.arange(n)
    draws = sgd.draw_classes(17, order, y, K, m, sample_from="all")
    sizes = np.array([d.size for d in draws])
    assert set(np.unique(sizes)) == {m - 1, m}
    assert all(len(set(d.tolist())) == d.size for d in draws[:2000])
    assert not any(np.any(d == y[t]) for t, d in enumerate(draws))
    # the label is drawn with probability m/K
    assert abs(np.mean(sizes == m - 1) - m / K) < 0.01
    # every other class with probability m/K as well
    counts = np.zeros(K)
    for d in draws[:20000]:
        counts[d] += 1
    frac = counts / np.bincount(y[:20000], minlength=K).sum()
    # class j is in S when drawn and j != y: P = (m/K) (1 - n_j/n)
    expect = m / K * (1 - np.bincount(y[:20000], minlength=K) / 20000)
    np.testing.assert_allclose(frac, expect, atol=0.01)


def test_others_mode_draws_unchanged():
    """The default draw is the one the kernels always made (m from the K-1 others)."""
    y = np.random.default_rng(1).integers(0, 7, 500)
    order = np.arange(500)
    a = sgd.draw_classes(3, order, y, 7, 3)
    b = ksgd.draw_classes_multi(3, order, y, 7, 3)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))


@pytest.mark.parametrize("kind,cls", [(KIND_VANILLA, VanillaTrainer), (KIND_UMAX, UmaxTrainer)])
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("mu", [0.0, 0.6])
def test_epoch_matches_reference_on_replayed_draws(kind, cls, m, mu):
    X, y, K = _problem(seed=m + 3)
    t = cls(X, y, K, mu=mu, n_sampled=m, sample_from="all")
    t.init_params("zero")
    rng = np.random.default_rng(2)
    W0 = 0.3 * rng.standard_normal((K, X.shape[1]))
    u0 = 1.0 + rng.random(X.shape[0])
    t.set_params(W0, u0)
    order = rng.permutation(X.shape[0])
    seed, lr = 99, 0.005         # small enough that vanilla SGD stays finite here
    draws = sgd.draw_classes(seed, order, t._y, K, m, sample_from="all")
    n_hits = sum(d.size < m for d in draws)
    assert n_hits > 5                     # the label is drawn often at K = 4
    if m == 1:
        assert any(d.size == 0 for d in draws)   # steps on u alone happen
    rep = t.run_epoch(order, lr, seed)
    assert rep.steps == order.size and rep.diverged_at == -1
    assert rep.extra["label_draws"] == n_hits
    u_lo, u_hi = t._u_bounds()
    B_W = t.B_W if t._project() else np.inf
    W, u = W0.copy(), u0.copy()
    for s, i in enumerate(order):
        W, u, info = sgd.reference_step(kind, i, draws[s], X, y, W, u, lr, mu, t.beta,
                                        t.delta0, u_lo, u_hi, B_W)
        assert info["finite"]
    np.testing.assert_allclose(t.weights(), W, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(t.u, u, rtol=1e-9, atol=1e-11)


def test_empty_set_step_moves_u_only():
    """m = 1 and the label drawn: W unchanged, u takes a step on 1 - exp(-u)."""
    X, y, K = _problem(N=40, K=2, seed=4)
    # K = 2, m = 1: the draw is the label half the time
    t = VanillaTrainer(X, y, K, n_sampled=1, sample_from="all")
    t.init_params("zero")
    u0 = np.full(40, 0.7)
    t.set_params(np.zeros((K, X.shape[1])), u0)
    order = np.arange(40)
    draws = sgd.draw_classes(5, order, t._y, K, 1, sample_from="all")
    t.run_epoch(order, 0.1, 5)
    for s, i in enumerate(order):
        if draws[s].size == 0:
            assert np.isclose(t.u[i], 0.7 - 0.1 * (1 - np.exp(-0.7)), rtol=1e-14)
    assert any(d.size == 0 for d in draws)


def test_touch_weights_for_all_classes():
    y = np.array([0, 0, 1, 2, 2, 2])
    K, m = 4, 2
    beta = sgd._touch_weights(y, K, m, from_all=True)
    n = np.bincount(y, minlength=K)
    np.testing.assert_allclose(beta, 6 / (n + (6 - n) * m / K))


def test_fit_accepts_the_option_and_rejects_bad_values():
    X, y, K = _problem(seed=8)
    res = fit(X, y, "umax", 1.0, epochs=2, n_sampled=3, sample_from="all", order="file",
              u_init="zero", progress=False, K=K)
    assert res.history.steps.tolist() == [0, X.shape[0], 2 * X.shape[0]]
    assert "label_draws" in res.extra.columns
    with pytest.raises(ValueError, match="sample_from"):
        fit(X, y, "umax", 1.0, epochs=1, sample_from="every", progress=False)
    with pytest.raises(ValueError, match="n_sampled"):
        fit(X, y, "vanilla", 1.0, epochs=1, n_sampled=K + 1, sample_from="all",
            progress=False, K=K)
    # (threads=2: no parallel kernel for sample_from='all', or more than numba's pool)
    with pytest.raises(ValueError, match="threads"), \
            pytest.warns(DeprecationWarning, match="hogwild=True"):
        fit(X, y, "vanilla", 1.0, epochs=1, sample_from="all", hogwild=True,
            progress=False, K=K)
