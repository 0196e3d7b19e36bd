"""20 Newsgroups as the One-vs-Each paper used it (``scalable_softmax.data.newsgroups``).

On a small "bydate" tarball written into ``tmp_path``: bodies only (no header word is a
feature), raw counts equal to the token counts of each body, the vocabulary cut to the
most frequent training words, empty bodies dropped and counted, the bias column, and the
sensitivity variant (headers kept, unit rows). On the real corpus (when the data
directory has it): the document counts and the dimension.
"""
from __future__ import annotations

import io
import tarfile
from collections import Counter

import numpy as np
import pytest

from scalable_softmax import paths
from scalable_softmax.data import registry as R
from scalable_softmax.data import tokenize
from scalable_softmax.data.newsgroups import PAPER_SHAPE, ove_newsgroups, strip_header

POSTS = {
    # (split, newsgroup, file): text; headers hold words that never occur in a body
    ("train", "sci.space", "10"): "From: zorg@x\nSubject: orbit moon\n\norbit orbit moon\nthe moon",
    ("train", "sci.space", "11"): "From: zorg@x\nSubject: launch\n\nrocket rocket rocket orbit",
    ("train", "sci.space", "12"): "From: zorg@x\nSubject: empty body\n\n",
    ("train", "alt.atheism", "3"): "From: quux@y\nSubject: god\n\ngod is the question\n\nthe end",
    ("train", "alt.atheism", "4"): "From: quux@y\nSubject: re god\n\ngod god moon",
    ("test", "sci.space", "20"): "From: zorg@x\nSubject: moon\n\nmoon landing orbit",
    ("test", "alt.atheism", "5"): "From: quux@y\nSubject: x\n\nquestion god unknownword",
    ("test", "alt.atheism", "6"): "From: quux@y\nSubject: only header words\n\nzorg quux",
}


def make_corpus(root):
    """``root/20newsgroups/20news-bydate.tar.gz`` holding :data:`POSTS`."""
    path = root / "20newsgroups" / "20news-bydate.tar.gz"
    path.parent.mkdir(parents=True)
    with tarfile.open(path, "w:gz") as tf:
        for (split, group, name), text in POSTS.items():
            data = text.encode("utf-8")
            ti = tarfile.TarInfo(f"20news-bydate-{split}/{group}/{name}")
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return root


def bodies(split):
    """The posts of a split in the reader's order (newsgroup, then file number)."""
    keys = sorted((k for k in POSTS if k[0] == split), key=lambda k: (k[1], int(k[2])))
    return [POSTS[k] for k in keys], [k[1] for k in keys]


def load(tmp_path, split, **kw):
    root = tmp_path / "raw"
    if not root.exists():
        make_corpus(root)
    return ove_newsgroups(split, data_dir=root, cache_dir=tmp_path / "cache", verify=False,
                          **kw)


def test_strip_header():
    assert strip_header("A: b\nC: d\n\nbody line\n\nmore") == "body line\n\nmore"
    assert strip_header("no blank line here") == "no blank line here"
    assert strip_header("H: x\n\n") == ""


