"""scikit-learn in the race: ``LogisticRegression`` (multinomial, no penalty
``C=inf``, no intercept), ``sklearn-lbfgs`` and ``sklearn-saga``. ``fit`` has no
callback, so (as benchopt does for such solvers) the curve is made of separate fits from
scratch with ``max_iter = 1, 2, 4, ...``; a point's seconds are that fit's wall time,
until a fit stops before its ``max_iter`` (sklearn's own ``tol``) or the next one would
exceed the cap. (Named so that it does not shadow ``sklearn``.)
"""
from __future__ import annotations

import time

import numpy as np

__all__ = ["run_sklearn"]


def _sklearn_W(clf, K, D):
    """``K x D`` weights of a fitted LogisticRegression (a class absent from the training
    rows gets a zero row)."""
    coef = np.asarray(clf.coef_, dtype=np.float64)
    classes = np.asarray(clf.classes_, dtype=np.int64)
    if len(classes) == K and np.array_equal(classes, np.arange(K)):
        return np.ascontiguousarray(coef)
    W = np.zeros((K, D))
    if len(classes) == 2 and coef.shape[0] == 1:     # binary: sklearn keeps one row
        W[classes[1]] = coef[0] / 2
        W[classes[0]] = -coef[0] / 2
    else:
        W[classes] = coef
    return W


def run_sklearn(job, X, y, K, rec):
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    solver = job.method.split("-", 1)[1]
    D = X.shape[1]
    rec.record_start(lambda: np.zeros((K, D)), max_iter=0)
    max_iter, last_fit = 1, 0.0
    info = {"fits": 0}
    while True:
        clf = LogisticRegression(C=np.inf, solver=solver, fit_intercept=False,
                                 max_iter=max_iter, random_state=job.seed,
                                 **job.options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            c0, t0 = time.process_time(), time.perf_counter()
            clf.fit(X, y)
            last_fit = time.perf_counter() - t0
            rec.add_busy(last_fit, time.process_time() - c0)
        info["fits"] += 1
        n_iter = int(np.max(clf.n_iter_))
        # the point's seconds are this fit's wall time (from scratch)
        rec.seconds = last_fit
        rec.record(_sklearn_W(clf, K, D), max_iter=max_iter, n_iter=n_iter)
        if n_iter < max_iter:
            return "completed", (f"converged (sklearn tol) after {n_iter} iterations in "
                                 f"{last_fit:.3g} s"), info
        if last_fit >= rec.cap:
            return "time cap", f"the fit with max_iter={max_iter} took {last_fit:.3g} s", info
        if 2 * last_fit > rec.cap:
            return "time cap", (f"the next fit (max_iter={2 * max_iter}) would take about "
                                f"{2 * last_fit:.3g} s > the cap"), info
        max_iter *= 2
