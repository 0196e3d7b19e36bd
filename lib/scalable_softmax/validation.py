"""One set of argument checks: the parameter constraints table and the data checks.

:data:`PARAMETERS` declares, once, what each training parameter may take (type, range,
allowed values); :func:`check` raises the one error message for a value that breaks
its rule. :func:`scalable_softmax.fit.fit`, ``RunSpec.validate`` and the notebooks'
parameter checks (the ``allowed:`` sections of ``params/*.yaml``, whose rules may say
``like: <parameter>`` to take this table's rule) all use it.

A rule is a mapping of

* ``type``: ``int`` (an integer, not a bool), ``float`` or ``number`` (a real number,
  not a bool; an integer is accepted), ``bool``, ``str``, ``list``, ``mapping`` or
  ``callable``;
* ``min`` / ``max``: bounds of a number (inclusive); ``above`` / ``below``: bounds the
  number must exceed / stay under; ``finite: true``: not NaN or infinite;
* ``one_of``: the values it may take;
* ``each``: a rule every item of a list must follow; ``min_length``: the fewest items;
* ``keys`` / ``values``: rules for the keys and values of a mapping;
* ``nullable: true``: None is also allowed;
* ``any_of``: a list of rules, at least one of which the value must follow (e.g. a
  number or the string ``paper``);
* ``like: <name>``: the rule of ``PARAMETERS[name]``, updated by the other keys;
* ``label``: how the message names the parameter (e.g. ``lr (learning rate)``).

:func:`as_csr` and :func:`as_labels` are the one check of a data matrix and of its
class labels (``fit``, ``evaluate``, ``FitResult`` and the estimator's scoring). As in
scikit-learn's classifiers, float labels with integral values (``2.0``) are accepted and
converted; other floats are refused.

:func:`check_options` is the one check of a method's options against its schema
(``{name: (default, rule)}``, declared on each trainer as ``Trainer.options``).
"""
from __future__ import annotations

import math
import numbers
import os

import numpy as np
import scipy.sparse as sp

__all__ = ["PARAMETERS", "ORDERS", "U_INITS", "RULE_KEYS", "rule", "violation",
           "describe", "check", "check_options", "as_csr", "check_sparse", "as_labels",
           "check_label_range", "check_trainer_data", "ModelTooLargeError",
           "available_bytes", "check_fits_in_memory", "kernel_array", "kernel_csr",
           "index_dtype"]

#: accepted values of ``order``
ORDERS = ("shuffle", "uniform", "file")
#: accepted values of ``u_init``
U_INITS = ("zero", "logK", "exact")

#: parameter name -> its rule (see the module's notes)
PARAMETERS = {
    # fit()
    "lr": {"type": "number", "above": 0, "finite": True, "label": "lr (learning rate)"},
    "epochs": {"type": "int", "min": 1},
    "lr_decay": {"type": "number", "above": 0, "max": 1},
    "mu": {"type": "number", "min": 0, "finite": True, "label": "mu (ridge parameter)"},
    "batch_size": {"type": "int", "min": 1, "nullable": True},
    "n_sampled": {"type": "int", "min": 1, "nullable": True},
    "seed": {"type": "int", "min": 0},
    "order": {"one_of": list(ORDERS)},
    "u_init": {"one_of": list(U_INITS)},
    "progress": {"type": "bool", "nullable": True},
    "eval_rows": {"type": "int", "min": 1, "nullable": True},
    "K": {"type": "int", "min": 2, "nullable": True, "label": "K (number of classes)"},
    "fit_intercept": {"type": "bool"},
    "intercept_scaling": {"type": "number", "above": 0, "finite": True},
    # the notebooks' runs (RunSpec)
    "train_fraction": {"type": "number", "above": 0, "max": 1},
    "subset_seed": {"type": "int", "min": 0},
    "monitor_rows": {"type": "int", "min": 1, "nullable": True},
    "final_rows": {"type": "int", "min": 1, "nullable": True},
    "subset": {"one_of": ["random", "head"]},
    "test": {"type": "bool"},
}

#: the keys a rule may have
RULE_KEYS = {"type", "min", "above", "below", "max", "finite", "one_of", "each", "min_length",
             "keys", "values", "nullable", "like", "label", "any_of"}

