"""The original experiment code's protocol options of the sampled baselines
(scalable_softmax.methods.sampled): ``remove_accidental_hits`` (keep a shared sampled
class equal to the datapoint's label) and ``reduction="sum"`` (no 1/b in the step).

Kernels against the NumPy reference step on replayed draws that contain accidental
hits, the options' effects, the sum/mean equivalence, the fit() API and validation.
"""
from __future__ import annotations

import numba
import numpy as np
import pytest

from scalable_softmax.methods.sampled import (
    KIND_IS,
    KIND_NCE,
    KIND_OVE,
    ISTrainer,
    NCETrainer,
    OVETrainer,
    epoch_draws,
    reference_step,
)
from test_sampled import _problem as _base_problem  # tests/ is on sys.path (rootdir)

TRAINERS = {"ove": OVETrainer, "nce": NCETrainer, "is": ISTrainer}
K, M = 4, 3          # small K: accidental hits in most batches


def _problem(N=40, D=9, density=0.5, seed=0):
    return _base_problem(N=N, D=D, K=K, density=density, seed=seed)


def _trainer(name, X, y, mu=0.0, n=10, **opts):
    tr = TRAINERS[name](X, y, K, mu=mu, batch_size=n, n_sampled=M, **opts)
    tr.init_params()
    return tr


def _set_w(tr, W0):
    tr.W[:] = W0
    tr.scale[:] = 1.0


def _hits(cls, ncls):
    """Number of rows whose sampled classes contain the row's label."""
    return sum(int(np.any(cls[t, 1:ncls[t]] == cls[t, 0])) for t in range(len(ncls)))


VARIANTS = [
    pytest.param("ove", {}, id="ove"),
    pytest.param("nce", {}, id="nce"),
    pytest.param("is", {}, id="is"),
    pytest.param("is", {"weighted": False}, id="is-unweighted"),
]
KERNELS = [pytest.param(dict(fused=False), id="plain"),
           pytest.param(dict(fused=True), id="fused"),
           pytest.param(dict(fused=True, threads=numba.get_num_threads()), id="parallel")]


def test_defaults_are_bit_identical_to_explicit_none_mean():
    X, y, rng = _problem()
    W0 = rng.normal(size=(K, X.shape[1]))
    order = rng.permutation(X.shape[0])
    for name in TRAINERS:
        for shared in (False, True):
            a = _trainer(name, X, y, mu=1.5, shared_negatives=shared)
            b = _trainer(name, X, y, mu=1.5, shared_negatives=shared,
                         remove_accidental_hits=None, reduction="mean")
            assert a.drop_hits == b.drop_hits == (shared and name != "nce")
            for tr in (a, b):
                _set_w(tr, W0)
                tr.run_epoch(order, 0.3, 11)
            assert np.array_equal(a.weights(), b.weights()), (name, shared)
            assert not np.allclose(a.weights(), W0)


