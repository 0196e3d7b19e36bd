"""Tests of the evaluator's float32 scoring path (``precision="float32"``).

The float32 path (float32 scores and exponentials, float64 running state) is compared
with the float64 path and with the NumPy reference :mod:`scalable_softmax.objectives`
on seeded sparse problems: K below, at, just above and far above the tile width,
narrow tiles, row subsets and subsamples, peaked and flat softmaxes (large and tiny
``W``), exact ties, empty rows, float32 ``W``, scores beyond float32's range (the
float64 fallback), determinism, the validation errors, and its vectorised helpers.
"""
from __future__ import annotations

import functools
import importlib
import math

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import scalable_softmax.kernels.evaluate as kev
import scalable_softmax.objectives as ob
from scalable_softmax.evaluate import evaluate as evaluate_any
from scalable_softmax.evaluate import per_row as _per_row_any

evm = importlib.import_module("scalable_softmax.evaluate")  # the module, not the function

# every call below is float32 unless it says precision="float64"
evaluate = functools.partial(evaluate_any, precision="float32")
_per_row = functools.partial(_per_row_any, precision="float32")

#: float32 carries 24 bits (6e-8); a score is a sum of ~nnz float32 products
LL_RTOL = 1e-6


def make_problem(seed=0, N=60, D=40, K=5, scale=1.0, density=0.3):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=density, random_state=rng, format="csr",
                  data_rvs=lambda n: rng.normal(size=n))
    y = rng.integers(0, K, N).astype(np.int64)
    W = scale * rng.normal(size=(K, D))
    return X, y, W


def near_tie_rows(X, W, rel=1e-5):
    """Rows whose two largest scores are within float32 rounding of each other."""
    S = np.asarray(ob.scores(X, W))
    if S.shape[1] < 2:
        return np.zeros(S.shape[0], bool)
    top = np.sort(S, axis=1)[:, -2:]
    return (top[:, 1] - top[:, 0]) <= rel * (1.0 + np.abs(S).max(axis=1))


def assert_close_to_float64(X, y, W, **kw):
    """Per-row agreement of the two precisions and with the reference; returns the
    largest relative difference of the per-row losses."""
    n32, e32, d32, s32 = _per_row(X, y, W, precision="float32", **kw)
    n64, e64, d64, s64 = _per_row(X, y, W, precision="float64", **kw)
    np.testing.assert_array_equal(s32, s64)
    S = np.asarray(ob.scores(X[s64], W))
    smax = np.abs(S).max(axis=1)
    # absolute error of a float32 score: ~1e-7 (|x| . |w|); allow 2e-6 (1 + max |s|)
    np.testing.assert_allclose(n32, n64, rtol=LL_RTOL, atol=0.0) if smax.max() < 1 else \
        np.testing.assert_array_less(np.abs(n32 - n64), 2e-6 * (1.0 + smax) + LL_RTOL * n64)
    ties = near_tie_rows(X[s64], W)
    np.testing.assert_array_equal(e32[~ties], e64[~ties])
    np.testing.assert_allclose(d32, d64, rtol=1e-6, atol=1e-7)
    return float(np.max(np.abs(n32 - n64) / np.maximum(n64, 1e-300)))


# ---------------------------------------------------------------------------
# agreement with float64 and the reference
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("K", [2, 3, 17, 255, 256, 257, 600])
@pytest.mark.parametrize("scale", [0.01, 1.0])
def test_float32_matches_float64_and_reference(K, scale):
    X, y, W = make_problem(seed=K, K=K, scale=scale)
    assert_close_to_float64(X, y, W)
    ev = evaluate(X, y, W, precision="float32")
    ll, er, df = ob.log_loss(X, y, W), ob.error_rate(X, y, W), ob.defective_metric(X, y, W)
    assert ev.log_loss == pytest.approx(ll, rel=LL_RTOL)
    assert ev.defective == pytest.approx(df, rel=1e-7)
    if not near_tie_rows(X, W).any():
        assert ev.error == er
    assert ev.n_rows == X.shape[0]


@pytest.mark.parametrize("tile", [1, 5, 16, 64])
def test_float32_narrow_tiles(tile):
    """K not a multiple of the tile, many tiles per row (the maximum moves)."""
    X, y, W = make_problem(seed=tile, N=40, K=70, scale=3.0)
    assert_close_to_float64(X, y, W, tile=tile)
    a = _per_row(X, y, W, tile=tile)
    b = _per_row(X, y, W)
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)


