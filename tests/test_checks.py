"""Tests of scalable_softmax.repro.fagan.derivations: the helpers against hand values and
independent computations, and every check on tiny instances (the notebook 00-derivation-checks
runs them at full size)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scalable_softmax import objectives as ob
from scalable_softmax._atomic import file_mode
from scalable_softmax.repro.fagan import derivations as C
from scalable_softmax.repro.machinery import outputs as O


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def test_random_problem_has_unit_rows_and_every_class(rng):
    p = C.random_problem(rng, 15, 4, 6)
    assert p.X.shape == (15, 4) and p.N == 15 and p.D == 4
    np.testing.assert_allclose(np.linalg.norm(p.X, axis=1), 1.0)
    assert set(p.y) == set(range(6))
    with pytest.raises(ValueError, match="K >= 2"):
        C.random_problem(rng, 5, 3, 1)


def test_ridge_mle_is_stationary_and_uses_the_row_space(rng):
    p = C.random_problem(rng, 6, 10, 3)  # D > N: solved in the row space of X
    W, info = C.ridge_mle(p.X, p.y, p.K, 0.5)
    assert info["rank"] == 6
    g = ob.ridge_log_likelihood_grad(p.X, p.y, W, 0.5)
    assert np.abs(g).max() < 1e-8
    # same optimum when solved in the full space (sparse input, D <= N path)
    q = C.random_problem(rng, 20, 3, 3)
    W2, info2 = C.ridge_mle(sp.csr_matrix(q.X), q.y, q.K, 0.5)
    assert info2["rank"] == 3 and info2["grad_max"] < 1e-8
    with pytest.raises(ValueError, match="mu must be > 0"):
        C.ridge_mle(q.X, q.y, q.K, 0.0)


def test_double_sum_hessian_matches_finite_differences(rng):
    p = C.random_problem(rng, 4, 2, 3)
    W = rng.standard_normal((3, 2))
    u = rng.uniform(0, 2, 4)
    H = C.double_sum_hessian(u, p.X, p.y, W, mu=0.3)
    assert H.shape == (4 + 6, 4 + 6)
    np.testing.assert_allclose(H, C._fd_hessian(u, p.X, p.y, W, 0.3), rtol=1e-6, atol=1e-7)
    assert np.linalg.eigvalsh(H).min() > 0


def test_f_hat_grad_equals_objectives_scaled_gradient(rng):
    p = C.random_problem(rng, 5, 3, 4)
    W = rng.standard_normal((4, 3))
    u = rng.uniform(0, 2, 5)
    beta = ob.touch_weights(p.y, 4)
    i, k = 2, (int(p.y[2]) + 1) % 4
    yi = int(p.y[i])
    dW, du = ob.f_ik_grad_scaled(i, k, u, p.X, p.y, W, mu=0.7, beta=beta)
    gk, gy, gu = C.f_hat_grad(p.X[i], W[k], W[yi], u[i], 4, 0.7, beta[k], beta[yi], 5)
    np.testing.assert_allclose(gk, dW[k], rtol=1e-13)
    np.testing.assert_allclose(gy, dW[yi], rtol=1e-13)
    assert gu == pytest.approx(du, rel=1e-13)
    val = C.f_hat(p.X[i], W[k], W[yi], u[i], 4, 0.7, beta[k], beta[yi], 5)
    assert val == pytest.approx(ob.f_ik_scaled(i, k, u, p.X, p.y, W, mu=0.7, beta=beta),
                                rel=1e-13)


def test_direct_implicit_step_is_a_stationary_point(rng):
    x = np.array([0.6, -0.8])
    w_k, w_y = np.array([3.0, -1.0]), np.array([0.0, 0.5])
    u, eta, K = 0.5, 2.0, 10
    wk, wy, un, info = C.direct_implicit_step(x, w_k, w_y, u, eta, K)
    g = C.f_hat_grad(x, wk, wy, un, K)
    # implicit update (9): theta+ = theta~ - eta grad f-hat(theta+)
    np.testing.assert_allclose(wk, w_k - eta * g[0], atol=1e-12)
    np.testing.assert_allclose(wy, w_y - eta * g[1], atol=1e-12)
    assert un == pytest.approx(u - eta * g[2], abs=1e-12)
    # without ridge, w_k and w_y move along x by opposite amounts
    np.testing.assert_allclose(wk - w_k, -(wy - w_y), atol=1e-12)
    dk = wk - w_k
    assert abs(dk[0] * x[1] - dk[1] * x[0]) < 1e-12
    assert not info["clamped"]


def test_direct_implicit_step_agrees_with_the_library_reference(rng):
    from scalable_softmax.methods.implicit import reference_step
    for _ in range(5):
        inst = C._implicit_instance(rng, 3, (-10, 15), (-2, 1), (2, 50), (0.0, 1.0))
        dk, dy, du, _ = C.direct_implicit_step(inst["x"], inst["w_k"], inst["w_y"],
                                               inst["u"], inst["eta"], inst["K"],
                                               inst["mu"], inst["beta_k"], inst["beta_y"],
                                               inst["N"])
        rk, ry, ru = reference_step(np.arange(3), inst["x"], inst["w_k"], inst["w_y"],
                                    inst["u"], inst["eta"], inst["K"], mu=inst["mu"],
                                    beta_k=inst["beta_k"], beta_y=inst["beta_y"],
                                    N=inst["N"])
        np.testing.assert_allclose(np.r_[dk, dy, du], np.r_[rk, ry, ru], rtol=1e-9, atol=1e-9)


def test_bisection_evaluations_hand_values():
    # width 1, eps 1/8: 1 evaluation at u~ + ceil(log2(1/(2/8))) = 2 midpoints
    assert C.bisection_evaluations(1.0, 0.125) == 3
    assert C.bisection_evaluations(0.1, 0.125) == 1       # already accurate
    assert C.bisection_evaluations(0.0, 1e-8) == 1
    np.testing.assert_array_equal(C.bisection_evaluations(np.array([1.0, 2.0]), 0.25), [2, 3])


def test_appendix_f1_bracket_corner_case_has_width_log2():
    lo, hi, below = C.appendix_f1_bracket(0.0, 0.0, 1e-6, 2, 1.0)
    assert bool(below[()]) and lo == 0.0
    assert hi == pytest.approx(math.log(2.0), rel=1e-15)
    # the printed width bound |delta-u| + 2 eta s + log(K-1) is 2e-6 here: it fails
    assert hi - lo > 1e5 * (2e-6)


def test_appendix_f1_bracket_contains_the_root(rng):
    from scalable_softmax.methods.implicit import solve_reduced_reference
    for _ in range(40):
        dt, ut = rng.uniform(-30, 30), rng.uniform(0, 10)
        eta, K, s = 10 ** rng.uniform(-4, 4), int(rng.choice([2, 7, 500])), rng.uniform(.1, 2)
        lo, hi, _ = C.appendix_f1_bracket(dt, ut, eta, K, s)
        root = solve_reduced_reference(dt, ut, eta, K, s)[0]
        assert lo - 1e-12 * (1 + root) <= root <= hi + 1e-12 * (1 + root)
        assert hi - lo <= abs(dt - ut) + 2 * eta * s + math.log(2 * (K - 1)) + 1e-12


def test_prop2_bound_values():
    assert C.prop2_bound(0.0, 1e-9, 2, 1.0) == 1.0
    assert C.prop2_bound(100.0, 0.5, 2, 1.0) == pytest.approx(100.0)
    assert C.prop2_bound(-5.0, 1e3, 2, 1.0) == pytest.approx(2e3)


def test_rowwise_extreme_W_attains_lemma2():
    x = np.array([0.6, 0.8])
    X = x[None, :]
    K, mu = 4, 1.0
    B_x, B_W, B_u = ob.umax_bounds(X, K, mu)
    W = C.rowwise_extreme_W(x, 2, K, B_W)
    np.testing.assert_allclose(np.linalg.norm(W, axis=1), B_W)
    assert ob.u_star(X, np.array([2]), W)[0] == pytest.approx(B_u, rel=1e-14)


def test_implicit_step_sweep_is_finite_and_linear():
    sweep = C.implicit_step_sweep(np.array([-1000.0, 0.0, 500.0, 1000.0]), etas=(1e-3, 1e3),
                                  Ks=(2, 1000))
    assert len(sweep) == 16
    assert np.isfinite(sweep.implicit_step).all()
    assert (sweep.a <= sweep.bound_a * (1 + 1e-12)).all()
    big = sweep[sweep.z == 1000.0]
    assert (big.a > 500).all() and (big.a < 1100).all()        # linear in z ...
    assert not np.isfinite(big.vanilla_step).any()               # ... SGD's overflows
    assert (big.log10_vanilla_step > 300).all()


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------

def _result(holds=True, note=""):
    return C.CheckResult("X-1", "paper", "a | b", "q", "<= 1", 0.5, holds, 3,
                         pd.DataFrame({"a": [1]}), note)


def test_summary_and_markdown():
    df = C.summary_table([_result(), _result(False, "fails somewhere")])
    assert list(df.columns[:8]) == C.SUMMARY_COLUMNS
    md = O.to_markdown(df, C.SUMMARY_COLUMNS)
    lines = md.strip().splitlines()
    assert len(lines) == 4 and lines[1].count("---") == 8
    assert "a \\| b" in md and "**no**" in md and "yes" in md
    assert "DOES NOT HOLD" in repr(_result(False)) and "holds" in repr(_result())


def test_write_table_is_atomic_and_complete(tmp_path):
    df = C.summary_table([_result(), _result(False, "fails somewhere")])
    csv, md = O.write_table(df, "demo", tmp_path / "tables", title="Demo",
                            md_columns=C.SUMMARY_COLUMNS)
    back = pd.read_csv(csv)
    assert len(back) == 2 and list(back.holds) == [True, False]
    text = md.read_text()
    assert text.startswith("# Demo") and "fails somewhere" in text
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == ["demo.csv", "demo.md"]
    # not mkstemp's private 0o600: the process umask applies, as for open()
    assert csv.stat().st_mode & 0o777 == file_mode() and file_mode() != 0o600


def test_save_figure_writes_both_formats(tmp_path):
    import matplotlib
    from matplotlib.figure import Figure
    assert matplotlib is not None
    fig = Figure()
    fig.add_subplot().plot([0, 1], [0, 1])
    out = O.save_figure(fig, "demo", tmp_path)
    assert [p.suffix for p in out] == [".pdf", ".png"]
    assert all(p.stat().st_size > 0 for p in out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.pdf", "demo.png"]


# ---------------------------------------------------------------------------
# the checks, on tiny instances
# ---------------------------------------------------------------------------

@pytest.fixture
def problems(rng):
    return C.random_problems(rng, 2, sizes=((8, 3, 3), (6, 2, 2)))


def test_section2_checks_hold(rng, problems):
    for r in (C.check_loglik_forms(rng, problems), C.check_conjugate([1e-3, 1.0, 50.0]),
              C.check_double_sum_min(rng, problems), C.check_unbiased(rng, problems),
              C.check_gradients(rng, problems, pairs_per_problem=1),
              C.check_raman(rng, problems), C.check_raman_original_code(rng, problems)):
        assert r.holds, repr(r)
        assert r.instances == len(r.details) > 0


def test_lemma_checks_hold(rng, problems):
    r1, optima = C.check_lemma1(problems, mus=(1.0,))
    assert r1.holds and 0 < r1.value <= 1 and len(optima) == 2
    r2 = C.check_lemma2(rng, problems, optima, mu_values=(1.0,), n_random=1)
    assert r2.holds and r2.value == pytest.approx(1.0, abs=1e-12)  # the extreme point
    small = [C.random_problem(rng, 4, 2, 3)]
    r3 = C.check_lemma3(rng, small, mus=(1.0,), points=2)
    assert r3.holds and r3.value >= 1.0
    r4 = C.check_lemma4(rng, small, mus=(1.0,), points=1)
    assert r4.holds and 0 < r4.value <= 1
    r5 = C.check_lemma5(rng, 10)
    assert r5.holds and r5.value >= 1.0
    assert C.check_theorem1_step(rng, 3).holds
    ru = C.check_umax_gradient_bound(rng, 10)
    assert ru.holds and (ru.details["delta-u after"] < ru.details.delta0).all()


def test_lemma5_decrease_is_tight_for_k2_and_small_delta():
    # K = 2, u = softplus(d) - D: decrease e^D - 1 - D, ratio to D^2/2 -> 1 as D -> 0
    D = 1e-3
    assert (math.expm1(D) - D) / (0.5 * D * D) == pytest.approx(1.0, abs=1e-3)


def test_implicit_checks(rng):
    r = C.check_implicit_direct(rng, 5)
    assert r.holds and r.value < 1e-8
    r = C.check_prop1(rng, 10)
    assert r.holds and r.value <= 1 + 1e-9
    r = C.check_prop2(C.implicit_step_sweep(np.linspace(-50, 800, 6), etas=(1e-2, 10.0)))
    assert r.holds and "overflowed" in r.note


def test_prop4_checks_find_the_printed_bound_violation(rng):
    valid, width, df = C.check_prop4_bracket(rng, 12)
    assert valid.holds
    assert not width.holds and width.value > 1e5          # the K = 2 corner cases
    assert (df["width/corrected"] <= 1 + 1e-12).all()
    count = C.check_prop4_evaluations(df)
    assert not count.holds
    d = count.details
    assert (d.bisection_evals.iloc[:3] > np.ceil(d.paper_bound_evals.iloc[:3])).all()
    assert (count.details.bisection_evals <= np.ceil(count.details.corrected_bound_evals)).all()
    assert count.details.paper_bound_evals.iloc[2] < 0         # eta = 1e-12: negative bound


def test_titsias_checks_hold(rng, problems):
    for r in (C.check_ove_bound(rng, 4, problems), C.check_event_bound(rng, 10),
              C.check_ove_hierarchy(rng, 10), C.check_ove_nonparametric(rng, 2),
              C.check_bouchard_bound(rng, 3, problems), C.check_bouchard_k2(rng, 2)):
        assert r.holds, repr(r)


@pytest.mark.slow
def test_titsias_optimisation_checks_hold(rng):
    r = C.check_ove_parametric(rng, 1)
    assert r.holds and r.value > 1e-3
    r = C.check_bouchard_k_gt_2(rng, 1)
    assert r.holds and r.value > 0


# ---------------------------------------------------------------------------
# notebook 00's set-up and record of its checks
# ---------------------------------------------------------------------------

def test_notebook_problems_draw_in_order_and_skip_missing_data(monkeypatch, capsys):
    a = C.notebook_problems(np.random.default_rng(5), 3)
    rng = np.random.default_rng(5)
    problems = C.random_problems(rng, 3)
    tiny = [C.random_problem(rng, 8, 3, 3), C.random_problem(rng, 6, 2, 2),
            C.random_problem(rng, 10, 2, 4)]
    assert a[2] == []
    for got, want in zip(a[0] + a[1], problems + tiny):
        assert got.name == want.name and np.array_equal(got.y, want.y)
        assert np.array_equal(np.asarray(got.X.todense() if sp.issparse(got.X) else got.X),
                              np.asarray(want.X.todense() if sp.issparse(want.X) else want.X))
    assert [(p.N, p.D, p.K) for p in a[1]] == [(8, 3, 3), (6, 2, 2), (10, 2, 4)]

    import scalable_softmax.data as data

    def missing(name):
        raise data.MissingDataError(f"no files for {name}")
    monkeypatch.setattr(data, "load_dataset", missing)
    _, _, real = C.notebook_problems(np.random.default_rng(0), 1, "bibtex", 30)
    assert real == [] and "real data skipped" in capsys.readouterr().out


def test_notebook_problems_real_slice_gets_its_ridge_optimum(monkeypatch):
    rng = np.random.default_rng(2)
    p = C.random_problem(rng, 40, 5, 3)

    class Data:
        X, y, K = sp.csr_matrix(p.X), p.y, p.K

    import scalable_softmax.data as data
    monkeypatch.setattr(data, "load_dataset", lambda name: Data)
    _, _, real = C.notebook_problems(np.random.default_rng(0), 1, "toy", 25)
    (r,) = real
    assert r.name == "toy[:25]" and r.N == 25 and r.K == 3
    W, _ = C.ridge_mle(r.X, r.y, r.K, 1.0)
    np.testing.assert_allclose(r.W, W)


def test_report_keeps_prints_and_tabulates(capsys):
    rep = C.Report()
    r1 = C.CheckResult("A", "src", "claim a", "q", "0", 0.0, True, 2,
                       pd.DataFrame({"x": [1.0, 2.0]}))
    r2 = C.CheckResult("B", "src", "claim b", "q", "0", 1.0, False, 1, pd.DataFrame({"x": [3.0]}))
    assert rep(r1, show=None) is r1
    rep(r2, show="head")
    out = capsys.readouterr().out
    assert "A (src): claim a" in out and "DOES NOT HOLD" in out
    t = rep.table()
    assert list(t.check) == ["A", "B"] and list(t.holds) == [True, False]
    assert t.equals(C.summary_table([r1, r2]))
    with pytest.raises(ValueError, match="show must be"):
        rep(r1, show="all")
