"""20 Newsgroups as the One-vs-Each paper used it (Titsias 2016, Tables 1 and 2).

The paper's 20NEWS has ``D = 61,188`` words, 11,269 training and 7,505 test documents:
Jason Rennie's Matlab bag of words of the "bydate" corpus (message bodies only, the
headers skipped, raw word counts). That copy is not in the data mirror, only the raw
corpus (``20newsgroups/20news-bydate.tar.gz``), so :func:`ove_newsgroups` rebuilds it
the same way:

* **body only**: each post is cut at its first blank line (:func:`strip_header`), so
  the ``From:``, ``Subject:``, ``Organization:``, ``Lines:`` ... header lines are not
  tokenised;
* **raw counts**: ``X[i, j]`` = number of times word ``j`` occurs in body ``i`` (no
  scaling, no tf-idf, no unit rows);
* **the 61,188 most frequent training words** (by document frequency on the kept
  training bodies, ties to the alphabetically smaller word), tokenised by
  :func:`scalable_softmax.data.tokenize` (lower case, runs of two or more word
  characters); the test split uses the training vocabulary;
* documents whose body has none of those words are dropped (train 21, test 16 of the
  11,314 / 7,532 posts: 11,293 / 7,516 remain, against the paper's 11,269 / 7,505;
  Rennie's tokeniser ("rainbow") skipped a few more documents, which are not listed
  anywhere we can check, so the two sets cannot be aligned document by document);
* a **bias column** of ones appended last (the paper's model has ``K (D + 1)``
  parameters).

``variant="headers-unit-l2"`` is this project's earlier preparation (whole posts,
headers included, each row scaled to unit L2 norm, same vocabulary size and bias),
kept for the sensitivity comparison of notebook 10.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .core import load_dataset

__all__ = ["PAPER_SHAPE", "VARIANTS", "NewsData", "strip_header", "ove_newsgroups"]

#: Titsias (2016) Table 1, 20NEWS: (train documents, test documents, D, K)
PAPER_SHAPE = (11269, 7505, 61188, 20)

#: variant -> options of :func:`~scalable_softmax.data.load_dataset`
VARIANTS = {
    "body-counts": {"strip_headers": True, "normalize": False},
    "headers-unit-l2": {"strip_headers": False, "normalize": True},
}


def strip_header(text: str) -> str:
    """The body of a news post: everything after the first blank line (``"\\n\\n"``);
    the whole text when there is no blank line.

    >>> strip_header("From: a@b\\nSubject: moon\\n\\nThe moon.\\n\\nBye")
    'The moon.\\n\\nBye'
    """
    head, sep, body = text.partition("\n\n")
    return body if sep else text


@dataclass
class NewsData:
    """One split of :func:`ove_newsgroups`.

    Attributes
    ----------
    X : csr_matrix (N, D + bias), float64; raw counts (``"body-counts"``) or unit rows
        (``"headers-unit-l2"``), then the bias column of ones if ``bias``.
    y : ndarray (N,) int64, labels ``0..19`` (newsgroups in alphabetical order).
    K : int, number of classes (20).
    vocabulary_size : int, ``D`` (words kept).
    bias : bool, whether the last column is the constant 1.
    documents : dict, ``posts`` (in the corpus), ``dropped_empty`` (no kept word),
        ``kept``.
    class_names : list of str
    variant : str
    """

    X: sp.csr_matrix
    y: np.ndarray
    K: int
    vocabulary_size: int
    bias: bool
    documents: dict
    class_names: list
    variant: str
    info: dict = field(default_factory=dict)


def ove_newsgroups(split: str = "train", *, variant: str = "body-counts",
                   vocabulary_size: int = PAPER_SHAPE[2], bias: bool = True,
                   data_dir=None, cache_dir=None, cache: bool = True,
                   verify: bool = True) -> NewsData:
    """20 Newsgroups prepared as in the One-vs-Each paper (module docstring).

    Parameters
    ----------
    split : ``"train"`` or ``"test"`` (the test split uses the training vocabulary).
    variant : ``"body-counts"`` (the paper's) or ``"headers-unit-l2"`` (sensitivity).
    vocabulary_size : number of most frequent training words kept (default 61,188).
    bias : append a constant-1 column.
    data_dir, cache_dir, cache, verify : as in
        :func:`~scalable_softmax.data.load_dataset`.

    Returns
    -------
    NewsData

    Raises
    ------
    ValueError
        Unknown ``variant`` or a ``vocabulary_size`` that is not a positive integer.
    MissingDataError, ChecksumError, DataFormatError
        From :func:`~scalable_softmax.data.load_dataset` (the corpus is missing, does
        not match its checksum, or is not a "bydate" tarball).
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}; got {variant!r}")
    if (isinstance(vocabulary_size, bool) or not isinstance(vocabulary_size, (int, np.integer))
            or vocabulary_size < 1):
        raise ValueError(f"vocabulary_size must be a positive integer; got {vocabulary_size!r}")
    opts = VARIANTS[variant]
    ds = load_dataset("20news", split, max_features=int(vocabulary_size), max_points=None,
                      normalize=opts["normalize"], strip_headers=opts["strip_headers"],
                      data_dir=data_dir, cache_dir=cache_dir, cache=cache, verify=verify)
    X = sp.csr_matrix(ds.X, dtype=np.float64)
    if bias:
        X = sp.hstack([X, np.ones((X.shape[0], 1))], format="csr")
        X.sort_indices()
    posts = int(ds.original["N"])
    dropped = int(sum(ds.dropped.values()))
    return NewsData(
        X=X, y=np.asarray(ds.y, dtype=np.int64), K=int(ds.K),
        vocabulary_size=int(ds.X.shape[1]), bias=bool(bias),
        documents={"posts": posts, "dropped_empty": int(ds.dropped["no_nonzero_feature"]),
                   "kept": posts - dropped},
        class_names=[str(c) for c in ds.class_names], variant=variant,
        info={"words_in_training_bodies": ds.info.get("vocabulary_size_train"),
              "tokenizer": ds.info.get("tokenizer"), "cache_file": ds.info.get("cache_file")})
