"""What every kernel shares: one set of numba JIT flags (``numba.njit(**JIT)`` for serial
kernels, ``numba.njit(**PJIT)`` for kernels parallelised with ``numba.prange``,
``IJIT`` for small helpers inlined into their callers; ``inner(**JIT)`` for the helpers
only other kernels call, compiled without the wrapper a call from Python needs), the
scalar helpers (stable
``softplus``, ``sigmoid``, ``logaddexp``), cache prefetch hints (``prefetch_r``,
``prefetch_w``), the splitmix64 random stream, sparse-row dot products and updates,
pre-touched weight arrays, and a vectorised exponential and sum (``vexp``, ``lanesum``:
the exact evaluator and softmax SGD).

They live here, not in one method's module, so that every method imports them by their
public names (``sgd``, ``sampled`` and ``full`` all use them). (The flags, scalar
helpers and prefetch hints were in the private module ``scalable_softmax._kernels``.)

The prefetch hints emit ``llvm.prefetch`` (locality 3: keep in all cache levels; data
cache) for the address of an array element. They never change a result; under
``NUMBA_DISABLE_JIT=1`` they are no-ops so kernels still run as plain Python.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["JIT", "PJIT", "IJIT", "softplus", "sigmoid", "logaddexp", "prefetch_r",
           "prefetch_w", "rand_below", "seed_state", "dot", "axpy_check",
           "prefetch_csr_row", "prefetch_ahead", "touched_zeros", "transpose_scaled", "vexp",
           "lanesum", "serial_twin", "inner"]

#: flags for serial kernels. ``no_cfunc_wrapper``: numba would otherwise emit, for every
#: compiled function, a C-callable wrapper that only a first-class function value needs
#: (a kernel passed as an argument to another kernel; none is); it is separate code, so
#: it changes no result, and leaving it out saves a new process part of its first
#: compile (``benchmarks/bench_first_fit.py``)
JIT = dict(nogil=True, cache=True, fastmath=False, boundscheck=False, no_cfunc_wrapper=True)
#: flags for kernels parallelised with ``numba.prange``
PJIT = dict(JIT, parallel=True)


def serial_twin(kernel, flags, inner_only=False, **calls):
    """A serial copy of the parallel kernel ``kernel`` (a ``numba.njit(**PJIT)``
    dispatcher): the same Python function compiled with ``flags`` (its own flags
    without ``parallel``), so that its ``prange`` loops run as plain loops. ``calls``
    replace the parallel kernels it calls by their twins (``name=twin``).

    Why: compiling a parallel kernel (numba's parfor passes, a gufunc per ``prange``
    loop) costs about twice the CPU time of the serial compile, which a new process pays
    before its first call even when it runs on one thread or the work is too small to
    split. Each iteration of a ``prange`` loop of the library's kernels computes its
    own rows or blocks, in the same order of operations whichever thread runs it, so the
    twin gives bit-identical results (``tests/test_first_fit.py`` compares them).

    The copy is a new function named ``<name>_serial`` in ``kernel``'s module, so that
    numba's disk cache (``cache=True``), whose files are named after the function's
    qualified name, keeps the two apart. Its globals are the module's at the time of
    the call (with ``calls``): make twins after everything they call is defined.
    ``inner_only``: the twin is an :func:`inner` kernel (only other kernels call it).
    """
    if flags.get("parallel"):
        raise ValueError("serial_twin: flags must not set parallel")
    f = getattr(kernel, "py_func", kernel)          # a plain function under DISABLE_JIT
    twin = _renamed(f, "_serial", calls)
    twin.__doc__ = (f"Serial twin of :func:`{f.__name__}` (bit-identical; "
                    f":func:`~scalable_softmax.kernels.common.serial_twin`).\n\n"
                    + (f.__doc__ or ""))
    return (inner(**flags) if inner_only else numba.njit(**flags))(twin)


def _renamed(f, suffix, calls=None):
    """A copy of the function ``f`` named ``<name><suffix>`` (its own files in numba's
    disk cache, which names them after the qualified name), its globals ``f``'s with
    ``calls``."""
    import types as _pytypes

    twin = _pytypes.FunctionType(f.__code__, dict(f.__globals__, **(calls or {})),
                                 f.__name__ + suffix, f.__defaults__, f.__closure__)
    twin.__qualname__ = f.__qualname__ + suffix
    twin.__module__ = f.__module__
    twin.__doc__ = f.__doc__
    return twin


class _InnerDispatcher(numba.core.registry.CPUDispatcher):
    """The dispatcher of an :func:`inner` kernel: compiled without numba's CPython
    wrapper, so a call from Python goes to :attr:`python_twin` instead."""

    _twin = None
    _flags = None     # inner()'s flags (with the wrapper), for the twin

    @property
    def python_twin(self):
        """The same function compiled with the wrapper (made on the first call from
        Python; named ``<name>_py`` in numba's disk cache)."""
        if self._twin is None:
            self._twin = numba.njit(**self._flags)(_renamed(self.py_func, "_py"))
        return self._twin

    def __call__(self, *args, **kwargs):
        return self.python_twin(*args, **kwargs)


def inner(**flags):
    """``numba.njit(**flags)`` for a kernel that only other kernels call (a helper, which
    LLVM inlines into its callers): compiled without numba's CPython wrapper, the
    argument unboxing and result boxing a call from Python needs. The wrapper is
    separate code, so the kernel's results are the same, and a new process compiles
    less before its first fit (``benchmarks/bench_first_fit.py``; the first fit of
    Implicit SGD with its monitoring calls most of the helpers marked so).

    A call from Python (a test, a user) still works: it runs :attr:`python_twin`, the
    same function compiled with the wrapper, under its own name in the disk cache (a
    process that calls a helper from Python as well as from kernels compiles it twice).
    Under ``NUMBA_DISABLE_JIT=1`` the function is returned as it is.
    """
    def decorate(f):
        if numba.config.DISABLE_JIT:
            return f
        disp = numba.njit(**flags, no_cpython_wrapper=True)(f)
        disp.__class__ = _InnerDispatcher     # same layout: a Python subclass
        disp._flags = dict(flags)
        return disp
    return decorate


@inner(**JIT)
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


#: flags of the small helpers inlined (numba IR) into every kernel that calls them
IJIT = dict(JIT, inline="always")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_TWO_M53 = 2.0 ** -53
# the vectorised exponential (vexp)
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # fdlibm split of log(2): hi has 32 significant bits
_LN2_LO = 1.90821492927058770002e-10
_SHIFT = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer in the low bits
_EXP_MIN = -708.0  # exp(-708) ~ 3e-308 is still a normal number


@numba.njit(**JIT)
def _rng_next(state):
    """One splitmix64 step: ``(new_state, 64 random bits)``."""
    state = state + _GOLDEN
    z = state
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return state, z ^ (z >> np.uint64(31))


@numba.njit(**JIT)
def rand_below(state, n):
    """``(new_state, r)`` with ``r`` uniform on ``0..n-1`` (``n >= 1``)."""
    state, z = _rng_next(state)
    r = np.int64((z >> np.uint64(11)) * _TWO_M53 * n)
    if r >= n:
        r = n - 1
    return state, r


@numba.njit(**JIT)
def seed_state(seed):
    """The generator state of an integer seed (one splitmix64 step from it)."""
    state = np.uint64(seed)
    state, z = _rng_next(state)
    return z


@numba.njit(**JIT)
def dot(indices, data, p0, p1, row):
    """``sum_p data[p] * row[indices[p]]`` with four partial sums (shorter
    dependency chains; every kernel uses this one summation order: exact softmax SGD
    calls this function, the sampled kernels of :mod:`.sampled` ``dot1``, ``dot2`` and
    ``dot3``)."""
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    p = p0
    while p + 4 <= p1:
        a0 += data[p] * row[indices[p]]
        a1 += data[p + 1] * row[indices[p + 1]]
        a2 += data[p + 2] * row[indices[p + 2]]
        a3 += data[p + 3] * row[indices[p + 3]]
        p += 4
    while p < p1:
        a0 += data[p] * row[indices[p]]
        p += 1
    return (a0 + a1) + (a2 + a3)


@numba.njit(**JIT)
def axpy_check(indices, data, p0, p1, row, a):
    """``row[indices[p]] -= a * data[p]``; returns 1 if a written value is not finite."""
    bad = 0
    for p in range(p0, p1):
        f = indices[p]
        v = row[f] - a * data[p]
        row[f] = v
        if not abs(v) < np.inf:
            bad = 1
    return bad


@numba.njit(**IJIT)
def prefetch_csr_row(indptr, indices, data, j, with_indices):
    """Hint the lines of row ``j`` of a CSR matrix for reading: its values (one hint per
    8 entries and the last one) and, when ``with_indices``, its column indices (one per
    16 and the last). The software pipelines of the SGD and implicit kernels hint the
    row a few steps ahead this way; hints never change a result."""
    b0 = indptr[j]
    b1 = indptr[j + 1]
    if b1 > b0:
        for p in range(b0, b1, 8):
            prefetch_r(data, p)
        prefetch_r(data, b1 - 1)
        if with_indices:
            for p in range(b0, b1, 16):
                prefetch_r(indices, p)
            prefetch_r(indices, b1 - 1)


@numba.njit(**IJIT)
def prefetch_ahead(indptr, indices, data, y, u, extra, with_extra, order, t, end, li, lx,
                   with_indices):
    """The datapoint pipeline of the one-datapoint-per-step kernels (explicit SGD,
    implicit SGD and its Hogwild chunks), one copy for all: at step ``t`` of the steps
    before ``end`` of ``order``, hint the per-datapoint values of step ``t + li``
    (``indptr``, ``y``, ``u`` and, when ``with_extra``, ``extra``: ``||x||^2``) and the
    CSR row of step ``t + lx`` (:func:`prefetch_csr_row`). Hints never change a
    result."""
    if t + li < end:
        j = order[t + li]
        prefetch_r(indptr, j)
        prefetch_r(y, j)
        prefetch_r(u, j)
        if with_extra:
            prefetch_r(extra, j)
    if t + lx < end:
        prefetch_csr_row(indptr, indices, data, order[t + lx], with_indices)


def touched_zeros(K, D):
    """A ``K x D`` float64 zero array whose every page has been written."""
    W = np.empty((K, D), dtype=np.float64)
    W.fill(0.0)
    return W


#: side of the square tiles of :func:`transpose_scaled` (two 32 KiB float64 tiles fit in
#: a core's L1 and L2 together; the exact value changes speed, never the result)
TRANSPOSE_TILE = 64


@numba.njit(**PJIT)
def transpose_scaled(src, c, out):
    """``out[k, d] = src[d, k] * c`` for a C-contiguous ``D x K`` ``src`` and ``K x D``
    ``out``, tile by tile (a plain ``out[...] = src.T`` strides through ``src`` one cache
    line per element: 5 s for ``K = 30,000``, ``D = 10,000`` on one core). Each entry is
    the one product NumPy's ``np.multiply(src.T, c)`` makes (``x * 1.0`` is ``x``), so
    the result does not depend on the tiles or the threads."""
    D, K = src.shape
    t = TRANSPOSE_TILE
    nkt = (K + t - 1) // t
    ndt = (D + t - 1) // t
    for b in numba.prange(nkt * ndt):
        k0 = (b // ndt) * t
        d0 = (b % ndt) * t
        k1 = min(K, k0 + t)
        d1 = min(D, d0 + t)
        for k in range(k0, k1):
            for d in range(d0, d1):
                out[k, d] = src[d, k] * c


@inner(**JIT)
def vexp(x, shift, out, tmpf, tmpi, n):
    """``out[t] = exp(x[t] - shift)`` for ``t < n`` and ``x[t] <= shift`` (finite), to
    about 1 ulp.

    Written as three element-wise loops without branches or calls so that LLVM
    vectorises them. ``exp(z)`` for ``z = x - shift < -708`` is returned as 0 instead
    of a denormal (at most 3e-308; such terms are always added to a sum that is at
    least 1).
    ``tmpi`` must be ``tmpf.view(np.int64)``.
    """
    for t in range(n):
        xx = x[t] - shift
        xx = xx if xx > _EXP_MIN else _EXP_MIN
        kf = xx * _LOG2E + _SHIFT
        tmpf[t] = kf
        k = kf - _SHIFT  # round(x / log 2), exactly
        r = (xx - k * _LN2_HI) - k * _LN2_LO  # |r| <= log(2)/2
        # Taylor polynomial of degree 13 (truncation < 4e-18 relative), Horner
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        out[t] = p
    for t in range(n):
        # the low bits of kf hold k (two's complement): 2**k = (k + 1023) << 52
        tmpi[t] = (tmpi[t] + 1023) << 52
    for t in range(n):
        v = out[t] * tmpf[t]
        out[t] = v if x[t] - shift >= _EXP_MIN else 0.0


@inner(**JIT)
def lanesum(x, n):
    """``sum(x[:n])`` with eight interleaved partial sums (vectorisable)."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    n8 = n - n % 8
    for c in range(0, n8, 8):
        s0 += x[c]
        s1 += x[c + 1]
        s2 += x[c + 2]
        s3 += x[c + 3]
        s4 += x[c + 4]
        s5 += x[c + 5]
        s6 += x[c + 6]
        s7 += x[c + 7]
    for t in range(n8, n):
        s0 += x[t]
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
