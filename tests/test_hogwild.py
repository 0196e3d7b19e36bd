"""The lock-free (Hogwild) kernels of ``implicit`` and ``implicit-batch``
(:mod:`scalable_softmax.kernels.hogwild`, option ``threads > 1``).

* Where chunks cannot collide (each chunk's datapoints use their own columns, so the
  chunks write disjoint entries of ``W`` and disjoint ``u_i``; no ridge, so no shared
  scale is written) the parallel kernel is bit-identical to the serial kernel run chunk
  after chunk with the chunks' seeds.
* One chunk cut into many rounds (the ridge case's mechanism) is bit-identical to the
  serial kernel while no scale is folded, and equal to rounding when the rounds fold.
* Where chunks collide, ``fit(..., threads=2)`` converges like ``threads=1``.
* ``threads=1`` is the serial path; bad values of the option are refused.
"""
from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax.fit import fit
from scalable_softmax.kernels import hogwild
from scalable_softmax.kernels import implicit as ki
from scalable_softmax.kernels import implicit_batch as kib
from scalable_softmax.methods import implicit as im
from scalable_softmax.methods.implicit import ImplicitTrainer
from scalable_softmax.methods.implicit_batch import ImplicitBatchTrainer

pytestmark = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2,
                                reason="numba has fewer than 2 threads")


def _split_columns(N, D, K, chunks, seed, nnz=4):
    """``N`` rows, ``nnz`` non-zeros each; the rows of the ``c``-th contiguous chunk
    of ``range(N)`` use only the columns of the ``c``-th block of ``D / chunks``."""
    rng = np.random.default_rng(seed)
    width = D // chunks
    rows = []
    for c in range(chunks):
        lo, hi = (N * c) // chunks, (N * (c + 1)) // chunks
        for _ in range(lo, hi):
            cols = np.sort(rng.choice(width, nnz, replace=False)) + c * width
            rows.append((cols, rng.random(nnz) + 0.1))
    indptr = np.arange(N + 1, dtype=np.int64) * nnz
    X = sp.csr_matrix((np.concatenate([v for _, v in rows]),
                       np.concatenate([c for c, _ in rows]), indptr), shape=(N, D))
    return X, rng.integers(0, K, N)


def _with_threads(T, f, *args):
    prev = numba.get_num_threads()
    numba.set_num_threads(T)
    try:
        return f(*args)
    finally:
        numba.set_num_threads(prev)


def _implicit_trainer(X, y, K, mu=0.0, sample_from="others"):
    tr = ImplicitTrainer(X, y, K, mu=mu, sample_from=sample_from)
    tr.init_params()
    rng = np.random.default_rng(1)
    tr.W[:] = rng.normal(0.0, 0.3, tr.W.shape)
    tr.u[:] = rng.random(tr.N)
    return tr


def _implicit_args(tr):
    return (tr._indptr, tr._indices, tr._data, tr._y, tr._sqnorm)


# ------------------------------------------------------------------------------------
# class draws
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sample_from", ["others", "all"])
def test_implicit_draw_is_the_serial_stream(sample_from):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 7, 300)
    order = rng.permutation(300).astype(np.int64)
    out = np.empty(300, np.int64)
    hogwild.implicit_draw(12345, order, y, 7, sample_from == "all", out)
    np.testing.assert_array_equal(out, im.draw_classes(12345, order, y, 7, sample_from))


