"""Instrumented replay of explicit SGD steps, for the instability demo (notebook 01).

:func:`replay` re-runs, in plain NumPy and one step at a time, vanilla SGD and U-max on
the double-sum objective (docs/math.md sections 2, 3) and on Raman et al.'s double sum
(section 6, with the *correct* gradient), one datapoint and one sampled class per step,
in the per-datapoint units of docs/math.md section 2 (``f_ik / N``). Every step records the
size of the weight gradient **in the log domain**, so that the magnitude of the step
that overflows is recorded too:

* double sum: ``||grad_{w_k}|| = ||grad_{w_{y_i}}|| = (K-1) e^{delta_ik - u_i} ||x_i||``;
* Raman: ``max(||grad_{w_k}||, ||grad_{w_{y_i}}||)`` with
  ``||grad_{w_k}|| = (K-1) e^{s_ik - ubar_i} ||x_i||`` and
  ``||grad_{w_{y_i}}|| = |e^{s_{i,y_i} - ubar_i} - 1| ||x_i||``.

The replay is a reference for the *magnitudes*, not a copy of the library's kernels
(:mod:`scalable_softmax.methods.sgd`): it draws its own data order and classes and
uses ``mu = 0``. A run stops at the first step whose ``exp`` overflows or whose
parameters become non-finite (that step is recorded, with ``finite = False``).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scalable_softmax.protocols import LIBRARY_DEFAULTS

__all__ = ["replay", "REPLAY_METHODS", "log10_bound", "NOTEBOOK_REPLAYS", "overflow_runs",
           "u_init_runs", "largest_stable_rates", "replay_runs", "gradient_table",
           "plot_divergence", "plot_histograms", "plot_raman", "summary",
           "overflow_found_lines", "u_init_found_lines", "replay_found_lines", "seed_claims",
           "seeds_table"]

#: methods :func:`replay` knows
REPLAY_METHODS = ("vanilla", "umax", "raman-vanilla", "raman-umax")

_LN10 = math.log(10.0)
_EXP_MAX = 709.782712893384


def _softplus(z):
    return z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))


def _log_abs_expm1(a):
    """``log |e^a - 1|`` without overflow (``-inf`` at ``a = 0``)."""
    if a == 0.0:
        return -math.inf
    if a > 0:
        return a + math.log1p(-math.exp(-a))
    return math.log(-math.expm1(a))


def log10_bound(K, xnorm, delta0):
    """``log10((K-1) e^{delta0} ||x||)``: U-max's gradient bound (docs/math.md section 3)."""
    return (math.log(K - 1) + delta0) / _LN10 + np.log10(xnorm)


