"""Using a trained model: FitResult.predict / predict_proba / decision_function,
save / load, fit_intercept, warm starts (init_W, u_init="exact"), and the README's
example on svmlight data."""
from __future__ import annotations

import json
import os
import re
import zipfile

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax import __version__, paths
from scalable_softmax import objectives as ob
from scalable_softmax.fit import FORMAT_NAME, FitResult, fit
from scalable_softmax.methods import METHODS, get_trainer_class


def _lr(method, value):
    """``value``, or None for the full-batch (L-BFGS) methods, which take no rate."""
    from scalable_softmax.methods import get_trainer_class

    return None if getattr(get_trainer_class(method), "full_batch", False) else value

def _data(N=240, D=6, K=4, seed=0, prior=None):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D)) / np.sqrt(D)
    logits = X @ rng.standard_normal((K, D)).T * 3 + rng.gumbel(size=(N, K))
    if prior is not None:
        logits = logits + np.log(prior)[None, :]
    return X, np.argmax(logits, axis=1), K


@pytest.fixture(scope="module")
def trained():
    X, y, K = _data()
    return X, y, K, fit(X, y, "umax", 0.5, epochs=5, progress=False, fit_intercept=True)


# ---------------------------------------------------------------------------
# predict, predict_proba, decision_function
# ---------------------------------------------------------------------------

def test_scores_probabilities_and_predictions_match_the_reference(trained):
    X, y, K, res = trained
    assert res.intercept.shape == (K,) and res.W.shape == (K, X.shape[1])
    S = res.decision_function(X)
    np.testing.assert_allclose(S, ob.scores(X, res.W) + res.intercept, rtol=1e-12,
                               atol=1e-12)
    P = res.predict_proba(sp.csr_matrix(X))        # sparse input, same answer
    np.testing.assert_allclose(P, np.exp(S - S.max(1, keepdims=True))
                               / np.exp(S - S.max(1, keepdims=True)).sum(1, keepdims=True),
                               rtol=1e-12)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(res.predict_log_proba(X), np.log(P), rtol=1e-10, atol=1e-12)
    pred = res.predict(X)
    assert pred.dtype == np.int64
    np.testing.assert_array_equal(pred, np.argmax(S, axis=1))
    # the model learned something: far better than the majority class
    assert (pred == y).mean() > np.bincount(y).max() / len(y) + 0.2


def test_last_history_row_agrees_with_the_model_s_own_scores(trained):
    """The evaluator scores the intercept column exactly as decision_function does."""
    X, y, K, res = trained
    P = res.predict_proba(X)
    nll = -np.mean(np.log(P[np.arange(len(y)), y]))
    last = res.history[res.history.evaluated].iloc[-1]
    assert last.train_log_loss == pytest.approx(nll, rel=1e-6)
    assert last.train_error == pytest.approx(np.mean(res.predict(X) != y))


def test_scoring_rejects_bad_input_with_clear_messages(trained):
    X, y, K, res = trained
    with pytest.raises(ValueError, match=r"X has 5 features .* trained on D = 6"):
        res.predict(X[:, :5])
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        res.predict_proba(bad)
    broken = FitResult(W=np.full((K, X.shape[1]), np.nan), u=None, history=res.history,
                       diverged_at=(3, 17), method="vanilla", params={})
    with pytest.raises(ValueError, match=r"not finite \(training diverged at epoch 3\)"):
        broken.predict(X)


def test_predict_ties_go_to_the_lowest_class():
    res = FitResult(W=np.zeros((3, 2)), u=None, history=None, diverged_at=None,
                    method="x", params={})
    np.testing.assert_array_equal(res.predict(np.ones((4, 2))), 0)
    np.testing.assert_allclose(res.predict_proba(np.ones((1, 2))), 1 / 3)


# ---------------------------------------------------------------------------
# fit_intercept
# ---------------------------------------------------------------------------

