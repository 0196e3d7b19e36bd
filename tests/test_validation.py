"""One table of parameter constraints and one data check serve fit, evaluate, RunSpec,
the estimator's scoring and the notebooks' parameter checks."""
import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax import validation
from scalable_softmax.evaluate import evaluate
from scalable_softmax.fit import FitResult, fit
from scalable_softmax.repro.machinery import runner, runs


def _problem(seed=0, N=40, D=5, K=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, D)), rng.integers(0, K, N), K


@pytest.mark.parametrize("name, bad", [("epochs", 0), ("lr_decay", 1.5), ("seed", -1),
                                       ("u_init", "ones")])
def test_fit_and_runspec_refuse_a_value_with_the_same_rule(name, bad):
    X, y, K = _problem()
    with pytest.raises(ValueError) as in_fit:
        fit(X, y, "umax", 0.1, K=K, progress=False, **{name: bad})
    with pytest.raises(ValueError) as in_spec:
        runs.RunSpec.make("bibtex", "umax", 0.1, **{name: bad})
    assert str(in_spec.value) == str(in_fit.value).replace(name, f"RunSpec.{name}", 1)


def test_the_notebooks_take_the_librarys_rule_by_name():
    r = validation.rule({"like": "epochs"})
    assert r == validation.PARAMETERS["epochs"]
    assert runner.validation.violation(0, r) == (0,) and validation.violation(3, r) is None
    strict = validation.rule({"like": "final_rows", "nullable": False})
    assert validation.violation(None, validation.rule("final_rows")) is None
    with pytest.raises(ValueError, match="final_rows must be an integer >= 1; got None"):
        validation.check("final_rows", None, spec=strict)
    with pytest.raises(ValueError, match="no rule for the parameter 'nope'"):
        validation.rule({"like": "nope"})


def test_integral_float_labels_are_accepted_everywhere_other_floats_nowhere():
    """As scikit-learn's classifiers: y = 2.0 is the class 2; y = 0.5 is refused."""
    X, y, K = _problem(seed=1)
    a = fit(X, y, "umax", 0.1, K=K, epochs=2, progress=False)
    b = fit(X, y.astype(float), "umax", 0.1, K=K, epochs=2, progress=False)
    np.testing.assert_array_equal(a.W, b.W)
    assert evaluate(X, y.astype(float), a.W).log_loss == evaluate(X, y, a.W).log_loss
    for call in (lambda: fit(X, y + 0.5, "umax", 0.1, K=K, progress=False),
                 lambda: evaluate(X, y + 0.5, a.W)):
        with pytest.raises(ValueError, match="y must hold integer class labels"):
            call()


@pytest.mark.parametrize("X, said", [
    (np.zeros(4), "X must be 2-D"),
    (sp.csr_matrix((0, 5)), "X is empty"),
    (np.full((3, 5), np.nan), "X contains non-finite values"),
    (sp.csr_matrix(np.full((3, 5), np.inf)), "X contains non-finite values"),
    (np.zeros((3, 5), dtype=complex), "X must hold real numbers"),
])
def test_one_data_check_for_fit_evaluate_and_scoring(X, said):
    W = np.zeros((3, 5))
    model = FitResult(W=W, u=None, history=None, diverged_at=None, method="umax", params={})
    y = np.zeros(X.shape[0] if X.ndim == 2 else 4, dtype=int)
    for call in (lambda: fit(X, y, "umax", 0.1, K=3, progress=False),
                 lambda: evaluate(X, y, W), lambda: model.predict(X)):
        with pytest.raises(ValueError, match=said):
            call()


def test_a_non_canonical_matrix_gives_what_its_canonical_form_gives():
    X, y, K = _problem(seed=2)
    Xc = sp.csr_matrix(X)
    messy = sp.coo_matrix(X)
    W = np.random.default_rng(0).standard_normal((K, X.shape[1]))
    assert validation.as_csr(Xc) is Xc
    assert evaluate(messy, y, W).log_loss == evaluate(Xc, y, W).log_loss


def test_the_notebooks_conventions_are_the_librarys_defaults():
    """A notebook's parameters cell holds literals (papermill), so its lr_decay, u_init
    and order are checked against the one table of defaults (protocols.LIBRARY_DEFAULTS,
    STUDY_DEFAULTS for the runs' u = log K) instead of being derived from it."""
    from scalable_softmax import paths
    from scalable_softmax.protocols import LIBRARY_DEFAULTS, STUDY_DEFAULTS

    seen = 0
    for path in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")):
        full = runner.load_params(path.stem, "full")
        for key in LIBRARY_DEFAULTS:
            if key in full:
                seen += 1
                assert full[key] in (LIBRARY_DEFAULTS[key], STUDY_DEFAULTS[key]), \
                    f"params/{path.stem}.yaml: {key} = {full[key]!r}"
    assert seen >= 4
