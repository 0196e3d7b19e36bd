"""The exact evaluator: log-loss, error and the defective metric (issue 2, section 4).

:func:`evaluate` computes, over a whole data set or a subset of its rows,

* the exact mean negative log-likelihood (docs/math.md section 1), with a stable
  log-sum-exp over all ``K`` classes and no ridge term;
* the error rate, ``argmax_k s_ik != y_i`` with ties going to the lowest class
  index (as ``np.argmax``);
* the original code's defective metric ``mean_i(-p_{i,y_i} + log sum_k exp(p_ik))``
  with ``p`` the softmax probabilities (docs/math.md section 7).

It agrees with the NumPy reference :mod:`scalable_softmax.objectives`
(:func:`~scalable_softmax.objectives.log_loss`,
:func:`~scalable_softmax.objectives.error_rate`,
:func:`~scalable_softmax.objectives.defective_metric`) to rounding, and never
forms the ``N x K`` score matrix.

Algorithm
---------
The scores ``s_ik = x_i . w_k`` of a sparse row cost one contiguous ``K``-vector
update per non-zero when ``W`` is stored transposed. Streaming the whole of ``W^T``
(``K x D x 8`` bytes, 1.4 GB for ``K = 18,000``, ``D = 10,000``) once per row
would be memory bound, so the classes are cut into tiles of ``tile`` classes
(default 256): the tile's slice of ``W`` is transposed once into a ``D x tile``
buffer (20 MB at ``D = 10,000``, resident in the last-level cache) and every selected
row is scored against it in
parallel (``numba.prange`` over blocks of ``block_rows`` rows; eight non-zeros
are added at a time, as a tree, so the scores agree with a sequential product to
rounding, not bit for bit). Each row keeps a small running state across tiles,
updated online:

* ``m``: running maximum score, and the first index attaining it (the argmax);
* ``S'``: ``sum_k exp(s_k - m)`` over every class seen except the argmax (so the
  loss is ``(m - s_y) + log1p(S')``, accurate even when it is tiny), rescaled by
  ``exp(m_old - m_new)`` when the maximum grows;
* ``S_n = sum_k exp(n (s_k - m))`` for ``n = 2..18``, rescaled the same way.

The defective metric needs ``sum_k exp(p_k)`` with ``p_k = exp(s_k - lse)``, i.e.
the final log-sum-exp, which is only known after the last tile. Since
``sum_k p_k = 1`` and ``p_k^n`` sums to ``S_n / S_1^n`` (``S_1 = 1 + S'``),

    sum_k exp(p_k) = K + 1 + sum_{n >= 2} (S_n / S_1^n) / n!

whose truncation after ``n = 18`` errs by less than ``1/19! ~ 1e-17``. The tile's
terms can add at most ``tile (e_max / S_1)^n / n!`` to the final ``S_n / S_1^n / n!``
(``e_max`` = the tile's largest ``exp(s_k - m)``, ``S_1`` = the running sum including
the tile; later tiles only add to it, and rescaling changes both alike), so the
higher powers are skipped once that bound is below ``1e-20``:
for a flat softmax only a few powers are computed, for a peaked one all of them on
the tile holding the maximum and few elsewhere.

Weights stored feature-major (``layout="feature"``: ``W`` given as ``D x K``, as a
feature-major trainer or PyTorch's embedding-bag keeps them) skip both transposes: the
caller's ``K x D`` copy (4 s for 2.4 GB at ``K = 30,000``, ``D = 10,000``) and the tile's,
which becomes a copy of contiguous slices of only the features the selected rows use
(0.2 s instead of 0.4 s per 2,000 rows on that shape). The tile holds the same values,
so the metrics are bit-identical in both layouts.

Threads: the row blocks (``block_rows`` rows each) and the tile copies run in parallel
on numba's threads (``threads``). On one thread, or when a pass is small (its
``nnz(X_rows) K + K D`` multiply-adds below ``SERIAL_WORK``: a few milliseconds of work),
the kernels' serial twins run instead
(:func:`~scalable_softmax.kernels.common.serial_twin`): the same code compiled without
``parallel``, so the results are bit-identical, and a new process compiles them in about
half the CPU time of the parallel kernels (what the first fit's monitoring of a small set
pays). A ``W`` of at most 65,536 entries is checked for finiteness by NumPy.

Memory: the ``D x tile`` buffer, ``O(threads x tile)`` scratch, and 21 numbers of
state per selected row; never ``N x K``. The exponentials are computed by a
vectorisable kernel (:func:`~scalable_softmax.kernels.common.vexp`, Cody-Waite reduction and a
degree-13 polynomial, about 1 ulp): a scalar ``math.exp`` per score cost about 40% of the
sparse products in our measurements.

Precision
---------
``precision="float64"`` is the path above, in float64 throughout (the reference; it
agrees with :mod:`scalable_softmax.objectives` to about 1e-12). ``precision="float32"``
(2-3x faster; the default, see ``DEFAULT_PRECISION``) scores in float32 and
keeps the running state in float64
(:func:`~scalable_softmax.kernels.evaluate.state_pass32`):

* the tile of ``W^T`` is stored as float32 (``D x tile``, 10 MB at ``D = 10,000``:
  it stays in the last-level cache while every selected row is scored against it),
  ``X``'s values as float32;
* a row's scores are float32 fused multiply-adds, one per non-zero, added in the
  order of the non-zeros into a contiguous ``tile``-vector
  (:func:`~scalable_softmax.kernels.evaluate.scores32`; 16-float vector registers on AVX-512);
* the tile's maximum is an integer maximum of the float32 bit patterns (vectorised,
  :func:`~scalable_softmax.kernels.evaluate.max32`), the exponentials ``exp(s_k - m)`` are float32
  (Cody-Waite and a degree-7 polynomial, about 1 ulp,
  :func:`~scalable_softmax.kernels.evaluate.vexp32_sum`; 3.5x cheaper than float64 ones in our
  measurements) and are summed into float64; the power sums ``S_n`` are float64 products of the
  float32 exponentials; the rescaling and the final log-sum-exp are float64 as above.

Its error comes from the float32 scores (about ``1e-7 sum_j |x_ij w_kj|`` each)
and exponentials (``6e-8`` relative each, on terms summed in float64), so a row's
loss is off by about ``1e-7 (1 + max_k |s_ik|)`` in absolute terms (a large relative
error only for rows whose loss is itself tiny). On the benchmark's data the mean
log-loss agrees with float64 to about 1e-12 relative and each row's to about 1e-9;
on the tests' problems (``W`` of scale 1e-4 to 1e5) the mean to at most 5e-8.
The error rate is the same except for rows whose two best scores are within
float32 rounding of each other (exact ties stay exact ties: equal scores still go to
the lowest index). A per-row loss below ``exp(-87) ~ 1.6e-38`` is returned as 0. If
a float32 score overflows (``|s| > 3.4e38``, or ``X`` or ``W`` holds entries beyond
float32's range), the whole evaluation is redone in float64.

Dense ``X`` is converted to CSR (zeros dropped). The benchmark
(``benchmarks/bench_evaluate.py``, results in ``benchmarks/results/evaluate.md``)
compares both precisions with PyTorch and with two bounds (the machine's measured FMA
rate, and a loop with the float32 kernel's memory accesses alone).
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from scalable_softmax.kernels.evaluate import (
    all_finite,
    finish,
    finish_serial,
    state_pass,
    state_pass32,
    state_pass32_serial,
    state_pass_serial,
    used_features,
)
from scalable_softmax.kernels.threads import numba_threads
from scalable_softmax.validation import (
    as_csr,
    as_labels,
    check_label_range,
    kernel_array,
    kernel_csr,
)

__all__ = ["Evaluation", "evaluate", "evaluate_sets", "NonFiniteScoreError",
           "NonFiniteWeightsError"]

#: classes per tile of ``W^T`` (see the module docstring). Measured against 128: with two
#: single-threaded processes evaluating at once (as notebook 02's workers do), 3,000 rows,
#: min of 3, 256 was 10-14% faster on the Wiki-small surrogate's shape (K 18,207,
#: D 10,000, 50 non-zeros per row) and the same on Wiki10's (536 non-zeros; 512 was 15%
#: slower there); on uniform synthetic rows (K 18,000, 12,000 rows, min of 5) the same on
#: one thread and 5% slower on two. Within this machine's noise, except the first.
DEFAULT_TILE = 256
#: ``evaluate``'s default ``precision`` (see its docstring), used by ``fit`` and the
#: notebooks: float32 scores with float64 accumulation, 2-3x faster than float64 and
#: within ~1e-12 relative of it on the mean log-loss of the benchmark's data (~1e-7 on
#: small problems with scores of order 10; the error rate identical but for exact
#: score ties). ``precision="float64"`` is the reference, tested against NumPy to 1e-12.
DEFAULT_PRECISION = "float32"
#: rows per parallel task
DEFAULT_BLOCK_ROWS = 32
#: a pass whose work ``nnz(X_rows) K + K D`` (multiply-adds) is below this runs the
#: kernels' serial twins (bit-identical; about 1-2 ms of work on one core, too little to
#: gain from a second thread, while compiling the parallel kernels costs a new process
#: about 4 CPU seconds more than the serial ones: the first fit's monitoring)
SERIAL_WORK = 2**22
#: ``W`` with at most this many entries is checked for finiteness by NumPy (one block of
#: the parallel check ``all_finite``, which then needs no compile)
_SMALL_W = 65536
#: the transposed tile is kept at or below this many bytes (shrinks the tile when D is large)
_TILE_BYTES = 24 * 2**20


class NonFiniteWeightsError(ValueError):
    """The weights ``W`` (or the ``intercept``) hold NaN or infinite values: a diverged
    run, found by the finiteness check :func:`evaluate` and :func:`evaluate_sets` make
    anyway (one pass over ``W``). A ``ValueError``; a caller evaluating a checkpoint
    catches it (with :class:`NonFiniteScoreError`, for finite weights too large to
    score) to mark a diverged point, without a finiteness pass of its own.
    """


class NonFiniteScoreError(FloatingPointError):
    """A score ``s_ik = x_i . w_k`` (or a row's log-loss) is not a finite number.

    Finite but huge weights (a run that blew up without an ``inf``) overflow the
    scores; the metrics would be NaN or infinite. Attributes ``row`` (index into
    ``X``), ``klass`` (the class whose score is not finite, or the arg-max class when
    every score is finite but the log-loss overflows) and ``score``.
    """

    def __init__(self, row: int, klass: int, score: float, what: str):
        self.row, self.klass, self.score = int(row), int(klass), float(score)
        super().__init__(f"{what} (row {self.row} of X, class {self.klass}: score "
                         f"{self.score!r}); the weights are too large to evaluate "
                         "(a diverged run?)")

    def __reduce__(self):
        return (_rebuild_nonfinite, (self.row, self.klass, self.score, self.args[0]))


def _rebuild_nonfinite(row, klass, score, message):
    exc = NonFiniteScoreError.__new__(NonFiniteScoreError)
    exc.row, exc.klass, exc.score = row, klass, score
    FloatingPointError.__init__(exc, message)
    return exc


def _raise_nonfinite(X, y, W, sel, nll, dfc, fm=False, where=""):
    """Raise :class:`NonFiniteScoreError` for the first selected row whose metrics are
    not finite, naming the row and the class (scores recomputed in float64 for it);
    ``where`` begins the message (:func:`evaluate_sets`: the set)."""
    bad = np.flatnonzero(~(np.isfinite(nll) & np.isfinite(dfc)))
    if bad.size == 0:
        return
    i = int(sel[bad[0]])
    lo, hi = X.indptr[i], X.indptr[i + 1]
    Wd = np.asarray(W, dtype=np.float64)
    cols = Wd[X.indices[lo:hi]].T if fm else Wd[:, X.indices[lo:hi]]
    with np.errstate(all="ignore"):
        s = cols @ np.asarray(X.data[lo:hi], dtype=np.float64)
    nonfinite = np.flatnonzero(~np.isfinite(s))
    if nonfinite.size:
        k = int(nonfinite[0])
        raise NonFiniteScoreError(i, k, s[k], f"{where}a score is not finite")
    k = int(np.argmax(s))
    raise NonFiniteScoreError(i, k, s[k], f"{where}the log-loss overflows: the largest score "
                              f"minus the label's (class {int(y[i])}, score "
                              f"{float(s[int(y[i])])!r}) is beyond the float range")


@dataclass(frozen=True)
class Evaluation:
    """Exact metrics of a weight matrix on (a subset of) a data set.

    Attributes
    ----------
    log_loss : float
        Mean negative log-likelihood ``-(1/n) sum_i log p(y_i | x_i)``.
    error : float
        Fraction of rows with ``argmax_k s_ik != y_i`` (ties to the lowest index).
    defective : float
        The original code's defective metric ``mean_i(-p_{i,y_i} + log sum_k
        exp(p_ik))`` (docs/math.md section 7); lies in ``[log(K-1+e) - 1, log(K-1+e)]``.
    n_rows : int
        Number of rows the means are over.
    """

    log_loss: float
    error: float
    defective: float
    n_rows: int


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------

def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


LAYOUTS = ("class", "feature")


def _check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'class' (W is K x D, row k = w_k) or 'feature' "
                         f"(W is D x K, row j = feature j's weight of every class); got "
                         f"{layout!r}")
    return layout == "feature"


def _width_mismatch(X, W, fm=False):
    D = X.shape[1]
    if fm:
        hint = ("; if its last row is an intercept, pass W[:-1] and intercept=W[-1]"
                if W.shape[0] == D + 1 else "")
        raise ValueError(f"shape mismatch: X has shape {X.shape} (D = {D}) but W has "
                         f"shape {W.shape}; with layout='feature' W must be D x K with "
                         f"row j = feature j's weights{hint}")
    hint = ("; if its last column is an intercept, pass W[:, :-1] and intercept=W[:, -1]"
            if W.shape[1] == D + 1 else "")
    feature = ("; a D x K (feature-major) W needs layout='feature'"
               if W.shape[0] == D else "")
    raise ValueError(f"shape mismatch: X has shape {X.shape} (D = {D}) but W has shape "
                     f"{W.shape}; W must be K x D with row k = w_k{hint}{feature}")


def _check_inputs(X, y, W, keep_float32=False, fm=False):
    X = as_csr(X, "X")                      # the one data check (validation.as_csr)
    W, K = _check_weights(X, W, keep_float32, fm)
    return X, _check_labels(y, X.shape[0], K, fm), W


def _check_weights(X, W, keep_float32=False, fm=False):
    """``(W, K)``: ``W`` checked against ``X`` (its shape, dtype, finiteness: one pass)
    and converted to C-contiguous float64 (float32 kept with ``keep_float32``)."""
    D = X.shape[1]
    if sp.issparse(W):
        raise ValueError(f"W must be a dense array; got a scipy.sparse {W.format.upper()} "
                         "matrix (use W.toarray())")
    W = np.asarray(W)
    shape = "(D, K)" if fm else "(K, D)"
    if W.ndim != 2:
        raise ValueError(f"W must be a 2-D array of shape {shape}; got shape {W.shape}")
    if not (np.issubdtype(W.dtype, np.floating) or np.issubdtype(W.dtype, np.integer)):
        raise ValueError(f"W must be a real numeric array; got dtype {W.dtype}")
    if W.shape[1 - fm] != D:
        _width_mismatch(X, W, fm)
    K = W.shape[int(fm)]
    if K < 2:
        what = "columns" if fm else "rows"
        raise ValueError(f"W must have at least K = 2 {what} (classes); got shape {W.shape}")
    # a read-only W is copied (validation.kernel_array: one compile per kernel)
    W = kernel_array(W, np.float32 if keep_float32 and W.dtype == np.float32
                     else np.float64)
    if not _weights_finite(W):
        raise NonFiniteWeightsError("W contains NaN or infinite values (a diverged run?); "
                                    "evaluate only finite weights")
    return W, K


def _check_labels(y, N, K, fm=False, name="y"):
    """The labels ``y`` of ``N`` rows as contiguous int64, checked to lie in ``0..K-1``."""
    y = as_labels(y, N, name)
    check_label_range(y, K, name, f" (W has K = {K} {'columns' if fm else 'rows'}, one "
                                  "per class)")
    return kernel_array(y, np.int64)


def _select_rows(N, rows, subsample, seed):
    if rows is not None and subsample is not None:
        raise ValueError("give either rows= or subsample=, not both")
    if rows is not None:
        r = np.asarray(rows)
        if r.ndim != 1:
            raise ValueError(f"rows must be a 1-D array of row indices; got shape {r.shape}")
        if r.size == 0:
            raise ValueError("rows is empty: give at least one row index")
        if not np.issubdtype(r.dtype, np.integer):
            raise ValueError(f"rows must hold integer row indices; got dtype {r.dtype}")
        r = r.astype(np.int64)
        if r.min() < 0 or r.max() >= N:
            raise ValueError(f"rows out of range: indices must lie in 0..{N - 1} (X has "
                             f"N = {N} rows); got values in {r.min()}..{r.max()}")
        return np.ascontiguousarray(r)
    if subsample is not None:
        if not _is_int(subsample) or subsample < 1:
            raise ValueError(f"subsample must be a positive integer; got {subsample!r}")
        if subsample > N:
            raise ValueError(f"subsample = {subsample} exceeds the number of rows N = {N}; "
                             "use subsample=None for the whole data set")
        if not _is_int(seed):
            raise ValueError(f"seed must be an integer; got {seed!r}")
        rng = np.random.default_rng(seed)
        return np.sort(rng.choice(N, size=int(subsample), replace=False)).astype(np.int64)
    return np.arange(N, dtype=np.int64)


def tile_width(K, D, tile=None, itemsize=8):
    if tile is None:
        tile = min(DEFAULT_TILE, max(16, _TILE_BYTES // (itemsize * max(D, 1))))
    return int(min(K, tile))


# ---------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------

def per_row(X, y, W, *, rows=None, subsample=None, seed=0, block_rows=None,
            threads=None, tile=None, precision=None, layout="class"):
    """Validated inputs -> per-row ``(nll, err, dfc, rows)`` for the selected rows."""
    precision = _check_precision(precision)
    fm = _check_layout(layout)
    X, y, W = _check_inputs(X, y, W, keep_float32=precision == "float32", fm=fm)
    sel = _select_rows(X.shape[0], rows, subsample, seed)
    _check_pass_options(block_rows, tile, threads)
    nll, err, dfc = _row_pass(X, y, W, sel, block_rows=block_rows, threads=threads,
                              tile=tile, precision=precision, fm=fm)
    _raise_nonfinite(X, y, W, sel, nll, dfc, fm)
    return nll, err, dfc, sel


def _check_precision(precision):
    if precision is None:
        precision = DEFAULT_PRECISION
    if precision not in ("float32", "float64"):
        raise ValueError(f"precision must be 'float32' or 'float64'; got {precision!r}")
    return precision


def _check_pass_options(block_rows, tile, threads):
    if block_rows is not None and (not _is_int(block_rows) or block_rows < 1):
        raise ValueError(f"block_rows must be a positive integer; got {block_rows!r}")
    if tile is not None and (not _is_int(tile) or tile < 1):
        raise ValueError(f"tile must be a positive integer; got {tile!r}")
    nmax = numba.config.NUMBA_NUM_THREADS
    if threads is not None and (not _is_int(threads) or not 1 <= threads <= nmax):
        raise ValueError(f"threads must be an integer in 1..{nmax} "
                         f"(numba's NUMBA_NUM_THREADS); got {threads!r}")


def _row_pass(X, y, W, sel, *, block_rows, threads, tile, precision, fm, groups=None):
    """Per-row ``(nll, err, dfc)`` of the rows ``sel`` of the checked inputs (options
    checked by :func:`_check_pass_options`): one pass over ``W``. Each row's metrics
    depend on that row alone (and on ``K``, ``D``, ``tile``), not on the other rows.

    ``groups`` (bounds into ``sel``, ``[0, ..., sel.size]``; default one group) are
    evaluations made together (:func:`evaluate_sets`): when a float32 score overflows,
    every row of each group holding such a row is redone in float64, as a separate
    evaluation of that group would be, and the others keep their float32 results."""
    if block_rows is None:
        block_rows = DEFAULT_BLOCK_ROWS
    D = X.shape[1]
    K = W.shape[int(fm)]
    tw = tile_width(K, D, tile, 8 if precision == "float64" else 4)
    # the arrays as the kernels read them, one type each whatever X's index dtypes or
    # flags (validation.kernel_csr: one compile per kernel)
    indptr, indices, data = kernel_csr(X)

    def feats(rows):
        # the features the rows use, for a feature-major W only (a class-major
        # evaluation then never compiles used_features)
        if fm:
            return used_features(indptr, indices, rows, D)
        return np.empty(0, np.int64)

    with numba_threads(threads) as n_threads:
        # one thread, or too little work to split: the serial twins (bit-identical)
        serial = n_threads == 1 or _work(indptr, sel, K, D) < SERIAL_WORK
        pass64, pass32, finish_rows = ((state_pass_serial, state_pass32_serial,
                                        finish_serial) if serial else
                                       (state_pass, state_pass32, finish))
        if precision == "float64":
            state = pass64(indptr, indices, data, sel, y, W, tw, int(block_rows), fm,
                           feats(sel))
        else:
            with np.errstate(over="ignore"):  # beyond float32's range: see below
                data32 = data.astype(np.float32)
            state = pass32(indptr, indices, data32, sel, y, W, tw, int(block_rows),
                           fm, feats(sel))
            ok = np.isfinite(state[0]) & np.isfinite(state[3])
            if not ok.all():
                # a score overflowed float32 (|s| > 3.4e38, or X or W holds entries
                # beyond float32's range): redo the whole evaluation in float64 (with
                # groups: every evaluation, i.e. group, holding such a row)
                redo = np.zeros(sel.size, dtype=bool)
                bounds = [0, sel.size] if groups is None else groups
                for a, b in zip(bounds[:-1], bounds[1:]):
                    if not ok[a:b].all():
                        redo[a:b] = True
                tw = tile_width(K, D, tile, 8)
                W64 = np.ascontiguousarray(W, dtype=np.float64)
                if redo.all():
                    state = pass64(indptr, indices, data, sel, y, W64, tw,
                                   int(block_rows), fm, feats(sel))
                else:                       # only the groups that overflowed
                    idx = np.flatnonzero(redo)
                    part = pass64(indptr, indices, data, sel[idx], y, W64, tw,
                                  int(block_rows), fm, feats(sel[idx]))
                    for whole, redone in zip(state, part):
                        whole[idx] = redone
        return finish_rows(*state, y[sel], K)


def _weights_finite(W) -> bool:
    """Whether ``W`` holds only finite values: NumPy for a small ``W`` (no kernel to
    compile), the parallel kernel ``all_finite`` (no full-size temporary) otherwise."""
    return bool(np.isfinite(W).all()) if W.size <= _SMALL_W else all_finite(W)


def _work(indptr, sel, K, D) -> int:
    """Multiply-adds of a pass over the rows ``sel``: their non-zeros times ``K``, plus
    the ``K x D`` tile copies."""
    return int(np.sum(indptr[sel + 1] - indptr[sel])) * K + K * D


def _model_inputs(X, W, intercept, fm=False):
    """``(X, W)`` of the model ``W`` (an array or a :class:`~scalable_softmax.fit.FitResult`)
    with ``intercept``: the intercept becomes one more column of ``W`` (``fm``: one more
    row of the ``D x K`` ``W``) and a column of ones in ``X``, so that the kernels score
    ``x . w_k + b_k``."""
    W, intercept = _unpack_model(W, intercept, fm)
    if intercept is None:
        return X, W              # _check_inputs checks W against X
    X = as_csr(X, "X")
    return _with_ones(X), _with_intercept(X, W, intercept, fm)


def _unpack_model(W, intercept, fm):
    """``(W, intercept)`` of an array ``W`` and ``intercept``, or of a FitResult."""
    # a FitResult (or a model like it: W and intercept), recognised by its attributes,
    # so that this module does not import fit (which imports it)
    if not isinstance(W, np.ndarray) and hasattr(W, "W") and hasattr(W, "intercept"):
        if intercept is not None:
            raise ValueError("give the intercept either in the FitResult or as "
                             "intercept=, not both (evaluate(X, y, result) uses "
                             "result.intercept)")
        if fm:
            raise ValueError("a FitResult's W is K x D: evaluate(X, y, result) takes "
                             "layout='class' (the default)")
        W, intercept = W.W, W.intercept
    for name, a in (("W", W), ("intercept", intercept)):
        if sp.issparse(a):
            raise ValueError(f"{name} must be a dense array; got a scipy.sparse "
                             f"{a.format.upper()} matrix (use {name}.toarray())")
    return W, intercept


def _estimator_model(model, intercept, fm):
    """``(W, intercept, classes)`` of a fitted scikit-learn-style linear classifier
    (:class:`~scalable_softmax.SoftmaxSGDClassifier`: ``coef_`` K x D, ``intercept_``,
    ``classes_``), or None when ``model`` is not an estimator."""
    if isinstance(model, np.ndarray) or not (hasattr(model, "get_params")
                                             or hasattr(model, "coef_")):
        return None
    if not (hasattr(model, "coef_") and hasattr(model, "classes_")):
        raise ValueError(f"the {type(model).__name__} given as the model is not fitted "
                         "(it has no coef_ and classes_): call its fit first")
    if intercept is not None:
        raise ValueError("give the intercept either in the estimator or as intercept=, "
                         "not both (evaluate(X, y, estimator) uses its intercept_)")
    if fm:
        raise ValueError("an estimator's coef_ is K x D: evaluate(X, y, estimator) takes "
                         "layout='class' (the default)")
    b = getattr(model, "intercept_", None)
    if not getattr(model, "fit_intercept", True):
        b = None                            # zeros: no intercept to add
    return np.asarray(model.coef_), b, np.asarray(model.classes_)


def _labels_of(y, classes, name="y"):
    """The labels ``y`` (any of ``classes``, as the estimator was fitted with) as the
    class indices ``0..K-1`` of ``classes`` (sorted, as scikit-learn keeps them)."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels; got shape {y.shape}")
    try:
        idx = np.clip(np.searchsorted(classes, y), 0, len(classes) - 1)
        bad = classes[idx] != y
    except TypeError:
        raise ValueError(f"{name} holds labels of type {y.dtype}, not comparable with the "
                         f"estimator's classes_ ({classes.dtype})") from None
    if np.any(bad):
        unknown = np.unique(y[bad])[:10]
        raise ValueError(f"{name}: labels {unknown.tolist()} are not among the "
                         f"estimator's classes_ {classes.tolist()[:20]}")
    return idx.astype(np.int64)