def test_increasing_scores_every_tile_a_new_maximum():
    D, K = 3, 40
    X = sp.csr_matrix(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.5], [0.2, 0.0, 1.0]]))
    y = np.array([39, 0, 17])
    for sign in (1.0, -1.0):
        W = sign * np.outer(np.arange(K), np.ones(D)) * 0.7
        for tile in (1, 3, 8, None):
            nll, err, dfc, _ = _per_row(X, y, W, tile=tile)
            np.testing.assert_allclose(nll, ob.nll_per_point(X, y, W), rtol=1e-6)
            np.testing.assert_array_equal(err, (np.argmax(ob.scores(X, W), 1) != y) * 1.0)


@pytest.mark.parametrize("scale", [30.0, 1e3, 1e5])
def test_peaked_softmax(scale):
    """Large W: scores of order 1e2..1e6, losses dominated by the margin."""
    X, y, W = make_problem(seed=int(scale) % 89, N=50, K=300, scale=scale, density=0.5)
    n32, e32, _, _ = _per_row(X, y, W)
    ref = ob.nll_per_point(X, y, W)
    smax = np.abs(np.asarray(ob.scores(X, W))).max(axis=1)
    assert np.all(np.isfinite(n32))
    np.testing.assert_array_less(np.abs(n32 - ref), 2e-6 * (1.0 + smax))
    ev = evaluate(X, y, W)
    assert ev.log_loss == pytest.approx(ob.log_loss(X, y, W), rel=LL_RTOL)
    assert ev.defective == pytest.approx(ob.defective_metric(X, y, W), rel=1e-6)


@pytest.mark.parametrize("scale", [0.0, 1e-8, 1e-4])
@pytest.mark.parametrize("K", [2, 300, 1000])
def test_flat_softmax(scale, K):
    """Tiny W: every class about equally likely; loss and defective metric ~ log K."""
    X, y, W = make_problem(seed=K, K=K, scale=scale)
    ev = evaluate(X, y, W)
    ev64 = evaluate(X, y, W, precision="float64")
    # the float32 exponentials (~1 ulp = 6e-8 relative each) bound the difference
    assert ev.log_loss == pytest.approx(ev64.log_loss, rel=1e-7)
    assert ev.defective == pytest.approx(ev64.defective, rel=1e-7)
    assert ev.log_loss == pytest.approx(math.log(K), rel=1e-3)
    if scale == 0.0:
        assert ev.log_loss == pytest.approx(math.log(K), rel=1e-14)
        assert ev.defective == pytest.approx(math.log(K), rel=1e-14)
        assert ev.error == pytest.approx(np.mean(y != 0))  # all tie -> class 0


# ---------------------------------------------------------------------------
# ties, empty rows, subsets
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("K,tile", [(2, None), (6, 2), (500, None), (500, 7)])
def test_ties_and_empty_rows(K, tile):
    rng = np.random.default_rng(K + 1)
    N, D = 30, 6
    X = sp.random(N, D, density=0.5, random_state=rng, format="lil")
    X[0, :] = 0.0
    X[5, :] = 0.0
    X = X.tocsr()
    W = rng.normal(size=(K, D))
    W[K - 1] = W[0]  # identical classes in different tiles: exact ties in float32 too
    if K > 2:
        W[1] = W[0]
    y = rng.integers(0, K, N)
    y[0] = 0
    y[1] = K - 1
    y[5] = K - 1
    nll, err, dfc, _ = _per_row(X, y, W, tile=tile)
    S = np.asarray(ob.scores(X, W))
    ties = near_tie_rows(X, W) & ~(np.sort(S, 1)[:, -1] == np.sort(S, 1)[:, -2])
    ref_err = (np.argmax(S, axis=1) != y).astype(float)
    np.testing.assert_array_equal(err[~ties], ref_err[~ties])
    assert err[0] == 0.0 and err[5] == 1.0  # empty rows: all scores 0 -> class 0
    assert nll[0] == pytest.approx(math.log(K), rel=1e-14)
    assert nll[5] == pytest.approx(math.log(K), rel=1e-14)
    np.testing.assert_allclose(nll, ob.nll_per_point(X, y, W), rtol=1e-6)


def test_all_rows_empty():
    X = sp.csr_matrix((4, 7))
    y = np.array([0, 1, 2, 0])
    ev = evaluate(X, y, np.ones((3, 7)))
    assert ev.log_loss == pytest.approx(math.log(3), rel=1e-14)
    assert ev.error == 0.5


