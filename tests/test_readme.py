"""The front page and the docs pages: short, linked, plain text, and quoting the tables
exactly.

Every number the README and the docs pages quote from a table is an expression in the
page's template (``docs/templates/``) rendered by :mod:`scalable_softmax.repro.machinery.numbers`;
these tests hold the committed pages to a fresh render with the committed tables, so a
rerun that changes a number cannot leave the text behind, and the committed pages stay
readable as text (no template syntax, no overlong lines).
"""
from __future__ import annotations

import re
import shutil

import pandas as pd
import pytest

from scalable_softmax import paths
from scalable_softmax.repro.machinery import numbers

README = paths.ROOT / "README.md"
DOCS = paths.ROOT / "docs"
PAGES = [README] + sorted(DOCS.glob("*.md"))
#: the pages the README must link (issue: results per paper, protocols, speed, own data,
#: cluster, provenance)
REQUIRED_PAGES = ["results-fagan-iyengar.md", "results-titsias.md", "protocols.md",
                  "speed.md", "own-data.md", "cluster.md", "provenance.md"]
#: a prose line of a committed page; a markdown table row may be longer, within reason
MAX_LINE, MAX_TABLE_ROW = 120, 400


def test_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines (at most 250)"
    head = "\n".join(lines[:40])
    assert "make reproduce" in head and "make test" in head, \
        "the two commands must be on the first screen"


def test_readme_links_every_docs_page_and_every_link_resolves():
    text = README.read_text()
    for page in REQUIRED_PAGES:
        assert f"(docs/{page})" in text, f"README does not link docs/{page}"
    for md in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", md.read_text()):
            if "://" in target:
                continue
            assert (md.parent / target).exists(), f"{md.name}: broken link {target}"


def test_every_template_renders_a_page():
    templates = numbers.default_files()
    names = {t.name for t in templates}
    # every page that quotes a result (issue 39: at least these eight)
    assert {"README.md", "results-fagan-iyengar.md", "disagreements.md",
            "results-titsias.md", "provenance.md", "speed.md", "own-data.md",
            "protocols.md"} <= names
    for t in templates:
        assert numbers.target(t).is_file(), f"{t.name}: no page {numbers.target(t)}"


def test_committed_pages_equal_a_fresh_render_of_their_templates():
    files = numbers.default_files()
    assert sum(len(numbers.bindings(f)) for f in files) >= 40
    problems = numbers.check_files(files, paths.TABLES)
    assert not problems, ("\n".join(problems) + "\nedit docs/templates/, then run: "
                          "python -m scalable_softmax.repro.machinery.numbers render")


def test_committed_pages_read_as_text():
    """No template syntax in a committed page, and lines of reasonable length: prose
    lines at most MAX_LINE characters (a link or an image alone on its line, or a code
    block, may be longer), markdown table rows at most MAX_TABLE_ROW."""
    for md in PAGES:
        text = md.read_text()
        for mark in ("<!--=", "<!--/-->", "<!--let "):
            assert mark not in text, f"{md.name}: template syntax {mark!r} (edit its template)"
        fence = False
        for n, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            if fence or re.fullmatch(r"\s*!?\[[^\]]*\]\([^)]*\)[.,;]?\s*", line):
                continue
            limit = MAX_TABLE_ROW if line.startswith("|") else MAX_LINE
            assert len(line) <= limit, f"{md.name}:{n}: {len(line)} characters (at most {limit})"


def test_a_changed_table_value_is_caught(tmp_path):
    tables = tmp_path / "tables"
    shutil.copytree(paths.TABLES, tables)
    t3 = tables / "06-paper-tables-table3.csv"
    df = pd.read_csv(t3)
    sel = (df.dataset == "Average") & (df.method == "ove")
    df.loc[sel, "authors_code_as_published"] *= 1.01
    df.to_csv(t3, index=False)
    readme_template = numbers.TEMPLATES / "README.md"
    problems = numbers.check_files([readme_template], tables)
    assert problems and all(p.startswith(f"{README}:") for p in problems)
    # render writes the page again, and then the check passes
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    assert numbers.render_files([readme_template], tables, root) == [root / "README.md"]
    assert not numbers.check_files([readme_template], tables, root)
    assert (root / "README.md").read_text() != README.read_text()