def _with_intercept(X, W, intercept, fm):
    """``W`` with the checked ``intercept`` as one more column (``fm``: row); ``X`` (CSR)
    only for its width."""
    Wa = np.asarray(W)
    if Wa.ndim == 2 and Wa.shape[1 - fm] != X.shape[1]:
        _width_mismatch(X, Wa, fm)
    b = np.asarray(intercept)
    if Wa.ndim != 2 or b.shape != (Wa.shape[int(fm)],):
        K = Wa.shape[int(fm)] if Wa.ndim == 2 else "K"
        raise ValueError(f"intercept must have shape (K,) = ({K},), one "
                         f"b_k per class of W; got shape {b.shape}")
    if not (np.issubdtype(b.dtype, np.floating) or np.issubdtype(b.dtype, np.integer)):
        raise ValueError(f"intercept must be a real numeric array; got dtype {b.dtype}")
    if not np.all(np.isfinite(b)):
        raise NonFiniteWeightsError("intercept contains NaN or infinite values (a diverged "
                                    "run?); evaluate only finite models")
    dtype = np.float32 if Wa.dtype == np.float32 and b.dtype == np.float32 else np.float64
    if fm:
        return np.ascontiguousarray(np.vstack([Wa.astype(dtype, copy=False),
                                               b.astype(dtype)[None, :]]))
    return np.ascontiguousarray(np.hstack([Wa.astype(dtype, copy=False),
                                           b.astype(dtype)[:, None]]))


