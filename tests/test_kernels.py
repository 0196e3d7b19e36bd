"""The public kernel surface: scalable_softmax.kernels re-exports the very objects the
library's kernels call, the benchmarks use no private name of the library, and every
method module names its NumPy reference step ``reference_step``."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax import _kernels, evaluate, kernels
from scalable_softmax.kernels import evaluate as kevaluate
from scalable_softmax.kernels import implicit_batch as kib
from scalable_softmax.kernels import sampled as ksampled
from scalable_softmax.kernels import sgd as ksgd
from scalable_softmax.methods import METHODS, full, implicit, implicit_batch, sampled, sgd

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_the_public_names_are_the_kernels_own_objects():
    pairs = {
        kernels.prefetch_w: _kernels.prefetch_w, kernels.prefetch_r: _kernels.prefetch_r,
        ksgd.epoch_m1: sgd.epoch_m1, ksgd.epoch_multi: sgd.epoch_multi,
        ksampled.dot3: sampled._dot3, ksampled.hint_row: sampled._hint_row,
        ksampled.hint_x: sampled._hint_x, ksampled.hint_ahead: sampled._hint_ahead,
        kib.gradient: implicit_batch._gradient,
        kib.structured_direction: implicit_batch._structured_direction,
        kib.ls_factor: implicit_batch._ls_factor, kib.ls_solve: implicit_batch._ls_solve,
        kib.score_change: implicit_batch._score_change,
        kib.scores_value: implicit_batch._scores_value,
        kib.ridge_value: implicit_batch._ridge_value,
        kib.direction_workspace: implicit_batch._direction_workspace,
        kib.solve_reduced: implicit_batch._solve_reduced,
        kevaluate.per_row: evaluate._per_row, kevaluate.scores32: evaluate._scores32,
        kevaluate.transpose32: evaluate._transpose32, kevaluate.max32: evaluate._max32,
        kevaluate.vexp32_sum: evaluate._vexp32_sum,
        kevaluate.sum32to64: evaluate._sum32to64, kevaluate.tile_width: evaluate._tile_width,
    }
    for public, private in pairs.items():
        assert public is private, public
    assert kevaluate.JIT32 is evaluate.JIT32 and kevaluate.JIT32R is evaluate.JIT32R
    for mod in (kernels, ksgd, ksampled, kib, kevaluate):
        assert mod.__doc__ and all(hasattr(mod, n) for n in mod.__all__), mod.__name__


def test_trainer_accessors_see_what_the_kernels_see():
    rng = np.random.default_rng(0)
    X = sp.random(30, 12, density=0.3, random_state=1, format="csr")
    y = rng.integers(0, 4, 30)
    tr = sgd.UmaxTrainer(X, y, 4)
    indptr, indices, data, yy = kernels.csr_arrays(tr)
    np.testing.assert_array_equal(indptr, X.indptr)
    np.testing.assert_array_equal(indices, X.indices)
    np.testing.assert_array_equal(data, X.data)
    np.testing.assert_array_equal(yy, y)
    assert indptr is kernels.csr_arrays(tr)[0]            # the trainer's arrays, no copy
    assert kernels.prefetch_mode(tr) in (0, 1, 2, 3) and kernels.dense_rows(tr) is False
    kernels.set_prefetch_mode(tr, 0)
    assert kernels.prefetch_mode(tr) == 0
    with pytest.raises(ValueError, match="mode must be 0, 1, 2 or 3"):
        kernels.set_prefetch_mode(tr, 7)
    ex = full.ExactTrainer(X, y, 4, mu=0.5)
    ex.init_params()
    W = rng.normal(scale=0.1, size=(4, 12))
    val, g = kernels.objective(ex, np.ascontiguousarray(W.T).ravel())
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


@pytest.mark.parametrize("module", [sgd, implicit, implicit_batch, sampled, full])
def test_every_method_module_names_its_numpy_step_reference_step(module):
    assert callable(module.reference_step) and "reference_step" in module.__all__
    assert module.reference_step.__doc__
    old = {"_reference_step", "softmax_sgd_reference_step", "implicit_step_reference",
           "implicit_batch_step_reference"}
    assert not old & set(dir(module))
    # every registered method lives in one of these modules
    assert {t.split(":")[0] for t in METHODS.values()} == {
        m.__name__ for m in (sgd, implicit, implicit_batch, sampled, full)}
