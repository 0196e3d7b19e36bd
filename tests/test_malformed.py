"""Malformed input never reaches a kernel and is never misread (issue 38).

The regression tests reproduce each case of the issue. The property-based tests
(Hypothesis) generate LIBSVM, Extreme Classification and ARFF text and CSR matrices,
well-formed or with one defect, and assert a clear error (``DataFormatError`` or
``ValueError`` naming the input) or a correct reading: never a crash, never a matrix
other than the one the text describes.

They run a short profile by default (a few dozen examples per test); set
``HYPOTHESIS_PROFILE=long`` for thousands (``HYPOTHESIS_PROFILE=long pytest
tests/test_malformed.py``). Hypothesis keeps no example database (``database=None``),
so nothing is written into the repository.
"""
import gzip
import itertools
import json
import os
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalable_softmax import validation
from scalable_softmax.data import cache
from scalable_softmax.data.errors import DataFormatError
from scalable_softmax.data.readers import (
    MAX_SIZE,
    read_arff,
    read_idx,
    read_libsvm,
    read_xmlrepo,
)
from scalable_softmax.fit import FitResult, fit

settings.register_profile("short", max_examples=30, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=3000, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "short"))


def write(path, text):
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------
# the cases, one by one
# ---------------------------------------------------------------------------

def test_1_an_index_past_the_width_is_refused_in_a_child_process():
    code = ("import numpy as np,scipy.sparse as sp\n"
            "from scalable_softmax.evaluate import evaluate\n"
            "X=sp.csr_matrix((np.ones(2),np.array([0,10**9]),np.array([0,1,2])),"
            "shape=(2,3))\n"
            "try:\n    evaluate(X,np.array([0,1]),np.zeros((2,3)))\n"
            "except ValueError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused: X is a malformed sparse matrix" in out.stdout
    assert "column index 1000000000, outside 0..2" in out.stdout


def test_2_auto_base_is_bound_checked_and_zero_based_takes_three_values(tmp_path):
    p = write(tmp_path / "r1.svm", "1 0:1 3:1\n0 2:1\n")
    with pytest.raises(DataFormatError, match=r"r1\.svm, line 1: feature index 3 beyond "
                                              r"n_features=3 \(the file is zero-based"):
        read_libsvm(p, n_features=3, zero_based="auto")
    np.testing.assert_array_equal(read_libsvm(p, n_features=4, zero_based="auto")
                                  .X.toarray(), [[1, 0, 0, 1], [0, 0, 1, 0]])
    one = write(tmp_path / "one.svm", "1 1:1 3:1\n0 2:1\n")   # no 0: one-based
    np.testing.assert_array_equal(read_libsvm(one, n_features=3, zero_based="auto")
                                  .X.toarray(), [[1, 0, 1], [0, 1, 0]])
    for bad in (0, 1, "no", "True", None, 0.0):
        with pytest.raises(ValueError, match="zero_based must be True, False or 'auto'"):
            read_libsvm(p, zero_based=bad)


def test_3_negative_labels_are_labels(tmp_path):
    p = write(tmp_path / "pm.svm", "+1 1:1\n-1 2:1\n-1 1:2\n")
    d = read_libsvm(p)
    assert d.has_label().all()
    np.testing.assert_array_equal(d.first_labels().filled(0), [1, -1, -1])
    m = write(tmp_path / "ml.svm", "-3 1:1\n 2:1\n4,-3 1:1\n")
    d = read_libsvm(m, multilabel=True)
    assert d.has_label().tolist() == [True, False, True]
    assert d.first_labels().filled(0).tolist() == [-3, 0, 4]
    assert np.ma.getmaskarray(d.first_labels()).tolist() == [False, True, False]


def test_3_binary_pm1_rows_train_as_two_classes(tmp_path):
    from scalable_softmax.data.preprocess import apply_conventions
    p = write(tmp_path / "pm.svm", "+1 1:1\n-1 2:1\n-1 1:2 2:1\n1 2:3\n")
    X, y, state, dropped, _ = apply_conventions(read_libsvm(p), max_features=None,
                                                max_points=None, normalize=False)
    assert state.classes.tolist() == [-1, 1] and y.tolist() == [1, 0, 0, 1]
    assert dropped["no_label"] == 0 and X.shape == (4, 2)


def test_4_a_space_separated_label_list_is_an_error_naming_the_line(tmp_path):
    p = write(tmp_path / "ml.svm", "1,2 1:1\n1 2 1:1\n")
    with pytest.raises(DataFormatError, match=r"ml\.svm, line 2: labels '1 2' are "
                                              "separated by something other than commas"):
        read_libsvm(p, multilabel=True)
    x = write(tmp_path / "x.txt", "2 3 4\n0,1 0:1\n2 3 1:1\n")
    with pytest.raises(DataFormatError, match=r"line 3: labels '2 3'"):
        read_xmlrepo(x)
    # the LSHTC layout (a space after the comma) is still read
    ok = write(tmp_path / "lshtc.svm", "545, 32 8:1\n")
    assert read_libsvm(ok, multilabel=True).label_indices.tolist() == [545, 32]


def test_5_cache_key_holds_the_files_identity(tmp_path):
    inputs = __import__("scalable_softmax.data.core", fromlist=["_raw_inputs"])._raw_inputs
    p = write(tmp_path / "f.txt", "abc\n")
    st0 = p.stat()
    a = inputs({"train": p}, tmp_path, verify=False)
    time.sleep(0.01)
    write(p, "xyz\n")                                    # same size
    os.utime(p, ns=(st0.st_atime_ns, st0.st_mtime_ns))   # mtime restored
    b = inputs({"train": p}, tmp_path, verify=False)
    assert a != b, "a rewritten file with its mtime restored kept its cache key"


def _entry(tmp_path, **change):
    X = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 3, 0]]))
    y = np.array([0, 1])
    arrays = {"class_names": np.array(["a", "b"]), "feature_index": np.arange(3)}
    meta = {"K": 2, "name": "t"}
    p = tmp_path / "e.npz"
    cache.save(p, X=X, y=y, arrays=arrays, meta=meta)
    if change:
        with np.load(p) as z:
            d = {k: z[k] for k in z.files}
        d.update(change)
        np.savez(p, **d)
    return p


