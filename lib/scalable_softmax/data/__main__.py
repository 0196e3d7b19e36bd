"""Command line of the data layer.

``python -m scalable_softmax.data fetch [NAME ...]``  fill and verify the data directory
    (every registered data set, or the ones named: mnist, bibtex, delicious, 20news, ...)
``python -m scalable_softmax.data table1 [--write PREFIX]``  the paper's Table 1 beside ours
``python -m scalable_softmax.data info NAME [--split test]``  load one data set, summarise
``python -m scalable_softmax.data stamp FILE``  write the data's checksums to FILE, only
    if they changed (the Makefile's notebook targets depend on it)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import registry
from .core import DATASETS, format_table1_markdown, load_dataset, paper_table1
from .errors import ChecksumError, DataFormatError, MissingDataError
from .registry import atomic_write_bytes, fetch, verify_file


def _write_table(prefix: str, df) -> list[Path]:
    prefix = Path(prefix)
    csv = prefix.with_name(prefix.name + ".csv")
    md = prefix.with_name(prefix.name + ".md")
    atomic_write_bytes(csv, df.to_csv(index=False).encode())
    atomic_write_bytes(md, ("# Table 1: data sets after preprocessing, paper vs ours\n\n"
                            + format_table1_markdown(df)).encode())
    return [csv, md]


def data_stamp(data_dir=None) -> str:
    """One line per raw file the loaders may read, ``<sha256>  <relative path>`` (or
    ``missing  <path>`` for a registered file that is not there), and the user's
    ``SHA256SUMS``: it changes exactly when the data do. Registered files that do not
    match raise :class:`ChecksumError` naming them."""
    from .. import paths

    data_dir = Path(data_dir).expanduser().resolve() if data_dir is not None \
        else paths.raw_dir()
    # the inputs of a derived file (the authors' pickles) are not read by a loader: the
    # derived file's own sha256 stands for them
    inputs = {r for f in registry.FILES.values() for r in f.derived_from}
    rels = sorted({r for roles in registry.DATASET_FILES.values() for r in roles.values()}
                  | {r for r, f in registry.FILES.items() if f.required and r not in inputs})
    lines = []
    for rel in rels:
        p = data_dir / rel
        lines.append(f"{verify_file(p, rel, data_dir=data_dir)}  {rel}" if p.is_file()
                     else f"missing  {rel}")
    for spec in registry.USER_FILES.values():
        for role in ("train", "test"):
            for rel in spec[role]:
                if (data_dir / rel).is_file():
                    sha = verify_file(data_dir / rel, rel, data_dir=data_dir)
                    lines.append(f"{sha}  {rel}")
    sums = data_dir / "SHA256SUMS"
    if sums.is_file():
        lines.append(f"{verify_file(sums, 'SHA256SUMS', data_dir=data_dir)}  SHA256SUMS")
    return f"# data directory {data_dir}\n" + "\n".join(lines) + "\n"


def write_stamp(target, data_dir=None) -> bool:
    """Write :func:`data_stamp` to ``target`` if it differs from the file's content
    (so that its mtime changes only when the data do); returns whether it was written."""
    target = Path(target)
    text = data_stamp(data_dir)
    try:
        if target.read_text() == text:
            return False
    except OSError:
        pass
    atomic_write_bytes(target, text.encode())
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scalable_softmax.data",
                                 description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="fill the data dir from the mirror or the public homes")
    f.add_argument("names", nargs="*", metavar="NAME",
                   help="data sets to fetch (default: all registered; same as --datasets)")
    f.add_argument("--data-dir", help="default: SOFTMAX_DATA_DIR, else data/raw in a "
                                      "checkout, else the user data directory")
    f.add_argument("--mirror", help="default: DATA_MIRROR (the Makefile sets it)")
    f.add_argument("--no-download", action="store_true", help="never use the network")
    f.add_argument("--datasets", nargs="*", help="default: all registered")
    t = sub.add_parser("table1", help="print the paper's Table 1 beside ours")
    t.add_argument("--write", metavar="PREFIX", help="also write PREFIX.csv and PREFIX.md")
    t.add_argument("--data-dir")
    i = sub.add_parser("info", help="load a data set and print its summary")
    i.add_argument("name", choices=DATASETS)
    i.add_argument("--split", default="train", choices=["train", "test"])
    i.add_argument("--no-cache", action="store_true")
    st = sub.add_parser("stamp", help="write the data's checksums to FILE if they changed")
    st.add_argument("file")
    st.add_argument("--data-dir")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "fetch":
            names = list(args.names) + list(args.datasets or [])
            fetch(names or None, data_dir=args.data_dir, mirror=args.mirror,
                  download=not args.no_download)
        elif args.cmd == "table1":
            df = paper_table1(data_dir=args.data_dir, ours=True)
            print(format_table1_markdown(df))
            if args.write:
                for p in _write_table(args.write, df):
                    print(f"wrote {p}")
        elif args.cmd == "stamp":
            changed = write_stamp(args.file, args.data_dir)
            print(f"data stamp {args.file}: {'updated' if changed else 'unchanged'}")
        elif args.cmd == "info":
            t0 = time.perf_counter()
            ds = load_dataset(args.name, args.split, cache=not args.no_cache)
            print(ds.summary())
            print(f"  loaded in {time.perf_counter() - t0:.2f} s "
                  f"({'cache' if ds.info.get('from_cache') else 'built'})")
    except (MissingDataError, ChecksumError, DataFormatError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
