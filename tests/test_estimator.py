"""scalable_softmax.SoftmaxSGDClassifier: scikit-learn's estimator checks, Pipeline,
GridSearchCV, partial_fit and the errors a user can meet."""
from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse as sp

sklearn = pytest.importorskip("sklearn")
pytestmark = pytest.mark.filterwarnings("ignore:Skipping check check_array_api_input")

from sklearn.model_selection import GridSearchCV, cross_val_score  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MaxAbsScaler, StandardScaler  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

import scalable_softmax  # noqa: E402
from scalable_softmax.estimator import SoftmaxSGDClassifier  # noqa: E402


def _blobs(N=300, D=5, K=3, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((K, D)) * 2
    y = rng.integers(0, K, N)
    X = centers[y] + rng.standard_normal((N, D))
    if sparse:
        X = sp.csr_matrix(np.where(np.abs(X) > 0.5, X, 0.0))
    return X, y


def _failures(est):
    res = check_estimator(est, on_fail=None)
    assert len(res) >= 50
    return [(r["check_name"], str(r["exception"])[:300]) for r in res
            if r["status"] == "failed"]


def test_top_level_name_is_the_estimator():
    assert scalable_softmax.SoftmaxSGDClassifier is SoftmaxSGDClassifier
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        scalable_softmax.Nope  # noqa: B018


@pytest.mark.parametrize("params", [
    dict(),                                   # Implicit SGD, the default
    dict(method="umax", lr=0.1),
    dict(method="raman", lr=0.1),
    dict(method="ove", lr=1.0),
    dict(method="nce", lr=1.0),
    dict(method="is", lr=1.0),
    dict(method="softmax-sgd", lr=1.0),
    dict(method="implicit", protocol="authors-code", lr=1.0),
], ids=lambda p: p.get("method", "implicit") + ("-" + p["protocol"] if "protocol" in p
                                                  else ""))
def test_passes_scikit_learn_estimator_checks(params):
    failed = _failures(SoftmaxSGDClassifier(**params))
    assert not failed, failed


def test_fit_and_the_estimator_share_the_fit_intercept_default():
    import inspect

    from scalable_softmax.fit import fit
    default = inspect.signature(fit).parameters["fit_intercept"].default
    assert default is False
    assert SoftmaxSGDClassifier().fit_intercept is default
    X, y = _blobs(N=60)
    clf = SoftmaxSGDClassifier(epochs=2, random_state=0).fit(X, y)
    assert not np.any(clf.intercept_)
    assert "fit_intercept" not in clf.result_.params       # as fit() with its default


def test_fit_predict_proba_score_and_attributes():
    X, y = _blobs()
    labels = np.array(["ant", "bee", "cat"])[y]
    clf = SoftmaxSGDClassifier(epochs=20, random_state=0).fit(X, labels)
    np.testing.assert_array_equal(clf.classes_, ["ant", "bee", "cat"])
    assert clf.coef_.shape == (3, 5) and clf.intercept_.shape == (3,)
    assert clf.n_features_in_ == 5 and clf.t_ == 20
    P = clf.predict_proba(X)
    S = X @ clf.coef_.T + clf.intercept_
    np.testing.assert_allclose(clf.decision_function(X), S, rtol=1e-12)
    np.testing.assert_allclose(P, np.exp(S - S.max(1, keepdims=True))
                               / np.exp(S - S.max(1, keepdims=True)).sum(1, keepdims=True))
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[np.argmax(S, axis=1)])
    assert clf.score(X, labels) > 0.9
    assert len(clf.result_.history) == 21
    # same seed, same model; a pickled copy predicts the same
    again = SoftmaxSGDClassifier(epochs=20, random_state=0).fit(X, labels)
    np.testing.assert_array_equal(again.coef_, clf.coef_)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(clf)).predict_proba(X), P)


def test_binary_decision_function_is_the_score_difference():
    X, y = _blobs(K=2, seed=1)
    clf = SoftmaxSGDClassifier(epochs=10, random_state=0).fit(X, y)
    S = X @ clf.coef_.T + clf.intercept_
    np.testing.assert_allclose(clf.decision_function(X), S[:, 1] - S[:, 0])
    np.testing.assert_array_equal(clf.predict(X), (clf.decision_function(X) > 0) * 1)