@pytest.mark.parametrize("change, said", [
    ({"X_indices": np.array([0, 2, 7])}, "column index 7"),
    ({"X_indptr": np.array([0, 3, 2])}, "indptr"),
    ({"y": np.array([0, 5])}, r"labels in 0\.\.5, outside 0\.\.1"),
    ({"y": np.array([0.0, 1.0])}, "labels of dtype float64"),
    ({"X_data": np.array([1, 2, 3], dtype=np.int64)}, "float64"),
    ({"X_shape": np.array([2, 3, 1])}, "shape record"),
    ({"a_feature_index": np.array([0, 2, 1])}, "feature_index"),
    ({"a_class_names": np.array(["a"])}, "class_names"),
])
def test_5_a_tampered_cache_entry_is_refused_with_a_warning(tmp_path, change, said):
    good = _entry(tmp_path)
    got = cache.load(good)
    assert got is not None and got[0].toarray().tolist() == [[1, 0, 2], [0, 3, 0]]
    bad = _entry(tmp_path, **change)
    with pytest.warns(cache.CacheWarning, match=rf"e\.npz: unusable .*{said}.*rebuilding"):
        assert cache.load(bad) is None


def test_6_a_huge_header_dimension_allocates_nothing_large(tmp_path):
    import resource
    p = write(tmp_path / "x.txt", "2 200000000 3\n0 1:1\n1,2 5:2\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    from scalable_softmax.data.preprocess import apply_conventions
    t0 = time.perf_counter()
    X, _, state, _, _ = apply_conventions(read_xmlrepo(p), max_features=10_000,
                                          max_points=None, normalize=True)
    assert time.perf_counter() - t0 < 5
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 200, f"peak memory grew by {grown_mb:.0f} MB"
    # every used column kept, then the smallest unused ones up to max_features
    assert X.shape == (2, 10_000) and state.feature_index[:3].tolist() == [0, 1, 2]
    assert X.toarray()[:, [1, 5]].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    big = write(tmp_path / "big.txt", "1 1000000000000 3\n0 1:1\n")
    with pytest.raises(DataFormatError, match=r"big\.txt, line 1: the header's "
                                              r"D=1000000000000 is beyond the limit"):
        read_xmlrepo(big)
    assert MAX_SIZE == 2**31 - 1


def _saved(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.random((12, 4)), np.arange(12) % 3
    return fit(X, y, "umax", 0.1, epochs=2, K=3, progress=False).save(tmp_path / "m.npz")


def _rewrite(src, dst, replace=None):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = (replace or {}).get(item.filename, zin.read(item.filename))
            zout.writestr(item.filename, data)
    return dst


def _npy(arr):
    import io
    b = io.BytesIO()
    np.save(b, arr)
    return b.getvalue()


def test_6_fitresult_load_checks_a_member_before_reading_it(tmp_path):
    good = _saved(tmp_path)
    # a W member whose header claims 10^6 x 10^6 floats: refused from the header alone
    import io
    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": "<f8", "fortran_order": False,
                                               "shape": (10**6, 10**6)})
    bad = _rewrite(good, tmp_path / "huge.npz",
                   {"W.npy": hdr.getvalue()})
    with pytest.raises(ValueError, match=r"huge\.npz: .*W has shape \(1000000, 1000000\)"):
        FitResult.load(bad)
    # a member the record does not name is never read, even if it is garbage
    extra = _rewrite(good, tmp_path / "extra.npz")
    with zipfile.ZipFile(extra, "a") as z:
        z.writestr("junk.npy", b"\x93NUMPY garbage")
    assert FitResult.load(extra).W.shape == (3, 4)


