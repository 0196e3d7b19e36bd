"""Data files that lie (issue 13, point 4): ``make data`` hashes every file again, a
verification failure names the file and says what to run, and truncated or corrupt
files fail with the file's name. No real data needed (the files are made here)."""
from __future__ import annotations

import gzip
import hashlib
import os

import pytest

import faultlib as fl
from scalable_softmax.data import ChecksumError, DataFormatError, MissingDataError, load_dataset
from scalable_softmax.data import registry as R
from scalable_softmax.data.__main__ import main as cli
from scalable_softmax.data.__main__ import write_stamp

CONTENT = b"one registered file\n" * 50


@pytest.fixture
def fake_registry(tmp_path, monkeypatch):
    """A registry with one data set, "fake", of one file, and a mirror holding it."""
    rel = "fake/a.txt"
    spec = R.RegisteredFile(rel, hashlib.sha256(CONTENT).hexdigest(), len(CONTENT),
                            "made by the test", "none", "fake")
    monkeypatch.setattr(R, "FILES", {rel: spec})
    monkeypatch.setattr(R, "DATASET_FILES", {"fake": {"a": rel}})
    monkeypatch.setattr(R, "USER_FILES", {})
    R._MEMO.clear()
    mirror = tmp_path / "mirror"
    (mirror / "fake").mkdir(parents=True)
    (mirror / rel).write_bytes(CONTENT)
    return rel, tmp_path / "raw", mirror


def _flip_one_byte_keeping_size_and_mtime(path, offset=5):
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def test_make_data_rehashes_and_replaces_a_file_with_a_flipped_byte(fake_registry, capsys):
    rel, raw, mirror = fake_registry
    got = R.fetch(["fake"], data_dir=raw, mirror=mirror, download=False)
    assert [r.status for r in got] == ["copied"]
    assert [r.status for r in R.fetch(["fake"], data_dir=raw, mirror=mirror,
                                      download=False)] == ["present"]
    _flip_one_byte_keeping_size_and_mtime(raw / rel)
    capsys.readouterr()
    got = R.fetch(["fake"], data_dir=raw, mirror=mirror, download=False)
    out = capsys.readouterr().out
    assert [r.status for r in got] == ["copied"], out    # not "present"
    assert f"BAD         {rel}" in out and "does not match" in out
    assert (raw / rel).read_bytes() == CONTENT


def test_a_bad_file_that_cannot_be_replaced_is_an_error_naming_it(fake_registry, capsys):
    rel, raw, mirror = fake_registry
    R.fetch(["fake"], data_dir=raw, mirror=mirror, download=False)
    _flip_one_byte_keeping_size_and_mtime(raw / rel)
    (mirror / rel).unlink()
    with pytest.raises(MissingDataError) as err:
        R.fetch(["fake"], data_dir=raw, mirror=mirror, download=False)
    msg = str(err.value)
    assert str(raw / rel) in msg and "does not match" in msg and "DATA_MIRROR" in msg
    # the command line (make data) says it and fails
    assert cli(["fetch", "--datasets", "fake", "--data-dir", str(raw), "--mirror",
                str(mirror), "--no-download"]) == 1
    err_out = capsys.readouterr().err
    assert str(raw / rel) in err_out


def test_loading_a_pinned_file_changed_behind_the_cache_raises_naming_it(tmp_path):
    """The verification cache does not trust size and mtime alone: a user's pinned
    file (SHA256SUMS) with a flipped byte fails verification, naming the file."""
    raw = tmp_path / "raw"
    train = fl.write_xmlrepo(raw / "eurlex" / "eurlex_train.txt", seed=0)
    test = fl.write_xmlrepo(raw / "eurlex" / "eurlex_test.txt", N=50, seed=1)
    (raw / "SHA256SUMS").write_text(
        f"{R.sha256_file(train)}  eurlex/eurlex_train.txt\n"
        f"{R.sha256_file(test)}  eurlex/eurlex_test.txt\n")
    cache = tmp_path / "processed"
    load_dataset("eurlex", data_dir=raw, cache_dir=cache)        # verified, remembered
    _flip_one_byte_keeping_size_and_mtime(train, offset=len(train.read_bytes()) // 2)
    with pytest.raises(ChecksumError, match=rf"{train}.*SHA256SUMS"):
        load_dataset("eurlex", data_dir=raw, cache_dir=cache)


def _gzip_user_files(raw):
    for split, n, seed in (("train", 200, 0), ("test", 50, 1)):
        plain = fl.write_xmlrepo(raw / "eurlex" / f"eurlex_{split}.txt", N=n, seed=seed)
        gz = plain.with_suffix(".txt.gz")
        gz.write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    return raw / "eurlex" / "eurlex_train.txt.gz"


@pytest.mark.parametrize("verify", [False, True])
def test_a_truncated_gzip_file_fails_with_its_name(tmp_path, verify):
    raw = tmp_path / "raw"
    gz = _gzip_user_files(raw)
    gz.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])
    with pytest.raises(DataFormatError, match=rf"{gz}: cannot decompress.*truncated or "
                                              r"corrupt.*make data"):
        load_dataset("eurlex", data_dir=raw, cache=False, verify=verify)


def test_a_corrupt_gzip_file_fails_with_its_name(tmp_path):
    raw = tmp_path / "raw"
    gz = _gzip_user_files(raw)
    data = bytearray(gz.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 40):         # garble the stream
        data[i] ^= 0x5A
    gz.write_bytes(bytes(data))
    with pytest.raises(DataFormatError, match=rf"{gz}: cannot decompress"):
        load_dataset("eurlex", data_dir=raw, cache=False, verify=False)


def test_the_data_stamp_changes_exactly_when_the_data_do(fake_registry, tmp_path):
    rel, raw, mirror = fake_registry
    R.fetch(["fake"], data_dir=raw, mirror=mirror, download=False)
    stamp = tmp_path / "data.stamp"
    assert write_stamp(stamp, raw)
    first = stamp.read_text()
    assert R.FILES[rel].sha256 in first
    mtime = stamp.stat().st_mtime_ns
    assert not write_stamp(stamp, raw) and stamp.stat().st_mtime_ns == mtime
    # a user drops in a copy of EURLex: the stamp changes (the notebooks rerun)
    fl.write_xmlrepo(raw / "eurlex" / "eurlex_train.txt", seed=0)
    fl.write_xmlrepo(raw / "eurlex" / "eurlex_test.txt", seed=1)
    from scalable_softmax.data import registry

    registry.USER_FILES.update({"eurlex": {"train": ["eurlex/eurlex_train.txt"],
                                           "test": ["eurlex/eurlex_test.txt"]}})
    assert write_stamp(stamp, raw) and "eurlex/eurlex_train.txt" in stamp.read_text()
    second = stamp.read_text()
    fl.write_xmlrepo(raw / "eurlex" / "eurlex_train.txt", seed=5)    # replaced
    assert write_stamp(stamp, raw) and stamp.read_text() != second
