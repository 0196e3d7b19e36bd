"""Named experimental protocols: how a method is trained, as ``fit()`` keyword arguments.

The paper's published Table 3, Figure 1 and Table 2 were produced by the authors'
experiment code (December 2017), which does not follow the paper's text in several
ways that each change the 50-epoch log-loss a lot. A protocol names one complete set of
conventions, so that ::

    fit(X, y, method, lr, K=K, epochs=50, **fit_kwargs(protocol, method))

trains exactly as that protocol says. The protocols:

``"authors-code"``
    What the authors' code did (their ``run.py``/``mnl.py`` for the double-sum methods,
    ``tf_mnl.py`` for the TensorFlow baselines):

    * data in file order, never shuffled; ``u_i = 0`` at the start; learning rate
      ``lr * 0.9**e`` in epoch ``e = 0..49`` (constant within an epoch);
    * vanilla SGD and U-max: 5 distinct classes drawn from **all** ``K``, the label
      dropped when drawn (so 4 or 5 classes), each term weighted ``(K-1)/|S|``; U-max
      resets ``u_i`` from the sampled set (threshold 1), no projections (``mu = 0``);
    * Implicit SGD: the class drawn from all ``K``; when it is the label the step moves
      ``u_i`` only; **3 passes over the data per epoch** (3N steps at the epoch's rate);
    * OVE, NCE, IS (TensorFlow): minibatches of 100 in file order; 5 distinct negatives
      per minibatch from all ``K``, shared by the batch, accidental hits *not* removed;
      the per-example losses *summed* over the batch; IS and NCE subtract ``log Q`` (for
      IS this removes the importance weight, since ``Q`` is the same for every class;
      NCE uses ``c = log(m/K)``); OVE weight ``K/m``. The TensorFlow code shows no rate
      decay, but its recorded curves decide for ``lr * 0.9**e`` as for the other
      methods: the defective metric is a deterministic function of the weights, and
      with the decay our epoch-50 values land on the recorded ones, with a constant
      rate they do not (notebook 06 shows the comparison, for 3 seeds).

``"authors-code-1pass"``
    The same, with Implicit SGD at one pass per epoch, so that every method makes the
    same number of steps (the published Table 3 compares Implicit SGD after 150 passes
    over the data with the other methods after 50).

``"paper-text"``
    What the paper's text describes: ``u_i = log K`` (Algorithm 1), one class per step
    for vanilla, U-max and Implicit SGD (uniform among the ``K-1`` classes other than
    the label), a fresh random permutation of the data each epoch; OVE, NCE, IS with
    minibatches of 100 and 5 negatives drawn per datapoint (unbiased weight
    ``(K-1)/m``), the minibatch loss averaged, rate ``lr * 0.9**e``.

Every protocol covers the paper's six methods (:data:`PROTOCOL_METHODS`); other methods
raise ``ValueError``.

The defaults (:data:`EPOCHS`, :data:`LIBRARY_DEFAULTS`) and the validated configuration
of a training run (:class:`FitConfig`: what ``fit``, the estimator and ``RunSpec`` build)
live here too, each in one place.

Precedence, the same everywhere (:func:`scalable_softmax.fit.fit`, the estimator,
``RunSpec``, the notebooks): an argument given explicitly wins; else the protocol's value
(when a protocol is named and sets it); else the library's default
(:data:`LIBRARY_DEFAULTS` for the conventions, the method's own default for
``batch_size``, ``n_sampled`` and its options). :func:`resolve` is the one
implementation of this rule.
"""
from __future__ import annotations

import dataclasses

from scalable_softmax.validation import check, violation

__all__ = ["PROTOCOLS", "PROTOCOL_METHODS", "fit_kwargs", "describe", "DEFAULT_PROTOCOL",
           "EPOCHS", "LR_DECAY", "LIBRARY_DEFAULTS", "STUDY_DEFAULTS", "CONVENTIONS",
           "resolve", "FitConfig", "default_eval_epochs", "DEFAULT_LR", "DEFAULT_LR_SOURCES",
           "default_lr"]

#: epochs of a run unless told otherwise (``fit``, the estimator, the notebooks' runs)
EPOCHS = 50
#: the learning-rate decay per epoch of the paper (and every protocol): ``lr * 0.9**e``
LR_DECAY = 0.9