def test_rows_and_subsample():
    X, y, W = make_problem(seed=21, N=80, K=270, scale=2.0)
    rows = np.array([7, 3, 3, 79, 0, 21])
    ev = evaluate(X, y, W, rows=rows)
    assert ev.n_rows == 6
    assert ev == evaluate(X[rows], y[rows], W)  # each row is computed on its own
    assert ev.log_loss == pytest.approx(ob.log_loss(X[rows], y[rows], W), rel=LL_RTOL)
    assert_close_to_float64(X, y, W, rows=rows)
    sub = evaluate(X, y, W, subsample=25, seed=4)
    r = np.sort(np.random.default_rng(4).choice(80, size=25, replace=False))
    assert sub == evaluate(X, y, W, rows=r)
    assert sub.n_rows == 25
    assert_close_to_float64(X, y, W, subsample=25, seed=4)
    assert evaluate(X, y, W, subsample=80, seed=1).log_loss == pytest.approx(
        evaluate(X, y, W).log_loss, rel=1e-14)


def test_dense_X_and_float32_W():
    X, y, W = make_problem(seed=5, K=40, scale=1.5)
    ev = evaluate(X, y, W)
    assert evaluate(X.toarray(), y, W) == ev
    # a float32 W is used as is; its float64 copy gives the same float32 tile
    W32 = W.astype(np.float32)
    assert evaluate(X, y, W32) == evaluate(X, y, W32.astype(np.float64))
    assert evaluate(X, y, W32).log_loss == pytest.approx(ev.log_loss, rel=1e-5)


def test_default_precision():
    """float32 is the default (see ``DEFAULT_PRECISION``); the two paths differ."""
    assert evm.DEFAULT_PRECISION == "float32"
    X, y, W = make_problem(seed=6, K=30)
    assert evaluate_any(X, y, W) == evaluate(X, y, W)
    assert evaluate_any(X, y, W) != evaluate_any(X, y, W, precision="float64")


def test_float32_overflow_falls_back_to_float64():
    """Entries beyond float32's range, or scores that overflow it: the whole
    evaluation is redone in float64 (same result as precision='float64')."""
    X, y, W = make_problem(seed=8, N=20, K=12, density=0.6)
    Wb = W * 1e39  # not representable in float32
    assert evaluate(X, y, Wb) == evaluate(X, y, Wb, precision="float64")
    Xb = X.copy()
    Xb.data *= 1e40
    assert evaluate(Xb, y, W) == evaluate(Xb, y, W, precision="float64")
    # representable entries whose products overflow (inf, and inf - inf = NaN)
    X1 = sp.csr_matrix(np.array([[10.0, 10.0], [10.0, -10.0], [0.0, 1.0]]))
    y1 = np.array([0, 1, 2])
    W1 = np.array([[1e38, 1e38], [1e38, -1e38], [0.0, 1.0]])
    ev = evaluate(X1, y1, W1)
    assert ev == evaluate(X1, y1, W1, precision="float64")
    assert np.isfinite([ev.log_loss, ev.defective]).all()


def test_deterministic_across_threads_and_blocks(monkeypatch):
    X, y, W = make_problem(seed=13, N=200, K=300, scale=3.0)
    base = _per_row(X, y, W)
    for kw in (dict(block_rows=1), dict(block_rows=7), dict(block_rows=1000),
               dict(threads=1), dict(threads=numba.config.NUMBA_NUM_THREADS)):
        other = _per_row(X, y, W, **kw)
        for a, b in zip(base, other):
            np.testing.assert_array_equal(a, b)
    # a pass this small runs the serial twins; the parallel kernels give the same bits
    monkeypatch.setattr(evm, "SERIAL_WORK", 0)
    for kw in (dict(block_rows=1), dict(block_rows=7),
               dict(threads=numba.config.NUMBA_NUM_THREADS)):
        other = _per_row(X, y, W, **kw)
        for a, b in zip(base, other):
            np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------

