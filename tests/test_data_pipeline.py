"""The paper's preprocessing, load_dataset end to end on small files, and the cache."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax.data import (
    ChecksumError,
    DataFormatError,
    MissingDataError,
    apply_conventions,
    core,
    load_dataset,
    normalize_rows,
    select_features,
)
from scalable_softmax.data import cache as dcache
from scalable_softmax.data.readers import LabelledData


def labelled(rows, labels, D, tail=(0, 0)):
    """LabelledData from dense rows and per-row label lists."""
    X = sp.csr_matrix(np.asarray(rows, dtype=float).reshape(len(rows), D))
    ptr = np.cumsum([0] + [len(l) for l in labels]).astype(np.int64)
    idx = np.array([v for l in labels for v in l], dtype=np.int64)
    n = len(rows)
    return LabelledData(X=X, label_indptr=ptr, label_indices=idx, n_features=D,
                        n_labels=None, lines=np.arange(1, n + 1), n_points_total=n,
                        tail_no_label=tail[0], tail_labelled=tail[1],
                        first_labels_all=idx[ptr[:-1][np.diff(ptr) > 0]])


# --------------------------------------------------------------------------- preprocessing
def test_select_features_by_document_frequency_ties_to_smaller_index():
    X = sp.csr_matrix(np.array([[5, 0, 1, 0, 2],
                                [0, 0, 1, 3, 0],
                                [0, 0, 1, 7, 1],
                                [9, 0, 0, 0, 0]], dtype=float))
    # df = [2, 0, 3, 2, 2]: feature 2 first, then the tie 0/3/4 -> 0 and 3
    np.testing.assert_array_equal(select_features(X, 3), [0, 2, 3])
    np.testing.assert_array_equal(select_features(X, 1), [2])
    np.testing.assert_array_equal(select_features(X, 5), np.arange(5))
    np.testing.assert_array_equal(select_features(X, None), np.arange(5))
    # explicit zeros do not count as occurrences
    X2 = sp.csr_matrix((np.array([0.0, 0.0, 0.0, 1.0]), np.array([0, 2, 3, 1]),
                        np.array([0, 3, 4, 4, 4])), shape=(4, 5))
    np.testing.assert_array_equal(select_features(X2, 1), [1])


def test_normalize_rows_handles_empty_rows():
    X = sp.csr_matrix(np.array([[3, 4, 0], [0, 0, 0], [0, 0, 2], [0, 0, 0]], dtype=float))
    Y = normalize_rows(X)
    np.testing.assert_allclose(Y.toarray(), [[.6, .8, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]])
    np.testing.assert_allclose(X.toarray()[0], [3, 4, 0])  # input untouched


def test_apply_conventions_train_and_test():
    D = 4
    train = labelled(
        [[1, 0, 0, 2],    # label 7
         [0, 0, 0, 0],    # no label -> dropped first
         [0, 3, 0, 0],    # label 5 (first of 5, 9); only feature 1 -> empty after cap
         [2, 0, 1, 0],    # label 9
         [1, 0, 0, 1],    # label 7
         [0, 0, 0, 5]],   # label 9 -> beyond max_points
        [[7], [], [5, 9], [9, 2], [7], [9]], D, tail=(2, 3))
    X, y, st, dropped, lines = apply_conventions(train, max_features=2, max_points=4)
    # features: df on the 4 kept labelled rows = [3, 1, 1, 2] -> {0, 3}
    np.testing.assert_array_equal(st.feature_index, [0, 3])
    assert dropped == {"no_label": 3, "beyond_max_points": 4, "no_nonzero_feature": 1,
                       "label_unseen_in_train": 0}
    np.testing.assert_array_equal(st.classes, [7, 9])
    np.testing.assert_array_equal(y, [0, 1, 0])
    np.testing.assert_array_equal(lines, [1, 4, 5])
    assert X.shape == (3, 2) and X.has_canonical_format and X.dtype == np.float64
    np.testing.assert_allclose(X.toarray(), [[1 / 5 ** .5, 2 / 5 ** .5], [1, 0],
                                             [2 ** -.5, 2 ** -.5]])
    test = labelled([[0, 1, 0, 0], [3, 0, 0, 0], [0, 0, 0, 1], [1, 0, 0, 1]],
                    [[7], [9], [4], [9, 7]], D)
    Xt, yt, st2, dt, lt = apply_conventions(test, train_state=st, max_features=2,
                                            max_points=None, normalize=False)
    assert dt == {"no_label": 0, "beyond_max_points": 0, "no_nonzero_feature": 1,
                  "label_unseen_in_train": 1}
    np.testing.assert_array_equal(yt, [1, 1])  # [9, 7]: the first label is 9
    np.testing.assert_allclose(Xt.toarray(), [[3, 0], [1, 1]])
    assert st2.classes is st.classes


def test_apply_conventions_rejects_bad_caps():
    d = labelled([[1.0]], [[0]], 1)
    with pytest.raises(ValueError, match="max_points"):
        apply_conventions(d, max_points=0)
    with pytest.raises(ValueError, match="max_features"):
        select_features(sp.csr_matrix(np.ones((2, 3))), 0)


# --------------------------------------------------------------------------- end to end
TRAIN = """6 5 4
2 0:1 1:1
0,3 2:2
 1:1
