"""make test's second OpenBLAS kernel: which kernel loads is asked, not assumed."""
from __future__ import annotations

import os
import platform
import sys

import pytest

from scalable_softmax.repro.machinery import blaskernel

x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                         reason="OPENBLAS_CORETYPE selects x86-64 kernels only")


@x86
def test_another_kernel_loads_and_the_command_runs_under_it(tmp_path, capsys):
    env, first, second = blaskernel.other_kernel_env("Prescott")
    assert first and second and set(first).isdisjoint(second)
    assert blaskernel.loaded_kernels(env) == second
    out = tmp_path / "coretype.txt"
    status = blaskernel.main(["--coretype", "Prescott", "--", sys.executable, "-c",
                              f"import os; open({str(out)!r}, 'w').write("
                              "os.environ['OPENBLAS_CORETYPE'])"])
    assert status == 0
    assert out.read_text() == env["OPENBLAS_CORETYPE"]
    said = capsys.readouterr().out
    assert f"loads {', '.join(first)}" in said and f"loads {', '.join(second)}" in said


@x86
def test_a_coretype_equal_to_the_machines_falls_back_to_another():
    first = blaskernel.loaded_kernels()
    # ask for the kernel this environment already loads: the next fallback is taken
    env = {**os.environ, "OPENBLAS_CORETYPE": "Prescott"}
    _, base, second = blaskernel.other_kernel_env("Prescott", base=env)
    assert set(second).isdisjoint(base)
    assert first  # numpy loads OpenBLAS here


@x86
def test_the_commands_exit_status_is_kept():
    assert blaskernel.main(["--", sys.executable, "-c", "raise SystemExit(3)"]) == 3


def test_skipped_elsewhere_without_running_the_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    marker = tmp_path / "ran"
    status = blaskernel.main(["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    assert status == 0 and not marker.exists()
    assert "skipped on aarch64" in capsys.readouterr().out


def test_no_command_is_an_error():
    with pytest.raises(SystemExit):
        blaskernel.main(["--coretype", "Prescott"])
