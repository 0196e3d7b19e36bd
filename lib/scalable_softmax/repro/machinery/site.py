"""The project's static HTML site: the README, the math notes and the executed notebooks.

``make site`` runs ``python -m scalable_softmax.repro.machinery.site build``:

1. **stage** into ``build/site-src`` (mirroring the repository's layout, so the relative
   links of the README and the notes work unchanged): ``README.md`` as the front page
   ``index.md`` (with the navigation appended), ``docs/math.md`` (its ``<a id="sN">``
   anchors turned into MyST labels), every notebook of ``notebooks/`` in its executed
   form, the committed ``figures/``, ``tables/*.md`` and ``data/README.md``. The
   executed notebooks are the committed ones, ``notebooks/executed/`` (written by
   ``make reproduce``, so a fresh clone's site shows them), then
   ``build/executed/full/``; a notebook without a full run falls back to
   ``build/executed/smoke/`` and then to the
   unexecuted source, each with a note at the top of its page and a line printed by
   the build. Widget outputs (progress bars) are dropped: a static page cannot run
   them. Plain mentions "docs/math.md section N" become links to that section;
2. **build** with Sphinx, MyST-NB and the Furo theme (``docs/site/conf.py``; nothing is
   executed and nothing is fetched from the network) into ``build/site``;
3. **check** every internal link, anchor and image of the HTML (:func:`check_links`)
   and what a reader sees (:func:`page_problems`: no raw pipe text, one parameters
   cell); the build fails if one is broken.

``python -m scalable_softmax.repro.machinery.site screenshots`` (``make site-check``) opens pages in
headless Chromium, saves PNG screenshots under ``build/site-screenshots/`` and fails on
what a reader must not see: a Markdown table left as raw pipe text or a second
parameters cell (:func:`page_problems`, on every page's HTML), a table cut at the right
edge (:func:`clipped_tables`, measured in the browser).

Staging shows a notebook as a reader should see it: papermill's injected parameters
cell merged into the notebook's own (:func:`merge_parameters`: one cell, the run's
values), a table a cell printed in Markdown shown as a table, and Markdown outputs
parsed with tables (``docs/site/conf.py``); wide tables scroll
(``docs/site/_static/site.css``).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from scalable_softmax import paths

__all__ = ["stage", "build", "check_links", "screenshots", "LinkProblem", "SITE",
           "SITE_SRC", "SCREENSHOTS", "method_table", "merge_parameters", "page_problems",
           "clipped_tables", "PageProblem", "race_summary", "collapse_long_tables",
           "RACE_NOTEBOOKS"]

SITE = paths.BUILD / "site"
SITE_SRC = paths.BUILD / "site-src"
SCREENSHOTS = paths.BUILD / "site-screenshots"
CONF_DIR = paths.ROOT / "docs" / "site"

_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_MATH_REF = re.compile(r"(?<![\[/\w])docs/math\.md,? section (\d+)(\.\d+)?")


# ---------------------------------------------------------------------------
# staging
# ---------------------------------------------------------------------------

@dataclass
class Staged:
    """What :func:`stage` put where."""

    src: Path
    notebooks: dict = field(default_factory=dict)   # name -> "full" | "smoke" | "source"
    tables: list = field(default_factory=list)


def _link_math_refs(text: str, prefix: str) -> str:
    """Turn plain "docs/math.md section N" into a link to ``prefix + docs/math.md#sN``."""
    return _MATH_REF.sub(
        lambda m: f"[docs/math.md section {m.group(1)}{m.group(2) or ''}]"
                  f"({prefix}docs/math.md#s{m.group(1)})", text)


_EXECUTED_NOTEBOOK = re.compile(r"(\]\((?:\.\./)?notebooks/)executed/([0-9][0-9]-[^)#\s]*\.ipynb)")
_EXECUTED_FOLDER = re.compile(r"(\]\((?:\.\./)?notebooks/)executed/?\)")


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _link_executed(text: str) -> str:
    """Links to the committed executed notebooks (``notebooks/executed/NN-slug.ipynb``,
    for GitHub) made links to the site's notebook pages; a link to the folder becomes
    one to the site's list of notebooks."""
    text = _EXECUTED_NOTEBOOK.sub(r"\1\2", text)
    return _EXECUTED_FOLDER.sub(r"\1index.md)", text)


