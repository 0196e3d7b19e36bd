"""A fast first fit (issue 53, item 2): the evaluator's parallel kernels have serial
twins (``kernels.common.serial_twin``) that ``evaluate`` runs on one thread or on a pass
below ``SERIAL_WORK``, so a new process whose fit monitors a small set compiles no
parallel kernel (about half the compile time). The twins must give bit-identical
results: compared here with the parallel kernels, run on two threads, on problems with
several tiles, both layouts, both precisions, row subsets and the float32 overflow
fallback.
"""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import scalable_softmax.kernels.evaluate as kev
from scalable_softmax.kernels.common import JIT, PJIT, serial_twin
from scalable_softmax.kernels.threads import numba_threads

evm = importlib.import_module("scalable_softmax.evaluate")  # the module, not the function

THREADS = numba.config.NUMBA_NUM_THREADS
two_threads = pytest.mark.skipif(THREADS < 2, reason="needs numba's pool of 2 threads")
_KERNELS = ("state_pass", "state_pass32", "finish", "state_pass_serial",
            "state_pass32_serial", "finish_serial")


def _problem(seed, N, D, K, scale=1.0, density=0.3):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=density, random_state=rng, format="csr",
                  data_rvs=lambda n: rng.normal(size=n))
    y = rng.integers(0, K, N).astype(np.int64)
    return X, y, scale * rng.normal(size=(K, D))


def _bits(arrays):
    """The arrays' bytes: equal bits, NaN and signed zeros included."""
    return [np.ascontiguousarray(a).tobytes() for a in arrays]


@pytest.fixture
def calls(monkeypatch):
    """Which of the evaluator's kernels ``_row_pass`` calls (name -> count)."""
    seen = {}

    def spy(name, kernel):
        def call(*args):
            seen[name] = seen.get(name, 0) + 1
            return kernel(*args)
        return call

    for name in _KERNELS:
        monkeypatch.setattr(evm, name, spy(name, getattr(evm, name)))
    return seen


def _per_row_both(monkeypatch, calls, X, y, W, **kw):
    """``per_row`` through the serial twins (every pass below SERIAL_WORK) and through
    the parallel kernels (none below it) on two threads; checks which ran."""
    monkeypatch.setattr(evm, "SERIAL_WORK", 2**62)
    serial = evm.per_row(X, y, W, threads=2, **kw)
    assert set(calls) <= {"state_pass_serial", "state_pass32_serial", "finish_serial"}
    assert calls.pop("finish_serial") == 1
    calls.clear()
    monkeypatch.setattr(evm, "SERIAL_WORK", 0)
    parallel = evm.per_row(X, y, W, threads=2, **kw)
    assert set(calls) <= {"state_pass", "state_pass32", "finish"}
    assert calls.pop("finish") == 1
    calls.clear()
    return serial, parallel


@two_threads
@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("layout", ["class", "feature"])
@pytest.mark.parametrize("K, tile, block_rows", [(2, None, None), (37, 8, 5),
                                                 (300, None, 7)])
def test_serial_twins_are_bit_identical_to_the_parallel_kernels(monkeypatch, calls,
                                                                 precision, layout, K,
                                                                 tile, block_rows):
    X, y, W = _problem(seed=K, N=90, D=40, K=K, scale=3.0)
    Wl = np.ascontiguousarray(W.T) if layout == "feature" else W
    kw = dict(precision=precision, layout=layout, tile=tile, block_rows=block_rows)
    serial, parallel = _per_row_both(monkeypatch, calls, X, y, Wl, **kw)
    assert _bits(serial) == _bits(parallel)
    sub = dict(kw, rows=np.arange(3, 80, 4))          # a subset of the rows
    serial, parallel = _per_row_both(monkeypatch, calls, X, y, Wl, **sub)
    assert _bits(serial) == _bits(parallel)
    assert np.isfinite(serial[0]).all() and serial[0].size == 20   # it scored something


@two_threads
def test_serial_twins_on_the_float32_overflow_fallback(monkeypatch, calls):
    """Scores beyond float32's range send the pass to float64 (both kinds of kernel)."""
    X, y, W = _problem(seed=5, N=40, D=12, K=9)
    W[3] *= 1e37
    serial, parallel = _per_row_both(monkeypatch, calls, X, y, W, precision="float32")
    assert _bits(serial) == _bits(parallel)
    assert np.isfinite(serial[0]).all()


