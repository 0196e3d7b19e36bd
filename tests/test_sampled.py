"""The biased baselines OVE, NCE and IS (scalable_softmax.methods.sampled).

Kernels against the NumPy reference step (to rounding), the reference against
scalable_softmax.objectives, the class draws, determinism, divergence reporting,
option validation, and the converged-point comparison with the exact optimum
(docs/math.md section 7: the three are biased).
"""
from __future__ import annotations

import itertools
import math

import numba
import numpy as np
import pytest
import scipy.optimize
import scipy.sparse as sp
from scipy.special import expit, logsumexp

from scalable_softmax import objectives as ob
from scalable_softmax.fit import fit
from scalable_softmax.methods import get_trainer_class
from scalable_softmax.methods.full import SoftmaxSGDTrainer, exact_solution, full_objective
from scalable_softmax.methods.sampled import (
    KIND_IS,
    KIND_OVE,
    ISTrainer,
    NCETrainer,
    OVETrainer,
    epoch_draws,
    reference_step,
    touch_weights_shared,
)

TRAINERS = {"ove": OVETrainer, "nce": NCETrainer, "is": ISTrainer}


def _problem(N=60, D=12, K=7, density=0.5, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=density, random_state=seed, format="csr",
                  data_rvs=lambda n: rng.normal(size=n))
    X = sp.csr_matrix(X + sp.eye(N, D, format="csr"))  # no empty rows
    y = rng.integers(0, K, N)
    return X, y, rng


def _variants():
    for name, shared, opts in [
        ("ove", False, {}), ("ove", True, {}),
        ("nce", False, {}), ("nce", True, {}),
        ("is", False, {}), ("is", True, {}),
        ("is", False, {"weighted": False}), ("is", True, {"weighted": False}),
    ]:
        yield pytest.param(name, shared, opts, id=f"{name}-{'shared' if shared else 'own'}"
                           + ("-unweighted" if opts else ""))


def _one_step(name, shared, opts, mu, lr=0.7, n=10, m=3, seed=5, **kernel_opts):
    X, y, rng = _problem()
    K = 7
    tr = TRAINERS[name](X, y, K, mu=mu, batch_size=n, n_sampled=m, shared_negatives=shared,
                        **opts, **kernel_opts)
    tr.init_params()
    W0 = rng.normal(size=(K, X.shape[1]))
    tr.W[:] = W0
    rows = rng.permutation(X.shape[0])[:n]
    rep = tr.run_epoch(rows, lr, seed)
    cls, ncls = epoch_draws(y, rows, K, n, m, tr.shared, tr.drop_hits, seed)
    W_ref = reference_step(X, y, W0, rows, cls, ncls, lr, tr.kind, tr.weight, tr.c_nce,
                           weighted=opts.get("weighted", True), mu=mu, beta=tr.beta)
    return tr, rep, W_ref, W0


@pytest.mark.parametrize("name,shared,opts", list(_variants()))
@pytest.mark.parametrize("mu", [0.0, 2.5])
@pytest.mark.parametrize("kernel", [dict(fused=False), dict(fused=True, prefetch=0),
                                    dict(fused=True),
                                    dict(fused=True, threads=numba.get_num_threads())],
                         ids=["plain", "fused", "fused-prefetch", "parallel"])