_TYPES = {
    "int": lambda v: isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)),
    "float": lambda v: isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)),
    "number": lambda v: isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)),
    "bool": lambda v: isinstance(v, (bool, np.bool_)),
    "str": lambda v: isinstance(v, str),
    "list": lambda v: isinstance(v, (list, tuple)),
    "mapping": lambda v: isinstance(v, dict),
    "callable": callable,
}


def rule(spec) -> dict:
    """The complete rule of ``spec``: a parameter name of :data:`PARAMETERS`, or a rule
    mapping (its ``like`` resolved, nested rules too).

    Raises
    ------
    ValueError
        For an unknown key, type or ``like`` name (the message lists the accepted ones).
    """
    if isinstance(spec, str):
        if spec not in PARAMETERS:
            raise ValueError(f"no rule for the parameter {spec!r}; PARAMETERS defines "
                             f"{', '.join(PARAMETERS)}")
        return dict(PARAMETERS[spec])
    if not isinstance(spec, dict) or set(spec) - RULE_KEYS:
        raise ValueError(f"a rule must be a mapping of {', '.join(sorted(RULE_KEYS))}; "
                         f"got {spec!r}")
    out = {}
    if "like" in spec:
        out.update(rule(spec["like"]))
    out.update({k: v for k, v in spec.items() if k != "like"})
    if "type" in out and out["type"] not in _TYPES:
        raise ValueError(f"rule type {out['type']!r} is not one of {', '.join(_TYPES)}")
    for sub in ("each", "keys", "values"):
        if sub in out:
            out[sub] = rule(out[sub])
    if "any_of" in out:
        if not isinstance(out["any_of"], list) or not out["any_of"]:
            raise ValueError(f"a rule's any_of must be a list of rules; got {out['any_of']!r}")
        out["any_of"] = [rule(r) for r in out["any_of"]]
    return out


