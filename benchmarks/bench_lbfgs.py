"""Speed of the full-batch L-BFGS trainers (methods/full.py, methods/lbfgs.py) on the
One-vs-Each paper's 20 Newsgroups shape.

Shape: N = 11,293 documents, D = 61,188 words + 1 bias column, K = 20 classes, about
137 distinct words per document with Zipf-distributed columns and geometric counts
(raw counts, like the bodies of notebook 10), ridge mu = 1: ``n = K (D + 1) = 1.22
million`` parameters. Measured in one run (ratios side by side):

1. ``objective``: one evaluation of the softmax objective and gradient by the numba
   kernel (one thread), beside its memory-access bound: SciPy's sparse products
   ``X @ W^T`` and ``X^T @ P`` (C++; the same reads and writes, no per-row
   non-linearity).
2. ``lbfgs``: ``iters`` L-BFGS iterations of ``ExactTrainer`` from ``W = 0`` with
   ``solver="scipy"`` (L-BFGS-B) and ``solver="lbfgs"`` (plain L-BFGS), memory 10;
   per iteration: total time, evaluations, and an estimate of the optimiser's own time
   (total minus evaluations times the fastest objective time: an underestimate).
3. ``vector_bound``: for scale, the ``4 m`` passes over ``n``-vectors (m dot products
   and m AXPYs in each loop of the two-loop recursion) timed with NumPy.

Every variant is timed ``--repeats`` times, alternating; the report gives the minimum
and the median. The machine is shared (2 cores): the load average is recorded.

Usage: ``python benchmarks/bench_lbfgs.py [--quick] [--repeats R] [--iters I]``;
results go to ``benchmarks/results/lbfgs.json`` and ``lbfgs.md`` (``lbfgs-quick.*``
with ``--quick``: a tenth of the documents, fewer iterations).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, machine_info, write_atomic  # noqa: E402
from scalable_softmax import methods  # noqa: E402
from scalable_softmax.methods.full import ExactTrainer  # noqa: E402


def news_like(N, D, K, words, seed=0):
    """Raw-count bag of words: Zipf columns, geometric counts, bias column, labels."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, D + 1)
    p = 1.0 / ranks
    p /= p.sum()
    rows = []
    for _ in range(N):
        cols = np.unique(rng.choice(D, size=words, p=p))
        rows.append(cols)
    indptr = np.zeros(N + 1, dtype=np.int64)
    indptr[1:] = np.cumsum([len(c) for c in rows])
    indices = np.concatenate(rows)
    data = rng.geometric(0.6, size=indices.size).astype(np.float64)
    X = sp.csr_matrix((data, indices, indptr), shape=(N, D))
    X = sp.hstack([X, np.ones((N, 1))], format="csr")
    X.sort_indices()
    y = rng.integers(0, K, N)
    return X, y


def timed(fn, repeats):
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--iters", type=int, default=40)
    args = ap.parse_args(argv)
    N, D, K, words = (11293, 61188, 20, 137) if not args.quick else (1129, 61188, 20, 137)
    iters = args.iters if not args.quick else 8
    X, y = news_like(N, D, K, words)
    n = K * (D + 1)
    res = {"machine": machine_info(), "shape": dict(N=N, D=D + 1, K=K, nnz=int(X.nnz), n=n),
           "iters": iters, "repeats": args.repeats}

    # 1. objective vs its memory-access bound
    tr = ExactTrainer(X, y, K, mu=1.0, threads=1)
    tr.init_params()
    tr.warmup()
    rng = np.random.default_rng(1)
    x = rng.normal(scale=0.01, size=n)
    WT = x.reshape(D + 1, K)
    P = np.asarray(X @ WT)
    XT = X.T.tocsr()
    methods.objective(tr, x)
    t_obj, t_bound = [], []
    for _ in range(args.repeats):
        t_obj += timed(lambda: methods.objective(tr, x), 1)
        t_bound += timed(lambda: (X @ WT, XT @ P), 1)
    res["objective"] = {"kernel_s": t_obj, "scipy_sparse_products_s": t_bound}

    # 2. L-BFGS-B against the plain L-BFGS, same start, same iterations
    runs = {"scipy": [], "lbfgs": []}
    for _ in range(args.repeats):
        for solver in ("scipy", "lbfgs"):
            t = ExactTrainer(X, y, K, mu=1.0, threads=1, solver=solver,
                             iters_per_epoch=None, maxiter=iters, gtol=0.0, memory=10)
            t.init_params()
            t.warmup()
            t0 = time.perf_counter()
            rep = t.run_epoch()
            runs[solver].append(dict(seconds=time.perf_counter() - t0,
                                     nit=int(rep.extra["nit"]), nfev=int(rep.extra["nfev"]),
                                     fun=float(rep.extra["fun"])))
    res["lbfgs"] = runs

    # 3. the two-loop recursion's vector passes
    m = 10
    S = rng.normal(size=(m, n))
    g = rng.normal(size=n)

    def passes():
        q = g.copy()
        for i in range(m):
            a = S[i] @ q
            q -= a * S[i]
        for i in range(m):
            b = S[i] @ q
            q += b * S[i]
    res["vector_bound"] = {"two_loop_s": timed(passes, args.repeats)}

    e = min(t_obj)
    lines = [f"# Full-batch L-BFGS on the 20 Newsgroups shape ({res['machine']['date']})", "",
             f"N = {N}, D = {D + 1} (with bias), K = {K}, nnz = {X.nnz}, n = {n} parameters; "
             f"machine {res['machine']['cpu_model']}, {res['machine']['cpus']} CPUs, load "
             f"average {res['machine']['load_average']}; {args.repeats} repeats "
             "(min / median).", "",
             "| measurement | min | median |", "|---|---|---|",
             f"| objective + gradient, numba kernel, 1 thread | {e * 1e3:.1f} ms | "
             f"{np.median(t_obj) * 1e3:.1f} ms |",
             f"| memory-access bound: SciPy sparse X W^T and X^T P | {min(t_bound) * 1e3:.1f} ms | "
             f"{np.median(t_bound) * 1e3:.1f} ms |"]
    for solver, rr in runs.items():
        per = [r["seconds"] / max(r["nit"], 1) for r in rr]
        own = [(r["seconds"] - r["nfev"] * e) / max(r["nit"], 1) for r in rr]
        lines.append(f"| {solver}: time per iteration ({rr[0]['nit']} iterations, "
                     f"{rr[0]['nfev']} evaluations) | {min(per) * 1e3:.1f} ms | "
                     f"{np.median(per) * 1e3:.1f} ms |")
        lines.append(f"| {solver}: optimiser's own time per iteration (estimate) | "
                     f"{min(own) * 1e3:.1f} ms"
                     f" | {np.median(own) * 1e3:.1f} ms |")
    tl = res["vector_bound"]["two_loop_s"]
    lines.append(f"| for scale: 4m NumPy passes over n-vectors (m = 10) | {min(tl) * 1e3:.1f} ms | "
                 f"{np.median(tl) * 1e3:.1f} ms |")
    lines.append("")
    lines.append(f"Final objective after {iters} iterations: scipy "
                 f"{runs['scipy'][0]['fun']:.10f}, lbfgs {runs['lbfgs'][0]['fun']:.10f}.")
    stem = "lbfgs-quick" if args.quick else "lbfgs"
    write_atomic(RESULTS / f"{stem}.json", json.dumps(res, indent=1))
    write_atomic(RESULTS / f"{stem}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
