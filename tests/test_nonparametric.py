"""The doubly stochastic OVE kernel against its NumPy reference; ove_sgd's fixed point."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax

from scalable_softmax.repro import nonparametric as npm


def test_kernel_matches_reference():
    rng = np.random.default_rng(3)
    K, b, S, n_iter = 7, 5, 3, 6
    y = rng.integers(0, K, size=b * n_iter + 4)
    neg = npm._draw_others(rng, y, K, S)
    f0 = rng.normal(size=K)
    f = f0.copy()
    npm._ove_steps(f, y, neg, 2, n_iter - 1, b, S, 0.3, np.empty((b, S)))
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
