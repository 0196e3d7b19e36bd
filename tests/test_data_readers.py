"""Readers of the raw formats: correct parsing and a clear error for malformed input.

Every fixture is a small file written into ``tmp_path``; each malformed case checks
the error class, the file name and the line number (or byte offset) it reports.
"""
from __future__ import annotations

import gzip
import io
import struct
import tarfile

import numpy as np
import pytest

from scalable_softmax.data import (
    DataFormatError,
    bag_of_words,
    read_20newsgroups,
    read_arff,
    read_idx,
    read_libsvm,
    read_mnist,
    read_mulan,
    read_mulan_labels,
    read_xmlrepo,
    tokenize,
)


def write(path, text, *, gz=False):
    data = text.encode("utf-8") if isinstance(text, str) else text
    if gz:
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def raises_at(exc_info, path, line=None, offset=None):
    err = exc_info.value
    assert isinstance(err, ValueError)
    assert err.path == str(path)
    assert str(path) in str(err)
    if line is not None:
        assert err.line == line, str(err)
        assert f"line {line}" in str(err)
    if offset is not None:
        assert err.offset == offset, str(err)


def expect_format_error(call, words, path, line):
    """``call()`` raises a DataFormatError matching ``words`` that names ``path`` and
    ``line``."""
    with pytest.raises(DataFormatError, match=words) as ei:
        call()
    raises_at(ei, path, line=line)


# --------------------------------------------------------------------------- idx
def idx_bytes(arr: np.ndarray, code=0x08):
    hdr = bytes([0, 0, code, arr.ndim]) + b"".join(struct.pack(">I", s) for s in arr.shape)
    return hdr + arr.astype(">u1" if code == 0x08 else ">i4").tobytes()


@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_roundtrip_plain_and_gzip(tmp_path, gz):
    a = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    p = write(tmp_path / "a.idx", idx_bytes(a), gz=gz)
    np.testing.assert_array_equal(read_idx(p), a)
    b = np.array([[-5, 7], [1 << 20, 0]], dtype=np.int32)
    p = write(tmp_path / "b.idx", idx_bytes(b, 0x0C), gz=gz)
    out = read_idx(p)
    assert out.dtype == np.int32 and out.dtype.byteorder in "=|<"
    np.testing.assert_array_equal(out, b)


@pytest.mark.parametrize("payload, offset, words", [
    (b"", 0, "empty"),
    (b"\x00\x00", 0, "truncated"),
    (b"\x08\x03\x08\x01" + b"\x00" * 8, 0, "magic"),
    (b"\x00\x00\x42\x01\x00\x00\x00\x01\x00", 2, "type code"),
    (b"\x00\x00\x08\x02\x00\x00\x00\x02", 8, "truncated"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x05" + b"\x01" * 4, 12, "too short"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x02" + b"\x01" * 3, 10, "too long"),
])
def test_read_idx_malformed(tmp_path, payload, offset, words):
    p = write(tmp_path / "bad.idx", payload)
    with pytest.raises(DataFormatError, match=words) as ei:
        read_idx(p)
    raises_at(ei, p, offset=offset)


def test_read_idx_corrupt_gzip(tmp_path):
    p = write(tmp_path / "bad.idx.gz", gzip.compress(idx_bytes(np.zeros(10, np.uint8)))[:-12])
    with pytest.raises(DataFormatError, match="decompress"):
        read_idx(p)


def _mnist_pair(tmp_path, images, labels, gz=True):
    ip = write(tmp_path / "img.gz", b"\x00\x00\x08\x03" + b"".join(
        struct.pack(">I", s) for s in images.shape) + images.tobytes(), gz=gz)
    lp = write(tmp_path / "lab.gz", b"\x00\x00\x08\x01" + struct.pack(">I", labels.size)
               + labels.tobytes(), gz=gz)
    return ip, lp


