"""docs/own-data.md is safe to copy: its snippets run as written on a small svmlight
data set (scikit-learn's digits, written as ``train.svm`` and ``test.svm``) and end at a
good model, better than a uniform guess (the page's second snippet once dropped the
first one's row normalisation and ended at a training log-loss of 22.6 on raw digits)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from scalable_softmax import paths

PAGE = paths.ROOT / "docs" / "own-data.md"


def _snippets():
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


@pytest.fixture
def digits_svm(tmp_path, monkeypatch):
    from sklearn.datasets import dump_svmlight_file, load_digits
    from sklearn.model_selection import train_test_split
    X, y = load_digits(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0)
    dump_svmlight_file(X_tr, y_tr, str(tmp_path / "train.svm"))
    dump_svmlight_file(X_te, y_te, str(tmp_path / "test.svm"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCALABLE_SOFTMAX_PROGRESS", "off")
    return tmp_path


def test_the_snippets_run_as_written_and_train_well(digits_svm):
    snippets = _snippets()
    assert len(snippets) == 3, "the page has three snippets: estimator, fit, reader"
    ns: dict = {}
    exec(compile(snippets[0], "own-data.md snippet 1", "exec"), ns)
    assert ns["search"].score(ns["X_test"], ns["y_test"]) > 0.9
    assert np.allclose(ns["proba"].sum(axis=1), 1)
    exec(compile(snippets[1], "own-data.md snippet 2", "exec"), ns)
    final = ns["res"].history["train_log_loss"].dropna().iloc[-1]
    assert final < 0.5 * math.log(10), f"train log-loss {final} (uniform guess {math.log(10):.2f})"
    assert (ns["predicted"] == ns["y_test"]).mean() > 0.9
    # evaluate scores the model with its intercept, as predict_proba does
    res, test = ns["res"], ns["test"]
    assert res.intercept is not None and test.n_rows == len(ns["y_test"])
    assert test.error == pytest.approx((ns["predicted"] != ns["y_test"]).mean())
    P = res.predict_proba(ns["X_test_unit"])
    yi = np.searchsorted(ns["classes"], ns["y_test"])
    assert test.log_loss == pytest.approx(-np.log(P[np.arange(len(yi)), yi]).mean(),
                                          rel=1e-6)
    exec(compile(snippets[2], "own-data.md snippet 3", "exec"), ns)
    assert len(ns["first_label"]) == ns["X"].shape[0]


def test_both_snippets_normalise_the_rows():
    first, second = _snippets()[:2]
    assert "Normalizer()" in first
    assert "normalize(X)" in second and "normalize(X_test)" in second
