"""The race's methods by family, and the family verdicts of the record's current tables.

A family is a way of computing (or estimating) the softmax gradient, whoever implements
it:

* ``double-sum``: the paper's O(D)-per-step methods on the double-sum formulation
  (vanilla SGD, U-max, Implicit SGD with one datapoint and class per step or minibatched,
  and Raman et al.'s double sum);
* ``full-softmax``: stochastic methods on the exact softmax, O(K D) per step: our
  minibatch softmax SGD, PyTorch's SGD and Adam, scikit-learn's SAGA;
* ``full-batch``: exact full-batch methods: our L-BFGS and scikit-learn's lbfgs;
* ``sampled-softmax``: estimates of the softmax gradient from sampled classes:
  importance sampling, NCE, one-vs-each, PyTorch's sampled softmax.

:func:`first_family` reads notebook 12's ``tables/12-peers.csv`` or notebook 14's
``tables/14-crossover.csv`` as they stand: "within x%" there means within x% of the best
*test* log-loss any method reached on that workload, from one seed (the target is chosen
on test, and one seed cannot separate close calls). The pages say so next to every
verdict rendered from it.
"""
from __future__ import annotations

import math

import pandas as pd

__all__ = ["FAMILIES", "WORKLOAD_NAMES", "workload_label", "family_of", "first_family",
           "family_line", "threads_note", "pair_line"]

#: family -> its methods (the race's method names)
FAMILIES = {
    "double-sum": ("vanilla", "umax", "implicit", "implicit-batch", "implicit-batch-5",
                   "raman"),
    "full-softmax": ("softmax-sgd", "torch-sgd", "torch-adam", "sklearn-saga"),
    "full-batch": ("exact", "sklearn-lbfgs"),
    "sampled-softmax": ("is", "nce", "ove", "torch-sampled"),
}


def family_of(method: str) -> str:
    """The family of ``method`` (:data:`FAMILIES`); ValueError naming the known ones."""
    for fam, ms in FAMILIES.items():
        if method in ms:
            return fam
    raise ValueError(f"method {method!r} belongs to no family of the race; known: "
                     f"{[m for ms in FAMILIES.values() for m in ms]} (add it to "
                     "scalable_softmax.repro.race.families.FAMILIES)")


def _seconds(table: pd.DataFrame, tolerance_pct: str) -> pd.Series:
    col = f"seconds_to_{tolerance_pct}pct"
    if col not in table.columns:
        have = sorted(c[11:-3] for c in table.columns if c.startswith("seconds_to_"))
        raise ValueError(f"the table has no column {col!r}: tolerance_pct must be one "
                         f"of {have}")
    return pd.to_numeric(table[col], errors="coerce")


def first_family(table: pd.DataFrame, workload: str, tolerance_pct: str = "1"):
    """Per workload (the column ``workload``: ``dataset`` or ``K``), each family's
    fastest method to within ``tolerance_pct`` percent of the best test log-loss, the
    first family and the runner-up.

    Returns one row per workload, in the table's order: ``workload``, ``family`` (empty
    when nobody got there), ``method``, ``seconds``, ``runner_up`` (the next family,
    empty if none got there), ``runner_up_method``, ``ratio`` (its seconds over the
    first's; NaN without a runner-up)."""
    s = _seconds(table, tolerance_pct)
    t = table.assign(_s=s, _fam=[family_of(m) for m in table.method])
    rows = []
    for w, g in t.groupby(workload, sort=False):
        best = (g.dropna(subset=["_s"]).sort_values("_s").groupby("_fam", sort=False)
                .head(1).reset_index(drop=True))
        r = {"workload": w, "family": "", "method": "", "seconds": math.nan,
             "runner_up": "", "runner_up_method": "", "ratio": math.nan}
        if len(best):
            r.update(family=best._fam[0], method=best.method[0], seconds=float(best._s[0]))
        if len(best) > 1:
            r.update(runner_up=best._fam[1], runner_up_method=best.method[1],
                     ratio=float(best._s[1] / best._s[0]) if best._s[0] > 0 else math.inf)
        rows.append(r)
    return pd.DataFrame(rows, columns=["workload", "family", "method", "seconds",
                                       "runner_up", "runner_up_method", "ratio"])