_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def _unlink_outside(text: str, page: Path, src: Path) -> str:
    """Links of ``page`` to files or folders of the repository that the site does not
    hold (``benchmarks/``, ``params/*.yaml``, a folder such as ``tables/``) shown as the
    repository path in code instead (a static page cannot open them); links to pages,
    anchors and addresses are kept."""
    def keep_or_unlink(m):
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            return m.group(0)
        where = (page.parent / target).resolve()
        if where.is_file():
            return m.group(0)
        try:
            shown = where.relative_to(src.resolve()).as_posix()
        except ValueError:
            shown = target
        if target.endswith("/"):
            shown += "/"
        label = m.group(1)
        return label if f"`{shown}`" in label else f"{label} (`{shown}`)"
    return _LINK.sub(keep_or_unlink, text)


def _math_page(text: str) -> str:
    """The notes with their HTML anchors as MyST labels (``(sN)=`` before the heading),
    so that Sphinx knows the targets ``#sN``."""
    return re.sub(r'<a id="(s\d+)"></a>\s*\n', r"(\1)=\n", text)


def _notebook_note(kind: str, profile: str, when: str | None) -> str:
    if kind == "full":
        return ""
    if kind == "smoke":
        return (":::{note}\nThis page shows the notebook's **smoke run** (tiny settings, "
                "for the tests" + (f", executed {when}" if when else "") + "), not the full "
                "run: its numbers are not the results. `make reproduce` executes the full "
                "settings; `make site` then shows them.\n:::\n")
    return (":::{note}\nThis notebook has **not been executed** for this site: no outputs "
            "are shown. `make reproduce` executes it; `make site` then shows them.\n:::\n")


def _tags(cell: dict) -> list:
    return cell.get("metadata", {}).get("tags", [])


def _assignments(code: str) -> dict:
    """``{name: (first line, last line, value source)}`` of the top-level ``name = value``
    statements of ``code`` (0-based lines; others are left out)."""
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {}
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = (node.lineno - 1, node.end_lineno - 1,
                                       ast.get_source_segment(code, node.value))
    return out


def _same_value(a: str, b: str) -> bool:
    import ast

    try:
        return ast.literal_eval(a) == ast.literal_eval(b)
    except (ValueError, SyntaxError, TypeError):
        return " ".join(a.split()) == " ".join(b.split())


def merge_parameters(nb: dict) -> int:
    """One parameters cell: papermill's injected cell (tag ``injected-parameters``, the
    values the run used) is removed and the notebook's own ``parameters`` cell (with its
    comments) shows those values: an assignment whose value the run changed is rewritten,
    with the notebook's default in a comment; a name only the run set is added at the
    end. An injected cell without a ``parameters`` cell becomes that cell. Returns how
    many injected cells were removed."""
    cells = nb.get("cells", [])
    injected = [c for c in cells if "injected-parameters" in _tags(c)]
    if not injected:
        return 0
    own = next((c for c in cells if "parameters" in _tags(c)
                and "injected-parameters" not in _tags(c)), None)
    for inj in injected:
        run = _assignments("".join(inj.get("source", "")))
        if own is None:
            inj["metadata"]["tags"] = ["parameters" if t == "injected-parameters" else t
                                       for t in _tags(inj)]
            own = inj
            continue
        code = "".join(own.get("source", ""))
        lines = code.split("\n")
        mine = _assignments(code)
        for name, (first, last, value) in sorted(mine.items(), key=lambda kv: -kv[1][0]):
            if name in run and not _same_value(value, run[name][2]):
                default = " ".join(value.split())
                lines[first:last + 1] = [f"{name} = {run[name][2]}  # this run "
                                         f"(the notebook's default: {default})"]
        extra = [f"{n} = {v[2]}  # set by this run" for n, v in run.items() if n not in mine]
        own["source"] = "\n".join(lines + extra)
        cells.remove(inj)
    return len([c for c in injected if c is not own])


#: a Markdown pipe table in printed text: a header row, then its separator row
_PIPE_TABLE = re.compile(r"^\|.*\|[ \t]*\n\|(?:[ \t]*:?-{3,}:?[ \t]*\|)+[ \t]*$", re.M)


