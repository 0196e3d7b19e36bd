"""Run the notebook collection headlessly with papermill.

Every notebook ``notebooks/NN-slug.ipynb`` has a settings file ``params/NN-slug.yaml``
with two profiles: ``full`` (reproduces the paper: every parameter, equal to the
defaults of the notebook's ``parameters`` cell) and ``smoke`` (changes to ``full`` for
tiny data or epochs, for ``make test``)::

    python -m scalable_softmax.repro.machinery.runner run 00-derivation-checks --profile smoke
    python -m scalable_softmax.repro.machinery.runner run 00-derivation-checks --profile full
    python -m scalable_softmax.repro.machinery.runner prepare 00-derivation-checks --profile smoke
    python -m scalable_softmax.repro.machinery.runner run 09-ove-toy-2d -p n_per_class 20 -p seed 3

``run`` executes with ``-k python3``, an execution timeout and logged output into
``build/executed/<profile>/``; ``prepare`` only injects the parameters (for nbval,
which then executes the prepared copy). ``-p NAME VALUE`` overrides one parameter
of the chosen profile (the value is read as YAML, as papermill's ``-y``: ``-p epochs
3``, ``-p datasets '[bibtex, mnist]'``). A parameter that the notebook's ``parameters``
cell does not define is an error, never silently ignored.

**Where a run writes** is decided by the notebook itself (:func:`profile_outputs`,
called in every notebook's set-up cell), from its parameters and the publish step:

* the committed ``full`` profile run by ``run NAME --profile full --publish`` (what
  ``make reproduce`` does, and nothing else): the repository's record, ``tables/``,
  ``figures/`` and the executed copy ``notebooks/executed/NAME.ipynb``;
* the committed ``full`` profile from any other launcher (Run All in JupyterLab,
  nbconvert, papermill, this runner without ``--publish``):
  ``build/explore/<notebook>/full/``; the record is never touched;
* equal to the committed ``smoke`` profile: ``build/smoke/tables`` and ``.../figures``;
* anything else (a ``-p`` override, or a parameters cell edited in Jupyter):
  ``build/explore/<notebook>/<hash of the parameters>/``, with a ``params.yaml`` saying
  what was run. The committed outputs are never touched, and the notebook's findings
  are reported instead of asserted (:class:`scalable_softmax.repro.fagan.reporting.Findings`).

The ``full`` profile in ``params/<name>.yaml`` lists every parameter with the value of
the notebook's ``parameters`` cell; the runner refuses to run when the two disagree.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from scalable_softmax import paths, validation
from scalable_softmax._atomic import atomic_open

KERNEL = "python3"
DEFAULT_TIMEOUT = 3600  # seconds per cell
#: notebooks whose one cell may run longer than DEFAULT_TIMEOUT: the races of notebooks
#: 12 and 14 run every tuning and seeded run in one cell (``cli.race_notebook``); their
#: training budget alone, every run to its cap, is 2,754 s (12) and 1,575 s (14) under
#: params/race.yaml, and wall time adds evaluation and child start-up (a rerun of 12 with
#: another grid passed 3,600 s on its fifth data set). tests/test_notebook_runner.py holds
#: these to at least twice the budget computed from params/race.yaml.
CELL_TIMEOUT = {"12-peers": 3 * 3600, "14-crossover": 3 * 3600}


def cell_timeout(name: str) -> int:
    """The execution timeout per cell of notebook ``name``, seconds (:data:`CELL_TIMEOUT`,
    else :data:`DEFAULT_TIMEOUT`)."""
    return CELL_TIMEOUT.get(name, DEFAULT_TIMEOUT)


#: the parameter that chooses an output folder by hand ("" = decided by the profile)
OUTPUT_ROOT = "output_root"
#: where runs with parameters of no committed profile write (under build/)
EXPLORE = "explore"
#: environment variable set (to "1") by ``run --publish`` for the notebook's kernel:
#: only then does the full profile write the repository's record
PUBLISH_ENV = "SCALABLE_SOFTMAX_PUBLISH"
#: the committed executed notebooks (``make reproduce``), beside their sources
EXECUTED_DIR = "executed"


def publishing() -> bool:
    """True inside a notebook run by ``run NAME --profile full --publish`` (the publish
    step of ``make reproduce``): :data:`PUBLISH_ENV` is "1" and the run's outputs are
    staged (:mod:`scalable_softmax.repro.machinery.outputs`)."""
    from scalable_softmax.repro.machinery.outputs import ENV as STAGE_ENV

    return os.environ.get(PUBLISH_ENV) == "1" and bool(os.environ.get(STAGE_ENV))


def published_notebook(name: str) -> Path:
    """The committed executed copy of notebook ``name``: ``notebooks/executed/NAME.ipynb``."""
    return paths.NOTEBOOKS / EXECUTED_DIR / f"{name}.ipynb"


def known_notebooks() -> list[str]:
    """The names (NN-slug) of the collection's notebooks, sorted."""
    return sorted(p.stem for p in paths.NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))


class NotebookParameterError(ValueError):
    """A parameter given for a notebook does not exist in its ``parameters`` cell, or
    a committed profile disagrees with the notebook."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1's safe loader that also reads ``1e-3`` as a float (YAML 1.1 needs a dot),
    and refuses aliases (``*name``): a parameter is written out, and an alias is how a
    few hundred characters expand to gigabytes (a "billion laughs") or to a
    self-referencing value that nothing can hash or print."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not accepted in parameters; write "
                "the value out in full", mark)
        return super().compose_node(parent, index)


#: the deepest nesting of lists and mappings a parameter value may have
MAX_DEPTH = 50


def _yaml_load(text, where):
    """``text`` read by :class:`_Loader`; ``ValueError`` naming ``where`` for invalid
    YAML, an alias or a value nested deeper than :data:`MAX_DEPTH`."""
    try:
        value = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise NotebookParameterError(f"{where}: not valid YAML for a parameter: "
                                     f"{exc}") from None
    except RecursionError:
        raise NotebookParameterError(f"{where}: nested too deeply to read") from None

    def depth(v, d=0):
        if d > MAX_DEPTH:
            raise NotebookParameterError(f"{where}: a value nested more than {MAX_DEPTH} "
                                         "levels deep; flatten it")
        for x in (v.values() if isinstance(v, dict) else v
                  if isinstance(v, list) else ()):
            depth(x, d + 1)
    depth(value)
    return value


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."))


def parse_value(text: str):
    """A ``-p`` value as YAML (``3`` -> 3, ``1e-3`` -> 0.001, ``[a, b]`` -> a list,
    ``null`` -> None, anything else a string), as papermill's ``-y`` reads it."""
    return _yaml_load(text, f"cannot read {text[:200]!r} as YAML")


