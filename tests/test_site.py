"""The static site (``make site``): built from a smoke run, every internal link, anchor
and image resolves, nothing loads from the network; the link checker catches what it
must; screenshots in headless Chromium (``make site-check``) when it is installed."""
from __future__ import annotations

import json
import re
import shutil

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")

from scalable_softmax import paths  # noqa: E402
from scalable_softmax.repro.machinery import site as site_mod  # noqa: E402

pytestmark = pytest.mark.slow

#: the fastest notebook of the collection under its smoke settings (about 7 s)
SMOKE_NOTEBOOK = "09-ove-toy-2d"
NAMES = sorted(p.stem for p in paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from scalable_softmax.repro.machinery import runner as notebooks
    root = tmp_path_factory.mktemp("site")
    smoke = root / "executed" / "smoke"
    notebooks.run(SMOKE_NOTEBOOK, "smoke", out=smoke / f"{SMOKE_NOTEBOOK}.ipynb")
    lines = []
    out = site_mod.build(root / "html", profile="smoke", executed_dirs=[smoke],
                         src=root / "src", log=lines.append)
    return out, "\n".join(lines)


def test_every_page_is_built(built):
    out, _ = built
    assert (out / "index.html").is_file()
    assert (out / "docs" / "math.html").is_file()
    for name in NAMES:
        assert (out / "notebooks" / f"{name}.html").is_file(), name
    tables = sorted(p.stem for p in paths.TABLES.glob("*.md"))
    assert tables and all((out / "tables" / f"{t}.html").is_file() for t in tables)
    index = (out / "index.html").read_text()
    # the README is the front page, with its figures
    assert "Unbiased scalable softmax: a reproducible notebook collection" in index
    # the docs pages the README links are pages of the site
    for page in sorted((paths.ROOT / "docs").glob("*.md")):
        assert (out / "docs" / f"{page.stem}.html").is_file(), page.name
    imgs = re.findall(r'<img[^>]*src="(_images/[^"]+\.png)"', index)
    assert len(imgs) >= 1 and all((out / i).stat().st_size > 10_000 for i in imgs)


def _text(html_page: str) -> str:
    import html
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html_page)))


def test_the_api_reference_is_rendered_from_the_docstrings(built):
    import inspect

    from scalable_softmax.evaluate import evaluate
    from scalable_softmax.fit import fit
    from scalable_softmax.methods import METHODS
    from scalable_softmax.protocols import fit_kwargs
    out, _ = built
    page = (out / "docs" / "api.html").read_text()
    for obj in ("fit.fit", "fit.FitResult", "evaluate.evaluate", "evaluate.evaluate_sets",
                "evaluate.NonFiniteWeightsError", "data.load_dataset",
                "protocols.PROTOCOLS", "protocols.fit_kwargs", "protocols.resolve",
                "estimator.SoftmaxSGDClassifier", "estimator.SoftmaxSGDClassifier.fit",
                "estimator.SoftmaxSGDClassifier.partial_fit", "methods.get_trainer_class",
                "methods.csr_arrays"):
        assert f'id="scalable_softmax.{obj}"' in page, obj
    text = _text(page)
    # the words come from the docstrings (napoleon renders their numpydoc sections)
    for f in (fit, evaluate, fit_kwargs):
        first = " ".join(inspect.getdoc(f).split("\n")[0].split())
        first = re.sub(r":(func|meth):`([^`~]+)`", r"\2()", first)      # as Sphinx shows them
        first = re.sub(r":\w+:`([^`~]+)`", r"\1", first).replace("``", "")
        assert re.sub(r"\s+", "", first) in re.sub(r"\s+", "", text), f.__name__
    assert "Parameters" in text and "Returns" in text
    # the method table: every registered name with its trainer class
    for name, target in METHODS.items():
        assert f'"{name}"' in text and target.split(":")[1] in text, name
    # the README's contents (the front page) link to it
    assert 'href="docs/api.html"' in (out / "index.html").read_text()


