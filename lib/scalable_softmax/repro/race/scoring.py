"""Scoring the race: time to fixed validation targets, test reported only at them, and
family verdicts over seeds (notebooks 12 and 14).

The rules, as MLCommons AlgoPerf states them for training algorithms (Dahl et al.,
"Benchmarking Neural Network Training Algorithms"), applied to one workload (a data set,
or a number of classes K):

* **Targets are fixed before the race** from a reference validation log-loss
  (:mod:`.targets`): a level ``l`` (1%, 2%, 5%, 10%: :data:`LEVELS`) is reached when
  the validation log-loss is at most ``reference * (1 + l)`` (:func:`target_levels`).
* **Validation decides.** A run is evaluated on the validation rows at its checkpoints;
  its time to a level is the training seconds of the first checkpoint at or below the
  level's target (:func:`seconds_to_targets`). It stops at the tightest level or at the
  cap (:func:`should_stop`).
* **Test is reported, never read.** The test rows are held by a :class:`SealedTest`:
  reading them raises :class:`SealedTestError`; the only way to them is
  :meth:`SealedTest.report`, which evaluates a model at an :class:`Arrival` (the first
  checkpoint at which a level was reached, made by :class:`TargetWatch` from validation
  numbers only) and keeps the result where the race cannot see it until
  :meth:`SealedTest.release`, after the run.
* **Families, over seeds.** Per workload, level and seed, a family's time is its fastest
  method's (:func:`family_times`). A family is *first* only when its slowest seed beats
  every other family's fastest seed; otherwise the verdict is ``tie``; ``none`` when no
  method of any family reached the level (:func:`verdicts`).
* **Performance profiles** (:func:`performance_profile`): per level, the fraction of
  workloads on which a family (or method) reached the target within ``tau`` times the
  fastest family's (method's) time.

Everything here is a pure function of the numbers it is given, with no clock and no
data set: a run's recorder (:mod:`.jobs`) calls it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["LEVELS", "target_levels", "seconds_to_targets", "should_stop", "Arrival",
           "TargetWatch", "SealedTest", "SealedTestError", "family_times", "verdicts",
           "performance_profile"]

#: the target levels: reached at a validation log-loss <= reference * (1 + level)
LEVELS = (0.01, 0.02, 0.05, 0.10)


def _check_levels(levels):
    levels = tuple(float(v) for v in levels)
    if not levels or any(not (math.isfinite(v) and v >= 0) for v in levels):
        raise ValueError(f"levels must be a non-empty list of finite numbers >= 0; "
                         f"got {levels!r}")
    if len(set(levels)) != len(levels):
        raise ValueError(f"levels must be distinct; got {levels!r}")
    return levels


def target_levels(reference_val_log_loss: float, levels=LEVELS) -> dict:
    """``{level: reference * (1 + level)}``, tightest first. ValueError for a reference
    that is not a finite positive number."""
    ref = float(reference_val_log_loss)
    if not (math.isfinite(ref) and ref > 0):
        raise ValueError(f"reference_val_log_loss must be a finite number > 0; got "
                         f"{reference_val_log_loss!r} (see tables/targets.csv)")
    return {lv: ref * (1.0 + lv) for lv in sorted(_check_levels(levels))}


def seconds_to_targets(seconds, val_log_loss, targets: dict) -> dict:
    """Per level of ``targets`` (:func:`target_levels`), the training seconds of the
    first checkpoint (in order of ``seconds``) whose validation log-loss is at most the
    level's target, or NaN if none is. A non-finite log-loss (a diverged point) reaches
    nothing."""
    s = np.asarray(seconds, dtype=float)
    v = np.asarray(val_log_loss, dtype=float)
    if s.shape != v.shape or s.ndim != 1:
        raise ValueError(f"seconds and val_log_loss must be 1-d of one length; got "
                         f"{s.shape} and {v.shape}")
    if np.any(np.diff(s) < 0):
        raise ValueError("seconds must be non-decreasing (checkpoints in training order)")
    out = {}
    for lv, t in targets.items():
        hit = np.flatnonzero(np.isfinite(v) & (v <= t))
        out[lv] = float(s[hit[0]]) if len(hit) else math.nan
    return out


def should_stop(val_log_loss: float, seconds: float, targets: dict, cap: float) -> bool:
    """Whether a run stops after a checkpoint: at the tightest target or at the cap."""
    return bool(seconds >= cap or (math.isfinite(val_log_loss)
                                   and val_log_loss <= min(targets.values())))


@dataclass(frozen=True)
class Arrival:
    """The first checkpoint at which a run reached a level (made by :class:`TargetWatch`
    only): the level, its target, the training seconds and the validation log-loss."""

    level: float
    target: float
    seconds: float
    val_log_loss: float


class TargetWatch:
    """Follows one run's validation checkpoints against its targets.

    :meth:`observe` takes a checkpoint's training seconds and validation log-loss and
    returns the :class:`Arrival` of every level first reached there (tightest last), and
    :attr:`stop` says whether the run is done (:func:`should_stop`)."""

    def __init__(self, targets: dict, cap: float):
        if not targets:
            raise ValueError("targets must name at least one level")
        if not (math.isfinite(float(cap)) and cap > 0):
            raise ValueError(f"cap must be a finite number of seconds > 0; got {cap!r}")
        self.targets = dict(sorted(targets.items(), reverse=True))   # loosest first
        self.cap = float(cap)
        self.arrivals: dict = {}
        self.stop = False
        self._last = -math.inf

    def observe(self, seconds: float, val_log_loss: float) -> list:
        if seconds < self._last:
            raise ValueError(f"checkpoints must come in training order: {seconds} after "
                             f"{self._last}")
        self._last = float(seconds)
        new = []
        if math.isfinite(val_log_loss):
            for lv, t in self.targets.items():
                if lv not in self.arrivals and val_log_loss <= t:
                    a = Arrival(lv, t, float(seconds), float(val_log_loss))
                    self.arrivals[lv] = a
                    new.append(a)
        self.stop = should_stop(val_log_loss, seconds, self.targets, self.cap)
        return new


class SealedTestError(RuntimeError):
    """The race tried to read test rows before its reporting step."""


class SealedTest:
    """Test rows the race cannot read: :attr:`X` and :attr:`y` raise
    :class:`SealedTestError` until :meth:`release`. :meth:`report` evaluates a model
    on them at an :class:`Arrival` (``evaluate(X, y, model) -> log-loss``) and keeps the
    number; :meth:`release` ends the run and returns ``{level: test log-loss}``."""

    def __init__(self, X, y, evaluate):
        self._X, self._y = X, y
        self._evaluate = evaluate
        self._reports: dict = {}
        self.released = False

    def _sealed(self, what):
        raise SealedTestError(
            f"the race read the test {what} before its reporting step: test rows are "
            "evaluated only at the checkpoint where a target was first reached "
            "(SealedTest.report with an Arrival of TargetWatch), and read after release()")

    @property
    def X(self):
        if not self.released:
            self._sealed("features")
        return self._X

    @property
    def y(self):
        if not self.released:
            self._sealed("labels")
        return self._y

    def report(self, arrival: Arrival, model) -> None:
        """Evaluate ``model`` on the test rows for ``arrival``'s level (once per level)."""
        if not isinstance(arrival, Arrival):
            raise TypeError(f"report needs an Arrival of TargetWatch; got "
                            f"{type(arrival).__name__}")
        if self.released:
            raise SealedTestError("report after release: the run is over")
        if arrival.level in self._reports:
            raise ValueError(f"level {arrival.level} was already reported")
        self._reports[arrival.level] = float(self._evaluate(self._X, self._y, model))

    def release(self) -> dict:
        """End the run: ``{level: test log-loss at its arrival}``."""
        self.released = True
        return dict(self._reports)


