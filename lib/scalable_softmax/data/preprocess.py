"""The paper's data conventions (docs/math.md section 9; Fagan & Iyengar 2018, section 4.1).

Applied to a raw split (:class:`~scalable_softmax.data.readers.LabelledData`) in this
order; every point removed is counted under the reason of the first step that removes
it:

1. **first label**: each point keeps the first label of its entry in the file; points
   with no label are dropped (``"no_label"``).
2. **at most ``max_points`` points**: the first ``max_points`` labelled points in file
   order are kept (``"beyond_max_points"``).
3. **at most ``max_features`` features**: on the train split, if the dimension ``D0``
   exceeds ``max_features``, the ``max_features`` features with the largest document
   frequency (number of kept train points in which they are non-zero; ties to the
   smaller original index) are kept, in their original order; otherwise all ``D0``
   columns are kept (so MNIST keeps its 784 pixels, some always zero). The test split
   uses the train split's choice.
4. **drop points left with no non-zero feature** (``"no_nonzero_feature"``).
5. **relabel** the classes present in the (kept) train split to ``0..K-1`` in increasing
   order of their original label id; test points whose label never occurs there are
   dropped (``"label_unseen_in_train"``).
6. **unit L2 rows** (``normalize=True``).

The output matrix is canonical CSR float64 (sorted indices, no duplicates, no explicit
zeros).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .readers import LabelledData

__all__ = ["DROP_REASONS", "TrainState", "select_features", "normalize_rows",
           "apply_conventions", "canonical"]

#: keys of ``Dataset.dropped``, in pipeline order
DROP_REASONS = ("no_label", "beyond_max_points", "no_nonzero_feature",
                "label_unseen_in_train")


@dataclass
class TrainState:
    """What the test split borrows from the train split."""

    feature_index: np.ndarray  # original column of each kept feature (sorted)
    classes: np.ndarray        # original label id of each class 0..K-1 (sorted)


def canonical(X) -> sp.csr_matrix:
    """``X`` as canonical CSR float64: sorted indices, no duplicates, no explicit zeros."""
    X = sp.csr_matrix(X, dtype=np.float64, copy=True)
    X.sum_duplicates()
    X.eliminate_zeros()
    X.sort_indices()
    return X


def select_features(X, max_features: int | None) -> np.ndarray:
    """Original indices of the features to keep (sorted).

    All ``X.shape[1]`` columns if ``max_features`` is ``None`` or not smaller than the
    dimension; otherwise the ``max_features`` columns with the largest document
    frequency (count of rows where the entry is non-zero), ties broken by the smaller
    index.

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> X = sp.csr_matrix([[1, 0, 2, 0], [0, 0, 3, 1], [0, 5, 1, 0]], dtype=float)
    >>> select_features(X, 2)
    array([0, 2])
    """
    D0 = X.shape[1]
    if max_features is None or D0 <= max_features:
        return np.arange(D0, dtype=np.int64)
    if max_features < 1:
        raise ValueError(f"max_features must be >= 1 or None, got {max_features}")
    Xc = canonical(X)
    # O(nnz + max_features), never O(D0): a header may declare a huge D
    used, df = np.unique(Xc.indices.astype(np.int64), return_counts=True)
    order = np.lexsort((used, -df))  # by -df, then by index
    keep = used[order[:max_features]]
    short = max_features - keep.size
    if short > 0:  # columns without a non-zero, smallest index first
        cand = np.arange(used.size + short, dtype=np.int64)
        keep = np.concatenate([keep, cand[~np.isin(cand, used)][:short]])
    return np.sort(keep).astype(np.int64)


def normalize_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    """Scale every non-empty row of a CSR matrix to unit L2 norm (returns a copy)."""
    X = X.copy()
    counts = np.diff(X.indptr)
    rows = np.repeat(np.arange(X.shape[0]), counts)
    sq = np.bincount(rows, weights=X.data ** 2, minlength=X.shape[0])
    sq = np.where(sq > 0, sq, 1.0)
    X.data /= np.repeat(np.sqrt(sq), counts)
    return X


def _take_columns(X: sp.csr_matrix, feature_index: np.ndarray) -> sp.csr_matrix:
    D0 = X.shape[1]
    need = int(feature_index.max()) + 1 if feature_index.size else 0
    if need > D0:  # test file declaring fewer columns than train: the rest are zero
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], need))
    if feature_index.size == D0 and np.array_equal(feature_index, np.arange(D0)):
        return X
    # the kept columns by a search of the (sorted, distinct) feature_index: O(nnz log F)
    # memory O(nnz), where scipy's column indexing allocates O(D0)
    X = sp.csr_matrix(X)
    X.sort_indices()
    pos = np.searchsorted(feature_index, X.indices)
    hit = pos < feature_index.size
    hit[hit] = feature_index[pos[hit]] == X.indices[hit]
    kept_before = np.zeros(X.nnz + 1, dtype=np.int64)
    np.cumsum(hit, out=kept_before[1:])
    indptr = kept_before[X.indptr]
    out = sp.csr_matrix((X.data[hit], pos[hit], indptr),
                        shape=(X.shape[0], feature_index.size))
    out.sort_indices()
    return out


def apply_conventions(raw: LabelledData, *, train_state: TrainState | None = None,
                      max_features: int | None = 10_000, max_points: int | None = 100_000,
                      normalize: bool = True):
    """Apply the paper's conventions to one raw split.

    Parameters
    ----------
    raw : LabelledData
        As returned by a reader.
    train_state : TrainState, optional
        ``None`` for the train split (features and classes are chosen here); the train
        split's state for a test split.
    max_features, max_points : int or None
        Caps (``None``: no cap).
    normalize : bool
        Unit L2 rows.

    Returns
    -------
    X : scipy.sparse.csr_matrix
    y : ndarray of int64
    state : TrainState
    dropped : dict
        Reason -> number of points (every key of :data:`DROP_REASONS`).
    kept_lines : ndarray
        Line (record) numbers of the kept points in the file.
    """
    if max_points is not None and max_points < 1:
        raise ValueError(f"max_points must be >= 1 or None, got {max_points}")
    dropped = dict.fromkeys(DROP_REASONS, 0)
    has = raw.has_label()                  # "no label" is the mask, never a value
    first = raw.first_labels().filled(0)
    dropped["no_label"] = int((~has).sum()) + int(raw.tail_no_label)
    rows = np.flatnonzero(has)
    dropped["beyond_max_points"] = int(raw.tail_labelled)
    if max_points is not None and rows.size > max_points:
        dropped["beyond_max_points"] += int(rows.size - max_points)
        rows = rows[:max_points]
    X = canonical(raw.X[rows])
    first = first[rows]
    lines = raw.lines[rows]
    if train_state is None:
        feature_index = select_features(X, max_features)
    else:
        feature_index = train_state.feature_index
    X = _take_columns(X, feature_index)
    X.eliminate_zeros()
    nonempty = np.diff(X.indptr) > 0
    dropped["no_nonzero_feature"] = int((~nonempty).sum())
    X, first, lines = X[nonempty], first[nonempty], lines[nonempty]
    if train_state is None:
        classes = np.unique(first).astype(np.int64)
    else:
        classes = train_state.classes
        known = np.isin(first, classes)
        dropped["label_unseen_in_train"] = int((~known).sum())
        X, first, lines = X[known], first[known], lines[known]
    y = np.searchsorted(classes, first).astype(np.int64)
    X = canonical(X)
    if normalize:
        X = normalize_rows(X)
    return X, y, TrainState(feature_index, classes), dropped, lines
