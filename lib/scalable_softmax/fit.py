"""One API for every optimiser: :func:`fit`.

``fit(X, y, method, lr, ...)`` validates every argument before doing any work, builds
the :class:`~scalable_softmax.methods.base.Trainer` registered under ``method``
(:mod:`scalable_softmax.methods`), runs it epoch by epoch with a seeded data order,
evaluates the exact log-loss, the error and the original code's defective metric on
the evaluation sets at chosen epochs, and returns a :class:`FitResult`.

Reproducibility: one ``numpy.random.default_rng(seed)`` draws, epoch after epoch, the
data order and then the kernel seed of that epoch, so the same arguments give
bit-identical results. Evaluation never draws from that generator (the evaluation
subsample, if any, is seeded by ``seed`` separately), so the training trajectory does
not depend on the evaluation settings -- except, at rounding level, for methods with
lazily scaled weights and ``mu > 0`` (folding the scales for an evaluation rounds
differently from folding them later).

Divergence: when a trainer reports a non-finite step, or ``u`` (checked every epoch)
or ``W`` (checked at evaluation epochs and at the end) holds a non-finite value, the
run stops, the last history row gets ``diverged = True`` and ``log_loss = inf``
(error and defective ``NaN``) for every set, ``FitResult.diverged_at`` records where,
and ``fit`` returns normally so that a sweep goes on.
"""
from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scalable_softmax.methods import get_trainer_class

__all__ = ["fit", "FitResult", "ORDERS", "default_eval_epochs"]

