"""`make lab`: JupyterLab (pinned, with ipywidgets) serves the collection at notebooks/
without opening a browser and prints the URL to open."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from scalable_softmax import paths

pytest.importorskip("jupyterlab")
pytestmark = pytest.mark.slow


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lab_command(port):
    """The command `make lab` runs, with this interpreter's environment."""
    out = subprocess.run(
        ["make", "-n", "-s", "lab", "-o", ".venv/.installed-stamp",
         f"BIN={Path(sys.executable).parent}", f"LAB_PORT={port}"],
        cwd=paths.ROOT, capture_output=True, text=True, check=True).stdout
    return out.replace("\\\n", " ").strip()


def test_make_lab_command_is_headless_and_opens_the_notebooks():
    cmd = shlex.split(_lab_command(8888))
    assert Path(cmd[0]).name == "jupyter" and cmd[1] == "lab"
    assert "--no-browser" in cmd
    assert f"--ServerApp.root_dir={paths.ROOT}" in cmd
    assert "--LabApp.default_url=/lab/tree/notebooks" in cmd


def test_make_lab_serves_the_collection(tmp_path):
    import ipywidgets  # noqa: F401  (pinned with the lab: tqdm's notebook bars need it)

    port = _free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"), HOME=str(tmp_path))
    proc = subprocess.Popen(["bash", "-c", _lab_command(port)], cwd=paths.ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")),
                              daemon=True)
    reader.start()
    try:
        url = None
        deadline = time.monotonic() + 90
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            m = re.search(rf"(http://127\.0\.0\.1:{port}/lab/tree/notebooks\?token=\w+)",
                          "".join(lines))
            url = m.group(1) if m else None
            time.sleep(0.2)
        assert url, "JupyterLab printed no URL:\n" + "".join(lines)[-3000:]
        token = url.split("token=")[1]

        def get(path):
            req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                         headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()

        status, body = get("/lab/tree/notebooks")
        assert status == 200 and b"JupyterLab" in body
        status, body = get("/api/contents/notebooks")
        listed = {c["name"] for c in json.loads(body)["content"]}
        expected = {p.name for p in paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb")}
        assert expected <= listed
        status, body = get("/api/contents/docs/math.md?content=0")   # the notes too
        assert status == 200
        specs = json.loads(get("/api/kernelspecs")[1])
        assert "python3" in specs["kernelspecs"]
        extensions = json.loads(get("/lab/api/extensions")[1])
        names = {e["name"] for e in extensions}
        assert "jupyter-widgets-jupyterlab-manager" in names     # widgets render in Lab
    finally:
        # the server and the shell that started it: the process group this test made
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_make_installs_lab_site_and_sklearn_from_the_lock():
    import tomllib
    meta = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    assert any(d.startswith("ipywidgets>=") for d in extras["repro"])
    assert any(d.startswith("jupyterlab>=") for d in extras["lab"])
    assert any(d.startswith("scikit-learn>=") for d in extras["sklearn"])
    assert any(d.startswith("scikit-learn>=") for d in extras["test"])
    assert {d.split(">=")[0] for d in extras["site"]} >= {"sphinx", "myst-nb", "furo"}
    makefile = (paths.ROOT / "Makefile").read_text()
    # make venv installs the lock compiled with these extras (tests/test_packaging.py
    # checks that the lock holds them and the venv is the lock)
    m = re.search(r"^VENV_EXTRAS\s*:=\s*(.+)$", makefile, re.M)
    assert m and set(m.group(1).split()) >= {"repro", "test", "lab", "site"}
    assert "pip install --quiet --require-hashes -r $(LOCK)" in makefile
    lock = (paths.ROOT / "requirements.lock").read_text()
    for name in ("jupyterlab", "scikit-learn", "sphinx", "myst-nb", "furo", "ipywidgets"):
        assert re.search(rf"^{name}==", lock, re.M), name
    out = subprocess.run(["make", "-s", "help"], cwd=paths.ROOT, capture_output=True,
                         text=True, check=True).stdout
    for target in ("lab", "site", "site-check"):
        assert re.search(rf"^\s+{target}\s", out, re.M), target


def test_readme_says_how_to_read_and_run_the_notebooks():
    readme = (paths.ROOT / "README.md").read_text()
    m = re.search(r"^## How to read it\n(.*?)(?=^## )", readme, re.M | re.S)
    assert m, "README lacks the section 'How to read it'"
    for needle in ("make lab", "make site", "notebooks/executed/", "build/explore/",
                   "--profile smoke", "build/site/index.html"):
        assert needle in m.group(1), needle


def test_make_help_shows_the_smoke_profile_and_site_check_never_installs_unasked():
    out = subprocess.run(["make", "-s", "help"], cwd=paths.ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert "--profile smoke" in out and "build/explore/" in out
    makefile = (paths.ROOT / "Makefile").read_text()
    recipe = makefile.split("\nsite-check:", 1)[1].split("\n\n", 1)[0]
    install = recipe.index('[ "$(INSTALL)" = 1 ]')
    assert "apt-get" in recipe and recipe.index("apt-get") > install, \
        "site-check may run apt-get only under INSTALL=1"
    assert "make site-check INSTALL=1" in recipe     # the error says how to install


def _site_check(tmp_path, os_release, browser=None):
    """``make site-check`` without building the site (``-o site``), with a PATH of
    /usr/bin and /bin plus a folder holding a stand-in ``browser`` (if any) and a stand-in
    ``python`` that only says what it would run; never INSTALL."""
    fake = tmp_path / "bin"
    fake.mkdir()
    scripts = {"python": "#!/bin/sh\necho \"would run: $*\"\n"}
    if browser:
        scripts[browser] = "#!/bin/sh\nexit 0\n"
    for name, text in scripts.items():
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    (tmp_path / "os-release").write_text(os_release)
    env = {k: v for k, v in os.environ.items() if k not in ("INSTALL", "MAKEFLAGS")}
    env["PATH"] = f"{fake}:/usr/bin:/bin"
    return subprocess.run(["make", "-s", "-o", "site", "site-check", f"BIN={fake}",
                           f"OS_RELEASE={tmp_path / 'os-release'}"], cwd=paths.ROOT,
                          env=env, capture_output=True, text=True)


UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nID_LIKE=debian\n'
DEBIAN = 'NAME="Debian GNU/Linux"\nID=debian\n'


@pytest.mark.parametrize("browser", ["chromium", "chromium-browser", "google-chrome"])
def test_site_check_finds_each_browser_name(tmp_path, browser):
    proc = _site_check(tmp_path, UBUNTU, browser)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "would run: -m scalable_softmax.repro.machinery.site screenshots" in proc.stdout


@pytest.mark.parametrize("os_release, hint", [
    (UBUNTU, "sudo snap install chromium"),
    (DEBIAN, "sudo apt-get install chromium"),
    ("ID=fedora\n", "with your system's package manager"),
])
def test_site_check_hint_fits_the_system(tmp_path, os_release, hint):
    if any(shutil.which(b, path="/usr/bin:/bin")
           for b in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("a browser is installed in /usr/bin or /bin: the hint is not shown")
    proc = _site_check(tmp_path, os_release)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert hint in out and "would run" not in out
    assert "chromium, chromium-browser, google-chrome" in out
    if os_release == UBUNTU:
        assert "apt-get" not in out.split("(the apt package")[0], \
            "on Ubuntu the hint must not send the user to apt-get install chromium"
