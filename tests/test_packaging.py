"""The project's set-up promises.

* Two installs: the wheel of ``lib/`` needs only what the library imports (lower bounds,
  no pins, ``Requires-Python >=3.11``), and trains, evaluates, saves and loads a model in
  a fresh virtual environment without any extra; the collection's stack is in extras.
* One lock: ``requirements.lock`` pins every package ``make venv`` installs, each with
  its sha256, compiled from ``pyproject.toml`` (``make lock``); the virtual environment
  the tests run in is exactly the lock; ``environment.yml`` installs the lock.
* CI runs the README's command; ``make help`` lists the main targets.
"""
from __future__ import annotations

import ast
import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from scalable_softmax import paths

ROOT = paths.ROOT
PKG = ROOT / "lib" / "scalable_softmax"
LOCK = ROOT / "requirements.lock"
PEERS_LOCK = ROOT / "requirements-peers.lock"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

#: what the wheel may require without an extra: the distributions the library (all of
#: lib/scalable_softmax but repro/) imports
BASE = {"numba", "llvmlite", "numpy", "scipy", "pandas", "tqdm", "pooch", "platformdirs"}
#: imports of the library that are optional (guarded, with a message naming the extra)
OPTIONAL_IMPORTS = {
    "sklearn": "the `sklearn` extra (scalable_softmax.estimator)",
    "IPython": "present only inside a Jupyter kernel (scalable_softmax.progress)",
    "ipywidgets": "widget progress bars when installed (scalable_softmax.progress)",
}
#: importable only with the collection's extras; absent from a plain install
COLLECTION = ["papermill", "matplotlib", "seaborn", "nbformat", "nbclient", "ipykernel",
              "dask", "distributed", "yaml", "sphinx", "sklearn", "torch"]


# --------------------------------------------------------------------------- the lock
def _lock(path: Path) -> dict[str, tuple[str, Requirement, list[str]]]:
    """``{canonical name: (version, requirement, sha256 hashes)}`` of a lock file."""
    text = path.read_text()
    out = {}
    for entry in re.split(r"\n(?=\S)", text):
        entry = "\n".join(ln for ln in entry.splitlines() if not ln.lstrip().startswith("#"))
        if not entry.strip():
            continue
        spec = entry.split("\\")[0].strip()
        req = Requirement(spec)
        pins = [s for s in req.specifier if s.operator == "=="]
        assert len(pins) == 1 and len(req.specifier) == 1, \
            f"{path.name}: {spec!r} is not pinned with one =="
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})\b", entry)
        name = canonicalize_name(req.name)
        assert name not in out, f"{path.name}: {name} twice"
        out[name] = (pins[0].version, req, hashes)
    return out


def _applies(req: Requirement, env=None) -> bool:
    return req.marker is None or req.marker.evaluate(env or default_environment())


def _installed() -> dict[str, str]:
    """``pip freeze`` of the running environment, without the project itself."""
    out = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True,
                         text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        if not line.strip() or line.startswith("#") or line.startswith("-e "):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        assert m, f"pip freeze: {line!r} is not name==version"
        if canonicalize_name(m.group(1)) != "scalable-softmax":
            got[canonicalize_name(m.group(1))] = m.group(2)
    return got


