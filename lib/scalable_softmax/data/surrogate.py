"""Seeded synthetic stand-ins for the four data sets that cannot be had here.

``eurlex-surrogate``, ``wiki10-surrogate``, ``amazoncat-surrogate`` and
``wikismall-surrogate`` have the paper's Table 1 shape *after* its truncation (train N,
D, K), sparse rows with a realistic number of non-zeros, Zipf-like feature and label
frequencies, and labels drawn from a planted softmax model, so that fitting them is
meaningful and the best achievable log-loss is known approximately.

Generative model (all draws from ``numpy.random.Generator`` streams derived from
``SeedSequence([seed, crc32(name)])``; one stream for the model, one per split):

* **Features.** Background popularity of feature ``j`` is Zipf, ``p_j ∝ r_j^{-1}``
  (``r_j`` a random permutation of ranks 1..D). Each class ``k`` has a *profile* of
  ``S = 20`` features drawn from the flattened popularity ``p_j^{1/2}`` restricted to
  ranks beyond the top 1% (mid-frequency words, as topical words are; this also keeps
  the planted scores sparse). A point has a latent class ``c_i`` and a length ``n_i``
  (log-normal, σ = 0.6, mean the target non-zeros per row, clipped to ``[1, D/2]``);
  40% of its tokens come from ``c_i``'s profile, 60% from the background, drawn with
  replacement; the token count is rescaled (three passes) on a pilot sample so that
  the mean number of *distinct* features per row hits the target. Values are tf-idf-like,
  ``(1 + ln count) * (1 + ln(p_max / p_j))``.
* **Latent classes** are Zipf, ``π_k ∝ (rank_k)^{-1}``; on the train split every class
  is latent for at least one point (the first K draws are a permutation of the
  classes), since the paper's K counts classes present in train.
* **Labels** are drawn from the planted softmax ``p(k | x) ∝ exp(x·w*_k / τ)``, ``x`` the
  unit-L2 row, ``w*_k`` supported on class k's profile with weights
  ``max(0.1, 1 + 0.5 ε)``. There is no bias, so the model lies in the class the paper
  fits. The temperature ``τ`` is set by Brent's method on a 4,000-row pilot so that the
  Bayes error ``E[1 - max_k p(k|x)]`` equals ``bayes_error`` (default 0.3: neither 0
  nor chance). Train classes that the draw left empty get one point each: the point
  of that latent class with the largest ``p(k|x)`` among those whose class has at
  least two points (counted in ``info["coverage_reassigned"]``: none for EURLex and
  AmazonCat, about 2% of the points for Wiki10 and 0.7% for Wiki-small).

Non-zeros per row: the published average features per point of the real
sets (EURLex-4K 236.8, Wiki10-31K 673.45, AmazonCat-13K 71.09, as quoted in the
project's issue; not checkable here) times the share of non-zeros that the 10,000 most
frequent features keep under a Zipf(1) document frequency over the original dimension,
``H(D)/H(D0)`` (1 for EURLex, whose D0 = 5,000 is not truncated; 0.81 for Wiki10,
0.76 for AmazonCat). For Wiki-small no per-point statistic of the LSHTC file the paper
used could be found; we use 50, the value the project's evaluator benchmark sets for
this shape. Test sizes: the real test sizes of EURLex (3,809) and Wiki10 (6,616), the
100,000 cap for AmazonCat (real test 306,782), and 25% of train for Wiki-small (no
labelled test file is public).
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import brentq

from ..kernels.surrogate import planted_sample_rows
from .readers import LabelledData

__all__ = ["SURROGATES", "SurrogateSpec", "PlantedModel", "make_model", "generate_split",
           "planted_sample", "planted_sample_reference", "surrogate_shape",
           "DEFAULT_SEED", "PROFILE_SIZE"]

DEFAULT_SEED = 2018
PROFILE_SIZE = 20
PROFILE_SHARE = 0.4
LENGTH_SIGMA = 0.6


def _harmonic(n: int) -> float:
    return float(np.sum(1.0 / np.arange(1, n + 1)))


@dataclass(frozen=True)
class SurrogateSpec:
    """Shape and statistics of one surrogate (paper's Table 1 after truncation)."""

    name: str
    N: int
    D: int
    K: int
    n_test: int
    nnz_published: float
    D_original: int
    K_original: int
    N_original: int
    note: str
    nnz_after_truncation: bool = False

    @property
    def nnz(self) -> float:
        """Target mean non-zeros per row after truncation to D features."""
        if self.nnz_after_truncation or self.D >= self.D_original:
            return self.nnz_published
        return self.nnz_published * _harmonic(self.D) / _harmonic(self.D_original)


SURROGATES: dict[str, SurrogateSpec] = {s.name: s for s in [
    SurrogateSpec("eurlex", 15_539, 5_000, 838, 3_809, 236.8, 5_000, 3_993, 15_539,
                  "EURLex-4K: 236.8 features/point; real test 3,809"),
    SurrogateSpec("wiki10", 14_146, 10_000, 4_021, 6_616, 673.45, 101_938, 30_938, 14_146,
                  "Wiki10-31K: 673.45 features/point over 101,938; real test 6,616"),
    SurrogateSpec("amazoncat", 100_000, 10_000, 2_709, 100_000, 71.09, 203_882, 2_919,
                  1_186_239, "AmazonCat-13K: 71.09 features/point over 203,882; real test "
                  "306,782 capped at 100,000"),
    SurrogateSpec("wikismall", 90_737, 10_000, 18_207, 22_684, 50.0, 2_085_164, 28_955,
                  342_664, "Wiki-small: 50 non-zeros/point after truncation (assumed, see "
                  "docstring); test 25% of train", nnz_after_truncation=True),
]}


def surrogate_shape(name: str, scale: float = 1.0) -> dict:
    """N, D, K, test size and target non-zeros per row of a surrogate at ``scale``.

    ``scale`` multiplies N, test size, D and K (for fast tests); the non-zeros per row
    are capped at D/4 then.
    """
    spec = SURROGATES[name]
    if not (0 < scale <= 1):
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    if scale == 1:
        return dict(N=spec.N, D=spec.D, K=spec.K, n_test=spec.n_test, nnz=spec.nnz)
    N = max(20, round(spec.N * scale))
    K = max(2, min(round(spec.K * scale), N // 2))
    D = max(10, round(spec.D * scale))
    return dict(N=N, D=D, K=K, n_test=max(10, round(spec.n_test * scale)),
                nnz=min(spec.nnz, D / 4))


def planted_sample(X: sp.csr_matrix, W: sp.csr_matrix, inv_tau: float, u=None):
    """Softmax statistics of the planted model ``p(k|x) ∝ exp(x·W[k] * inv_tau)``.

    Memory is O(K) per thread (one row at a time), never N x K.

    Parameters
    ----------
    X : csr_matrix (N, D)
    W : csr_matrix (K, D)
    inv_tau : float
    u : ndarray (N,), optional
        Uniforms in [0, 1): when given, ``y[i]`` is the class at which the cumulative
        probability (classes in index order) first exceeds ``u[i]``.

    Returns
    -------
    dict
        ``y`` and ``logp`` (if ``u``), ``pmax``, ``argmax``, ``entropy``, ``logz``.
    """
    X = sp.csr_matrix(X)
    Wt = sp.csr_matrix(W.T)
    Wt.sort_indices()
    n, K = X.shape[0], W.shape[0]
    do = u is not None
    uu = np.ascontiguousarray(u if do else np.zeros(n), dtype=np.float64)
    y = np.zeros(n, dtype=np.int64)
    logp = np.zeros(n)
    pmax = np.zeros(n)
    amax = np.zeros(n, dtype=np.int64)
    ent = np.zeros(n)
    logz = np.zeros(n)
    planted_sample_rows(X.indptr.astype(np.int64), X.indices.astype(np.int64),
                    X.data.astype(np.float64), Wt.indptr.astype(np.int64),
                    Wt.indices.astype(np.int64), Wt.data.astype(np.float64), K,
                    float(inv_tau), uu, do, y, logp, pmax, amax, ent, logz)
    out = dict(pmax=pmax, argmax=amax, entropy=ent, logz=logz)
    if do:
        out.update(y=y, logp=logp)
    return out


def planted_sample_reference(X, W, inv_tau: float, u=None):
    """Plain NumPy version of :func:`planted_sample` (dense; small problems only)."""
    S = np.asarray((sp.csr_matrix(X) @ sp.csr_matrix(W).T).toarray()) * inv_tau
    m = S.max(axis=1, keepdims=True)
    E = np.exp(S - m)
    Z = E.sum(axis=1, keepdims=True)
    P = E / Z
    logz = (m + np.log(Z))[:, 0]
    logP = S - logz[:, None]
    out = dict(pmax=P.max(axis=1), argmax=S.argmax(axis=1).astype(np.int64),
               entropy=-(P * logP).sum(axis=1), logz=logz)
    if u is not None:
        C = np.cumsum(E, axis=1)
        t = np.asarray(u)[:, None] * Z
        y = np.minimum((C <= t).sum(axis=1), S.shape[1] - 1).astype(np.int64)
        out["y"] = y
        out["logp"] = S[np.arange(len(y)), y] - logz
    return out


# --------------------------------------------------------------------------- model
@dataclass
class PlantedModel:
    """Everything shared by the two splits of a surrogate."""

    name: str
    N: int
    D: int
    K: int
    n_test: int
    nnz: float
    pop_cdf: np.ndarray       # background feature popularity (cumulative)
    idf: np.ndarray           # per-feature weight of the values
    profiles: np.ndarray      # (K, S) feature ids
    class_cdf: np.ndarray     # latent class prior (cumulative)
    W: sp.csr_matrix          # (K, D) planted weights (before 1/tau)
    tokens_per_nnz: float     # tokens drawn per wanted distinct feature
    inv_tau: float = 1.0
    seed: int = DEFAULT_SEED


def _streams(name: str, seed: int):
    ss = np.random.SeedSequence([int(seed), zlib.crc32(name.encode())])
    model, pilot, train, test = ss.spawn(4)
    return (np.random.default_rng(model), np.random.default_rng(pilot),
            np.random.default_rng(train), np.random.default_rng(test))


def _draw_rows(model: PlantedModel, rng, n: int, *, cover: bool):
    """Raw (un-normalised) feature rows and latent classes of ``n`` points."""
    K, D, S = model.K, model.D, model.profiles.shape[1]
    if cover == "mixture":  # same latent distribution as a covered train split
        uni = rng.random(n) < min(1.0, K / model.N)
        latent = np.searchsorted(model.class_cdf, rng.random(n), side="right")
        latent[uni] = rng.integers(0, K, int(uni.sum()))
    elif cover:
        if n < K:
            raise ValueError(f"cannot cover K={K} classes with {n} points")
        latent = np.concatenate([rng.permutation(K),
                                 np.searchsorted(model.class_cdf, rng.random(n - K),
                                                 side="right")])
        latent = latent[rng.permutation(n)]
    else:
        latent = np.searchsorted(model.class_cdf, rng.random(n), side="right")
    latent = np.minimum(latent, K - 1).astype(np.int64)
    mu = math.log(model.nnz) - LENGTH_SIGMA ** 2 / 2
    length = np.exp(mu + LENGTH_SIGMA * rng.standard_normal(n))
    length = np.clip(length, 1, D / 2)
    n_tok = np.maximum(1, np.rint(length * model.tokens_per_nnz)).astype(np.int64)
    n_prof = rng.binomial(n_tok, PROFILE_SHARE)
    n_bg = n_tok - n_prof
    rows_bg = np.repeat(np.arange(n), n_bg)
    feat_bg = np.searchsorted(model.pop_cdf, rng.random(rows_bg.size), side="right")
    rows_pf = np.repeat(np.arange(n), n_prof)
    feat_pf = model.profiles[np.repeat(latent, n_prof), rng.integers(0, S, rows_pf.size)]
    rows = np.concatenate([rows_bg, rows_pf])
    feats = np.minimum(np.concatenate([feat_bg, feat_pf]), D - 1)
    X = sp.csr_matrix((np.ones(rows.size), (rows, feats)), shape=(n, D))
    X.sum_duplicates()
    X.sort_indices()
    cols = X.indices
    X.data = (1.0 + np.log(X.data)) * model.idf[cols]
    return X, latent


def _normalised(X: sp.csr_matrix) -> sp.csr_matrix:
    from .preprocess import normalize_rows
    return normalize_rows(X)


def make_model(name: str, *, scale: float = 1.0, seed: int = DEFAULT_SEED,
               bayes_error: float = 0.3, pilot_rows: int = 4000,
               calibrated: dict | None = None) -> PlantedModel:
    """Build the planted model of surrogate ``name`` and calibrate its temperature.

    ``calibrated`` (``{"tokens_per_nnz": .., "inv_tau": ..}`` from an earlier call with
    the same arguments, e.g. the train split's ``info["surrogate_model"]``) skips the
    two pilot calibrations, which are deterministic anyway.
    """
    if name not in SURROGATES:
        raise ValueError(f"no surrogate for {name!r}; choose from {sorted(SURROGATES)}")
    shp = surrogate_shape(name, scale)
    K, D = shp["K"], shp["D"]
    if not (0 < bayes_error < 1 - 1 / K):
        raise ValueError(f"bayes_error must lie in (0, 1 - 1/K) = (0, {1 - 1 / K:.4f}), "
                         f"got {bayes_error}")
    r_model, r_pilot, _, _ = _streams(name, seed)
    ranks = r_model.permutation(D) + 1.0
    pop = 1.0 / ranks
    pop /= pop.sum()
    idf = 1.0 + np.log(pop.max() / pop)
    # profiles use mid-frequency words: flattened popularity, the top 1% excluded
    flat = np.sqrt(pop) * (ranks > max(1, D // 100))
    flat /= flat.sum()
    profiles = np.searchsorted(np.cumsum(flat), r_model.random((K, PROFILE_SIZE)),
                               side="right")
    profiles = np.minimum(profiles, D - 1).astype(np.int64)
    w = np.maximum(0.1, 1.0 + 0.5 * r_model.standard_normal((K, PROFILE_SIZE)))
    W = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(K), PROFILE_SIZE), profiles.ravel())),
                      shape=(K, D))
    W.sum_duplicates()
    W.sort_indices()
    class_rank = r_model.permutation(K) + 1.0
    prior = 1.0 / class_rank
    model = PlantedModel(name, shp["N"], D, K, shp["n_test"], shp["nnz"],
                         np.cumsum(pop), idf, profiles, np.cumsum(prior / prior.sum()),
                         W, tokens_per_nnz=1.0, seed=seed)
    if calibrated is not None:
        model.tokens_per_nnz = float(calibrated["tokens_per_nnz"])
        model.inv_tau = float(calibrated["inv_tau"])
        return model
    # pilot: how many tokens give the wanted distinct features per row (three passes)
    n_pilot = min(pilot_rows, max(200, shp["N"]))
    want = min(model.nnz, D / 2)
    n_nnz_pilot = min(1500, n_pilot)
    for _ in range(3):
        Xp, _ = _draw_rows(model, np.random.default_rng(r_pilot.integers(2**63)),
                           n_nnz_pilot, cover="mixture")
        model.tokens_per_nnz *= want / max(Xp.nnz / n_nnz_pilot, 1e-9)
    # temperature: the Bayes error of the pilot rows hits the target (Brent on log tau)
    Xp, _ = _draw_rows(model, np.random.default_rng(r_pilot.integers(2**63)), n_pilot,
                       cover="mixture")
    Xp = _normalised(Xp)

    def gap(log_tau):
        return 1.0 - planted_sample(Xp, W, math.exp(-log_tau))["pmax"].mean() - bayes_error

    lo, hi = -2.0, 3.0
    while gap(lo) > 0:
        lo -= 3.0
        if lo < -20:
            raise ValueError(f"{name}: the planted model cannot reach a Bayes error as low "
                             f"as {bayes_error}")
    while gap(hi) < 0:
        hi += 3.0
        if hi > 30:  # pragma: no cover - bayes_error < 1 - 1/K was checked
            raise ValueError(f"{name}: cannot calibrate the temperature")
    log_tau = brentq(gap, lo, hi, xtol=1e-4)
    model.inv_tau = math.exp(-log_tau)
    return model


def generate_split(model: PlantedModel, split: str):
    """Draw one split of a surrogate.

    Returns
    -------
    raw : LabelledData
        Un-normalised rows (the preprocessing normalises them) and one label per row.
    stats : dict
        Bayes error, the planted model's mean log-loss on the drawn labels and its
        expected value (mean entropy), the Bayes classifier's error on the drawn labels,
        realised non-zeros per row, class-frequency summaries, coverage fixes.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    _, _, r_train, r_test = _streams(model.name, model.seed)
    rng = r_train if split == "train" else r_test
    n = model.N if split == "train" else model.n_test
    Xraw, latent = _draw_rows(model, rng, n, cover=(split == "train"))
    Xn = _normalised(Xraw)
    res = planted_sample(Xn, model.W, model.inv_tau, u=rng.random(n))
    y = res["y"].copy()
    reassigned = 0
    if split == "train":
        counts = np.bincount(y, minlength=model.K)
        Wt = model.W.T.tocsc()  # column k = w*_k
        for k in np.flatnonzero(counts == 0):
            cand = np.flatnonzero(latent == k)
            cand = cand[counts[y[cand]] >= 2]
            if cand.size == 0:
                cand = np.flatnonzero(counts[y] >= 2)
            sk = np.asarray(Xn[cand] @ Wt[:, [k]].toarray()).ravel() * model.inv_tau
            i = cand[int(np.argmax(sk - res["logz"][cand]))]
            counts[y[i]] -= 1
            y[i] = k
            counts[k] += 1
            reassigned += 1
    n_classes = np.bincount(y, minlength=model.K)
    top = np.sort(n_classes)[::-1]
    stats = dict(
        bayes_error=float(1.0 - res["pmax"].mean()),
        bayes_logloss=float(res["entropy"].mean()),
        planted_logloss=float(-(res["logp"].mean())),
        planted_error=float(np.mean(res["argmax"] != y)),
        inv_tau=float(model.inv_tau),
        nnz_per_row=float(Xraw.nnz / n),
        nnz_target=float(model.nnz),
        top15_class_share=float(top[:15].sum() / n),
        classes_with_one_point=int((n_classes == 1).sum()),
        classes_present=int((n_classes > 0).sum()),
        coverage_reassigned=int(reassigned),
    )
    if reassigned:  # log-loss of the planted model on the labels actually used
        lp = res["logp"].copy()
        moved = np.flatnonzero(y != res["y"])
        Wt = model.W.T.tocsc()
        for i in moved:
            s = float((Xn[i] @ Wt[:, [y[i]]]).toarray()[0, 0]) * model.inv_tau
            lp[i] = s - res["logz"][i]
        stats["planted_logloss"] = float(-lp.mean())
    raw = LabelledData(
        X=Xraw, label_indptr=np.arange(n + 1, dtype=np.int64), label_indices=y,
        n_features=model.D, n_labels=model.K, lines=np.arange(1, n + 1, dtype=np.int64),
        label_names=None, n_points_total=n, first_labels_all=y,
        info={"latent": None})
    return raw, stats
