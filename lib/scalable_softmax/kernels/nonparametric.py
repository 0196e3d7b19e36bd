"""The numba kernel of notebook 08's nonparametric One-vs-Each experiment
(:mod:`scalable_softmax.repro.titsias.nonparametric`, which holds its plain NumPy reference
``_ove_steps_reference`` and the driver ``ove_sgd``).

``ove_steps(f, y, neg, start, n_iter, b, S, lr, wbuf)``
    ``n_iter`` SGD ascent steps on the sampled OVE bound, in place on ``f``.
"""
from __future__ import annotations

import numba
import numpy as np

from scalable_softmax.kernels.common import JIT

__all__ = ["ove_steps"]


@numba.njit(**JIT)
def ove_steps(f, y, neg, start, n_iter, b, S, lr, wbuf):
    """``n_iter`` SGD ascent steps on the sampled OVE bound, in place on ``f``.

    Step ``t`` uses draws ``y[start + t*b : start + (t+1)*b]`` and for draw ``j`` the
    other values ``neg[j, :S]``; the gradient of the sampled terms is evaluated at the
    current ``f`` and then applied: ``f += lr * sum_j sum_s w_js (e_{y_j} - e_{m_js})``,
    ``w_js = sigma(f_{m_js} - f_{y_j})``.
    """
    for t in range(n_iter):
        j0 = start + t * b
        for j in range(b):
            fy = f[y[j0 + j]]
            for s in range(S):
                z = f[neg[j0 + j, s]] - fy
                if z >= 0.0:
                    wbuf[j, s] = 1.0 / (1.0 + np.exp(-z))
                else:
                    ez = np.exp(z)
                    wbuf[j, s] = ez / (1.0 + ez)
        for j in range(b):
            yj = y[j0 + j]
            for s in range(S):
                w = lr * wbuf[j, s]
                f[yj] += w
                f[neg[j0 + j, s]] -= w