def _split_printed_tables(outputs: list) -> list:
    """A printed Markdown table (a stdout stream holding ``| a | b |`` / ``|---|---|``
    rows, as ``outputs.write_table`` prints what it wrote) shown as a table: the stream
    is cut into its text before the table, the table as a ``text/markdown`` output, and
    the text after it. Nothing is dropped or reordered."""
    out = []
    for o in outputs:
        if o.get("output_type") != "stream" or o.get("name") != "stdout":
            out.append(o)
            continue
        text = "".join(o.get("text", ""))
        if not _PIPE_TABLE.search(text):
            out.append(o)
            continue
        lines = text.split("\n")
        i, chunk = 0, []
        while i < len(lines):
            if lines[i].startswith("|") and i + 1 < len(lines) and \
                    _PIPE_TABLE.match(lines[i] + "\n" + lines[i + 1]):
                if chunk:
                    out.append({**o, "text": "\n".join(chunk) + "\n"})
                    chunk = []
                j = i
                while j < len(lines) and lines[j].startswith("|"):
                    j += 1
                out.append({"output_type": "display_data", "metadata": {},
                            "data": {"text/markdown": "\n".join(lines[i:j]) + "\n",
                                     "text/plain": "\n".join(lines[i:j])}})
                i = j
                continue
            chunk.append(lines[i])
            i += 1
        rest = "\n".join(chunk)
        if rest.strip():
            out.append({**o, "text": rest})
    return out


#: the notebooks whose page opens with the race's verdicts (:func:`race_summary`), their
#: long tables collapsed below it (:func:`collapse_long_tables`)
RACE_NOTEBOOKS = ("12-peers", "14-crossover")
#: a cell output with more table rows than this is collapsed (a ``<details>`` element)
LONG_TABLE_ROWS = 12


def race_summary(name: str, tables: Path | None = None) -> str | None:
    """The Markdown summary that opens the site page of notebook ``name`` (12-peers or
    14-crossover): per level, how many workloads each verdict holds; per workload, its
    verdict at every level; for notebook 14 the crossover ``K`` per level. Computed from
    ``<name>-targets.csv`` and ``<name>-targets-verdicts.csv`` in ``tables`` (default the
    committed record, which the committed executed notebook wrote) by
    :mod:`scalable_softmax.repro.race.report`; None when the record has no such tables."""
    import pandas as pd

    from scalable_softmax.repro.race import families, report
    tables = paths.TABLES if tables is None else Path(tables)
    try:
        verdicts = pd.read_csv(tables / f"{name}-targets-verdicts.csv")
    except FileNotFoundError:
        return None

    shown = {w: families.workload_label(w) for w in verdicts.workload.unique()}
    lines = [f"**The verdicts of this record** (`tables/{name}-targets-verdicts.csv`). A "
             "family is first at a level only when its slowest seed beats every other "
             "family's fastest seed; otherwise `tie`; `none` when no family reached the "
             "level.", ""]
    lines += [f"- {s}" for s in report.level_summary(verdicts)]
    lines += ["", "Per workload, at every level:", ""]
    lines += [f"- {s}" for s in report.verdict_lines(verdicts, shown)]
    if name == "14-crossover":
        lines += ["", f"Crossover: {report.page_crossover(verdicts)}"]
    lines += ["", f"Outputs with more than {LONG_TABLE_ROWS} table rows are collapsed "
                  "below: open one to read every row."]
    return "\n".join(lines) + "\n"


def _table_rows(output: dict) -> int:
    """How many table rows a cell output shows: pipe rows of Markdown or text, ``<tr>``
    of HTML."""
    data = output.get("data", {})
    if "text/html" in data:
        return "".join(data["text/html"]).count("<tr")
    text = "".join(data.get("text/markdown", "") or output.get("text", "")
                   or data.get("text/plain", ""))
    return sum(1 for line in text.split("\n") if line.lstrip().startswith("|"))


def collapse_long_tables(nb: dict, rows: int = LONG_TABLE_ROWS) -> int:
    """Tag every code cell of ``nb`` whose outputs show more than ``rows`` table rows
    ``hide-output`` (MyST-NB renders its outputs collapsed, in a ``<details>``
    element); returns how many cells were tagged."""
    n = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        if max((_table_rows(o) for o in cell.get("outputs", [])), default=0) > rows:
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if "hide-output" not in tags:
                tags.append("hide-output")
                n += 1
    return n


