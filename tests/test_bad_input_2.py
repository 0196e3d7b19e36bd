"""Bad input, second round (issue 52): huge values, declared sizes, the runner's
parameters.

Each class of the issue gets a regression test; the classes with a shape get a
Hypothesis property: saved models whose declared sizes disagree with their members,
YAML values across every notebook's parameters, finite-but-huge floats across every
method and entry point. Short profile by default (``HYPOTHESIS_PROFILE=long`` for
more); no example database is kept.
"""
from __future__ import annotations

import io
import json
import math
import os
import time
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from scalable_softmax import validation as _memory
from scalable_softmax.evaluate import NonFiniteScoreError, evaluate
from scalable_softmax.fit import DivergenceWarning, FitResult, NoProgressWarning, fit
from scalable_softmax.methods import METHODS, get_trainer_class

settings.register_profile("short", max_examples=25, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=1000, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture])
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "short"))


def _data(N=40, D=3, K=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    y = np.arange(N) % K
    return X, y, K


def _quiet_fit(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit(*args, progress=False, **kw)


# ---------------------------------------------------------------------------
# 1. pathological allocations
# ---------------------------------------------------------------------------

def _saved(tmp_path, name="m.npz", **kw):
    X, y, K = _data(N=12, D=4)
    return _quiet_fit(X, y, "umax", 0.1, epochs=2, K=K, **kw).save(tmp_path / name)


def _members(path):
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i.filename) for i in z.infolist()}


def _write(path, members, compress=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _npy(arr):
    b = io.BytesIO()
    np.save(b, arr)
    return b.getvalue()


def _meta(members):
    return json.loads(str(np.load(io.BytesIO(members["meta.npy"]))[()]))


def _with_meta(members, meta):
    return {**members, "meta.npy": _npy(np.array(json.dumps(meta)))}


def test_load_refuses_a_model_larger_than_the_memory_before_reading_it(tmp_path, monkeypatch):
    # an honest archive: 2048 x 2048 zeros (32 MiB) deflate to about 33 kB
    members = _members(_saved(tmp_path))
    meta = _meta(members)
    K = D = 2048
    meta.update(K=K, D=D)
    path = _write(tmp_path / "big.npz",
                  {**_with_meta(members, meta), "W.npy": _npy(np.zeros((K, D)))})
    assert path.stat().st_size < 100_000
    monkeypatch.setattr(_memory, "available_bytes", lambda: 16 * 2**20)
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError, match=r"big\.npz \(K = 2,048, D = 2,048; its arrays: "
                                              r"W 33,554,432 bytes.*16,777,216 bytes\) of "
                                              r"memory available"):
            FitResult.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20            # streamed, never allocated
    with pytest.raises(ValueError):      # a ValueError too, for the callers that catch it
        FitResult.load(path)
    monkeypatch.undo()
    assert FitResult.load(path).W.shape == (K, D)


def test_load_refuses_a_member_holding_less_than_its_header_declares(tmp_path):
    members = _members(_saved(tmp_path))
    meta = _meta(members)
    meta.update(K=16384, D=16384)
    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": "<f8", "fortran_order": False,
                                               "shape": (16384, 16384)})
    path = _write(tmp_path / "lie.npz", {**_with_meta(members, meta),
                                         "W.npy": hdr.getvalue() + b"\0" * 4096})
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"lie\.npz: .*'W'.*declares 2,147,483,648 "
                                             r"bytes of data but the archive entry holds 4,096"):
            FitResult.load(path)
        assert tracemalloc.get_traced_memory()[1] < 8 * 2**20
    finally:
        tracemalloc.stop()


def test_load_bounds_u_by_the_records_N(tmp_path):
    members = _members(_saved(tmp_path))
    assert _meta(members)["params"]["N"] == 12
    path = _write(tmp_path / "u.npz", {**members, "u.npy": _npy(np.zeros(50_000))})
    with pytest.raises(ValueError, match=r"u\.npz: .*u \(one value per training row\) has "
                                         r"50000 rows, expected 12"):
        FitResult.load(path)
    meta = _meta(members)
    meta["params"]["N"] = -3
    with pytest.raises(ValueError, match="params.N"):
        FitResult.load(_write(tmp_path / "n.npz", _with_meta(members, meta)))


