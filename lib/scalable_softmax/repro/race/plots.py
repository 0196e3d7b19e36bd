"""The race's figures: AlgoPerf's performance profiles, and the learning curves on
validation with y-limits set by the targets rather than by an outlier."""
from __future__ import annotations

import numpy as np

from scalable_softmax.repro.race import scoring

__all__ = ["FAMILY_STYLES", "PEER_STYLES", "TARGET_LINES", "series_color", "curve_ylim",
           "clip_to_ylim", "profile_figure", "targets_of", "curves_figure"]

#: family -> (colour index into the collection's series colours, line style, marker):
#: four families a reader tells apart by colour, line and marker alike
FAMILY_STYLES = {"double-sum": (2, "-", "o"), "full-softmax": (4, "--", "s"),
                 "sampled-softmax": (3, ":", "^"), "full-batch": (5, "-.", "D")}


#: the peers' line styles in the figures (colour index into the collection's series
#: colours, line style, marker); ours use the collection's method styles. The torch
#: methods take the series' green and cyan: its wine and purple were hard to tell from
#: each other and from IS's pink and the minibatch Implicit SGD's dark brown
PEER_STYLES = {"sklearn-lbfgs": (2, "--", "D"), "sklearn-saga": (3, "--", "v"),
               "torch-sgd": (8, ":", "o"), "torch-adam": (5, ":", "s"),
               "torch-sampled": (7, ":", "^")}
#: our methods drawn in a series colour instead of their method colour (index into the
#: collection's series colours): softmax SGD's method colour is the exact softmax's
#: black, which L-BFGS (``exact``) has too; its grey is 35 or more (CIE76) from every
#: other series of the figures
OUR_SERIES_COLORS = {"softmax-sgd": 0}


def series_color(method: str) -> str:
    """The colour of ``method``'s series in the race's figures: the peers' from
    :data:`PEER_STYLES`, ours from :data:`OUR_SERIES_COLORS` or the method styles."""
    from scalable_softmax.repro.machinery import style

    if method in PEER_STYLES:
        return style.SERIES_COLORS[PEER_STYLES[method][0]]
    if method in OUR_SERIES_COLORS:
        return style.SERIES_COLORS[OUR_SERIES_COLORS[method]]
    return style.color(method)


def curve_ylim(targets: dict, values, *, below=0.02, above=0.25):
    """y-limits of a validation learning-curve panel: from ``(1 - below)`` times the
    lowest of the targets' reference and the curves' minimum, to ``(1 + above)`` times
    the loosest target, so that the levels fill the panel; a point above is drawn at the
    top edge (:func:`clip_to_ylim`) instead of setting the scale."""
    if not targets:
        raise ValueError("targets must name at least one level")
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    ref = min(targets.values()) / (1 + min(targets))
    low = min(ref, float(v.min())) if len(v) else ref
    return low * (1 - below), max(targets.values()) * (1 + above)


def clip_to_ylim(values, ylim):
    """``(shown, clipped)``: ``values`` with every point above ``ylim[1]`` (or not
    finite: diverged) put at ``ylim[1]``, and the mask of those points (to draw them
    with a hollow marker at the edge)."""
    v = np.asarray(values, dtype=float)
    out = ~np.isfinite(v) | (v > ylim[1])
    return np.where(out, ylim[1], v), out