def test_intercept_learns_the_class_prior_that_weights_alone_cannot():
    """Features that carry no information and unequal classes: without an intercept
    the best model is uniform (log K); with one it reaches the prior's entropy."""
    rng = np.random.default_rng(3)
    N, K = 3000, 3
    prior = np.array([0.7, 0.2, 0.1])
    y = rng.choice(K, size=N, p=prior)
    X = rng.choice([-1.0, 1.0], size=(N, 1))     # symmetric noise: E[x | y] = 0
    entropy = -np.sum(prior * np.log(prior))
    common = dict(epochs=30, progress=False, eval_epochs=[30], seed=0)
    with_b = fit(X, y, "implicit", 0.1, fit_intercept=True, **common)
    without = fit(X, y, "implicit", 0.1, **common)
    assert with_b.history.train_log_loss.iloc[-1] < entropy + 0.02
    assert without.history.train_log_loss.iloc[-1] > np.log(K) - 0.05
    assert with_b.intercept[0] > with_b.intercept[1] > with_b.intercept[2]
    assert with_b.params["fit_intercept"] is True


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_fits_an_intercept(method):
    X, y, K = _data(N=150, D=4, K=7, seed=1)
    res = fit(X, y, method, _lr(method, 0.01), epochs=2, progress=False, fit_intercept=True,
              intercept_scaling=2.0, eval_epochs=[2])
    assert res.W.shape == (K, 4) and res.intercept.shape == (K,)
    assert np.all(np.isfinite(res.intercept))
    P = res.predict_proba(X)
    nll = -np.mean(np.log(P[np.arange(len(y)), y]))
    assert res.history.train_log_loss.iloc[-1] == pytest.approx(nll, rel=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    (dict(fit_intercept=1), r"fit_intercept must be True or False"),
    (dict(fit_intercept=True, intercept_scaling=0.0), r"intercept_scaling must be a finite"),
    (dict(init_intercept=np.zeros(4)), r"init_intercept needs fit_intercept=True"),
    (dict(init_W=np.zeros((4, 5))), r"init_W must have shape \(K, D\) = \(4, 6\)"),
    (dict(init_W=np.full((4, 6), np.inf)), r"init_W contains non-finite"),
    (dict(fit_intercept=True, init_intercept=np.zeros(3)),
     r"init_intercept must have shape \(K,\) = \(4,\)"),
])
def test_model_options_are_validated(kwargs, match):
    X, y, K = _data()
    with pytest.raises(ValueError, match=match):
        fit(X, y, "umax", 0.1, epochs=1, progress=False, **kwargs)


# ---------------------------------------------------------------------------
# warm starts
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("method", sorted(METHODS))
def test_warm_start_begins_at_the_given_weights(method):
    X, y, K = _data(N=120, D=5, K=7, seed=2)
    rng = np.random.default_rng(5)
    W0 = rng.standard_normal((K, 5))
    b0 = rng.standard_normal(K)
    res = fit(X, y, method, _lr(method, 1e-12), epochs=1, progress=False, fit_intercept=True,
              init_W=W0, init_intercept=b0, eval_epochs=[0], lr_decay=1.0,
              **({"iters_per_epoch": 1} if get_trainer_class(method).full_batch else {}))
    S = ob.scores(X, W0) + b0
    nll = np.mean(np.log(np.exp(S).sum(1)) - S[np.arange(len(y)), y])
    assert res.history.train_log_loss.iloc[0] == pytest.approx(nll, rel=1e-6)
    assert res.params["warm_start"] is True
    if not get_trainer_class(method).full_batch:
        # a step at lr = 1e-12 barely moves the weights (L-BFGS steps are not lr-bound)
        np.testing.assert_allclose(res.W, W0, atol=1e-6)
        np.testing.assert_allclose(res.intercept, b0, atol=1e-6)


@pytest.mark.parametrize("method", [m for m in sorted(METHODS)
                                    if get_trainer_class(m).exact_u is not None])
def test_u_init_exact_is_the_optimum_of_the_initial_weights(method):
    X, y, K = _data(N=90, D=4, K=5, seed=4)
    W0 = np.random.default_rng(6).standard_normal((K, 4))
    res = fit(X, y, method, 1e-12, epochs=1, progress=False, init_W=W0,
              u_init="exact", eval_epochs=[], lr_decay=1.0)
    target = ob.u_star(X, y, W0)
    if get_trainer_class(method).exact_u == "raman":
        target = ob.raman_u_star(X, y, W0)
    np.testing.assert_allclose(res.u, target, rtol=1e-6, atol=1e-8)
    assert res.params["u_init"] == "exact"


def test_every_method_declares_its_facts():
    """fit and the estimator read these class attributes instead of method names."""
    for m in METHODS:
        cls = get_trainer_class(m)
        assert cls.name == m
        assert cls.exact_u in (None, "softmax", "raman")
        assert cls.has_u or cls.exact_u is None
        assert not (cls.full_batch and cls.minibatch)
        assert isinstance(cls.parallel_kernel, bool) and isinstance(cls.minibatch, bool)
        assert cls.full_batch or "threads" in cls.options, m
        assert not (cls.full_batch and cls.parallel_kernel), m
        pool = cls.max_n_sampled(10, cls.resolve_options({}))
        assert pool is None or 1 <= pool <= 10
        # every option has a default its rule accepts
        assert cls.resolve_options({k: d for k, (d, _) in cls.options.items()}) == \
            cls.resolve_options({}), m
    assert get_trainer_class("raman").exact_u == "raman"
    assert get_trainer_class("implicit-batch").max_n_sampled(3, {}) is None
    assert get_trainer_class("ove").max_n_sampled(10, {"shared_negatives": True}) == 10