def replay(X, y, K, method, lr, epochs=1, lr_decay=LIBRARY_DEFAULTS["lr_decay"], delta0=1.0,
           seed=0):
    """Run explicit SGD step by step and record the gradient magnitude of every step.

    Parameters
    ----------
    X : scipy.sparse matrix or 2-D array (N, D)
    y : 1-D integer labels in ``0..K-1``
    K : int >= 2, number of classes
    method : one of :data:`REPLAY_METHODS`
    lr : float > 0, learning rate (per-datapoint units); epoch ``e`` uses
        ``lr * lr_decay**(e-1)``
    epochs : int >= 1
    lr_decay : float in (0, 1]
    delta0 : float > 0, U-max's reset threshold
    seed : int, seeds the data order (a permutation per epoch) and the classes

    Returns
    -------
    pandas.DataFrame, one row per step taken: ``epoch`` (1-based), ``step`` (0-based
    within the epoch), ``i``, ``k``, ``log10_grad`` (log10 of the gradient norm above,
    evaluated after a U-max reset), ``log10_bound`` (``log10((K-1) e^{delta0}||x_i||)``),
    ``reset`` (U-max reset before the step), ``finite`` (False only on the last row of
    a run that overflowed).
    """
    if method not in REPLAY_METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(REPLAY_METHODS)}")
    if not (isinstance(K, (int, np.integer)) and K >= 2):
        raise ValueError(f"K must be an integer >= 2; got {K!r}")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0; got {lr!r}")
    if not (isinstance(epochs, (int, np.integer)) and epochs >= 1):
        raise ValueError(f"epochs must be an integer >= 1; got {epochs!r}")
    if not (delta0 > 0):
        raise ValueError(f"delta0 must be > 0; got {delta0!r}")
    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.int64)
    N, D = X.shape
    if y.shape != (N,):
        raise ValueError(f"y must have shape ({N},) to match X; got {y.shape}")
    if y.min() < 0 or y.max() >= K:
        raise ValueError(f"labels in y must lie in 0..{K - 1}")
    raman = method.startswith("raman")
    umax = method.endswith("umax")
    W = np.zeros((K, D))
    u = np.zeros(N)
    xnorm = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    logK1 = math.log(K - 1)
    rng = np.random.default_rng(seed)
    rows = {c: [] for c in ("epoch", "step", "i", "k", "log10_grad", "log10_bound",
                            "reset", "finite")}
    for e in range(1, epochs + 1):
        eta = lr * lr_decay ** (e - 1)
        order = rng.permutation(N)
        ks = rng.integers(0, K - 1, size=N)
        for t in range(N):
            i = int(order[t])
            yi = int(y[i])
            k = int(ks[t]) + (1 if ks[t] >= yi else 0)
            lo, hi = X.indptr[i], X.indptr[i + 1]
            cols, x = X.indices[lo:hi], X.data[lo:hi]
            sk, sy = float(W[k, cols] @ x), float(W[yi, cols] @ x)
            reset = False
            if raman:
                target = np.logaddexp(sy, sk)
            else:
                target = _softplus(sk - sy)
            if umax and u[i] < target - delta0:
                u[i] = target
                reset = True
            ui = u[i]
            if raman:
                zk, zy = sk - ui, sy - ui
                logg = max(logK1 + zk, _log_abs_expm1(zy))
            else:
                zk = sk - sy - ui
                zy = 0.0
                logg = logK1 + zk
            lx = math.log(xnorm[i]) if xnorm[i] > 0 else -math.inf
            rows["epoch"].append(e)
            rows["step"].append(t)
            rows["i"].append(i)
            rows["k"].append(k)
            rows["log10_grad"].append((logg + lx) / _LN10 if np.isfinite(lx) else -np.inf)
            rows["log10_bound"].append(log10_bound(K, xnorm[i], delta0) if xnorm[i] > 0
                                       else -np.inf)
            rows["reset"].append(reset)
            ok = zk <= _EXP_MAX and zy <= _EXP_MAX
            if ok:
                g = (K - 1) * math.exp(zk)
                if raman:
                    gy = math.exp(zy) - 1.0          # grad_{w_y} = (e^{s_y - ubar} - 1) x
                    du = 1.0 - math.exp(zy) - g
                    W[k, cols] -= eta * g * x
                    W[yi, cols] -= eta * gy * x
                    u[i] = ui - eta * du
                else:
                    du = 1.0 - math.exp(-ui) - g
                    W[k, cols] -= eta * g * x
                    W[yi, cols] += eta * g * x
                    u[i] = max(ui - eta * du, 0.0)
                ok = (math.isfinite(u[i]) and np.isfinite(W[k, cols]).all()
                      and np.isfinite(W[yi, cols]).all())
            rows["finite"].append(ok)
            if not ok:
                return pd.DataFrame(rows)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------
# notebook 01: the overflow study, the u-init comparison, the replays and figures
# ---------------------------------------------------------------------------

#: the replayed methods of notebook 01: explicit SGD on the proposed double sum (F-5)
#: and on Raman et al.'s (F-8)
NOTEBOOK_REPLAYS = ("vanilla", "umax", "raman-vanilla", "raman-umax")