@pytest.mark.parametrize("n,m,K", [(5, 3, 40), (4, 6, 9)])
def test_batch_draw_is_the_serial_stream(n, m, K):
    N, D = 103, 30
    X, y = _split_columns(N, D, K, 1, 3)
    order = np.random.default_rng(4).permutation(N).astype(np.int64)
    nb = -(-N // n)
    drawn = np.full((nb, m), -1, np.int64)
    hogwild.batch_draw(777, order, y, n, m, K, drawn)
    tr = ImplicitBatchTrainer(X, y, K, batch_size=n, n_sampled=m)
    tr.init_params()
    tr.run_epoch(order, 0.5, 777)
    np.testing.assert_array_equal(drawn, tr.last_epoch_classes)


def test_chunk_seeds():
    s = hogwild.chunk_seeds(2 ** 32 + 5, 3)
    ref = np.random.SeedSequence(5).generate_state(3, np.uint32).astype(np.int64)
    np.testing.assert_array_equal(s, ref)
    assert s.dtype == np.int64


def test_round_steps():
    assert hogwild.round_steps(0.0, 2, 40.0) == 2 ** 62
    L = hogwild.round_steps(0.01, 2, 40.0)
    assert 2 * L * np.log1p(0.01) <= 40 * np.log(10) < 2 * (L + 1) * np.log1p(0.01)
    with pytest.raises(ValueError, match="threads=1"):
        hogwild.round_steps(1e60, 2, 40.0)


# ------------------------------------------------------------------------------------
# disjoint chunks: bit-identical to the serial kernel chunk by chunk
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sample_from", ["others", "all"])
def test_implicit_disjoint_chunks_equal_serial(sample_from):
    T, N, D, K = 2, 400, 60, 12
    X, y = _split_columns(N, D, K, T, 0)
    a = _implicit_trainer(X, y, K, sample_from=sample_from)
    b = _implicit_trainer(X, y, K, sample_from=sample_from)
    order = np.concatenate([np.random.default_rng(c).permutation(np.arange(
        (N * c) // T, (N * (c + 1)) // T)) for c in range(T)]).astype(np.int64)
    seeds = hogwild.chunk_seeds(99, T)
    cnt = np.zeros((T, 5), np.int64)
    _with_threads(T, hogwild.implicit_epoch, *_implicit_args(a), a.W, a.u, a._scale,
                  a._rho, order, 0.7, K, a.tol, seeds, False, sample_from == "all",
                  2 ** 62, hogwild.FOLD_BELOW_IMPLICIT, cnt)
    ser = []
    for c in range(T):
        lo, hi = (N * c) // T, (N * (c + 1)) // T
        ser.append(ki.epoch_fast(*_implicit_args(b), b.W, b.u, b._scale, b._rho,
                                  order[lo:hi], 0.7, K, b.tol, int(seeds[c]), False,
                                  sample_from == "all"))
    np.testing.assert_array_equal(a.W, b.W)
    np.testing.assert_array_equal(a.u, b.u)
    for c in range(T):
        steps, div, tot, emax, n_u = ser[c]
        assert list(cnt[c]) == [steps, div, tot, emax, n_u]
    assert cnt[:, 0].sum() == N
    if sample_from == "all":
        assert cnt[:, 4].sum() > 0


def test_batch_disjoint_chunks_equal_serial():
    T, N, D, K, n, m = 2, 300, 80, 15, 6, 4
    X, y = _split_columns(N, D, K, T, 1)
    order = np.concatenate([np.random.default_rng(c).permutation(np.arange(
        (N * c) // T, (N * (c + 1)) // T)) for c in range(T)]).astype(np.int64)
    tr = ImplicitBatchTrainer(X, y, K, batch_size=n, n_sampled=m)
    tr.init_params()
    rng = np.random.default_rng(2)
    W0 = rng.normal(0.0, 0.3, (K, D))
    u0 = rng.random(N)
    beta = kib.touch_beta_kernel(order, tr._y, K, n, m)
    args = (tr._indptr, tr._indices, tr._data, tr._y)
    nb = N // n
    seeds = hogwild.chunk_seeds(5, T)
    Wa, ua, ga = W0.copy(), u0.copy(), np.ones(K)
    cls_a = np.full((nb, m), -1, np.int64)
    out = np.zeros((T, 8), np.int64)
    _with_threads(T, hogwild.batch_epoch, *args, Wa, ga, ua, order, n, m, K, N, 0.8,
                  0.0, beta, seeds, tr.tol, tr.max_newton, False, cls_a, 2 ** 62,
                  hogwild.FOLD_BELOW_BATCH, out)
    Wb, ub, gb = W0.copy(), u0.copy(), np.ones(K)
    cls_b = np.full((nb, m), -1, np.int64)
    for c in range(T):
        b0, b1 = (nb * c) // T, (nb * (c + 1)) // T
        res = kib.epoch_kernel(*args, Wb, gb, ub, order[b0 * n:b1 * n], n, m, K, N, 0.8,
                               0.0, beta, int(seeds[c]), tr.tol, tr.max_newton, False,
                               cls_b[b0:b1], False)
        assert res[0] == -1 and out[c, 0] == -1
        assert list(out[c, 1:]) == list(res[1:])
    np.testing.assert_array_equal(cls_a, cls_b)
    np.testing.assert_array_equal(Wa, Wb)
    np.testing.assert_array_equal(ua, ub)
    np.testing.assert_array_equal(ga, gb)


# ------------------------------------------------------------------------------------
# rounds and folds (the ridge case), one chunk
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fold_below,exact", [(1e-100, True), (0.9, False)])
def test_implicit_rounds_with_ridge(fold_below, exact):
    N, D, K, mu, lr = 300, 40, 9, 0.5, 3.0
    X, y = _split_columns(N, D, K, 1, 5)
    a = _implicit_trainer(X, y, K, mu=mu)
    b = _implicit_trainer(X, y, K, mu=mu)
    order = np.random.default_rng(6).permutation(N).astype(np.int64)
    seeds = hogwild.chunk_seeds(8, 1)
    cnt = np.zeros((1, 5), np.int64)
    folds = hogwild.implicit_epoch(*_implicit_args(a), a.W, a.u, a._scale, a._rho, order,
                                   lr, K, a.tol, seeds, True, False, 7, fold_below, cnt)
    ser = ki.epoch_fast(*_implicit_args(b), b.W, b.u, b._scale, b._rho, order, lr, K,
                         b.tol, int(seeds[0]), True, False)
    assert list(cnt[0]) == list(ser)
    assert (folds == 0) == exact
    Wa, Wb = a.weights(), b.weights()
    assert np.all(b._scale == 1.0)
    if exact:
        np.testing.assert_array_equal(Wa, Wb)
        np.testing.assert_array_equal(a.u, b.u)
    else:
        np.testing.assert_allclose(Wa, Wb, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(a.u, b.u, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("fold_below,exact", [(1e-60, True), (0.99, False)])
def test_batch_rounds_with_ridge(fold_below, exact):
    N, D, K, n, m, mu, lr = 120, 30, 10, 4, 3, 0.5, 2.0
    X, y = _split_columns(N, D, K, 1, 7)
    tr = ImplicitBatchTrainer(X, y, K, batch_size=n, n_sampled=m, mu=mu)
    order = np.random.default_rng(8).permutation(N).astype(np.int64)
    beta = kib.touch_beta_kernel(order, tr._y, K, n, m)
    args = (tr._indptr, tr._indices, tr._data, tr._y)
    nb = N // n
    seeds = hogwild.chunk_seeds(9, 1)
    W0 = np.random.default_rng(3).normal(0.0, 0.3, (K, D))
    Wa, ua, ga = W0.copy(), np.zeros(N), np.ones(K)
    ca = np.full((nb, m), -1, np.int64)
    out = np.zeros((1, 8), np.int64)
    folds = hogwild.batch_epoch(*args, Wa, ga, ua, order, n, m, K, N, lr, mu, beta,
                                seeds, tr.tol, tr.max_newton, False, ca, 3, fold_below,
                                out)
    Wb, ub, gb = W0.copy(), np.zeros(N), np.ones(K)
    cb = np.full((nb, m), -1, np.int64)
    res = kib.epoch_kernel(*args, Wb, gb, ub, order, n, m, K, N, lr, mu, beta,
                           int(seeds[0]), tr.tol, tr.max_newton, False, cb, False)
    assert (folds == 0) == exact
    np.testing.assert_array_equal(ca, cb)
    assert out[0, 0] == res[0] == -1 and out[0, 1] == res[1] == nb
    Wa *= ga[:, None]
    Wb *= gb[:, None]
    if exact:
        np.testing.assert_array_equal(Wa, Wb)
        np.testing.assert_array_equal(ua, ub)
    else:
        np.testing.assert_allclose(Wa, Wb, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(ua, ub, rtol=1e-8, atol=1e-12)


# ------------------------------------------------------------------------------------
# colliding chunks: converges like one thread
# ------------------------------------------------------------------------------------
def _problem(seed, N=2000, D=40, K=20):
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 1.0, (K, D))
    y = rng.integers(0, K, N)
    X = centers[y] + rng.normal(0.0, 1.5, (N, D))
    X[rng.random((N, D)) < 0.5] = 0.0
    return sp.csr_matrix(X), y, K


#: fit seeds of the convergence test
SEEDS = 5


@pytest.mark.parametrize("method,kw", [
    ("implicit", {"lr": 0.3, "mu": 0.0}),
    ("implicit", {"lr": 0.3, "mu": 1e-2}),
    ("implicit-batch", {"lr": 1.0, "mu": 1e-2, "batch_size": 5, "n_sampled": 3}),
])
def test_converges_like_one_thread(method, kw):
    """Training log-loss after 5 epochs on one problem (N 2,000, D 40, K 20, every
    step's rows shared by both threads' chunks), ``SEEDS`` fit seeds per thread count:
    the means with 2 threads and 1 thread differ by at most three standard errors of
    the difference (measured: 1.132 +- 0.035 vs 1.136 +- 0.045 for implicit without
    ridge, 0.855 +- 0.017 vs 0.854 +- 0.024 for implicit-batch; mean +- sd over 5
    seeds), and both learned (below half of ``log K``, the loss at ``W = 0``)."""
    kw = dict(kw)
    lr = kw.pop("lr")
    X, y, K = _problem(0)
    finals = {1: [], 2: []}
    for seed in range(SEEDS):
        for T in (1, 2):
            res = fit(X, y, method, lr, epochs=5, K=K, seed=seed, threads=T,
                      progress=False, **kw)
            assert not res.history["diverged"].any()
            finals[T].append(float(res.history["train_log_loss"].iloc[-1]))
    one, two = np.array(finals[1]), np.array(finals[2])
    se = np.sqrt((one.var(ddof=1) + two.var(ddof=1)) / SEEDS)
    assert np.all(np.isfinite(two))
    assert abs(two.mean() - one.mean()) <= 3.0 * se
    assert two.mean() < 0.5 * np.log(K) and one.mean() < 0.5 * np.log(K)


# ------------------------------------------------------------------------------------
# the option
# ------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["implicit", "implicit-batch"])
def test_threads_one_is_the_serial_path(method):
    X, y, K = _problem(0)
    a = fit(X, y, method, 1.0, epochs=2, K=K, seed=3, progress=False)
    b = fit(X, y, method, 1.0, epochs=2, K=K, seed=3, threads=1, progress=False)
    np.testing.assert_array_equal(a.W, b.W)
    np.testing.assert_array_equal(a.u, b.u)


@pytest.mark.parametrize("cls", [ImplicitTrainer, ImplicitBatchTrainer])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", numba.config.NUMBA_NUM_THREADS + 1])
def test_threads_option_refused(cls, bad):
    X, y, K = _problem(0)
    with pytest.raises(ValueError, match="threads"):
        cls(X, y, K, threads=bad)


@pytest.mark.parametrize("method", ["implicit", "implicit-batch"])
def test_strong_ridge_runs_in_many_rounds(method):
    """A ridge strong enough that an epoch needs many rounds (and folds between them)
    on 2 threads: the fit stays finite and ends near the 1-thread fit's loss."""
    X, y, K = _problem(1, N=400)
    lr, mu = 5.0, 200.0
    tr = (ImplicitTrainer if method == "implicit" else ImplicitBatchTrainer)(
        X, y, K, mu=mu, threads=2)
    if method == "implicit":   # several rounds per epoch
        assert hogwild.round_steps(lr * tr._rho.max(), 2, 40.0) < 100
    losses = {}
    for T in (1, 2):
        res = fit(X, y, method, lr, epochs=3, K=K, mu=mu, seed=0, threads=T,
                  progress=False)
        assert not res.history["diverged"].any()
        assert np.all(np.isfinite(res.W)) and np.all(np.isfinite(res.u))
        losses[T] = float(res.history["train_log_loss"].iloc[-1])
    assert abs(losses[2] - losses[1]) <= 0.05 * losses[1]
