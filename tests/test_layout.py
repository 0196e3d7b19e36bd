"""The package's plan: a model library (``scalable_softmax``) and, inside it, the
reproduction collection (``scalable_softmax.repro``), with one boundary between them.

* importing the library's public API loads no notebook, plotting or site machinery and
  none of the collection;
* no module of the library imports the collection;
* the import graph of ``lib/`` has no circle and no module imports another module's
  private name (shared helpers have a home of their own);
* at most 16 modules and packages sit flat in the package's top folder;
* the collection is four folders by what each part serves (each paper's experiments,
  the race, the machinery of the notebooks), and the papers' folders do not import each
  other;
* ``fit()`` is at most 100 lines, its epoch loop and history assembly functions of their
  own, and no function other than a compiled kernel is over 120 lines.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
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


#: the package's private modules other modules may import, each for one reason:
#: ``_atomic`` the one write-then-rename helper, ``_version`` the version string. Their
#: names are public inside them; the modules are private to keep them off the API page.
#: (The numba flags and LLVM intrinsics every kernel builds on are in
#: ``scalable_softmax.kernels.common``.)
PRIVATE_MODULES = {"scalable_softmax._atomic", "scalable_softmax._version"}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _module_aliases(name: str, path: Path, modules) -> dict[str, str]:
    """Local name -> package module, for every import of a package module by ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    out[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "scalable_softmax"):
            for a in node.names:
                if f"{node.module}.{a.name}" in modules:
                    out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _private_reaches(name: str, path: Path, modules) -> list[str]:
    """Private attributes ``m._x`` that ``path`` reads of another package module ``m``
    (``import scalable_softmax.a.b as m`` / ``from scalable_softmax.a import b as m``;
    dotted ``scalable_softmax.a._x`` too)."""
    aliases = _module_aliases(name, path, modules)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            target = ast.unparse(node.value)
            mod = aliases.get(target, target if target in modules else None)
            if mod is not None and mod != name:
                found.append(f"{node.lineno}: {target}.{node.attr}")
    return found


def test_no_private_name_imported_across_modules():
    modules = _modules()
    bad = [(m, t, n) for m, p in modules.items() for t, n in _imports(m, p, modules)
           if _is_private(n)
           or (t != m and t not in PRIVATE_MODULES
               and any(_is_private(part) for part in t.split(".")))]
    bad += [(m, r) for m, p in modules.items() for r in _private_reaches(m, p, modules)]
    assert not bad, f"private names imported from another module: {bad}"


def _numba_kernels(path: Path) -> list[str]:
    """Functions of ``path`` (at any depth) a numba decorator compiles."""
    return [node.name for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and _is_compiled(node)]


def test_no_numba_kernel_in_the_method_modules():
    """The numba code lives in ``scalable_softmax.kernels``; a method module holds its
    trainers and their plain NumPy references."""
    bad = {p.name: _numba_kernels(p) for p in sorted((PKG / "methods").glob("*.py"))}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"numba kernels defined in methods/ (move them to kernels/): {bad}"
    assert _numba_kernels(PKG / "kernels" / "sgd.py")   # the scan sees kernels


def test_no_numba_code_outside_the_kernels_package():
    """All numba code of the library (kernels, inlined helpers, LLVM intrinsics) is in
    ``scalable_softmax/kernels/<family>.py``: the data generators and the collection's
    experiments import theirs from there too."""
    kern = PKG / "kernels"
    bad = {str(p.relative_to(PKG)): _numba_kernels(p) for p in sorted(PKG.rglob("*.py"))
           if kern not in p.parents}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"numba code outside kernels/ (move it to kernels/<family>.py): {bad}"
    assert _numba_kernels(kern / "common.py")            # the scan sees intrinsics too


def test_at_most_16_entries_flat_in_the_package():
    flat = [p.name for p in PKG.iterdir()
            if (p.suffix == ".py" and p.name != "__init__.py")
            or (p.is_dir() and (p / "__init__.py").exists())]
    assert len(flat) <= 16, f"{len(flat)} modules and packages in {PKG}: {sorted(flat)}"


#: the collection's folders, each for what it serves (``scalable_softmax.repro``'s
#: docstring is their map): one per paper's experiments, the race, and the machinery
#: that runs, checks and publishes the notebooks
REPRO_GROUPS = {"fagan", "titsias", "race", "machinery"}
#: the papers' folders: neither imports the other
PAPERS = ("fagan", "titsias")


