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
* :func:`machine_info` -- what the timings were measured on;
* :func:`peak_rss_bytes` / :func:`reset_peak_rss` -- this process's peak resident set
  size, and its reset (Linux), so that jobs run one after another in one process each
  report their own peak.

Nothing here asserts on a timing: the machine is shared and timings are noisy. The
notebook compares methods measured side by side in one run.
"""
from __future__ import annotations

import datetime
import math
import os
import platform
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scalable_softmax.protocols import LIBRARY_DEFAULTS

__all__ = ["synthetic_sparse", "epoch_seconds", "time_fit", "rows_for_target",
           "loglog_slope", "cpu_model", "machine_info", "RUNS_COLUMNS", "SCAN_COLUMNS",
           "scan_columns",
           "start_rate", "scan_weight_gb", "time_reference", "time_datasets",
           "dataset_table", "machine_note", "scan_k", "check_runs", "check_scan",
           "check_written", "plot_datasets", "plot_k_scan", "found_lines",
           "peak_rss_bytes", "reset_peak_rss"]


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
    from scalable_softmax.fit import DivergenceWarning, fit

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
        with warnings.catch_warnings():   # a diverging pilot is retried at a lower rate
            warnings.simplefilter("ignore", DivergenceWarning)
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


def peak_rss_bytes() -> int | None:
    """This process's peak resident set size in bytes since it started or since the
    last :func:`reset_peak_rss` (``VmHWM`` of ``/proc/self/status``); None where the
    system does not report it."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_bytes() -> int | None:
    """This process's resident set size now, in bytes (``VmRSS`` of
    ``/proc/self/status``); None where the system does not report it."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset this process's peak resident set size to its current one (Linux: ``5``
    written to ``/proc/self/clear_refs``), so that :func:`peak_rss_bytes` then reports
    the peak of what runs next. True if the reset took effect, False where the system
    does not offer it (the peak then stays the process's since its start)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; else :func:`platform.processor`, else
    ``"unknown"``)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info():
    """CPU model, core count, numba threads, library versions, UTC date and the load
    average (the machine is shared: a high load means noisier timings). The benchmarks
    (``benchmarks/``) and ``tables/PROVENANCE.md`` describe the machine with it."""
    import numba
    import scipy

    return dict(cpu_model=cpu_model(), cpus=os.cpu_count(), numba_threads=numba.get_num_threads(),
                python=platform.python_version(), numpy=np.__version__,
                scipy=scipy.__version__, numba=numba.__version__,
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                load_average=[round(v, 2) for v in os.getloadavg()])


# ---------------------------------------------------------------------------
# Notebook 07's two studies: seconds per epoch per data set, and the K scan
# ---------------------------------------------------------------------------

#: columns of the table of every timed run of part 1 (``07-runtime-and-scaling-runs``)
RUNS_COLUMNS = ["dataset", "synthetic", "K", "N", "method", "lr_requested", "lr", "retries",
                "diverged", "rows", "extrapolated", "epochs", "steps_per_epoch",
                "seconds_per_epoch", "seconds_min", "seconds_max", "us_per_datapoint",
                "seconds_per_epoch_full"]

#: columns of the K scan's table (``07-runtime-and-scaling-k``) after the ratio and slopes
#: (the ratio column is named after the scan's first method: ``ratio_to_<method>``)
SCAN_COLUMNS = ["data", "method", "K", "W_GB", "rows", "extrapolated", "epochs",
                "steps_per_epoch", "seconds_per_epoch", "seconds_per_step",
                "us_per_datapoint", "ratio_to_{first}", "slope_all_K", "slope_two_largest_K"]


def scan_columns(first_method):
    """:data:`SCAN_COLUMNS` with the ratio column of a scan whose first method is
    ``first_method``."""
    return [c.format(first=first_method) for c in SCAN_COLUMNS]


def start_rate(dataset, method, learning_rate="paper", reference="softmax-sgd",
               reference_lr=0.1):
    """The initial learning rate of a timed run.

    ``reference`` (the O(KD) exact method, which the paper does not run) takes
    ``reference_lr``; otherwise ``learning_rate == "paper"`` gives the paper's Table 2
    rate of ``dataset`` (a ``-surrogate`` takes the rate of the set it imitates), and a
    number is that rate for every run.
    """
    if method == reference:
        return reference_lr
    if learning_rate == "paper":
        from scalable_softmax.repro.fagan.paper import PAPER_TABLE2
        base = dataset.removesuffix("-surrogate")
        if base not in PAPER_TABLE2 or method not in PAPER_TABLE2[base]:
            raise ValueError(f"the paper's Table 2 has no rate for data set {dataset!r} and "
                             f"method {method!r}: pass learning_rate as a number")
        return PAPER_TABLE2[base][method]
    return float(learning_rate)


def scan_weight_gb(Ks, n_features, max_weight_gb):
    """Gigabytes of the largest float64 ``K x D`` weight matrix of a K scan, refused when
    it exceeds ``max_weight_gb`` (the machine is shared)."""
    big_w = max(Ks) * n_features * 8 / 1e9
    if big_w > max_weight_gb:
        raise ValueError(f"the scan's largest W (K = {max(Ks)}, D = {n_features}) needs "
                         f"{big_w:.1f} GB > max_weight_gb = {max_weight_gb}: lower scan_D or "
                         "the largest K, or raise max_weight_gb")
    return big_w


def time_reference(X, y, K, *, method="softmax-sgd", lr=0.1, target_seconds=1.0,
                   pilot_rows=100, epochs=3, seed=0,
                   lr_decay=LIBRARY_DEFAULTS["lr_decay"]):
    """Time the O(KD) reference method on a row subset sized by a one-epoch pilot.

    The pilot runs one epoch on ``pilot_rows`` rows; the timed run then uses the first
    :func:`rows_for_target` rows (whole minibatches of 100, all rows if they fit) whose
    epoch should take about ``target_seconds``. Returns :func:`time_fit`'s dict.
    """
    pilot = time_fit(X, y, method, lr, K=K, epochs=1, rows=pilot_rows, seed=seed,
                     lr_decay=lr_decay)
    rows = rows_for_target(pilot["seconds_per_datapoint"], target_seconds, X.shape[0])
    return time_fit(X, y, method, lr, K=K, epochs=epochs, rows=rows, seed=seed,
                    lr_decay=lr_decay)


def time_datasets(datasets, methods, *, reference="softmax-sgd", reference_options=None,
                  learning_rate="paper", u_init="logK", lr_retries=4, epochs=3, seed=0,
                  lr_decay=LIBRARY_DEFAULTS["lr_decay"], progress=True):
    """Part 1 of notebook 07: time every method and then the reference on each data set,
    back to back, the data set loaded once.

    The methods run at :func:`start_rate` (rerun at 10x smaller rates up to
    ``lr_retries`` times when they overflow); the reference through
    :func:`time_reference` with ``reference_options`` (``lr``, ``target_seconds``,
    ``pilot_rows``).

    Returns
    -------
    runs : pandas.DataFrame, one row per run: :func:`time_fit`'s columns, ``name``, the
        data set's ``dataset`` (shown name), ``synthetic``, ``K``, ``N``, ``D``,
        ``nnz_per_row``, and ``extrapolated`` (timed on fewer rows than ``N``),
        ``seconds_per_epoch_full`` (per datapoint x ``N``), ``us_per_datapoint``.
    info : dict, data-set name -> its shape (``dataset``, ``synthetic``, ``K``, ``N``,
        ``D``, ``nnz_per_row``).
    """
    import time

    from scalable_softmax.data import load_dataset
    from scalable_softmax.progress import tqdm

    ref = dict(reference_options or {})
    ref.setdefault("lr", 0.1)
    run_rows, info = [], {}
    bar = tqdm(total=len(datasets) * (len(methods) + 1), desc="part 1 timings",
               disable=not progress)
    for name in datasets:
        t0 = time.perf_counter()
        ds = load_dataset(name, "train")
        N, D = ds.X.shape
        info[name] = dict(dataset=f"{name} (SYNTHETIC)" if ds.synthetic else name,
                          synthetic=bool(ds.synthetic), K=ds.K, N=N, D=D,
                          nnz_per_row=ds.X.nnz / N)
        for method in list(methods) + [reference]:
            if method == reference:
                r = time_reference(ds.X, ds.y, ds.K, method=reference, epochs=epochs,
                                   seed=seed, lr_decay=lr_decay, **ref)
            else:
                lr = start_rate(name, method, learning_rate, reference, ref["lr"])
                r = time_fit(ds.X, ds.y, method, lr, K=ds.K, epochs=epochs, seed=seed,
                             lr_decay=lr_decay, lr_retries=lr_retries, lr_retry_factor=0.1,
                             u_init=u_init)
            r["name"] = name
            run_rows.append(r)
            bar.update(1)
        del ds
        bar.write(f"{name}: {time.perf_counter() - t0:.1f} s")
    bar.close()
    runs = pd.DataFrame(run_rows)
    for col in ["dataset", "synthetic", "K", "N", "D", "nnz_per_row"]:
        runs[col] = [info[n][col] for n in runs.name]
    runs["extrapolated"] = runs.rows < runs.N
    runs["seconds_per_epoch_full"] = runs.seconds_per_datapoint * runs.N
    runs["us_per_datapoint"] = runs.seconds_per_datapoint * 1e6
    return runs, info


def dataset_table(runs, info, datasets, methods, reference="softmax-sgd"):
    """The table of notebook 07's part 1: one row per data set (its shape), the seconds
    per epoch over the whole training set of every method and the reference
    (``<method>_s_per_epoch``), the reference's ``_extrapolated`` and ``_rows_timed``,
    and, when U-max was timed, ``<reference>_over_umax``: its cost per datapoint over
    U-max's."""
    all_methods = list(methods) + [reference]
    wide = runs.pivot(index="name", columns="method", values="seconds_per_epoch_full")
    wide = wide.loc[datasets, all_methods]
    table = pd.DataFrame([info[n] for n in datasets])
    table["nnz_per_row"] = table.nnz_per_row.round(1)
    for m in all_methods:
        table[f"{m}_s_per_epoch"] = wide[m].to_numpy()
    ref = runs[runs.method == reference].set_index("name").loc[datasets]
    table[f"{reference}_extrapolated"] = ref.extrapolated.to_numpy()
    table[f"{reference}_rows_timed"] = ref.rows.to_numpy()
    if "umax" in methods:
        um = runs[runs.method == "umax"].set_index("name").loc[datasets]
        table[f"{reference}_over_umax"] = (ref.seconds_per_datapoint
                                           / um.seconds_per_datapoint).to_numpy()
    return table


