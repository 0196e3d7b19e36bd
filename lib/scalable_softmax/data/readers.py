"""Readers for the raw file formats of the papers' data sets.

Every reader takes a path (plain, or compressed by gzip, bzip2 or xz, read by the
standard library; the compression is recognised by its magic bytes, not by the file
name), checks the content as it goes and raises
:class:`~scalable_softmax.data.errors.DataFormatError` naming the file and the line
(text formats) or byte offset (idx) of the first problem. None of them applies any
preprocessing beyond turning the file into arrays: see
:mod:`scalable_softmax.data.preprocess` for the paper's conventions.

Formats
-------
* **idx** (MNIST): :func:`read_idx`, :func:`read_mnist`.
* **sparse ARFF with a MULAN XML label header** (Bibtex, Delicious): :func:`read_arff`,
  :func:`read_mulan_labels`, :func:`read_mulan`.
* **Extreme Classification Repository text format** (EURLex-4K, Wiki10-31K,
  AmazonCat-13K, ...): a header line ``N D K`` and then one line per point,
  ``l1,l2,... f:v f:v ...`` with 0-based feature and label indices; a point may have no
  label (the line then starts with a space or directly with ``f:v``): :func:`read_xmlrepo`.
* **LIBSVM / svmlight**, single- or multi-label (``l1,l2 f:v ...``; the LSHTC files use
  this with ``"545, 32 8:1"``): :func:`read_libsvm`.
* **raw 20 Newsgroups "bydate" tarball**: :func:`read_20newsgroups`, then
  :func:`bag_of_words` with :func:`tokenize`.
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import math
import re
import tarfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, repeat
from pathlib import Path
from xml.parsers import expat

import numpy as np
import scipy.sparse as sp

from .. import paths as _paths
from .errors import DataFormatError

__all__ = [
    "LabelledData", "ArffAttribute", "ArffData", "NewsCorpus",
    "open_binary", "open_text", "read_idx", "read_mnist", "read_arff",
    "read_mulan_labels", "read_mulan", "read_xmlrepo", "read_libsvm",
    "read_sparse_multilabel", "read_20newsgroups", "tokenize", "bag_of_words",
]


# --------------------------------------------------------------------------- results
@dataclass
class LabelledData:
    """A raw data set as read from its files, before any preprocessing.

    Attributes
    ----------
    X : scipy.sparse.csr_matrix
        ``n x n_features`` float64, canonical (sorted indices, no duplicates, no
        explicit zeros). Rows are the points that were fully read, in file order.
    label_indptr, label_indices : ndarray of int64
        Labels of row ``i`` are ``label_indices[label_indptr[i]:label_indptr[i+1]]``, in
        the order in which they appear in the file (so the first one is the paper's
        "first label"). Single-label formats have exactly one label per row.
    n_features : int
        Dimension of the feature space (header, attribute count, or inferred).
    n_labels : int or None
        Size of the label space when the file declares it (XMLRepository header, MULAN
        XML, MNIST's 10 digits), else ``None``.
    lines : ndarray of int64
        1-based line number (or record number for binary formats) of each row.
    label_names, feature_names : list of str or None
        Names when the format carries them.
    n_points_total : int
        Points in the file, including any tail that was not fully read.
    tail_no_label, tail_labelled : int
        Points after the first ``max_points`` labelled ones (readers that accept
        ``max_points``): their labels were read and checked, their features were not.
    first_labels_all : ndarray of int64
        First label of every labelled point of the whole file (also the tail), for the
        "original number of classes" statistics.
    info : dict
        Anything else worth keeping (header values, label-name fixes, ...).
    """

    X: sp.csr_matrix
    label_indptr: np.ndarray
    label_indices: np.ndarray
    n_features: int
    n_labels: int | None
    lines: np.ndarray
    label_names: list[str] | None = None
    feature_names: list[str] | None = None
    n_points_total: int = 0
    tail_no_label: int = 0
    tail_labelled: int = 0
    first_labels_all: np.ndarray | None = None
    info: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Number of rows that were fully read."""
        return self.X.shape[0]

    def has_label(self) -> np.ndarray:
        """Whether each row has at least one label (bool, shape ``(n,)``)."""
        return np.diff(self.label_indptr) > 0

    def first_labels(self) -> np.ma.MaskedArray:
        """First label of each row (int64), masked for rows without a label: any
        integer is a label (``-1`` in a binary LIBSVM file is a class), so "no label"
        is the mask (:meth:`has_label`), never a value."""
        has = self.has_label()
        out = np.zeros(self.n, dtype=np.int64)
        out[has] = self.label_indices[self.label_indptr[:-1][has]]
        return np.ma.MaskedArray(out, mask=~has)


def _first_labels_all(indptr, indices) -> np.ndarray:
    counts = np.diff(indptr)
    has = counts > 0
    return np.asarray(indices, dtype=np.int64)[np.asarray(indptr[:-1])[has]]


def _canonical_csr(indptr, indices, data, shape) -> sp.csr_matrix:
    X = sp.csr_matrix((np.asarray(data, dtype=np.float64), np.asarray(indices),
                       np.asarray(indptr)), shape=shape)
    X.sum_duplicates()  # also sorts the indices
    X.eliminate_zeros()
    X.sort_indices()
    return X


# --------------------------------------------------------------------------- opening
_GZIP_MAGIC = b"\x1f\x8b"
#: the compressions recognised by their magic bytes, each read by the standard library
_COMPRESSIONS = {"gzip": _GZIP_MAGIC, "bz2": b"BZh", "xz": b"\xfd7zXZ\x00"}


def _compression(path) -> str | None:
    """``"gzip"``, ``"bz2"``, ``"xz"`` (by the file's magic bytes) or None."""
    with open(path, "rb") as fh:
        head = fh.read(6)
    return next((k for k, magic in _COMPRESSIONS.items() if head.startswith(magic)), None)


def _is_gzip(path) -> bool:
    return _compression(path) == "gzip"


_REFETCH = ("the file is truncated or corrupt: replace it ("
            f"{'`make data`' if _paths.IN_CHECKOUT else '`python -m scalable_softmax.data fetch`'}"
            " fetches the registered files again; a file of your own, copy it again)")


class _NamedGzip(io.RawIOBase):
    """A gzip stream whose decompression errors (a truncated file: ``EOFError``; a
    corrupt one: ``BadGzipFile``, ``zlib.error``) become :class:`DataFormatError`
    naming the file."""

    def __init__(self, path: Path, kind: str = "gzip"):
        self._path = path
        self._fh = {"gzip": gzip.open, "bz2": bz2.open, "xz": lzma.open}[kind](path, "rb")

    def readable(self):
        return True

    def readinto(self, b):
        try:
            return self._fh.readinto(b)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError, lzma.LZMAError) as exc:
            # bz2 and lzma report a corrupt stream as OSError / lzma.LZMAError
            raise DataFormatError(self._path, f"cannot decompress ({exc}); "
                                  + _REFETCH) from exc

    def close(self):
        if not self.closed:
            self._fh.close()
        super().close()