#: method -> its default learning rate (``lr=None`` in ``fit``, the estimator's default):
#: the record's tuning on unit-L2 rows, one rule for every method: the median over the
#: record's data sets of the rate that tuning chose on each (:data:`DEFAULT_LR_SOURCES`
#: names the table and the rows; with an even number of data sets, the lower of the two
#: middle rates). ``tests/test_default_rates.py`` recomputes every value from the
#: committed tables. The notebooks never use these: every run of theirs gives its rate.
#: The full-batch methods (``exact``, ``bouchard``, ``ove-exact``) have no rate.
DEFAULT_LR = {
    "vanilla": 0.001,
    "umax": 0.1,
    "raman": 0.1,
    "implicit": 10.0,
    "implicit-batch": 10.0,
    "ove": 1.0,
    "nce": 1000.0,
    "is": 100.0,
    "softmax-sgd": 100.0,
}

#: method -> (table of ``tables/``, the rows whose tuned rate per data set gives
#: :data:`DEFAULT_LR`)
DEFAULT_LR_SOURCES = {
    **{m: ("11-tuned-rates", f"tuned_lr of method {m!r}: 50 epochs, the authors' code's "
           "protocol, the 7 data sets") for m in ("vanilla", "umax", "implicit", "ove",
                                                  "nce", "is")},
    "raman": ("05-formulation-comparison", "the rate of the lowest raman_log_loss on each "
              "data set (50 epochs)"),
    "implicit-batch": ("12-peers-rates", "the rate of the lowest val_log_loss of config "
                       "'n=10 m=10' (the method's default sizes) on each data set"),
    "softmax-sgd": ("12-peers-rates", "the rate of the lowest val_log_loss of config "
                    "'batch_size=100' (the method's default size) on each data set"),
}


def default_lr(method: str) -> float | None:
    """The default learning rate of ``method`` (:data:`DEFAULT_LR`), or None for a method
    without one (a full-batch method, or a method registered without a tuned rate)."""
    return DEFAULT_LR.get(method)

#: the conventions of :func:`scalable_softmax.fit.fit` without a protocol (a ``None``
#: argument of ``fit`` means: the protocol's value, else this one)
LIBRARY_DEFAULTS = {"lr_decay": LR_DECAY, "order": "shuffle", "u_init": "zero"}

#: the arguments of ``fit`` for which ``None`` means "not given" (the protocol's value,
#: else the default); any other explicit argument (a method option) wins as given
CONVENTIONS = ("lr_decay", "order", "u_init", "batch_size", "n_sampled")

#: the conventions of the notebooks' runs (``RunSpec``) without a protocol: the
#: library's, but ``u`` starts at ``log K`` as in the paper's Algorithm 1 (vanilla SGD at
#: the paper's Table 2 rates overflows from ``u = 0`` but not from ``u = log K``,
#: notebook 02)
STUDY_DEFAULTS = {**LIBRARY_DEFAULTS, "u_init": "logK"}

#: the methods every protocol defines (the paper's six, in its column order)
PROTOCOL_METHODS = ("ove", "nce", "is", "vanilla", "umax", "implicit")

_SAMPLED = ("ove", "nce", "is")

_AUTHORS_COMMON = dict(order="file", u_init="zero", lr_decay=LR_DECAY)
_AUTHORS_TF = dict(order="file", lr_decay=LR_DECAY, batch_size=100, n_sampled=5,
                   shared_negatives=True, remove_accidental_hits=False, reduction="sum")

_AUTHORS = {
    "vanilla": dict(_AUTHORS_COMMON, n_sampled=5, sample_from="all"),
    "umax": dict(_AUTHORS_COMMON, n_sampled=5, sample_from="all", delta0=1.0),
    "implicit": dict(_AUTHORS_COMMON, sample_from="all", passes=3),
    "ove": dict(_AUTHORS_TF),
    "nce": dict(_AUTHORS_TF),
    "is": dict(_AUTHORS_TF, weighted=False),
}

_PAPER_COMMON = dict(order="shuffle", u_init="logK", lr_decay=LR_DECAY)

_PAPER = {
    "vanilla": dict(_PAPER_COMMON, n_sampled=1),
    "umax": dict(_PAPER_COMMON, n_sampled=1),
    "implicit": dict(_PAPER_COMMON),
    **{m: dict(_PAPER_COMMON, batch_size=100, n_sampled=5) for m in _SAMPLED},
}

#: protocol name -> {method -> fit() keyword arguments}
PROTOCOLS = {
    "authors-code": _AUTHORS,
    "authors-code-1pass": {**_AUTHORS, "implicit": dict(_AUTHORS["implicit"], passes=1)},
    "paper-text": _PAPER,
}

