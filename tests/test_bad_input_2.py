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
import os
import time
import tracemalloc
import warnings
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalable_softmax import _memory
from scalable_softmax.evaluate import NonFiniteScoreError, evaluate
from scalable_softmax.fit import FitResult, NoProgressWarning, fit
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
            assert res.u is None or res.u.shape == (meta["params"]["N"],)
            assert len(res.history) == meta["frames"]["history"]["rows"]
        assert tracemalloc.get_traced_memory()[1] < 16 * 2**20
    finally:
        tracemalloc.stop()


def test_a_model_larger_than_the_memory_is_refused_before_allocating():
    from scalable_softmax._memory import ModelTooLargeError

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
    from scalable_softmax.repro.runner import NotebookParameterError, parse_value

    t0 = time.perf_counter()
    with pytest.raises(NotebookParameterError, match=r"aliases \(\*name\) are not accepted"):
        parse_value(text)
    assert time.perf_counter() - t0 < 1


def test_deep_yaml_nesting_is_an_error_not_a_recursion_traceback():
    from scalable_softmax.repro.runner import NotebookParameterError, parse_value

    with pytest.raises(NotebookParameterError, match="nested"):
        parse_value("[" * 5000 + "]" * 5000)
    with pytest.raises(NotebookParameterError, match="nested more than 50"):
        parse_value("[" * 60 + "]" * 60)
    assert parse_value("[[1, 2], {a: [3]}]") == [[1, 2], {"a": [3]}]
    assert parse_value("&anchor 3") == 3          # an anchor alone is harmless


def test_yaml_aliases_are_refused_in_parameter_files(tmp_path, monkeypatch):
    from scalable_softmax import paths
    from scalable_softmax.repro import runner

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


@PROFILE
@given(method=st.sampled_from(sorted(METHODS)),
       values=st.lists(_HUGE, min_size=24, max_size=24),
       scale=st.sampled_from([1.0, 1e10, 1e100, 1e154, 1e155, 1e200, 1e300]),
       intercept=st.booleans())
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
    kinds = {type(w.message).__name__ for w in caught}
    if res.diverged:
        assert "DivergenceWarning" in kinds and res.diverged_reason
        return
    assert np.isfinite(res.W).all()
    if res.stalled:
        assert "NoProgressWarning" in kinds
    ev = res.history[res.history.evaluated]
    assert np.isfinite(ev.train_log_loss).all()
    try:
        p = res.predict_proba(X)
    except NonFiniteScoreError:
        return
    assert np.isfinite(p).all() and np.allclose(p.sum(axis=1), 1.0)
