"""Cached training runs (scalable_softmax.repro.machinery.runs)."""
import math

import numpy as np
import pandas as pd
import pytest

from scalable_softmax.fit import fit
from scalable_softmax.repro.machinery import runs as ex


def _spec(**kw):
    base = dict(dataset="bibtex", method="umax", lr=0.1, seed=0, epochs=2, monitor_rows=500)
    base.update(kw)
    return ex.RunSpec.make(base.pop("dataset"), base.pop("method"), base.pop("lr"), **base)


def test_make_puts_method_options_aside_and_validates():
    s = _spec(method="ove", n_sampled=3, batch_size=10)
    assert dict(s.options) == {"batch_size": 10, "n_sampled": 3}
    with pytest.raises(ValueError, match="RunSpec.method"):
        _spec(method="nope")
    with pytest.raises(ValueError, match="RunSpec.lr"):
        _spec(lr=-1.0)
    with pytest.raises(ValueError, match="RunSpec.train_fraction"):
        _spec(train_fraction=1.5)
    with pytest.raises(ValueError, match="RunSpec.u_init"):
        _spec(u_init="ones")
    with pytest.raises(ValueError, match="RunSpec.monitor_rows"):
        _spec(monitor_rows=0)


def test_key_depends_on_every_field_and_code_version(monkeypatch):
    s = _spec()
    assert s.key == _spec().key
    others = [_spec(seed=1), _spec(lr=0.2), _spec(epochs=3), _spec(train_fraction=0.5),
              _spec(monitor_rows=100), _spec(delta0=2.0), _spec(test=False),
              _spec(u_init="zero")]
    assert len({s.key, *[o.key for o in others]}) == len(others) + 1
    before = s.key
    monkeypatch.setattr(ex, "CODE_VERSION", "something-else")
    assert _spec().key != before


def test_run_matches_fit_and_is_read_back_from_cache(tmp_path):
    s = _spec()
    r1 = ex.run(s, cache_dir=tmp_path)
    assert not r1.from_cache and (tmp_path / f"{s.key}.json").exists()
    X, y, K, _ = ex.load_split("bibtex", "train")
    ref = fit(X, y, "umax", 0.1, epochs=2, seed=0, K=K, progress=False, eval_rows=500,
              u_init="logK")
    pd.testing.assert_series_equal(r1.history.train_log_loss, ref.history.train_log_loss)
    from scalable_softmax.evaluate import evaluate
    full = evaluate(X, y, ref.W)
    assert r1.final["train_log_loss"] == pytest.approx(full.log_loss, rel=1e-12)
    assert r1.final["train_rows"] == X.shape[0]
    assert r1.final["test_rows"] > 0 and math.isfinite(r1.final["test_log_loss"])
    parts = ["load_seconds", "setup_seconds", "train_seconds", "monitor_eval_seconds",
             "final_eval_seconds", "other_seconds"]
    assert all(r1.final[p] >= -1e-6 for p in parts), {p: r1.final[p] for p in parts}
    assert sum(r1.final[p] for p in parts) == pytest.approx(r1.final["wall_seconds"], abs=1e-6)
    assert r1.final["monitor_eval_seconds"] > 0 and r1.final["final_eval_seconds"] > 0
    r2 = ex.run(s, cache_dir=tmp_path)
    assert r2.from_cache
    assert r2.final == r1.final
    pd.testing.assert_frame_equal(r2.history, r1.history, check_dtype=False)


def test_stale_or_corrupt_cache_entries_are_recomputed(tmp_path, monkeypatch):
    s = _spec()
    path = tmp_path / f"{s.key}.json"
    path.write_text("{not json")
    with pytest.warns(ex.RunCacheWarning, match="not valid JSON"):
        r = ex.run(s, cache_dir=tmp_path)
    assert not r.from_cache and ex.run(s, cache_dir=tmp_path).from_cache
    # an entry written by other code (different CODE_VERSION in the file) is not used
    text = path.read_text().replace(ex.CODE_VERSION, "0" * 12)
    path.write_text(text)
    with pytest.warns(ex.RunCacheWarning, match="written for another run"):
        assert not ex.run(s, cache_dir=tmp_path).from_cache


def test_diverged_run_is_stored_with_infinite_loss(tmp_path):
    s = _spec(method="vanilla", lr=100.0)
    r = ex.run(s, cache_dir=tmp_path)
    assert r.final["diverged"] and r.final["train_log_loss"] == math.inf
    assert math.isnan(r.final["train_error"])
    back = ex.run(s, cache_dir=tmp_path)
    assert back.from_cache and back.final["train_log_loss"] == math.inf
    assert back.final["diverged_at"] == r.final["diverged_at"]


def test_train_fraction_is_a_fixed_subset():
    X1, y1, K, _ = ex.load_split("bibtex", "train", 0.1, 0)
    X2, y2, _, _ = ex.load_split("bibtex", "train", 0.1, 0)
    Xa, ya, _, _ = ex.load_split("bibtex", "train")
    assert X1.shape[0] == round(0.1 * Xa.shape[0])
    np.testing.assert_array_equal(y1, y2)
    X3, y3, _, _ = ex.load_split("bibtex", "train", 0.1, 1)
    assert (X1 != X3).nnz > 0


def test_run_all_in_two_processes_equals_one_process(tmp_path):
    specs = [_spec(seed=s, method=m) for s in (0, 1) for m in ("umax", "ove")]
    a = ex.run_all(specs, workers=2, cache_dir=tmp_path / "a", progress=False)
    b = ex.run_all(specs, workers=1, cache_dir=tmp_path / "b", progress=False)
    for ra, rb, s in zip(a, b, specs):
        assert ra.spec == rb.spec == s
        assert ra.final["train_log_loss"] == rb.final["train_log_loss"]
        np.testing.assert_array_equal(ra.history.train_log_loss, rb.history.train_log_loss)
    c = ex.run_all(specs, workers=2, cache_dir=tmp_path / "a", progress=False)
    assert all(r.from_cache for r in c)
    df = ex.results_frame(a)
    assert list(df.method) == ["umax", "ove", "umax", "ove"]
    h = ex.histories_frame(a)
    assert set(h.seed) == {0, 1} and "epoch_lr" in h and (h.lr.isin([0.1])).all()
    with pytest.raises(ValueError, match="workers"):
        ex.run_all(specs, workers=0)


def test_dataset_for_falls_back_to_surrogates():
    assert ex.dataset_for("bibtex") == "bibtex"
    assert ex.dataset_for("eurlex", prefer_real=False) == "eurlex-surrogate"
    with pytest.raises(ValueError, match="unknown data set"):
        ex.dataset_for("imagenet")
    assert set(ex.PAPER_TABLE2) == set(ex.PAPER_TABLE3) == set(ex.PAPER_DATASETS)
    for d in ex.PAPER_DATASETS:
        assert tuple(ex.PAPER_TABLE2[d]) == ex.PAPER_METHODS
        assert ex.PAPER_TABLE3[d]["implicit"] == 1.0
    # the published average row is the mean of the published rows (to rounding)
    for m in ex.PAPER_METHODS:
        avg = np.mean([ex.PAPER_TABLE3[d][m] for d in ex.PAPER_DATASETS])
        assert avg == pytest.approx(ex.PAPER_TABLE3_AVERAGE[m], abs=0.011)
