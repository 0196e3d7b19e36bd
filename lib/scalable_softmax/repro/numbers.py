"""Numbers in the README and the docs pages, bound to the tables they quote.

A number quoted in prose or in a markdown table is written with the expression that
computes it from the tables of a run, in an HTML comment just before it (invisible on
GitHub and on the site)::

    Implicit SGD is lowest on <!--= lowest('authors_code_exact') -->6<!--/--> of 7 data sets;
    OVE averages <!--= cell('06-paper-tables-table3', 'authors_code_as_published',
    dataset='Average', method='ove') # .2f -->11.74<!--/--> times Implicit SGD.

(one line each: an expression never spans lines). ``render`` rewrites every shown value
from the tables; ``check`` recomputes them and lists every value that differs (file,
line, expression, shown, computed), so a test can hold the README to the committed
record and ``make reproduce`` can rewrite it after a run::

    python -m scalable_softmax.repro.numbers check  [--tables DIR] [FILE ...]
    python -m scalable_softmax.repro.numbers render [--tables DIR] [FILE ...]

Without files: ``README.md`` and ``docs/*.md``.

The expression is Python, evaluated with these names only:

* ``table(stem)`` -- ``tables/<stem>.csv`` as a :class:`pandas.DataFrame`;
* ``cell(stem, column, **where)`` -- the one value of ``column`` in the rows where every
  ``where`` column equals its value (an error unless exactly one row matches);
* ``rows(stem, **where)`` -- those rows (a DataFrame);
* ``np``, ``len``, ``min``, ``max``, ``sum``, ``abs``, ``round``, ``sorted``, ``int``,
  ``float``, ``str``.

A ``|`` in a shown value is escaped (``\\|``), so that it can stand in a markdown table.

After ``#`` comes a format spec (``.2f``, ``,.0f``, ``.3g``); without one, ``str``.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from scalable_softmax import paths
from scalable_softmax._atomic import atomic_open

__all__ = ["BINDING", "Binding", "bindings", "render_text", "check_files", "render_files",
           "default_files", "main"]

#: ``<!--= EXPR [| FORMAT] -->SHOWN<!--/-->`` on one line
BINDING = re.compile(r"<!--=(?P<expr>.*?)-->(?P<shown>.*?)<!--/-->")


class Binding:
    """One bound number: where it is, its expression and format, what it shows."""

    def __init__(self, file: Path, line: int, expr: str, fmt: str, shown: str):
        self.file, self.line, self.expr, self.fmt, self.shown = file, line, expr, fmt, shown

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


class Tables:
    """The CSV tables of one folder, read once each."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._cache: dict[str, pd.DataFrame] = {}

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

    def namespace(self) -> dict:
        return {"table": self.table, "rows": self.rows, "cell": self.cell, "np": np,
                "len": len, "min": min, "max": max, "sum": sum, "abs": abs, "round": round,
                "sorted": sorted, "int": int, "float": float, "str": str,
                "__builtins__": {}}


def bindings(path: Path) -> list[Binding]:
    """Every bound number of the markdown file ``path``."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        for m in BINDING.finditer(line):
            expr, fmt = _split(m.group("expr"))
            out.append(Binding(Path(path), n, expr, fmt, m.group("shown")))
    return out


def _value(b: Binding, ns: dict) -> str:
    try:
        v = eval(b.expr, ns)  # noqa: S307 -- the project's own documentation
    except Exception as exc:  # noqa: BLE001 -- reported with the place
        raise ValueError(f"{b.where()}: cannot compute {b.expr!r}: {exc}") from None
    try:
        shown = format(v, b.fmt) if b.fmt else str(v)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{b.where()}: format {b.fmt!r} does not fit {v!r}: {exc}") from None
    # a value inside a markdown table cell must not end the cell
    return shown.replace("\\|", "|").replace("|", "\\|")


def render_text(text: str, tables: Tables, name: str = "<text>") -> str:
    """``text`` with every bound number recomputed from ``tables``."""
    ns = tables.namespace()
    lines = text.split("\n")
    for i, line in enumerate(lines):
        def sub(m, i=i):
            expr, fmt = _split(m.group("expr"))
            shown = _value(Binding(Path(name), i + 1, expr, fmt, m.group("shown")), ns)
            return f"<!--={m.group('expr')}-->{shown}<!--/-->"
        lines[i] = BINDING.sub(sub, line)
    return "\n".join(lines)


def default_files() -> list[Path]:
    return [paths.ROOT / "README.md"] + sorted((paths.ROOT / "docs").glob("*.md"))


def check_files(files, tables_dir: Path) -> list[str]:
    """One message per bound number whose shown value differs from the tables'."""
    tables = Tables(tables_dir)
    ns = tables.namespace()
    problems = []
    for f in files:
        for b in bindings(f):
            try:
                want = _value(b, ns)
            except ValueError as exc:
                problems.append(str(exc))
                continue
            if want != b.shown:
                problems.append(f"{b.where()}: shows {b.shown!r}, the tables give {want!r} "
                                f"({b.expr}{' | ' + b.fmt if b.fmt else ''})")
    return problems


def render_files(files, tables_dir: Path) -> list[Path]:
    """Rewrite the bound numbers of ``files`` from the tables; returns the files changed.
    Every value is computed before any file is written (an error changes nothing)."""
    tables = Tables(tables_dir)
    new = {}
    for f in files:
        text = Path(f).read_text()
        out = render_text(text, tables, str(f))
        if out != text:
            new[Path(f)] = out
    for f, text in new.items():
        with atomic_open(f, "w") as fh:
            fh.write(text)
    return list(new)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scalable_softmax.repro.numbers",
                                 description="Check or rewrite the numbers the README and "
                                             "docs quote from the tables.")
    ap.add_argument("command", choices=["check", "render"])
    ap.add_argument("files", nargs="*", type=Path,
                    help="markdown files (default: README.md and docs/*.md)")
    ap.add_argument("--tables", type=Path, default=paths.TABLES,
                    help="folder of the tables (default: tables/)")
    args = ap.parse_args(argv)
    files = args.files or default_files()
    missing = [str(f) for f in files if not Path(f).is_file()]
    if missing:
        print(f"error: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.command == "check":
        problems = check_files(files, args.tables)
        n = sum(len(bindings(f)) for f in files)
        for p in problems:
            print(p)
        print(f"{n - len(problems)} of {n} quoted numbers agree with {args.tables}")
        return 1 if problems else 0
    try:
        changed = render_files(files, args.tables)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"rewrote the quoted numbers of {len(changed)} file(s) from {args.tables}"
          + "".join(f"\n  {f}" for f in changed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
