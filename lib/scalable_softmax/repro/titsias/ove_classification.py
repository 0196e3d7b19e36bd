"""One-vs-Each Table 2 and Figure 3 (Titsias 2016, section 4.2): the computations of
notebook ``10-ove-classification``.

For each data set four weight matrices, each from ``W = 0``: SOFT (exact ridge-softmax
MAP, full-batch L-BFGS), BOUCHARD (Bouchard's bound, every ``alpha_i`` solved exactly),
OVE (the exact One-vs-Each bound, L-BFGS) and OVE-SGD (the doubly stochastic OVE). One
data set is one work item (:class:`OveCase`): its four runs depend on each other
(BOUCHARD's and OVE's paths are measured against SOFT's weights, OVE-SGD against OVE's),
so they run in order in one process; :func:`run_cases` hands the items to the
collection's sweep executor :func:`scalable_softmax.repro.machinery.runs.run_all` (its cache; a few
processes at a time, every run in them single-threaded and seeded: the results do not
depend on the number of processes).

The notebook keeps the claim, the parameters, the findings and the narrative; this
module loads the data (:func:`load_cases`), runs the fits (:func:`run_cases`), builds
the tables (:func:`table2`, :func:`sgd_table`, :func:`path_table`,
:func:`sgd_extrapolation`, :func:`bouchard_near_paper`), checks the invariants
(:func:`check_invariants`) and draws the figures (``plot_*``).
"""
from __future__ import annotations

import dataclasses
import hashlib
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

__all__ = ["METHODS", "STYLE", "EXACT", "PAPER", "PAPER_SHAPE", "PAPER_FIG3", "CASES",
           "Settings", "OveCase", "CaseResult", "load_case", "load_cases", "exact_fit",
           "ove_sgd_run", "run_case", "run_cases", "gtol_status", "table2", "sgd_table",
           "path_table", "sgd_slopes", "sgd_extrapolation", "bouchard_near_paper",
           "check_invariants", "plot_table2", "plot_fig3", "plot_sgd", "plot_paths"]

METHODS = ["SOFT", "BOUCHARD", "OVE", "OVE-SGD"]
#: the collection's style names (colours, display names) of the paper's four methods:
#: OVE-SGD is the doubly stochastic OVE that Fagan & Iyengar's notebooks call "OVE"
STYLE = {"SOFT": "exact", "BOUCHARD": "bouchard", "OVE": "ove-exact", "OVE-SGD": "ove"}
#: the trainers of the three full-batch (L-BFGS) methods
EXACT = {"SOFT": "exact", "BOUCHARD": "bouchard", "OVE": "ove-exact"}
#: One-vs-Each paper, Table 2 (lambda = 1): (norm, error, nlpd); SOFT has no norm
PAPER = {
    "mnist": {"SOFT": (np.nan, 0.074, 0.271), "BOUCHARD": (0.64, 0.073, 0.333),
              "OVE": (0.50, 0.082, 0.287), "OVE-SGD": (0.53, 0.080, 0.278)},
    "20news": {"SOFT": (np.nan, 0.272, 1.263), "BOUCHARD": (0.65, 0.249, 1.337),
               "OVE": (0.05, 0.276, 1.297), "OVE-SGD": (0.14, 0.276, 1.312)},
    "bibtex": {"SOFT": (np.nan, 0.622, 2.793), "BOUCHARD": (0.25, 0.621, 2.955),
               "OVE": (0.09, 0.636, 2.888), "OVE-SGD": (0.10, 0.633, 2.875)},
}


def _news_paper_shape():
    from scalable_softmax.data.newsgroups import PAPER_SHAPE as news

    return news


#: the paper's (train points, test points, dimension, classes) per data set
PAPER_SHAPE = {"mnist": (60000, 10000, 784, 10), "20news": _news_paper_shape(),
               "bibtex": (4880, 2515, 1836, 148)}
#: Figure 3 of the paper: (x range of iterations, y range of the summed bound), read off
#: its axes: (a) MNIST, (b) 20NEWS, (c) BIBTEX
PAPER_FIG3 = {"mnist": ((0, 2e5), (-7e4, -2e4)), "20news": ((0, 1e6), (-4000, -1500)),
              "bibtex": ((0, 1e6), (-6000, -3000))}
