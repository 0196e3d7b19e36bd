"""Unbiased scalable softmax optimisation (Fagan & Iyengar 2018) and the
One-vs-Each approximation (Titsias 2016): data, reference math and fast kernels.

The names a user needs are at the top level::

    from scalable_softmax import fit, FitResult, evaluate, load_dataset
    from scalable_softmax import SoftmaxSGDClassifier      # needs scikit-learn

Each is imported on first use (``import scalable_softmax`` alone loads neither numba
nor pandas). ``scalable_softmax.fit`` and ``scalable_softmax.evaluate`` are the
functions, also after their modules have been imported; the modules themselves are
``sys.modules["scalable_softmax.fit"]``, or reached by ``from scalable_softmax.fit
import ...``.
"""

import sys
import types

from scalable_softmax._version import __version__

#: top-level name -> the module that defines it
_LAZY = {
    "fit": "scalable_softmax.fit",
    "FitResult": "scalable_softmax.fit",
    "evaluate": "scalable_softmax.evaluate",
    "load_dataset": "scalable_softmax.data",
    # the scikit-learn estimator: the library itself does not need scikit-learn (an
    # optional extra)
    "SoftmaxSGDClassifier": "scalable_softmax.estimator",
}

__all__ = ["FitResult", "SoftmaxSGDClassifier", "evaluate", "fit", "load_dataset",
           "__version__"]


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'scalable_softmax' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """The package's module type: importing the submodule ``scalable_softmax.fit`` (or
    ``.evaluate``) would bind the module as the package's attribute ``fit``, hiding the
    function of that name; that binding is skipped, so the attribute is always the
    function (:func:`__getattr__`)."""

    def __setattr__(self, name, value):
        if name in ("fit", "evaluate") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
