import numpy as np
import pytest

from scalable_softmax import objectives
from scalable_softmax.repro.fagan.instability import replay


def _problem(seed=0, N=40, D=6, K=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D))
    y = rng.integers(0, K, N)
    return X, y, K


@pytest.mark.parametrize("method, grad", [("vanilla", objectives.f_ik_grad_scaled),
                                          ("raman-vanilla", objectives.raman_f_ik_grad_scaled)])
def test_first_step_magnitude_matches_the_reference_gradient(method, grad):
    X, y, K = _problem()
    h = replay(X, y, K, method, lr=0.01, epochs=1, seed=3)
    i, k = int(h.i[0]), int(h.k[0])
    W = np.zeros((K, X.shape[1]))
    dW, _ = grad(i, k, np.zeros(len(y)), X, y, W)
    ref = max(np.linalg.norm(dW[k]), np.linalg.norm(dW[y[i]]))
    assert h.log10_grad[0] == pytest.approx(np.log10(ref), abs=1e-12)


def test_umax_stays_below_its_bound_and_vanilla_overflows():
    X, y, K = _problem(1)
    X = X * 5.0
    v = replay(X, y, K, "vanilla", lr=50.0, epochs=5, seed=0)
    assert not v.finite.iloc[-1] and v.finite.iloc[:-1].all()
    assert v.log10_grad.iloc[-1] > 300          # exp overflowed (or the update did)
    for m in ("umax", "raman-umax"):
        h = replay(X, y, K, m, lr=50.0, epochs=5, seed=0)
        assert h.finite.all() and len(h) == 5 * len(y)
        assert (h.log10_grad <= h.log10_bound + 1e-12).all()
        assert h.reset.any()


def test_bad_arguments():
    X, y, K = _problem()
    with pytest.raises(ValueError, match="method"):
        replay(X, y, K, "sgd", lr=1.0)
    with pytest.raises(ValueError, match="lr"):
        replay(X, y, K, "umax", lr=-1.0)


# ---------------------------------------------------------------------------
# notebook 01's study functions
# ---------------------------------------------------------------------------

from scalable_softmax.repro.fagan import instability as I  # noqa: E402


def _sparse_problem(seed=0, N=60, D=8, K=4):
    import scipy.sparse as sp

    X, y, K = _problem(seed, N, D, K)
    X = X / np.linalg.norm(X, axis=1, keepdims=True) * 30.0      # large rows: SGD overflows
    return sp.csr_matrix(X), y.astype(np.int64), K


def test_overflow_runs_record_where_vanilla_overflows():
    X, y, K = _sparse_problem()
    t = I.overflow_runs(X, y, K, ["vanilla", "implicit"], [1e-6, 1e3], epochs=2, progress=False)
    assert list(t.columns) == ["method", "lr", "epochs", "diverged", "diverged_epoch",
                               "diverged_step", "steps_before_overflow",
                               "final_train_log_loss", "seconds"]
    assert list(zip(t.method, t.lr)) == [("vanilla", 1e-6), ("vanilla", 1e3),
                                         ("implicit", 1e-6), ("implicit", 1e3)]
    bad = t[(t.method == "vanilla") & (t.lr == 1e3)].iloc[0]
    assert bad.diverged and bad.final_train_log_loss == np.inf
    assert bad.steps_before_overflow == (bad.diverged_epoch - 1) * 60 + bad.diverged_step
    ok = t[t.method == "implicit"]
    assert not ok.diverged.any() and np.isfinite(ok.final_train_log_loss).all()
    assert ok.steps_before_overflow.isna().all()


def test_u_init_runs_and_largest_stable_rates():
    X, y, K = _sparse_problem(1)
    t = I.u_init_runs(X, y, K, ["zero", "logK"], [1e-6, 1e3], epochs=1, progress=False)
    assert list(t.columns) == ["u_init", "lr", "diverged", "diverged_epoch", "diverged_step",
                               "final_train_log_loss"]
    assert list(t.u_init) == ["zero", "zero", "logK", "logK"]
    ref = I.overflow_runs(X, y, K, ["vanilla"], [1e-6, 1e3], epochs=1, u_init="logK",
                          progress=False)
    np.testing.assert_array_equal(t[t.u_init == "logK"].final_train_log_loss,
                                  ref.final_train_log_loss)
    stable = I.largest_stable_rates(t)
    assert set(stable) == {"zero", "logK"} and stable["zero"] == 1e-6


