"""What ``docs/own-data.md`` says about training on your own data, measured.

1. **The first fit compiles.** For each method, a fresh Python process with an empty
   numba cache (a new temporary ``NUMBA_CACHE_DIR``) imports the library and fits one
   epoch on scikit-learn's digits (1,797 rows of 64 pixels, 10 classes; rows scaled to
   unit L2), timing the import, the first ``fit`` (numba compiles the method's kernels
   and writes them to the cache) and a second ``fit`` in the same process; then a
   second fresh process with the now warm cache does the same (numba reads the kernels
   back). Wall-clock and CPU seconds of the first fit (the CPU time does not grow with
   the other jobs of a shared machine). ``fit`` includes its exact evaluation of the
   training set after the epoch.
2. **Which methods need small rates on rows that are not unit-L2.** Every SGD method
   trains 10 epochs (seed 0, with intercepts) on the digits three ways -- unit-L2 rows
   (``sklearn.preprocessing.normalize``), the raw pixel values (0 to 16) and
   standardised columns (``StandardScaler(with_mean=False)``) -- at rates 1, 0.1, 0.01
   and 0.001, and reports the exact training log-loss (a uniform guess scores
   log 10 = 2.30; ``inf`` when a probability underflows to 0 or the weights overflow).

Writes ``benchmarks/results/own_data.json`` and ``own_data.md`` (``--quick``: two
methods and two rates, ``own_data-quick.*``). The machine is shared and has 2 cores:
the load average at the start and the end of each part is recorded.

Usage: ``python benchmarks/bench_own_data.py [--quick]``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import RESULTS, machine_info, write_atomic  # noqa: E402

COMPILE_METHODS = ["vanilla", "umax", "implicit", "implicit-batch", "ove"]
RATE_METHODS = ["vanilla", "umax", "raman", "implicit", "implicit-batch", "ove", "nce", "is",
                "softmax-sgd"]
RATES = [1.0, 0.1, 0.01, 0.001]

#: run in a fresh process: prints one JSON line of timings
CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from sklearn.datasets import load_digits
from sklearn.preprocessing import normalize
from scalable_softmax.fit import fit
t1 = time.perf_counter()
X, y = load_digits(return_X_y=True)
import scipy.sparse as sp
X = normalize(sp.csr_matrix(X))
def once():
    s, c = time.perf_counter(), time.process_time()
    fit(X, y, sys.argv[1], lr=0.1, epochs=1, fit_intercept=True, K=10,
        eval_sets={"train": (X, y)}, progress=False)
    return time.perf_counter() - s, time.process_time() - c
(first, first_cpu), (second, _) = once(), once()
print(json.dumps(dict(import_s=t1 - t0, first_fit_s=first, first_fit_cpu_s=first_cpu,
                      second_fit_s=second)))
"""


def compile_times(methods):
    out = []
    for method in methods:
        with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache, SCALABLE_SOFTMAX_PROGRESS="off")
            row = dict(method=method, load_at_start=round(os.getloadavg()[0], 2))
            for phase in ("empty cache", "warm cache"):
                proc = subprocess.run([sys.executable, "-c", CHILD, method], env=env,
                                      capture_output=True, text=True, check=True)
                t = json.loads(proc.stdout.strip().splitlines()[-1])
                row[phase] = {k: round(v, 2) for k, v in t.items()}
            row["load_at_end"] = round(os.getloadavg()[0], 2)
        print(row, flush=True)
        out.append(row)
    return out


def rate_table(methods, rates):
    import scipy.sparse as sp
    from sklearn.datasets import load_digits
    from sklearn.preprocessing import StandardScaler, normalize

    from scalable_softmax.fit import fit

    X, y = load_digits(return_X_y=True)
    X = sp.csr_matrix(X)
    variants = {"unit-L2 rows": normalize(X), "raw pixels": X,
                "standardised": sp.csr_matrix(StandardScaler(with_mean=False).fit_transform(X))}
    norms = {name: float(np.asarray(Z.multiply(Z).sum(1)).mean()) for name, Z in variants.items()}
    rows = []
    for method in methods:
        for name, Z in variants.items():
            losses = {}
            for lr in rates:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = fit(Z, y, method, lr=lr, epochs=10, fit_intercept=True, K=10,
                              eval_sets={"train": (Z, y)}, progress=False, seed=0)
                losses[lr] = float(res.history["train_log_loss"].dropna().iloc[-1])
            rows.append(dict(method=method, rows=name, train_log_loss=losses))
            print(rows[-1], flush=True)
    return norms, rows


def _fmt(v):
    return "inf" if not np.isfinite(v) else f"{v:.3g}"


def report(res) -> str:
    m = res["machine"]
    lines = ["# Training on your own data: first-fit compilation and rates (docs/own-data.md)",
             "", f"Machine: {m['cpu_model']}, {m['cpus']} cores, Python {m['python']}, "
             f"numba {m['numba']}; {m['date']}. Load average at the start "
             f"{res['load_at_start']}, at the end {res['load_at_end']} (a shared machine).",
             "", "## Seconds of the first `fit` in a fresh process (digits, 1 epoch)", "",
             "| method | empty cache: first fit (CPU) | second fit | import "
             "| warm cache: first fit (CPU) | second fit | import | load (start, end) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in res["compile"]:
        e, w = r["empty cache"], r["warm cache"]
        lines.append(f"| `{r['method']}` | {e['first_fit_s']:.1f} ({e['first_fit_cpu_s']:.1f}) | "
                     f"{e['second_fit_s']:.2f} | {e['import_s']:.1f} | "
                     f"{w['first_fit_s']:.1f} ({w['first_fit_cpu_s']:.1f}) | "
                     f"{w['second_fit_s']:.2f} | "
                     f"{w['import_s']:.1f} | {r['load_at_start']}, {r['load_at_end']} |")
    rates = res["rates"]
    lines += ["", "## Training log-loss after 10 epochs (digits; uniform guess 2.30)", "",
              "Mean squared row norm: " + ", ".join(f"{k} {v:,.1f}" for k, v in
                                                   res["mean_sq_norm"].items()) + ".", "",
              "| method | rows | " + " | ".join(f"lr {lr:g}" for lr in rates) + " |",
              "|---|---|" + "---|" * len(rates)]
    for r in res["rate_rows"]:
        lines.append(f"| `{r['method']}` | {r['rows']} | "
                     + " | ".join(_fmt(r["train_log_loss"][str(lr)]) for lr in rates) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    cm = COMPILE_METHODS[:2] if args.quick else COMPILE_METHODS
    rm = RATE_METHODS[:2] if args.quick else RATE_METHODS
    rates = RATES[1:3] if args.quick else RATES
    res = dict(machine=machine_info(), load_at_start=[round(v, 2) for v in os.getloadavg()])
    res["compile"] = compile_times(cm)
    norms, rows = rate_table(rm, rates)
    res.update(mean_sq_norm=norms, rates=rates,
               rate_rows=[dict(r, train_log_loss={str(k): v for k, v in
                                                  r["train_log_loss"].items()}) for r in rows],
               load_at_end=[round(v, 2) for v in os.getloadavg()])
    name = "own_data-quick" if args.quick else "own_data"
    write_atomic(RESULTS / f"{name}.json", json.dumps(res, indent=1, allow_nan=True) + "\n")
    write_atomic(RESULTS / f"{name}.md", report(res))
    print(report(res))


if __name__ == "__main__":
    main()
