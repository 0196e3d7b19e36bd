"""The read-only bound loops of benchmarks/bench_sgd.py read what they claim to read:
their sums equal NumPy's over the same entries (so the bounds they time are the cost of
reading a step's data, not of something else)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_sgd.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_sgd", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