def test_kernel_step_matches_numpy_reference(name, shared, opts, mu, kernel):
    tr, rep, W_ref, W0 = _one_step(name, shared, opts, mu, **kernel)
    assert rep.steps == 1 and rep.diverged_at == -1
    assert not np.allclose(W_ref, W0)  # the step did something
    np.testing.assert_allclose(tr.weights(), W_ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name,shared,opts", list(_variants()))
def test_fused_parallel_plain_kernels_bit_identical(name, shared, opts):
    X, y, rng = _problem(N=97)
    out = []
    kernels = (dict(fused=False), dict(fused=True, prefetch=0), dict(fused=True, prefetch=3),
               dict(fused=True, threads=numba.get_num_threads()))
    for kern in kernels:
        tr = TRAINERS[name](X, y, 7, mu=1.5, batch_size=10, n_sampled=3,
                            shared_negatives=shared, **opts, **kern)
        tr.init_params()
        for e in range(3):
            tr.run_epoch(np.random.default_rng(e).permutation(97), 0.5, 11 + e)
        out.append(tr.weights().copy())
    assert all(np.array_equal(out[0], o) for o in out[1:])


def test_lazy_ridge_fold_paths_match_reference():
    # lr * ridge rate >= 1: the shrink factor is <= 0 and the row is folded densely
    X, y, rng = _problem()
    for lr in (3.0, 400.0):
        tr = OVETrainer(X, y, 7, mu=50.0, batch_size=10, n_sampled=3)
        tr.init_params()
        W0 = rng.normal(size=tr.W.shape)
        tr.W[:] = W0
        rows = np.arange(10)
        tr.run_epoch(rows, lr, 3)
        cls, ncls = epoch_draws(y, rows, 7, 10, 3, False, False, 3)
        W_ref = reference_step(X, y, W0, rows, cls, ncls, lr, KIND_OVE, tr.weight, tr.c_nce,
                               mu=50.0, beta=tr.beta)
        np.testing.assert_allclose(tr.weights(), W_ref, rtol=1e-11, atol=1e-12)


# --- the reference against scalable_softmax.objectives ------------------------------

@pytest.mark.parametrize("name,shared,opts", list(_variants()))
def test_reference_gradient_matches_objectives(name, shared, opts):
    X, y, rng = _problem()
    K, m = 7, 3
    tr = TRAINERS[name](X, y, K, batch_size=1, n_sampled=m, shared_negatives=shared, **opts)
    weighted = opts.get("weighted", True)
    W = rng.normal(size=(K, X.shape[1]))
    order = rng.permutation(X.shape[0])
    cls, ncls = epoch_draws(y, order, K, 1, m, tr.shared, tr.drop_hits, 17)
    hits = 0
    for t, i in enumerate(order):
        G = W - reference_step(X, y, W, [i], cls[t:t + 1], ncls[t:t + 1], 1.0, tr.kind,
                               tr.weight, tr.c_nce, weighted=weighted)
        x = X[[i]].toarray().ravel()
        ks = cls[t, 1:ncls[t]]
        yi = int(y[i])
        if tr.kind == KIND_OVE:
            G_ob = ob.ove_grad(x, yi, W, ks, tr.weight)
        elif tr.kind == KIND_IS:
            G_ob = ob.is_grad(x, yi, W, ks, tr.weight, weighted=weighted)
        else:
            own = ks[ks != yi]
            # objectives' c is log(len(ks)/K); keep c = log(m/K) with the hits removed
            G_ob = ob.nce_grad(x, yi, W, own, K * len(own) / m)
            for _ in range(len(ks) - len(own)):  # an accidental hit is a noise sample
                G_ob[yi] += expit(W[yi] @ x - tr.c_nce) * x
                hits += 1
        np.testing.assert_allclose(G, G_ob, rtol=1e-12, atol=1e-13)
    if name == "nce" and shared:
        assert hits > 0  # the accidental-hit path was exercised


@pytest.mark.parametrize("shared", [False, True])
def test_ridge_weights_make_the_sampled_ridge_unbiased(shared):
    X, y, rng = _problem(N=80, K=7)
    K, m = 7, 2
    tr = OVETrainer(X, y, K, mu=1.0, n_sampled=m, shared_negatives=shared)
    beta_expected = touch_weights_shared(y, K, m) if shared else ob.touch_weights(y, K, m)
    np.testing.assert_allclose(tr.beta, beta_expected, rtol=1e-15)
    # exact touch probabilities: P_j beta_j = 1
    nj = np.bincount(y, minlength=K)
    q = m / K if shared else m / (K - 1)
    P = (nj + (80 - nj) * q) / 80
    np.testing.assert_allclose(P * tr.beta, 1.0, rtol=1e-14)
    # and the draws touch classes at those rates (Monte Carlo, 6 sigma)
    counts = np.zeros(K)
    E = 400
    for e in range(E):
        cls, ncls = epoch_draws(y, np.arange(80), K, 10, m, shared, shared, e)
        for t in range(80):
            counts[np.unique(cls[t, :ncls[t]])] += 1
    freq = counts / (E * 80)
    assert np.all(np.abs(freq - P) < 6 * np.sqrt(P * (1 - P) / (E * 80)) + 1e-12)


# --- class draws ----------------------------------------------------------------

def test_draws_per_datapoint_are_distinct_and_exclude_the_label():
    y = np.random.default_rng(0).integers(0, 9, 500)
    cls, ncls = epoch_draws(y, np.arange(500), 9, 100, 4, False, False, 3)
    assert np.all(ncls == 5)
    assert np.array_equal(cls[:, 0], y)
    neg = cls[:, 1:]
    assert neg.min() >= 0 and neg.max() < 9
    assert np.all(neg != y[:, None])
    assert all(len(set(r)) == 4 for r in neg)
    # uniform over the other classes: each class is drawn about 4/8 of the time
    # when it is not the label
    freq = np.array([np.mean([(k in r) for r, yy in zip(neg, y) if yy != k]) for k in range(9)])
    assert np.all(np.abs(freq - 0.5) < 0.1)


@pytest.mark.parametrize("drop_hits", [False, True])
def test_shared_draws_are_shared_by_the_batch(drop_hits):
    y = np.random.default_rng(1).integers(0, 6, 300)
    cls, ncls = epoch_draws(y, np.arange(300), 6, 50, 3, True, drop_hits, 9)
    nhits = 0
    for b in range(6):
        S = None
        for t in range(50 * b, 50 * b + 50):
            ks = cls[t, 1:ncls[t]]
            if not drop_hits:
                assert len(ks) == 3
                S = set(ks) if S is None else S
                assert set(ks) == S
                nhits += int(y[t] in ks)
            else:
                assert y[t] not in ks and len(ks) in (2, 3)
                nhits += 3 - len(ks)
    assert nhits > 0


@pytest.mark.parametrize("shared", [False, True])
def test_drawn_subsets_are_uniform(shared):
    """Every m-subset of the allowed classes is equally likely (chi-square over many
    draws): per datapoint, of the K-1 classes other than the label; shared, of all K."""
    from scipy.stats import chisquare
    K, m, N = 7, 3, 21000
    y = np.random.default_rng(2).integers(0, K, N)
    cls, ncls = epoch_draws(y, np.arange(N), K, 1, m, shared, False, 11)
    counts = {}
    for t in range(N):
        ks = tuple(sorted(cls[t, 1:ncls[t]]))
        assert len(set(ks)) == m
        key = ks if shared else (y[t], ks)
        counts[key] = counts.get(key, 0) + 1
    if shared:
        cells = list(itertools.combinations(range(K), m))
        obs = [counts.get(c, 0) for c in cells]
        assert chisquare(obs).pvalue > 1e-3
    else:
        for label in range(K):
            others = [k for k in range(K) if k != label]
            cells = list(itertools.combinations(others, m))
            obs = [counts.get((label, c), 0) for c in cells]
            assert sum(obs) == np.sum(y == label)
            assert chisquare(obs).pvalue > 1e-3


# --- determinism, divergence, validation ----------------------------------------

@pytest.mark.parametrize("name", ["ove", "nce", "is"])
def test_same_seed_bit_identical_other_seed_differs(name):
    X, y, _ = _problem(N=90)

    def run(seed0):
        tr = get_trainer_class(name)(X, y, 7, batch_size=20, n_sampled=2)
        tr.init_params()
        for e in range(3):
            tr.run_epoch(np.random.default_rng(e).permutation(90), 0.3, seed0 + e)
        return tr.weights().copy()

    a, b, c = run(0), run(0), run(100)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("name", ["ove", "nce", "is"])
def test_non_finite_step_is_reported_and_stops_the_epoch(name):
    X, y, _ = _problem(N=50)
    X = X.tolil()
    X[25, 3] = 1e200  # datapoint 25 is in the third minibatch of 10
    X = X.tocsr()
    tr = get_trainer_class(name)(X, y, 7, batch_size=10, n_sampled=2)
    tr.init_params()
    rep = tr.run_epoch(np.arange(50), 1e200, 0)
    assert rep.diverged_at == 2 and rep.steps == 3
    assert not np.all(np.isfinite(tr.weights()))
    # a finite run is reported as such
    tr.init_params()
    assert tr.run_epoch(np.arange(20), 1.0, 0).diverged_at == -1


def test_a_step_touches_only_the_batch_rows_and_features():
    X, y, rng = _problem(N=40, D=30, K=50, density=0.1)
    tr = OVETrainer(X, y, 50, batch_size=2, n_sampled=3)
    tr.init_params()
    rows = np.array([4, 9])
    tr.run_epoch(rows, 1.0, 2)
    cls, ncls = epoch_draws(y, rows, 50, 2, 3, False, False, 2)
    touched_rows = set(cls[0, :ncls[0]]) | set(cls[1, :ncls[1]])
    feats = set(X[rows].indices)
    nz_r, nz_c = np.nonzero(tr.W)
    assert set(nz_r) <= touched_rows and set(nz_c) <= feats
    assert len(set(nz_r)) >= 2


def test_options_are_validated():
    X, y, _ = _problem()
    with pytest.raises(ValueError, match="'shared_negative'"):
        OVETrainer(X, y, 7, shared_negative=True)
    with pytest.raises(ValueError, match="'weighted'"):
        OVETrainer(X, y, 7, weighted=False)  # only IS has it
    with pytest.raises(ValueError, match="True or False"):
        ISTrainer(X, y, 7, weighted="no")
    with pytest.raises(ValueError, match="'prefetch'.*integer >= 0"):
        OVETrainer(X, y, 7, prefetch=-1)
    # the sizes are fit's checks (Trainer.check_sizes)
    with pytest.raises(ValueError, match="n_sampled"):
        fit(X, y, "nce", 0.1, K=7, n_sampled=7, epochs=1, progress=False)  # K-1 others
    fit(X, y, "nce", 0.1, K=7, n_sampled=7, shared_negatives=True, epochs=1,
        progress=False)                                   # shared: from all K
    with pytest.raises(ValueError, match="n_sampled"):
        fit(X, y, "nce", 0.1, K=7, n_sampled=8, shared_negatives=True, epochs=1,
            progress=False)


# --- the converged point: biased, unlike exact softmax SGD ------------------------

def _expected_objective(W, Xd, y, K, mu, kind, m, shared, weighted=True):
    """Mean over datapoints of the loss averaged over every possible draw of classes
    (all m-subsets, as Floyd's algorithm draws them uniformly), plus the ridge:
    the function whose minimiser is the fixed point of the biased SGD."""
    N, D = Xd.shape
    W = W.reshape(K, D)
    S = Xd @ W.T
    n = np.arange(N)
    sy = S[n, y]
    if shared:
        subsets = [np.tile(np.array(c), (N, 1)) for c in itertools.combinations(range(K), m)]
        r = K / m
    else:
        others = np.array([[k for k in range(K) if k != yi] for yi in y])
        subsets = [others[:, list(c)] for c in itertools.combinations(range(K - 1), m)]
        r = (K - 1) / m
    c_nce = math.log(m / K)
    L = np.zeros(N)
    C = np.zeros((N, K))
    for ks in subsets:
        valid = (ks != y[:, None]) if (shared and kind != "nce") else np.ones(ks.shape, bool)
        sk = S[n[:, None], ks]
        if kind == "ove":
            L += r * np.sum(valid * np.logaddexp(0, sk - sy[:, None]), 1)
            g = r * valid * expit(sk - sy[:, None])
            gy = -g.sum(1)
        elif kind == "nce":
            L += np.logaddexp(0, c_nce - sy) + np.sum(np.logaddexp(0, sk - c_nce), 1)
            g = expit(sk - c_nce)
            gy = -expit(c_nce - sy)
        else:
            z = np.column_stack([sy, np.where(valid, sk + (math.log(r) if weighted else 0.0),
                                              -np.inf)])
            lse = logsumexp(z, axis=1)
            L += lse - sy
            q = np.exp(z - lse[:, None])
            gy, g = q[:, 0] - 1, q[:, 1:]
        np.add.at(C, (np.repeat(n[:, None], ks.shape[1], 1), ks), g)
        C[n, y] += gy
    F = L.mean() / len(subsets) + mu / (2 * N) * np.sum(W * W)
    G = (C / len(subsets)).T @ Xd / N + mu / N * W
    return F, G.ravel()


@pytest.fixture(scope="module")
def ridge_problem():
    rng = np.random.default_rng(0)
    N, D, K, mu = 200, 10, 5, 1.0
    X = sp.csr_matrix(rng.normal(size=(N, D)))
    S = X @ rng.normal(size=(K, D)).T
    P = np.exp(S - logsumexp(S, axis=1, keepdims=True))
    y = np.array([rng.choice(K, p=p) for p in P])
    W_star, info = exact_solution(X, y, K, mu=mu)
    assert info["converged"]
    return X, y, K, mu, W_star


def _train(trainer, N, epochs, lr0=1.0, decay=10.0):
    trainer.init_params()
    rng = np.random.default_rng(1)
    for e in range(epochs):
        rep = trainer.run_epoch(rng.permutation(N), lr0 / (1 + e / decay), 1000 + e)
        assert rep.diverged_at == -1
    return trainer.weights()


def test_softmax_sgd_converges_to_the_exact_optimum(ridge_problem):
    X, y, K, mu, W_star = ridge_problem
    W = _train(SoftmaxSGDTrainer(X, y, K, mu=mu, batch_size=20), X.shape[0], 300)
    rel = np.linalg.norm(W - W_star) / np.linalg.norm(W_star)
    gap = full_objective(X, y, W, mu)[0] - full_objective(X, y, W_star, mu)[0]
    ll_gap = ob.log_loss(X, y, W) - ob.log_loss(X, y, W_star)
    print(f"\nsoftmax-sgd: ||W - W*||/||W*|| = {rel:.2e}, objective gap = {gap:.2e}, "
          f"log-loss gap = {ll_gap:+.2e}")
    assert rel < 5e-3 and 0 <= gap < 1e-5 and abs(ll_gap) < 1e-3


@pytest.mark.parametrize("name,shared,opts", [
    ("ove", False, {}), ("nce", False, {}), ("is", False, {}),
    ("is", False, {"weighted": False}), ("ove", True, {}), ("nce", True, {}), ("is", True, {}),
], ids=["ove", "nce", "is", "is-unweighted", "ove-shared", "nce-shared", "is-shared"])
def test_biased_methods_converge_to_a_different_point(ridge_problem, name, shared, opts):
    X, y, K, mu, W_star = ridge_problem
    m = 2
    W = _train(TRAINERS[name](X, y, K, mu=mu, batch_size=20, n_sampled=m,
                              shared_negatives=shared, **opts), X.shape[0], 1500)
    # the fixed point of the biased SGD: the minimiser of the expected sampled loss
    res = scipy.optimize.minimize(
        _expected_objective, np.zeros(W.size), jac=True, method="L-BFGS-B",
        args=(X.toarray(), y, K, mu, name, m, shared, opts.get("weighted", True)),
        options=dict(gtol=1e-10, ftol=0.0, maxiter=5000))
    W_fix = res.x.reshape(W.shape)
    norm = np.linalg.norm
    rel_star = norm(W - W_star) / norm(W_star)
    rel_fix = norm(W - W_fix) / norm(W_fix)
    fix_star = norm(W_fix - W_star) / norm(W_star)
    gap = full_objective(X, y, W, mu)[0] - full_objective(X, y, W_star, mu)[0]
    ll_gap = ob.log_loss(X, y, W) - ob.log_loss(X, y, W_star)
    print(f"\n{name}{'-shared' if shared else ''}{'-unweighted' if opts else ''}: "
          f"||W - W*||/||W*|| = {rel_star:.3f}, objective gap = {gap:.2e}, "
          f"log-loss gap = {ll_gap:+.2e}; its own fixed point is {fix_star:.3f} from W*, "
          f"SGD is {rel_fix:.4f} from it")
    assert rel_star > 0.04 and gap > 1e-3      # measurably off the softmax optimum
    assert rel_fix < 0.3 * fix_star            # ... and converging to its own point


@pytest.mark.parametrize("name", ["ove", "nce", "is"])
def test_warmup_changes_nothing(name):
    X, y, rng = _problem()
    tr = get_trainer_class(name)(X, y, 7, mu=1.0)
    tr.init_params()
    tr.W[:] = rng.normal(size=tr.W.shape)
    W0 = tr.W.copy()
    tr.warmup()
    assert np.array_equal(tr.W, W0) and np.all(tr.scale == 1.0)
