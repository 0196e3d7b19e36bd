"""The authors' recorded results from their public home (issue 31, item 2).

``make data`` obtains the 34 pickles of francoisfagan/Log-tricks @ 6f9129b like every
raw file (data dir, mirror, public URL; sha256 verified) and builds
``authors-results/table3-runs-6f9129b.csv`` from them, byte-identical to the registered
CSV. The pickles are read by a restricted unpickler. Tests that need the real pickles
(``realdata``) take them from the mirror (``DATA_MIRROR``) or the data directory; without
either they raise MissingDataError, which conftest.py reports as skipped with the reason
(an error under CI=true).
"""
from __future__ import annotations

import hashlib
import io
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from scalable_softmax import paths
from scalable_softmax.data import ChecksumError, DataFormatError, MissingDataError
from scalable_softmax.data import authors as A
from scalable_softmax.data import registry as R
from scalable_softmax.data.__main__ import main as cli
from scalable_softmax.repro.fagan.paper import load_recorded

MIRROR = paths.mirror_dir()
CSV = A.CSV_PATH
PICKLES = list(R.FILES[CSV].derived_from)


def _pickle_source() -> Path:
    """A folder holding the 34 pickles (``authors-results/log-tricks-6f9129b/...``): the
    mirror, else the data directory (``make data`` fills it from the public URLs).
    Without either, MissingDataError: skipped with the reason (conftest.py), an error
    under CI=true."""
    for folder in (MIRROR, paths.raw_dir()):
        if all((folder / r).is_file() for r in PICKLES):
            return folder
    raise MissingDataError(f"the authors' pickles {A.PICKLE_DIR}/ are neither in the data "
                           f"mirror {MIRROR} (DATA_MIRROR) nor in the data directory "
                           f"{paths.raw_dir()}; run `make data`")


def _os_system_pickle(command: str) -> bytes:
    """Protocol-0 pickle that calls ``os.system(command)`` when loaded."""
    return b"cos\nsystem\n(V" + command.encode() + b"\ntR."


class _Evil:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        import os

        return os.system, (self.command,)


def _leftovers(folder: Path):
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")
            or p.name.startswith(".download-")]


# --------------------------------------------------------------------------- unpickler
def test_the_os_system_payload_is_live_under_the_plain_unpickler(tmp_path):
    """Control: the payload of the next test does run a command under pickle.loads, so
    its not running under the restricted unpickler means something."""
    marker = tmp_path / "ran-plain"
    pickle.loads(_os_system_pickle(f"touch {marker}"))
    assert marker.is_file()


@pytest.mark.parametrize("make", [
    lambda cmd: _os_system_pickle(cmd),                        # GLOBAL os system
    lambda cmd: pickle.dumps(_Evil(cmd), protocol=3),          # GLOBAL posix system
    lambda cmd: pickle.dumps(_Evil(cmd), protocol=4),          # STACK_GLOBAL
], ids=["os.system-p0", "posix.system-p3", "stack-global-p4"])
def test_a_pickle_naming_os_system_is_refused_and_nothing_runs(tmp_path, make):
    marker = tmp_path / "ran"
    evil = tmp_path / "Implicit_mnist_lr_0.1_prop_data_1.0.p"
    evil.write_bytes(make(f"touch {marker}"))
    with pytest.raises(A.UnsafePickleError) as ei:
        A.load_run(evil.read_bytes(), evil)
    msg = str(ei.value)
    assert str(evil) in msg and "system, which is not allowed" in msg
    assert "Nothing was executed" in msg
    assert not marker.exists()


def test_an_extension_code_for_os_system_is_refused_too(tmp_path):
    """The EXT opcodes (copyreg's extension registry) resolve through find_class too."""
    import copyreg

    marker = tmp_path / "ran"
    cmd = f"touch {marker}".encode()
    payload = (b"\x80\x02\x82\xf0X" + len(cmd).to_bytes(4, "little") + cmd
               + b"\x85R.")                       # EXT1 240, (cmd,), REDUCE
    copyreg.add_extension("posix", "system", 240)
    try:
        with pytest.raises(A.UnsafePickleError, match=r"^ext\.p: .*posix\.system"):
            A.load_run(payload, "ext.p")
    finally:
        copyreg.remove_extension("posix", "system", 240)
    assert not marker.exists()