#: the protocol of the headline results (notebooks 02 and 06)
DEFAULT_PROTOCOL = "authors-code"

_DESCRIPTIONS = {
    "authors-code": "the authors' experiment code (u = 0, 5 classes of all K for vanilla "
                    "and U-max, 3 passes per epoch for Implicit, TensorFlow conventions "
                    "for OVE/NCE/IS, file order)",
    "authors-code-1pass": "the authors' code with Implicit SGD at one pass per epoch "
                          "(equal steps for every method)",
    "paper-text": "the paper's text (u = log K, one class per step, shuffled data, "
                  "per-datapoint negatives for OVE/NCE/IS)",
}


def _check_protocol(protocol) -> None:
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of: "
                         f"{', '.join(PROTOCOLS)}")


def fit_kwargs(protocol: str, method: str) -> dict:
    """The :func:`scalable_softmax.fit.fit` keyword arguments with which ``method``
    trains under ``protocol`` (a new dict; the caller may change it).

    Raises
    ------
    ValueError
        For an unknown protocol, or a method the protocol does not define (the message
        lists the accepted names).

    Examples
    --------
    >>> fit_kwargs("authors-code", "implicit")["passes"]
    3
    >>> fit_kwargs("paper-text", "umax")["u_init"]
    'logK'
    """
    _check_protocol(protocol)
    table = PROTOCOLS[protocol]
    if method not in table:
        raise ValueError(f"protocol {protocol!r} defines the methods "
                         f"{', '.join(table)}; got {method!r}")
    return dict(table[method])


def resolve(protocol: str | None, method: str, explicit: dict | None = None,
            defaults: dict | None = None) -> dict:
    """The ``fit()`` keyword arguments of ``method``: ``explicit`` (arguments given; a
    ``None`` value of a :data:`CONVENTIONS` argument means "not given") over the
    protocol's (:func:`fit_kwargs`; none
    when ``protocol`` is None) over ``defaults`` (default :data:`LIBRARY_DEFAULTS`).

    Examples
    --------
    >>> resolve("authors-code", "umax", {"order": "shuffle"})["order"]
    'shuffle'
    >>> resolve("authors-code", "umax")["order"]
    'file'
    >>> resolve(None, "umax")["u_init"]
    'zero'
    """
    out = dict(LIBRARY_DEFAULTS if defaults is None else defaults)
    if protocol is not None:
        out.update(fit_kwargs(protocol, method))
    out.update({k: v for k, v in (explicit or {}).items()
                if not (v is None and k in CONVENTIONS)})
    return out


def describe(protocol: str) -> str:
    """A one-line description of ``protocol`` (for tables and figure captions)."""
    _check_protocol(protocol)
    return _DESCRIPTIONS[protocol]


# ---------------------------------------------------------------------------
# the validated configuration of a run
# ---------------------------------------------------------------------------

