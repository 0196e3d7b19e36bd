"""Data layer: raw readers, the paper's preprocessing, surrogates, checksums, cache.

>>> from scalable_softmax.data import load_dataset        # doctest: +SKIP
>>> ds = load_dataset("bibtex")                            # doctest: +SKIP
>>> ds.X.shape, ds.K                                       # doctest: +SKIP
((4880, 1836), 146)

Command line: ``python -m scalable_softmax.data fetch`` fills the data directory
(``SOFTMAX_DATA_DIR``, default ``data/raw``) from the mirror (``DATA_MIRROR``) or the
public homes, verifying every file; ``python -m scalable_softmax.data table1 [--write
PREFIX]`` prints the paper's Table 1 beside ours. See ``data/README.md``.
"""
from __future__ import annotations

from .cache import CODE_VERSION
from .core import (
                   DATASETS,
                   PAPER_TABLE1,
                   REAL_DATASETS,
                   SURROGATE_DATASETS,
                   Dataset,
                   format_table1_markdown,
                   load_dataset,
                   paper_table1,
)
from .errors import ChecksumError, DataFormatError, MissingDataError
from .preprocess import DROP_REASONS, apply_conventions, normalize_rows, select_features
from .readers import (
                   LabelledData,
                   bag_of_words,
                   read_20newsgroups,
                   read_arff,
                   read_idx,
                   read_libsvm,
                   read_mnist,
                   read_mulan,
                   read_mulan_labels,
                   read_xmlrepo,
                   tokenize,
)
from .registry import FILES, USER_FILES, fetch, locate, sha256_file, verify_file
from .surrogate import SURROGATES

__all__ = [
    "load_dataset", "Dataset", "paper_table1", "format_table1_markdown", "PAPER_TABLE1",
    "DATASETS", "REAL_DATASETS", "SURROGATE_DATASETS", "SURROGATES",
    "DataFormatError", "MissingDataError", "ChecksumError",
    "read_idx", "read_mnist", "read_arff", "read_mulan_labels", "read_mulan",
    "read_xmlrepo", "read_libsvm", "read_20newsgroups", "tokenize", "bag_of_words",
    "LabelledData", "apply_conventions", "select_features", "normalize_rows",
    "DROP_REASONS", "fetch", "locate", "verify_file", "sha256_file", "FILES",
    "USER_FILES", "CODE_VERSION",
]
