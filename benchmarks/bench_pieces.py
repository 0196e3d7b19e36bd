"""What cutting an epoch into pieces costs our methods (notebooks 12 and 14).

A run of ours in notebooks 12 and 14 cuts every epoch into pieces of whole steps
(:class:`scalable_softmax.repro.race.ours.Pieces`: about 1/64 of the run's cap at the
measured speed, at least ``MIN_PIECE_SECONDS``), one kernel call each, so that it stops
and is evaluated near the cap and the checkpoints, as a PyTorch run stops at a minibatch.
A kernel call has a fixed cost (argument checks, the threads' start), so small pieces
could slow a fast method down. This script measures it, in the same run: the training
seconds per epoch of each method run whole (one call per epoch, as ``fit`` runs it)
against in pieces sized for notebook 14's tuning budget at that K (0.1 x the cap: 0.2 s
at K = 1,000, 1 s at 10,000; pieces of ``MIN_PIECE_SECONDS``, 10 ms, and 15.6 ms) and
for its timed runs (the cap: 2 s and 10 s; pieces of 31 ms and 156 ms), on 2 threads as
the notebooks run.

Data: ``20news-words`` at K = 1,000 and 10,000 (notebook 14's problems: 100,000
training rows). Methods (notebook 14's candidates; the rate changes nothing in the
cost of a step, unless a run diverges, which the script reports): U-max with one
sampled class, importance sampling with 2 classes, Implicit SGD (n = m = 1, its own
kernel), minibatch Implicit SGD n = m = 10, and our softmax SGD with minibatches of 100
at K = 1,000 (at 10,000 an epoch takes 10 s and its pieces are long anyway).

Per method, K and mode: the median over ``--repeats`` (the modes' order rotating) of
the median seconds per epoch over epochs 2..E (the first left out: page faults), its
ratio to the whole epochs', and the number of kernel calls per epoch.

Usage: ``python benchmarks/bench_pieces.py [--epochs E] [--repeats R] [--Ks K ...]``;
writes ``benchmarks/results/pieces.{json,md}``.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile

import numpy as np

from _common import machine_info, machine_line, publish

#: label -> (notebook method, rate, structural options)
CONFIGS = {
    "U-max, 1 class": ("umax", 0.01, {"n_sampled": 1}),
    "IS, 2 classes": ("is", 10.0, {"n_sampled": 2}),
    "Implicit SGD (n = m = 1)": ("implicit-batch", 10.0, {"batch_size": 1, "n_sampled": 1}),
    "minibatch Implicit SGD n = m = 10": ("implicit-batch", 10.0,
                                          {"batch_size": 10, "n_sampled": 10}),
    "softmax SGD, 100 rows": ("softmax-sgd", 100.0, {"batch_size": 100}),
}
#: K -> (tuning budget, cap) of notebook 14, the budgets whose pieces are measured
BUDGETS = {1000: (0.2, 2.0), 3000: (0.4, 4.0), 10000: (1.0, 10.0), 30000: (2.5, 25.0)}


class _Budget:
    """The part of the notebooks' recorder that sizes the pieces: a cap, no checkpoint."""

    def __init__(self, cap):
        self.cap = cap

    def until_next(self):
        return self.cap


def _trainer(path, method, options, threads):
    """Our trainer of a notebook job on ``threads`` threads, set up by the notebooks' own
    :func:`scalable_softmax.repro.race.ours.setup_ours`, on the problem file ``path`` (of
    ``race.problems.save_problem``). Returns ``(trainer, N, order, threads used)``."""
    import scipy.sparse as sp

    from scalable_softmax.repro.race import ours

    z = np.load(path)
    X = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
    y, K = z["y"].astype(np.int64), int(z["K"])
    tr, order, _, info = ours.setup_ours(method, options, X, y, K, threads)
    return tr, X.shape[0], order, info["threads_used"]


class _Counted:
    """A piece chooser that counts the pieces of the current epoch (its kernel calls)."""

    def __init__(self, chooser, N):
        self.chooser, self.N, self.calls = chooser, N, 0

    def piece_size(self, left):
        self.calls = 1 if left == self.N else self.calls + 1
        return self.chooser.piece_size(left)

    def measured(self, points, seconds):
        self.chooser.measured(points, seconds)


