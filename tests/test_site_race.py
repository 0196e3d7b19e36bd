"""The site pages of notebooks 12 and 14 open with the race's verdicts, computed from the
record's tables, and their long tables are collapsed below (repro.machinery.site.race_summary,
collapse_long_tables). Headless Chromium checks the built pages in ``make site-check``."""
from __future__ import annotations

import json

import pandas as pd

from scalable_softmax import paths
from scalable_softmax.repro.machinery import site
from scalable_softmax.repro.race import report

SMOKE = paths.ROOT / "tests" / "smoke-record"


def test_the_summary_is_the_verdicts_table_in_words():
    for name in site.RACE_NOTEBOOKS:
        text = site.race_summary(name, SMOKE)
        verdicts = pd.read_csv(SMOKE / f"{name}-targets-verdicts.csv")
        for line in report.level_summary(verdicts):
            assert f"- {line}" in text
        assert text.count("\n- ") == (len(report.level_summary(verdicts))
                                      + verdicts.workload.nunique())
    assert "Bibtex: " in site.race_summary("12-peers", SMOKE)
    k = site.race_summary("14-crossover", SMOKE)
    assert "K = 1,000: " in k and "Crossover: target +1%" in k


def test_no_summary_without_the_race_tables(tmp_path):
    assert site.race_summary("12-peers", tmp_path) is None


def _cell(rows):
    table = "| a | b |\n|---|---|\n" + "".join(f"| {i} | {i} |\n" for i in range(rows))
    return {"cell_type": "code", "metadata": {}, "source": "",
            "outputs": [{"output_type": "display_data", "metadata": {},
                         "data": {"text/markdown": table, "text/plain": table}}]}


def test_only_long_tables_are_collapsed():
    nb = {"cells": [_cell(site.LONG_TABLE_ROWS - 2), _cell(site.LONG_TABLE_ROWS + 1),
                    {"cell_type": "markdown", "metadata": {}, "source": "| x |\n" * 40}]}
    assert site.collapse_long_tables(nb) == 1
    assert "tags" not in nb["cells"][0]["metadata"]
    assert nb["cells"][1]["metadata"]["tags"] == ["hide-output"]
    assert site.collapse_long_tables(nb) == 0          # tagged once


def test_staged_page_opens_with_the_summary_under_its_title(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "TABLES", SMOKE)
    nb = {"cells": [{"cell_type": "markdown", "metadata": {},
                     "source": "# 12 · Peers\n\nThe question."}, _cell(40)],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    executed = tmp_path / "12-peers.ipynb"
    executed.write_text(json.dumps(nb))
    for kind, summary in (("full", True), ("smoke", False)):
        out = tmp_path / kind / "12-peers.ipynb"
        site._stage_notebook(paths.NOTEBOOKS / "12-peers.ipynb", executed, kind, "full",
                             out)
        cells = json.loads(out.read_text())["cells"]
        first = "".join(cells[0]["source"])
        assert first.startswith("# 12 · Peers\n")
        assert ("The verdicts of this record" in first) is summary
        assert first.index("The question.") > (first.find("The verdicts") if summary else 0)
        assert ("hide-output" in cells[1]["metadata"].get("tags", [])) is summary