_MUTATIONS = st.one_of(
    st.tuples(st.just("K"), st.integers(-2, 2**42)),
    st.tuples(st.just("D"), st.integers(-2, 2**42)),
    st.tuples(st.just("N"), st.one_of(st.integers(-2, 10**9), st.none(), st.just(1.5))),
    st.tuples(st.just("rows"), st.integers(-2, 10**9)),
    st.tuples(st.just("W"), st.tuples(st.integers(0, 40), st.integers(0, 40))),
    st.tuples(st.just("u"), st.integers(0, 200)),
    st.tuples(st.just("intercept"), st.integers(0, 10)),
    st.tuples(st.just("history/epoch"), st.integers(0, 10)),
)


@PROFILE
@given(mutations=st.lists(_MUTATIONS, min_size=1, max_size=3))
def test_property_model_files_whose_sizes_disagree_with_their_members(tmp_path, mutations):
    """A saved model whose record (K, D, N, rows) or members (W, u, intercept, a history
    column) disagree is refused with a ValueError naming the file, or, if the
    mutations happen to agree, read with shapes that match the record; never a
    MemoryError, never a large allocation."""
    members = _members(_saved(tmp_path, fit_intercept=True))
    meta = _meta(members)
    for what, value in mutations:
        if what in ("K", "D"):
            meta[what] = value
        elif what == "N":
            meta["params"]["N"] = value
        elif what == "rows":
            meta["frames"]["history"]["rows"] = value
        elif what == "W":
            members["W.npy"] = _npy(np.zeros(value))
        elif what == "intercept":
            members["intercept.npy"] = _npy(np.zeros(value))
        elif what == "u":
            members["u.npy"] = _npy(np.zeros(value))
        else:
            members[f"{what}.npy"] = _npy(np.arange(value))
    path = _write(tmp_path / "mut.npz", _with_meta(members, meta))
    tracemalloc.start()
    try:
        try:
            res = FitResult.load(path)
        except ValueError as exc:
            assert "mut.npz" in str(exc)
        else:
            assert res.W.shape == (meta["K"], meta["D"])
            assert res.intercept.shape == (meta["K"],)
            N = meta["params"]["N"]
            assert res.u is None or N is None or res.u.shape == (N,)
            assert len(res.history) == meta["frames"]["history"]["rows"]
        assert tracemalloc.get_traced_memory()[1] < 16 * 2**20
    finally:
        tracemalloc.stop()


def test_a_model_larger_than_the_memory_is_refused_before_allocating():
    from scalable_softmax.fit import ModelTooLargeError

    X, y, _ = _data(N=6, D=2)
    t0 = time.perf_counter()
    with pytest.raises(ModelTooLargeError, match=r"K = 1,000,000,000 classes x D = 2 "
                                                 r"features.*16,000,000,000 bytes.*available"):
        fit(X, y, "umax", 0.1, K=10**9, epochs=1, progress=False)
    with pytest.raises(ValueError, match="needs .* GiB"):   # a ValueError as well
        fit(X, y, "exact", None, K=10**9, epochs=1, progress=False)
    assert time.perf_counter() - t0 < 5


def test_a_libsvm_file_declaring_a_huge_D_is_refused_with_the_bytes(tmp_path, monkeypatch):
    from scalable_softmax.data.readers import read_libsvm

    path = tmp_path / "huge-d.svm"
    path.write_text("1 1:1.0\n2 2147483647:1.0\n")
    data = read_libsvm(path)
    assert data.X.shape[1] == 2**31 - 1
    monkeypatch.setattr(_memory, "available_bytes", lambda: 16 * 2**30)
    with pytest.raises(MemoryError, match=r"D = 2,147,483,647 features.*W alone.*bytes.*"
                                          r"declares a huge D"):
        fit(data.X, data.label_indices - 1, "umax", 0.1, epochs=1, progress=False)


def test_the_memory_check_says_how_much_and_why(monkeypatch):
    X, y, K = _data(N=20, D=50, K=4)
    monkeypatch.setattr(_memory, "available_bytes", lambda: 10_000)
    with pytest.raises(MemoryError, match=r"'exact' model of K = 4 classes x D = 50 "
                                          r"features.*26 arrays of that size for L-BFGS"):
        fit(X, y, "exact", None, epochs=1, progress=False)
    monkeypatch.setattr(_memory, "available_bytes", lambda: None)   # unknown: no check
    assert _quiet_fit(X, y, "umax", 0.1, epochs=1).W.shape == (4, 50)


def test_the_memory_reading_is_plausible():
    have = _memory.available_bytes()
    assert have is None or 2**20 < have < 2**50