def same(a, b) -> bool:
    """Equal as parameters: 1 == 1.0, tuples as lists, mappings key by key."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (bool, np.bool_)) or isinstance(b, (bool, np.bool_)):
        return (isinstance(a, (bool, np.bool_)) and isinstance(b, (bool, np.bool_))
                and bool(a) == bool(b))
    try:
        return bool(a == b)
    except Exception:
        return False


def violation(value, r: dict):
    """None if ``value`` follows rule ``r`` (a complete rule, :func:`rule`), else a
    1-tuple holding the offending value (or item, key or value of it; a tuple, so that
    an offending None is told from no violation)."""
    if value is None and r.get("nullable"):
        return None
    if "any_of" in r and all(violation(value, sub) is not None for sub in r["any_of"]):
        return (value,)
    kind = r.get("type")
    if kind is not None and not _TYPES[kind](value):
        return (value,)
    if any(k in r for k in ("min", "max", "above", "below", "finite")):
        if not _TYPES["number"](value):
            return (value,)
        if r.get("finite") and not math.isfinite(value):
            return (value,)
        if math.isnan(value) or ("min" in r and value < r["min"]) \
                or ("max" in r and value > r["max"]) \
                or ("above" in r and not value > r["above"]) \
                or ("below" in r and not value < r["below"]):
            return (value,)
    if "one_of" in r and not any(same(value, v) for v in r["one_of"]):
        return (value,)
    if "min_length" in r or "each" in r:
        if not isinstance(value, (list, tuple)):
            return (value,)
        if len(value) < r.get("min_length", 0):
            return (value,)
        for item in value if "each" in r else ():
            if violation(item, r["each"]) is not None:
                return (item,)
    if "keys" in r or "values" in r:
        if not isinstance(value, dict):
            return (value,)
        for k, v in value.items():
            if "keys" in r and violation(k, r["keys"]) is not None:
                return (k,)
            if "values" in r and violation(v, r["values"]) is not None:
                return (v,)
    return None


def describe(r: dict) -> str:
    """What rule ``r`` allows, in words (e.g. ``"None or an integer >= 1"``)."""
    parts = []
    if r.get("nullable"):
        parts.append("None or")
    if "type" in r:
        word = {"int": "an integer", "float": "a number", "number": "a number",
                "bool": "True or False", "str": "a string", "list": "a list",
                "mapping": "a mapping", "callable": "a callable"}[r["type"]]
        if r.get("finite") and word == "a number":
            word = "a finite number"
        parts.append(word)
    if "above" in r and "max" in r:
        parts.append(f"in ({r['above']}, {r['max']}]")
    elif "above" in r and "below" in r:
        parts.append(f"in ({r['above']}, {r['below']})")
    elif "min" in r and "max" in r:
        parts.append(f"from {r['min']} to {r['max']}")
    else:
        if "min" in r:
            parts.append(f">= {r['min']}")
        if "above" in r:
            parts.append(f"> {r['above']}")
        if "max" in r:
            parts.append(f"<= {r['max']}")
        if "below" in r:
            parts.append(f"< {r['below']}")
    if "any_of" in r:
        parts.append(" or ".join(describe(sub) for sub in r["any_of"]))
    if "one_of" in r:
        parts.append("one of " + ", ".join(map(str, r["one_of"])))
    if "min_length" in r:
        parts.append(f"with at least {r['min_length']} item(s)")
    if "each" in r:
        parts.append("each item " + describe(r["each"]))
    if "keys" in r:
        parts.append("keys " + describe(r["keys"]))
    if "values" in r:
        parts.append("values " + describe(r["values"]))
    return " ".join(parts) or "anything"


def check(name: str, value, where: str = "", spec=None) -> None:
    """Raise ``ValueError`` ``"<where><label> must be <what the rule allows>; got
    <value>"`` unless ``value`` follows the rule of ``name`` (``spec``: another rule or
    parameter name to use instead)."""
    r = rule(name if spec is None else spec)
    if violation(value, r) is None:
        return
    label = r.get("label", name)
    if "one_of" in r and "type" not in r:
        raise ValueError(f"unknown {where}{label} {value!r}; choose one of: "
                         f"{', '.join(map(str, r['one_of']))}")
    raise ValueError(f"{where}{label} must be {describe(r)}; got {value!r}")


def _choices(r: dict) -> str:
    """``'a', 'b' or 'c'`` (with None first when the rule is nullable)."""
    values = ([None] if r.get("nullable") else []) + list(r["one_of"])
    words = [repr(v) for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def check_options(schema: dict, given: dict, owner: str) -> dict:
    """The options ``given`` merged over the defaults of ``schema`` (``{name: (default,
    rule)}``), each given value checked against its rule and normalised (an ``int``
    rule gives ``int``, ``number``/``float`` ``float``, ``bool`` ``bool``).

    ``owner`` names the options' owner in the messages (e.g. ``"method 'umax'"``).

    Raises
    ------
    ValueError
        ``"unknown option(s) 'x' for <owner>; accepted options: a, b"`` for a name that
        is not in ``schema``; ``"<owner>: option 'x' must be <what the rule allows>; got
        <value>"`` for a value that breaks its rule.
    """
    unknown = sorted(set(given) - set(schema))
    if unknown:
        accepted = ", ".join(sorted(schema)) or "none"
        raise ValueError(f"unknown option(s) {', '.join(map(repr, unknown))} for {owner}; "
                         f"accepted options: {accepted}")
    out = {name: default for name, (default, _) in schema.items()}
    for name, value in given.items():
        r = rule(schema[name][1])
        label = r.get("label", f"option {name!r}")
        if violation(value, r) is not None:
            what = _choices(r) if "one_of" in r and "type" not in r else describe(r)
            raise ValueError(f"{owner}: {label} must be {what}; got {value!r}")
        kind = r.get("type")
        if value is not None and kind in ("int", "number", "float", "bool"):
            value = {"int": int, "number": float, "float": float, "bool": bool}[kind](value)
        out[name] = value
    return out


# ---------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------

def _real_dtype(dtype) -> bool:
    return (np.issubdtype(dtype, np.number) or np.dtype(dtype) == np.dtype(bool)) \
        and not np.issubdtype(dtype, np.complexfloating)


#: sparse formats whose index arrays :func:`check_sparse` checks itself; the others
#: (lil, dok, dia) are converted by scipy's own (bounds-checked) Python code first
_CHECKED_FORMATS = ("csr", "csc", "bsr", "coo")


def _to_csr(X, name):
    try:
        return X.tocsr()
    except Exception as exc:
        raise ValueError(f"{name} is a malformed scipy.sparse matrix "
                         f"({type(exc).__name__}: {exc}); rebuild it from its (row, "
                         "column, value) triplets") from None


def _index_array(arr, name, what):
    arr = np.asarray(arr)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"{name} is a malformed sparse matrix: its {what} array must be a "
                         f"1-D integer array; got dtype {arr.dtype} and shape {arr.shape}. "
                         "Rebuild it (e.g. scipy.sparse.csr_matrix((data, (rows, cols)), "
                         "shape=...))")
    return arr


def _bounds(arr, size, name, what, dim):
    """Every entry of the index array ``arr`` in ``[0, size)``."""
    if arr.size == 0:
        return
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} is a malformed sparse matrix: it holds the {what} index "
                         f"{bad}, outside 0..{size - 1} (its shape gives {dim} = {size}); "
                         "fix the indices or give the matrix its true shape")


def check_sparse(X, name: str = "X") -> None:
    """Check the index structure of a scipy.sparse matrix ``X`` in O(nnz), trusting no
    flag of scipy's (``has_canonical_format``, ``has_sorted_indices``): for CSR (and
    CSC, BSR), ``indptr`` of length (major dimension + 1), starting at 0, never
    decreasing and ending at ``nnz == len(indices) == len(data)``, integer index
    arrays, and every index inside the shape; for COO, row and column indices inside
    the shape. Other formats are built by scipy's Python code, which checks them.

    Raises
    ------
    ValueError
        Naming ``name``, what is malformed and what to do, before any compiled code
        reads an index out of range.
    """
    fmt = X.format
    if fmt == "coo":
        coords = getattr(X, "coords", None) or (X.row, X.col)
        rows, cols = (_index_array(c, name, w) for c, w in zip(coords, ("row", "column")))
        n = len(np.asarray(X.data))
        if rows.shape[0] != n or cols.shape[0] != n:
            raise ValueError(f"{name} is a malformed COO matrix: {rows.shape[0]} row and "
                             f"{cols.shape[0]} column indices for {n} values; they must "
                             "match")
        _bounds(rows, X.shape[0], name, "row", "N")
        _bounds(cols, X.shape[1], name, "column", "D")
        return
    if fmt not in ("csr", "csc", "bsr"):
        return
    indptr = _index_array(X.indptr, name, "indptr")
    indices = _index_array(X.indices, name, "indices")
    data = np.asarray(X.data)
    if fmt == "bsr":
        r, c = X.blocksize
        shape = (X.shape[0] // r, X.shape[1] // c)
    else:
        shape = X.shape
    major, minor = shape if fmt != "csc" else shape[::-1]
    words = ("row", "column") if fmt != "csc" else ("column", "row")
    dims = ("N", "D") if fmt != "csc" else ("D", "N")
    fix = ("; rebuild it (e.g. scipy.sparse.csr_matrix((data, (rows, cols)), "
           "shape=...))")
    if indptr.shape[0] != major + 1:
        raise ValueError(f"{name} is a malformed {fmt.upper()} matrix: indptr has "
                         f"{indptr.shape[0]} entries for {major} {words[0]}s (needs "
                         f"{major + 1})" + fix)
    if int(indptr[0]) != 0:
        raise ValueError(f"{name} is a malformed {fmt.upper()} matrix: indptr[0] is "
                         f"{int(indptr[0])}, not 0" + fix)
    nnz = int(indptr[-1])
    if nnz != indices.shape[0] or nnz != data.shape[0]:
        raise ValueError(f"{name} is a malformed {fmt.upper()} matrix: indptr[-1] = {nnz} "
                         f"but it has {indices.shape[0]} indices and {data.shape[0]} "
                         "values; all three must agree" + fix)
    if major > 0 and np.any(indptr[1:] < indptr[:-1]):
        raise ValueError(f"{name} is a malformed {fmt.upper()} matrix: indptr decreases "
                         f"(a {words[0]} would have a negative length)" + fix)
    _bounds(indices, minor, name, words[1], dims[1])


def _canonical(X) -> bool:
    """Sorted column indices without duplicates in every row of the (structurally
    checked) CSR ``X``, computed from the arrays rather than scipy's cached flag."""
    indices, indptr = X.indices, X.indptr
    if indices.shape[0] < 2:
        return True
    up = indices[1:] > indices[:-1]
    if up.all():
        return True
    # a step down or a repeat is fine only where a new row starts
    starts = indptr[1:-1]
    starts = starts[(starts > 0) & (starts < indices.shape[0])] - 1
    up[starts] = True
    return bool(up.all())


