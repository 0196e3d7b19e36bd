"""Instrumented replay of explicit SGD steps, for the instability demo (notebook 01).

:func:`replay` re-runs, in plain NumPy and one step at a time, vanilla SGD and U-max on
the double-sum objective (docs/math.md sections 2, 3) and on Raman et al.'s double sum
(section 6, with the *correct* gradient), one datapoint and one sampled class per step,
in the per-datapoint units of docs/math.md section 2 (``f_ik / N``). Every step records the
size of the weight gradient **in the log domain**, so that the magnitude of the step
that overflows is recorded too:

* double sum: ``||grad_{w_k}|| = ||grad_{w_{y_i}}|| = (K-1) e^{delta_ik - u_i} ||x_i||``;
* Raman: ``max(||grad_{w_k}||, ||grad_{w_{y_i}}||)`` with
  ``||grad_{w_k}|| = (K-1) e^{s_ik - ubar_i} ||x_i||`` and
  ``||grad_{w_{y_i}}|| = |e^{s_{i,y_i} - ubar_i} - 1| ||x_i||``.

The replay is a reference for the *magnitudes*, not a copy of the library's kernels
(:mod:`scalable_softmax.methods.sgd`): it draws its own data order and classes and
uses ``mu = 0``. A run stops at the first step whose ``exp`` overflows or whose
parameters become non-finite (that step is recorded, with ``finite = False``).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = ["replay", "REPLAY_METHODS", "log10_bound"]

#: methods :func:`replay` knows
REPLAY_METHODS = ("vanilla", "umax", "raman-vanilla", "raman-umax")

_LN10 = math.log(10.0)
_EXP_MAX = 709.782712893384


def _softplus(z):
    return z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))


def _log_abs_expm1(a):
    """``log |e^a - 1|`` without overflow (``-inf`` at ``a = 0``)."""
    if a == 0.0:
        return -math.inf
    if a > 0:
        return a + math.log1p(-math.exp(-a))
    return math.log(-math.expm1(a))


def log10_bound(K, xnorm, delta0):
    """``log10((K-1) e^{delta0} ||x||)``: U-max's gradient bound (docs/math.md section 3)."""
    return (math.log(K - 1) + delta0) / _LN10 + np.log10(xnorm)


def replay(X, y, K, method, lr, epochs=1, lr_decay=0.9, delta0=1.0, seed=0):
    """Run explicit SGD step by step and record the gradient magnitude of every step.

    Parameters
    ----------
    X : scipy.sparse matrix or 2-D array (N, D)
    y : 1-D integer labels in ``0..K-1``
    K : int >= 2, number of classes
    method : one of :data:`REPLAY_METHODS`
    lr : float > 0, learning rate (per-datapoint units); epoch ``e`` uses
        ``lr * lr_decay**(e-1)``
    epochs : int >= 1
    lr_decay : float in (0, 1]
    delta0 : float > 0, U-max's reset threshold
    seed : int, seeds the data order (a permutation per epoch) and the classes

    Returns
    -------
    pandas.DataFrame, one row per step taken: ``epoch`` (1-based), ``step`` (0-based
    within the epoch), ``i``, ``k``, ``log10_grad`` (log10 of the gradient norm above,
    evaluated after a U-max reset), ``log10_bound`` (``log10((K-1) e^{delta0}||x_i||)``),
    ``reset`` (U-max reset before the step), ``finite`` (False only on the last row of
    a run that overflowed).
    """
    if method not in REPLAY_METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(REPLAY_METHODS)}")
    if not (isinstance(K, (int, np.integer)) and K >= 2):
        raise ValueError(f"K must be an integer >= 2; got {K!r}")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0; got {lr!r}")
    if not (isinstance(epochs, (int, np.integer)) and epochs >= 1):
        raise ValueError(f"epochs must be an integer >= 1; got {epochs!r}")
    if not (delta0 > 0):
        raise ValueError(f"delta0 must be > 0; got {delta0!r}")
    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    N, D = X.shape
    if y.shape != (N,):
        raise ValueError(f"y must have shape ({N},) to match X; got {y.shape}")
    if y.min() < 0 or y.max() >= K:
        raise ValueError(f"labels in y must lie in 0..{K - 1}")
    raman = method.startswith("raman")
    umax = method.endswith("umax")
    W = np.zeros((K, D))
    u = np.zeros(N)
    xnorm = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    logK1 = math.log(K - 1)
    rng = np.random.default_rng(seed)
    rows = {c: [] for c in ("epoch", "step", "i", "k", "log10_grad", "log10_bound",
                            "reset", "finite")}
    for e in range(1, epochs + 1):
        eta = lr * lr_decay ** (e - 1)
        order = rng.permutation(N)
        ks = rng.integers(0, K - 1, size=N)
        for t in range(N):
            i = int(order[t])
            yi = int(y[i])
            k = int(ks[t]) + (1 if ks[t] >= yi else 0)
            lo, hi = X.indptr[i], X.indptr[i + 1]
            cols, x = X.indices[lo:hi], X.data[lo:hi]
            sk, sy = float(W[k, cols] @ x), float(W[yi, cols] @ x)
            reset = False
            if raman:
                target = np.logaddexp(sy, sk)
            else:
                target = _softplus(sk - sy)
            if umax and u[i] < target - delta0:
                u[i] = target
                reset = True
            ui = u[i]
            if raman:
                zk, zy = sk - ui, sy - ui
                logg = max(logK1 + zk, _log_abs_expm1(zy))
            else:
                zk = sk - sy - ui
                zy = 0.0
                logg = logK1 + zk
            lx = math.log(xnorm[i]) if xnorm[i] > 0 else -math.inf
            rows["epoch"].append(e)
            rows["step"].append(t)
            rows["i"].append(i)
            rows["k"].append(k)
            rows["log10_grad"].append((logg + lx) / _LN10 if np.isfinite(lx) else -np.inf)
            rows["log10_bound"].append(log10_bound(K, xnorm[i], delta0) if xnorm[i] > 0
                                       else -np.inf)
            rows["reset"].append(reset)
            ok = zk <= _EXP_MAX and zy <= _EXP_MAX
            if ok:
                g = (K - 1) * math.exp(zk)
                if raman:
                    gy = math.exp(zy) - 1.0          # grad_{w_y} = (e^{s_y - ubar} - 1) x
                    du = 1.0 - math.exp(zy) - g
                    W[k, cols] -= eta * g * x
                    W[yi, cols] -= eta * gy * x
                    u[i] = ui - eta * du
                else:
                    du = 1.0 - math.exp(-ui) - g
                    W[k, cols] -= eta * g * x
                    W[yi, cols] += eta * g * x
                    u[i] = max(ui - eta * du, 0.0)
                ok = (math.isfinite(u[i]) and np.isfinite(W[k, cols]).all()
                      and np.isfinite(W[yi, cols]).all())
            rows["finite"].append(ok)
            if not ok:
                return pd.DataFrame(rows)
    return pd.DataFrame(rows)