def test_the_method_table_lists_every_method_and_its_facts():
    from scalable_softmax.methods import METHODS, get_trainer_class
    lines = site_mod.method_table()
    assert lines[0] == ".. list-table::"
    rows = "\n".join(lines).split("\n   * - ")[1:]
    assert len(rows) == len(METHODS) + 1                     # a header, a row per method
    for row, (name, target) in zip(rows[1:], METHODS.items()):
        cells = [c.strip() for c in row.split("\n     - ")]
        assert cells[0] == f'``"{name}"``' and cells[1].endswith(f'.{target.split(":")[1]}``')
        cls = get_trainer_class(name)
        assert cells[2] == ("yes" if cls.has_u else "no")
        assert str(cls.default_batch_size) in cells and cells[-1].endswith(".")

def test_every_internal_link_anchor_and_image_resolves(built):
    out, _ = built
    assert site_mod.check_links(out) == []
    pages = list(out.rglob("*.html"))
    assert len(pages) >= len(NAMES) + 10
    for page in pages:
        html = page.read_text()
        assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', html), page


def test_the_smoke_run_s_figures_are_on_its_page(built):
    out, log = built
    page = (out / "notebooks" / f"{SMOKE_NOTEBOOK}.html").read_text()
    imgs = re.findall(r'<img[^>]*src="\.\./(_images/[^"]+)"', page)
    assert imgs, "the executed notebook's figures are missing"
    for i in imgs:
        data = (out / i).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000
    assert "smoke run" in page and "not the results" in page


def test_missing_runs_are_reported_and_marked(built):
    out, log = built
    missing = [n for n in NAMES if n != SMOKE_NOTEBOOK]
    assert f"{len(missing)} of {len(NAMES)} notebooks have no smoke run" in log
    for n in missing:
        assert f"{n}: NOT EXECUTED" in log
        assert "has <strong>not been executed</strong>" in \
            (out / "notebooks" / f"{n}.html").read_text()


def test_math_references_become_links_to_their_sections(built):
    out, _ = built
    page = (out / "notebooks" / "02-dataset-run.html").read_text()
    assert re.search(r'href="\.\./docs/math\.html#s1"', page)
    math = (out / "docs" / "math.html").read_text()
    for n in range(15):
        assert f'id="s{n}"' in math


def test_check_links_reports_what_is_broken(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "pic.png").write_bytes(b"png")
    (tmp_path / "sub" / "b.html").write_text('<h1 id="here">B</h1><a href="../index.html">up</a>')
    (tmp_path / "index.html").write_text(
        '<a href="sub/b.html#here">ok</a> <a href="#top" id="top">self</a>'
        '<img src="pic.png"> <a href="https://example.org/">away</a>'
        '<a href="sub/b.html#nowhere">bad anchor</a> <a href="missing.html">gone</a>'
        '<img src="nope.png"> <script src="https://cdn.example.org/x.js"></script>'
        '<a href="../outside.html">out</a>')
    (tmp_path.parent / "outside.html").write_text("x")
    problems = {(p.target, p.why.split(" in ")[0]) for p in site_mod.check_links(tmp_path)}
    assert problems == {("sub/b.html#nowhere", "no id 'nowhere'"),
                        ("missing.html", "no such file"), ("nope.png", "no such file"),
                        ("https://cdn.example.org/x.js", "loads from the network"),
                        ("../outside.html", "points outside the site")}
    strict = site_mod.check_links(tmp_path, allow_external_links=False)
    assert any(p.target == "https://example.org/" for p in strict)


