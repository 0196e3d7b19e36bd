"""``softmax-sgd`` on feature-major weights (scalable_softmax.kernels.softmax_sgd): its
steps equal the NumPy reference to rounding on several shapes (repeated features,
duplicate and unsorted entries, a ridge, an intercept column), the weights are
bit-identical to the former class-major kernel and for every number of threads, and the
trainer keeps ``W`` ``K x D`` for warm starts, ``fit`` and the estimator."""
from __future__ import annotations

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import benchlib
from scalable_softmax.fit import fit
from scalable_softmax.kernels import softmax_sgd as ksgd
from scalable_softmax.methods.full import SoftmaxSGDTrainer, reference_step

SHAPES = [  # N, D, K, batch, density
    (80, 9, 6, 16, 0.6),       # dense rows: every feature repeats in a minibatch
    (300, 50, 37, 32, 0.1),
    (200, 40, 1100, 64, 0.15),  # K over two tiles and not a multiple of 8
]


def _problem(N, D, K, density, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=density, random_state=seed, format="csr",
                  data_rvs=lambda n: rng.normal(size=n))
    X = sp.csr_matrix(X + sp.eye(N, D, format="csr"))
    y = rng.integers(0, K, N)
    return X, y, rng


def _trained(X, y, K, W0, orders, lr, mu=0.0, batch=10, **opts):
    tr = SoftmaxSGDTrainer(X, y, K, mu=mu, batch_size=batch, **opts)
    tr.init_params()
    tr.W[:] = W0
    reps = [tr.run_epoch(o, lr, 0) for o in orders]
    return tr, reps


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("mu", [0.0, 3.0])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"K{s[2]}")
def test_one_step_equals_the_numpy_reference(shape, mu, threads):
    N, D, K, B, dens = shape
    X, y, rng = _problem(N, D, K, dens)
    W0 = rng.normal(size=(K, D))
    rows = rng.permutation(N)[:B]
    tr, (rep,) = _trained(X, y, K, W0, [rows], 0.8, mu, B, threads=threads)
    assert rep.steps == 1 and rep.diverged_at == -1
    want = reference_step(X, y, W0, rows, 0.8, mu)
    np.testing.assert_allclose(tr.weights(), want, rtol=1e-12, atol=1e-13)
    # the step moved the weights (the comparison is not between two untouched copies)
    assert np.abs(want - W0).max() > 1e-3


def test_a_minibatch_sharing_one_feature_uses_the_old_weights_for_every_row():
    # every row has feature 0 (and some share others): the minibatch gradient at the
    # old W, not rows applied one after the other
    X, y, rng = _problem(40, 12, 7, 0.3, seed=2)
    X = sp.csr_matrix(X + sp.csr_matrix((np.full(40, 0.7), (np.arange(40),
                                                             np.zeros(40, int))),
                                        shape=(40, 12)))
    W0 = rng.normal(size=(7, 12))
    rows = np.arange(20)
    tr, _ = _trained(X, y, 7, W0, [rows], 1.5, 0.0, 20)
    want = reference_step(X, y, W0, rows, 1.5)
    np.testing.assert_allclose(tr.weights(), want, rtol=1e-12, atol=1e-13)
    # applying the rows one after the other is a different step, far beyond rounding
    W_seq = W0
    for r in rows:
        W_seq = reference_step(X, y, W_seq, [r], 1.5 / 20)
    assert np.abs(W_seq - want).max() > 1e-4