def _venv_extras() -> list[str]:
    m = re.search(r"^VENV_EXTRAS\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, "Makefile: VENV_EXTRAS (the extras `make venv` installs) not found"
    return m.group(1).split()


def test_every_lock_entry_is_pinned_with_its_sha256():
    for path in (LOCK, PEERS_LOCK):
        lock = _lock(path)
        assert len(lock) > 100, f"{path.name}: only {len(lock)} packages"
        bare = sorted(n for n, (_, _, h) in lock.items() if not h)
        assert not bare, f"{path.name}: no sha256 for {bare}"
        assert path.read_text().splitlines()[1].strip() == "#    make lock", \
            f"{path.name} was not written by `make lock`"


def test_lock_covers_the_venv_exactly():
    """The environment the tests run in (``make venv``: requirements.lock; after
    ``make reproduce-extra`` or ``make bench``, or with PyTorch installed:
    requirements-peers.lock) holds exactly
    the lock's packages at the lock's versions, nothing more or less."""
    got = _installed()
    extra = "torch" in got or any((Path(sys.prefix) / s).exists()
                                  for s in (".peers-stamp", ".bench-stamp"))
    path = PEERS_LOCK if extra else LOCK
    # pip freeze never lists pip's own tools
    want = {n: v for n, (v, req, _) in _lock(path).items() if _applies(req)
            and n not in ("pip", "setuptools", "wheel", "distribute")}
    differ = sorted((n, got[n], want[n]) for n in set(got) & set(want)
                    if Version(got[n]) != Version(want[n]))
    assert {n: Version(v) for n, v in got.items()} == \
        {n: Version(v) for n, v in want.items()}, (
        f"{sys.prefix} differs from {path.name}: "
        f"not in the lock {sorted(set(got) - set(want))}, "
        f"missing {sorted(set(want) - set(got))}, "
        f"other versions {differ}"
        "; rebuild the environment (make venv) or recompile the lock (make lock)")


def test_lock_is_compiled_from_pyproject():
    """Every direct requirement of the base and of the extras `make venv` installs is in
    the lock at a version its specifier admits; the peers lock agrees with the main one
    and adds the `peers` and `bench` extras."""
    main, peers = _lock(LOCK), _lock(PEERS_LOCK)
    extras = PYPROJECT["optional-dependencies"]
    for lock, names in ((main, _venv_extras()), (peers, _venv_extras() + ["peers", "bench"])):
        reqs = [Requirement(r) for r in PYPROJECT["dependencies"]]
        reqs += [Requirement(r) for name in names for r in extras[name]]
        for req in reqs:
            name = canonicalize_name(req.name)
            assert name in lock, f"{req} (pyproject.toml) is not in the lock: run make lock"
            assert req.specifier.contains(lock[name][0], prereleases=True), \
                f"the lock's {name}=={lock[name][0]} does not satisfy {req}: run make lock"
    linux = dict(default_environment(), sys_platform="linux", platform_system="Linux",
                 os_name="posix", platform_machine="x86_64")
    for name, (version, req, _) in main.items():
        if _applies(req, linux):
            assert name in peers and peers[name][0] == version, (
                f"{name}: {version} in {LOCK.name}, {peers.get(name, ('absent',))[0]} in "
                f"{PEERS_LOCK.name}")


def test_environment_yml_installs_the_lock():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    conda = [d for d in deps if isinstance(d, str)]
    pip = [d["pip"] for d in deps if isinstance(d, dict)]
    m = re.search(r"^PY_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    # no version is decided here: Python (the Makefile's), pip, and the lock
    assert conda == [f"python={m.group(1)}", "pip"]
    assert pip == [["--require-hashes", "-r requirements.lock"]]


# --------------------------------------------------------------------------- the wheel
def _library_imports() -> set[str]:
    """Top-level names of the third-party modules lib/scalable_softmax imports outside
    repro/ (lazy imports in functions included)."""
    names = set()
    for path in PKG.rglob("*.py"):
        if "repro" in path.relative_to(PKG).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"scalable_softmax", "__future__"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of the library, built by the README's command (``pip wheel ...`` from
    the repository's root) in a copy of the sources (so that the checkout gets no build
    folders)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "lib", src / "lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.nbi",
                                                  "*.nbc"))
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"^pip wheel (.+)$", readme, re.M)
    assert m, "README.md: no `pip wheel ...` line (how to build the wheel)"
    args = m.group(1).split()
    assert args[-1] == "." and "-w" in args, f"README.md: pip wheel {m.group(1)}"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", *args], cwd=src,
                   check=True)
    out = src / args[args.index("-w") + 1]
    (whl,) = out.glob("scalable_softmax-*.whl")
    assert re.search(rf"^pip install {re.escape(out.name)}/scalable_softmax-\*\.whl$",
                     readme, re.M), "README.md: how to install the wheel"
    return whl