@pytest.mark.parametrize("text", ["&a [*a]", "a: &x [1]\nb: *x",
                                  "[&a [1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a],"
                                  " &c [*b,*b,*b,*b,*b,*b,*b,*b,*b], [*c,*c,*c,*c,*c,*c,*c]]"])
def test_yaml_aliases_are_refused_in_p_values(text):
    from scalable_softmax.repro.machinery.runner import NotebookParameterError, parse_value

    t0 = time.perf_counter()
    with pytest.raises(NotebookParameterError, match=r"aliases \(\*name\) are not accepted"):
        parse_value(text)
    assert time.perf_counter() - t0 < 1


def test_deep_yaml_nesting_is_an_error_not_a_recursion_traceback():
    from scalable_softmax.repro.machinery.runner import NotebookParameterError, parse_value

    with pytest.raises(NotebookParameterError, match="nested"):
        parse_value("[" * 5000 + "]" * 5000)
    with pytest.raises(NotebookParameterError, match="nested more than 50"):
        parse_value("[" * 60 + "]" * 60)
    assert parse_value("[[1, 2], {a: [3]}]") == [[1, 2], {"a": [3]}]
    assert parse_value("&anchor 3") == 3          # an anchor alone is harmless


def test_yaml_aliases_are_refused_in_parameter_files(tmp_path, monkeypatch):
    from scalable_softmax import paths
    from scalable_softmax.repro.machinery import runner

    monkeypatch.setattr(paths, "PARAMS", tmp_path)
    (tmp_path / "99-x.yaml").write_text("full:\n  a: &x [1, 2]\n  b: *x\n")
    with pytest.raises(ValueError, match=r"99-x\.yaml.*aliases"):
        runner.load_params("99-x", "full")
    with pytest.raises(ValueError, match=r"99-x\.yaml.*aliases"):
        runner.load_allowed("99-x")


# ---------------------------------------------------------------------------
# 2. silent results on huge finite values
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["exact", "bouchard", "ove-exact"])
def test_a_full_batch_run_that_stops_without_progress_warns(method, tmp_path):
    X, y, K = _data()
    with pytest.warns(NoProgressWarning, match=rf"fit\('{method}'\) stopped without "
                                               r"converging after \d L-BFGS iteration"):
        res = fit(X * 1e10, y, method, None, epochs=3, progress=False)
    assert "line search failed" in res.stalled
    assert FitResult.load(res.save(tmp_path / "s.npz")).stalled == res.stalled
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # a normal run does not warn
        ok = fit(X, y, method, None, epochs=3, mu=0.1, progress=False)
    assert ok.stalled is None


@pytest.mark.parametrize("method", ["implicit", "implicit-batch"])
def test_implicit_rows_whose_squared_norm_overflows_are_an_error(method):
    X, y, K = _data()
    with pytest.raises(ValueError, match=rf"row 0 of X .*squared norm .*'{method}'"):
        fit(X * 1e155, y, method, 0.1, epochs=1, progress=False)
    with pytest.raises(ValueError, match="intercept_scaling"):
        fit(X, y, method, 0.1, epochs=1, progress=False, fit_intercept=True,
            intercept_scaling=1e300)


def test_long_double_x_is_checked_after_the_cast():
    X, y, K = _data()
    big = X.astype(np.longdouble)
    big[3, 1] = np.longdouble("1e4000")
    with pytest.raises(ValueError, match="X contains non-finite values .*float64 range"):
        fit(big, y, "umax", 0.1, epochs=1, progress=False)
    with pytest.raises(ValueError, match="non-finite"):
        evaluate(big, y, np.zeros((K, 3)))
    res = _quiet_fit(X, y, "umax", 0.1, epochs=1)
    with pytest.raises(ValueError, match="non-finite"):
        res.predict(big)
    # a long double array inside the float64 range trains as its float64 cast
    a = _quiet_fit(X.astype(np.longdouble), y, "umax", 0.1, epochs=1)
    assert np.array_equal(a.W, res.W)


def test_huge_scores_have_one_policy_everywhere():
    from scalable_softmax import SoftmaxSGDClassifier

    X, y, K = _data(N=10, D=2)
    res = _quiet_fit(X, y, "umax", 0.1, epochs=1, K=K)
    res.W[:] = 1e308
    res.W[1] = -1e308
    for call in (res.decision_function, res.predict_proba, res.predict_log_proba,
                 res.predict):
        with pytest.raises(NonFiniteScoreError, match=r"row \d+ of X, class \d"):
            call(X)
    with pytest.raises(NonFiniteScoreError):
        evaluate(X, y, res.W)
    est = SoftmaxSGDClassifier(method="umax", lr=0.1, epochs=1).fit(X, y)
    est.coef_[:] = 1e308
    for call in (est.predict_proba, est.predict, est.decision_function):
        with pytest.raises(NonFiniteScoreError):
            call(X)
    # scores that are finite but far apart give finite probabilities (0 and 1)
    res.W[:] = 0.0
    res.W[0, 0] = 1e300
    p = res.predict_proba(np.array([[1.0, 0.0]]))
    assert np.isfinite(p).all() and p[0, 0] == 1.0


