"""Timing helpers of notebook ``07-runtime-and-scaling``: seconds per epoch and per
datapoint through :func:`scalable_softmax.fit.fit`, and the cost as ``K`` grows.

* :func:`synthetic_sparse` -- random CSR data of a chosen shape (exactly ``nnz``
  distinct columns per row, unit-norm rows, uniform labels), for the ``K`` scan;
* :func:`epoch_seconds` -- per-epoch training seconds from a ``fit`` history (whose
  ``seconds`` column is cumulative and excludes compilation and evaluation);
* :func:`time_fit` -- time a few epochs of one method, optionally on the first
  ``rows`` datapoints only (for the O(K)-per-datapoint exact softmax SGD at large
  ``K``) and with learning-rate reductions when a run diverges;
* :func:`rows_for_target` -- how many datapoints give an epoch of a target duration,
  from a pilot measurement;
* :func:`loglog_slope` -- least-squares slope of ``log y`` against ``log x`` (1 for a
  cost linear in ``K``, 0 for a cost independent of ``K``);
* :func:`machine_info` -- what the timings were measured on.

Nothing here asserts on a timing: the machine is shared and timings are noisy. The
notebook compares methods measured side by side in one run.
"""
from __future__ import annotations

import datetime
import math
import os
import platform

import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = ["synthetic_sparse", "epoch_seconds", "time_fit", "rows_for_target",
           "loglog_slope", "machine_info"]


def _check_int(name, v, lo):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}; got {v!r}")
    return int(v)


def synthetic_sparse(n_rows, n_features, nnz_per_row, n_classes, seed=0):
    """Random sparse data: ``n_rows`` rows, each with exactly ``nnz_per_row`` distinct
    uniformly placed columns among ``n_features``, values ``U(0.1, 1.1)`` scaled to unit
    L2 norm; labels uniform on ``0..n_classes-1``.

    Parameters
    ----------
    n_rows, n_features, nnz_per_row, n_classes : int
        ``N >= 1``, ``D >= 1``, ``1 <= nnz_per_row <= D``, ``K >= 2``.
    seed : int
        Seed of ``numpy.random.default_rng``; the same arguments give the same data.

    Returns
    -------
    X : scipy.sparse.csr_matrix, float64, ``N x D``, canonical (sorted indices)
    y : ndarray of int64, ``(N,)``

    Raises
    ------
    ValueError
        On a non-integer or out-of-range size (``nnz_per_row > n_features`` included).
    """
    N = _check_int("n_rows", n_rows, 1)
    D = _check_int("n_features", n_features, 1)
    nnz = _check_int("nnz_per_row", nnz_per_row, 1)
    K = _check_int("n_classes", n_classes, 2)
    if nnz > D:
        raise ValueError(f"nnz_per_row = {nnz} exceeds n_features = {D}: a row cannot have "
                         "more distinct non-zero columns than there are columns")
    rng = np.random.default_rng(seed)
    if 2 * nnz > D:
        # dense-ish rows: a random subset per row from a permutation of all columns
        cols = np.argsort(rng.random((N, D)), axis=1)[:, :nnz]
        cols.sort(axis=1)
    else:
        # draw with replacement, redraw the rows that have a repeated column
        cols = rng.integers(0, D, size=(N, nnz))
        cols.sort(axis=1)
        bad = np.nonzero((np.diff(cols, axis=1) == 0).any(axis=1))[0] if nnz > 1 else []
        while len(bad):
            redraw = np.sort(rng.integers(0, D, size=(len(bad), nnz)), axis=1)
            cols[bad] = redraw
            still = (np.diff(redraw, axis=1) == 0).any(axis=1)
            bad = bad[still]
    vals = rng.random((N, nnz)) + 0.1
    vals /= np.sqrt((vals * vals).sum(axis=1, keepdims=True))
    X = sp.csr_matrix((vals.ravel(), cols.ravel().astype(np.int32),
                       np.arange(N + 1, dtype=np.int64) * nnz), shape=(N, D))
    X.has_sorted_indices = True
    y = rng.integers(0, K, size=N).astype(np.int64)
    return X, y


def epoch_seconds(history):
    """Training seconds of each epoch run, from a ``fit`` history.

    ``history["seconds"]`` is cumulative (epoch 0 = 0), so this is its first difference
    over the epochs ``>= 1``.

    Parameters
    ----------
    history : pandas.DataFrame with columns ``epoch`` and ``seconds``

    Returns
    -------
    ndarray of float, one entry per epoch run (empty if only epoch 0 is present)
    """
    if not isinstance(history, pd.DataFrame) or not {"epoch", "seconds"} <= set(history):
        raise ValueError("history must be a fit() history DataFrame with columns "
                         "'epoch' and 'seconds'")
    h = history.sort_values("epoch")
    return np.diff(h["seconds"].to_numpy(dtype=float))


