"""What a user meets first (issue 53, item 2): the first fit in a new process with an
empty numba cache, the import of the package and of its estimator, and the same fit once
the cache is warm.

Every measurement is a new Python process (``sys.executable``) with its own
``NUMBA_CACHE_DIR``: a fresh, empty temporary folder for the cold runs, the folder a cold
run has just filled for the warm run. The data are scikit-learn's digits (N = 1,797,
D = 64, K = 10), rows scaled to unit L2 norm, loaded (and scikit-learn imported) before
the clock starts; the clock then covers ``import scalable_softmax``, the import of the
entry point and the call:

* ``fit``: ``scalable_softmax.fit(X, y, "implicit", lr=1.0, epochs=3)`` with its default
  monitoring (the train set evaluated at epochs 0 to 3) and one thread (the default);
* ``estimator``: ``SoftmaxSGDClassifier(method="implicit", lr=1.0, epochs=3).fit(X, y)``
  (no monitoring, one thread).

The imports are timed apart in processes that have imported nothing else:
``import scalable_softmax`` alone, and ``from scalable_softmax import
SoftmaxSGDClassifier`` (which imports scikit-learn's ``BaseEstimator``; scikit-learn's
own import is timed in the same way and reported beside it).

``--before PATH`` times a second tree side by side (``PATH`` is the ``lib`` folder of
another checkout, put first on ``PYTHONPATH``; e.g. the main branch before a change),
the two trees taking turns at every measurement so that the machine's load hits both
alike.
Medians over ``--repeats`` repeats. Each measurement records its wall seconds and its
CPU seconds (user + system of the child process, ``resource.getrusage``, from the
clock's start): on a loaded machine compare the CPU seconds.

``--lib PATH`` times the ``lib`` folder ``PATH`` as "this" tree instead of the installed
package (e.g. a copy of this tree, so that editing it during the run changes nothing).

Usage: ``python benchmarks/bench_first_fit.py [--quick] [--repeats R] [--before PATH]
[--lib PATH]``;
writes ``benchmarks/results/first_fit[-quick].{json,md}``.
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from _common import machine_info, machine_line, publish, run_child, tree_label

#: the measured call of each kind (run in a child process; prints one JSON line)
_CHILD = r"""
import json, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
kind = sys.argv[1]
if kind.startswith("import"):
    t0, c0 = time.perf_counter(), cpu()
    if kind == "import-package":
        import scalable_softmax
    elif kind == "import-estimator":
        from scalable_softmax import SoftmaxSGDClassifier
    else:
        import sklearn.base
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": cpu() - c0}))
    raise SystemExit
from sklearn.datasets import load_digits
from sklearn.preprocessing import normalize
X, y = load_digits(return_X_y=True)
X = normalize(X)                       # unit L2 rows
t0, c0 = time.perf_counter(), cpu()
import scalable_softmax
if kind == "fit":
    from scalable_softmax import fit
    res = fit(X, y, "implicit", 1.0, epochs=3, progress=False)
    acc = 1.0 - float(res.history.train_error.iloc[-1])
else:
    from scalable_softmax import SoftmaxSGDClassifier
    clf = SoftmaxSGDClassifier(method="implicit", lr=1.0, epochs=3, random_state=0)
    clf.fit(X, y)
    acc = float((clf.predict(X) == y).mean())
seconds = time.perf_counter() - t0
print(json.dumps({"seconds": seconds, "cpu_seconds": cpu() - c0, "train_accuracy": acc}))
"""


def _child(kind, lib, cache_dir):
    return run_child(_CHILD, kind, lib, cache_dir)


def _one_repeat(trees, kinds):
    """One row per tree: each kind cold (an empty cache), then warm (the cache the cold
    run filled), then the imports; the trees take turns at every measurement, so that
    a change in the machine's load hits them alike."""
    rows = {tree: {"tree": tree} for tree, _ in trees}
    for kind in kinds:
        for tree, lib in trees:
            cache = Path(tempfile.mkdtemp(prefix="bench-first-fit-"))
            try:
                cold = _child(kind, lib, cache)
                warm = _child(kind, lib, cache)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            rows[tree][f"cold_{kind}_s"] = cold["seconds"]
            rows[tree][f"warm_{kind}_s"] = warm["seconds"]
            rows[tree][f"cold_{kind}_cpu_s"] = cold["cpu_seconds"]
            rows[tree][f"warm_{kind}_cpu_s"] = warm["cpu_seconds"]
            rows[tree][f"{kind}_train_accuracy"] = cold["train_accuracy"]
    for kind in ("import-package", "import-estimator", "import-sklearn"):
        for tree, lib in trees:
            with tempfile.TemporaryDirectory(prefix="bench-first-fit-") as cache:
                got = _child(kind, lib, cache)
            rows[tree][kind.replace("-", "_") + "_s"] = got["seconds"]
            rows[tree][kind.replace("-", "_") + "_cpu_s"] = got["cpu_seconds"]
    return list(rows.values())