def test_implicit_batch_bounds_tol_like_implicit():
    X, y, K = _data()
    for method in ("implicit", "implicit-batch"):
        with pytest.raises(ValueError, match=r"option 'tol' must be a number in \(0\.0, "
                                             r"0\.01\); got 1e\+300"):
            fit(X, y, method, 0.1, epochs=1, progress=False, tol=1e300)


_HUGE = st.floats(allow_nan=False, allow_infinity=False, width=64)


def _says_what_happened(res, caught) -> bool:
    """A fit's result on huge values: diverged with its warning and reason, or finite
    weights, and a stalled run with its NoProgressWarning. True when the run diverged
    (its weights may then be non-finite: nothing more about them is checked)."""
    kinds = {type(w.message).__name__ for w in caught}
    if res.diverged:
        assert "DivergenceWarning" in kinds and res.diverged_reason
        return True
    assert np.isfinite(res.W).all()
    assert res.stalled is None or "NoProgressWarning" in kinds
    return False


@PROFILE
@given(method=st.sampled_from(sorted(METHODS)),
       values=st.lists(_HUGE, min_size=24, max_size=24),
       scale=st.sampled_from([1.0, 1e10, 1e100, 1e154, 1e155, 1e200, 1e300]),
       intercept=st.booleans())
# CI's case: raman diverges to W = -inf on one huge feature (its weights are not usable)
@example(method="raman", values=[0.0] * 23 + [5.136266099606617e307], scale=1.0,
         intercept=False)
def test_property_finite_but_huge_floats_in_every_method(method, values, scale, intercept):
    """Finite X of any magnitude, in every method: a clear ValueError naming X (or a
    row of it), or a result whose weights are finite, whose history is finite, and
    which says what happened (DivergenceWarning and ``diverged``, NoProgressWarning and
    ``stalled``); never another exception, never a silent W = 0 from an overflow."""
    with np.errstate(over="ignore"):
        X = np.clip(np.asarray(values).reshape(8, 3) * scale, -1.7e308, 1.7e308)
    y = np.arange(8)
    full = get_trainer_class(method).full_batch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = fit(X, y, method, None if full else 0.5, epochs=2, K=8, progress=False,
                      fit_intercept=intercept, **({"iters_per_epoch": 5} if full else {}))
        except ValueError as exc:
            assert any(w in str(exc) for w in ("X", "row", "intercept")), exc
            return
    if _says_what_happened(res, caught):
        return
    ev = res.history[res.history.evaluated]
    assert np.isfinite(ev.train_log_loss).all()
    try:
        p = res.predict_proba(X)
    except NonFiniteScoreError:
        return
    assert np.isfinite(p).all() and np.allclose(p.sum(axis=1), 1.0)


# ---------------------------------------------------------------------------
# 3. options and arguments
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("classes", [[0, 1, 2, 3, np.nan], [0.0, np.inf], [None, 1], [1],
                                     [[0, 1]]])
def test_partial_fit_refuses_classes_that_cannot_be_classes(classes):
    from scalable_softmax import SoftmaxSGDClassifier

    X, y, K = _data(N=8, D=2, K=2)
    with pytest.raises(ValueError, match="classes"):
        SoftmaxSGDClassifier(method="umax", lr=0.1).partial_fit(X, y, classes=classes)


@pytest.mark.parametrize("bad", [np.ones((3, 3)) * (1 + 1j), sp.csr_matrix(np.ones((3, 3))),
                                 np.array([["a"] * 3] * 3)])
def test_init_w_must_be_a_dense_real_array(bad):
    X, y, K = _data()
    with pytest.raises(ValueError, match=r"init_W must (hold real numbers|be a dense)"):
        fit(X, y, "umax", 0.1, epochs=1, progress=False, init_W=bad)
    with pytest.raises(ValueError, match=r"init_intercept must (hold real|be a dense)"):
        fit(X, y, "umax", 0.1, epochs=1, progress=False, fit_intercept=True,
            init_intercept=bad[0])