def test_the_kernels_themselves_agree_bit_for_bit():
    """The twins called directly, against the parallel kernels on two threads."""
    X, y, W = _problem(seed=11, N=70, D=33, K=21)
    indptr, indices = X.indptr.astype(np.int64), X.indices.astype(np.int32)
    sel = np.arange(70, dtype=np.int64)
    feats = np.empty(0, np.int64)
    with numba_threads(THREADS):
        for par, ser, data in ((kev.state_pass, kev.state_pass_serial, X.data),
                               (kev.state_pass32, kev.state_pass32_serial,
                                X.data.astype(np.float32))):
            a = par(indptr, indices, data, sel, y, W, 8, 3, False, feats)
            b = ser(indptr, indices, data, sel, y, W, 8, 3, False, feats)
            assert _bits(a) == _bits(b)
            assert _bits(kev.finish(*a, y, 21)) == _bits(kev.finish_serial(*b, y, 21))
        T1 = np.zeros((33, 8), np.float32)
        T2 = np.ones((33, 8), np.float32)
        kev.transpose32(W, 8, 8, T1, False, feats)
        kev.transpose32_serial(W, 8, 8, T2, False, feats)
        assert _bits([T1]) == _bits([T2]) and T1[0, 0] == np.float32(W[8, 0])


def test_a_twin_is_its_own_function_for_the_cache():
    """numba names its cache files after the function: a twin must not share the
    parallel kernel's (loading one for the other would run the wrong code)."""
    par, ser = kev.state_pass32, kev.state_pass32_serial
    assert ser.py_func.__code__ is par.py_func.__code__          # the same code
    assert ser.py_func.__qualname__ == "state_pass32_serial"
    assert "state_pass32_serial" in ser._cache._impl.filename_base
    assert ser._cache._impl.filename_base != par._cache._impl.filename_base
    assert ser.targetoptions.get("parallel") is None and par.targetoptions["parallel"]
    assert ser.targetoptions["fastmath"] == par.targetoptions["fastmath"]
    assert ser.py_func.__globals__["transpose32"] is kev.transpose32_serial
    assert "Serial twin of :func:`state_pass32`" in ser.py_func.__doc__
    with pytest.raises(ValueError, match="must not set parallel"):
        serial_twin(kev.finish, PJIT)
    assert serial_twin(kev.finish, JIT).py_func.__name__ == "finish_serial"


def test_work_is_the_rows_non_zeros_times_K_plus_the_tiles():
    X, y, W = _problem(seed=2, N=50, D=20, K=6)
    indptr = X.indptr.astype(np.int64)
    sel = np.arange(50, dtype=np.int64)
    assert evm._work(indptr, sel, 6, 20) == X.nnz * 6 + 6 * 20
    assert evm._work(indptr, sel[:10], 6, 20) == int(indptr[10]) * 6 + 120


@two_threads
def test_small_passes_or_one_thread_run_serial_large_ones_parallel(calls):
    small = _problem(seed=3, N=50, D=20, K=6)
    evm.per_row(*small, threads=2)                  # 50 x 6 x 6 non-zeros: serial
    assert calls == {"state_pass32_serial": 1, "finish_serial": 1}
    calls.clear()
    X, y, W = _problem(seed=4, N=2000, D=300, K=300, density=0.05)
    assert evm._work(X.indptr, np.arange(2000), 300, 300) >= evm.SERIAL_WORK
    evm.per_row(X, y, W, threads=2, precision="float64")
    assert calls == {"state_pass": 1, "finish": 1}
    calls.clear()
    evm.per_row(X, y, W, threads=1, precision="float64")
    assert calls == {"state_pass_serial": 1, "finish_serial": 1}


_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import normalize
    from scalable_softmax import fit
    import scalable_softmax.kernels.evaluate as kev
    import scalable_softmax.kernels.implicit as kim
    X, y = load_digits(return_X_y=True)
    X = normalize(X[:400])
    y = y[:400]
    fit(X, y, "implicit", 1.0, epochs=1, progress=False)
    names = ["state_pass", "state_pass32", "transpose32", "finish", "all_finite",
             "state_pass32_serial", "finish_serial"]
    out = {n: len(getattr(kev, n).signatures) for n in names}
    out["implicit.fill"] = len(kim.fill.signatures)
    print(json.dumps(out))
