"""The public kernel surface: scalable_softmax.kernels re-exports the very objects the
library's kernels call, the benchmarks use no private name of the library, and every
method module names its NumPy reference step ``reference_step``."""
from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import numba
import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax import kernels, methods
from scalable_softmax.kernels import common as kcommon
from scalable_softmax.kernels import evaluate as kevaluate
from scalable_softmax.methods import METHODS, full, sgd

evaluate = importlib.import_module("scalable_softmax.evaluate")  # the module, not the function

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _method_modules():
    """The method modules of the registry (every module some registered method lives in)."""
    return sorted({importlib.import_module(t.split(":")[0]) for t in METHODS.values()},
                  key=lambda m: m.__name__)


def _kernel_modules():
    """Every module of the ``scalable_softmax.kernels`` package."""
    return [importlib.import_module(f"scalable_softmax.kernels.{m.name}")
            for m in pkgutil.iter_modules(kernels.__path__)]


def test_the_method_modules_call_the_kernels_own_objects():
    """A trainer's kernels are the public objects of ``scalable_softmax.kernels`` (the
    method module imports them, it defines none), so a benchmark times the library's
    own code."""
    assert kernels.prefetch_w is kcommon.prefetch_w
    assert kernels.prefetch_r is kcommon.prefetch_r
    kmods = {m.__name__: m for m in _kernel_modules()}
    for module in _method_modules():
        family = module.__name__.rsplit(".", 1)[1]
        kmod = kmods[f"scalable_softmax.kernels.{family}"]  # one kernel module per family
        used = [n for n, obj in vars(module).items()
                if isinstance(obj, numba.core.registry.CPUDispatcher)]
        assert used, module.__name__
        for n in used:
            assert getattr(kmod, n) is getattr(module, n), (module.__name__, n)
    assert evaluate.state_pass32 is kevaluate.state_pass32


@pytest.mark.parametrize("kmod", _kernel_modules(), ids=lambda m: m.__name__)
def test_every_kernel_module_documents_its_public_names(kmod):
    assert kmod.__doc__ and kmod.__all__ and all(hasattr(kmod, n) for n in kmod.__all__)
    assert not [n for n in kmod.__all__ if n.startswith("_")]
    for n in kmod.__all__:
        obj = getattr(kmod, n)
        if isinstance(obj, numba.core.registry.CPUDispatcher):
            assert obj.py_func.__module__ == kmod.__name__, n   # defined here
            assert obj.py_func.__doc__ or n in kmod.__doc__, n


def test_trainer_accessors_see_what_the_kernels_see():
    rng = np.random.default_rng(0)
    X = sp.random(30, 12, density=0.3, random_state=1, format="csr")
    y = rng.integers(0, 4, 30)
    tr = sgd.UmaxTrainer(X, y, 4)
    indptr, indices, data, yy = methods.csr_arrays(tr)
    np.testing.assert_array_equal(indptr, X.indptr)
    np.testing.assert_array_equal(indices, X.indices)
    np.testing.assert_array_equal(data, X.data)
    np.testing.assert_array_equal(yy, y)
    assert indptr is methods.csr_arrays(tr)[0]            # the trainer's arrays, no copy
    assert methods.prefetch_mode(tr) in (0, 1, 2, 3) and methods.dense_rows(tr) is False
    methods.set_prefetch_mode(tr, 0)
    assert methods.prefetch_mode(tr) == 0
    with pytest.raises(ValueError, match="mode must be 0, 1, 2 or 3"):
        methods.set_prefetch_mode(tr, 7)
    # the kernels package takes arrays only; its former trainer accessors forward
    assert not [n for n in kernels.__all__ if n in kernels._MOVED]
    with pytest.warns(DeprecationWarning, match="moved to scalable_softmax.methods"):
        assert kernels.csr_arrays(tr)[0] is indptr
    ex = full.ExactTrainer(X, y, 4, mu=0.5)
    ex.init_params()
    W = rng.normal(scale=0.1, size=(4, 12))
    val, g = methods.objective(ex, np.ascontiguousarray(W.T).ravel())
    want, G, _ = full.full_objective_reference(X, y, W, mu=0.5)
    assert val == pytest.approx(want, rel=1e-12)
    np.testing.assert_allclose(g, np.ascontiguousarray(G.T).ravel(), rtol=1e-10, atol=1e-14)


