"""The bound loops of the benchmarks make the accesses they claim: the read-only loops of
benchmarks/bench_sgd.py and the read-modify-write loops of benchmarks/bench_sampled.py.
bench_sgd: the read-only bound loops read what they claim to read:
their sums equal NumPy's over the same entries (so the bounds they time are the cost of
reading a step's data, not of something else)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import benchlib


@pytest.fixture(scope="module")
def bench():
    return benchlib.load("bench_sgd")


def _csr(N, D, density, seed):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=density, random_state=seed, format="csr")
    X.data = rng.standard_normal(X.data.size)
    X.sort_indices()
    return X


@pytest.mark.parametrize("ahead", [0, 1, 4])
@pytest.mark.parametrize("D, density", [(7, 1.0), (13, 0.4), (64, 0.1)])
def test_read_rows_sums_the_rows_in_order(bench, ahead, D, density):
    X = _csr(50, D, density, seed=D)
    order = np.random.default_rng(1).permutation(X.shape[0]).astype(np.int64)
    indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
    got = bench._read_rows(np.ascontiguousarray(X.data), indptr, order, ahead)
    assert got == pytest.approx(float(X.data.sum()), rel=1e-12, abs=1e-12)
    # only the ordered rows are read: half the rows give half the sum
    half = order[:25]
    got_half = bench._read_rows(np.ascontiguousarray(X.data), indptr, half, ahead)
    want_half = float(sum(X.data[indptr[i]:indptr[i + 1]].sum() for i in half))
    assert got_half == pytest.approx(want_half, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("ahead", [0, 2])
def test_gather_reads_the_touched_entries_of_w(bench, ahead):
    X = _csr(40, 30, 0.2, seed=3)
    rng = np.random.default_rng(4)
    K = 9
    W = rng.standard_normal((K, 30))
    y = rng.integers(0, K, 40).astype(np.int64)
    order = rng.permutation(40).astype(np.int64)
    ks = rng.integers(0, K, 40).astype(np.int64)
    indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
    indices = np.ascontiguousarray(X.indices, dtype=np.int64)
    want = 0.0
    for t, i in enumerate(order):
        cols = indices[indptr[i]:indptr[i + 1]]
        want += W[ks[t], cols].sum() + W[y[i], cols].sum()
    args = (W, indptr, indices, np.ascontiguousarray(X.data), y, order, ks)
    got = bench._gather_prefetched(*args, ahead) if ahead else bench._gather(*args)
    assert got == pytest.approx(want, rel=1e-12)


def test_paired_overhead_alternates_and_pairs(bench):
    calls = []

    def base(order, e):
        calls.append(("base", e, order[:3].tolist()))

    def other(order, e):
        calls.append(("other", e, order[:3].tolist()))

    out = bench.paired_overhead(base, other, N=20, pairs=4, seed=0)
    assert out["pairs"] == 4 and len(out["ratios"]) == 4
    timed = calls[2:]                      # after one warm-up epoch of each
    assert [c[0] for c in timed] == ["base", "other", "other", "base",
                                     "base", "other", "other", "base"]
    for a, b in zip(timed[::2], timed[1::2]):
        assert a[1] == b[1] and a[2] == b[2]   # same epoch number and permutation
    assert out["overhead_q1"] <= out["overhead_median"] <= out["overhead_q3"]


# ---------------------------------------------------------------------------
# benchmarks/bench_sampled.py: the bound loops of the sampled kernels
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bench_sampled():
    return benchlib.load("bench_sampled")


def _pattern_replay(X, order, cls, ncls, W, n, m, touch, read_first, inc):
    """NumPy replay of bench_sampled._pattern: the final W and the sum it reads."""
    W = W.copy()
    sink = 0.0
    for t, i in enumerate(order):
        if touch and t % n == 0:
            first = 1 if ncls[t] > m else 0
            for j in cls[t, first:ncls[t]]:
                sink += W[j, ::8].sum()
        cols = X.indices[X.indptr[i]:X.indptr[i + 1]]
        rows = cls[t, :ncls[t]]
        if read_first:
            sink += sum(W[j, cols].sum() for j in rows)
        for j in rows:
            np.add.at(W[j], cols, inc)
    return W, sink


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("pf, hint_all, touch, read_first, xpf",
                         [(0, True, False, False, False), (2, True, False, False, True),
                          (2, False, True, False, False), (2, False, True, True, True),
                          (1, True, False, True, True), (5, False, False, True, False)])
def test_pattern_loop_makes_the_kernels_accesses(bench_sampled, shared, pf, hint_all, touch,
                                                 read_first, xpf):
    from scalable_softmax.methods import sampled
    K, D, N, n, m = 13, 40, 57, 10, 3
    X = _csr(N, D, 0.15, seed=7)
    rng = np.random.default_rng(8)
    y = rng.integers(0, K, N).astype(np.int64)
    order = rng.permutation(N).astype(np.int64)
    cls, ncls = sampled.epoch_draws(y, order, K, n, m, shared, True, 3)
    W0 = rng.standard_normal((K, D))
    want_W, want_sink = _pattern_replay(X, order, cls, ncls, W0, n, m, touch, read_first, 1.0)
    W = W0.copy()
    indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
    indices = np.ascontiguousarray(X.indices, dtype=np.int64)
    got = bench_sampled._pattern(indptr, indices, np.ascontiguousarray(X.data), order, cls,
                                 ncls, W, n, m, pf, hint_all, touch, read_first, xpf, 1.0)
    # every entry the kernel writes was read-modified-written once per datapoint
    np.testing.assert_array_equal(W, want_W)
    assert got == pytest.approx(want_sink, rel=1e-12, abs=1e-12)
    if read_first or touch:
        assert got != 0.0


def test_pattern_runner_uses_the_kernels_draws(bench_sampled):
    """The runner's loop touches the rows the kernel draws with the epoch's seed."""
    from scalable_softmax.methods import sampled
    K, D, N = 11, 30, 40
    X = _csr(N, D, 0.2, seed=9)
    y = np.random.default_rng(10).integers(0, K, N)
    for shared, pat in ((False, "own"), (True, "shared")):
        tr = sampled.OVETrainer(X, y, K, batch_size=8, n_sampled=2, shared_negatives=shared)
        W = np.zeros((K, D))
        order = np.random.default_rng(11).permutation(N)
        run = bench_sampled.pattern_runner(tr, W, bench_sampled.PATTERN_LOOPS[pat]["rmw"],
                                           shared=shared)
        done, wall, cpu = run(order, 4)
        assert done == N and wall > 0
        cls, ncls = sampled.epoch_draws(y, order, K, 8, 2, shared, True, 1004)
        want, _ = _pattern_replay(X, order, cls, ncls, np.zeros((K, D)), 8, 2, False, False,
                                  1e-300)
        np.testing.assert_array_equal(W, want)


# ---------------------------------------------------------------------------
# benchmarks/bench_many_classes.py: the bound loops of the many-class steps
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bench_many():
    return benchlib.load("bench_many_classes")    # it imports _common and bench_sgd


def _inf_rows(N, D, density, seed):
    """A CSR matrix whose stored values are all inf: ``W += 0 * x`` turns exactly the
    touched entries of ``W`` into NaN."""
    X = _csr(N, D, density, seed)
    X.data[:] = np.inf
    return (np.ascontiguousarray(X.indptr, dtype=np.int64),
            np.ascontiguousarray(X.indices, dtype=np.int32), X.data.copy(), X)


@pytest.mark.parametrize("m, ahead, dots", [(1, 0, 0), (1, 2, 0), (4, 0, 0), (4, 2, 0),
                                           (4, 0, 4), (1, 0, 3)])
def test_rw_rows_touches_the_rows_the_kernel_draws(bench_many, m, ahead, dots):
    from scalable_softmax.methods import sgd
    indptr, indices, data, X = _inf_rows(30, 25, 0.2, seed=7)
    K = 11
    rng = np.random.default_rng(8)
    y = rng.integers(0, K, 30).astype(np.int64)
    order = rng.permutation(30).astype(np.int64)
    W = np.zeros((K, 25))
    n = bench_many._rw_rows(W, indptr, indices, data, y, order, m, np.int64(5), ahead, dots)
    want = np.zeros((K, 25), bool)
    for i, ks in zip(order, sgd.draw_classes(5, order, y, K, m)):
        cols = X.indices[X.indptr[i]:X.indptr[i + 1]]
        for k in list(ks) + [y[i]]:
            want[k, cols] = True
    assert np.array_equal(np.isnan(W), want)
    assert n == (m + 1) * X.nnz


@pytest.mark.parametrize("ahead, dots", [(0, 0), (1, 0), (0, 4), (0, 100)])
def test_rw_batches_touches_each_batch_row_at_its_points_columns(bench_many, ahead, dots):
    indptr, indices, data, X = _inf_rows(23, 25, 0.2, seed=9)
    K, nb, m = 13, 5, 3
    rng = np.random.default_rng(10)
    y = rng.integers(0, K, 23).astype(np.int64)
    order = rng.permutation(23).astype(np.int64)
    steps = -(-23 // nb)
    classes = np.empty((steps, m), np.int64)           # distinct, not a batch label
    for j in range(steps):
        free = np.setdiff1d(np.arange(K), y[order[j * nb:(j + 1) * nb]])
        classes[j] = rng.choice(free, m, replace=False)
    classes[1, 2] = -1                                   # padding is skipped
    W = np.zeros((K, 25))
    touched = bench_many._rw_batches(W, indptr, indices, data, y, order, nb, classes, ahead,
                                     dots)
    want = np.zeros((K, 25), bool)
    count = 0
    for j in range(steps):
        pts = order[j * nb:(j + 1) * nb]
        rows = set(y[pts]) | {c for c in classes[j] if c >= 0}
        for k in rows:
            for i in pts:
                want[k, X.indices[X.indptr[i]:X.indptr[i + 1]]] = True
                count += X.indptr[i + 1] - X.indptr[i]
    assert np.array_equal(np.isnan(W), want)
    assert touched == count
