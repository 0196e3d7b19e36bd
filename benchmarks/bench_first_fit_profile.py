"""Where the first fit's CPU seconds go (issue 53, item 2): the cold fit of
``bench_first_fit.py`` attributed to imports, numba compiles and the rest.

Each run is a new Python process (``sys.executable``) with a fresh, empty
``NUMBA_CACHE_DIR``. As in ``bench_first_fit.py``, scikit-learn's digits (N = 1,797,
D = 64, K = 10, unit-L2 rows) are loaded before the clock starts (so scikit-learn,
SciPy and NumPy are already imported); the clock then covers ``import
scalable_softmax``, the import of the entry point and the call (``fit``: implicit,
lr 1.0, 3 epochs, its default monitoring; ``estimator``:
``SoftmaxSGDClassifier(method="implicit", lr=1.0, epochs=3).fit``).

The clock is the process's CPU time (``time.process_time``: user + system seconds of
all its threads), so that the attribution holds on a loaded machine, where wall seconds
mostly measure the other jobs. The child process times, with a stack so that every CPU
second is counted once (in the innermost frame open at the time):

* every module import (a ``sys.meta_path`` finder wraps each loader's
  ``exec_module``), summed per top-level package;
* every call of numba's ``Dispatcher.compile`` (compiling one signature of one
  ``@njit`` function, its type inference, LLVM code generation, and writing it to the
  disk cache; or reading it from the cache), per dispatcher, with how the compile was
  started: a call from Python (``call``), another function's compile (``nested``: the
  callee of a function being compiled) or an import (``eager``: a declared signature
  compiled when the module is imported). Numba's first compile in a process also
  initialises LLVM; that second or so is in the first compile's row;
* the rest: the fit's own work, Python code of the library, NumPy.

``--before PATH`` profiles a second tree (the ``lib`` folder of another checkout, put
first on ``PYTHONPATH``) in the same way, the two trees taking turns, so that a change
is compared side by side in one run. ``--lib PATH`` profiles that ``lib`` folder as
"this" tree instead of the installed package.

Usage: ``python benchmarks/bench_first_fit_profile.py [--kind fit|estimator]
[--repeats R] [--before PATH] [--lib PATH] [--top N]``; writes
``benchmarks/results/first_fit_profile-quick.{json,md}`` (``-quick``: few repeats on
a shared machine; the table is an attribution, not a target measurement).
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import numpy as np

from _common import machine_info, machine_line, publish, run_child, tree_label

#: the child: the profiler (a meta-path finder timing imports, numba's Dispatcher.compile
#: wrapped as soon as numba.core.dispatcher is imported), then the measured call
_CHILD = r"""
import importlib.abc, json, sys, time
from collections import defaultdict

clock = time.process_time
stack = []           # open frames: [kind, name, start, child_seconds]
imports = defaultdict(float)
compiles = {}        # dispatcher name -> {"seconds", "signatures", "started"}

def _enter(kind, name):
    stack.append([kind, name, clock(), 0.0])

def _leave():
    kind, name, start, inner = stack.pop()
    total = clock() - start
    if stack:
        stack[-1][3] += total
    return kind, name, total - inner, stack[-1][0] if stack else None