def _with_ones(X):
    """The CSR ``X`` with a column of ones appended (the intercept's feature)."""
    ones = sp.csr_matrix(np.ones((X.shape[0], 1)))
    Xb = sp.hstack([X, ones], format="csr", dtype=np.float64)
    Xb.sort_indices()
    return Xb


def _summary(nll, err, dfc):
    """The :class:`Evaluation` (means) of per-row metrics."""
    n = nll.size
    with np.errstate(over="ignore"):
        total = np.sum(nll)
    # every row's loss is finite (else per_row raised); huge ones may overflow the sum
    log_loss = total / n if np.isfinite(total) else np.sum(nll / n)
    return Evaluation(log_loss=float(log_loss), error=float(np.sum(err) / n),
                      defective=float(np.sum(dfc) / n), n_rows=int(n))


def evaluate(X, y, W, *, intercept=None, rows=None, subsample=None, seed=0,
             block_rows=None, threads=None, precision=None, layout="class"):
    """Exact log-loss, error and defective metric of the model ``W`` (scores
    ``x . w_k``, or ``x . w_k + b_k`` with ``intercept``) on ``(X, y)``.

    Parameters
    ----------
    X : scipy.sparse matrix or 2-D ndarray, shape (N, D)
        Data; converted to float64 CSR (a dense array's zeros are dropped); its values
        are rounded to float32 for ``precision="float32"``.
    y : integer ndarray, shape (N,)
        Labels in ``0..K-1``.
    W : ndarray, shape (K, D), FitResult or fitted estimator
        Weights, row ``k`` is ``w_k``; converted to float64 C-contiguous (no copy if
        it already is; a C-contiguous float32 ``W`` is used as is for
        ``precision="float32"``), or ``D x K`` with ``layout="feature"``. Must be
        finite. A
        :class:`~scalable_softmax.fit.FitResult` stands for its model: its ``W`` and
        its ``intercept`` (None without ``fit_intercept``), the scores of its
        :meth:`~scalable_softmax.fit.FitResult.predict_proba`. A fitted
        :class:`~scalable_softmax.SoftmaxSGDClassifier` (or any estimator with
        ``coef_``, ``intercept_`` and ``classes_``) stands for its model too, and ``y``
        then holds its labels (any of ``classes_``, mapped to their positions; a label
        not among them raises ``ValueError``).
    intercept : ndarray, shape (K,), optional
        Per-class intercepts ``b_k`` (``FitResult.intercept`` of a fit with
        ``fit_intercept=True``); without it the scores have none. Not with a
        ``FitResult`` (which carries its own).
    rows : integer array, optional
        Evaluate only these rows (in this order; repeats count twice).
    subsample : int, optional
        Evaluate a fixed random sample of this many distinct rows, drawn with
        ``numpy.random.default_rng(seed)`` and sorted. Exclusive with ``rows``.
    seed : int
        Seed of the subsample (ignored otherwise).
    block_rows : int, optional
        Rows per parallel task (default 32).
    threads : int, optional
        Number of numba threads for this call (default: numba's current setting). On
        one thread, or for a pass of fewer than ``SERIAL_WORK`` multiply-adds, the
        kernels' serial twins run (bit-identical results; a new process compiles them
        in about half the time of the parallel kernels).
    precision : {"float32", "float64"}, optional
        Arithmetic of the scores (default ``DEFAULT_PRECISION``, "float32"):
        "float64" the reference path, within about 1e-12 of
        :mod:`scalable_softmax.objectives`; "float32" float32 scores and
        exponentials with float64 running sums, 2-3x faster, the mean log-loss
        within about 1e-6 relative of "float64" (1e-12 on the benchmark's data;
        module docstring, section Precision).
    layout : {"class", "feature"}
        How ``W`` is stored: "class" (default) ``K x D``, row ``k`` is ``w_k``;
        "feature" ``D x K``, row ``j`` holds feature ``j``'s weight of every class
        (``W.T`` of the former; the layout of a feature-major trainer,
        :meth:`~scalable_softmax.methods.base.Trainer.native_weights`). The results
        are bit-identical; "feature" skips the transposes: each tile of classes is
        a copy of contiguous slices, and a feature-major model needs no ``K x D``
        copy (2.4 GB at ``K = 30,000``, ``D = 10,000``). An ``intercept`` is given
        as with "class"; not with a ``FitResult`` (whose ``W`` is ``K x D``).

    Returns
    -------
    Evaluation
        ``log_loss``, ``error``, ``defective`` and ``n_rows``.

    Raises
    ------
    ValueError
        On shape mismatch (``W``'s width not ``X``'s ``D``, ``intercept`` not of
        length ``K``), labels out of range, non-finite ``X``, empty or out-of-range
        ``rows``, a bad ``subsample``, ``block_rows``, ``threads`` or ``precision``.
    NonFiniteWeightsError
        A ``ValueError``: ``W`` or ``intercept`` holds NaN or infinite values (a
        diverged run).
    NonFiniteScoreError
        When finite but huge weights make a score, or a row's log-loss, overflow
        (the message names the row and the class); never a NaN result.

    Notes
    -----
    Cost ``O(nnz(X_rows) K + K D)``; memory ``O(D tile + threads tile + 21 n_rows)``
    numbers with ``tile = 256`` classes (see the module docstring). The result does not depend on
    ``threads`` or ``block_rows``: every row is computed in a fixed order (in either
    precision).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.eye(2); y = np.array([0, 1]); W = np.zeros((3, 2))
    >>> ev = evaluate(X, y, W)
    >>> bool(np.isclose(ev.log_loss, np.log(3))), ev.error, ev.n_rows
    (True, 0.5, 2)
    >>> ev = evaluate(X, y, W, intercept=np.array([0.0, 0.0, np.log(2)]))
    >>> bool(np.isclose(ev.log_loss, np.log(4)))
    True
    """
    fm = _check_layout(layout)
    est = _estimator_model(W, intercept, fm)
    if est is not None:                     # a fitted estimator: its labels -> 0..K-1
        W, intercept, classes = est
        y = _labels_of(y, classes)
    X, W = _model_inputs(X, W, intercept, fm)
    nll, err, dfc, sel = per_row(X, y, W, rows=rows, subsample=subsample, seed=seed,
                                 block_rows=block_rows, threads=threads,
                                 precision=precision, layout=layout)
    return _summary(nll, err, dfc)