3 3:1 4:1
1 4:2
0 0:1
"""
TEST = """3 5 4
1 0:1
2,0 2:1
3 1:1
"""


@pytest.fixture
def xc_dir(tmp_path):
    d = tmp_path / "raw"
    (d / "eurlex").mkdir(parents=True)
    (d / "eurlex" / "eurlex_train.txt").write_text(TRAIN)
    (d / "eurlex" / "eurlex_test.txt").write_text(TEST)
    return d


def tmp_files(folder):
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith(".tmp"))


def test_load_dataset_on_user_xmlrepo_files(xc_dir, tmp_path):
    cdir = tmp_path / "cache"
    tr = load_dataset("eurlex", data_dir=xc_dir, cache_dir=cdir, max_features=4)
    assert (tr.N, tr.D, tr.K) == (5, 4, 4) and not tr.synthetic
    assert tr.dropped == {"no_label": 1, "beyond_max_points": 0, "no_nonzero_feature": 0,
                          "label_unseen_in_train": 0}
    assert tr.original == {"N": 6, "D": 5, "K": 4, "K_first": 4, "source": "raw file"}
    np.testing.assert_array_equal(tr.y, [2, 0, 3, 1, 0])
    np.testing.assert_array_equal(tr.class_names, ["0", "1", "2", "3"])
    # df = [2, 1, 1, 1, 2]: keep 0, 4 and the two smallest of the tied 1, 2, 3
    np.testing.assert_array_equal(tr.feature_index, [0, 1, 2, 4])
    np.testing.assert_allclose(np.asarray(tr.X.multiply(tr.X).sum(axis=1)).ravel(), 1.0)
    assert tr.y.dtype == np.int64 and tr.X.has_canonical_format
    te = load_dataset("eurlex", "test", data_dir=xc_dir, cache_dir=cdir, max_features=4)
    assert te.K == 4 and te.D == 4 and te.N == 3
    np.testing.assert_array_equal(te.y, [1, 2, 3])
    assert te.origin[0].endswith("eurlex_test.txt")
    assert te.info["inputs_sha256"]["test"].startswith("unverified:")
    assert tmp_files(cdir) == []


def test_cache_hit_rebuild_on_parameter_change_and_on_new_raw_file(xc_dir, tmp_path):
    cdir = tmp_path / "cache"
    a = load_dataset("eurlex", data_dir=xc_dir, cache_dir=cdir)
    assert not a.info["from_cache"]
    files = sorted(p.name for p in cdir.glob("*.npz"))
    assert len(files) == 1 and files[0].startswith("eurlex-train-")
    b = load_dataset("eurlex", data_dir=xc_dir, cache_dir=cdir)
    assert b.info["from_cache"]
    assert (a.X != b.X).nnz == 0 and np.array_equal(a.y, b.y)
    assert a.dropped == b.dropped and a.original == b.original and a.K == b.K
    np.testing.assert_array_equal(a.class_names, b.class_names)
    # another parameter -> another file, built afresh
    c = load_dataset("eurlex", data_dir=xc_dir, cache_dir=cdir, normalize=False)
    assert not c.info["from_cache"] and c.X.max() == 2.0
    assert len(list(cdir.glob("*.npz"))) == 2
    # a changed raw file -> another key
    with open(xc_dir / "eurlex" / "eurlex_train.txt", "a") as fh:
        fh.write("")  # same content: same key (the key uses the content hash)
    assert load_dataset("eurlex", data_dir=xc_dir, cache_dir=cdir).info["from_cache"]
    (xc_dir / "eurlex" / "eurlex_train.txt").write_text(TRAIN.replace("4:2", "4:3"))
    d = load_dataset("eurlex", data_dir=xc_dir, cache_dir=cdir)
    assert not d.info["from_cache"]
    assert len(list(cdir.glob("*.npz"))) == 3
    # a corrupt cache file is rebuilt, not trusted
    path = d.info["cache_file"]
    with open(path, "wb") as fh:
        fh.write(b"garbage")
    e = load_dataset("eurlex", data_dir=xc_dir, cache_dir=cdir)
    assert not e.info["from_cache"] and (e.X != d.X).nnz == 0
    assert tmp_files(cdir) == []


def test_cache_key_depends_on_code_version(monkeypatch):
    k1 = dcache.cache_key({"a": 1})
    monkeypatch.setattr(dcache, "CODE_VERSION", "other")
    assert dcache.cache_key({"a": 1}) != k1


def test_cache_write_is_atomic(xc_dir, tmp_path, monkeypatch):
    cdir = tmp_path / "cache"

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(dcache.np, "savez", boom)
    with pytest.raises(OSError, match="disk full"):
        load_dataset("eurlex", data_dir=xc_dir, cache_dir=cdir)
    assert list(cdir.iterdir()) == []  # neither a partial .npz nor a stray .tmp


def test_missing_files_name_file_place_and_remedy(tmp_path):
    empty = tmp_path / "nothing"
    empty.mkdir()
    with pytest.raises(MissingDataError) as ei:
        load_dataset("eurlex", data_dir=empty, cache=False)
    msg = str(ei.value)
    assert str(empty / "eurlex" / "eurlex_train.txt") in msg
    assert "eurlex-surrogate" in msg and "XMLRepository" in msg
    with pytest.raises(MissingDataError) as ei:
        load_dataset("mnist", data_dir=empty, cache=False)
    msg = str(ei.value)
    assert str(empty / "mnist" / "train-images-idx3-ubyte.gz") in msg
    assert "make data" in msg and "https://" in msg
    assert isinstance(ei.value, FileNotFoundError)


def test_malformed_user_file_reaches_the_caller(xc_dir, tmp_path):
    (xc_dir / "eurlex" / "eurlex_train.txt").write_text("2 5 4\n1 0:1\n9 1:1\n")
    with pytest.raises(DataFormatError, match="label 9 out of range") as ei:
        load_dataset("eurlex", data_dir=xc_dir, cache=False)
    assert ei.value.line == 3 and "eurlex_train.txt" in str(ei.value)


def test_user_pinned_checksum_mismatch_is_an_error(xc_dir, tmp_path):
    (xc_dir / "SHA256SUMS").write_text("0" * 64 + "  eurlex/eurlex_train.txt\n")
    with pytest.raises(ChecksumError, match="not used"):
        load_dataset("eurlex", data_dir=xc_dir, cache=False)


def test_wikismall_accepts_the_lshtc_layout(tmp_path):
    d = tmp_path / "raw" / "wikismall"
    d.mkdir(parents=True)
    (d / "train.txt").write_text("545, 32 1:1 3:2\n7 2:1\n 3:1\n545 4:1\n")
    (d / "test.txt").write_text("7 1:1\n99 2:1\n")
    tr = load_dataset("wikismall", data_dir=d.parent, cache=False)
    assert tr.info["format"] == "lshtc-libsvm"
    np.testing.assert_array_equal(tr.class_names, ["7", "545"])
    np.testing.assert_array_equal(tr.y, [1, 0, 1])
    te = load_dataset("wikismall", "test", data_dir=d.parent, cache=False)
    assert te.dropped["label_unseen_in_train"] == 1 and te.N == 1


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown data set"):
        load_dataset("cifar")
    with pytest.raises(ValueError, match="split"):
        load_dataset("mnist", "valid")
    with pytest.raises(ValueError, match="max_features"):
        load_dataset("mnist", max_features=0)
    with pytest.raises(ValueError, match="max_points"):
        load_dataset("mnist", max_points=2.5)
    with pytest.raises(TypeError, match="unknown option.*min_df"):
        load_dataset("mnist", min_df=2)
    with pytest.raises(ValueError, match="scale"):
        load_dataset("eurlex-surrogate", scale=2.0)


# --------------------------------------------------------------------------- Table 1
def test_paper_table1_uses_surrogate_when_real_files_are_missing(monkeypatch):
    calls = []

    def fake_load(name, split="train", **kw):
        calls.append(name)
        if name in ("eurlex", "wiki10", "amazoncat", "wikismall"):
            raise MissingDataError(f"{name} missing")
        base = name.replace("-surrogate", "")
        row = core.PAPER_TABLE1.set_index("name").loc[base]
        K, D, N = int(row.paper_K), int(row.paper_D), 3
        return core.Dataset(name, split, sp.csr_matrix((N, D)), np.zeros(N, np.int64), K,
                            ("x",), name.endswith("-surrogate"), {}, {}, {"N": N, "D": D,
                                                                       "K": K + 1},
                            np.array([]), np.arange(D), info={})

    monkeypatch.setattr(core, "load_dataset", fake_load)
    df = core.paper_table1()
    assert list(df["name"]) == ["mnist", "bibtex", "delicious", "eurlex", "amazoncat",
                                "wiki10", "wikismall"]
    src = dict(zip(df["name"], df["source"]))
    assert src["mnist"] == "real" and src["eurlex"] == "surrogate (synthetic)"
    assert dict(zip(df["name"], df["loaded"]))["wiki10"] == "wiki10-surrogate"
    assert df["K_agrees"].all() and not df["N_agrees"].any()
    md = core.format_table1_markdown(df)
    assert md.count("\n|") == 8 and "**surrogate (synthetic)**" in md
    assert "147 (159)" in md and "11 (10)" not in md and "10 (11)" in md