def _stage_notebook(source: Path, executed: Path | None, kind: str, profile: str,
                    out: Path) -> None:
    nb = json.loads((executed or source).read_text(encoding="utf-8"))
    merge_parameters(nb)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "markdown":
            text = "".join(cell["source"])
            cell["source"] = _link_math_refs(text, "../")
        elif cell.get("cell_type") == "code":
            cell["outputs"] = _split_printed_tables(
                [o for o in cell.get("outputs", []) if _WIDGET_MIME not in o.get("data", {})])
    nb.get("metadata", {}).pop("widgets", None)
    when = None
    if executed is not None:
        when = _dt.datetime.fromtimestamp(executed.stat().st_mtime).strftime("%Y-%m-%d")
    note = _notebook_note(kind, profile, when)
    if source.stem in RACE_NOTEBOOKS and kind == "full":
        collapse_long_tables(nb)
        summary = race_summary(source.stem)
        if summary:
            note = f"{note}\n{summary}" if note else summary
    if note:
        cells = nb["cells"]
        first = "".join(cells[0]["source"]) if cells else ""
        if cells and cells[0].get("cell_type") == "markdown" and first.startswith("# "):
            # right under the page's title
            title, _, rest = first.partition("\n")
            cells[0]["source"] = f"{title}\n\n{note}\n{rest}"
        else:
            cells.insert(0, {"cell_type": "markdown", "metadata": {}, "source": note})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(nb, ensure_ascii=False), encoding="utf-8")