def test_make_reproduce_alone_renders_the_pages(tmp_path):
    """After `make reproduce` without `make reproduce-extra`, PROVENANCE.md has no
    reproduce-extra run: the pages still render, and say so."""
    tables = tmp_path / "tables"
    shutil.copytree(paths.TABLES, tables)
    prov = tables / "PROVENANCE.md"
    extra = ("| `make reproduce-extra`", "| 11-", "| 12-", "| 13-", "| 14-")
    text = prov.read_text()
    # the committed record has every extension notebook's row (its reproduce-extra row
    # only when that target ran as a whole)
    assert all(e in text for e in extra[1:])
    prov.write_text("\n".join(line for line in text.splitlines()
                               if not line.startswith(extra)) + "\n")
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    templates = sorted(numbers.TEMPLATES.glob("*.md"))
    numbers.render_files(templates, tables, root)
    assert "not yet run for this record" in (root / "README.md").read_text()
    assert "not yet run for this record" in (root / "docs" / "results-fagan-iyengar.md").read_text()


def test_binding_syntax(tmp_path):
    t = tmp_path / "t"
    t.mkdir()
    pd.DataFrame({"k": ["a", "b"], "v": [1.23456, 2.5]}).to_csv(t / "x.csv", index=False)
    (tmp_path / "docs").mkdir()
    tpl = tmp_path / "p.md"
    tpl.write_text("<!--let two = len(table('x')) -->\n"
                   "v is <!--= cell('x', 'v', k='a') # .2f --> and <!--= two -->\n")
    assert numbers.target(tpl, tmp_path) == tmp_path / "docs" / "p.md"
    assert numbers.render_files([tpl], t, tmp_path) == [tmp_path / "docs" / "p.md"]
    assert (tmp_path / "docs" / "p.md").read_text() == "v is 1.23 and 2\n"
    assert not numbers.check_files([tpl], t, tmp_path)
    (tmp_path / "docs" / "p.md").write_text("v is 9 and 2\n")       # edited by hand
    problems = numbers.check_files([tpl], t, tmp_path)
    assert len(problems) == 1 and "p.md:1: shows 'v is 9 and 2'" in problems[0] \
        and "'v is 1.23 and 2'" in problems[0]
    tpl.write_text("v is <!--= cell('x', 'v', k='zz') -->\n")
    problems = numbers.check_files([tpl], t, tmp_path)
    assert len(problems) == 1 and "p.md:1" in problems[0] and "0 rows match" in problems[0]
    with pytest.raises(ValueError, match="0 rows match"):
        numbers.render_files([tpl], t, tmp_path)
    assert (tmp_path / "docs" / "p.md").read_text() == "v is 9 and 2\n", \
        "a failed render changes nothing"


def test_bench_reads_an_earlier_run_kept_in_history(tmp_path):
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "abc1234-x.json").write_text('{"us": 0.506}')
    (tmp_path / "x.json").write_text('{"us": 1.224}')
    tables = numbers.Tables(tmp_path / "tables", bench_folder=tmp_path)
    assert tables.bench("history/abc1234-x") == {"us": 0.506}
    assert tables.bench("x") == {"us": 1.224}
    with pytest.raises(LookupError, match="no benchmark result .*history/abc1234-y.json"):
        tables.bench("history/abc1234-y")