def overflow_runs(X, y, K, methods, lrs, *, epochs, seed=0, u_init=None, progress=True,
                  desc="section 1 fits"):
    """``fit(X, y, method, lr, epochs)`` (fit's lr_decay) for every method and rate (W = 0;
    u = 0 unless ``u_init`` is given; shuffled order with ``seed``): did the run
    overflow, where, and its final train log-loss.

    Returns a DataFrame, one row per run: ``method``, ``lr``, ``epochs``, ``diverged``,
    ``diverged_epoch`` (1-based), ``diverged_step`` (0-based in the epoch),
    ``steps_before_overflow``, ``final_train_log_loss`` (``inf`` when overflowed) and
    ``seconds`` (wall time of the fit, rounded to 0.01 s).
    """
    import time

    from scalable_softmax.fit import DivergenceWarning, fit
    from scalable_softmax.progress import tqdm

    N = X.shape[0]
    extra = {} if u_init is None else dict(u_init=u_init)
    records = []
    bar = tqdm(total=len(methods) * len(lrs), desc=desc, disable=not progress)
    for method in methods:
        for lr in lrs:
            t0 = time.perf_counter()
            with warnings.catch_warnings():   # the divergence is the finding: recorded below
                warnings.simplefilter("ignore", DivergenceWarning)
                res = fit(X, y, method, lr, epochs=epochs, seed=seed, K=K,
                          eval_epochs=[0, epochs], progress=False, **extra)
            ep, st = res.diverged_at if res.diverged else (np.nan, np.nan)
            records.append(dict(
                method=method, lr=lr, epochs=epochs, diverged=res.diverged,
                diverged_epoch=ep, diverged_step=st,
                steps_before_overflow=(ep - 1) * N + st if res.diverged and st >= 0
                else np.nan,
                final_train_log_loss=float(res.history.train_log_loss.iloc[-1]),
                seconds=round(time.perf_counter() - t0, 2)))
            bar.update(1)
    bar.close()
    return pd.DataFrame(records)


def u_init_runs(X, y, K, u_inits, lrs, *, epochs, seed=0, progress=True):
    """Vanilla SGD's runs of :func:`overflow_runs` again from each initial ``u`` of
    ``u_inits`` ("zero", "logK"): one row per (u_init, lr) with ``diverged``,
    ``diverged_epoch``, ``diverged_step`` and ``final_train_log_loss``."""
    from scalable_softmax.progress import tqdm

    bar = tqdm(total=len(u_inits) * len(lrs), desc="section 1b fits", disable=not progress)
    parts = []
    for u0 in u_inits:
        t = overflow_runs(X, y, K, ["vanilla"], lrs, epochs=epochs, seed=seed, u_init=u0,
                          progress=False)
        t.insert(0, "u_init", u0)
        parts.append(t[["u_init", "lr", "diverged", "diverged_epoch", "diverged_step",
                        "final_train_log_loss"]])
        bar.update(len(lrs))
    bar.close()
    return pd.concat(parts, ignore_index=True)


def largest_stable_rates(init_table):
    """``{u_init: the largest rate at which vanilla SGD did not overflow}`` (NaN if
    none) from :func:`u_init_runs`."""
    return {u0: init_table[(init_table.u_init == u0) & ~init_table.diverged].lr.max()
            for u0 in init_table.u_init.unique()}


def replay_runs(X, y, K, lrs, *, epochs, delta0=1.0, seed=0, methods=NOTEBOOK_REPLAYS,
                progress=True):
    """:func:`replay` of every method of ``methods`` at every rate of ``lrs``:
    ``{(method, lr): step history}``."""
    from scalable_softmax.progress import tqdm

    runs = {}
    for method, lr in tqdm([(m, lr) for m in methods for lr in lrs],
                           desc="instrumented replays", disable=not progress):
        runs[method, lr] = replay(X, y, K, method, lr, epochs=epochs, delta0=delta0,
                                  seed=seed)
    return runs


def gradient_table(runs):
    """One row per replay of :func:`replay_runs`: steps, whether and where it
    overflowed, quantiles (0.5, 0.9, 0.99) and maximum of ``log10 |gradient|``, the
    steps above the bound and the resets."""
    rows = []
    for (method, lr), h in runs.items():
        q = h.log10_grad.replace(-np.inf, np.nan).quantile([0.5, 0.9, 0.99])
        over = not h.finite.all()
        rows.append(dict(
            method=method, lr=lr, steps=len(h), overflowed=over,
            overflow_step=int(h.step.iloc[-1]) if over else np.nan,
            overflow_epoch=int(h.epoch.iloc[-1]) if over else np.nan,
            log10_grad_median=q[0.5], log10_grad_p90=q[0.9], log10_grad_p99=q[0.99],
            log10_grad_max=h.log10_grad.max(),
            steps_above_bound=int((h.log10_grad > h.log10_bound + 1e-12).sum()),
            resets=int(h.reset.sum())))
    return pd.DataFrame(rows)


