"""`make verify`: a rerun's tables against the committed record, with stated tolerances."""
import shutil

import pandas as pd
import pytest

from scalable_softmax import paths
from scalable_softmax.repro.machinery import verify


@pytest.fixture(scope="module")
def tolerances():
    return verify.Tolerances.load()


@pytest.fixture(scope="module")
def committed():
    """The committed CSV files' text, from git HEAD."""
    return {name: verify.subprocess.run(["git", "show", f"HEAD:tables/{name}"], cwd=paths.ROOT,
                                        capture_output=True, text=True, check=True).stdout
            for name in verify.Record("HEAD").names()}


def _copy_record(out, committed):
    """The committed CSV files, byte for byte, into ``out``."""
    out.mkdir()
    for name, text in committed.items():
        (out / name).write_text(text)
    return out


@pytest.fixture()
def rerun(tmp_path, committed):
    """A copy of the committed tables, as a rerun that changed nothing."""
    return _copy_record(tmp_path / "tables", committed)


@pytest.fixture()
def record_dir(tmp_path, committed):
    """The record as a folder."""
    return _copy_record(tmp_path / "record", committed)


def _edit(folder, name, column, row, fn):
    frame = verify.read_csv_text((folder / name).read_text())
    frame.loc[row, column] = fn(frame.loc[row, column])
    frame.to_csv(folder / name, index=False)


def _run(folder, record="HEAD", capsys=None):
    status = verify.main(["--tables", str(folder), "--record", str(record)])
    return status, capsys.readouterr().out if capsys else ""


def test_committed_tables_are_identical_to_head(record_dir, capsys):
    """The record's own CSV files against HEAD: every table identical."""
    status, out = _run(record_dir, capsys=capsys)
    assert status == 0, out
    lines = [line for line in out.splitlines() if line.endswith(".csv: identical")]
    assert len(lines) == len(verify.Record("HEAD").names()) > 0


def test_one_percent_change_fails_and_names_table_column_row(rerun, capsys):
    _edit(rerun, "09-ove-toy-2d.csv", "train_nll", 2, lambda v: v * 1.01)
    status, out = _run(rerun, capsys=capsys)
    assert status == 1
    line = next(line for line in out.splitlines() if line.startswith("09-ove-toy-2d.csv"))
    assert "OUT of tolerance" in line and "train_nll" in line and "method=Bouchard" in line


def test_one_percent_change_by_position_names_the_row(rerun, capsys):
    _edit(rerun, "06-paper-tables-table3.csv", "authors_code_exact", 1, lambda v: v * 1.01)
    status, out = _run(rerun, capsys=capsys)
    assert status == 1
    line = next(line for line in out.splitlines() if line.startswith("06-paper-tables-table3"))
    assert "OUT of tolerance" in line and "authors_code_exact" in line and "row 2" in line


def test_change_within_tolerance_passes(rerun, capsys):
    # 00's residuals are judged by `holds` against thresholds; the value may move by rounding
    frame = verify.read_csv_text((rerun / "00-derivation-checks.csv").read_text())
    row = frame.index[frame.check == "F-7"][0]
    _edit(rerun, "00-derivation-checks.csv", "value", row, lambda v: v + 2e-9)
    status, out = _run(rerun, capsys=capsys)
    assert status == 0, out
    line = next(line for line in out.splitlines() if line.startswith("00-derivation-checks"))
    assert "within tolerance" in line and "value" in line and "check=F-7" in line


def test_changed_label_fails(rerun, capsys):
    _edit(rerun, "03-learning-rate-tuning-table2.csv", "ove", 0, lambda v: v + " changed")
    status, out = _run(rerun, capsys=capsys)
    assert status == 1
    line = next(line for line in out.splitlines()
                if line.startswith("03-learning-rate-tuning-table2"))
    assert "OUT of tolerance" in line and "column ove" in line


def test_changed_flag_fails(rerun, capsys):
    frame = verify.read_csv_text((rerun / "00-derivation-checks.csv").read_text())
    row = frame.index[frame.check == "F-7"][0]
    _edit(rerun, "00-derivation-checks.csv", "holds", row, lambda v: not v)
    status, out = _run(rerun, capsys=capsys)
    assert status == 1 and "column holds, check=F-7" in out