def _time(v):
    v = float(v) if v is not None and v == v else math.inf
    return v


def family_times(rows: pd.DataFrame) -> pd.DataFrame:
    """Per ``workload``, ``level``, ``seed`` and ``family``, the fastest method's
    ``seconds_to_target`` (NaN when none of the family's methods reached it). ``rows``
    has one row per workload x method x level x seed with those columns and
    ``method``."""
    need = {"workload", "family", "method", "level", "seed", "seconds_to_target"}
    missing = need - set(rows.columns)
    if missing:
        raise ValueError(f"rows lack the columns {sorted(missing)}")
    r = rows.assign(seconds_to_target=pd.to_numeric(rows.seconds_to_target,
                                                    errors="coerce"))
    return (r.groupby(["workload", "level", "seed", "family"], sort=True)
            .seconds_to_target.min().reset_index())


def verdicts(family: pd.DataFrame) -> pd.DataFrame:
    """The verdict per ``workload`` and ``level`` from :func:`family_times`: a family's
    name when its slowest seed (a seed that missed counts as never) is faster than every
    other family's fastest seed; ``none`` when no family reached the level in any seed;
    else ``tie``. Columns ``workload``, ``level``, ``verdict``."""
    out = []
    for (w, lv), g in family.groupby(["workload", "level"], sort=True):
        t = g.assign(s=[_time(v) for v in g.seconds_to_target])
        slowest = t.groupby("family").s.max()
        fastest = t.groupby("family").s.min()
        if not np.isfinite(fastest.to_numpy()).any():
            out.append({"workload": w, "level": lv, "verdict": "none"})
            continue
        verdict = "tie"
        for fam, worst in slowest.items():
            others = fastest.drop(fam)
            if math.isfinite(worst) and (not len(others) or (worst < others).all()):
                verdict = fam
                break
        out.append({"workload": w, "level": lv, "verdict": verdict})
    return pd.DataFrame(out, columns=["workload", "level", "verdict"])


def performance_profile(times: pd.DataFrame, by: str = "family", taus=None) -> pd.DataFrame:
    """AlgoPerf's performance profile per ``level``: for each ``by`` (``family`` or
    ``method``) and ``tau``, the fraction of workloads on which its time to the target
    (the median over seeds; a median of a seed that missed counts as never) is within
    ``tau`` times the fastest one's there. ``times`` has ``workload``, ``level``,
    ``seed``, ``by`` and ``seconds_to_target``. Columns ``level``, ``by``, ``tau``,
    ``fraction``."""
    taus = np.asarray(taus if taus is not None else np.geomspace(1, 100, 41), float)
    if taus.ndim != 1 or not len(taus) or (taus < 1).any():
        raise ValueError(f"taus must be a non-empty list of numbers >= 1; got {taus!r}")
    t = times.assign(s=[_time(v) for v in times.seconds_to_target])
    med = t.groupby(["level", "workload", by]).s.median().reset_index()
    rows = []
    for lv, g in med.groupby("level", sort=True):
        n = g.workload.nunique()
        best = g.groupby("workload").s.min()
        with np.errstate(invalid="ignore"):      # inf / inf where nobody got there
            ratio = g.s.to_numpy() / best.loc[g.workload].to_numpy()
        g = g.assign(ratio=np.where(np.isfinite(g.s.to_numpy()), ratio, math.inf))
        for who, h in g.groupby(by, sort=True):
            for tau in taus:
                rows.append({"level": lv, by: who, "tau": float(tau),
                             "fraction": float((h.ratio <= tau).sum()) / n})
    return pd.DataFrame(rows, columns=["level", by, "tau", "fraction"])
