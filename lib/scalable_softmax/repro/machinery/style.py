"""One figure style for the whole notebook collection.

Every figure of the notebooks is drawn with this module, so that a method has the same
name, colour, marker and place in every figure, and every figure reads well at the
width of a README (about 1,000 pixels):

* :func:`use` sets one matplotlib style (seaborn's ``whitegrid`` theme, font sizes for
  a 7.2-inch-wide figure saved at 150 dpi, constrained layout, no legend frames);
* :data:`METHODS` gives each method of the library (and each variant the notebooks
  plot: Raman's formulation, NCE (1,1), the models of the One-vs-Each notebooks) its
  display name, colour (the colour-blind-safe Okabe-Ito palette for the paper's six
  methods), marker and rank; :func:`label`, :func:`color`, :func:`marker`,
  :func:`ordered` and :func:`handles` read it; :func:`text_color` darkens a method's
  colour for text (tick labels, titles) to a readable contrast;
* :func:`panel_grid` lays out ``n`` panels in a grid (never a long strip),
  :func:`legend_below` / :func:`legend_right` / :func:`legend_panel` put a legend
  outside the data (below, right, or in a spare panel of the grid),
  :func:`bars_from_zero` starts a bar axis at zero, :func:`show` displays a figure
  inline (also one built without pyplot), :func:`save` writes the PDF and PNG.

Usage in a notebook::

    from scalable_softmax.repro.machinery import style
    style.use()
    fig, axes = style.panel_grid(len(datasets), ncols=3)
    for ax, d in zip(axes, datasets):
        for m in style.ordered(methods):
            ax.plot(x, y[d, m], **style.line(m))
    style.legend_below(fig, style.handles(methods))
    style.save(fig, "02-dataset-run", figures_dir)
    style.show(fig)
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass

__all__ = ["METHODS", "METHOD_ORDER", "FIG_WIDTH", "use", "label", "color", "text_color",
           "marker",
           "line", "ordered", "handles", "rate_colors", "dataset_label", "panel_grid",
           "legend_below", "legend_right", "legend_panel", "bars_from_zero", "log_ticks",
           "show", "save",
           "SERIES_COLORS", "color_distance", "stacked"]

#: width of a full-width figure, inches (1,080 px at the 150 dpi of the saved PNGs)
FIG_WIDTH = 7.2
#: resolution of the saved PNGs; :func:`show` displays at a lower one
SAVE_DPI = 150
SHOW_DPI = 100


@dataclass(frozen=True)
class MethodStyle:
    """How one method is drawn: display name, colour, marker, line style."""
    label: str
    color: str
    marker: str
    linestyle: str = "-"


# Okabe & Ito's colour-blind-safe palette for the paper's six methods; the two
# plain-SGD methods share the blue family (U-max is vanilla SGD with resets), the
# biased baselines take orange, green and purple, Implicit SGD vermilion.
_OKABE_ITO = dict(orange="#E69F00", sky="#56B4E9", green="#009E73", yellow="#F0E442",
                  blue="#0072B2", vermilion="#D55E00", purple="#CC79A7", black="#000000")

#: every method name used by the library or plotted by a notebook, in display order
METHODS: dict[str, MethodStyle] = {
    "ove": MethodStyle("OVE", _OKABE_ITO["orange"], "v"),
    "nce": MethodStyle("NCE", _OKABE_ITO["green"], "^"),
    "nce (1,1)": MethodStyle("NCE (1,1)", "#7FC9A9", "^", "--"),
    "is": MethodStyle("IS", _OKABE_ITO["purple"], "<"),
    "vanilla": MethodStyle("Vanilla SGD", _OKABE_ITO["sky"], "s"),
    "umax": MethodStyle("U-max", _OKABE_ITO["blue"], "o"),
    "implicit": MethodStyle("Implicit SGD", _OKABE_ITO["vermilion"], "D"),
    # the minibatch variants: the vermilion family told apart by lightness, line and
    # marker (dark brown dashed, gold dash-dotted), not by a near shade
    "implicit-batch": MethodStyle("Implicit SGD (minibatch)", "#7F2704", "d", "--"),
    "implicit-batch-5": MethodStyle("Implicit SGD (minibatch, n=m=5)", "#D9A400", "X", "-."),
    "raman": MethodStyle("Raman (U-max)", "#8C564B", "P"),
    "raman-umax": MethodStyle("Raman (U-max)", "#8C564B", "P"),
    "raman-vanilla": MethodStyle("Raman (vanilla SGD)", "#C49C94", "X"),
    "softmax-sgd": MethodStyle("Softmax SGD (exact)", "#000000", "*", "--"),
    "exact": MethodStyle("Exact softmax", "#000000", "*"),
    "ove-exact": MethodStyle("OVE (exact)", "#A86A00", "v"),
    "bouchard": MethodStyle("Bouchard", "#7F7F7F", "h", "--"),
}
METHOD_ORDER = tuple(METHODS)

# aliases: the names some notebooks use for the same thing
_ALIASES = {"softmax": "exact", "mle": "exact", "ove-bound": "ove-exact",
            "proposed": "umax", "raman-umax": "raman-umax"}

#: colours of series that are not methods (published / recorded / ours under a
#: protocol ...): Paul Tol's muted scheme, darkest first, distinct from the methods';
#: its green (index 8) last, so that the indices of the others stay
SERIES_COLORS = ("#7F7F7F", "#000000", "#332288", "#44AA99", "#AA4499", "#999933",
                 "#882255", "#88CCEE", "#117733")


#: colours and markers of a library method without an entry in :data:`METHODS` (one
#: registered in :data:`scalable_softmax.methods.METHODS` since): chosen by a stable hash
#: of its name, so that it is drawn the same way in every figure
_FALLBACK_COLORS = ("#117733", "#DDCC77", "#CC6677", "#882255", "#44AA99", "#999933")
_FALLBACK_MARKERS = ("p", "H", "8", "d", "x", "+")


def _fallback(method: str) -> MethodStyle | None:
    """The deterministic style of a registered library method that :data:`METHODS` does
    not list, or None for a name that is not a method."""
    import zlib

    from scalable_softmax.methods import METHODS as REGISTRY

    if method not in REGISTRY:
        return None
    h = zlib.crc32(method.encode())
    return MethodStyle(method, _FALLBACK_COLORS[h % len(_FALLBACK_COLORS)],
                       _FALLBACK_MARKERS[(h // 7) % len(_FALLBACK_MARKERS)], ":")


def _key(method: str) -> str:
    m = str(method)
    if m in METHODS:
        return m
    low = m.lower()
    if low in METHODS:
        return low
    if low in _ALIASES:
        return _ALIASES[low]
    if _fallback(m) is not None:
        return m
    raise KeyError(f"style: no style for method {method!r}; add it to "
                   f"scalable_softmax.repro.machinery.style.METHODS (known: {', '.join(METHODS)})")


def _style(method: str) -> MethodStyle:
    key = _key(method)
    return METHODS[key] if key in METHODS else _fallback(key)


def label(method: str) -> str:
    """The display name of ``method`` (e.g. ``"implicit"`` -> ``"Implicit SGD"``)."""
    return _style(method).label


def color(method: str) -> str:
    """The colour of ``method`` (a hex string)."""
    return _style(method).color


def color_distance(a, b) -> float:
    """CIE76 colour difference (Euclidean distance in CIELAB, D65) of two matplotlib
    colours: about 2.3 is just noticeable; series drawn side by side want 30 or more."""
    from matplotlib.colors import to_rgb

    def lab(c):
        lin = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in to_rgb(c)]
        xyz = [(0.4124 * lin[0] + 0.3576 * lin[1] + 0.1805 * lin[2]) / 0.95047,
               0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2],
               (0.0193 * lin[0] + 0.1192 * lin[1] + 0.9505 * lin[2]) / 1.08883]
        f = [t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29
             for t in xyz]
        return (116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2]))

    return math.dist(lab(a), lab(b))


def stacked(xs, y: float, factor: float = 2.0) -> list[float]:
    """Heights for markers drawn at ``(x, y)`` for each ``x`` of ``xs`` (e.g. the crosses
    of diverged runs, drawn at the top of a log axis): the first marker at an ``x`` at
    ``y``, each further one at the same ``x`` a factor ``factor`` lower, so that
    markers of different series never hide one another where their ``x`` coincide."""
    seen: dict = {}
    out = []
    for x in xs:
        k = seen.get(x, 0)
        seen[x] = k + 1
        out.append(y / factor ** k)
    return out


def _luminance(rgb) -> float:
    """The relative luminance of an sRGB colour (WCAG 2)."""
    def lin(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def text_color(method: str, contrast: float = 4.5) -> str:
    """The colour of ``method`` darkened (towards black, same hue) until it reaches
    ``contrast`` against white (WCAG's 4.5:1 for text): for tick labels and titles
    written in a method's colour, which the pale ones (Vanilla SGD's sky blue, NCE
    (1,1)'s mint) would make hard to read. A dark enough colour is returned as it is."""
    from matplotlib.colors import to_hex, to_rgb

    rgb = to_rgb(color(method))
    for k in range(101):
        c = tuple(x * (1 - k / 100) for x in rgb)
        if 1.05 / (_luminance(c) + 0.05) >= contrast:
            return to_hex(c)
    return "#000000"


def marker(method: str) -> str:
    """The marker of ``method``."""
    return _style(method).marker


def line(method: str, **overrides) -> dict:
    """Keyword arguments for ``ax.plot`` drawing ``method``: colour, marker, line style
    and label (override any of them)."""
    s = _style(method)
    kw = dict(color=s.color, marker=s.marker, ls=s.linestyle, label=s.label)
    kw.update(overrides)
    return kw


def ordered(methods) -> list[str]:
    """``methods`` sorted into the collection's order (methods without an entry of
    :data:`METHODS` last, by name; unknown names raise)."""
    methods = list(dict.fromkeys(methods))

    def rank(m):
        key = _key(m)
        return (METHOD_ORDER.index(key), "") if key in METHODS else (len(METHOD_ORDER), key)
    return sorted(methods, key=rank)


def handles(methods, **overrides) -> list:
    """Legend handles (lines with markers) for ``methods``, in the collection's order."""
    from matplotlib.lines import Line2D
    return [Line2D([], [], **line(m, **overrides)) for m in ordered(methods)]


def rate_colors(rates, cmap: str = "viridis") -> dict:
    """One colour per learning rate, dark (small) to light (large)."""
    import matplotlib
    rates = sorted(set(float(r) for r in rates))
    cm = matplotlib.colormaps[cmap]
    n = max(len(rates) - 1, 1)
    return {r: cm(0.9 * i / n) for i, r in enumerate(rates)}


def dataset_label(name: str, synthetic: bool) -> str:
    """A data set's name as shown in figures: synthetic surrogates say so."""
    return f"{name} (SYNTHETIC)" if synthetic else str(name)


def use() -> None:
    """Apply the collection's style (idempotent): seaborn's whitegrid theme, font sizes
    for 7.2-inch figures, constrained layout, frameless legends, PNGs at 150 dpi."""
    import matplotlib as mpl
    import seaborn as sns

    sns.set_theme(context="paper", style="whitegrid", font_scale=1.0)
    mpl.rcParams.update({
        "font.size": 9,
        "axes.titlesize": 9.5,
        "axes.labelsize": 9,
        "xtick.labelsize": 8,
        "ytick.labelsize": 8,
        "legend.fontsize": 8,
        "legend.title_fontsize": 8.5,
        "figure.titlesize": 10.5,
        "figure.dpi": SHOW_DPI,
        "savefig.dpi": SAVE_DPI,
        "savefig.bbox": "tight",
        "figure.constrained_layout.use": True,
        "legend.frameon": False,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.edgecolor": "0.3",
        "grid.color": "0.88",
        "lines.linewidth": 1.5,
        "lines.markersize": 4.5,
        "axes.prop_cycle": mpl.cycler(color=list(SERIES_COLORS[2:]) + ["#000000"]),
        "pdf.fonttype": 42,
    })


def panel_grid(n: int, ncols: int | None = None, panel_height: float = 2.3,
               width: float = FIG_WIDTH, sharex=False, sharey=False, **subplot_kw):
    """A figure with ``n`` panels in a grid of ``ncols`` columns (default: 2 for up to 4
    panels, else 3), rows as needed; panels beyond ``n`` are removed. Returns
    ``(fig, axes)`` with ``axes`` a flat list of the ``n`` panels."""
    import matplotlib.pyplot as plt

    if n < 1:
        raise ValueError(f"panel_grid: need at least one panel, got n = {n}")
    ncols = ncols or (n if n <= 2 else 2 if n <= 4 else 3)
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, panel_height * nrows),
                             squeeze=False, sharex=sharex, sharey=sharey, **subplot_kw)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.remove()
    return fig, flat[:n]