def plot_divergence(table, K, data, epochs):
    """Left: final train log-loss against the rate per method (an overflowed run as a
    cross at log K); right: vanilla SGD's steps until the overflow. Returns the figure."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(style.FIG_WIDTH, 3.1))
    for method, g in table.groupby("method", sort=False):
        ok = g[~g.diverged]
        ax1.plot(ok.lr, ok.final_train_log_loss, **style.line(method))
        bad = g[g.diverged]
        if len(bad):
            ax1.plot(bad.lr, np.full(len(bad), np.log(K)), ls="none", marker="x", ms=8,
                     mew=2, color=style.color(method),
                     label=f"{style.label(method)}: overflowed")
    ax1.axhline(np.log(K), color="0.4", lw=0.8, ls=":", label="log K (crosses drawn there)")
    ax1.set(xscale="log", yscale="log", xlabel="learning rate",
            ylabel="final train log-loss", title=f"{data}: {epochs} epochs")
    style.log_ticks(ax1)
    v = table[table.method == "vanilla"]
    ax2.plot(v.lr, v.steps_before_overflow + 1, ls="-", marker="x", mew=2,
             color=style.color("vanilla"))
    ax2.set(xscale="log", yscale="log", xlabel="learning rate",
            ylabel="steps until the overflow",
            title=f"{style.label('vanilla')}: step of the overflow")
    style.legend_below(fig, *ax1.get_legend_handles_labels(), ncol=3)
    return fig


def plot_histograms(runs, lrs, epochs):
    """Histograms of ``log10 |gradient|`` per epoch (clipped to [-8, 12]) of vanilla SGD
    (top) and U-max (bottom) at each replayed rate, with U-max's bound. Returns the
    figure."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    colors = dict(zip(range(1, epochs + 1), style.SERIES_COLORS[2:] + style.SERIES_COLORS[:2]))
    bins = np.linspace(-8.0, 12.0, 61)
    fig, axes = plt.subplots(2, len(lrs), figsize=(style.FIG_WIDTH, 5.2), squeeze=False,
                             sharex=True)
    for j, lr in enumerate(lrs):
        for r, method in enumerate(("vanilla", "umax")):
            ax, h = axes[r, j], runs[method, lr]
            title = f"{style.label(method)}, lr = {lr:g}"
            for e, g in h.groupby("epoch"):
                ax.hist(np.clip(g.log10_grad, -8.0, 12.0), bins=bins, histtype="step",
                        lw=1.2, color=colors[e])
            ax.axvline(h.log10_bound.max(), color="k", ls="--", lw=0.8)
            if not h.finite.all():
                title += (f"\noverflow at step {len(h)}\n"
                          f"(log10 |g| = {h.log10_grad.iloc[-1]:.3g})")
            ax.set_title(title, fontsize=8.5)
            ax.set_yscale("log")
            ax.set_ylim(bottom=0.7)
            axes[r, 0].set_ylabel("steps")
        axes[1, j].set_xlabel("log10 |gradient|\n(clipped to [-8, 12])")
    handles = [plt.Line2D([], [], color=colors[e], label=f"epoch {e}")
               for e in sorted(set(runs["umax", lrs[0]].epoch))]
    handles.append(plt.Line2D([], [], color="k", ls="--", lw=0.8,
                              label="U-max's bound (K-1) e^δ₀ max||x||"))
    style.legend_below(fig, handles, ncol=len(handles))
    return fig


