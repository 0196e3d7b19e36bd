"""The reproduction collection: what the notebooks of Fagan & Iyengar (2018) and
Titsias (2016) compute, as tested functions, and the machinery that runs them.

Nothing of the model library (``scalable_softmax`` outside this package) imports it; it
imports the library. The wing is grouped by what each part serves:

* :mod:`.fagan` -- the experiments of Fagan & Iyengar (2018), one module per notebook:
  :mod:`~.fagan.derivations` (00; its checks of Titsias' bounds too: one notebook checks
  both papers' derivations), :mod:`~.fagan.instability` (01), :mod:`~.fagan.main_study`
  (02), :mod:`~.fagan.tuning` (03, 04), :mod:`~.fagan.formulations` (05),
  :mod:`~.fagan.paper_tables` (06, 11), :mod:`~.fagan.timing` (07; its machine and memory
  readings serve notebooks 12 and 14, the runner and the race too),
  :mod:`~.fagan.real_large_k` (13, the paper's study at K = 10,000); with the paper's
  printed numbers and the authors' recorded runs (:mod:`~.fagan.paper`) and the
  summaries of many runs and seed-by-seed claims (:mod:`~.fagan.reporting`; its
  :class:`~.fagan.reporting.Findings` checks every notebook's findings, through the
  runner);
* :mod:`.titsias` -- the experiments of Titsias (2016): :mod:`~.titsias.nonparametric`
  (08), :mod:`~.titsias.toy2d` (09), :mod:`~.titsias.ove_classification` (10);
* :mod:`.race` -- the race of notebooks 12 and 14 (its runners, targets, tuning, seeds
  and verdicts), a package of its own;
* :mod:`.machinery` -- what runs, checks and publishes the notebooks, whichever paper
  they serve: the notebook runner and publishing the record (:mod:`~.machinery.runner`),
  staged tables and figures (:mod:`~.machinery.outputs`), one figure style
  (:mod:`~.machinery.style`), training runs with their cache and executors (local pool,
  Dask; :mod:`~.machinery.runs`, which both papers' experiments and the race's journal
  use), a rerun against the record (:mod:`~.machinery.verify`), the BLAS kernel a run
  loads (:mod:`~.machinery.blaskernel`), the numbers the README and docs quote
  (:mod:`~.machinery.numbers`) and the HTML site (:mod:`~.machinery.site`).

The papers' folders and the race import the machinery, and the papers' folders never
import each other (tests/test_layout.py). The machinery reaches into :mod:`.fagan` in
three places only: the runner's :class:`~.fagan.reporting.Findings` and
:func:`~.fagan.timing.cpu_model` (both lazily) and :mod:`~.machinery.runs`, which
re-exports the paper's data sets, methods and tables of :mod:`~.fagan.paper` (and
checks a run's data set against them); the numbers and the site read the race's tables
through :mod:`.race`.

The package needs the library's ``repro`` extra (``pip install 'scalable_softmax[repro]'``;
``make venv`` installs it in a checkout): importing it without the extra's packages
raises :class:`ModuleNotFoundError` naming them and the command that installs them.
"""
import importlib.util

#: module -> distribution of the ``repro`` extra (pyproject.toml) that this package imports
_EXTRA = {"yaml": "PyYAML", "papermill": "papermill", "nbformat": "nbformat",
          "nbclient": "nbclient", "matplotlib": "matplotlib", "seaborn": "seaborn",
          "threadpoolctl": "threadpoolctl", "joblib": "joblib"}


def _absent() -> list[str]:
    out = []
    for module, dist in _EXTRA.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(dist)
    return out


_MISSING = _absent()
if _MISSING:
    from scalable_softmax import __version__ as _v

    raise ModuleNotFoundError(
        "scalable_softmax.repro (the notebook collection: runner, verify, numbers, site) "
        f"needs the library's 'repro' extra; not installed: {', '.join(_MISSING)}. "
        "Install the library with it: pip install 'scalable_softmax[repro]' (a wheel: "
        f"pip install 'scalable_softmax-{_v}-py3-none-any.whl[repro]'; a checkout: make "
        "venv, or pip install -e '.[repro]')", name="scalable_softmax.repro")