def test_the_builder_refuses_an_unsafe_pickle_and_writes_no_csv(tmp_path):
    """Even a pickle whose checksum is the registered one (here: a registry made for the
    test) is refused by the unpickler inside ``make data``'s builder."""
    marker = tmp_path / "ran"
    dd = tmp_path / "raw"
    rel = f"{A.PICKLE_DIR}/Umax_mnist_lr_10.0_prop_data_1.0.p"
    (dd / rel).parent.mkdir(parents=True)
    payload = _os_system_pickle(f"touch {marker}")
    (dd / rel).write_bytes(payload)
    inp = R.RegisteredFile(rel, hashlib.sha256(payload).hexdigest(), len(payload),
                           "test", "test", "authors-results")
    with pytest.raises(A.UnsafePickleError, match="os.system"):
        A.build_table3_csv(dd, R.FILES[CSV], [inp])
    assert not marker.exists()
    assert not (dd / CSV).exists() and _leftovers(dd) == []


def _run_pickle(epochs, train, test, **kw) -> bytes:
    return pickle.dumps({"test": np.asarray(test)[None], "train": np.asarray(train)[None],
                         "epochs": np.asarray(epochs)[None]}, **kw)


def test_restricted_unpickler_reads_numpy_arrays_and_the_csv_format(tmp_path):
    """A run pickled here (numpy 2 names numpy._core.multiarray._reconstruct) loads; the
    CSV row has epoch + 1, the lr of the name and %.6g values (nan kept)."""
    payload = _run_pickle([1, 3], [[0.5, 1.23456789], [0.25, np.nan]],
                          [[0.75, 2.0], [1 / 3, 1234567.0]], protocol=3)
    run = A.load_run(payload, "x.p")
    assert run["epochs"].tolist() == [[1, 3]]
    text = A.table3_csv_bytes([("sampled_softmax_wikiSmall_lr_1000.0_prop_data_1.0.p",
                                payload, "x.p")]).decode()
    lines = text.split("\r\n")
    assert lines[0] == ",".join(A.COLUMNS)
    assert lines[1] == ("Results/Complete/Tuned/sampled_softmax_wikiSmall_lr_1000.0_prop_"
                        "data_1.0.p,is,wikismall,1000.0,2,defective,0.5,1.23457,0.75,2")
    assert lines[2].endswith(",4,defective,0.25,nan,0.333333,1.23457e+06")
    assert lines[3] == "" and len(lines) == 4


@pytest.mark.parametrize("obj, what", [
    ({"train": np.array([1, "a"], dtype=object)}, "keys epochs, test, train"),
    ({"train": np.array([[[1, "a"]]], dtype=object), "test": np.zeros((1, 1, 2)),
      "epochs": np.zeros((1, 1), dtype=np.int64)}, "'train' must be a float array"),
    ({"train": np.zeros((1, 2, 2)), "test": np.zeros((1, 2, 2)),
      "epochs": np.zeros((1, 3), dtype=np.int64)}, r"shape \(1, 3, 2\)"),
])
def test_unexpected_content_is_a_format_error_naming_the_file(obj, what):
    with pytest.raises(DataFormatError, match=rf"^f\.p: .*{what}"):
        A.load_run(pickle.dumps(obj, protocol=3), "f.p")