def _sparse_csr(X, name):
    """:func:`as_csr` of a scipy.sparse ``X``: its structure checked, then canonical
    float64 CSR (``X`` itself when it already is)."""
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D (N x D): a 2-D array or a scipy.sparse "
                         f"matrix; got shape {X.shape}")
    if not _real_dtype(X.dtype):
        raise ValueError(f"{name} must hold real numbers; got dtype {X.dtype}")
    if X.format not in _CHECKED_FORMATS:
        X = _to_csr(X, name)
    check_sparse(X, name)                # the structure, before scipy or numba reads it
    if X.format == "csr" and X.dtype == np.float64 \
            and X.indices.dtype in (np.int32, np.int64) \
            and X.indptr.dtype in (np.int32, np.int64) and _canonical(X):
        return X
    Xc = sp.csr_matrix(X, dtype=np.float64, copy=True)
    Xc.sum_duplicates()
    Xc.sort_indices()
    return Xc


def _dense_float64(X, name):
    """:func:`as_csr` of a dense array-like ``X``: a 2-D float64 array (not yet checked
    for finiteness)."""
    try:
        arr = np.asarray(X)
    except Exception as exc:  # ragged lists etc.
        raise ValueError(f"{name} must be 2-D (N x D): a 2-D array or a scipy.sparse "
                         f"matrix ({exc})") from None
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (N x D): a 2-D array or a scipy.sparse "
                         f"matrix; got an array of shape {arr.shape}")
    if not _real_dtype(arr.dtype):
        raise ValueError(f"{name} must hold real numbers; got dtype {arr.dtype}")
    if arr.dtype != np.float64:
        # checked after the cast: a wider float (long double 1e4000) becomes inf
        with np.errstate(over="ignore", invalid="ignore"):
            arr = arr.astype(np.float64)
    return arr


