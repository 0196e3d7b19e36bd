"""Tests of the exact evaluator (scalable_softmax.evaluate) against the NumPy reference.

Every metric is compared with :mod:`scalable_softmax.objectives` (``log_loss``,
``error_rate``, ``defective_metric``, ``nll_per_point``) on small seeded problems:
sparse and dense data, K from 2 to 500, tiles much narrower than K (so that the
online rescaling across tiles is exercised), exact ties, extreme scores that
overflow a naive ``exp``, tiny losses, subsets of rows; plus the bounds of the
defective metric, determinism, and every validation error.
"""
from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import scalable_softmax.objectives as ob
from scalable_softmax.evaluate import Evaluation, evaluate, evaluate_sets, per_row, tile_width
from scalable_softmax.kernels.common import lanesum, vexp
from scalable_softmax.kernels.evaluate import lanemax, mul_lanesum

RTOL = 1e-12


def make_problem(seed=0, N=40, D=12, K=5, scale=1.0, density=0.4, dense=False):
    """Random sparse (CSR) or dense problem; some rows may be empty."""
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=density, random_state=rng, format="csr",
                  data_rvs=lambda n: rng.normal(size=n))
    if dense:
        X = X.toarray()
    y = rng.integers(0, K, N).astype(np.int64)
    W = scale * rng.normal(size=(K, D))
    return X, y, W


def reference(X, y, W):
    return ob.log_loss(X, y, W), ob.error_rate(X, y, W), ob.defective_metric(X, y, W)


def assert_matches_reference(ev, X, y, W, rtol=RTOL):
    ll, er, df = reference(X, y, W)
    assert ev.n_rows == X.shape[0]
    assert ev.log_loss == pytest.approx(ll, rel=rtol, abs=1e-300)
    assert ev.error == er  # a count over n rows: must agree exactly
    assert ev.defective == pytest.approx(df, rel=rtol)


# ---------------------------------------------------------------------------
# agreement with the NumPy reference
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("K", [2, 3, 17, 129, 500])
@pytest.mark.parametrize("dense", [False, True])
def test_matches_reference(K, dense):
    X, y, W = make_problem(seed=K, K=K, scale=2.0, dense=dense)
    assert_matches_reference(evaluate(X, y, W, precision="float64"), X, y, W)


@pytest.mark.parametrize("tile", [1, 3, 8, 64])
def test_per_row_matches_reference_with_narrow_tiles(tile):
    """Many tiles per row: the running maximum moves and the sums are rescaled."""
    X, y, W = make_problem(seed=tile, N=30, K=70, scale=3.0)
    nll, err, dfc, sel = per_row(X, y, W, tile=tile, precision="float64")
    np.testing.assert_array_equal(sel, np.arange(30))
    np.testing.assert_allclose(nll, ob.nll_per_point(X, y, W), rtol=RTOL, atol=0)
    S = ob.scores(X, W)
    np.testing.assert_array_equal(err, (np.argmax(S, axis=1) != y).astype(float))
    P = ob.probabilities(X, W)
    dref = -P[np.arange(30), y] + np.log(np.exp(P).sum(axis=1))
    np.testing.assert_allclose(dfc, dref, rtol=RTOL, atol=0)


def test_increasing_scores_move_the_maximum_every_tile():
    """Scores that grow along k: every tile brings a new maximum (worst case of the
    rescaling); decreasing scores: the maximum is in the first tile."""
    D, K = 3, 40
    X = sp.csr_matrix(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.5], [0.2, 0.0, 1.0]]))
    W = np.zeros((K, D))
    W[:, 0] = np.linspace(0.0, 30.0, K)
    W[:, 1] = np.linspace(30.0, 0.0, K)
    W[:, 2] = np.sin(np.arange(K))
    y = np.array([K - 1, 0, 7])
    for tile in (1, 4, 40):
        nll, err, dfc, _ = per_row(X, y, W, tile=tile, precision="float64")
        np.testing.assert_allclose(nll, ob.nll_per_point(X, y, W), rtol=RTOL)
    assert_matches_reference(evaluate(X, y, W, precision="float64"), X, y, W)