def test_replay_runs_gradient_table_summary_and_figures():
    import matplotlib
    matplotlib.use("Agg")
    X, y, K = _problem(1)
    X = X * 5.0
    runs = I.replay_runs(X, y, K, [0.1, 50.0], epochs=2, seed=0, progress=False)
    assert set(runs) == {(m, lr) for m in I.NOTEBOOK_REPLAYS for lr in (0.1, 50.0)}
    pd_ref = replay(X, y, K, "umax", 50.0, epochs=2, seed=0)
    assert runs["umax", 50.0].equals(pd_ref)
    g = I.gradient_table(runs)
    assert len(g) == 8
    v = g[(g.method == "vanilla") & (g.lr == 50.0)].iloc[0]
    assert v.overflowed and v.overflow_step == runs["vanilla", 50.0].step.iloc[-1]
    u = g[g.method == "umax"]
    assert (u.steps_above_bound == 0).all() and not u.overflowed.any()
    assert u.overflow_step.isna().all()
    table = I.overflow_runs(*_sparse_problem(), ["vanilla", "umax", "implicit"], [1e-6, 1e3],
                            epochs=1, progress=False)
    text = I.summary(table, runs, [0.1, 50.0])
    assert text.startswith("vanilla overflowed at rates: [1000.0] ; stayed finite at: [1e-06]")
    assert "U-max replay: " in text
    assert len(I.plot_divergence(table, 4, "toy", 1).axes) == 2
    assert len(I.plot_histograms(runs, [0.1, 50.0], 2).axes) == 4
    assert len(I.plot_raman(runs, [0.1, 50.0]).axes) == 4


def test_seed_claims_count_the_seeds_and_one_overflow_refutes_a_claim_about_every_run():
    import pandas as pd

    from scalable_softmax.repro.fagan import instability as ins

    def table(umax_diverged):
        return pd.DataFrame(dict(method=["vanilla", "vanilla", "umax", "umax"],
                                 lr=[0.1, 10.0, 0.1, 10.0],
                                 diverged=[False, True, False, umax_diverged],
                                 final_train_log_loss=[1.0, np.inf, 1.0,
                                                       np.inf if umax_diverged else 2.0]))

    def init(log_k_worse):
        return pd.DataFrame(dict(u_init=["zero", "zero", "logK", "logK"], lr=[0.1, 10.0] * 2,
                                 diverged=[False, True, log_k_worse, True],
                                 final_train_log_loss=[1.0, np.inf, 1.0, np.inf]))

    h = pd.DataFrame(dict(finite=[True, True], log10_grad=[0.0, 1.0], log10_bound=[1.0, 1.0]))
    replays = {s: {("umax", 10.0): h} for s in (0, 1)}
    c = ins.seed_claims({0: table(False), 1: table(True)}, {0: init(False), 1: init(True)},
                        replays, [0.1, 10.0], [10.0]).set_index("claim")
    assert c.loc["vanilla SGD overflows at the largest rate", "verdict"] == "confirmed"
    assert c.loc["vanilla SGD overflows at the largest rate", "seeds"] == "2 of 2 seeds"
    umax = c.loc["U-max stays finite at every rate"]
    assert (umax.verdict, umax.seeds, umax.ours) == ("not confirmed", "1 of 2 seeds",
                                                     "1 of 4 runs overflowed")
    assert c.loc["u = log K is at least as stable as u = 0 at every rate",
                 "verdict"] == "not confirmed"
    assert c.loc["U-max's gradient stays below its bound at every replayed step",
                 "verdict"] == "confirmed"
    every = ins.seeds_table({0: table(False)}, {0: init(False)})
    assert list(every.columns[:4]) == ["seed", "u_init", "method", "lr"]
    assert len(every) == 4 + 2 and set(every.u_init) == {"zero", "logK"}