@pytest.mark.parametrize("method, option", [("umax", "threads"), ("exact", "parallel")])
def test_n_jobs_and_the_threads_option_together_are_an_error(method, option):
    from scalable_softmax import SoftmaxSGDClassifier

    X, y, K = _data(N=8, D=2, K=2)
    est = SoftmaxSGDClassifier(method=method, lr=None if method == "exact" else 0.1,
                               n_jobs=2, method_options={option: 1}, epochs=1)
    with pytest.raises(ValueError, match=rf"n_jobs=2 and method_options=\{{'{option}'"):
        est.fit(X, y)
    with pytest.raises(ValueError, match="both set the threads"):
        est.set_params(n_jobs=1).fit(X, y)


@pytest.mark.parametrize("rs", [-1, 1.5, np.nan, True])
def test_estimator_random_state_must_be_a_seed(rs):
    from scalable_softmax import SoftmaxSGDClassifier

    X, y, K = _data(N=8, D=2, K=2)
    with pytest.raises(ValueError, match="random_state must be None, an integer >= 0"):
        SoftmaxSGDClassifier(method="umax", lr=0.1, epochs=1, random_state=rs).fit(X, y)


@pytest.mark.parametrize("text, what", [("1_0 1:1\n", "label '1_0'"),
                                        ("1 1:1_000\n", "feature value '1_000'"),
                                        ("\u0661 1:1\n", "label"),
                                        ("1 1:\u0661\n", "feature value"),
                                        ("1 \u0661:1\n", "token")])
def test_libsvm_numbers_are_plain_ascii_without_digit_separators(tmp_path, text, what):
    from scalable_softmax.data.errors import DataFormatError
    from scalable_softmax.data.readers import read_libsvm

    path = tmp_path / "sep.svm"
    path.write_text("2 1:1\n" + text)
    with pytest.raises(DataFormatError, match=rf"sep\.svm, line 2: {what}"):
        read_libsvm(path)


@pytest.mark.parametrize("bad", [1.5, -1, True, "3"])
def test_max_points_must_be_an_integer(tmp_path, bad):
    from scalable_softmax.data.readers import read_libsvm

    path = tmp_path / "a.svm"
    path.write_text("1 1:1\n2 2:1\n")
    with pytest.raises(ValueError, match="max_points must be None or an integer >= 0"):
        read_libsvm(path, max_points=bad)
    assert read_libsvm(path, max_points=1).X.shape[0] == 1


@pytest.mark.parametrize("kw, field", [({"eval_epochs": [1.5, 2.9]}, "eval_epochs"),
                                       ({"lr": "0.1"}, "lr"), ({"lr": True}, "lr"),
                                       ({"seed": 1.9}, "seed"), ({"seed": -1}, "seed"),
                                       ({"eval_epochs": [True]}, "eval_epochs")])
def test_runspec_make_uses_fits_rules(kw, field):
    from scalable_softmax.repro.machinery.runs import RunSpec

    lr = kw.pop("lr", 0.1)
    with pytest.raises(ValueError, match=rf"RunSpec\.{field}"):
        RunSpec.make("mnist-surrogate", "umax", lr, **kw)
    # fit refuses the same values
    X, y, K = _data()
    with pytest.raises(ValueError):
        fit(X, y, "umax", lr, epochs=3, progress=False, **kw)


# ---------------------------------------------------------------------------
# 4. bare exceptions become clear errors
# ---------------------------------------------------------------------------

def test_empty_eval_sets_and_a_non_callable_on_epoch_fail_before_training():
    X, y, K = _data()
    with pytest.raises(ValueError, match="eval_sets is empty"):
        fit(X, y, "umax", 0.1, epochs=1, progress=False, eval_sets={})
    with pytest.raises(ValueError, match="on_epoch must be None or a callable"):
        fit(X, y, "umax", 0.1, epochs=1, progress=False, on_epoch=5)


def test_save_names_the_target_not_the_temporary_file(tmp_path, monkeypatch):
    X, y, K = _data()
    res = _quiet_fit(X, y, "umax", 0.1, epochs=1)
    for target in ("", ".", str(tmp_path), str(tmp_path) + "/"):
        with pytest.raises(ValueError, match="not a file name"):
            res.save(target)

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", full)
    with pytest.raises(OSError, match=r"cannot save the model to .*m\.npz \(No space left"
                                      r" on device\)") as info:
        res.save(tmp_path / "m.npz")
    assert info.value.filename == str(tmp_path / "m.npz")
    assert ".tmp" not in str(info.value)
    assert list(tmp_path.iterdir()) == []        # nothing half-written


