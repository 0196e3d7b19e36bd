"""Checksums, verification cache and ``fetch`` (mirror copy, download fallback, errors)."""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from scalable_softmax import paths
from scalable_softmax.data import ChecksumError, MissingDataError, load_dataset
from scalable_softmax.data import registry as R
from scalable_softmax.data.__main__ import main as cli

MIRROR = paths.mirror_dir()
BIBTEX = [r for r, f in R.FILES.items() if f.dataset == "bibtex"]
needs_mirror = pytest.mark.skipif(
    not all((MIRROR / r).is_file() for r in BIBTEX),
    reason=f"the data mirror {MIRROR} (DATA_MIRROR) lacks the Bibtex files")


def leftovers(folder: Path):
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")
            or p.name.startswith(".download-")]


def test_registry_is_complete_and_consistent():
    inputs = {i for f in R.FILES.values() for i in f.derived_from}
    for rel, f in R.FILES.items():
        assert f.path == rel and len(f.sha256) == 64 and f.bytes > 0
        assert f.origin and f.license and f.dataset
        if f.required:
            # every raw file has a public download; a derived file (the authors' CSV)
            # is built from raw files that have one (tests/test_data_authors.py)
            assert f.urls or f.derived_from, rel
            # read by a loader, or an input of a derived file
            assert rel in inputs or any(rel in roles.values()
                                        for roles in R.DATASET_FILES.values()), rel
    for roles in R.DATASET_FILES.values():
        assert all(rel in R.FILES for rel in roles.values())


def test_data_readme_lists_every_registered_file():
    readme = (paths.ROOT / "data" / "README.md").read_text()
    for rel, f in R.FILES.items():
        assert rel in readme and f.sha256 in readme, rel
    for spec in R.USER_FILES.values():
        assert spec["train"][0] in readme


@needs_mirror
def test_registered_sizes_and_checksums_match_the_mirror():
    for rel in BIBTEX:
        f = R.FILES[rel]
        assert (MIRROR / rel).stat().st_size == f.bytes
        assert R.sha256_file(MIRROR / rel) == f.sha256
        if f.content_sha256:
            assert R.sha256_file(MIRROR / rel, decompress=True) == f.content_sha256


@needs_mirror
def test_fetch_copies_then_skips_and_never_leaves_partial_files(tmp_path, capsys):
    dd = tmp_path / "raw"
    res = R.fetch(["bibtex"], data_dir=dd, mirror=MIRROR, download=False)
    assert {r.path: r.status for r in res} == {r: "copied" for r in BIBTEX}
    for rel in BIBTEX:
        assert R.sha256_file(dd / rel) == R.FILES[rel].sha256
    res = R.fetch(["bibtex"], data_dir=dd, mirror=MIRROR, download=False)
    assert {r.status for r in res} == {"present"}
    assert "4 present" in capsys.readouterr().out.splitlines()[-1]  # incl. the LICENSE
    assert leftovers(dd) == []
    # a corrupt copy in the data dir is detected and replaced from the mirror
    (dd / "bibtex" / "bibtex.xml.gz").write_bytes(b"corrupt")
    res = {r.path: r for r in R.fetch(["bibtex"], data_dir=dd, mirror=MIRROR,
                                       download=False)}
    assert res["bibtex/bibtex.xml.gz"].status == "copied"
    assert R.sha256_file(dd / "bibtex" / "bibtex.xml.gz") == R.FILES["bibtex/bibtex.xml.gz"].sha256


@needs_mirror
def test_fetch_downloads_when_the_mirror_lacks_a_file(tmp_path):
    mirror = tmp_path / "mirror"
    shutil.copytree(MIRROR / "bibtex", mirror / "bibtex")
    (mirror / "bibtex" / "bibtex-test.arff.gz").unlink()
    (mirror / "bibtex" / "bibtex.xml.gz").write_bytes(b"tampered")  # fails verification
    urls = []

    def fake_download(url, tmp_dir):
        urls.append(url)
        name = url.rsplit("/", 1)[-1]
        out = Path(tmp_dir) / "dl"
        # the public home serves the uncompressed file
        with gzip.open(MIRROR / "bibtex" / (name + ".gz"), "rb") as fh:
            out.write_bytes(fh.read())
        return out

    dd = tmp_path / "raw"
    res = {r.path: r for r in R.fetch(["bibtex"], data_dir=dd, mirror=mirror,
                                       downloader=fake_download)}
    assert res["bibtex/bibtex-train.arff.gz"].status == "copied"
    assert res["bibtex/bibtex-test.arff.gz"].status == "downloaded"
    assert res["bibtex/bibtex.xml.gz"].status == "downloaded"
    assert any("tampered" not in t and "does not match" in t
               for t in res["bibtex/bibtex.xml.gz"].tried)
    assert urls == [R.FILES["bibtex/bibtex-test.arff.gz"].urls[0],
                    R.FILES["bibtex/bibtex.xml.gz"].urls[0]]
    # re-compressed here, so the file's own sha256 differs, but its content verifies
    for rel in ("bibtex/bibtex-test.arff.gz", "bibtex/bibtex.xml.gz"):
        R._MEMO.clear()
        assert R.verify_file(dd / rel, rel, data_dir=dd, use_cache=False)
    ds = load_dataset("bibtex", "test", data_dir=dd, cache=False)
    assert ds.N == 2512
    assert leftovers(dd) == []