def _metadata(whl: Path):
    with zipfile.ZipFile(whl) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(z.read(name).decode())


def test_base_requirements_are_what_the_library_imports():
    """The base names pyproject.toml declares are the distributions of the modules
    lib/scalable_softmax imports (outside repro/), apart from the optional imports."""
    dists = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["dependencies"]}
    assert dists == BASE
    imported = _library_imports() - set(OPTIONAL_IMPORTS)
    assert imported == BASE, (
        f"the library imports {sorted(imported - BASE)} without declaring them, or "
        f"declares {sorted(BASE - imported)} without importing them: "
        "update pyproject.toml's dependencies (and BASE here), or guard an optional import")


def test_wheel_requires_only_the_library_with_lower_bounds(wheel):
    meta = _metadata(wheel)
    assert meta["Requires-Python"] == ">=3.11"
    base, extras = [], {}
    for line in meta.get_all("Requires-Dist"):
        req = Requirement(line)
        m = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", str(req.marker or ""))
        if m:
            extras.setdefault(m.group(1), []).append(req)
        else:
            base.append(req)
    assert {canonicalize_name(r.name) for r in base} == BASE
    for req in base:
        ops = sorted(s.operator for s in req.specifier)
        assert ops == [">="], f"the wheel requires {req}: a lower bound only, please"
    assert set(extras) >= {"repro", "dask", "sklearn", "lab", "site", "peers", "test",
                           "bench"}
    needed = {canonicalize_name(r.name) for reqs in extras.values() for r in reqs}
    assert {"papermill", "matplotlib", "dask", "distributed", "nbformat"} <= needed
    assert not {"papermill", "matplotlib", "dask", "distributed", "nbformat"} & \
        {canonicalize_name(r.name) for r in base}


#: run inside the fresh environment: train, evaluate, save, load, a surrogate data set
_SCRIPT = textwrap.dedent("""
    import importlib.util, json, sys
    from pathlib import Path
    import numpy as np
    import scipy.sparse as sp
    import scalable_softmax
    from scalable_softmax import FitResult, evaluate, fit, load_dataset

    out = Path(sys.argv[1])
    rng = np.random.default_rng(0)
    N, D, K = 300, 20, 5
    centres = rng.normal(size=(K, D))
    y = rng.integers(0, K, size=N)
    Z = centres[y] + rng.normal(size=(N, D))
    X = sp.csr_matrix(Z / np.linalg.norm(Z, axis=1, keepdims=True))
    res = fit(X, y, "umax", lr=0.5, epochs=5, K=K, seed=0, progress=False,
              eval_sets={"train": (X, y)})
    ev = evaluate(X, y, res)
    path = res.save(out / "model.npz")
    back = FitResult.load(path)
    ds = load_dataset("eurlex-surrogate", scale=0.02, cache=False)
    print(json.dumps({
        "module": scalable_softmax.__file__,
        "log_loss": ev.log_loss, "error": ev.error, "n_rows": ev.n_rows,
        "history_log_loss": float(res.history["train_log_loss"].dropna().iloc[-1]),
        "same_W": bool(np.array_equal(back.W, res.W)),
        "same_predictions": bool(np.array_equal(back.predict(X), res.predict(X))),
        "surrogate": [int(ds.X.shape[0]), int(ds.X.shape[1]), int(ds.K)],
        "importable": sorted(m for m in sys.argv[2:] if importlib.util.find_spec(m)),
    }))
""")


def _pins(versions: str) -> str:
    """Constraints for the base requirements: the lock's versions, or each lower bound
    of pyproject.toml (the oldest releases the library claims to work with)."""
    if versions == "lock":
        return "".join(f"{n}=={v}\n" for n, (v, req, _) in _lock(LOCK).items()
                       if _applies(req))
    out = ""
    for r in PYPROJECT["dependencies"]:
        req = Requirement(r)
        (low,) = [s.version for s in req.specifier if s.operator == ">="]
        out += f"{req.name}=={low}\n"
    return out