def test_duplicate_and_unsorted_entries_are_summed_as_the_reference_does():
    # a CSR with duplicate columns in a row and rows out of order: the scores sum the
    # entries (x1 + x2) w, as X.toarray() does, to rounding
    indptr = np.array([0, 3, 5, 8, 9])
    indices = np.array([4, 1, 4, 2, 0, 3, 3, 1, 4])
    data = np.array([0.5, -1.0, 0.25, 2.0, 1.0, -0.5, 1.5, 0.75, 1.0])
    X = sp.csr_matrix((data, indices, indptr), shape=(4, 5))
    assert not X.has_canonical_format
    y = np.array([0, 2, 1, 2])
    W0 = np.random.default_rng(3).normal(size=(3, 5))
    rows = np.array([2, 0, 3, 1])
    outs = []
    for layout in ("feature", "class"):
        tr, _ = _trained(X, y, 3, W0, [rows], 0.9, 0.0, 4, layout=layout)
        np.testing.assert_allclose(tr.weights(), reference_step(X, y, W0, rows, 0.9),
                                   rtol=1e-12, atol=1e-13)
        outs.append(tr.weights())
    # the feature-major kernel sums each row's entries sorted by feature, stably: the
    # class-major kernel's order, so bit-identical even here
    assert np.array_equal(outs[0], outs[1])
    # and the trainer did not touch the given matrix
    np.testing.assert_array_equal(X.indices, indices)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"K{s[2]}")
def test_bit_identical_to_the_class_major_kernel_and_for_every_thread_count(shape):
    N, D, K, B, dens = shape
    X, y, rng = _problem(N, D, K, dens, seed=1)
    W0 = rng.normal(size=(K, D))
    orders = [np.random.default_rng(e).permutation(N) for e in range(3)]
    # lr mu / N >= 1 in the second case: the lazy scale is folded every step
    for lr, mu in ((0.5, 2.0), (30.0, 2.0 * N / 30.0)):
        runs = {}
        for key, opts in {"class": {"layout": "class"}, "f1": {"threads": 1},
                          "f2": {"threads": 2}, "f3": {"threads": 3},
                          "all": {"threads": numba.get_num_threads()}}.items():
            tr, reps = _trained(X, y, K, W0, orders, lr, mu, B, **opts)
            assert all(r.diverged_at == -1 for r in reps)
            runs[key] = tr.weights()
        for key, W in runs.items():
            assert np.array_equal(W, runs["class"]), key
        assert not np.array_equal(runs["class"], W0)


def test_fit_with_an_intercept_and_a_warm_start_matches_the_class_major_kernel():
    X, y, rng = _problem(120, 15, 9, 0.3, seed=4)
    W0 = rng.normal(size=(9, 15))
    b0 = rng.normal(size=9)
    res = {}
    for layout in ("feature", "class"):
        res[layout] = fit(X, y, "softmax-sgd", 0.7, epochs=3, mu=0.5, batch_size=16,
                          fit_intercept=True, init_W=W0, init_intercept=b0,
                          eval_epochs=[0, 3], progress=False, layout=layout)
    f, c = res["feature"], res["class"]
    assert f.W.shape == (9, 15) and f.W.flags.c_contiguous
    assert np.array_equal(f.W, c.W) and np.array_equal(f.intercept, c.intercept)
    cols = [k for k in f.history.columns if k.endswith("log_loss")]
    assert np.array_equal(f.history[cols].to_numpy(), c.history[cols].to_numpy(),
                          equal_nan=True)
    assert not np.array_equal(f.W, W0)


def test_an_intercept_column_step_equals_the_reference():
    X, y, rng = _problem(60, 8, 5, 0.4, seed=5)
    Xa = sp.csr_matrix(sp.hstack([X, np.full((60, 1), 2.0)]))
    W0 = rng.normal(size=(5, 9))
    rows = rng.permutation(60)[:25]
    tr, _ = _trained(Xa, y, 5, W0, [rows], 0.6, 1.0, 25, threads=2)
    np.testing.assert_allclose(tr.weights(), reference_step(Xa, y, W0, rows, 0.6, 1.0),
                               rtol=1e-12, atol=1e-13)