def test_fetch_fails_clearly_when_a_file_can_be_had_from_nowhere(tmp_path, capsys):
    def offline(url, tmp_dir):
        raise ConnectionError("no network")

    dd, mirror = tmp_path / "raw", tmp_path / "empty-mirror"
    mirror.mkdir()
    with pytest.raises(MissingDataError) as ei:
        R.fetch(["delicious"], data_dir=dd, mirror=mirror, downloader=offline,
                verbose=False)
    msg = str(ei.value)
    for rel in ("delicious/delicious-train.arff.gz", "delicious/delicious.xml.gz"):
        assert str(dd / rel) in msg and str(mirror / rel) in msg
    assert "no network" in msg and R.FILES["delicious/delicious.xml.gz"].urls[0] in msg
    assert "DATA_MIRROR" in msg
    assert not any(p.is_file() for p in dd.rglob("*"))  # nothing half-copied
    rc = cli(["fetch", "--datasets", "delicious", "--data-dir", str(dd), "--mirror",
              str(mirror), "--no-download"])
    assert rc == 1
    assert "downloads disabled" in capsys.readouterr().err


@needs_mirror
def test_interrupted_copy_leaves_nothing(tmp_path, monkeypatch):
    def broken(src, dst, length=0):
        dst.write(b"partial")
        raise OSError("interrupted")

    monkeypatch.setattr(R.shutil, "copyfileobj", broken)
    dd = tmp_path / "raw"
    with pytest.raises(OSError, match="interrupted"):
        R.fetch(["bibtex"], data_dir=dd, mirror=MIRROR, download=False, verbose=False)
    assert not any(p.is_file() for p in dd.rglob("*"))


@needs_mirror
def test_checksum_mismatch_is_an_error_and_reverified_after_a_change(tmp_path):
    dd = tmp_path / "raw"
    R.fetch(["bibtex"], data_dir=dd, mirror=MIRROR, download=False, verbose=False)
    ds = load_dataset("bibtex", data_dir=dd, cache=False)
    assert ds.info["inputs_sha256"]["xml"] == R.FILES["bibtex/bibtex.xml.gz"].sha256
    target = dd / "bibtex" / "bibtex.xml.gz"
    good = target.read_bytes()
    bad = gzip.compress(gzip.decompress(good).replace(b"TAG_2005", b"TAG_2099"))
    target.write_bytes(bad)
    os.utime(target, ns=(1, 1))  # a new mtime: the cached verification no longer applies
    with pytest.raises(ChecksumError) as ei:
        load_dataset("bibtex", data_dir=dd, cache=False)
    assert str(target) in str(ei.value) and "make data" in str(ei.value)


def test_verification_cache_is_keyed_by_size_and_mtime(tmp_path):
    dd = tmp_path / "raw"
    f = dd / "x" / "file.txt"
    f.parent.mkdir(parents=True)
    f.write_text("hello")
    sha = R.sha256_file(f)
    (dd / "SHA256SUMS").write_text(f"{sha}  x/file.txt\n")
    R._MEMO.clear()
    assert R.verify_file(f, "x/file.txt", data_dir=dd) == sha
    assert '"x/file.txt"' in (dd / ".verified.json").read_text()
    R._MEMO.clear()  # a new process: the on-disk record is used
    assert R.verify_file(f, "x/file.txt", data_dir=dd) == sha
    f.write_text("HELLO")  # same size, new mtime
    with pytest.raises(ChecksumError):
        R.verify_file(f, "x/file.txt", data_dir=dd)
    g = dd / "x" / "other.txt"
    g.write_text("abc")
    assert R.verify_file(g, "x/other.txt", data_dir=dd).startswith("unverified:")


def test_table_write_is_atomic(tmp_path):
    import pandas as pd

    from scalable_softmax.data import PAPER_TABLE1
    from scalable_softmax.data.__main__ import _write_table

    df = PAPER_TABLE1.copy()
    for c in ("K", "D", "N"):
        df[c] = df["paper_" + c]
        df[c + "_orig"] = df["paper_" + c + "_orig"]
    df["K_first"] = pd.NA
    df["source"], df["loaded"], df["notes"] = "real", df["name"], ""
    out = _write_table(str(tmp_path / "t" / "01-table1"), df)
    assert [p.name for p in out] == ["01-table1.csv", "01-table1.md"]
    back = pd.read_csv(tmp_path / "t" / "01-table1.csv")
    assert list(back["paper_K"]) == list(PAPER_TABLE1["paper_K"])
    md = (tmp_path / "t" / "01-table1.md").read_text()
    assert "| Wiki-small | 18,207 (28,955) | 10,000 (2,085,164) | 90,737 (342,664) |" in md
    assert leftovers(tmp_path) == []


def test_errors_survive_pickling():  # pytest-xdist ships exceptions between processes
    import pickle

    from scalable_softmax.data import DataFormatError

    for e in (DataFormatError("f.txt", "bad", line=3),
              MissingDataError("gone", files=["a"]),
              ChecksumError("p", "a" * 64, "b" * 64, "delete it")):
        e2 = pickle.loads(pickle.dumps(e))
        assert type(e2) is type(e) and str(e2) == str(e)
    assert pickle.loads(pickle.dumps(DataFormatError("f", "m", offset=5))).offset == 5