def test_pipeline_and_grid_search_on_sparse_data():
    X, y = _blobs(N=400, D=8, K=4, seed=2, sparse=True)
    pipe = make_pipeline(MaxAbsScaler(), SoftmaxSGDClassifier(method="umax", epochs=10,
                                                              random_state=0))
    search = GridSearchCV(pipe, {"softmaxsgdclassifier__lr": [1e-3, 1e-1],
                                 "softmaxsgdclassifier__method": ["umax", "implicit"]},
                          cv=3)
    search.fit(X, y)
    assert set(search.cv_results_["param_softmaxsgdclassifier__lr"]) == {1e-3, 1e-1}
    assert search.best_score_ > 0.6                      # chance: 0.25
    assert search.best_score_ >= max(search.cv_results_["mean_test_score"]) - 1e-12
    assert search.predict_proba(X[:3]).shape == (3, 4)
    scores = cross_val_score(make_pipeline(StandardScaler(with_mean=False),
                                           SoftmaxSGDClassifier(epochs=5, random_state=0)),
                             X, y, cv=3)
    assert scores.mean() > 0.6


def test_partial_fit_streams_and_keeps_its_schedule():
    X, y = _blobs(N=600, D=6, K=3, seed=3)
    clf = SoftmaxSGDClassifier(method="umax", lr=0.1, lr_decay=0.5, random_state=0)
    with pytest.raises(ValueError, match="first call of partial_fit needs `classes`"):
        clf.partial_fit(X[:100], y[:100])
    accs = []
    for t, a in enumerate(range(0, 600, 100)):
        clf.partial_fit(X[a:a + 100], y[a:a + 100], classes=[0, 1, 2] if t == 0 else None)
        assert clf.t_ == t + 1
        assert clf.result_.history.lr.iloc[-1] == pytest.approx(0.1 * 0.5 ** t)
        assert clf.result_.params["u_init"] == "exact"
        accs.append(clf.score(X, y))
    assert accs[-1] > 0.85 and accs[-1] >= accs[0]
    with pytest.raises(ValueError, match=r"labels \[7\] are not among the classes"):
        clf.partial_fit(X[:5], np.array([0, 1, 7, 1, 0]))
    with pytest.raises(ValueError, match="expecting 6 features"):
        clf.partial_fit(X[:5, :4], y[:5])
    with pytest.raises(ValueError, match=r"differs from the classes of the first"):
        clf.partial_fit(X[:5], y[:5], classes=[0, 1])


def test_partial_fit_continues_from_the_weights_of_fit():
    X, y = _blobs(N=300, seed=4)
    clf = SoftmaxSGDClassifier(epochs=3, random_state=0).fit(X, y)
    W = clf.coef_.copy()
    clf.partial_fit(X, y)
    assert clf.t_ == 4
    assert clf.result_.params["warm_start"] is True
    assert not np.array_equal(clf.coef_, W)
    assert np.linalg.norm(clf.coef_ - W) < np.linalg.norm(W)     # a step, not a restart


def test_divergence_and_bad_parameters_raise_clear_errors():
    X, y = _blobs(seed=5)
    with pytest.raises(ValueError, match=r"training diverged at epoch \d+.*smaller lr "
                                         r"than 1000.0.*method='implicit'"):
        SoftmaxSGDClassifier(method="vanilla", lr=1e3, random_state=0).fit(X * 50, y)
    with pytest.raises(ValueError, match=r"unknown method 'sgd'; choose one of: .*umax"):
        SoftmaxSGDClassifier(method="sgd").fit(X, y)
    with pytest.raises(ValueError, match=r"lr \(learning rate\) must be a finite number"):
        SoftmaxSGDClassifier(lr=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="unknown protocol 'nope'"):
        SoftmaxSGDClassifier(protocol="nope").fit(X, y)
    with pytest.raises(ValueError, match=r"method_options must be None or a dict"):
        SoftmaxSGDClassifier(method_options=[1]).fit(X, y)
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'nope'"):
        SoftmaxSGDClassifier(method="umax", method_options={"nope": 1}).fit(X, y)
    with pytest.raises(ValueError, match="at least 2 classes"):
        SoftmaxSGDClassifier().fit(X, np.zeros(len(y)))


