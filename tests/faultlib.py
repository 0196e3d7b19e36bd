"""Helpers of the fault tests: processes marked by an environment token, leftovers."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

TOKEN_VAR = "SOFTMAX_FAULT_TEST_TOKEN"


def new_token() -> str:
    return uuid.uuid4().hex


def marked_processes(token: str) -> list[tuple[int, str]]:
    """``(pid, command line)`` of every live process whose environment holds the token
    (children inherit it: the runner, the kernel, pool workers, trackers)."""
    found = []
    needle = f"{TOKEN_VAR}={token}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
            if needle not in env.split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":           # a zombie is dead (waiting for its parent's wait)
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
        except OSError:
            continue
        found.append((int(entry.name), cmd))
    return found


def wait_until_gone(token: str, timeout: float = 15.0) -> list[tuple[int, str]]:
    """Wait for every marked process to end; returns those still alive at the timeout
    (killed then, so that a failing test leaves nothing behind either)."""
    deadline = time.monotonic() + timeout
    left = marked_processes(token)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = marked_processes(token)
    for pid, _ in left:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    return left


def start(code: str, token: str, cwd: Path, **env) -> subprocess.Popen:
    """Run ``python -c code`` with the token in its environment."""
    full = dict(os.environ, **{TOKEN_VAR: token}, **{k: str(v) for k, v in env.items()})
    return subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 120.0, what: str = ""):
    """Poll ``predicate()`` until true; fail if the process ends first or on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"the process ended (status {proc.returncode}) before "
                                 f"{what}:\n{out}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"timed out waiting for {what}")


def temp_files(*folders: Path) -> list[Path]:
    """Temporary files (``*.tmp``, ``*.tmp.*``) anywhere under the folders."""
    out = []
    for folder in folders:
        if folder.exists():
            out += [p for p in folder.rglob("*") if p.name.endswith(".tmp")
                    or ".tmp." in p.name]
    return out


def joblib_shm(pid: int) -> list[Path]:
    """joblib's shared-memory folders of process ``pid``."""
    shm = Path("/dev/shm")
    return list(shm.glob(f"joblib_memmapping_folder_{pid}_*")) if shm.is_dir() else []


def write_xmlrepo(path: Path, N: int = 200, D: int = 30, K: int = 6, seed: int = 0) -> Path:
    """A small random file in the Extreme Classification Repository format
    (``N D K`` header, then ``labels feature:value ...`` lines)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lines = [f"{N} {D} {K}"]
    for i in range(N):
        labels = sorted(rng.choice(K, size=int(rng.integers(1, 3)), replace=False))
        labels[0] = i % K                    # every class is a first label somewhere
        labels = sorted(set(labels), key=lambda v: v != i % K)
        feats = sorted(rng.choice(D, size=int(rng.integers(2, 6)), replace=False))
        lines.append(",".join(map(str, labels)) + " "
                     + " ".join(f"{f}:{rng.uniform(0.1, 1):.4f}" for f in feats))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