def test_sparse_formats_and_layouts_agree():
    X, y, W = make_problem(seed=3, K=9)
    ev = evaluate(X, y, W)
    for Xa in (X.tocsc(), X.tocoo(), sp.csr_array(X), X.toarray(), X.toarray().tolist()):
        assert evaluate(Xa, y, W) == ev
    assert evaluate(X, y, np.asfortranarray(W)) == ev
    assert evaluate(X, y.astype(np.int32), W) == ev
    X64 = X.copy()
    X64.indices = X64.indices.astype(np.int64)
    X64.indptr = X64.indptr.astype(np.int64)
    assert evaluate(X64, y, W) == ev


def test_integer_weights_and_empty_rows():
    X = sp.csr_matrix(np.array([[0.0, 0.0], [1.0, 2.0], [0.0, -1.0]]))
    y = np.array([0, 1, 2])
    W = np.array([[1, 0], [0, 1], [2, -2]])
    ev = evaluate(X, y, W, precision="float64")
    assert_matches_reference(ev, X, y, W)


# ---------------------------------------------------------------------------
# ties, extreme and tiny values
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("K,tile", [(2, None), (6, 2), (500, None), (500, 7)])
def test_ties_go_to_lowest_index(K, tile):
    rng = np.random.default_rng(K)
    N, D = 25, 6
    X = sp.random(N, D, density=0.5, random_state=rng, format="lil")
    X[0, :] = 0.0  # an empty row: all K scores tie at 0 -> class 0
    X = X.tocsr()
    assert X[0].nnz == 0
    W = rng.normal(size=(K, D))
    W[K - 1] = W[0]  # identical classes far apart (different tiles)
    if K > 2:
        W[1] = W[0]
    y = rng.integers(0, K, N)
    y[0] = 0
    y[1] = K - 1
    y[2] = 1 if K > 2 else 0
    nll, err, dfc, _ = per_row(X, y, W, tile=tile, precision="float64")
    S = ob.scores(X, W)
    np.testing.assert_array_equal(err, (np.argmax(S, axis=1) != y).astype(float))
    assert err[0] == 0.0
    assert_matches_reference(evaluate(X, y, W, precision="float64"), X, y, W)


@pytest.mark.parametrize("scale", [1e3, 1e4, 1e5])
@pytest.mark.parametrize("K", [2, 50, 300])
def test_extreme_scores_no_overflow(scale, K):
    """Scores of order 1e3..1e5 overflow exp() in naive code; the evaluator must
    stay finite and agree with the (stable) reference."""
    X, y, W = make_problem(seed=int(scale) % 97 + K, N=30, K=K, scale=scale, density=0.5)
    with np.errstate(over="raise"):
        naive_overflows = True
        try:
            np.exp(ob.scores(X, W)).sum()
            naive_overflows = False
        except FloatingPointError:
            pass
    assert naive_overflows
    ev = evaluate(X, y, W, precision="float64")
    assert np.isfinite([ev.log_loss, ev.error, ev.defective]).all()
    assert_matches_reference(ev, X, y, W)
    nll, _, _, _ = per_row(X, y, W, tile=16, precision="float64")
    # atol: exp(x) for x < -708 is 0 instead of a denormal (< 3e-308)
    np.testing.assert_allclose(nll, ob.nll_per_point(X, y, W), rtol=RTOL, atol=1e-300)


def test_tiny_losses_keep_relative_accuracy():
    """A confidently right prediction has loss ~exp(-margin); log1p keeps its digits."""
    D, K = 4, 10
    X = sp.csr_matrix(np.eye(D))
    y = np.array([0, 1, 2, 3])
    W = np.zeros((K, D))
    for i, margin in enumerate([20.0, 28.0, 35.0, 700.0]):
        W[y[i], i] = margin
    nll, err, _, _ = per_row(X, y, W, tile=3, precision="float64")
    ref = ob.nll_per_point(X, y, W)
    assert np.all(ref[:3] > 0) and np.all(ref[:3] < 1e-7)
    np.testing.assert_allclose(nll, ref, rtol=RTOL, atol=0)
    assert nll[3] == pytest.approx((K - 1) * math.exp(-700.0), rel=1e-12)
    assert np.all(err == 0)