@pytest.mark.parametrize("field, value", [("K", "3"), ("D", None), ("frames", []),
                                          ("method", 7), ("diverged_at", "x"),
                                          ("params", [1])])
def test_7_a_garbled_record_names_the_file_and_the_field(tmp_path, field, value):
    good = _saved(tmp_path)
    meta = json.loads(str(np.load(good)["meta"][()]))
    meta[field] = value
    p = _rewrite(good, tmp_path / "garbled.npz", {"meta.npy": _npy(np.array(json.dumps(meta)))})
    with pytest.raises(ValueError, match=rf"garbled\.npz: .*'{field}'"):
        FitResult.load(p)


def test_7_numbers_beyond_int64_name_the_file_and_line(tmp_path):
    cases = {"lab.svm": ("1 1:1\n99999999999999999999 1:1\n", "line 2: label"),
             "idx.svm": ("1 99999999999999999999:1\n", "line 1: feature index"),
             "flt.svm": ("1e30 1:1\n", "line 1: label '1e30' is beyond")}
    for name, (text, said) in cases.items():
        with pytest.raises(DataFormatError, match=rf"{name}, {said}"):
            read_libsvm(write(tmp_path / name, text))
    arff = write(tmp_path / "a.arff", "@relation r\n@attribute a numeric\n@data\n"
                                      "{99999999999999999999 1}\n")
    with pytest.raises(DataFormatError, match=r"a\.arff, line 4: attribute index"):
        read_arff(arff)
    # fit with a label beyond int64: Python ints, float and uint64 labels
    for y, said in (([0, 2**70], "y must hold integer class labels"),
                    (np.array([0.0, 1e30]), "y holds the label 1e[+]30 .* beyond the 64-bit"),
                    (np.array([0, 2**64 - 1], dtype=np.uint64), "beyond the 64-bit")):
        with pytest.raises(ValueError, match=said):
            fit(np.eye(2), y, "umax", 0.1, progress=False)


def test_7_idx_sizes_that_overflow_int64_are_a_format_error(tmp_path):
    head = bytes([0, 0, 0x08, 3]) + (2**32 - 1).to_bytes(4, "big") * 3
    p = tmp_path / "x.idx.gz"
    p.write_bytes(gzip.compress(head + b"\x00" * 16))
    with pytest.raises(DataFormatError, match=r"x\.idx\.gz.*idx body too short"):
        read_idx(p)


# ---------------------------------------------------------------------------
# property-based: generated matrices and files
# ---------------------------------------------------------------------------

def _csr_ok(indptr, indices, shape):
    N, D = shape
    return (len(indptr) == N + 1 and indptr[0] == 0 and indptr[-1] == len(indices)
            and all(a <= b for a, b in itertools.pairwise(indptr))
            and all(0 <= j < D for j in indices))