class UnknownNotebookError(NotebookParameterError, FileNotFoundError):
    """A notebook name that is not one of the collection's."""


def notebook_path(name: str) -> Path:
    """``notebooks/NAME.ipynb``; :class:`UnknownNotebookError` (one line naming the
    valid names) when there is no such notebook."""
    path = paths.NOTEBOOKS / f"{name}.ipynb"
    if not re.fullmatch(r"[0-9][0-9]-[A-Za-z0-9_.-]+", name or "") or not path.exists():
        raise UnknownNotebookError(f"no notebook {name!r}; the notebooks are: "
                                   f"{', '.join(known_notebooks())} (or all)")
    return path


def load_params(name: str, profile: str) -> dict:
    """Parameters of ``profile`` from ``params/<name>.yaml`` ({} if the file or profile
    says nothing)."""
    path = paths.PARAMS / f"{name}.yaml"
    if not path.exists():
        return {}
    settings = _yaml_load(path.read_text(), str(path)) or {}
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: expected a mapping of profiles (full:, smoke:)")
    unknown = set(settings) - {"full", "smoke", ALLOWED}
    if unknown:
        raise ValueError(f"{path}: unknown section(s) {sorted(unknown)}; use the profiles "
                         f"'full' and 'smoke' and the parameters' '{ALLOWED}' values")
    return dict(settings.get(profile) or {})


#: the section of ``params/NAME.yaml`` saying which values each parameter may take
ALLOWED = "allowed"


def load_allowed(name: str) -> dict:
    """The ``allowed:`` section of ``params/<name>.yaml``: for each parameter a rule in
    the vocabulary of :mod:`scalable_softmax.validation` (the library's one table of
    parameter constraints), each resolved by :func:`scalable_softmax.validation.rule`:

    * ``type``: int, float (an int is accepted), number, bool, str, list or mapping;
    * ``min`` / ``max``: bounds of a number (inclusive); ``above``: a lower bound the
      number must exceed; ``finite``: not NaN or infinite;
    * ``one_of``: the values it may take;
    * ``each``: a rule every item of a list must follow;
    * ``min_length``: the fewest items of a list;
    * ``keys`` / ``values``: rules for the keys and values of a mapping;
    * ``nullable: true``: None (YAML ``null``) is also allowed;
    * ``like: <parameter>``: the library's rule for that parameter
      (:data:`scalable_softmax.validation.PARAMETERS`, e.g. ``like: epochs``), which
      the other keys of the rule may refine (e.g. ``nullable: false``).
    """
    path = paths.PARAMS / f"{name}.yaml"
    if not path.exists():
        return {}
    settings = _yaml_load(path.read_text(), str(path)) or {}
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: expected a mapping of profiles (full:, smoke:)")
    rules = settings.get(ALLOWED) or {}
    if not isinstance(rules, dict):
        raise ValueError(f"{path}: '{ALLOWED}' must map parameter names to rules")
    out = {}
    for key, rule in rules.items():
        try:
            out[key] = validation.rule(rule)
        except ValueError as exc:
            raise ValueError(f"{path}: {ALLOWED}.{key}: {exc}") from None
    return out


def check_values(name: str, params: dict) -> None:
    """Raise :class:`NotebookParameterError` (one line: the parameter, its value and
    what is allowed) if a value of ``params`` breaks a rule of the ``allowed:`` section
    of ``params/<name>.yaml`` (:func:`load_allowed`). Runs before any work."""
    rules = load_allowed(name)
    for key in params:
        inf = _non_finite(params[key])
        if inf is not None and rules.get(key, {}).get("finite", True) is not False:
            raise NotebookParameterError(
                f"parameter {key} = {params[key]!r}: {inf!r} is not a finite number "
                f"(.inf and .nan are not accepted; params/{name}.yaml's rule would say "
                "finite: false)")
    for key, rule in rules.items():
        if key not in params:
            continue
        bad = validation.violation(params[key], rule)
        if bad is not None:
            bad = bad[0]
            shown = (f"{params[key]!r} ({bad!r} is not allowed)"
                     if not _same(bad, params[key]) else f"{params[key]!r}")
            raise NotebookParameterError(
                f"parameter {key} = {shown}: {name} allows {validation.describe(rule)} "
                f"(params/{name}.yaml, section {ALLOWED})")


def _non_finite(value):
    """The first NaN or infinite number in ``value`` (nested lists and mappings
    included), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    items = (value.values() if isinstance(value, dict)
             else value if isinstance(value, (list, tuple)) else ())
    for v in items:
        bad = _non_finite(v)
        if bad is not None:
            return bad
    return None


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


def declared_parameters(name: str) -> dict:
    """The parameters of the notebook's ``parameters`` cell with their default values
    (every default must be a Python literal)."""
    path = notebook_path(name)
    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise NotebookParameterError(f"{path}: expected exactly one cell tagged "
                                     f"'parameters', found {len(cells)}")
    src = "".join(cells[0]["source"])
    out = {}
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                raise NotebookParameterError(
                    f"{path}, parameters cell line {node.lineno}: the default of "
                    f"{node.targets[0].id!r} must be a literal") from None
    return out


def check_full_profile(name: str) -> None:
    """Raise :class:`NotebookParameterError` unless ``params/<name>.yaml``'s ``full``
    profile lists every parameter of the notebook with the notebook's default value."""
    declared = declared_parameters(name)
    full = load_params(name, "full")
    check_params(name, full)
    missing = [k for k in declared if k != OUTPUT_ROOT and k not in full]
    differ = [f"{k}: params file {full[k]!r}, notebook {declared[k]!r}"
              for k in declared if k in full and k != OUTPUT_ROOT
              and not _same(full[k], declared[k])]
    if missing or differ:
        raise NotebookParameterError(
            f"params/{name}.yaml: the 'full' profile must list every parameter of "
            f"notebooks/{name}.ipynb with the value of its parameters cell"
            + (f"; missing: {missing}" if missing else "")
            + (f"; different: {'; '.join(differ)}" if differ else "")
            + ". Update one of the two (the full profile is what make reproduce publishes).")
    check_values(name, full)
    check_values(name, {**full, **load_params(name, "smoke")})


def effective_params(name: str, profile: str, overrides: dict | None = None) -> dict:
    """Every parameter a run of ``profile`` with ``overrides`` uses: the full profile,
    then the profile's own settings, then the overrides (each checked to exist)."""
    params = load_params(name, "full")
    if profile != "full":
        own = load_params(name, profile)
        check_params(name, own)
        params.update(own)
    if overrides:
        declared = declared_parameters(name)
        unknown = sorted(set(overrides) - set(declared))
        if unknown:
            raise NotebookParameterError(
                f"-p {unknown[0]}: notebooks/{name}.ipynb has no parameter(s) {unknown} "
                f"(its parameters: {', '.join(declared)})")
        for k, v in overrides.items():
            _check_override(name, k, declared[k], v)
        params.update(overrides)
    return params