def test_timing_column_change_is_ignored(rerun, capsys):
    _edit(rerun, "01-instability-demo.csv", "seconds", 0, lambda v: v * 10 + 1)
    status, out = _run(rerun, capsys=capsys)
    assert status == 0, out
    assert "01-instability-demo.csv: identical" in out


def test_iteration_counts_are_reported_not_failed(rerun, capsys):
    _edit(rerun, "09-ove-toy-2d.csv", "iterations", 2, lambda v: v - 21)
    status, out = _run(rerun, capsys=capsys)
    assert status == 0, out
    line = next(line for line in out.splitlines() if line.startswith("09-ove-toy-2d.csv"))
    assert "reported only" in line and "iterations" in line


def test_missing_table_fails(rerun, capsys):
    (rerun / "08-ove-nonparametric.csv").unlink()
    status, out = _run(rerun, capsys=capsys)
    assert status == 1
    assert "08-ove-nonparametric.csv: OUT of tolerance: missing" in out


def test_a_table_declared_optional_may_be_absent(rerun, tmp_path, capsys):
    """02-dataset-run-time is written only when notebook 02 trained some runs itself: a
    rerun without it is reported with the declared reason; a missing table without the
    declaration still fails, and so does an `optional` without a reason."""
    (rerun / "02-dataset-run-time.csv").unlink()
    status, out = _run(rerun, capsys=capsys)
    assert status == 0, out
    line = next(x for x in out.splitlines() if x.startswith("02-dataset-run-time.csv"))
    assert "not in the rerun, which may lack it: written only when" in line
    assert "1 absent as declared" in out
    (rerun / "02-dataset-run.csv").unlink()
    status, out = _run(rerun, capsys=capsys)
    assert status == 1 and "02-dataset-run.csv: OUT of tolerance: missing" in out
    bad = tmp_path / "tolerances.yaml"
    bad.write_text("default: {rel: 1.0e-9, reason: r}\ntables:\n  t:\n    optional: ''\n")
    with pytest.raises(ValueError, match=r"tables.t.optional: write `optional: <reason>`"):
        verify.Tolerances.load(bad)