def stage(src: Path = SITE_SRC, profile: str = "full", executed_dirs=None,
          log=print) -> Staged:
    """Write the Sphinx source tree of the site into ``src`` (emptied first).

    Parameters
    ----------
    profile : ``"full"`` or ``"smoke"``, the run the site should show.
    executed_dirs : list of folders holding executed notebooks, searched in order;
        default for ``"full"`` the committed ``notebooks/executed``, then
        ``build/executed/full`` and ``build/executed/smoke``; for ``"smoke"``
        ``build/executed/smoke``. A notebook found in none of them is shown unexecuted.
    log : function taking a line (the fall-backs are reported through it).
    """
    if profile not in ("full", "smoke"):
        raise ValueError(f"profile must be 'full' or 'smoke'; got {profile!r}")
    if executed_dirs is None:
        executed_dirs = [paths.BUILD / "executed" / profile]
        if profile == "full":
            executed_dirs = [paths.NOTEBOOKS / "executed", *executed_dirs,
                             paths.BUILD / "executed" / "smoke"]
    executed_dirs = [Path(d) for d in executed_dirs]
    src = Path(src)
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    staged = Staged(src=src)

    # the README as the front page, the pages of docs/ (the math notes with their
    # anchors as labels), the data README
    readme = _link_executed(_read_text(paths.ROOT / "README.md"))
    (src / "docs").mkdir()
    pages = []
    for page in sorted((paths.ROOT / "docs").glob("*.md")):
        text = _read_text(page)
        text = _math_page(text) if page.name == "math.md" else \
            _link_math_refs(_link_executed(text), "../")
        (src / "docs" / page.name).write_text(text, encoding="utf-8")
        pages.append(f"docs/{page.stem}")
    pages.sort(key=lambda p: p != "docs/math")
    (src / "data").mkdir()
    data_readme = (paths.ROOT / "data" / "README.md").read_text(encoding="utf-8")
    (src / "data" / "README.md").write_text(_link_math_refs(data_readme, "../"),
                                           encoding="utf-8")

    # figures and tables as committed
    if paths.FIGURES.is_dir():
        shutil.copytree(paths.FIGURES, src / "figures",
                        ignore=shutil.ignore_patterns("*.pdf"))
    (src / "tables").mkdir()
    for t in sorted(paths.TABLES.glob("*.md")):
        (src / "tables" / t.name).write_text(
            _link_math_refs(t.read_text(encoding="utf-8"), "../"), encoding="utf-8")
        staged.tables.append(t.stem)

    # the notebooks: executed copies where there are some
    names = sorted(p.stem for p in paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
    fallbacks = []
    for name in names:
        executed, kind = None, "source"
        for d in executed_dirs:
            cand = d / f"{name}.ipynb"
            if cand.is_file():
                executed = cand
                kind = d.name if d.name in ("full", "smoke") else profile
                break
        staged.notebooks[name] = kind
        if kind != profile:
            fallbacks.append(f"  {name}: {'smoke run' if kind == 'smoke' else 'NOT EXECUTED'}"
                             + (f" ({executed})" if executed else ""))
        _stage_notebook(paths.NOTEBOOKS / f"{name}.ipynb", executed, kind, profile,
                        src / "notebooks" / f"{name}.ipynb")
    if fallbacks:
        log(f"site: {len(fallbacks)} of {len(names)} notebooks have no {profile} run in "
            f"{', '.join(str(d) for d in executed_dirs[:1])} (run `make reproduce` for "
            "the full runs); shown instead:\n" + "\n".join(fallbacks))

    listing = ["---", "orphan: true", "---", "", "# The executed notebooks", "",
               "Every notebook as `make reproduce` last executed it (the committed copies "
               "in `notebooks/executed/`):", ""]
    listing += [f"- [{n}]({n}.ipynb)" for n in names]
    (src / "notebooks" / "index.md").write_text("\n".join(listing) + "\n", encoding="utf-8")
    toc = ["", "", "```{toctree}", ":hidden:", ":caption: Notes", "", *pages, "```",
           "", "```{toctree}", ":hidden:", ":caption: Notebooks", ""]
    toc += [f"notebooks/{n}" for n in names] + ["```", ""]
    toc += ["```{toctree}", ":hidden:", ":caption: Tables and data", ""]
    toc += [f"tables/{t}" for t in staged.tables] + ["data/README", "```", ""]
    (src / "index.md").write_text(_link_math_refs(readme, "") + "\n".join(toc),
                                  encoding="utf-8")
    for page in sorted(src.rglob("*.md")):
        text = _read_text(page)
        kept = _unlink_outside(text, page, src)
        if kept != text:
            page.write_text(kept, encoding="utf-8")
    return staged


#: the class attributes of a trainer shown in the API page's method table (the facts
#: :class:`~scalable_softmax.methods.base.Trainer` documents), with their headings; a
#: fact the base class does not declare is left out
METHOD_FACTS = (("has_u", "has ``u``"), ("exact_u", "exact ``u``"),
                ("full_batch", "full batch"), ("minibatch", "minibatches"),
                ("parallel_kernel", "``threads > 1``"),
                ("default_batch_size", "default ``batch_size``"),
                ("default_n_sampled", "default ``n_sampled``"),
                ("reference", "NumPy reference"))


def _first_sentence(doc: str) -> str:
    para = " ".join(doc.strip().split("\n\n")[0].split())
    cut = re.search(r"\.(\s|$)", para)
    return para[:cut.start() + 1] if cut else para


def method_table() -> list[str]:
    """The API page's table of methods as reStructuredText lines (a ``list-table``): per
    name of :data:`scalable_softmax.methods.METHODS`, its trainer class, the facts of
    :data:`METHOD_FACTS` the class declares and the first sentence of its docstring.
    The ``method-table`` directive of ``docs/site/conf.py`` renders it."""
    import inspect

    from scalable_softmax.methods import METHODS, get_trainer_class
    from scalable_softmax.methods.base import Trainer

    facts = [(a, h) for a, h in METHOD_FACTS if hasattr(Trainer, a)]

    def cell(v):
        if v is None:
            return "-"
        if isinstance(v, bool):
            return "yes" if v else "no"
        return f"``{v}``" if isinstance(v, str) else str(v)

    head = ["method", "trainer", *(h for _, h in facts), "what it is"]
    lines = [".. list-table::", "   :header-rows: 1", ""]
    lines += [f"   {'*' if i == 0 else ' '} - {h}" for i, h in enumerate(head)]
    for name, target in METHODS.items():
        cls = get_trainer_class(name)
        module, qual = target.split(":")
        row = [f"``{name!r}``".replace("'", '"'), f"``{module.rsplit('.', 1)[-1]}.{qual}``",
               *(cell(getattr(cls, attr)) for attr, _ in facts),
               _first_sentence(inspect.getdoc(cls) or "")]
        lines += [f"   {'*' if i == 0 else ' '} - {c}" for i, c in enumerate(row)]
    return lines + [""]


# ---------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------

def build(out: Path = SITE, profile: str = "full", executed_dirs=None, src: Path = SITE_SRC,
          log=print, jobs: int = 1) -> Path:
    """Stage, build with Sphinx, and check the links of the site; returns ``out``.

    Raises
    ------
    RuntimeError
        If Sphinx fails or warns (a warning is an error here: a missing image or a
        broken cross-reference), or if a link of the built HTML does not resolve; the
        message lists the problems.
    """
    stage(src, profile, executed_dirs, log=log)
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going",
           "-j", str(jobs), "-c", str(CONF_DIR), "-d", str(src.parent / "site-doctrees"),
           str(src), str(tmp)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"sphinx-build failed (exit {proc.returncode}):\n"
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    problems = check_links(tmp)
    if problems:
        raise RuntimeError(f"the site in {tmp} has {len(problems)} broken link(s):\n"
                           + "\n".join(f"  {p}" for p in problems[:50]))
    problems = page_problems(tmp)
    if problems:
        raise RuntimeError(f"the site in {tmp} shows {len(problems)} problem(s) to a "
                           "reader:\n" + "\n".join(f"  {p}" for p in problems[:50]))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    log(f"site: {out / 'index.html'}")
    return out


# ---------------------------------------------------------------------------
# checking links
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class LinkProblem:
    page: str
    tag: str
    target: str
    why: str

    def __str__(self):
        return f"{self.page}: <{self.tag}> {self.target}: {self.why}"


class _Collector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) is not None and tag in ("a", "img", "link", "script", "source",
                                                  "iframe", "embed"):
                self.refs.append((tag, a[key]))