def plot_raman(runs, lrs):
    """Histograms of ``log10 |gradient|`` of the proposed formulation against Raman et
    al.'s, vanilla SGD (top) and U-max (bottom), at each replayed rate. Returns the
    figure."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    fig, axes = plt.subplots(2, len(lrs), figsize=(style.FIG_WIDTH, 5.0), squeeze=False,
                             sharex=True)
    bins = np.linspace(-8, 12, 61)
    for j, lr in enumerate(lrs):
        for r, kind in enumerate(("vanilla", "umax")):
            ax = axes[r, j]
            status = []
            for method in (kind, f"raman-{kind}"):
                h = runs[method, lr]
                ax.hist(np.clip(h.log10_grad, -8, 12), bins=bins, histtype="step",
                        color=style.color(method), lw=1.2)
                status.append("overflow" if not h.finite.all() else "finite")
            ax.set(yscale="log", title=f"{style.label(kind)}, lr = {lr:g}\nproposed: "
                   f"{status[0]}, Raman: {status[1]}")
            ax.set_ylim(bottom=0.7)
            ax.title.set_fontsize(8.5)
        axes[1, j].set_xlabel("log10 |gradient|\n(clipped to [-8, 12])")
    for r in range(2):
        axes[r, 0].set_ylabel("steps")
    handles = [plt.Line2D([], [], color=style.color(m), label=lab) for m, lab in
               (("vanilla", "Vanilla SGD, proposed (F-5)"),
                ("raman-vanilla", "Vanilla SGD, Raman's (F-8)"),
                ("umax", "U-max, proposed (F-5)"), ("raman-umax", "U-max, Raman's (F-8)"))]
    style.legend_below(fig, handles, ncol=2)
    return fig


def summary(table, runs, lrs):
    """The printed summary of notebook 01: the rates at which each method overflowed,
    its final log-loss by rate, and U-max's largest replayed gradient over its bound."""
    van = table[table.method == "vanilla"]
    lines = [f"vanilla overflowed at rates: {van[van.diverged].lr.tolist()} ; stayed "
             f"finite at: {van[~van.diverged].lr.tolist()}"]
    for m in ("umax", "implicit"):
        g = table[table.method == m]
        lines.append(f"{m}: overflowed at {g[g.diverged].lr.tolist()}; final log-loss by "
                     f"rate: {dict(zip(g.lr, g.final_train_log_loss.round(3)))}")
    um = pd.concat([runs["umax", lr] for lr in lrs])
    lines.append(f"U-max replay: {len(um)} steps, max log10(|g| / bound) = "
                 f"{(um.log10_grad - um.log10_bound).max():.3f}, resets {int(um.reset.sum())}")
    return "\n".join(lines)


def overflow_found_lines(table: pd.DataFrame, K: int) -> list[str]:
    """The numbers of notebook 01's section 1 finding, from this run's ``table``
    (:func:`overflow_runs`): per method where it overflowed (after how many steps) and
    its final train log-loss at the rates where it stayed finite, beside ``log K``."""
    lines = [f"log K = {math.log(K):.2f}."]
    for m, g in table.groupby("method", sort=False):
        div = g[g.diverged]
        fin = g[~g.diverged]
        lines.append(f"{m}: overflowed at " + (", ".join(
            f"{lr:g} (epoch {int(e)}, after {int(s)} steps)"
            for lr, e, s in zip(div.lr, div.diverged_epoch, div.steps_before_overflow))
            or "no rate") + "; final train log-loss " + (", ".join(
                f"{v:.3g} at {lr:g}" for lr, v in zip(fin.lr, fin.final_train_log_loss))
                or "-") + ".")
    return lines


def u_init_found_lines(init_table: pd.DataFrame) -> list[str]:
    """The numbers of notebook 01's section 1b finding, from this run's ``init_table``
    (:func:`u_init_runs`): per initial ``u`` the final log-loss where vanilla SGD stayed
    finite and where (after how many steps) it overflowed."""
    lines = []
    for u, g in init_table.groupby("u_init", sort=False):
        div, fin = g[g.diverged], g[~g.diverged]
        lines.append(f"u = {u}: finite at " + (", ".join(
            f"{lr:g} (log-loss {v:.3g})" for lr, v in zip(fin.lr, fin.final_train_log_loss))
            or "no rate") + "; overflowed at " + (", ".join(
                f"{lr:g} (epoch {int(e)}, step {int(s)})"
                for lr, e, s in zip(div.lr, div.diverged_epoch, div.diverged_step))
                or "no rate") + ".")
    return lines


def replay_found_lines(grads: pd.DataFrame, runs: dict, methods=None) -> list[str]:
    """The numbers of notebook 01's sections 2 and 3 findings, from this run's replay:
    ``grads`` (:func:`gradient_table`) and ``runs`` (:func:`replay_runs`): where each
    replay overflowed, its median and largest ``log10 |gradient|``, the steps above the
    bound ``(K-1) e^delta0 ||x_i||`` and the largest ratio to it; only the replays of
    ``methods`` when given."""
    lines = []
    if methods is not None:
        grads = grads[grads.method.isin(methods)]
    bound = max((float(h.log10_bound.max()) for h in runs.values()), default=np.nan)
    lines.append(f"The bound (K-1) e^delta0 ||x_i||: at most 10^{bound:.2f}.")
    for r in grads.itertuples():
        h = runs.get((r.method, r.lr))
        ratio = (float((h.log10_grad - h.log10_bound).max()) if h is not None
                 else np.nan)
        over = (f"overflowed at step {int(r.overflow_step)} of epoch {int(r.overflow_epoch)}"
                if r.overflowed else "finite")
        lines.append(f"{r.method} at lr {r.lr:g}: {over} ({r.steps} steps); log10 |gradient| "
                     f"median {r.log10_grad_median:.3g}, largest {r.log10_grad_max:.4g}; "
                     f"{r.steps_above_bound} steps above the bound (largest log10 ratio to "
                     f"it {ratio:.3g}).")
    return lines


