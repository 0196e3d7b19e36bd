"""Non-parametric softmax estimation with the One-vs-Each bound (Titsias 2016, section 2, 4.1).

The model is ``p(y = k) = softmax(f)_k`` with one free parameter ``f_k`` per value. For
data ``y_1..y_N`` the One-vs-Each lower bound on the log likelihood is

``F(f) = sum_n sum_{m != y_n} log sigma(f_{y_n} - f_m)``.

:func:`ove_sgd` maximises it doubly stochastically (minibatch of data draws, a few sampled
other values per draw). The random numbers are drawn in Python (``numpy.random.Generator``)
and passed to the numba kernel, so :func:`_ove_steps_reference` (plain NumPy) reproduces
the kernel exactly and is the test oracle.
"""
from __future__ import annotations

import numba
import numpy as np
from scipy.special import expit, softmax

from scalable_softmax._jit import JIT

__all__ = ["ove_sgd"]


@numba.njit(**JIT)
def _ove_steps(f, y, neg, start, n_iter, b, S, lr, wbuf):
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


def _ove_steps_reference(f, y, neg, start, n_iter, b, S, lr):
    """Plain NumPy version of :func:`_ove_steps` (returns a new ``f``)."""
    f = np.array(f, dtype=np.float64)
    for t in range(n_iter):
        yy = y[start + t * b: start + (t + 1) * b]
        mm = neg[start + t * b: start + (t + 1) * b, :S]
        w = lr * expit(f[mm] - f[yy][:, None])
        grad = np.zeros_like(f)
        np.add.at(grad, yy, w.sum(axis=1))
        np.add.at(grad, mm.ravel(), -w.ravel())
        f += grad
    return f


def _draw_others(rng, y, K, S):
    """``S`` values per draw, uniform over ``{0..K-1} minus {y_j}``, with replacement."""
    m = rng.integers(0, K - 1, size=(len(y), S), dtype=np.int64)
    return m + (m >= y[:, None])


def ove_sgd(y, K, batch=100, samples=10, lr0=None, decay=0.9, iterations=200_000,
            record_every=1000, target=None, seed=0, progress=False):
    """Doubly stochastic maximisation of the non-parametric OVE bound.

    Epoch ``e`` (0-based) is ``len(y) // batch`` iterations over a fresh permutation of
    the data, learning rate ``lr0 * decay**e``; within a step the ``batch`` draws each
    bring ``samples`` other values drawn uniformly (with replacement) from the ``K - 1``
    values different from their own. Starts at ``f = 0``.

    Parameters
    ----------
    y : ndarray of int, values in ``0..K-1``
    K : int, number of values
    batch, samples : int, minibatch size ``b`` and sampled other values per draw
    lr0 : float, initial learning rate (default ``0.5 / batch``, Titsias section 4.1)
    decay : float, learning-rate factor per epoch
    iterations : int, total SGD steps
    record_every : int, record ``||softmax(f) - target||_1`` every this many steps
    target : ndarray (K,), optional; the probabilities the error is measured against
    seed : int
    progress : bool, show a progress bar over the iterations
        (:func:`scalable_softmax.progress.tqdm`)

    Returns
    -------
    f : ndarray (K,); steps : ndarray of int; errors : ndarray (empty if no target)
    """
    y = np.asarray(y)
    if y.ndim != 1 or len(y) == 0 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError("ove_sgd: y must be a non-empty 1-d integer array")
    if K < 2 or y.min() < 0 or y.max() >= K:
        raise ValueError(f"ove_sgd: y must lie in 0..K-1 with K >= 2 (K={K})")
    if batch < 1 or samples < 1 or iterations < 0 or record_every < 1 or batch > len(y):
        raise ValueError("ove_sgd: batch (<= len(y)), samples, record_every must be >= 1, "
                         "iterations >= 0")
    if target is not None:
        target = np.asarray(target, dtype=np.float64)
        if target.shape != (K,):
            raise ValueError(f"ove_sgd: target must have shape ({K},)")
    lr0 = 0.5 / batch if lr0 is None else float(lr0)
    y = y.astype(np.int64)
    rng = np.random.default_rng(seed)
    per_epoch = len(y) // batch
    f = np.zeros(K)
    wbuf = np.empty((batch, samples))
    steps, errors = [0], []
    if target is not None:
        errors.append(np.abs(softmax(f) - target).sum())
    done, epoch = 0, 0
    from scalable_softmax.progress import tqdm
    bar = tqdm(total=iterations, desc="doubly stochastic OVE", unit="it", unit_scale=True,
               disable=not progress, leave=False)
    while done < iterations:
        order = y[rng.permutation(len(y))][: per_epoch * batch]
        neg = _draw_others(rng, order, K, samples)
        lr = lr0 * decay ** epoch
        pos = 0
        while pos < per_epoch and done < iterations:
            n = min(record_every - done % record_every, per_epoch - pos, iterations - done)
            _ove_steps(f, order, neg, pos * batch, n, batch, samples, lr, wbuf)
            pos += n
            done += n
            bar.update(n)
            if done % record_every == 0 or done == iterations:
                steps.append(done)
                if target is not None:
                    errors.append(np.abs(softmax(f) - target).sum())
        epoch += 1
    bar.close()
    return f, np.array(steps), np.array(errors)