def open_binary(path):
    """Open ``path`` for reading bytes, decompressing it if it is gzip, bzip2 or xz (a
    truncated or corrupt compressed file raises :class:`DataFormatError` naming it)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    kind = _compression(path)
    if kind is not None:
        return io.BufferedReader(_NamedGzip(path, kind), buffer_size=1 << 16)
    return open(path, "rb")


def open_text(path, encoding: str = "utf-8", errors: str = "replace"):
    """Open ``path`` as text (gzip recognised by its magic bytes)."""
    return io.TextIOWrapper(open_binary(path), encoding=encoding, errors=errors,
                            newline=None)


def _read_all_bytes(path) -> bytes:
    try:
        with open_binary(path) as fh:
            return fh.read()
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise DataFormatError(path, f"cannot decompress ({exc}); " + _REFETCH) from exc


# --------------------------------------------------------------------------- idx (MNIST)
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
               0x0E: ">f8"}


def read_idx(path) -> np.ndarray:
    """Read an idx file (the MNIST format), plain or gzip-compressed.

    The header is two zero bytes, a type code, the number of dimensions ``d``, then
    ``d`` big-endian uint32 sizes; the body must hold exactly ``prod(sizes)`` items.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    ndarray
        Shaped by the header, in native byte order.

    Raises
    ------
    DataFormatError
        Bad magic number, unknown type code, truncated header, or a body shorter or
        longer than the header says (the offset of the problem is given).
    """
    raw = _read_all_bytes(path)
    if len(raw) == 0:
        raise DataFormatError(path, "empty file (expected an idx header)", offset=0)
    if len(raw) < 4:
        raise DataFormatError(path, f"truncated idx header ({len(raw)} bytes)", offset=0)
    if raw[0] != 0 or raw[1] != 0:
        magic = int.from_bytes(raw[:4], "big")
        raise DataFormatError(
            path, f"bad idx magic number {magic} (0x{magic:08x}); an idx file starts "
            "with two zero bytes (MNIST images: 2051, labels: 2049)", offset=0)
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise DataFormatError(path, f"unknown idx type code 0x{code:02x}", offset=2)
    if ndim == 0:
        raise DataFormatError(path, "idx header declares 0 dimensions", offset=3)
    hdr = 4 + 4 * ndim
    if len(raw) < hdr:
        raise DataFormatError(path, f"truncated idx header: {ndim} dimensions need "
                              f"{hdr} bytes, file has {len(raw)}", offset=len(raw))
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[code])
    expected = math.prod(shape) * dtype.itemsize   # exact: no int64 wrap-around
    body = len(raw) - hdr
    if body != expected:
        what = "short" if body < expected else "long"
        raise DataFormatError(
            path, f"idx body too {what}: header says shape {shape} "
            f"({expected} bytes), body has {body} bytes", offset=hdr + min(body, expected))
    arr = np.frombuffer(raw, dtype=dtype, offset=hdr).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=False)


def read_mnist(images_path, labels_path) -> LabelledData:
    """Read an MNIST images/labels pair of idx files.

    Checks the magic numbers (2051 images, 2049 labels), that the two counts agree and
    that the labels are digits 0..9.

    Returns
    -------
    LabelledData
        ``X``: pixel values 0..255 as float64, one row of 28*28 = 784 per image (pixels
        that are zero are not stored); one label per row.
    """
    for p, want in ((images_path, 2051), (labels_path, 2049)):
        with open_binary(p) as fh:
            head = fh.read(4)
        magic = int.from_bytes(head, "big") if len(head) == 4 else None
        if magic != want:
            raise DataFormatError(
                p, f"bad magic number {magic}: expected {want} "
                f"({'images, 3 dimensions' if want == 2051 else 'labels, 1 dimension'})",
                offset=0)
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise DataFormatError(images_path, f"expected uint8 images of 3 dimensions, got "
                              f"{images.dtype} with shape {images.shape}", offset=0)
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise DataFormatError(labels_path, f"expected uint8 labels of 1 dimension, got "
                              f"{labels.dtype} with shape {labels.shape}", offset=0)
    if images.shape[0] != labels.shape[0]:
        raise DataFormatError(labels_path, f"{labels.shape[0]} labels for "
                              f"{images.shape[0]} images in {images_path}", offset=4)
    bad = np.flatnonzero(labels > 9)
    if bad.size:
        raise DataFormatError(labels_path, f"label {labels[bad[0]]} of image {bad[0]} is "
                              "not a digit 0..9", offset=8 + int(bad[0]))
    n = images.shape[0]
    X = sp.csr_matrix(images.reshape(n, -1)).astype(np.float64)
    X.sort_indices()
    return LabelledData(
        X=X, label_indptr=np.arange(n + 1, dtype=np.int64),
        label_indices=labels.astype(np.int64), n_features=X.shape[1], n_labels=10,
        lines=np.arange(1, n + 1, dtype=np.int64),
        label_names=[str(d) for d in range(10)], n_points_total=n,
        first_labels_all=labels.astype(np.int64),
        info={"image_shape": list(images.shape[1:])})


# --------------------------------------------------------------------------- ARFF / MULAN
@dataclass
class ArffAttribute:
    """One ``@attribute`` of an ARFF header."""

    name: str
    kind: str  # "numeric" or "nominal"
    values: tuple[str, ...] | None
    line: int


@dataclass
class ArffData:
    """An ARFF file: its attributes and all values as a sparse matrix.

    ``X[i, j]`` is the value of attribute ``j`` in data row ``i``: the number for a
    numeric attribute, the position of the value in the declared list for a nominal
    one (so ``{0,1}`` attributes read as 0/1).
    """

    path: str
    relation: str
    attributes: list[ArffAttribute]
    X: sp.csr_matrix
    lines: np.ndarray


def _unquote(tok: str) -> str:
    if len(tok) >= 2 and tok[0] == tok[-1] and tok[0] in "'\"":
        body = tok[1:-1]
        return re.sub(r"\\(.)", r"\1", body)
    return tok


def _parse_attribute(path, lineno: int, text: str) -> ArffAttribute:
    rest = text[len("@attribute"):].strip()
    if not rest:
        raise DataFormatError(path, "@attribute without a name", line=lineno)
    if rest[0] in "'\"":
        q = rest[0]
        i, name_chars = 1, []
        while i < len(rest) and rest[i] != q:
            if rest[i] == "\\" and i + 1 < len(rest):
                i += 1
            name_chars.append(rest[i])
            i += 1
        if i >= len(rest):
            raise DataFormatError(path, f"unterminated quoted attribute name: {rest!r}",
                                  line=lineno)
        name, spec = "".join(name_chars), rest[i + 1:].strip()
    else:
        parts = rest.split(None, 1)
        name, spec = parts[0], (parts[1].strip() if len(parts) > 1 else "")
    if not spec:
        raise DataFormatError(path, f"@attribute {name!r} has no type", line=lineno)
    low = spec.lower()
    if low in ("numeric", "real", "integer"):
        return ArffAttribute(name, "numeric", None, lineno)
    if spec.startswith("{"):
        if not spec.endswith("}"):
            raise DataFormatError(path, f"nominal type of {name!r} is not closed by '}}'",
                                  line=lineno)
        values = tuple(_unquote(v.strip()) for v in spec[1:-1].split(","))
        if not values or any(v == "" for v in values):
            raise DataFormatError(path, f"empty nominal value in type of {name!r}",
                                  line=lineno)
        return ArffAttribute(name, "nominal", values, lineno)
    raise DataFormatError(
        path, f"attribute {name!r} has type {spec.split()[0]!r}; only numeric and "
        "nominal attributes are supported", line=lineno)


def read_arff(path) -> ArffData:
    """Read an ARFF file with sparse (``{i v, j w}``) and/or dense data rows.

    Comments (``%``) and blank lines are skipped; keywords are case-insensitive;
    attribute names may be quoted. Sparse rows must list strictly increasing attribute
    indices (as Weka requires); omitted entries are 0.

    Raises
    ------
    DataFormatError
        Empty file, no ``@data`` section, unsupported attribute type, attribute index out
        of range or not increasing, value not numeric / not in the nominal list, missing
        value ``?``, NaN or inf, wrong number of fields in a dense row.
    """
    relation, attrs = "", []
    indptr, indices, data, lines = [0], [], [], []
    in_data = False
    kinds = None  # per attribute: 0 numeric, 1 nominal {0,1}, 2 other nominal
    n_rows = 0
    saw_anything = False
    with open_text(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            s = raw.strip()
            if not s or s.startswith("%"):
                continue
            saw_anything = True
            if not in_data:
                low = s.lower()
                if low.startswith("@relation"):
                    relation = _unquote(s[len("@relation"):].strip())
                elif low.startswith("@attribute"):
                    attrs.append(_parse_attribute(path, lineno, s))
                elif low.startswith("@data"):
                    if not attrs:
                        raise DataFormatError(path, "@data before any @attribute",
                                              line=lineno)
                    in_data = True
                    kinds = np.array([0 if a.kind == "numeric" else
                                      (1 if a.values == ("0", "1") else 2)
                                      for a in attrs], dtype=np.int8)
                    n_attr = len(attrs)
                else:
                    raise DataFormatError(path, f"unexpected header line {s[:40]!r} "
                                          "(expected @relation, @attribute or @data)",
                                          line=lineno)
                continue
            if s[0] == "{":
                idx, val = _arff_sparse_row(path, lineno, s, attrs, kinds, n_attr)
            else:
                idx, val = _arff_dense_row(path, lineno, s, attrs, kinds, n_attr)
            indices.append(idx)
            data.append(val)
            indptr.append(indptr[-1] + len(idx))
            lines.append(lineno)
            n_rows += 1
    if not saw_anything:
        raise DataFormatError(path, "empty file (no ARFF header)", line=1)
    if not in_data:
        raise DataFormatError(path, "no @data section", line=lineno)
    if n_rows == 0:
        raise DataFormatError(path, "@data section has no rows", line=lineno)
    X = _canonical_csr(indptr, np.concatenate(indices) if indices else [],
                       np.concatenate(data) if data else [], (n_rows, n_attr))
    return ArffData(str(path), relation, attrs, X, np.asarray(lines, dtype=np.int64))


def _arff_value_error(path, lineno, attrs, j, tok, why):
    a = attrs[j]
    raise DataFormatError(path, f"value {tok!r} of attribute {j} ({a.name!r}): {why}",
                          line=lineno)


def _arff_convert(path, lineno, attrs, kinds, idx, toks):
    """Convert value strings of attributes ``idx`` to floats (vectorised when possible)."""
    k = kinds[idx]
    if idx.size and k.max() < 2 and any(t[:1] in "'\"" for t in toks):
        # a quoted value of a {0,1} attribute ('1'): the value is what the quotes hold
        toks = [_unquote(t) if kinds[j] == 1 else t for j, t in zip(idx, toks)]
    if not _plain("".join(toks)):
        for j, t in zip(idx, toks):
            if kinds[j] != 2 and not _plain(t):
                _arff_value_error(path, lineno, attrs, int(j), t,
                                  "not a number" + _NOT_PLAIN)
    if idx.size and k.max() < 2:
        if "?" in toks:
            j = toks.index("?")
            _arff_value_error(path, lineno, attrs, int(idx[j]), "?",
                              "missing values are not supported")
        try:
            val = np.array(toks, dtype=np.float64)
        except ValueError:
            for j, t in zip(idx, toks):
                try:
                    float(t)
                except ValueError:
                    _arff_value_error(path, lineno, attrs, int(j), t,
                                      "not one of the declared values {0,1}"
                                      if kinds[j] == 1 else "not a number")
            raise  # pragma: no cover
        bad = ~np.isfinite(val)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            _arff_value_error(path, lineno, attrs, int(idx[j]), toks[j], "NaN or inf")
        bad = (k == 1) & (val != 0) & (val != 1)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            _arff_value_error(path, lineno, attrs, int(idx[j]), toks[j],
                              "not one of the declared values {0,1}")
        return val
    val = np.empty(len(toks), dtype=np.float64)
    for p, (j, t) in enumerate(zip(idx, toks)):
        a = attrs[int(j)]
        if t == "?":
            _arff_value_error(path, lineno, attrs, int(j), t,
                              "missing values are not supported")
        if a.kind == "numeric":
            try:
                v = float(t)
            except ValueError:
                _arff_value_error(path, lineno, attrs, int(j), t, "not a number")
            if not math.isfinite(v):
                _arff_value_error(path, lineno, attrs, int(j), t, "NaN or inf")
        else:
            u = _unquote(t)
            if u not in a.values:
                _arff_value_error(path, lineno, attrs, int(j), t,
                                  f"not one of the declared values {set(a.values)}")
            v = float(a.values.index(u))
        val[p] = v
    return val


def _arff_sparse_row(path, lineno, s, attrs, kinds, n_attr):
    if not s.endswith("}"):
        raise DataFormatError(path, "sparse row does not end with '}' (instance weights "
                              "'{...}, {w}' are not supported)", line=lineno)
    inner = s[1:-1].strip()
    if not inner:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    entries = inner.count(",") + 1
    flat = inner.replace(",", " ").split()
    if len(flat) != 2 * entries:
        for e in inner.split(","):
            if len(e.split()) != 2:
                raise DataFormatError(path, f"sparse entry {e.strip()!r} is not "
                                      "'index value'", line=lineno)
    bad = next((t for t in flat[0::2] if not _INT.fullmatch(t)), None)
    if bad is not None:
        raise DataFormatError(path, f"attribute index {bad!r} is not an integer",
                              line=lineno)
    try:
        idx = np.array(flat[0::2], dtype=np.int64)
    except ValueError:
        bad = next(t for t in flat[0::2] if not re.fullmatch(r"[+-]?\d+", t))
        raise DataFormatError(path, f"attribute index {bad!r} is not an integer",
                              line=lineno) from None
    except OverflowError:
        bad = next(t for t in flat[0::2] if not -2**63 <= int(t) < 2**63)
        raise DataFormatError(path, f"attribute index {bad} out of range "
                              f"0..{n_attr - 1}", line=lineno) from None
    if idx.size:
        if idx.min() < 0 or idx.max() >= n_attr:
            j = int(idx[(idx < 0) | (idx >= n_attr)][0])
            raise DataFormatError(path, f"attribute index {j} out of range "
                                  f"0..{n_attr - 1}", line=lineno)
        if idx.size > 1 and np.any(np.diff(idx) <= 0):
            p = int(np.flatnonzero(np.diff(idx) <= 0)[0])
            raise DataFormatError(path, f"attribute indices must increase: {idx[p]} then "
                                  f"{idx[p + 1]}", line=lineno)
    val = _arff_convert(path, lineno, attrs, kinds, idx, flat[1::2])
    return idx, val


def _arff_dense_row(path, lineno, s, attrs, kinds, n_attr):
    toks = [t.strip() for t in s.split(",")]
    if len(toks) != n_attr:
        raise DataFormatError(path, f"dense row has {len(toks)} fields, the header "
                              f"declares {n_attr} attributes", line=lineno)
    idx = np.arange(n_attr, dtype=np.int64)
    val = _arff_convert(path, lineno, attrs, kinds, idx, toks)
    nz = val != 0
    return idx[nz], val[nz]


def read_mulan_labels(xml_path) -> list[str]:
    """Names of the labels declared in a MULAN XML label file, in document order.

    Nested (hierarchical) ``<label>`` elements are all returned, depth first.

    Raises
    ------
    DataFormatError
        Not well-formed XML, no ``<label>`` element, a label without a name, or a
        repeated name (with its line).
    """
    raw = _read_all_bytes(xml_path)
    if not raw.strip():
        raise DataFormatError(xml_path, "empty file (expected a MULAN <labels> document)",
                              line=1)
    found = []  # (name or None, line)
    parser = expat.ParserCreate()

    def start(tag, attrs):
        if tag.rsplit(":", 1)[-1] == "label":
            found.append((attrs.get("name"), parser.CurrentLineNumber))

    parser.StartElementHandler = start
    try:
        parser.Parse(raw, True)
    except expat.ExpatError as exc:
        raise DataFormatError(xml_path, f"not well-formed XML: "
                              f"{expat.ErrorString(exc.code)}", line=exc.lineno) from None
    names, seen = [], set()
    for name, line in found:
        if not name:
            raise DataFormatError(xml_path, f"<label> number {len(names) + 1} has no "
                                  "name attribute", line=line)
        if name in seen:
            raise DataFormatError(xml_path, f"label name {name!r} repeated", line=line)
        seen.add(name)
        names.append(name)
    if not names:
        raise DataFormatError(xml_path, "no <label> element", line=1)
    return names


def read_mulan(arff_path, xml_path, *, label_match: str = "auto") -> LabelledData:
    """Read a MULAN multi-label data set: a sparse ARFF file and its XML label header.

    The label attributes are the ones the XML names; every other attribute is a
    feature (in ARFF order). A row's labels are its label attributes with value 1, in
    the order they appear in the row (which, ARFF rows being sorted, is attribute
    order); label ``j`` is the ``j``-th label of the XML.

    Parameters
    ----------
    arff_path, xml_path : str or Path
    label_match : {"auto", "strict"}
        ``"strict"``: every XML name must be an attribute name. ``"auto"`` (default)
        also accepts an XML file with a few misspelt names when the labels that do match
        are exactly the last ``L`` attributes in XML order: the misspelt ones are then
        matched by position and listed in ``info["label_name_fixes"]``. (The public
        ``delicious.xml`` spells one label ``TTAG_m\\'usica`` where the ARFF file says
        ``TAG_m\\'usica``.)

    Raises
    ------
    DataFormatError
        Any problem of :func:`read_arff` or :func:`read_mulan_labels`; an XML name that
        matches no attribute (beyond what ``"auto"`` repairs); a label attribute that is
        not ``{0,1}``.
    """
    if label_match not in ("auto", "strict"):
        raise ValueError(f"label_match must be 'auto' or 'strict', got {label_match!r}")
    names = read_mulan_labels(xml_path)
    arff = read_arff(arff_path)
    attr_pos = {a.name: j for j, a in enumerate(arff.attributes)}
    A, L = len(arff.attributes), len(names)
    fixes = []
    missing = [i for i, nm in enumerate(names) if nm not in attr_pos]
    if missing:
        tail_start = A - L
        positional_ok = (
            label_match == "auto" and tail_start >= 0
            and len(missing) <= max(1, L // 100)
            and all(attr_pos[nm] == tail_start + i
                    for i, nm in enumerate(names) if nm in attr_pos))
        if not positional_ok:
            nm = names[missing[0]]
            raise DataFormatError(
                xml_path, f"label {nm!r} of the XML header is not an attribute of "
                f"{arff_path} ({len(missing)} of {L} labels unmatched)")
        for i in missing:
            fixes.append({"xml": names[i], "arff": arff.attributes[tail_start + i].name})
        label_cols = np.arange(tail_start, A, dtype=np.int64)
    else:
        label_cols = np.array([attr_pos[nm] for nm in names], dtype=np.int64)
    for j in label_cols:
        a = arff.attributes[j]
        if a.kind != "nominal" or a.values != ("0", "1"):
            raise DataFormatError(arff_path, f"label attribute {a.name!r} must be "
                                  "nominal {0,1}", line=a.line)
    is_label = np.zeros(A, dtype=bool)
    is_label[label_cols] = True
    feat_cols = np.flatnonzero(~is_label)
    X_all = arff.X
    X = X_all[:, feat_cols].tocsr()
    X.sort_indices()
    # label lists: positives among label columns, in attribute (= row) order
    col_to_label = np.full(A, -1, dtype=np.int64)
    col_to_label[label_cols] = np.arange(L)
    Y = X_all[:, np.sort(label_cols)].tocsr()
    Y.sort_indices()
    sorted_cols = np.sort(label_cols)
    lab_idx = col_to_label[sorted_cols[Y.indices]]
    lab_ptr = Y.indptr.astype(np.int64)
    return LabelledData(
        X=X, label_indptr=lab_ptr, label_indices=lab_idx.astype(np.int64),
        n_features=len(feat_cols), n_labels=L, lines=arff.lines,
        label_names=list(names),
        feature_names=[arff.attributes[j].name for j in feat_cols],
        n_points_total=X.shape[0],
        first_labels_all=_first_labels_all(lab_ptr, lab_idx),
        info={"relation": arff.relation, "label_name_fixes": fixes})


# --------------------------------------------------------------------------- sparse text
_FEAT_TOKEN = re.compile(r"\d+:[^\s:]+", re.ASCII)
_FEATS = re.compile(r"\d+:[^\s:]+(?: \d+:[^\s:]+)*", re.ASCII)
_INT = re.compile(r"[+-]?\d+", re.ASCII)
#: what Python's float() and int() accept but a data file's number may not hold
_NOT_PLAIN = " (digit separators '_' and non-ASCII characters are not part of a number)"


def _plain(t: str) -> bool:
    """``t`` may be read as a number: ASCII, without Python's digit separator ``_``
    (``float("1_0")`` is 10.0, ``float("\u0661")`` is 1.0)."""
    return t.isascii() and "_" not in t


def _bad_feature_token(feat_str: str) -> str:
    for t in feat_str.split():
        if not _FEAT_TOKEN.fullmatch(t):
            return t
    return feat_str  # pragma: no cover


def _parse_labels(path, lineno, label_str: str, mode: str):
    """Label ids of one line (``mode``: "multi" comma list, "single" one number)."""
    if mode == "single":
        if not label_str:
            raise DataFormatError(path, "line has no label", line=lineno)
        if not _plain(label_str):
            raise DataFormatError(path, f"label {label_str!r} is not a number" + _NOT_PLAIN,
                                  line=lineno)
        try:
            v = float(label_str)
        except ValueError:
            raise DataFormatError(path, f"label {label_str!r} is not a number",
                                  line=lineno) from None
        if not math.isfinite(v) or v != int(v):
            raise DataFormatError(path, f"label {label_str!r} is not an integer "
                                  "(classification labels only)", line=lineno)
        if _INT.fullmatch(label_str):       # exact, also beyond a float's 53 bits
            v = int(label_str)
        return [_int64_label(path, lineno, int(v), label_str)]
    if not label_str:
        return []
    out = []
    for t in label_str.split(","):
        t = t.strip()
        if t == "":
            raise DataFormatError(path, f"empty label in {label_str!r}", line=lineno)
        if len(t.split()) > 1:
            raise DataFormatError(path, f"labels {label_str!r} are separated by something "
                                  "other than commas; write a label list as 1,2,3",
                                  line=lineno)
        if not _INT.fullmatch(t):
            raise DataFormatError(path, f"label {t!r} is not an integer", line=lineno)
        out.append(_int64_label(path, lineno, int(t), t))
    return out


#: the largest N, D or K a file may declare or imply (scipy.sparse's int32 index range;
#: every data set of the paper is far below it)
MAX_SIZE = 2**31 - 1


def _int64_label(path, lineno, v: int, text: str) -> int:
    if not -2**63 <= v < 2**63:
        raise DataFormatError(path, f"label {text!r} is beyond the 64-bit integer range",
                              line=lineno)
    return v


def _check_max_points(max_points) -> None:
    if max_points is not None and not (isinstance(max_points, (int, np.integer))
                                       and not isinstance(max_points, (bool, np.bool_))
                                       and max_points >= 0):
        raise ValueError(f"max_points must be None or an integer >= 0; got {max_points!r}")


def _check_zero_based(zero_based) -> None:
    if not (isinstance(zero_based, (bool, np.bool_))
            or (isinstance(zero_based, str) and zero_based == "auto")):
        raise ValueError(f"zero_based must be True, False or 'auto'; got {zero_based!r}")


def read_sparse_multilabel(path, *, header: bool, zero_based, label_mode: str = "multi",
                           n_features: int | None = None, max_points: int | None = None,
                           comments: bool = False) -> LabelledData:
    """Shared parser of the XMLRepository and LIBSVM text formats.

    Parameters
    ----------
    path : str or Path
    header : bool
        ``True``: line 1 is ``N D K`` (XMLRepository) and the body must have exactly
        ``N`` lines, feature indices ``< D`` and labels ``< K`` (all 0-based).
    zero_based : bool or "auto"
        Whether feature indices start at 0 (``"auto"``: yes if any index 0 occurs).
        Ignored (0-based) with ``header=True``.
    label_mode : {"multi", "single"}
        ``"multi"``: a comma-separated (possibly empty) list of integer labels;
        ``"single"``: exactly one numeric label per line.
    n_features : int, optional
        Dimension when known (indices beyond it are an error); else inferred.
    max_points : int, optional
        Read the features of the first ``max_points`` labelled points only; later lines
        are checked for their labels and counted (``tail_*``), their features skipped.
    comments : bool
        Strip ``#`` comments (LIBSVM).
    """
    if label_mode not in ("multi", "single"):
        raise ValueError(f"label_mode must be 'multi' or 'single', got {label_mode!r}")
    _check_max_points(max_points)
    _check_zero_based(zero_based)
    zero_based = zero_based if isinstance(zero_based, str) else bool(zero_based)
    if n_features is not None and not (isinstance(n_features, (int, np.integer))
                                       and 0 <= n_features <= MAX_SIZE):
        raise ValueError(f"n_features must be None or an integer in 0..{MAX_SIZE}; got "
                         f"{n_features!r}")
    N_hdr = D_hdr = K_hdr = None
    max_line = 0
    rows_idx, rows_val, row_lines = [], [], []
    lab_ptr, lab_idx = [0], []
    firsts_all = []
    n_labelled_read = 0
    tail_no_label = tail_labelled = 0
    n_points = 0
    max_feat = -1
    saw_zero = False
    lineno = 0
    with open_text(path) as fh:
        for lineno, raw in enumerate(fh, 1):
            line = raw.rstrip("\n")
            if comments and "#" in line:
                line = line.split("#", 1)[0]
            if header and N_hdr is None:
                N_hdr, D_hdr, K_hdr = _parse_header(path, line, lineno)
                continue
            toks = line.split()
            if not toks and not header:
                continue  # blank lines carry no point in LIBSVM files
            n_points += 1
            if header and n_points > N_hdr:
                raise DataFormatError(path, f"more points than the header's N={N_hdr} "
                                      "(line 1)", line=lineno)
            j = 0
            while j < len(toks) and ":" not in toks[j]:
                j += 1
            if label_mode == "single" and j > 1:
                raise DataFormatError(path, f"expected one label, got {toks[:j]}",
                                      line=lineno)
            labels = _parse_labels(path, lineno, " ".join(toks[:j]), label_mode)
            _check_labels_below(path, lineno, labels, K_hdr)
            if labels:
                firsts_all.append(labels[0])
            in_tail = max_points is not None and n_labelled_read >= max_points
            if in_tail:
                if labels:
                    tail_labelled += 1
                else:
                    tail_no_label += 1
                continue
            if labels:
                n_labelled_read += 1
            feat_str = " ".join(toks[j:])
            if feat_str:
                idx, val = _parse_features(path, lineno, feat_str)
                _check_feature_indices(path, lineno, idx, D_hdr=D_hdr, header=header,
                                       n_features=n_features, zero_based=zero_based)
                saw_zero = saw_zero or int(idx.min()) == 0
                if int(idx.max()) > max_feat:
                    max_feat, max_line = int(idx.max()), lineno
            else:
                idx = np.empty(0, dtype=np.int64)
                val = np.empty(0, dtype=np.float64)
            rows_idx.append(idx)
            rows_val.append(val)
            row_lines.append(lineno)
            lab_idx.extend(labels)
            lab_ptr.append(len(lab_idx))
    if lineno == 0:
        raise DataFormatError(path, "empty file" + (" (expected a header 'N D K')"
                                                    if header else ""), line=1)
    if header:
        if N_hdr is None:
            raise DataFormatError(path, "no header line", line=1)
        if n_points != N_hdr:
            raise DataFormatError(path, f"header says N={N_hdr} points but the body has "
                                  f"{n_points} lines", line=1)
        shift, D = 0, D_hdr
    else:
        if n_points == 0:
            raise DataFormatError(path, "no data lines", line=lineno)
        shift, D = _feature_space(path, saw_zero if zero_based == "auto" else zero_based,
                                  n_features, max_feat, max_line)
    X = _rows_to_csr(rows_idx, rows_val, shift, D)
    lp = np.asarray(lab_ptr, dtype=np.int64)
    li = np.asarray(lab_idx, dtype=np.int64)
    return LabelledData(
        X=X, label_indptr=lp, label_indices=li, n_features=D,
        n_labels=K_hdr, lines=np.asarray(row_lines, dtype=np.int64),
        n_points_total=n_points, tail_no_label=tail_no_label,
        tail_labelled=tail_labelled,
        first_labels_all=np.asarray(firsts_all, dtype=np.int64),
        info={"header": None if not header else {"N": N_hdr, "D": D_hdr, "K": K_hdr},
              "zero_based": bool(header or shift == 0)})


def _feature_space(path, zb: bool, n_features, max_feat: int, max_line: int):
    """``(shift, D)`` of a header-less file: its index base (``zb``: zero-based) and
    dimension, checked as scikit-learn's ``load_svmlight_file`` does (the bound
    ``n_features`` applies after the shift) and against :data:`MAX_SIZE`."""
    shift = 0 if zb else 1
    if n_features is not None and max_feat - shift >= n_features:
        raise DataFormatError(path, f"feature index {max_feat} beyond n_features="
                              f"{n_features} (the file is {'zero' if zb else 'one'}-based: "
                              f"indices {shift}..{n_features - 1 + shift}); pass a larger "
                              "n_features", line=max_line)
    D = max(n_features if n_features is not None else max_feat + 1 - shift, 0)
    if D > MAX_SIZE:
        raise DataFormatError(path, f"feature index {max_feat} implies D = {D} features, "
                              f"beyond the limit {MAX_SIZE}", line=max_line)
    return shift, D


def _parse_header(path, line: str, lineno: int) -> tuple[int, int, int]:
    """``(N, D, K)`` of an XMLRepository header line."""
    parts = line.split()
    if len(parts) != 3 or not all(_INT.fullmatch(p) for p in parts):
        raise DataFormatError(path, f"expected a header 'N D K' (three "
                              f"integers), got {line[:60]!r}", line=lineno)
    N_hdr, D_hdr, K_hdr = (int(p) for p in parts)
    if min(N_hdr, D_hdr, K_hdr) < 0:
        raise DataFormatError(path, "negative count in the header", line=lineno)
    for what, v in (("N", N_hdr), ("D", D_hdr), ("K", K_hdr)):
        if v > MAX_SIZE:
            raise DataFormatError(path, f"the header's {what}={v} is beyond the limit "
                                  f"{MAX_SIZE} (a corrupt header?)", line=lineno)
    return N_hdr, D_hdr, K_hdr


def _check_labels_below(path, lineno: int, labels, K_hdr) -> None:
    """Every label in ``0..K_hdr-1`` (nothing to check when ``K_hdr`` is None)."""
    if K_hdr is None:
        return
    for lab in labels:
        if lab < 0 or lab >= K_hdr:
            raise DataFormatError(path, f"label {lab} out of range 0..{K_hdr - 1}"
                                  f" (header K={K_hdr})", line=lineno)


def _parse_features(path, lineno: int, feat_str: str) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, values)`` of a line's ``index:value`` tokens (as in the file, not
    shifted); malformed tokens, non-finite values and repeated indices raise
    :class:`DataFormatError` naming the line."""
    if not _FEATS.fullmatch(feat_str):
        bad = _bad_feature_token(feat_str)
        raise DataFormatError(path, f"token {bad!r} is not 'index:value' "
                              "(index a non-negative integer)", line=lineno)
    flat = feat_str.replace(":", " ").split()
    if not _plain(feat_str):
        bad = next(t for t in flat[1::2] if not _plain(t))
        raise DataFormatError(path, f"feature value {bad!r} is not a number" + _NOT_PLAIN,
                              line=lineno)
    try:
        idx = np.array(flat[0::2], dtype=np.int64)
    except OverflowError:
        bad = next(t for t in flat[0::2] if int(t) >= 2**63)
        raise DataFormatError(path, f"feature index {bad} is beyond the 64-bit integer "
                              "range", line=lineno) from None
    try:
        val = np.array(flat[1::2], dtype=np.float64)
    except ValueError:
        bad = next(t for t in flat[1::2] if not _is_float(t))
        raise DataFormatError(path, f"feature value {bad!r} is not a number",
                              line=lineno) from None
    if not np.all(np.isfinite(val)):
        k = int(np.flatnonzero(~np.isfinite(val))[0])
        raise DataFormatError(path, f"feature {idx[k]} has value "
                              f"{flat[2 * k + 1]!r} (NaN or inf)", line=lineno)
    if idx.size > 1:
        s_idx = np.sort(idx)
        if np.any(s_idx[1:] == s_idx[:-1]):
            k = int(s_idx[1:][s_idx[1:] == s_idx[:-1]][0])
            raise DataFormatError(path, f"feature index {k} repeated", line=lineno)
    return idx, val


