import numpy as np
import pytest

from scalable_softmax import objectives
from scalable_softmax.repro.instability import replay


def _problem(seed=0, N=40, D=6, K=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    y = rng.integers(0, K, N)
    return X, y, K


@pytest.mark.parametrize("method, grad", [("vanilla", objectives.f_ik_grad_scaled),
                                          ("raman-vanilla", objectives.raman_f_ik_grad_scaled)])
def test_first_step_magnitude_matches_the_reference_gradient(method, grad):
    X, y, K = _problem()
    h = replay(X, y, K, method, lr=0.01, epochs=1, seed=3)
    i, k = int(h.i[0]), int(h.k[0])
    W = np.zeros((K, X.shape[1]))
    dW, _ = grad(i, k, np.zeros(len(y)), X, y, W)
    ref = max(np.linalg.norm(dW[k]), np.linalg.norm(dW[y[i]]))
    assert h.log10_grad[0] == pytest.approx(np.log10(ref), abs=1e-12)


def test_umax_stays_below_its_bound_and_vanilla_overflows():
    X, y, K = _problem(1)
    X = X * 5.0
    v = replay(X, y, K, "vanilla", lr=50.0, epochs=5, seed=0)
    assert not v.finite.iloc[-1] and v.finite.iloc[:-1].all()
    assert v.log10_grad.iloc[-1] > 300          # exp overflowed (or the update did)
    for m in ("umax", "raman-umax"):
        h = replay(X, y, K, m, lr=50.0, epochs=5, seed=0)
        assert h.finite.all() and len(h) == 5 * len(y)
        assert (h.log10_grad <= h.log10_bound + 1e-12).all()
        assert h.reset.any()


def test_bad_arguments():
    X, y, K = _problem()
    with pytest.raises(ValueError, match="method"):
        replay(X, y, K, "sgd", lr=1.0)
    with pytest.raises(ValueError, match="lr"):
        replay(X, y, K, "umax", lr=-1.0)
