"""U-max on the two double-sum formulations (scalable_softmax.repro.fagan.formulations):
the ratio table and the invariants of notebook 05 on hand-made runs, and one tiny fit."""
import math
from types import SimpleNamespace

import matplotlib
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scalable_softmax.repro.fagan import formulations as fm

matplotlib.use("Agg")

DATA = {"bibtex": SimpleNamespace(synthetic=False, K=10, X=sp.eye(4, 3, format="csr"),
                                  y=np.zeros(4, int))}


def _runs():
    rows = []
    for lr, p, r in [(0.1, 2.0, 4.0), (1.0, 1.0, 1.5), (10.0, 3.0, math.inf)]:
        for form, ll in (("proposed", p), ("raman", r)):
            rows.append(dict(dataset="bibtex", synthetic=False, lr=lr, formulation=form,
                             log_loss=ll, diverged=not math.isfinite(ll), diverged_at="",
                             epochs_run=2, seconds=0.1))
    return pd.DataFrame(rows)


def test_ratio_table_rows_and_summaries():
    t = fm.ratio_table(_runs(), DATA, 2, 3.08).set_index("rate")
    assert list(t.index) == ["1e-01", "1e+00", "1e+01", *fm.SUMMARY_RATES]
    assert t.ratio_raman_over_proposed["1e-01"] == 2.0
    assert t.status["1e+01"] == "raman diverged"
    assert t.ratio_raman_over_proposed["1e+01"] == math.inf
    assert t.ratio_raman_over_proposed["mean over rates"] == pytest.approx(1.75)
    assert t.paper_ratio["mean over rates"] == 3.08
    assert t.status["mean over rates"] == "2 of 3 rates both finite"
    assert t.ratio_raman_over_proposed["best rate of each"] == 1.5
    assert t.status["best rate of each"] == "proposed at 1e+00, raman at 1e+00"
    assert t.ratio_raman_over_proposed["geometric mean"] == pytest.approx(math.sqrt(3.0))


def test_check_formulations_accepts_and_rejects():
    runs = _runs()
    t = fm.ratio_table(runs, DATA, 2, 3.08)
    fm.check_formulations(runs, t, DATA, [0.1, 1.0, 10.0], 2)
    bad = t.copy()
    bad.loc[bad.rate == "mean over rates", "ratio_raman_over_proposed"] = 3.0
    with pytest.raises(AssertionError):
        fm.check_formulations(runs, bad, DATA, [0.1, 1.0, 10.0], 2)
    with pytest.raises(AssertionError):
        fm.check_formulations(runs, t, DATA, [0.1, 1.0, 10.0], 3)


def test_labels_preamble_and_figure():
    assert fm.dataset_label("e", SimpleNamespace(synthetic=True)) == "e (SYNTHETIC)"
    assert "delta0 = 1.0" in fm.preamble(2, 1.0, 0.9, 0.0, 0)
    fig = fm.plot_formulations(_runs(), DATA, 2)
    assert fig.axes[0].get_title().startswith("bibtex (real)")


def test_run_formulations_fits_both_formulations():
    rng = np.random.default_rng(0)
    X = sp.random(40, 6, density=0.5, format="csr", random_state=0)
    ds = SimpleNamespace(X=X, y=rng.integers(0, 4, 40), K=4, synthetic=True)
    runs = fm.run_formulations({"toy": ds}, [0.1], epochs=1, lr_decay=0.9, mu=0.0, seeds=0,
                               delta0=1.0, progress=False)
    assert list(runs.formulation) == ["proposed", "raman"]
    two = fm.run_formulations({"toy": ds}, [0.1], epochs=1, lr_decay=0.9, mu=0.0,
                              seeds=[0, 1], delta0=1.0, progress=False)
    assert list(two.seed) == [0, 0, 1, 1]
    # seed 0's runs are the same whether or not other seeds run beside them
    assert two.log_loss.iloc[:2].tolist() == runs.log_loss.tolist()
    # and the same in two worker processes, bit for bit and in the same order
    par = fm.run_formulations({"toy": ds}, [0.1], epochs=1, lr_decay=0.9, mu=0.0,
                              seeds=[0, 1], delta0=1.0, progress=False, workers=2)
    pd.testing.assert_frame_equal(par.drop(columns="seconds"), two.drop(columns="seconds"))
    with pytest.raises(ValueError, match="workers"):
        fm.run_formulations({"toy": ds}, [0.1], epochs=1, lr_decay=0.9, mu=0.0, seeds=0,
                            delta0=1.0, workers=0)
    assert np.isfinite(runs.log_loss).all() and (runs.epochs_run == 1).all()
    assert runs.synthetic.all()


def _two_seeds():
    one, other = _runs(), _runs()
    one["seed"], other["seed"] = 0, 1
    other.loc[(other.lr == 1.0) & (other.formulation == "raman"), "log_loss"] = 0.5
    return pd.concat([one, other], ignore_index=True)


def test_ratio_table_averages_the_seeds_and_gives_their_range():
    runs = _two_seeds()
    t = fm.ratio_table(runs, DATA, 2, 3.08).set_index("rate")
    # log-losses averaged over the seeds: raman at rate 1 is (1.5 + 0.5) / 2
    assert t.raman_log_loss["1e+00"] == pytest.approx(1.0)
    assert t.ratio_raman_over_proposed["1e+00"] == pytest.approx(1.0)
    assert (t.ratio_min["1e+00"], t.ratio_max["1e+00"]) == (0.5, 1.5)
    assert (t.seeds == 2).all()
    # the mean row's range is that of each seed's own mean over rates
    assert t.ratio_min["mean over rates"] == pytest.approx((2.0 + 0.5) / 2)
    assert t.ratio_max["mean over rates"] == pytest.approx((2.0 + 1.5) / 2)
    fm.check_formulations(runs, t.reset_index(), DATA, [0.1, 1.0, 10.0], 2)


def test_claims_table_counts_the_seeds_that_support_each_claim():
    c = fm.claims_table(_two_seeds(), DATA, 2, 3.08).set_index("claim")
    assert list(c.dataset.unique()) == ["bibtex"]
    every = c.loc["the proposed double sum is better at every rate"]
    # rate 10 diverged for raman (ratio inf > 1): seed 0 better at 3 of 3, seed 1 at 2 of 3
    assert every.seeds == "1 of 2 seeds"
    assert every.verdict == "inconclusive (1 of 2 seeds)"
    factor = c.loc["the proposed double sum beats Raman's by the paper's factor, on average "
                   "over the rates"]
    assert factor.verdict == "not confirmed" and factor.seeds == "0 of 2 seeds"
    assert factor.paper == "3.08"