# ---------------------------------------------------------------------------
# the defective metric
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("K", [2, 3, 20, 300])
def test_defective_metric_bounds(K):
    lo, hi = math.log(K - 1 + math.e) - 1.0, math.log(K - 1 + math.e)
    for seed, scale in enumerate([0.1, 1.0, 10.0, 1e3]):
        X, y, W = make_problem(seed=seed, N=40, K=K, scale=scale)
        _, _, dfc, _ = per_row(X, y, W, tile=32)
        assert np.all(dfc >= lo - 1e-12) and np.all(dfc <= hi + 1e-12)
    # one-hot on the label -> lower end; one-hot on another class -> upper end
    X = sp.csr_matrix(np.eye(2))
    W = np.zeros((K, 2))
    W[0, 0] = 1e4
    W[1, 1] = 1e4
    ev = evaluate(X, np.array([0, 0]), W)
    _, _, dfc, _ = per_row(X, np.array([0, 0]), W)
    assert dfc[0] == pytest.approx(lo, rel=1e-14)
    assert dfc[1] == pytest.approx(hi, rel=1e-14)
    assert ev.defective == pytest.approx((lo + hi) / 2, rel=1e-14)


@pytest.mark.parametrize("K", [2, 7, 1000])
def test_defective_metric_is_log_K_at_zero(K):
    X, y, _ = make_problem(seed=K, K=K)
    ev = evaluate(X, y, np.zeros((K, X.shape[1])))
    assert ev.defective == pytest.approx(math.log(K), rel=1e-14)
    assert ev.log_loss == pytest.approx(math.log(K), rel=1e-14)
    assert ev.error == pytest.approx(np.mean(y != 0))  # ties -> class 0


# ---------------------------------------------------------------------------
# rows, subsample, determinism
# ---------------------------------------------------------------------------

def test_rows_option():
    X, y, W = make_problem(seed=11, N=50, K=13)
    rows = np.array([7, 3, 3, 49, 0, 21])
    ev = evaluate(X, y, W, rows=rows, precision="float64")
    assert ev.n_rows == 6
    assert_matches_reference(ev, X[rows], y[rows], W)
    assert evaluate(X, y, W, rows=list(rows), precision="float64") == ev


def test_subsample_option():
    X, y, W = make_problem(seed=12, N=60, K=8)
    ev = evaluate(X, y, W, subsample=20, seed=5, precision="float64")
    rows = np.sort(np.random.default_rng(5).choice(60, size=20, replace=False))
    assert ev == evaluate(X, y, W, rows=rows, precision="float64")
    assert ev.n_rows == 20
    assert_matches_reference(ev, X[rows], y[rows], W)
    assert evaluate(X, y, W, subsample=20, seed=5, precision="float64") == ev
    assert evaluate(X, y, W, subsample=20, seed=6, precision="float64") != ev
    full = evaluate(X, y, W, precision="float64")
    sub = evaluate(X, y, W, subsample=60, seed=3, precision="float64")
    assert sub.n_rows == 60
    assert sub.log_loss == pytest.approx(full.log_loss, rel=1e-15)
    assert sub.error == full.error


def test_deterministic_across_threads_and_blocks():
    X, y, W = make_problem(seed=13, N=200, K=150, scale=3.0)
    base = per_row(X, y, W)
    for kw in (dict(block_rows=1), dict(block_rows=7), dict(block_rows=1000),
               dict(threads=1), dict(threads=numba.config.NUMBA_NUM_THREADS)):
        other = per_row(X, y, W, **kw)
        for a, b in zip(base, other):
            np.testing.assert_array_equal(a, b)
    assert evaluate(X, y, W) == evaluate(X, y, W)
    n_before = numba.get_num_threads()
    evaluate(X, y, W, threads=1)
    assert numba.get_num_threads() == n_before


def test_tile_width():
    assert tile_width(18_000, 10_000) == 256  # D x tile buffer of 20 MB
    assert tile_width(10, 784) == 10  # never wider than K
    assert tile_width(18_000, 1_000_000) == 16  # large D: narrower tiles
    assert tile_width(18_000, 61_188) == 51  # 24 MiB / (8 D)
    assert tile_width(50, 10, tile=7) == 7


