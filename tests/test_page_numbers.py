"""Every number of the README and the docs pages is rendered or declared.

Every page (``README.md`` and each ``docs/*.md``) has a template of the same name in
``docs/templates/`` and is written from it by :mod:`scalable_softmax.repro.machinery.numbers`, so
that no page escapes this test (a new page comes with its template); a number inside
``<!--= ... -->`` is computed from the record's tables or the benchmarks' results and
cannot fall behind a rerun. Every other number of a template's
prose is typed by hand, and must be declared in ``params/page-constants.yaml`` with the
reason it does not change with a run: a value printed in one of the two papers, a
setting of a notebook, a property of a data set, a constant of the mathematics. A run
result typed by hand is neither, and fails here.

What is not counted as a number: references (``notebook 06``, ``Table 3``,
``Propositions 1, 2, 4``, ``Lemmas 1-5``, ``Python 3.11``), inline code and code blocks,
link targets and ``<!--let ... -->`` lines (their values are rendered where they are
used). ``10^-3`` and ``1e-3`` count as one number each.

The declared list holds, per page, each number as written with its reason; the test
also fails on a declaration that no page needs any more, so that the list says what the
pages quote.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from scalable_softmax import paths
from scalable_softmax.repro.machinery import numbers

CONSTANTS = paths.ROOT / "params" / "page-constants.yaml"

#: a reference to a numbered part of a paper, of this collection or of a tool: its
#: numbers name something and are no quantity
REFERENCE = re.compile(
    r"\b(?:[Nn]otebooks?|[Tt]ables?|[Ff]igures?|[Pp]ropositions?|[Ll]emmas?|[Tt]heorems?"
    r"|[Ss]ections?|[Aa]ppendix|[Ee]quations?|[Aa]lgorithm|[Cc]orollary|Python)"
    r"\s+\(?\d[\w.()]*(?:(?:,\s*|\s*-\s*|\s+to\s+|,?\s+and\s+|\s*/\s*)\d[\w.()]*)*")
#: a name with a hyphen between digits (``Wiki10-31K``, ``x86-64``): no range
NAME = re.compile(r"\b[A-Za-z]\w*\d-\d\w*")
#: a number as written: ``10^-3``, ``1e-3``, ``30,758.77``, ``0.005``, ``12``
#: (the second number of a range, ``1.2-1.3`` or ``16-21``, counts; a number after any
#: other hyphen, ``K-1``, ``1e-3``, does not)
NUMBER = re.compile(r"(?<![\w.^/])(?<!(?<!\d)-)(?:10\^-?\d+|\d{1,3}(?:,\d{3})+(?:\.\d+)?"
                    r"|\d+(?:\.\d+)?(?:e-?\d+)?)(?![\w.]*\d)")


def _prose(line: str) -> str:
    """A template line without what holds no hand-typed number: bound numbers, inline
    code, link targets, HTML comments, references."""
    line = numbers.BINDING.sub(" ", line)
    line = re.sub(r"<!--.*?-->", " ", line)
    line = re.sub(r"`[^`]*`", " ", line)
    line = re.sub(r"\]\([^)]*\)", "]", line)
    line = re.sub(r"https?://\S+", " ", line)
    line = NAME.sub(" ", line)
    return REFERENCE.sub(" ", line)


def typed_numbers(text: str) -> list[tuple[int, str]]:
    """``(line, number as written)`` for every hand-typed number of a template's text."""
    found, fence = [], False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence or numbers.LET.match(line):
            continue
        found += [(n, m.group(0)) for m in NUMBER.finditer(_prose(line))]
    return found


def page_name(template: Path) -> str:
    return str(numbers.target(template).relative_to(paths.ROOT))


def declared() -> dict[str, dict[str, dict[str, str]]]:
    data = yaml.safe_load(CONSTANTS.read_text()) or {}
    return data


def undeclared(template: Path, decl: dict) -> list[tuple[int, str]]:
    page = decl.get(page_name(template), {}) or {}
    ok = {**(page.get("constants") or {}), **(page.get("pending") or {})}
    return [(n, x) for n, x in typed_numbers(template.read_text()) if x not in ok]