def test_the_collection_is_grouped_by_what_each_part_serves():
    repro = PKG / "repro"
    flat = sorted(p.name for p in repro.iterdir()
                  if (p.suffix == ".py" and p.name != "__init__.py")
                  or (p.is_dir() and (p / "__init__.py").exists()))
    assert flat == sorted(REPRO_GROUPS), (f"{repro} holds {flat}: a module goes into the "
                                          f"folder of what it serves, {sorted(REPRO_GROUPS)}")
    modules, edges = _graph()
    bad = sorted((m, t) for m, ts in edges.items() for t in ts for a in PAPERS for b in PAPERS
                 if a != b and m.startswith(f"scalable_softmax.repro.{a}")
                 and t.startswith(f"scalable_softmax.repro.{b}"))
    assert not bad, f"one paper's experiments import the other's: {bad}"


@pytest.mark.parametrize("module", ["scalable_softmax.repro.machinery.runs",
                                    "scalable_softmax.repro.machinery.runner"])
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
    # the other ways in: a private attribute of a module, a private module
    (pkg / "a.py").write_text("from scalable_softmax import b as bee\nx = bee._hidden\n")
    with pytest.raises(AssertionError, match=r"bee\._hidden"):
        test_no_private_name_imported_across_modules()
    (pkg / "_c.py").write_text("y = 1\n")
    (pkg / "a.py").write_text("from scalable_softmax._c import y\n")
    with pytest.raises(AssertionError, match="_c"):
        test_no_private_name_imported_across_modules()