def test_trainer_keeps_w_k_by_d_and_writes_through_its_view():
    X, y, rng = _problem(30, 7, 4, 0.5)
    tr = SoftmaxSGDTrainer(X, y, 4, mu=1.0, batch_size=5)
    assert tr.W is None
    tr.init_params()
    assert tr.W.shape == (4, 7) and np.shares_memory(tr.W, tr._store)
    W0 = rng.normal(size=(4, 7))
    tr.set_params(W0)
    np.testing.assert_array_equal(tr.weights(), W0)
    tr.run_epoch(np.arange(30), 0.5, 0)
    w = tr.weights()
    assert w.flags.c_contiguous and w.shape == (4, 7)
    np.testing.assert_array_equal(w, tr.W * tr.cs[0])
    # assigning a K x D array copies it into the feature-major store
    tr.W = W0
    np.testing.assert_array_equal(tr.W, W0)
    assert tr._store.shape == (7, 4) and tr._store.flags.c_contiguous


def test_estimator_partial_fit_runs_on_the_feature_major_trainer():
    from scalable_softmax import SoftmaxSGDClassifier
    X, y, _ = _problem(90, 10, 4, 0.4, seed=6)
    a = SoftmaxSGDClassifier(method="softmax-sgd", lr=0.5, epochs=1, random_state=0,
                             method_options={"threads": 2})
    a.partial_fit(X, y, classes=np.arange(4))
    a.partial_fit(X, y)
    assert a.coef_.shape == (4, 10) and np.isfinite(a.coef_).all()
    assert a.score(X, y) > 0.0


@pytest.mark.parametrize("opts, msg", [
    (dict(threads=0), "'threads' must be an integer >= 1"),
    (dict(threads=1.5), "'threads' must be an integer >= 1"),
    (dict(layout="rows"), "'feature', 'class' or 'class-rowwise'"),
])
def test_bad_options_are_refused_with_a_clear_message(opts, msg):
    X, y, _ = _problem(20, 5, 3, 0.5)
    with pytest.raises(ValueError, match=msg):
        SoftmaxSGDTrainer(X, y, 3, **opts)


def test_layout_class_rowwise_is_the_class_major_loop():
    X, y, rng = _problem(50, 6, 4, 0.5)
    tr = SoftmaxSGDTrainer(X, y, 4, layout="class-rowwise")
    assert tr._layout == "class" and not tr._transposed
    tr.init_params()
    W0 = rng.normal(size=(4, 6))
    tr.W[:] = W0
    rows = np.arange(50)
    tr.run_epoch(rows[:10], 0.4, 0)
    np.testing.assert_allclose(tr.weights(), reference_step(X, y, W0, rows[:10], 0.4),
                               rtol=1e-12, atol=1e-13)


def test_divergence_is_reported_at_its_step():
    X, y, _ = _problem(30, 9, 6, 0.6)
    X = X.tolil()
    X[14, 2] = 1e200  # second minibatch of 10
    for threads in (1, 2):
        tr = SoftmaxSGDTrainer(X.tocsr(), y, 6, batch_size=10, threads=threads)
        tr.init_params()
        rep = tr.run_epoch(np.arange(30), 1e200, 0)
        assert rep.diverged_at == 1 and rep.steps == 2


# --- the kernel's pieces against NumPy ---------------------------------------------

