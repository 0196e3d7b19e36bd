"""The contract every optimiser implements, so that :func:`scalable_softmax.fit.fit`
can drive any of them the same way.

Conventions (docs/math.md sections 0 and 2): ``W`` is ``K x D`` float64, C-contiguous, row ``k`` is
``w_k``; ``u`` is ``(N,)`` float64 for the double-sum methods, ``None`` otherwise.
Learning rates are in the per-datapoint units of docs/math.md section 2 (the factor ``N``
of ``f_ik`` is dropped), so the paper's Table 2 rates apply as published.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from scalable_softmax import validation
from scalable_softmax.validation import check_trainer_data

#: the rule of the ``threads`` option (numba threads, at most numba's pool)
THREADS_RULE = {"type": "int", "min": 1, "max": int(numba.config.NUMBA_NUM_THREADS),
                "label": "option 'threads' (numba threads, at most NUMBA_NUM_THREADS)"}


def _from_hogwild(value, given, method):
    """``hogwild=True``: U-max's Hogwild kernel on ``threads`` threads, 2 when not
    given (its old default); ``hogwild=False``: nothing."""
    if value:
        if given.get("threads") is None:
            given["threads"] = 2
    return "threads"


def _from_parallel(value, given, method):
    """``parallel=True``: numba's thread count now (``numba.get_num_threads()``);
    ``parallel=False``: 1 thread; with ``threads=`` as well: an error."""
    if given.get("threads") is not None:
        if value:
            raise ValueError(f"method {method!r}: give the option 'threads' (an int) or "
                             "the older 'parallel=True' (numba's thread count), not both")
        return "threads"
    given["threads"] = int(numba.get_num_threads()) if value else 1
    return "threads"


def _from_transposed(value, given, method):
    """``softmax-sgd``'s summation order: ``transposed=False`` is the class-major
    straightforward loop, ``layout="class-rowwise"``; ``True`` the other layouts."""
    layout = given.get("layout")
    if value:
        if layout == "class-rowwise":
            raise ValueError(f"method {method!r}: option transposed=True contradicts "
                             "layout='class-rowwise'; give layout alone")
    elif layout in (None, "class"):
        given["layout"] = "class-rowwise"
    elif layout != "class-rowwise":
        raise ValueError("option transposed=False is the class-major loop: pass "
                         "layout='class-rowwise' instead (it needs class-major weights)")
    return "layout"


class FrozenOptions(dict):
    """A method's resolved options (:meth:`Trainer.resolve_options`): a dict that refuses
    to be changed, so that an option is never rewritten after its check (a value derived
    from the options lives in an attribute of its own). Pickles as a plain copy.

    ``checked_for`` is ``(trainer class, options given, n_sampled)``, what the check
    ran on (None: unknown, as after unpickling): :meth:`Trainer.resolve_options` with
    ``prior=`` reuses a check of the same class and options instead of running it
    again, and a trainer built with ``resolved=`` accepts only its own class's."""

    def __init__(self, opts=(), checked_for=None):
        super().__init__(opts)
        self.checked_for = checked_for

    def _refuse(self, *args, **kwargs):
        raise TypeError("a method's resolved options are read-only (checked once); keep a "
                        "derived value in an attribute of its own")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self):
        return (FrozenOptions, (dict(self),))


def _same_options(a: dict, b: dict) -> bool:
    """The same names holding the same objects (identity, not ``==``: ``True == 1``,
    yet a rule may accept one and not the other); anything else is checked again."""
    return a.keys() == b.keys() and all(a[k] is b[k] for k in a)


