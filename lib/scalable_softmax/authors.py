"""The authors' own recorded learning curves behind the published Table 3.

The file ``authors-results/table3-runs-6f9129b.csv`` of the data directory (fetched and
verified by ``make data`` like the data sets) holds every run recorded in
``Results/Complete/Tuned/*.p`` of the authors' public experiment repository
(francoisfagan/Log-tricks at commit 6f9129b, December 2017): one row per recorded point,
after epochs 2, 4, ..., 50, one run per data set and method, at the Table 2 rate. For
vanilla SGD, U-max and Implicit SGD ``train_metric`` is the exact mean log-loss over all
training rows; for OVE, NCE and IS it is the original code's defective metric
(``mean(-p_y + log sum_k exp(p_k))`` of the softmax probabilities, not a log-loss).

Only MNIST, Bibtex and Delicious are comparable with our runs: the other four data sets
here are the authors' real copies, ours are synthetic surrogates.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["load_recorded", "recorded_table3", "COMPARABLE", "EXPECTED_COLUMNS"]

#: the data sets whose recorded runs are comparable with ours (the same real data)
COMPARABLE = ("mnist", "bibtex", "delicious")

EXPECTED_COLUMNS = ("source_file", "method", "dataset", "lr", "epoch", "metric_kind",
                    "train_error", "train_metric", "test_error", "test_metric")


def load_recorded(path=None) -> pd.DataFrame:
    """The recorded runs as a DataFrame (columns :data:`EXPECTED_COLUMNS`).

    Parameters
    ----------
    path : optional path of the CSV; default: the verified copy in the data directory
        (``scalable_softmax.data.locate("authors-results")``).

    Raises
    ------
    MissingDataError, ChecksumError
        When the file is missing or altered (the message says to run ``make data``).
    ValueError
        When the file lacks a column (naming the file and the columns).
    """
    if path is None:
        from .data.registry import locate

        path = locate("authors-results")["csv"]
    df = pd.read_csv(path)
    missing = [c for c in EXPECTED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; expected "
                         f"{', '.join(EXPECTED_COLUMNS)} (run `make data` to re-fetch it)")
    return df


def recorded_table3(df: pd.DataFrame, epoch: int = 50) -> pd.DataFrame:
    """The recorded ``train_metric`` at ``epoch`` divided by Implicit SGD's, per data set
    (rows) and method (columns): the published Table 3 as the authors' files give it
    (NaN where a run was not recorded)."""
    at = df[df.epoch == epoch]
    if at.duplicated(["dataset", "method"]).any():
        dup = at[at.duplicated(["dataset", "method"], keep=False)]
        raise ValueError(f"several recorded runs for {sorted(set(zip(dup.dataset, dup.method)))}"
                         f" at epoch {epoch}")
    wide = at.pivot(index="dataset", columns="method", values="train_metric")
    if "implicit" not in wide.columns:
        raise ValueError("no Implicit SGD run recorded: cannot form ratios")
    return wide.div(wide["implicit"], axis=0).replace([np.inf, -np.inf], np.nan)