#: case -> (the paper's data set, label, features)
CASES = {
    "mnist": ("mnist", "MNIST", "pixels / 255"),
    "20news": ("20news", "20 Newsgroups", "bodies, raw counts"),
    "bibtex": ("bibtex", "Bibtex", "binary"),
    "20news-unit": ("20news", "20 Newsgroups (sensitivity)", "whole posts, unit-L2 rows"),
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """The notebook's parameters that the runs depend on (see its parameters cell)."""

    lam: float = 1.0
    gtol: float = 1e-6
    lbfgs_maxiter: int = 20000
    lbfgs_memory: dict = dataclasses.field(default_factory=dict)
    lbfgs_parallel: bool = False
    sgd_settings: dict = dataclasses.field(default_factory=dict)
    sgd_batch: int = 200
    sgd_classes: int = 1
    sgd_checkpoints: int = 15
    path_every: int = 10
    seed: int = 0

    @classmethod
    def from_namespace(cls, namespace: dict) -> "Settings":
        """The settings from a notebook's ``globals()`` (its parameters)."""
        return cls(**{f.name: namespace[f.name] for f in dataclasses.fields(cls)})


# --------------------------------------------------------------------------- data
def _with_bias(X, bias: bool):
    X = sp.csr_matrix(X, dtype=np.float64)
    if bias:
        X = sp.hstack([X, np.ones((X.shape[0], 1))], format="csr")
        X.sort_indices()
    return X


def load_case(case: str, split: str, news_features: int = 61188, bias: bool = True):
    """One split of a case as the notebook describes it: ``(X, y, K, documents or None)``
    (MNIST pixels / 255, Bibtex binary, 20 Newsgroups bodies with raw counts, the
    sensitivity row whole posts with unit-L2 rows; a constant feature 1 with ``bias``)."""
    if case not in CASES:
        raise ValueError(f"case: no such data set {case!r}; choose from {sorted(CASES)}")
    if case in ("20news", "20news-unit"):
        from scalable_softmax.data.newsgroups import ove_newsgroups

        nd = ove_newsgroups(split, variant="body-counts" if case == "20news" else
                            "headers-unit-l2", vocabulary_size=news_features, bias=bias)
        return nd.X, nd.y, nd.K, nd.documents
    from scalable_softmax.data import load_dataset

    ds = load_dataset(case, split, max_features=None, max_points=None, normalize=False)
    X = ds.X / 255.0 if case == "mnist" else ds.X
    return _with_bias(X, bias), np.asarray(ds.y, dtype=np.int64), ds.K, None


def load_cases(datasets, news_features: int = 61188, bias: bool = True,
               report: bool = True) -> dict:
    """``{case: dict(X, y, Xt, yt, K)}`` for every case of ``datasets`` (test splits use
    the training split's features and class map); with ``report`` one line per case
    compares its sizes with the paper's."""
    unknown = sorted(set(datasets) - set(CASES))
    if unknown:
        raise ValueError(f"datasets: no such data set {unknown}; choose from {sorted(CASES)}")
    data = {}
    for case in datasets:
        X, y, K, docs = load_case(case, "train", news_features, bias)
        Xt, yt, _, docs_t = load_case(case, "test", news_features, bias)
        data[case] = dict(X=X, y=y, Xt=Xt, yt=yt, K=K)
        if not report:
            continue
        pn, pt, pd_, pk = PAPER_SHAPE[CASES[case][0]]
        print(f"{case}: train {X.shape[0]} (paper {pn}), test {Xt.shape[0]} (paper {pt}), "
              f"D = {X.shape[1] - bias}{' + 1 bias' if bias else ''} (paper {pd_}), K = {K} "
              f"(paper {pk}); features: {CASES[case][2]}")
        if docs is not None:
            print(f"    posts {docs['posts']} / {docs_t['posts']}, with no kept word "
                  f"{docs['dropped_empty']} / {docs_t['dropped_empty']}, kept "
                  f"{docs['kept']} / {docs_t['kept']}; paper {pn} / {pt} "
                  f"({docs['kept'] - pn:+d} / {docs_t['kept'] - pt:+d})")
    return data


# --------------------------------------------------------------------------- runs
def _l1_rel(ref, W) -> float:
    """``||ref - W||_1 / ||ref||_1``."""
    return np.abs(ref - W).sum() / np.abs(ref).sum()


def exact_fit(d: dict, case: str, method: str, ws, path_rows: list, s: Settings):
    """One full-batch L-BFGS fit (``method`` in :data:`EXACT`) from ``W = 0`` to
    ``s.gtol``; with SOFT's weights ``ws`` every ``s.path_every`` iterations appends the
    norm to SOFT and the test metrics to ``path_rows``. Returns ``(W, trace, info)``:
    the weights, the objective after every iteration and the convergence record."""
    import numba

    from scalable_softmax.evaluate import evaluate
    from scalable_softmax.methods import get_trainer_class

    def on_path(it, W):   # BOUCHARD and OVE: how far from SOFT, how good, on the way
        if it % s.path_every == 0:
            ev = evaluate(d["Xt"], d["yt"], W)
            path_rows.append(dict(dataset=case, method=method, iteration=it,
                                  norm=_l1_rel(ws, W), error=ev.error, nlpd=ev.log_loss))

    tr = get_trainer_class(EXACT[method])(
        d["X"], d["y"], d["K"], mu=s.lam, iters_per_epoch=None, maxiter=s.lbfgs_maxiter,
        gtol=s.gtol, memory=s.lbfgs_memory[case], solver="lbfgs", trace=True,
        threads=numba.get_num_threads() if s.lbfgs_parallel else 1,
        callback=None if ws is None else on_path)
    tr.init_params()
    tr.warmup()
    ex = tr.run_epoch().extra
    trace = pd.DataFrame(tr.trace, columns=["iteration", "objective"])
    return tr.W.copy(), trace, dict(
        iterations=int(ex["nit"]), evaluations=int(ex["nfev"]), grad_max=float(ex["grad_inf"]),
        converged=bool(ex["converged"]), message=ex["message"], objective=float(ex["fun"]))


def ove_sgd_run(d: dict, case: str, W_ove, s: Settings):
    """OVE-SGD epoch by epoch (the seeding of ``fit``); at about ``s.sgd_checkpoints``
    geometric epochs the exact OVE bound, softmax objective and distance to OVE's
    optimum ``W_ove`` on the training set. Returns ``(W, checkpoints, info)``."""
    from scalable_softmax.methods import get_trainer_class
    from scalable_softmax.methods.full import full_objective

    cfg = s.sgd_settings[case]
    N = d["X"].shape[0]
    tr = get_trainer_class("ove")(d["X"], d["y"], d["K"], mu=s.lam, batch_size=s.sgd_batch,
                                  n_sampled=s.sgd_classes)
    tr.init_params()
    tr.warmup()
    rng = np.random.default_rng(s.seed)
    marks = set(np.unique(np.geomspace(1, cfg["epochs"], s.sgd_checkpoints).round()
                          .astype(int)))
    rows, steps = [], 0
    for e in range(1, cfg["epochs"] + 1):
        rep = tr.run_epoch(rng.permutation(N), cfg["lr"] * cfg["lr_decay"] ** (e - 1),
                           int(rng.integers(0, 2 ** 63 - 1)))
        steps += rep.steps
        if rep.diverged_at >= 0:
            break
        if e in marks:
            W = tr.weights()
            rows.append(dict(epoch=e, steps=steps,
                             ove=full_objective(d["X"], d["y"], W, mu=s.lam, kind="ove")[0],
                             softmax=full_objective(d["X"], d["y"], W, mu=s.lam)[0],
                             dist_to_ove=_l1_rel(W_ove, W)))
    W = np.asarray(tr.weights(), dtype=np.float64)
    _, g, _ = full_objective(d["X"], d["y"], W, mu=s.lam, kind="ove")
    return W, pd.DataFrame(rows), dict(
        iterations=steps, evaluations=0, grad_max=float(np.max(np.abs(g))), converged=False,
        message=f"stochastic: {cfg['epochs']} epochs, {steps} steps",
        objective=np.nan, diverged=rep.diverged_at >= 0)


@dataclasses.dataclass
class CaseResult:
    """The four runs of one data set: per-run rows, weights, L-BFGS traces, OVE-SGD's
    checkpoints, BOUCHARD's and OVE's path rows and the lines printed for it."""

    rows: list
    weights: dict
    traces: dict
    sgd_path: pd.DataFrame
    path_rows: list
    lines: list


def run_case(case: str, d: dict, s: Settings, threads: int | None = None) -> CaseResult:
    """The four runs of one data set, in order (SOFT first: BOUCHARD's and OVE's paths
    measure the distance to it; OVE before OVE-SGD); in a worker process with
    ``threads`` numba threads (None: unchanged)."""
    from scalable_softmax.evaluate import evaluate
    from scalable_softmax.methods.full import full_objective
    from scalable_softmax.repro.machinery.runs import worker_setup

    if threads is not None:
        worker_setup(threads)
    rows, W_of, trace_of, path, lines, path_rows = [], {}, {}, None, [], []
    for meth in METHODS:
        t0 = time.perf_counter()
        if meth == "OVE-SGD":
            W, path, info = ove_sgd_run(d, case, W_of["OVE"], s)
        else:
            W, trace_of[meth], info = exact_fit(d, case, meth, W_of.get("SOFT"), path_rows, s)
        secs = time.perf_counter() - t0
        W_of[meth] = W
        ev = evaluate(d["Xt"], d["yt"], W)
        rows.append(dict(dataset=case, method=meth, seconds=secs,
                         train_softmax=full_objective(d["X"], d["y"], W, mu=s.lam)[0],
                         train_ove=full_objective(d["X"], d["y"], W, mu=s.lam, kind="ove")[0],
                         test_error=ev.error, test_nlpd=ev.log_loss, **info))
        lines.append(f"{case:11s} {meth:8s} {secs:6.1f} s  iterations/steps "
                     f"{info['iterations']:7d}  max|grad| {info['grad_max']:.1e}  error "
                     f"{ev.error:.4f}  nlpd {ev.log_loss:.4f}  {info['message']}")
    return CaseResult(rows, W_of, trace_of, path, path_rows, lines)


def _data_digest(d: dict) -> str:
    """sha256 of a case's arrays (training and test features, labels, K): the cache
    key's stand-in for the data files and their preprocessing."""
    h = hashlib.sha256()
    for name in ("X", "Xt"):
        X = sp.csr_matrix(d[name])
        for a in (np.asarray(X.shape), X.indptr, X.indices, X.data):
            h.update(np.ascontiguousarray(a).tobytes())
    for name in ("y", "yt"):
        h.update(np.ascontiguousarray(d[name], dtype=np.int64).tobytes())
    h.update(str(int(d["K"])).encode())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class OveCase:
    """One work item of notebook 10, a task of
    :func:`scalable_softmax.repro.machinery.runs.run_all`: the four runs of data set
    ``case`` on ``data`` (``dict(X, y, Xt, yt, K)``)."""

    case: str
    settings: Settings
    data: dict = dataclasses.field(repr=False, compare=False)

    def key_inputs(self) -> dict:
        """What the result depends on besides the library's code: this module's source,
        the case, its settings and the content of its data."""
        s = dataclasses.asdict(self.settings)
        s["lbfgs_memory"] = s["lbfgs_memory"].get(self.case)
        s["sgd_settings"] = s["sgd_settings"].get(self.case)
        return {"task": "ove-classification case", "case": self.case, "settings": s,
                "module": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
                "data": _data_digest(self.data)}

    def compute(self) -> CaseResult:
        return run_case(self.case, self.data, self.settings)


#: relative cost of a case (20 Newsgroups' 10^6 OVE-SGD steps first)
_COST = {"20news": 3, "mnist": 2}


def run_cases(data: dict, s: Settings, workers: int = 1, cache_dir=None):
    """Run every case of ``data`` (``{case: dict(X, y, Xt, yt, K)}``) with
    :func:`scalable_softmax.repro.machinery.runs.run_all` (its cache, ``cache_dir`` as there):
    ``workers`` at a time, each in its own process with one numba thread (with one
    worker: in this process), the costliest first; prints each case's lines. Returns
    ``(runs, weights, traces, sgd_paths, path_rows)`` assembled in the order of
    ``data``: ``runs`` one row per run with ``norm`` (to SOFT) and ``dist_to_ove``;
    ``weights`` and ``traces`` keyed by ``(case, method)``."""
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"workers must be an integer >= 1; got {workers!r}")
    from scalable_softmax.repro.machinery.runs import run_all

    datasets = list(data)
    order = sorted(datasets, key=lambda c: -_COST.get(c, 1))
    results = run_all([OveCase(c, s, data[c]) for c in order], workers=workers,
                      cache_dir=cache_dir, desc="data sets")
    done = dict(zip(order, results))
    runs, weights, traces, sgd_paths, path_rows = [], {}, {}, {}, []
    for case in datasets:
        r = done[case]
        print("\n".join(r.lines), flush=True)
        runs += r.rows
        weights.update({(case, m): W for m, W in r.weights.items()})
        traces.update({(case, m): t for m, t in r.traces.items()})
        sgd_paths[case] = r.sgd_path
        path_rows += r.path_rows
    runs = pd.DataFrame(runs)
    runs["diverged"] = runs.get("diverged", False).fillna(False).astype(bool)
    for case in datasets:
        ws, wo = weights[case, "SOFT"], weights[case, "OVE"]
        for meth in METHODS:
            sel = (runs.dataset == case) & (runs.method == meth)
            runs.loc[sel, "norm"] = np.abs(ws - weights[case, meth]).sum() / np.abs(ws).sum()
            runs.loc[sel, "dist_to_ove"] = (np.abs(wo - weights[case, meth]).sum()
                                            / np.abs(wo).sum())
    return runs, weights, traces, sgd_paths, path_rows