def profile_figure(rows, by="family", levels=None, taus=None):
    """One panel per level: the performance profile (:func:`~.scoring.
    performance_profile`) of each ``by`` (``family`` or ``method``) against ``tau``
    (log axis). ``rows`` are the targets rows (:data:`~.run.TARGET_COLUMNS`). Returns
    the figure."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    prof = scoring.performance_profile(rows, by, taus)
    levels = sorted(prof.level.unique()) if levels is None else list(levels)
    fig, axes = plt.subplots(1, len(levels), figsize=(style.FIG_WIDTH, 2.6),
                             sharey=True, squeeze=False)
    for ax, lv in zip(axes[0], levels):
        p = prof[prof.level == lv]
        for who, g in p.groupby(by, sort=True):
            if by == "family" and who in FAMILY_STYLES:
                ci, ls, mk = FAMILY_STYLES[who]
                kw = dict(color=style.SERIES_COLORS[ci], linestyle=ls, marker=mk,
                          label=who)
            elif who in PEER_STYLES:
                _, ls, mk = PEER_STYLES[who]
                kw = dict(color=series_color(who), linestyle=ls, marker=mk,
                          label=who)
            else:
                kw = dict(color=series_color(who), linestyle="-",
                          marker=style.marker(who), label=who)
            ax.step(g.tau, g.fraction, where="post", markevery=max(1, len(g) // 6),
                    markersize=4, **kw)
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"target +{100 * lv:g}%", fontsize=9)
        ax.set_xlabel("tau (x the fastest)")
    axes[0][0].set_ylabel("share of workloads")
    return legend_below(fig, axes, -0.08)


def legend_below(fig, axes, offset):
    """The first panel's legend under the figure (at most 4 columns, ``offset`` below
    its bottom edge); returns ``fig``. The layout stays the style's constrained layout
    (``repro.machinery.style``; a ``tight_layout`` here switched it off with a UserWarning in the
    executed notebooks), and the figure is saved with a tight bounding box, which keeps
    the legend."""
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))),
               frameon=False, bbox_to_anchor=(0.5, offset))
    return fig


#: the horizontal lines of a learning-curve panel: level (0: the reference) -> (label,
#: line style). Their colour (Paul Tol's magenta) is 39 or more (CIE76) from every
#: method's series colour
TARGET_LINES = {0.0: ("reference", "-"), 0.01: ("target +1%", "--"),
                0.02: ("target +2%", "-."), 0.05: ("target +5%", ":"),
                0.10: ("target +10%", (0, (1, 4)))}
TARGET_COLOR = "#EE3377"


def targets_of(rows) -> dict:
    """``{workload: {level: target}}`` from the targets rows (:data:`~.run.
    TARGET_COLUMNS`; rows without a target, e.g. a skipped method's, are left out).
    ValueError when a workload has two targets for one level."""
    import pandas as pd

    t = rows[["workload", "level", "target"]].copy()
    t["target"] = pd.to_numeric(t.target, errors="coerce")
    t = t.dropna(subset=["target"]).drop_duplicates()
    if t.duplicated(["workload", "level"]).any():
        raise ValueError("targets_of: a workload has two targets for one level: "
                         f"{t[t.duplicated(['workload', 'level'], keep=False)].to_dict('records')}")
    return {w: {float(r.level): float(r.target) for r in g.itertuples()}
            for w, g in t.groupby("workload", sort=False)}


def _method_order(methods):
    """Methods grouped by family (:data:`FAMILY_STYLES`' order), then by name."""
    from scalable_softmax.repro.race.families import family_of

    fams = list(FAMILY_STYLES)
    return sorted(methods, key=lambda m: (fams.index(family_of(m))
                                          if family_of(m) in fams else len(fams), m))


def curves_figure(curves, targets: dict, levels=(0.01, 0.05), ncols=3):
    """One panel per workload: validation log-loss against training seconds (log axis),
    every seed of every method a thin line of the method's colour (:func:`series_color`)
    in its family's line style (:data:`FAMILY_STYLES`), with the method's marker where
    the run stopped; the reference and the ``levels``' targets as horizontal lines
    (:data:`TARGET_LINES`). The y-limits are :func:`curve_ylim` of those levels, so
    that the targets fill the panel; a point above them (or diverged) is drawn at the
    top edge with a hollow marker (:func:`clip_to_ylim`, :func:`_edge_points`): every
    such point after the run first came into the panel, and the last point of a run
    that never did (the start of every run, far above, is the line coming down from the
    edge).

    Each seed is drawn, not a median with the seeds' range: the seeds' checkpoints fall
    at different training seconds and a run stops when it reaches the tightest target,
    so a median would need interpolation and would end with the first seed to stop;
    every line here is measured points only.

    ``curves``: the rows of :func:`~.run.curve_rows`; ``targets``: ``{workload: {level:
    target}}`` (:func:`targets_of`), each workload holding ``levels``; a panel per
    workload of ``targets``, in its order. A point at 0 training seconds has no place
    on the log axis and is left out. The legend is below the panels
    (:func:`scalable_softmax.repro.machinery.style.legend_below`, in the constrained layout; no
    ``tight_layout``). Returns the figure.
    """
    from matplotlib.lines import Line2D

    from scalable_softmax.repro.machinery import style
    from scalable_softmax.repro.race.families import workload_label
    from scalable_softmax.repro.race.methods import METHODS

    levels = tuple(float(v) for v in levels)
    workloads = list(targets) + [w for w in dict.fromkeys(curves.workload)
                                 if w not in targets]
    missing = [w for w in workloads if w not in targets
               or any(lv not in targets[w] for lv in levels)]
    if missing:
        raise ValueError(f"curves_figure: no target for levels {list(levels)} of workloads "
                         f"{missing} (targets: {sorted(map(str, targets))})")
    n = len(workloads)
    # constrained layout (as style.use sets it) also when the style is not in use, so
    # that the legend below gets its room without a tight_layout
    fig, axes = style.panel_grid(n, ncols=min(ncols, n), layout="constrained")
    lines: dict = {}
    drawn = set()
    for ax, w in zip(axes, workloads):
        tg = {lv: targets[w][lv] for lv in levels}
        g = curves[(curves.workload == w) & (curves.seconds > 0)]
        ylim = curve_ylim(tg, g.val_log_loss.to_numpy(dtype=float))
        ref = min(tg.values()) / (1 + min(tg))
        for lv, y in [(0.0, ref), *sorted(tg.items())]:
            lab, ls = TARGET_LINES.get(lv, (f"target +{100 * lv:g}%", "--"))
            ax.axhline(y, color=TARGET_COLOR, linestyle=ls, linewidth=0.9, zorder=1)
            lines.setdefault(lab, Line2D([], [], color=TARGET_COLOR, linestyle=ls,
                                         linewidth=0.9))
        for m in _method_order(g.method.unique()):
            ls, mk, color = _curve_style(m)
            for _, run in g[g.method == m].groupby("seed", sort=True):
                run = run.sort_values("checkpoint")
                x = run.seconds.to_numpy(dtype=float)
                v = run.val_log_loss.to_numpy(dtype=float)
                shown, out = clip_to_ylim(v, ylim)
                # the line through the measured values (the panel cuts it at its edge;
                # a diverged point breaks it), the run's end marked
                ax.plot(x, np.where(np.isfinite(v), v, np.nan), color=color,
                        linestyle=ls, linewidth=0.9, alpha=0.85, zorder=2)
                if not out[-1]:
                    ax.plot(x[-1:], v[-1:], color=color, linestyle="none", marker=mk,
                            markersize=4, zorder=3)
                edge = _edge_points(out)
                if edge.any():
                    ax.plot(x[edge], shown[edge], color=color, linestyle="none",
                            marker=mk, markersize=6, markerfacecolor="none",
                            clip_on=False, zorder=4)
            drawn.add(m)
        if not len(g):
            ax.text(0.5, 0.5, "no run recorded a checkpoint", transform=ax.transAxes,
                    ha="center", va="center", fontsize=8, color="0.3")
        ax.set_ylim(*ylim)
        ax.set_xscale("log")
        ax.set_title(workload_label(w).replace("`", ""), fontsize=9)
        ax.set_xlabel("training seconds")
    for ax in axes[::min(ncols, n)]:
        ax.set_ylabel("validation log-loss")
    handles = {(METHODS[m].label if m in METHODS else m):
               Line2D([], [], color=_curve_style(m)[2], linestyle=_curve_style(m)[0],
                      marker=_curve_style(m)[1], markersize=4)
               for m in _method_order(drawn)}
    handles.update(lines)
    handles["above the panel or diverged (at its edge)"] = Line2D(
        [], [], color="0.3", linestyle="none", marker="o", markersize=6,
        markerfacecolor="none")
    style.legend_below(fig, list(handles.values()), list(handles), ncol=4)
    return fig


def _curve_style(method):
    """``(line style, marker, colour)`` of ``method``'s learning curves: its family's
    line style, its marker, its series colour."""
    from scalable_softmax.repro.machinery import style
    from scalable_softmax.repro.race.families import family_of

    ls = FAMILY_STYLES.get(family_of(method), (0, "-", "o"))[1]
    mk = PEER_STYLES[method][2] if method in PEER_STYLES else style.marker(method)
    return ls, mk, series_color(method)


def _edge_points(out):
    """Which of a run's points beyond the y-limits (``out``, in training order) get a
    hollow marker at the edge: those after its first point inside the panel (a rise,
    a divergence), or only its last point when it never came inside; not the points
    before it first came inside (every run starts far above the targets)."""
    out = np.asarray(out, dtype=bool)
    mark = np.zeros_like(out)
    if not len(out):
        return mark
    if out.all():
        mark[-1] = True
    else:
        first = int(np.argmin(out))
        mark[first:] = out[first:]
    return mark
