"""The race's child processes: :func:`run_isolated` runs jobs in a child (``python -m
scalable_softmax.repro.race.isolate child ...``) with ``RLIMIT_AS`` set to
``memory_cap_gb`` (an allocation beyond it fails at once with ``MemoryError``, reported
with its message), the thread variables set to ``threads``, and a hard wall-clock limit
(the child is killed, its points so far kept). The peak memory is the child's maximum
resident set size from ``os.wait4`` (``ru_maxrss``): the interpreter, the libraries, the
data, the method's state and the evaluations' working memory together; within the child
:func:`.jobs.run_jobs` resets the peak before each job.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from scalable_softmax.repro.race.jobs import Job, run_jobs, write_json

__all__ = ["run_isolated"]


def run_isolated(jobs, *, memory_cap_gb: float = 8.0, wall_seconds: float = 600.0,
                 threads: int = 2, workdir=None) -> dict:
    """Run ``jobs`` (a list of :class:`Job`) in a child process.

    The child sets ``RLIMIT_AS`` to ``memory_cap_gb`` before importing anything heavy,
    runs with ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS`` /
    ``NUMBA_NUM_THREADS`` set to ``threads``, and is killed after ``wall_seconds``.

    Returns ``{"results": [...], "max_rss_bytes", "returncode", "killed", "wall_seconds",
    "log"}``: the results of the jobs that ran (a job cut short by the kill keeps its
    points, with ``status = "killed"`` and the reason), the child's peak resident set
    size (``os.wait4``), and the tail of its output.
    """
    import subprocess

    jobs = [j if isinstance(j, Job) else Job(**j) for j in jobs]
    work = Path(workdir or tempfile.mkdtemp(prefix="peers-"))
    work.mkdir(parents=True, exist_ok=True)
    fd, jobs_path = tempfile.mkstemp(prefix="jobs-", suffix=".json", dir=work)
    os.close(fd)
    out_path = Path(jobs_path).with_name(Path(jobs_path).stem + "-out.json")
    log_path = Path(jobs_path).with_suffix(".log")
    write_json(jobs_path, {"memory_cap_bytes": int(memory_cap_gb * 2 ** 30),
                             "jobs": [asdict(j) for j in jobs]})
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS"):
        env[var] = str(threads)
    lib = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = lib + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "scalable_softmax.repro.race.isolate",
                                 "child", jobs_path, str(out_path)], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
        killed = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > wall_seconds:
                proc.kill()
                killed = True
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    try:
        results = json.loads(out_path.read_text())
    except (OSError, ValueError):
        results = []
    tail = log_path.read_text()[-2000:] if log_path.exists() else ""
    done = len([r for r in results if r.get("status") != "running"])
    for r in results:
        if r.get("status") == "running":
            r["status"] = "killed" if killed else "crashed"
            r["reason"] = (f"killed at the wall-clock limit of {wall_seconds:.0f} s"
                           if killed else f"the child died (exit code {proc.returncode})")
    for j in jobs[len(results):]:
        results.append({"job": asdict(j), "points": [], "info": {},
                        "status": "killed" if killed else "crashed",
                        "reason": (f"not started: the child was killed at the wall-clock "
                                   f"limit of {wall_seconds:.0f} s" if killed else
                                   f"not started: the child died (exit code "
                                   f"{proc.returncode}): {tail[-300:]}")})
    for p in (jobs_path, out_path):
        try:
            os.unlink(p)
        except OSError:
            pass
    return {"results": results, "max_rss_bytes": int(usage.ru_maxrss) * 1024,
            "returncode": proc.returncode, "killed": killed, "wall_seconds": wall,
            "jobs_done": done, "log": tail}


def _child(jobs_path, out_path):
    import resource

    spec = json.loads(Path(jobs_path).read_text())
    cap = int(spec["memory_cap_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    jobs = [Job(**j) for j in spec["jobs"]]
    write_json(out_path, [])
    run_jobs(jobs, out_path)
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 3 and argv[0] == "child":
        return _child(argv[1], argv[2])
    print("usage: python -m scalable_softmax.repro.race.isolate child JOBS.json OUT.json "
          "(used by scalable_softmax.repro.race.isolate.run_isolated)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
