"""Notebook 14's workloads (``scalable_softmax.repro.race.problems.build_problems``): the
problems built at several K, on the small corpus of ``test_data_newsgroups``. The race
itself is tested in the other tests/test_race_*.py."""
from __future__ import annotations

import numpy as np
import pytest

from scalable_softmax.data import load_dataset
from scalable_softmax.repro.race import problems
from test_data_newsgroups import make_corpus


def test_problems_are_the_loader_at_every_k(tmp_path):
    root = tmp_path / "raw"
    make_corpus(root)
    opts = dict(data_dir=root, verify=False, cache_dir=tmp_path / "cache")
    paths, shapes = problems.build_problems([3, 5], {3: None, 5: 40}, tmp_path / "work", **opts)
    assert list(shapes.K) == [3, 5] and set(paths) == {3, 5}
    for K in (3, 5):
        X, y, Xt, yt, K2 = problems.load_problem(paths[K])
        ref = load_dataset("20news-words", "train", classes=K,
                           max_points={3: None, 5: 40}[K], **opts)
        assert K2 == K and (X != ref.X).nnz == 0 and np.array_equal(y, ref.y)
        row = shapes.set_index("K").loc[K]
        assert row.N == X.shape[0] and row.N_test == Xt.shape[0]
        assert row.classes_in_train == np.unique(y).size <= K
    with pytest.raises(ValueError, match="max_points has no entry for K"):
        problems.build_problems([3, 7], {3: None}, tmp_path / "work", **opts)
    with pytest.raises(ValueError, match="increasing"):
        problems.build_problems([5, 3], {3: None, 5: None}, tmp_path / "work", **opts)