""")


def test_a_monitored_first_fit_compiles_no_parallel_kernel():
    """What the first fit of a new process compiles (or loads from the disk cache):
    the float32 evaluator's serial twins only (the monitoring of a small train set on
    numba's default threads), no parallel evaluator, no fill kernel. (With a warm
    cache the kernels called only from inside others, transpose32_serial, are not
    loaded at all: not counted.)"""
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"state_pass": 0, "state_pass32": 0, "transpose32": 0, "finish": 0,
                   "all_finite": 0, "state_pass32_serial": 1, "finish_serial": 1,
                   "implicit.fill": 0}


@pytest.mark.parametrize("shape", [(3, 4), (256, 256), (300, 301)])
def test_the_finiteness_check_on_both_routes(monkeypatch, shape):
    """``_weights_finite``: NumPy up to ``_SMALL_W`` entries, the kernel ``all_finite``
    beyond (or everywhere, with ``_SMALL_W = 0``); both say what ``np.isfinite`` says,
    a bad value anywhere (also in the last of several 65,536-entry blocks)."""
    rng = np.random.default_rng(sum(shape))
    W = rng.normal(size=shape)
    for small in (evm._SMALL_W, 0):
        monkeypatch.setattr(evm, "_SMALL_W", small)
        assert evm._weights_finite(W)
        for where in (0, W.size // 2, W.size - 1):
            for bad in (np.nan, np.inf, -np.inf):
                V = W.copy()
                V.flat[where] = bad
                assert not evm._weights_finite(V)
                assert not evm._weights_finite(V.astype(np.float32))


_WRAPPERS_CHILD = textwrap.dedent("""
    import json, re
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import normalize
    from scalable_softmax import fit
    from scalable_softmax.kernels import common, evaluate, implicit, lambertw
    X, y = load_digits(return_X_y=True)
    fit(normalize(X[:300]), y[:300], "implicit", 1.0, epochs=1, progress=False)
    def defines(ir, name):   # the library's LLVM IR defines the function ``name``
        return re.search(r'^define [^\\n]*@"?' + re.escape(name) + r'"?\\(', ir, re.M) is not None
    out = {}
    for mod in (common, evaluate, implicit, lambertw):
        for name, disp in vars(mod).items():
            for cres in getattr(disp, "overloads", {}).values():
                ir = cres.library.get_llvm_str()
                fd = cres.fndesc
                out[mod.__name__.split(".")[-1] + "." + name] = {
                    "inner": type(disp).__name__ == "_InnerDispatcher",
                    "cpython": defines(ir, fd.llvm_cpython_wrapper_name),
                    "cfunc": defines(ir, fd.llvm_cfunc_wrapper_name),
                    "itself": defines(ir, fd.mangled_name)}
    print(json.dumps(out))
""")


def test_the_first_fit_compiles_no_wrapper_it_does_not_call(tmp_path):
    """What a new process with an empty cache compiles for the first fit: no kernel gets
    numba's C wrapper (``JIT``'s ``no_cfunc_wrapper``), and the helpers only kernels
    call (``common.inner``) get no CPython wrapper; the kernels called from Python do."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))     # compiled, not loaded
    out = subprocess.run([sys.executable, "-c", _WRAPPERS_CHILD], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    inner = {n for n, g in got.items() if g["inner"]}
    assert {"evaluate.scores32", "evaluate.vexp32_sum", "evaluate.transpose32_serial",
            "implicit.solve_core", "implicit.apply_step", "lambertw.lambertw_exp",
            "common.softplus"} <= inner
    assert {"evaluate.state_pass32_serial", "evaluate.finish_serial",
            "implicit.epoch_fast", "implicit.row_sqnorms"} <= set(got) - inner
    assert all(g["itself"] for g in got.values()), got      # the check finds definitions
    assert not any(g["cfunc"] for g in got.values()), got
    assert {n for n, g in got.items() if g["cpython"]} == set(got) - inner


def test_an_inner_kernel_called_from_python_runs_its_twin():
    """A call from Python of a helper compiled without the CPython wrapper runs the same
    function compiled with it, under its own name in the disk cache; pickling keeps the
    dispatcher (numba's memo)."""
    import pickle

    rng = np.random.default_rng(5)
    x = rng.normal(size=37).astype(np.float32)
    f = kev.sum32to64
    assert type(f).__name__ == "_InnerDispatcher"
    assert f.targetoptions["no_cpython_wrapper"]
    got = f(x, 37)
    assert got == pytest.approx(float(np.sum(x.astype(np.float64))), rel=1e-12)
    twin = f.python_twin
    assert twin is f.python_twin and twin.py_func.__qualname__ == "sum32to64_py"
    assert "no_cpython_wrapper" not in twin.targetoptions
    assert twin.targetoptions["fastmath"] == f.targetoptions["fastmath"]
    assert twin._cache._impl.filename_base != f._cache._impl.filename_base
    assert twin(x, 37) == got
    assert pickle.loads(pickle.dumps(f)) is f
