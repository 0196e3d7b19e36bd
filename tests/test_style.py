"""The shared figure style and the progress bars: one name, colour and marker per method
in every figure; every notebook draws with the style module and decides its outputs by
profile; figures fit a README's width; progress bars never warn."""
from __future__ import annotations

import json
import re
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from scalable_softmax import paths, progress  # noqa: E402
from scalable_softmax.methods import METHODS  # noqa: E402
from scalable_softmax.protocols import PROTOCOL_METHODS  # noqa: E402
from scalable_softmax.repro.fagan.instability import REPLAY_METHODS  # noqa: E402
from scalable_softmax.repro.machinery import style  # noqa: E402


def _notebooks():
    out = []
    for path in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")):
        nb = json.loads(path.read_text())
        code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        out.append((path.stem, code))
    return out


def test_every_method_of_the_library_has_a_style():
    names = set(METHODS) | set(REPLAY_METHODS) | set(PROTOCOL_METHODS) | {"nce (1,1)"}
    for m in names:
        assert style.label(m) and mcolors.is_color_like(style.color(m)), m
        assert style.marker(m) in matplotlib.lines.Line2D.markers, m
    with pytest.raises(KeyError, match="add it to"):
        style.color("no-such-method")


def test_the_papers_six_methods_are_told_apart():
    six = list(PROTOCOL_METHODS)
    colours = [mcolors.to_hex(style.color(m)) for m in six]
    assert len(set(colours)) == 6 and len({style.marker(m) for m in six}) == 6
    assert len({style.label(m) for m in six}) == 6
    # the collection's order puts the paper's column order first
    assert style.ordered(reversed(six)) == six
    # one display name per method, whatever the spelling a notebook uses
    assert style.label("OVE") == style.label("ove") and style.label("softmax") == "Exact softmax"


def test_every_notebook_draws_with_the_style_and_decides_its_outputs_by_profile():
    notebooks = _notebooks()
    assert len(notebooks) >= 10
    for name, code in notebooks:
        assert "style.use()" in code, f"{name}: call scalable_softmax.repro.machinery.style.use()"
        assert f'runner.profile_outputs("{name}", globals())' in code, name
        assert "paths.TABLES" not in code and "paths.FIGURES" not in code, \
            f"{name}: write under out.tables / out.figures (profile_outputs), never paths.TABLES"
        assert "tight_layout" not in code, f"{name}: the style uses constrained layout"
        assert "outputs.save_figure" not in code, f"{name}: save with style.save"
        assert "display(fig)" not in code and "plt.show()" not in code, \
            f"{name}: show figures with style.show(fig)"
        assert "tqdm.auto" not in code, f"{name}: use scalable_softmax.progress.tqdm"
        # no figure wider than a README column: literal widths at most style.FIG_WIDTH
        for w in re.findall(r"figsize=\(\s*([0-9.]+)\s*[,*]", code):
            assert float(w) <= style.FIG_WIDTH, f"{name}: figsize width {w} in"
        for _ in re.findall(r"plt\.subplots\(\s*1\s*,\s*len\(", code):
            pytest.fail(f"{name}: one row of len(...) panels is a strip; use style.panel_grid")


def test_panel_grid_makes_grids_not_strips():
    fig, axes = style.panel_grid(8, ncols=3)
    assert len(axes) == 8 and len(fig.axes) == 8            # the ninth cell is removed
    w, h = fig.get_size_inches()
    assert w == style.FIG_WIDTH and h == pytest.approx(3 * 2.3)
    plt.close(fig)
    fig, axes = style.panel_grid(3)
    assert len(axes) == 3 and fig.get_size_inches()[0] == style.FIG_WIDTH
    plt.close(fig)
    with pytest.raises(ValueError):
        style.panel_grid(0)


def test_legend_below_sits_outside_every_panel(tmp_path):
    style.use()
    fig, axes = style.panel_grid(4, ncols=2)
    for ax in axes:
        for m in ("ove", "implicit"):
            ax.plot(np.arange(10), np.random.default_rng(0).random(10), **style.line(m))
    leg = style.legend_below(fig, style.handles(["implicit", "ove"]))
    assert [t.get_text() for t in leg.get_texts()] == ["OVE", "Implicit SGD"]
    fig.canvas.draw()
    lb = leg.get_window_extent()
    for ax in axes:
        assert lb.y1 <= ax.get_window_extent().y0 + 1e-6      # below every panel's box
    paths_ = style.save(fig, "grid", tmp_path)
    assert [p.suffix for p in paths_] == [".pdf", ".png"] and all(p.stat().st_size for p in paths_)
    plt.close(fig)