def legend_below(fig, handles=None, labels=None, ncol: int | None = None, title=None,
                 **kw):
    """A legend for the whole figure, centred below the panels (outside the data)."""
    if handles is None:
        handles, labels = _collect(fig)
    n = len(handles)
    ncol = ncol or min(n, 4 if n > 6 else n)
    if labels is not None:
        kw["labels"] = labels
    return fig.legend(handles=handles, loc="outside lower center", ncol=ncol, title=title,
                      **kw)


def legend_right(fig_or_ax, handles=None, labels=None, title=None, **kw):
    """A legend right of a figure (``fig``) or of one panel (``ax``), outside the data."""
    from matplotlib.figure import Figure

    if isinstance(fig_or_ax, Figure):
        if handles is None:
            handles, labels = _collect(fig_or_ax)
        if labels is not None:
            kw["labels"] = labels
        return fig_or_ax.legend(handles=handles, loc="outside right center", title=title,
                                **kw)
    ax = fig_or_ax
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if labels is not None:
        kw["labels"] = labels
    return ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5),
                     title=title, borderaxespad=0, **kw)


def legend_panel(ax, handles, labels=None, title=None, **kw):
    """Use a spare panel of a grid (``ax``) for the figure's legend: no axes, the legend
    centred in it."""
    ax.axis("off")
    if labels is not None:
        kw["labels"] = labels
    return ax.legend(handles=handles, loc="center", title=title, **kw)


