"""``20news-words``: next-word prediction on the 20 Newsgroups bodies
(``scalable_softmax.data.words`` through ``load_dataset``).

On a small "bydate" tarball written into ``tmp_path``: the classes are the training
words by frequency, each point's features are the bag of the previous words of the same
body (headers and other posts never leak in), rows are unit L2, the draw is seeded and
reproducible, the test split uses the training words, the cache returns the same arrays,
bad options are refused. On the real corpus (when the data directory has it): the shape,
``K = 10,000``, the classes present, unit rows, determinism and the largest class share.
"""
from __future__ import annotations

import numpy as np
import pytest

from scalable_softmax import paths
from scalable_softmax.data import load_dataset, tokenize
from scalable_softmax.data import registry as R
from scalable_softmax.data.newsgroups import strip_header
from test_data_newsgroups import bodies, make_corpus


def load(tmp_path, split="train", **kw):
    """A split of ``20news-words`` built from :data:`POSTS` (a fresh cache dir each time
    unless ``cache_dir`` is given)."""
    root = tmp_path / "raw"
    if not root.exists():
        make_corpus(root)
    kw.setdefault("cache_dir", tmp_path / "cache")
    return load_dataset("20news-words", split, data_dir=root, verify=False, **kw)


def _training_ranking():
    texts, _ = bodies("train")
    counts = {}
    for t in texts:
        for w in tokenize(strip_header(t)):
            counts[w] = counts.get(w, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w)), counts


def test_classes_are_training_words_by_frequency(tmp_path):
    ranking, counts = _training_ranking()
    ds = load(tmp_path, classes=5, context=2, max_features=None, max_points=None)
    assert ds.K == 5 and list(ds.class_names) == ranking[:5]
    assert ds.D == len(ranking)  # every training word is a feature
    assert ds.y.min() >= 0 and ds.y.max() < 5
    for header_word in ("zorg", "quux", "subject", "launch"):
        assert header_word not in ranking


def test_points_are_previous_words_of_the_same_body(tmp_path):
    ranking, _ = _training_ranking()
    rank = {w: i for i, w in enumerate(ranking)}
    ds = load(tmp_path, classes=len(ranking), context=2, max_features=None,
              max_points=None, normalize=False)
    texts, _ = bodies("train")
    expected = []
    for t in texts:
        ids = [rank[w] for w in tokenize(strip_header(t))]
        for i, w in enumerate(ids):
            ctx = ids[max(0, i - 2):i]
            if ctx:  # the first word of a body has no context: not a point
                expected.append((w, sorted(ctx)))
    assert ds.N == len(expected)
    for row, (w, ctx) in enumerate(expected):
        assert ds.y[row] == w
        got = ds.X[row]
        bag = sorted(np.repeat(got.indices, got.data.astype(int)).tolist())
        assert bag == ctx
    assert ds.dropped["no_nonzero_feature"] == sum(
        1 for t in texts if tokenize(strip_header(t)))


def test_unit_rows_seeded_draw_and_cache(tmp_path):
    a = load(tmp_path, classes=6, context=3, max_points=10, seed=1)
    np.testing.assert_allclose(np.sqrt(a.X.multiply(a.X).sum(axis=1)).A.ravel(), 1.0)
    assert a.N == 10 and a.dropped["beyond_max_points"] > 0
    b = load(tmp_path, classes=6, context=3, max_points=10, seed=1,
             cache_dir=tmp_path / "other")
    assert not b.info["from_cache"]
    assert (a.X != b.X).nnz == 0 and np.array_equal(a.y, b.y)
    c = load(tmp_path, classes=6, context=3, max_points=10, seed=1)
    assert c.info["from_cache"] and (a.X != c.X).nnz == 0 and np.array_equal(a.y, c.y)
    d = load(tmp_path, classes=6, context=3, max_points=10, seed=2)
    assert not ((a.X != d.X).nnz == 0 and np.array_equal(a.y, d.y))


def test_test_split_uses_training_words(tmp_path):
    tr = load(tmp_path, classes=4, context=2, max_features=None, max_points=None)
    te = load(tmp_path, "test", classes=4, context=2, max_features=None, max_points=None)
    assert te.K == tr.K and te.D == tr.D
    assert list(te.class_names) == list(tr.class_names)
    # test bodies: "moon landing orbit", "question god unknownword", "zorg quux"
    words = [tr.class_names[k] for k in te.y]
    assert set(words) <= {"moon", "orbit", "question", "god"}


@pytest.mark.parametrize("opt", [{"classes": 1}, {"context": 0}, {"seed": -1},
                                 {"context": 2.5}, {"classes": True}])
def test_bad_options(tmp_path, opt):
    with pytest.raises(ValueError, match="20news-words"):
        load(tmp_path, **opt)


def test_too_many_classes(tmp_path):
    with pytest.raises(ValueError, match="exceeds the .* distinct words"):
        load(tmp_path, classes=10_000)


@pytest.fixture(scope="module")
def real_words():
    rel = R.DATASET_FILES["20news-words"]["tar"]
    if not (paths.raw_dir() / rel).is_file():
        pytest.skip(f"{rel} not in the data directory {paths.raw_dir()}; run `make data`")
    return load_dataset("20news-words", "train"), load_dataset("20news-words", "test")


@pytest.mark.realdata
def test_real_shape_classes_and_shares(real_words):
    tr, te = real_words
    assert tr.K == te.K == 10_000 and tr.D == te.D == 10_000
    assert 50_000 <= tr.N <= 100_000 and 0 < te.N <= 100_000
    present = np.unique(tr.y).size
    assert present >= 5_000 and present == tr.info["classes_present"]
    share = np.bincount(tr.y, minlength=tr.K).max() / tr.N
    assert share <= 0.10 and share == pytest.approx(tr.info["max_class_share"])
    for ds in (tr, te):
        np.testing.assert_allclose(np.sqrt(ds.X.multiply(ds.X).sum(axis=1)).A.ravel(),
                                   1.0)
        assert not ds.synthetic and ds.y.dtype == np.int64
    assert tr.class_names[0] == "the"


@pytest.mark.realdata
def test_real_draw_is_reproducible(real_words, tmp_path):
    tr, _ = real_words
    again = load_dataset("20news-words", "train", cache=False)
    assert (tr.X != again.X).nnz == 0 and np.array_equal(tr.y, again.y)
