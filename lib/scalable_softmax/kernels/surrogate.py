"""The numba kernel of the surrogate data sets' planted model
(:mod:`scalable_softmax.data.surrogate`, which holds its plain NumPy reference
``planted_sample_reference`` and the Python entry point ``planted_sample``).

``planted_sample_rows(x_indptr, x_indices, x_data, wt_indptr, wt_indices, wt_data, K,
inv_tau, u, do_sample, y, logp, pmax, amax, ent, logz)``
    the softmax statistics (and a sampled class) of every row, in parallel over chunks
    of 256 rows, O(K) memory per thread.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from scalable_softmax.kernels.common import PJIT

__all__ = ["planted_sample_rows"]


@numba.njit(**PJIT)
def planted_sample_rows(x_indptr, x_indices, x_data, wt_indptr, wt_indices, wt_data, K,
                        inv_tau, u, do_sample, y, logp, pmax, amax, ent, logz):
    """Scores ``x_i · W[k] * inv_tau`` over all K classes, one row at a time.

    ``W^T`` is given as CSR (feature-major): classes whose score is never touched by a
    row's features have score exactly 0. Writes, per row, the sampled class ``y`` (inverse
    CDF in class order at ``u[i]``, if ``do_sample``), ``log p(y|x)``, ``max_k p``, the
    argmax (smallest index on ties), the entropy and ``log sum_k exp(s_k)``.
    """
    n = x_indptr.size - 1
    chunk = 256
    n_chunks = (n + chunk - 1) // chunk
    for c in numba.prange(n_chunks):
        s = np.zeros(K)
        mark = np.zeros(K, dtype=np.uint8)
        touched = np.empty(K, dtype=np.int64)
        for i in range(c * chunk, min(n, (c + 1) * chunk)):
            nt = 0
            for p in range(x_indptr[i], x_indptr[i + 1]):
                j = x_indices[p]
                xv = x_data[p] * inv_tau
                for q in range(wt_indptr[j], wt_indptr[j + 1]):
                    k = wt_indices[q]
                    if mark[k] == 0:
                        mark[k] = 1
                        touched[nt] = k
                        nt += 1
                    s[k] += xv * wt_data[q]
            n_un = K - nt
            m = -np.inf
            best = -1
            for t in range(nt):
                k = touched[t]
                if s[k] > m or (s[k] == m and k < best):
                    m = s[k]
                    best = k
            if n_un > 0:
                first_un = 0
                while mark[first_un] == 1:
                    first_un += 1
                if nt == 0 or m < 0.0:
                    m = 0.0
                    best = first_un
                elif m == 0.0 and first_un < best:
                    best = first_un
            e_un = math.exp(-m)
            Z = n_un * e_un
            ps = 0.0
            for t in range(nt):
                k = touched[t]
                e = math.exp(s[k] - m)
                Z += e
                ps += e * s[k]
            lz = math.log(Z)
            logz[i] = m + lz
            pmax[i] = 1.0 / Z  # exp(m - m) / Z
            amax[i] = best
            ent[i] = lz + m - ps / Z
            if do_sample:
                target = u[i] * Z
                acc = 0.0
                yi = K - 1
                for k in range(K):
                    if mark[k] == 1:
                        acc += math.exp(s[k] - m)
                    else:
                        acc += e_un
                    if acc > target:
                        yi = k
                        break
                y[i] = yi
                sy = s[yi] if mark[yi] == 1 else 0.0
                logp[i] = sy - m - lz
            for t in range(nt):
                k = touched[t]
                s[k] = 0.0
                mark[k] = 0