def machine_note(machine):
    """The sentence on the machine that every table of notebook 07 carries (from
    :func:`machine_info`)."""
    load_txt = ", ".join(f"{v:.2f}" for v in machine["load_average"])
    return (f"Machine: {machine['cpu_model']}, {machine['cpus']} cores (shared), numba "
            f"{machine['numba']}, {machine['date']}, load average (1, 5, 15 min) at start "
            f"{load_txt}. Timings are noisy; compare ratios within a row.")


def scan_k(Ks, methods, *, n_rows, n_features, nnz_per_row, lr, reference="softmax-sgd",
           reference_options=None, epochs=3, seed=0, lr_decay=LIBRARY_DEFAULTS["lr_decay"],
           progress=True):
    """Part 2 of notebook 07: seconds per datapoint as ``K`` grows, on
    :func:`synthetic_sparse` data (the same seed at every ``K``), the methods back to
    back at one rate ``lr``; the reference through :func:`time_reference`.

    Returns
    -------
    scan : pandas.DataFrame, one row per (K, method): :func:`time_fit`'s columns, ``K``,
        ``us_per_datapoint``, ``extrapolated``, ``W_GB``, ``ratio_to_<first method>``,
        ``slope_all_K``, ``slope_two_largest_K`` and a leading ``data`` column.
    slopes : dict, method -> ``{"all_K": ..., "two_largest_K": ...}``, the
        :func:`loglog_slope` of seconds per datapoint against ``K``.
    """
    import time

    from scalable_softmax.progress import tqdm

    ref = dict(reference_options or {})
    scan = []
    bar = tqdm(total=len(Ks) * len(methods), desc="part 2 K scan", disable=not progress)
    for K in Ks:
        t0 = time.perf_counter()
        X, y = synthetic_sparse(n_rows, n_features, nnz_per_row, K, seed=seed)
        for method in methods:
            if method == reference:
                r = time_reference(X, y, K, method=reference, epochs=epochs, seed=seed,
                                   lr_decay=lr_decay, **ref)
            else:
                r = time_fit(X, y, method, lr, K=K, epochs=epochs, seed=seed,
                             lr_decay=lr_decay)
            r["K"] = K
            scan.append(r)
            bar.update(1)
        del X, y
        bar.write(f"K={K:,}: {time.perf_counter() - t0:.1f} s")
    bar.close()
    scan = pd.DataFrame(scan)
    scan["us_per_datapoint"] = scan.seconds_per_datapoint * 1e6
    scan["extrapolated"] = scan.rows < n_rows
    scan["W_GB"] = scan.K * n_features * 8 / 1e9
    base = scan[scan.method == methods[0]].set_index("K").seconds_per_datapoint
    scan[f"ratio_to_{methods[0]}"] = (scan.seconds_per_datapoint.to_numpy()
                                      / base.loc[scan.K].to_numpy())
    slopes = {}
    for m in methods:
        s = scan[scan.method == m].sort_values("K")
        slopes[m] = dict(all_K=loglog_slope(s.K, s.seconds_per_datapoint),
                         two_largest_K=loglog_slope(s.K.iloc[-2:],
                                                    s.seconds_per_datapoint.iloc[-2:]))
    scan["slope_all_K"] = [slopes[m]["all_K"] for m in scan.method]
    scan["slope_two_largest_K"] = [slopes[m]["two_largest_K"] for m in scan.method]
    scan.insert(0, "data", f"SYNTHETIC D={n_features}, {nnz_per_row} nnz/row, N={n_rows}")
    return scan, slopes