@pytest.mark.parametrize("name,opts", VARIANTS)
@pytest.mark.parametrize("mu", [0.0, 2.5])
@pytest.mark.parametrize("kernel", KERNELS)
def test_hits_kept_sum_epoch_matches_reference(name, opts, mu, kernel):
    X, y, rng = _problem()
    n, lr, seed = 10, 0.05, 7
    tr = _trainer(name, X, y, mu=mu, n=n, shared_negatives=True,
                  remove_accidental_hits=False, reduction="sum", **opts, **kernel)
    assert tr.drop_hits is False
    W0 = rng.normal(size=(K, X.shape[1]))
    _set_w(tr, W0)
    order = rng.permutation(X.shape[0])[:35]      # last batch of 5: b varies
    rep = tr.run_epoch(order, lr, seed)
    assert rep.steps == 4 and rep.diverged_at == -1
    cls, ncls = epoch_draws(y, order, K, n, M, True, False, seed)
    assert np.all(ncls == M + 1)
    assert _hits(cls, ncls) >= 5                  # the replay does contain hits
    W = W0.copy()
    for b0 in range(0, len(order), n):
        sl = slice(b0, b0 + n)
        W = reference_step(X, y, W, order[sl], cls[sl], ncls[sl], lr, tr.kind, tr.weight,
                           tr.c_nce, weighted=opts.get("weighted", True), mu=mu,
                           beta=tr.beta, reduction="sum")
    assert not np.allclose(W, W0)
    np.testing.assert_allclose(tr.weights(), W, rtol=1e-12, atol=1e-13)
    # the mean reference differs (the reduction is really applied)
    W_mean = reference_step(X, y, W0, order[:n], cls[:n], ncls[:n], lr, tr.kind, tr.weight,
                            tr.c_nce, weighted=opts.get("weighted", True), mu=mu,
                            beta=tr.beta)
    W_sum = reference_step(X, y, W0, order[:n], cls[:n], ncls[:n], lr, tr.kind, tr.weight,
                           tr.c_nce, weighted=opts.get("weighted", True), mu=mu,
                           beta=tr.beta, reduction="sum")
    np.testing.assert_allclose(W0 - W_sum, n * (W0 - W_mean), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("name,opts", VARIANTS)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_plain_fused_parallel_bit_identical_with_hits_kept(name, opts, reduction):
    X, y, rng = _problem(N=57)
    W0 = rng.normal(size=(K, X.shape[1]))
    order = rng.permutation(X.shape[0])
    out = []
    for kernel in (dict(fused=False), dict(fused=True),
                   dict(fused=True, threads=numba.get_num_threads())):
        tr = _trainer(name, X, y, mu=1.0, shared_negatives=True, remove_accidental_hits=False,
                      reduction=reduction, **opts, **kernel)
        _set_w(tr, W0)
        for e in range(2):
            tr.run_epoch(order, 0.05, 3 + e)
        out.append(tr.weights().copy())
    assert np.array_equal(out[0], out[1]) and np.array_equal(out[0], out[2])


def _epoch(name, rah, mu=0.0, reduction="mean", lr=0.3, seed=5, **opts):
    X, y, rng = _problem()
    W0 = rng.normal(size=(K, X.shape[1]))
    tr = _trainer(name, X, y, mu=mu, shared_negatives=True, remove_accidental_hits=rah,
                  reduction=reduction, **opts)
    _set_w(tr, W0)
    tr.run_epoch(rng.permutation(X.shape[0]), lr, seed)
    return tr.weights().copy(), W0


@pytest.mark.parametrize("weighted", [True, False])
def test_is_hits_kept_differs_from_hits_dropped(weighted):
    kept, W0 = _epoch("is", False, weighted=weighted)
    dropped, _ = _epoch("is", True, weighted=weighted)
    default, _ = _epoch("is", None, weighted=weighted)
    assert np.array_equal(default, dropped)       # IS default: hits dropped
    assert not np.allclose(kept, W0)
    assert np.max(np.abs(kept - dropped)) > 1e-3


def test_nce_hits_dropped_differs_from_default_kept():
    kept, _ = _epoch("nce", False)
    default, _ = _epoch("nce", None)
    dropped, _ = _epoch("nce", True)
    assert np.array_equal(default, kept)          # NCE default: hits kept
    assert np.max(np.abs(kept - dropped)) > 1e-3


@pytest.mark.parametrize("mu", [0.0, 2.5])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_ove_hits_kept_equals_hits_dropped_to_rounding(mu, reduction):
    lr = 0.3 if reduction == "mean" else 0.03
    kept, W0 = _epoch("ove", False, mu=mu, reduction=reduction, lr=lr)
    dropped, _ = _epoch("ove", True, mu=mu, reduction=reduction, lr=lr)
    default, _ = _epoch("ove", None, mu=mu, reduction=reduction, lr=lr)
    assert np.array_equal(default, dropped)
    assert not np.allclose(kept, W0)
    np.testing.assert_allclose(kept, dropped, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name,opts", VARIANTS)
@pytest.mark.parametrize("mu", [0.0, 2.5])
@pytest.mark.parametrize("rah", [None, False])
def test_sum_equals_mean_with_lr_times_b(name, opts, mu, rah):
    n, lr = 8, 0.01
    X, y, rng = _problem(N=40)                    # 40 = 5 batches of 8
    W0 = rng.normal(size=(K, X.shape[1]))
    order = rng.permutation(X.shape[0])
    res = []
    for red, step in (("sum", lr), ("mean", lr * n)):
        tr = _trainer(name, X, y, mu=mu, n=n, shared_negatives=True,
                      remove_accidental_hits=rah, reduction=red, **opts)
        _set_w(tr, W0)
        rep = tr.run_epoch(order, step, 13)
        assert rep.steps == 5 and rep.diverged_at == -1
        res.append(tr.weights().copy())
    assert not np.allclose(res[0], W0)
    np.testing.assert_allclose(res[0], res[1], rtol=1e-11, atol=1e-12)
    # and not what "mean" gives with the same lr
    tr = _trainer(name, X, y, mu=mu, n=n, shared_negatives=True, remove_accidental_hits=rah,
                  **opts)
    _set_w(tr, W0)
    tr.run_epoch(order, lr, 13)
    assert not np.allclose(tr.weights(), res[0])


def test_sum_per_datapoint_negatives_matches_reference():
    """``reduction`` works without shared negatives too."""
    X, y, rng = _problem()
    n, lr, seed, mu = 10, 0.05, 2, 1.5
    tr = _trainer("ove", X, y, mu=mu, n=n, reduction="sum")
    W0 = rng.normal(size=(K, X.shape[1]))
    _set_w(tr, W0)
    rows = rng.permutation(X.shape[0])[:n]
    tr.run_epoch(rows, lr, seed)
    cls, ncls = epoch_draws(y, rows, K, n, M, False, False, seed)
    W = reference_step(X, y, W0, rows, cls, ncls, lr, KIND_OVE, tr.weight, tr.c_nce, mu=mu,
                       beta=tr.beta, reduction="sum")
    np.testing.assert_allclose(tr.weights(), W, rtol=1e-12, atol=1e-13)


def test_fit_api_accepts_the_protocol_options():
    from scalable_softmax.fit import fit
    X, y, _ = _problem(N=50)
    res = fit(X, y, "is", 1.0, epochs=2, batch_size=10, n_sampled=3, shared_negatives=True,
              remove_accidental_hits=False, reduction="sum", weighted=False, order="file",
              lr_decay=1.0, progress=False)
    assert res.diverged_at is None
    assert int(res.history["steps"].iloc[-1]) == 2 * 5
    assert np.all(np.isfinite(res.W)) and np.any(res.W != 0)
    assert res.W.shape == (K, X.shape[1])


@pytest.mark.parametrize("name", ["ove", "nce", "is"])
def test_invalid_values_raise_naming_the_option(name):
    X, y, _ = _problem()
    cls = TRAINERS[name]
    for bad in ("yes", 1, 0, "False"):
        with pytest.raises(ValueError, match="remove_accidental_hits"):
            cls(X, y, K, batch_size=10, n_sampled=M, shared_negatives=True,
                remove_accidental_hits=bad)
    for bad in ("avg", "SUM", None, 1, True):
        with pytest.raises(ValueError, match="reduction"):
            cls(X, y, K, batch_size=10, n_sampled=M, reduction=bad)
    # meaningless without shared negatives (the label is never drawn)
    for val in (True, False):
        with pytest.raises(ValueError, match="remove_accidental_hits.*shared_negatives"):
            cls(X, y, K, batch_size=10, n_sampled=M, remove_accidental_hits=val)
    cls(X, y, K, batch_size=10, n_sampled=M, remove_accidental_hits=None)   # fine


@pytest.mark.parametrize("name,rah,expect", [
    ("ove", True, True), ("ove", False, False), ("nce", True, True), ("nce", False, False),
    ("is", True, True), ("is", False, False)])
def test_drop_hits_attribute(name, rah, expect):
    X, y, _ = _problem()
    tr = TRAINERS[name](X, y, K, batch_size=10, n_sampled=M, shared_negatives=True,
                        remove_accidental_hits=rah)
    assert tr.drop_hits is expect
    assert tr.kind == {"ove": KIND_OVE, "nce": KIND_NCE, "is": KIND_IS}[name]
