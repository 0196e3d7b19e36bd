"""Notebook 14-crossover's workloads: the same real task, ``20news-words`` (next-word
prediction on the 20 Newsgroups bodies, :mod:`scalable_softmax.data.words`), posed with
``K`` = the ``K`` most frequent training words as classes (the loader's ``classes``
option; its default, 10,000, is notebook 12's data set), written once per ``K`` for the
race's child processes (:func:`build_problems`). The race itself is
:mod:`scalable_softmax.repro.race`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from scalable_softmax.repro import peers

__all__ = ["DATASET", "build_problems"]

#: the data set raced at every K (its ``classes`` option is K)
DATASET = "20news-words"
def _check_ks(Ks, caps, max_points):
    if not Ks or any(not isinstance(k, (int, np.integer)) or k < 2 for k in Ks):
        raise ValueError(f"Ks must be a non-empty list of integers >= 2; got {Ks!r}")
    if list(Ks) != sorted(set(Ks)):
        raise ValueError(f"Ks must be increasing and distinct; got {Ks!r}")
    for what, d in (("caps", caps), ("max_points", max_points)):
        missing = [k for k in Ks if k not in d]
        if missing:
            raise ValueError(f"{what} has no entry for K = {missing}: give every K one")


def build_problems(Ks, max_points, workdir, *, seed=0, dataset=DATASET, **load_options):
    """Build ``dataset`` at every ``K`` of ``Ks`` (``load_dataset(dataset, split,
    classes=K, max_points=max_points[K], seed=seed, **load_options)``) and write each as
    an ``.npz`` (:func:`scalable_softmax.repro.peers.save_problem`) under ``workdir``,
    for the race's child processes. With ``K = 10,000``, ``max_points = 100,000`` and
    ``seed = 0`` the problem is the loader's default ``20news-words``, notebook 12's.

    Returns ``(paths, shapes)``: ``{K: path}`` and one row per ``K`` (``K``, ``N``,
    ``N_test``, ``D``, ``nnz_per_row``, ``classes_in_train``, ``classes_in_test``: the
    classes drawn at least once, ``eligible_points``: the training positions
    ``max_points`` were drawn from).
    """
    from scalable_softmax._atomic import atomic_open
    from scalable_softmax.data import load_dataset

    _check_ks(list(Ks), dict.fromkeys(Ks, 1), max_points)
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    paths, rows = {}, []
    for K in Ks:
        tr = load_dataset(dataset, "train", classes=int(K), max_points=max_points[K],
                          seed=seed, **load_options)
        te = load_dataset(dataset, "test", classes=int(K), max_points=max_points[K],
                          seed=seed, **load_options)
        path = workdir / f"{dataset}-K{K}.npz"
        with atomic_open(path, "wb") as fh:
            peers.save_problem(fh, tr.X, tr.y, te.X, te.y, tr.K)
        paths[K] = str(path)
        rows.append({"K": int(K), "N": int(tr.N), "N_test": int(te.N),
                     "D": int(tr.X.shape[1]), "nnz_per_row": round(tr.X.nnz / tr.N, 2),
                     "classes_in_train": int(np.unique(tr.y).size),
                     "classes_in_test": int(np.unique(te.y).size),
                     "eligible_points": int(tr.original["N"])})
    return paths, pd.DataFrame(rows)


