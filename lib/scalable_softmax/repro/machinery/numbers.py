"""Numbers in the README and the docs pages, bound to the tables they quote.

The committed ``README.md`` and ``docs/*.md`` hold plain text and plain numbers. The
pages that quote the tables are rendered from a template of the same name in
``docs/templates/`` (``docs/templates/README.md`` gives ``README.md``,
``docs/templates/disagreements.md`` gives ``docs/disagreements.md``), where each quoted number is
the expression that computes it from the tables of a run, in an HTML comment::

    Implicit SGD is lowest on <!--= lowest('authors_code_exact') --> of 7 data sets;
    OVE averages <!--= cell('06-paper-tables-table3', 'authors_code_as_published',
    dataset='Average', method='ove') # .2f --> times Implicit SGD.

(one line each: an expression never spans lines). A line of its own
``<!--let NAME = EXPR -->`` gives a name to a value or a function for the expressions after
it, so that the template's prose lines stay short; it is left out of the page. ``render`` writes
every page from its template and the tables; ``check`` renders them afresh and lists every line of a
committed page that differs (page, line, shown, computed), so a test holds the pages to the
committed record and ``make reproduce`` rewrites them after a run::

    python -m scalable_softmax.repro.machinery.numbers check  [--tables DIR] [TEMPLATE ...]
    python -m scalable_softmax.repro.machinery.numbers render [--tables DIR] [TEMPLATE ...]

Without templates: every ``docs/templates/*.md``. Edit the template, never the rendered
page (``check`` reports a page edited by hand as differing).

The expression is Python, evaluated with these names only:

* ``table(stem)`` -- ``tables/<stem>.csv`` as a :class:`pandas.DataFrame`;
* ``cell(stem, column, **where)`` -- the one value of ``column`` in the rows where every
  ``where`` column equals its value (an error unless exactly one row matches);
* ``rows(stem, **where)`` -- those rows (a DataFrame);
* ``verdicts(stem, claim, **where)`` -- the verdicts of one claim of a claims table (its
  ``verdict_<protocol>`` columns; ``where`` as for ``cell`` when a claim's text repeats),
  protocols with the same verdict grouped, each with its seed support when the table has
  ``seeds_<protocol>`` columns (how many seeds support the claim) and the verdict does
  not already name it: ``"confirmed, holds in 3 of 3 seeds (authors' code);
  not confirmed, holds in 0 of 3 seeds (1 pass, paper's text)"``; a table of one
  protocol has a plain ``verdict`` column (and ``seeds``): ``"confirmed, holds in 3 of 3
  seeds"``;
* ``has_table(stem)`` -- whether ``tables/<stem>.csv`` exists (a table an older record
  lacks);
* ``bench(name)`` -- ``benchmarks/results/<name>.json`` (what ``make bench`` wrote) as
  parsed JSON, for the pages that quote the benchmarks (``docs/speed.md``,
  ``docs/own-data.md``); ``bench('history/<commit>-<name>')`` reads an earlier run
  kept in ``benchmarks/results/history/`` (its README says which run each file is);
* ``provenance()`` -- ``tables/PROVENANCE.md``: ``{'commit': short hash, 'seconds':
  {notebook: seconds}, 'runs': {make target: end-to-end time as written}, 'blas': its
  BLAS kernel line as written}``;
* ``race_families(stem, pct)``, ``race_threads(stem)``, ``race_pair(stem, pct)`` --
  notebook 12's or 14's race read per family (:mod:`scalable_softmax.repro.race.families`);
* ``np``, ``len``, ``min``, ``max``, ``sum``, ``abs``, ``round``, ``sorted``, ``int``,
  ``float``, ``str``, ``zip``, ``range``, ``list``, ``all``, ``any``.

A ``|`` in a shown value is escaped (``\\|``), so that it can stand in a markdown table.

After ``#`` comes a format spec (``.2f``, ``,.0f``, ``.3g``); without one, ``str``.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from scalable_softmax import paths
from scalable_softmax._atomic import atomic_open

__all__ = ["BINDING", "TEMPLATES", "Binding", "bindings", "render_text", "target",
           "check_files", "render_files", "default_files", "main"]

#: ``<!--= EXPR [# FORMAT] -->`` on one line
BINDING = re.compile(r"<!--=(?P<expr>.*?)-->")

#: ``<!--let NAME = EXPR -->`` alone on a line: a name the later expressions may use
LET = re.compile(r"^<!--let (?P<name>[A-Za-z_]\w*) = (?P<expr>.*)-->\s*$")

#: the templates of the pages that quote the tables
TEMPLATES = paths.ROOT / "docs" / "templates"

#: how a claims table's protocol columns read in a verdict
PROTOCOL_NAMES = {"authors-code": "authors' code", "authors-code-1pass": "1 pass",
                  "paper-text": "paper's text"}


class Binding:
    """One bound number: where it is in its template, its expression and format."""

    def __init__(self, file: Path, line: int, expr: str, fmt: str):
        self.file, self.line, self.expr, self.fmt = file, line, expr, fmt

    def where(self) -> str:
        return f"{self.file}:{self.line}"


def _split(spec: str) -> tuple[str, str]:
    """``"EXPR # FMT"`` -> ``(EXPR, FMT)``; the last ``#`` outside brackets and quotes.
    (Not ``|``: GitHub and MyST split a markdown table row at every ``|``, comments
    included, so a bound number could not stand in a table.)"""
    depth, quote = 0, None
    for i in range(len(spec) - 1, -1, -1):
        ch = spec[i]
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in ")]}":
            depth += 1
        elif ch in "([{":
            depth -= 1
        elif ch == "#" and depth == 0:
            return spec[:i].strip(), spec[i + 1:].strip()
    return spec.strip(), ""


#: the benchmarks' results (``make bench``), quoted by docs/speed.md and docs/own-data.md
BENCH_RESULTS = paths.ROOT / "benchmarks" / "results"


#: what a page says where the record has no race of notebook 12 or 14 (neither tables)
NOT_RUN = "not yet run for this record"


def part(text: str, i: int, n: int) -> str:
    """The ``i``-th of ``n`` consecutive pieces of ``text``, cut between words at about
    equal lengths (a long rendered sentence spread over ``n`` template lines, so that a
    page's lines stay short); a piece is empty only when ``text`` has fewer than ``n``
    words."""
    words = str(text).split()
    target = len(" ".join(words)) / n
    pieces, cur = [], []
    for k, w in enumerate(words):
        cur.append(w)
        left = len(words) - k - 1                   # words still to place
        need = n - len(pieces) - 1                  # pieces still to fill after this one
        if need and (len(" ".join(cur)) >= target or left == need):
            pieces.append(" ".join(cur))
            cur = []
    pieces.append(" ".join(cur))
    pieces += [""] * (n - len(pieces))
    return pieces[i]


class _NotRun(LookupError):
    """The record has neither race of a notebook (12 or 14): its page says
    :data:`NOT_RUN` there instead of failing."""


class Tables:
    """The CSV tables of one folder, read once each (and the benchmarks' results of
    ``bench_folder``)."""

    def __init__(self, folder: Path, bench_folder: Path | None = None):
        self.folder = Path(folder)
        self.bench_folder = Path(bench_folder) if bench_folder else BENCH_RESULTS
        self._cache: dict[str, pd.DataFrame] = {}
        self._bench: dict[str, object] = {}

    def bench(self, name: str):
        if name not in self._bench:
            import json
            path = self.bench_folder / f"{name}.json"
            if not path.is_file():
                raise LookupError(f"no benchmark result {path} (make bench writes them)")
            self._bench[name] = json.loads(path.read_text())
        return self._bench[name]

    def table(self, stem: str) -> pd.DataFrame:
        if stem not in self._cache:
            path = self.folder / f"{stem}.csv"
            if not path.is_file():
                raise LookupError(f"no table {path}")
            self._cache[stem] = pd.read_csv(path, keep_default_na=False, na_values=[""])
        return self._cache[stem]

    def rows(self, stem: str, **where) -> pd.DataFrame:
        df = self.table(stem)
        mask = np.ones(len(df), dtype=bool)
        for col, val in where.items():
            if col not in df.columns:
                raise LookupError(f"table {stem} has no column {col!r} "
                                  f"(columns: {', '.join(map(str, df.columns))})")
            mask &= (df[col].astype(str) == str(val)).to_numpy()
        return df[mask]

    def cell(self, stem: str, column: str, **where):
        sel = self.rows(stem, **where)
        if column not in sel.columns:
            raise LookupError(f"table {stem} has no column {column!r}")
        if len(sel) != 1:
            raise LookupError(f"table {stem}: {len(sel)} rows match {where} (need exactly 1)")
        v = sel[column].iloc[0]
        return v.item() if hasattr(v, "item") else v

    def verdicts(self, stem: str, claim: str, **where) -> str:
        row = self.rows(stem, claim=claim, **where)
        if len(row) != 1:
            raise LookupError(f"table {stem}: {len(row)} rows match claim {claim!r} {where} "
                              "(need exactly 1)")
        groups: dict[str, list[str]] = {}
        if "verdict" in row.columns:   # one verdict, no protocols (notebooks 01, 04, 05)
            verdict = str(row["verdict"].iloc[0])
            support = str(row["seeds"].iloc[0]) if "seeds" in row.columns else "-"
            if support not in ("-", "", "nan") and "seed" not in verdict:
                verdict = f"{verdict}, holds in {support}"
            return verdict
        for col in row.columns:
            if col.startswith("verdict_"):
                protocol = col[len("verdict_"):]
                verdict = str(row[col].iloc[0])
                seeds = f"seeds_{protocol}"
                support = str(row[seeds].iloc[0]) if seeds in row.columns else "-"
                if support not in ("-", "", "nan") and "seed" not in verdict:
                    verdict = f"{verdict}, holds in {support}"
                groups.setdefault(verdict, []).append(PROTOCOL_NAMES.get(protocol, protocol))
        if not groups:
            raise LookupError(f"table {stem} has no verdict or verdict_<protocol> column")
        return "; ".join(f"{v} ({', '.join(p)})" for v, p in groups.items())

    def has_table(self, stem: str) -> bool:
        """Whether the record has ``tables/<stem>.csv`` (a table a newer notebook writes
        and an older record lacks)."""
        return (self.folder / f"{stem}.csv").is_file()

    def provenance(self) -> dict:
        path = self.folder / "PROVENANCE.md"
        if not path.is_file():
            raise LookupError(f"no {path}")
        text = path.read_text()
        commit = re.search(r"^- commit: ([0-9a-f]+)", text, re.M)
        if not commit:
            raise LookupError(f"{path}: no '- commit:' line")
        # "| notebook | seconds |", or with a third column, the commit each notebook's
        # run came from (a record assembled from runs of several commits)
        rows = list(re.finditer(r"^\| (\d\d-[\w-]+) \| ([\d.]+) \|(?: ([0-9a-f]+)[^|]*\|)?$",
                                text, re.M))
        seconds = {m.group(1): float(m.group(2)) for m in rows}
        commits = {m.group(1): (m.group(3) or commit.group(1))[:7] for m in rows}
        runs = {m.group(1): m.group(2) for m in
                re.finditer(r"^\| `make ([\w-]+)` \| [^|]+ \| [^|]+ \| ([^|]+?) \|$", text, re.M)}
        blas = re.search(r"^- BLAS kernel: (.+)$", text, re.M)
        return {"commit": commit.group(1)[:7], "seconds": seconds, "commits": commits,
                "runs": runs, "blas": blas.group(1).strip() if blas else "an unrecorded kernel"}

    def race_new(self, stem: str):
        """The race to validation targets of notebook 12 or 14 (``stem``) when the record
        has it: ``(rows, verdicts)`` of ``<stem>-targets.csv`` and
        ``<stem>-targets-verdicts.csv``; None when the record has no such race (the
        pages then say :data:`NOT_RUN`)."""
        try:
            return self.table(f"{stem}-targets"), self.table(f"{stem}-targets-verdicts")
        except LookupError:
            return None

    def _race_new(self, stem: str):
        """:meth:`race_new`, or :class:`_NotRun` (the page says :data:`NOT_RUN`)."""
        new = self.race_new(stem)
        if new is None:
            raise _NotRun(f"{stem}-targets")
        return new

    def race_record(self, stem: str, part: int | None = None) -> str:
        """The race the record holds for notebook 12 or 14, and what it can decide;
        ``part`` 0, 1, 2: one of its three lines (a page line stays short)."""
        new = self._race_new(stem)
        seeds = sorted(set(pd.to_numeric(new[0].seed, errors="coerce").dropna()
                           .astype(int)))
        lines = [f"This record is the race to validation targets (`tables/{stem}-"
                 f"targets.csv`):",
                 f"targets fixed beforehand (`tables/targets.csv`), equal tuning, seeds "
                 f"{', '.join(map(str, seeds))};",
                 "a family is first only when its slowest seed beats every other's "
                 "fastest, else tie."]
        return " ".join(lines) if part is None else lines[part]

    def race_families(self, stem: str, tolerance_pct: str = "1", only=None,
                      short: bool = False) -> str:
        """Per workload of notebook 12's or 14's race (``stem``), the family verdict at
        the target ``tolerance_pct`` percent above the reference
        (repro.race.report.page_verdict); ``only`` one workload, ``short`` the verdict
        alone."""
        from scalable_softmax.repro.race import families, report
        new = self._race_new(stem)
        ws = [only] if only is not None else list(dict.fromkeys(new[1].workload))
        level = float(tolerance_pct) / 100
        return "; ".join(
            (report.page_verdict(*new, w, level, short) if only is not None else
             f"{families.workload_label(w)}: "
             f"{report.page_verdict(*new, w, level, short)}") for w in ws)

    def race_best(self, dataset: str) -> str:
        """Notebook 12's column of the results page: the reference validation log-loss
        that set the targets of the race (and its method)."""
        self._race_new("12-peers")
        t = self.table("targets")
        t = t[(t.notebook == "12-peers") & (t.workload.astype(str) == dataset)
              & t.sets_target.astype(str).str.lower().eq("true")]
        return (f"{float(t.reference_val_log_loss.iloc[0]):.3f} "
                f"({t.reference_method.iloc[0]}, validation reference)")

    def race_rules(self, stem: str = "12-peers") -> str:
        """The race's rules as the record was made with them, from the full profiles of
        ``params/<stem>.yaml`` and ``params/targets.yaml`` and the levels of
        repro.race.scoring: the reference runs and their budget, the levels, the tuning
        and the seeds (nothing typed by hand)."""
        from scalable_softmax.repro.race import scoring, targets
        p, t = self.record_params(stem), self.record_params("targets")
        levels = ", ".join(f"{100 * lv:g}%" for lv in scoring.LEVELS)
        decays = p.get("decays") or []
        cands = sorted({len(v) * len(p.get("structures", {}).get(m) or [{}])
                        * max(1, len(decays)) for m, v in p["grids"].items()})
        sched = (f" (its rates at the schedule's decays {', '.join(f'{d:g}' for d in decays)})"
                 if decays else "")
        return (f"the targets are the reference validation log-loss of tuned runs of "
                f"{', '.join(targets.REFERENCE_METHODS)} given {t['factor']:g}x the race's "
                f"cap, plus {levels}; every method with a rate chooses among "
                f"{'/'.join(map(str, cands))} candidates{sched} by time to the +5% target on "
                f"validation (seed {p['seeds'][0]}, a budget of {p['tune_fraction']:g} of "
                f"the cap), then runs with seeds {', '.join(map(str, p['seeds']))}")

    def race_edge(self, stem: str, method: str, edge: str = "lowest") -> str:
        """On how many workloads of notebook 12's or 14's race ``method``'s chosen rate
        sits at the ``edge`` (``lowest`` or ``highest``) end of its grid: ``"k of n"``
        (the ``at_grid_edge`` column of ``<stem>-targets.csv``, counted by
        repro.race.report.edge_counts)."""
        from scalable_softmax.repro.race import report
        new = self.race_new(stem)
        if new is None:
            return NOT_RUN
        lowest, highest, n = report.edge_counts(new[0], method)
        return f"{lowest if edge == 'lowest' else highest} of {n}"

    def race_limits(self, short: bool = False) -> str:
        """The race's limits (repro.race.report.limits_text) over notebooks 12 and 14:
        rates at an end of their grid and runs that ended their schedule before the cap,
        for the double-sum methods and IS; ``short``: one sentence (report.limits_short)."""
        from scalable_softmax.repro.race import report
        n12, n14 = self.race_new("12-peers"), self.race_new("14-crossover")
        if n12 is None and n14 is None:
            return NOT_RUN
        names = {"implicit-batch": "Implicit SGD (n = m = 1)", "umax": "U-max",
                 "is": "IS"}
        if short:
            return report.limits_short(n12[0] if n12 else None, n14[0] if n14 else None)
        return report.limits_text(n12[0] if n12 else None, n14[0] if n14 else None, names)

    def race_summary(self, stem: str) -> str:
        """Per level, how many workloads each verdict holds (repro.race.report.
        level_summary), and what the tuning chose (report.tuning_line)."""
        from scalable_softmax.repro.race import report
        new = self.race_new(stem)
        if new is None:        # returned, not raised: part() spreads it over lines
            return NOT_RUN
        rows, verdicts = new
        return "; ".join(report.level_summary(verdicts) + [report.tuning_line(rows)])

    def race_threads(self, stem: str) -> str:
        """The runs of ``stem`` that did not use 2 threads (repro.race.report.page_threads)."""
        from scalable_softmax.repro.race import report
        return report.page_threads(self._race_new(stem)[0])

    def race_pair(self, stem: str, tolerance_pct: str = "5", only=None,
                  ours: str = "softmax-sgd", theirs: str = "torch-sgd") -> str:
        """Our and PyTorch's full-softmax SGD side by side: seconds to within
        ``tolerance_pct`` percent per workload (repro.race.report.page_pair); ``only``
        one workload."""
        from scalable_softmax.repro.race import report
        new = self._race_new(stem)
        ws = [only] if only is not None else list(dict.fromkeys(new[1].workload))
        return "; ".join(report.page_pair(new[0], w, float(tolerance_pct) / 100,
                                          ours, theirs) for w in ws)

    def crossover_verdict(self, tolerance_pct: str = "1") -> str:
        """Notebook 14's crossover K per level (repro.race.report.page_crossover), or
        that the record has no run of it yet (``tolerance_pct``: kept for the pages'
        calls; every level is stated)."""
        from scalable_softmax.repro.race import report
        new = self.race_new("14-crossover")
        if new is None:
            return "not yet run for this record (notebook 14-crossover)."
        return report.page_crossover(new[1])

    def record_params(self, name: str) -> dict:
        """The full profile of ``params/NAME.yaml`` as the record was made with it: at
        the commit ``tables/PROVENANCE.md`` names (the parameters may have changed
        since, e.g. notebook 14's when it moved to the race to validation targets);
        today's file when that commit cannot be read (no git history)."""
        import subprocess

        import yaml

        from scalable_softmax.repro.machinery import runner
        prov = self.folder / "PROVENANCE.md"
        m = re.search(r"^- commit: ([0-9a-f]{7,40})", prov.read_text(), re.M) \
            if prov.is_file() else None
        if m:
            try:
                text = subprocess.run(["git", "show", f"{m.group(1)}:params/{name}.yaml"],
                                      cwd=paths.ROOT, capture_output=True, text=True,
                                      check=True).stdout
                return yaml.safe_load(text)["full"]
            except (OSError, subprocess.CalledProcessError, KeyError, TypeError):
                pass
        return runner.load_params(name, "full")

    @staticmethod
    def piece_rule() -> dict:
        """How notebooks 12 and 14 cut our runs' epochs (repro.race.ours.Pieces): a piece
        lasts about ``1 / per_cap`` of the run's cap, at least ``min_ms`` milliseconds."""
        from scalable_softmax.repro.race import ours
        return {"per_cap": int(round(1 / ours.PIECE_FRACTION)),
                "min_ms": int(round(ours.MIN_PIECE_SECONDS * 1000))}

    def crossover_first(self, i: int, tolerance_pct: str = "1") -> str:
        """The ``i``-th K of notebook 14's race (increasing) and the method first within
        ``tolerance_pct`` percent there, as the verdict lists them; empty when the record
        has no run of notebook 14 or fewer K values."""
        from scalable_softmax.repro.race import report
        new = self.race_new("14-crossover")
        if new is None:
            return ""
        Ks = sorted(set(pd.to_numeric(new[1].workload).astype(int)))
        if not 0 <= i < len(Ks):
            return ""
        return f"K = {Ks[i]:,}: " + report.page_verdict(*new, Ks[i],
                                                         float(tolerance_pct) / 100)

    def _k_index(self, K: int):
        """The index of ``K`` among the K values of the record's race of notebook 14;
        None when not raced."""
        new = self.race_new("14-crossover")
        if new is None:
            return None
        Ks = sorted(set(pd.to_numeric(new[1].workload).astype(int)))
        return Ks.index(int(K)) if int(K) in Ks else None

    def crossover_at(self, K: int, tolerance_pct: str = "1") -> str:
        """Notebook 14's verdict at ``K``, or that the record did not race this K."""
        i = self._k_index(K)
        return f"K = {int(K):,}: not raced in this record" if i is None else \
            self.crossover_first(i, tolerance_pct)

    def namespace(self) -> dict:
        return {"table": self.table, "rows": self.rows, "cell": self.cell,
                "has_table": self.has_table,
                "verdicts": self.verdicts, "provenance": self.provenance,
                "race_families": self.race_families, "race_record": self.race_record,
                "race_best": self.race_best,
                "race_threads": self.race_threads, "race_pair": self.race_pair,
                "race_rules": self.race_rules, "race_summary": self.race_summary,
                "part": part, "race_edge": self.race_edge, "race_limits": self.race_limits,
                "crossover_verdict": self.crossover_verdict,
                "crossover_first": self.crossover_first,
                "crossover_at": self.crossover_at,
                "pieces": self.piece_rule(),
                "bench": self.bench, "np": np,
                "len": len, "min": min, "max": max, "sum": sum, "abs": abs, "round": round,
                "sorted": sorted, "int": int, "float": float, "str": str, "zip": zip,
                "range": range, "list": list, "all": all, "any": any,
                "__builtins__": {}}


def target(template: Path, root: Path | None = None) -> Path:
    """The page a template renders: ``README.md`` at the root, any other in ``docs/``."""
    root = paths.ROOT if root is None else Path(root)
    name = Path(template).name
    return root / name if name == "README.md" else root / "docs" / name


def bindings(path: Path) -> list[Binding]:
    """Every bound number of the template ``path``."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        for m in BINDING.finditer(line):
            expr, fmt = _split(m.group("expr"))
            out.append(Binding(Path(path), n, expr, fmt))
    return out


def _value(b: Binding, ns: dict) -> str:
    try:
        v = eval(b.expr, ns)  # noqa: S307 -- the project's own documentation
    except _NotRun:
        return NOT_RUN
    except Exception as exc:  # noqa: BLE001 -- reported with the place
        raise ValueError(f"{b.where()}: cannot compute {b.expr!r}: {exc}") from None
    try:
        shown = format(v, b.fmt) if b.fmt else str(v)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{b.where()}: format {b.fmt!r} does not fit {v!r}: {exc}") from None
    if "\n" in shown:
        raise ValueError(f"{b.where()}: {b.expr!r} gives a value of several lines")
    # a value inside a markdown table cell must not end the cell
    return shown.replace("\\|", "|").replace("|", "\\|")


def render_text(text: str, tables: Tables, name: str = "<text>") -> str:
    """The template ``text`` with every bound number computed from ``tables`` and its
    ``<!--let NAME = EXPR -->`` lines evaluated (in order) and left out."""
    ns = tables.namespace()
    out = []
    for i, line in enumerate(text.split("\n")):
        let = LET.match(line)
        if let:
            b = Binding(Path(name), i + 1, let.group("expr").strip(), "")
            try:
                ns[let.group("name")] = eval(b.expr, ns)  # noqa: S307 -- our own docs
            except Exception as exc:  # noqa: BLE001 -- reported with the place
                raise ValueError(f"{b.where()}: cannot compute {b.expr!r}: {exc}") from None
            continue

        def sub(m, i=i):
            expr, fmt = _split(m.group("expr"))
            return _value(Binding(Path(name), i + 1, expr, fmt), ns)
        out.append(BINDING.sub(sub, line))
    return "\n".join(out)


def default_files() -> list[Path]:
    """Every template (``docs/templates/*.md``)."""
    return sorted(TEMPLATES.glob("*.md"))


def _render_all(files, tables_dir: Path) -> dict[Path, str]:
    tables = Tables(tables_dir)
    return {Path(f): render_text(Path(f).read_text(), tables, str(f)) for f in files}


def check_files(files, tables_dir: Path, root: Path | None = None) -> list[str]:
    """One message per line of a rendered page that differs from a fresh render of its
    template ``files`` with the tables of ``tables_dir`` (or per value that cannot be
    computed)."""
    tables = Tables(tables_dir)
    problems = []
    for f in files:
        page = target(f, root)
        try:
            want = render_text(Path(f).read_text(), tables, str(f))
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if not page.is_file():
            problems.append(f"{page}: missing (render it from {f})")
            continue
        have = page.read_text().split("\n")
        want_lines = want.split("\n")
        sm = difflib.SequenceMatcher(a=have, b=want_lines, autojunk=False)
        for op, a0, a1, b0, b1 in sm.get_opcodes():
            if op == "equal":
                continue
            shown = "\n".join(have[a0:a1]) or "<nothing>"
            fresh = "\n".join(want_lines[b0:b1]) or "<nothing>"
            problems.append(f"{page}:{a0 + 1}: shows {shown!r}, a fresh render of {f} "
                            f"with the tables gives {fresh!r}")
    return problems


def render_files(files, tables_dir: Path, root: Path | None = None) -> list[Path]:
    """Write the page of each template in ``files`` from the tables; returns the pages
    changed. Every page is computed before any is written (an error changes nothing)."""
    new = {}
    for f, text in _render_all(files, tables_dir).items():
        page = target(f, root)
        if not page.is_file() or page.read_text() != text:
            new[page] = text
    for page, text in new.items():
        with atomic_open(page, "w") as fh:
            fh.write(text)
    return list(new)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scalable_softmax.repro.machinery.numbers",
                                 description="Check or write the README and the docs pages "
                                             "from their templates (docs/templates/) and "
                                             "the tables they quote.")
    ap.add_argument("command", choices=["check", "render"])
    ap.add_argument("files", nargs="*", type=Path,
                    help="templates (default: docs/templates/*.md)")
    ap.add_argument("--tables", type=Path, default=paths.TABLES,
                    help="folder of the tables (default: tables/)")
    args = ap.parse_args(argv)
    files = args.files or default_files()
    missing = [str(f) for f in files if not Path(f).is_file()]
    if missing:
        print(f"error: no such template: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.command == "check":
        problems = check_files(files, args.tables)
        n = sum(len(bindings(f)) for f in files)
        for p in problems:
            print(p)
        print(f"{len(files)} page(s), {n} quoted numbers: "
              + (f"{len(problems)} line(s) differ from a fresh render with {args.tables} "
                 "(run: python -m scalable_softmax.repro.machinery.numbers render)"
                 if problems else f"all agree with {args.tables}"))
        return 1 if problems else 0
    try:
        changed = render_files(files, args.tables)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"rendered {len(files)} page(s) from their templates and {args.tables}; "
          f"{len(changed)} changed" + "".join(f"\n  {f}" for f in changed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