def test_a_truncated_pickle_is_a_format_error_naming_the_file():
    payload = _run_pickle([1], [[0.5, 1.0]], [[0.5, 1.0]], protocol=3)
    with pytest.raises(DataFormatError, match=r"^cut\.p: not a readable pickle"):
        A.load_run(payload[: len(payload) // 2], "cut.p")


# --------------------------------------------------------------------------- registry
def test_every_required_raw_file_has_a_public_url():
    lacking = [rel for rel, f in R.FILES.items()
               if f.required and not f.derived_from and not f.urls]
    assert lacking == [], f"required raw files without a public URL: {lacking}"
    for rel, f in R.FILES.items():
        if f.derived_from:   # built from raw files that are all registered
            assert f.builder and not f.urls, rel
            assert all(R.FILES[i].required and not R.FILES[i].derived_from
                       for i in f.derived_from), rel


def test_the_pickles_are_registered_at_their_public_home():
    assert len(PICKLES) == 34
    base = ("https://raw.githubusercontent.com/francoisfagan/Log-tricks/"
            "6f9129b0dc9449a1fb45c72d7580db3e41fe8a5d/Results/Complete/Tuned/")
    for rel in PICKLES:
        f = R.FILES[rel]
        name = Path(rel).name
        assert rel == f"{A.PICKLE_DIR}/{name}" and f.urls == (base + name,)
        assert "no LICENSE file" in f.license and f.dataset == "authors-results"
    assert sum(R.FILES[r].bytes for r in PICKLES) == 45118


# --------------------------------------------------------------------------- with the pickles
def _pickle_mirror(tmp_path) -> Path:
    """A mirror holding the 34 pickles and nothing else (no CSV)."""
    src = _pickle_source()
    mirror = tmp_path / "mirror"
    for rel in PICKLES:
        (mirror / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, mirror / rel)
    assert not (mirror / CSV).exists()
    return mirror


def _offline(url, tmp_dir):
    raise ConnectionError("no network")


@pytest.mark.realdata
def test_make_data_builds_the_csv_from_a_mirror_without_it(tmp_path, capsys):
    mirror, dd = _pickle_mirror(tmp_path), tmp_path / "raw"
    rc = cli(["fetch", "--datasets", "authors-results", "--data-dir", str(dd),
              "--mirror", str(mirror), "--no-download"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"built       {CSV}" in out and "1 built, 34 copied" in out
    payload = (dd / CSV).read_bytes()
    assert hashlib.sha256(payload).hexdigest() == \
        "eb599dbc9f87dad83bedf88259e5274a6c3fef7e00c7e0a29ecc3401953e8e7a"
    if (MIRROR / CSV).is_file():   # the mirror's own copy, where there is one
        assert payload == (MIRROR / CSV).read_bytes()
    df = load_recorded(R.locate("authors-results", data_dir=dd)["csv"])
    assert len(df) == 850 and df.source_file.nunique() == 34
    assert _leftovers(dd) == []
    # again: everything verifies and is kept
    assert cli(["fetch", "--datasets", "authors-results", "--data-dir", str(dd),
                "--mirror", str(mirror), "--no-download"]) == 0
    assert "35 present" in capsys.readouterr().out


@pytest.mark.realdata
def test_the_pickles_are_downloaded_from_their_urls_when_no_mirror_has_them(tmp_path):
    src, urls = _pickle_source(), []

    def fake_download(url, tmp_dir):   # serves what the public URL serves
        urls.append(url)
        out = Path(tmp_dir) / "dl"
        out.write_bytes((src / A.PICKLE_DIR / url.rsplit("/", 1)[-1]).read_bytes())
        return out

    empty, dd = tmp_path / "empty", tmp_path / "raw"
    empty.mkdir()
    res = {r.path: r.status for r in R.fetch(["authors-results"], data_dir=dd,
                                             mirror=empty, downloader=fake_download,
                                             verbose=False)}
    assert res == {**{r: "downloaded" for r in PICKLES}, CSV: "built"}
    assert urls == [R.FILES[r].urls[0] for r in PICKLES]
    assert R.sha256_file(dd / CSV) == R.FILES[CSV].sha256
    assert _leftovers(dd) == []


@pytest.mark.realdata
def test_a_pickle_with_one_changed_byte_is_refused_and_no_csv_is_written(tmp_path, capsys):
    mirror, dd = _pickle_mirror(tmp_path), tmp_path / "raw"
    bad = mirror / PICKLES[7]
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0x01
    bad.write_bytes(bytes(data))
    with pytest.raises(MissingDataError) as ei:
        R.fetch(["authors-results"], data_dir=dd, mirror=mirror, downloader=_offline,
                verbose=False)
    msg = str(ei.value)
    assert f"{bad}: sha256 {hashlib.sha256(bytes(data)).hexdigest()} does not match" in msg
    assert PICKLES[7] in msg and CSV in msg and "could not be had" in msg
    assert not (dd / PICKLES[7]).exists() and not (dd / CSV).exists()
    assert _leftovers(dd) == []
    assert cli(["fetch", "--datasets", "authors-results", "--data-dir", str(dd),
                "--mirror", str(mirror), "--no-download"]) == 1
    assert str(dd / CSV) in capsys.readouterr().err
    assert not (dd / CSV).exists()


@pytest.mark.realdata
def test_the_builder_rehashes_its_inputs(tmp_path):
    """A pickle changed in the data directory after ``fetch`` verified it is refused by
    the builder's own sha256 check; no CSV is written."""
    mirror, dd = _pickle_mirror(tmp_path), tmp_path / "raw"
    R.fetch(["authors-results"], data_dir=dd, mirror=mirror, download=False, verbose=False)
    (dd / CSV).unlink()
    victim = dd / PICKLES[0]
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0x01
    victim.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match=rf"{victim}: sha256 .*The CSV was not built"):
        A.build_table3_csv(dd, R.FILES[CSV], [R.FILES[r] for r in PICKLES])
    assert not (dd / CSV).exists() and _leftovers(dd) == []


@pytest.mark.realdata
def test_the_restricted_reader_gives_what_the_plain_one_gives():
    src = _pickle_source()
    for rel in PICKLES:
        payload = (src / rel).read_bytes()
        assert R.FILES[rel].sha256 == hashlib.sha256(payload).hexdigest()
        ours = A.load_run(payload, rel)
        theirs = pickle.load(io.BytesIO(payload))   # trusted here: its sha256 verified
        for k in ("train", "test", "epochs"):
            np.testing.assert_array_equal(ours[k], theirs[k])