def test_staging_prefers_full_runs_then_smoke_then_source(tmp_path):
    full, smoke = tmp_path / "full", tmp_path / "smoke"
    full.mkdir()
    smoke.mkdir()
    a, b = NAMES[0], NAMES[1]
    shutil.copy(paths.NOTEBOOKS / f"{a}.ipynb", full / f"{a}.ipynb")
    shutil.copy(paths.NOTEBOOKS / f"{a}.ipynb", smoke / f"{a}.ipynb")
    nb = json.loads((paths.NOTEBOOKS / f"{b}.ipynb").read_text())
    nb["cells"].append({"cell_type": "code", "execution_count": 1, "metadata": {},
                        "source": "x", "outputs": [
                            {"output_type": "display_data", "metadata": {}, "data": {
                                "application/vnd.jupyter.widget-view+json": {
                                    "model_id": "m", "version_major": 2, "version_minor": 0},
                                "text/plain": "HBox()"}},
                            {"output_type": "stream", "name": "stdout", "text": "kept\n"}]})
    nb["metadata"]["widgets"] = {"state": {}}
    (smoke / f"{b}.ipynb").write_text(json.dumps(nb))
    lines = []
    staged = site_mod.stage(tmp_path / "src", "full", [full, smoke], log=lines.append)
    assert staged.notebooks[a] == "full" and staged.notebooks[b] == "smoke"
    assert all(staged.notebooks[n] == "source" for n in NAMES[2:])
    out_a = json.loads((tmp_path / "src" / "notebooks" / f"{a}.ipynb").read_text())
    assert "smoke run" not in json.dumps(out_a) and "not been executed" not in \
        json.dumps(out_a)
    out_b = json.loads((tmp_path / "src" / "notebooks" / f"{b}.ipynb").read_text())
    text = json.dumps(out_b)
    assert "smoke run" in text and "widget-view" not in text and "kept" in text
    assert "widgets" not in out_b["metadata"]
    assert out_b["cells"][0]["source"].startswith("# ")      # the note is under the title
    assert f"{len(NAMES) - 1} of {len(NAMES)} notebooks have no full run" in lines[0]
    index = (tmp_path / "src" / "index.md").read_text()
    assert "```{toctree}" in index and f"notebooks/{NAMES[-1]}" in index


def test_plain_math_references_are_linked_once():
    f = site_mod._link_math_refs
    assert f("see docs/math.md section 7.", "../") == \
        "see [docs/math.md section 7](../docs/math.md#s7)."
    assert f("docs/math.md section 2.4 and docs/math.md, section 3", "") == \
        ("[docs/math.md section 2.4](docs/math.md#s2) and "
         "[docs/math.md section 3](docs/math.md#s3)")
    already = "[docs/math.md](docs/math.md) and `lib/docs/math.md section 1`"
    assert f(already, "") == already


@pytest.mark.skipif(site_mod.find_chromium() is None,
                    reason="headless Chromium not installed (apt-get install chromium)")
def test_screenshots_in_headless_chromium(built, tmp_path):
    out, _ = built
    pages = [out / "index.html", out / "notebooks" / f"{SMOKE_NOTEBOOK}.html"]
    shots = site_mod.screenshots(out, tmp_path / "shots", pages=pages, height=900,
                                 log=lambda s: None)
    assert [p.name for p in shots] == ["index.png", f"notebooks__{SMOKE_NOTEBOOK}.png"]
    import matplotlib.image as mpimg
    for p in shots:
        img = mpimg.imread(p)
        assert img.shape[:2] == (900, 1280)
        assert img[..., :3].std() > 0.05          # text and pictures, not a blank page


def test_command_line_check_reports_broken_links(tmp_path, capsys):
    (tmp_path / "index.html").write_text('<a href="gone.html">x</a>')
    assert site_mod.main(["check", "--site", str(tmp_path)]) == 1
    assert "gone.html: no such file" in capsys.readouterr().out
    (tmp_path / "gone.html").write_text("here")
    assert site_mod.main(["check", "--site", str(tmp_path)]) == 0
    assert site_mod.main(["screenshots", "--site", str(tmp_path / "nothing")]) == 1
    assert "run `make site` first" in capsys.readouterr().err


