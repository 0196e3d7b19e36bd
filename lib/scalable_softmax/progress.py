"""Progress bars that suit where the code runs, and a visible numba warm-up.

:func:`tqdm` returns a progress bar like ``tqdm.tqdm(...)``:

* in Jupyter (an IPython kernel) with ``ipywidgets`` installed: the widget bar of
  ``tqdm.notebook``;
* in a kernel without ``ipywidgets``, or when the environment variable
  ``SCALABLE_SOFTMAX_PROGRESS=text`` is set: a text bar on standard output, updated at
  most every ``mininterval`` seconds (``tqdm.auto`` would print ``TqdmWarning: IProgress
  not found`` here instead);
* elsewhere (scripts, worker processes): tqdm's text bar on standard error.

:func:`shows_progress` resolves a ``progress`` argument: None ("auto", the default of
:func:`scalable_softmax.fit.fit`) shows a bar only where a person watches: in a
notebook (an IPython kernel) or when standard error is a terminal; a log file or a pipe
gets no ``fit umax: 0%| | 0/20`` fragments.

``SCALABLE_SOFTMAX_PROGRESS=off`` disables every bar. The notebook runner
(:mod:`scalable_softmax.repro.machinery.runner`) sets it for the notebooks it executes: an
executed notebook is a record, and every refresh of a text bar would stay in it as one
more output (carriage-return fragments with ``it/s`` rates), so the executed copies hold
the results and the lines the notebooks print, never a bar.

:func:`scalable_softmax.repro.machinery.runs.compile_kernels` runs each method once on a
tiny problem under a progress bar, so that numba's compilation (about 12 s in all on a
fresh cache, then read back from ``NUMBA_CACHE_DIR`` in well under a second per method)
is visible and is paid before a sweep starts its worker processes, which then read the
compiled kernels from the cache.
"""
from __future__ import annotations

import os
import sys

__all__ = ["tqdm", "in_kernel", "shows_progress", "ENV"]

#: environment variable choosing the kind of bar: "text", "widget", "off" or unset (auto)
ENV = "SCALABLE_SOFTMAX_PROGRESS"


def in_kernel() -> bool:
    """True inside an IPython kernel (Jupyter, papermill, nbval)."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and hasattr(ip, "kernel")


def shows_progress(progress) -> bool:
    """Whether a ``progress`` argument asks for a bar: True or False as given; None
    ("auto"): in an IPython kernel, or when standard error is a terminal.

    ``SCALABLE_SOFTMAX_PROGRESS=off`` still disables the bar (see :func:`tqdm`).
    """
    if progress is not None:
        return bool(progress)
    if in_kernel():
        return True
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):      # replaced or closed stream
        return False


def _has_widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def tqdm(*args, **kwargs):
    """A ``tqdm`` progress bar of the kind that suits the current process (see the
    module's doc); takes tqdm's arguments."""
    mode = os.environ.get(ENV, "").strip().lower()
    if mode == "off":
        kwargs["disable"] = True
    if in_kernel():
        if mode != "text" and mode != "off" and _has_widgets():
            from tqdm.notebook import tqdm as bar
            return bar(*args, **kwargs)
        from tqdm.std import tqdm as bar
        kwargs.setdefault("file", sys.stdout)
        kwargs.setdefault("mininterval", 5.0)
        kwargs.setdefault("ncols", 90)
        kwargs.pop("dynamic_ncols", None)
        return bar(*args, **kwargs)
    from tqdm.std import tqdm as bar
    return bar(*args, **kwargs)