def test_evaluation_is_frozen():
    ev = Evaluation(log_loss=1.0, error=0.5, defective=0.7, n_rows=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.log_loss = 2.0


# ---------------------------------------------------------------------------
# helper kernels against NumPy
# ---------------------------------------------------------------------------

def test_vexp_matches_numpy_exp():
    x = np.concatenate([-np.linspace(0.0, 750.0, 200_001), -np.logspace(-300, 2.8, 5000),
                        [0.0, -0.0, -1e-320, -708.0, -708.0001, -745.2, -1e6]])
    n = x.size
    out = np.empty(n)
    tmp = np.empty(n)
    vexp(x, 0.0, out, tmp, tmp.view(np.int64), n)
    ref = np.exp(x)
    ok = x >= -708.0
    np.testing.assert_allclose(out[ok], ref[ok], rtol=4e-16, atol=0)
    assert np.all(out[~ok] == 0.0)
    assert np.all(out[x == 0.0] == 1.0)
    # with a shift: exp(x - shift), x - shift computed first (as in the kernel)
    shift = 1234.5
    vexp(x + shift, shift, out, tmp, tmp.view(np.int64), n)
    d = (x + shift) - shift
    ok = d >= -708.0
    np.testing.assert_allclose(out[ok], np.exp(d[ok]), rtol=4e-16, atol=0)
    assert np.all(out[~ok] == 0.0)
    # only the first n entries are written
    out2 = np.full(5, 7.0)
    vexp(x[:5], 0.0, out2, np.empty(5), np.empty(5).view(np.int64), 3)
    assert np.all(out2[3:] == 7.0)


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 17, 130])
def test_lanemax(n):
    rng = np.random.default_rng(n)
    for _ in range(20):
        x = rng.normal(size=n + 3) * 10.0 ** rng.integers(-3, 4)
        assert lanemax(x, n) == np.max(x[:n])
    x = np.full(n, -5.0)
    x[n - 1] = 2.0  # the maximum in the last position (the remainder loop)
    assert lanemax(x, n) == 2.0


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 130])
def test_lane_sums(n):
    rng = np.random.default_rng(n)
    x = rng.random(n + 3)
    assert lanesum(x, n) == pytest.approx(math.fsum(x[:n]), rel=1e-15, abs=0)
    pw = x.copy()
    e = rng.random(n + 3)
    s = mul_lanesum(pw, e, n)
    np.testing.assert_array_equal(pw[:n], x[:n] * e[:n])
    np.testing.assert_array_equal(pw[n:], x[n:])
    assert s == pytest.approx(math.fsum(x[:n] * e[:n]), rel=1e-15, abs=0)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------

def test_validation_errors():
    X, y, W = make_problem(seed=1, N=10, D=4, K=3)
    with pytest.raises(ValueError, match=r"\(10, 4\).*\(3, 5\)"):
        evaluate(X, y, np.zeros((3, 5)))
    with pytest.raises(ValueError, match="W must be a 2-D"):
        evaluate(X, y, np.zeros(4))
    with pytest.raises(ValueError, match="at least K = 2"):
        evaluate(X, np.zeros(10, dtype=int), np.zeros((1, 4)))
    with pytest.raises(ValueError, match="real numeric"):
        evaluate(X, y, np.zeros((3, 4), dtype=complex))
    with pytest.raises(ValueError, match=r"y has 9 labels but its X has 10 rows"):
        evaluate(X, y[:9], W)
    with pytest.raises(ValueError, match="integer class labels"):
        evaluate(X, y + 0.5, W)
    # integral float labels are accepted, as by fit and scikit-learn's classifiers
    assert evaluate(X, y.astype(float), W).log_loss == evaluate(X, y, W).log_loss
    for bad in (-1, 3):
        yb = y.copy()
        yb[4] = bad
        with pytest.raises(ValueError, match=r"labels in y must lie in 0\.\.K-1 = 0\.\.2"):
            evaluate(X, yb, W)
    for v in (np.nan, np.inf, -np.inf):
        Wb = W.copy()
        Wb[2, 1] = v
        with pytest.raises(ValueError, match="W contains NaN or infinite"):
            evaluate(X, y, Wb)
        Xb = X.toarray()
        Xb[0, 0] = v
        with pytest.raises(ValueError, match="X contains non-finite values"):
            evaluate(Xb, y, W)
        with pytest.raises(ValueError, match="X contains non-finite values"):
            evaluate(sp.csr_matrix(Xb), y, W)
    with pytest.raises(ValueError, match="X must be 2-D"):
        evaluate(np.zeros(4), y, W)
    with pytest.raises(ValueError, match="no rows"):
        evaluate(sp.csr_matrix((0, 4)), np.zeros(0, dtype=int), W)


