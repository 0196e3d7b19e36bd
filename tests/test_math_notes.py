"""The project's own mathematical notes (docs/math.md) and every reference to them.

Code, notebooks, tests and the README cite the notes as "docs/math.md section N" (or
"sections N and M"); every such section must exist, every in-page link of the notes must
resolve, and nothing may cite a mathematical reference outside the repository.
"""
from __future__ import annotations

import json
import re

import pytest

from scalable_softmax import paths

ROOT = paths.ROOT
NOTES = ROOT / "docs" / "math.md"

#: where references to the notes may appear (generated tables/figures are rewritten by
#: `make reproduce`, not by hand)
SCANNED = ("lib", "notebooks", "tests", "benchmarks", "params", "docs")
SCANNED_FILES = ("README.md", "Makefile", "pyproject.toml", "environment.yml",
                 "data/README.md")
SUFFIXES = {".py", ".ipynb", ".md", ".yaml", ".yml", ".toml", ".txt", ""}


def _texts():
    """(path, text) of every scanned file; a notebook's text is its cells' sources."""
    files = [ROOT / f for f in SCANNED_FILES if (ROOT / f).exists()]
    for d in SCANNED:
        files += [p for p in (ROOT / d).rglob("*") if p.is_file()
                  and p.suffix in SUFFIXES and "__pycache__" not in p.parts
                  and not any(part.endswith(".egg-info") for part in p.parts)  # pip's copy
                  and not p.name.startswith(".")]
    for p in sorted(set(files)):
        text = p.read_text(encoding="utf-8", errors="replace")
        if p.suffix == ".ipynb":
            nb = json.loads(text)
            text = "\n".join("".join(c["source"]) for c in nb["cells"])
        yield p, text


def _anchors(text):
    return set(re.findall(r'<a id="([^"]+)"></a>', text))


def _section_numbers(text):
    """Numbers of the notes' headings: '## 4. ...' -> '4', '### 2.4 ...' -> '2.4'."""
    return set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, re.M))


def test_notes_exist_with_numbered_anchored_sections():
    text = NOTES.read_text(encoding="utf-8")
    numbers = _section_numbers(text)
    top = sorted(int(n) for n in numbers if "." not in n)
    assert top == list(range(15)), f"sections 0..14 expected, found {top}"
    anchors = _anchors(text)
    for n in top:
        assert f"s{n}" in anchors, f"section {n} has no anchor <a id=\"s{n}\"></a>"
        # the anchor sits right before its heading
        assert re.search(rf'<a id="s{n}"></a>\s*\n\s*## {n}\. ', text), \
            f"anchor s{n} is not right before the heading of section {n}"


def test_notes_cover_every_method_and_protocol():
    text = NOTES.read_text(encoding="utf-8")
    from scalable_softmax.methods import METHODS
    from scalable_softmax.protocols import PROTOCOLS
    for name in METHODS:
        assert f'`{name}`' in text or f'"{name}"' in text, \
            f"docs/math.md does not name the method {name!r}"
    for name in PROTOCOLS:
        assert f"`{name}`" in text, f"docs/math.md does not name the protocol {name!r}"


def test_in_page_links_of_the_notes_resolve():
    text = NOTES.read_text(encoding="utf-8")
    anchors = _anchors(text)
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert links, "the notes should link their sections"
    missing = sorted({a for a in links if a not in anchors})
    assert not missing, f"docs/math.md links to missing anchors {missing}"


_REF = re.compile(r"docs/math\.md,?\s+sections?\s+(\d+(?:\.\d+)?)"
                  r"((?:\s*(?:,|and|/)\s*\d+(?:\.\d+)?)*)")


def test_every_reference_to_the_notes_names_an_existing_section():
    numbers = _section_numbers(NOTES.read_text(encoding="utf-8"))
    found = 0
    bad = []
    for path, text in _texts():
        for m in _REF.finditer(text):
            refs = [m.group(1)] + re.findall(r"\d+(?:\.\d+)?", m.group(2) or "")
            for r in refs:
                found += 1
                if r not in numbers:
                    bad.append(f"{path.relative_to(ROOT)}: section {r}")
    assert found >= 50, f"expected the code and notebooks to cite the notes; found {found}"
    assert not bad, "references to sections the notes do not have:\n" + "\n".join(bad)


@pytest.mark.parametrize("pattern", [r"MATH\.md", r"shared/docs", r"/work/",
                                     r"\.\./shared/data/README"])
def test_nothing_cites_a_mathematical_reference_outside_the_repository(pattern):
    hits = [f"{p.relative_to(ROOT)}" for p, text in _texts()
            if re.search(pattern, text) and p != ROOT / "tests" / "test_math_notes.py"]
    assert not hits, f"{pattern!r} found in: {', '.join(hits)}"