def test_protocol_settings_reach_fit():
    X, y = _blobs(N=120, seed=6)
    clf = SoftmaxSGDClassifier(method="umax", lr=0.1, epochs=2, protocol="authors-code",
                               random_state=0).fit(X, y)
    p = clf.result_.params
    assert p["order"] == "file" and p["n_sampled"] == 3     # 5 of all K capped at K = 3
    assert p["options"]["sample_from"] == "all" and p["options"]["delta0"] == 1.0
    assert p["u_init"] == "zero" and p["lr_decay"] == 0.9
    # a parameter given explicitly wins over the protocol (as in fit and RunSpec); the
    # protocol supplies the rest
    text = SoftmaxSGDClassifier(method="umax", lr=0.1, epochs=2, protocol="paper-text",
                                u_init="zero", order="file", random_state=0).fit(X, y)
    p = text.result_.params
    assert p["u_init"] == "zero" and p["order"] == "file" and p["n_sampled"] == 1
    assert p["protocol"] == "paper-text"
    plain = SoftmaxSGDClassifier(method="umax", lr=0.1, epochs=2, protocol="paper-text",
                                 random_state=0).fit(X, y)
    p = plain.result_.params
    assert p["u_init"] == "logK" and p["order"] == "shuffle" and p["n_sampled"] == 1
    ours = SoftmaxSGDClassifier(method="umax", lr=0.1, epochs=2, u_init="logK",
                                lr_decay=0.5, order="file", random_state=0).fit(X, y)
    p = ours.result_.params
    assert p["u_init"] == "logK" and p["lr_decay"] == 0.5 and p["order"] == "file"


def test_full_batch_methods_ignore_the_estimator_rate():
    """fit() refuses a learning rate for L-BFGS methods; the estimator passes None."""
    from scalable_softmax import SoftmaxSGDClassifier

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
    # the middle class needs an intercept (0.67 accuracy without, 0.9 with)
    clf = SoftmaxSGDClassifier(method="exact", lr=5.0, epochs=20, fit_intercept=True).fit(X, y)
    assert clf.score(X, y) > 0.8


# -- issue 53, item 4: evaluate(X, y, fitted_estimator) ----------------------------------

def test_evaluate_takes_a_fitted_estimator_and_its_labels():
    from scalable_softmax import evaluate
    from scalable_softmax.evaluate import evaluate_sets

    X, y = _blobs(N=120, D=4, K=3)
    labels = np.array(["cat", "dog", "emu"])[y]
    for intercept in (False, True):
        clf = SoftmaxSGDClassifier(epochs=3, fit_intercept=intercept,
                                   random_state=0).fit(X, labels)
        ev = evaluate(X, labels, clf, precision="float64")
        want = evaluate(X, np.searchsorted(clf.classes_, labels), clf.coef_,
                        intercept=clf.intercept_ if intercept else None,
                        precision="float64")
        assert ev == want
        assert ev.log_loss == pytest.approx(
            -np.mean(np.log(clf.predict_proba(X)[np.arange(len(y)), y])), rel=1e-12)
        assert ev.error == pytest.approx(np.mean(clf.predict(X) != labels))
        assert evaluate_sets({"a": (X, labels)}, clf, precision="float64")["a"] == want
    with pytest.raises(ValueError, match=r"labels \['yak'\] are not among"):
        evaluate(X[:2], np.array(["cat", "yak"]), clf)
    with pytest.raises(ValueError, match="not fitted"):
        evaluate(X, labels, SoftmaxSGDClassifier())
    with pytest.raises(ValueError, match="either in the estimator or as intercept="):
        evaluate(X, labels, clf, intercept=np.zeros(3))
