"""A scikit-learn classifier around :func:`scalable_softmax.fit.fit`.

:class:`SoftmaxSGDClassifier` trains a multinomial logistic-regression (softmax) model
with any of the library's optimisers (Implicit SGD by default: stable at any learning
rate), and plugs into scikit-learn's ``Pipeline``, ``GridSearchCV``,
``cross_val_score`` and the rest::

    from sklearn.datasets import load_svmlight_file
    from scalable_softmax import SoftmaxSGDClassifier

    X, y = load_svmlight_file("train.svm")
    clf = SoftmaxSGDClassifier(method="implicit", epochs=20).fit(X, y)
    clf.predict_proba(X[:5])

scikit-learn is an optional dependency (the ``sklearn`` extra:
``pip install -e '.[sklearn]'``); the rest of the library does not need it.

The model: scores ``s_k(x) = x . w_k + b_k`` (``coef_`` is ``K x D``, one row per class
of ``classes_``; ``intercept_`` is ``(K,)``), probabilities ``softmax(s(x))``. The
optimisers, learning-rate units and conventions are those of docs/math.md (the learning
rate is per datapoint, section 2.3); ``protocol`` applies one of the named protocols of
:mod:`scalable_softmax.protocols` (section 11).
"""
from __future__ import annotations

import dataclasses
import numbers

import numpy as np

try:
    from sklearn.base import BaseEstimator, ClassifierMixin
    from sklearn.utils import check_random_state
    from sklearn.utils.multiclass import check_classification_targets
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "scalable_softmax.SoftmaxSGDClassifier needs scikit-learn: install the project "
        "with its 'sklearn' extra (pip install -e '.[sklearn]')") from exc

from scalable_softmax.protocols import EPOCHS, FitConfig

# numba, pandas and the training driver (scalable_softmax.fit) are imported by the
# methods that use them, so that importing the estimator stays light (issue 53)

__all__ = ["SoftmaxSGDClassifier"]


def _check_classes(classes):
    """The sorted distinct labels of ``partial_fit``'s ``classes``: a 1-D array of at
    least two labels, none of them NaN, infinite or None (such a "class" could never be
    predicted, nor matched by a label)."""
    arr = np.asarray(classes)
    if arr.ndim != 1:
        raise ValueError(f"classes must be a 1-D array of the class labels; got shape "
                         f"{arr.shape}")
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        raise ValueError(f"classes holds a non-finite label ({arr[~np.isfinite(arr)][0]!r})"
                         "; give the labels that occur in y (NaN is not a class)")
    if arr.dtype.kind == "O" and any(
            c is None or (isinstance(c, numbers.Real) and not np.isfinite(float(c)))
            for c in arr.tolist()):
        raise ValueError("classes holds None or a non-finite label; give the labels "
                         "that occur in y")
    try:
        out = np.unique(arr)
    except TypeError as exc:
        raise ValueError(f"classes must be labels of one sortable kind ({exc})") from None
    if out.size < 2:
        raise ValueError(f"classes must name at least 2 classes; got {out.tolist()}")
    return out


def _labels_to_index(y, classes, where):
    """Positions of the labels ``y`` in the sorted ``classes`` (ValueError for unknown
    labels, naming them)."""
    idx = np.searchsorted(classes, y)
    idx = np.clip(idx, 0, len(classes) - 1)
    bad = classes[idx] != y
    if np.any(bad):
        unknown = np.unique(np.asarray(y)[bad])[:10]
        raise ValueError(f"{where}: labels {unknown.tolist()} are not among the classes "
                         f"{classes.tolist()} (for partial_fit, pass every class in "
                         "`classes` on the first call)")
    return idx.astype(np.int64)