#: the older option names, each mapped here (the one place) onto ``threads`` or
#: ``layout`` with a DeprecationWarning by :meth:`Trainer.resolve_options`; a method
#: lists those it still accepts in its fact ``deprecated_options``
DEPRECATED_OPTIONS = {"hogwild": _from_hogwild, "parallel": _from_parallel,
                      "transposed": _from_transposed}


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
    **options : method-specific options, checked against the schema :attr:`options`
        (unknown names and bad values raise ``ValueError`` naming them); the resolved
        options (defaults filled in) are :attr:`opts`.
    resolved : instead of ``**options``, the options :meth:`resolve_options` returned
        for this class and ``n_sampled`` (``fit`` passes those its
        :class:`~scalable_softmax.protocols.FitConfig` checked, so that a fit checks
        its options once); anything else raises ``TypeError``.

    Arguments are validated by ``fit`` before a trainer is built: ``K >= 2``,
    ``batch_size`` against :attr:`minibatch` and ``n_sampled`` against
    :meth:`max_n_sampled` (:meth:`check_sizes`); a trainer does not check them again.
    Subclasses set ``name``, the facts and the option schema below, and implement
    :meth:`init_params`, :meth:`run_epoch` and :meth:`weights`.

    The contract ``fit`` and the notebooks' runner use (every member declared here, with
    a default where a method may leave it): :meth:`init_params`, :meth:`set_params` (a
    warm start), :meth:`warmup`, :meth:`run_epoch`, :meth:`weights`, the attributes
    ``W``, ``u`` and :attr:`finished`, and the facts below.

    Method facts (class attributes: what :func:`~scalable_softmax.fit.fit` and the
    estimator need to know about a method, declared on the method so that neither
    compares method names):

    ``options``
        the option schema, ``{name: (default, rule)}`` with rules in the vocabulary of
        :mod:`scalable_softmax.validation`; a subclass extends its base's
        (``{**Base.options, ...}``, as scikit-learn's ``_parameter_constraints``).
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
    ``minibatch``
        ``batch_size`` may exceed 1 (datapoints per step); ``fit`` refuses
        ``batch_size > 1`` otherwise.
    ``default_batch_size``, ``default_n_sampled``
        what ``batch_size=None`` and ``n_sampled=None`` mean.
    :meth:`max_n_sampled`
        the most classes per datapoint the method can draw under given options.
    ``parallel_kernel``
        the method has a parallel kernel: its option ``threads > 1`` runs it (the
        stochastic methods without one refuse ``threads > 1``).
    ``reference``
        the name, in the method's module, of the plain NumPy function its kernels are
        tested against (``"reference_step"``, the one name every method module uses for
        its step; the full-batch methods: ``"full_objective_reference"``);
        :meth:`reference_function` returns it.
    """

    name: str = "base"
    #: option name -> (default, rule)
    options: dict = {}
    has_u: bool = False
    exact_u: str | None = None
    default_batch_size: int = 1
    default_n_sampled: int = 1
    #: True for methods that are not stochastic steps (e.g. full-batch L-BFGS)
    full_batch: bool = False
    minibatch: bool = False
    parallel_kernel: bool = False
    #: the older option names the method still accepts (keys of
    #: :data:`DEPRECATED_OPTIONS`), mapped onto ``threads`` / ``layout``
    deprecated_options: tuple = ()
    #: the joint rules of the options, beside the schema's single-value rules: functions
    #: ``rule(cls, opts, n_sampled) -> message or None`` of the checked options and the
    #: classes per datapoint (no data needed), run by :meth:`resolve_options`
    option_rules: tuple = ()
    reference: str = "reference_step"
    #: True once the method has nothing left to do (a converged full-batch method):
    #: ``fit`` then stops its epoch loop
    finished: bool = False

    @classmethod
    def reference_function(cls):
        """The plain NumPy reference of the method (``reference`` in its module)."""
        import sys
        return getattr(sys.modules[cls.__module__], cls.reference)

    @classmethod
    def resolve_options(cls, given: dict, n_sampled: int | None = None,
                        prior: FrozenOptions | None = None) -> FrozenOptions:
        """``given`` merged over the defaults of :attr:`options`, every value checked
        against its rule (:func:`scalable_softmax.validation.check_options`: the one
        check of method options; no data needed, so ``fit`` calls it before any work),
        then the joint rules :attr:`option_rules` (with ``n_sampled`` classes per
        datapoint; None: :attr:`default_n_sampled`). Returns the options read-only
        (:class:`FrozenOptions`).

        ``prior``: options this method resolved before (a resolved
        :class:`~scalable_softmax.protocols.FitConfig` keeps them). When they were
        checked for this class and the same ``given``, the schema is not checked again:
        ``prior`` itself is returned (the joint rules run again only for another
        ``n_sampled``). So one ``fit`` checks its options once, however many steps pass
        them on.

        An older name the method still accepts (``deprecated_options``: ``hogwild``,
        ``parallel``, ``transposed``) is first mapped onto ``threads`` or ``layout``
        (:data:`DEPRECATED_OPTIONS`) with a ``DeprecationWarning``; the result holds
        the new names only, so resolving it again changes nothing.

        Raises
        ------
        ValueError
            For an unknown option (the message lists the accepted ones) or a value
            that breaks its rule.
        """
        given = cls.map_deprecated(given)
        m = cls.default_n_sampled if n_sampled is None else int(n_sampled)
        seen = getattr(prior, "checked_for", None)
        if seen is not None and seen[0] is cls and _same_options(seen[1], given):
            if seen[2] == m:
                return prior
            opts = dict(prior)              # the schema held; the joint rules again
        else:
            opts = validation.check_options(cls.options, given, f"method {cls.name!r}")
        for rule in cls.option_rules:
            message = rule(cls, opts, m)
            if message:
                raise ValueError(message)
        return FrozenOptions(opts, checked_for=(cls, given, m))

    @classmethod
    def map_deprecated(cls, given: dict) -> dict:
        """``given`` (a new dict) with the older names the method accepts mapped onto
        ``threads`` / ``layout`` (:data:`DEPRECATED_OPTIONS`), each with a
        ``DeprecationWarning``; nothing else is checked or filled in."""
        given = dict(given)
        for old in cls.deprecated_options:
            if old in given:
                value = given.pop(old)
                if not isinstance(value, (bool, np.bool_)):
                    raise ValueError(f"method {cls.name!r}: option {old!r} must be a bool; "
                                     f"got {value!r}")
                new = DEPRECATED_OPTIONS[old](bool(value), given, cls.name)
                use = (f"{new}={given[new]!r}" if given.get(new) is not None
                       else f"the default of {new!r}")
                warnings.warn(f"method {cls.name!r}: option {old}={value!r} is deprecated; "
                              f"use {use}", DeprecationWarning, stacklevel=4)
        return given

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

    @classmethod
    def check_sizes(cls, K: int, batch_size: int, n_sampled: int, options: dict) -> None:
        """Raise ``ValueError`` unless ``batch_size`` (datapoints per step) suits
        :attr:`minibatch` and ``n_sampled`` (classes per datapoint) is at most
        :meth:`max_n_sampled` for ``K`` classes and the resolved ``options``.
        ``fit`` calls it once, before the trainer is built."""
        if not cls.minibatch and batch_size != 1:
            from scalable_softmax.methods import METHODS, get_trainer_class

            others = [m for m in METHODS if get_trainer_class(m).minibatch]
            raise ValueError(
                f"method {cls.name!r} takes one datapoint per step: batch_size must be 1 "
                f"(or None); got {batch_size}. Use {', '.join(map(repr, others))} for "
                "minibatches")
        mmax = cls.max_n_sampled(K, options)
        if mmax is not None and not 1 <= n_sampled <= mmax:
            how = ", ".join(f"{k}={options[k]!r}" for k in ("sample_from",
                                                           "shared_negatives")
                            if k in options)
            raise ValueError(f"n_sampled (classes per step) must be in 1..{mmax} for "
                             f"method {cls.name!r} with K = {K}"
                             + (f" and {how}" if how else "") + f"; got {n_sampled}")

    def __init__(self, X: sp.csr_matrix, y: np.ndarray, K: int, *, mu: float = 0.0,
                 batch_size: int | None = None, n_sampled: int | None = None,
                 resolved: FrozenOptions | None = None, **options):
        check_trainer_data(X, y, K)      # no kernel indexes outside W or x
        self.X = X
        self.y = y
        self.K = int(K)
        self.N, self.D = X.shape
        self.mu = float(mu)
        self.batch_size = int(batch_size or self.default_batch_size)
        self.n_sampled = int(n_sampled or self.default_n_sampled)
        #: the resolved options (the schema's defaults, overridden by those given;
        #: read-only): checked here, unless ``fit`` passes those its configuration
        #: checked (``resolved``)
        self.opts = (self.resolve_options(options, n_sampled=self.n_sampled)
                     if resolved is None else self._checked(resolved, options))
        self.W: np.ndarray | None = None
        self.u: np.ndarray | None = None

    def _checked(self, resolved, options) -> FrozenOptions:
        """``resolved``, options :meth:`resolve_options` returned for this class and
        ``n_sampled`` (what ``fit`` passes: no second check); anything else raises."""
        seen = getattr(resolved, "checked_for", None)
        if options or seen is None or seen[0] is not type(self) or seen[2] != self.n_sampled:
            raise TypeError(
                f"method {self.name!r}: resolved= takes the options that "
                f"{type(self).__name__}.resolve_options returned for n_sampled = "
                f"{self.n_sampled}, and no other option; give the options as keywords "
                "instead (they are checked then)")
        return resolved

    def init_params(self, u_init: str = "zero") -> None:
        """Allocate and write ``self.W`` (zeros, every page touched) and ``self.u``
        (``"zero"``: 0, ``"logK"``: log K) when the method has ``u``."""
        raise NotImplementedError

    def set_params(self, W: np.ndarray) -> None:
        """Start from the weights ``W`` (``K x D``, copied; a warm start); call after
        :meth:`init_params`. Default: write them into ``self.W``, which every method
        holds right after :meth:`init_params` (lazy scale factors at 1); a method with
        caches of its weights overrides this."""
        if self.weights() is not self.W:
            raise RuntimeError(f"method {self.name!r}: cannot warm-start (its weights "
                               "are not held in trainer.W after init_params)")
        self.W[...] = W

    def run_epoch(self, order: np.ndarray, lr: float, seed: int) -> EpochReport:
        """Run one epoch over datapoints in ``order`` (int64 indices, length N: a
        permutation, a with-replacement sample, or the file order). Minibatch methods
        take consecutive chunks of ``batch_size``. Class sampling is seeded by
        ``seed`` (numba's RNG, seeded inside the kernel) so runs are bit-identical."""
        raise NotImplementedError

    def weights(self) -> np.ndarray:
        """The current ``K x D`` weights, with any lazy scale factors folded in."""
        return self.W

    def native_weights(self) -> tuple[np.ndarray, str]:
        """``(weights, layout)``: the current weights in the layout the trainer stores
        them, for :func:`scalable_softmax.evaluate.evaluate`'s ``layout``, without a
        transpose: ``("class")`` ``K x D`` as :meth:`weights`, or ``("feature")`` ``D x
        K`` (a feature-major trainer). May be the trainer's own array (read it before
        the next step; do not write to it). Default: ``(self.weights(), "class")``."""
        return self.weights(), "class"

    def csr_arrays(self):
        """The CSR arrays and labels this trainer's kernels read: ``indptr`` (int64),
        ``indices`` (int32 or int64 as the method stores them), ``data`` (float64), ``y``
        (int64); the trainer's own contiguous arrays, not copies. Every trainer whose
        kernels read ``X`` row by row keeps them (all the registered methods)."""
        return self._indptr, self._indices, self._data, self._y

    def stalled(self) -> str | None:
        """None, or a sentence saying that the method stopped for good on a failure
        before converging (``fit`` then issues a ``NoProgressWarning`` and records the
        sentence in ``FitResult.stalled``). Default: None (a stochastic method runs
        its epochs)."""
        return None

    def warmup(self) -> None:
        """Compile (or load from numba's cache) every kernel :meth:`run_epoch` will use,
        so that ``fit`` does not count compilation as training time. Called once after
        :meth:`init_params`; must not change the parameters. Default: nothing."""
        return None


def _threads_need_a_parallel_kernel(cls, opts, n_sampled):
    """``threads > 1`` only where the method has a parallel kernel."""
    if not cls.parallel_kernel and opts["threads"] > 1:
        return no_parallel_kernel(cls.name, opts["threads"])
    return None


class StochasticTrainer(Trainer):
    """Base class of the stochastic methods (steps at a learning rate): they all take
    the option ``threads`` (int >= 1, default 1: the serial kernel, bit-identical to
    the runs before the option existed). ``threads > 1`` runs the method's parallel
    kernel where it has one (:attr:`Trainer.parallel_kernel`); the others refuse it. A
    method's older switch for its parallel kernel (``hogwild``, ``parallel``) is
    mapped onto ``threads`` by :meth:`Trainer.resolve_options`."""

    options = {"threads": (1, THREADS_RULE)}
    option_rules = (_threads_need_a_parallel_kernel,)


def no_parallel_kernel(method: str, threads: int, why: str = "") -> str:
    """The message for ``threads > 1`` where ``method`` has no parallel kernel (yet):
    which methods have one today."""
    from scalable_softmax.methods import METHODS, get_trainer_class

    have = [m for m in METHODS if get_trainer_class(m).parallel_kernel]
    return (f"method {method!r} has no parallel kernel{why}, so threads={threads} cannot "
            f"be honoured (it would run serially); use threads=1. Methods with a "
            f"parallel kernel today: {', '.join(have)} (see each method's notes)")
