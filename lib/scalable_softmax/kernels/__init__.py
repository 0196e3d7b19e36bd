"""The library's numba building blocks, public for benchmarks and for code that times or
replays what a kernel does.

Every name here is the very object the library's kernels call (a re-export, not a copy),
so a loop built from them makes the kernels' accesses and arithmetic and a benchmark
times the library's own code. The names are kept from version to version; the arguments
follow the kernels (each is documented where it is defined) and may change with them.
Training, evaluation and the reference steps are not here: use
:func:`scalable_softmax.fit.fit`, :func:`scalable_softmax.evaluate.evaluate` and the
``reference_step`` of each method module (:mod:`scalable_softmax.methods`).

The submodules:

:mod:`scalable_softmax.kernels.sgd`
    the class draws and prefetch mode of the explicit-SGD kernels.
:mod:`scalable_softmax.kernels.sampled`
    the cache hints and fused dot products of the sampled-softmax kernels.
:mod:`scalable_softmax.kernels.implicit_batch`
    the pieces of one Newton iteration of implicit-batch's reduced problem.
:mod:`scalable_softmax.kernels.evaluate`
    the float32 scoring kernels of :func:`scalable_softmax.evaluate.evaluate`.
:mod:`scalable_softmax.kernels.softmax_sgd`
    the epoch of ``softmax-sgd`` on feature-major weights and its pieces (the module
    itself, not a re-export).

And here:

``prefetch_r(a, i)``, ``prefetch_w(W, k, j)``
    cache hints (``llvm.prefetch``) for reading ``a[i]`` and for writing ``W[k, j]``;
    callable from numba code only.
``softplus``, ``logaddexp``, ``sigmoid``
    the numerically safe scalar functions the kernels use (numba code only).
:func:`csr_arrays`, :func:`prefetch_mode`, :func:`set_prefetch_mode`, :func:`dense_rows`
    a trainer's data and kernel mode as its kernels see them.
:func:`objective`
    the value and gradient an L-BFGS trainer minimises.
"""
from __future__ import annotations

from scalable_softmax._kernels import logaddexp, prefetch_r, prefetch_w, sigmoid, softplus

__all__ = ["prefetch_r", "prefetch_w", "softplus", "logaddexp", "sigmoid", "csr_arrays",
           "prefetch_mode", "set_prefetch_mode", "dense_rows", "objective"]


def csr_arrays(trainer):
    """The CSR arrays and labels a trainer's kernels read.

    Parameters
    ----------
    trainer : scalable_softmax.methods.base.Trainer
        A stochastic trainer (``"vanilla"``, ``"umax"``, ``"raman"``, ``"implicit"``,
        ``"implicit-batch"``, ``"ove"``, ``"nce"``, ``"is"``, ``"softmax-sgd"``) or an
        L-BFGS one.

    Returns
    -------
    indptr, indices, data, y : ndarray
        The trainer's own contiguous arrays (not copies): ``indptr`` int64, ``indices``
        int32 or int64 as the method stores them, ``data`` float64, ``y`` int64.
    """
    return trainer._indptr, trainer._indices, trainer._data, trainer._y


def prefetch_mode(trainer) -> int:
    """The kernel mode (0 plain, 1 to 3 pipelined; see
    :func:`scalable_softmax.methods.sgd._epoch_m1`) an explicit-SGD trainer runs."""
    return trainer._pf_mode


def set_prefetch_mode(trainer, mode: int) -> None:
    """Make an explicit-SGD trainer run kernel mode ``mode`` (0 to 3) from its next epoch;
    every mode gives bit-identical results, only the memory hints differ."""
    if mode not in (0, 1, 2, 3):
        raise ValueError(f"mode must be 0, 1, 2 or 3; got {mode!r}")
    trainer._pf_mode = int(mode)


def dense_rows(trainer) -> bool:
    """True when an explicit-SGD trainer runs its dense-row path (every row of ``X``
    stores all ``D`` columns)."""
    return trainer._dense


def objective(trainer, x):
    """The value and gradient an L-BFGS trainer (``"exact"``, ``"bouchard"``,
    ``"ove-exact"``) minimises, at the flat parameter vector ``x``: what each of its
    iterations evaluates.

    Returns
    -------
    value : float
    gradient : ndarray, the shape of ``x``
    """
    return trainer._fun(x)
