"""The one ``threads`` option of the stochastic methods: ``threads=1`` is today's serial
run bit for bit; ``threads > 1`` runs a method's parallel kernel (the older switches
``hogwild`` and ``parallel`` are mapped onto it in one place, with a DeprecationWarning)
or is refused where the method has none, naming the methods that have one; the
estimator's ``n_jobs`` maps onto it; one context manager sets numba's thread count."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest
import scipy.sparse as sp

import scalable_softmax
from scalable_softmax.fit import fit
from scalable_softmax.kernels.threads import numba_threads
from scalable_softmax.methods import METHODS, get_trainer_class

STOCHASTIC = [m for m in METHODS if not get_trainer_class(m).full_batch]
TWO = min(2, numba.config.NUMBA_NUM_THREADS)


def _data(N=80, D=12, K=6, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.4, format="csr", random_state=seed)
    X.data = rng.standard_normal(X.data.size)
    X = sp.csr_matrix(X + sp.eye(N, D, format="csr"))
    return X, rng.integers(0, K, N), K


def _fit(method, **kw):
    X, y, K = _data()
    return fit(X, y, method, 0.05, epochs=2, K=K, progress=False, eval_epochs=[2], **kw)


@pytest.mark.parametrize("method", STOCHASTIC)
def test_threads_one_is_the_serial_run_bit_for_bit(method):
    a, b = _fit(method), _fit(method, threads=1)
    np.testing.assert_array_equal(a.W, b.W)      # (NaN where a run diverged: equal too)
    assert b.params["options"] == {"threads": 1}


def test_every_stochastic_method_has_a_parallel_kernel():
    assert all(get_trainer_class(m).parallel_kernel for m in STOCHASTIC)


@pytest.mark.skipif(TWO < 2, reason="numba has one thread here (NUMBA_NUM_THREADS=1)")
@pytest.mark.parametrize("method, kw", [("umax", {"n_sampled": 3}),
                                        ("vanilla", {"sample_from": "all"})])
def test_a_configuration_without_a_parallel_kernel_refuses_more_threads(method, kw):
    """Explicit SGD's many-class kernel (m > 1 or sample_from='all') has no Hogwild
    version: more threads are refused, naming the methods that have one."""
    with pytest.raises(ValueError, match=rf"method {method!r} has no parallel kernel.*"
                                         r"Methods with a parallel kernel today: .*umax"):
        _fit(method, threads=2, **kw)


@pytest.mark.parametrize("method", ["ove", "nce", "is", "softmax-sgd"])
def test_deterministic_parallel_kernels_equal_the_serial_one(method):
    serial = _fit(method, batch_size=10)
    threaded = _fit(method, batch_size=10, threads=TWO)
    with pytest.warns(DeprecationWarning, match="parallel=True is deprecated"):
        alias = _fit(method, batch_size=10, parallel=True)
    np.testing.assert_allclose(threaded.W, serial.W, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(alias.W, serial.W, rtol=1e-12, atol=1e-14)


def test_hogwild_is_threads_two_and_needs_one_class_per_step():
    X, y, K = _data()
    cls = get_trainer_class("umax")
    with pytest.warns(DeprecationWarning, match="hogwild=True is deprecated; use threads=2"):
        assert cls(X, y, K, hogwild=True)._threads == 2          # the old default
    with pytest.warns(DeprecationWarning):
        assert cls(X, y, K, hogwild=True, threads=1)._threads == 1
    assert cls(X, y, K, threads=TWO)._hogwild == (TWO > 1)
    res = _fit("umax", threads=TWO)
    assert np.isfinite(res.history.train_log_loss.iloc[-1])
    if TWO > 1:
        with pytest.raises(ValueError, match="no parallel kernel for n_sampled > 1"):
            _fit("vanilla", threads=2, n_sampled=2)
    with pytest.raises(ValueError, match="'threads'.*must be an integer from 1"):
        _fit("umax", threads=0)


def test_estimator_n_jobs_maps_to_threads():
    pytest.importorskip("sklearn")
    from scalable_softmax.estimator import SoftmaxSGDClassifier

    X, y, _ = _data()
    base = SoftmaxSGDClassifier(method="ove", lr=0.5, epochs=2, random_state=0).fit(X, y)
    one = SoftmaxSGDClassifier(method="ove", lr=0.5, epochs=2, random_state=0,
                               n_jobs=1).fit(X, y)
    assert np.array_equal(base.coef_, one.coef_)
    par = SoftmaxSGDClassifier(method="ove", lr=0.5, epochs=2, random_state=0,
                               n_jobs=-1).fit(X, y)
    assert par.result_.params["options"]["threads"] == numba.config.NUMBA_NUM_THREADS
    np.testing.assert_allclose(par.coef_, base.coef_, rtol=1e-12, atol=1e-14)
    if TWO > 1:
        with pytest.raises(ValueError, match="has no parallel kernel"):
            SoftmaxSGDClassifier(method="umax", n_sampled=5, n_jobs=2).fit(X, y)
    with pytest.raises(ValueError, match="n_jobs must be None, -1 or an integer"):
        SoftmaxSGDClassifier(method="umax", n_jobs=0).fit(X, y)


def test_only_the_threads_module_sets_numbas_thread_count():
    """``numba_threads`` (and the process pin beside it) is the one place of the library
    that sets numba's thread count: no other module calls ``set_num_threads`` (torch's,
    in the race, is another library's)."""
    lib = Path(scalable_softmax.__file__).parent
    own = lib / "kernels" / "threads.py"
    calls = re.compile(r"(?<!torch\.)\bset_num_threads\s*\(")
    found = [f"{p.relative_to(lib)}:{n}" for p in sorted(lib.rglob("*.py")) if p != own
             for n, line in enumerate(p.read_text().splitlines(), 1) if calls.search(line)]
    assert found == []
    assert calls.search(own.read_text())          # the pattern finds the real call


