"""The front page and the docs pages: short, linked, and quoting the tables exactly.

Every number the README and the docs pages quote from a table is bound to the cell it
comes from (:mod:`scalable_softmax.repro.numbers`); these tests hold them to the
committed tables, so a rerun that changes a number cannot leave the text behind.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from scalable_softmax import paths
from scalable_softmax.repro import numbers

README = paths.ROOT / "README.md"
DOCS = paths.ROOT / "docs"
#: the pages the README must link (issue: results per paper, protocols, speed, own data,
#: cluster, provenance)
REQUIRED_PAGES = ["results-fagan-iyengar.md", "results-titsias.md", "protocols.md",
                  "speed.md", "own-data.md", "cluster.md", "provenance.md"]


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
    for md in [README] + sorted(DOCS.glob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", md.read_text()):
            if "://" in target:
                continue
            assert (md.parent / target).exists(), f"{md.name}: broken link {target}"


def test_quoted_numbers_agree_with_the_committed_tables():
    files = numbers.default_files()
    assert sum(len(numbers.bindings(f)) for f in files) >= 40
    problems = numbers.check_files(files, paths.TABLES)
    assert not problems, "\n".join(problems)


def test_a_changed_table_value_is_caught(tmp_path):
    tables = tmp_path / "tables"
    shutil.copytree(paths.TABLES, tables)
    t3 = tables / "06-paper-tables-table3.csv"
    df = pd.read_csv(t3)
    sel = (df.dataset == "Average") & (df.method == "ove")
    df.loc[sel, "authors_code_as_published"] *= 1.01
    df.to_csv(t3, index=False)
    problems = numbers.check_files([README], tables)
    assert problems and any("authors_code_as_published" in p for p in problems)
    # render rewrites the shown value, and then the check passes
    copy = tmp_path / "README.md"
    shutil.copy(README, copy)
    assert numbers.render_files([copy], tables) == [copy]
    assert not numbers.check_files([copy], tables)


def test_binding_syntax(tmp_path):
    t = tmp_path / "t"
    t.mkdir()
    pd.DataFrame({"k": ["a", "b"], "v": [1.23456, 2.5]}).to_csv(t / "x.csv", index=False)
    md = tmp_path / "p.md"
    md.write_text("v is <!--= cell('x', 'v', k='a') # .2f -->9<!--/--> and "
                  "<!--= len(table('x')) -->2<!--/-->; "
                  "<!--= cell('x', 'v', k='zz') -->1<!--/-->\n")
    problems = numbers.check_files([md], t)
    assert len(problems) == 2
    assert "p.md:1: shows '9', the tables give '1.23'" in problems[0]
    assert "0 rows match" in problems[1]
    with pytest.raises(ValueError, match="0 rows match"):
        numbers.render_files([md], t)
    assert md.read_text().count("-->9<!--/-->") == 1, "a failed render changes nothing"


@pytest.mark.parametrize("stale", [
    "4.0 and 2.6 times",          # the O(D) ratios of an older run
    "slopes 0.22, 0.16",
    "are in `build/executed/full/`",
])
def test_stale_statements_are_gone(stale):
    for md in [README] + sorted(DOCS.glob("*.md")):
        assert stale not in md.read_text(), f"{md.name} still says {stale!r}"


def test_no_bound_number_breaks_a_markdown_table():
    """GitHub and MyST split a table row at every ``|``, comments included: a binding
    (expression and format) must hold none, or the row falls apart on the page."""
    for md in [README] + sorted(DOCS.glob("*.md")):
        for n, line in enumerate(md.read_text().splitlines(), 1):
            for m in numbers.BINDING.finditer(line):
                assert "|" not in m.group("expr"), f"{md.name}:{n}: '|' in {m.group('expr')!r}"