@pytest.mark.parametrize("kind", ["bz2", "xz"])
def test_bz2_and_xz_libsvm_files_are_read_like_gzip(tmp_path, kind):
    import bz2
    import lzma

    from scalable_softmax.data.errors import DataFormatError
    from scalable_softmax.data.readers import read_libsvm

    text = b"1 1:0.5 3:2\n2 2:1\n"
    comp = {"bz2": bz2.compress, "xz": lzma.compress}[kind]
    plain = read_libsvm(_write_bytes(tmp_path / "a.svm", text))
    packed = read_libsvm(_write_bytes(tmp_path / "a.bin", comp(text)))
    assert (packed.X != plain.X).nnz == 0
    assert np.array_equal(packed.label_indices, plain.label_indices)
    with pytest.raises(DataFormatError, match=r"cut\.bin: cannot decompress"):
        read_libsvm(_write_bytes(tmp_path / "cut.bin", comp(text * 50)[:-12]))


def _write_bytes(path, data):
    path.write_bytes(data)
    return path


def test_sparse_arff_accepts_a_quoted_binary_nominal_value(tmp_path):
    from scalable_softmax.data.errors import DataFormatError
    from scalable_softmax.data.readers import read_arff

    head = "@relation r\n@attribute a {0,1}\n@attribute b numeric\n@data\n"
    path = tmp_path / "q.arff"
    path.write_text(head + "{0 '1', 1 2.5}\n{0 \"1\"}\n{0 1}\n")
    assert read_arff(path).X.toarray().tolist() == [[1, 2.5], [1, 0], [1, 0]]
    path.write_text(head + "{0 '2'}\n")
    with pytest.raises(DataFormatError, match="not one of the declared values"):
        read_arff(path)
    path.write_text(head + "{1 1_0}\n")
    with pytest.raises(DataFormatError, match=r"q\.arff, line 5: value '1_0'"):
        read_arff(path)


def test_sparse_weights_to_evaluate_are_a_clear_error():
    X, y, K = _data()
    W = sp.csr_matrix(np.ones((K, 3)))
    with pytest.raises(ValueError, match="W must be a dense array; got a scipy.sparse CSR"):
        evaluate(X, y, W)
    with pytest.raises(ValueError, match="intercept must be a dense array"):
        evaluate(X, y, np.ones((K, 3)), intercept=sp.csr_matrix(np.ones((1, K))))


@pytest.mark.parametrize("options, match", [({"seed": -1}, "seed must be an integer >= 0"),
                                            ({"seed": 1.9}, "seed must be an integer"),
                                            ({"scale": float("nan")}, "scale must be"),
                                            ({"bayes_error": "0.3"}, "bayes_error must be")])
def test_surrogate_options_are_checked(tmp_path, options, match):
    from scalable_softmax.data import load_dataset

    with pytest.raises(ValueError, match=match):
        load_dataset("eurlex-surrogate", cache=False, cache_dir=tmp_path, **options)


def test_a_cache_dir_that_is_a_file_fails_before_building(tmp_path):
    from scalable_softmax.data import load_dataset

    f = tmp_path / "file"
    f.write_text("x")
    for cache_dir in (f, f / "sub"):
        t0 = time.perf_counter()
        with pytest.raises(NotADirectoryError, match=r"cache_dir .*file is a file"):
            load_dataset("eurlex-surrogate", cache_dir=cache_dir, scale=0.01)
        assert time.perf_counter() - t0 < 1


# ---------------------------------------------------------------------------
# the runner's parameters: every one has a rule, no .inf, YAML values of any shape
# ---------------------------------------------------------------------------

def _notebooks():
    from scalable_softmax.repro.machinery import runner

    return runner.known_notebooks()


def test_every_parameter_of_every_notebook_has_an_allowed_rule():
    from scalable_softmax.repro.machinery import runner

    missing = {nb: [k for k in runner.declared_parameters(nb)
                    if k != runner.OUTPUT_ROOT and k not in runner.load_allowed(nb)]
               for nb in _notebooks()}
    assert not {nb: ks for nb, ks in missing.items() if ks}, \
        f"parameters without an allowed: rule in params/NAME.yaml: {missing}"


@pytest.mark.parametrize("name, key, text", [("09-ove-toy-2d", "gtol", ".inf"),
                                             ("09-ove-toy-2d", "spread", ".inf"),
                                             ("09-ove-toy-2d", "spread", ".nan"),
                                             ("10-ove-classification", "gtol", "-.inf"),
                                             ("12-peers", "caps", "{bibtex: .inf}"),
                                             ("03-learning-rate-tuning", "learning_rates",
                                              "[0.1, .inf]")])