def evaluate_sets(sets, W, *, intercept=None, block_rows=None, threads=None,
                  precision=None, layout="class"):
    """:func:`evaluate` of one model on several data sets (say train, validation and
    test) in one pass over ``W``.

    ``W`` is checked and converted once (dtype, contiguity, finiteness: one pass), the
    sets' rows are stacked and scored together in one pass over ``W``'s tiles, and each
    set's per-row metrics are averaged as :func:`evaluate` averages them: every result
    is bit-identical to ``evaluate(X, y, W, ...)`` on that set with the same options
    (a row's metrics do not depend on the other rows scored with it).

    Parameters
    ----------
    sets : dict of str to (X, y)
        The data sets by name; each ``X`` (scipy.sparse matrix or 2-D ndarray,
        shape (N, D)) and ``y`` (integer ndarray, shape (N,), labels in ``0..K-1``)
        as in :func:`evaluate`. Every ``X`` has the same ``D``.
    W : ndarray, shape (K, D), FitResult or fitted estimator
        Weights, as in :func:`evaluate` (``D x K`` with ``layout="feature"``); with an
        estimator every set's ``y`` holds its labels, as in :func:`evaluate`.
    intercept : ndarray, shape (K,), optional
        Per-class intercepts ``b_k``, as in :func:`evaluate`.
    block_rows : int, optional
        Rows per parallel task (default 32).
    threads : int, optional
        Number of numba threads for this call (default: numba's current setting).
    precision : {"float32", "float64"}, optional
        Arithmetic of the scores (default ``DEFAULT_PRECISION``), as in
        :func:`evaluate`. With "float32", a set holding a score that overflows float32
        is redone in float64, as :func:`evaluate` redoes it; the other sets keep
        their float32 results.
    layout : {"class", "feature"}
        How ``W`` is stored, as in :func:`evaluate`.

    Returns
    -------
    dict of str to Evaluation
        Each set's ``log_loss``, ``error``, ``defective`` and ``n_rows``, in the order
        of ``sets``.

    Raises
    ------
    ValueError
        On an empty ``sets``, an entry not an ``(X, y)`` pair, sets of different
        widths ``D``, and the errors of :func:`evaluate` (a set's ``X`` or labels
        are named by the set).
    NonFiniteWeightsError
        A ``ValueError``: ``W`` or ``intercept`` holds NaN or infinite values (a
        diverged run).
    NonFiniteScoreError
        When finite but huge weights make a score, or a row's log-loss, overflow
        (the message names the set, the row of its ``X`` and the class).

    Notes
    -----
    Cost ``O(nnz(X) K + K D)`` with ``X`` all the sets' rows: ``W`` is read (and, for
    ``layout="class"``, each tile transposed) once instead of once per set. Memory as
    :func:`evaluate` on all the rows, plus a stacked copy of the sets' ``X``.

    Examples
    --------
    >>> import numpy as np
    >>> W = np.zeros((3, 2))
    >>> evs = evaluate_sets({"train": (np.eye(2), np.array([0, 1])),
    ...                      "test": (np.ones((1, 2)), np.array([2]))}, W)
    >>> evs["train"].error, evs["test"].n_rows
    (0.5, 1)
    >>> evs["test"] == evaluate(np.ones((1, 2)), np.array([2]), W)
    True
    """
    precision = _check_precision(precision)
    fm = _check_layout(layout)
    _check_pass_options(block_rows, None, threads)
    if not isinstance(sets, Mapping):
        raise ValueError(f"sets must be a dict of name -> (X, y); got {type(sets).__name__}")
    if not sets:
        raise ValueError("sets is empty: give at least one data set, name -> (X, y)")
    names, Xs, ys = list(sets), [], []
    for name in names:
        pair = sets[name]
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"set {name!r} must be a pair (X, y); got "
                             f"{type(pair).__name__}")
        Xs.append(as_csr(pair[0], f"X of set {name!r}"))
        ys.append(pair[1])
    est = _estimator_model(W, intercept, fm)
    if est is not None:                     # a fitted estimator: its labels -> 0..K-1
        W, intercept, classes = est
        ys = [_labels_of(y, classes, f"y of set {name!r}") for name, y in zip(names, ys)]
    D = Xs[0].shape[1]
    for name, X in zip(names, Xs):
        if X.shape[1] != D:
            raise ValueError(f"X of set {name!r} has D = {X.shape[1]} columns (shape "
                             f"{X.shape}) but X of set {names[0]!r} has D = {D}: every "
                             "set must have the same features")
    W, intercept = _unpack_model(W, intercept, fm)
    if intercept is not None:
        W = _with_intercept(Xs[0], W, intercept, fm)
        Xs = [_with_ones(X) for X in Xs]
    W, K = _check_weights(Xs[0], W, keep_float32=precision == "float32", fm=fm)
    ys = [_check_labels(y, X.shape[0], K, fm, f"y of set {name!r}")
          for name, X, y in zip(names, Xs, ys)]
    bounds = np.cumsum([0] + [X.shape[0] for X in Xs])
    X = Xs[0] if len(Xs) == 1 else sp.vstack(Xs, format="csr")  # rows kept as they are
    y = ys[0] if len(ys) == 1 else np.concatenate(ys)
    sel = np.arange(X.shape[0], dtype=np.int64)
    nll, err, dfc = _row_pass(X, y, W, sel, block_rows=block_rows, threads=threads,
                              tile=None, precision=precision, fm=fm, groups=bounds)
    out = {}
    for name, Xi, yi, a, b in zip(names, Xs, ys, bounds[:-1], bounds[1:]):
        _raise_nonfinite(Xi, yi, W, sel[:b - a], nll[a:b], dfc[a:b], fm,
                         where=f"in set {name!r}: ")
        out[name] = _summary(nll[a:b], err[a:b], dfc[a:b])
    return out