def as_csr(X, name: str = "X") -> sp.csr_matrix:
    """Canonical float64 CSR (sorted indices, no duplicates) of a sparse matrix or 2-D
    array-like ``X`` of finite real numbers; a canonical float64 CSR input is returned
    as it is (no copy).

    The index structure of a sparse ``X`` is checked first (:func:`check_sparse`: every
    index inside the shape, ``indptr`` consistent); whether it is canonical is computed
    from its indices, not taken from scipy's ``has_canonical_format`` flag.

    Raises
    ------
    ValueError
        If ``X`` is not 2-D, holds no real numbers, is empty, holds NaN or infinite
        values, or is a sparse matrix with a malformed structure (the message names
        ``name`` and what to do).
    """
    if sp.issparse(X):
        Xc = _sparse_csr(X, name)
        data = Xc.data
    else:
        data, Xc = _dense_float64(X, name), None
    N, D = (Xc if Xc is not None else data).shape
    if N == 0 or D == 0:
        raise ValueError(f"{name} is empty (shape {N} x {D}: no rows or no columns); need "
                         "at least one row and one column")
    if not np.all(np.isfinite(data)):
        raise ValueError(f"{name} contains non-finite values (NaN or infinite, or beyond "
                         "the float64 range once converted); clean the data first")
    if Xc is None:
        Xc = sp.csr_matrix(np.asarray(data, dtype=np.float64))
        Xc.sort_indices()
    return Xc


def as_labels(y, N: int, name: str = "y") -> np.ndarray:
    """The class labels ``y`` as int64 ``(N,)``: integers, or floats with integral
    values (as scikit-learn's classifiers accept them).

    Raises
    ------
    ValueError
        If ``y`` is not 1-D with ``N`` labels, or holds non-integral or non-numeric
        values.
    """
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of labels, shape (N,) = ({N},); got "
                         f"shape {arr.shape}")
    if arr.shape[0] != N:
        raise ValueError(f"{name} has {arr.shape[0]} labels but its X has {N} rows; they "
                         f"must match (shape (N,) = ({N},))")
    if np.issubdtype(arr.dtype, np.integer):
        if arr.dtype == np.uint64 and arr.size and int(arr.max()) >= 2**63:
            raise ValueError(f"{name} holds the label {int(arr.max())}, beyond the 64-bit "
                             "integer range; use class labels 0..K-1")
        return arr.astype(np.int64)
    if np.issubdtype(arr.dtype, np.floating):
        if np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            if arr.size and float(np.abs(arr).max()) >= 2.0**63:
                raise ValueError(f"{name} holds the label {float(np.abs(arr).max())!r} "
                                 "(in absolute value), beyond the 64-bit integer range; "
                                 "use class labels 0..K-1")
            return arr.astype(np.int64)
    raise ValueError(f"{name} must hold integer class labels 0..K-1; got dtype {arr.dtype}"
                     + (" with non-integer values" if arr.dtype.kind == "f" else ""))


