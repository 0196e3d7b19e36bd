"""The paper's main study as one function: every method on every data set at the tuned
rates, several seeds, with the step-down rule for diverging runs.

Notebook 02 runs it and draws the learning curves; notebook 06 calls it with the same
settings and gets every run back from the run cache (:mod:`scalable_softmax.repro.runs`)
to assemble Table 3.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from scalable_softmax.repro import runs as ex
from scalable_softmax.repro import reporting as rp

__all__ = ["resolve_datasets", "run_paper_methods", "choose_used", "SAMPLED_METHODS"]

#: the biased baselines (minibatch n = 100, m = 5 sampled classes)
SAMPLED_METHODS = ("ove", "nce", "is")


def resolve_datasets(datasets) -> pd.DataFrame:
    """One row per paper data set: the loader name used (real, or SYNTHETIC surrogate),
    ``synthetic``, ``N``, ``N_test``, ``D``, ``K``; indexed by the paper name."""
    unknown = sorted(set(datasets) - set(ex.PAPER_DATASETS))
    if unknown:
        raise ValueError(f"unknown data set(s) {unknown}; choose from "
                         f"{', '.join(ex.PAPER_DATASETS)}")
    rows = []
    for d in datasets:
        name = ex.dataset_for(d)
        X, y, K, synthetic = ex.load_split(name, "train")
        Xt, _, _, _ = ex.load_split(name, "test")
        rows.append(dict(dataset=d, loaded=name, synthetic=synthetic, N=X.shape[0],
                         N_test=Xt.shape[0], D=X.shape[1], K=K))
    return pd.DataFrame(rows).set_index("dataset", drop=False)


def _rate(d, m, overrides):
    return float((overrides or {}).get(d, {}).get(m, ex.PAPER_TABLE2[d][m]))


def run_paper_methods(datasets, methods=ex.PAPER_METHODS, seeds=(0, 1, 2), epochs=50,
                      lr_decay=0.9, u_init="logK", monitor_rows=1000, final_rows=20000,
                      step_down=3,
                      workers=2, rate_overrides=None, rate_label="paper", progress=True,
                      protocol=None, eval_epochs=None):
    """Run ``methods x datasets x seeds`` under ``protocol`` (a name of
    :data:`scalable_softmax.protocols.PROTOCOLS`, which then sets ``lr_decay``,
    ``u_init``, the data order and the sampling; None: the library defaults with the
    given ``lr_decay`` and ``u_init``) at the paper's Table 2 rates (or
    ``rate_overrides[dataset][method]``); where a ``(dataset, method)`` diverges in some
    seed, run all seeds again at 10x smaller rates, one step at a time, until every
    seed is finite (at most ``step_down`` steps). The final exact evaluation uses at most
    ``final_rows`` rows of each set (a seeded subsample, the same rows for every method
    of a seed, so the ratios of Table 3 are paired; all rows of the smaller sets).

    Returns
    -------
    runs : DataFrame, :func:`experiments.results_frame` with the paper's data-set name
        in ``dataset``, ``loaded`` (the loader name), ``paper_lr`` (the starting rate:
        Table 2's, or the override) and ``rate`` (``rate_label`` at the starting rate,
        ``"stepped down"`` below it; ``rate_label`` also names the progress bar).
    results : list of :class:`experiments.RunResult` (same order).
    shapes : DataFrame of :func:`resolve_datasets`.
    seconds : wall time of the runs (mostly 0 when read from the cache).

    ``monitor_rows`` may be a dict ``{paper data set: rows or None}`` (None: all rows);
    ``eval_epochs`` the monitored epochs (None: epoch 0 and 10 evenly spaced).
    """
    unknown = sorted(set(methods) - set(ex.PAPER_METHODS))
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; the paper's are "
                         f"{', '.join(ex.PAPER_METHODS)}")
    if not (isinstance(step_down, int) and step_down >= 0):
        raise ValueError(f"step_down must be an integer >= 0; got {step_down!r}")
    shapes = resolve_datasets(datasets)
    loader = dict(zip(shapes.dataset, shapes.loaded))
    name_of = {v: k for k, v in loader.items()}

    def cost(d, m):
        s = shapes.loc[d]
        return s.N * s.K ** 0.3 * (5 if m in SAMPLED_METHODS else 1)

    def mrows(d):
        return monitor_rows.get(d) if isinstance(monitor_rows, dict) else monitor_rows

    common = dict(epochs=epochs, final_rows=final_rows,
                  eval_epochs=tuple(eval_epochs) if eval_epochs is not None else None)
    if protocol is None:
        common.update(lr_decay=lr_decay, u_init=u_init)
    else:
        common.update(protocol=protocol)

    def specs_for(triples):
        out = [ex.RunSpec.make(loader[d], m, lr, seed=int(s), monitor_rows=mrows(d),
                               **common)
               for d, m, lr in triples for s in seeds]
        return sorted(out, key=lambda sp: -cost(name_of[sp.dataset], sp.method))

    t0 = time.perf_counter()
    results = ex.run_all(specs_for([(d, m, _rate(d, m, rate_overrides))
                                    for d in datasets for m in methods]),
                         workers=workers, desc=f"{rate_label} rates", progress=progress)
    pending = {(name_of[r.spec.dataset], r.spec.method, r.spec.lr)
               for r in results if r.final["diverged"]}
    for step in range(step_down):
        if not pending:
            break
        lower = sorted({(d, m, lr / 10) for d, m, lr in pending})
        new = ex.run_all(specs_for(lower), workers=workers, desc=f"step-down {step + 1}",
                         progress=progress)
        results += new
        pending = {(name_of[r.spec.dataset], r.spec.method, r.spec.lr)
                   for r in new if r.final["diverged"]}
    seconds = time.perf_counter() - t0
    runs = ex.results_frame(results)
    runs["loaded"] = runs.dataset
    runs["dataset"] = runs.dataset.map(name_of)
    runs["paper_lr"] = [_rate(d, m, rate_overrides) for d, m in zip(runs.dataset, runs.method)]
    runs["rate"] = np.where(np.isclose(runs.lr, runs.paper_lr), rate_label, "stepped down")
    return runs, results, shapes, seconds


def choose_used(runs: pd.DataFrame, datasets, methods, rate_label="paper") -> pd.DataFrame:
    """Per ``(dataset, method, lr)`` summary over seeds (:func:`reporting.summarise_runs`)
    with ``rate`` (``rate_label`` at the starting rate ``paper_lr``, else ``"stepped
    down"``), ``paper_lr`` and ``used``: the largest rate at which every seed is finite
    (the starting rate when it is stable; vanilla SGD's "largest stable rate"), sorted in
    the paper's order."""
    summary = rp.summarise_runs(runs, keys=("dataset", "method", "lr"))
    first = runs.drop_duplicates(["dataset", "method"]).set_index(["dataset", "method"])
    summary["paper_lr"] = [first.paper_lr[(d, m)] for d, m in
                           zip(summary.dataset, summary.method)]
    summary["rate"] = np.where(np.isclose(summary.lr, summary.paper_lr), rate_label,
                               "stepped down")
    summary["used"] = False
    for _, g in summary.groupby(["dataset", "method"], sort=False):
        stable = g[g.diverged_seeds == 0]
        if len(stable):
            summary.loc[stable.lr.idxmax(), "used"] = True
    dorder = {d: i for i, d in enumerate(datasets)}
    morder = {m: i for i, m in enumerate(methods)}
    summary = summary.assign(_d=summary.dataset.map(dorder), _m=summary.method.map(morder),
                             _l=-summary.lr)
    return summary.sort_values(["_d", "_m", "_l"]).drop(columns=["_d", "_m", "_l"]) \
        .reset_index(drop=True)
