"""What every kernel shares: one set of numba JIT flags (``numba.njit(**JIT)`` for serial
kernels, ``numba.njit(**PJIT)`` for kernels parallelised with ``numba.prange``), scalar
numba helpers (stable softplus / sigmoid / logaddexp) and cache prefetch hints.

The prefetch hints emit ``llvm.prefetch`` (locality 3: keep in all cache levels; data
cache) for the address of an array element. They never change a result; under
``NUMBA_DISABLE_JIT=1`` they are no-ops so kernels still run as plain Python.
"""
from __future__ import annotations

import math

import numba
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["JIT", "PJIT", "softplus", "sigmoid", "logaddexp", "prefetch_r", "prefetch_w"]

#: flags for serial kernels
JIT = dict(nogil=True, cache=True, fastmath=False, boundscheck=False)
#: flags for kernels parallelised with ``numba.prange``
PJIT = dict(JIT, parallel=True)


@numba.njit(**JIT)
def softplus(z):
    """``log(1 + exp(z))`` without overflow."""
    if z > 0.0:
        return z + math.log1p(math.exp(-z))
    return math.log1p(math.exp(z))


@numba.njit(**JIT)
def sigmoid(z):
    """``1 / (1 + exp(-z))`` without overflow."""
    if z >= 0.0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


@numba.njit(**JIT)
def logaddexp(a, b):
    """``log(exp(a) + exp(b))`` without overflow."""
    if a >= b:
        return a + math.log1p(math.exp(b - a))
    return b + math.log1p(math.exp(a - b))


def _prefetch_codegen(rw):
    """Code generator of ``llvm.prefetch`` (``rw``: 0 read, 1 write intent)."""
    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = [context.cast(builder, v, t, types.intp)
               for v, t in zip(args[1:], signature.args[1:])]
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx,
                                       wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, rw),
                          ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return codegen


@intrinsic
def prefetch_w(typingctx, arr, i, j):
    """Hint: the cache line holding ``arr[i, j]`` (2-D) will be written soon."""
    return types.void(arr, i, j), _prefetch_codegen(1)


@intrinsic
def prefetch_r(typingctx, arr, i):
    """Hint: the cache line holding ``arr[i]`` (1-D) will be read soon."""
    return types.void(arr, i), _prefetch_codegen(0)


if numba.config.DISABLE_JIT:  # plain-Python runs: hints are no-ops
    def prefetch_w(arr, i, j):  # noqa: F811
        return None

    def prefetch_r(arr, i):  # noqa: F811
        return None