def family_line(table: pd.DataFrame, workload: str, tolerance_pct: str = "1",
                names: dict | None = None, only=None, short: bool = False) -> str:
    """:func:`first_family` in words, one clause per workload joined by ``; ``:
    ``Bibtex: full-softmax (softmax-sgd, 0.13 s; next double-sum at 1.37 x)``.
    ``names`` maps a workload to how the page names it (default: as in the table;
    an integer workload, a K, is written ``K = 1,000``). With ``only``, the clause of
    that one workload without its name (LookupError if the table has none); ``short``
    leaves out the method and its seconds: ``full-softmax (next at 1.37 x)``,
    ``full-softmax (alone)``."""
    names = names or {}
    out = []
    first = first_family(table, workload, tolerance_pct)
    if only is not None:
        first = first[first.workload.astype(str) == str(only)]
        if not len(first):
            raise LookupError(f"no workload {only!r} in the race's table")
    for r in first.itertuples():
        w = names.get(r.workload, f"K = {int(r.workload):,}" if workload == "K"
                      else str(r.workload))
        if not r.family:
            out.append("no family" if only is not None else f"{w}: no family")
            continue
        if short:
            clause = (f"{r.family} (next at {r.ratio:.2f} x)" if r.runner_up
                      else f"{r.family} (alone)")
        else:
            nxt = (f"next {r.runner_up} at {r.ratio:.2f} x" if r.runner_up
                   else "no other family got there")
            clause = f"{r.family} ({r.method}, {r.seconds:.2f} s; {nxt})"
        out.append(clause if only is not None else f"{w}: {clause}")
    return "; ".join(out)


def threads_note(table: pd.DataFrame, workload: str) -> str:
    """Which runs did not use 2 threads, from the table's ``threads`` (the threads a run
    was given after the method's own fallback) and ``used_threads`` (whether its CPU
    seconds per training second showed them used), counted over the workloads the
    method ran on: ``umax: 1 thread on 3 of 5; sklearn-saga: about one of 2 on 3 of
    5``; ``every run used its threads`` otherwise."""
    ran = table[~table.status.isin(["memory", "skipped", "error"])]
    th = pd.to_numeric(ran.threads, errors="coerce")
    one, idle, total = {}, {}, {}
    for r, n in zip(ran.itertuples(), th):
        total[r.method] = total.get(r.method, 0) + 1
        if n == 1:
            one[r.method] = one.get(r.method, 0) + 1
        elif str(r.used_threads) == "no":
            idle[r.method] = idle.get(r.method, 0) + 1
    parts = [f"{m}: 1 thread on {c} of {total[m]}" for m, c in one.items()]
    parts += [f"{m}: about one of 2 on {c} of {total[m]}" for m, c in idle.items()]
    return "; ".join(parts) if parts else "every run used its threads"


def pair_line(table: pd.DataFrame, workload: str, ours: str = "softmax-sgd",
              theirs: str = "torch-sgd", tolerance_pct: str = "5",
              names: dict | None = None, only=None) -> str:
    """Two implementations of one family side by side (default: our softmax SGD and
    PyTorch's, both full softmax): seconds to within ``tolerance_pct`` percent per
    workload, ``Bibtex 0.13 s against 0.35 s``, ``not reached`` where one did not.
    With ``only``, that one workload without its name."""
    names = names or {}
    s = _seconds(table, tolerance_pct)
    t = table.assign(_s=s)
    if only is not None:
        t = t[t[workload].astype(str) == str(only)]
        if not len(t):
            raise LookupError(f"no workload {only!r} in the race's table")
    out = []
    for w, g in t.groupby(workload, sort=False):
        def sec(m, g=g):
            v = g.loc[g.method == m, "_s"]
            return "not reached" if not len(v) or pd.isna(v.iloc[0]) else f"{v.iloc[0]:.2f} s"
        name = names.get(w, f"K = {int(w):,}" if workload == "K" else str(w))
        pair = f"{sec(ours)} against {sec(theirs)}"
        out.append(pair if only is not None else f"{name} {pair}")
    return "; ".join(out)


#: how the pages name notebook 12's data sets (notebook 14's workloads are K values)
WORKLOAD_NAMES = {"bibtex": "Bibtex", "delicious": "Delicious",
                  "eurlex-surrogate": "Eurlex surrogate (SYNTHETIC)",
                  "wikismall-surrogate": "Wiki-small surrogate (SYNTHETIC)",
                  "20news-words": "`20news-words`"}


def workload_label(w) -> str:
    """A workload as the pages name it: a data set of notebook 12 by
    :data:`WORKLOAD_NAMES`, a K of notebook 14 as ``K = 1,000``, anything else as is."""
    w = str(w)
    return WORKLOAD_NAMES.get(w) or (f"K = {int(w):,}" if w.isdigit() else w)