def test_read_mnist_small(tmp_path):
    rng = np.random.default_rng(0)
    imgs = (rng.random((5, 3, 2)) * 255 * (rng.random((5, 3, 2)) < 0.5)).astype(np.uint8)
    labs = np.array([3, 0, 9, 1, 1], dtype=np.uint8)
    d = read_mnist(*_mnist_pair(tmp_path, imgs, labs))
    assert d.X.shape == (5, 6) and d.X.dtype == np.float64 and d.X.has_canonical_format
    np.testing.assert_array_equal(d.X.toarray(), imgs.reshape(5, 6))
    np.testing.assert_array_equal(d.first_labels(), labs)
    assert d.n_labels == 10


def test_read_mnist_checks(tmp_path):
    imgs = np.zeros((3, 2, 2), np.uint8)
    ip, lp = _mnist_pair(tmp_path, imgs, np.array([1, 2], np.uint8))
    with pytest.raises(DataFormatError, match="2 labels for 3 images"):
        read_mnist(ip, lp)
    ip, lp = _mnist_pair(tmp_path, imgs, np.array([1, 2, 10], np.uint8))
    with pytest.raises(DataFormatError, match="label 10") as ei:
        read_mnist(ip, lp)
    raises_at(ei, lp, offset=10)
    with pytest.raises(DataFormatError, match="expected 2051") as ei:  # swapped files
        read_mnist(lp, ip)
    raises_at(ei, lp, offset=0)


# --------------------------------------------------------------------------- ARFF / MULAN
ARFF = """% a comment
@relation 'toy data'

@attribute f0 numeric
@attribute 'f 1' {0,1}
@attribute f2 real
@attribute L_a {0,1}
@attribute L_b {0,1}
@attribute L_c {0,1}

@data
{0 1.5,2 -2,4 1,5 1}
{1 1,3 1}
{3 0}
0,1,0.25,0,0,1
"""

XML = """<?xml version="1.0" encoding="utf-8"?>
<labels xmlns="http://mulan.sourceforge.net/labels">
<label name="L_a"></label>
<label name="L_b"></label>
<label name="L_c"></label>
</labels>
"""


def test_read_arff_sparse_and_dense(tmp_path):
    p = write(tmp_path / "t.arff.gz", ARFF, gz=True)
    a = read_arff(p)
    assert a.relation == "toy data"
    assert [x.name for x in a.attributes] == ["f0", "f 1", "f2", "L_a", "L_b", "L_c"]
    np.testing.assert_allclose(a.X.toarray(), [[1.5, 0, -2, 0, 1, 1], [0, 1, 0, 1, 0, 0],
                                               [0, 0, 0, 0, 0, 0], [0, 1, .25, 0, 0, 1]])
    np.testing.assert_array_equal(a.lines, [12, 13, 14, 15])


def test_read_mulan(tmp_path):
    ap = write(tmp_path / "t.arff", ARFF)
    xp = write(tmp_path / "t.xml.gz", XML, gz=True)
    d = read_mulan(ap, xp)
    assert d.feature_names == ["f0", "f 1", "f2"] and d.label_names == ["L_a", "L_b", "L_c"]
    np.testing.assert_allclose(d.X.toarray(), [[1.5, 0, -2], [0, 1, 0], [0, 0, 0],
                                               [0, 1, .25]])
    np.testing.assert_array_equal(d.first_labels(), [1, 0, -1, 2])
    np.testing.assert_array_equal(d.label_indptr, [0, 2, 3, 3, 4])
    assert d.info["label_name_fixes"] == []


def test_read_mulan_positional_fix_and_strict(tmp_path):
    ap = write(tmp_path / "t.arff", ARFF)
    xp = write(tmp_path / "t.xml", XML.replace('"L_b"', '"TL_b"'))
    d = read_mulan(ap, xp)
    assert d.info["label_name_fixes"] == [{"xml": "TL_b", "arff": "L_b"}]
    np.testing.assert_array_equal(d.first_labels(), [1, 0, -1, 2])
    with pytest.raises(DataFormatError, match="'TL_b'"):
        read_mulan(ap, xp, label_match="strict")
    # the labels that match are not the trailing attributes in order: no repair
    xp2 = write(tmp_path / "t2.xml", XML.replace('"L_b"', '"TL_b"').replace('"L_a"', '"f0"'))
    with pytest.raises(DataFormatError, match="not an attribute"):
        read_mulan(ap, xp2)


