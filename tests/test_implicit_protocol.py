"""The authors' code's conventions for ``implicit`` (options ``sample_from`` and
``passes`` of :class:`ImplicitTrainer`): the class ``k`` uniform on all ``K`` classes
(a draw equal to the label is a u-only step: ``u`` moves as for ``δ₀ = 0``, ``W`` stays
exactly unchanged) and several passes over the datapoint order per epoch.

Ground truth: the plain NumPy :func:`implicit_epoch_reference` (bisection root finder)
run on the kernel's class draws replayed by :func:`draw_classes`."""
import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax.fit import fit
from scalable_softmax.methods.implicit import (
    ImplicitTrainer,
    class_touch_weights,
    draw_classes,
    implicit_epoch_reference,
    pass_seeds,
    solve_reduced_reference,
)

REL = 1e-10
LR = 0.7


def close(v, ref, rel=REL):
    v = np.asarray(v, dtype=float)
    ref = np.asarray(ref, dtype=float)
    return bool(np.all(np.abs(v - ref) <= rel * np.maximum(1.0, np.abs(ref))))


def _problem(N=40, D=12, K=3, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.4, random_state=seed, format="csr")
    X.data = rng.standard_normal(X.data.size)
    X = X.tolil()
    X[5, :] = 0.0          # one empty row (s = 0)
    X = X.tocsr()
    X.eliminate_zeros()
    X.sort_indices()
    y = rng.integers(0, K, N)
    return X, y, K


def _trainer(X, y, K, *, mu=0.0, seed=1, **options):
    """A trainer with a random (non-zero) start, the same for the same ``seed``."""
    tr = ImplicitTrainer(X, y, K, mu=mu, tol=1e-13, **options)
    tr.init_params()
    rng = np.random.default_rng(seed)
    tr.W[:] = 0.5 * rng.standard_normal(tr.W.shape)
    tr.u[:] = rng.uniform(0.0, 2.0, tr.N)
    return tr


def _order(N, seed=3):
    return np.random.default_rng(seed).permutation(N).astype(np.int64)


@pytest.mark.parametrize("mu", [0.0, 0.3])
@pytest.mark.parametrize("kernel", ["fast", "simple"])
def test_default_options_are_others_and_one_pass(kernel, mu):
    X, y, K = _problem(K=4)
    order = _order(X.shape[0])
    a = _trainer(X, y, K, mu=mu, kernel=kernel)
    b = _trainer(X, y, K, mu=mu, kernel=kernel, sample_from="others", passes=1)
    ra = a.run_epoch(order, LR, 11)
    rb = b.run_epoch(order, LR, 11)
    assert ra.steps == rb.steps == X.shape[0]
    assert ra.extra["u_only_steps"] == rb.extra["u_only_steps"] == 0
    assert np.array_equal(a.weights(), b.weights())
    assert np.array_equal(a.u, b.u)
    # and the default draws (never the label) are those the reference is given
    draws = draw_classes(11, order, y, K)
    assert not np.any(draws == y[order])
    c = _trainer(X, y, K, mu=mu)
    W_ref, u_ref, n_u = implicit_epoch_reference(
        X, y, c.weights(), c.u, order, LR, K, draws, mu=mu,
        beta=class_touch_weights(y, K))
    assert n_u == 0
    assert close(a.weights(), W_ref) and close(a.u, u_ref)


def test_fast_and_simple_are_bit_identical_with_sample_from_all():
    X, y, K = _problem(K=3)
    order = _order(X.shape[0])
    for mu in (0.0, 0.3):
        a = _trainer(X, y, K, mu=mu, kernel="fast", sample_from="all", passes=2)
        b = _trainer(X, y, K, mu=mu, kernel="simple", sample_from="all", passes=2)
        ra = a.run_epoch(order, LR, 5)
        rb = b.run_epoch(order, LR, 5)
        assert ra.extra == rb.extra
        assert np.array_equal(a.weights(), b.weights())
        assert np.array_equal(a.u, b.u)


@pytest.mark.parametrize("mu", [0.0, 0.3])
@pytest.mark.parametrize("kernel", ["fast", "simple"])
def test_sample_from_all_matches_reference_on_replayed_draws(kernel, mu):
    X, y, K = _problem(K=3)
    N = X.shape[0]
    order = _order(N)
    seed = 2024
    draws = draw_classes(seed, order, y, K, "all")
    hits = int(np.sum(draws == y[order]))
    assert 0 < hits < N            # K = 3: about a third of the steps are u-only
    assert set(np.unique(draws)) == set(range(K))
    tr = _trainer(X, y, K, mu=mu, kernel=kernel, sample_from="all")
    W0, u0 = tr.weights().copy(), tr.u.copy()
    rep = tr.run_epoch(order, LR, seed)
    assert rep.steps == N and rep.diverged_at == -1
    assert rep.extra["u_only_steps"] == hits
    W_ref, u_ref, n_u = implicit_epoch_reference(
        X, y, W0, u0, order, LR, K, draws, mu=mu, beta=class_touch_weights(y, K))
    assert n_u == hits
    assert close(tr.weights(), W_ref)
    assert close(tr.u, u_ref)
    # the reference is sensitive to the u-only steps: treating them as no-ops differs
    keep = draws != y[order]
    W_bad, u_bad, _ = implicit_epoch_reference(
        X, y, W0, u0, order[keep], LR, K, draws[keep], mu=mu,
        beta=class_touch_weights(y, K))
    assert not close(tr.u, u_bad)


def _u_only_case(X, y, K, i):
    """A seed whose first draw for datapoint ``i`` (mode "all") is its label."""
    for seed in range(1000):
        if draw_classes(seed, np.array([i]), y, K, "all")[0] == y[i]:
            return seed
    raise AssertionError("no seed found")