# --------------------------------------------------------------------------- tables
def gtol_status(r) -> str:
    """The ``reached_gtol`` column: ``yes``, ``no: <why>`` or n/a for OVE-SGD."""
    if r.method == "OVE-SGD":
        return "n/a: stochastic (see dist_to_ove)"
    return "yes" if r.converged else f"no: {r.message}"


def table2(runs: pd.DataFrame, data: dict) -> pd.DataFrame:
    """Table 2, ours beside the paper's, with the convergence columns (``iterations``
    are reported, not judged: they differ between machines)."""
    rows = []
    for _, r in runs.iterrows():
        pn, pe, pl = PAPER[CASES[r.dataset][0]][r.method]
        N = data[r.dataset]["X"].shape[0]
        obj = r.train_ove if r.method == "OVE-SGD" else r.objective
        rows.append(dict(
            dataset=r.dataset, features=CASES[r.dataset][2], method=r.method,
            norm=np.nan if r.method == "SOFT" else r.norm, paper_norm=pn,
            error=r.test_error, paper_error=pe, nlpd=r.test_nlpd, paper_nlpd=pl,
            dist_to_ove=r.dist_to_ove if r.method == "OVE-SGD" else np.nan,
            iterations=r.iterations, grad_max=r.grad_max, reached_gtol=gtol_status(r),
            objective=obj, summed_objective=-N * obj, seconds=r.seconds))
    return pd.DataFrame(rows)