def default_eval_epochs(epochs: int) -> list[int]:
    """Epoch 0 and 10 evenly spaced epochs ending at ``epochs`` (all of them if fewer):
    the paper records its metrics at 10 evenly spaced epochs."""
    import numpy as np

    return sorted({0, *np.round(np.linspace(0, epochs, 11)).astype(int).tolist()})


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """Everything :func:`scalable_softmax.fit.fit` needs besides the data, validated
    once (:meth:`resolve`) and then passed down; the estimator and ``RunSpec`` build
    the same object. The fields are ``fit``'s arguments of the same names (see its
    docstring); ``options`` holds the method options given (a protocol's included once
    resolved). A field left None takes, by :meth:`resolve`, the protocol's value, else
    the default of :data:`LIBRARY_DEFAULTS` (``batch_size`` and ``n_sampled`` stay None:
    the method's own default); ``lr`` left None takes the method's
    :data:`DEFAULT_LR` (none for the full-batch methods).
    """

    method: str
    lr: float | None
    epochs: int = EPOCHS
    lr_decay: float | None = None
    mu: float = 0.0
    batch_size: int | None = None
    n_sampled: int | None = None
    seed: int = 0
    order: str | None = None
    u_init: str | None = None
    K: int | None = None
    eval_epochs: tuple | None = None
    eval_rows: int | None = None
    progress: bool | None = None
    fit_intercept: bool = False
    intercept_scaling: float = 1.0
    protocol: str | None = None
    options: dict = dataclasses.field(default_factory=dict)
    #: set by :meth:`resolve`: the method's options checked against its schema and
    #: rules, with defaults filled in (a read-only
    #: :class:`~scalable_softmax.methods.base.FrozenOptions`); ``fit`` builds the
    #: trainer from them, so the options are checked once per fit
    resolved_options: dict | None = dataclasses.field(default=None, compare=False,
                                                      repr=False)

    @classmethod
    def make(cls, method: str, lr, **kw) -> "FitConfig":
        """A configuration from ``fit``-style keyword arguments: the names of fields set
        them, every other name is a method option."""
        names = {f.name for f in dataclasses.fields(cls)} - {"resolved_options"}
        options = {**kw.pop("options", {}), **{k: kw.pop(k) for k in list(kw)
                                              if k not in names}}
        if kw.get("eval_epochs") is not None:
            kw["eval_epochs"] = tuple(kw["eval_epochs"])
        return cls(method=method, lr=lr, options=options, **kw)

    @property
    def trainer_class(self):
        """The trainer class of :attr:`method`."""
        from scalable_softmax.methods import get_trainer_class

        return get_trainer_class(self.method)

    def resolve(self) -> "FitConfig":
        """The configuration with the protocol applied (:func:`resolve`) and every value
        checked, method options included (against the method's schema and joint rules,
        kept in :attr:`resolved_options`); no data is needed, so it runs before any
        work. Resolving a resolved configuration (or a copy with other epochs, seed,
        rate, ...) does not check its method options again.

        Raises
        ------
        ValueError
            For an unknown method or protocol, or any invalid value (the message names
            the argument).
        """
        cls = self.trainer_class                # ValueError listing the names
        conv = resolve(self.protocol, self.method,
                       dict(lr_decay=self.lr_decay, order=self.order, u_init=self.u_init,
                            batch_size=self.batch_size, n_sampled=self.n_sampled,
                            **self.options))
        fields = {k: conv.pop(k, None) for k in CONVENTIONS}
        conv = cls.map_deprecated(conv)         # older names -> threads / layout, once
        lr = self.lr
        if cls.full_batch:
            if lr is not None:
                raise ValueError(f"lr={lr!r} is not used by {self.method!r} (full-batch "
                                 "L-BFGS has no learning rate); pass lr=None")
        else:
            if lr is None:
                lr = default_lr(self.method)
                if lr is None:
                    raise ValueError(f"method {self.method!r} has no default learning "
                                     "rate (protocols.DEFAULT_LR); pass lr, a number > 0")
            check("lr", lr)
        values = dict(fields, epochs=self.epochs, mu=self.mu, seed=self.seed,
                      progress=self.progress, eval_rows=self.eval_rows,
                      fit_intercept=self.fit_intercept,
                      intercept_scaling=self.intercept_scaling)
        for name, value in values.items():
            check(name, value)                  # validation.PARAMETERS
        if self.K is not None:
            check("K", self.K, spec={"like": "K", "nullable": False})
        # unknown options, bad values and broken joint rules raise, before any data
        resolved = cls.resolve_options(conv, n_sampled=fields["n_sampled"],
                                       prior=self.resolved_options)
        return dataclasses.replace(
            self, **fields, lr=None if lr is None else float(lr),
            eval_epochs=self._eval_epochs(), options=conv, resolved_options=resolved)

    def _eval_epochs(self) -> tuple:
        if self.eval_epochs is None:
            return tuple(default_eval_epochs(self.epochs))
        try:
            ev = list(self.eval_epochs)
        except TypeError:
            raise ValueError(f"eval_epochs must be a list of epochs in 0..{self.epochs}; "
                             f"got {self.eval_epochs!r}") from None
        bad = [e for e in ev
               if violation(e, {"type": "int", "min": 0, "max": self.epochs}) is not None]
        if bad:
            raise ValueError(f"eval_epochs must hold integers in 0..epochs = "
                             f"0..{self.epochs}; got {bad}")
        return tuple(sorted({int(e) for e in ev}))

    def for_classes(self, K: int) -> "FitConfig":
        """The configuration for ``K`` classes: ``K >= 2``, and the method's sizes
        (``batch_size``, ``n_sampled``) checked against it
        (:meth:`~scalable_softmax.methods.base.Trainer.check_sizes`) with the options
        :meth:`resolve` checked (not checked again)."""
        check("K", K, spec={"like": "K", "nullable": False})
        cls = self.trainer_class
        opts = cls.resolve_options(self.options, n_sampled=self.n_sampled,
                                   prior=self.resolved_options)
        cls.check_sizes(int(K), self.batch_size or cls.default_batch_size,
                        self.n_sampled or cls.default_n_sampled, opts)
        return dataclasses.replace(self, K=int(K), resolved_options=opts)
