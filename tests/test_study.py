"""The paper's study driver (scalable_softmax.repro.fagan.main_study) and the run summaries
(scalable_softmax.repro.fagan.reporting)."""
import math

import numpy as np
import pandas as pd
import pytest

from scalable_softmax.repro.fagan import main_study as study
from scalable_softmax.repro.fagan import reporting as rp


def _runs():
    return pd.DataFrame(dict(
        dataset=["a"] * 6, method=["x", "x", "x", "y", "y", "y"],
        lr=[1.0, 1.0, 1.0, 0.1, 0.1, 0.1], seed=[0, 1, 2] * 2,
        diverged=[False, True, False, False, False, False],
        train_log_loss=[1.0, math.inf, 3.0, 2.0, 4.0, 6.0],
        train_error=[0.1, math.nan, 0.3, 0.2, 0.2, 0.2]))


def test_summarise_runs_keeps_divergence_visible():
    s = rp.summarise_runs(_runs()).set_index("method")
    assert s.diverged_seeds["x"] == 1 and s.seeds["x"] == 3
    assert s.train_log_loss_mean["x"] == math.inf        # not the mean of the finite seeds
    assert s.train_log_loss_mean["y"] == pytest.approx(4.0)
    assert s.train_log_loss_std["y"] == pytest.approx(2.0)
    assert s.train_log_loss_min["y"] == 2.0 and s.train_log_loss_max["y"] == 6.0
    with pytest.raises(ValueError, match="lacks column"):
        rp.summarise_runs(_runs().drop(columns="seed"))


def test_relative_table_divides_by_the_reference_and_averages():
    v = pd.DataFrame(dict(dataset=["a", "a", "b", "b"], method=["m", "implicit"] * 2,
                          val=[4.0, 2.0, 3.0, 3.0]))
    t = rp.relative_table(v, "val")
    assert t.loc["a", "m"] == 2.0 and t.loc["b", "m"] == 1.0
    assert t.loc["Average", "m"] == 1.5 and t.loc["Average", "implicit"] == 1.0
    with pytest.raises(ValueError, match="no 'umax' column"):
        rp.relative_table(v, "val", reference="umax")


def test_curve_bands_drop_diverged_points():
    h = pd.DataFrame(dict(dataset="a", method="x", lr=1.0, epoch=[0, 0, 5, 5],
                          seed=[0, 1, 0, 1], train_log_loss=[2.0, 2.0, 1.0, math.inf]))
    b = rp.curve_bands(h).set_index("epoch")
    assert b.seeds[0] == 2 and b.seeds[5] == 1 and b["mean"][5] == 1.0
    assert b["min"][0] == b["max"][0] == 2.0


def test_choose_used_takes_the_largest_stable_rate():
    runs = pd.DataFrame(dict(
        dataset="a", method="v", lr=[1.0, 1.0, 0.1, 0.1, 0.01, 0.01], seed=[0, 1] * 3,
        diverged=[True, False, False, False, False, False],
        train_log_loss=[math.inf, 1.0, 2.0, 2.5, 3.0, 3.0], paper_lr=1.0))
    s = study.choose_used(runs, ["a"], ["v"])
    assert list(s.lr) == [1.0, 0.1, 0.01]
    assert list(s.used) == [False, True, False]
    assert list(s.rate) == ["paper", "stepped down", "stepped down"]


def test_run_paper_methods_steps_down_after_a_divergence(tmp_path, monkeypatch):
    monkeypatch.setenv("SOFTMAX_RUN_CACHE", str(tmp_path))
    kw = dict(methods=["vanilla", "implicit"], seeds=[0], epochs=2, monitor_rows=300,
              workers=1, progress=False, u_init="zero",
              rate_overrides={"bibtex": {"vanilla": 10.0}})
    runs, results, shapes, _ = study.run_paper_methods(["bibtex"], **kw)
    v = runs[runs.method == "vanilla"].sort_values("lr", ascending=False)
    assert v.lr.iloc[0] == 10.0 and v.diverged.iloc[0]          # overflows at 10 from u = 0
    assert v.rate.iloc[0] == "paper" and (v.rate.iloc[1:] == "stepped down").all()
    assert not v.diverged.iloc[-1] or len(v) == 4              # stopped at the first stable
    np.testing.assert_allclose(np.diff(v.lr.to_numpy()) / v.lr.to_numpy()[:-1], -0.9)
    assert shapes.loc["bibtex", "synthetic"] == False  # noqa: E712 (numpy bool)
    impl = runs[runs.method == "implicit"]
    assert len(impl) == 1 and impl.lr.iloc[0] == 10.0 and not impl.diverged.iloc[0]
    again, _, _, _ = study.run_paper_methods(["bibtex"], **kw)
    assert again.from_cache.all() and len(again) == len(runs)
    with pytest.raises(ValueError, match="unknown method"):
        study.run_paper_methods(["bibtex"], methods=["sgd"])
    with pytest.raises(ValueError, match="unknown data set"):
        study.run_paper_methods(["imagenet"])