def table2_preamble(datasets, s: Settings, news_features: int, bias: bool) -> str:
    """The preamble of the Table 2 file: how every column was made."""
    return (
        f"Written by `notebooks/10-ove-classification.ipynb`. lambda = {s.lam} "
        "(ridge 0.5 lambda ||W||^2 on the summed objective), all weights from W = 0. "
        "`norm` = ||w_soft - w||_1 / ||w_soft||_1 over all parameters (biases included); "
        "`dist_to_ove` = ||w_ove - w||_1 / ||w_ove||_1; `error`, `nlpd` on the test split, "
        "nlpd under the softmax with that method's weights. `paper_*` = Titsias (2016) "
        f"Table 2. SOFT, BOUCHARD, OVE: full-batch L-BFGS (memory {s.lbfgs_memory}) to "
        f"max|grad| <= {s.gtol} of the per-datapoint objective (safety cap {s.lbfgs_maxiter} "
        "iterations); `grad_max` = final max|grad|; `objective` = the minimised objective "
        "per datapoint (OVE-SGD: the OVE bound), `summed_objective` = -N x objective "
        f"(the paper's Figure 3 scale). OVE-SGD: minibatch {s.sgd_batch}, {s.sgd_classes} "
        f"sampled class, {s.sgd_settings}; its `grad_max` is of the OVE bound. Features: "
        + "; ".join(f"{c}: {CASES[c][2]}" for c in datasets)
        + (", constant bias feature" if bias else "")
        + (f"; 20news: the {news_features} most frequent training words; 20news-unit is "
           "a sensitivity row (the earlier features), compared with the same paper row."
           if any(c.startswith("20news") for c in datasets) else "."))


