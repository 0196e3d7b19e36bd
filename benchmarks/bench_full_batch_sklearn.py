"""Full-batch ridge softmax through ``fit(X, y, "exact", None, ...)`` against
scikit-learn's ``LogisticRegression(solver="lbfgs")`` (issue 33, item 1).

Problems (one thread each: OMP / OpenBLAS / MKL / numba threads 1, set before the
imports): Bibtex, all 4,880 training rows (CSR, D = 1,836, K = 146), and MNIST's
60,000 training rows as a dense array (D = 784, K = 10); ``C = 10``, no intercept.
The same objective on both sides: scikit-learn minimises the mean log-loss plus
``||W||^2 / (2 C N)``, which is ``fit``'s per-datapoint objective ``F`` with
``mu = 1/C`` (``methods/full.py``); both are evaluated by the same function
(:func:`scalable_softmax.methods.full.full_objective`) at the weights each returns.

Per repeat, interleaved (scikit-learn first, then ours, then ours with scikit-learn's
stopping rule), each timed from the call to its return:

* ``sklearn``: ``LogisticRegression(C=10, tol=1e-6, max_iter=5000,
  fit_intercept=False).fit(X, y)``; its objective ``F_sk`` at the end, its iterations;
* ``ours``: ``fit(X, y, "exact", None, mu=1/C, epochs=2000, eval_epochs=[])`` with the
  default options (``gtol = 1e-8``); a ``callback`` notes the clock (its own time is
  subtracted) and a copy of ``W`` after every L-BFGS iteration, and after the run the
  objective of every copy gives the **time to F_sk**: from the call until the first
  iterate with ``F <= F_sk``; also the time to the end of the call (which, with the
  stop at convergence, no longer grows with ``epochs``) and the iterations;
* ``ours-sk-rule``: the same with scikit-learn's stopping rule, ``gtol = tol = 1e-6``
  and ``ftol = 64 eps``.

Per iteration: CPU seconds of the whole call divided by its iterations, for each
solver; the ratios are ours / scikit-learn's. Every time is taken both as wall clock
and as the process's CPU time (``time.process_time``; one thread each, so it is the
work done, less disturbed when other jobs share the cores). Best of ``--repeats``
(default 3) for every time, because the machine is shared (the load average at the
start and at the end is in the result file).

Usage: ``python benchmarks/bench_full_batch_sklearn.py [--quick] [--repeats R]
[--data bibtex mnist]``; results in ``benchmarks/results/full_batch_sklearn.{json,md}``
(``--quick``: 1,000 rows of each, ``full_batch_sklearn-quick.*``; ``--data mnist``:
``full_batch_sklearn-mnist.*``), rewritten after each data set.
"""
from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, machine_info, write_atomic  # noqa: E402

C = 10.0
TOL = 1e-6
EPOCHS = 2000


def load(name, rows):
    from scalable_softmax.data import load_dataset
    ds = load_dataset(name)
    X, y = ds.X, np.asarray(ds.y, dtype=np.int64)
    if rows:
        X, y = X[:rows], y[:rows]
    if name == "mnist":
        X = np.ascontiguousarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
    else:
        X = sp.csr_matrix(X, dtype=np.float64)
    _, y = np.unique(y, return_inverse=True)     # the classes present, as 0..K-1
    y = y.astype(np.int64)
    K = int(y.max()) + 1
    return X, y, K


def objective(X, y, W, mu):
    from scalable_softmax.methods.full import full_objective
    Xs = X if sp.issparse(X) else sp.csr_matrix(X)
    return float(full_objective(Xs, y, W, mu=mu)[0])


def run_sklearn(X, y, K):
    from sklearn.linear_model import LogisticRegression
    clf = LogisticRegression(C=C, tol=TOL, max_iter=5000, fit_intercept=False)
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    W = np.zeros((K, X.shape[1]))
    W[clf.classes_] = clf.coef_
    return dict(seconds=sec, cpu=cpu, nit=int(np.max(clf.n_iter_)), W=W)


