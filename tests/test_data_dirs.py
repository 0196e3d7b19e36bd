"""Where the data live, and what a user is told: a checkout keeps them in ``data/``, an
installed library in the user's data and cache directories (tests/test_packaging.py
installs the wheel and loads a data set); the missing-file message names exactly the
files the loader reads, and the loader accepts what the message offers (an uncompressed
download under its own name)."""
from __future__ import annotations

import gzip
import importlib
import shutil

import numpy as np
import pytest

from scalable_softmax import paths
from scalable_softmax.data import ChecksumError, MissingDataError, load_dataset
from scalable_softmax.data import registry as R

cli = importlib.import_module("scalable_softmax.data.__main__")


@pytest.fixture
def installed(monkeypatch, tmp_path):
    """The library as if installed from a wheel: no checkout, HOME in tmp_path."""
    monkeypatch.setattr(paths, "IN_CHECKOUT", False)
    for var in ("SOFTMAX_DATA_DIR", "SOFTMAX_CACHE_DIR", "DATA_MIRROR", "XDG_DATA_HOME",
                "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_checkout_keeps_its_data_in_the_repository(monkeypatch):
    assert paths.IN_CHECKOUT
    monkeypatch.delenv("SOFTMAX_DATA_DIR", raising=False)
    monkeypatch.delenv("SOFTMAX_CACHE_DIR", raising=False)
    assert paths.raw_dir() == (paths.ROOT / "data" / "raw").resolve()
    assert paths.processed_dir() == (paths.ROOT / "data" / "processed").resolve()
    assert paths.fetch_command("mnist").startswith("`make data`")


def test_an_installed_library_uses_the_user_directories(installed, monkeypatch, tmp_path):
    assert paths.raw_dir() == installed / ".local" / "share" / "scalable_softmax" / "raw"
    assert paths.processed_dir() == installed / ".cache" / "scalable_softmax" / "processed"
    assert not paths.raw_dir().is_relative_to(paths.ROOT)
    assert paths.fetch_command("mnist") == "`python -m scalable_softmax.data fetch mnist`"
    monkeypatch.setenv("SOFTMAX_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("SOFTMAX_CACHE_DIR", str(tmp_path / "c"))
    assert paths.raw_dir() == tmp_path / "d" and paths.processed_dir() == tmp_path / "c"


@pytest.mark.parametrize("name", sorted(R.DATASET_FILES))
def test_the_message_names_the_files_the_loader_reads(name, installed, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MissingDataError) as ei:
        R.locate(name, data_dir=empty)
    msg = str(ei.value)
    for rel in R.DATASET_FILES[name].values():
        assert str(empty / rel) in msg
        spec = R.FILES[rel]
        if spec.urls:       # the URL, and the name to save it under
            saved = empty / (rel[:-3] if spec.url_is_raw else rel)
            assert f"{spec.urls[0]}\n    saved as {saved}" in msg
    assert f"python -m scalable_softmax.data fetch {name}" in msg
    assert "make data" not in msg
    assert str(paths.default_raw_dir()) in msg


def _bibtex_dir():
    src = paths.raw_dir() / "bibtex"
    if not all((paths.raw_dir() / r).is_file() for r in R.DATASET_FILES["bibtex"].values()):
        pytest.skip(f"the bibtex files are not in the data directory {paths.raw_dir()}")
    return src


def test_an_uncompressed_download_is_accepted_under_its_own_name(tmp_path):
    """What the message offers: the public URL's content saved as ``bibtex-train.arff``
    (etc.) loads like the registered ``.gz`` files."""
    src = _bibtex_dir()
    by_hand = tmp_path / "raw" / "bibtex"
    by_hand.mkdir(parents=True)
    for rel in R.DATASET_FILES["bibtex"].values():
        gz = paths.raw_dir() / rel
        (by_hand / gz.name[:-3]).write_bytes(gzip.decompress(gz.read_bytes()))
    ds = load_dataset("bibtex", data_dir=tmp_path / "raw", cache=False)
    ref = load_dataset("bibtex", data_dir=src.parent, cache=False)
    assert (ds.X != ref.X).nnz == 0 and np.array_equal(ds.y, ref.y)
    for rel in R.DATASET_FILES["bibtex"].values():      # stored as registered, verified
        assert R.verify_file(tmp_path / "raw" / rel, rel, data_dir=tmp_path / "raw")


def test_an_uncompressed_file_of_other_content_is_refused(tmp_path):
    src = _bibtex_dir()
    dd = tmp_path / "raw"
    (dd / "bibtex").mkdir(parents=True)
    for name in ("bibtex-test.arff.gz", "bibtex.xml.gz"):
        shutil.copy2(src / name, dd / "bibtex" / name)
    (dd / "bibtex" / "bibtex-train.arff").write_text("@relation other\n")
    with pytest.raises(ChecksumError, match=r"bibtex-train\.arff: sha256 .* not the "
                                            r"registered content"):
        load_dataset("bibtex", data_dir=dd, cache=False)
    assert not (dd / "bibtex" / "bibtex-train.arff.gz").exists()


def test_fetch_takes_data_set_names(monkeypatch, tmp_path, capsys):
    calls = []
    monkeypatch.setattr(cli, "fetch", lambda names, **kw: calls.append((names, kw)))
    assert cli.main(["fetch", "bibtex", "mnist", "--data-dir", str(tmp_path)]) == 0
    assert cli.main(["fetch", "--datasets", "20news", "--no-download"]) == 0
    assert cli.main(["fetch"]) == 0
    assert [c[0] for c in calls] == [["bibtex", "mnist"], ["20news"], None]
    assert calls[0][1]["data_dir"] == str(tmp_path) and calls[1][1]["download"] is False
    monkeypatch.undo()
    assert cli.main(["fetch", "nope", "--no-download", "--data-dir", str(tmp_path)]) == 1
    assert "unknown data set 'nope'" in capsys.readouterr().err