def test_body_only_raw_counts_and_bias(tmp_path):
    tr = load(tmp_path, "train", vocabulary_size=1000)
    texts, groups = bodies("train")
    # vocabulary: every word of the training bodies (fewer than 1000), alphabetical
    toks = [tokenize(strip_header(t)) for t in texts]
    vocab = sorted({w for ts in toks for w in ts})
    assert tr.vocabulary_size == len(vocab)
    for header_word in ("zorg", "quux", "from", "subject", "launch", "empty"):
        assert header_word not in vocab
    # the empty body (sci.space/12) is dropped and counted
    keep = [i for i, ts in enumerate(toks) if ts]
    assert tr.documents == {"posts": 5, "dropped_empty": 1, "kept": 4}
    assert tr.X.shape == (4, len(vocab) + 1) and tr.bias
    # raw counts: X[i, j] = occurrences of word j in body i; last column = 1
    expect = np.zeros((4, len(vocab) + 1))
    for r, i in enumerate(keep):
        for w, c in Counter(toks[i]).items():
            expect[r, vocab.index(w)] = c
    expect[:, -1] = 1.0
    np.testing.assert_array_equal(tr.X.toarray(), expect)
    assert tr.X.has_canonical_format and tr.X.dtype == np.float64
    assert tr.class_names == ["alt.atheism", "sci.space"] and tr.K == 2
    np.testing.assert_array_equal(tr.y, [0 if groups[i] == "alt.atheism" else 1
                                         for i in keep])
    # the test split: training vocabulary, unknown words ignored, a body of header
    # words only is empty, hence dropped
    te = load(tmp_path, "test", vocabulary_size=1000)
    assert te.documents == {"posts": 3, "dropped_empty": 1, "kept": 2}
    assert te.X.shape == (2, len(vocab) + 1)
    row = dict(zip(vocab, te.X.toarray()[0, :-1]))        # alt.atheism/5
    assert row["question"] == 1 and row["god"] == 1 and sum(row.values()) == 2
    row = dict(zip(vocab, te.X.toarray()[1, :-1]))        # sci.space/20
    assert row["moon"] == 1 and row["orbit"] == 1 and sum(row.values()) == 2
    np.testing.assert_array_equal(te.X.toarray()[:, -1], 1.0)


def test_vocabulary_is_the_most_frequent_training_words(tmp_path):
    tr = load(tmp_path, "train", vocabulary_size=3, bias=False)
    # document frequencies over the 5 training bodies: god, moon, orbit and the 2 each,
    # every other word 1; ties go to the alphabetically smaller word: god, moon, orbit
    assert tr.vocabulary_size == 3 and tr.X.shape[1] == 3 and not tr.bias
    texts, _ = bodies("train")
    toks = [tokenize(strip_header(t)) for t in texts]
    vocab = ["god", "moon", "orbit"]
    kept = [ts for ts in toks if any(w in vocab for w in ts)]
    assert tr.documents["dropped_empty"] == len(toks) - len(kept) == 1
    expect = np.array([[ts.count(w) for w in vocab] for ts in kept], dtype=float)
    np.testing.assert_array_equal(tr.X.toarray(), expect)


def test_headers_unit_l2_variant(tmp_path):
    tr = load(tmp_path, "train", vocabulary_size=1000, variant="headers-unit-l2")
    assert tr.documents == {"posts": 5, "dropped_empty": 0, "kept": 5}
    Xw = tr.X.toarray()[:, :-1]
    np.testing.assert_allclose((Xw ** 2).sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(tr.X.toarray()[:, -1], 1.0)
    # headers are tokenised in this variant: more words than the bodies alone hold
    body = load(tmp_path, "train", vocabulary_size=1000)
    assert tr.vocabulary_size > body.vocabulary_size


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="variant must be one of"):
        ove_newsgroups("train", variant="tfidf")
    for bad in (0, -3, 2.5, True, "61188"):
        with pytest.raises(ValueError, match="vocabulary_size must be a positive integer"):
            ove_newsgroups("train", vocabulary_size=bad)


@pytest.mark.realdata
def test_real_corpus_counts():
    rel = R.DATASET_FILES["20news"]["tar"]
    if not (paths.raw_dir() / rel).is_file():
        pytest.skip(f"{rel} not in the data directory {paths.raw_dir()}; run `make data`")
    tr = ove_newsgroups("train")
    te = ove_newsgroups("test")
    # 21 / 16 posts have no kept word in their body (the paper's copy: 11,269 / 7,505)
    assert tr.documents == {"posts": 11_314, "dropped_empty": 21, "kept": 11_293}
    assert te.documents == {"posts": 7_532, "dropped_empty": 16, "kept": 7_516}
    assert tr.X.shape == (11_293, PAPER_SHAPE[2] + 1) and te.X.shape[1] == PAPER_SHAPE[2] + 1
    assert tr.K == te.K == PAPER_SHAPE[3]
    # raw counts (integers, some above 1) and the bias column
    assert np.all(tr.X.data == np.round(tr.X.data)) and tr.X.data.max() > 100
    np.testing.assert_array_equal(tr.X[:, -1].toarray().ravel(), 1.0)
    assert tr.info["words_in_training_bodies"] > PAPER_SHAPE[2]