#: accepted values of ``order``
ORDERS = ("shuffle", "uniform", "file")
_METRICS = ("log_loss", "error", "defective")


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    W : ndarray (K, D), the final weights (for a diverged run: the parameters where
        training stopped, usually the last finite iterate).
    u : ndarray (N,) or None, the double-sum variables of methods that have them.
    history : pandas.DataFrame, one row per completed epoch (epoch 0 = the initial
        point) with columns ``epoch``, ``steps`` (cumulative), ``seconds``
        (cumulative training time, evaluation and compilation excluded), ``lr``
        (learning rate used during that epoch; NaN for epoch 0), ``evaluated``,
        ``diverged`` and, for every evaluation set ``<set>``, ``<set>_log_loss``,
        ``<set>_error``, ``<set>_defective`` (NaN where not evaluated). Use
        ``history[history.evaluated]`` for the evaluated epochs.
    diverged_at : None, or ``(epoch, step)``: the (1-based) epoch and the 0-based step
        within it where training stopped on a non-finite value (``step = -1`` when
        the non-finite value was found by the end-of-epoch checks).
    method : str
    params : dict, the call's arguments (arrays replaced by their shapes), with ``K``,
        ``N``, ``D`` and the resolved ``eval_epochs``.
    extra : pandas.DataFrame, one row per epoch run: ``epoch`` and the method's
        counters (``EpochReport.extra``, e.g. ``u_resets``).
    """

    W: np.ndarray
    u: np.ndarray | None
    history: pd.DataFrame
    diverged_at: tuple[int, int] | None
    method: str
    params: dict
    extra: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def diverged(self) -> bool:
        """True if the run stopped on a non-finite value."""
        return self.diverged_at is not None


def default_eval_epochs(epochs: int) -> list[int]:
    """Epoch 0 and 10 evenly spaced epochs ending at ``epochs`` (all of them if fewer):
    the paper records its metrics at 10 evenly spaced epochs."""
    return sorted({0, *np.round(np.linspace(0, epochs, 11)).astype(int).tolist()})


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------

def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _as_csr(X, name):
    """Canonical float64 CSR (sorted, no duplicates) of a sparse or array-like ``X``."""
    if sp.issparse(X):
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D (N x D); got shape {X.shape}")
        if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool) \
                or np.issubdtype(X.dtype, np.complexfloating):
            raise ValueError(f"{name} must hold real numbers; got dtype {X.dtype}")
        if X.format == "csr" and X.dtype == np.float64 and X.has_canonical_format:
            Xc = X
        else:
            Xc = sp.csr_matrix(X, dtype=np.float64, copy=True)
            Xc.sum_duplicates()
            Xc.sort_indices()
        data = Xc.data
    else:
        try:
            arr = np.asarray(X)
        except Exception as exc:  # ragged lists etc.
            raise ValueError(f"{name} must be a 2-D array or a scipy.sparse matrix: {exc}") \
                from None
        if arr.ndim != 2:
            raise ValueError(f"{name} must be a 2-D array or scipy.sparse matrix (N x D); "
                             f"got an array of shape {arr.shape}")
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool) \
                or np.issubdtype(arr.dtype, np.complexfloating):
            raise ValueError(f"{name} must hold real numbers; got dtype {arr.dtype}")
        data = arr
        Xc = None
    N, D = (Xc if Xc is not None else data).shape
    if N == 0 or D == 0:
        raise ValueError(f"{name} is empty (shape {N} x {D}): need at least one row and "
                         "one column")
    if not np.all(np.isfinite(data)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf); clean the data "
                         "first")
    if Xc is None:
        Xc = sp.csr_matrix(np.asarray(data, dtype=np.float64))
        Xc.sort_indices()
    return Xc


def _as_labels(y, N, name):
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels; got shape {arr.shape}")
    if arr.shape[0] != N:
        raise ValueError(f"{name} has {arr.shape[0]} labels but its X has {N} rows; "
                         "they must match")
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.int64)
    if np.issubdtype(arr.dtype, np.floating):
        if np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64)
    raise ValueError(f"{name} must hold integer class labels 0..K-1; got dtype {arr.dtype}"
                     + (" with non-integer values" if arr.dtype.kind == "f" else ""))


def _check_label_range(y, K, name):
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= K:
        raise ValueError(f"labels in {name} must lie in 0..K-1 = 0..{K - 1}; found values "
                         f"in {lo}..{hi}" + ("" if lo < 0 else " (pass a larger K)"))


def _validate(X, y, method, lr, epochs, lr_decay, mu, batch_size, n_sampled, seed, order,
              eval_epochs, eval_sets, eval_rows, progress, u_init, K):
    cls = get_trainer_class(method)          # ValueError listing the names
    full_batch = bool(getattr(cls, "full_batch", False))
    if lr is None and full_batch:
        lr = 1.0
    if not (_is_real(lr) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr (learning rate) must be a finite number > 0; got {lr!r}")
    if not (_is_int(epochs) and epochs >= 1):
        raise ValueError(f"epochs must be an integer >= 1; got {epochs!r}")
    if not (_is_real(lr_decay) and 0 < lr_decay <= 1):
        raise ValueError(f"lr_decay must be a number in (0, 1] (lr * lr_decay**epoch); "
                         f"got {lr_decay!r}")
    if not (_is_real(mu) and math.isfinite(mu) and mu >= 0):
        raise ValueError(f"mu (ridge parameter) must be a finite number >= 0; got {mu!r}")
    for nm, v in (("batch_size", batch_size), ("n_sampled", n_sampled)):
        if v is not None and not (_is_int(v) and v >= 1):
            raise ValueError(f"{nm} must be None or an integer >= 1; got {v!r}")
    if not (_is_int(seed) and seed >= 0):
        raise ValueError(f"seed must be an integer >= 0; got {seed!r}")
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; choose one of: {', '.join(ORDERS)}")
    if u_init not in ("zero", "logK"):
        raise ValueError(f"u_init must be 'zero' or 'logK'; got {u_init!r}")
    if not isinstance(progress, (bool, np.bool_)):
        raise ValueError(f"progress must be True or False; got {progress!r}")
    if eval_rows is not None and not (_is_int(eval_rows) and eval_rows >= 1):
        raise ValueError(f"eval_rows must be None or an integer >= 1; got {eval_rows!r}")

    X = _as_csr(X, "X")
    N, D = X.shape
    y = _as_labels(y, N, "y")
    if K is None:
        K = int(y.max()) + 1
        if K < 2:
            raise ValueError("all labels in y are 0, so K cannot be inferred; pass K >= 2")
    elif not (_is_int(K) and K >= 2):
        raise ValueError(f"K (number of classes) must be an integer >= 2; got {K!r}")
    K = int(K)
    _check_label_range(y, K, "y")

    if eval_sets is None:
        sets = {"train": (X, y)}
    else:
        if not isinstance(eval_sets, dict):
            raise ValueError("eval_sets must be a dict mapping a name to an (X, y) pair")
        sets = {}
        for name, pair in eval_sets.items():
            if not (isinstance(name, str) and name):
                raise ValueError(f"eval_sets keys must be non-empty strings; got {name!r}")
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise ValueError(f"eval_sets[{name!r}] must be an (X, y) pair")
            Xe = _as_csr(pair[0], f"eval_sets[{name!r}] X")
            if Xe.shape[1] != D:
                raise ValueError(f"eval_sets[{name!r}] X has {Xe.shape[1]} columns but the "
                                 f"training X has D = {D}")
            ye = _as_labels(pair[1], Xe.shape[0], f"eval_sets[{name!r}] y")
            _check_label_range(ye, K, f"eval_sets[{name!r}] y")
            sets[name] = (Xe, ye)

    if eval_epochs is None:
        ev = default_eval_epochs(epochs)
    else:
        try:
            ev = list(eval_epochs)
        except TypeError:
            raise ValueError(f"eval_epochs must be a list of epochs in 0..{epochs}; got "
                             f"{eval_epochs!r}") from None
        bad = [e for e in ev if not (_is_int(e) and 0 <= e <= epochs)]
        if bad:
            raise ValueError(f"eval_epochs must hold integers in 0..epochs = 0..{epochs}; "
                             f"got {bad}")
        ev = sorted({int(e) for e in ev})
    return cls, float(lr), X, y, K, sets, ev


# ---------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------

def _all_finite(A, chunk_rows=1024):
    """``np.isfinite(A).all()`` without a full-size temporary."""
    if A is None:
        return True
    if A.ndim == 1:
        return bool(np.isfinite(A).all())
    return all(bool(np.isfinite(A[r:r + chunk_rows]).all())
               for r in range(0, A.shape[0], chunk_rows))


def _make_order(rng, N, order):
    if order == "shuffle":
        return rng.permutation(N).astype(np.int64)
    if order == "uniform":
        return rng.integers(0, N, size=N, dtype=np.int64)
    return np.arange(N, dtype=np.int64)


def fit(X, y, method, lr, epochs=50, lr_decay=0.9, mu=0.0, batch_size=None,
        n_sampled=None, seed=0, order="shuffle", eval_epochs=None, eval_sets=None,
        eval_rows=None, progress=True, u_init="zero", K=None, **method_options):
    """Train a softmax model with one of the registered optimisers.

    Parameters
    ----------
    X : scipy.sparse matrix or 2-D array (N, D), finite values. Converted once to
        canonical float64 CSR (no dense ``N x D`` copy of sparse data is made).
    y : 1-D integer labels (N,) in ``0..K-1``.
    method : str, a key of :data:`scalable_softmax.methods.METHODS` (``"vanilla"``,
        ``"umax"``, ``"raman"``, ``"implicit"``, ...).
    lr : float > 0, initial learning rate in the per-datapoint units of MATH.md
        section 2 (the paper's Table 2 values apply as published). Full-batch methods
        (``exact``) accept ``None``.
    epochs : int >= 1.
    lr_decay : float in (0, 1]; epoch ``e = 1, 2, ...`` runs at ``lr * lr_decay**(e-1)``.
    mu : float >= 0, ridge parameter.
    batch_size, n_sampled : datapoints per step ``n`` and classes per datapoint ``m``
        (None: the method's default).
    seed : int >= 0; the same seed gives bit-identical results.
    order : ``"shuffle"`` (a fresh permutation each epoch), ``"uniform"`` (N draws with
        replacement) or ``"file"`` (``0..N-1``).
    eval_epochs : iterable of epochs in ``0..epochs`` at which to evaluate (0 = the
        initial point); default :func:`default_eval_epochs` (epoch 0 and 10 evenly
        spaced epochs); ``[]`` evaluates nothing.
    eval_sets : dict name -> (X, y); default ``{"train": (X, y)}``.
    eval_rows : int, evaluate on a fixed subsample of this many rows of each set
        (seeded by ``seed``; the whole set when it has no more rows); default all rows.
    progress : bool, show a progress bar over epochs (:func:`scalable_softmax.progress.tqdm`,
        cleared at the end).
    u_init : ``"zero"`` or ``"logK"``, initial ``u`` of the double-sum methods.
    K : int >= 2, number of classes (default ``max(y) + 1``).
    **method_options : passed to the trainer (e.g. ``delta0`` for ``umax``); unknown
        options raise ``ValueError``.

    Returns
    -------
    FitResult

    Raises
    ------
    ValueError
        For any invalid argument, before any work is done.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 5)); y = rng.integers(0, 3, 200)
    >>> res = fit(X, y, "umax", lr=0.1, epochs=5, progress=False)
    >>> list(res.history.columns[:4])
    ['epoch', 'steps', 'seconds', 'lr']
    """
    cls, lr, X, y, K, sets, ev = _validate(
        X, y, method, lr, epochs, lr_decay, mu, batch_size, n_sampled, seed, order,
        eval_epochs, eval_sets, eval_rows, progress, u_init, K)
    N, D = X.shape
    trainer = cls(X, y, K, mu=float(mu), batch_size=batch_size, n_sampled=n_sampled,
                  **method_options)                       # unknown options raise here
    evaluate = None
    if ev:
        from scalable_softmax.evaluate import evaluate

    params = dict(method=method, lr=lr, epochs=epochs, lr_decay=float(lr_decay),
                  mu=float(mu), batch_size=batch_size, n_sampled=n_sampled, seed=seed,
                  order=order, eval_epochs=list(ev), eval_sets=list(sets),
                  eval_rows=eval_rows, u_init=u_init, K=K, N=N, D=D,
                  options=dict(method_options))

    trainer.init_params(u_init)
    trainer.warmup()

    def evaluate_all():
        W = trainer.weights()
        if not _all_finite(W):
            return None
        row = {}
        for name, (Xe, ye) in sets.items():
            sub = eval_rows if (eval_rows is not None and eval_rows < Xe.shape[0]) else None
            res = evaluate(Xe, ye, W, subsample=sub, seed=seed)
            row[f"{name}_log_loss"] = float(res.log_loss)
            row[f"{name}_error"] = float(res.error)
            row[f"{name}_defective"] = float(res.defective)
        return row

    def diverged_metrics():
        row = {}
        for name in sets:
            row[f"{name}_log_loss"] = math.inf
            row[f"{name}_error"] = math.nan
            row[f"{name}_defective"] = math.nan
        return row

    def empty_metrics():
        return {f"{name}_{mt}": math.nan for name in sets for mt in _METRICS}

    rng = np.random.default_rng(seed)
    rows, extras = [], []
    steps = 0
    seconds = 0.0
    diverged_at = None

    row0 = dict(epoch=0, steps=0, seconds=0.0, lr=math.nan, evaluated=False, diverged=False)
    m0 = evaluate_all() if 0 in ev else empty_metrics()
    if m0 is None:               # cannot happen with a sane init_params
        row0.update(diverged_metrics(), diverged=True)
        diverged_at = (0, -1)
    else:
        row0.update(m0, evaluated=0 in ev)
    rows.append(row0)

    from scalable_softmax.progress import tqdm
    bar = tqdm(total=epochs, desc=f"fit {method}", disable=not progress, leave=False,
               mininterval=1.0, dynamic_ncols=True)
    try:
        for e in range(1, epochs + 1):
            if diverged_at is not None:
                break
            lr_e = lr * lr_decay ** (e - 1)
            t0 = time.perf_counter()
            idx = _make_order(rng, N, order)
            kseed = int(rng.integers(0, 2 ** 63 - 1))
            rep = trainer.run_epoch(idx, lr_e, kseed)
            seconds += time.perf_counter() - t0
            steps += int(rep.steps)
            extras.append({"epoch": e, **(rep.extra or {})})
            row = dict(epoch=e, steps=steps, seconds=seconds, lr=lr_e, evaluated=False,
                       diverged=False)
            bad_step = None
            if rep.diverged_at is not None and rep.diverged_at >= 0:
                bad_step = int(rep.diverged_at)
            elif not _all_finite(trainer.u):
                bad_step = -1
            metrics = None
            if bad_step is None and (e in ev or e == epochs):
                if e in ev:
                    metrics = evaluate_all()
                    if metrics is None:
                        bad_step = -1
                elif not _all_finite(trainer.weights()):
                    bad_step = -1
            if bad_step is not None:
                diverged_at = (e, bad_step)
                row.update(diverged_metrics(), diverged=True)
            elif metrics is not None:
                row.update(metrics, evaluated=True)
            else:
                row.update(empty_metrics())
            rows.append(row)
            bar.update(1)
            if metrics is not None:
                first = next(iter(sets))
                bar.set_postfix({f"{first} log-loss": f"{metrics[f'{first}_log_loss']:.4g}"},
                                refresh=False)
    finally:
        bar.close()

    history = pd.DataFrame(rows)
    cols = ["epoch", "steps", "seconds", "lr", "evaluated", "diverged"] + \
        [f"{name}_{mt}" for name in sets for mt in _METRICS]
    history = history[cols]
    history["epoch"] = history["epoch"].astype(np.int64)
    history["steps"] = history["steps"].astype(np.int64)
    history["evaluated"] = history["evaluated"].astype(bool)
    history["diverged"] = history["diverged"].astype(bool)
    extra = pd.DataFrame(extras) if extras else pd.DataFrame({"epoch": []})
    return FitResult(W=trainer.weights(), u=trainer.u if trainer.has_u else None,
                     history=history, diverged_at=diverged_at, method=method,
                     params=params, extra=extra)