class SoftmaxSGDClassifier(ClassifierMixin, BaseEstimator):
    """Softmax (multinomial logistic) regression trained by U-max, Implicit SGD or any
    other optimiser of :mod:`scalable_softmax.methods`.

    Parameters
    ----------
    method : str, default ``"implicit"``
        A key of :data:`scalable_softmax.methods.METHODS` (the API page's method
        table lists them): ``"implicit"`` (Implicit SGD, stable at any learning rate),
        ``"umax"``, ...
    lr : float > 0 or None, default None
        Initial learning rate in the per-datapoint units of docs/math.md section 2.3.
        None: the method's default rate, the one :func:`scalable_softmax.fit.fit` uses
        (:data:`scalable_softmax.protocols.DEFAULT_LR`: the record's tuning on unit-L2
        rows; :data:`~scalable_softmax.protocols.DEFAULT_LR_SOURCES` names the table
        behind each), e.g. 10 for ``"implicit"``, 0.1 for ``"umax"``, 100 for
        ``"softmax-sgd"``. Scale rows to unit L2 norm (``sklearn.preprocessing.
        Normalizer``) for these rates to apply. Ignored by the full-batch methods
        (``exact``, ``bouchard``, ``ove-exact``).
    epochs : int >= 1, default :data:`scalable_softmax.protocols.EPOCHS` (50)
        Passes over the data in :meth:`fit`.
    lr_decay : float in (0, 1] or None, default None
        Epoch ``e = 1, 2, ...`` runs at ``lr * lr_decay**(e-1)``. :meth:`partial_fit`
        call ``t = 0, 1, ...`` runs one pass at ``lr * lr_decay**t``. None: the
        protocol's, else 0.9.
    mu : float >= 0, default 0.0
        Ridge parameter (it also shrinks the intercepts).
    batch_size, n_sampled : int or None
        Datapoints per step and sampled classes per datapoint (None: the protocol's,
        else the method's default).
    order : ``"shuffle"``, ``"file"``, ``"uniform"`` or None (default: the protocol's,
        else ``"shuffle"``)
        Order of the datapoints within an epoch.
    u_init : ``"zero"``, ``"logK"``, ``"exact"`` or None (default: the protocol's, else
        ``"zero"``)
        Initial ``u`` of the double-sum methods in :meth:`fit`.
    fit_intercept : bool, default False
        Learn per-class intercepts ``intercept_``. False, as in
        :func:`scalable_softmax.fit.fit`: the papers' model, and every result of this
        collection, scores ``x . w_k`` with no intercept, and one default means the
        estimator and ``fit`` train the same model from the same arguments. Pass True
        (scikit-learn's linear models' default) for data whose classes need an offset:
        features far from zero, classes of very different frequencies.
    intercept_scaling : float > 0, default 1.0
        Value of the constant feature that carries the intercept (see
        :func:`scalable_softmax.fit.fit`).
    protocol : None or str
        A protocol of :mod:`scalable_softmax.protocols` (``"authors-code"``,
        ``"authors-code-1pass"``, ``"paper-text"``; defined for the paper's six
        methods). It supplies the defaults of ``order``, ``u_init``, ``batch_size``,
        ``n_sampled``, ``lr_decay`` and the method options; a parameter given here (not
        None) wins over the protocol, as in :func:`scalable_softmax.fit.fit`
        (:func:`scalable_softmax.protocols.resolve`).
    method_options : None or dict
        Extra options of the method (e.g. ``{"delta0": 1.0}`` for ``umax``).
    n_jobs : None or int
        Threads of the method (its option ``threads``, unless ``method_options``
        gives it): None or 1 one thread (bit-identical runs), ``-1`` numba's thread
        count. Methods without a parallel kernel refuse more than one; the full-batch
        methods' ``threads`` change no result.
    random_state : None, int or numpy RandomState
        Seed of the data order and class sampling (None: a fresh seed each fit).
    verbose : bool, default False
        Show a progress bar over epochs.

    Attributes
    ----------
    classes_ : ndarray (K,), the class labels, sorted.
    coef_ : ndarray (K, ``n_features_in_``), one weight row per class.
    intercept_ : ndarray (K,), zeros when ``fit_intercept=False``.
    n_features_in_ : int.
    result_ : :class:`scalable_softmax.fit.FitResult` of the last :meth:`fit` or
        :meth:`partial_fit` call (its ``history`` has the epochs, steps, seconds and
        learning rates).
    t_ : int, passes made so far (``epochs`` after :meth:`fit`; +1 per
        :meth:`partial_fit`).
    """

    def __init__(self, method="implicit", *, lr=None, epochs=EPOCHS, lr_decay=None, mu=0.0,
                 batch_size=None, n_sampled=None, order=None, u_init=None,
                 fit_intercept=False, intercept_scaling=1.0, protocol=None,
                 method_options=None, n_jobs=None, random_state=None, verbose=False):
        self.method = method
        self.lr = lr
        self.epochs = epochs
        self.lr_decay = lr_decay
        self.mu = mu
        self.batch_size = batch_size
        self.n_sampled = n_sampled
        self.order = order
        self.u_init = u_init
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.protocol = protocol
        self.method_options = method_options
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    # -- scikit-learn plumbing ----------------------------------------------------------

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.classifier_tags.multi_class = True
        tags.classifier_tags.multi_label = False
        tags.classifier_tags.poor_score = False
        return tags

    def _config(self) -> FitConfig:
        """The :class:`~scalable_softmax.protocols.FitConfig` these parameters stand for,
        resolved and validated (so that a bad parameter fails at fit time with its
        name; ``lr`` None resolved to the method's default); ``lr``, ``epochs``, ``K``
        and the seed are set per call."""
        if self.method_options is not None and not isinstance(self.method_options, dict):
            raise ValueError(f"method_options must be None or a dict; got "
                             f"{self.method_options!r}")
        options = dict(self.method_options or {})
        if self.n_jobs is not None:
            from scalable_softmax.methods import get_trainer_class

            cls = get_trainer_class(self.method)
            # the option and its deprecated aliases (methods.base.DEPRECATED_OPTIONS)
            same = next((o for o in ("threads", "parallel", "hogwild") if o in options),
                        None)
            if same is not None:
                raise ValueError(
                    f"n_jobs={self.n_jobs!r} and method_options={{{same!r}: "
                    f"{options[same]!r}}} both set the threads of {self.method!r}; give "
                    "one of them (n_jobs=None to use the method option)")
        if self.n_jobs is not None and self.n_jobs != 1:
            if "threads" in cls.options:
                import numba

                n = self.n_jobs
                ok = isinstance(n, numbers.Integral) and not isinstance(n, bool) \
                    and (n >= 1 or n == -1)
                if not ok:
                    raise ValueError(f"n_jobs must be None, -1 or an integer >= 1; got {n!r}")
                options.setdefault("threads", int(numba.config.NUMBA_NUM_THREADS)
                                   if n == -1 else int(n))
        base = FitConfig(method=self.method, lr=self.lr, lr_decay=self.lr_decay, mu=self.mu,
                         batch_size=self.batch_size, n_sampled=self.n_sampled,
                         order=self.order, u_init=self.u_init,
                         fit_intercept=self.fit_intercept,
                         intercept_scaling=self.intercept_scaling, protocol=self.protocol,
                         eval_epochs=(), progress=bool(self.verbose), options=options)
        if base.trainer_class.full_batch:
            base = dataclasses.replace(base, lr=None)
        return base.resolve()

    def _seed(self):
        rs = self.random_state
        if isinstance(rs, numbers.Integral) and not isinstance(rs, bool) and rs >= 0:
            return int(rs)
        if isinstance(rs, numbers.Real) and not isinstance(rs, np.random.RandomState):
            raise ValueError(f"random_state must be None, an integer >= 0 or a "
                             f"numpy.random.RandomState; got {rs!r}")
        return int(check_random_state(rs).randint(0, 2 ** 31 - 1))

    def _store(self, res, classes):
        if res.diverged:
            raise ValueError(
                f"training diverged at epoch {res.diverged_at[0]} (a non-finite value); "
                f"use a smaller lr than {res.params.get('lr')!r}"
                + (" (the method's default rate)" if self.lr is None else "")
                + ", scale the features (e.g. Normalizer, "
                "StandardScaler or MaxAbsScaler), or method='implicit', which is stable "
                "at any learning rate")
        self.classes_ = classes
        self.coef_ = res.W
        self.intercept_ = (res.intercept if res.intercept is not None
                           else np.zeros(res.W.shape[0]))
        self.result_ = res

    def _fit_call(self, X, yi, K, lr, epochs, init=None, partial=False, config=None):
        config = self._config() if config is None else config
        if K < 2:
            raise ValueError("SoftmaxSGDClassifier needs at least 2 classes in y; got 1 "
                             "class")
        cls = config.trainer_class
        change = dict(epochs=epochs, K=K, seed=self._seed(), eval_epochs=())
        if not cls.full_batch and lr is not None:   # None: the resolved default
            change["lr"] = lr
        if partial:
            # one pass at the call's rate; u of the new rows from the current weights
            change.update(lr_decay=1.0, u_init="exact")
        pool = cls.max_n_sampled(K, config.resolved_options)
        if self.n_sampled is None and pool is not None:
            # a default number of sampled classes (the method's, e.g. 5 for OVE, NCE and
            # IS, or a protocol's) cannot exceed the classes there are to draw: use them
            m = config.n_sampled or int(cls.default_n_sampled)
            if m > pool:
                change["n_sampled"] = pool
        W0 = b0 = None
        if init is not None:
            W0, b0 = init
            if not self.fit_intercept:
                b0 = None
        from scalable_softmax.fit import fit_config

        return fit_config(dataclasses.replace(config, **change), X, yi, init_W=W0,
                          init_intercept=b0)

    # -- the estimator API ------------------------------------------------------------

    def fit(self, X, y):
        """Train from scratch on ``X`` (array or sparse matrix, n x D) and labels ``y``
        (any sortable labels) for ``epochs`` epochs.

        Raises
        ------
        ValueError
            For invalid data or parameters (the message names them), fewer than two
            classes, or a run that diverged (non-finite weights).
        """
        config = self._config()         # the parameters first, before the data
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64,
                             reset=True)
        check_classification_targets(y)
        classes, yi = np.unique(y, return_inverse=True)
        res = self._fit_call(X, yi.astype(np.int64), len(classes), self.lr, self.epochs,
                             config=config)
        self._store(res, classes)
        self.t_ = int(self.epochs)
        return self

    def partial_fit(self, X, y, classes=None):
        """One pass over ``(X, y)`` at the rate ``lr * lr_decay**t_``, starting from the
        current weights (from zero on the first call, which must name every class in
        ``classes``). The double-sum variables ``u`` of the batch start at their exact
        optimum for the current weights (``u_init="exact"``), so a batch never starts
        from an inconsistent ``u``."""
        first = not hasattr(self, "classes_")
        config = self._config()         # the parameters first, before the data
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64,
                             reset=first)
        check_classification_targets(y)
        if first:
            if classes is None:
                raise ValueError("the first call of partial_fit needs `classes`, the "
                                 "array of every class label that will occur")
            classes = _check_classes(classes)
            init = None
            t = 0
        else:
            if classes is not None and not np.array_equal(np.unique(classes),
                                                          self.classes_):
                raise ValueError(f"classes={np.unique(classes).tolist()} differs from the "
                                 f"classes of the first partial_fit call "
                                 f"{self.classes_.tolist()}")
            classes = self.classes_
            init = (self.coef_, self.intercept_)
            t = self.t_
        yi = _labels_to_index(y, classes, "partial_fit")
        lr = None if config.lr is None else config.lr * config.lr_decay ** t
        res = self._fit_call(X, yi, len(classes), lr, 1, init=init, partial=True,
                             config=config)
        self._store(res, classes)
        self.t_ = t + 1
        return self

    def decision_function(self, X):
        """Scores ``x . w_k + b_k``: shape (n, K), or, for two classes, (n,) with the
        score difference ``s_1 - s_0`` (scikit-learn's convention for binary
        classifiers: positive means ``classes_[1]``)."""
        S = self._scores(X)
        if S.shape[1] == 2:
            return S[:, 1] - S[:, 0]
        return S

    def predict_proba(self, X):
        """Softmax probabilities, shape (n, K), columns in the order of ``classes_``
        (:meth:`scalable_softmax.fit.FitResult.predict_proba` of the model)."""
        model, X = self._model(X)
        return model.predict_proba(X)

    def predict_log_proba(self, X):
        """Logarithms of :meth:`predict_proba`, computed stably
        (:meth:`scalable_softmax.fit.FitResult.predict_log_proba`)."""
        model, X = self._model(X)
        return model.predict_log_proba(X)

    def predict(self, X):
        """The most probable class label of every row (ties: the first of
        ``classes_``)."""
        S = self._scores(X)
        return self.classes_[np.argmax(S, axis=1)]

    def _model(self, X):
        """``(model, X)``: the fitted model as a :class:`~scalable_softmax.fit.FitResult`
        and ``X`` checked against it."""
        from scalable_softmax.fit import FitResult

        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=False)
        model = FitResult(W=self.coef_, u=None, history=self.result_.history,
                          diverged_at=None, method=self.method, params={},
                          intercept=self.intercept_)
        return model, X

    def _scores(self, X):
        model, X = self._model(X)
        return model.decision_function(X)
