"""The race's figures: AlgoPerf's performance profiles, and y-limits for the learning
curves set by the targets rather than by an outlier."""
from __future__ import annotations

import numpy as np

from scalable_softmax.repro.race import scoring

__all__ = ["FAMILY_STYLES", "PEER_STYLES", "series_color", "curve_ylim", "clip_to_ylim",
           "profile_figure"]

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
    from scalable_softmax.repro import style

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

    from scalable_softmax.repro import style

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
    (``repro.style``; a ``tight_layout`` here switched it off with a UserWarning in the
    executed notebooks), and the figure is saved with a tight bounding box, which keeps
    the legend."""
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))),
               frameon=False, bbox_to_anchor=(0.5, offset))
    return fig
