"""Non-parametric softmax estimation with the One-vs-Each bound (Titsias 2016, section 2, 4.1).

The model is ``p(y = k) = softmax(f)_k`` with one free parameter ``f_k`` per value. For
data ``y_1..y_N`` the One-vs-Each lower bound on the log likelihood is

``F(f) = sum_n sum_{m != y_n} log sigma(f_{y_n} - f_m)``.

:func:`ove_sgd` maximises it doubly stochastically (minibatch of data draws, a few sampled
other values per draw). The random numbers are drawn in Python (``numpy.random.Generator``)
and passed to the numba kernel, so :func:`_ove_steps_reference` (plain NumPy) reproduces
the kernel exactly and is the test oracle.

Notebook ``08-ove-nonparametric`` (Figures 1(a) and 2) is glue around this module:
:func:`sample_values` draws the data, :func:`fit_bounds` finds the OVE and Bouchard
optima of Figure 1(a) with L-BFGS (objectives :func:`ove_objective`,
:func:`bouchard_objective`), :func:`bouchard_k2` checks Proposition 3,
:func:`results_table` builds the table and :func:`plot_fig1a` / :func:`plot_fig2` draw
the figures.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import expit, log_expit, softmax

from scalable_softmax import objectives
from scalable_softmax.kernels.nonparametric import ove_steps

__all__ = ["ove_sgd", "sample_values", "ove_objective", "bouchard_objective", "BoundFits",
           "fit_bounds", "bouchard_k2", "results_table", "plot_fig1a", "plot_fig2", "found_lines"]


def _ove_steps_reference(f, y, neg, start, n_iter, b, S, lr):
    """Plain NumPy version of :func:`scalable_softmax.kernels.nonparametric.ove_steps`
    (returns a new ``f``)."""
    f = np.array(f, dtype=np.float64)
    for t in range(n_iter):
        yy = y[start + t * b: start + (t + 1) * b]
        mm = neg[start + t * b: start + (t + 1) * b, :S]
        w = lr * expit(f[mm] - f[yy][:, None])
        grad = np.zeros_like(f)
        np.add.at(grad, yy, w.sum(axis=1))
        np.add.at(grad, mm.ravel(), -w.ravel())
        f += grad
    return f


def _draw_others(rng, y, K, S):
    """``S`` values per draw, uniform over ``{0..K-1} minus {y_j}``, with replacement."""
    m = rng.integers(0, K - 1, size=(len(y), S), dtype=np.int64)
    return m + (m >= y[:, None])


def ove_sgd(y, K, batch=100, samples=10, lr0=None, decay=0.9, iterations=200_000,
            record_every=1000, target=None, seed=0, progress=False):
    """Doubly stochastic maximisation of the non-parametric OVE bound.

    Epoch ``e`` (0-based) is ``len(y) // batch`` iterations over a fresh permutation of
    the data, learning rate ``lr0 * decay**e``; within a step the ``batch`` draws each
    bring ``samples`` other values drawn uniformly (with replacement) from the ``K - 1``
    values different from their own. Starts at ``f = 0``.

    Parameters
    ----------
    y : ndarray of int, values in ``0..K-1``
    K : int, number of values
    batch, samples : int, minibatch size ``b`` and sampled other values per draw
    lr0 : float, initial learning rate (default ``0.5 / batch``, Titsias section 4.1)
    decay : float, learning-rate factor per epoch
    iterations : int, total SGD steps
    record_every : int, record ``||softmax(f) - target||_1`` every this many steps
    target : ndarray (K,), optional; the probabilities the error is measured against
    seed : int
    progress : bool, show a progress bar over the iterations
        (:func:`scalable_softmax.progress.tqdm`)

    Returns
    -------
    f : ndarray (K,); steps : ndarray of int; errors : ndarray (empty if no target)
    """
    y = np.asarray(y)
    if y.ndim != 1 or len(y) == 0 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError("ove_sgd: y must be a non-empty 1-d integer array")
    if K < 2 or y.min() < 0 or y.max() >= K:
        raise ValueError(f"ove_sgd: y must lie in 0..K-1 with K >= 2 (K={K})")
    if batch < 1 or samples < 1 or iterations < 0 or record_every < 1 or batch > len(y):
        raise ValueError("ove_sgd: batch (<= len(y)), samples, record_every must be >= 1, "
                         "iterations >= 0")
    if target is not None:
        target = np.asarray(target, dtype=np.float64)
        if target.shape != (K,):
            raise ValueError(f"ove_sgd: target must have shape ({K},)")
    lr0 = 0.5 / batch if lr0 is None else float(lr0)
    y = y.astype(np.int64)
    rng = np.random.default_rng(seed)
    per_epoch = len(y) // batch
    f = np.zeros(K)
    wbuf = np.empty((batch, samples))
    steps, errors = [0], []
    if target is not None:
        errors.append(np.abs(softmax(f) - target).sum())
    done, epoch = 0, 0
    from scalable_softmax.progress import tqdm
    bar = tqdm(total=iterations, desc="doubly stochastic OVE", unit="it", unit_scale=True,
               disable=not progress, leave=False)
    while done < iterations:
        order = y[rng.permutation(len(y))][: per_epoch * batch]
        neg = _draw_others(rng, order, K, samples)
        lr = lr0 * decay ** epoch
        pos = 0
        while pos < per_epoch and done < iterations:
            n = min(record_every - done % record_every, per_epoch - pos, iterations - done)
            ove_steps(f, order, neg, pos * batch, n, batch, samples, lr, wbuf)
            pos += n
            done += n
            bar.update(n)
            if done % record_every == 0 or done == iterations:
                steps.append(done)
                if target is not None:
                    errors.append(np.abs(softmax(f) - target).sum())
        epoch += 1
    bar.close()
    return f, np.array(steps), np.array(errors)


# --------------------------------------------------------------------------- Figure 1(a)
def sample_values(n_draws: int, n_values: int, seed: int):
    """The paper's data: ``u_k ~ U[0, 1]``, ``p_true ∝ u_k^2`` over ``n_values`` values
    and ``n_draws`` draws from it (one ``numpy`` Generator seeded with ``seed``, the
    uniforms first). Returns ``(p_true, y)``."""
    if n_draws < 1 or n_values < 2:
        raise ValueError(f"sample_values: n_draws must be >= 1 and n_values >= 2; got "
                         f"{n_draws} and {n_values}")
    rng = np.random.default_rng(seed)
    u = rng.uniform(size=n_values)
    p_true = u**2 / np.sum(u**2)
    return p_true, rng.choice(n_values, size=n_draws, p=p_true)


def ove_objective(f, counts):
    """``-F(f)/N`` and its gradient (the non-parametric OVE bound, Eq. 9):
    ``F(f) = sum_k N_k sum_{m != k} log sigma(f_k - f_m)``."""
    d = f[:, None] - f[None, :]                     # d[k, m] = f_k - f_m
    L = log_expit(d)
    np.fill_diagonal(L, 0.0)
    val = np.sum(counts[:, None] * L)
    S = expit(-d)                                   # S[k, m] = sigma(f_m - f_k)
    np.fill_diagonal(S, 0.0)
    grad = counts * S.sum(axis=1) - (counts[:, None] * S).sum(axis=0)
    n = counts.sum()
    return -val / n, -grad / n


def bouchard_objective(theta, counts):
    """``-G(f, alpha)/N`` and its gradient (Bouchard's bound with one shared ``alpha``,
    ``theta = (f, alpha)``): ``G = sum_k N_k f_k - N alpha - N sum_m softplus(f_m - alpha)``."""
    f, alpha = theta[:-1], theta[-1]
    n = counts.sum()
    val = counts @ f - n * alpha - n * objectives.softplus(f - alpha).sum()
    s = expit(f - alpha)
    grad = np.append(counts - n * s, -n + n * s.sum())
    return -val / n, -grad / n


def _lbfgs(fun, x0, counts):
    return minimize(fun, x0, args=(counts,), jac=True, method="L-BFGS-B",
                    options=dict(gtol=1e-13, ftol=0, maxiter=10_000))


@dataclasses.dataclass
class BoundFits:
    """Figure 1(a)'s estimates from value counts: the MLE ``N_k/N``; the OVE bound's
    optimum (``res_ove``, ``p_ove``); Bouchard's (``res_bou``, ``p_bou``, its ``f_bou``
    and ``alpha_bou``), its closed form ``p_bou_closed ∝ p/(1-p)`` and
    ``alpha_check = objectives.bouchard_optimal_alpha`` of ``f_bou``."""

    p_mle: np.ndarray
    res_ove: object
    p_ove: np.ndarray
    res_bou: object
    f_bou: np.ndarray
    alpha_bou: float
    p_bou: np.ndarray
    p_bou_closed: np.ndarray
    alpha_check: float


def fit_bounds(counts) -> BoundFits:
    """Maximise the OVE and Bouchard bounds for value counts ``counts`` (all > 0) with
    L-BFGS from zero (gradient tolerance 1e-13)."""
    counts = np.asarray(counts)
    if counts.ndim != 1 or len(counts) < 2 or not (counts > 0).all():
        raise ValueError("fit_bounds: counts must be a 1-d array of >= 2 positive counts "
                         "(a value never drawn puts the MLE on the boundary: change the seed)")
    p_mle = counts / counts.sum()
    K = len(counts)
    res_ove = _lbfgs(ove_objective, np.zeros(K), counts)
    res_bou = _lbfgs(bouchard_objective, np.zeros(K + 1), counts)
    f_bou, alpha_bou = res_bou.x[:-1], res_bou.x[-1]
    return BoundFits(
        p_mle=p_mle, res_ove=res_ove, p_ove=softmax(res_ove.x), res_bou=res_bou,
        f_bou=f_bou, alpha_bou=alpha_bou, p_bou=softmax(f_bou),
        p_bou_closed=(p_mle / (1 - p_mle)) / np.sum(p_mle / (1 - p_mle)),
        alpha_check=objectives.bouchard_optimal_alpha(np.ones((1, 1)), f_bou[:, None])[0])


def bouchard_k2(counts=(150.0, 50.0)):
    """Proposition 3's case ``K = 2``: Bouchard's optimum for two counts by L-BFGS;
    returns the optimizer's result (``x = (f1, f2, alpha)``)."""
    return _lbfgs(bouchard_objective, np.zeros(3), np.asarray(counts, dtype=np.float64))