def _parse(path: Path) -> _Collector:
    c = _Collector()
    c.feed(path.read_text(encoding="utf-8", errors="replace"))
    return c


def check_links(site: Path, allow_external_links: bool = True) -> list[LinkProblem]:
    """Every ``href``/``src`` of every HTML page under ``site``: local targets must exist
    (and their ``#fragment`` must be an ``id`` of the target page); resources (images,
    scripts, style sheets) must be local, so that the site works offline. Links to
    other web sites (``<a href="https://...">``) are allowed unless
    ``allow_external_links`` is False. Returns the problems (empty: all good)."""
    site = Path(site).resolve()
    pages = sorted(site.rglob("*.html"))
    parsed = {p: _parse(p) for p in pages}
    problems = []
    for page, c in parsed.items():
        rel = str(page.relative_to(site))
        for tag, ref in c.refs:
            u = urllib.parse.urlsplit(ref)
            if u.scheme in ("http", "https") or ref.startswith("//"):
                if tag != "a" or not allow_external_links:
                    problems.append(LinkProblem(rel, tag, ref, "loads from the network"))
                continue
            if u.scheme in ("mailto", "data", "javascript"):
                continue
            if u.scheme:
                problems.append(LinkProblem(rel, tag, ref, f"unexpected scheme {u.scheme}"))
                continue
            target = page if not u.path else (page.parent / urllib.parse.unquote(u.path))
            target = target.resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                problems.append(LinkProblem(rel, tag, ref, "no such file"))
                continue
            if site not in target.parents and target != site:
                problems.append(LinkProblem(rel, tag, ref, "points outside the site"))
                continue
            frag = urllib.parse.unquote(u.fragment)
            if frag and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _parse(target).ids
                if frag not in ids:
                    problems.append(LinkProblem(rel, tag, ref, f"no id {frag!r} in "
                                                               f"{target.relative_to(site)}"))
    return problems


# ---------------------------------------------------------------------------
# what a reader sees: tables rendered, one parameters cell, nothing clipped
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PageProblem:
    page: str
    what: str

    def __str__(self):
        return f"{self.page}: {self.what}"


#: a pipe table's separator row as a reader would see it unrendered: ``|---|---|``
#: (Sphinx's smart quotes make ``---`` an em dash, ``--`` an en dash)
_RAW_SEPARATOR = re.compile(r"\|[ \t]*:?(?:-{3,}|[\u2014\u2013]+)[ \t]*:?\|")


