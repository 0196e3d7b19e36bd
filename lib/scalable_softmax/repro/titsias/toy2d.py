"""The 5-class 2-D toy problem of One-vs-Each Figure 1(b, c) (notebook 09-ove-toy-2d).

Seeded Gaussian blobs with a bias feature, and three full-batch L-BFGS fits on a mean
objective plus the same ridge ``(lam / 2N) ||W||_F^2``: the exact softmax NLL, the OVE
bound and Bouchard's bound (``W`` and the per-point ``alpha`` jointly). A callback
records, at every iterate, the method's own bound (without ridge) and the exact NLL.

Iteration counts are reported, not used as findings: how many L-BFGS steps a fit takes
moves with the BLAS kernel's rounding, while the optimum it reaches does not.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from scalable_softmax.objectives import (
    bouchard_bound,
    bouchard_grad,
    error_rate,
    log_loss,
    ove_objective,
    ove_objective_grad,
    ridge_log_likelihood_grad,
)

METHODS = ("softmax", "OVE", "Bouchard")


def make_blobs(K: int, n_per_class: int, radius: float, spread: float, seed: int):
    """Class ``k``'s mean is ``radius (cos 2pi k/K, sin 2pi k/K)`` plus a N(0, 0.3) offset;
    points add isotropic noise of standard deviation ``spread``.

    Returns ``(X, y, Z)``: ``Z`` the 2-D points, ``X = (Z, 1)`` with the bias column.
    """
    if K < 2 or n_per_class < 1:
        raise ValueError(f"make_blobs: need K >= 2 and n_per_class >= 1, got K={K}, "
                         f"n_per_class={n_per_class}")
    rng = np.random.default_rng(seed)
    angles = 2 * np.pi * np.arange(K) / K
    means = radius * np.column_stack([np.cos(angles), np.sin(angles)]) + rng.normal(0, 0.3, (K, 2))
    y = np.repeat(np.arange(K), n_per_class)
    Z = means[y] + spread * rng.standard_normal((len(y), 2))
    X = np.column_stack([Z, np.ones(len(y))])
    return X, y, Z


@dataclass
class Toy2D:
    """The three objectives on data ``(X, y)`` with ``K`` classes and ridge ``lam``."""

    X: np.ndarray
    y: np.ndarray
    K: int
    lam: float
    N: int = field(init=False)
    D: int = field(init=False)

    def __post_init__(self):
        self.N, self.D = self.X.shape

    def ridge(self, W):
        """``(lam / 2N) ||W||^2`` and its gradient."""
        return 0.5 * self.lam / self.N * float(np.sum(W * W)), self.lam / self.N * W

    def weights(self, theta):
        """The ``K x D`` weights inside a parameter vector (Bouchard's ``alpha`` follow)."""
        return theta[:self.K * self.D].reshape(self.K, self.D)

    def objective(self, name: str):
        """``(value, gradient)`` of bound + ridge over the flattened parameters, for ``name``."""
        X, y, K, D = self.X, self.y, self.K, self.D

        def f_softmax(theta):
            W = theta.reshape(K, D)
            r, dr = self.ridge(W)
            grad = (-1.0 / self.N) * ridge_log_likelihood_grad(X, y, W, 0.0) + dr
            return log_loss(X, y, W) + r, grad.ravel()

        def f_ove(theta):
            W = theta.reshape(K, D)
            r, dr = self.ridge(W)
            return ove_objective(X, y, W) + r, (ove_objective_grad(X, y, W) + dr).ravel()

        def f_bouchard(theta):
            W, alpha = theta[:K * D].reshape(K, D), theta[K * D:]
            r, dr = self.ridge(W)
            dW, da = bouchard_grad(X, y, W, alpha)
            return bouchard_bound(X, y, W, alpha) + r, np.concatenate([(dW + dr).ravel(), da])

        table = {"softmax": f_softmax, "OVE": f_ove, "Bouchard": f_bouchard}
        if name not in table:
            raise ValueError(f"objective: unknown method {name!r}; choose one of {METHODS}")
        return table[name]

    def start(self, name: str):
        """The starting point: ``W = 0`` (and ``alpha = 0`` for Bouchard)."""
        return np.zeros(self.K * self.D + (self.N if name == "Bouchard" else 0))

    def bound(self, name: str, theta) -> float:
        """The method's own objective without ridge (for softmax the exact mean NLL)."""
        W = self.weights(theta)
        if name == "softmax":
            return log_loss(self.X, self.y, W)
        if name == "OVE":
            return ove_objective(self.X, self.y, W)
        return bouchard_bound(self.X, self.y, W, theta[self.K * self.D:])

    def fit(self, name: str, maxiter: int, gtol: float):
        """L-BFGS-B on ``name``'s objective; returns ``(result, trace rows)``."""
        trace = []

        def record(theta):
            trace.append(dict(method=name, iteration=len(trace), bound=self.bound(name, theta),
                              exact_nll=log_loss(self.X, self.y, self.weights(theta))))

        theta0 = self.start(name)
        record(theta0)
        res = minimize(self.objective(name), theta0, jac=True, method="L-BFGS-B",
                       callback=record,
                       options=dict(maxiter=maxiter, gtol=gtol, ftol=1e-15, maxcor=20))
        if len(trace) < 2 or not np.isfinite(res.fun):
            scale = float(np.abs(self.X).max())
            raise ValueError(
                f"L-BFGS on the {name} objective made no step from W = 0 ({res.message}; "
                f"objective {res.fun!r}): the points reach |x| = {scale:.3g}, and the "
                "scores of any step from there overflow float64; choose a radius and a "
                "spread that keep the points within a few thousand units (the "
                "notebook's are 2 and 1)")
        return res, trace


def summary_table(problem: Toy2D, fits: dict, pred: dict, pred_train: dict) -> pd.DataFrame:
    """One row per method: iterations (reported only), convergence, exact NLL and error,
    the bound at the optimum, NLL + ridge, and the distances to softmax's solution.

    ``fits[name]`` holds ``res``, ``W`` and ``theta``; ``pred``/``pred_train`` the predicted
    classes on the plotting grid and on the training points.
    """
    X, y = problem.X, problem.y
    W_soft = fits["softmax"]["W"]
    rows = []
    for name, f in fits.items():
        W = f["W"]
        rows.append(dict(method=name, iterations=int(f["res"].nit),
                         converged=bool(f["res"].success),
                         train_nll=log_loss(X, y, W), train_error=error_rate(X, y, W),
                         bound_at_optimum=problem.bound(name, f["theta"]),
                         penalised_nll=log_loss(X, y, W) + problem.ridge(W)[0],
                         param_distance=float(np.abs(W - W_soft).sum() / np.abs(W_soft).sum()),
                         norm_ratio=float(np.abs(W).sum() / np.abs(W_soft).sum()),
                         region_disagreement=float(np.mean(pred[name] != pred["softmax"])),
                         train_pred_disagreement=float(np.mean(pred_train[name]
                                                               != pred_train["softmax"]))))
    return pd.DataFrame(rows)


def found_lines(table: pd.DataFrame, fits: dict) -> list[str]:
    """The numbers notebook 09's "What we found" rests on, as sentences built from this
    run's ``table`` (:func:`summary_table`) and ``fits`` (per method the optimiser's
    result ``res``): iterations and gradients, the bounds at the optimum against the exact
    NLL, the distance and norm ratio to softmax's weights, and where the predicted classes
    differ from softmax's."""
    t = table.set_index("method")
    lines = ["Iterations: " + ", ".join(
        f"{m} {int(t.iterations[m])} (max |gradient| {np.abs(f['res'].jac).max():.1e})"
        for m, f in fits.items() if m in t.index) + "."]
    gaps = {m: t.bound_at_optimum[m] - t.train_nll[m] for m in t.index if m != "softmax"}
    lines.append("At the optimum: " + "; ".join(
        f"{m} bound {t.bound_at_optimum[m]:.3f} against the exact NLL of its W "
        f"{t.train_nll[m]:.4f} (gap {g:.3f})" for m, g in gaps.items()) + ".")
    if {"OVE", "Bouchard"} <= set(gaps):
        lines.append(f"Bouchard's gap / OVE's: {gaps['Bouchard'] / gaps['OVE']:.1f}.")
    lines.append("||W - W_soft||_1 / ||W_soft||_1: " + ", ".join(
        f"{m} {t.param_distance[m]:.3f}" for m in gaps) + "; L1 norm / softmax's: "
        + ", ".join(f"{m} {t.norm_ratio[m]:.2f}" for m in gaps) + ".")
    lines.append("Predicted class differs from softmax's: " + ", ".join(
        f"{m} on {t.region_disagreement[m]:.2%} of the plotted box and "
        f"{t.train_pred_disagreement[m]:.1%} of the training points" for m in gaps) + ".")
    lines.append("Training fit (exact NLL / error / penalised NLL): " + ", ".join(
        f"{m} {t.train_nll[m]:.4f} / {t.train_error[m]:.1%} / {t.penalised_nll[m]:.4f}"
        for m in t.index) + ".")
    return lines