def check_runs(runs, *, epochs, reference="softmax-sgd"):
    """The invariants of part 1's timed runs (raise ``AssertionError``): every run timed
    ``epochs`` epochs with positive finite times, min <= median <= max, only the
    reference on a row subset, the full-set seconds scaled per datapoint, and no rate
    above the requested one."""
    assert (runs.epochs == epochs).all(), "a run timed fewer epochs than asked"
    for col in ["seconds_per_epoch", "seconds_min", "seconds_max", "seconds_per_datapoint",
                "seconds_per_epoch_full"]:
        assert np.isfinite(runs[col]).all() and (runs[col] > 0).all(), col
    assert (runs.seconds_min <= runs.seconds_per_epoch).all()
    assert (runs.seconds_per_epoch <= runs.seconds_max).all()
    others = runs.method != reference
    assert (runs.rows[others] == runs.N[others]).all()
    np.testing.assert_allclose(runs.seconds_per_epoch_full,
                               runs.seconds_per_epoch * runs.N / runs.rows)
    assert (runs.lr <= runs.lr_requested).all()


def check_scan(scan, slopes, *, epochs):
    """The invariants of the K scan (raise ``AssertionError``): every run timed
    ``epochs`` epochs with positive finite times, and each slope is numpy's
    least-squares fit of log seconds per datapoint against log K."""
    assert (scan.epochs == epochs).all(), "a scan run timed fewer epochs than asked"
    for col in ["seconds_per_epoch", "seconds_per_datapoint", "seconds_per_step"]:
        assert np.isfinite(scan[col]).all() and (scan[col] > 0).all(), col
    for m, sl in slopes.items():
        s = scan[scan.method == m].sort_values("K")
        fit = np.polyfit(np.log(s.K), np.log(s.seconds_per_datapoint), 1)[0]
        assert math.isclose(sl["all_K"], fit, rel_tol=1e-9, abs_tol=1e-12), m