@PROFILE
@given(N=st.integers(1, 5), D=st.integers(1, 5), data=st.data())
def test_a_generated_csr_is_refused_or_read_exactly(N, D, data):
    nnz = data.draw(st.integers(0, 8))
    indices = data.draw(st.lists(st.integers(-2, D + 2), min_size=nnz, max_size=nnz))
    cuts = sorted(data.draw(st.lists(st.integers(0, nnz), min_size=N - 1,
                                     max_size=N - 1)))
    indptr = [0] + cuts + [nnz]
    defect = data.draw(st.sampled_from(["none", "swap", "short", "start", "end"]))
    if defect == "swap" and N > 1 and indptr[1] != indptr[2]:
        indptr[1], indptr[2] = indptr[2], indptr[1]
    elif defect == "short":
        indptr = indptr[:-1]
    elif defect == "start":
        indptr[0] = 1
    elif defect == "end":
        indptr[-1] += 1
    values = data.draw(st.lists(st.floats(-3, 3), min_size=nnz, max_size=nnz))
    X = sp.csr_matrix((N, D))
    X.data, X.indices, X.indptr = (np.array(values, dtype=float),
                                   np.array(indices, dtype=np.int32),
                                   np.array(indptr, dtype=np.int32))
    X.has_canonical_format = data.draw(st.booleans())   # a flag that may lie
    if not _csr_ok(indptr, indices, (N, D)):
        with pytest.raises(ValueError, match="M is a malformed"):
            validation.as_csr(X, "M")
        return
    want = np.zeros((N, D))
    for i in range(N):
        for p in range(indptr[i], indptr[i + 1]):
            want[i, indices[p]] += values[p]
    got = validation.as_csr(X, "M")
    np.testing.assert_array_equal(got.toarray(), want)
    assert got.has_sorted_indices and all(
        np.all(np.diff(got.indices[got.indptr[i]:got.indptr[i + 1]]) > 0)
        for i in range(N))


_GARBAGE = ["1:", ":1", "a:1", "1:nan", "1:inf", "1:1:1", "-1:1", "1:x",
            "99999999999999999999:1", "1.5:2"]


def _rows():
    feats = st.lists(st.tuples(st.integers(0, 12), st.integers(-9, 9).filter(bool)),
                     max_size=5, unique_by=lambda t: t[0])
    return st.lists(st.tuples(st.integers(-4, 4), feats), min_size=1, max_size=6)


@PROFILE
@given(rows=_rows(), zero_based=st.sampled_from([True, False, "auto"]),
       n_features=st.one_of(st.none(), st.integers(1, 14)), garbage=st.data())
def test_generated_libsvm_is_refused_or_read_as_written(tmp_path_factory, rows,
                                                         zero_based, n_features, garbage):
    lines = [" ".join([str(lab)] + [f"{j}:{v}" for j, v in feats]) for lab, feats in rows]
    bad = garbage.draw(st.one_of(st.none(), st.tuples(
        st.integers(0, len(lines) - 1), st.sampled_from(_GARBAGE))))
    if bad is not None:
        lines[bad[0]] += " " + bad[1]
    p = tmp_path_factory.mktemp("svm") / "g.svm"
    p.write_text("\n".join(lines) + "\n")
    if bad is not None:
        with pytest.raises(DataFormatError, match=r"g\.svm, line \d+"):
            read_libsvm(p, zero_based=zero_based, n_features=n_features)
        return
    used = [j for _, f in rows for j, _ in f]
    base = 0 if zero_based is True or (zero_based == "auto" and 0 in used) else 1
    D = n_features if n_features is not None else (max(used) + 1 - base if used else 0)
    expect_error = (base == 1 and 0 in used) or (used and max(used) - base >= max(D, 0))
    if expect_error:
        with pytest.raises(DataFormatError, match=r"g\.svm, line \d+"):
            read_libsvm(p, zero_based=zero_based, n_features=n_features)
        return
    d = read_libsvm(p, zero_based=zero_based, n_features=n_features)
    want = np.zeros((len(rows), max(D, 0)))
    for i, (_, feats) in enumerate(rows):
        for j, v in feats:
            want[i, j - base] = v
    np.testing.assert_array_equal(d.X.toarray(), want)
    assert d.first_labels().filled(0).tolist() == [lab for lab, _ in rows]
    assert d.has_label().all()
    # scikit-learn reads the same matrix (its "auto" and bounds are what ours follow;
    # aside: a file without any feature, where it counts one column, and unsorted
    # indices, which it refuses)
    if used and all([j for j, _ in f] == sorted(j for j, _ in f) for _, f in rows):
        from sklearn.datasets import load_svmlight_file
        Xs, ys = load_svmlight_file(str(p), zero_based=zero_based, n_features=n_features)
        np.testing.assert_array_equal(ys, [lab for lab, _ in rows])
        np.testing.assert_array_equal(Xs.toarray(), want)