def _private_uses(path: Path) -> list[str]:
    """``scalable_softmax`` names starting with ``_`` that a file imports, and private
    attributes it reaches (of a library module, or of a trainer) other than its own."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "scalable_softmax"):
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"{node.lineno}: from {node.module}")
            found += [f"{node.lineno}: {a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.startswith("scalable_softmax")
                      and any(part.startswith("_") for part in a.name.split("."))]
    for node in ast.walk(tree):
        # a private attribute of a library module, or of a trainer (its own arrays)
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_benchmarks_use_only_public_names(path):
    assert _private_uses(path) == []


def test_the_private_name_check_finds_them(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from scalable_softmax.methods import sgd\n"
                   "from scalable_softmax.evaluate import _per_row\n"
                   "from scalable_softmax._kernels import prefetch_w\n"
                   "x = sgd._PREFETCH_DEFAULT\n"
                   "z = make().tr._data\n")
    assert _private_uses(bad) == ["2: _per_row", "3: from scalable_softmax._kernels",
                                  "4: sgd._PREFETCH_DEFAULT", "5: make().tr._data"]


@pytest.mark.parametrize("module", _method_modules(), ids=lambda m: m.__name__)
def test_every_method_module_names_its_numpy_step_reference_step(module):
    assert callable(module.reference_step) and "reference_step" in module.__all__
    assert module.reference_step.__doc__
    old = {"_reference_step", "softmax_sgd_reference_step", "implicit_step_reference",
           "implicit_batch_step_reference"}
    assert not old & set(dir(module))


@pytest.mark.parametrize("shape", [(1, 1), (3, 130), (129, 65), (64, 64), (200, 7)])
@pytest.mark.parametrize("c", [1.0, 0.37, -2.5])
@pytest.mark.parametrize("threads", [1, 2])
def test_transpose_scaled_is_numpys_product_of_the_transpose(shape, c, threads):
    # every entry is NumPy's own product (a copy at c = 1), whatever the tiles and threads
    from scalable_softmax.kernels.common import transpose_scaled

    rng = np.random.default_rng(sum(shape))
    src = rng.standard_normal(shape)
    out = np.full(shape[::-1], np.nan)
    prev = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        transpose_scaled(src, c, out)
    finally:
        numba.set_num_threads(prev)
    ref = src.T.copy() if c == 1.0 else np.multiply(src.T, c)
    assert np.array_equal(out.view(np.int64), ref.view(np.int64))


def test_feature_major_softmax_sgd_weights_are_the_transposed_store():
    # FitResult.W of the feature-major layout: the D x K store transposed, times the
    # lazy scale, bit for bit
    X = sp.random(40, 70, density=0.1, format="csr", random_state=1)
    y = np.arange(40) % 9
    tr = full.SoftmaxSGDTrainer(X, y, 9, layout="feature", batch_size=7, mu=0.3)
    tr.init_params()
    tr.run_epoch(np.arange(40), 0.5, 0)
    assert tr.cs[0] != 1.0
    W = tr.weights()
    assert W.shape == (9, 70) and W.flags.c_contiguous
    assert np.array_equal(W, np.multiply(tr._store.T, tr.cs[0]))


@pytest.mark.parametrize("mu", [0.0, 0.3])
def test_native_weights_are_the_store_in_its_layout_and_evaluate_alike(mu):
    from scalable_softmax.evaluate import evaluate
    from scalable_softmax.methods.sgd import UmaxTrainer

    X = sp.random(40, 70, density=0.1, format="csr", random_state=2)
    y = np.arange(40) % 9
    tr = full.SoftmaxSGDTrainer(X, y, 9, layout="feature", batch_size=7, mu=mu)
    tr.init_params()
    tr.run_epoch(np.arange(40), 0.5, 0)
    V, layout = tr.native_weights()
    assert layout == "feature" and V.shape == (70, 9)
    # mu = 0: the trainer's own D x K store, no copy; else the store times the scale
    assert (V is tr._store) == (mu == 0.0)
    assert np.array_equal(V, np.multiply(tr._store, tr.cs[0]))
    for precision in ("float32", "float64"):
        a = evaluate(X, y, tr.weights(), precision=precision)
        b = evaluate(X, y, V, layout=layout, precision=precision)
        assert (a.log_loss, a.error, a.defective) == (b.log_loss, b.error, b.defective)
    # a class-major trainer gives its K x D weights
    tc = full.SoftmaxSGDTrainer(X, y, 9, layout="class", batch_size=7, mu=mu)
    tc.init_params()
    tc.run_epoch(np.arange(40), 0.5, 0)
    W, layout = tc.native_weights()
    assert layout == "class" and np.array_equal(W, tc.weights())
    tu = UmaxTrainer(X, y, 9, mu=mu)
    tu.init_params()
    W, layout = tu.native_weights()
    assert layout == "class" and W.shape == (9, 70)