def seed_claims(tables: dict, inits: dict, replays: dict, lrs, replay_lrs) -> pd.DataFrame:
    """Notebook 01's claims judged seed by seed (``reporting.seed_claim``) from each
    seed's :func:`overflow_runs` table (``tables``: ``{seed: table}``), :func:`u_init_runs`
    table (``inits``) and :func:`replay_runs` (``replays``): vanilla SGD overflows at the
    largest rate; U-max and Implicit SGD stay finite at every rate (one overflow in any
    seed refutes it); U-max's replayed gradient stays below its bound; ``u = log K`` is at
    least as stable as ``u = 0`` at every rate."""
    from scalable_softmax.repro.fagan.reporting import seed_claim

    seeds = sorted(tables)
    top = max(lrs)
    rows = []
    van = [bool(tables[s][(tables[s].method == "vanilla") & (tables[s].lr == top)]
                .diverged.all()) for s in seeds]
    rows.append(seed_claim("vanilla SGD overflows at the largest rate", "overflow at large rates",
                           f"overflowed at lr {top:g} in {sum(van)} of {len(seeds)} seeds",
                           all(van), van))
    for m, name in (("umax", "U-max"), ("implicit", "Implicit SGD")):
        ok = []
        n_div = n_runs = 0
        for s in seeds:
            g = tables[s][tables[s].method == m]
            n_div += int(g.diverged.sum())
            n_runs += len(g)
            ok.append(bool(not g.diverged.any() and np.isfinite(g.final_train_log_loss).all()))
        rows.append(seed_claim(f"{name} stays finite at every rate", "never overflows",
                               f"{n_div} of {n_runs} runs overflowed", all(ok), ok,
                               pooled=True))
    ok = [all(bool(replays[s]["umax", lr].finite.all()
                   and (replays[s]["umax", lr].log10_grad
                        <= replays[s]["umax", lr].log10_bound + 1e-12).all())
              for lr in replay_lrs) for s in seeds]
    rows.append(seed_claim("U-max's gradient stays below its bound at every replayed step",
                           "(K-1) e^delta0 ||x_i||",
                           f"below at every step in {sum(ok)} of {len(seeds)} seeds",
                           all(ok), ok, pooled=True))
    ok = []
    for s in seeds:
        t = inits[s]
        if set(t.u_init) >= {"zero", "logK"}:
            zs = t[t.u_init == "zero"].set_index("lr").diverged
            ls = t[t.u_init == "logK"].set_index("lr").diverged
            ok.append(bool(not (ls & ~zs).any()))
        else:
            ok.append(None)
    judged = [o for o in ok if o is not None]
    rows.append(seed_claim("u = log K is at least as stable as u = 0 at every rate",
                           "Algorithm 1 starts from u = log K",
                           f"in {sum(judged)} of {len(judged)} seeds" if judged else "-",
                           all(judged) if judged else None, ok, pooled=True))
    return pd.DataFrame(rows)


def seeds_table(tables: dict, inits: dict) -> pd.DataFrame:
    """Every seed's overflow runs (:func:`overflow_runs`, from ``u = 0``) and vanilla SGD's
    runs from every other initial ``u`` (:func:`u_init_runs`), with their ``seed`` and
    ``u_init`` (without the wall-clock seconds: a seed's table is deterministic)."""
    parts = []
    for s in sorted(tables):
        parts.append(tables[s].assign(seed=s, u_init="zero"))
        other = inits[s][inits[s].u_init != "zero"]
        if len(other):
            parts.append(other.assign(seed=s, method="vanilla"))
    out = pd.concat(parts, ignore_index=True).drop(columns=["seconds"], errors="ignore")
    first = ["seed", "u_init", "method", "lr"]
    return out[first + [c for c in out.columns if c not in first]]