def test_part_of_the_record(rerun, capsys):
    """make verify NOTEBOOKS=...: only those notebooks' tables; the rest is not rerun."""
    only = tmp = rerun.parent / "part"
    tmp.mkdir()
    for p in rerun.glob("09-ove-toy-2d*.csv"):
        shutil.copy(p, only / p.name)
    status, out = verify.main(["--tables", str(only), "--notebooks", "09-ove-toy-2d"]), \
        capsys.readouterr().out
    assert status == 0, out
    assert "09-ove-toy-2d.csv: " in out and "08-ove-nonparametric" not in out
    # a changed number of the named notebook still fails
    _edit(only, "09-ove-toy-2d.csv", "train_nll", 0, lambda v: v * 1.01)
    status = verify.main(["--tables", str(only), "--notebooks", "09-ove-toy-2d"])
    assert status == 1 and "09-ove-toy-2d.csv: OUT of tolerance" in capsys.readouterr().out
    # a table of a named notebook missing from a partial rerun is reported, not failed
    tables = sorted(p.name for p in rerun.glob("10-ove-classification*.csv"))
    assert len(tables) >= 2
    for name in tables[1:]:
        shutil.copy(rerun / name, only / name)
    status = verify.main(["--tables", str(only), "--notebooks", "10-ove-classification"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"{tables[0]}: not rerun" in out
    # the whole record: the same folder misses tables, and that fails
    assert verify.main(["--tables", str(only)]) == 1
    capsys.readouterr()
    # a named notebook none of whose tables was rerun is an error that says what to do
    status = verify.main(["--tables", str(only), "--notebooks", "08-ove-nonparametric"])
    err = capsys.readouterr().err
    assert status == 2 and "08-ove-nonparametric" in err and "run it first" in err
    status = verify.main(["--tables", str(only), "--notebooks", "09-toy"])
    assert status == 2 and "the notebooks are" in capsys.readouterr().err


def test_missing_row_and_column_fail(rerun, capsys):
    frame = verify.read_csv_text((rerun / "05-formulation-comparison.csv").read_text())
    frame.iloc[:-1].drop(columns=["status"]).to_csv(rerun / "05-formulation-comparison.csv",
                                                     index=False)
    status, out = _run(rerun, capsys=capsys)
    assert status == 1
    line = next(line for line in out.splitlines()
                if line.startswith("05-formulation-comparison.csv"))
    assert "columns missing from the rerun: ['status']" in line and "rows against" in line


def test_a_column_new_in_the_rerun_is_reported_and_a_missing_one_still_fails(rerun, capsys):
    """A table that gained a column (e.g. the claims' seed support) verifies against a
    record without it: the new column is named, not compared; a column the rerun lost
    fails."""
    name = "06-paper-tables-claims.csv"
    frame = verify.read_csv_text((rerun / name).read_text())
    frame.assign(seeds_extra="3 of 3 seeds").to_csv(rerun / name, index=False)
    status, out = _run(rerun, capsys=capsys)
    line = next(line for line in out.splitlines() if line.startswith(name))
    assert status == 0, out
    assert "columns new in the rerun, not in the record (not compared): ['seeds_extra']" in line
    assert "OUT" not in line
    frame.drop(columns="paper").assign(seeds_extra="3 of 3 seeds").to_csv(rerun / name,
                                                                         index=False)
    status, out = _run(rerun, capsys=capsys)
    line = next(line for line in out.splitlines() if line.startswith(name))
    assert status == 1 and "OUT of tolerance" in line
    assert "columns missing from the rerun: ['paper']" in line


def test_keyed_curve_rows_are_reported(rerun, capsys):
    frame = verify.read_csv_text((rerun / "10-ove-classification-paths.csv").read_text())
    frame.iloc[:-3].to_csv(rerun / "10-ove-classification-paths.csv", index=False)
    status, out = _run(rerun, capsys=capsys)
    assert status == 0, out
    assert "3 record rows missing from the rerun" in out


def test_record_folder_and_new_table(rerun, record_dir, capsys):
    shutil.copy(rerun / "09-ove-toy-2d.csv", rerun / "99-extra.csv")
    status, out = _run(rerun, record=record_dir, capsys=capsys)
    assert status == 0, out
    assert "99-extra.csv: new" in out


def test_every_declaration_states_its_reason(tmp_path):
    bad = tmp_path / "tolerances.yaml"
    bad.write_text("default: {rel: 1.0e-9, reason: strict}\n"
                   "tables:\n  t:\n    columns:\n      x: {rel: 0.1}\n")
    with pytest.raises(ValueError, match="tables.t.columns.x.*reason"):
        verify.Tolerances.load(bad)
    bad.write_text("default: {rel: 1.0e-9, reason: strict}\n"
                   "tables:\n  t:\n    columns:\n      x: {ignore: ''}\n")
    with pytest.raises(ValueError, match="needs its reason"):
        verify.Tolerances.load(bad)


def test_bad_record_is_a_clear_error(rerun, capsys):
    status = verify.main(["--tables", str(rerun), "--record", "no-such-revision-or-folder"])
    assert status == 2
    assert "neither a folder nor a git revision" in capsys.readouterr().err


def test_compare_rules_on_a_small_table(tolerances):
    spec_rule = tolerances.rule(tolerances.spec("10-ove-classification"), "iterations")
    assert spec_rule.kind == "report" and spec_rule.reason
    assert tolerances.rule(tolerances.spec("anything"), "train_seconds").kind == "ignore"
    new = pd.DataFrame({"a": ["x", "y"], "v": [1.0, 2.0 * (1 + 5e-10)]})
    rec = pd.DataFrame({"a": ["x", "y"], "v": [1.0, 2.0]})
    result = verify.compare_tables("t.csv", new, rec, tolerances)
    assert result.status == "within"
    result = verify.compare_tables("t.csv", new.assign(v=[1.0, 2.02]), rec, tolerances)
    assert result.status == "OUT" and "column v, row 2 (a=y): 2.02 vs record 2.0" in result.line()


def test_table_level_report_never_fails(tmp_path):
    declared = tmp_path / "tolerances.yaml"
    declared.write_text("default: {rel: 1.0e-9, reason: strict}\n"
                        "tables:\n  curves:\n    report: lengths depend on a wall-clock cap\n")
    tolerances = verify.Tolerances.load(declared)
    rec = pd.DataFrame({"a": ["x", "y", "z"], "v": [1.0, 2.0, 3.0]})
    result = verify.compare_tables("curves.csv", rec.iloc[:2].assign(v=[1.0, 9.0]), rec,
                                   tolerances)
    assert not result.failed and "wall-clock cap" in result.line()
    assert verify.compare_tables("other.csv", rec.iloc[:2], rec, tolerances).failed


def test_smoke_record_is_consistent_with_the_declarations(capsys):
    """The stored smoke tables verify against themselves (keys name each row once)."""
    record = paths.ROOT / "tests" / "smoke-record"
    status, out = _run(record, record=record, capsys=capsys)
    assert status == 0, out
    assert "09-ove-toy-2d.csv: identical" in out


def test_the_kernels_of_both_machines_are_printed(rerun, record_dir, capsys):
    from scalable_softmax.repro.machinery.blaskernel import BLAS_LINE, describe_blas
    # the committed record may predate the kernel line: "not recorded"
    status, out = _run(rerun, capsys=capsys)
    lines = out.splitlines()
    assert status == 0
    assert lines[0].startswith("BLAS kernel of the record (HEAD:tables/PROVENANCE.md): ")
    assert lines[1] == (f"BLAS kernel of this machine (the rerun's {rerun}/PROVENANCE.md "
                        f"does not name one): {describe_blas()}")
    # both named in their PROVENANCE.md
    (record_dir / "PROVENANCE.md").write_text(f"# x\n\n{BLAS_LINE}openblas 0.3.30, kernel "
                                              "Haswell (OPENBLAS_CORETYPE=Haswell)\n")
    (rerun / "PROVENANCE.md").write_text(f"{BLAS_LINE}openblas 0.3.30, kernel SkylakeX "
                                         "(OPENBLAS_CORETYPE not set)\n")
    status, out = _run(rerun, record=record_dir, capsys=capsys)
    lines = out.splitlines()
    assert lines[0] == (f"BLAS kernel of the record ({record_dir}/PROVENANCE.md): openblas "
                        "0.3.30, kernel Haswell (OPENBLAS_CORETYPE=Haswell)")
    assert lines[1] == (f"BLAS kernel of the rerun ({rerun}/PROVENANCE.md): openblas 0.3.30, "
                        "kernel SkylakeX (OPENBLAS_CORETYPE not set)")
    # a record folder without PROVENANCE.md (e.g. tests/smoke-record)
    (record_dir / "PROVENANCE.md").unlink()
    _, out = _run(rerun, record=record_dir, capsys=capsys)
    assert out.splitlines()[0].endswith("/PROVENANCE.md): not recorded")


# -- issue 53, item 5: no rerun, nothing to compare ---------------------------------------

def _with_provenance(folder, text):
    (folder / "PROVENANCE.md").write_text(text)
    return folder


def test_the_record_itself_is_nothing_to_compare(record_dir, capsys):
    """tables/ as committed (PROVENANCE.md included): no "41 identical" for the record
    against itself, but what to do to make a rerun."""
    prov = verify.Record("HEAD").text("PROVENANCE.md")
    status, out = _run(_with_provenance(record_dir, prov), capsys=capsys)
    assert status == 0
    assert out.startswith("Nothing to compare") and "make reproduce" in out
    assert "identical" not in out


def test_a_rerun_that_came_out_identical_is_compared(record_dir, capsys):
    """The same tables with a rerun's own PROVENANCE.md (another date) are a rerun:
    compared table by table, every one identical."""
    prov = verify.Record("HEAD").text("PROVENANCE.md")
    lines = prov.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("- date:"))
    lines[i] = "- date: 2099-01-01T00:00:00+00:00"
    status, out = _run(_with_provenance(record_dir, "\n".join(lines) + "\n"), capsys=capsys)
    assert status == 0 and "Nothing to compare" not in out
    assert sum(line.endswith(".csv: identical") for line in out.splitlines()) == \
        len(verify.Record("HEAD").names())


def test_one_changed_table_or_a_named_notebook_is_compared(record_dir, capsys):
    prov = verify.Record("HEAD").text("PROVENANCE.md")
    folder = _with_provenance(record_dir, prov)
    status, out = _run(folder, capsys=capsys)              # the record itself
    assert "Nothing to compare" in out
    status = verify.main(["--tables", str(folder), "--notebooks", "09-ove-toy-2d"])
    out = capsys.readouterr().out
    assert status == 0 and "Nothing to compare" not in out and "09-ove-toy-2d.csv" in out
    _edit(folder, "09-ove-toy-2d.csv", "train_nll", 2, lambda v: v * 1.01)
    status, out = _run(folder, capsys=capsys)
    assert status == 1 and "Nothing to compare" not in out