def test_row_selection_errors():
    X, y, W = make_problem(seed=2, N=10, D=4, K=3)
    with pytest.raises(ValueError, match="rows is empty"):
        evaluate(X, y, W, rows=np.array([], dtype=np.int64))
    with pytest.raises(ValueError, match=r"rows out of range.*0\.\.9"):
        evaluate(X, y, W, rows=np.array([0, 10]))
    with pytest.raises(ValueError, match="rows out of range"):
        evaluate(X, y, W, rows=np.array([-1]))
    with pytest.raises(ValueError, match="integer row indices"):
        evaluate(X, y, W, rows=np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="1-D"):
        evaluate(X, y, W, rows=np.zeros((2, 2), dtype=int))
    with pytest.raises(ValueError, match="not both"):
        evaluate(X, y, W, rows=np.array([0]), subsample=3)
    for bad in (0, -2, 2.5, True):
        with pytest.raises(ValueError, match="subsample must be a positive integer"):
            evaluate(X, y, W, subsample=bad)
    with pytest.raises(ValueError, match="exceeds the number of rows N = 10"):
        evaluate(X, y, W, subsample=11)
    with pytest.raises(ValueError, match="seed must be an integer"):
        evaluate(X, y, W, subsample=3, seed=1.5)
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="block_rows"):
            evaluate(X, y, W, block_rows=bad)
    for bad in (0, numba.config.NUMBA_NUM_THREADS + 1, 1.0):
        with pytest.raises(ValueError, match="threads must be an integer"):
            evaluate(X, y, W, threads=bad)


# ---------------------------------------------------------------------------
# feature-major weights (layout="feature")
# ---------------------------------------------------------------------------

def _same(a, b):
    return dataclasses.astuple(a) == dataclasses.astuple(b)


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("K,tile", [(2, None), (17, 3), (129, 16), (300, None)])
@pytest.mark.parametrize("density", [0.02, 0.4])
def test_feature_layout_is_bit_identical_to_class_layout(precision, K, tile, density):
    # the same tiles with the same values in them: every metric equal bit for bit,
    # also when the rows use few of the features (only those rows of a tile are copied)
    X, y, W = make_problem(seed=K, N=60, D=40, K=K, scale=2.0, density=density)
    WT = np.ascontiguousarray(W.T)
    for kw in ({}, {"rows": np.array([5, 1, 5, 33])}, {"subsample": 17, "seed": 3}):
        a = per_row(X, y, W, tile=tile, precision=precision, **kw)
        b = per_row(X, y, WT, tile=tile, precision=precision, layout="feature", **kw)
        for u, v in zip(a, b):
            assert np.array_equal(u, v)
        assert _same(evaluate(X, y, W, precision=precision, **kw),
                     evaluate(X, y, WT, precision=precision, layout="feature", **kw))
    # float32 weights stay float32 in the float32 path, either layout
    W32 = W.astype(np.float32)
    assert _same(evaluate(X, y, W32, precision=precision),
                 evaluate(X, y, np.ascontiguousarray(W32.T), precision=precision,
                          layout="feature"))
    # a non-contiguous D x K view is copied, not misread
    assert _same(evaluate(X, y, W, precision=precision),
                 evaluate(X, y, W.T, precision=precision, layout="feature"))


