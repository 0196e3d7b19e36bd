"""Where notebook 12's minibatch Implicit SGD loses the race to the best model (issue 33,
item 2): per epoch, its CPU and wall seconds, Newton iterations per step and the exact
test log-loss, for a few configurations of ``implicit-batch`` on the data sets where
a peer was first within 1% of the best test log-loss in the record.

Each configuration runs as notebook 12's ``implicit-batch`` does (``_run_ours`` of
``scalable_softmax.repro.peers``): the training split, the ``paper-text`` protocol's
settings of ``implicit`` (shuffled order, ``u = log K``, the schedule
``lr * 0.9**(epoch - 1)``), ``mu = 0``, the same seeds, at the learning rate that
notebook 12's tuning chose for ``implicit-batch`` (read from ``tables/12-peers.csv``),
and the test log-loss on the same seeded test rows (``eval_rows`` of
``params/12-peers.yaml``'s full profile). Only ``n`` (points per step), ``m`` (sampled
classes per step) and the Newton tolerance ``tol`` vary. The table compares the test
log-loss after each epoch with the data set's best over all methods in the record
(``group_best`` of ``tables/12-peers.csv``) and gives the first epoch within 1% of it
and the seconds (CPU and wall) spent training until then; the record's seconds of the
first method within 1% stand beside them. Note: those are wall seconds of a 2-thread
run on a quieter machine; the CPU seconds here are one thread's.

``--race``: instead, the same-run race of notebook 12's rules: each configuration and
``torch-sgd`` (the peer first within 1% in the record, at its recorded rate and layout,
minibatches of 100) run one after the other, each in its own child process
(``peers.run_isolated``: the notebook's isolation, ``--threads`` threads, the notebook's
time cap and checkpoints), and the training seconds of each to within 1% of the
record's best. Ours run with ``implicit-batch``'s recorded rate (not re-tuned for the
variants). Writes ``peers_configs-race-<threads>t.{json,md}``.

Writes ``benchmarks/results/peers_configs.{json,md}`` (rewritten after each data set).
Usage: ``python benchmarks/bench_peers_configs.py [--data bibtex,...] [--epochs E]
[--race --threads T]``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from _common import RESULTS, machine_info, write_atomic
from scalable_softmax.data import load_dataset
from scalable_softmax.evaluate import evaluate
from scalable_softmax.fit import make_order
from scalable_softmax.methods import get_trainer_class
from scalable_softmax.protocols import fit_kwargs

ROOT = Path(__file__).resolve().parents[1]
#: (n, m, tol): the record's configuration first, then the variants
CONFIGS = [(10, 10, 1e-10), (10, 10, 1e-4), (5, 20, 1e-10), (10, 50, 1e-10)]
EPOCHS = {"bibtex": 25, "eurlex-surrogate": 15, "20news-words": 10}


def _test_rows(Xt, yt, rows, seed):
    """Notebook 12's seeded test rows (the same rule as its problem set-up)."""
    if rows is None or rows >= Xt.shape[0]:
        return Xt, yt
    sel = np.sort(np.random.default_rng([seed, 34]).choice(Xt.shape[0], rows, replace=False))
    return Xt[sel], yt[sel]


