"""The package's plan: a model library (``scalable_softmax``) and, inside it, the
reproduction collection (``scalable_softmax.repro``), with one boundary between them.

* importing the library's public API loads no notebook, plotting or site machinery and
  none of the collection;
* no module of the library imports the collection;
* the import graph of ``lib/`` has no circle and no module imports another module's
  private name (shared helpers have a home of their own);
* at most 16 modules and packages sit flat in the package's top folder.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "lib" / "scalable_softmax"
LIB = PKG.parent

#: what a practitioner imports (the README's "train on your own data")
PUBLIC_API = [
    "scalable_softmax", "scalable_softmax.fit", "scalable_softmax.evaluate",
    "scalable_softmax.protocols", "scalable_softmax.estimator", "scalable_softmax.data",
    "scalable_softmax.methods", "scalable_softmax.objectives", "scalable_softmax.lambertw",
]
#: never loaded by the library's public API
FORBIDDEN = ["matplotlib", "papermill", "nbformat", "nbclient", "seaborn", "IPython",
             "sphinx", "scalable_softmax.repro"]


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(LIB).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, modules) -> list[tuple[str, str]]:
    """``(module imported, name imported or "")`` for every import of the package."""
    tree = ast.parse(path.read_text(), str(path))
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.startswith("scalable_softmax")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = base[:len(base) - (node.level - 1)]
                mod = ".".join(up + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("scalable_softmax"):
                continue
            for a in node.names:
                full = f"{mod}.{a.name}"
                found.append((full, "") if full in modules else (mod, a.name))
    return found


def _graph():
    modules = _modules()
    edges = {m: {t for t, _ in _imports(m, p, modules) if t in modules and t != m}
             for m, p in modules.items()}
    return modules, edges


def test_public_api_loads_no_collection_or_notebook_machinery():
    code = ("import sys, json\n"
            + "".join(f"import {m}\n" for m in PUBLIC_API)
            + "from scalable_softmax import SoftmaxSGDClassifier\n"
            + "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    loaded = json.loads(out.stdout)
    bad = sorted(m for m in loaded for f in FORBIDDEN if m == f or m.startswith(f + "."))
    assert not bad, f"the library's public API loads {bad}"


def test_library_never_imports_the_collection():
    modules, edges = _graph()
    bad = sorted((m, t) for m, ts in edges.items() if not m.startswith("scalable_softmax.repro")
                 for t in ts if t.startswith("scalable_softmax.repro"))
    assert not bad, f"library modules importing the collection: {bad}"


def test_import_graph_has_no_circle():
    modules, edges = _graph()
    # Tarjan's strongly connected components
    index, low, stack, on, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in modules:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_no_private_name_imported_across_modules():
    modules = _modules()
    bad = [(m, t, n) for m, p in modules.items() for t, n in _imports(m, p, modules)
           if n.startswith("_") and not n.startswith("__")]
    assert not bad, f"private names imported from another module: {bad}"


def test_at_most_16_entries_flat_in_the_package():
    flat = [p.name for p in PKG.iterdir()
            if (p.suffix == ".py" and p.name != "__init__.py")
            or (p.is_dir() and (p / "__init__.py").exists())]
    assert len(flat) <= 16, f"{len(flat)} modules and packages in {PKG}: {sorted(flat)}"


@pytest.mark.parametrize("module", ["scalable_softmax.repro.runs",
                                    "scalable_softmax.repro.runner"])
def test_collection_modules_import(module):
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)


def test_graph_helper_sees_a_circle_and_a_private_import(tmp_path, monkeypatch):
    """The checks above can fail: a two-module package with a circle and a private
    import is caught by the same functions."""
    pkg = tmp_path / "scalable_softmax"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from scalable_softmax.b import _hidden\n")
    (pkg / "b.py").write_text("import scalable_softmax.a\n_hidden = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    monkeypatch.setattr(sys.modules[__name__], "LIB", tmp_path)
    with pytest.raises(AssertionError, match="circles"):
        test_import_graph_has_no_circle()
    with pytest.raises(AssertionError, match="private"):
        test_no_private_name_imported_across_modules()
    assert json.dumps(sorted(_modules())) == json.dumps(
        ["scalable_softmax", "scalable_softmax.a", "scalable_softmax.b"])