class _Timed(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader
    def create_module(self, spec):
        return self.loader.create_module(spec)
    def exec_module(self, module):
        _enter("import", module.__name__)
        try:
            self.loader.exec_module(module)
        finally:
            _, name, own, _ = _leave()
            imports[name.split(".")[0]] += own
        if module.__name__ == "numba.core.dispatcher":
            _wrap(module.Dispatcher)
    def __getattr__(self, name):
        return getattr(self.loader, name)

class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Timed(spec.loader)
                return spec
        return None

def _wrap(Dispatcher):
    inner = Dispatcher.compile
    def compile(self, sig):
        key = f"{self.py_func.__module__}.{self.py_func.__qualname__}"
        before = len(self.overloads)
        _enter("compile", key)
        try:
            return inner(self, sig)
        finally:
            _, _, own, parent = _leave()
            row = compiles.setdefault(key, {"seconds": 0.0, "signatures": 0,
                                            "started": []})
            row["seconds"] += own
            row["signatures"] += len(self.overloads) - before
            how = {"import": "eager", "compile": "nested"}.get(parent, "call")
            if how not in row["started"]:
                row["started"].append(how)
    Dispatcher.compile = compile

kind = sys.argv[1]
from sklearn.datasets import load_digits
from sklearn.preprocessing import normalize
X, y = load_digits(return_X_y=True)
X = normalize(X)                       # unit L2 rows
had = set(sys.modules)
sys.meta_path.insert(0, _Finder())
t0 = clock()
_enter("import", "scalable_softmax (the entry point)")
import scalable_softmax
if kind == "fit":
    from scalable_softmax import fit
else:
    from scalable_softmax import SoftmaxSGDClassifier
_leave()
t_import = clock() - t0
if kind == "fit":
    res = fit(X, y, "implicit", 1.0, epochs=3, progress=False)
    acc = 1.0 - float(res.history.train_error.iloc[-1])
else:
    clf = SoftmaxSGDClassifier(method="implicit", lr=1.0, epochs=3, random_state=0)
    clf.fit(X, y)
    acc = float((clf.predict(X) == y).mean())
total = clock() - t0
new = sorted({m.split(".")[0] for m in set(sys.modules) - had})
print(json.dumps({"cpu_s": total, "entry_import_cpu_s": t_import,
                  "imports": dict(imports), "compiles": compiles,
                  "new_packages": new, "train_accuracy": acc}))
"""


def _child(kind, lib, cache_dir):
    return run_child(_CHILD, kind, lib, cache_dir)


def _cold(kind, lib):
    cache = Path(tempfile.mkdtemp(prefix="bench-first-fit-profile-"))
    try:
        return _child(kind, lib, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def summarise(runs):
    """Medians over the repeats of one tree: total, import, compile and rest CPU
    seconds, and each dispatcher's and each imported package's median seconds."""
    med = lambda xs: float(np.median(xs))                  # noqa: E731
    names = sorted({n for r in runs for n in r["compiles"]})
    compiles = {}
    for n in names:
        rows = [r["compiles"].get(n, {"seconds": 0.0, "signatures": 0, "started": []})
                for r in runs]
        compiles[n] = {"seconds": med([c["seconds"] for c in rows]),
                       "signatures": max(c["signatures"] for c in rows),
                       "started": sorted({s for c in rows for s in c["started"]})}
    packages = sorted({p for r in runs for p in r["imports"]})
    imports = {p: med([r["imports"].get(p, 0.0) for r in runs]) for p in packages}
    import_s = [sum(r["imports"].values()) for r in runs]
    compile_s = [sum(c["seconds"] for c in r["compiles"].values()) for r in runs]
    total = [r["cpu_s"] for r in runs]
    return {"cpu_s": med(total), "import_cpu_s": med(import_s),
            "compile_cpu_s": med(compile_s),
            "rest_cpu_s": med([t - i - c for t, i, c in zip(total, import_s, compile_s)]),
            "entry_import_cpu_s": med([r["entry_import_cpu_s"] for r in runs]),
            "signatures": max(sum(c["signatures"] for c in r["compiles"].values())
                              for r in runs),
            "dispatchers": max(len(r["compiles"]) for r in runs),
            "new_packages": sorted({p for r in runs for p in r["new_packages"]}),
            "imports": imports, "compiles": compiles,
            "train_accuracy": runs[0]["train_accuracy"]}


def run(kind="fit", repeats=1, before=None, lib=None):
    start = machine_info()
    trees = [("this", Path(lib).resolve() if lib else None)]
    if before:
        trees.append(("before", Path(before).resolve()))
    runs = {tree: [] for tree, _ in trees}
    for r in range(repeats):
        for tree, path in (trees if r % 2 == 0 else trees[::-1]):
            res = _cold(kind, path)
            runs[tree].append(res)
            print(f"{tree} repeat {r}: {res['cpu_s']:.2f} CPU s", flush=True)
    summary = {tree: dict(summarise(runs[tree]), lib=tree_label(path))
               for tree, path in trees}
    return {"machine": start, "machine_end": machine_info(), "kind": kind,
            "repeats": repeats, "runs": runs, "summary": summary,
            "data": "sklearn digits (N 1,797, D 64, K 10), unit L2 rows"}


def _fmt_row(label, values):
    return f"| {label} | " + " | ".join(values) + " |"


def _module_group(name):
    """A dispatcher's group in the per-module table: its library module
    (``kernels.implicit``), or numba's own overloads (array allocation, builtins)."""
    if name.startswith("scalable_softmax."):
        return "`" + name.removeprefix("scalable_softmax.").rsplit(".", 1)[0] + "`"
    return "numba's own overloads (`np.empty`, `np.zeros`, `min`, ...)"


def markdown(res, top=25):
    trees = list(res["summary"])
    S = res["summary"]
    call = {"fit": "`fit(X, y, 'implicit', 1.0, epochs=3)` (monitoring: the train set "
                   "at epochs 0 to 3)",
            "estimator": "`SoftmaxSGDClassifier(method='implicit', lr=1.0, epochs=3)"
                         ".fit(X, y)`"}[res["kind"]]
    head = _fmt_row("CPU seconds", [f"{t} (median)" for t in trees])
    sep = "|---|" + "---|" * len(trees)
    lines = ["# Where the first fit's CPU seconds go (loaded machine, CPU seconds)", "",
             "Written by `benchmarks/bench_first_fit_profile.py`. "
             + machine_line(res["machine"], res["machine_end"]) + " "
             f"Data: {res['data']}, loaded (scikit-learn imported) before the clock; "
             f"then `import scalable_softmax` and {call}, in a new process with an empty "
             f"numba cache, one thread; medians of {res['repeats']} run(s) per tree"
             + (", the trees taking turns" if len(trees) > 1 else "")
             + ". CPU seconds of the process (user + system), not wall: the machine is "
             "loaded by other jobs. Each second is counted once, in the innermost import "
             "or compile open at the time.", "", head, sep]
    for key, label in [("cpu_s", "total (import + call)"),
                       ("import_cpu_s", "module imports (all packages)"),
                       ("compile_cpu_s", "numba compiles (all dispatchers)"),
                       ("rest_cpu_s", "the rest (the fit's own work)"),
                       ("entry_import_cpu_s", "of which: the entry point's import")]:
        lines.append(_fmt_row(label, [f"{S[t][key]:.2f}" for t in trees]))
    lines.append(_fmt_row("signatures compiled (dispatchers)",
                          [f"{S[t]['signatures']} ({S[t]['dispatchers']})" for t in trees]))
    lines.append(_fmt_row("train accuracy", [f"{S[t]['train_accuracy']:.4f}"
                                             for t in trees]))
    lines += ["", "## Imports per package (CPU s)", "", head, sep]
    pk = sorted({p for t in trees for p in S[t]["imports"]},
                key=lambda p: -max(S[t]["imports"].get(p, 0.0) for t in trees))
    for p in pk:
        if max(S[t]["imports"].get(p, 0.0) for t in trees) >= 0.01:
            lines.append(_fmt_row(f"`{p}`", [f"{S[t]['imports'].get(p, 0.0):.2f}"
                                             for t in trees]))
    lines += ["", "## Compiles per module (CPU s; sums of the dispatchers' medians)", "",
              head, sep]
    groups = {}
    for t in trees:
        for n, c in S[t]["compiles"].items():
            g = _module_group(n)
            groups.setdefault(g, dict.fromkeys(trees, 0.0))[t] += c["seconds"]
    for g, by_tree in sorted(groups.items(), key=lambda kv: -max(kv[1].values())):
        lines.append(_fmt_row(g, [f"{by_tree[t]:.2f}" for t in trees]))
    lines += ["", f"## Compiles per dispatcher (CPU s; the {top} largest; signatures, "
              "how started)", "",
              _fmt_row("dispatcher", [f"{t}" for t in trees]), sep]
    names = sorted({n for t in trees for n in S[t]["compiles"]},
                   key=lambda n: -max(S[t]["compiles"].get(n, {"seconds": 0})["seconds"]
                                      for t in trees))
    for n in names[:top]:
        cells = []
        for t in trees:
            c = S[t]["compiles"].get(n)
            cells.append("-" if c is None else
                         f"{c['seconds']:.2f} ({c['signatures']}; {', '.join(c['started'])})")
        lines.append(_fmt_row(f"`{n.replace('scalable_softmax.', '')}`", cells))
    rest = names[top:]
    if rest:
        lines.append(_fmt_row(f"{len(rest)} others", [
            f"{sum(S[t]['compiles'].get(n, {'seconds': 0})['seconds'] for n in rest):.2f}"
            for t in trees]))
    if len(trees) > 1:
        lines += ["", "Trees: " + "; ".join(f"{t}: {S[t]['lib']}" for t in trees) + "."]
    return "\n".join(lines + [""])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=["fit", "estimator"], default="fit")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--before", default=None,
                    help="the lib folder of another checkout, profiled side by side")
    ap.add_argument("--lib", default=None,
                    help="the lib folder profiled as this tree (default: the installed one)")
    ap.add_argument("--top", type=int, default=25, help="dispatchers listed")
    args = ap.parse_args(argv)
    res = run(args.kind, args.repeats, args.before, args.lib)
    stem = "first_fit_profile-quick" + ("" if args.kind == "fit" else f"-{args.kind}")
    publish(stem, res, markdown(res, args.top))


if __name__ == "__main__":
    main()
