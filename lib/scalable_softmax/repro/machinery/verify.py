"""A rerun checked against the record: compare tables column by column, with stated tolerances.

``python -m scalable_softmax.repro.machinery.verify [--tables DIR] [--record REF_OR_DIR]`` compares
every CSV table in ``DIR`` (default: the working tree's ``tables/``) with the committed
record (default: git ``HEAD:tables/``; or a folder of CSV files), and prints one line per
table:

* ``identical``: every compared cell equals the record's;
* ``within tolerance (largest difference: ...)``: some numbers differ, each within its
  declared tolerance;
* ``OUT of tolerance``: naming the table, column, row and both values; also missing or
  extra rows, columns missing from the rerun, and tables missing from the rerun (a column
  new in the rerun is named, not compared: the record has nothing to compare it with);
  a table declared ``optional`` (with its reason) that the rerun lacks is reported, not
  failed.

The rules live in one file, ``params/tolerances.yaml`` (see its head for the format):
labels, counts and flags (strings, integers, booleans) must be equal; floating-point
columns must agree within ``|new - record| <= abs + rel * |record|`` (a strict default
for undeclared columns); a column may be ``ignore``d (timings, run facts) or ``report``ed
(compared and shown, never a failure: e.g. iteration counts, which move with the BLAS
kernel). Every declaration carries its reason. The exit status is 1 when something is out
of tolerance or missing, else 0.

Without a rerun there is nothing to compare: when ``DIR`` holds exactly the record's files,
byte for byte, ``PROVENANCE.md`` included (the same commit and date: every ``make
reproduce`` writes a new one), ``verify`` says so and how to make a rerun, instead of
reporting the record identical to itself (:func:`is_the_record`). A real rerun whose
tables all come out identical still has its own ``PROVENANCE.md``, so it is compared.

``--notebooks NAME [NAME ...]`` (``make verify NOTEBOOKS="09-ove-toy-2d"``) compares only
the tables those notebooks write (``NAME.csv`` and ``NAME-*.csv``): after rerunning part
of the collection, a table of the record that the rerun does not have is then reported,
not failed; a named notebook none of whose tables is in the rerun is an error.
"""
from __future__ import annotations

import argparse
import fnmatch
import io
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from scalable_softmax import paths

TOLERANCES = paths.ROOT / "params" / "tolerances.yaml"
RULE_KINDS = ("ignore", "report", "exact")
MAX_CELLS_SHOWN = 5


# ---------------------------------------------------------------- the declarations


@dataclass(frozen=True)
class Rule:
    """How one column is compared: ``kind`` is ``tolerance``, ``exact``, ``report`` or
    ``ignore``; ``rel``/``abs`` bound ``|new - record| <= abs + rel * |record|``."""

    kind: str
    rel: float = 0.0
    abs: float = 0.0
    reason: str = ""
    origin: str = "default"

    def allowed(self, record: np.ndarray) -> np.ndarray:
        """The largest difference allowed against each record value."""
        return self.abs + self.rel * np.abs(record)


@dataclass
class TableSpec:
    """The declarations that apply to one table (merged from every matching entry)."""

    columns: list = field(default_factory=list)   # [(pattern, Rule)] in priority order
    keys: list | None = None
    rows_report: bool = False
    rows_reason: str = ""
    table_report: str = ""          # the reason, when every difference is reported only
    optional: str = ""              # the reason, when the rerun may lack the table