def test_numba_threads_sets_and_restores_also_on_an_error():
    before = numba.get_num_threads()
    with numba_threads(1) as n:
        assert n == 1 == numba.get_num_threads()
    assert numba.get_num_threads() == before
    with pytest.raises(RuntimeError), numba_threads(1):
        raise RuntimeError
    assert numba.get_num_threads() == before
    with numba_threads(10 ** 6) as n:          # at most numba's pool
        assert n == numba.config.NUMBA_NUM_THREADS == numba.get_num_threads()
    with numba_threads(None) as n:             # None: unchanged
        assert n == before == numba.get_num_threads()
    assert numba.get_num_threads() == before


@pytest.mark.parametrize("method, given, resolved", [
    ("umax", {"hogwild": True}, {"threads": 2}),
    ("umax", {"hogwild": False}, {"threads": 1}),
    ("ove", {"parallel": False}, {"threads": 1}),
    ("ove", {"parallel": True}, {"threads": numba.get_num_threads()}),
    ("exact", {"parallel": False}, {"threads": 1}),
    ("softmax-sgd", {"transposed": False}, {"layout": "class-rowwise"}),
    ("softmax-sgd", {"transposed": False, "layout": "class"}, {"layout": "class-rowwise"}),
    ("softmax-sgd", {"transposed": True, "layout": "class"}, {"layout": "class"}),
])
def test_an_older_option_is_mapped_once_onto_threads_or_layout(method, given, resolved):
    cls = get_trainer_class(method)
    with pytest.warns(DeprecationWarning, match="is deprecated; use"):
        opts = cls.resolve_options(given)
    assert not set(given) - set(resolved) & set(opts)          # only the new names
    assert {k: opts[k] for k in resolved} == resolved
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cls.resolve_options(opts) == opts                # resolving again: no-op


@pytest.mark.parametrize("method, given, match", [
    ("softmax-sgd", {"threads": 2, "parallel": True}, "not both"),
    ("softmax-sgd", {"layout": "feature", "transposed": False}, "layout='class-rowwise'"),
    ("softmax-sgd", {"layout": "class-rowwise", "transposed": True}, "contradicts"),
    ("umax", {"hogwild": "yes"}, "'hogwild' must be a bool"),
    ("ove", {"hogwild": True}, "unknown option"),           # not an option of ove
])
def test_an_older_option_that_contradicts_or_does_not_apply_is_refused(method, given, match):
    with pytest.raises(ValueError, match=match), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        get_trainer_class(method).resolve_options(given)


@pytest.mark.parametrize("method, given, match", [
    ("ove", dict(remove_accidental_hits=True), "applies only with shared_negatives=True"),
    ("umax", dict(threads=TWO, n_sampled=2), "threads"),
    ("vanilla", dict(threads=TWO, sample_from="all"), "threads"),
])
def test_joint_option_rules_are_checked_with_the_schema_before_any_data(method, given, match):
    """A rule between options (or an option and n_sampled) is declared on the method
    (``option_rules``) and checked when the configuration is resolved: no data needed."""
    from scalable_softmax.protocols import FitConfig

    if TWO < 2 and "threads" in given:
        pytest.skip("numba has one thread here (NUMBA_NUM_THREADS=1)")
    with pytest.raises(ValueError, match=match):
        FitConfig.make(method, 0.1, **given).resolve()


def test_resolved_options_are_read_only_and_pickle():
    import pickle

    X, y, K = _data()
    tr = get_trainer_class("ove")(X, y, K, fused=False)
    with pytest.raises(TypeError, match="read-only"):
        tr.opts["fused"] = True
    with pytest.raises(TypeError, match="read-only"):
        tr.opts.update(threads=2)
    back = pickle.loads(pickle.dumps(tr.opts))
    assert back == tr.opts and type(back) is type(tr.opts)


def test_an_older_option_warns_once_per_fit():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = _fit("ove", batch_size=10, parallel=False)
    deprecations = [w for w in seen if issubclass(w.category, DeprecationWarning)
                    and "parallel=False is deprecated" in str(w.message)]
    assert len(deprecations) == 1
    assert res.params["options"] == {"threads": 1}