def test_the_committed_executed_notebooks_come_first(tmp_path, monkeypatch):
    """A fresh clone's site shows notebooks/executed/ (make reproduce commits it): the
    default search starts there, and such a page carries no note."""
    notebooks = tmp_path / "notebooks"
    (notebooks / "executed").mkdir(parents=True)
    name = NAMES[0]
    shutil.copy(paths.NOTEBOOKS / f"{name}.ipynb", notebooks / f"{name}.ipynb")
    shutil.copy(paths.NOTEBOOKS / f"{name}.ipynb", notebooks / "executed" / f"{name}.ipynb")
    monkeypatch.setattr(paths, "NOTEBOOKS", notebooks)
    monkeypatch.setattr(paths, "BUILD", tmp_path / "build")
    staged = site_mod.stage(tmp_path / "src", "full", log=lambda line: None)
    assert staged.notebooks == {name: "full"}          # the executed copy is no source
    text = (tmp_path / "src" / "notebooks" / f"{name}.ipynb").read_text()
    assert "not been executed" not in text and "smoke run" not in text


# ------------------------------------------- what a reader sees: the checks of site-check
def _defective_notebook() -> dict:
    """A notebook as papermill leaves it, with each defect a reader must not see: a
    Markdown output holding a pipe table, the injected parameters cell beside the
    notebook's own, a table far wider than the page."""
    import nbformat
    nb = nbformat.v4.new_notebook()
    wide = "<table><tr>" + "".join(f"<td>column_{i:03d}_value</td>" for i in range(60)) \
        + "</tr></table>"
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 99 · A page with every defect"),
        nbformat.v4.new_code_cell("n = 3    # the notebook's default", metadata={
            "tags": ["parameters"]}),
        nbformat.v4.new_code_cell("# Parameters\nn = 5\n", metadata={
            "tags": ["injected-parameters"]}),
        nbformat.v4.new_code_cell("display(Markdown(table))", outputs=[
            nbformat.v4.new_output("display_data", data={
                "text/markdown": "| data set | OVE |\n|---|---|\n| mnist | 5.73 |\n",
                "text/plain": "<IPython.core.display.Markdown object>"})]),
        nbformat.v4.new_code_cell("display(wide)", outputs=[
            nbformat.v4.new_output("display_data", data={"text/html": wide,
                                                         "text/plain": "wide"})]),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


def _sphinx(src, out, conf: str):
    """Build ``src`` with myst-nb and a ``conf.py`` of the given text (the defects are
    what myst-nb and Furo give without the site's settings)."""
    import subprocess
    import sys
    (src / "conf.py").write_text(conf)
    (src / "index.md").write_text("# Index\n\n```{toctree}\nnb\n```\n")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src),
                           str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return out / "nb.html"


_PLAIN_CONF = ('extensions = ["myst_nb"]\nnb_execution_mode = "off"\nhtml_theme = "furo"\n'
               'html_static_path = ["_static"]\nhtml_css_files = ["cut.css"]\n')


@pytest.fixture(scope="module")
def defective(tmp_path_factory):
    """The notebook built as the site did before: myst-nb's defaults (CommonMark: no
    tables), the injected cell kept, a style that hides what runs past the content."""
    import nbformat
    root = tmp_path_factory.mktemp("defective")
    src = root / "src"
    (src / "_static").mkdir(parents=True)
    (src / "_static" / "cut.css").write_text("article { overflow-x: hidden; }\n")
    nbformat.write(nbformat.from_dict(_defective_notebook()), src / "nb.ipynb")
    return _sphinx(src, root / "html", _PLAIN_CONF)


def test_site_checks_catch_raw_pipes_and_a_second_parameters_cell(defective):
    found = [str(p) for p in site_mod.page_problems(defective.parent, [defective])]
    assert any("raw pipe text" in p and "mnist | 5.73" in p for p in found), found
    assert any("2 parameters cells" in p for p in found), found
    assert all(p.startswith("nb.html: ") for p in found)


@pytest.mark.skipif(site_mod.find_chromium() is None,
                    reason="headless Chromium not installed (apt-get install chromium)")
def test_site_check_catches_a_clipped_table_in_the_browser(defective, tmp_path, capsys):
    clipped = site_mod.clipped_tables(defective.parent, [defective])
    assert len(clipped) == 1 and "px cut by <article" in str(clipped[0]), clipped
    # the command of make site-check fails on it, naming every defect
    shutil.copy(defective, defective.parent / "index.html")
    assert site_mod.main(["screenshots", "--site", str(defective.parent),
                          "--out", str(tmp_path / "shots")]) == 1
    said = capsys.readouterr().out
    assert "raw pipe text" in said and "parameters cells" in said and "clipped" in said


