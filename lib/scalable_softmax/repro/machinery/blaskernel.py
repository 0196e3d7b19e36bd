"""Run a command under another OpenBLAS kernel, and say which kernel actually loads.

OpenBLAS picks its compute kernel for the CPU it runs on, and ``OPENBLAS_CORETYPE``
overrides the choice (many machines set it). Two kernels round differently, so a result
that holds only on the kernel that made the record is not reproducible. ``make test``
therefore runs the BLAS-sensitive smoke notebooks a second time through this module::

    python -m scalable_softmax.repro.machinery.blaskernel --coretype Prescott -- COMMAND [ARGS ...]

It asks :mod:`threadpoolctl`, in a fresh interpreter, which OpenBLAS kernel loads with
the current environment and which with ``OPENBLAS_CORETYPE=<coretype>``, prints both,
and runs ``COMMAND`` with the second. When the two are the same kernel (the machine's
own choice is already that one) it tries the next of :data:`FALLBACK` and fails if
none differs. ``OPENBLAS_CORETYPE`` names x86-64 kernels only: on another architecture
the second run is skipped, saying so, and the exit status is 0.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

__all__ = ["loaded_kernels", "other_kernel_env", "main", "FALLBACK", "describe_blas",
           "recorded_blas", "BLAS_LINE"]

#: the line of ``tables/PROVENANCE.md`` that names the BLAS the record ran on
BLAS_LINE = "- BLAS kernel: "

#: kernels every x86-64 CPU runs, tried in this order after ``--coretype``
FALLBACK = ("Prescott", "Nehalem", "Core2")

_PROBE = ("import json, numpy, scipy.linalg\n"
          "from threadpoolctl import threadpool_info\n"
          "print(json.dumps(sorted({i.get('architecture') or '?' for i in threadpool_info()"
          " if i.get('internal_api') == 'openblas'})))")


def loaded_kernels(env: dict | None = None) -> list[str]:
    """The OpenBLAS kernels (threadpoolctl's ``architecture``) that numpy and scipy load
    in a fresh interpreter with environment ``env`` (default: this one)."""
    done = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"could not ask threadpoolctl which OpenBLAS kernel loads: "
                           f"{done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def describe_blas(info: list[dict] | None = None,
                  coretype: str | None = None) -> str:
    """The BLAS that numpy and scipy use in this process, as threadpoolctl's
    ``threadpool_info`` names it: ``"openblas 0.3.30, kernel Haswell
    (OPENBLAS_CORETYPE not set)"`` (one entry per distinct library; ``info`` and
    ``coretype`` default to this process's)."""
    if info is None:
        import numpy  # noqa: F401  (load the BLAS libraries threadpoolctl lists)
        import scipy.linalg  # noqa: F401
        from threadpoolctl import threadpool_info

        info = threadpool_info()
        coretype = os.environ.get("OPENBLAS_CORETYPE")
    seen = []
    for lib in info:
        if lib.get("user_api") not in (None, "blas"):
            continue
        entry = f"{lib.get('internal_api', '?')} {lib.get('version') or '?'}"
        if lib.get("architecture"):
            entry += f", kernel {lib['architecture']}"
        if entry not in seen:
            seen.append(entry)
    if not seen:
        return "no BLAS library found by threadpoolctl"
    env = f"OPENBLAS_CORETYPE={coretype}" if coretype else "OPENBLAS_CORETYPE not set"
    return "; ".join(seen) + f" ({env})"


def recorded_blas(provenance_text: str | None) -> str:
    """The BLAS a ``PROVENANCE.md`` records (its :data:`BLAS_LINE`), or ``"not
    recorded"`` (a record written before the line existed, or no file)."""
    for line in (provenance_text or "").splitlines():
        if line.startswith(BLAS_LINE):
            return line[len(BLAS_LINE):].strip()
    return "not recorded"


def other_kernel_env(coretype: str, base: dict | None = None):
    """``(env, first, second)``: an environment whose OpenBLAS kernel differs from the
    one ``base`` (default: this process's environment) loads, and the two kernel lists.
    Raises :class:`RuntimeError` when no kernel of ``coretype`` and :data:`FALLBACK`
    differs, or when numpy/scipy load no OpenBLAS."""
    base = dict(os.environ if base is None else base)
    first = loaded_kernels(base)
    if not first:
        raise RuntimeError("numpy and scipy load no OpenBLAS here (threadpoolctl lists none): "
                           "OPENBLAS_CORETYPE cannot choose another kernel")
    for candidate in dict.fromkeys((coretype, *FALLBACK)):
        env = {**base, "OPENBLAS_CORETYPE": candidate}
        second = loaded_kernels(env)
        if second and set(second).isdisjoint(first):
            return env, first, second
    raise RuntimeError(f"OPENBLAS_CORETYPE={coretype} (and {', '.join(FALLBACK)}) load the "
                       f"same kernel as this environment ({', '.join(first)}); pass "
                       "--coretype with a kernel this OpenBLAS knows that differs")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scalable_softmax.repro.machinery.blaskernel",
        description="Run COMMAND under an OpenBLAS kernel other than the one this "
                    "environment loads (x86-64 only; elsewhere it is skipped).")
    parser.add_argument("--coretype", default="Prescott",
                        help="the OPENBLAS_CORETYPE to try first (default: Prescott, which "
                             "every x86-64 CPU runs)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command to run, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        print(f"second OpenBLAS kernel: skipped on {platform.machine()}: OPENBLAS_CORETYPE "
              "selects x86-64 kernels only (the first run above is this machine's test)")
        return 0
    try:
        env, first, second = other_kernel_env(args.coretype)
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    print(f"second OpenBLAS kernel: this environment loads {', '.join(first)}"
          f"{' (OPENBLAS_CORETYPE=' + coretype + ')' if coretype else ''}"
          f"; rerunning with OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']}, which loads "
          f"{', '.join(second)}", flush=True)
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