def _check_override(name, key, default, value):
    hint = None
    if isinstance(default, (list, tuple)) and not isinstance(value, (list, tuple)):
        hint = f"a YAML list, e.g. -p {key} '[{value}]'"
    elif isinstance(default, dict) and not isinstance(value, dict):
        hint = f"a YAML mapping, e.g. -p {key} '{{a: 1}}'"
    elif isinstance(default, (int, float)) and not isinstance(default, bool) \
            and isinstance(value, str):
        hint = f"a number like the default {default!r}"
    elif isinstance(default, bool) and not isinstance(value, bool):
        hint = "true or false"
    if hint:
        raise NotebookParameterError(
            f"-p {key} {value!r}: notebooks/{name}.ipynb's default is {default!r}; "
            f"give {hint}")


def _same(a, b) -> bool:
    """Equal as parameters (:func:`scalable_softmax.validation.same`)."""
    return validation.same(a, b)


def _plain(v):
    """``v`` with numpy scalars and tuples turned into plain JSON values."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and callable(v.item):
        return v.item()
    return v


def params_hash(params: dict) -> str:
    """12 hex digits identifying a set of parameters (``output_root`` ignored)."""
    def canon(v):
        if isinstance(v, bool) or v is None or isinstance(v, str):
            return v
        if isinstance(v, (int, float)):
            return float(v) if float(v) == v else v
        if isinstance(v, dict):
            return {str(k): canon(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
        if isinstance(v, (list, tuple)):
            return [canon(x) for x in v]
        return repr(v)
    body = {k: canon(_plain(v)) for k, v in params.items() if k != OUTPUT_ROOT}
    text = json.dumps(body, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def profile_of(name: str, params: dict) -> str | None:
    """``"full"`` or ``"smoke"`` if ``params`` (``output_root`` aside) are exactly that
    committed profile of ``params/<name>.yaml``, else None (exploring)."""
    for profile in ("full", "smoke"):
        ref = load_params(name, "full")
        if profile == "smoke":
            ref.update(load_params(name, "smoke"))
        ref.pop(OUTPUT_ROOT, None)
        mine = {k: v for k, v in params.items() if k != OUTPUT_ROOT}
        if set(ref) == set(mine) and all(_same(mine[k], ref[k]) for k in ref):
            return profile
    return None


def _differences(name: str, params: dict) -> tuple[str, dict]:
    """The committed profile nearest to ``params`` and the parameters that differ
    from it (``{name: (ours, committed)}``)."""
    best = None
    for profile in ("full", "smoke"):
        ref = load_params(name, "full")
        if profile == "smoke":
            ref.update(load_params(name, "smoke"))
        diff = {k: (params.get(k, "<missing>"), ref.get(k, "<not in the profile>"))
                for k in sorted(set(ref) | set(params)) if k != OUTPUT_ROOT
                and not (k in ref and k in params and _same(params[k], ref[k]))}
        if best is None or len(diff) < len(best[1]):
            best = (profile, diff)
    return best


def profile_root(profile: str) -> Path:
    """Where the outputs of a committed profile are read by other notebooks: the
    repository's record (full) or build/smoke."""
    if profile == "full":
        return paths.ROOT
    if profile == "smoke":
        return paths.BUILD / "smoke"
    raise ValueError(f"unknown profile {profile!r}; use 'full' or 'smoke'")


def output_root_for(name: str, params: dict, publish: bool | None = None) -> Path:
    """Where a run of notebook ``name`` with ``params`` writes its tables/ and figures/:
    the repository for the committed full profile when publishing (``publish``; None:
    :func:`publishing`), ``build/explore/<name>/full`` for the full profile otherwise,
    build/smoke for the smoke profile, ``build/explore/<name>/<params_hash>`` for any
    other parameters; an explicit ``output_root`` parameter (a folder relative to the
    repository) wins, but only the publish step writes the repository's own tables/ and
    figures/."""
    explicit = params.get(OUTPUT_ROOT) or ""
    profile = profile_of(name, params)
    if publish is None:
        publish = publishing()
    if explicit:
        root = (paths.ROOT / explicit).resolve()
        if not root.is_relative_to(paths.ROOT.resolve()):
            raise NotebookParameterError(
                f"output_root = {explicit!r}: must be a folder inside the repository "
                f"({paths.ROOT}), e.g. build/mine")
        if root == paths.ROOT.resolve() and not (profile == "full" and publish):
            raise NotebookParameterError(
                f"output_root = {explicit!r} is the repository itself: only make reproduce "
                "(runner run NAME --profile full --publish) writes tables/ and figures/; "
                "leave output_root empty")
        return root
    if profile == "full":
        return paths.ROOT if publish else paths.BUILD / EXPLORE / name / "full"
    if profile is not None:
        return profile_root(profile)
    return paths.BUILD / EXPLORE / name / params_hash(params)


@dataclass
class Outputs:
    """Where a notebook run writes and reads, and how strictly it checks its findings.

    ``profile`` is ``"full"``, ``"smoke"`` or None (parameters of no committed
    profile); ``root`` holds ``tables/`` and ``figures/``; ``input_root`` is where the
    outputs of other notebooks are read (the nearest committed profile's root);
    ``differs`` maps each parameter that differs from that profile to
    ``(value, committed value)``; ``findings`` checks the notebook's findings
    (asserted only under a committed profile)."""
    name: str
    profile: str | None
    root: Path
    input_root: Path
    params: dict
    differs: dict = field(default_factory=dict)

    @property
    def tables(self) -> Path:
        return self.root / "tables"

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    @property
    def exploring(self) -> bool:
        return self.profile is None

    @property
    def findings(self):
        if not hasattr(self, "_findings"):
            from scalable_softmax.repro.fagan.reporting import Findings
            self._findings = Findings(self.profile)
        return self._findings

    def input(self, relative: str, producer: str, make_smoke: bool = True) -> Path:
        """The path of another notebook's output ``relative`` (e.g.
        ``tables/03-learning-rate-tuning.csv``) under :attr:`input_root` (an absolute
        path is used as is). If it is missing and the inputs come from the smoke profile
        (``build/smoke``), the producing notebook's smoke profile is run first
        (``make_smoke``, a minute or so); a missing full-profile output is an error that
        says what to run."""
        p = Path(relative)
        p = p if p.is_absolute() else self.input_root / p
        base = "full" if self.input_root == profile_root("full") else "smoke"
        if not p.exists() and base == "smoke" and make_smoke \
                and not Path(relative).is_absolute():
            print(f"{_shown(p).rstrip('/')} not found: running notebook {producer} "
                  "(smoke profile) first, which writes it", flush=True)
            _run_producer(producer, "smoke")
        if not p.exists():
            raise FileNotFoundError(
                f"{p}: not found; it is written by notebook {producer}. Run it first: "
                f"python -m scalable_softmax.repro.machinery.runner run {producer} --profile {base}"
                + (" (or make reproduce)" if base == "full" else ""))
        return p