def test_choose_used_names_the_starting_rate():
    runs = pd.DataFrame(dict(dataset="a", method="v", lr=[1.0, 0.1], seed=0,
                             diverged=[True, False], train_log_loss=[math.inf, 2.0],
                             paper_lr=1.0))
    s = study.choose_used(runs, ["a"], ["v"], rate_label="tuned")
    assert list(s.rate) == ["tuned", "stepped down"] and list(s.used) == [False, True]


def test_ratio_table_md_bolds_the_lowest_per_data_set():
    v = pd.DataFrame(dict(dataset=["a", "a", "b", "b"], method=["ove", "implicit"] * 2,
                          val=[4.0, 2.0, 1.5, 3.0]))
    t = rp.relative_table(v, "val")[["ove", "implicit"]]
    md = rp.ratio_table_md(t, "T", label=lambda d: d.upper()).splitlines()
    assert md[0] == "**T** (lowest per data set in bold)"
    assert md[2] == "| data set | OVE | Implicit |"
    assert md[4] == "| A | 2.00 | **1.00** |"
    assert md[5] == "| B | **0.50** | 1.00 |"
    assert md[6] == "| Average | 1.25 | 1.00 |"               # never bold
    with pytest.raises(ValueError, match="Average"):
        rp.ratio_table_md(t.drop(index="Average"), "T")


def test_ratio_dots_draw_one_point_per_series_and_method():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    v = pd.DataFrame(dict(dataset=["a", "a"], method=["ove", "implicit"], val=[4.0, 2.0]))
    t = rp.relative_table(v, "val")[["ove", "implicit"]]
    fig, axes = plt.subplots(1, 2)
    rp.ratio_dots(axes, ["a", "Average"], ["ove", "implicit"],
                  [("x", t, "C0"), ("y", t * 2, "C1", "s")])
    lines = [ln for ln in axes[0].get_lines() if ln.get_label() in ("x", "y")]
    ys = sorted(float(y) for ln in lines for y in ln.get_ydata())
    assert ys == [1.0, 2.0, 2.0, 4.0] and axes[0].get_yscale() == "log"
    assert [ln.get_marker() for ln in lines] == ["o", "s"]
    assert axes[1].get_title() == "Average over the data sets"
    # the method names are the style's, in the method's colour darkened for text
    ticks = axes[0].get_xticklabels()
    assert [t.get_text() for t in ticks] == ["OVE", "Implicit SGD"]
    from scalable_softmax.repro.machinery import style
    assert matplotlib.colors.same_color(ticks[1].get_color(), style.text_color("implicit"))
    assert matplotlib.colors.same_color(ticks[0].get_color(), style.text_color("ove"))
    assert not axes[0].patches                                  # points, never bars
    plt.close(fig)
    # a non-finite ratio is left out, not drawn at the axis edge
    t2 = t.copy()
    t2.loc["a", "ove"] = np.inf
    fig, axes = plt.subplots(1, 1, squeeze=False)
    rp.ratio_dots(axes[0], ["a"], ["ove", "implicit"], [("x", t2, "C0")])
    assert [float(y) for y in axes[0, 0].get_lines()[0].get_ydata()] == [1.0]
    plt.close(fig)


def test_ratio_table_md_shows_missing_rows():
    import numpy as np
    import pandas as pd

    t = pd.DataFrame({"ove": [2.0, np.nan], "implicit": [1.0, np.nan]}, index=["a", "b"])
    t.loc["Average"] = t.mean(axis=0)
    md = rp.ratio_table_md(t, "T")
    assert "| b | - | - |" in md and "| a | 2.00 | **1.00** |" in md


# ---------------------------------------------------------------------------
# notebook 02's tables, figure and checks (scalable_softmax.repro.fagan.main_study)
# ---------------------------------------------------------------------------

def _shapes():
    return pd.DataFrame(dict(dataset=["bibtex", "eurlex"], loaded=["bibtex", "eurlex-surrogate"],
                             synthetic=[False, True], N=[100, 200], N_test=[50, 50], D=[5, 5],
                             K=[10, 20])).set_index("dataset", drop=False)