def results_table(counts_a, p_true_a, fits: BoundFits, iterations: int, err_mle_final: float,
                  mle_err_true: float, sgd_err_true: float) -> pd.DataFrame:
    """The notebook's table: rows ``fig1a`` value 1..K (true probability and the three
    estimates) and each estimate's ``||p - p_true||_1``; rows ``fig2``: the doubly
    stochastic estimate's final L1 errors (to the MLE and to ``p_true``) in column
    ``ove``."""
    rows = [dict(part="fig1a", row=f"value {k + 1} (count {counts_a[k]})", true_p=p_true_a[k],
                 exact_mle=fits.p_mle[k], ove=fits.p_ove[k], bouchard=fits.p_bou[k])
            for k in range(len(counts_a))]
    rows.append(dict(part="fig1a", row="L1 vs true p", true_p=0.0,
                     exact_mle=np.abs(fits.p_mle - p_true_a).sum(),
                     ove=np.abs(fits.p_ove - p_true_a).sum(),
                     bouchard=np.abs(fits.p_bou - p_true_a).sum()))
    rows.append(dict(part="fig2", row=f"L1 vs exact MLE after {iterations} iterations",
                     true_p=np.nan, exact_mle=0.0, ove=err_mle_final, bouchard=np.nan))
    rows.append(dict(part="fig2", row="L1 vs true p", true_p=0.0, exact_mle=mle_err_true,
                     ove=sgd_err_true, bouchard=np.nan))
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- figures
def plot_fig1a(p_true_a, fits: BoundFits, n_points: int):
    """Figure 1(a): the three estimates as bars beside the generating probabilities."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    fig, ax = plt.subplots(figsize=(style.FIG_WIDTH, 3.2))
    K = len(p_true_a)
    x = np.arange(1, K + 1)
    w = 0.27
    ax.bar(x - w, fits.p_mle, w, color=style.color("exact"), label="exact softmax (MLE)")
    ax.bar(x, fits.p_ove, w, color=style.color("ove"), label="one-vs-each bound's optimum")
    ax.bar(x + w, fits.p_bou, w, color=style.color("bouchard"),
           label="Bouchard bound's optimum")
    ax.plot(x, p_true_a, ls="none", marker="D", ms=5, mfc="white", mec="k", mew=1,
            label="true p (generating)")
    ax.set_xticks(x)
    ax.grid(False, axis="x")
    ax.set_xlabel("value")
    ax.set_ylabel("estimated probability")
    ax.set_title(f"Figure 1(a): {n_points} draws of {K} values")
    style.bars_from_zero(ax)
    style.legend_below(fig, ncol=4)
    return fig


def plot_fig2(p_mle, p_sgd, steps, err_mle, mle_err_true, sgd_err_true, title: str):
    """Figure 2: (a) the exact estimate sorted, (b) the doubly stochastic one in the same
    order, (c) the L1 error to the MLE against iterations with the MLE's own sampling
    error and the final error to ``p_true``."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    fig, axes = plt.subplot_mosaic([["a", "b"], ["c", "c"]], figsize=(style.FIG_WIDTH, 5.4))
    order = np.argsort(p_mle)[::-1]
    rank = np.arange(1, len(p_mle) + 1)
    axes["a"].plot(rank, p_mle[order], color=style.color("exact"))
    axes["a"].set_title("(a) exact (MLE = OVE optimum), sorted")
    axes["b"].plot(rank, p_sgd[order], color=style.color("ove"), lw=0.5)
    axes["b"].plot(rank, p_mle[order], color=style.color("exact"), lw=1)
    axes["b"].set_title("(b) doubly stochastic OVE, same order")
    for k in "ab":
        axes[k].set_xlabel("value (sorted by the exact estimate)")
        axes[k].set_ylabel("probability")
        axes[k].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    c = axes["c"]
    c.plot(steps, err_mle, color=style.color("ove"),
           label=r"$\|p_{SGD} - p_{MLE}\|_1$ (the paper's measure)")
    c.plot(steps[-1], sgd_err_true, ls="none", marker="o", mfc="white",
           mec=style.color("ove"), mew=1.5, label=r"final $\|p_{SGD} - p_{true}\|_1$")
    c.axhline(mle_err_true, color=style.color("exact"), ls="--", lw=1,
              label=r"$\|p_{MLE} - p_{true}\|_1$ (the MLE's sampling error)")
    c.set_yscale("log")
    style.log_ticks(c)
    c.set_xlabel("iterations")
    c.set_ylabel("L1 error")
    c.set_title("(c) estimation error")
    fig.suptitle(title)
    handles = [plt.Line2D([], [], color=style.color("exact"), label="exact (MLE)"),
               plt.Line2D([], [], color=style.color("ove"), label="doubly stochastic OVE")]
    handles += c.get_legend_handles_labels()[0]
    style.legend_below(fig, handles, ncol=3)
    return fig