def test_feature_layout_with_intercept_and_overflow_fallback():
    X, y, W = make_problem(seed=4, N=30, D=9, K=6)
    b = np.random.default_rng(0).normal(size=6)
    ev = evaluate(X, y, W.T.copy(), intercept=b, layout="feature", precision="float64")
    assert _same(evaluate(X, y, W, intercept=b, precision="float64"), ev)
    Xb = sp.hstack([X, np.ones((30, 1))], format="csr")
    assert_matches_reference(ev, Xb, y, np.hstack([W, b[:, None]]))
    # scores beyond float32's range: the float64 redo keeps the layout
    Wbig = W * 1e40
    assert _same(evaluate(X, y, Wbig), evaluate(X, y, Wbig.T.copy(), layout="feature"))
    assert evaluate(X, y, Wbig).log_loss == pytest.approx(ob.log_loss(X, y, Wbig), rel=1e-12)
    # a score that overflows float64 names the same row and class in both layouts
    from scalable_softmax.evaluate import NonFiniteScoreError
    X.data[:] = 2.0
    Whuge = np.zeros_like(W)
    Whuge[2, 4] = 1e308                        # finite, but x . w overflows
    row = np.flatnonzero(X[:, 4].toarray().ravel())[0]
    for precision in ("float64", "float32"):
        for Wl, layout in ((Whuge, "class"), (Whuge.T.copy(), "feature")):
            with pytest.raises(NonFiniteScoreError, match=rf"row {row} of X, class 2"):
                evaluate(X, y, Wl, precision=precision, layout=layout)


def test_feature_layout_errors_name_the_layout():
    X, y, W = make_problem(seed=1, N=10, D=4, K=3)
    with pytest.raises(ValueError, match="layout must be 'class'.*'feature'"):
        evaluate(X, y, W, layout="row")
    # a D x K array given as K x D: the message says which layout it needs
    with pytest.raises(ValueError, match=r"needs layout='feature'"):
        evaluate(X, y, W.T.copy())
    with pytest.raises(ValueError, match=r"with layout='feature' W must be D x K"):
        evaluate(X, y, W, layout="feature")
    with pytest.raises(ValueError, match=r"intercept must have shape \(K,\) = \(3,\)"):
        evaluate(X, y, W.T.copy(), intercept=np.zeros(4), layout="feature")
    with pytest.raises(ValueError, match=r"pass W\[:-1\] and intercept=W\[-1\]"):
        evaluate(X, y, np.zeros((5, 3)), layout="feature")
    with pytest.raises(ValueError, match=r"labels in y must lie in 0\.\.K-1 = 0\.\.1;.*"
                                         r"\(W has K = 2 columns"):
        evaluate(X, y, np.zeros((4, 2)), layout="feature")


def test_used_features_matches_numpy():
    from scalable_softmax.kernels.evaluate import used_features

    X, _, _ = make_problem(seed=8, N=50, D=30, density=0.05)
    for rows in (np.arange(50), np.array([3, 3, 7]), np.array([0])):
        ref = np.unique(X[rows].indices).astype(np.int64)
        got = used_features(X.indptr, X.indices.astype(np.int64), rows, 30)
        assert got.dtype == np.int64 and np.array_equal(got, ref)


# ---------------------------------------------------------------------------
# several data sets in one pass (evaluate_sets)
# ---------------------------------------------------------------------------

def _three_sets(K, D=40, seed=0):
    """Three sets of different sizes (one dense, one of a single row) and one W."""
    X1, y1, W = make_problem(seed=seed, N=90, D=D, K=K, scale=2.0)
    X2, y2, _ = make_problem(seed=seed + 1, N=37, D=D, K=K, scale=2.0, dense=True)
    X3, y3, _ = make_problem(seed=seed + 2, N=1, D=D, K=K, density=0.9)
    return {"train": (X1, y1), "valid": (X2, y2), "test": (X3, y3)}, W


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["class", "feature"])
@pytest.mark.parametrize("with_intercept", [False, True])
@pytest.mark.parametrize("K", [3, 300])
def test_evaluate_sets_is_bit_identical_to_evaluate(precision, layout, with_intercept, K):
    sets, W = _three_sets(K, seed=K)
    b = np.random.default_rng(K).normal(size=K) if with_intercept else None
    Wl = np.ascontiguousarray(W.T) if layout == "feature" else W
    for Wx in (Wl, Wl.astype(np.float32)):     # float32 weights stay float32 (float32 path)
        kw = dict(intercept=b, precision=precision, layout=layout)
        evs = evaluate_sets(sets, Wx, **kw)
        assert list(evs) == ["train", "valid", "test"]
        for name, (X, y) in sets.items():
            ev = evaluate(X, y, Wx, **kw)
            assert evs[name] == ev and _same(evs[name], ev), name
            assert evs[name].n_rows == X.shape[0]
        # one set, and the sets in another order: the same results
        assert evaluate_sets({"valid": sets["valid"]}, Wx, **kw) == {"valid": evs["valid"]}
        rev = evaluate_sets(dict(reversed(sets.items())), Wx, **kw)
        assert all(_same(rev[n], evs[n]) for n in sets)
    # a model object with W and intercept (a FitResult) stands for both
    if layout == "class":
        model = SimpleNamespace(W=W, intercept=b)
        evs = evaluate_sets(sets, model, precision=precision)
        for name, (X, y) in sets.items():
            assert _same(evs[name], evaluate(X, y, W, intercept=b, precision=precision))


