"""The table of registered raw files, ``lib/scalable_softmax/data/files.toml``: what it
holds is well formed, it is what ``registry`` loads, the wheel ships it, and a malformed
table is a ``ValueError`` naming the file and the entry."""
from __future__ import annotations

import dataclasses
import re
import tomllib

import pytest

from scalable_softmax import paths
from scalable_softmax.data import DataFormatError
from scalable_softmax.data import registry as R

TEXT = R.TABLE.read_text(encoding="utf-8")
FIRST = "mnist/train-images-idx3-ubyte.gz"
FIRST_SHA = R.FILES[FIRST].sha256


def _n_registered() -> int:
    """How many files the table lists (an ``each`` entry counts its items)."""
    doc = tomllib.loads(TEXT)
    return sum(len(e["each"]) if "each" in e else 1 for e in doc["file"])


def test_the_table_is_a_package_file_and_is_what_the_registry_holds():
    assert R.TABLE.name == "files.toml" and R.TABLE.parent.name == "data"
    assert R.read_table(R.TABLE) == (R.FILES, R.DATASET_FILES, R.USER_FILES)
    # the wheel carries it (tests/test_packaging.py builds wheels; this is the declaration)
    pyproject = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())
    assert "files.toml" in pyproject["tool"]["setuptools"]["package-data"][
        "scalable_softmax.data"]


def test_the_table_invariants_hold():
    assert len(R.FILES) == _n_registered(), "a path is registered twice"
    kinds = {"str": str, "int": int, "bool": bool, "tuple": tuple}
    for rel, f in R.FILES.items():
        assert f.path == rel
        assert re.fullmatch("[0-9a-f]{64}", f.sha256), rel
        assert all(re.fullmatch("[0-9a-f]{64}", a) for a in f.alt_sha256), rel
        assert f.content_sha256 is None or re.fullmatch("[0-9a-f]{64}", f.content_sha256)
        assert f.content_md5 is None or re.fullmatch("[0-9a-f]{32}", f.content_md5)
        assert type(f.bytes) is int and f.bytes > 0, rel
        for fld in dataclasses.fields(f):   # tuples stay tuples, None stays None
            value = getattr(f, fld.name)
            allowed = tuple(kinds[k] for k in fld.type.split(" | ") if k != "None")
            assert isinstance(value, allowed) or (value is None and "None" in fld.type)
        assert all(r in R.FILES for r in f.derived_from), rel
    assert R.DATASET_FILES and R.USER_FILES
    for name, roles in R.DATASET_FILES.items():
        assert roles and all(rel in R.FILES for rel in roles.values()), name
    for name, spec in R.USER_FILES.items():
        assert spec["train"] and spec["test"] and spec["how"], name
    # every field of RegisteredFile is one the table may set
    assert set(R._FIELD_TYPES) == {f.name for f in dataclasses.fields(R.RegisteredFile)}


def _broken(tmp_path, old: str, new: str):
    assert old in TEXT, f"the table no longer holds {old!r}: update this test"
    path = tmp_path / "files.toml"
    path.write_text(TEXT.replace(old, new, 1), encoding="utf-8")
    return path


MALFORMED = {
    "missing sha256": (f'sha256 = "{FIRST_SHA}"\n', "",
                       rf"entry 1 \({FIRST}\): missing field\(s\) \['sha256'\]"),
    "short sha256": (FIRST_SHA, FIRST_SHA[:-1],
                     rf"entry 1 \({FIRST}\): field sha256 .*64 lowercase hex"),
    "upper-case sha256": (FIRST_SHA, FIRST_SHA.upper(),
                          rf"entry 1 \({FIRST}\): field sha256 .*64 lowercase hex"),
    "not hex": (FIRST_SHA, "z" * 64, rf"entry 1 \({FIRST}\): field sha256"),
    "zero size": ("bytes = 9719438", "bytes = 0",
                  rf"entry 1 \({FIRST}\): field bytes = 0: not a positive size"),
    "size as a string": ("bytes = 9719438", 'bytes = "9719438"',
                         rf"entry 1 \({FIRST}\): field bytes .*not of type int"),
    "unknown field": (f'sha256 = "{FIRST_SHA}"', f'sha265 = "{FIRST_SHA}"',
                      r"entry 1 .*missing field\(s\) \['sha256'\]; unknown field\(s\) "
                      r"\['sha265'\]"),
    "path twice": ('path = "mnist/train-labels-idx1-ubyte.gz"', f'path = "{FIRST}"',
                   rf"entry 2 \({FIRST}\): this path is registered twice"),
    "bad checksum of an `each` item": (
        "183a8ac7ac5f323d77c85477f9edbedd45ea42bcbc540e9464925bbb58b82de4", "183a",
        r"item 1 of `each` \(authors-results/log-tricks-6f9129b/"
        r"Implicit_AmazonCat_lr_0\.001_prop_data_1\.0\.p\): field sha256"),
    "unregistered role": ('csv = "authors-results/table3-runs-6f9129b.csv"',
                          'csv = "authors-results/table3.csv"',
                          r"\[dataset_files\.authors-results\]: not registered"),
    "unregistered input of a derived file": (
        '"authors-results/log-tricks-6f9129b/Implicit_AmazonCat_lr_0.001_prop_data_1.0.p",',
        '"authors-results/log-tricks-6f9129b/Implicit_AmazonCat.p",',
        r"\[\[file\]\] authors-results/table3-runs-6f9129b\.csv: derived_from names paths "
        r"that are not registered: \['authors-results/log-tricks-6f9129b/Implicit_AmazonCat"),
    "user data set without its format": ('format = "xmlrepo-or-lshtc"\n', "",
                                         r"\[user_files\.wikismall\]: needs train, test"),
    "not TOML": ("[dataset_files.mnist]", "[dataset_files.mnist", "not valid TOML"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_table_is_an_error_naming_the_file_and_the_entry(tmp_path, case):
    old, new, message = MALFORMED[case]
    path = _broken(tmp_path, old, new)
    with pytest.raises(ValueError, match=message) as exc:
        R.read_table(path)
    assert isinstance(exc.value, DataFormatError)
    assert str(exc.value).startswith(f"{path}: "), str(exc.value)
