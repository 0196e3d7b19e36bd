"""numba's thread count: the one place of the library that sets it.

``numba_threads(n)``
    a context manager: numba's parallel kernels run on ``n`` threads inside it, and the
    count in force before is restored after (also on an error). What every trainer,
    :func:`scalable_softmax.evaluate.evaluate` and a kernel benchmark use.
``pin_numba_threads(n)``
    set the count for the rest of the process, without restoring it: the pin of a
    notebook (:func:`scalable_softmax.repro.machinery.runner.pin_threads`) or of a worker process.

Both take at most numba's pool (``NUMBA_NUM_THREADS``, fixed when numba starts) and at
least 1; ``n = None`` leaves the count as it is. They do not validate: an option
``threads`` is checked once, by its method's option schema
(:data:`scalable_softmax.methods.base.THREADS_RULE`), before any data is loaded;
``softmax-sgd`` accepts more slices of its step than threads, run on at most the pool.
A test (``tests/test_threads.py``) keeps ``set_num_threads`` out of every other module
of the library.
"""
from __future__ import annotations

from contextlib import contextmanager

import numba

__all__ = ["numba_threads", "pin_numba_threads", "pool_size"]


def pool_size() -> int:
    """numba's pool: the most threads a parallel kernel can run on (``NUMBA_NUM_THREADS``)."""
    return int(numba.config.NUMBA_NUM_THREADS)


def _clamp(n) -> int:
    return max(1, min(int(n), pool_size()))


def pin_numba_threads(n: int | None) -> int:
    """Set numba's thread count to ``n`` (within ``1..NUMBA_NUM_THREADS``; None: the
    whole pool) for the rest of the process; returns the count set."""
    k = pool_size() if n is None else _clamp(n)
    numba.set_num_threads(k)
    return k


@contextmanager
def numba_threads(n: int | None):
    """Run numba's parallel kernels on ``n`` threads (within ``1..NUMBA_NUM_THREADS``)
    inside the ``with`` block; the count in force before is restored after, also on an
    error. ``n = None``: the count is left unchanged. Yields the count in force."""
    if n is None:
        yield numba.get_num_threads()
        return
    prev = numba.get_num_threads()
    k = _clamp(n)
    numba.set_num_threads(k)
    try:
        yield k
    finally:
        numba.set_num_threads(prev)