def _run_producer(name: str, profile: str) -> None:
    """Run notebook ``name`` in a separate process (its output kept out of the calling
    notebook unless it fails)."""
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "scalable_softmax.repro.machinery.runner",
                           "run", name, "--profile", profile], capture_output=True, text=True,
                          cwd=paths.ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"running notebook {name} ({profile}) failed:\n"
                           + "\n".join((proc.stdout + proc.stderr).splitlines()[-30:]))


#: threads of the BLAS under numpy/scipy in a notebook run, whatever launched it (the
#: Makefile's OPENBLAS_NUM_THREADS=1): a multi-threaded BLAS sums in another order,
#: which moves the last digits and, through them, iteration counts
BLAS_THREADS = 1
_PINNED: dict = {}


def pin_threads(blas: int = BLAS_THREADS, numba_threads: int | None = None) -> dict:
    """Fix the threads a notebook's numbers depend on, inside the process (so Run All in
    JupyterLab, nbconvert, papermill and ``make reproduce`` compute alike): the BLAS
    libraries to ``blas`` threads (threadpoolctl; also ``OPENBLAS_NUM_THREADS`` and
    friends for processes started later), numba's parallel kernels to
    ``numba_threads`` (None: numba's configured count, ``NUMBA_NUM_THREADS``, all cores
    unless set, as under make). Returns what was set."""
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ[var] = str(blas)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:                     # an environment without it: the variables
        limiter = None
    else:
        limiter = threadpool_limits(limits=blas, user_api="blas")
    from scalable_softmax.kernels.threads import pin_numba_threads

    n = pin_numba_threads(numba_threads)
    _PINNED.update(blas=blas, numba=n, limiter=limiter)
    return {"blas": blas, "numba": n}


def profile_outputs(name: str, namespace: dict, announce: bool = True) -> Outputs:
    """Decide, inside notebook ``name``, where this run writes (see the module's doc):
    ``namespace`` is the notebook's ``globals()`` after its parameters cell (and any
    injected parameters). Creates the folders; for an exploring run also writes
    ``params.yaml`` there. Prints one line saying which profile this is. Pins the
    threads the numbers depend on first (:func:`pin_threads`)."""
    pin_threads()
    declared = declared_parameters(name)
    missing = [k for k in declared if k not in namespace]
    if missing:
        raise NotebookParameterError(f"{name}: parameter(s) {missing} are not defined; "
                                     "run the parameters cell first")
    params = {k: namespace[k] for k in declared}
    profile = profile_of(name, params)
    root = output_root_for(name, params)
    base, differs = (profile, {}) if profile else _differences(name, params)
    out = Outputs(name, profile, root, profile_root(base), params, differs)
    out.tables.mkdir(parents=True, exist_ok=True)
    out.figures.mkdir(parents=True, exist_ok=True)
    if profile is None:
        record = {"notebook": name, "nearest_profile": base,
                  "differs": {k: {"value": _plain(v), "committed": _plain(c)}
                              for k, (v, c) in differs.items()},
                  "parameters": {k: _plain(v) for k, v in params.items()}}
        tmp = root / ".params.yaml.tmp"
        tmp.write_text(yaml.safe_dump(record, sort_keys=False, default_flow_style=None))
        os.replace(tmp, root / "params.yaml")
    if announce:
        where = _shown(root)
        if profile == "full" and root == paths.ROOT:
            print(f"profile: full (the committed settings), publishing -> writes {where}tables/ "
                  f"and {where}figures/; findings are asserted")
        elif profile == "full":
            print(f"profile: full (the committed settings) -> writes under {where} (not "
                  "tables/ or figures/: only make reproduce publishes); findings are asserted")
        elif profile == "smoke":
            print(f"profile: smoke -> writes under {where}; findings are asserted")
        else:
            changed = ", ".join(f"{k} = {v!r} (committed: {c!r})"
                                for k, (v, c) in differs.items())
            print(f"exploring: parameters differ from the committed {base} profile in "
                  f"{changed}\n-> writes under {where} (the committed tables/ and figures/ "
                  "are not touched); findings are reported, not asserted")
    return out


def shown_path(path) -> str:
    """``path`` as a notebook prints it: relative to the repository when it lies inside
    (``tables/03-learning-rate-tuning.csv``), so that an executed notebook carries no
    absolute path of the machine that ran it; a path outside the repository (one a user
    gave) as given."""
    try:
        return str(Path(path).resolve().relative_to(paths.ROOT.resolve()))
    except ValueError:
        return str(path)


def _shown(path: Path) -> str:
    try:
        rel = path.resolve().relative_to(paths.ROOT.resolve())
        return "" if str(rel) == "." else f"{rel}/"
    except ValueError:
        return f"{path}/"


def _atomic_output(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    return out.with_name(f".{out.stem}.{os.getpid()}.tmp.ipynb")


def prepare(name: str, profile: str, out: Path | None = None,
            overrides: dict | None = None) -> Path:
    """Write a copy of the notebook with ``profile``'s parameters (and ``overrides``)
    injected, not executed; a smoke copy also gets the stored outputs of its key cells
    for nbval (:func:`apply_nbval_record`)."""
    import papermill as pm

    check_full_profile(name)
    params = effective_params(name, profile, overrides)
    check_params(name, params)
    check_values(name, params)
    out = out or paths.BUILD / "prepared" / profile / f"{name}.ipynb"
    tmp = _atomic_output(out)
    try:
        pm.execute_notebook(str(notebook_path(name)), str(tmp), parameters=params,
                            prepare_only=True, kernel_name=KERNEL, progress_bar=False)
        if profile == "smoke" and not overrides:     # the stored key outputs, for nbval
            nb = json.loads(tmp.read_text())
            if apply_nbval_record(nb, name):
                tmp.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def executed_path(name: str, profile: str, overrides: dict | None = None,
                  publish: bool = False) -> Path:
    """Where :func:`run` keeps the executed notebook: ``build/executed/<profile>/`` for
    the smoke profile and for the published full profile (the log copy; the committed
    copy is :func:`published_notebook`), beside the outputs of any other run."""
    params = effective_params(name, profile, overrides)
    kind = profile_of(name, params)
    if kind is None or (kind == "full" and not publish):
        return output_root_for(name, params, publish=False) / f"{name}.ipynb"
    return paths.BUILD / "executed" / profile / f"{name}.ipynb"


#: arguments of every kernel the runner starts: its own log (start-up notes such as
#: "Kernel is running over TCP without encryption", "KeyboardInterrupt caught in
#: kernel" at shut-down) stays out of the run's output; cell errors still show
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]