def test_the_kernel_scan_sees_a_kernel_in_a_method_module(tmp_path, monkeypatch):
    (tmp_path / "methods").mkdir()
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "sgd.py").write_text("@numba.njit\ndef k(x):\n    return x\n")
    (tmp_path / "methods" / "m.py").write_text(
        "import numba\n\n\n@numba.njit(cache=True)\ndef step(x):\n    return x\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path)
    with pytest.raises(AssertionError, match=r"m\.py.*step"):
        test_no_numba_kernel_in_the_method_modules()


# ---------------------------------------------------------------------------
# clean floors: short drivers, no long non-kernel functions
# ---------------------------------------------------------------------------

#: the longest a function of the package may be unless it is a compiled kernel (lines of
#: code, docstring excluded)
MAX_FUNCTION_LINES = 100
#: the longest ``fit()`` may be (lines of code, docstring excluded)
MAX_FIT_LINES = 50


def _span(node) -> int:
    """Lines of code of a function definition: decorators and the docstring excluded
    (a full numpydoc docstring, one entry per parameter, is documentation, not work)."""
    lines = node.end_lineno - node.lineno + 1
    first = node.body[0] if node.body else None
    if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
            and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def _is_compiled(node) -> bool:
    """A numba kernel: some decorator mentions ``jit`` (``numba.njit(**JIT)``,
    ``jit``, ...) or ``intrinsic``."""
    return any("jit" in ast.unparse(d) or "intrinsic" in ast.unparse(d)
               for d in node.decorator_list)


def _long_functions(limit: int) -> list[tuple[str, str, int]]:
    """``(module, function, lines)`` of every non-compiled function (methods and nested
    functions too) of the package longer than ``limit`` lines."""
    out = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and not _is_compiled(node) and _span(node) > limit:
                out.append((name, node.name, _span(node)))
    return sorted(out)


def _function(module_path: Path, name: str):
    tree = ast.parse(module_path.read_text(), str(module_path))
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"no module-level function {name!r} in {module_path}"
    return found[0]


def test_fit_is_at_most_50_lines_with_its_loop_and_history_apart():
    path = PKG / "fit.py"
    n = _span(_function(path, "fit"))
    assert n <= MAX_FIT_LINES, (f"fit() is {n} lines (at most {MAX_FIT_LINES}): move work "
                                "into module-level helpers")
    # the epoch loop and the history assembly are functions of their own
    _function(path, "run_epochs")
    _function(path, "assemble_history")


def test_no_non_compiled_function_over_100_lines():
    long = _long_functions(MAX_FUNCTION_LINES)
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines (split them into "
                      f"well-named helpers): {long}")


#: the most parameters a helper of fit.py may take (``fit`` itself is the public API; the
#: helpers take a validated ``FitConfig`` instead of chains of arguments)
MAX_FIT_HELPER_PARAMS = 10


def _many_parameters(path: Path, limit: int, spare=("fit",)) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in spare:
            a = node.args
            n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
            if n > limit:
                out.append((node.name, n))
    return out


def test_no_fit_helper_takes_more_than_10_parameters(tmp_path):
    many = _many_parameters(PKG / "fit.py", MAX_FIT_HELPER_PARAMS)
    assert not many, f"fit.py helpers with over {MAX_FIT_HELPER_PARAMS} parameters: {many}"
    bad = tmp_path / "fit.py"
    bad.write_text("def _prepare(" + ", ".join(f"a{i}" for i in range(11)) + "):\n    pass\n")
    assert _many_parameters(bad, MAX_FIT_HELPER_PARAMS) == [("_prepare", 11)]


def test_no_attribute_probes_on_trainers_in_fit():
    """What fit calls on a trainer is declared in methods/base.py, not probed."""
    text = (PKG / "fit.py").read_text()
    assert "hasattr(trainer" not in text and "getattr(trainer" not in text


def test_length_checks_see_a_long_function_and_spare_a_kernel(tmp_path, monkeypatch):
    """The checks above can fail: a long plain function (and a long ``fit``) are
    caught; an equally long numba kernel is not."""
    pkg = tmp_path / "scalable_softmax"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    lines = "".join(f"x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES + 5))
    (pkg / "fit.py").write_text(
        "import numba\n\n"
        "def fit():\n" + textwrap.indent(lines, "    ") + "\n"
        "@numba.njit(cache=True)\ndef kernel():\n" + textwrap.indent(lines, "    ") + "\n"
        "class Model:\n    def method(self):\n" + textwrap.indent(lines, "        ") + "\n"
        "def run_epochs():\n    pass\n\ndef assemble_history():\n    pass\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    monkeypatch.setattr(sys.modules[__name__], "LIB", tmp_path)
    doc = '    """' + "A long docstring.\n" * (MAX_FUNCTION_LINES + 5) + '    """\n'
    (pkg / "documented.py").write_text("def documented():\n" + doc + "    return 1\n")
    assert [f for _, f, _ in _long_functions(MAX_FUNCTION_LINES)] == ["fit", "method"]
    with pytest.raises(AssertionError, match=f"over {MAX_FUNCTION_LINES} lines"):
        test_no_non_compiled_function_over_100_lines()
    with pytest.raises(AssertionError, match=r"fit\(\) is \d+ lines"):
        test_fit_is_at_most_50_lines_with_its_loop_and_history_apart()


def _notebook_code_lines(path: Path) -> int:
    """Non-blank lines of a notebook's code cells (comments count)."""
    nb = json.loads(path.read_text())
    return sum(1 for c in nb["cells"] if c["cell_type"] == "code"
               for line in "".join(c["source"]).splitlines() if line.strip())


@pytest.mark.parametrize("path", sorted((PKG.parents[1] / "notebooks").glob("[0-9][0-9]-*.ipynb")),
                         ids=lambda p: p.stem)
def test_notebooks_are_glue_not_programs(path):
    """A notebook reads as claim, parameters, runs, tables, figures, findings: at most
    200 non-blank code lines and no function definitions of its own (what it computes
    lives in tested functions of ``scalable_softmax.repro``)."""
    n = _notebook_code_lines(path)
    assert n <= 200, f"{path.name}: {n} code lines (at most 200; move computation into repro)"
    nb = json.loads(path.read_text())
    defs = [line.strip() for c in nb["cells"] if c["cell_type"] == "code"
            for line in "".join(c["source"]).splitlines() if line.lstrip().startswith("def ")]
    assert len(defs) <= 2, f"{path.name} defines functions: {defs}"


#: what the repository's root holds, each with what it is for; a run's log, a scratch file
#: or a stamp belongs under build/ (ignored), never at the root
ROOT_ENTRIES = {
    ".ci": "the CI configuration",
    ".gitignore": "what git ignores (build/, .venv/, data caches)",
    "CONTRIBUTING.md": "how to add a method, the defaults and conventions",
    "LICENSE": "the licence",
    "Makefile": "the two commands and every other target",
    "README.md": "the front page (rendered from docs/templates/README.md)",
    "benchmarks": "the speed benchmarks and their results",
    "conftest.py": "pytest's options for the whole repository",
    "data": "the data notes and checksums",
    "docs": "the pages and their templates",
    "environment.yml": "conda's way into the same lock",
    "figures": "the record's figures",
    "lib": "the library and the reproduction",
    "notebooks": "the notebooks and their executed copies",
    "params": "the notebooks' settings, verify's tolerances, the pages' constants",
    "pyproject.toml": "the package and its tools' settings",
    "requirements-peers.lock": "the hash-checked lock of the peers extra",
    "requirements.lock": "the hash-checked lock",
    "tables": "the record's tables and PROVENANCE.md",
    "tests": "the tests",
}


def test_the_root_holds_only_the_declared_entries():
    """A committed file at the repository's root outside :data:`ROOT_ENTRIES` fails (a
    record run once committed its logs there: ``log``, ``rc1``, ``verify.log``)."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=LIB.parent, capture_output=True,
                             text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the committed files cannot be listed")
    top = {line.split("/")[0] for line in out.splitlines() if line}
    extra = sorted(top - set(ROOT_ENTRIES))
    assert not extra, (f"files at the repository's root outside ROOT_ENTRIES "
                       f"(tests/test_layout.py): {extra}; a run's logs go under build/, "
                       "a new top-level entry is declared there with what it is for")
    gone = sorted(set(ROOT_ENTRIES) - top)
    assert not gone, f"ROOT_ENTRIES declares {gone}, which the repository no longer has"
