"""Run the notebook collection headlessly with papermill.

Every notebook ``notebooks/NN-slug.ipynb`` has a settings file ``params/NN-slug.yaml``
with two profiles: ``full`` (reproduces the paper; empty means the notebook's own
defaults) and ``smoke`` (tiny data or epochs, for ``make test``)::

    python -m scalable_softmax.notebooks run 00-derivation-checks --profile full
    python -m scalable_softmax.notebooks prepare 00-derivation-checks --profile smoke

``run`` executes with ``-k python3``, an execution timeout and logged output into
``build/executed/<profile>/``; ``prepare`` only injects the parameters (for nbval,
which then executes the prepared copy). A parameter that the notebook's
``parameters`` cell does not define is an error, never silently ignored.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import yaml

from . import paths

KERNEL = "python3"
DEFAULT_TIMEOUT = 3600  # seconds per cell


class NotebookParameterError(ValueError):
    """A parameter given for a notebook does not exist in its ``parameters`` cell."""


def notebook_path(name: str) -> Path:
    path = paths.NOTEBOOKS / f"{name}.ipynb"
    if not path.exists():
        known = sorted(p.stem for p in paths.NOTEBOOKS.glob("*.ipynb"))
        raise FileNotFoundError(f"no notebook {path}; known notebooks: {', '.join(known)}")
    return path


def load_params(name: str, profile: str) -> dict:
    """Parameters of ``profile`` from ``params/<name>.yaml`` ({} if the file or profile
    says nothing)."""
    path = paths.PARAMS / f"{name}.yaml"
    if not path.exists():
        return {}
    with open(path) as fh:
        settings = yaml.safe_load(fh) or {}
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: expected a mapping of profiles (full:, smoke:)")
    unknown = set(settings) - {"full", "smoke"}
    if unknown:
        raise ValueError(f"{path}: unknown profile(s) {sorted(unknown)}; use 'full' and 'smoke'")
    return dict(settings.get(profile) or {})


def check_params(name: str, params: dict) -> None:
    """Raise :class:`NotebookParameterError` if ``params`` names a parameter the
    notebook does not declare."""
    import papermill as pm

    declared = pm.inspect_notebook(str(notebook_path(name)))
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise NotebookParameterError(
            f"params/{name}.yaml: parameter(s) {unknown} are not defined in the "
            f"'parameters' cell of notebooks/{name}.ipynb (declared: {sorted(declared)})"
        )


def _atomic_output(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    return out.with_name(f".{out.stem}.{os.getpid()}.tmp.ipynb")


def prepare(name: str, profile: str, out: Path | None = None) -> Path:
    """Write a copy of the notebook with ``profile``'s parameters injected (not executed)."""
    import papermill as pm

    params = load_params(name, profile)
    check_params(name, params)
    out = out or paths.BUILD / "prepared" / profile / f"{name}.ipynb"
    tmp = _atomic_output(out)
    try:
        pm.execute_notebook(str(notebook_path(name)), str(tmp), parameters=params,
                            prepare_only=True, kernel_name=KERNEL, progress_bar=False)
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def run(name: str, profile: str, out: Path | None = None, timeout: int = DEFAULT_TIMEOUT) -> Path:
    """Execute the notebook with ``profile``'s parameters; returns the executed copy.

    The run's tables and figures are staged and published together with the executed
    copy when the notebook has run to its end, or not at all
    (:mod:`scalable_softmax.publish`); the stages of killed runs are finished first.
    ``SIGTERM`` and ``SIGHUP`` stop the run like ``Ctrl-C``: nothing is published and
    no temporary file is left. On an error the executed copy is kept as
    ``<out>.failed.ipynb``.
    """
    import papermill as pm

    from . import publish
    from .signals import terminate_raises

    params = load_params(name, profile)
    check_params(name, params)
    out = out or paths.BUILD / "executed" / profile / f"{name}.ipynb"
    out.parent.mkdir(parents=True, exist_ok=True)
    for line in publish.recover():
        print(line, file=sys.stderr)
    start = time.perf_counter()
    with terminate_raises(), publish.Stage(name) as stage:
        tmp = stage.dir / f"{name}.executed.ipynb"
        try:
            pm.execute_notebook(str(notebook_path(name)), str(tmp), parameters=params,
                                kernel_name=KERNEL, log_output=True, progress_bar=False,
                                execution_timeout=timeout, cwd=str(paths.NOTEBOOKS))
        except BaseException:
            failed = out.with_name(out.stem + ".failed.ipynb")
            if tmp.exists():
                os.replace(tmp, failed)
                print(f"executed notebook with the error kept in {failed}; no table or "
                      "figure of this run was published", file=sys.stderr)
            raise
        _set_output_path(tmp, out)
        stage.commit(last=(tmp, out))
        _record_duration(name, profile, time.perf_counter() - start)
    return out