#: the environment variables a test's subprocess must not inherit: the checkout's path,
#: the venv, and the data and cache directories of the tests
_NOT_INHERITED = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "SOFTMAX_DATA_DIR",
                  "SOFTMAX_CACHE_DIR", "DATA_MIRROR", "XDG_DATA_HOME", "XDG_CACHE_HOME")


def _install(wheel: Path, tmp_path: Path, versions: str):
    """A fresh virtual environment under ``tmp_path`` (outside the checkout) with the
    wheel and its base requirements at ``versions`` (from the configured index, pip's
    find-links or its cache); returns ``(python, env, pins)``. Skips when pip cannot
    install them offline (an error under CI)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    pins = tmp_path / "constraints.txt"
    pins.write_text(_pins(versions))
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba-cache")
    env["HOME"] = str(tmp_path / "home")          # platformdirs' user directories
    got = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "-c", str(pins),
                          str(wheel)], env=env, cwd=tmp_path, capture_output=True, text=True)
    if got.returncode:
        msg = f"pip could not install the wheel with {pins.read_text()!r}:\n{got.stderr[-3000:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg + "\n(offline? under CI this is an error)")
    return py, env, pins


@pytest.mark.slow
@pytest.mark.parametrize("versions", ["lock", "floors"])
def test_wheel_alone_trains_evaluates_saves_and_loads(wheel, tmp_path, versions):
    """A fresh virtual environment with the wheel and its base requirements only (at the
    lock's versions, or at pyproject.toml's lower bounds; from the configured index or
    pip's cache): the library trains, evaluates, saves and loads a model and builds a
    surrogate data set, and none of the collection's packages is there."""
    py, env, pins = _install(wheel, tmp_path, versions)
    venv = py.parent.parent
    env["SOFTMAX_CACHE_DIR"] = str(tmp_path / "processed")
    installed = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True,
                               text=True, check=True, env=env).stdout
    names = {canonicalize_name(ln.split("==")[0]) for ln in installed.split()}
    assert BASE <= names
    assert not names & {canonicalize_name(m) for m in COLLECTION + ["scikit-learn", "pyyaml"]}
    want = {canonicalize_name(ln.split("==")[0]): Version(ln.split("==")[1])
            for ln in pins.read_text().split()}
    have = {canonicalize_name(ln.split("==")[0]): Version(ln.split("==")[1])
            for ln in installed.split() if "==" in ln}
    assert {n: have[n] for n in BASE} == {n: want[n] for n in BASE}
    run = subprocess.run([str(py), "-c", _SCRIPT, str(tmp_path), *COLLECTION],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(got["module"]).resolve().is_relative_to(venv.resolve())
    assert got["importable"] == []
    assert got["n_rows"] == 300 and 0.0 <= got["error"] < 0.8
    # it learned: from log(5) (W = 0, the uniform model) to well below
    assert 0.0 < got["log_loss"] < 0.5 * np.log(5)
    assert 0.0 < got["history_log_loss"] < 0.5 * np.log(5)
    assert got["same_W"] and got["same_predictions"]
    assert min(got["surrogate"]) > 0


#: run inside the installed library's environment, outside the checkout: where the data
#: and the cache go, and what a user is told to run
_DATA_SCRIPT = textwrap.dedent("""
    import json, sys
    from scalable_softmax import load_dataset, paths
    from scalable_softmax.data import MissingDataError

    out = {"in_checkout": paths.IN_CHECKOUT, "raw": str(paths.raw_dir()),
           "processed": str(paths.processed_dir())}
    try:
        load_dataset("bibtex", cache=False)
    except MissingDataError as exc:
        out["missing"] = str(exc)
    if len(sys.argv) > 1:
        tr = load_dataset("eurlex", max_features=4)
        again = load_dataset("eurlex", max_features=4)
        out["eurlex"] = [tr.N, tr.D, tr.K, bool(again.info.get("from_cache"))]
    print(json.dumps(out))
""")

#: a small data set in the XMLRepository format, read by the ``eurlex`` entry of the
#: registry (a user's own copy): header ``N D K``, then ``labels feature:value ...``
_XMLREPO_TRAIN = "6 5 4\n0 0:1 4:2\n1 1:1 0:1\n2 2:3\n3 3:1 4:1\n0 0:2\n1 4:1\n"
_XMLREPO_TEST = "3 5 4\n0 0:1\n2 2:1 4:1\n1 1:2\n"


def _tree(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*")
            if p.is_file()}


@pytest.mark.slow
def test_installed_wheel_keeps_its_data_outside_its_install(wheel, tmp_path):
    """The wheel in a fresh venv outside the checkout: the data directory and the cache
    are the user's (platformdirs, under HOME) or SOFTMAX_DATA_DIR / SOFTMAX_CACHE_DIR,
    never the install; a missing file is explained with the command a wheel user has
    (no `make data`); a data set is loaded from a data directory filled by hand, and
    nothing is written inside the install. The repro package asks for its extra."""
    py, env, _ = _install(wheel, tmp_path, "lock")
    venv = py.parent.parent
    home = Path(env["HOME"])
    before = _tree(venv)
    # defaults: the user's data and cache directories
    run = subprocess.run([str(py), "-c", _DATA_SCRIPT], capture_output=True, text=True,
                         env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["in_checkout"] is False
    assert got["raw"] == str(home / ".local" / "share" / "scalable_softmax" / "raw")
    assert got["processed"] == str(home / ".cache" / "scalable_softmax" / "processed")
    missing = got["missing"]
    assert f"{got['raw']}/bibtex/bibtex-train.arff.gz" in missing
    assert "python -m scalable_softmax.data fetch bibtex" in missing
    assert "make data" not in missing
    # a data directory filled by the user, named by SOFTMAX_DATA_DIR; the cache in the
    # user cache directory
    data = tmp_path / "my-data"
    (data / "eurlex").mkdir(parents=True)
    (data / "eurlex" / "eurlex_train.txt").write_text(_XMLREPO_TRAIN)
    (data / "eurlex" / "eurlex_test.txt").write_text(_XMLREPO_TEST)
    run = subprocess.run([str(py), "-c", _DATA_SCRIPT, "load"], capture_output=True,
                         text=True, env=dict(env, SOFTMAX_DATA_DIR=str(data)), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["raw"] == str(data)
    from scalable_softmax.data import load_dataset  # the checkout's library, same files
    here = load_dataset("eurlex", data_dir=data, cache=False, max_features=4)
    assert got["eurlex"] == [here.N, here.D, here.K, True]   # built, cached, read back
    cached = _tree(home / ".cache" / "scalable_softmax" / "processed")
    assert any(name.startswith("eurlex-train") for name in cached), cached
    # nothing was written inside the install
    assert _tree(venv) == before
    # the collection's machinery says which extra it needs
    run = subprocess.run([str(py), "-m", "scalable_softmax.repro.machinery.runner", "--help"],
                         capture_output=True, text=True, env=env, cwd=tmp_path)
    assert run.returncode != 0
    assert "'repro' extra" in run.stderr and "scalable_softmax[repro]" in run.stderr
    assert "PyYAML" in run.stderr


# --------------------------------------------------------------------------- the rest
def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^make test$", ci, re.M), ".ci/run must call `make test`"
    assert "make test" in readme and "make reproduce" in readme


def test_make_help_lists_the_main_targets():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    for target in ("reproduce", "test", "data", "bench", "lock", "help"):
        assert re.search(rf"^\s+{target}\s", out, re.M), f"`make help` does not list {target}"