def test_every_method_names_its_numpy_reference():
    """Each method declares its plain NumPy reference: a function of its own module,
    ``reference_step`` for every stochastic method."""
    import inspect
    for m in METHODS:
        cls = get_trainer_class(m)
        ref = cls.reference_function()
        assert inspect.isfunction(ref) and ref.__module__ == cls.__module__, m
        assert ref.__name__ == cls.reference
        assert cls.reference == ("full_objective_reference" if cls.full_batch
                                 else "reference_step"), m


def test_u_init_exact_at_zero_weights_is_log_K():
    X, y, K = _data(N=50, D=3, K=6, seed=7)
    res = fit(X, y, "implicit", 1e-12, epochs=1, progress=False, u_init="exact",
              eval_epochs=[], K=6)
    np.testing.assert_allclose(res.u, np.log(6), rtol=1e-9)


# ---------------------------------------------------------------------------
# save / load
# ---------------------------------------------------------------------------

def _same(a: FitResult, b: FitResult):
    np.testing.assert_array_equal(a.W, b.W)
    for x, z in ((a.u, b.u), (a.intercept, b.intercept)):
        assert (x is None) == (z is None)
        if x is not None:
            np.testing.assert_array_equal(x, z)
    assert a.history.equals(b.history)
    assert list(a.extra.columns) == list(b.extra.columns)
    assert a.extra.to_dict("list") == b.extra.to_dict("list")
    assert a.method == b.method and a.diverged_at == b.diverged_at
    assert json.dumps(a.params, sort_keys=True, default=str) == \
        json.dumps(b.params, sort_keys=True, default=str)


@pytest.mark.parametrize("method, kw", [
    ("umax", dict(fit_intercept=True)),
    ("ove", dict(n_sampled=3)),
    ("exact", dict(mu=0.1)),             # extra holds strings and booleans
    ("vanilla", dict()),                 # diverges: diverged_at and inf in the history
])
def test_save_load_round_trip(tmp_path, method, kw):
    X, y, K = _data()
    lr = _lr(method, 1e4 if method == "vanilla" else 0.1)
    res = fit(X, y, method, lr, epochs=3, progress=False, **kw)
    if method == "vanilla":
        assert res.diverged
    path = res.save(tmp_path / "model.npz")
    back = FitResult.load(path)
    _same(res, back)
    assert back.library_version == __version__
    if not res.diverged:
        np.testing.assert_array_equal(back.predict_proba(X), res.predict_proba(X))
    # the JSON record is readable without this library
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
    assert "meta.npy" in names and "W.npy" in names
    meta = json.loads(str(np.load(path, allow_pickle=False)["meta"][()]))
    assert meta["format"] == FORMAT_NAME and meta["library_version"] == __version__
    assert meta["method"] == method and meta["K"] == K
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]   # no temporary left


def test_save_is_atomic(tmp_path, monkeypatch, trained):
    X, y, K, res = trained
    path = res.save(tmp_path / "model.npz")
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", boom)
    with pytest.raises(OSError, match="disk full"):
        res.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["model.npz"]


def test_save_into_a_missing_folder_says_so(tmp_path, trained):
    with pytest.raises(FileNotFoundError, match=r"the folder .*nowhere does not exist"):
        trained[3].save(tmp_path / "nowhere" / "m.npz")


def _rewrite(src, dst, drop=(), replace=None):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.namelist():
            if item in drop:
                continue
            data = zin.read(item)
            if replace and item in replace:
                data = replace[item]
            zout.writestr(item, data)