def run(name: str, profile: str, out: Path | None = None, timeout: int | None = None,
        overrides: dict | None = None, publish: bool = False) -> Path:
    """Execute the notebook with ``profile``'s parameters and ``overrides``; returns the
    executed copy (``timeout``: seconds per cell; None: :func:`cell_timeout`). The
    notebook decides where its tables and figures go
    (:func:`profile_outputs`): only ``publish`` (the full profile, no overrides: the
    publish step of ``make reproduce``) writes the record, ``tables/``, ``figures/``
    and the committed executed copy :func:`published_notebook` (volatile metadata
    stripped, :func:`strip_volatile`); every other run writes under ``build/``.

    The run's tables and figures are staged and published together with the executed
    copy when the notebook has run to its end, or not at all
    (:mod:`scalable_softmax.repro.machinery.outputs`); the stages of killed runs are finished first.
    ``SIGTERM`` and ``SIGHUP`` stop the run like ``Ctrl-C``: nothing is published and
    no temporary file is left. On an error the executed copy is kept as
    ``<out>.failed.ipynb``.
    """
    import papermill as pm

    from scalable_softmax.repro.machinery import outputs as publish_mod

    check_full_profile(name)
    timeout = cell_timeout(name) if timeout is None else timeout
    params = effective_params(name, profile, overrides)
    check_params(name, params)
    kind = profile_of(name, params)
    if publish and kind != "full":
        raise NotebookParameterError(
            f"--publish: only the committed full profile of {name} is published "
            f"(this run is {'the ' + kind + ' profile' if kind else 'changed by -p'}); "
            "drop --publish")
    check_values(name, params)
    committed = kind == "smoke" or publish
    out = out or executed_path(name, profile, overrides, publish=publish)
    out.parent.mkdir(parents=True, exist_ok=True)
    for line in publish_mod.recover():
        print(line, file=sys.stderr)
    start = time.perf_counter()
    env_before = {k: os.environ.get(k) for k in (_PROGRESS_ENV, PUBLISH_ENV)}
    os.environ[_PROGRESS_ENV] = "off"       # no progress bar in the executed notebook
    if publish:
        os.environ[PUBLISH_ENV] = "1"       # the kernel writes the record
    else:
        os.environ.pop(PUBLISH_ENV, None)
    try:
        with terminate_raises(), publish_mod.Stage(name) as stage:
            tmp = stage.dir / f"{name}.executed.ipynb"
            try:
                pm.execute_notebook(str(notebook_path(name)), str(tmp), parameters=params,
                                    kernel_name=KERNEL, log_output=True, progress_bar=False,
                                    execution_timeout=timeout, cwd=str(paths.NOTEBOOKS),
                                    extra_arguments=KERNEL_ARGUMENTS)
            except BaseException as exc:
                if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                    quiet_dead_kernel_tasks()
                failed = out.with_name(out.stem + ".failed.ipynb")
                if tmp.exists():
                    os.replace(tmp, failed)
                    print(f"executed notebook with the error kept in {failed}; no table or "
                          "figure of this run was published", file=sys.stderr)
                raise
            _finish_executed(tmp, out)
            if publish:
                record = stage.path_for(published_notebook(name))
                write_stripped(tmp, record, name)
            stage.commit(last=(tmp, out))
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if committed:
        _record_duration(name, profile, time.perf_counter() - start)
    return out


#: cell and notebook metadata that change from run to run with the same results
_VOLATILE_PAPERMILL = ("start_time", "end_time", "duration", "exception")
#: output types that carry per-session ids (widget models)
_VOLATILE_MIME = ("application/vnd.jupyter.widget-view+json",)


def strip_volatile(nb: dict, name: str) -> dict:
    """``nb`` (an executed notebook as JSON) without what changes between runs of the
    same results: timestamps and durations (papermill's and the cells' ``execution``
    records), widget state and widget outputs, the run's absolute paths; execution
    counts renumbered 1, 2, ... in cell order; the injected-parameters cell given a
    fixed id. Returns ``nb`` (changed in place)."""
    meta = nb.setdefault("metadata", {})
    meta.pop("widgets", None)
    pm_meta = meta.get("papermill")
    if isinstance(pm_meta, dict):
        for key in _VOLATILE_PAPERMILL:
            pm_meta.pop(key, None)
        pm_meta["input_path"] = f"notebooks/{name}.ipynb"
        pm_meta["output_path"] = f"notebooks/{EXECUTED_DIR}/{name}.ipynb"
    count = 0
    for cell in nb.get("cells", []):
        cmeta = cell.get("metadata", {})
        cmeta.pop("execution", None)
        cmeta.pop("papermill", None)
        if "injected-parameters" in cmeta.get("tags", []):
            cell["id"] = "injected-parameters"
        if cell.get("cell_type") != "code":
            continue
        if cell.get("execution_count") is not None:
            count += 1
            cell["execution_count"] = count
        kept = []
        for output in cell.get("outputs", []):
            if "execution_count" in output:
                output["execution_count"] = cell.get("execution_count")
            data = output.get("data")
            if isinstance(data, dict):
                for mime in _VOLATILE_MIME:
                    data.pop(mime, None)
                if not data:
                    continue
            kept.append(output)
        cell["outputs"] = kept
    return nb


