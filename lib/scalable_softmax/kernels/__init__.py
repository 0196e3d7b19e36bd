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
    the numba flags, prefetch hints, scalar helpers, the splitmix64 random stream and
    the sparse-row helpers several families share.
:mod:`scalable_softmax.kernels.sgd`
    explicit SGD (``"vanilla"``, ``"umax"``, ``"raman"``).
:mod:`scalable_softmax.kernels.implicit`
    implicit SGD (``"implicit"``).
:mod:`scalable_softmax.kernels.implicit_batch`
    implicit-batch (``"implicit-batch"``): one Newton solve of the reduced problem.
:mod:`scalable_softmax.kernels.sampled`
    the sampled softmax methods (``"ove"``, ``"nce"``, ``"is"``).
:mod:`scalable_softmax.kernels.full`
    the full-batch objectives (``"exact"``, ``"bouchard"``, ``"ove-exact"``).
:mod:`scalable_softmax.kernels.softmax_sgd`
    full-softmax SGD (``"softmax-sgd"``): the epochs on feature-major and on
    class-major weights and their pieces.
:mod:`scalable_softmax.kernels.evaluate`
    the scoring kernels of :func:`scalable_softmax.evaluate.evaluate`.
:mod:`scalable_softmax.kernels.lambertw`
    the Lambert W function of implicit SGD's step.
:mod:`scalable_softmax.kernels.surrogate`, :mod:`scalable_softmax.kernels.nonparametric`
    the surrogate data sets' planted model and notebook 08's One-vs-Each steps.
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

Every function here takes arrays, never a trainer: a trainer's data and kernel mode as
its kernels see them (``csr_arrays``, ``prefetch_mode``, ``set_prefetch_mode``,
``dense_rows``) and the value an L-BFGS trainer minimises (``objective``) are in
:mod:`scalable_softmax.methods` (reached through this package they still work, with a
``DeprecationWarning``).
"""
from __future__ import annotations

from scalable_softmax.kernels.common import logaddexp, prefetch_r, prefetch_w, sigmoid, softplus

__all__ = ["prefetch_r", "prefetch_w", "softplus", "logaddexp", "sigmoid"]

#: the trainer accessors that were here, now in :mod:`scalable_softmax.methods`
_MOVED = ("csr_arrays", "prefetch_mode", "set_prefetch_mode", "dense_rows", "objective")


def __getattr__(name):
    if name in _MOVED:
        import warnings

        from scalable_softmax import methods

        warnings.warn(f"scalable_softmax.kernels.{name} takes a trainer and moved to "
                      f"scalable_softmax.methods.{name}", DeprecationWarning, stacklevel=2)
        return getattr(methods, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


