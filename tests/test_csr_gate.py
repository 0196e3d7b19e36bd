"""Every public entry that hands a matrix to compiled code checks its structure first
(``validation.check_sparse``, issue 38): a malformed CSR matrix, e.g. with a column
index past its width, gets a ``ValueError`` naming the argument instead of a kernel
reading or writing outside its arrays.

The entry points run in a child process (one for all, to start Python and load the
compiled kernels once), so that a crash (a segmentation fault, exit 139) fails the
tests of the entry that crashed and of those after it instead of ending the test run.
"""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax import validation
from scalable_softmax.methods import METHODS

#: runs every entry point on every malformed matrix; prints one JSON line per call
_CHILD = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np, scipy.sparse as sp
    warnings.simplefilter("ignore")
    from scalable_softmax.evaluate import evaluate
    from scalable_softmax.fit import fit
    from scalable_softmax.estimator import SoftmaxSGDClassifier
    from scalable_softmax.methods import get_trainer_class

    rng = np.random.default_rng(0)
    N, D, K = 6, 4, 3
    good = sp.csr_matrix(rng.random((N, D)))
    y = np.arange(N) % K

    def bad(kind):
        X = good.copy()
        if kind == "index_past_width":
            X.indices[3] = 10 ** 9
        elif kind == "index_equal_width":
            X.indices[-1] = D
        elif kind == "negative_index":
            X.indices[0] = -1
        elif kind == "indptr_decreasing":
            X.indptr[2], X.indptr[3] = X.indptr[3], X.indptr[2]
        elif kind == "indptr_past_nnz":
            X.indptr[-1] += 5
        elif kind == "indptr_not_from_zero":
            X.indptr[0] = 1
        X.has_canonical_format = True       # a flag that lies must not be believed
        return X

    model = fit(good, y, "umax", 0.1, epochs=1, K=K, progress=False)
    est = SoftmaxSGDClassifier(epochs=1).fit(good, y)

    def trainer(method):
        return lambda X: get_trainer_class(method)(X, y, K)

    calls = {
        "fit": lambda X: fit(X, y, "umax", 0.1, epochs=1, K=K, progress=False),
        "fit_eval_sets": lambda X: fit(good, y, "umax", 0.1, epochs=1, K=K,
                                       progress=False, eval_sets={"test": (X, y)}),
        "evaluate": lambda X: evaluate(X, y, np.zeros((K, D))),
        "FitResult.predict": lambda X: model.predict(X),
        "FitResult.predict_proba": lambda X: model.predict_proba(X),
        "FitResult.decision_function": lambda X: model.decision_function(X),
        "estimator.fit": lambda X: SoftmaxSGDClassifier(epochs=1).fit(X, y),
        "estimator.partial_fit": lambda X: SoftmaxSGDClassifier().partial_fit(
            X, y, classes=np.arange(K)),
        "estimator.predict": lambda X: est.predict(X),
        "estimator.score": lambda X: est.score(X, y),
    }
    for m in sys.argv[2].split(","):
        calls["trainer:" + m] = trainer(m)
    for entry in sys.argv[1].split(";"):
        for kind in sys.argv[3].split(","):
            try:
                calls[entry](bad(kind))
                out = {"entry": entry, "kind": kind, "error": None}
            except Exception as exc:
                out = {"entry": entry, "kind": kind, "error": type(exc).__name__,
                       "message": str(exc)}
            print(json.dumps(out), flush=True)
""")

KINDS = ["index_past_width", "index_equal_width", "negative_index", "indptr_decreasing",
         "indptr_past_nnz", "indptr_not_from_zero"]
ENTRIES = ["fit", "fit_eval_sets", "evaluate", "FitResult.predict",
           "FitResult.predict_proba", "FitResult.decision_function", "estimator.fit",
           "estimator.partial_fit", "estimator.predict", "estimator.score"] \
    + [f"trainer:{m}" for m in METHODS]


@pytest.fixture(scope="module")
def child():
    out = subprocess.run([sys.executable, "-c", _CHILD, ";".join(ENTRIES),
                          ",".join(METHODS), ",".join(KINDS)], capture_output=True,
                         text=True, timeout=900, check=False)
    got = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return out, got


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_malformed_matrix_gets_a_clear_error_at_every_entry(child, entry):
    out, got = child
    mine = [g for g in got if g["entry"] == entry]
    assert [g["kind"] for g in mine] == KINDS, (
        f"{entry}: the child process ended (exit {out.returncode}) after "
        f"{[g['kind'] for g in mine]}: {out.stderr[-2000:]}")
    for g in mine:
        assert g["error"] == "ValueError", g
        assert "X is a malformed" in g["message"], g


def _csr(data, indices, indptr, shape):
    X = sp.csr_matrix(shape)
    X.data, X.indices, X.indptr = (np.asarray(data, dtype=float), np.asarray(indices),
                                   np.asarray(indptr))
    return X


@pytest.mark.parametrize("X, said", [
    (_csr([1, 1], [0, 3], [0, 1, 2], (2, 3)), "column index 3, outside 0..2"),
    (_csr([1, 1], [0, -2], [0, 1, 2], (2, 3)), "column index -2"),
    (_csr([1, 1], [0, 1], [0, 2, 1, 2], (3, 3)), "indptr decreases"),
    (_csr([1, 1], [0, 1], [0, 1, 3], (2, 3)), "indptr[-1] = 3"),
    (_csr([1, 1], [0, 1], [1, 1, 2], (2, 3)), "indptr[0] is 1"),
    (_csr([1, 1], [0, 1], [0, 2], (2, 3)), "indptr has 2 entries for 2 rows"),
    (_csr([1, 1], np.array([0, 1.0]), [0, 1, 2], (2, 3)), "1-D integer array"),
])
def test_the_gate_names_what_is_malformed(X, said):
    with pytest.raises(ValueError, match="Xtrain is a malformed") as err:
        validation.as_csr(X, "Xtrain")
    assert said in str(err.value)


def test_csc_and_coo_are_checked_before_scipy_converts_them():
    csc = sp.csc_matrix(np.eye(3))
    csc.indices[1] = 7
    with pytest.raises(ValueError, match="row index 7, outside 0..2"):
        validation.as_csr(csc)
    coo = sp.coo_matrix(np.eye(3))
    coo.col[0] = 3
    with pytest.raises(ValueError, match="column index 3, outside 0..2"):
        validation.as_csr(coo)


def test_a_lying_canonical_flag_is_not_believed():
    """Unsorted, duplicated indices flagged canonical are summed and sorted, giving the
    matrix its triplets describe (as for any non-canonical input)."""
    X = _csr([1.0, 2.0, 3.0], [2, 0, 2], [0, 3, 3], (2, 3))
    X.has_canonical_format = True
    got = validation.as_csr(X)
    np.testing.assert_array_equal(got.toarray(), [[2.0, 0.0, 4.0], [0.0, 0.0, 0.0]])
    assert got is not X and list(got.indices) == [0, 2]


def test_a_canonical_float64_csr_is_still_passed_through_without_a_copy():
    X = sp.csr_matrix(np.eye(4))
    assert validation.as_csr(X) is X