def sgd_table(sgd_paths: dict, data: dict) -> pd.DataFrame:
    """OVE-SGD's checkpoints of every case, with ``summed_ove = -N x ove``."""
    t = pd.concat([p.assign(dataset=c) for c, p in sgd_paths.items()], ignore_index=True)
    t = t[["dataset", "epoch", "steps", "ove", "softmax", "dist_to_ove"]]
    t["summed_ove"] = [-data[c]["X"].shape[0] * v for c, v in zip(t.dataset, t.ove)]
    return t


def sgd_preamble(s: Settings) -> str:
    """The preamble of the OVE-SGD checkpoints file."""
    return ("Exact OVE bound `ove` and softmax objective `softmax` (per datapoint, "
            "ridge included) on the whole training set at OVE-SGD's checkpoints, "
            "`summed_ove` = -N x ove, and `dist_to_ove` = ||w_ove - w||_1 / "
            f"||w_ove||_1. Minibatch {s.sgd_batch}, {s.sgd_classes} sampled class; "
            f"settings {s.sgd_settings}.")


def path_table(path_rows: list, runs: pd.DataFrame) -> pd.DataFrame:
    """BOUCHARD's and OVE's path points (every ``path_every`` iterations) and their
    optima, one row per (data set, method, iteration)."""
    t = pd.DataFrame(path_rows)
    for (case, meth), r in runs.set_index(["dataset", "method"]).iterrows():   # the optima
        if meth in ("BOUCHARD", "OVE"):
            t = pd.concat([t, pd.DataFrame([dict(
                dataset=case, method=meth, iteration=r.iterations, norm=r.norm,
                error=r.test_error, nlpd=r.test_nlpd)])], ignore_index=True)
    t = t.drop_duplicates(["dataset", "method", "iteration"], keep="last")
    return t.sort_values(["dataset", "method", "iteration"], kind="stable")