def found_lines(table: pd.DataFrame) -> list[str]:
    """The numbers notebook 08's "What we found" rests on, as sentences built from this
    run's ``table`` (:func:`results_table`): Bouchard's optimum against the MLE at the
    largest and smallest probabilities of Figure 1(a), the L1 errors to the generating
    ``p_true``, and Figure 2's final errors of the doubly stochastic estimate."""
    lines = []
    a = table[(table.part == "fig1a") & table.row.str.startswith("value")]
    if len(a):
        order = a.sort_values("exact_mle", ascending=False, kind="stable")
        def show(r):
            return f"{r.exact_mle:.3f} -> {r.bouchard:.4f}"

        lines.append("Figure 1(a), MLE -> Bouchard's optimum: the two largest "
                     + ", ".join(show(r) for r in order.head(2).itertuples())
                     + "; the two smallest " + ", ".join(show(r) for r in
                                                       order.tail(2).itertuples())
                     + f"; Bouchard above the MLE at {int((a.bouchard > a.exact_mle).sum())} "
                     f"of {len(a)} values.")
    l1 = table[(table.part == "fig1a") & (table.row == "L1 vs true p")]
    if len(l1):
        r = l1.iloc[0]
        lines.append(f"L1 distance to p_true: MLE {r.exact_mle:.3f}, OVE optimum {r.ove:.3f}, "
                     f"Bouchard {r.bouchard:.3f}.")
    opt = table[(table.part == "fig2") & table.row.str.startswith("L1 vs exact MLE")]
    true = table[(table.part == "fig2") & (table.row == "L1 vs true p")]
    if len(opt) and len(true):
        e_opt, e_mle, e_sgd = opt.ove.iloc[0], true.exact_mle.iloc[0], true.ove.iloc[0]
        lines.append(f"Figure 2: ||p_SGD - p_MLE||_1 at the end {e_opt:.4f}, "
                     f"{e_opt / e_mle:.2f} of the MLE's sampling error ||p_MLE - p_true||_1 = "
                     f"{e_mle:.4f}; the SGD estimate's error to p_true {e_sgd:.4f} "
                     f"({e_sgd / e_mle - 1:+.1%} against the MLE's).")
    return lines
