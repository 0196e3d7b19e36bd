"""How the race names a workload on a page; the families of its methods are the
registry's (:data:`.methods.FAMILIES`, :func:`.methods.family_of`, re-exported here).
"""
from __future__ import annotations

from scalable_softmax.repro.race.methods import FAMILIES, family_of

__all__ = ["FAMILIES", "WORKLOAD_NAMES", "workload_label", "family_of"]


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