def test_evaluate_sets_checks_and_scores_W_once(monkeypatch):
    """One finiteness pass over W and one kernel pass over all the sets' rows."""
    import importlib

    evm = importlib.import_module("scalable_softmax.evaluate")  # the module, not the function
    sets, W = _three_sets(K=20)
    calls = {"finite": 0, "all_finite": 0, "state_pass32": 0}

    def counted(fn, key):
        def wrapper(*args):
            calls[key] += 1
            return fn(*args)
        return wrapper

    monkeypatch.setattr(evm, "_weights_finite", counted(evm._weights_finite, "finite"))
    monkeypatch.setattr(evm, "all_finite", counted(evm.all_finite, "all_finite"))
    # the pass's kernel: the parallel one or its serial twin (a pass this small)
    for name in ("state_pass32", "state_pass32_serial"):
        monkeypatch.setattr(evm, name, counted(getattr(evm, name), "state_pass32"))
    evaluate_sets(sets, W, precision="float32")
    assert calls == {"finite": 1, "all_finite": 0, "state_pass32": 1}   # NumPy's check
    monkeypatch.setattr(evm, "_SMALL_W", 0)             # the kernel's check
    evaluate_sets(sets, W, precision="float32")
    assert calls == {"finite": 2, "all_finite": 1, "state_pass32": 2}


@pytest.mark.parametrize("layout", ["class", "feature"])
def test_evaluate_sets_float32_overflow_redoes_only_the_sets_that_overflow(layout):
    """A float32 overflow in one set: that set is redone in float64 (as evaluate
    redoes it), the others keep their float32 results, bit for bit."""
    sets, W = _three_sets(K=30, seed=5)
    Xbig = sets["valid"][0] * 1e40                 # X beyond float32's range
    # representable entries whose products overflow float32 (inf, and inf - inf = NaN)
    X1 = sp.csr_matrix(np.array([[10.0, 10.0], [10.0, -10.0], [0.0, 1.0]]))
    W1 = np.array([[1e38, 1e38], [1e38, -1e38], [0.0, 1.0]])
    cases = [({"train": sets["train"], "big": (Xbig, sets["valid"][1]),
               "test": sets["test"]}, W, "big"),
             ({"ok": (np.array([[1e-3, 0.0], [0.0, 1e-3]]), np.array([0, 2])),
               "over": (X1, np.array([0, 1, 2]))}, W1, "over")]
    for case, Wc, over in cases:
        Wl = np.ascontiguousarray(Wc.T) if layout == "feature" else Wc
        evs = evaluate_sets(case, Wl, precision="float32", layout=layout)
        for name, (X, y) in case.items():
            ev = evaluate(X, y, Wl, precision="float32", layout=layout)
            assert _same(evs[name], ev), name
            ev64 = evaluate(X, y, Wl, precision="float64", layout=layout)
            assert _same(ev, ev64) == (name == over), name   # the others stay float32
        # every set overflowing: the whole pass redone in float64
        both = {over: case[over], "again": case[over]}
        evs = evaluate_sets(both, Wl, precision="float32", layout=layout)
        ev64 = evaluate(*case[over], Wl, precision="float64", layout=layout)
        assert _same(evs[over], ev64) and _same(evs["again"], ev64)