def _rule(entry, where: str) -> Rule:
    """Parse one column declaration; every one must state its reason."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected a mapping such as {{rel: 1.0e-6, reason: ...}} "
                         f"or {{ignore: <reason>}}, got {entry!r}")
    for kind in RULE_KINDS:
        if kind in entry:
            reason = entry[kind]
            if not isinstance(reason, str) or not reason.strip():
                raise ValueError(f"{where}: `{kind}` needs its reason as the value "
                                 f"({kind}: <one line why>)")
            extra = set(entry) - {kind}
            if extra:
                raise ValueError(f"{where}: `{kind}` takes no other keys, got {sorted(extra)}")
            return Rule(kind, reason=reason.strip(), origin=where)
    unknown = set(entry) - {"rel", "abs", "reason"}
    if unknown or not ({"rel", "abs"} & set(entry)):
        raise ValueError(f"{where}: a tolerance has `rel` and/or `abs` and a `reason` "
                         f"(or one of {RULE_KINDS} with its reason); got keys {sorted(entry)}")
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"{where}: every tolerance states its `reason` (one line)")
    rel, abs_ = float(entry.get("rel", 0.0)), float(entry.get("abs", 0.0))
    if rel < 0 or abs_ < 0:
        raise ValueError(f"{where}: tolerances are non-negative, got rel={rel}, abs={abs_}")
    return Rule("tolerance", rel=rel, abs=abs_, reason=reason.strip(), origin=where)


@dataclass
class Tolerances:
    """The parsed ``params/tolerances.yaml``."""

    default: Rule
    everywhere: list                 # [(pattern, Rule)]
    tables: list                     # [(stem pattern, raw entry)]
    source: str = ""

    @classmethod
    def load(cls, path: Path | str = TOLERANCES) -> "Tolerances":
        """Read and check the declarations; errors name the file and the entry."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tolerances file {path} not found: pass --tolerances "
                                    f"or restore params/tolerances.yaml")
        raw = yaml.safe_load(path.read_text()) or {}
        name = path.name
        if "default" not in raw:
            raise ValueError(f"{name}: needs a `default` tolerance for undeclared float columns")
        default = _rule(raw["default"], f"{name}: default")
        everywhere = [(pat, _rule(r, f"{name}: all_tables.columns.{pat}"))
                      for pat, r in ((raw.get("all_tables") or {}).get("columns") or {}).items()]
        tables = []
        for stem, entry in (raw.get("tables") or {}).items():
            entry = entry or {}
            where = f"{name}: tables.{stem}"
            unknown = set(entry) - {"keys", "rows", "columns", "report", "optional"}
            if unknown:
                raise ValueError(f"{where}: unknown keys {sorted(unknown)} (allowed: keys, rows, "
                                 f"columns, report, optional)")
            for key, what in (("report", "report (not fail on) every difference of the table"),
                              ("optional", "accept a rerun without the table")):
                if key in entry and not (isinstance(entry[key], str) and entry[key].strip()):
                    raise ValueError(f"{where}.{key}: write `{key}: <reason>` to {what}")
            if "rows" in entry:
                rows = entry["rows"]
                if not (isinstance(rows, dict) and set(rows) == {"report"}
                        and isinstance(rows["report"], str) and rows["report"].strip()):
                    raise ValueError(f"{where}.rows: write `rows: {{report: <reason>}}` to report "
                                     "(not fail on) rows present on one side only")
                if not entry.get("keys"):
                    raise ValueError(f"{where}.rows: reporting rows needs `keys` to match them by")
            cols = [(pat, _rule(r, f"{where}.columns.{pat}"))
                    for pat, r in (entry.get("columns") or {}).items()]
            tables.append((str(stem), dict(entry, columns=cols)))
        return cls(default, everywhere, tables, source=str(path))

    def spec(self, stem: str) -> TableSpec:
        """Every declaration that applies to the table ``stem`` (glob patterns allowed)."""
        spec = TableSpec()
        for pattern, entry in self.tables:
            if not fnmatch.fnmatchcase(stem, pattern):
                continue
            spec.columns += entry["columns"]
            if spec.keys is None and entry.get("keys"):
                spec.keys = list(entry["keys"])
            if "rows" in entry and not spec.rows_report:
                spec.rows_report, spec.rows_reason = True, entry["rows"]["report"]
            if "report" in entry and not spec.table_report:
                spec.table_report = entry["report"].strip()
            if "optional" in entry and not spec.optional:
                spec.optional = entry["optional"].strip()
        spec.columns += self.everywhere
        return spec

    def rule(self, spec: TableSpec, column: str) -> Rule | None:
        """The first declaration matching ``column`` (table's own first), else None."""
        for pattern, rule in spec.columns:
            if fnmatch.fnmatchcase(column, pattern):
                return rule
        return None


# ---------------------------------------------------------------- reading the two sides


def read_csv_text(text: str) -> pd.DataFrame:
    """A table as the collection writes it (empty cells are missing values)."""
    return pd.read_csv(io.StringIO(text))


