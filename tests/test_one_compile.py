"""One compile per kernel (issue 53, item 1): the inputs are normalised before any
kernel is called (``validation.kernel_array`` / ``kernel_csr``: one index dtype, float64
values, C-contiguous, writable), so that fits on int32, int64, dense, Fortran-ordered and
read-only inputs, with int32 labels, with ``threads=2`` and through the estimator with
``n_jobs=2``, and evaluations in either precision, use one compiled signature of every
kernel.

The count is made in a new process (numba's dispatchers start there with no signature;
a kernel loaded from the on-disk cache counts as one), after fits of every registered
method on every kind of input.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax.validation import index_dtype, kernel_array, kernel_csr

#: helpers called only from inside other kernels, whose second typing comes from numba's
#: inference within those kernels (a literal ``0`` start of an argmax; a ``prange``
#: index typed uint64 in one parallel loop, int64 in another), the same in every run and
#: whatever the inputs; with a warm cache they are not compiled at all
NESTED_TWO_TYPINGS = {"scalable_softmax.kernels.full.alpha_g",
                      "scalable_softmax.kernels.softmax_sgd.class_bounds"}

_CHILD = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np, scipy.sparse as sp
    from numba.core.registry import CPUDispatcher
    from scalable_softmax import evaluate, fit
    from scalable_softmax.methods import METHODS, get_trainer_class

    def signatures():
        out = {}
        for name, mod in list(sys.modules.items()):
            if name.startswith("scalable_softmax") and mod is not None:
                for v in vars(mod).values():
                    if isinstance(v, CPUDispatcher) and v.signatures:
                        key = f"{v.py_func.__module__}.{v.py_func.__qualname__}"
                        out[key] = sorted(str(s) for s in v.signatures)
        return out

    N, D, K = 120, 30, 8
    X = sp.random(N, D, density=0.3, format="csr", random_state=0, dtype=np.float64)
    X.data += 0.1
    X = sp.csr_matrix(sp.diags(1 / np.sqrt(X.multiply(X).sum(axis=1).A1)) @ X)
    y = np.arange(N) % K

    def variants():
        X32 = X.copy()
        X32.indices = X32.indices.astype(np.int32)
        X32.indptr = X32.indptr.astype(np.int32)
        X64 = X.copy()
        X64.indices = X64.indices.astype(np.int64)
        X64.indptr = X64.indptr.astype(np.int64)
        Xro, yro = X64.copy(), y.copy()
        for a in (Xro.data, Xro.indices, Xro.indptr, yro):
            a.setflags(write=False)
        dense = X.toarray()
        dro = dense.copy()
        dro.setflags(write=False)
        return [("int32", X32, y), ("int64", X64, y), ("dense", dense, y),
                ("fortran", np.asfortranarray(dense), y), ("read-only", Xro, yro),
                ("read-only dense", dro, yro), ("int32 labels", X32, y.astype(np.int32))]

    def run(m, Xv, yv, opts):
        cls = get_trainer_class(m)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit(Xv, yv, m, None if cls.full_batch else 0.01, epochs=1, progress=False,
                eval_sets={"test": (Xv, yv)}, **opts)

    def evaluations(Xv, yv):
        W = np.full((K, D), 0.01)
        Wro = W.copy()
        Wro.setflags(write=False)
        for prec in ("float32", "float64"):
            evaluate(Xv, yv, W, precision=prec)
            evaluate(Xv, yv, np.asfortranarray(Wro), precision=prec)
            evaluate(Xv, yv, Wro, precision=prec)

    methods = sys.argv[1].split(",")
    first = variants()[0]
    for m in methods:                        # the canonical input first
        run(m, first[1], first[2], {})
        if get_trainer_class(m).parallel_kernel:
            run(m, first[1], first[2], {"threads": 2})
    evaluations(first[1], first[2])
    before = signatures()
    for m in methods:
        for _, Xv, yv in variants():
            run(m, Xv, yv, {})
            if get_trainer_class(m).parallel_kernel:
                run(m, Xv, yv, {"threads": 2})
    for _, Xv, yv in variants():
        evaluations(Xv, yv)
    if "implicit" in methods:
        from scalable_softmax import SoftmaxSGDClassifier
        for _, Xv, yv in variants():
            for jobs in (None, 2):
                SoftmaxSGDClassifier(epochs=1, n_jobs=jobs, random_state=0).fit(Xv, yv)
    print(json.dumps({"before": before, "after": signatures()}))
""")


def _child_signatures(methods):
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", _CHILD, ",".join(methods)], env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("methods", [
    ("implicit", "umax", "vanilla", "raman"),
    ("implicit-batch", "ove", "nce", "is"),
    ("softmax-sgd", "exact", "bouchard", "ove-exact"),
], ids=["double-sum", "minibatch-sampled", "full"])
def test_one_signature_per_kernel_whatever_the_input(methods):
    got = _child_signatures(methods)
    before, after = got["before"], got["after"]
    added = {k: [s for s in v if s not in before.get(k, [])] for k, v in after.items()}
    added = {k: v for k, v in added.items() if v}
    assert not added, ("kernels compiled again for other inputs (int64, dense, Fortran, "
                       f"read-only, int32 labels, threads=2, n_jobs=2): {added}")
    assert after, "no kernel was compiled or loaded: the count counts nothing"
    # one per precision: the float32 and float64 evaluators are different kernels, so
    # every kernel has exactly one signature
    many = {k: v for k, v in after.items() if len(v) > 1 and k not in NESTED_TWO_TYPINGS}
    assert not many, f"kernels with more than one compiled signature: {many}"
    # both precisions were evaluated (passes this small run the serial twins)
    for kernel in ("state_pass_serial", "state_pass32_serial"):
        assert f"scalable_softmax.kernels.evaluate.{kernel}" in after


def test_kernel_array_copies_only_what_it_must():
    a = np.arange(10, dtype=np.int64)
    assert kernel_array(a, np.int64) is a                # already right: no copy
    ro = a.copy()
    ro.setflags(write=False)
    out = kernel_array(ro, np.int64)
    assert out is not ro and out.flags.writeable and np.array_equal(out, ro)
    assert not ro.flags.writeable                        # the input is left as it was
    f = np.asfortranarray(np.ones((3, 4)))
    assert kernel_array(f, np.float64).flags.c_contiguous
    assert kernel_array(a, np.int32).dtype == np.int32


def test_kernel_csr_one_type_whatever_the_input():
    X = sp.random(20, 7, density=0.4, format="csr", random_state=1)
    X64 = X.copy()
    X64.indices = X64.indices.astype(np.int64)
    X64.indptr = X64.indptr.astype(np.int64)
    for Xi in (X, X64):
        indptr, indices, data = kernel_csr(Xi)
        assert (indptr.dtype, indices.dtype, data.dtype) == (np.int64, np.int32, np.float64)
        assert np.array_equal(indices, X.indices) and np.array_equal(data, X.data)
    indptr, indices, data = kernel_csr(X64, np.int64)
    assert indices is X64.indices and indptr is X64.indptr and data is X64.data
    assert index_dtype(2**31 - 1) == np.int32 and index_dtype(2**31) == np.int64
