"""``20news-words``: next-word prediction on the 20 Newsgroups bodies, a real data set
with ``K = 10,000`` classes (not one of the paper's; see ``data/README.md``).

Built from the "bydate" corpus already in the data directory
(``20newsgroups/20news-bydate.tar.gz``):

* **bodies only**: each post is cut at its first blank line
  (:func:`scalable_softmax.data.newsgroups.strip_header`) and tokenised by
  :func:`scalable_softmax.data.tokenize` (lower case, runs of two or more word
  characters); the posts are read in the corpus' order (newsgroup, then message number);
* **classes**: the ``classes`` (10,000) most frequent words of the training bodies
  (token counts; ties to the alphabetically smaller word); class ``k`` is the word of
  rank ``k``, so ``K = classes`` whether or not every class is drawn;
* **points**: every position of a body whose word is a class and which has at least one
  feature word among the ``context`` (5) words before it in the same body (a context
  never crosses from one post to the next);
* **features**: the bag (counts) of those previous words over the ``max_features``
  (10,000) most frequent training words (the same ranking, so feature ``j`` is the word of
  rank ``j``); words outside it are skipped; rows scaled to unit L2 norm (the paper's
  preprocessing) when ``normalize``;
* **sampling**: ``max_points`` points of each split drawn uniformly without replacement
  (seeded by ``seed`` and the split, so train and test draws are independent and the
  same on every machine), kept in corpus order; the test split uses the training
  classes and vocabulary.

No class needs capping: the most frequent word ("the") is about 5% of the eligible
positions. One quirk of the corpus is kept as it is: a few posts carry uuencoded
binaries whose lines start with ``M`` and contain ``ax`` runs, which makes ``ax`` the
fourth most frequent "word" (about 2% of the points, trivially predictable).
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import scipy.sparse as sp

from .preprocess import normalize_rows
from .readers import read_20newsgroups, tokenize

__all__ = ["DEFAULTS", "build_split", "corpus_tokens"]

#: the options of ``load_dataset("20news-words", ...)`` and their defaults
DEFAULTS = {"classes": 10_000, "context": 5, "seed": 0}

_MEMO: dict = {}  # the tokenised corpus of the last tarball read in this process


def _strip_header(text: str) -> str:
    head, sep, body = text.partition("\n\n")
    return body if sep else text


def corpus_tokens(tar_path) -> dict:
    """The tokenised bodies of both splits of the tarball ``tar_path`` and the training
    word ranking, memoised per file (path, size, mtime).

    Returns
    -------
    dict
        ``ranking`` (list of str: training words by decreasing count, ties
        alphabetical), ``counts`` (ndarray int64, aligned), and for ``"train"`` /
        ``"test"``: ``{"ids": int64 training rank of each token (test words unseen in
        train get ``len(ranking)``), "doc_start": int64 index of the first token of each
        token's post, "posts": number of posts}``.
    """
    st = tar_path.stat()
    key = (str(tar_path), st.st_size, st.st_mtime_ns)
    if _MEMO.get("key") == key:
        return _MEMO["value"]
    corpus = read_20newsgroups(tar_path)
    toks = {s: [tokenize(_strip_header(t)) for t in corpus[s].texts] for s in corpus}
    counts = Counter(w for doc in toks["train"] for w in doc)
    ranking = sorted(counts, key=lambda w: (-counts[w], w))
    rank = {w: i for i, w in enumerate(ranking)}
    unseen = len(ranking)
    out = {"ranking": ranking,
           "counts": np.array([counts[w] for w in ranking], dtype=np.int64)}
    for s, docs in toks.items():
        lens = np.array([len(d) for d in docs], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        out[s] = {"ids": np.fromiter((rank.get(w, unseen) for d in docs for w in d),
                                     dtype=np.int64, count=int(lens.sum())),
                  "doc_start": np.repeat(starts, lens), "posts": len(docs)}
    _MEMO.clear()
    _MEMO.update(key=key, value=out)
    return out


def _context_pairs(ids, doc_start, positions, context: int, n_features: int):
    """``(row, feature)`` pairs of the bag of the ``context`` words before each of
    ``positions`` (same post only, feature words only)."""
    rows, cols = [], []
    for off in range(1, context + 1):
        prev = positions - off
        ok = prev >= doc_start[positions]
        w = np.where(ok, ids[np.maximum(prev, 0)], n_features)
        keep = w < n_features
        rows.append(np.flatnonzero(keep))
        cols.append(w[keep])
    return np.concatenate(rows), np.concatenate(cols)


def build_split(tar_path, split: str, *, classes: int, context: int, seed: int,
                max_features: int | None, max_points: int | None,
                normalize: bool) -> dict:
    """One split of ``20news-words`` (module docstring).

    Returns
    -------
    dict
        ``X`` (CSR, float64, N x D), ``y`` (int64 word ranks in ``0..classes-1``),
        ``K`` (= ``classes``), ``class_names`` and ``feature_names`` (the words),
        ``original`` (tokens, posts, positions whose word is a class, eligible points,
        vocabulary of the training bodies), ``dropped`` (``no_nonzero_feature``: class
        positions with no feature word before them; ``beyond_max_points``: eligible
        points not drawn) and ``info`` (class statistics).
    """
    c = corpus_tokens(tar_path)
    n_words = len(c["ranking"])
    if classes > n_words:
        raise ValueError(f"classes={classes} exceeds the {n_words} distinct words of the "
                         "training bodies; choose a smaller classes")
    D = n_words if max_features is None else min(int(max_features), n_words)
    ids, doc_start = c[split]["ids"], c[split]["doc_start"]
    targets = np.flatnonzero(ids < classes)
    r, _ = _context_pairs(ids, doc_start, targets, context, D)
    has_context = np.zeros(targets.size, dtype=bool)
    has_context[r] = True
    eligible = targets[has_context]
    if max_points is not None and eligible.size > max_points:
        rng = np.random.default_rng([int(seed), 0 if split == "train" else 1])
        chosen = np.sort(rng.choice(eligible.size, int(max_points), replace=False))
        points = eligible[chosen]
    else:
        points = eligible
    rows, cols = _context_pairs(ids, doc_start, points, context, D)
    X = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(points.size, D))
    X.sum_duplicates()
    X.sort_indices()
    if normalize:
        X = normalize_rows(X)
    y = ids[points].astype(np.int64)
    share = np.bincount(y, minlength=classes) / max(y.size, 1)
    return {
        "X": X, "y": y, "K": int(classes),
        "class_names": np.array(c["ranking"][:classes], dtype=str),
        "feature_names": np.array(c["ranking"][:D], dtype=str),
        "original": {"N": int(eligible.size), "D": int(n_words), "K": int(classes),
                     "K_first": int(np.unique(ids[eligible]).size),
                     "tokens": int(ids.size), "posts": int(c[split]["posts"]),
                     "class_positions": int(targets.size),
                     "source": "positions of the bodies whose word is a class"},
        "dropped": {"no_nonzero_feature": int(targets.size - eligible.size),
                    "beyond_max_points": int(eligible.size - points.size)},
        "info": {"classes_present": int(np.count_nonzero(share)),
                 "max_class_share": float(share.max()),
                 "max_class_word": str(c["ranking"][int(share.argmax())]),
                 "context": int(context),
                 "tokenizer": "lowercase, regex (?u)\\b\\w\\w+\\b (scikit-learn default)",
                 "vocabulary_size_train": int(n_words)},
    }
