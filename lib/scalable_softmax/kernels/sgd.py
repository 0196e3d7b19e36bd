"""The explicit-SGD kernels' class draws and prefetch mode
(:mod:`scalable_softmax.methods.sgd`).

``draw_classes_m1(seed, order, y, K)``
    int64 array, the class each step of an epoch with ``m = 1`` draws (uniform on the
    ``K - 1`` classes other than the label), from the epoch seed ``seed`` (an
    ``np.int64``); the same stream as the kernel's. Callable from numba code.
``draw_classes_multi(seed, order, y, K, m)``
    int64 array ``(len(order), m)``, the ``m`` distinct classes per step of an epoch
    with ``m > 1``. Callable from numba code.
``PREFETCH_DEFAULT``
    the kernel mode ``prefetch=True`` selects when ``W`` does not fit in the cache.

:func:`scalable_softmax.methods.sgd.draw_classes` returns the same draws as a list, and
:func:`scalable_softmax.kernels.set_prefetch_mode` chooses a trainer's mode.
"""
from scalable_softmax.methods.sgd import _PREFETCH_DEFAULT as PREFETCH_DEFAULT
from scalable_softmax.methods.sgd import _draw_classes_m1 as draw_classes_m1
from scalable_softmax.methods.sgd import _draw_classes_multi as draw_classes_multi

__all__ = ["draw_classes_m1", "draw_classes_multi", "PREFETCH_DEFAULT"]