def test_validation_errors_float32():
    X, y, W = make_problem(seed=1, N=10, D=4, K=3)
    for prec in ("float32", "float64", None):
        with pytest.raises(ValueError, match="shape mismatch"):
            evaluate(X, y, np.zeros((3, 5)), precision=prec)
        with pytest.raises(ValueError, match="at least K = 2"):
            evaluate(X, np.zeros(10, dtype=int), np.zeros((1, 4)), precision=prec)
        with pytest.raises(ValueError, match=r"labels in y must lie in 0\.\.K-1"):
            evaluate(X, np.full(10, 3), W, precision=prec)
        Wb = W.astype(np.float32)
        Wb[1, 2] = np.nan
        with pytest.raises(ValueError, match="NaN or infinite"):
            evaluate(X, y, Wb, precision=prec)
        Xb = X.copy()
        Xb.data[0] = np.inf
        with pytest.raises(ValueError, match="NaN or infinite"):
            evaluate(Xb, y, W, precision=prec)
        with pytest.raises(ValueError, match="rows out of range"):
            evaluate(X, y, W, rows=np.array([0, 10]), precision=prec)
        with pytest.raises(ValueError, match="subsample"):
            evaluate(X, y, W, subsample=11, precision=prec)
    for bad in ("float16", "single", 32, np.float32):
        with pytest.raises(ValueError, match="precision must be"):
            evaluate(X, y, W, precision=bad)


# ---------------------------------------------------------------------------
# the vectorised helpers
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 7, 8, 16, 17, 256, 300])
def test_vexp32_sum(n):
    rng = np.random.default_rng(n)
    x = rng.uniform(-100.0, 0.0, n).astype(np.float32)
    x[0] = 0.0
    if n > 3:
        x[1] = -87.0
        x[2] = -87.5
        x[3] = -np.inf
    shift = np.float32(0.0)
    out = np.empty(n, np.float32)
    tf = np.empty(n, np.float32)
    s = kev.vexp32_sum(x, shift, out, tf, tf.view(np.int32), n)
    ref = np.exp(x.astype(np.float64))
    ref[x < -87.0] = 0.0
    np.testing.assert_allclose(out, ref, rtol=2.5e-7, atol=0)
    assert s == pytest.approx(out.astype(np.float64).sum(), rel=1e-15)
    # shifted arguments
    y = (x + np.float32(5.5)).astype(np.float32)
    kev.vexp32_sum(y, np.float32(5.5), out, tf, tf.view(np.int32), n)
    d = (y.astype(np.float64) - 5.5)
    ok = np.isfinite(d) & (d > -80)
    np.testing.assert_allclose(out[ok], np.exp(d[ok]), rtol=2.5e-7)


@pytest.mark.parametrize("n", [1, 2, 15, 16, 33, 256])
def test_max32(n):
    rng = np.random.default_rng(n)
    tf = np.empty(4, np.float32)
    for x in (rng.normal(size=n), -rng.random(n) - 1e-3, rng.random(n) * 1e30,
              np.zeros(n), -np.zeros(n)):
        x = x.astype(np.float32)
        if n > 2:
            x[1] = -np.inf
        m = kev.max32(x.view(np.int32), n, tf.view(np.int32), tf)
        assert m == x.max()


def test_sum_helpers():
    rng = np.random.default_rng(3)
    for n in (1, 9, 256, 257):
        e = rng.random(n).astype(np.float32)
        assert kev.sum32to64(e, n) == pytest.approx(e.astype(np.float64).sum(), rel=1e-15)
        pw = np.empty(n)
        ref = e.astype(np.float64) ** 2
        assert kev.widen_mul_lanesum(pw, e, n) == pytest.approx(ref.sum(), rel=1e-15)
        np.testing.assert_array_equal(pw, ref)
        ref = ref * e
        assert kev.mul_lanesum_wide(pw, e, n) == pytest.approx(ref.sum(), rel=1e-15)
        np.testing.assert_allclose(pw, ref, rtol=1e-16)


def test_float32_kernels_use_wide_fma():
    """The score loop is compiled to fused multiply-adds on vector registers (ymm or
    zmm) when the CPU has them (a fresh, uncached compilation: numba shows no
    assembly for cached code)."""
    import re

    from numba import types as nt
    g = numba.njit(**dict(kev.JIT32, cache=False))(kev.scores32.py_func)
    f32a, i32a = nt.float32[::1], nt.int32[::1]
    g.compile((i32a, i32a, f32a, nt.int64, nt.float32[:, ::1], f32a, nt.int64))
    asm = g.inspect_asm(g.signatures[0])
    if "vfmadd" not in asm:
        pytest.skip("no FMA on this CPU")
    assert re.search(r"vfmadd\w+ps\s[^\n]*[yz]mm", asm)