def run(data, epochs, params, record):
    rec = record[(record.dataset == data) & (record.method == "implicit-batch")].iloc[0]
    best = float(rec.group_best)
    first = record[record.dataset == data].dropna(subset=["seconds_to_1pct"])
    first = first.sort_values("seconds_to_1pct").iloc[0] if len(first) else None
    tr_set, te_set = load_dataset(data, "train"), load_dataset(data, "test")
    X, y, K = tr_set.X, np.asarray(tr_set.y, dtype=np.int64), int(tr_set.K)
    Xt, yt = _test_rows(te_set.X, np.asarray(te_set.y, dtype=np.int64),
                        params["eval_rows"].get(data), params.get("seed", 0))
    rows = []
    for n, m, tol in CONFIGS:
        kw = fit_kwargs("paper-text", "implicit")
        order, u_init, decay = kw.pop("order"), kw.pop("u_init"), kw.pop("lr_decay")
        kw.pop("batch_size", None)
        kw.pop("n_sampled", None)
        tr = get_trainer_class("implicit-batch")(X, y, K, mu=0.0, batch_size=n,
                                                 n_sampled=m, tol=tol, **kw)
        tr.init_params(u_init)
        tr.warmup()
        rng = np.random.default_rng(params.get("seed", 0))
        cpu = wall = 0.0
        for e in range(1, epochs + 1):
            idx = make_order(rng, X.shape[0], order)
            c, t = time.process_time(), time.perf_counter()
            rep = tr.run_epoch(idx, float(rec.lr) * decay ** (e - 1),
                               int(rng.integers(0, 2 ** 63 - 1)))
            wall += time.perf_counter() - t
            cpu += time.process_time() - c
            ll = float(evaluate(Xt, yt, tr.weights()).log_loss)
            rows.append(dict(data=data, n=n, m=m, tol=tol, lr=float(rec.lr), epoch=e,
                             cpu_seconds=cpu, wall_seconds=wall, test_log_loss=ll,
                             ratio_to_best=ll / best,
                             newton_iterations_mean=rep.extra["newton_iterations_mean"],
                             chord_iterations_mean=rep.extra["chord_iterations_mean"]))
        print(data, n, m, tol, f"cpu {cpu:.2f} s", f"last {ll:.4f}", flush=True)
    return rows, dict(data=data, group_best=best, lr=float(rec.lr),
                      record_first_method=None if first is None else first.method,
                      record_first_seconds=None if first is None else
                      float(first.seconds_to_1pct),
                      record_ours_seconds=None if not math.isfinite(rec.seconds_to_1pct)
                      else float(rec.seconds_to_1pct))


def summary(rows, info):
    df = pd.DataFrame(rows)
    out = []
    for (d, n, m, tol), g in df.groupby(["data", "n", "m", "tol"], sort=False):
        hit = g[g.ratio_to_best <= 1.01]
        h = hit.iloc[0] if len(hit) else None
        i = info[d]
        out.append(dict(
            data=d, n=n, m=m, tol=tol, lr=g.lr.iloc[0],
            cpu_per_epoch=g.cpu_seconds.iloc[-1] / len(g),
            newton_mean=g.newton_iterations_mean.mean(),
            chord_mean=g.chord_iterations_mean.mean(),
            best_ratio=g.ratio_to_best.min(), best_epoch=int(g.loc[g.ratio_to_best.idxmin(), "epoch"]),
            epoch_1pct=None if h is None else int(h.epoch),
            cpu_to_1pct=None if h is None else h.cpu_seconds,
            wall_to_1pct=None if h is None else h.wall_seconds,
            record_first=f"{i['record_first_method']} {i['record_first_seconds']:.3g} s"
            if i["record_first_method"] else "none"))
    return pd.DataFrame(out)


#: per data set, the configurations (n, m) raced against torch-sgd (--race)
RACE = {"bibtex": [(10, 10), (5, 20)], "eurlex-surrogate": [(10, 10), (10, 50)],
        "20news-words": [(10, 10), (10, 50)]}


def race(data, params, record, threads):
    from scalable_softmax.repro import peers

    cap = float(params["caps"][data])
    part = record[record.dataset == data]
    best = float(part.group_best.iloc[0])
    ours = part[part.method == "implicit-batch"].iloc[0]
    torch = part[part.method == "torch-sgd"].iloc[0]
    common = dict(split="final", max_epochs=params["max_epochs"],
                  eval_rows=params["eval_rows"].get(data), seed=params.get("seed", 0),
                  threads=threads, checkpoints=peers.checkpoint_times(cap, 2, cap / 256))
    jobs = [("torch-sgd", peers.Job(data, "torch-sgd", float(torch.lr), cap, options=dict(
        params["torch_options"]["torch-sgd"], layout=torch.layout), **common))]
    for n, m in RACE[data]:
        jobs.append((f"implicit-batch n={n} m={m}", peers.Job(
            data, "implicit-batch", float(ours.lr), cap,
            options=dict(batch_size=n, n_sampled=m), **common)))
    rows = []
    for name, job in jobs:
        load = [round(v, 2) for v in os.getloadavg()]
        out = peers.run_isolated([job], memory_cap_gb=params["memory_cap_gb"],
                                 threads=threads, wall_seconds=90 + 3 * cap)
        r = out["results"][0]
        pts = r.get("points", [])
        hit = next((p for p in pts if p["test_log_loss"] <= 1.01 * best), None)
        rows.append(dict(data=data, method=name, lr=job.lr, threads=threads, cap=cap,
                         status=r.get("status"), reason=r.get("reason"),
                         seconds_to_1pct=None if hit is None else hit["seconds"],
                         best_ratio=min((p["test_log_loss"] for p in pts), default=math.inf)
                         / best, load_before=load,
                         record_seconds_to_1pct=None if not math.isfinite(
                             part[part.method == job.method].seconds_to_1pct.iloc[0]) else
                         float(part[part.method == job.method].seconds_to_1pct.iloc[0])))
        print(rows[-1], flush=True)
    t = rows[0]["seconds_to_1pct"]
    for r in rows:
        r["ratio_to_torch"] = (r["seconds_to_1pct"] / t if t and r["seconds_to_1pct"]
                               else None)
    return rows


