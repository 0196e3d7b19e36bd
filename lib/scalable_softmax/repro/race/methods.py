"""The race's one method registry (notebooks 12-peers and 14-crossover).

Every method the race can run is one :class:`Method` of :data:`METHODS`: the library
that runs it (``ours``, ``sklearn``, ``torch``: what :func:`available` checks and what
``isolate="library"`` groups child processes by), its family (how it computes or
estimates the softmax gradient, whoever implements it; the verdicts compare families),
its label, whether it has a learning rate to choose, its runner
(``"module:function"``, imported when a job of it runs) and, for the peers whose
options the race checks itself, their schema (:func:`scalable_softmax.validation.
check_options`; our trainers and scikit-learn check their own).

The families:

* ``double-sum``: the paper's O(D)-per-step methods on the double-sum formulation
  (U-max, Implicit SGD with one datapoint and class per step or minibatched);
* ``full-softmax``: stochastic methods on the exact softmax, O(K D) per step: our
  minibatch softmax SGD, PyTorch's SGD and Adam, scikit-learn's SAGA;
* ``full-batch``: exact full-batch methods: our L-BFGS and scikit-learn's lbfgs;
* ``sampled-softmax``: estimates of the softmax gradient from sampled classes:
  importance sampling, PyTorch's sampled softmax.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["Method", "METHODS", "RATE_METHODS", "LABELS", "FAMILIES", "TORCH_LAYOUTS",
           "family_of", "library_of", "runner_of", "available", "plan_methods"]

#: the two layouts of the full-softmax torch models (:mod:`.torch_runner`)
TORCH_LAYOUTS = ("embedding-bag", "sparse-mm")

_BATCH = (100, {"type": "int", "min": 1})
_TORCH_FULL = {"batch_size": _BATCH,
               "layout": ("auto", {"one_of": ["auto", *TORCH_LAYOUTS]})}
_RACE = "scalable_softmax.repro.race"


@dataclass(frozen=True)
class Method:
    """One method of the race (see the module's docstring)."""

    name: str
    library: str
    family: str
    label: str
    has_rate: bool
    runner: str
    options: dict | None = None


def _m(name, library, family, label, has_rate, runner, options=None):
    return Method(name, library, family, label, has_rate, f"{_RACE}.{runner}", options)


#: method -> :class:`Method`: the race's one registry
METHODS = {m.name: m for m in (
    _m("implicit", "ours", "double-sum", "Implicit SGD", True, "ours:run_ours"),
    _m("umax", "ours", "double-sum", "U-max", True, "ours:run_ours"),
    _m("is", "ours", "sampled-softmax", "IS (n chosen)", True, "ours:run_ours"),
    _m("exact", "ours", "full-batch", "L-BFGS (ours, exact)", False, "exact:run_exact"),
    _m("implicit-batch", "ours", "double-sum", "Implicit SGD (n, m chosen)", True,
       "ours:run_ours"),
    _m("implicit-batch-5", "ours", "double-sum", "Implicit SGD (n=m=5)", True,
       "ours:run_ours"),
    _m("softmax-sgd", "ours", "full-softmax", "softmax SGD (ours, full softmax)", True,
       "ours:run_ours"),
    _m("sklearn-lbfgs", "sklearn", "full-batch", "sklearn lbfgs", False,
       "sklearn_runner:run_sklearn"),
    _m("sklearn-saga", "sklearn", "full-softmax", "sklearn saga", False,
       "sklearn_runner:run_sklearn"),
    _m("torch-sgd", "torch", "full-softmax", "torch SGD (full softmax)", True,
       "torch_runner:run_torch", _TORCH_FULL),
    _m("torch-adam", "torch", "full-softmax", "torch Adam (full softmax)", True,
       "torch_runner:run_torch", _TORCH_FULL),
    _m("torch-sampled", "torch", "sampled-softmax", "torch sampled softmax (uniform)", True,
       "torch_runner:run_torch",
       {"batch_size": _BATCH, "negatives": (100, {"type": "int", "min": 1})}),
)}
#: methods with a learning rate to choose
RATE_METHODS = tuple(m for m, v in METHODS.items() if v.has_rate)
#: labels for tables and figures
LABELS = {m: v.label for m, v in METHODS.items()}
#: family -> its methods
FAMILIES = {fam: tuple(m for m, v in METHODS.items() if v.family == fam)
            for fam in ("double-sum", "full-softmax", "full-batch", "sampled-softmax")}


def _get(method: str) -> Method:
    try:
        return METHODS[method]
    except KeyError:
        raise ValueError(f"unknown method {method!r}; choose one of "
                         f"{', '.join(METHODS)}") from None


def family_of(method: str) -> str:
    """The family of ``method``; ValueError naming the known methods."""
    if method not in METHODS:
        raise ValueError(f"method {method!r} belongs to no family of the race; known: "
                         f"{list(METHODS)} (add it to "
                         "scalable_softmax.repro.race.methods.METHODS)")
    return METHODS[method].family


def library_of(method: str) -> str:
    """The library that runs ``method``: ``ours``, ``sklearn`` or ``torch``."""
    return _get(method).library


def runner_of(method: str):
    """The runner of ``method``: ``runner(job, X, y, K, rec) -> (status, reason,
    info)``, imported on first use (so that a child process imports only what it runs)."""
    module, name = _get(method).runner.split(":")
    return getattr(importlib.import_module(module), name)


def available(library: str) -> tuple[bool, str]:
    """``(True, version)`` if the methods of ``library`` can run here, else ``(False,
    reason)`` (the optional ``peers`` extra: ``pip install -e '.[peers]'``)."""
    mod = {"ours": None, "sklearn": "sklearn", "torch": "torch"}[library]
    if mod is None:
        return True, "scalable_softmax"
    import importlib.util
    try:
        found = importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return False, (f"{mod} is not installed (the optional 'peers' extra: "
                       "pip install -e '.[peers]')")
    import importlib.metadata
    return True, importlib.metadata.version("scikit-learn" if mod == "sklearn" else mod)


def plan_methods(methods, datasets, caps):
    """Check the requested ``methods`` and ``caps`` and find which methods can run here.

    Returns ``(run_methods, skipped, versions)``: the methods whose library is
    installed (in the requested order), ``{method: reason}`` for the others, and
    ``{library: versions}`` of the available libraries.

    Raises
    ------
    ValueError
        On a method not in :data:`METHODS` or a data set without a cap.
    """
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; choose from {list(METHODS)}")
    missing = [d for d in datasets if d not in caps]
    if missing:
        raise ValueError(f"caps has no entry for {missing}: give every data set a cap "
                         "in training seconds")
    skipped, versions = {}, {}
    for library in ("ours", "sklearn", "torch"):
        ok, what = available(library)
        if ok:
            versions[library] = what
        else:
            skipped.update({m: what for m in methods if METHODS[m].library == library})
    return [m for m in methods if m not in skipped], skipped, versions
