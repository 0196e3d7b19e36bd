"""What the CSR gate in front of the kernels costs (issue 38, item 1): the O(nnz)
structure check of ``validation.as_csr`` (``indptr`` consistent, every index in
``[0, D)``, canonical order computed from the indices) and of a trainer built directly
(``validation.check_trainer_data``), against one U-max epoch (m = 1) on the many-class
shape of ``bench_many_classes_fit.py`` (N 20,000, D 10,000, K 18,000, 50 non-zeros per
row, same generator and seed).

Each check is timed ``--repeats`` times and its median taken; the epoch is timed
``--epochs`` times after a warm-up epoch (median). ``fit`` runs ``as_csr`` once per call
and the trainer's check once more, so the cost of one ``fit`` call is their sum; the
target is under 2% of one epoch.

Usage: ``python benchmarks/bench_csr_check.py [--quick] [--epochs E] [--repeats R]``;
writes ``benchmarks/results/csr_check[-quick].{json,md}``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from _common import machine_info, machine_line, publish


def _shape(quick):
    return (5_000, 10_000, 50, 18_000) if quick else (20_000, 10_000, 50, 18_000)


def _median_seconds(call, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), times


def run(quick=False, epochs=3, repeats=20):
    from bench_sgd import sparse_data
    from scalable_softmax import validation
    from scalable_softmax.methods import sgd

    start = machine_info()
    N, D, nnz, K = _shape(quick)
    X, y = sparse_data(N, D, nnz, K)
    y = np.asarray(y, dtype=np.int64)
    assert validation.as_csr(X) is X            # the no-copy path is what is timed
    as_csr_s, as_csr_all = _median_seconds(lambda: validation.as_csr(X), repeats)
    trainer_s, trainer_all = _median_seconds(
        lambda: validation.check_trainer_data(X, y, K), repeats)
    t = sgd.UmaxTrainer(X, y, K, n_sampled=1)
    t.init_params("zero")
    t.warmup()
    rng = np.random.default_rng(0)
    t.run_epoch(rng.permutation(N), 0.01, 1000)  # warm-up epoch (page faults)
    epoch_all = []
    for e in range(epochs):
        order = rng.permutation(N)
        t0 = time.perf_counter()
        t.run_epoch(order, 0.01, 1001 + e)
        epoch_all.append(time.perf_counter() - t0)
    epoch_s = float(np.median(epoch_all))
    return {"machine": start, "machine_end": machine_info(), "quick": quick,
            "shape": {"N": N, "D": D, "nnz_per_row": nnz, "K": K, "nnz": int(X.nnz)},
            "repeats": repeats, "epochs": epochs,
            "as_csr_s": as_csr_s, "as_csr_all_s": as_csr_all,
            "trainer_check_s": trainer_s, "trainer_check_all_s": trainer_all,
            "umax_epoch_s": epoch_s, "umax_epoch_all_s": epoch_all,
            "ratio": (as_csr_s + trainer_s) / epoch_s}


def markdown(res):
    s = res["shape"]
    return "\n".join([
        "# The CSR gate against one U-max epoch", "",
        "Written by `benchmarks/bench_csr_check.py`. "
        + machine_line(res["machine"], res["machine_end"]) + " "
        f"N = {s['N']:,}, D = {s['D']:,}, K = {s['K']:,}, {s['nnz_per_row']} non-zeros "
        f"per row ({s['nnz']:,} in all); medians of {res['repeats']} checks and "
        f"{res['epochs']} epochs (after a warm-up epoch).", "",
        "| what | seconds (median) |", "|---|---|",
        f"| `as_csr` (structure and canonical order, no copy) | {res['as_csr_s']:.5f} |",
        f"| `check_trainer_data` (a trainer's gate) | {res['trainer_check_s']:.5f} |",
        f"| one U-max epoch, m = 1 | {res['umax_epoch_s']:.3f} |", "",
        (f"Both checks together cost **{100 * res['ratio']:.3f}%** of one epoch "
         "(target: under 2%)."), ""])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 5,000, a smoke run")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    res = run(args.quick, args.epochs, args.repeats)
    publish("csr_check-quick" if args.quick else "csr_check", res, markdown(res))


if __name__ == "__main__":
    main()