def check_label_range(y: np.ndarray, K: int, name: str = "y", hint: str = "") -> None:
    """Raise ``ValueError`` unless every label of ``y`` (int64, not empty) lies in
    ``0..K-1``; ``hint`` ends the message (what to do)."""
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= K:
        raise ValueError(f"labels in {name} must lie in 0..K-1 = 0..{K - 1}; found values "
                         f"in {lo}..{hi}" + hint)


# ---------------------------------------------------------------------------
# the arrays the kernels read: one type each, so one compile per kernel
# ---------------------------------------------------------------------------

def kernel_array(a, dtype) -> np.ndarray:
    """``a`` as a kernel reads it: C-contiguous, of ``dtype``, writable.

    numba compiles a kernel once per argument type, and an array's type includes its
    dtype, its layout and whether it is read-only; converting every input to one type
    before any kernel is called keeps one compiled signature per kernel (int32 or
    int64, dense, Fortran-ordered and read-only inputs alike). No copy when ``a``
    already is such an array; a read-only array (a memory map, an array with
    ``setflags(write=False)``) is copied, never written to.
    """
    out = np.ascontiguousarray(a, dtype=dtype)
    if not out.flags.writeable:
        out = out.copy()
    return out


def index_dtype(D: int):
    """The dtype of the column indices the kernels read for ``D`` columns: int32 when
    they fit (half the memory of int64), else int64."""
    return np.int32 if D <= 2**31 - 1 else np.int64


def kernel_csr(X, indices_dtype=None):
    """``(indptr, indices, data)`` of the CSR matrix ``X`` as the kernels read them
    (:func:`kernel_array`): ``indptr`` int64, ``indices`` ``indices_dtype`` (default
    :func:`index_dtype` of ``X``'s width), ``data`` float64; each is ``X``'s own array
    when it already has that type, else a copy."""
    if indices_dtype is None:
        indices_dtype = index_dtype(X.shape[1])
    return (kernel_array(X.indptr, np.int64), kernel_array(X.indices, indices_dtype),
            kernel_array(X.data, np.float64))


def check_trainer_data(X, y, K: int) -> None:
    """The gate of a trainer built directly (``methods.base.Trainer``): the structure of
    a sparse ``X`` (:func:`check_sparse`) and labels ``y`` in ``0..K-1``, one per row,
    so that no kernel indexes outside ``W``. ``fit`` has already checked more (values,
    canonical order); this is the O(nnz) part a kernel cannot survive without.

    Raises
    ------
    ValueError
        Naming ``X`` or ``y`` and what to do.
    """
    if sp.issparse(X):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (N x D); got shape {X.shape}")
        check_sparse(X, "X")
    N = X.shape[0]
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.shape[0] != N:
        raise ValueError(f"y must be 1-D with one label per row of X, shape ({N},); got "
                         f"shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        arr = as_labels(arr, N)
    if N:
        check_label_range(arr, int(K), "y", "; map the labels to 0..K-1 or pass a "
                          "larger K")


# ---------------------------------------------------------------------------
# memory: the one check of a model's size (fit before it allocates W, FitResult.load
# before it reads a saved model)
# ---------------------------------------------------------------------------
class ModelTooLargeError(MemoryError, ValueError):
    """A model (or a saved model's arrays) would not fit in the machine's available
    memory; raised before anything is allocated. A ``ValueError`` too, so that the
    callers that catch bad arguments catch it."""


def available_bytes() -> int | None:
    """The memory the machine can give this process now: ``MemAvailable`` of
    ``/proc/meminfo`` (Linux), else the free physical pages (``os.sysconf``), else
    None (unknown: no check is made)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


def gib(n: int) -> str:
    """``n`` bytes in words: ``"2.0 GiB (2,147,483,648 bytes)"``."""
    return f"{n / 2**30:,.1f} GiB ({n:,} bytes)"


def check_fits_in_memory(need: int, what: str, fix: str) -> None:
    """Raise :class:`ModelTooLargeError` when ``need`` bytes exceed the available
    memory (:func:`available_bytes`); ``what`` says what needs them and ``fix`` what
    to do. Nothing is checked when the available memory is unknown."""
    have = available_bytes()
    if have is not None and need > have:
        raise ModelTooLargeError(f"{what} needs {gib(need)} but this machine has "
                                 f"{gib(have)} of memory available; {fix}")