def _set_output_path(executed: Path, out: Path) -> None:
    """Record the published path (not the stage's) as papermill's ``output_path``."""
    import json

    nb = json.loads(executed.read_text())
    pm_meta = nb.get("metadata", {}).get("papermill")
    if isinstance(pm_meta, dict):
        pm_meta["output_path"] = str(out)
        executed.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def _record_duration(name: str, profile: str, seconds: float) -> None:
    log = paths.BUILD / "executed" / profile / "durations.yaml"
    data = {}
    if log.exists():
        data = yaml.safe_load(log.read_text()) or {}
    data[name] = round(seconds, 1)
    tmp = log.with_name(f".{log.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(yaml.safe_dump(data, sort_keys=True))
        os.replace(tmp, log)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_provenance(profile: str = "full", out: Path | None = None) -> Path:
    """Write ``PROVENANCE.md`` beside the tables: the commit, date, machine, the
    duration of every notebook's last ``profile`` run (from ``durations.yaml``) and, when
    notebook 02 wrote it beside, its CPU-minutes by method and part."""
    import datetime
    import platform
    import subprocess

    log = paths.BUILD / "executed" / profile / "durations.yaml"
    durations = yaml.safe_load(log.read_text()) if log.exists() else {}
    durations = durations or {}

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=paths.ROOT, capture_output=True,
                                  text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown"

    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--", "lib",
                                                  "notebooks", "params") else ""
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    lines = [
        "# Provenance of the committed figures and tables",
        "",
        f"- commit: {git('rev-parse', 'HEAD')}{dirty}",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"- machine: {platform.node()}, {cpu}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        f"- profile: {profile}",
        "",
        "| notebook | seconds |",
        "|---|---|",
        *[f"| {name} | {secs} |" for name, secs in sorted(durations.items())],
        f"| total | {round(sum(durations.values()), 1)} |",
        "",
    ]
    breakdown = (out or paths.TABLES / "PROVENANCE.md").parent / "02-dataset-run-time.md"
    if breakdown.exists():
        body = breakdown.read_text().split("\n", 1)[1].strip()   # without its title
        lines += ["## Where notebook 02's time goes (CPU-minutes, from "
                  "`02-dataset-run-time.md`)", "", body, ""]
    out = out or paths.TABLES / "PROVENANCE.md"
    tmp = out.with_suffix(".tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalable_softmax.notebooks",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["run", "prepare", "check", "provenance"])
    parser.add_argument("names", nargs="*", default=["all"],
                        help="notebook names (NN-slug) or 'all'")
    parser.add_argument("--profile", default="full", choices=["full", "smoke"])
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT,
                        help="execution timeout per cell, seconds")
    args = parser.parse_args(argv)
    if args.action == "provenance":
        print(write_provenance(args.profile))
        return 0
    names = args.names
    if names == ["all"]:
        names = sorted(p.stem for p in paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
    for name in names:
        if args.action == "check":
            check_params(name, load_params(name, args.profile))
            print(f"{name}: parameters ok")
        elif args.action == "prepare":
            print(prepare(name, args.profile))
        else:
            print(f"running {name} ({args.profile}) ...", flush=True)
            print(run(name, args.profile, timeout=args.timeout))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
