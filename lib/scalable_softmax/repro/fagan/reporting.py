"""Summaries of many runs for the experiment notebooks (02, 06): per-seed results to
per-configuration tables, the paper's Table 3 (log-loss relative to Implicit SGD) and
learning curves with their spread over seeds.

Everything works on :func:`scalable_softmax.repro.machinery.runs.results_frame` and
:func:`~scalable_softmax.repro.machinery.runs.histories_frame` output (one row per run / per
monitored epoch of a run).
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["METHOD_LABELS", "summarise_runs", "relative_table", "ratio_table_md",
           "ratio_dots", "curve_bands", "plot_curves", "Findings", "finding"]

#: the paper's column names (tables; figures use
#: :func:`scalable_softmax.repro.machinery.style.label`)
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
    row in bold (missing values shown as ``-``). ``label`` maps a data-set name to its shown name
    (default: unchanged)."""
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


def ratio_dots(axes, rows, methods, series, label=None):
    """One panel per entry of ``rows`` (data sets and ``Average``): for each method, a
    marker per ``(name, table, colour, marker)`` of ``series`` (tables as
    :func:`relative_table`; the marker may be left out), side by side, on a log scale
    with a line at 1 (Implicit SGD's level). Ratios span decades, so they are drawn as
    points, not as bars (a bar on a log axis has no meaningful length). Non-finite
    values are left out. The method names under each panel take the method's colour."""
    from scalable_softmax.repro.machinery import style

    label = label or (lambda d: d)
    xs = np.arange(len(methods))
    span = 0.7
    step = span / max(len(series), 1)
    shapes = ["o", "D", "s", "^", "v", "P", "X", "h"]
    for ax, d in zip(axes, rows):
        for k, ser in enumerate(series):
            name, t, colour = ser[:3]
            mk = ser[3] if len(ser) > 3 else shapes[k % len(shapes)]
            v = t.loc[d, methods].to_numpy(dtype=float) if d in t.index else \
                np.full(len(methods), np.nan)
            ok = np.isfinite(v) & (v > 0)
            ax.plot(xs[ok] + (k - (len(series) - 1) / 2) * step, v[ok], ls="none",
                    marker=mk, color=colour, ms=5, mec="white" if mk not in "x+" else None,
                    mew=0.4, label=name)
        ax.axhline(1, color="0.3", lw=0.8, zorder=0)
        for x in xs[:-1]:
            ax.axvline(x + 0.5, color="0.9", lw=0.6, zorder=0)
        ax.set_xticks(xs, [style.label(m) for m in methods], rotation=45, ha="right",
                      rotation_mode="anchor")
        for tick, m in zip(ax.get_xticklabels(), methods):
            tick.set_color(style.text_color(m))
        ax.grid(False, axis="x")
        ax.set_xlim(-0.5, len(methods) - 0.5)
        ax.set_title(label(d) if d != "Average" else "Average over the data sets")
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
    """One line (mean over seeds) and a shaded min-max band per method on ``ax``, in the
    collection's style (:mod:`scalable_softmax.repro.machinery.style`: colours, markers,
    names); with ``lr_of`` the label carries each method's rate, ``"Implicit SGD (η₀ = 0.1)"``."""
    from scalable_softmax.repro.machinery import style

    for m in style.ordered(methods):
        part = bands[(bands.dataset == dataset) & (bands.method == m)]
        if lr_of is not None:
            part = part[part.lr == lr_of[m]]
        if part.empty:
            continue
        part = part.sort_values("epoch")
        lab = style.label(m)
        if lr_of is not None:
            lab += f" (η₀ = {lr_of[m]:g})"
        c = (colors or {}).get(m, style.color(m))
        ax.plot(part.epoch, part["mean"], color=c, label=lab, marker=style.marker(m),
                markevery=max(1, len(part) // 6), ms=3.5, lw=1.4)
        ax.fill_between(part.epoch, part["min"], part["max"], color=c, alpha=0.18, lw=0)
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel("epoch")
    return ax


class Findings:
    """Checks of a notebook's findings, strict only under the profile they were written for.

    A notebook's findings (what its "What we found" section says: "Implicit SGD never
    diverges", "the OVE bound is the tighter one") hold for the committed settings, not
    for every setting a reader may try. ``findings(condition, message)`` asserts the
    condition when the run uses a committed profile (``profile`` in ``strict_under``:
    by default ``full`` and ``smoke``, the settings the notebook's tests and figures
    were made with); under any other parameters it prints "finding does not hold under
    these parameters: ..." instead of stopping the notebook. Invariants that must hold
    whatever the parameters (shapes, files written, a bound that is a theorem) stay
    plain ``assert`` statements.

    ``under`` restricts one finding to some profiles (e.g. ``under="full"`` for a
    number that only the full run reaches); elsewhere it is reported, not asserted.
    """

    def __init__(self, profile, strict_under=("full", "smoke")):
        self.profile = profile
        self.strict_under = tuple(strict_under)
        self.checked: list[tuple[str, bool]] = []

    def strict(self, under=None) -> bool:
        under = self.strict_under if under is None else \
            ((under,) if isinstance(under, str) else tuple(under))
        return self.profile is not None and self.profile in under

    def __call__(self, condition, message: str, under=None) -> bool:
        ok = bool(np.all(condition))
        self.checked.append((message, ok))
        if ok:
            return True
        if self.strict(under):
            raise AssertionError(f"finding does not hold under the committed "
                                 f"{self.profile} profile: {message}")
        print(f"finding does not hold under these parameters: {message}")
        return False

    def summary(self) -> str:
        """One line: how many findings were checked and which did not hold."""
        bad = [m for m, ok in self.checked if not ok]
        text = f"findings: {len(self.checked)} checked, {len(self.checked) - len(bad)} hold"
        if bad:
            text += "; not holding here: " + "; ".join(bad)
        print(text)
        return text


def finding(condition, message: str, strict: bool = True) -> bool:
    """Assert a finding (``strict``) or print that it does not hold (not ``strict``);
    returns whether it holds. See :class:`Findings`, which decides ``strict`` from the
    run's profile."""
    f = Findings("full" if strict else None)
    return f(condition, message)


def seed_verdict(ok, ok_seeds, pooled=False):
    """``(verdict, seeds)`` of a claim judged on the means (``ok``: True, False or None
    for not judged) and on each seed alone (``ok_seeds``). ``confirmed`` or ``not
    confirmed`` when every seed agrees with the means, else ``inconclusive (k of n
    seeds)``; ``seeds`` says how many seeds support the claim (``"3 of 3 seeds"``).
    ``pooled``: a claim about every run (no run diverges), which one counterexample in
    any seed refutes: its verdict is the pooled one, the seeds only counted."""
    judged = [o for o in ok_seeds if o is not None]
    n, k = len(judged), sum(bool(o) for o in judged)
    support = f"{k} of {n} seeds" if n else "-"
    if ok is None:
        return "not judged", support
    if pooled or (k == n if ok else k == 0):
        return ("confirmed" if ok else "not confirmed"), support
    return f"inconclusive ({k} of {n} seeds)", support


def seed_claim(claim: str, paper: str, ours: str, ok, ok_seeds, pooled: bool = False,
               **where) -> dict:
    """One row of a claims table of one protocol (notebooks 01, 04 and 05): the claim,
    the ``where`` columns that tell its rows apart (``dataset``), the paper's words or
    number, ours (the numbers of the means or of the pooled runs), the verdict of
    :func:`seed_verdict` on ``ok`` and each seed's ``ok_seeds``, and the seeds that
    support it (``"3 of 3 seeds"``), as ``scalable_softmax.repro.machinery.numbers`` reads them."""
    verdict, support = seed_verdict(ok, list(ok_seeds), pooled=pooled)
    return {"claim": claim, **where, "paper": paper, "ours": ours, "verdict": verdict,
            "seeds": support}
