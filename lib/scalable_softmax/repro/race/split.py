"""The race's validation split, carved from the training data.

Every workload of notebooks 12 and 14 is split once, the same way for every method and
seed: a fraction ``fraction`` (:data:`VALIDATION_FRACTION`) of the training rows, drawn
by a permutation of ``numpy.random.default_rng([split_seed, SPLIT_STREAM])``, becomes
the validation set; the rest is what every method trains on. Targets (:mod:`.targets`),
tuning and the time to each target are read on the validation rows; the test split of
the data set is never among them (:func:`race_problem` hands it over sealed,
:class:`~.scoring.SealedTest`).

The split depends on the number of training rows, ``fraction`` and ``split_seed`` only:
not on the race's seed (which varies the order, sampling and initial state of a run), so
that the seeds of a race are scored on the same rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["VALIDATION_FRACTION", "SPLIT_STREAM", "validation_split", "RaceProblem",
           "race_problem"]

#: the share of the training rows held out for validation
VALIDATION_FRACTION = 0.1
#: the second word of the split's random stream (the first is ``split_seed``): a stream
#: of its own, apart from every other seeded draw of the collection
SPLIT_STREAM = 56


def validation_split(n_rows: int, fraction: float = VALIDATION_FRACTION,
                     split_seed: int = 0):
    """``(fit_rows, val_rows)``: disjoint sorted row indices covering ``range(n_rows)``,
    ``val_rows`` of ``round(fraction * n_rows)`` rows (at least 1, at most
    ``n_rows - 1``)."""
    if not (isinstance(n_rows, (int, np.integer)) and n_rows >= 2):
        raise ValueError(f"n_rows must be an integer >= 2 (a validation row and a training "
                         f"row); got {n_rows!r}")
    if not (isinstance(fraction, (int, float)) and 0 < fraction < 1):
        raise ValueError(f"fraction must lie in (0, 1); got {fraction!r}")
    if not (isinstance(split_seed, (int, np.integer)) and split_seed >= 0):
        raise ValueError(f"split_seed must be an integer >= 0; got {split_seed!r}")
    perm = np.random.default_rng([int(split_seed), SPLIT_STREAM]).permutation(int(n_rows))
    n_val = min(int(n_rows) - 1, max(1, int(round(fraction * n_rows))))
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


@dataclass
class RaceProblem:
    """One workload as the race sees it: the rows to train on, the validation rows
    (``val``: ``(X, y)``), the sealed test rows and the number of classes."""

    X: object
    y: np.ndarray
    val: tuple
    test: object
    K: int


def race_problem(X, y, Xt, yt, K, *, fraction=VALIDATION_FRACTION, split_seed=0,
                 evaluate=None) -> RaceProblem:
    """Split a data set's training rows (:func:`validation_split`) and seal its test
    rows (:class:`~.scoring.SealedTest`, evaluated by ``evaluate(X, y, W) -> log-loss``;
    default: the library's exact log-loss)."""
    from scalable_softmax.repro.race.scoring import SealedTest

    if evaluate is None:
        def evaluate(X, y, W):
            from scalable_softmax.evaluate import evaluate as ev
            return ev(X, y, W).log_loss

    y = np.asarray(y)
    if X.shape[0] != len(y):
        raise ValueError(f"X has {X.shape[0]} rows but y has {len(y)} labels")
    fit, val = validation_split(X.shape[0], fraction, split_seed)
    return RaceProblem(X[fit], y[fit], (X[val], y[val]), SealedTest(Xt, np.asarray(yt),
                                                                    evaluate), int(K))
