"""The reproduction collection: what the notebooks of Fagan & Iyengar (2018) and
Titsias (2016) compute, as tested functions, and the machinery that runs them.

Nothing of the model library (``scalable_softmax`` outside this package) imports it; it
imports the library. By concern:

* the papers' printed numbers and the authors' recorded runs -- :mod:`.paper`;
* training runs, their cache and executors (local pool, Dask) -- :mod:`.runs`; the
  paper's main study -- :mod:`.main_study`;
* what each notebook computes -- :mod:`.derivations` (00), :mod:`.instability` (01),
  :mod:`.main_study` (02), :mod:`.tuning` (03, 04), :mod:`.formulations` (05),
  :mod:`.paper_tables` (06, 11), :mod:`.timing` (07), :mod:`.nonparametric` (08),
  :mod:`.toy2d` (09), :mod:`.ove_classification` (10), the race of 12 and 14
  (:mod:`.race`: its runners, targets, tuning, seeds and verdicts), with
  :mod:`.reporting` for summaries of many runs;
* outputs: staged tables and figures -- :mod:`.outputs`; one figure style -- :mod:`.style`;
* the notebook runner and publishing the record -- :mod:`.runner`; the HTML site --
  :mod:`.site`; a rerun against the record -- :mod:`.verify`; the numbers the README
  and docs quote -- :mod:`.numbers`.

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