def test_the_site_shows_the_same_notebook_without_the_defects(tmp_path):
    """Staged as the site stages a notebook and built with the site's settings: one
    parameters cell showing the run's value, the Markdown table a table, and the wide
    table in a box that scrolls (measured in the browser when Chromium is installed)."""
    import nbformat
    src = tmp_path / "src"
    (src / "_static").mkdir(parents=True)
    nb_path = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.from_dict(_defective_notebook()), nb_path)
    site_mod._stage_notebook(nb_path, nb_path, "full", "full", src / "nb.ipynb")
    # the site's conf.py and style sheet, and the same style that hides overflow
    conf = (site_mod.CONF_DIR / "conf.py").read_text()
    shutil.copy(site_mod.CONF_DIR / "_static" / "site.css", src / "_static" / "site.css")
    (src / "_static" / "cut.css").write_text("article { overflow-x: hidden; }\n")
    conf += '\nhtml_css_files = ["site.css", "cut.css"]\nexclude_patterns = []\n'
    page = _sphinx(src, tmp_path / "html", conf.replace("def setup(app):",
                                                        "def _unused(app):"))
    assert site_mod.page_problems(page.parent, [page]) == []
    html = page.read_text()
    assert "<table" in html and "5.73" in html
    assert "this run (the notebook" in _text(html)          # the run's value, shown once
    if site_mod.find_chromium() is not None:
        assert site_mod.clipped_tables(page.parent, [page]) == []


def test_merge_parameters_keeps_one_cell_with_the_run_s_values():
    nb = {"cells": [
        {"cell_type": "code", "metadata": {"tags": ["parameters"]}, "outputs": [],
         "source": "# settings\nn = 3    # rows\nname = 'a'\nlr = {'a': 1,\n      'b': 2}\n"},
        {"cell_type": "code", "metadata": {"tags": ["injected-parameters"]}, "outputs": [],
         "source": "# Parameters\nn = 3\nname = \"b\"\nlr = {'a': 1, 'b': 2}\nextra = 1\n"},
        {"cell_type": "code", "metadata": {}, "outputs": [], "source": "print(n)"}]}
    assert site_mod.merge_parameters(nb) == 1
    assert len(nb["cells"]) == 2
    src = nb["cells"][0]["source"]
    assert src.startswith("# settings\nn = 3    # rows\n")           # unchanged: same value
    assert "name = \"b\"  # this run (the notebook's default: 'a')" in src
    assert "lr = {'a': 1,\n      'b': 2}" in src                    # equal values kept
    assert src.rstrip().endswith("extra = 1  # set by this run")
    # an injected cell alone becomes the parameters cell
    nb = {"cells": [{"cell_type": "code", "metadata": {"tags": ["injected-parameters"]},
                     "outputs": [], "source": "# Parameters\nn = 3\n"}]}
    assert site_mod.merge_parameters(nb) == 0
    assert nb["cells"][0]["metadata"]["tags"] == ["parameters"]


def test_a_printed_markdown_table_is_shown_as_a_table():
    text = ("wrote tables/x.csv\n# Title\n\nsome words\n| a | b |\n|---|---|\n| 1 | 2 |\n"
            "\nafter\n")
    out = site_mod._split_printed_tables([{"output_type": "stream", "name": "stdout",
                                           "text": text}])
    assert [o["output_type"] for o in out] == ["stream", "display_data", "stream"]
    assert out[0]["text"] == "wrote tables/x.csv\n# Title\n\nsome words\n"
    assert out[1]["data"]["text/markdown"] == "| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert out[2]["text"] == "\nafter\n"
    plain = [{"output_type": "stream", "name": "stdout", "text": "| not | a table |\n"}]
    assert site_mod._split_printed_tables(plain) == plain
