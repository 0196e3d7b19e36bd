"""Summaries of many runs for the experiment notebooks (02, 06): per-seed results to
per-configuration tables, the paper's Table 3 (log-loss relative to Implicit SGD) and
learning curves with their spread over seeds.

Everything works on :func:`scalable_softmax.experiments.results_frame` and
:func:`~scalable_softmax.experiments.histories_frame` output (one row per run / per
monitored epoch of a run).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["METHOD_LABELS", "summarise_runs", "relative_table", "ratio_table_md",
           "ratio_bars", "curve_bands", "plot_curves"]

#: the paper's column names
METHOD_LABELS = {"ove": "OVE", "nce": "NCE", "is": "IS", "vanilla": "Vanilla",
                 "umax": "U-max", "implicit": "Implicit"}

_FINAL = ("train_log_loss", "test_log_loss", "train_error", "test_error",
          "train_defective", "test_defective", "seconds_per_epoch")


def summarise_runs(runs: pd.DataFrame, keys=("dataset", "method", "lr")) -> pd.DataFrame:
    """Mean, standard deviation, min and max over seeds of the final metrics.

    A configuration with a diverged seed gets ``inf`` as its mean log-loss (its finite
    seeds are not averaged on their own: that would hide the divergence) and
    ``diverged_seeds`` counts them.
    """
    keys = list(keys)
    missing = [k for k in keys + ["seed", "diverged"] if k not in runs]
    if missing:
        raise ValueError(f"runs lacks column(s) {missing}; pass experiments.results_frame()")
    rows = []
    for key, g in runs.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(keys, key))
        row["seeds"] = int(len(g))
        row["diverged_seeds"] = int(g.diverged.sum())
        for col in _FINAL:
            if col not in g:
                continue
            v = g[col].to_numpy(dtype=float)
            with np.errstate(invalid="ignore"):
                row[f"{col}_mean"] = float(np.mean(v))
                row[f"{col}_std"] = float(np.std(v, ddof=1)) if len(v) > 1 and \
                    np.all(np.isfinite(v)) else (0.0 if len(v) == 1 else math.nan)
                row[f"{col}_min"] = float(np.min(v))
                row[f"{col}_max"] = float(np.max(v))
        rows.append(row)
    return pd.DataFrame(rows)


def relative_table(values: pd.DataFrame, column: str, reference: str = "implicit",
                   index: str = "dataset", columns: str = "method") -> pd.DataFrame:
    """Pivot ``column`` to ``index x columns`` and divide every row by its
    ``reference`` column (the paper's Table 3 divides by Implicit SGD), with an
    ``Average`` row (mean over the data sets, as the paper's). Infinite entries stay
    infinite; a missing or non-finite reference gives NaN for the row."""
    wide = values.pivot(index=index, columns=columns, values=column)
    if reference not in wide:
        raise ValueError(f"no {reference!r} column to divide by; columns: {list(wide)}")
    ref = wide[reference].where(np.isfinite(wide[reference]) & (wide[reference] > 0))
    rel = wide.div(ref, axis=0)
    rel.loc["Average"] = rel.mean(axis=0)
    return rel


def ratio_table_md(table: pd.DataFrame, title: str, label=None) -> str:
    """A :func:`relative_table` (rows: data sets and ``Average``; columns: methods) as a
    Markdown table under a bold ``title``, two decimals, the lowest value of each data-set
    row in bold (missing values shown as ``-``). ``label`` maps a data-set name to its shown name (default: unchanged)."""
    label = label or (lambda d: d)
    if "Average" not in table.index:
        raise ValueError("table has no 'Average' row; pass relative_table() output")
    rows = table.drop(index="Average").astype(float)
    rows = rows[rows.notna().any(axis=1)]          # a row without values has no best
    best = rows.idxmin(axis=1)
    body = ["| data set | " + " | ".join(METHOD_LABELS.get(m, m) for m in table.columns) + " |",
            "|---|" + "---|" * len(table.columns)]
    for d, row in table.iterrows():
        cells = ["-" if not np.isfinite(v) and not np.isinf(v) else
                 f"**{v:.2f}**" if d != "Average" and m == best.get(d) else f"{v:.2f}"
                 for m, v in row.items()]
        body.append(f"| {label(d) if d != 'Average' else d} | " + " | ".join(cells) + " |")
    return f"**{title}** (lowest per data set in bold)\n\n" + "\n".join(body)


def ratio_bars(axes, rows, methods, series, label=None):
    """One panel per entry of ``rows`` (data sets and ``Average``): grouped bars of each
    ``(name, table, colour)`` in ``series`` (tables as :func:`relative_table`), log scale,
    a line at 1 (Implicit SGD's level). Non-finite values are left out."""
    label = label or (lambda d: d)
    xs = np.arange(len(methods))
    width = 0.81 / len(series)
    for ax, d in zip(axes, rows):
        for k, (name, t, colour) in enumerate(series):
            v = t.loc[d, methods].to_numpy(dtype=float)
            ax.bar(xs + (k - (len(series) - 1) / 2) * width, np.where(np.isfinite(v), v, np.nan),
                   width, color=colour, label=name)
        ax.axhline(1, color="k", lw=0.6)
        ax.set_xticks(xs, [METHOD_LABELS.get(m, m) for m in methods], rotation=60, fontsize=7)
        ax.set_title(label(d) if d != "Average" else d, fontsize=8)
        ax.set_yscale("log")


def curve_bands(hist: pd.DataFrame, metric: str = "train_log_loss",
                keys=("dataset", "method", "lr")) -> pd.DataFrame:
    """Mean, min and max of ``metric`` over seeds at each monitored epoch (the epochs
    after a seed diverged are dropped for that seed; ``seeds`` counts who is left)."""
    keys = list(keys)
    h = hist[np.isfinite(hist[metric].to_numpy(dtype=float))]
    g = h.groupby(keys + ["epoch"], sort=False)[metric]
    out = g.agg(["mean", "min", "max", "count"]).reset_index()
    return out.rename(columns={"count": "seeds"})


def plot_curves(ax, bands: pd.DataFrame, dataset: str, methods, lr_of=None,
                log_y: bool = True, colors=None):
    """One line (mean over seeds) and a shaded min-max band per method on ``ax``."""
    colors = colors or {m: f"C{i}" for i, m in enumerate(METHOD_LABELS)}
    for m in methods:
        part = bands[(bands.dataset == dataset) & (bands.method == m)]
        if lr_of is not None:
            part = part[part.lr == lr_of[m]]
        if part.empty:
            continue
        part = part.sort_values("epoch")
        lab = METHOD_LABELS.get(m, m)
        if lr_of is not None:
            lab += f" ({lr_of[m]:g})"
        ax.plot(part.epoch, part["mean"], color=colors.get(m), label=lab, lw=1.5)
        ax.fill_between(part.epoch, part["min"], part["max"], color=colors.get(m),
                        alpha=0.2, lw=0)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("epoch")
    return ax