def _check_feature_indices(path, lineno: int, idx: np.ndarray, *, D_hdr, header: bool,
                           n_features, zero_based) -> None:
    """A line's feature indices against the header's ``D``, ``n_features`` and the
    file's index base."""
    imax = int(idx.max())
    if D_hdr is not None and imax >= D_hdr:
        raise DataFormatError(path, f"feature index {imax} out of range "
                              f"0..{D_hdr - 1} (header D={D_hdr})", line=lineno)
    if n_features is not None and not header:
        # "auto" is decided at the end of the file (then checked again, strictly)
        lim = n_features - 1 if zero_based is True else n_features
        if imax > lim:
            raise DataFormatError(path, f"feature index {imax} beyond "
                                  f"n_features={n_features}", line=lineno)
    if not header and zero_based is False and int(idx.min()) == 0:
        raise DataFormatError(path, "feature index 0 in a 1-based file "
                              "(pass zero_based=True or 'auto')", line=lineno)


def _rows_to_csr(rows_idx, rows_val, shift: int, D: int) -> sp.csr_matrix:
    """Canonical CSR ``(len(rows_idx), D)`` from per-row index and value arrays, the
    indices shifted down by ``shift`` (1 for a 1-based file)."""
    n = len(rows_idx)
    counts = np.fromiter((len(r) for r in rows_idx), dtype=np.int64, count=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = (np.concatenate(rows_idx) - shift) if n else np.empty(0, dtype=np.int64)
    data = np.concatenate(rows_val) if n else np.empty(0, dtype=np.float64)
    return _canonical_csr(indptr, indices, data, (n, D))


def _is_float(t: str) -> bool:
    try:
        float(t)
        return True
    except ValueError:
        return False


def read_xmlrepo(path, *, max_points: int | None = None) -> LabelledData:
    """Read a file in the Extreme Classification Repository text format.

    Line 1 is ``N D K``; then one line per point, ``l1,l2,... f:v f:v ...`` with
    0-based labels ``< K`` and features ``< D``; a point may carry no label. The body
    must have exactly ``N`` lines.

    Parameters
    ----------
    path : str or Path
    max_points : int, optional
        Read the features of the first ``max_points`` labelled points only (the rest
        are label-checked and counted): enough for the paper's 100,000-point cap
        without parsing all 1.2 M lines of AmazonCat-13K.

    Raises
    ------
    DataFormatError
        Empty file, bad header, header counts disagreeing with the body, non-numeric
        values, feature index ``>= D``, label ``>= K``, NaN or inf, repeated index.
    """
    return read_sparse_multilabel(path, header=True, zero_based=True,
                                  label_mode="multi", max_points=max_points)


def read_libsvm(path, *, n_features: int | None = None, zero_based=False,
                multilabel: bool = False, max_points: int | None = None) -> LabelledData:
    """Read a LIBSVM / svmlight file.

    Each line is ``label index:value index:value ...`` (``#`` starts a comment; blank
    lines are skipped). With ``multilabel=True`` the label is a comma-separated list,
    possibly empty, and spaces after the commas are allowed (``"545, 32 8:1"``, the
    LSHTC layout).

    Parameters
    ----------
    path : str or Path
    n_features : int, optional
        Dimension; indices beyond it are an error. Inferred from the largest index if
        not given.
    zero_based : bool or "auto"
        LIBSVM files are 1-based (default); an index 0 is then an error.
    multilabel : bool
    max_points : int, optional
        As in :func:`read_xmlrepo`.

    Raises
    ------
    DataFormatError
        Empty file, non-numeric label or value, non-integer label, index out of range,
        repeated index, NaN or inf.
    """
    return read_sparse_multilabel(
        path, header=False, zero_based=zero_based,
        label_mode="multi" if multilabel else "single", n_features=n_features,
        max_points=max_points, comments=True)


# --------------------------------------------------------------------------- 20 Newsgroups
@dataclass
class NewsCorpus:
    """One split of the 20 Newsgroups corpus.

    Documents are sorted by (class name, numeric file name), so the order does not depend
    on the order of the tar members.
    """

    texts: list[str]
    labels: np.ndarray
    class_names: list[str]
    filenames: list[str]


_NEWS_SPLITS = {"20news-bydate-train": "train", "20news-bydate-test": "test"}


def _decode_post(raw: bytes) -> str:
    """UTF-8 if the bytes are valid UTF-8, else latin-1 (the corpus's own encoding).

    The mirror stores ~70 posts re-encoded as UTF-8; decoding this way gives the same
    text for them as latin-1 gives for the original bytes.
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def read_20newsgroups(path) -> dict[str, NewsCorpus]:
    """Read the raw "bydate" 20 Newsgroups tarball (``20news-bydate.tar.gz``).

    Members ``20news-bydate-{train,test}/<newsgroup>/<number>`` are read (a leading
    ``./`` is allowed; anything else is ignored). Each post is decoded as UTF-8 when
    valid, else latin-1 (never fails).

    Returns
    -------
    dict
        ``{"train": NewsCorpus, "test": NewsCorpus}``; label ``j`` is the ``j``-th
        newsgroup in alphabetical order.

    Raises
    ------
    DataFormatError
        Not a gzip tar archive, a split with no documents, or the two splits not having
        the same newsgroups.
    """
    docs = {"train": [], "test": []}
    try:
        tf = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise DataFormatError(path, f"not a readable tar archive: {exc}") from None
    with tf:
        try:
            for m in tf:
                if not m.isfile():
                    continue
                parts = m.name.lstrip("./").split("/")
                if len(parts) != 3 or parts[0] not in _NEWS_SPLITS:
                    continue
                fh = tf.extractfile(m)
                docs[_NEWS_SPLITS[parts[0]]].append((parts[1], parts[2],
                                                     _decode_post(fh.read())))
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise DataFormatError(path, f"corrupt tar archive: {exc}") from None
    out = {}
    classes = None
    for split, items in docs.items():
        if not items:
            raise DataFormatError(path, f"no documents under 20news-bydate-{split}/")
        names = sorted({c for c, _, _ in items})
        if classes is None:
            classes = names
        elif names != classes:
            raise DataFormatError(path, f"train and test have different newsgroups: "
                                  f"{sorted(set(classes) ^ set(names))}")
        items.sort(key=lambda t: (t[0], int(t[1]) if t[1].isdigit() else -1, t[1]))
        pos = {c: i for i, c in enumerate(classes)}
        out[split] = NewsCorpus(
            texts=[t for _, _, t in items],
            labels=np.array([pos[c] for c, _, _ in items], dtype=np.int64),
            class_names=list(classes),
            filenames=[f"20news-bydate-{split}/{c}/{f}" for c, f, _ in items])
    return out


#: scikit-learn's CountVectorizer default: runs of 2+ word characters
_TOKEN = re.compile(r"(?u)\b\w\w+\b")


def tokenize(text: str) -> list[str]:
    """Lower-case ``text`` and return its tokens: runs of two or more word characters.

    This is scikit-learn's ``CountVectorizer`` default (``token_pattern
    r"(?u)\\b\\w\\w+\\b"``, ``lowercase=True``), a common convention for 20 Newsgroups.

    Examples
    --------
    >>> tokenize("Re: The X-Window's FAQ, v2.0!")
    ['re', 'the', 'window', 'faq', 'v2']
    """
    return _TOKEN.findall(text.lower())


def bag_of_words(texts, vocabulary=None, *, min_df: int = 1, binary: bool = False):
    """Word-count matrix of ``texts``.

    Parameters
    ----------
    texts : sequence of str
    vocabulary : sequence of str, optional
        Words of the columns (e.g. chosen on the train split); tokens not in it are
        ignored. If ``None`` it is built from ``texts``: every token occurring in at
        least ``min_df`` documents, sorted alphabetically.
    min_df : int
        Document-frequency threshold when building the vocabulary.
    binary : bool
        1 for presence instead of counts.

    Returns
    -------
    X : scipy.sparse.csr_matrix
        ``len(texts) x len(vocabulary)`` float64, canonical.
    vocabulary : list of str
    """
    if min_df < 1:
        raise ValueError(f"min_df must be >= 1, got {min_df}")
    tokenised = [tokenize(t) for t in texts]
    if vocabulary is None:
        df = Counter()
        for toks in tokenised:
            df.update(set(toks))
        vocabulary = sorted(w for w, c in df.items() if c >= min_df)
    vocabulary = list(vocabulary)
    pos = {w: i for i, w in enumerate(vocabulary)}
    if len(pos) != len(vocabulary):
        raise ValueError("vocabulary has repeated words")
    lengths = np.fromiter(map(len, tokenised), dtype=np.int64, count=len(tokenised))
    total = int(lengths.sum())
    ids = np.fromiter(map(pos.get, chain.from_iterable(tokenised), repeat(-1)),
                      dtype=np.int64, count=total)
    rows = np.repeat(np.arange(len(tokenised), dtype=np.int64), lengths)
    keep = ids >= 0
    X = sp.csr_matrix((np.ones(int(keep.sum())), (rows[keep], ids[keep])),
                      shape=(len(tokenised), len(vocabulary)))
    X.sum_duplicates()
    X.sort_indices()
    if binary:
        X.data[:] = 1.0
    return X, vocabulary