class _Reader(html.parser.HTMLParser):
    """The text a reader sees outside code (a code block's, a notebook cell's source),
    and the notebook cells' classes (myst-nb writes a cell's tags as ``tag_<tag>``)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []      # (tag, inside code)
        self.text: list[str] = []
        self.cells: list[str] = []
        self.first_code: list[str] = []              # each input cell's first line
        self._want_first = False

    def _in_code(self) -> bool:
        return bool(self.stack) and self.stack[-1][1]

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class") or ""
        code = self._in_code() or tag in ("code", "script", "style") or (
            "highlight-" in cls and "output" not in cls)
        if "cell_input" in cls:
            self._want_first = True
        if tag in ("pre",) and self._want_first:
            self.first_code.append("")
        if re.search(r"\bcell\b", cls) and "docutils" in cls and "container" in cls:
            self.cells.append(cls)
        if tag not in ("br", "img", "hr", "meta", "link", "input", "col", "wbr"):
            self.stack.append((tag, code))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break
        if tag == "pre" and self._want_first:
            self._want_first = False

    def handle_data(self, data):
        if self._want_first and self.first_code is not None and self.first_code \
                and "\n" not in self.first_code[-1]:
            self.first_code[-1] += data
        if not self._in_code():
            self.text.append(data)


def page_problems(site: Path, pages=None) -> list[PageProblem]:
    """What a reader of the built HTML must not see, per page: a Markdown table left as
    raw pipe text (its ``|---|`` row outside a code block: an output or a page whose
    table did not render), and a notebook page with more than one parameters cell
    (papermill's injected ``# Parameters`` cell beside the notebook's own; :func:`stage`
    merges them). Returns the problems (empty: all good)."""
    site = Path(site)
    problems = []
    for page in pages or sorted(site.rglob("*.html")):
        page = Path(page)
        r = _Reader()
        r.feed(page.read_text(encoding="utf-8", errors="replace"))
        rel = str(page.relative_to(site)) if page.is_relative_to(site) else str(page)
        text = "".join(r.text)
        for m in _RAW_SEPARATOR.finditer(text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            problems.append(PageProblem(rel, "raw pipe text (a Markdown table not rendered "
                                             f"as a table): {text[line_start:m.end() + 40]!r}"))
            break
        injected = [c for c in r.cells if "tag_injected-parameters" in c]
        params = [c for c in r.cells if re.search(r"\btag_parameters\b", c)]
        headed = [f for f in r.first_code if f.strip().startswith("# Parameters")]
        if injected or len(params) + len(headed) > 1:
            problems.append(PageProblem(
                rel, f"{len(params) + max(len(injected), len(headed))} parameters cells "
                     "(papermill's injected '# Parameters' cell beside the notebook's own: "
                     "the site shows one)"))
    return problems


#: run in the page by headless Chromium: every table (and wide preformatted output)
#: whose right edge lies beyond a box that hides its overflow, before any box that
#: scrolls; written into the page, which Chromium then dumps
_MEASURE_JS = r"""
<script>
window.addEventListener("load", function () {
  var found = [];
  document.querySelectorAll("table, .cell_output pre").forEach(function (t, i) {
    var r = t.getBoundingClientRect();
    if (r.width === 0) return;
    for (var a = t.parentElement; a; a = a.parentElement) {
      var s = getComputedStyle(a);
      if (s.overflowX === "auto" || s.overflowX === "scroll") return;   // it scrolls
      var box = a === document.body || a === document.documentElement
        ? document.documentElement.clientWidth : a.getBoundingClientRect().right;
      if ((s.overflowX === "hidden" || s.overflowX === "clip") && r.right > box + 1) {
        found.push(t.tagName.toLowerCase() + " #" + i + " (" +
          (t.innerText || "").slice(0, 40).replace(/\s+/g, " ") + "): " +
          Math.round(r.right - box) + " px cut by <" + a.tagName.toLowerCase() +
          (a.className ? " class='" + a.className + "'" : "") + ">");
        return;
      }
    }
    if (r.right > document.documentElement.clientWidth + 1)
      found.push(t.tagName.toLowerCase() + " #" + i + ": " +
        Math.round(r.right - document.documentElement.clientWidth) +
        " px beyond the page, in no box that scrolls");
  });
  var out = document.createElement("pre");
  out.id = "site-check-clipped";
  out.textContent = JSON.stringify(found);
  document.body.appendChild(out);
});
</script>
"""


def clipped_tables(site: Path = SITE, pages=None, width=1280, height=900, timeout=120
                   ) -> list[PageProblem]:
    """Tables (and wide printed outputs) cut at the right edge, measured in headless
    Chromium at ``width`` pixels: a copy of each page, with a script that compares each
    table's right edge with the boxes around it, is opened beside the page (so that its
    style sheets load) and its DOM dumped. A table in a box that scrolls sideways is
    fine; one whose overflow a box hides, or that runs off the page, is a problem.

    Raises
    ------
    FileNotFoundError
        If Chromium is not installed.
    RuntimeError
        If Chromium fails on a page.
    """
    import tempfile

    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("headless Chromium not found: install Debian's package "
                                "(apt-get install chromium), then run `make site-check`")
    site = Path(site)
    problems = []
    for page in pages or default_pages(site):
        page = Path(page)
        text = page.read_text(encoding="utf-8")
        probe = page.with_name(f".site-check-{page.name}")
        at = text.rfind("</body>")
        probe.write_text(text[:at] + _MEASURE_JS + text[at:] if at >= 0
                         else text + _MEASURE_JS, encoding="utf-8")
        try:
            with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
                cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                       f"--window-size={width},{height}", "--virtual-time-budget=5000",
                       "--dump-dom", probe.resolve().as_uri()]
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                      check=False)
        finally:
            probe.unlink(missing_ok=True)
        m = re.search(r'<pre id="site-check-clipped">(.*?)</pre>', proc.stdout, re.DOTALL)
        if proc.returncode != 0 or not m:
            raise RuntimeError(f"chromium could not measure {page} (exit {proc.returncode})"
                               f":\n{proc.stderr[-2000:]}")
        import html as _html
        rel = str(page.relative_to(site)) if page.is_relative_to(site) else str(page)
        for what in json.loads(_html.unescape(m.group(1))):
            problems.append(PageProblem(rel, f"clipped: {what}"))
    return problems


# ---------------------------------------------------------------------------
# screenshots
# ---------------------------------------------------------------------------

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars")


def find_chromium() -> str | None:
    """The headless browser (Debian's ``chromium`` package), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def default_pages(site: Path) -> list[Path]:
    """The pages worth looking at: the front page, the notes, every notebook, one table."""
    site = Path(site)
    pages = [site / "index.html", site / "docs" / "math.html"]
    pages += sorted((site / "notebooks").glob("*.html"))
    tables = sorted((site / "tables").glob("*.html"))
    return [p for p in pages + tables[:1] if p.is_file()]


def screenshots(site: Path = SITE, out: Path = SCREENSHOTS, pages=None, width=1280,
                height=2400, timeout=120, log=print) -> list[Path]:
    """Open every page in headless Chromium (a fresh profile, no network services) and
    save a PNG of it under ``out``; returns the PNG paths.

    Raises
    ------
    FileNotFoundError
        If Chromium is not installed (install Debian's ``chromium`` package) or the site
        has not been built.
    RuntimeError
        If Chromium fails on a page or writes an empty or blank picture.
    """
    import tempfile

    site = Path(site)
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"no site in {site}: run `make site` first")
    browser = find_chromium()
    if browser is None:
        raise FileNotFoundError("headless Chromium not found: install Debian's package "
                                "(apt-get install chromium), then run `make site-check`")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shots = []
    for page in pages or default_pages(site):
        name = str(page.relative_to(site)).replace(os.sep, "__").removesuffix(".html")
        png = out / f"{name}.png"
        with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
            cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                   f"--window-size={width},{height}", f"--screenshot={png}",
                   page.resolve().as_uri()]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not png.is_file() or png.stat().st_size == 0:
            raise RuntimeError(f"chromium could not render {page} (exit {proc.returncode}):"
                               f"\n{proc.stderr[-2000:]}")
        if _blank(png):
            raise RuntimeError(f"the screenshot of {page} is blank: {png}")
        shots.append(png)
        log(f"screenshot: {png}")
    return shots