def test_dataset_label_and_monitoring():
    shapes = _shapes()
    assert study.dataset_label(shapes, "bibtex") == "bibtex"
    assert study.dataset_label(shapes, "eurlex") == "eurlex (SYNTHETIC)"
    monitor, ev = study.monitoring(shapes, 5, 2, 500)
    assert monitor == {"bibtex": None, "eurlex": 500} and ev == [0, 2, 4, 5]
    monitor, _ = study.monitoring(shapes, 5, 2, 500, monitor_all_real=False)
    assert monitor == {"bibtex": 500, "eurlex": 500}
    with pytest.raises(ValueError, match="eval_every"):
        study.monitoring(shapes, 5, 0, 500)


def _study_runs():
    """bibtex, two methods, two seeds: implicit finite, vanilla diverged in one seed at
    1.0 and finite at 0.1."""
    rows = []
    for m, lr, seed, ll in [("implicit", 1.0, 0, 0.5), ("implicit", 1.0, 1, 0.7),
                            ("vanilla", 1.0, 0, math.inf), ("vanilla", 1.0, 1, 1.0),
                            ("vanilla", 0.1, 0, 2.0), ("vanilla", 0.1, 1, 2.2)]:
        fin = math.isfinite(ll)
        rows.append(dict(dataset="bibtex", method=m, lr=lr, seed=seed, paper_lr=1.0,
                         diverged=not fin, train_log_loss=ll, train_error=0.1,
                         epochs_run=3 if fin else 1, N=100, K=10, train_rows=100 if fin else 0,
                         test_rows=50 if fin else 0,
                         train_defective=math.log(9 + math.e) - 0.5 if fin else math.inf,
                         from_cache=seed == 1, train_seconds=6.0, monitor_eval_seconds=3.0,
                         final_eval_seconds=1.5, setup_seconds=1.0, load_seconds=0.5,
                         other_seconds=0.0, wall_seconds=12.0))
    return pd.DataFrame(rows)


def test_check_dataset_run_accepts_and_rejects():
    runs = _study_runs()
    summary = study.choose_used(runs, ["bibtex"], ["implicit", "vanilla"])
    study.check_dataset_run(runs, summary, [0, 1], 2, epochs=3, final_rows=10000)
    with pytest.raises(AssertionError):
        study.check_dataset_run(runs, summary, [0, 1], 2, epochs=3, final_rows=50)
    bad = runs.copy()
    bad.loc[0, "train_defective"] = 10.0
    with pytest.raises(AssertionError):
        study.check_dataset_run(bad, summary, [0, 1], 2, epochs=3, final_rows=10000)


def test_best_report_and_time_table():
    runs = _study_runs()
    summary = study.choose_used(runs, ["bibtex"], ["implicit", "vanilla"])
    shapes = _shapes().loc[["bibtex"]]
    text = study.best_report(summary, shapes, ["implicit", "vanilla"])
    assert text.startswith("bibtex: lowest = Implicit SGD; final train log-loss: Implicit SGD 0.6")
    assert "configurations with a diverged seed:" in text and "vanilla 1.0" in text
    t = study.time_table(runs, ["implicit", "vanilla"], workers=2, run_seconds=30.0)
    t = t.set_index("method")
    assert t.loc["all methods", "runs"] == 3                    # the seed-0 runs were trained
    assert t.loc["all methods", "training"] == pytest.approx(3 * 6.0 / 60)
    assert t.loc["all methods", "all parts"] == pytest.approx(3 * 12.0 / 60)
    assert t.loc["workers idle or in the pool", "all parts"] == pytest.approx((60 - 36) / 60)
    assert study.time_table(runs.assign(from_cache=True), ["implicit"], 2, 1.0) is None


def test_summary_preamble_and_figure1():
    import matplotlib
    matplotlib.use("Agg")
    text = study.summary_preamble("authors-code", "the authors' code", 3, [0, 1], 100, 2)
    assert "protocol `authors-code` (the authors' code), 3 epochs" in text
    assert "with 2 runs sharing" in text
    runs = _study_runs()
    summary = study.choose_used(runs, ["bibtex"], ["implicit", "vanilla"])
    hist = pd.DataFrame(dict(dataset="bibtex", method=["implicit"] * 4 + ["vanilla"] * 4,
                             lr=[1.0] * 4 + [0.1] * 4, seed=[0, 0, 1, 1] * 2,
                             epoch=[0, 3] * 4, train_log_loss=[2.0, 0.5, 2.0, 0.7] * 2,
                             train_defective=2.0))
    fig = study.plot_figure1(hist, summary, _shapes().loc[["bibtex"]], ["implicit", "vanilla"])
    assert fig.axes[0].get_title() == "exact train log-loss"
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert "Vanilla SGD (η₀ = 0.1)" in labels