def check_written(pairs):
    """Each ``(path, DataFrame)`` of a written table (a ``.csv`` or its ``.md``) holds
    what was shown: the CSV the same columns, rows and floats (to 1e-12), the Markdown
    one table row per row, and the word SYNTHETIC where a row is synthetic."""
    from pathlib import Path

    for path, df in pairs:
        path = Path(path)
        if path.suffix == ".csv":
            on_disk = pd.read_csv(path)
            assert list(on_disk.columns) == list(df.columns) and len(on_disk) == len(df), path
            for col in df.columns:
                if pd.api.types.is_float_dtype(df[col]):
                    np.testing.assert_allclose(on_disk[col], df[col], rtol=1e-12, err_msg=col)
        else:
            text = path.read_text()
            assert text.count("\n|") == len(df) + 2, path  # header, rule, rows
            assert "SYNTHETIC" in text or not (
                df.get("synthetic", pd.Series([False])).any()), path


def plot_datasets(runs, info, datasets, methods, reference="softmax-sgd"):
    """Figure of part 1: seconds per epoch (log scale) by data set ordered by ``K``, one
    line per method; the reference's extrapolated points hollow. Returns the figure."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    order = sorted(datasets, key=lambda n: info[n]["K"])
    xpos = np.arange(len(order))
    fig, ax = plt.subplots(figsize=(style.FIG_WIDTH, 3.6))
    for m in style.ordered(list(methods) + [reference]):
        sub = runs[runs.method == m].set_index("name").loc[order]
        ax.plot(xpos, sub.seconds_per_epoch_full,
                **style.line(m, lw=1.2, ms=8 if m == reference else 5,
                             label=style.label(m) + (" (O(KD) per datapoint)"
                                                     if m == reference else "")))
        if m == reference and sub.extrapolated.any():
            ex = sub.extrapolated.to_numpy()
            ax.plot(xpos[ex], sub.seconds_per_epoch_full[ex], ls="none",
                    marker=style.marker(m), ms=8, mfc="white", mec=style.color(m),
                    label="extrapolated from a row subset")
    ax.set_yscale("log")
    ax.set_xticks(xpos)
    ax.set_xticklabels([f"{n.replace('-surrogate', '')}\n"
                        f"{'SYNTHETIC' if info[n]['synthetic'] else 'real'}"
                        f"\nK={info[n]['K']:,}\nN={info[n]['N']:,}" for n in order],
                       fontsize=7.5)
    ax.grid(False, axis="x")
    ax.set_ylabel("training seconds per epoch (median)")
    ax.set_title("Seconds per epoch: the sampled O(D) methods against exact softmax SGD")
    style.legend_below(fig, ncol=4)
    return fig


def plot_k_scan(scan, slopes, *, reference="softmax-sgd", n_features, nnz_per_row):
    """Figure of part 2: microseconds per datapoint against ``K`` (log-log), one line per
    method labelled with its slopes, the reference's subset-timed points hollow, and a
    slope-1 guide through the reference's largest-K point. Returns the figure."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    methods = list(slopes)
    fig, ax = plt.subplots(figsize=(style.FIG_WIDTH, 3.7))
    for m in style.ordered(methods):
        s = scan[scan.method == m].sort_values("K")
        ref_m = m == reference
        ax.plot(s.K, s.us_per_datapoint,
                **style.line(m, ms=8 if ref_m else 5,
                             label=f"{style.label(m)}: slope {slopes[m]['all_K']:.2f} "
                                   f"(largest K: {slopes[m]['two_largest_K']:.2f})"))
        if ref_m and s.extrapolated.any():
            ex = s.extrapolated.to_numpy()
            ax.plot(s.K[ex], s.us_per_datapoint[ex], ls="none", marker=style.marker(m), ms=8,
                    mfc="white", mec=style.color(m), label="timed on a few minibatches")
    if reference in methods:
        s = scan[scan.method == reference].sort_values("K")
        kk = np.array(sorted(scan.K.unique()), dtype=float)
        ax.plot(kk, s.us_per_datapoint.iloc[-1] * kk / kk[-1], ls=":", color="0.5",
                label="slope 1 (O(K) per datapoint)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of classes K")
    ax.set_ylabel("training µs per datapoint (median)")
    ax.set_title(f"Cost per datapoint against K (SYNTHETIC, D = {n_features:,}, "
                 f"{nnz_per_row} non-zeros per row)")
    style.legend_below(fig, ncol=2)
    return fig