def test_nonfinite_weights_error():
    from scalable_softmax.evaluate import NonFiniteWeightsError

    assert issubclass(NonFiniteWeightsError, ValueError)
    sets, W = _three_sets(K=4)
    X, y = sets["train"]
    for v in (np.nan, np.inf, -np.inf):
        for Wb in (W.copy(), W.astype(np.float32)):
            Wb[2, 1] = v
            WT = np.ascontiguousarray(Wb.T)
            for fn, args, kw in ((evaluate, (X, y, Wb), {}),
                                 (evaluate, (X, y, WT), {"layout": "feature"}),
                                 (evaluate_sets, (sets, Wb), {}),
                                 (evaluate_sets, (sets, WT), {"layout": "feature"}),
                                 (evaluate_sets, (sets, Wb), {"precision": "float64"})):
                with pytest.raises(NonFiniteWeightsError, match="W contains NaN or infinite"):
                    fn(*args, **kw)
                with pytest.raises(ValueError, match="W contains NaN or infinite"):
                    fn(*args, **kw)
        b = np.zeros(4)
        b[3] = v
        with pytest.raises(NonFiniteWeightsError, match="intercept contains NaN or inf"):
            evaluate(X, y, W, intercept=b)
        with pytest.raises(NonFiniteWeightsError, match="intercept contains NaN or inf"):
            evaluate_sets(sets, W, intercept=b)


def test_evaluate_sets_errors_name_the_set():
    from scalable_softmax.evaluate import NonFiniteScoreError

    sets, W = _three_sets(K=3, D=6)
    with pytest.raises(ValueError, match="sets is empty"):
        evaluate_sets({}, W)
    with pytest.raises(ValueError, match="sets must be a dict"):
        evaluate_sets([sets["train"]], W)
    with pytest.raises(ValueError, match=r"set 'train' must be a pair \(X, y\)"):
        evaluate_sets({"train": sets["train"][0]}, W)
    X5 = sp.random(4, 5, density=0.5, random_state=0, format="csr")
    with pytest.raises(ValueError, match=r"X of set 'odd' has D = 5 columns \(shape \(4, 5\)\) "
                                         r"but X of set 'train' has D = 6"):
        evaluate_sets({**sets, "odd": (X5, np.zeros(4, dtype=int))}, W)
    with pytest.raises(ValueError, match=r"\(90, 6\).*\(3, 5\)"):
        evaluate_sets(sets, np.zeros((3, 5)))
    for bad in (-1, 3):
        X, y = sets["valid"]
        yb = y.copy()
        yb[4] = bad
        with pytest.raises(ValueError, match=r"labels in y of set 'valid' must lie in "
                                             r"0\.\.K-1 = 0\.\.2;.*\(W has K = 3 rows"):
            evaluate_sets({**sets, "valid": (X, yb)}, W)
        with pytest.raises(ValueError, match=r"labels in y of set 'valid' .*K = 3 columns"):
            evaluate_sets({**sets, "valid": (X, yb)}, W.T.copy(), layout="feature")
    with pytest.raises(ValueError, match=r"y of set 'test' has 2 labels but its X has 1 row"):
        evaluate_sets({**sets, "test": (sets["test"][0], np.zeros(2, dtype=int))}, W)
    Xn = sets["train"][0].toarray()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="X of set 'train' contains non-finite values"):
        evaluate_sets({**sets, "train": (Xn, sets["train"][1])}, W)
    for kw, what in ((dict(precision="half"), "precision"), (dict(layout="row"), "layout"),
                     (dict(block_rows=0), "block_rows"), (dict(threads=0), "threads")):
        with pytest.raises(ValueError, match=what):
            evaluate_sets(sets, W, **kw)
    # a score that overflows float64: the set, and the row of its X, are named
    Xh = np.zeros((2, 6))
    Xh[0, 0] = Xh[1, 4] = 2.0
    Whuge = np.zeros_like(W)
    Whuge[2, 4] = 1e308                        # finite, but x . w overflows in row 1
    for precision in ("float32", "float64"):
        with pytest.raises(NonFiniteScoreError, match=r"in set 'huge': a score is not finite "
                                                      r"\(row 1 of X, class 2"):
            evaluate_sets({"fine": (Xh[:1], np.array([0])), "huge": (Xh, np.array([0, 1]))},
                          Whuge, precision=precision)
