"""The doubly stochastic OVE kernel against its NumPy reference; ove_sgd's fixed point."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax

from scalable_softmax.kernels.nonparametric import ove_steps
from scalable_softmax.repro.titsias import nonparametric as npm


def test_kernel_matches_reference():
    rng = np.random.default_rng(3)
    K, b, S, n_iter = 7, 5, 3, 6
    y = rng.integers(0, K, size=b * n_iter + 4)
    neg = npm._draw_others(rng, y, K, S)
    f0 = rng.normal(size=K)
    f = f0.copy()
    ove_steps(f, y, neg, 2, n_iter - 1, b, S, 0.3, np.empty((b, S)))
    ref = npm._ove_steps_reference(f0, y, neg, 2, n_iter - 1, b, S, 0.3)
    np.testing.assert_allclose(f, ref, rtol=0, atol=1e-12)
    assert not np.allclose(f, f0)


def test_draw_others_excludes_own_value():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, size=2000)
    m = npm._draw_others(rng, y, 4, 5)
    assert (m != y[:, None]).all() and m.min() == 0 and m.max() == 3


def test_sgd_approaches_mle():
    rng = np.random.default_rng(1)
    K = 5
    y = rng.choice(K, size=2000, p=[0.4, 0.3, 0.15, 0.1, 0.05])
    mle = np.bincount(y, minlength=K) / len(y)
    f, steps, err = npm.ove_sgd(y, K, batch=20, samples=2, lr0=0.05, iterations=3000,
                                record_every=500, target=mle, seed=0)
    assert steps[-1] == 3000 and len(err) == len(steps)
    assert err[-1] < 0.05 < err[0]
    np.testing.assert_allclose(np.abs(softmax(f) - mle).sum(), err[-1])


def test_bad_input():
    with pytest.raises(ValueError, match="y must lie"):
        npm.ove_sgd(np.array([0, 5]), 3)


# --------------------------------------------------------------------------- Figure 1(a)
def test_sample_values_is_seeded_and_follows_u_squared():
    p, y = npm.sample_values(500, 6, seed=4)
    rng = np.random.default_rng(4)
    u = rng.uniform(size=6)
    np.testing.assert_array_equal(p, u**2 / np.sum(u**2))
    np.testing.assert_array_equal(y, rng.choice(6, size=500, p=p))
    p2, y2 = npm.sample_values(500, 6, seed=4)
    np.testing.assert_array_equal(y, y2)
    with pytest.raises(ValueError, match="n_values >= 2"):
        npm.sample_values(10, 1, seed=0)


@pytest.mark.parametrize("fun, size", [(npm.ove_objective, 5), (npm.bouchard_objective, 6)])
def test_objective_gradients_match_finite_differences(fun, size):
    counts = np.array([3.0, 1.0, 7.0, 2.0, 5.0])
    x = np.random.default_rng(0).normal(size=size)
    _, g = fun(x, counts)
    h = 1e-6
    fd = [(fun(x + h * e, counts)[0] - fun(x - h * e, counts)[0]) / (2 * h)
          for e in np.eye(size)]
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_fit_bounds_ove_is_the_mle_and_bouchard_its_closed_form():
    counts = np.array([40, 25, 20, 10, 5])
    fits = npm.fit_bounds(counts)
    np.testing.assert_allclose(fits.p_mle, counts / 100)
    np.testing.assert_allclose(fits.p_ove, fits.p_mle, atol=1e-8)          # Proposition 2
    np.testing.assert_allclose(fits.p_bou, fits.p_bou_closed, atol=1e-7)
    assert fits.alpha_check == pytest.approx(fits.alpha_bou, abs=1e-6)
    assert fits.p_bou[0] > fits.p_mle[0] and fits.p_bou[-1] < fits.p_mle[-1]  # the bias
    with pytest.raises(ValueError, match="positive counts"):
        npm.fit_bounds([3, 0, 2])


def test_bouchard_k2_is_proposition_3():
    f1, f2, alpha = npm.bouchard_k2([150.0, 50.0]).x
    assert alpha == pytest.approx((f1 + f2) / 2, abs=1e-6)
    assert f1 - f2 == pytest.approx(2 * np.log(3), abs=1e-5)


def test_results_table_and_figures():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p_true, y = npm.sample_values(200, 4, seed=1)
    counts = np.bincount(y, minlength=4)
    fits = npm.fit_bounds(counts)
    t = npm.results_table(counts, p_true, fits, 100, 0.02, 0.05, 0.06)
    assert list(t.columns) == ["part", "row", "true_p", "exact_mle", "ove", "bouchard"]
    assert list(t.part) == ["fig1a"] * 5 + ["fig2"] * 2
    assert t.row[0] == f"value 1 (count {counts[0]})"
    assert t.exact_mle[4] == pytest.approx(np.abs(fits.p_mle - p_true).sum())
    assert t.row[5] == "L1 vs exact MLE after 100 iterations" and t.ove[5] == 0.02
    assert (t.ove[6], t.exact_mle[6]) == (0.06, 0.05)
    f1 = npm.plot_fig1a(p_true, fits, 200)
    f2 = npm.plot_fig2(fits.p_mle, fits.p_ove, np.array([0, 10]), np.array([0.5, 0.1]),
                       0.05, 0.06, title="t")
    assert len(f1.axes) == 1 and len(f2.axes) == 3 and f2.legends
    plt.close(f1)
    plt.close(f2)