def write_stripped(executed: Path, out: Path, name: str) -> Path:
    """Write ``executed`` to ``out`` with :func:`strip_volatile` applied (the committed
    executed copy, ``notebooks/executed/NAME.ipynb``)."""
    nb = strip_volatile(json.loads(Path(executed).read_text()), name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
    return out


#: the stored outputs of the smoke runs' key cells (tables, findings), which ``make
#: test`` compares under nbval with those of the current notebooks' smoke runs
NBVAL_DIR = Path("tests") / "nbval"
#: the tag that tells nbval (run with --nbval-lax) to compare a cell's outputs
NBVAL_CHECK = "nbval-check-output"
#: a key result: a table (HTML or markdown) or a finding
_KEY_OUTPUT = re.compile(r"<table|\|---|finding|hold", re.I)
#: what changes from run to run with the same results (seconds, progress bars, time
#: caps): a cell showing one is run but not compared
_VOLATILE_OUTPUT = re.compile(r"second|\d\s*s\b|\ds/it|it/s|time cap|timed|ready in|ran in"
                              r"|elapsed|\r", re.I)


def _output_text(cell: dict) -> str:
    text = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            text.append("".join(output.get("text", "")))
        for mime in ("text/html", "text/markdown", "text/plain"):
            value = output.get("data", {}).get(mime)
            if value is not None:
                text.append("".join(value) if isinstance(value, list) else value)
        if output.get("output_type") == "error":
            text.append(output.get("ename", ""))
    return "\n".join(text)


def is_key_cell(cell: dict) -> bool:
    """True for a code cell whose outputs show a result (a table or a finding) and no
    timing: the cells nbval compares with the stored smoke run."""
    text = _output_text(cell)
    return cell.get("cell_type") == "code" and bool(_KEY_OUTPUT.search(text)) \
        and not _VOLATILE_OUTPUT.search(text)


def nbval_record_path(name: str, root: Path | None = None) -> Path:
    """``tests/nbval/NAME.json``: the stored outputs of notebook ``name``'s key cells."""
    return Path(root or paths.ROOT) / NBVAL_DIR / f"{name}.json"


def record_nbval(name: str, executed: Path | None = None, root: Path | None = None) -> Path:
    """Store the key cells (:func:`is_key_cell`) of notebook ``name``'s executed smoke
    run (``executed``; default ``build/executed/smoke/NAME.ipynb``) in
    ``tests/nbval/NAME.json``: each cell's id, source and text outputs (nbval compares
    no images). ``make test`` grafts them onto the freshly prepared notebook
    (:func:`apply_nbval_record`), so nbval runs today's code and compares those cells'
    outputs with the stored ones. ``make smoke-record`` calls this after running every
    smoke profile: the way to accept changed numbers on purpose."""
    executed = Path(executed or paths.BUILD / "executed" / "smoke" / f"{name}.ipynb")
    if not executed.is_file():
        raise FileNotFoundError(
            f"{executed}: no smoke run of {name} to record; run it first: python -m "
            f"scalable_softmax.repro.machinery.runner run {name} --profile smoke "
            "(or make smoke-record)")
    nb = strip_volatile(json.loads(executed.read_text()), name)
    cells = []
    for cell in nb["cells"]:
        if not is_key_cell(cell) or not cell.get("id"):
            continue
        outputs = []
        for output in cell["outputs"]:
            output = dict(output)
            if isinstance(output.get("data"), dict):
                output["data"] = {m: v for m, v in output["data"].items()
                                  if not m.startswith("image/")}
                output["metadata"] = {}
            outputs.append(output)
        cells.append({"id": cell["id"], "source": "".join(cell["source"]),
                      "outputs": outputs})
    record = {"notebook": name, "profile": "smoke",
              "regenerate": "make smoke-record (after a change that moves results on purpose)",
              "cells": cells}
    out = nbval_record_path(name, root)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, out)
    print(f"{name}: {len(cells)} key cell(s) stored for nbval in {_shown(out.parent)}{out.name}")
    return out


def apply_nbval_record(nb: dict, name: str, root: Path | None = None) -> int:
    """Give the cells of ``nb`` (a prepared notebook as JSON) the stored outputs of
    ``tests/nbval/NAME.json`` (matched by cell id) and the tag :data:`NBVAL_CHECK`, so
    that nbval compares them; returns how many cells were given outputs (0 without a
    record)."""
    path = nbval_record_path(name, root)
    if not path.is_file():
        return 0
    stored = {c["id"]: c for c in json.loads(path.read_text())["cells"]}
    count = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code" or cell.get("id") not in stored:
            continue
        count += 1
        cell["outputs"] = stored[cell["id"]]["outputs"]
        cell["execution_count"] = count
        for output in cell["outputs"]:
            if "execution_count" in output:
                output["execution_count"] = count
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if NBVAL_CHECK not in tags:
            tags.append(NBVAL_CHECK)
    return count


def merge_streams(nb: dict) -> int:
    """Merge, in every code cell of ``nb`` (a notebook as JSON), each run of consecutive
    stream outputs of the same name (``stdout`` or ``stderr``) into one output holding
    their text in order, as a terminal shows it; returns how many outputs were merged
    away. The kernel sends what a cell prints in as many messages as it flushed, so one
    cell's lines would otherwise be scattered over several outputs. Nothing is dropped or
    reordered: an output of another kind or of the other stream ends a run."""
    merged = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            prev = kept[-1] if kept else None
            if output.get("output_type") == "stream" and prev is not None \
                    and prev.get("output_type") == "stream" \
                    and prev.get("name") == output.get("name"):
                prev["text"] = "".join(prev.get("text", "")) + "".join(output.get("text", ""))
                merged += 1
                continue
            kept.append(output)
        cell["outputs"] = kept
    return merged


def _finish_executed(executed: Path, out: Path) -> None:
    """Tidy the executed notebook in place: consecutive stream outputs merged
    (:func:`merge_streams`) and the published path (not the stage's) recorded as
    papermill's ``output_path``."""
    nb = json.loads(executed.read_text())
    merge_streams(nb)
    pm_meta = nb.get("metadata", {}).get("papermill")
    if isinstance(pm_meta, dict):
        pm_meta["output_path"] = str(out)
    executed.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


#: environment variable choosing the library's progress bars (see
#: :mod:`scalable_softmax.progress`); the runner turns them off for the kernel
_PROGRESS_ENV = "SCALABLE_SOFTMAX_PROGRESS"


def _record_duration(name: str, profile: str, seconds: float) -> None:
    log = paths.BUILD / "executed" / profile / "durations.yaml"
    log.parent.mkdir(parents=True, exist_ok=True)
    data = {}
    if log.exists():
        data = yaml.safe_load(log.read_text()) or {}
    data[name] = round(seconds, 1)
    commits = _commits_log(profile)
    made = (yaml.safe_load(commits.read_text()) if commits.exists() else None) or {}
    made[name] = _git_head()
    for path, payload in ((log, data), (commits, made)):
        with atomic_open(path, "w") as fh:
            yaml.safe_dump(payload, fh, sort_keys=True)


def _commits_log(profile: str) -> Path:
    """``build/executed/<profile>/commits.yaml``: the commit each notebook's last run
    came from (beside ``durations.yaml``)."""
    return paths.BUILD / "executed" / profile / "commits.yaml"


