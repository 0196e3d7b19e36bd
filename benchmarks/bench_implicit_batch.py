"""Benchmark of ``implicit-batch`` (Implicit SGD with n datapoints, m classes and
ridge; the paper's Appendix F.3, which it never ran).

Shape of Bibtex after preprocessing (N = 4,880, D = 1,836, K = 147) with about 68
non-zeros per row and labels from a noisy linear model, so that each step's small
strongly convex problem is realistic. Times three epochs per setting, with the
structured Newton solver (default) and the plain dense Cholesky side by side, and
reports Newton iterations per step and the final exact log-loss.

Writes ``benchmarks/results/implicit_batch.{json,md}``. Usage:
``python benchmarks/bench_implicit_batch.py``.
"""
from __future__ import annotations

import json
import time

import numpy as np

from _common import RESULTS, machine_info, random_rows, write_atomic
from scalable_softmax.evaluate import evaluate
from scalable_softmax.methods.implicit_batch import ImplicitBatchTrainer

SETTINGS = [  # (n, m, mu, lr, solvers)
    (10, 10, 0.0, 10.0, ("structured", "dense")),
    (10, 10, 0.0, 1e4, ("structured",)),
    (10, 10, 1.0, 10.0, ("structured",)),
    (1, 1, 0.0, 10.0, ("structured",)),
    (20, 10, 0.0, 10.0, ("structured", "dense")),
]


def main() -> None:
    N, D, K, nnz = 4880, 1836, 147, 68
    X = random_rows(N, D, nnz, seed=0)
    rng = np.random.default_rng(0)
    W_true = rng.normal(size=(K, D)) * 3
    scores = X @ W_true.T + rng.gumbel(size=(N, K)) - 0.03 * np.arange(K)
    y = np.argmax(scores, axis=1).astype(np.int64)
    orders = [np.random.default_rng(e).permutation(N) for e in range(3)]
    rows = []
    for n, m, mu, lr, solvers in SETTINGS:
        for solver in solvers:
            tr = ImplicitBatchTrainer(X, y, K, mu=mu, batch_size=n, n_sampled=m,
                                      linear_solver=solver)
            tr.init_params()
            tr.warmup()
            secs, reps = [], []
            for e in range(3):
                t = time.perf_counter()
                reps.append(tr.run_epoch(orders[e], lr * 0.9 ** e, seed=e))
                secs.append(time.perf_counter() - t)
            rows.append(dict(
                n=n, m=m, mu=mu, lr=lr, solver=solver, seconds_per_epoch=secs,
                newton_iterations_mean=[r.extra["newton_iterations_mean"] for r in reps],
                chord_iterations_mean=[r.extra["chord_iterations_mean"] for r in reps],
                newton_iterations_max=max(r.extra["newton_iterations_max"] for r in reps),
                unconverged=int(sum(r.extra["newton_unconverged"] for r in reps)),
                log_loss=evaluate(X, y, tr.weights()).log_loss))
            print(rows[-1], flush=True)
    res = dict(machine=machine_info(), N=N, D=D, K=K, nnz_per_row=X.nnz / N, runs=rows)
    lines = ["# implicit-batch: speed on a Bibtex-shaped problem", "",
             f"Machine: {res['machine']['cpu_model']}, {res['machine']['cpus']} cores, "
             f"load average at the end {res['machine']['load_average']}; "
             f"{res['machine']['date']}.", "",
             f"N = {N:,}, D = {D:,}, K = {K}, {res['nnz_per_row']:.1f} non-zeros per row; "
             "three epochs per setting (learning rate x 0.9 per epoch).", "",
             "| n | m | mu | lr | solver | s/epoch (min) | Newton it./step | of them chord "
             "| max | unconverged | log-loss after 3 epochs |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['n']} | {r['m']} | {r['mu']:g} | {r['lr']:g} | {r['solver']} | "
                     f"{min(r['seconds_per_epoch']):.2f} | "
                     f"{np.mean(r['newton_iterations_mean']):.2f} | "
                     f"{np.mean(r['chord_iterations_mean']):.2f} | "
                     f"{r['newton_iterations_max']} | {r['unconverged']} | "
                     f"{r['log_loss']:.6f} |")
    write_atomic(RESULTS / "implicit_batch.json", json.dumps(res, indent=1))
    write_atomic(RESULTS / "implicit_batch.md", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