def run_ours(X, y, K, **options):
    from scalable_softmax.fit import fit
    stamps, cstamps, copies = [], [], []
    spent, cspent = [0.0], [0.0]

    def cb(it, W):
        t, c = time.perf_counter(), time.process_time()
        stamps.append(t - spent[0])
        cstamps.append(c - cspent[0])
        copies.append(np.array(W, copy=True))
        spent[0] += time.perf_counter() - t
        cspent[0] += time.process_time() - c

    t0, c0 = time.perf_counter(), time.process_time()
    res = fit(X, y, "exact", None, mu=1.0 / C, epochs=EPOCHS, eval_epochs=[], progress=False,
              K=K, callback=cb, **options)
    sec = time.perf_counter() - t0 - spent[0]
    cpu = time.process_time() - c0 - cspent[0]
    return dict(seconds=sec, cpu=cpu, cstamps=[c - c0 for c in cstamps],
                nit=int(res.history.steps.iloc[-1]), W=res.W,
                epochs_run=int(len(res.history) - 1), history_rows=int(len(res.history)),
                stopped_at_epoch=res.params.get("stopped_at_epoch"),
                message=str(res.extra.message.iloc[-1]),
                stamps=[s - t0 for s in stamps], copies=copies)


def time_to(run, X, y, target, mu):
    """Seconds (wall, CPU) from the call to the first iterate with objective
    ``<= target``, and that iteration."""
    for i, (t, c, W) in enumerate(zip(run["stamps"], run["cstamps"], run["copies"])):
        if objective(X, y, W, mu) <= target:
            return t, c, i + 1
    return None, None, None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", nargs="+", default=["bibtex", "mnist"],
                    choices=["bibtex", "mnist"])
    args = ap.parse_args(argv)
    import numba
    numba.set_num_threads(1)
    rows = 1000 if args.quick else None
    mu = 1.0 / C
    load_start = [round(v, 2) for v in os.getloadavg()]
    out = {"machine": machine_info(), "C": C, "tol": TOL, "epochs_cap": EPOCHS,
           "repeats": args.repeats, "load_average_start": load_start, "data": {}}
    import sklearn
    out["machine"]["sklearn"] = sklearn.__version__
    variants = {"ours": {}, "ours-sk-rule": dict(gtol=TOL, ftol=64 * np.finfo(float).eps)}
    for name in args.data:
        X, y, K = load(name, rows)
        # compile / warm caches once, untimed
        run_ours(X[:50], y[:50], K)
        rec = {"N": int(X.shape[0]), "D": int(X.shape[1]), "K": K,
               "layout": "CSR" if sp.issparse(X) else "dense", "runs": []}
        for r in range(args.repeats):
            sk = run_sklearn(X, y, K)
            f_sk = objective(X, y, sk["W"], mu)
            row = {"sklearn": dict(seconds=sk["seconds"], cpu=sk["cpu"], nit=sk["nit"],
                                   objective=f_sk)}
            for v, opts in variants.items():
                o = run_ours(X, y, K, **opts)
                tt, ct, it = time_to(o, X, y, f_sk, mu)
                row[v] = dict(seconds=o["seconds"], cpu=o["cpu"], nit=o["nit"],
                              objective=objective(X, y, o["W"], mu),
                              time_to_sklearn_objective=tt, cpu_to_sklearn_objective=ct,
                              iterations_to_sklearn_objective=it,
                              epochs_run=o["epochs_run"], history_rows=o["history_rows"],
                              stopped_at_epoch=o["stopped_at_epoch"], message=o["message"])
                del o
            rec["runs"].append(row)
            print(name, r, json.dumps(row, default=float), flush=True)
        out["data"][name] = rec
        # written after each data set (a long run cut short keeps what it measured)
        out["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
        stem = "full_batch_sklearn" + ("" if args.data == ["bibtex", "mnist"] else
                                       "-" + "-".join(args.data)) + ("-quick" if args.quick else "")
        write_atomic(RESULTS / f"{stem}.json", json.dumps(out, indent=1, default=float))
        md = report(out)
        write_atomic(RESULTS / f"{stem}.md", md)
    print(md)


def _best(runs, variant, key):
    vals = [r[variant][key] for r in runs if r[variant].get(key) is not None]
    return min(vals) if vals else None


def _f(v, fmt="{:.3f}"):
    return "never" if v is None else fmt.format(v)


def report(out):
    m = out["machine"]
    L = [f"# Full-batch softmax: fit(\"exact\") against scikit-learn ({m['date']})", "",
         f"Produced by `benchmarks/bench_full_batch_sklearn.py`. One thread each "
         f"(OMP/OpenBLAS/MKL/numba threads 1), same process, interleaved, best of "
         f"{out['repeats']}; C = {out['C']:g} (`mu = 1/C`), no intercept; scikit-learn "
         f"{m['sklearn']} `LogisticRegression(C={out['C']:g}, tol={out['tol']:g}, "
         f"max_iter=5000, fit_intercept=False)`; ours `fit(X, y, \"exact\", None, "
         f"mu={1 / out['C']:g}, epochs={out['epochs_cap']})`. Machine: {m['cpu_model']}, "
         f"{m['cpus']} CPUs, shared with other jobs: load average "
         f"{out['load_average_start']} at the start, {out['load_average_end']} at the end "
         "(1, 5, 15 minutes). With the machine oversubscribed the wall-clock times swing "
         "by 2x between repeats; the CPU times of the process (`time.process_time`, "
         "one thread each) are the steadier measure, and both are given.", "",
         "Objective: `F = mean log-loss + ||W||^2/(2 C N)`, scikit-learn's own, "
         "evaluated by one function for both. *to F_sk*: from the call until the first "
         "iterate of ours whose objective is at most scikit-learn's final one (for "
         "scikit-learn: its whole call). *per iteration*: the whole call's CPU seconds / "
         "its L-BFGS iterations. Ratios: ours / scikit-learn's, best against best.", "",
         "| data | solver | wall s (best) | CPU s (best) | wall to F_sk | CPU to F_sk "
         "| ratio to sklearn, wall / CPU | iterations (to F_sk) | CPU ms / iteration "
         "| per-iteration ratio | final F | history rows | stop |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, rec in out["data"].items():
        runs = rec["runs"]
        sk_s = _best(runs, "sklearn", "seconds")
        sk_c = _best(runs, "sklearn", "cpu")
        sk_it = runs[0]["sklearn"]["nit"]
        sk_per = min(r["sklearn"]["cpu"] / max(r["sklearn"]["nit"], 1) for r in runs)
        L.append(f"| {name} ({rec['layout']}, N {rec['N']}, D {rec['D']}, K {rec['K']}) | "
                 f"scikit-learn | {sk_s:.3f} | {sk_c:.3f} | {sk_s:.3f} | {sk_c:.3f} | 1 / 1 | "
                 f"{sk_it} | {sk_per * 1e3:.1f} | 1 | "
                 f"{runs[0]['sklearn']['objective']:.10f} | | tol = {out['tol']:g} |")
        for v in ("ours", "ours-sk-rule"):
            s = _best(runs, v, "seconds")
            c = _best(runs, v, "cpu")
            tt = _best(runs, v, "time_to_sklearn_objective")
            ct = _best(runs, v, "cpu_to_sklearn_objective")
            per = min(r[v]["cpu"] / max(r[v]["nit"], 1) for r in runs)
            r0 = runs[0][v]
            label = "ours, gtol 1e-8 (default)" if v == "ours" else \
                "ours, gtol 1e-6 + ftol 64 eps (sklearn's rule)"
            ratio = "" if tt is None else f"{tt / sk_s:.2f} / {ct / sk_c:.2f}"
            L.append(f"| | {label} | {s:.3f} | {c:.3f} | {_f(tt)} | {_f(ct)} | {ratio} | "
                     f"{r0['nit']} ({_f(r0['iterations_to_sklearn_objective'], '{}')}) | "
                     f"{per * 1e3:.1f} | {per / sk_per:.2f} | {r0['objective']:.10f} | "
                     f"{r0['history_rows']} (stopped at epoch {r0['stopped_at_epoch']}) | "
                     f"{r0['message']} |")
    L += ["", "Every run (wall / CPU seconds of the call; wall / CPU to F_sk):", ""]
    for name, rec in out["data"].items():
        for i, r in enumerate(rec["runs"]):
            parts = [f"sklearn {r['sklearn']['seconds']:.3f} / {r['sklearn']['cpu']:.3f}"]
            for v in ("ours", "ours-sk-rule"):
                parts.append(f"{v} {r[v]['seconds']:.3f} / {r[v]['cpu']:.3f}; "
                             f"{_f(r[v]['time_to_sklearn_objective'])} / "
                             f"{_f(r[v]['cpu_to_sklearn_objective'])}")
            L.append(f"* {name} repeat {i + 1}: " + " | ".join(parts))
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