def test_read_mulan_label_must_be_binary(tmp_path):
    ap = write(tmp_path / "t.arff", ARFF.replace("@attribute L_a {0,1}", "@attribute L_a numeric"))
    xp = write(tmp_path / "t.xml", XML)
    with pytest.raises(DataFormatError, match="L_a.*nominal") as ei:
        read_mulan(ap, xp)
    raises_at(ei, ap, line=7)


@pytest.mark.parametrize("body, line, words", [
    ("{0 1,9 1}", 12, "out of range"),
    ("{2 1,1 1}", 12, "must increase"),
    ("{0 abc}", 12, "not a number"),
    ("{0 nan}", 12, "NaN or inf"),
    ("{2 inf}", 12, "NaN or inf"),
    ("{0 ?}", 12, "missing values"),
    ("{1 2}", 12, "declared values"),
    ("{0 1 2,3 1}", 12, "index value"),
    ("{x 1}", 12, "not an integer"),
    ("{0 1", 12, "does not end"),
    ("1,0,2", 12, "3 fields"),
    ("\n% c\n1,0,2,0,0,x", 14, "not one of the declared"),
])
def test_read_arff_malformed_rows(tmp_path, body, line, words):
    text = ARFF.split("@data")[0] + "@data\n" + body + "\n"
    p = write(tmp_path / "bad.arff", text)
    expect_format_error(lambda: read_arff(p), words, p, line=line)


@pytest.mark.parametrize("text, line, words", [
    ("", 1, "empty"),
    ("% only a comment\n\n", 1, "empty"),
    ("@relation r\n@attribute a numeric\n", 2, "no @data"),
    ("@relation r\n@data\n", 2, "before any @attribute"),
    ("@relation r\n@attribute s string\n@data\n", 2, "only numeric and nominal"),
    ("@relation r\n@attribute a numeric\n@data\n", 3, "no rows"),
    ("@relation r\n@attribute a {0,1\n@data\n", 2, "not closed"),
    ("@relation r\nhello\n", 2, "unexpected header"),
    ("@relation r\n@attribute a\n", 2, "has no type"),
])
def test_read_arff_malformed_header(tmp_path, text, line, words):
    p = write(tmp_path / "bad.arff", text)
    expect_format_error(lambda: read_arff(p), words, p, line=line)


@pytest.mark.parametrize("text, line, words", [
    ("", 1, "empty"),
    ("<labels><label name='a'></labels>", 1, "not well-formed"),
    ("<labels></labels>", 1, "no <label>"),
    ("<labels>\n<label name='a'/>\n<label name='a'/>\n</labels>", 3, "repeated"),
    ("<labels>\n<label/>\n</labels>", 2, "no name"),
])
def test_read_mulan_labels_malformed(tmp_path, text, line, words):
    p = write(tmp_path / "bad.xml", text)
    expect_format_error(lambda: read_mulan_labels(p), words, p, line=line)


def test_read_mulan_labels_nested(tmp_path):
    p = write(tmp_path / "h.xml", "<labels xmlns='http://mulan.sourceforge.net/labels'>"
              "<label name='a'><label name='a1'/></label><label name='b'/></labels>")
    assert read_mulan_labels(p) == ["a", "a1", "b"]


# --------------------------------------------------------------------------- XMLRepository
XC = """4 6 3
0,2 0:1.0 3:0.5
 1:2.0
2 5:1 0:3
1,0
"""