def _git_head() -> str:
    """``git rev-parse HEAD`` of the checkout, with `` (with uncommitted changes)`` when
    the code (lib, notebooks, params) differs from it; ``unknown`` outside git."""
    import subprocess

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=paths.ROOT, capture_output=True,
                                  text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown"

    # the run's own outputs (notebooks/executed/) are not a change of the code
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--", "lib",
                                                  "notebooks", "params",
                                                  ":(exclude)notebooks/executed") else ""
    return f"{git('rev-parse', 'HEAD')}{dirty}"


#: notebooks run by ``make reproduce-extra`` only (the Makefile's EXTRA_NAMES)
EXTENSIONS = ("11-tuned-rates", "12-peers", "13-real-large-k", "14-crossover")

#: notebooks added since the committed record was made: they have no executed copy in
#: ``notebooks/executed/`` and no tables in ``tables/`` until the next ``make reproduce``
#: / ``make reproduce-extra`` publishes them (then their names leave this list; the
#: tests check both ways: every other notebook has its committed copy, none of these has)
AWAITING_RECORD = ()


def _make_runs_log(profile: str) -> Path:
    return paths.BUILD / "executed" / profile / "make-runs.yaml"


def record_make_run(target: str, started: str, profile: str = "full",
                    ended: str | None = None) -> dict:
    """Record in ``build/executed/<profile>/make-runs.yaml`` that ``make target`` ran from
    ``started`` to ``ended`` (default: now), both UTC ISO 8601; returns the entry. The
    Makefile calls this at the end of ``make reproduce`` and ``make reproduce-extra``, so
    the end-to-end times in PROVENANCE.md are measured, never typed."""
    import datetime

    def parse(text, what):
        try:
            t = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"{what} {text!r} is not an ISO 8601 time "
                             f"(e.g. 2026-11-26T04:00:00Z)") from None
        return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)

    t0 = parse(started, "--started")
    t1 = (parse(ended, "ended") if ended
          else datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0))
    if t1 < t0:
        raise ValueError(f"the run ended ({t1.isoformat()}) before it started "
                         f"({t0.isoformat()})")
    entry = {"started": t0.isoformat(), "ended": t1.isoformat(),
             "seconds": round((t1 - t0).total_seconds())}
    log = _make_runs_log(profile)
    runs = (yaml.safe_load(log.read_text()) if log.exists() else None) or {}
    runs[target] = entry
    log.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(log, "w") as fh:
        yaml.safe_dump(runs, fh, sort_keys=True)
    return entry


def _make_runs_lines(profile: str) -> list[str]:
    log = _make_runs_log(profile)
    runs = (yaml.safe_load(log.read_text()) if log.exists() else None) or {}
    if not runs:
        return []
    lines = ["## The make runs (measured by the Makefile)", "",
             "| target | started (UTC) | ended (UTC) | end to end |", "|---|---|---|---|"]
    for target in sorted(runs):
        r = runs[target]
        m, s = divmod(int(r["seconds"]), 60)
        lines.append(f"| `make {target}` | {r['started']} | {r['ended']} | {m} min {s} s |")
    return lines + ["", "`make reproduce-extra` also runs what `make reproduce` runs (nothing "
                        "when that has just run), then the extensions.", ""]


def _host_cpu() -> str:
    """The CPU name numba's compiler (LLVM) targets on this machine (``znver3``,
    ``skylake-avx512``, ...)."""
    try:
        import llvmlite.binding as llvm

        return str(llvm.get_host_cpu_name())
    except Exception:   # noqa: BLE001 -- provenance is best effort here
        return "unknown"


def write_provenance(profile: str = "full", out: Path | None = None) -> Path:
    """Write ``PROVENANCE.md`` beside the tables: the commit, date, machine, the
    duration of every notebook's last ``profile`` run (from ``durations.yaml``) and, when
    notebook 02 wrote it beside, its CPU-minutes by method and part. When the notebooks'
    last runs came from different commits (``commits.yaml``), the table names each one's
    and the ``commit`` line says so."""
    import datetime
    import platform

    log = paths.BUILD / "executed" / profile / "durations.yaml"
    durations = yaml.safe_load(log.read_text()) if log.exists() else {}
    durations = durations or {}
    head = _git_head()
    commits = _commits_log(profile)
    made = (yaml.safe_load(commits.read_text()) if commits.exists() else None) or {}
    # a record assembled from runs of more than one commit names each notebook's
    made = {name: made.get(name, "unknown") for name in durations}
    mixed = bool(made) and set(made.values()) != {head}
    import numba
    import numpy
    import scipy

    from scalable_softmax.repro.fagan.timing import cpu_model
    from scalable_softmax.repro.machinery.blaskernel import BLAS_LINE, describe_blas

    cpu = cpu_model()
    lines = [
        "# Provenance of the committed figures and tables",
        "",
        f"- commit: {head}" + (" (where the notebooks were run: the commit column "
                                "below)" if mixed else ""),
        f"- date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
        f"- machine: {platform.node()}, {cpu}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        # numba compiles for this CPU: the one thing a rerun on other hardware changes
        f"- numba's target CPU: {_host_cpu()}",
        # the kernel moves iteration counts (params/tolerances.yaml): make verify
        # prints the record's beside the rerun's
        f"{BLAS_LINE}{describe_blas()}",
        f"- libraries: numba {numba.__version__}, numpy {numpy.__version__}, "
        f"scipy {scipy.__version__}",
        f"- profile: {profile}",
        "",
        *(["| notebook | seconds | commit |", "|---|---|---|",
            *[f"| {name} | {secs} | {made[name][:12]}"
              f"{' (uncommitted changes)' if 'uncommitted' in made[name] else ''} |"
              for name, secs in sorted(durations.items())],
            f"| total | {round(sum(durations.values()), 1)} | |"] if mixed else
          ["| notebook | seconds |", "|---|---|",
           *[f"| {name} | {secs} |" for name, secs in sorted(durations.items())],
           f"| total | {round(sum(durations.values()), 1)} |"]),
    ]
    ext = {k: v for k, v in durations.items() if k in EXTENSIONS}
    if ext:
        core = sum(v for k, v in durations.items() if k not in EXTENSIONS)
        end = " |" if mixed else ""
        lines += [f"| of which `make reproduce` (without {', '.join(sorted(ext))}) | "
                  f"{round(core, 1)} |{end}",
                  f"| of which the extensions (`make reproduce-extra`) | "
                  f"{round(sum(ext.values()), 1)} |{end}"]
    lines.append("")
    lines += _make_runs_lines(profile)
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


# ---------------------------------------------------------------------------
# SIGTERM and SIGHUP as exceptions, so that finally blocks run
# ---------------------------------------------------------------------------
import contextlib  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402


