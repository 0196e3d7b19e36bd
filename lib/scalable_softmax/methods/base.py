"""The contract every optimiser implements, so that :func:`scalable_softmax.fit.fit`
can drive any of them the same way.

Conventions (docs/math.md sections 0 and 2): ``W`` is ``K x D`` float64, C-contiguous, row ``k`` is
``w_k``; ``u`` is ``(N,)`` float64 for the double-sum methods, ``None`` otherwise.
Learning rates are in the per-datapoint units of docs/math.md section 2 (the factor ``N``
of ``f_ik`` is dropped), so the paper's Table 2 rates apply as published.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from scalable_softmax.validation import check_trainer_data


@dataclass
class EpochReport:
    """What one call of :meth:`Trainer.run_epoch` did.

    steps: number of optimiser steps taken (a step consumes one datapoint for
        n = 1 methods, one minibatch for minibatch methods).
    diverged_at: index (0-based, within this epoch) of the first step that produced
        a non-finite parameter, or -1 if none did. Training stops there.
    extra: method-specific counters (e.g. root-finder iterations, u resets).
    """

    steps: int
    diverged_at: int = -1
    extra: dict | None = None


class Trainer:
    """Base class of all optimisers.

    Parameters
    ----------
    X : scipy.sparse.csr_matrix, float64, shape (N, D), canonical (sorted indices).
    y : ndarray of int64, shape (N,), values in ``0..K-1``.
    K : number of classes.
    mu : ridge parameter (docs/math.md section 1), ``>= 0``.
    batch_size : datapoints per step ``n``.
    n_sampled : classes sampled per datapoint ``m``.
    **options : method-specific options (documented on each subclass). Unknown
        options must raise ``ValueError`` naming them.

    Subclasses set ``name`` and the facts below, and implement :meth:`init_params`,
    :meth:`run_epoch` and :meth:`weights`. Arguments are validated by ``fit`` before a
    trainer is built.

    Method facts (class attributes: what :func:`~scalable_softmax.fit.fit` and the
    estimator need to know about a method, declared on the method so that neither
    compares method names):

    ``has_u``
        the method keeps the double-sum variables ``u`` (one per datapoint).
    ``exact_u``
        None, or the closed form of the optimal ``u`` for given weights that
        ``u_init="exact"`` writes (docs/math.md section 2.4): ``"softmax"``
        (``u_i* = log sum_k exp(s_ik) - s_{i,y_i}``, floored at 0) or ``"raman"``
        (``ubar_i* = log sum_k exp(s_ik)``). A method with ``u`` but no closed form
        (Bouchard's bound) keeps its own start.
    ``full_batch``
        not stochastic steps (full-batch L-BFGS): no learning rate (``lr=None``).
    ``takes_ridge``
        the method minimises the ridge-penalised objective for ``mu > 0``.
    ``minibatch``
        ``batch_size`` may exceed 1 (datapoints per step).
    ``partial_fit``
        one call of ``fit(..., epochs=1, init_W=...)`` continues training from given
        weights, so the estimator's ``partial_fit`` may use it.
    ``default_batch_size``, ``default_n_sampled``
        what ``batch_size=None`` and ``n_sampled=None`` mean.
    :meth:`max_n_sampled`
        the most classes per datapoint the method can draw under given options.
    ``reference``
        the name, in the method's module, of the plain NumPy function its kernels are
        tested against (``"reference_step"``, the one name every method module uses for
        its step; the full-batch methods: ``"full_objective_reference"``);
        :meth:`reference_function` returns it.
    """

    name: str = "base"
    has_u: bool = False
    exact_u: str | None = None
    default_batch_size: int = 1
    default_n_sampled: int = 1
    #: True for methods that are not stochastic steps (e.g. full-batch L-BFGS)
    full_batch: bool = False
    takes_ridge: bool = True
    minibatch: bool = False
    partial_fit: bool = True
    reference: str = "reference_step"

    @classmethod
    def reference_function(cls):
        """The plain NumPy reference of the method (``reference`` in its module)."""
        import sys
        return getattr(sys.modules[cls.__module__], cls.reference)

    @classmethod
    def max_n_sampled(cls, K: int, options: dict) -> int | None:
        """The largest ``n_sampled`` the method accepts with ``K`` classes and method
        options ``options`` (None: no limit, the method draws at most the classes
        there are). Default: the ``K - 1`` classes other than the label, or all ``K``
        when the options draw from every class (``sample_from="all"``) or share the
        negatives of a minibatch (``shared_negatives=True``)."""
        if options.get("sample_from") == "all" or options.get("shared_negatives"):
            return int(K)
        return int(K) - 1

    def __init__(self, X: sp.csr_matrix, y: np.ndarray, K: int, *, mu: float = 0.0,
                 batch_size: int | None = None, n_sampled: int | None = None, **options):
        check_trainer_data(X, y, K)      # no kernel indexes outside W or x
        self.X = X
        self.y = y
        self.K = int(K)
        self.N, self.D = X.shape
        self.mu = float(mu)
        self.batch_size = int(batch_size or self.default_batch_size)
        self.n_sampled = int(n_sampled or self.default_n_sampled)
        self.options = options
        self.W: np.ndarray | None = None
        self.u: np.ndarray | None = None

    def init_params(self, u_init: str = "zero") -> None:
        """Allocate and write ``self.W`` (zeros, every page touched) and ``self.u``
        (``"zero"``: 0, ``"logK"``: log K) when the method has ``u``."""
        raise NotImplementedError

    def run_epoch(self, order: np.ndarray, lr: float, seed: int) -> EpochReport:
        """Run one epoch over datapoints in ``order`` (int64 indices, length N: a
        permutation, a with-replacement sample, or the file order). Minibatch methods
        take consecutive chunks of ``batch_size``. Class sampling is seeded by
        ``seed`` (numba's RNG, seeded inside the kernel) so runs are bit-identical."""
        raise NotImplementedError

    def weights(self) -> np.ndarray:
        """The current ``K x D`` weights, with any lazy scale factors folded in."""
        return self.W

    # -- optional helpers (subclasses may use or override them) ---------------------

    def check_options(self, defaults: dict) -> dict:
        """Merge ``self.options`` over ``defaults`` and return the result.

        Raises
        ------
        ValueError
            If an option is not a key of ``defaults`` (the message names the unknown
            options and lists the accepted ones).
        """
        unknown = sorted(set(self.options) - set(defaults))
        if unknown:
            accepted = ", ".join(sorted(defaults)) or "none"
            raise ValueError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for method "
                f"{self.name!r}; accepted options: {accepted}"
            )
        return {**defaults, **self.options}

    def csr_arrays(self):
        """The CSR arrays and labels this trainer's kernels read: ``indptr`` (int64),
        ``indices`` (int32 or int64 as the method stores them), ``data`` (float64), ``y``
        (int64); the trainer's own contiguous arrays, not copies. Every trainer whose
        kernels read ``X`` row by row keeps them (all the registered methods)."""
        return self._indptr, self._indices, self._data, self._y

    def warmup(self) -> None:
        """Compile (or load from numba's cache) every kernel :meth:`run_epoch` will use,
        so that ``fit`` does not count compilation as training time. Called once after
        :meth:`init_params`; must not change the parameters. Default: nothing."""
        return None