@pytest.mark.parametrize("gz", [False, True])
def test_read_xmlrepo(tmp_path, gz):
    p = write(tmp_path / "x.txt", XC, gz=gz)
    d = read_xmlrepo(p)
    assert d.X.shape == (4, 6) and d.n_labels == 3 and d.X.has_canonical_format
    np.testing.assert_allclose(d.X.toarray(), [[1, 0, 0, .5, 0, 0], [0, 2, 0, 0, 0, 0],
                                               [3, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(d.first_labels(), [0, -1, 2, 1])
    np.testing.assert_array_equal(d.label_indices, [0, 2, 2, 1, 0])
    np.testing.assert_array_equal(d.lines, [2, 3, 4, 5])
    assert d.info["header"] == {"N": 4, "D": 6, "K": 3}


def test_read_xmlrepo_max_points_reads_labels_of_the_tail(tmp_path):
    p = write(tmp_path / "x.txt", XC)
    d = read_xmlrepo(p, max_points=1)
    # row 1 (labelled) is read; after it the cap is reached: the rest is only counted
    assert d.n == 1 and d.tail_labelled == 2 and d.tail_no_label == 1
    np.testing.assert_array_equal(d.first_labels_all, [0, 2, 1])
    assert d.n_points_total == 4


@pytest.mark.parametrize("text, line, words", [
    ("", 1, "empty"),
    ("4 6\n0 1:1\n", 1, "header"),
    ("a b c\n", 1, "header"),
    ("3 6 3\n0 1:1\n1 2:1\n", 1, "N=3 points but the body has 2"),
    ("1 6 3\n0 1:1\n1 2:1\n", 3, "more points"),
    ("2 6 3\n0 1:1\n3 2:1\n", 3, "label 3 out of range"),
    ("2 6 3\n0 1:1\n1 6:1\n", 3, "feature index 6 out of range"),
    ("2 6 3\n0 1:1\n1 2:x\n", 3, "'x' is not a number"),
    ("2 6 3\n0 1:nan\n1 2:1\n", 2, "NaN or inf"),
    ("2 6 3\n0 1:1\n1 2:-inf\n", 3, "NaN or inf"),
    ("2 6 3\n0 1:1 4\n1 2:1\n", 2, "'4' is not 'index:value'"),
    ("2 6 3\n0 1:1:2\n", 2, "not 'index:value'"),
    ("2 6 3\n0 -1:1\n1 2:1\n", 2, "not 'index:value'"),
    ("2 6 3\n0 1:1 1:2\n1 2:1\n", 2, "repeated"),
    ("2 6 3\n0,,1 1:1\n1 2:1\n", 2, "empty label"),
    ("2 6 3\n0,a 1:1\n1 2:1\n", 2, "label 'a'"),
])
def test_read_xmlrepo_malformed(tmp_path, text, line, words):
    p = write(tmp_path / "bad.txt", text)
    expect_format_error(lambda: read_xmlrepo(p), words, p, line=line)


# --------------------------------------------------------------------------- LIBSVM
def test_read_libsvm_single_label(tmp_path):
    p = write(tmp_path / "s.txt", "# header comment\n+1 1:0.5 3:2 # trailing\n\n-1 2:1\n"
              "2.0 4:-1\n")
    d = read_libsvm(p)
    assert d.X.shape == (3, 4)
    np.testing.assert_allclose(d.X.toarray(), [[.5, 0, 2, 0], [0, 1, 0, 0], [0, 0, 0, -1]])
    np.testing.assert_array_equal(d.first_labels(), [1, -1, 2])
    np.testing.assert_array_equal(d.lines, [2, 4, 5])
    assert read_libsvm(p, n_features=10).X.shape == (3, 10)


def test_read_libsvm_zero_based_and_multilabel(tmp_path):
    p = write(tmp_path / "z.txt", "1 0:1 2:2\n0 1:1\n")
    with pytest.raises(DataFormatError, match="index 0 in a 1-based") as ei:
        read_libsvm(p)
    raises_at(ei, p, line=1)
    d = read_libsvm(p, zero_based="auto")
    np.testing.assert_allclose(d.X.toarray(), [[1, 0, 2], [0, 1, 0]])
    # LSHTC layout: comma-space separated labels, arbitrary label ids, unlabelled lines
    p = write(tmp_path / "m.txt", "545, 32 8:1 18:2\n7 1:1\n 3:1\n")
    d = read_libsvm(p, multilabel=True)
    assert d.X.shape == (3, 18)
    np.testing.assert_array_equal(d.first_labels(), [545, 7, -1])
    np.testing.assert_array_equal(d.label_indices, [545, 32, 7])


@pytest.mark.parametrize("text, kw, line, words", [
    ("", {}, 1, "empty"),
    ("\n\n", {}, 2, "no data lines"),
    ("1 1:1\nabc 2:1\n", {}, 2, "not a number"),
    ("1 1:1\n1.5 2:1\n", {}, 2, "not an integer"),
    ("1 1:1\n1 2 3:1\n", {}, 2, "expected one label"),
    ("1 1:1\n 3:1\n", {}, 2, "no label"),
    ("1 1:1\n1 5:1\n", {"n_features": 4}, 2, "beyond n_features"),
    ("1 1:1\n1 qid:3 2:1\n", {}, 2, "'qid:3'"),
    ("1 1:1e400\n", {}, 1, "NaN or inf"),
])
def test_read_libsvm_malformed(tmp_path, text, kw, line, words):
    p = write(tmp_path / "bad.txt", text)
    expect_format_error(lambda: read_libsvm(p, **kw), words, p, line=line)


# --------------------------------------------------------------------------- 20 Newsgroups
def make_news_tar(path, members: dict[str, bytes], prefix=""):
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(prefix + name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return path


NEWS = {
    "20news-bydate-train/sci.space/200": b"From: a\nSubject: Orbit\n\nThe orbit of the moon.",
    "20news-bydate-train/sci.space/31": b"Subject: x\n\nRockets go up, rockets",
    "20news-bydate-train/alt.atheism/5": "Subject: caf\xe9\n\nGod is dead".encode("latin-1"),
    "20news-bydate-test/alt.atheism/7": "Subject: y\n\nna\xefve god".encode("utf-8"),
    "20news-bydate-test/sci.space/9": b"Subject: z\n\nunknownword moon",
    "README": b"ignored",
}


def test_read_20newsgroups(tmp_path):
    p = make_news_tar(tmp_path / "n.tar.gz", NEWS, prefix="./")
    c = read_20newsgroups(p)
    tr, te = c["train"], c["test"]
    assert tr.class_names == ["alt.atheism", "sci.space"] == te.class_names
    # sorted by class, then numerically by file name (31 before 200)
    assert tr.filenames == ["20news-bydate-train/alt.atheism/5",
                            "20news-bydate-train/sci.space/31",
                            "20news-bydate-train/sci.space/200"]
    np.testing.assert_array_equal(tr.labels, [0, 1, 1])
    assert "café" in tr.texts[0]          # latin-1 bytes
    assert "naïve" in te.texts[0]         # UTF-8 bytes decode to the same characters
    X, vocab = bag_of_words(tr.texts)
    assert vocab == sorted(vocab) and "rockets" in vocab and "orbit" in vocab
    j = vocab.index("rockets")
    assert X[1, j] == 2.0 and X[2, j] == 0.0
    Xt, _ = bag_of_words(te.texts, vocab)
    assert Xt.shape == (2, len(vocab))
    assert Xt[1, vocab.index("moon")] == 1.0 and "unknownword" not in vocab
    Xb, vb = bag_of_words(tr.texts, min_df=2, binary=True)
    assert "subject" in vb and "orbit" not in vb and set(Xb.data) == {1.0}


def test_read_20newsgroups_malformed(tmp_path):
    p = write(tmp_path / "n.tar.gz", b"not a tar at all")
    with pytest.raises(DataFormatError, match="tar"):
        read_20newsgroups(p)
    only_train = {k: v for k, v in NEWS.items() if "train" in k}
    p = make_news_tar(tmp_path / "n2.tar.gz", only_train)
    with pytest.raises(DataFormatError, match="no documents under 20news-bydate-test"):
        read_20newsgroups(p)
    other = dict(only_train)
    other["20news-bydate-test/rec.autos/1"] = b"x"
    p = make_news_tar(tmp_path / "n3.tar.gz", other)
    with pytest.raises(DataFormatError, match="different newsgroups"):
        read_20newsgroups(p)


def test_tokenize():
    assert tokenize("Re: The X-Window's FAQ, v2.0!") == ["re", "the", "window", "faq", "v2"]
    assert tokenize("a I  éé") == ["éé"]
    with pytest.raises(ValueError):
        bag_of_words(["a b"], min_df=0)
