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
public in :mod:`scalable_softmax.kernels` (functions of arrays); what a trainer hands
them is read here: :func:`csr_arrays`, :func:`prefetch_mode`, :func:`set_prefetch_mode`,
:func:`dense_rows` and :func:`objective`.
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


def csr_arrays(trainer):
    """The CSR arrays and labels a trainer's kernels read
    (:meth:`scalable_softmax.methods.base.Trainer.csr_arrays`).

    Parameters
    ----------
    trainer : scalable_softmax.methods.base.Trainer
        A trainer of any registered method.

    Returns
    -------
    indptr, indices, data, y : ndarray
        The trainer's own contiguous arrays (not copies): ``indptr`` int64, ``indices``
        int32 or int64 as the method stores them, ``data`` float64, ``y`` int64.
    """
    return trainer.csr_arrays()


def prefetch_mode(trainer) -> int:
    """The kernel mode (0 plain, 1 to 3 pipelined; see
    :func:`scalable_softmax.kernels.sgd.epoch_m1`) an explicit-SGD trainer runs."""
    return trainer.prefetch_mode


def set_prefetch_mode(trainer, mode: int) -> None:
    """Make an explicit-SGD trainer run kernel mode ``mode`` (0 to 3) from its next epoch;
    every mode gives bit-identical results, only the memory hints differ."""
    trainer.prefetch_mode = mode


def dense_rows(trainer) -> bool:
    """True when an explicit-SGD trainer runs its dense-row path (every row of ``X``
    stores all ``D`` columns)."""
    return trainer.dense_rows


def objective(trainer, x):
    """The value and gradient an L-BFGS trainer (``"exact"``, ``"bouchard"``,
    ``"ove-exact"``) minimises, at the flat parameter vector ``x``: what each of its
    iterations evaluates (:meth:`scalable_softmax.methods.full.ExactTrainer.objective_at`).

    Returns
    -------
    value : float
    gradient : ndarray, the shape of ``x``
    """
    return trainer.objective_at(x)