def sgd_slopes(sgd_paths: dict, last: int = 4) -> dict:
    """Log-log slope of OVE-SGD's distance to OVE against steps over the ``last``
    checkpoints, per case (cases with fewer than two checkpoints left out)."""
    slopes = {}
    for case, p in sgd_paths.items():
        tail = p.tail(last)
        if len(tail) >= 2:
            slopes[case] = np.polyfit(np.log(tail.steps), np.log(tail.dist_to_ove), 1)[0]
    return slopes


def sgd_extrapolation(sgd_paths: dict, runs: pd.DataFrame) -> pd.DataFrame:
    """That power law carried to the paper's number of steps (the end of its Figure 3
    x axis) with each run's time per step."""
    paper_steps = {case: PAPER_FIG3[CASES[case][0]][0][1] for case in sgd_paths
                   if case in PAPER_FIG3}
    rows = []
    for case, slope in sgd_slopes(sgd_paths).items():
        p = sgd_paths[case]
        secs = runs[(runs.dataset == case) & (runs.method == "OVE-SGD")].seconds.iloc[0]
        target = paper_steps.get(case, np.nan)
        rows.append(dict(dataset=case, steps=int(p.steps.iloc[-1]),
                         dist_to_ove=p.dist_to_ove.iloc[-1], slope_last4=slope,
                         paper_steps=target,
                         dist_at_paper_steps=p.dist_to_ove.iloc[-1]
                         * (target / p.steps.iloc[-1]) ** slope,
                         seconds_for_paper_steps=secs / p.steps.iloc[-1] * target))
    return pd.DataFrame(rows)


def bouchard_near_paper(paths_t: pd.DataFrame, datasets) -> pd.DataFrame:
    """Per case, BOUCHARD's path point nearest the paper's BOUCHARD norm."""
    near = []
    for case in datasets:
        p = paths_t[(paths_t.dataset == case) & (paths_t.method == "BOUCHARD")]
        pn, pe, pl = PAPER[CASES[case][0]]["BOUCHARD"]
        k = (p.norm - pn).abs().idxmin()
        near.append(dict(dataset=case, paper_norm=pn, paper_error=pe, paper_nlpd=pl,
                         iteration=p.iteration[k], norm=p.norm[k], error=p.error[k],
                         nlpd=p.nlpd[k]))
    return pd.DataFrame(near)


def check_invariants(runs, weights, traces, sgd_paths, datasets) -> None:
    """What must hold whatever the parameters (``AssertionError`` otherwise): every run
    finished with finite weights and metrics in range; SOFT's norm is 0 and the others'
    positive; the OVE bound lies above the softmax objective at every run's weights
    (T-4), Bouchard's at BOUCHARD's; every L-BFGS trace starts at 0, ends at the
    reported iteration and objective and is non-increasing (up to the line search's
    rounding allowance); when SOFT reached ``gtol`` no run has a lower softmax
    objective; when OVE did, OVE-SGD's bound is not below OVE's optimum."""
    assert len(runs) == len(METHODS) * len(datasets)
    assert not runs.diverged.any(), runs[runs.diverged]
    for W in weights.values():
        assert np.all(np.isfinite(W))
    assert runs.test_error.between(0, 1).all() and np.isfinite(runs.test_nlpd).all()
    assert (runs.test_nlpd > 0).all()
    assert (runs.norm[runs.method == "SOFT"] == 0).all()
    assert (runs.norm[runs.method != "SOFT"] > 0).all()
    assert (runs.train_ove >= runs.train_softmax).all()          # T-4 at every W
    for (case, meth), tr in traces.items():
        v = tr.objective.to_numpy()
        assert tr.iteration.iloc[0] == 0 and tr.iteration.iloc[-1] == \
            runs[(runs.dataset == case) & (runs.method == meth)].iterations.iloc[0]
        assert np.all(np.diff(v) <= 1e-10 * np.abs(v[:-1])), (case, meth)
    for case in datasets:
        r = runs[runs.dataset == case].set_index("method")
        assert r.loc["BOUCHARD", "objective"] >= r.loc["BOUCHARD", "train_softmax"]
        np.testing.assert_allclose(r.loc["OVE", "objective"], r.loc["OVE", "train_ove"],
                                   rtol=1e-10)
        np.testing.assert_allclose(r.loc["SOFT", "objective"], r.loc["SOFT", "train_softmax"],
                                   rtol=1e-10)
        np.testing.assert_allclose(traces[case, "SOFT"].objective.iloc[-1],
                                   r.loc["SOFT", "objective"], rtol=1e-12)
        if r.loc["SOFT", "converged"]:
            assert (r.train_softmax >= r.loc["SOFT", "train_softmax"] - 1e-9).all()
        if r.loc["OVE", "converged"]:
            assert r.loc["OVE-SGD", "train_ove"] >= r.loc["OVE", "train_ove"] - 1e-9
            assert (sgd_paths[case].ove >= r.loc["OVE", "train_ove"] - 1e-9).all()


