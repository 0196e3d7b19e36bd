"""A method's options are checked once per fit, before any data is read, and the
trainer takes the options the configuration checked (issue 54)."""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from scalable_softmax import validation
from scalable_softmax.estimator import SoftmaxSGDClassifier
from scalable_softmax.fit import fit
from scalable_softmax.methods import METHODS, get_trainer_class
from scalable_softmax.methods.base import FrozenOptions
from scalable_softmax.protocols import PROTOCOL_METHODS, FitConfig


@pytest.fixture
def checks(monkeypatch):
    """The calls of the one check of method options (validation.check_options)."""
    calls = []
    real = validation.check_options

    def counting(schema, given, owner):
        calls.append(owner)
        return real(schema, given, owner)

    monkeypatch.setattr(validation, "check_options", counting)
    return calls


def _data(K=6, N=40, D=5, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.csr_matrix(rng.standard_normal((N, D)))
    return X, np.arange(N, dtype=np.int64) % K


def _quiet_fit(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # divergence / no-progress: not tested
        return fit(*args, epochs=1, eval_epochs=[], progress=False, **kw)


@pytest.mark.parametrize("method", list(METHODS))
def test_fit_checks_the_options_once(checks, method):
    X, y = _data()
    res = _quiet_fit(X, y, method)
    assert checks == [f"method {method!r}"]
    assert res.W.shape == (6, 5)


@pytest.mark.parametrize("method", PROTOCOL_METHODS)
def test_fit_under_a_protocol_checks_the_options_once(checks, method):
    X, y = _data()
    _quiet_fit(X, y, method, protocol="authors-code")
    assert checks == [f"method {method!r}"]


@pytest.mark.parametrize("method", ["umax", "ove", "exact"])
def test_the_estimator_checks_the_options_once_per_fit(checks, method):
    X, y = _data()
    clf = SoftmaxSGDClassifier(method=method, epochs=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)
    assert checks == [f"method {method!r}"]
    checks.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.partial_fit(X, y)
    assert checks == [f"method {method!r}"]


def test_a_bad_option_is_refused_before_the_data_is_read(checks):
    # the data is not even a matrix: the option's error comes first
    with pytest.raises(ValueError, match="unknown option.*'bogus'"):
        fit("not a matrix", None, "umax", lr=0.1, bogus=1)
    # a joint rule too (sampled methods: remove_accidental_hits needs shared negatives)
    with pytest.raises(ValueError, match="remove_accidental_hits"):
        fit("not a matrix", None, "ove", lr=0.1, remove_accidental_hits=True)


@pytest.mark.parametrize("call", ["fit", "partial_fit"])
def test_the_estimator_refuses_a_bad_option_before_reading_the_data(checks, call):
    clf = SoftmaxSGDClassifier(method="umax", method_options={"bogus": 1})
    with pytest.raises(ValueError, match="unknown option.*'bogus'"):
        getattr(clf, call)("not a matrix", None)
    assert checks == ["method 'umax'"]


def test_the_trainer_gets_the_checked_options_read_only(monkeypatch):
    built = []
    cls = get_trainer_class("ove")
    real_init = cls.__init__

    def spy(self, *args, **kw):
        real_init(self, *args, **kw)
        built.append((kw, self.opts))

    monkeypatch.setattr(cls, "__init__", spy)
    X, y = _data()
    _quiet_fit(X, y, "ove", lr=0.1, reduction="sum")
    (kw, opts), = built
    assert isinstance(kw["resolved"], FrozenOptions) and opts is kw["resolved"]
    assert set(kw) == {"mu", "batch_size", "n_sampled", "resolved"}
    assert opts["reduction"] == "sum" and set(opts) == set(cls.options)
    with pytest.raises(TypeError, match="read-only"):
        opts["reduction"] = "mean"


def test_a_trainer_built_directly_checks_its_options(checks):
    X, y = _data()
    cls = get_trainer_class("umax")
    tr = cls(X, y, 6, n_sampled=2, sample_from="all")
    assert checks == ["method 'umax'"] and tr.opts["sample_from"] == "all"
    with pytest.raises(ValueError, match="unknown option.*'bogus'"):
        cls(X, y, 6, bogus=1)
    with pytest.raises(ValueError, match="no parallel kernel"):
        cls(X, y, 6, n_sampled=2, threads=2)     # the joint rule, with the trainer's m


def test_resolved_takes_only_its_own_class_s_checked_options():
    X, y = _data()
    umax, vanilla = get_trainer_class("umax"), get_trainer_class("vanilla")
    good = umax.resolve_options({}, n_sampled=1)
    assert umax(X, y, 6, resolved=good).opts is good
    for bad, kw in [(vanilla.resolve_options({}), {}),            # another class
                    (FrozenOptions(good), {}),                     # not from a check
                    (dict(good), {}),                              # a plain dict
                    (umax.resolve_options({}, n_sampled=3), {}),   # another n_sampled
                    (good, {"sample_from": "all"})]:               # and options given
        with pytest.raises(TypeError, match="resolved="):
            umax(X, y, 6, resolved=bad, **kw)


def test_resolving_again_reuses_the_check_but_not_for_other_options(checks):
    config = FitConfig.make("umax", 0.1, n_sampled=1, threads=1).resolve()
    assert len(checks) == 1
    again = dataclasses.replace(config, lr=0.2, seed=7).resolve()
    assert len(checks) == 1 and again.resolved_options is config.resolved_options
    # other options: checked again, and refused when bad
    changed = dataclasses.replace(config, options={**config.options, "sample_from": "all"})
    assert changed.resolve().resolved_options["sample_from"] == "all"
    assert len(checks) == 2
    with pytest.raises(ValueError, match="option 'sample_from'"):
        dataclasses.replace(config, options={"sample_from": "some"}).resolve()
    # True == 1, yet a bool is not an int: equal but not identical values are re-checked
    with pytest.raises(ValueError, match="option 'threads'"):
        dataclasses.replace(config, options={**config.options, "threads": True}).resolve()


def test_another_n_sampled_runs_the_joint_rules_again(checks):
    config = FitConfig.make("umax", 0.1, n_sampled=1, threads=2).resolve()
    assert len(checks) == 1
    # Hogwild needs one class per step: the rule holds for n_sampled=1, not for 2
    with pytest.raises(ValueError, match="parallel kernel"):
        dataclasses.replace(config, n_sampled=2).resolve()
    assert len(checks) == 1                       # the schema was not checked again