@pytest.mark.parametrize("mu", [0.0, 0.3])
@pytest.mark.parametrize("kernel", ["fast", "simple"])
@pytest.mark.parametrize("i", [0, 5])      # 5 is the empty row
def test_u_only_step_leaves_W_bit_identical(kernel, mu, i):
    X, y, K = _problem(K=3)
    seed = _u_only_case(X, y, K, i)
    tr = _trainer(X, y, K, mu=mu, kernel=kernel, sample_from="all")
    if mu > 0:
        tr._scale[:] = [0.9, 0.8, 0.7]    # non-trivial lazy ridge scales
    W0, u0, sc0 = tr.W.copy(), tr.u.copy(), tr._scale.copy()
    rep = tr.run_epoch(np.array([i]), LR, seed)
    assert rep.steps == 1 and rep.extra["u_only_steps"] == 1
    assert np.array_equal(tr.W, W0)
    assert np.array_equal(tr._scale, sc0)
    assert tr.u[i] != u0[i]
    others = np.arange(tr.N) != i
    assert np.array_equal(tr.u[others], u0[others])
    s = float(X[i].multiply(X[i]).sum())
    u_ref = solve_reduced_reference(0.0, float(u0[i]), LR, K, s)[0]
    assert close(tr.u[i], u_ref)


@pytest.mark.parametrize("passes", [1, 3])
def test_u_only_count_equals_replayed_label_draws(passes):
    X, y, K = _problem(K=3, seed=4)
    order = _order(X.shape[0], seed=9)
    tr = _trainer(X, y, K, sample_from="all", passes=passes)
    rep = tr.run_epoch(order, LR, 77)
    expect = sum(int(np.sum(draw_classes(s, order, y, K, "all") == y[order]))
                 for s in pass_seeds(77, passes))
    assert expect > 0
    assert rep.extra["u_only_steps"] == expect


def test_pass_seeds():
    assert pass_seeds(7, 1) == [7]
    assert pass_seeds(2 ** 32 + 7, 1) == [7]
    s = pass_seeds(7, 3)
    assert s[0] == 7 and len(set(s)) == 3
    assert pass_seeds(7, 5)[:3] == s                  # independent of passes
    assert all(0 <= v < 2 ** 32 for v in pass_seeds(123, 6))


@pytest.mark.parametrize("sample_from", ["others", "all"])
@pytest.mark.parametrize("kernel", ["fast", "simple"])
def test_three_passes_equal_three_single_passes(kernel, sample_from):
    X, y, K = _problem(K=5)
    N = X.shape[0]
    order = _order(N)
    seed = 31
    a = _trainer(X, y, K, mu=0.2, kernel=kernel, sample_from=sample_from, passes=3)
    ra = a.run_epoch(order, LR, seed)
    assert ra.steps == 3 * N and ra.diverged_at == -1
    b = _trainer(X, y, K, mu=0.2, kernel=kernel, sample_from=sample_from)
    reps = [b.run_epoch(order, LR, s) for s in pass_seeds(seed, 3)]
    assert np.array_equal(a.weights(), b.weights())
    assert np.array_equal(a.u, b.u)
    assert ra.extra["u_only_steps"] == sum(r.extra["u_only_steps"] for r in reps)
    assert ra.extra["root_iterations_max"] == max(
        r.extra["root_iterations_max"] for r in reps)
    assert ra.extra["root_iterations_mean"] == pytest.approx(
        np.mean([r.extra["root_iterations_mean"] for r in reps]))
    # one pass with the epoch seed is not the same as three
    c = _trainer(X, y, K, mu=0.2, kernel=kernel, sample_from=sample_from)
    c.run_epoch(order, LR, seed)
    assert not np.array_equal(a.u, c.u)
    # the reference with the concatenated draws (passes=3)
    d = _trainer(X, y, K, mu=0.2, kernel=kernel, sample_from=sample_from)
    draws = np.concatenate([draw_classes(s, order, y, K, sample_from)
                            for s in pass_seeds(seed, 3)])
    W_ref, u_ref, n_u = implicit_epoch_reference(
        X, y, d.weights(), d.u, order, LR, K, draws, passes=3, mu=0.2,
        beta=class_touch_weights(y, K))
    assert n_u == ra.extra["u_only_steps"]
    assert close(a.weights(), W_ref, 1e-9) and close(a.u, u_ref, 1e-9)


def test_fit_with_the_authors_conventions():
    X, y, K = _problem(K=4)
    N = X.shape[0]
    res = fit(X, y, "implicit", 0.1, epochs=2, sample_from="all", passes=3,
              order="file", u_init="zero", progress=False)
    assert list(res.history["steps"]) == [0, 3 * N, 6 * N]


@pytest.mark.parametrize("options, name", [
    (dict(sample_from="some"), "sample_from"),
    (dict(sample_from=None), "sample_from"),
    (dict(sample_from="All"), "sample_from"),
    (dict(passes=0), "passes"),
    (dict(passes=-1), "passes"),
    (dict(passes=1.5), "passes"),
    (dict(passes="3"), "passes"),
    (dict(passes=True), "passes"),
])
def test_invalid_options_raise(options, name):
    X, y, K = _problem()
    with pytest.raises(ValueError, match=name):
        ImplicitTrainer(X, y, K, **options)
    with pytest.raises(ValueError, match=name):
        fit(X, y, "implicit", 0.1, epochs=1, progress=False, **options)


def test_valid_options_are_accepted():
    X, y, K = _problem()
    tr = ImplicitTrainer(X, y, K, sample_from="all", passes=np.int64(2))
    assert tr.sample_from == "all" and tr.passes == 2
    with pytest.raises(ValueError, match="sample_from"):
        draw_classes(0, np.arange(3), y, K, "every")
