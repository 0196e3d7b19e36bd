"""The full-batch objective kernel of ``scalable_softmax.methods.full`` (``full_pass``):
its one-thread path (a single sweep over all ``K`` classes) and its threaded path (the
gradient split over slices of the classes) give the same bits, and both match the
plain NumPy reference, for the three objectives and for blocks smaller than ``N``."""
from __future__ import annotations

import math

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax.kernels.full import KIND_MODES, full_pass
from scalable_softmax.methods.full import full_objective_reference


def _problem(N=70, D=11, K=7, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.4, random_state=seed, format="csr",
                  data_rvs=lambda n: rng.poisson(3, n) + 1.0)   # raw counts
    X = sp.hstack([X, np.ones((N, 1))], format="csr")
    X.sort_indices()
    y = rng.integers(0, K, N)
    W = rng.normal(scale=0.3, size=(K, D + 1))
    return X, y, W


@pytest.mark.parametrize("kind", ["softmax", "ove", "bouchard"])
@pytest.mark.parametrize("block", [1000, 16, 1])
def test_one_thread_and_threads_agree_bitwise_and_match_numpy(kind, block):
    X, y, W = _problem()
    N, K = X.shape[0], W.shape[0]
    args = (np.asarray(X.indptr, np.int64), np.asarray(X.indices, np.int64), X.data,
            np.asarray(y, np.int64), np.ascontiguousarray(W.T))
    out = []
    for nchunk in (1, 2, 3):
        GT = np.full_like(args[-1], np.nan)          # every element must be written
        alpha = np.full(N, math.log(K - 1.0))
        prev = numba.get_num_threads()
        try:
            numba.set_num_threads(1 if nchunk == 1 else min(2, numba.config.NUMBA_NUM_THREADS))
            total, _ = full_pass(*args, GT, KIND_MODES[kind], alpha, block, nchunk, 200)
        finally:
            numba.set_num_threads(prev)
        out.append((total, GT.copy(), alpha.copy()))
    for total, GT, alpha in out[1:]:
        assert total == out[0][0]
        assert np.array_equal(GT, out[0][1]) and np.array_equal(alpha, out[0][2])
    total, GT, alpha = out[0]
    val, G, _ = full_objective_reference(X, y, W, mu=0.0, kind=kind,
                                         alpha=alpha if kind == "bouchard" else None)
    assert total / N == pytest.approx(val, rel=1e-12)
    np.testing.assert_allclose(GT.T / N, G, rtol=1e-10, atol=1e-13)