def _num(v) -> str:
    """``v`` with three significant digits, a large one as a whole number with commas."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def _span(values, fmt="{:.2g}") -> str:
    values = pd.Series(values).dropna()
    if not len(values):
        return "-"
    lo, hi = values.min(), values.max()
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)} to {fmt.format(hi)}"


def found_lines(runs: pd.DataFrame, scan: pd.DataFrame, slopes: dict,
                reference: str = "softmax-sgd") -> list[str]:
    """The numbers notebook 07's "What we found" rests on, as sentences built from this
    run's tables: ``runs`` (:func:`time_datasets`, part 1), ``scan`` (the K scan of
    :func:`scan_k` with the columns of :func:`scan_columns`) and ``slopes``
    (:func:`scan_k`'s log-log slopes per method). Seconds move from run to run: these are
    this run's."""
    lines = []
    r = runs[~runs.diverged]
    spread = (r.seconds_max - r.seconds_min) / r.seconds_per_epoch
    if len(spread):
        worst = r.loc[spread.idxmax()]
        lines.append(f"Timed epochs of a run differ by a median {spread.median():.1%} "
                     f"(maximum minus minimum over the median; at most {spread.max():.0%}, "
                     f"{worst.dataset} {worst.method}).")
    retried = runs[runs.retries > 0]
    lines.append(f"Runs diverged: {int(runs.diverged.sum())}; retried at a smaller rate: "
                 + (", ".join(f"{d} {m}" for d, m in zip(retried.dataset, retried.method))
                    or "none") + ".")
    us = r.pivot_table(index="dataset", columns="method", values="us_per_datapoint",
                       sort=False)
    spe = r.pivot_table(index="dataset", columns="method", values="seconds_per_epoch",
                        sort=False)
    double = [m for m in ("vanilla", "umax", "implicit") if m in us]
    biased = [m for m in ("ove", "nce", "is") if m in us]
    if double:
        lines.append(f"{' / '.join(double)}: {_span(us[double].stack())} µs per datapoint; "
                     "per data set " + "; ".join(
                         f"{d} {_span(us.loc[d, double])} µs, epochs "
                         f"{_span(spe.loc[d, double], '{:.2g}')} s" for d in us.index) + ".")
    if "umax" in us:
        for m in [m for m in ("implicit", "vanilla", *biased) if m in us]:
            ratio = us[m] / us["umax"]
            lines.append(f"{m} / U-max per datapoint: {_span(ratio)} (median "
                         f"{ratio.median():.2g}; " + ", ".join(
                             f"{d} {v:.2f}" for d, v in ratio.items()) + ").")
        if biased:
            lines.append(f"{' / '.join(biased)}: {_span(us[biased].stack())} µs per "
                         "datapoint.")
        if reference in us:
            ratio = us[reference] / us["umax"]
            full = r[r.method == reference].set_index("dataset").seconds_per_epoch_full
            lines.append(f"{reference}: " + ", ".join(
                f"{d} {_num(us.loc[d, reference])} µs per datapoint ({_num(ratio[d])} times "
                f"U-max; one epoch {_num(full.get(d, np.nan))} s)" for d in us.index) + ".")
            if biased:
                per = us[reference] / us[biased].mean(axis=1)
                lines.append(f"{reference} against {' / '.join(biased)} per datapoint: "
                             + ", ".join(f"{d} {_num(v)} times" for d, v in per.items()) + ".")
    if len(scan):
        ks = sorted(scan.K.unique())
        per = scan.pivot_table(index="K", columns="method", values="us_per_datapoint",
                               sort=False)
        lines.append("K scan, µs per datapoint: " + "; ".join(
            f"{m} " + " / ".join(f"{_num(per.loc[k, m])}" for k in ks) for m in per.columns)
            + f" (K = {' / '.join(f'{k:,}' for k in ks)}).")
        if len(ks) > 1:
            lines.append(f"Growth from K = {ks[0]:,} to {ks[-1]:,}: " + ", ".join(
                f"{m} {_num(per.loc[ks[-1], m] / per.loc[ks[0], m])} times"
                for m in per.columns) + "; step by step: " + "; ".join(
                f"{m} " + " / ".join(f"{per.loc[b, m] / per.loc[a, m]:.2g}"
                                     for a, b in zip(ks, ks[1:])) for m in per.columns) + ".")
        lines.append("Log-log slopes (all K / the two largest K): " + ", ".join(
            f"{m} {s['all_K']:.2f} / {s['two_largest_K']:.2f}" for m, s in slopes.items())
            + ".")
        if reference in per and "umax" in per:
            step = scan[(scan.K == ks[-1]) & (scan.method == reference)].seconds_per_step
            lines.append(f"At K = {ks[-1]:,} {reference} is "
                         f"{per.loc[ks[-1], reference] / per.loc[ks[-1], 'umax']:,.0f} times "
                         f"slower than U-max per datapoint; one of its minibatches took "
                         f"{step.iloc[0]:.3g} s.")
    return lines