def _handler(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def terminate_raises():
    """While inside, ``SIGTERM`` and ``SIGHUP`` raise ``SystemExit(128 + signum)``.

    Only in the main thread (elsewhere Python cannot set handlers), and only for a
    signal whose handler is the default one: a handler someone else installed is left
    alone. The previous handlers are restored on the way out.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
            old[sig] = signal.signal(sig, _handler)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


class _DeadKernelTaskFilter(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" report of a task that
    ended in nbclient's ``DeadKernelError``: the kernel of a stopped run is shut down
    while nbclient's tasks still wait on it, and asyncio reports each such task when it
    is garbage-collected, a traceback printed after the run's own message."""

    def filter(self, record):
        exc = record.exc_info[1] if record.exc_info else None
        return not (record.getMessage().startswith("Task exception was never retrieved")
                    and type(exc).__name__ == "DeadKernelError")


_DEAD_KERNEL_FILTER = _DeadKernelTaskFilter()


def quiet_dead_kernel_tasks():
    """Keep the ``DeadKernelError`` tasks of a stopped run out of standard error (the
    run has said why it stopped); asyncio's other reports are kept. Idempotent."""
    logger = logging.getLogger("asyncio")
    if _DEAD_KERNEL_FILTER not in logger.filters:
        logger.addFilter(_DEAD_KERNEL_FILTER)


USAGE_EXAMPLES = """\
profiles (params/NAME.yaml):
  smoke   tiny data or few epochs, a minute or so per notebook (what make test runs);
          writes under build/smoke/
  full    the papers' settings (make reproduce: ~47 min for all); without --publish
          writes under build/explore/NAME/full/

examples:
  python -m scalable_softmax.repro.machinery.runner run 09-ove-toy-2d --profile smoke
  python -m scalable_softmax.repro.machinery.runner run 09-ove-toy-2d -p seed 3
  python -m scalable_softmax.repro.machinery.runner run all --profile smoke

Only make reproduce / make reproduce-extra pass --publish, which writes the record:
tables/, figures/ and notebooks/executed/.
"""


def _run_from_command_line(name: str, args, overrides: dict) -> None:
    """``run NAME``: say where the run writes, run it, print the executed copy."""
    params = effective_params(name, args.profile, overrides)
    check_values(name, params)
    where = output_root_for(name, params, publish=args.publish)
    kind = profile_of(name, params) or "exploring"
    label = f"{kind}, publishing the record" if args.publish else kind
    print(f"running {name} ({label}); outputs under {_shown(where) or './'}", flush=True)
    print(run(name, args.profile, timeout=args.timeout, overrides=overrides,
              publish=args.publish))


def main(argv: list[str] | None = None) -> int:
    """The command line (``--help``); returns the exit status (2: a usage error)."""
    parser = argparse.ArgumentParser(prog="python -m scalable_softmax.repro.machinery.runner",
                                     description=__doc__.splitlines()[0],
                                     epilog=USAGE_EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["run", "prepare", "check", "provenance",
                                           "record-nbval"],
                        help="run: execute; prepare: inject the parameters only; check: "
                             "check the parameters; provenance: write tables/PROVENANCE.md; "
                             "record-nbval: store the last smoke runs in tests/nbval/ for "
                             "make test (make smoke-record)")
    parser.add_argument("names", nargs="*", default=[],
                        help="notebook names (NN-slug), or 'all' for every notebook")
    parser.add_argument("--profile", default="full", choices=["full", "smoke"],
                        help="the committed profile of params/NAME.yaml to start from: "
                             "smoke (tiny, minutes; under build/smoke/) or full (the "
                             "papers' settings; under build/explore/NAME/full/ unless "
                             "--publish)")
    parser.add_argument("--publish", action="store_true",
                        help="write the record (tables/, figures/, notebooks/executed/): "
                             "the full profile only; used by make reproduce, not by hand")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                        metavar=("NAME", "VALUE"),
                        help="override one parameter (VALUE read as YAML, e.g. "
                             "-p epochs 3 -p datasets '[bibtex]'); the outputs then go "
                             "under build/explore/, never to tables/ or figures/")
    parser.add_argument("--timeout", type=int, default=None,
                        help="execution timeout per cell, seconds (default: the "
                             "notebook's, runner.cell_timeout)")
    parser.add_argument("--run", metavar="TARGET",
                        help="provenance: record that make TARGET (reproduce or "
                             "reproduce-extra) ran from --started until now")
    parser.add_argument("--started", metavar="ISO_TIME",
                        help="provenance: when make TARGET started (UTC, ISO 8601)")
    args = parser.parse_args(argv)
    if args.action == "provenance":
        if bool(args.run) != bool(args.started):
            print("error: provenance: --run and --started go together", file=sys.stderr)
            return 2
        if args.run:
            try:
                record_make_run(args.run, args.started, args.profile)
            except ValueError as exc:
                print(f"error: provenance: {exc}", file=sys.stderr)
                return 2
        print(write_provenance(args.profile))
        return 0

    def usage_error(message: str) -> int:
        print(f"error: {message}", file=sys.stderr)
        return 2

    names = args.names
    if not names:
        return usage_error(f"{args.action}: name a notebook or 'all' (the notebooks: "
                           f"{', '.join(known_notebooks())})")
    if "all" in names:
        if names != ["all"]:
            return usage_error("'all' stands alone: give notebook names or 'all'")
        names = known_notebooks()
    if args.publish and (args.action != "run" or args.profile != "full"):
        return usage_error("--publish goes with 'run ... --profile full' only")
    from papermill.exceptions import PapermillExecutionError

    overrides = {}
    try:
        for name in names:
            notebook_path(name)
        for key, text in args.parameter:
            if key in overrides:
                return usage_error(f"-p {key} given twice")
            overrides[key] = parse_value(text)
        if overrides and len(names) != 1:
            return usage_error("-p overrides apply to one notebook: name exactly one")
        if overrides and args.publish:
            return usage_error("--publish publishes the committed full profile: no -p")
        for name in names:
            if args.action == "record-nbval":
                record_nbval(name)
            elif args.action == "check":
                check_full_profile(name)
                params = effective_params(name, args.profile, overrides)
                check_params(name, params)
                check_values(name, params)
                print(f"{name}: parameters ok")
            elif args.action == "prepare":
                print(prepare(name, args.profile, overrides=overrides))
            else:
                _run_from_command_line(name, args, overrides)
    except (NotebookParameterError, ValueError, FileNotFoundError) as exc:
        return usage_error(str(exc))
    except PapermillExecutionError as exc:
        # the executed copy with the cell's traceback is kept (run() said where); here
        # one line: which cell stopped the run, and why
        print(f"error: {name} stopped in cell In [{exc.exec_count}]: {exc.ename}: "
              f"{exc.evalue or '(no message)'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
