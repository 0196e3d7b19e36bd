"""The race's problems: a data set as the race's child processes read it (a loader
name, or an ``.npz`` of :func:`save_problem`), a job's training rows and evaluation sets
(:func:`job_problem`), the sealed test rows of a race job (:func:`sealed_test`), and
notebook 14's workloads (:func:`build_problems`: ``20news-words`` with the ``K`` most
frequent training words as classes, written once per ``K``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

__all__ = ["save_problem", "load_problem", "job_problem", "sealed_test", "DATASET",
           "build_problems"]


def save_problem(path, X, y, Xt, yt, K):
    """Write a problem (training and test split) as an ``.npz`` a :class:`.jobs.Job` can name."""
    import scipy.sparse as sp

    X, Xt = sp.csr_matrix(X), sp.csr_matrix(Xt)
    np.savez(path, indptr=X.indptr, indices=X.indices, data=X.data, shape=X.shape,
             y=np.asarray(y), t_indptr=Xt.indptr, t_indices=Xt.indices, t_data=Xt.data,
             t_shape=Xt.shape, t_y=np.asarray(yt), K=int(K))


def load_problem(data):
    """``(X, y, Xt, yt, K)`` of a loader name or an ``.npz`` of :func:`save_problem`."""
    import scipy.sparse as sp

    if str(data).endswith(".npz"):
        z = np.load(data)
        X = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        Xt = sp.csr_matrix((z["t_data"], z["t_indices"], z["t_indptr"]),
                           shape=tuple(z["t_shape"]))
        return X, z["y"].astype(np.int64), Xt, z["t_y"].astype(np.int64), int(z["K"])
    from scalable_softmax.data import load_dataset

    tr, te = load_dataset(data, "train"), load_dataset(data, "test")
    return tr.X, tr.y, te.X, te.y, int(tr.K)


def _subsample(X, y, rows, seed):
    if rows is None or rows >= X.shape[0]:
        return X, y
    sel = np.sort(np.random.default_rng([seed, 34]).choice(X.shape[0], rows, replace=False))
    return X[sel], y[sel]


def job_problem(job):
    """Training data and evaluation sets of a job (kept for the next job of the same
    child process that needs the same ones)."""
    key = (job.data, job.split, job.holdout, job.seed, job.eval_rows, job.split_seed)
    if _PROBLEM_CACHE.get("key") != key:
        _PROBLEM_CACHE.clear()                # one problem at a time: bounded memory
        _PROBLEM_CACHE.update(key=key, value=_make_problem(job))
    return _PROBLEM_CACHE["value"]


_PROBLEM_CACHE: dict = {}


def _make_problem(job):
    from scalable_softmax.fit import as_csr

    X, y, Xt, yt, K = load_problem(job.data)
    X = as_csr(X, "X")
    if job.split == "race":
        from scalable_softmax.repro.race.split import validation_split

        fit_rows, val_rows = validation_split(X.shape[0], job.holdout, job.split_seed)
        # the validation subsample is the same for every seed of the race
        sets = {"val": _subsample(X[val_rows], y[val_rows], job.eval_rows, job.split_seed)}
        X, y = X[fit_rows], y[fit_rows]
    else:
        sets = {"train": _subsample(X, y, job.eval_rows, job.seed),
                "test": _subsample(as_csr(Xt, "Xt"), yt, job.eval_rows, job.seed)}
    return X, np.asarray(y, dtype=np.int64), K, sets


def sealed_test(job):
    """The test rows of a race job (``eval_rows`` of them, the same subsample for every
    seed), sealed (:class:`~scalable_softmax.repro.race.scoring.SealedTest`)."""
    from scalable_softmax.evaluate import evaluate
    from scalable_softmax.fit import as_csr
    from scalable_softmax.repro.race.scoring import SealedTest

    key = (job.data, job.eval_rows, job.split_seed)
    if _TEST_CACHE.get("key") != key:
        _TEST_CACHE.clear()
        _, _, Xt, yt, _ = load_problem(job.data)
        _TEST_CACHE.update(key=key, value=_subsample(as_csr(Xt, "Xt"), np.asarray(yt),
                                                     job.eval_rows, job.split_seed))
    Xt, yt = _TEST_CACHE["value"]

    def log_loss(X, y, model):
        W, layout = model
        return evaluate(X, y, W() if callable(W) else W, layout=layout).log_loss
    return SealedTest(Xt, yt, log_loss)


_TEST_CACHE: dict = {}


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
    an ``.npz`` (:func:`save_problem`) under ``workdir``,
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
            save_problem(fh, tr.X, tr.y, te.X, te.y, tr.K)
        paths[K] = str(path)
        rows.append({"K": int(K), "N": int(tr.N), "N_test": int(te.N),
                     "D": int(tr.X.shape[1]), "nnz_per_row": round(tr.X.nnz / tr.N, 2),
                     "classes_in_train": int(np.unique(tr.y).size),
                     "classes_in_test": int(np.unique(te.y).size),
                     "eligible_points": int(tr.original["N"])})
    return paths, pd.DataFrame(rows)