@PROFILE
@given(rows=st.lists(st.tuples(st.lists(st.integers(0, 4), max_size=3, unique=True),
                               st.lists(st.tuples(st.integers(0, 6), st.integers(1, 9)),
                                        max_size=4, unique_by=lambda t: t[0])),
                     min_size=1, max_size=5),
       header=st.sampled_from(["ok", "N+1", "D-small", "K-small", "huge", "garbage"]))
def test_generated_xmlrepo_is_refused_or_read_as_written(tmp_path_factory, rows, header):
    N, D, K = len(rows), 7, 5
    used_j = [j for _, f in rows for j, _ in f]
    used_k = [k for labs, _ in rows for k in labs]
    head = {"ok": f"{N} {D} {K}", "N+1": f"{N + 1} {D} {K}",
            "D-small": f"{N} {max(used_j, default=0)} {K}",
            "K-small": f"{N} {D} {max(used_k, default=0)}",
            "huge": f"{N} {10**12} {K}", "garbage": f"{N} {D} x"}[header]
    body = [",".join(map(str, labs)) + " " + " ".join(f"{j}:{v}" for j, v in f)
            for labs, f in rows]
    p = tmp_path_factory.mktemp("xc") / "g.txt"
    p.write_text(head + "\n" + "\n".join(body) + "\n")
    fine = header == "ok" or (header == "D-small" and not used_j) or (
        header == "K-small" and not used_k)
    if not fine:
        with pytest.raises(DataFormatError, match=r"g\.txt, line \d+"):
            read_xmlrepo(p)
        return
    d = read_xmlrepo(p)
    want = np.zeros((N, d.n_features))
    for i, (_, f) in enumerate(rows):
        for j, v in f:
            want[i, j] = v
    np.testing.assert_array_equal(d.X.toarray(), want)
    assert [d.label_indices[d.label_indptr[i]:d.label_indptr[i + 1]].tolist()
            for i in range(N)] == [labs for labs, _ in rows]


@PROFILE
@given(rows=st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(-5, 5).filter(bool)),
                              max_size=4, unique_by=lambda t: t[0]),
                     min_size=1, max_size=4),
       defect=st.sampled_from(["none", "range", "order", "huge", "nan", "text"]))
def test_generated_arff_is_refused_or_read_as_written(tmp_path_factory, rows, defect):
    head = "@relation r\n" + "".join(f"@attribute a{j} numeric\n" for j in range(4))
    body = []
    for r in rows:
        r = sorted(r)
        body.append("{" + ", ".join(f"{j} {v}" for j, v in r) + "}")
    extra = {"range": "{4 1}", "order": "{2 1, 1 1}", "huge": "{99999999999999999999 1}",
             "nan": "{0 nan}", "text": "{0 x}"}.get(defect)
    if extra:
        body.append(extra)
    p = tmp_path_factory.mktemp("arff") / "g.arff"
    p.write_text(head + "@data\n" + "\n".join(body) + "\n")
    if extra:
        with pytest.raises(DataFormatError, match=r"g\.arff, line \d+"):
            read_arff(p)
        return
    a = read_arff(p)
    want = np.zeros((len(rows), 4))
    for i, r in enumerate(rows):
        for j, v in r:
            want[i, j] = v
    np.testing.assert_array_equal(a.X.toarray(), want)



def test_5_a_tampered_cache_file_is_rebuilt_through_load_dataset(tmp_path):
    from scalable_softmax.data import load_dataset
    kw = dict(cache_dir=tmp_path, scale=0.02)
    first = load_dataset("eurlex-surrogate", "train", **kw)
    path = first.info["cache_file"]
    assert load_dataset("eurlex-surrogate", "train", **kw).info["from_cache"]
    with np.load(path) as z:
        d = {k: z[k] for k in z.files}
    d["y"] = d["y"].copy()
    d["y"][0] = first.K + 3                   # a label past K
    with open(path, "wb") as fh:
        np.savez(fh, **d)
    with pytest.warns(cache.CacheWarning, match="labels in .* outside 0..*rebuilding"):
        again = load_dataset("eurlex-surrogate", "train", **kw)
    assert not again.info["from_cache"]
    np.testing.assert_array_equal(again.y, first.y)
    assert (again.X != first.X).nnz == 0
    assert load_dataset("eurlex-surrogate", "train", **kw).info["from_cache"]