def test_every_kept_earlier_benchmark_run_is_explained_and_quoted():
    """benchmarks/results/history/ holds earlier runs only because docs/speed.md quotes
    them: each is described in its README and read by the speed page's template."""
    history = paths.ROOT / "benchmarks" / "results" / "history"
    readme = (history / "README.md").read_text()
    template = (DOCS / "templates" / "speed.md").read_text()
    kept = sorted(history.glob("*.json"))
    assert kept
    for f in kept:
        assert f"`{f.name}`" in readme, f"{f.name} is not described in {history}/README.md"
        assert f"bench('history/{f.stem}')" in template, f"docs/speed.md does not quote {f.name}"


def _verdicts(stem, claim, tables=paths.TABLES, **where):
    """The claims table's verdicts of one claim, read here without the renderer."""
    df = pd.read_csv(tables / f"{stem}.csv", keep_default_na=False)
    sel = df[df.claim == claim]
    for col, val in where.items():
        sel = sel[sel[col] == val]
    assert len(sel) == 1, (stem, claim, where)
    names = {"authors-code": "authors' code", "authors-code-1pass": "1 pass",
             "paper-text": "paper's text"}
    out = {}
    for c in sel.columns:
        if c.startswith("verdict_"):
            protocol, verdict = c[len("verdict_"):], sel[c].iloc[0]
            support = sel[f"seeds_{protocol}"].iloc[0] if f"seeds_{protocol}" in sel else "-"
            if support not in ("-", "") and "seed" not in verdict:   # the seed support
                verdict += f", holds in {support}"
            out[names[protocol]] = verdict
    return out


def _readme_rows(readme=README):
    """The README's claim rows: claim cell -> verdict cell."""
    out = {}
    for line in readme.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 4:
            out[cells[0]] = cells[3]
    return out


def _said(text):
    """``"confirmed (authors' code); not confirmed (1 pass, paper's text)"`` ->
    ``{protocol: verdict}``."""
    out = {}
    for part in text.split("; "):
        m = re.fullmatch(r"(.+?) \(([^()]+)\)", part.strip().rstrip(";."))
        assert m, f"cannot read the verdict {text!r}"
        for protocol in m.group(2).split(", "):
            out[protocol] = m.group(1)
    return out


#: README claim (first cell of its row) -> the claims-table row whose verdicts it shows
README_CLAIMS = {
    "Implicit SGD never diverges": ("06-paper-tables-claims", "Implicit SGD never diverges", {}),
    "Every method is stable at its Table 2 rate":
        ("06-paper-tables-claims", "every method is stable at its Table 2 rate", {}),
    "Implicit SGD has the lowest training log-loss after 50 epochs":
        ("06-paper-tables-claims",
         "Implicit SGD has the lowest train log-loss on (almost) every data set (exact)", {}),
    "OVE, NCE and IS end far above every double-sum method (Table 3 averages, as published)":
        ("06-paper-tables-claims", "the same, with the published metric for OVE/NCE/IS",
         {"paper": "<= 4.29 vs >= 7.62"}),
    "Our Table 3 matches the published one on the real data sets":
        ("06-paper-tables-claims", "our Table 3 (as published) is within 10% of the "
         "published one on the real data sets, on average", {}),
    "U-max beats vanilla SGD on average (Table 3)":
        ("06-paper-tables-claims", "U-max beats vanilla SGD on average", {}),
}
#: the notebook-13 verdicts of the README's extension list: its wording -> the claim
README_CLAIMS_13 = {
    "Implicit SGD has the lowest training log-loss:":
        "Implicit SGD has the lowest train log-loss (exact, all six methods)",
    "U-max beats vanilla SGD:": "U-max beats vanilla SGD (exact train log-loss)",
    "every double-sum method beats every biased one (exact):":
        "every double-sum method (vanilla, U-max, Implicit) beats every biased baseline "
        "(OVE, NCE, IS), exact",
}


@pytest.mark.parametrize("claim", sorted(README_CLAIMS))
def test_readme_verdict_agrees_with_the_claims_table(claim):
    rows = _readme_rows()
    assert claim in rows, f"the README has no claim row {claim!r}"
    stem, table_claim, where = README_CLAIMS[claim]
    assert _said(rows[claim]) == _verdicts(stem, table_claim, **where)