TEMPLATES = numbers.default_files()


def pages_without_template(root: Path = paths.ROOT) -> list[Path]:
    """The pages (``README.md``, ``docs/*.md``) under ``root`` that no template of
    ``root/docs/templates/`` writes."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return [p for p in pages if not (root / "docs" / "templates" / p.name).is_file()]


def test_every_page_has_a_template():
    missing = pages_without_template()
    assert not missing, (
        "pages without a template, whose numbers nothing checks: "
        + ", ".join(str(p.relative_to(paths.ROOT)) for p in missing)
        + ". Copy each page to docs/templates/<the same name>, edit only that (then run: "
          "python -m scalable_softmax.repro.machinery.numbers render) and declare its hand-typed "
          "numbers in params/page-constants.yaml.")


def test_a_page_without_a_template_is_found(tmp_path):
    (tmp_path / "docs" / "templates").mkdir(parents=True)
    for name in ("README.md", "docs/a.md", "docs/b.md", "docs/templates/README.md",
                 "docs/templates/a.md"):
        (tmp_path / name).write_text("text\n")
    assert pages_without_template(tmp_path) == [tmp_path / "docs" / "b.md"]


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.name)
def test_every_number_of_a_page_is_rendered_or_declared(template):
    missing = undeclared(template, declared())
    assert not missing, (
        f"{template}: numbers typed by hand, neither rendered from the tables nor declared "
        f"in {CONSTANTS.name}: "
        + ", ".join(f"line {n}: {x}" for n, x in missing)
        + ". Render a result with <!--= ... --> (scalable_softmax.repro.machinery.numbers); "
          "declare a paper value, setting or constant with its reason.")


def test_every_declaration_is_needed_and_has_a_reason():
    decl = declared()
    names = {page_name(t): t for t in TEMPLATES}
    assert set(decl) <= set(names), f"{CONSTANTS.name}: no such page {set(decl) - set(names)}"
    for page, kinds in decl.items():
        assert set(kinds) <= {"constants", "pending"}, f"{page}: unknown section {set(kinds)}"
        quoted = {x for _, x in typed_numbers(names[page].read_text())}
        for kind, entries in kinds.items():
            for value, reason in (entries or {}).items():
                assert isinstance(value, str), (
                    f"{CONSTANTS.name}: {page} {kind} {value!r}: quote the number as "
                    "written (a string)")
                assert isinstance(reason, str) and len(reason.split()) >= 2, (
                    f"{CONSTANTS.name}: {page} {kind} {value!r}: no reason")
                assert value in quoted, (
                    f"{CONSTANTS.name}: {page} declares {value!r} ({kind}), which the page "
                    "no longer quotes: remove it")


def test_the_detector_finds_a_typed_result_and_skips_what_is_no_number():
    text = ("Implicit SGD is best at 2 and 3 of 7 rates (notebook 04, Table 3, "
            "Propositions 1, 2, 4, Lemmas 1-5); rate 10^-3 and 1e-2, 30,758.77 times "
            "`K = 100`, [x](figures/05-a.png) <!--= cell('t', 'c') # .2f --> 3.08x, "
            "1.2-1.3 x on x86-64 and Wiki10-31K, log(K-1).\n"
            "<!--let a = 12 -->\n```\nmake 99\n```\n")
    assert [x for _, x in typed_numbers(text)] == ["2", "3", "7", "10^-3", "1e-2",
                                                  "30,758.77", "3.08", "1.2", "1.3"]


def test_an_undeclared_number_fails_and_a_declared_one_passes(tmp_path):
    template = tmp_path / "README.md"
    template.write_text("After 50 epochs <!--= 9 --> of 9 checks hold.\n")
    decl = {"README.md": {"constants": {"50": "the paper's 50 epochs"}}}
    assert undeclared(template, decl) == [(1, "9")]
    decl["README.md"]["pending"] = {"9": "typed by hand: to render"}
    assert undeclared(template, decl) == []
