"""The library's numba code, one module per method family, under public names.

Every method module of :mod:`scalable_softmax.methods` holds its trainers and the plain
NumPy ``reference_step`` they are tested against; the numba kernels they call live here,
so a benchmark times (and a test replays) the library's own objects. The names are kept
from version to version; the arguments follow the kernels (each is documented where it
is defined) and may change with them. Training, evaluation and the reference steps are
not here: use :func:`scalable_softmax.fit.fit`, :func:`scalable_softmax.evaluate.evaluate`
and the ``reference_step`` of each method module.

The submodules:

:mod:`scalable_softmax.kernels.common`
    the splitmix64 random stream and the sparse-row helpers several families share.
:mod:`scalable_softmax.kernels.sgd`
    explicit SGD (``"vanilla"``, ``"umax"``, ``"raman"``).
:mod:`scalable_softmax.kernels.implicit`
    implicit SGD (``"implicit"``).
:mod:`scalable_softmax.kernels.implicit_batch`
    implicit-batch (``"implicit-batch"``): one Newton solve of the reduced problem.
:mod:`scalable_softmax.kernels.sampled`
    the sampled softmax methods (``"ove"``, ``"nce"``, ``"is"``).
:mod:`scalable_softmax.kernels.full`
    full-softmax SGD (``"softmax-sgd"``) and the full-batch objectives (``"exact"``,
    ``"bouchard"``, ``"ove-exact"``).
:mod:`scalable_softmax.kernels.evaluate`
    the scoring kernels of :func:`scalable_softmax.evaluate.evaluate`.
:mod:`scalable_softmax.kernels.softmax_sgd`
    the epoch of ``softmax-sgd`` on feature-major weights and its pieces (the module
    itself, not a re-export).
:mod:`scalable_softmax.kernels.hogwild`
    the lock-free two-or-more-thread epochs of ``"implicit"`` and ``"implicit-batch"``
    (option ``threads``), built from the serial kernels' step functions.
:mod:`scalable_softmax.kernels.threads`
    ``numba_threads(n)``, the context manager every parallel kernel runs inside (the
    one place that sets numba's thread count).

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

from scalable_softmax.kernels.common import logaddexp, prefetch_r, prefetch_w, sigmoid, softplus

__all__ = ["prefetch_r", "prefetch_w", "softplus", "logaddexp", "sigmoid", "csr_arrays",
           "prefetch_mode", "set_prefetch_mode", "dense_rows", "objective"]


def csr_arrays(trainer):
    """The CSR arrays and labels a trainer's kernels read
    (:meth:`scalable_softmax.methods.base.Trainer.csr_arrays`).

    Parameters
    ----------
    trainer : scalable_softmax.methods.base.Trainer
        A trainer of any registered method.

    Returns
    -------
    indptr, indices, data, y : ndarray
        The trainer's own contiguous arrays (not copies): ``indptr`` int64, ``indices``
        int32 or int64 as the method stores them, ``data`` float64, ``y`` int64.
    """
    return trainer.csr_arrays()


def prefetch_mode(trainer) -> int:
    """The kernel mode (0 plain, 1 to 3 pipelined; see
    :func:`scalable_softmax.kernels.sgd.epoch_m1`) an explicit-SGD trainer runs."""
    return trainer.prefetch_mode


def set_prefetch_mode(trainer, mode: int) -> None:
    """Make an explicit-SGD trainer run kernel mode ``mode`` (0 to 3) from its next epoch;
    every mode gives bit-identical results, only the memory hints differ."""
    trainer.prefetch_mode = mode


def dense_rows(trainer) -> bool:
    """True when an explicit-SGD trainer runs its dense-row path (every row of ``X``
    stores all ``D`` columns)."""
    return trainer.dense_rows


def objective(trainer, x):
    """The value and gradient an L-BFGS trainer (``"exact"``, ``"bouchard"``,
    ``"ove-exact"``) minimises, at the flat parameter vector ``x``: what each of its
    iterations evaluates (:meth:`scalable_softmax.methods.full.ExactTrainer.objective_at`).

    Returns
    -------
    value : float
    gradient : ndarray, the shape of ``x``
    """
    return trainer.objective_at(x)