def test_readme_verdicts_carry_the_seed_support(tmp_path):
    """With the claims tables' seed columns (``seeds_<protocol>``: how many seeds support
    the claim) each verdict says it, and an inconclusive verdict reads as one."""
    tables = tmp_path / "tables"
    shutil.copytree(paths.TABLES, tables)
    f = tables / "06-paper-tables-claims.csv"
    df = pd.read_csv(f, keep_default_na=False)
    for protocol in ("authors-code", "authors-code-1pass", "paper-text"):
        df[f"seeds_{protocol}"] = "3 of 3 seeds"
    umax = df.claim == "U-max beats vanilla SGD on average"
    df.loc[umax, "verdict_paper-text"] = "inconclusive (2 of 3 seeds)"
    df.loc[umax, "seeds_paper-text"] = "2 of 3 seeds"
    df.to_csv(f, index=False)
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    numbers.render_files([numbers.TEMPLATES / "README.md"], tables, root)
    rows = _readme_rows(root / "README.md")
    for claim, (stem, table_claim, where) in README_CLAIMS.items():
        assert _said(rows[claim]) == _verdicts(stem, table_claim, tables, **where)
    said = _said(rows["U-max beats vanilla SGD on average (Table 3)"])
    assert said["paper's text"] == "inconclusive (2 of 3 seeds)"
    assert said["authors' code"] == "confirmed, holds in 3 of 3 seeds"
    for line in (root / "README.md").read_text().splitlines():
        assert len(line) <= MAX_TABLE_ROW


@pytest.mark.parametrize("wording", sorted(README_CLAIMS_13))
def test_readme_extension_verdicts_agree_with_the_claims_table(wording):
    lines = README.read_text().splitlines()
    at = [i for i, line in enumerate(lines) if line.lstrip().startswith(f"- {wording}")]
    assert len(at) == 1, f"the README does not say {wording!r} once"
    said = [lines[at[0]].split(wording, 1)[1]]
    for line in lines[at[0] + 1:]:
        if not line.strip() or line.lstrip().startswith("- "):
            break
        said.append(line)
    said = " ".join(s.strip() for s in said).strip().rstrip(";.")
    assert _said(said) == _verdicts("13-real-large-k-claims", README_CLAIMS_13[wording])


@pytest.mark.parametrize("stale", [
    "4.0 and 2.6 times",          # the O(D) ratios of an older run
    "slopes 0.22, 0.16",
    "are in `build/executed/full/`",
    "for `log 2`",                 # Proposition 4's correction, garbled
    "fresh clone of 4e6e25f",      # a run that is not the record
    "(above)",                     # pointers to text that is not there
    "Protocols above",
    "| **reproduced**; the published columns are not log-losses",
])
def test_stale_statements_are_gone(stale):
    for md in PAGES + numbers.default_files():
        assert stale not in md.read_text(), f"{md} still says {stale!r}"


def test_speed_page_says_where_its_numbers_come_from_once():
    assert (DOCS / "speed.md").read_text().count("Measured by the scripts in") == 1


def test_no_bound_number_breaks_a_markdown_table():
    """GitHub and MyST split a table row at every ``|``: a value shown in a table row
    must not hold one unescaped, nor may an expression in the template's row (a template
    should show the same table in an editor)."""
    for md in numbers.default_files():
        for n, line in enumerate(md.read_text().splitlines(), 1):
            for m in numbers.BINDING.finditer(line):
                assert "|" not in m.group("expr"), f"{md.name}:{n}: '|' in {m.group('expr')!r}"