# --------------------------------------------------------------------------- figures
def plot_table2(table: pd.DataFrame, datasets, lam: float):
    """Table 2 as bars: one row per data set, one column per metric; per method the
    paper's value (grey) beside ours (in the method's colour); every axis from zero."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from scalable_softmax.repro.machinery import style

    metrics = [("norm", "norm to SOFT"), ("error", "test error"), ("nlpd", "test nlpd")]
    fig, axes = plt.subplots(len(datasets), len(metrics), squeeze=False,
                             figsize=(style.FIG_WIDTH, 1.75 * len(datasets) + 0.7))
    xs = np.arange(len(METHODS))
    for i, case in enumerate(datasets):
        part = table[table.dataset == case].set_index("method").loc[METHODS]
        for j, (m, lab) in enumerate(metrics):
            ax = axes[i, j]
            ax.bar(xs - 0.2, part[f"paper_{m}"], 0.4, color="0.8", edgecolor="0.5", lw=0.5,
                   label="paper (Titsias 2016)")
            ax.bar(xs + 0.2, part[m], 0.4, color=[style.color(STYLE[t]) for t in METHODS],
                   label="ours")
            ax.set_xticks(xs, [t.replace("BOUCHARD", "BOUCH.") for t in METHODS], fontsize=7)
            style.bars_from_zero(ax)
            ax.set_ylim(0, 1.12 * np.nanmax(np.r_[part[m], part[f"paper_{m}"], 0.01]))
            ax.grid(False, axis="x")
            if i == 0:
                ax.set_title(lab)
            if j == 0:
                ax.set_ylabel(f"{CASES[case][1]}\n{CASES[case][2]}", fontsize=8)
    style.legend_below(fig, [Patch(facecolor="0.8", edgecolor="0.5",
                                   label="paper (Titsias 2016)")]
                       + [Patch(color=style.color(STYLE[t]), label=f"ours: {t}")
                          for t in METHODS], ncol=5)
    fig.suptitle(f"One-vs-Each Table 2 (lambda = {lam}): paper (grey) beside ours")
    return fig


def fig3_curves(case: str, data: dict, traces: dict, sgd_paths: dict) -> dict:
    """Figure 3's curves of one case on the paper's sign and scale: ``{method:
    (iterations, -N x objective)}`` (OVE-SGD: the exact OVE bound at its checkpoints)."""
    N = data[case]["X"].shape[0]
    curves = {m: (traces[case, m].iteration.to_numpy(),
                  -N * traces[case, m].objective.to_numpy()) for m in EXACT}
    if case in sgd_paths:
        p = sgd_paths[case]
        curves["OVE-SGD"] = (p.steps.to_numpy(), -N * p.ove.to_numpy())
    return curves


def plot_fig3(cases, data: dict, traces: dict, sgd_paths: dict):
    """Figure 3: the bounds (and the exact softmax cost) against iterations, summed over
    the training set. Both rows put ``iteration + 1`` on a log axis, so the exact
    methods' few hundred L-BFGS iterations and OVE-SGD's 10^5-10^6 steps are both
    readable. Top row: our runs whole, with the paper's y range shaded. Bottom row: the
    paper's y range and the end of its x axis; the exact methods' final values are held
    (dotted, in the legend) to that end. None when ``cases`` is empty."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from scalable_softmax.repro.machinery import style

    if not cases:
        return None
    fig, axes = plt.subplots(2, len(cases), figsize=(style.FIG_WIDTH, 5.6), squeeze=False)
    for j, case in enumerate(cases):
        (_, px1), (py0, py1) = PAPER_FIG3[case]
        curves = fig3_curves(case, data, traces, sgd_paths)
        for row in (0, 1):
            ax = axes[row, j]
            for m in ["SOFT", "OVE", "OVE-SGD", "BOUCHARD"]:
                if m not in curves:
                    continue
                x, v = curves[m]
                ax.plot(x + 1, v, color=style.color(STYLE[m]), lw=1.4,
                        ls=style.METHODS[STYLE[m]].linestyle,
                        marker="o" if m == "OVE-SGD" else None, ms=3, label=m)
                if row == 1 and m != "OVE-SGD":   # held final value
                    ax.plot([x[-1] + 1, px1 + 1], [v[-1], v[-1]], color=style.color(STYLE[m]),
                            lw=1.0, ls=":")
            ax.set_xscale("log")
            ax.set_xlabel("iteration + 1 (log)")
            if row == 0:
                ax.axhspan(py0, py1, color="0.85", zorder=0, label="paper's y range")
                finals = np.array([c[1][-1] for c in curves.values()])
                lo, hi = min(py0, finals.min()), max(py1, finals.max())
                ax.set_ylim(lo - 0.15 * (hi - lo), hi + 0.1 * (hi - lo))
                ax.set_title(f"{CASES[case][1]} (ours)")
            else:
                ax.set_xlim(1, px1 + 1)
                ax.set_ylim(py0, py1)
                ax.set_title(f"{CASES[case][1]}, paper's y range")
            if j == 0:
                ax.set_ylabel("bound / cost, summed")
    handles, labels = [], []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    handles.append(Line2D([], [], color="0.3", lw=1.0, ls=":"))
    labels.append("L-BFGS final value, held")
    style.legend_below(fig, handles, labels, ncol=3)
    fig.suptitle("One-vs-Each Figure 3: lower bounds (and the exact softmax cost) against "
                 "iterations")
    return fig