class Record:
    """The committed tables: a git revision's ``tables/`` or a folder of CSV files."""

    def __init__(self, ref_or_dir: str, root: Path = paths.ROOT):
        self.root = root
        self.label = ref_or_dir
        folder = Path(ref_or_dir)
        if not folder.is_absolute():
            folder = Path.cwd() / folder
        self.folder = folder if folder.is_dir() else None
        if self.folder is None:
            probe = subprocess.run(["git", "rev-parse", "--verify", "--quiet",
                                    f"{ref_or_dir}^{{commit}}"], cwd=root,
                                   capture_output=True, text=True)
            if probe.returncode != 0:
                raise ValueError(f"--record {ref_or_dir!r} is neither a folder nor a git "
                                 f"revision of {root}: pass a folder of CSV tables or a "
                                 "revision such as HEAD")

    def names(self) -> list[str]:
        """The CSV file names the record holds."""
        if self.folder is not None:
            return sorted(p.name for p in self.folder.glob("*.csv"))
        out = subprocess.run(["git", "ls-tree", "--name-only", self.label, "tables/"],
                             cwd=self.root, capture_output=True, text=True, check=True).stdout
        return sorted(Path(line).name for line in out.splitlines() if line.endswith(".csv"))

    def text(self, name: str) -> str | None:
        """A recorded file's text (e.g. ``PROVENANCE.md``), or None if it has none."""
        if self.folder is not None:
            path = self.folder / name
            return path.read_text() if path.is_file() else None
        done = subprocess.run(["git", "show", f"{self.label}:tables/{name}"], cwd=self.root,
                              capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else None

    def read(self, name: str) -> pd.DataFrame:
        """One recorded table."""
        if self.folder is not None:
            return read_csv_text((self.folder / name).read_text())
        text = subprocess.run(["git", "show", f"{self.label}:tables/{name}"], cwd=self.root,
                              capture_output=True, text=True, check=True).stdout
        return read_csv_text(text)


# ---------------------------------------------------------------- the comparison


@dataclass
class Cell:
    """One differing cell: where, both values, and how far over (>1) or within its allowance."""

    column: str
    row: str
    new: object
    record: object
    excess: float          # |diff| / allowed (inf for exact columns or no allowance)
    diff: float = math.nan


@dataclass
class TableResult:
    """The verdict on one table."""

    name: str
    status: str = "identical"    # identical | within | OUT | missing | absent | new | not rerun
    problems: list = field(default_factory=list)   # failing messages (shape, missing)
    out: list = field(default_factory=list)         # failing cells
    within: list = field(default_factory=list)      # differing cells within tolerance
    reported: list = field(default_factory=list)    # report-only differences (messages)

    @property
    def failed(self) -> bool:
        return self.status in ("OUT", "missing")

    def line(self) -> str:
        """The one-line verdict printed for this table."""
        head = f"{self.name}: "
        if self.status == "missing":
            return head + "OUT of tolerance: missing from the rerun (the record has it)"
        if self.status == "new":
            return head + "new: not in the record (not compared)"
        if self.status == "not rerun":
            return head + "not rerun (in the record; only the named notebooks are compared)"
        if self.status == "absent":
            return head + "not in the rerun, which may lack it: " + "; ".join(self.reported)
        note = ("; reported only: " + "; ".join(self.reported)) if self.reported else ""
        if self.status == "OUT":
            parts = list(self.problems)
            cells = sorted(self.out, key=lambda c: -c.excess)
            parts += [_describe(c, allowed=True) for c in cells[:MAX_CELLS_SHOWN]]
            if len(cells) > MAX_CELLS_SHOWN:
                parts.append(f"and {len(cells) - MAX_CELLS_SHOWN} more cells")
            return head + "OUT of tolerance: " + "; ".join(parts) + note
        if self.status == "within":
            worst = max(self.within, key=lambda c: c.excess)
            return (head + f"within tolerance (largest difference: {_describe(worst)}; "
                    f"{len(self.within)} cells differ)" + note)
        return head + ("identical in every checked cell" if self.reported else "identical") + note


def _fmt(value) -> str:
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return repr(value.item() if isinstance(value, np.generic) else value)


def _describe(cell: Cell, allowed: bool = False) -> str:
    text = f"column {cell.column}, {cell.row}: {_fmt(cell.new)} vs record {_fmt(cell.record)}"
    if allowed and not math.isnan(cell.diff):
        limit = cell.diff / cell.excess if cell.excess > 0 else math.inf
        text += f" (|diff| {cell.diff:.3g} > allowed {limit:.3g})"
    return text


def _short(value, width: int = 40) -> str:
    text = str(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _row_labels(frame: pd.DataFrame, keys: list | None) -> list[str]:
    """How rows are named in messages: their key values, else position and first column."""
    if keys:
        return [", ".join(f"{k}={v}" for k, v in zip(keys, row if isinstance(row, tuple)
                                                     else (row,)))
                for row in frame.index]
    names = []                      # the leading label columns (at most 2), e.g. dataset, method
    for column in frame.columns[:2]:
        if pd.api.types.is_numeric_dtype(frame[column]) and names:
            break
        names.append(column)
    return [f"row {i + 1}" + (" (" + ", ".join(f"{c}={_short(frame.iloc[i][c])}" for c in names)
                              + ")"
                              if names else "")
            for i in range(len(frame))]


def _is_float(s: pd.Series) -> bool:
    return pd.api.types.is_float_dtype(s)


def _is_number(s: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)


def _equal_exact(a, b) -> bool:
    """Labels, counts and flags: equal values, or both missing."""
    if pd.isna(a) or pd.isna(b):
        return bool(pd.isna(a) and pd.isna(b))
    if type(a) is type(b) or (_number(a) and _number(b)):
        return bool(a == b)
    return str(a) == str(b)


def _number(v) -> bool:
    return (isinstance(v, (int, float, np.integer, np.floating))
            and not isinstance(v, (bool, np.bool_)))


def compare_column(column: str, new: pd.Series, record: pd.Series, labels: list[str],
                   rule: Rule | None, default: Rule):
    """Compare one aligned column; returns ``(out cells, within cells, report message)``."""
    if rule is not None and rule.kind == "ignore":
        return [], [], None
    numeric = _is_number(new) and _is_number(record)
    if rule is None:
        rule = default if numeric and (_is_float(new) or _is_float(record)) else Rule("exact")
    cells = []
    if numeric and rule.kind != "exact":
        a, b = new.to_numpy(dtype=float), record.to_numpy(dtype=float)
        both_nan = np.isnan(a) & np.isnan(b)
        equal = (a == b) | both_nan
        with np.errstate(invalid="ignore"):
            diff = np.abs(a - b)
        allowed = rule.allowed(b) if rule.kind == "tolerance" else np.zeros_like(b)
        for i in np.flatnonzero(~equal):
            d, lim = diff[i], allowed[i]
            if not np.isfinite(d):            # nan against a number, or inf against other
                excess, d = math.inf, math.nan
            else:
                excess = d / lim if lim > 0 else math.inf
            cells.append(Cell(column, labels[i], new.iloc[i], record.iloc[i], excess, d))
    else:
        for i, (a, b) in enumerate(zip(new.tolist(), record.tolist())):
            if not _equal_exact(a, b):
                cells.append(Cell(column, labels[i], a, b, math.inf))
    if rule.kind == "report":
        if not cells:
            return [], [], None
        c = cells[0]
        return [], [], (f"{column} differs on {len(cells)} rows (e.g. {c.row}: {_fmt(c.new)} vs "
                        f"record {_fmt(c.record)}; {rule.reason})")
    out = [c for c in cells if c.excess > 1]
    within = [c for c in cells if c.excess <= 1]
    return out, within, None


def compare_tables(name: str, new: pd.DataFrame, record: pd.DataFrame,
                   tolerances: Tolerances) -> TableResult:
    """Compare one table with its record under the declarations for its stem."""
    result = TableResult(name)
    stem = Path(name).stem
    spec = tolerances.spec(stem)
    missing_cols = [c for c in record.columns if c not in new.columns]
    extra_cols = [c for c in new.columns if c not in record.columns]
    if missing_cols:
        result.problems.append(f"columns missing from the rerun: {missing_cols}")
    if extra_cols:     # nothing to compare them with: shown, not failed
        result.reported.append(f"columns new in the rerun, not in the record (not compared): "
                               f"{extra_cols}")
    common = [c for c in record.columns if c in new.columns]
    if spec.keys:
        absent = [k for k in spec.keys if k not in common]
        if absent:
            raise ValueError(f"{tolerances.source}: table {stem} declares keys {spec.keys} but "
                             f"{absent} are not columns of both sides; fix the `keys`")
        new_k, rec_k = new.set_index(spec.keys), record.set_index(spec.keys)
        for side, frame in (("rerun", new_k), ("record", rec_k)):
            if frame.index.duplicated().any():
                dup = frame.index[frame.index.duplicated()][0]
                raise ValueError(f"{name}: key {spec.keys} = {dup} repeats in the {side}; "
                                 f"declare keys that name each row once")
        only_rec = rec_k.index.difference(new_k.index, sort=False)
        only_new = new_k.index.difference(rec_k.index, sort=False)
        both = rec_k.index.intersection(new_k.index, sort=False)
        msgs = []
        if len(only_rec):
            msgs.append(f"{len(only_rec)} record rows missing from the rerun "
                        f"(e.g. {_row_labels(rec_k.loc[only_rec[:1]], spec.keys)[0]})")
        if len(only_new):
            msgs.append(f"{len(only_new)} rows not in the record "
                        f"(e.g. {_row_labels(new_k.loc[only_new[:1]], spec.keys)[0]})")
        if msgs:
            if spec.rows_report:
                result.reported.append(f"rows: {'; '.join(msgs)} ({spec.rows_reason})")
            else:
                result.problems += msgs
        new_a, rec_a = new_k.loc[both], rec_k.loc[both]
        columns = [c for c in common if c not in spec.keys]
        labels = _row_labels(rec_a, spec.keys)
    else:
        if len(new) != len(record):
            result.problems.append(f"{len(new)} rows against {len(record)} in the record (rows "
                                   "are matched by position; declare `keys` in the tolerances "
                                   "file if the count may differ)")
        n = min(len(new), len(record))
        new_a = new.iloc[:n].reset_index(drop=True)
        rec_a = record.iloc[:n].reset_index(drop=True)
        columns, labels = common, _row_labels(rec_a, None)
    for column in columns:
        rule = tolerances.rule(spec, column)
        out, within, note = compare_column(column, new_a[column], rec_a[column], labels,
                                           rule, tolerances.default)
        result.out += out
        result.within += within
        if note:
            result.reported.append(note)
    if spec.table_report and (result.problems or result.out):
        shown = result.problems + [_describe(c) for c in result.out[:1]]
        result.reported.append(f"{len(result.problems) + len(result.out)} differences, e.g. "
                               f"{shown[0]} ({spec.table_report})")
        result.problems, result.out = [], []
    if result.problems or result.out:
        result.status = "OUT"
    elif result.within:
        result.status = "within"
    return result


def belongs_to(table: str, notebook: str) -> bool:
    """Whether ``table`` (a CSV file name) is written by ``notebook`` (``NAME.csv`` or
    ``NAME-*.csv``)."""
    stem = Path(table).stem
    return stem == notebook or stem.startswith(notebook + "-")


def verify(tables_dir: Path | str, record: Record, tolerances: Tolerances,
           notebooks: list[str] | None = None) -> list[TableResult]:
    """Every table of the record and of ``tables_dir``, compared (sorted by name).

    With ``notebooks``, only the tables those notebooks write; a table of theirs missing
    from the rerun is then reported (status ``not rerun``), not failed, and a notebook
    none of whose tables is in the rerun raises :class:`ValueError`."""
    tables_dir = Path(tables_dir)
    if not tables_dir.is_dir():
        raise FileNotFoundError(f"--tables {tables_dir} is not a folder: run the notebooks "
                                "first (make reproduce) or pass the folder of CSV tables")
    recorded = set(record.names())
    present = {p.name for p in tables_dir.glob("*.csv")}
    if notebooks:
        for nb in notebooks:
            if not any(belongs_to(t, nb) for t in present):
                names = sorted(p.stem for p in paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
                hint = (f"the notebooks are {', '.join(names)}" if nb not in names else
                        "run it first (python -m scalable_softmax.repro.machinery.runner "
                        f"run {nb})")
                raise ValueError(f"--notebooks {nb}: none of its tables ({nb}.csv or "
                                 f"{nb}-*.csv) is in {tables_dir}; {hint}")
        keep = lambda t: any(belongs_to(t, nb) for nb in notebooks)  # noqa: E731
        recorded = {t for t in recorded if keep(t)}
        present = {t for t in present if keep(t)}
    results = []
    for name in sorted(recorded | present):
        if name not in present:
            optional = tolerances.spec(Path(name).stem).optional
            if notebooks:
                results.append(TableResult(name, status="not rerun"))
            elif optional:
                results.append(TableResult(name, status="absent", reported=[optional]))
            else:
                results.append(TableResult(name, status="missing"))
        elif name not in recorded:
            results.append(TableResult(name, status="new"))
        else:
            new = read_csv_text((tables_dir / name).read_text())
            results.append(compare_tables(name, new, record.read(name), tolerances))
    return results


def is_the_record(tables_dir: Path | str, record: Record) -> bool:
    """True when ``tables_dir`` is the record itself, not a rerun: the same CSV files
    and the same ``PROVENANCE.md`` (commit, date, durations), byte for byte. A rerun by
    ``make reproduce`` writes a new ``PROVENANCE.md`` (its own date and commit), so it is
    never taken for the record, even when every table is identical; a record without
    ``PROVENANCE.md`` is never taken for one either."""
    tables_dir = Path(tables_dir)
    own = tables_dir / "PROVENANCE.md"
    recorded = record.text("PROVENANCE.md")
    if recorded is None or not own.is_file() or own.read_text() != recorded:
        return False
    names = record.names()
    if sorted(p.name for p in tables_dir.glob("*.csv")) != names:
        return False
    return all((tables_dir / name).read_text() == record.text(name) for name in names)


#: what :func:`main` prints when the tables are the record itself
NO_RERUN = (
    "Nothing to compare: {tables} is the committed record itself ({record}: the same "
    "tables and the same PROVENANCE.md, commit {commit}), not a rerun. Make a rerun with "
    "`make reproduce` (every notebook; it writes tables/ and a new PROVENANCE.md), then "
    "run `make verify` again. After rerunning some notebooks (`make "
    "build/executed/full/NAME.ipynb`, which writes their tables), compare theirs with "
    "`make verify NOTEBOOKS=\"NAME ...\"`.")


def kernel_lines(tables_dir: Path | str, record: Record) -> list[str]:
    """What :func:`main` prints first: the BLAS kernel the record ran on and the one of
    the rerun (its ``PROVENANCE.md``, else this machine's): iteration counts move with
    the kernel (params/tolerances.yaml reports them), so a difference there is
    expected when the two differ. A record written before ``PROVENANCE.md`` named its
    kernel says "not recorded"."""
    from scalable_softmax.repro.machinery.blaskernel import describe_blas, recorded_blas

    where = (f"{record.folder}/PROVENANCE.md" if record.folder is not None
             else f"{record.label}:tables/PROVENANCE.md")
    lines = [f"BLAS kernel of the record ({where}): "
             f"{recorded_blas(record.text('PROVENANCE.md'))}"]
    own = Path(tables_dir) / "PROVENANCE.md"
    rerun = recorded_blas(own.read_text()) if own.is_file() else "not recorded"
    if rerun == "not recorded":
        lines.append(f"BLAS kernel of this machine (the rerun's {own} does not name one): "
                     f"{describe_blas()}")
    else:
        lines.append(f"BLAS kernel of the rerun ({own}): {rerun}")
    return lines


def main(argv=None) -> int:
    """The command line; prints one line per table and returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m scalable_softmax.repro.machinery.verify",
        description="Compare the tables of a rerun with the committed record, column by "
                    "column, with the tolerances stated in params/tolerances.yaml.")
    parser.add_argument("--tables", default=str(paths.ROOT / "tables"),
                        help="folder of the rerun's CSV tables (default: the working tree's "
                             "tables/)")
    parser.add_argument("--record", default="HEAD",
                        help="the record: a git revision (its tables/) or a folder of CSV "
                             "tables (default: HEAD)")
    parser.add_argument("--tolerances", default=str(TOLERANCES),
                        help="the declarations (default: params/tolerances.yaml)")
    parser.add_argument("--notebooks", nargs="*", default=None, metavar="NAME",
                        help="compare only the tables these notebooks write (e.g. "
                             "09-ove-toy-2d); default: every table")
    args = parser.parse_args(argv)
    try:
        tolerances = Tolerances.load(args.tolerances)
        record = Record(args.record)
        if not args.notebooks and is_the_record(args.tables, record):
            commit = next((line.split(":", 1)[1].strip()[:12] for line in
                           record.text("PROVENANCE.md").splitlines()
                           if line.startswith("- commit:")), "not named")
            print(NO_RERUN.format(tables=args.tables, record=args.record, commit=commit))
            return 0
        results = verify(args.tables, record, tolerances, args.notebooks or None)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in kernel_lines(args.tables, record):
        print(line)
    for r in results:
        print(r.line())
    failed = [r for r in results if r.failed]
    counts = {s: sum(r.status == s for r in results)
              for s in ("identical", "within", "OUT", "missing", "absent", "new", "not rerun")}
    print(f"{len(results)} tables against {args.record}: {counts['identical']} identical, "
          f"{counts['within']} within tolerance, {counts['OUT']} out of tolerance, "
          f"{counts['missing']} missing, {counts['new']} new"
          + (f", {counts['absent']} absent as declared" if counts["absent"] else "")
          + (f", {counts['not rerun']} not rerun (only {' '.join(args.notebooks)} compared)"
             if args.notebooks else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