def main_race(a, params, record):
    rows, m0 = [], machine_info()
    name = f"{a.out}-race-{a.threads}t"
    for d in a.data.split(","):
        rows += race(d, params, record, a.threads)
        m1 = machine_info()
        df = pd.DataFrame(rows).drop(columns=["reason"])
        write_atomic(RESULTS / f"{name}.json", json.dumps(
            dict(machine_start=m0, machine_end=m1, rows=rows), indent=1))
        write_atomic(RESULTS / f"{name}.md", "\n".join([
            "# Notebook 12's rules, one run: ours against torch SGD (full softmax)", "",
            f"Written by `benchmarks/bench_peers_configs.py --race --threads {a.threads}`. "
            f"{m0['cpu_model']}, load average {m0['load_average']} at the start, "
            f"{m1['load_average']} at the end (`load_before`: before each run). Each run "
            "in its own child process with the notebook's cap, checkpoints and "
            f"{a.threads} thread(s); `seconds_to_1pct`: training seconds to the first "
            "checkpoint within 1% of the data set's best test log-loss in the record "
            "(tables/12-peers.csv); `record_seconds_to_1pct`: the record's own (its "
            "implicit-batch is n = m = 10); `ratio_to_torch`: this run's seconds over "
            "torch SGD's in this run.", "",
            df.to_markdown(index=False, floatfmt=".4g"), ""]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=",".join(EPOCHS))
    ap.add_argument("--epochs", type=int, default=None, help="epochs (default: per data set)")
    ap.add_argument("--out", default="peers_configs")
    ap.add_argument("--race", action="store_true", help="the same-run race (see above)")
    ap.add_argument("--threads", type=int, default=2, help="threads of each run (--race)")
    a = ap.parse_args()
    params = yaml.safe_load((ROOT / "params" / "12-peers.yaml").read_text())["full"]
    record = pd.read_csv(ROOT / "tables" / "12-peers.csv")
    if a.race:
        return main_race(a, params, record)
    rows, info = [], {}
    m0 = machine_info()
    for d in a.data.split(","):
        r, i = run(d, a.epochs or EPOCHS[d], params, record)
        rows += r
        info[d] = i
        s = summary(rows, info)
        m1 = machine_info()
        write_atomic(RESULTS / f"{a.out}.json", json.dumps(
            dict(machine_start=m0, machine_end=m1, record=info, rows=rows), indent=1))
        write_atomic(RESULTS / f"{a.out}.md", "\n".join([
            "# Notebook 12's minibatch Implicit SGD: configurations per epoch",
            "",
            f"Written by `benchmarks/bench_peers_configs.py`. {m0['cpu_model']}, "
            f"load average {m0['load_average']} at the start, {m1['load_average']} at "
            "the end (a shared machine: wall seconds are inflated, CPU seconds less so). "
            "`epoch_1pct`: first epoch within 1% of the data set's best test log-loss "
            "in the record (tables/12-peers.csv); `cpu_to_1pct`/`wall_to_1pct`: training "
            "seconds until then (one thread); `record_first`: the record's first method "
            "within 1% and its wall seconds (2 threads, quieter machine).",
            "",
            s.to_markdown(index=False, floatfmt=".4g"), ""]))
    print(summary(rows, info).to_string())


if __name__ == "__main__":
    main()