def _npy_bytes(arr):
    import io
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def test_load_rejects_bad_files_naming_them(tmp_path, trained):
    res = trained[3]
    good = res.save(tmp_path / "good.npz")
    meta = json.loads(str(np.load(good)["meta"][()]))

    with pytest.raises(FileNotFoundError, match=r"missing\.npz: no such file"):
        FitResult.load(tmp_path / "missing.npz")

    text = tmp_path / "text.npz"
    text.write_text("label 1:0.5\n")
    with pytest.raises(ValueError, match=r"text\.npz: not a usable saved FitResult: it is "
                                         r"not an \.npz archive"):
        FitResult.load(text)

    npy = tmp_path / "array.npy"
    np.save(npy, np.zeros(3))
    with pytest.raises(ValueError, match=r"single array \(\.npy\)"):
        FitResult.load(npy)

    trunc = tmp_path / "truncated.npz"
    trunc.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    with pytest.raises(ValueError, match=r"truncated\.npz: not a usable saved FitResult"):
        FitResult.load(trunc)

    other = tmp_path / "other.npz"
    np.savez(other, W=np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"other\.npz: .*no 'meta' record"):
        FitResult.load(other)

    cases = {
        "format": (dict(meta, format="something-else"), r"names the format 'something-else'"),
        "newer": (dict(meta, format_version=99, saved_by_version="9.9"),
                  r"written by a newer scalable_softmax \(9\.9, format 99\).*upgrade"),
        "shape": (dict(meta, D=meta["D"] + 1), r"W has shape \(4, 6\) .* record says"),
        "rows": (dict(meta, frames=dict(meta["frames"], history=dict(
            meta["frames"]["history"], rows=99))), r"column 'epoch' of history has 6 rows"),
    }
    for name, (m, match) in cases.items():
        p = tmp_path / f"{name}.npz"
        _rewrite(good, p, replace={"meta.npy": _npy_bytes(np.array(json.dumps(m)))})
        with pytest.raises(ValueError, match=match):
            FitResult.load(p)

    nojson = tmp_path / "nojson.npz"
    _rewrite(good, nojson, replace={"meta.npy": _npy_bytes(np.array("{not json"))})
    with pytest.raises(ValueError, match=r"nojson\.npz: .*'meta' record is unreadable"):
        FitResult.load(nojson)

    noW = tmp_path / "noW.npz"
    _rewrite(good, noW, drop=("W.npy",))
    with pytest.raises(ValueError, match=r"noW\.npz: .*lacks or garbles 'W'"):
        FitResult.load(noW)


# ---------------------------------------------------------------------------
# the docs page's example on svmlight data (docs/own-data.md, linked from the README)
# ---------------------------------------------------------------------------

def _readme_section(title):
    """The part of ``docs/own-data.md`` under its title ``# title``, up to its first
    ``##`` section."""
    text = (paths.ROOT / "docs" / "own-data.md").read_text(encoding="utf-8")
    m = re.search(rf"^# {re.escape(title)}\n(.*?)(?=^## )", text, re.M | re.S)
    assert m, f"docs/own-data.md has no page {title!r}"
    return m.group(1)


def test_readme_lists_every_method():
    section = _readme_section("Training a model on your own data")
    listed = set()
    for row in re.findall(r"^\| (`.*?`(?:, `.*?`)*) \|", section, re.M):
        listed |= set(re.findall(r"`([^`]+)`", row))
    assert listed == set(METHODS), f"README method list differs: {listed ^ set(METHODS)}"


def test_readme_example_runs_on_a_small_svmlight_file(tmp_path, monkeypatch):
    """Every Python block of the README's section, run in order on tiny files."""
    pytest.importorskip("sklearn")
    from sklearn.datasets import dump_svmlight_file
    X, y, K = _data(N=300, D=8, K=3, seed=11)
    labels = np.array([3, 7, 12])[y]              # arbitrary label values
    Xs = sp.csr_matrix(np.where(np.abs(X) > 0.3, X, 0.0))
    dump_svmlight_file(Xs[:240], labels[:240], str(tmp_path / "train.svm"), zero_based=False)
    dump_svmlight_file(Xs[240:], labels[240:], str(tmp_path / "test.svm"), zero_based=False)
    # the multi-label block reads the same file (single labels are valid multi-labels)
    blocks = re.findall(r"```python\n(.*?)```", _readme_section(
        "Training a model on your own data"), re.S)
    assert len(blocks) == 3
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), ns)
    assert ns["search"].best_params_["softmaxsgdclassifier__lr"] in (0.1, 1.0, 10.0)
    assert ns["search"].score(ns["X_test"], ns["y_test"]) > 0.6       # chance: ~0.33
    assert ns["proba"].shape == (5, 3)
    np.testing.assert_allclose(ns["proba"].sum(axis=1), 1.0)
    assert set(ns["predicted"]) <= {3.0, 7.0, 12.0}
    assert np.mean(ns["predicted"] == ns["y_test"]) > 0.6
    assert (tmp_path / "model.npz").exists()
    np.testing.assert_array_equal(ns["first_label"], labels[:240])
    assert ns["X_raw"].shape[0] == 240
    os.chdir(paths.ROOT)