def _collect(fig):
    """Unique (handle, label) pairs over every panel of ``fig``, in drawing order."""
    seen, hs, ls = set(), [], []
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in seen and not lab.startswith("_"):
                seen.add(lab)
                hs.append(h)
                ls.append(lab)
    return hs, ls


def bars_from_zero(ax, axis: str = "y") -> None:
    """Start the value axis of a bar chart at zero (bars are compared by length)."""
    if axis == "y":
        if ax.get_yscale() != "linear":
            raise ValueError("bars_from_zero: a bar axis must be linear; plot ratios on a "
                             "log scale as points, not bars")
        lo, hi = ax.get_ylim()
        ax.set_ylim(0, max(hi, 0))
    else:
        if ax.get_xscale() != "linear":
            raise ValueError("bars_from_zero: a bar axis must be linear")
        lo, hi = ax.get_xlim()
        ax.set_xlim(0, max(hi, 0))


def log_ticks(ax, axis: str = "y") -> None:
    """Readable tick labels on a log axis (call after the data are drawn): plain numbers
    (``0.3``, ``2``, ``50``) over up to four decades, with labelled minor ticks (2, 5,
    and 3 under one decade) over less than 2.5 decades; powers of ten beyond. Over more
    than 2.5 decades the axis is extended to the nearest power of ten within a factor 3,
    so that both ends carry a label."""
    import matplotlib.ticker as mt

    a = ax.yaxis if axis == "y" else ax.xaxis
    lo, hi = ax.get_ylim() if axis == "y" else ax.get_xlim()
    if lo <= 0 or hi <= 0:
        return
    decades = math.log10(hi / lo)
    if decades > 2.5:       # end on a labelled power of ten when one is close
        lo_p, hi_p = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
        lo2 = lo_p if lo / lo_p < 3 else lo
        hi2 = hi_p if hi_p / hi < 3 else hi
        (ax.set_ylim if axis == "y" else ax.set_xlim)(lo2, hi2)
        decades = math.log10(hi2 / lo2)

    def plain(v, _pos=None):
        return f"{v:g}" if 1e-4 <= v < 1e5 else f"{v:.0e}"

    if decades <= 4:
        a.set_major_formatter(mt.FuncFormatter(plain))
    else:
        a.set_major_formatter(mt.LogFormatterSciNotation())
    if decades < 1.3:
        a.set_minor_locator(mt.LogLocator(subs=(2, 3, 5)))
        a.set_minor_formatter(mt.FuncFormatter(plain))
    elif decades < 2.5:
        a.set_minor_locator(mt.LogLocator(subs=(2, 5)))
        a.set_minor_formatter(mt.FuncFormatter(plain))
    else:
        a.set_minor_formatter(mt.NullFormatter())


def show(fig) -> None:
    """Display ``fig`` inline in a notebook (also a ``matplotlib.figure.Figure`` made
    without pyplot, which ``display(fig)`` shows only as ``<Figure size ...>``) and
    close it, so that it is shown once."""
    from IPython.display import Image, display

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=SHOW_DPI, bbox_inches="tight")
    display(Image(data=buf.getvalue(), format="png"))
    _close(fig)


def _close(fig) -> None:
    import matplotlib.pyplot as plt
    if fig.canvas.manager is not None:
        plt.close(fig)


def save(fig, stem: str, folder, formats=("pdf", "png")) -> list:
    """Write ``folder/stem.pdf`` and ``.png`` (150 dpi) atomically; returns the paths."""
    from scalable_softmax.repro.machinery.outputs import save_figure
    return save_figure(fig, stem, folder, formats=formats, dpi=SAVE_DPI)