def test_runner_check_refuses_non_finite_numbers(name, key, text, capsys):
    from scalable_softmax.repro.machinery import runner

    params = runner.effective_params(name, "full", {key: runner.parse_value(text)})
    with pytest.raises(runner.NotebookParameterError, match=rf"parameter {key} = .*not a "
                                                            "finite number"):
        runner.check_values(name, params)
    assert runner.main(["check", name, "-p", key, " " + text]) != 0   # " -.inf": a value
    assert "not a finite number" in capsys.readouterr().err


def test_any_of_rules():
    from scalable_softmax import validation

    r = validation.rule({"any_of": [{"one_of": ["paper"]}, {"like": "lr"}]})
    assert validation.violation("paper", r) is None and validation.violation(0.1, r) is None
    assert validation.violation("fast", r) == ("fast",)
    assert validation.violation(True, r) == (True,)
    assert validation.describe(r) == "one of paper or a finite number > 0"
    with pytest.raises(ValueError, match="any_of must be a list"):
        validation.rule({"any_of": {"type": "int"}})


_YAML_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
              st.floats(allow_nan=True, allow_infinity=True),
              st.text(alphabet="abc-_ .019", max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(alphabet="abmnist0-", min_size=1,
                                                    max_size=8), inner, max_size=3)),
    max_leaves=8)