def test_bar_axes_start_at_zero_and_log_bars_are_refused():
    fig, ax = plt.subplots()
    ax.bar([0, 1], [5.0, 6.0])
    ax.set_ylim(4.5, 6.5)
    style.bars_from_zero(ax)
    assert ax.get_ylim()[0] == 0
    ax.set_yscale("log")
    with pytest.raises(ValueError, match="points, not bars"):
        style.bars_from_zero(ax)
    plt.close(fig)


def test_show_displays_a_figure_made_without_pyplot(monkeypatch):
    import IPython.display
    from matplotlib.figure import Figure

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    fig = Figure(figsize=(3, 2))
    fig.subplots().plot([0, 1], [0, 1])
    style.show(fig)
    assert len(shown) == 1 and isinstance(shown[0], IPython.display.Image)
    assert shown[0].data[:8] == b"\x89PNG\r\n\x1a\n"          # an image, not "<Figure ...>"


def test_log_ticks_are_plain_numbers_over_a_few_decades():
    fig, ax = plt.subplots()
    ax.plot([1, 2, 3], [0.3, 2.0, 40.0])
    ax.set_yscale("log")
    style.log_ticks(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert "1" in labels and "10" in labels and not any("10^" in s or "$" in s for s in labels)
    plt.close(fig)


def test_progress_bars_never_warn_outside_widgets(monkeypatch, capsys):
    monkeypatch.delenv(progress.ENV, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bar = progress.tqdm(total=3, desc="x")
        bar.update(3)
        bar.close()
    assert type(bar).__module__ == "tqdm.std"
    monkeypatch.setenv(progress.ENV, "off")
    assert progress.tqdm(total=3).disable


def test_no_warning_in_an_executed_notebook_with_progress_bars(tmp_path):
    """In a Jupyter kernel without ipywidgets, tqdm.auto printed 'TqdmWarning: IProgress
    not found'; the library's bars print text instead, and a figure built without pyplot
    is shown as an image."""
    import nbformat
    import papermill as pm

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import sys\n"
        "sys.modules['ipywidgets'] = None   # as in a kernel without ipywidgets\n"
        "import numpy as np, scipy.sparse as sp\n"
        "from matplotlib.figure import Figure\n"
        "from scalable_softmax.repro.machinery import style\n"
        "from scalable_softmax.fit import fit\n"
        "from scalable_softmax.progress import tqdm\n"
        "style.use()\n"
        "X = sp.random(40, 6, density=0.5, format='csr', random_state=0) + sp.eye(40, 6, "
        "format='csr')\n"
        "y = np.arange(40) % 8\n"
        "r = fit(X, y, 'umax', 0.1, K=8, epochs=2, progress=True)\n"
        "for _ in tqdm(range(3), desc='loop'):\n"
        "    pass\n"
        "fig = Figure(); fig.subplots().plot([0, 1])\n"
        "style.show(fig)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    src, out = tmp_path / "in.ipynb", tmp_path / "out.ipynb"
    nbformat.write(nb, src)
    pm.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False)
    outputs = json.loads(out.read_text())["cells"][0]["outputs"]
    text = "".join("".join(o.get("text", "")) for o in outputs)
    assert "Warning" not in text and "warn" not in text.lower(), text
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert not any("<Figure" in "".join(o.get("data", {}).get("text/plain", ""))
                   for o in outputs if "image/png" not in o.get("data", {}))


def test_text_color_reaches_a_readable_contrast_and_keeps_dark_colours():
    from matplotlib.colors import to_rgb
    for m in style.METHODS:
        c = style.text_color(m)
        assert 1.05 / (style._luminance(to_rgb(c)) + 0.05) >= 4.5, (m, c)
    # U-max's blue is dark enough already; vanilla's sky blue is darkened, same hue
    assert style.text_color("umax").lower() == style.color("umax").lower()
    r, g, b = to_rgb(style.text_color("vanilla"))
    r0, g0, b0 = to_rgb(style.color("vanilla"))
    assert b < b0 and abs(r / b - r0 / b0) < 0.02


def test_the_implicit_variants_differ_in_colour_line_and_marker():
    names = ("implicit", "implicit-batch", "implicit-batch-5")
    for part in ("color", "marker", "linestyle"):
        assert len({getattr(style.METHODS[m], part) for m in names}) == 3, part


def test_color_distance_is_cie76():
    assert style.color_distance("#000000", "#FFFFFF") == pytest.approx(100.0, abs=0.01)
    assert style.color_distance("#AA4499", "#AA4499") == 0.0
    # pure red and green are far apart; two shades of grey by their lightness only
    assert style.color_distance("#FF0000", "#00FF00") > 100
    assert style.color_distance("#777777", "#888888") == pytest.approx(6.6, abs=0.2)


def test_figure_12_series_are_told_apart():
    """Every series of notebook 12's figures (ours in the method styles, the peers in
    the series colours) differs from every other by a CIE76 distance of 30 or more:
    the peers' wine and purple (25.5 apart) were hard to tell apart."""
    import itertools

    from scalable_softmax.repro.race import plots
    from scalable_softmax.repro.race.methods import METHODS

    colours = {m: plots.series_color(m) for m in METHODS}
    assert all(colours[m] == style.SERIES_COLORS[plots.PEER_STYLES[m][0]]
               for m, v in METHODS.items() if v.library != "ours")
    assert set(colours) == set(METHODS)
    close = [(a, b, round(style.color_distance(colours[a], colours[b]), 1))
             for a, b in itertools.combinations(colours, 2)
             if style.color_distance(colours[a], colours[b]) < 30]
    assert not close, close
    # the peers' styles are distinct triples, their colours too
    assert len({c for c, _, _ in plots.PEER_STYLES.values()}) == len(plots.PEER_STYLES)


def test_coinciding_crosses_are_stacked_not_hidden():
    assert style.stacked([1.0, 2.0, 3.0], 100.0) == [100.0, 100.0, 100.0]
    ys = style.stacked([1.0, 1.0, 1.0, 2.0, 1.0], 100.0)
    assert ys == [100.0, 50.0, 25.0, 100.0, 12.5]
    assert style.stacked([], 1.0) == []
    pos = list(zip([1.0, 1.0, 1.0, 2.0, 1.0], ys))
    assert len(set(pos)) == len(pos)


def test_the_sensitivity_figure_keeps_every_diverged_rate_visible():
    """Notebook 04's per-epoch figure of a variant that diverges at every rate in the
    same epoch (vanilla SGD on Eurlex): one cross per rate, at distinct places."""
    import matplotlib
    import numpy as np
    import pandas as pd

    from scalable_softmax.repro.fagan import tuning

    matplotlib.use("Agg")
    rates = [1e-3, 1e-2, 1e-1, 1.0]
    rows = []
    for v in ("vanilla", "implicit"):
        for lr in rates:
            for e in range(4):
                loss = (np.inf if v == "vanilla" and e >= 1 else 2.0 / (1 + e * lr))
                rows.append(dict(paper_dataset="Eurlex", variant=v, lr=lr, epoch=e,
                                 train_log_loss=loss))
    history = pd.DataFrame(rows)
    frame = pd.DataFrame(dict(paper_dataset=["Eurlex"], dataset=["eurlex (SYNTHETIC)"],
                              N=[15539], K=[838]))
    table = pd.DataFrame(dict(data=["eurlex (SYNTHETIC)"], log_K=[np.log(838.0)],
                              dataset=["eurlex (SYNTHETIC)"]))
    fig = tuning.plot_sensitivity_curves(history, frame, table, "Eurlex",
                                         ["vanilla", "implicit"], rates, 0)
    ax = next(a for a in fig.axes if a.get_title() == style.label("vanilla"))
    crosses = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert len(crosses) == len(rates)
    places = {(float(ln.get_xdata()[0]), float(ln.get_ydata()[0])) for ln in crosses}
    assert len(places) == len(rates)
    import matplotlib.pyplot as plt
    plt.close(fig)