def _epochs(tr, N, order, lr, epochs, budget, seed):
    """Seconds of each epoch (``fit``'s training clock), whole (``budget`` None) or in
    pieces sized for ``budget``, run by the library's epoch driver
    (:func:`scalable_softmax.fit.run_epochs`) at the constant rate ``lr``; the kernel
    calls of the last epoch and whether the run diverged (it stops there)."""
    from scalable_softmax.fit import run_epochs
    from scalable_softmax.protocols import FitConfig
    from scalable_softmax.repro.race import ours

    cut = _Counted(ours.Pieces(N, tr.batch_size, _Budget(budget)), N) if budget else None
    config = FitConfig(method=type(tr).__name__, lr=lr, epochs=epochs, lr_decay=1.0,
                       seed=seed, order=order, eval_epochs=(), progress=False)
    run = run_epochs(tr, None, config, N, pieces=cut)
    seconds = [r["seconds"] for r in run.rows]
    out = [b - a for a, b in zip(seconds, seconds[1:])]
    return out, (1 if cut is None else cut.calls), run.diverged_at is not None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--Ks", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    if a.epochs < 2:
        ap.error("--epochs must be at least 2 (the first epoch is left out)")

    from scalable_softmax.repro.race import ours, problems

    start = machine_info()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths, _ = problems.build_problems(a.Ks, dict.fromkeys(a.Ks, 100_000), tmp)
        for K in a.Ks:
            for label, (method, lr, options) in CONFIGS.items():
                if method == "softmax-sgd" and K > 1000:
                    continue
                tune, cap = BUDGETS[K]
                modes = {"whole": None, "tuning": tune, "timed": cap}
                per = {k: [] for k in modes}
                calls, diverged, used = {}, False, 0
                for r in range(a.repeats):
                    names = list(modes)[r % 3:] + list(modes)[:r % 3]
                    for name in names:
                        tr, N, order, used = _trainer(paths[K], method, options, a.threads)
                        sec, c, d = _epochs(tr, N, order, lr, a.epochs, modes[name], seed=r)
                        per[name].append(float(np.median(sec[1:])))
                        diverged = diverged or d
                        calls[name] = c
                        del tr
                med = {k: float(np.median(v)) for k, v in per.items()}
                rows.append(dict(K=K, method=label, threads=used, budgets=[tune, cap],
                                 whole_s=med["whole"], tuning_s=med["tuning"],
                                 timed_s=med["timed"],
                                 tuning_ratio=med["tuning"] / med["whole"],
                                 timed_ratio=med["timed"] / med["whole"],
                                 tuning_calls=calls["tuning"], timed_calls=calls["timed"],
                                 diverged=diverged, all_seconds=per))
                print(f"K = {K:,} {label}: whole {med['whole']:.4f} s, tuning pieces "
                      f"{med['tuning']:.4f} s ({calls['tuning']} calls), timed pieces "
                      f"{med['timed']:.4f} s ({calls['timed']} calls)", file=sys.stderr,
                      flush=True)
    end = machine_info()
    res = dict(machine_start=start, machine_end=end, epochs=a.epochs, repeats=a.repeats,
               budgets=BUDGETS, min_piece_seconds=ours.MIN_PIECE_SECONDS,
               piece_fraction=ours.PIECE_FRACTION, rows=rows)
    lines = ["# Epochs in pieces against whole epochs (notebooks 12 and 14)", "",
             machine_line(start, end), "",
             f"Seconds per epoch (median over {a.repeats} repeats of the median over epochs "
             f"2..{a.epochs}), 20news-words, {a.threads} threads: whole (one kernel call), "
             f"in pieces sized for notebook 14's tuning budget and for its cap at that K "
             f"(1/64 of it, at least {ours.MIN_PIECE_SECONDS} s).", "",
             "| K | method | threads used | whole (s) | tuning pieces (s) | ratio | calls | "
             "timed pieces (s) | ratio | calls | diverged |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['K']:,} | {r['method']} | {r['threads']} | {r['whole_s']:.4f} | "
                     f"{r['tuning_s']:.4f} | {r['tuning_ratio']:.3f} | {r['tuning_calls']} | "
                     f"{r['timed_s']:.4f} | {r['timed_ratio']:.3f} | {r['timed_calls']} | "
                     f"{'yes' if r['diverged'] else 'no'} |")
    for mode in ("tuning", "timed"):
        worst = max(rows, key=lambda r: r[f"{mode}_ratio"])
        lines.append(f"\nLargest cost in {mode} pieces: {worst['method']} at K = "
                     f"{worst['K']:,}, {worst[f'{mode}_ratio']:.3f}x.")
    lines.append("")
    publish("pieces", res, "\n".join(lines))
    return 0 if all(math.isfinite(r["tuning_ratio"]) and math.isfinite(r["timed_ratio"])
                    for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
