"""The race's methods by family, and how a workload is named on a page.

A family is a way of computing (or estimating) the softmax gradient, whoever implements
it:

* ``double-sum``: the paper's O(D)-per-step methods on the double-sum formulation
  (vanilla SGD, U-max, Implicit SGD with one datapoint and class per step or minibatched,
  and Raman et al.'s double sum);
* ``full-softmax``: stochastic methods on the exact softmax, O(K D) per step: our
  minibatch softmax SGD, PyTorch's SGD and Adam, scikit-learn's SAGA;
* ``full-batch``: exact full-batch methods: our L-BFGS and scikit-learn's lbfgs;
* ``sampled-softmax``: estimates of the softmax gradient from sampled classes:
  importance sampling, NCE, one-vs-each, PyTorch's sampled softmax.

"""
from __future__ import annotations

__all__ = ["FAMILIES", "WORKLOAD_NAMES", "workload_label", "family_of"]

#: family -> its methods (the race's method names)
FAMILIES = {
    "double-sum": ("vanilla", "umax", "implicit", "implicit-batch", "implicit-batch-5",
                   "raman"),
    "full-softmax": ("softmax-sgd", "torch-sgd", "torch-adam", "sklearn-saga"),
    "full-batch": ("exact", "sklearn-lbfgs"),
    "sampled-softmax": ("is", "nce", "ove", "torch-sampled"),
}


def family_of(method: str) -> str:
    """The family of ``method`` (:data:`FAMILIES`); ValueError naming the known ones."""
    for fam, ms in FAMILIES.items():
        if method in ms:
            return fam
    raise ValueError(f"method {method!r} belongs to no family of the race; known: "
                     f"{[m for ms in FAMILIES.values() for m in ms]} (add it to "
                     "scalable_softmax.repro.race.families.FAMILIES)")


#: how the pages name notebook 12's data sets (notebook 14's workloads are K values)
WORKLOAD_NAMES = {"bibtex": "Bibtex", "delicious": "Delicious",
                  "eurlex-surrogate": "Eurlex surrogate (SYNTHETIC)",
                  "wikismall-surrogate": "Wiki-small surrogate (SYNTHETIC)",
                  "20news-words": "`20news-words`"}


def workload_label(w) -> str:
    """A workload as the pages name it: a data set of notebook 12 by
    :data:`WORKLOAD_NAMES`, a K of notebook 14 as ``K = 1,000``, anything else as is."""
    w = str(w)
    return WORKLOAD_NAMES.get(w) or (f"K = {int(w):,}" if w.isdigit() else w)