def _blank(png: Path) -> bool:
    """True if the picture is a single colour (nothing was drawn)."""
    import matplotlib.image as mpimg
    import numpy as np

    img = mpimg.imread(png)
    return bool(np.ptp(img[..., :3]) == 0)


# ---------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scalable_softmax.repro.machinery.site",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="stage, build and check the site")
    b.add_argument("--profile", choices=("full", "smoke"), default="full")
    b.add_argument("--out", type=Path, default=SITE)
    c = sub.add_parser("check", help="check the links of a built site")
    c.add_argument("--site", type=Path, default=SITE)
    s = sub.add_parser("screenshots", help="screenshots of the pages in headless Chromium")
    s.add_argument("--site", type=Path, default=SITE)
    s.add_argument("--out", type=Path, default=SCREENSHOTS)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            build(args.out, args.profile)
        elif args.cmd == "check":
            problems = check_links(args.site)
            for p in problems:
                print(p)
            print(f"{len(problems)} broken link(s) in {args.site}")
            return 1 if problems else 0
        else:
            shots = screenshots(args.site, args.out)
            print(f"{len(shots)} screenshots in {args.out}")
            problems = page_problems(args.site) + clipped_tables(args.site)
            for p in problems:
                print(p)
            print(f"{len(problems)} problem(s) a reader would see in {args.site} (raw pipe "
                  "text, a second parameters cell, a clipped table)")
            return 1 if problems else 0
    except (RuntimeError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