def time_fit(X, y, method, lr, *, K, epochs=3, rows=None, seed=0, lr_retries=0,
             lr_retry_factor=0.1, **fit_options):
    """Time ``epochs`` epochs of ``method`` with :func:`scalable_softmax.fit.fit`
    (no evaluation, no progress bar) and summarise the per-epoch training seconds.

    Parameters
    ----------
    X, y : training data (as for ``fit``).
    method : str, a ``fit`` method name.
    lr : float, initial learning rate.
    K : int, number of classes (passed to ``fit``, so that a row subset keeps ``K``).
    epochs : int >= 1, epochs timed (the median is reported).
    rows : None or int >= 1; train on the first ``rows`` datapoints only (all when
        None or ``rows >= N``). Per-datapoint costs then extrapolate to the full set.
    seed : int, ``fit``'s seed.
    lr_retries : int >= 0; when a run diverges, rerun with ``lr * lr_retry_factor``
        up to this many times (the result says which rate was used).
    lr_retry_factor : float in (0, 1).
    **fit_options : further ``fit`` arguments (``lr_decay``, ``batch_size``,
        ``n_sampled``, method options).

    Returns
    -------
    dict with keys ``method``, ``lr_requested``, ``lr`` (rate of the reported run),
    ``rows``, ``epochs`` (epochs run), ``steps_per_epoch``, ``seconds_per_epoch``
    (median over epochs), ``seconds_min``, ``seconds_max``, ``seconds_per_datapoint``
    (= ``seconds_per_epoch / rows``), ``seconds_per_step``, ``diverged`` (of the
    reported run) and ``retries``.
    """
    from scalable_softmax.fit import fit

    N = X.shape[0]
    if rows is not None:
        rows = _check_int("rows", rows, 1)
    _check_int("lr_retries", lr_retries, 0)
    if not (0 < lr_retry_factor < 1):
        raise ValueError(f"lr_retry_factor must lie in (0, 1); got {lr_retry_factor!r}")
    n = N if rows is None else min(rows, N)
    Xs, ys = (X, y) if n == N else (X[:n], np.asarray(y)[:n])
    rate = float(lr)
    for attempt in range(lr_retries + 1):
        res = fit(Xs, ys, method, lr=rate, epochs=epochs, seed=seed, eval_epochs=[],
                  progress=False, K=K, **fit_options)
        if not res.diverged or attempt == lr_retries:
            break
        rate *= lr_retry_factor
    h = res.history
    secs = epoch_seconds(h)
    steps = np.diff(h.sort_values("epoch")["steps"].to_numpy())
    if res.diverged:            # the last (diverging) epoch stopped early: not a full epoch
        secs, steps = secs[:-1], steps[:-1]
    if len(secs):
        med = float(np.median(secs))
        spe = int(np.median(steps))
        out = dict(seconds_per_epoch=med, seconds_min=float(secs.min()),
                   seconds_max=float(secs.max()), steps_per_epoch=spe,
                   seconds_per_datapoint=med / n,
                   seconds_per_step=med / spe if spe else math.nan)
    else:
        out = dict(seconds_per_epoch=math.nan, seconds_min=math.nan, seconds_max=math.nan,
                   steps_per_epoch=0, seconds_per_datapoint=math.nan,
                   seconds_per_step=math.nan)
    res_div = bool(res.diverged)
    del res                      # release W (up to K x D floats) before the next run
    return dict(method=method, lr_requested=float(lr), lr=rate, rows=n, epochs=len(secs),
                diverged=res_div, retries=attempt, **out)


def rows_for_target(seconds_per_datapoint, target_seconds, n_max, multiple=100,
                    min_rows=None):
    """Number of datapoints whose epoch should take about ``target_seconds``.

    ``round(target / seconds_per_datapoint)`` rounded down to a multiple of
    ``multiple`` (a whole number of minibatches), at least ``min_rows`` (default
    ``multiple``) and at most ``n_max``.

    Raises
    ------
    ValueError
        If ``seconds_per_datapoint`` or ``target_seconds`` is not a finite number > 0.
    """
    for nm, v in (("seconds_per_datapoint", seconds_per_datapoint),
                  ("target_seconds", target_seconds)):
        if not (isinstance(v, (int, float, np.floating)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{nm} must be a finite number > 0; got {v!r}")
    n_max = _check_int("n_max", n_max, 1)
    multiple = _check_int("multiple", multiple, 1)
    lo = multiple if min_rows is None else _check_int("min_rows", min_rows, 1)
    n = int(target_seconds / seconds_per_datapoint) // multiple * multiple
    return int(min(n_max, max(lo, n)))


def loglog_slope(x, y):
    """Least-squares slope of ``log y`` against ``log x``: the exponent ``a`` of a
    power law ``y ~ c x^a`` (1 = linear in ``x``, 0 = independent of it).

    Raises
    ------
    ValueError
        With fewer than two points, different lengths, or a value that is not finite
        and > 0, or all ``x`` equal.
    """
    x = np.asarray(x, dtype=float).ravel()
    y = np.asarray(y, dtype=float).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length; got {x.size} and {y.size}")
    if x.size < 2:
        raise ValueError("a slope needs at least two points")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y)) and np.all(x > 0)
            and np.all(y > 0)):
        raise ValueError("x and y must be finite and > 0 for a log-log slope")
    lx, ly = np.log(x), np.log(y)
    dx = lx - lx.mean()
    ss = float(dx @ dx)
    if ss == 0.0:
        raise ValueError("all x are equal: the slope is undefined")
    return float(dx @ (ly - ly.mean()) / ss)


def machine_info():
    """CPU model, core count, numba threads, library versions, UTC date and the load
    average (the machine is shared: a high load means noisier timings)."""
    import numba
    import scipy

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return dict(cpu_model=cpu, cpus=os.cpu_count(), numba_threads=numba.get_num_threads(),
                python=platform.python_version(), numpy=np.__version__,
                scipy=scipy.__version__, numba=numba.__version__,
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                load_average=[round(v, 2) for v in os.getloadavg()])