def test_notebooks_point_to_readme_sections_that_exist():
    headings = set(re.findall(r"^## (.+)$", README.read_text(), re.M))
    for nb in sorted(paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")):
        cited = set(re.findall(r"\(README: ([^)]+)\)", nb.read_text()))
        for section in cited:
            assert section in headings, f"{nb.name} cites the README section {section!r}"


def test_the_race_functions_say_not_run_without_the_race(tmp_path):
    """A record without the race to validation targets of notebooks 12 and 14: the
    race's page functions say so instead of failing."""
    t = numbers.Tables(tmp_path)
    assert t.crossover_verdict("1").startswith("not yet run")
    assert t.crossover_first(0) == ""
    assert t.crossover_at(1000) == "K = 1,000: not raced in this record"
    for expr in ("race_families('12-peers', '1')", "race_best('bibtex')",
                 "race_pair('12-peers', '5')", "race_threads('14-crossover')"):
        assert numbers.render_text(f"<!--= {expr} -->", t) == numbers.NOT_RUN, expr


def test_verdicts_of_a_one_protocol_claims_table_and_has_table(tmp_path):
    import pandas as pd
    pd.DataFrame({"claim": ["a", "b"], "dataset": ["x", "x"], "verdict":
                  ["confirmed", "inconclusive (2 of 3 seeds)"],
                  "seeds": ["3 of 3 seeds", "2 of 3 seeds"]}).to_csv(tmp_path / "t.csv",
                                                                     index=False)
    t = numbers.Tables(tmp_path)
    assert t.verdicts("t", "a") == "confirmed, holds in 3 of 3 seeds"
    assert t.verdicts("t", "b", dataset="x") == "inconclusive (2 of 3 seeds)"
    assert t.has_table("t") and not t.has_table("u")
    text = "<!--= verdicts('t', 'a') if has_table('t') else 'one seed' --> / " \
           "<!--= verdicts('u', 'a') if has_table('u') else 'one seed' -->"
    assert numbers.render_text(text, t) == "confirmed, holds in 3 of 3 seeds / one seed"


def test_make_help_columns_fit_every_target():
    """`make help` prints the targets in one column wide enough for the longest, so that
    every description starts at the same place (issue 53: it was misaligned at
    reproduce-extra)."""
    import re

    text = (paths.ROOT / "Makefile").read_text()
    width = int(re.search(r'printf "  %-(\d+)s ', text).group(1))
    targets = re.findall(r"^([a-zA-Z0-9_-]+):.*## ", text, re.M)
    assert len(targets) > 10 and max(map(len, targets)) < width


def test_pages_render_without_either_race_of_notebooks_12_and_14(tmp_path):
    """A record without notebook 12's or 14's tables (neither the race to validation
    targets nor the earlier one): the pages render and say it was not run there."""
    tables = tmp_path / "tables"
    shutil.copytree(paths.TABLES, tables)
    for t in [*tables.glob("12-peers*"), *tables.glob("14-crossover*")]:
        t.unlink()
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    numbers.render_files(sorted(numbers.TEMPLATES.glob("*.md")), tables, root)
    page = (root / "docs" / "results-fagan-iyengar.md").read_text()
    assert f"| Bibtex | {numbers.NOT_RUN} |" in page
    assert f"per level: {numbers.NOT_RUN}." in " ".join(page.split())


def test_race_edge_counts_workloads_whose_chosen_rate_ends_the_grid(tmp_path):
    smoke = paths.ROOT / "tests" / "smoke-record"
    for f in smoke.glob("12-peers-targets*.csv"):
        shutil.copy(f, tmp_path / f.name)
    rows = pd.read_csv(tmp_path / "12-peers-targets.csv")
    rows.loc[rows.method == "umax", "at_grid_edge"] = "lowest"
    rows.loc[rows.method == "is", "at_grid_edge"] = None
    rows.to_csv(tmp_path / "12-peers-targets.csv", index=False)
    t = numbers.Tables(tmp_path)
    n = rows.workload.nunique()
    assert t.race_edge("12-peers", "umax") == f"{n} of {n}"
    assert t.race_edge("12-peers", "is") == f"0 of {n}"
    assert t.race_edge("12-peers", "umax", "highest") == f"0 of {n}"
