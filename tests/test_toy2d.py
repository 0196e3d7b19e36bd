"""The 2-D toy problem of notebook 09 (repro.titsias.toy2d)."""
import numpy as np
import pytest
from scipy.optimize import approx_fprime

from scalable_softmax.repro.titsias import toy2d


@pytest.fixture(scope="module")
def problem():
    X, y, _ = toy2d.make_blobs(K=4, n_per_class=10, radius=2.0, spread=1.0, seed=3)
    return toy2d.Toy2D(X, y, 4, lam=1.0)


def test_make_blobs_is_seeded_and_has_a_bias_column():
    X, y, Z = toy2d.make_blobs(5, 40, 2.0, 1.0, seed=0)
    X2, y2, _ = toy2d.make_blobs(5, 40, 2.0, 1.0, seed=0)
    assert X.shape == (200, 3) and np.array_equal(X, X2) and np.array_equal(y, y2)
    assert np.all(X[:, 2] == 1.0) and np.array_equal(X[:, :2], Z)
    assert np.bincount(y).tolist() == [40] * 5
    with pytest.raises(ValueError, match="K >= 2"):
        toy2d.make_blobs(1, 40, 2.0, 1.0, seed=0)


@pytest.mark.parametrize("name", toy2d.METHODS)
def test_gradients_match_finite_differences(problem, name):
    rng = np.random.default_rng(0)
    theta = 0.3 * rng.standard_normal(problem.start(name).size)
    fun = problem.objective(name)
    _, grad = fun(theta)
    numeric = approx_fprime(theta, lambda t: fun(t)[0], 1e-7)
    np.testing.assert_allclose(grad, numeric, atol=1e-5)


def test_bounds_lie_above_the_exact_nll(problem):
    rng = np.random.default_rng(1)
    theta = rng.standard_normal(problem.start("Bouchard").size)
    exact = problem.bound("softmax", theta[:problem.K * problem.D])
    assert problem.bound("OVE", theta[:problem.K * problem.D]) >= exact
    assert problem.bound("Bouchard", theta) >= exact


def test_fits_converge_by_the_gradient_and_table(problem):
    fits = {}
    for name in toy2d.METHODS:
        res, trace = problem.fit(name, maxiter=5000, gtol=1e-9)
        assert np.abs(res.jac).max() < 1e-4 and res.nit < 5000
        assert trace[0]["iteration"] == 0 and len(trace) == res.nit + 1
        fits[name] = dict(res=res, W=problem.weights(res.x), theta=res.x)
    pred = {n: np.argmax(problem.X @ f["W"].T, axis=1) for n, f in fits.items()}
    table = toy2d.summary_table(problem, fits, pred, pred)
    assert list(table.method) == list(toy2d.METHODS)
    assert table.converged.all() and table.param_distance.iloc[0] == 0.0
    assert (table.bound_at_optimum >= table.train_nll - 1e-12).all()


def test_unknown_method_is_a_clear_error(problem):
    with pytest.raises(ValueError, match="unknown method"):
        problem.objective("nope")