def test_pieces_equal_numpy():
    rng = np.random.default_rng(7)
    D, K = 13, 1030
    VT = rng.normal(size=(D, K))
    indices = np.array([1, 4, 4, 9], dtype=np.int64)
    data = rng.normal(size=4)
    s = np.empty(K)
    ksgd.row_scores(indices, data, 0, 4, VT, 0.75, s)
    # a sum of 4 products, in whatever order BLAS takes (it changes with the CPU's kernel):
    # the rounding bound of such a sum, 8 eps * sum |terms|, not a relative tolerance (an
    # entry near 0 by cancellation differed by 1.3e-13 relative under OpenBLAS SkylakeX)
    bound = 8 * np.finfo(float).eps * (0.75 * np.abs(data) @ np.abs(VT[indices]))
    assert np.all(np.abs(s - 0.75 * (data @ VT[indices])) <= bound)
    s0 = s.copy()
    ksgd.softmax_gradient(s, 5, np.empty(K), np.empty(K))
    p = np.exp(s0 - s0.max())
    p /= p.sum()
    p[5] -= 1.0
    np.testing.assert_allclose(s, p, rtol=1e-13, atol=1e-16)
    # the update: every class of every feature of the minibatch, once
    S = rng.normal(size=(3, K))
    fptr = np.array([0, 1, 3], dtype=np.int64)
    feat = np.array([2, 7], dtype=np.int64)
    tt = np.array([1, 0, 2], dtype=np.int64)
    vv = rng.normal(size=3)
    want = VT.copy()
    want[2] -= 0.3 * vv[0] * S[1]
    want[7] -= 0.3 * (vv[1] * S[0] + vv[2] * S[2])
    buf = np.empty(ksgd.TILE)
    for q in range(3):
        k0, k1 = ksgd.class_bounds(K, 3, q)
        assert ksgd.update_classes(VT, S, 0.3, k0, k1, 2, fptr, feat, tt, vv, buf) == 0
    np.testing.assert_allclose(VT, want, rtol=1e-13, atol=1e-14)
    before = VT.copy()
    assert ksgd.fold_classes(VT, 0.5, 0, K) == 0
    np.testing.assert_array_equal(VT, 0.5 * before)   # a scaling by 2^-1 is exact


@pytest.mark.parametrize("K", [1, 7, 8, 100, 1030])
@pytest.mark.parametrize("nchunk", [1, 2, 3, 8])
def test_class_slices_partition_the_classes_on_cache_lines(K, nchunk):
    b = [ksgd.class_bounds(K, nchunk, q) for q in range(nchunk)]
    assert b[0][0] == 0 and b[-1][1] == K
    assert all(b[q][1] == b[q + 1][0] for q in range(nchunk - 1))
    assert all(k0 <= k1 and (k0 % 8 == 0 or k0 == K) for k0, k1 in b)


def test_batch_by_feature_lists_each_feature_entries_in_minibatch_order():
    X = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 3.0, 4], [5.0, 0, 0]]))
    indptr = X.indptr.astype(np.int64)
    indices = X.indices.astype(np.int64)
    order = np.array([2, 0, 1], dtype=np.int64)
    cnt, fptr, feat = (np.zeros(3, np.int64), np.zeros(4, np.int64), np.zeros(3, np.int64))
    tt, vv = np.zeros(6, np.int64), np.zeros(6)
    nf = ksgd.batch_transpose(indptr, indices, X.data, order, 0, 3, cnt, fptr, feat, tt, vv)
    assert nf == 3 and list(feat) == [0, 1, 2] and list(fptr) == [0, 2, 3, 5]
    assert list(tt[:5]) == [0, 1, 2, 1, 2] and list(vv[:5]) == [5.0, 1.0, 3.0, 2.0, 4.0]
    assert not cnt.any()


def test_the_module_documents_its_public_names():
    assert ksgd.__doc__ and all(hasattr(ksgd, n) for n in ksgd.__all__)


def test_the_benchmark_bound_loop_takes_the_reference_step():
    bench = benchlib.load("bench_softmax_sgd")
    X, y, rng = _problem(64, 20, 11, 0.2, seed=8)
    W0 = rng.normal(size=(11, 20))
    WT = np.ascontiguousarray(W0.T)
    order = rng.permutation(64)[:40].astype(np.int64)
    steps = bench.bound_epoch(X.indptr.astype(np.int64), X.indices.astype(np.int64),
                              X.data, y.astype(np.int64), order, WT, 0.9, 25)
    assert steps == 2
    W = reference_step(X, y, W0, order[:25], 0.9)
    W = reference_step(X, y, W, order[25:], 0.9)
    np.testing.assert_allclose(WT.T, W, rtol=1e-12, atol=1e-13)