def plot_sgd(sgd_paths: dict, runs: pd.DataFrame, sgd_batch: int):
    """OVE-SGD's distance to OVE's optimum (left) and the gap of its exact OVE bound to
    OVE's optimum (right) against SGD steps, log-log."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    fig, axes = plt.subplots(1, 2, figsize=(style.FIG_WIDTH, 3.0))
    case_color = dict(zip(CASES, style.SERIES_COLORS[2:]))
    for case, p in sgd_paths.items():
        opt = runs[(runs.dataset == case) & (runs.method == "OVE")].objective.iloc[0]
        kw = dict(marker="o", ms=3, color=case_color[case], label=CASES[case][1])
        axes[0].loglog(p.steps, p.dist_to_ove, **kw)
        axes[1].loglog(p.steps, np.maximum(p.ove - opt, 1e-12), **kw)
    axes[0].set_ylabel("distance to OVE's optimum")
    axes[1].set_ylabel("OVE bound - OVE's optimum\n(per datapoint)")
    for ax in axes:
        ax.set_xlabel(f"SGD steps (minibatch {sgd_batch})")
        ax.grid(True, which="both", alpha=0.3)
        style.log_ticks(ax, "x")
        style.log_ticks(ax, "y")
    style.legend_below(fig, ncol=len(sgd_paths))
    fig.suptitle("OVE-SGD approaching the exact OVE optimum")
    return fig


def plot_paths(paths_t: pd.DataFrame, runs: pd.DataFrame, datasets):
    """Norm to SOFT against test nlpd along BOUCHARD's and OVE's L-BFGS paths, with the
    optimum (large dot), the paper's Table 2 point (star) and SOFT's nlpd (dotted)."""
    import matplotlib.pyplot as plt

    from scalable_softmax.repro.machinery import style

    ncols = min(2, len(datasets))              # a grid, readable at README width
    nrows = -(-len(datasets) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(style.FIG_WIDTH, 2.7 * nrows + 0.6),
                             squeeze=False)
    for ax in axes.flat[len(datasets):]:
        ax.set_visible(False)
    for j, case in enumerate(datasets):
        ax = axes.flat[j]
        for meth in ("BOUCHARD", "OVE"):
            col = style.color(STYLE[meth])
            p = paths_t[(paths_t.dataset == case) & (paths_t.method == meth)]
            ax.plot(p.norm, p.nlpd, color=col, lw=1.2, marker=".", ms=3, label=f"{meth}, path")
            ax.plot(p.norm.iloc[-1:], p.nlpd.iloc[-1:], "o", color=col, ms=7,
                    label=f"{meth}, optimum")
            pn, _, pl = PAPER[CASES[case][0]][meth]
            ax.plot([pn], [pl], "*", color=col, ms=13, mec="k", mew=0.6,
                    label=f"{meth}, paper")
        lo = paths_t[paths_t.dataset == case].nlpd.min()
        soft = runs[(runs.dataset == case) & (runs.method == "SOFT")].test_nlpd.iloc[0]
        ax.set_ylim(0.9 * min(lo, soft), 1.6 * max(lo, soft))
        ax.set_xlim(0, 1.02)
        ax.axhline(soft, color="k", lw=0.8, ls=":", label="SOFT's nlpd")
        ax.set_title(f"{CASES[case][1]}: {CASES[case][2]}")
        ax.set_xlabel("norm to SOFT")
        if j % ncols == 0:
            ax.set_ylabel("test nlpd")
    style.legend_below(fig, ncol=4)
    return fig