def _kind(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return type(v).__name__


@pytest.fixture(scope="module")
def notebook_parameters():
    from scalable_softmax.repro.machinery import runner

    return {nb: (runner.declared_parameters(nb), runner.load_allowed(nb),
                 runner.load_params(nb, "full")) for nb in _notebooks()}


@PROFILE
@given(data=st.data(), value=_YAML_VALUES)
def test_property_yaml_values_across_every_notebooks_parameters(notebook_parameters, data,
                                                                value):
    """Any YAML value given with -p to any parameter of any notebook is refused with a
    NotebookParameterError naming the parameter, or accepted only if it is finite and
    of the kind the notebook's default has (or None where the rule allows it, or what an
    any_of rule names)."""
    import yaml

    from scalable_softmax.repro.machinery import runner

    nb = data.draw(st.sampled_from(sorted(notebook_parameters)))
    declared, rules, full = notebook_parameters[nb]
    key = data.draw(st.sampled_from(sorted(k for k in declared if k != runner.OUTPUT_ROOT)))
    text = yaml.safe_dump(value, default_flow_style=True).strip()
    if text.endswith("\n..."):
        text = text[:-4].strip()
    try:
        parsed = runner.parse_value(text)
        params = runner.effective_params(nb, "full", {key: parsed})
        runner.check_values(nb, params)
    except runner.NotebookParameterError as exc:
        assert key in str(exc) or "YAML" in str(exc) or "nested" in str(exc), exc
        return
    assert runner._non_finite(parsed) is None
    rule = rules[key]
    kinds = {_kind(declared[key])} | ({"null"} if rule.get("nullable") else set())
    if "any_of" in rule or declared[key] is None:
        return
    assert _kind(parsed) in kinds, (nb, key, parsed)


@PROFILE
@given(w=st.lists(_HUGE, min_size=6, max_size=6), x=st.lists(_HUGE, min_size=6, max_size=6),
       b=st.one_of(st.none(), st.lists(_HUGE, min_size=3, max_size=3)))
def test_property_finite_but_huge_floats_at_every_scoring_entry_point(w, x, b):
    """Finite weights, intercepts and rows of any magnitude, scored by evaluate,
    evaluate_sets, FitResult's decision_function / predict_proba / predict_log_proba /
    predict and the estimator: each either raises NonFiniteScoreError (a score or a
    log-loss overflowed) or returns finite numbers (probabilities summing to 1); one
    policy for all, so predict never picks a class among NaN scores."""
    from scalable_softmax import SoftmaxSGDClassifier
    from scalable_softmax.evaluate import evaluate_sets

    W = np.asarray(w).reshape(3, 2)
    X = np.asarray(x).reshape(3, 2)
    y = np.arange(3)
    intercept = None if b is None else np.asarray(b)
    res = FitResult(W=W, u=None, history=None, diverged_at=None, method="umax", params={},
                    intercept=intercept)
    with np.errstate(all="ignore"):       # the scores as decision_function sums them
        S = (sp.csr_matrix(X) @ W.T) + (0 if intercept is None else intercept)
    # NaN or +inf scores, or a row of -inf scores: no probabilities exist
    overflow = bool(np.isnan(S).any() or (S == np.inf).any()
                    or (S.max(axis=1) == -np.inf).any())
    for call in (res.decision_function, res.predict_proba, res.predict_log_proba,
                 res.predict):
        try:
            out = call(X)
        except NonFiniteScoreError:
            assert overflow
            continue
        assert not overflow and not np.isnan(out).any() and not (out == np.inf).any()
        if call == res.predict_proba:
            assert np.isfinite(out).all() and np.allclose(out.sum(axis=1), 1.0)
    for ev in (lambda: evaluate(X, y, W, intercept=intercept, precision="float64"),
               lambda: evaluate_sets({"a": (X, y)}, W, intercept=intercept)["a"]):
        try:
            e = ev()
        except NonFiniteScoreError:      # also for a label's score of -inf (log-loss inf)
            continue
        # (its kernel sums in its own order: at the edge of the range it may differ)
        assert math.isfinite(e.log_loss) and 0 <= e.error <= 1
    est = SoftmaxSGDClassifier(method="umax", lr=0.1, epochs=1,
                               fit_intercept=intercept is not None).fit(X * 0 + 1, y)
    est.coef_, est.intercept_ = W, (np.zeros(3) if intercept is None else intercept)
    for call in (est.predict, est.predict_proba, est.decision_function):
        try:
            out = call(X)
        except NonFiniteScoreError:
            assert overflow
            continue
        assert not overflow and (call == est.predict or not np.isnan(out).any())


_POSITIVE = st.one_of(st.sampled_from([5e-324, 1e-300, 1e-10, 1.0, 1e10, 1e100, 1e200,
                                       1e300, 1.7976931348623157e308]),
                      st.floats(min_value=5e-324, allow_nan=False, allow_infinity=False))


@PROFILE
@given(method=st.sampled_from(sorted(METHODS)), lr=_POSITIVE,
       mu=st.one_of(st.just(0.0), _POSITIVE), scaling=st.one_of(st.none(), _POSITIVE))
def test_property_finite_but_huge_settings_in_every_method(method, lr, mu, scaling):
    """Finite learning rates, ridge parameters and intercept scalings of any magnitude:
    a clear ValueError naming the setting or the data, or a result that says what
    happened (finite weights, or DivergenceWarning / NoProgressWarning); never a bare
    ZeroDivisionError, LinAlgError or MemoryError."""
    X, y, K = _data(N=12, D=3, K=4)
    full = get_trainer_class(method).full_batch
    kw = {"fit_intercept": True, "intercept_scaling": scaling} if scaling else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = fit(X, y, method, None if full else lr, epochs=2, K=K, progress=False,
                      mu=mu, n_sampled=None if full else 2,
                      **kw, **({"iters_per_epoch": 5} if full else {}))
        except ValueError as exc:
            assert any(w in str(exc) for w in ("X", "row", "intercept", "lr", "mu")), exc
            return
    _says_what_happened(res, caught)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_a_kernels_numeric_breakdown_is_a_divergence(monkeypatch):
    X, y, K = _data(N=20, D=3, K=4)
    with pytest.warns(DivergenceWarning, match=r"failed on huge values \(ZeroDivisionError"):
        res = fit(np.abs(X), y, "implicit", 0.1, epochs=2, progress=False, mu=1e308)
    assert res.diverged and "ZeroDivisionError" in res.diverged_reason
    # a singular system in a step (implicit-batch's Newton solve) the same way
    cls = get_trainer_class("implicit-batch")

    def singular(self, order, lr, seed):
        raise np.linalg.LinAlgError("Matrix is singular")

    monkeypatch.setattr(cls, "run_epoch", singular)
    with pytest.warns(DivergenceWarning, match=r"LinAlgError: Matrix is singular"):
        res = fit(X, y, "implicit-batch", 0.1, epochs=2, progress=False)
    assert res.diverged_at == (1, -1)


def test_a_huge_batch_size_is_refused_with_the_bytes():
    X, y, K = _data(N=20, D=3, K=4)
    for method in ("softmax-sgd", "ove", "implicit-batch"):
        with pytest.raises(MemoryError, match=r"batch_size = 1,000,000,000,000 .*needs "
                                              r".*use a batch_size of at most N = 20"):
            fit(X, y, method, 0.1, epochs=1, progress=False, batch_size=10**12,
                n_sampled=2)
