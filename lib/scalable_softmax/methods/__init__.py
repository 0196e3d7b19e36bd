"""Registry of the optimisers behind :func:`scalable_softmax.fit.fit`.

Each method is a :class:`~scalable_softmax.methods.base.Trainer` subclass living in
its own module; they are imported lazily so that one module's compile time is paid
only when it is used.

Every method module also holds the plain NumPy version of its step, the ground truth
its kernels are tested against, under one name, ``reference_step`` (the full-batch
methods: ``full_objective_reference``); each trainer names it in its fact ``reference``
and :meth:`~scalable_softmax.methods.base.Trainer.reference_function` returns it.
Everything else that lists the methods (the API page's method table, the tests that run
every method, the figures' styles) reads :data:`METHODS`; CONTRIBUTING.md walks
through adding one.

Other NumPy references are named after what they compute, ``<quantity>_reference``
(``full_objective_reference``, ``solve_reduced_reference``,
``implicit_epoch_reference``). The numba building blocks the benchmarks time are
public in :mod:`scalable_softmax.kernels`.
"""
from __future__ import annotations

import importlib

#: method name -> "module:Class"
METHODS = {
    "vanilla": "scalable_softmax.methods.sgd:VanillaTrainer",
    "umax": "scalable_softmax.methods.sgd:UmaxTrainer",
    "raman": "scalable_softmax.methods.sgd:RamanTrainer",
    "implicit": "scalable_softmax.methods.implicit:ImplicitTrainer",
    "implicit-batch": "scalable_softmax.methods.implicit_batch:ImplicitBatchTrainer",
    "ove": "scalable_softmax.methods.sampled:OVETrainer",
    "nce": "scalable_softmax.methods.sampled:NCETrainer",
    "is": "scalable_softmax.methods.sampled:ISTrainer",
    "softmax-sgd": "scalable_softmax.methods.full:SoftmaxSGDTrainer",
    "exact": "scalable_softmax.methods.full:ExactTrainer",
    "bouchard": "scalable_softmax.methods.full:BouchardTrainer",
    "ove-exact": "scalable_softmax.methods.full:OVEExactTrainer",
}


def get_trainer_class(method: str):
    """Return the trainer class registered under ``method``.

    Raises
    ------
    ValueError
        If ``method`` is not a registered name (the message lists them).
    """
    try:
        target = METHODS[method]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown method {method!r}; choose one of: {', '.join(sorted(METHODS))}"
        ) from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)