def run(quick=False, repeats=3, before=None, lib=None):
    start = machine_info()
    kinds = ["fit"] if quick else ["fit", "estimator"]
    trees = [("this", Path(lib).resolve() if lib else None)]
    if before:
        trees.append(("before", Path(before).resolve()))
    rows = []
    for r in range(repeats):
        for row in _one_repeat(trees if r % 2 == 0 else trees[::-1], kinds):
            row["repeat"] = r
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {}
    for tree, lib in trees:
        mine = [row for row in rows if row["tree"] == tree]
        summary[tree] = {k: float(np.median([row[k] for row in mine]))
                         for k in mine[0] if k.endswith("_s")}
        summary[tree]["lib"] = tree_label(lib)
    return {"machine": start, "machine_end": machine_info(), "quick": quick,
            "repeats": repeats, "kinds": kinds, "runs": rows, "summary": summary,
            "data": "sklearn digits (N 1,797, D 64, K 10), unit L2 rows"}


_LABELS = [("cold_fit_s", "import + `fit(..., 'implicit', epochs=3)`, empty numba cache"),
           ("warm_fit_s", "the same, warm cache"),
           ("cold_estimator_s", "import + `SoftmaxSGDClassifier(epochs=3).fit`, empty cache"),
           ("warm_estimator_s", "the same, warm cache"),
           ("import_package_s", "`import scalable_softmax`"),
           ("import_estimator_s", "`from scalable_softmax import SoftmaxSGDClassifier`"),
           ("import_sklearn_s", "`import sklearn.base` alone (for comparison)")]


def _cpu_ratios(summary, trees):
    """One sentence: the CPU seconds of the first tree over each other tree's, for the
    cold runs (the ratio measured side by side, which a loaded machine leaves)."""
    parts = []
    for t in trees[1:]:
        for kind in ("fit", "estimator"):
            key = f"cold_{kind}_cpu_s"
            if key in summary[t] and summary[t][key] > 0:
                parts.append(f"cold {kind}, {trees[0]} / {t}: "
                             f"{summary[trees[0]][key] / summary[t][key]:.2f}")
    return "CPU seconds " + "; ".join(parts) + "." if parts else ""


def markdown(res):
    trees = list(res["summary"])
    # CPU seconds (user + system of the measured process, from the clock's start) beside
    # the wall seconds, when the results have them: on a loaded machine the wall
    # seconds mostly measure the other jobs
    cpu = "cold_fit_cpu_s" in res["summary"][trees[0]]
    cols = [(t, k) for t in trees for k in (("s", "cpu") if cpu else ("s",))]
    head = "| what | " + " | ".join(
        f"{t} ({'CPU s' if k == 'cpu' else 's'}, median)" for t, k in cols) + " |"
    lines = ["# The first fit: an empty numba cache, a new process", "",
             "Written by `benchmarks/bench_first_fit.py`. "
             + machine_line(res["machine"], res["machine_end"]) + " "
             f"Data: {res['data']}; implicit SGD, lr 1.0, 3 epochs, one thread; medians "
             f"of {res['repeats']} repeats, each measurement a new process"
             + (", the trees taking turns at every measurement" if len(trees) > 1
                else "")
             + ". The machine is shared with other jobs: compare the columns, measured "
             "side by side, more than the absolute seconds.", "",
             head, "|---|" + "---|" * len(cols)]
    for key, label in _LABELS:
        if key in res["summary"][trees[0]]:
            lines.append(f"| {label} | " + " | ".join(
                f"{res['summary'][t][key if k == 's' else key[:-2] + '_cpu_s']:.2f}"
                for t, k in cols) + " |")
    if cpu and len(trees) > 1:
        lines += ["", _cpu_ratios(res["summary"], trees)]
    if len(trees) > 1:
        lines += ["", "Trees: " + "; ".join(f"{t}: {res['summary'][t]['lib']}"
                                           for t in trees) + "."]
    return "\n".join(lines + [""])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the fit path only, 1 repeat")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--before", default=None,
                    help="the lib folder of another checkout, timed side by side")
    ap.add_argument("--lib", default=None,
                    help="the lib folder timed as this tree (default: the installed one)")
    args = ap.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    res = run(args.quick, repeats, args.before, args.lib)
    publish("first_fit-quick" if args.quick else "first_fit", res, markdown(res))


if __name__ == "__main__":
    main()
