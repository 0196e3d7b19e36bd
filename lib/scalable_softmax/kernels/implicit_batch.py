"""The numba kernels of the implicit-batch method (``"implicit-batch"``;
:mod:`scalable_softmax.methods.implicit_batch` holds the trainer, the plain NumPy
``reference_step`` and ``solve_reduced_reference``, and the derivation, docs/math.md
section 5).

``epoch_kernel``
    one epoch of batch steps.
``solve_reduced``
    the whole solver of one step's reduced problem (a damped Newton method), built from:
``direction_workspace(s, r, q)``
    the scratch arrays of the direction for ``s`` points, rank ``r``, ``q`` classes.
``gradient(Bm, PI, D1, ypos, Cm, rho, g, grad)``
    the gradient at the iterate.
``structured_direction(Bm, PI, ypos, D1, D2, rho, grad, p, ws)``
    the Newton direction through the structured (Cholesky and capacitance) solve.
``ls_factor(Bm, PI, ypos, D1, D2, rho, ws)``, ``ls_solve(Bm, PI, D1, D2, grad, p, ws)``
    the same solve split into its factorisation and its substitutions (chord steps
    reuse the factorisation).
``score_change(Bm, p, PT, ZP)``
    the change of the scores along the direction.
``scores_value(Z, ypos, logw, alpha, ubar, order, PI, D1, D2, uout)``,
``ridge_value(Cm, rho, g)``
    a trial point's objective (its scores part, with the softmax pieces the next
    iteration uses, and its ridge part).
``span_basis(G)``
    an orthonormal basis of the span of the batch's rows from their Gram matrix
    (eigenvalues below ``EIG_RTOL`` times the largest dropped).
``touch_beta_kernel``, ``sample_classes``, ``chunk_labels``
    the ridge weights, class draws and label bookkeeping of an epoch.

The others are the pieces these are built from (``psi``, ``chol_*``, ``lu_*``,
``ls_*``). All are numba code.
"""
from __future__ import annotations

import math

import numba
import numpy as np

from scalable_softmax.kernels.common import JIT, prefetch_w
from scalable_softmax.kernels.lambertw import lambertw_exp

__all__ = ["EIG_RTOL", "chol_factor", "chol_solve", "chunk_labels", "descends",
           "direction_workspace", "epoch_kernel", "gradient", "ls_back", "ls_blocks",
           "ls_capacitance", "ls_cholesky", "ls_factor", "ls_forward", "ls_forward_h",
           "ls_rhs", "ls_solve", "lu_apply", "lu_factor", "lu_solve", "prefetch_row", "psi",
           "reduced_eval", "ridge_value", "row_dot", "sample_classes", "score_change",
           "scores_value", "solve_reduced", "span_basis", "structured_direction",
           "touch_beta_kernel"]

#: eigenvalues of the chunk's Gram matrix below this fraction of the largest are dropped
EIG_RTOL = 1e-12
#: the Cholesky basis is used when every pivot keeps at least this fraction of its
#: point's squared norm (else the eigendecomposition, which drops near-null directions)
_CHOL_RTOL = 1e-6
#: Newton reuses the factored Hessian of an earlier iterate (a chord step) while each
#: step cuts the gradient's norm at least this many times over
_CHORD_RATE = 0.03
#: the scores pass prefetches the row entries of the dot this many dots ahead
_AHEAD = 4
#: lazily applied row scales below this are folded into the row
_SCALE_FLOOR = 1e-100


# ----------------------------------------------------------------------------------
# scalar pieces
# ----------------------------------------------------------------------------------

@numba.njit(**JIT)
def psi(L, ub, al):
    """``ψ(L) = min_{u ≥ 0} 2 al (u + e^{L-u}) + (u - ub)²``: value, ``ψ'``, ``ψ''``
    and the minimiser ``u``.

    ``t = W₀(e^z)`` comes from the log-domain Lambert W; ``u = ub - al + t`` then
    loses ``~ε·al`` to cancellation when ``al`` is large and ``u`` small, so when
    ``t ≥ al/2`` (where it is well conditioned) ``u`` is polished by one Newton step
    on the equivalent equation ``u + log1p((u - ub)/al) = L``."""
    t = lambertw_exp(math.log(al) + al + (L - ub))
    u = (ub - al) + t
    if u > 0.0 and t >= 0.5 * al:
        u -= (u + math.log1p((u - ub) / al) - L) / (1.0 + 1.0 / t)
    if u > 0.0:
        d = u - ub
        return 2.0 * al * u + 2.0 * t + d * d, 2.0 * t, 2.0 * t / (1.0 + t), u
    e = al * math.exp(L)  # here L <= 0
    return 2.0 * e + ub * ub, 2.0 * e, 2.0 * e, 0.0


# ----------------------------------------------------------------------------------
# the reduced problem (numba)
# ----------------------------------------------------------------------------------

@numba.njit(**JIT)
def reduced_eval(Cm, Bm, S0, ypos, logw, alpha, ubar, rho, g, order, grad, H, uout,
                 PI, D1, D2):
    """Value of Φ at ``Cm`` (q x r); ``uout`` gets the minimising ``u_i``. With
    ``order >= 1`` also fill ``grad`` (q x r) and the per-point Hessian pieces ``PI``
    (s x q, the ω-weighted softmax), ``D1 = ψ'``, ``D2 = ψ''``; with ``order == 2``
    the dense Hessian ``H`` ((q r) x (q r), index ``k r + a``)."""
    s, r = Bm.shape
    q = S0.shape[1]
    sc = np.empty(q)
    pi = np.empty(q)
    e = np.empty(q)
    M = np.empty((q, q))
    val = 0.0
    if order >= 1:
        grad[:, :] = 0.0
    if order == 2:
        H[:, :] = 0.0
    for i in range(s):
        mx = -np.inf
        for k in range(q):
            z = S0[i, k]
            for a in range(r):
                z += Bm[i, a] * Cm[k, a]
            sc[k] = z
            v = logw[k] + z
            if v > mx:
                mx = v
        tot = 0.0
        for k in range(q):
            pi[k] = math.exp(logw[k] + sc[k] - mx)
            tot += pi[k]
        lse = mx + math.log(tot)
        yp = ypos[i]
        L = lse - sc[yp]
        if L < 0.0:
            L = 0.0  # rounding: the y_i term alone gives d_i >= 1
        v, d1, d2, u = psi(L, ubar[i], alpha[i])
        uout[i] = u
        val += v
        if order == 0:
            continue
        for k in range(q):
            pi[k] /= tot
            e[k] = pi[k]
            PI[i, k] = pi[k]
        e[yp] -= 1.0
        D1[i] = d1
        D2[i] = d2
        for k in range(q):
            f = d1 * e[k]
            for a in range(r):
                grad[k, a] += f * Bm[i, a]
        if order < 2:
            continue
        for k in range(q):
            for l in range(q):
                M[k, l] = d2 * e[k] * e[l] - d1 * pi[k] * pi[l]
            M[k, k] += d1 * pi[k]
        for k in range(q):
            for a in range(r):
                ba = Bm[i, a]
                row = k * r + a
                for l in range(q):
                    mkl = M[k, l] * ba
                    for b in range(r):
                        H[row, l * r + b] += mkl * Bm[i, b]
    for k in range(q):
        c2 = 0.0
        cg = 0.0
        for a in range(r):
            c2 += Cm[k, a] * Cm[k, a]
            cg += Cm[k, a] * g[k, a]
        val += (1.0 + rho[k]) * c2 + 2.0 * rho[k] * cg
        if order >= 1:
            for a in range(r):
                grad[k, a] += 2.0 * (1.0 + rho[k]) * Cm[k, a] + 2.0 * rho[k] * g[k, a]
        if order == 2:
            for a in range(r):
                H[k * r + a, k * r + a] += 2.0 * (1.0 + rho[k])
    return val


@numba.njit(**JIT)
def chol_factor(H, rtol):
    """In-place Cholesky factor of the lower triangle of symmetric ``H`` (the upper
    triangle is left as it was). Returns False at the first pivot that keeps no more
    than ``rtol`` of its diagonal entry (``rtol = 0``: not numerically PD)."""
    n = H.shape[0]
    for j in range(n):
        d = H[j, j]
        for p in range(j):
            d -= H[j, p] * H[j, p]
        if not (d > 0.0 and (rtol == 0.0 or d > rtol * H[j, j])):
            return False
        d = math.sqrt(d)
        H[j, j] = d
        for i in range(j + 1, n):
            v = H[i, j]
            for p in range(j):
                v -= H[i, p] * H[j, p]
            H[i, j] = v / d
    return True


@numba.njit(**JIT)
def chol_solve(H, rhs, out):
    """Solve ``H out = rhs`` for symmetric positive definite ``H`` (in-place Cholesky
    of ``H``'s lower triangle). Returns False if ``H`` is not numerically PD."""
    n = H.shape[0]
    if not chol_factor(H, 0.0):
        return False
    for i in range(n):
        v = rhs[i]
        for p in range(i):
            v -= H[i, p] * out[p]
        out[i] = v / H[i, i]
    for i in range(n - 1, -1, -1):
        v = out[i]
        for p in range(i + 1, n):
            v -= H[p, i] * out[p]
        out[i] = v / H[i, i]
    return True


@numba.njit(**JIT)
def direction_workspace(s, r, q):
    """Scratch arrays of :func:`structured_direction` for ``s`` points, rank ``r``
    and ``q`` classes (allocated once per step, reused by every Newton iteration)."""
    return (np.empty((r, r, q)), np.empty((r, q)), np.empty((r, s, q)), np.empty((r, q)),
            np.empty((s, q)), np.empty((s, q)), np.empty((s, q)), np.empty(q),
            np.empty((2 * s, 2 * s)), np.empty(2 * s), np.empty((r, q)),
            np.empty(2 * s), np.empty(2 * s, np.int64))


@numba.njit(**JIT)
def lu_factor(M, piv, row):
    """LU factors of ``M`` in place by Gaussian elimination with partial pivoting
    (``piv[j]``: the row exchanged with row ``j``; ``row``: scratch of length ``n``).
    Returns False if a pivot is zero or not finite."""
    n = M.shape[0]
    for j in range(n):
        best = j
        amax = abs(M[j, j])
        for i in range(j + 1, n):
            v = abs(M[i, j])
            if v > amax:
                amax = v
                best = i
        if not (amax > 0.0 and math.isfinite(amax)):
            return False
        piv[j] = best
        if best != j:
            for c in range(n):
                t = M[j, c]
                M[j, c] = M[best, c]
                M[best, c] = t
        inv = 1.0 / M[j, j]
        for c in range(j + 1, n):
            row[c] = M[j, c]
        for i in range(j + 1, n):
            f = M[i, j] * inv
            M[i, j] = f
            for c in range(j + 1, n):
                M[i, c] -= f * row[c]
    return True


@numba.njit(**JIT)
def lu_apply(M, piv, b):
    """Solve ``M x = b`` in place (``b`` becomes ``x``) from :func:`lu_factor`'s
    factors and exchanges."""
    n = M.shape[0]
    for j in range(n):  # the exchanges, in order, then the unit lower factor
        best = piv[j]
        if best != j:
            t = b[j]
            b[j] = b[best]
            b[best] = t
    for j in range(n):
        for i in range(j + 1, n):
            b[i] -= M[i, j] * b[j]
    for i in range(n - 1, -1, -1):
        v = b[i]
        for c in range(i + 1, n):
            v -= M[i, c] * b[c]
        b[i] = v / M[i, i]


@numba.njit(**JIT)
def lu_solve(M, b, row):
    """Solve ``M x = b`` in place (``b`` becomes ``x``, ``M`` its LU factors) by
    Gaussian elimination with partial pivoting (``row``: scratch of length ``n``).
    Returns False if a pivot is zero or not finite."""
    piv = np.empty(M.shape[0], np.int64)
    if not lu_factor(M, piv, row):
        return False
    lu_apply(M, piv, b)
    return True


@numba.njit(**JIT)
def ls_blocks(Bm, PI, ypos, D1, rho, A, DT, ET):
    """``A_k = 2(1+ρ_k) I + Σ_i ψ'_i π_ik b_i b_iᵀ`` (lower triangles, ``A[a, b, k]``),
    ``DT = ψ'_i π_ik`` and ``ET = e_ik``, the class index innermost."""
    s, r = Bm.shape
    q = PI.shape[1]
    for i in range(s):
        d1 = D1[i]
        pi_i = PI[i]
        dt = DT[i]
        et = ET[i]
        for k in range(q):
            dt[k] = d1 * pi_i[k]
            et[k] = pi_i[k]
        et[ypos[i]] -= 1.0
    for a in range(r):
        for b in range(a):
            Aab = A[a, b]
            for k in range(q):
                Aab[k] = 0.0
        Aaa = A[a, a]
        for k in range(q):
            Aaa[k] = 2.0 * (1.0 + rho[k])
    for i in range(s):
        dt = DT[i]
        for a in range(r):
            ba = Bm[i, a]
            for b in range(a + 1):
                c = ba * Bm[i, b]
                Aab = A[a, b]
                for k in range(q):
                    Aab[k] += c * dt[k]


@numba.njit(**JIT)
def ls_cholesky(A, invd):
    """In-place Cholesky factors of the ``q`` blocks ``A[:, :, k]`` in lockstep;
    ``invd`` gets the reciprocals of their diagonals. False if one is not PD."""
    r = A.shape[0]
    q = A.shape[2]
    for j in range(r):
        Ajj = A[j, j]
        for t in range(j):
            Ajt = A[j, t]
            for k in range(q):
                Ajj[k] -= Ajt[k] * Ajt[k]
        dmin = np.inf
        for k in range(q):
            dmin = min(dmin, Ajj[k])
        if not dmin > 0.0:
            return False
        ivj = invd[j]
        for k in range(q):
            d = math.sqrt(Ajj[k])
            Ajj[k] = d
            ivj[k] = 1.0 / d
        for i in range(j + 1, r):
            Aij = A[i, j]
            for t in range(j):
                Ait = A[i, t]
                Ajt = A[j, t]
                for k in range(q):
                    Aij[k] -= Ait[k] * Ajt[k]
            for k in range(q):
                Aij[k] *= ivj[k]
    return True


@numba.njit(**JIT)
def ls_forward(A, invd, Bm, Wt):
    """``Wt[:, :, k] = L_k⁻¹ Bᵀ``."""
    s, r = Bm.shape
    q = A.shape[2]
    for a in range(r):
        for i in range(s):
            ba = Bm[i, a]
            w = Wt[a, i]
            for k in range(q):
                w[k] = ba
        for t in range(a):
            Aat = A[a, t]
            for i in range(s):
                w = Wt[a, i]
                wt = Wt[t, i]
                for k in range(q):
                    w[k] -= Aat[k] * wt[k]
        iva = invd[a]
        for i in range(s):
            w = Wt[a, i]
            for k in range(q):
                w[k] *= iva[k]


@numba.njit(**JIT)
def ls_forward_h(A, invd, grad, zh):
    """``zh[:, k] = L_k⁻¹ h_k`` (``h = -∇Φ``)."""
    r = A.shape[0]
    q = A.shape[2]
    for a in range(r):
        zha = zh[a]
        for k in range(q):
            zha[k] = -grad[k, a]
        for t in range(a):
            Aat = A[a, t]
            zht = zh[t]
            for k in range(q):
                zha[k] -= Aat[k] * zht[k]
        iva = invd[a]
        for k in range(q):
            zha[k] *= iva[k]


@numba.njit(**JIT)
def ls_capacitance(Wt, PI, ET, D1, D2, qv, cap):
    """The capacitance ``I + S Vᵀ A⁻¹ V`` (see :func:`structured_direction`)."""
    r, s, q = Wt.shape
    for i in range(s):
        et_i = ET[i]
        pi_i = PI[i]
        for i2 in range(i + 1):
            et_2 = ET[i2]
            pi_2 = PI[i2]
            for k in range(q):
                qv[k] = 0.0
            for a in range(r):
                w1 = Wt[a, i]
                w2 = Wt[a, i2]
                for k in range(q):
                    qv[k] += w1[k] * w2[k]
            ee = 0.0
            ep = 0.0
            pe = 0.0
            pp = 0.0
            for k in range(q):
                ve = et_i[k] * qv[k]
                vp = pi_i[k] * qv[k]
                ee += ve * et_2[k]
                ep += ve * pi_2[k]
                pe += vp * et_2[k]
                pp += vp * pi_2[k]
            cap[2 * i, 2 * i2] = D2[i] * ee
            cap[2 * i, 2 * i2 + 1] = D2[i] * ep
            cap[2 * i + 1, 2 * i2] = -D1[i] * pe
            cap[2 * i + 1, 2 * i2 + 1] = -D1[i] * pp
            if i2 != i:
                cap[2 * i2, 2 * i] = D2[i2] * ee
                cap[2 * i2, 2 * i + 1] = D2[i2] * pe
                cap[2 * i2 + 1, 2 * i] = -D1[i2] * ep
                cap[2 * i2 + 1, 2 * i + 1] = -D1[i2] * pp
    for j in range(2 * s):
        cap[j, j] += 1.0


@numba.njit(**JIT)
def ls_rhs(Wt, zh, PI, ET, D1, D2, beta, rhs):
    """``beta[i, k] = (B A_k⁻¹ h_k)_i`` and the capacitance system's right-hand side
    ``S Vᵀ A⁻¹ h`` (see :func:`structured_direction`)."""
    r, s, q = Wt.shape
    for i in range(s):
        bi = beta[i]
        for k in range(q):
            bi[k] = 0.0
        for a in range(r):
            w = Wt[a, i]
            za = zh[a]
            for k in range(q):
                bi[k] += w[k] * za[k]
    for i in range(s):
        et_i = ET[i]
        pi_i = PI[i]
        bi = beta[i]
        ee = 0.0
        pp = 0.0
        for k in range(q):
            ee += et_i[k] * bi[k]
            pp += pi_i[k] * bi[k]
        rhs[2 * i] = D2[i] * ee
        rhs[2 * i + 1] = -D1[i] * pp


@numba.njit(**JIT)
def ls_back(A, invd, Bm, PI, ET, grad, w, nu, xt, p):
    """``p_k = L_k⁻ᵀ L_k⁻¹ (h_k - Bᵀ ν_k)``, ``ν_ik = w_{2i} e_ik + w_{2i+1} π_ik``,
    into ``p[k r + a]``. False if it is not finite."""
    s, r = Bm.shape
    q = A.shape[2]
    for a in range(r):
        xa = xt[a]
        for k in range(q):
            xa[k] = -grad[k, a]
    for i in range(s):
        we = w[2 * i]
        wp = w[2 * i + 1]
        nui = nu[i]
        et_i = ET[i]
        pi_i = PI[i]
        for k in range(q):
            nui[k] = we * et_i[k] + wp * pi_i[k]
        for a in range(r):
            ba = Bm[i, a]
            xa = xt[a]
            for k in range(q):
                xa[k] -= ba * nui[k]
    for a in range(r):
        xa = xt[a]
        for t in range(a):
            Aat = A[a, t]
            xtt = xt[t]
            for k in range(q):
                xa[k] -= Aat[k] * xtt[k]
        iva = invd[a]
        for k in range(q):
            xa[k] *= iva[k]
    for a in range(r - 1, -1, -1):
        xa = xt[a]
        for t in range(a + 1, r):
            Ata = A[t, a]
            xtt = xt[t]
            for k in range(q):
                xa[k] -= Ata[k] * xtt[k]
        iva = invd[a]
        for k in range(q):
            xa[k] *= iva[k]
    for k in range(q):
        for a in range(r):
            v = xt[a, k]
            if not math.isfinite(v):
                return False
            p[k * r + a] = v
    return True


@numba.njit(**JIT)
def structured_direction(Bm, PI, ypos, D1, D2, rho, grad, p, ws):
    """Newton direction ``p = -H⁻¹ ∇Φ`` (``p[k r + a]``) from the Hessian's structure
    ``H = A + V S Vᵀ``: ``A`` block diagonal over the classes,
    ``A_k = 2(1+ρ_k) I + Bᵀ diag(ψ'_i π_ik) B`` (``r x r``), and ``2s`` rank-one terms
    ``ψ''_i (e_i ⊗ b_i)(e_i ⊗ b_i)ᵀ - ψ'_i (π_i ⊗ b_i)(π_i ⊗ b_i)ᵀ``. Woodbury:
    ``(I + S Vᵀ A⁻¹ V) w = S Vᵀ A⁻¹ h``, ``p = A⁻¹ (h - V w)``, ``h = -∇Φ``.

    With ``A_k = L_k L_kᵀ`` and ``W_k = L_k⁻¹ Bᵀ`` (``r x s``), the blocks the
    capacitance needs are ``Q_k = B A_k⁻¹ Bᵀ = W_kᵀ W_k`` (never formed: each entry
    ``Q_k[i, i']`` is contracted at once with the four products of ``e_i, π_i`` and
    ``e_i', π_i'``), ``B A_k⁻¹ h_k = W_kᵀ (L_k⁻¹ h_k)`` and ``V w`` restricted to class
    ``k`` is ``Bᵀ ν_k`` with ``ν_ik = w_{2i} e_ik + w_{2i+1} π_ik``. All ``q`` classes
    go through the same operations in lockstep, the class index innermost (contiguous,
    independent, hence vectorisable without reassociation). ``ws`` is
    :func:`direction_workspace`. Cost in multiply-adds about ``q (s r² + r³/6 +
    s² r / 2 + 2 s²) + 8 s³/3`` (the blocks ``A_k`` and ``L_k⁻¹ Bᵀ`` ``q s r²/2`` each,
    the factors ``q r³/6``, the contraction of ``Q_k`` ``q s² r/2``, the capacitance
    ``2 q s²`` and its LU ``(2s)³/3``); counted exactly by ``newton_flops`` in
    ``benchmarks/bench_many_classes.py``. Returns False if a
    factorisation fails or the result is not finite (the caller then falls back to the
    dense Hessian); the caller also checks that ``p`` is a descent direction."""
    if not ls_factor(Bm, PI, ypos, D1, D2, rho, ws):
        return False
    return ls_solve(Bm, PI, D1, D2, grad, p, ws)


@numba.njit(**JIT)
def ls_factor(Bm, PI, ypos, D1, D2, rho, ws):
    """The factorisation half of :func:`structured_direction` (into ``ws``): the
    blocks' Cholesky factors, ``L_k⁻¹ Bᵀ`` and the capacitance's LU factors. False if
    one fails."""
    A, invd, Wt, zh, beta, ET, DT, qv, cap, rhs, xt, row, piv = ws
    ls_blocks(Bm, PI, ypos, D1, rho, A, DT, ET)
    if not ls_cholesky(A, invd):
        return False
    ls_forward(A, invd, Bm, Wt)
    ls_capacitance(Wt, PI, ET, D1, D2, qv, cap)
    return lu_factor(cap, piv, row)


@numba.njit(**JIT)
def ls_solve(Bm, PI, D1, D2, grad, p, ws):
    """The solve half of :func:`structured_direction`: ``p = -H⁻¹ grad`` with the
    Hessian :func:`ls_factor` factored (``PI``, ``D1``, ``D2``: the pieces it was
    factored with). False if ``p`` is not finite."""
    A, invd, Wt, zh, beta, ET, DT, qv, cap, rhs, xt, row, piv = ws
    ls_forward_h(A, invd, grad, zh)
    ls_rhs(Wt, zh, PI, ET, D1, D2, beta, rhs)
    lu_apply(cap, piv, rhs)
    return ls_back(A, invd, Bm, PI, ET, grad, rhs, beta, xt, p)


@numba.njit(**JIT)
def scores_value(Z, ypos, logw, alpha, ubar, order, PI, D1, D2, uout):
    """The data term ``Σ_i ψ_i(L_i(z_i))`` of Φ at the scores ``Z`` (s x q, ``z_i =
    s̃_i + B_i Cᵀ``), the same arithmetic as :func:`reduced_eval` point by point;
    ``uout`` gets the minimising ``u_i``. With ``order >= 1`` also fill ``PI`` (the
    ω-weighted softmax), ``D1 = ψ'`` and ``D2 = ψ''``."""
    s, q = Z.shape
    val = 0.0
    for i in range(s):
        mx = -np.inf
        for k in range(q):
            v = logw[k] + Z[i, k]
            if v > mx:
                mx = v
        tot = 0.0
        for k in range(q):
            e = math.exp(logw[k] + Z[i, k] - mx)
            PI[i, k] = e
            tot += e
        yp = ypos[i]
        L = mx + math.log(tot) - Z[i, yp]
        if L < 0.0:
            L = 0.0  # rounding: the y_i term alone gives d_i >= 1
        v, d1, d2, u = psi(L, ubar[i], alpha[i])
        uout[i] = u
        val += v
        if order >= 1:
            for k in range(q):
                PI[i, k] /= tot
            D1[i] = d1
            D2[i] = d2
    return val


@numba.njit(**JIT)
def ridge_value(Cm, rho, g):
    """The quadratic term ``Σ_k (1 + ρ_k)||c_k||² + 2ρ_k g_kᵀ c_k`` of Φ."""
    q, r = Cm.shape
    val = 0.0
    for k in range(q):
        c2 = 0.0
        cg = 0.0
        for a in range(r):
            c2 += Cm[k, a] * Cm[k, a]
            cg += Cm[k, a] * g[k, a]
        val += (1.0 + rho[k]) * c2 + 2.0 * rho[k] * cg
    return val


@numba.njit(**JIT)
def gradient(Bm, PI, D1, ypos, Cm, rho, g, grad):
    """``∇Φ = Σ_i ψ'_i (π_i - 1_{y_i}) ⊗ b_i + 2(1+ρ_k) c_k + 2ρ_k g_k`` into ``grad``
    (q x r) from the pieces :func:`scores_value` filled."""
    s, r = Bm.shape
    q = Cm.shape[0]
    for k in range(q):
        for a in range(r):
            grad[k, a] = 0.0
    for i in range(s):
        d1 = D1[i]
        yp = ypos[i]
        for k in range(q):
            f = d1 * (PI[i, k] - 1.0) if k == yp else d1 * PI[i, k]
            for a in range(r):
                grad[k, a] += f * Bm[i, a]
    for k in range(q):
        for a in range(r):
            grad[k, a] += 2.0 * (1.0 + rho[k]) * Cm[k, a] + 2.0 * rho[k] * g[k, a]


@numba.njit(**JIT)
def score_change(Bm, p, PT, ZP):
    """``ZP = B Pᵀ`` (s x q): the change of the scores along the direction ``p``
    (``p[k r + a]``); ``PT`` (r x q) is scratch."""
    s, r = Bm.shape
    q = ZP.shape[1]
    for k in range(q):
        for a in range(r):
            PT[a, k] = p[k * r + a]
    for i in range(s):
        for k in range(q):
            ZP[i, k] = 0.0
        for a in range(r):
            ba = Bm[i, a]
            for k in range(q):
                ZP[i, k] += ba * PT[a, k]


@numba.njit(**JIT)
def descends(gflat, p):
    """Whether ``p`` is a finite descent direction for the gradient ``gflat``."""
    slope = 0.0
    for j in range(p.shape[0]):
        slope += gflat[j] * p[j]
    return slope < 0.0 and math.isfinite(slope)


@numba.njit(**JIT)
def solve_reduced(Bm, S0, ypos, logw, alpha, ubar, rho, g, tol, max_newton, dense, Cm,
                  uout):
    """Damped Newton on Φ from ``Cm`` (updated in place); ``uout`` gets the ``u_i`` at
    the final point. Stops when ``||∇Φ||₂ ≤ 2 tol (1 + max|C|)``, which bounds the
    distance to the minimiser by ``tol (1 + max|C|)`` (Φ is 2-strongly convex), or when
    a Newton step is that small. The Newton system is solved by
    :func:`structured_direction` unless ``dense`` (or when that fails: then by a
    Cholesky factorisation of the dense Hessian). The scores ``Z = S̃ + B Cᵀ`` are
    carried along the iterations (``Z += τ B pᵀ`` with each accepted step), so a trial
    point of the line search costs one pass over the ``s q`` scores, and the accepted
    trial's softmax, ``ψ'``, ``ψ''`` and ``u`` serve the next iteration (one evaluation
    of Φ per iteration when the full step is taken). Once a step has cut ``||∇Φ||``
    at least ``1/_CHORD_RATE``-fold, the next direction reuses the factored Hessian of
    the iterate where it was last factored (a chord step, :func:`ls_solve` alone:
    a quarter of the flops of a fresh iteration), for as long as each step
    keeps that rate; the stopping rule is the same, so the point it returns is as
    close to the minimiser. Returns ``(newton_iterations, converged,
    dense_fallbacks, chord_iterations)`` (chord iterations count among the Newton
    iterations)."""
    s = Bm.shape[0]
    q = S0.shape[1]
    r = Bm.shape[1]
    nv = q * r
    PI = np.empty((s, q))
    D1 = np.empty(s)
    D2 = np.empty(s)
    grad = np.empty((q, r))
    H = np.empty((nv, nv)) if dense else np.empty((0, 0))
    p = np.empty(nv)
    gflat = np.empty(nv)
    Ct = np.empty((q, r))
    ut = np.empty(s)
    if nv == 0:
        reduced_eval(Cm, Bm, S0, ypos, logw, alpha, ubar, rho, g, 0, grad, H, uout, PI, D1, D2)
        return 0, True, 0, 0
    ws = direction_workspace(s, r, q)
    Z = np.empty((s, q))
    Zt = np.empty((s, q))
    ZP = np.empty((s, q))
    PT = np.empty((r, q))
    PIt = np.empty((s, q))  # the line search's evaluations (kept when accepted)
    D1t = np.empty(s)
    D2t = np.empty(s)
    PIf = np.empty((s, q))  # the pieces the factored Hessian was built from
    D1f = np.empty(s)
    D2f = np.empty(s)
    factored = False  # ws holds a factorisation of an earlier iterate's Hessian
    gprev = np.inf
    for i in range(s):
        for k in range(q):
            z = S0[i, k]
            for a in range(r):
                z += Bm[i, a] * Cm[k, a]
            Z[i, k] = z
    it = 0
    nfb = 0
    nchord = 0
    vt = 0.0
    while True:
        if it == 0:
            val = scores_value(Z, ypos, logw, alpha, ubar, 1, PI, D1, D2, uout)
            val += ridge_value(Cm, rho, g)
        else:
            val = vt  # Φ, π, ψ', ψ'' and u at the accepted trial point, already computed
        gradient(Bm, PI, D1, ypos, Cm, rho, g, grad)
        cmax = 0.0
        gn = 0.0
        for k in range(q):
            for a in range(r):
                gn += grad[k, a] * grad[k, a]
                if abs(Cm[k, a]) > cmax:
                    cmax = abs(Cm[k, a])
        gn = math.sqrt(gn)
        if gn <= 2.0 * tol * (1.0 + cmax):
            return it, True, nfb, nchord
        if it >= max_newton:
            return it, False, nfb, nchord
        it += 1
        # a chord step (the factored Hessian of an earlier iterate) while the last step
        # cut the gradient at least _CHORD_RATE-fold, else a fresh factorisation
        chord = factored and gn <= _CHORD_RATE * gprev
        gprev = gn
        for k in range(q):
            for a in range(r):
                gflat[k * r + a] = grad[k, a]
        ok = False
        if not dense and chord:
            ok = ls_solve(Bm, PIf, D1f, D2f, grad, p, ws) and descends(gflat, p)
            if ok:
                nchord += 1
        if not dense and not ok:
            for i in range(s):
                for k in range(q):
                    PIf[i, k] = PI[i, k]
                D1f[i] = D1[i]
                D2f[i] = D2[i]
            factored = ls_factor(Bm, PIf, ypos, D1f, D2f, rho, ws)
            ok = (factored and ls_solve(Bm, PIf, D1f, D2f, grad, p, ws)
                  and descends(gflat, p))
        if not ok:
            if not dense:
                nfb += 1
            if H.shape[0] != nv:
                H = np.empty((nv, nv))
            reduced_eval(Cm, Bm, S0, ypos, logw, alpha, ubar, rho, g, 2, grad, H, ut,
                         PI, D1, D2)
            for j in range(nv):
                gflat[j] = -gflat[j]
            if not chol_solve(H, gflat, p):
                return it, False, nfb, nchord
            for j in range(nv):
                gflat[j] = -gflat[j]
        slope = 0.0
        pmax = 0.0
        for j in range(nv):
            slope += gflat[j] * p[j]
            if abs(p[j]) > pmax:
                pmax = abs(p[j])
        if not slope < 0.0:
            return it, False, nfb, nchord
        score_change(Bm, p, PT, ZP)
        tau = 1.0
        noise = 1e-13 * (1.0 + abs(val))
        accepted = False
        for _ in range(60):
            for k in range(q):
                for a in range(r):
                    Ct[k, a] = Cm[k, a] + tau * p[k * r + a]
            for i in range(s):
                for k in range(q):
                    Zt[i, k] = Z[i, k] + tau * ZP[i, k]
            vt = scores_value(Zt, ypos, logw, alpha, ubar, 1, PIt, D1t, D2t, ut)
            vt += ridge_value(Ct, rho, g)
            if vt <= val + 1e-4 * tau * slope + noise:
                accepted = True
                break
            tau *= 0.5
        if not accepted:
            if chord:  # the old factorisation misled the search: factor afresh
                factored = False
                continue
            return it, False, nfb, nchord
        for k in range(q):
            for a in range(r):
                Cm[k, a] = Ct[k, a]
        for i in range(s):
            for k in range(q):
                Z[i, k] = Zt[i, k]
                PI[i, k] = PIt[i, k]
            uout[i] = ut[i]
            D1[i] = D1t[i]
            D2[i] = D2t[i]
        if tau * pmax <= tol * (1.0 + cmax):
            return it, True, nfb, nchord


@numba.njit(**JIT)
def span_basis(G):
    """An orthonormal basis ``V = X_Sᵀ Ur`` of the chunk's span from its Gram matrix
    ``G = X_S X_Sᵀ`` (s x s), with ``x_iᵀ V = B_i``; returns ``(r, B, Ur)``, ``B`` and
    ``Ur`` of shape (s, r).

    When the Cholesky factorisation ``G = L Lᵀ`` keeps, at every pivot, at least
    ``_CHOL_RTOL`` of that point's squared norm (no point nearly in the span of the
    ones before it), ``B = L`` and ``Ur = L⁻ᵀ`` (``r = s``; ``Urᵀ G Ur = I``). Otherwise
    (duplicate, collinear or empty rows) the eigendecomposition ``G = U Λ Uᵀ`` with
    eigenvalues below ``EIG_RTOL·λ_max`` dropped: ``B = U Λ^{1/2}``,
    ``Ur = U Λ^{-1/2}``. The reduced problem is the same in any orthonormal basis of
    the span (Φ depends on ``C`` through ``B Cᵀ``, ``||c_k||`` and ``g_kᵀ c_k``, all
    invariant when ``B`` and ``C`` turn by one orthogonal matrix), so both give the
    same step; the factorisation costs ``s³/6`` multiply-adds against the
    eigendecomposition's library call."""
    s = G.shape[0]
    L = G.copy()
    if chol_factor(L, _CHOL_RTOL):
        for j in range(s):
            for i in range(j):
                L[i, j] = 0.0
        Ur = np.zeros((s, s))  # L⁻ᵀ, upper triangular: Ur[a, b] = (L⁻¹)[b, a]
        for b in range(s):
            Ur[b, b] = 1.0 / L[b, b]
            for i in range(b + 1, s):
                v = 0.0
                for t in range(b, i):
                    v -= L[i, t] * Ur[b, t]
                Ur[b, i] = v / L[i, i]
        return s, L, Ur
    lam, U = np.linalg.eigh(G)
    lmax = lam[s - 1]
    r = 0
    for a in range(s):
        if lam[a] > EIG_RTOL * lmax and lmax > 0.0:
            r += 1
    Bm = np.empty((s, r))
    Ur = np.empty((s, r))  # U Λ^{-1/2}
    for b in range(r):
        ev = lam[s - r + b]
        sq = math.sqrt(ev)
        for a in range(s):
            Bm[a, b] = U[a, s - r + b] * sq
            Ur[a, b] = U[a, s - r + b] / sq
    return r, Bm, Ur


# ----------------------------------------------------------------------------------
# the epoch kernel (numba)
# ----------------------------------------------------------------------------------

@numba.njit(**JIT)
def touch_beta_kernel(order, y, K, n, m):
    """``β_k = 1 / P(k ∈ T_j)`` for the chunks of ``order`` (see :func:`touch_beta`)."""
    total = order.shape[0]
    stamp = np.full(K, -1, np.int64)
    base = 0.0
    extra = np.zeros(K)
    j = 0
    for start in range(0, total, n):
        stop = min(start + n, total)
        pj = (stop - start) / total
        ny = 0
        for t in range(start, stop):
            lab = y[order[t]]
            if stamp[lab] != j:
                stamp[lab] = j
                ny += 1
        free = K - ny
        cj = 0.0
        if free > 0:
            cj = min(m, free) / free
        base += pj * cj
        for t in range(start, stop):
            lab = y[order[t]]
            if stamp[lab] == j:
                extra[lab] += pj * (1.0 - cj)
                stamp[lab] = -2 - j  # count each label once per chunk
        j += 1
    beta = np.empty(K)
    for k in range(K):
        beta[k] = 1.0 / (base + extra[k])
    return beta


@numba.njit(**JIT)
def sample_classes(K, nfree, m, mark, stamp, out):
    """Fill ``out[:m']`` with a uniform random ``m'``-subset of the ``nfree`` classes
    whose ``mark`` differs from ``stamp``, ``m' = min(m, nfree)``; returns ``m'``.
    The chosen classes get ``mark = stamp``. Rejection sampling (O(m) expected) when
    at most half the classes are excluded, else a partial Fisher-Yates shuffle of the
    free classes (O(K), only when K is small compared with n + m)."""
    mm = min(m, nfree)
    if mm <= 0:
        return 0
    if 2 * mm <= nfree and 2 * nfree >= K:
        c = 0
        while c < mm:
            k = np.random.randint(0, K)
            if mark[k] != stamp:
                mark[k] = stamp
                out[c] = k
                c += 1
        return mm
    free = np.empty(nfree, np.int64)
    c = 0
    for k in range(K):
        if mark[k] != stamp:
            free[c] = k
            c += 1
    for c in range(mm):
        jx = np.random.randint(c, nfree)
        tmp = free[c]
        free[c] = free[jx]
        free[jx] = tmp
        out[c] = free[c]
        mark[free[c]] = stamp
    return mm


@numba.njit(**JIT)
def prefetch_row(indptr, indices, i, R, k):
    """Hint: the entries of row ``k`` of ``R`` at point ``i``'s columns are wanted
    soon (for writing)."""
    for p in range(indptr[i], indptr[i + 1]):
        prefetch_w(R, k, indices[p])


@numba.njit(**JIT)
def row_dot(indptr, indices, data, i, R, k):
    """The dot product of row ``i`` of the CSR ``X`` with row ``k`` of ``R``."""
    acc = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        acc += data[p] * R[k, indices[p]]
    return acc


@numba.njit(**JIT)
def chunk_labels(order, start, stop, y, pts, cnt, cls, ypos):
    """The chunk ``order[start:stop]``: its distinct points (first-appearance order)
    into ``pts`` with multiplicities ``cnt``, its distinct labels into ``cls`` and each
    point's label position into ``ypos``. Returns ``(s, ny)``, the numbers of points
    and labels."""
    s = 0
    for t in range(start, stop):
        i = order[t]
        found = False
        for a in range(s):
            if pts[a] == i:
                cnt[a] += 1
                found = True
                break
        if not found:
            pts[s] = i
            cnt[s] = 1
            s += 1
    ny = 0
    for a in range(s):
        lab = y[pts[a]]
        pos = -1
        for b in range(ny):
            if cls[b] == lab:
                pos = b
                break
        if pos < 0:
            cls[ny] = lab
            pos = ny
            ny += 1
        ypos[a] = pos
    return s, ny


@numba.njit(**JIT)
def epoch_kernel(indptr, indices, data, y, R, gamma, u, order, n, m, K, N, lr, mu,
                 beta, seed, tol, max_newton, dense, classes, replay):
    """One epoch of implicit-batch steps. ``R`` (K x D) with row scales ``gamma``
    holds ``W = gamma[:, None] * R``. ``classes`` (steps x m, ``-1`` padded) receives
    the sampled classes, or with ``replay`` supplies them. Returns ``(diverged_at,
    steps, newton_total, newton_max, unconverged, clamped, dense_fallbacks,
    chord_total)``."""
    np.random.seed(seed)
    D = R.shape[1]
    total = order.shape[0]
    mark = np.full(K, -1, np.int64)
    buf = np.zeros(D)
    pts = np.empty(n, np.int64)
    cnt = np.empty(n, np.int64)
    cls = np.empty(n + m, np.int64)
    sampled = np.empty(m, np.int64)
    ypos_buf = np.empty(n, np.int64)
    newton_total = 0
    chord_total = 0
    fallbacks = 0
    newton_max = 0
    unconverged = 0
    clamped = 0
    step = 0
    for start in range(0, total, n):
        stop = min(start + n, total)
        sj = stop - start
        s, ny = chunk_labels(order, start, stop, y, pts, cnt, cls, ypos_buf)
        ypos = ypos_buf[:s]
        if replay:
            mm = 0
            for c in range(m):
                if classes[step, c] >= 0:
                    sampled[mm] = classes[step, c]
                    mm += 1
        else:
            for b in range(ny):
                mark[cls[b]] = step
            mm = sample_classes(K, K - ny, m, mark, step, sampled)
            for c in range(m):
                classes[step, c] = sampled[c] if c < mm else -1
        for c in range(mm):
            cls[ny + c] = sampled[c]
        q = ny + mm
        logw = np.zeros(q)
        if mm > 0:
            lr_ = math.log((K - ny) / mm)
            for c in range(mm):
                logw[ny + c] = lr_
        # Gram matrix and scores
        G = np.empty((s, s))
        for a in range(s):
            i = pts[a]
            for p in range(indptr[i], indptr[i + 1]):
                buf[indices[p]] = data[p]
            for b in range(a + 1):
                i2 = pts[b]
                acc = 0.0
                for p in range(indptr[i2], indptr[i2 + 1]):
                    acc += data[p] * buf[indices[p]]
                G[a, b] = acc
                G[b, a] = acc
            for p in range(indptr[i], indptr[i + 1]):
                buf[indices[p]] = 0.0
        # scores: the s q row dots, each with the entries of the dot _AHEAD places
        # later prefetched (the loads of one dot wait on its sum, so without the hints
        # the misses of one dot barely overlap the next one's)
        S0 = np.empty((s, q))
        nd = s * q
        for t in range(min(_AHEAD, nd)):
            prefetch_row(indptr, indices, pts[t // q], R, cls[t % q])
        for a in range(s):
            for c in range(q):
                t = a * q + c + _AHEAD
                if t < nd:
                    prefetch_row(indptr, indices, pts[t // q], R, cls[t % q])
                k = cls[c]
                S0[a, c] = gamma[k] * row_dot(indptr, indices, data, pts[a], R, k)
        r, Bm, Ur = span_basis(G)
        g = np.zeros((q, r))
        rho = np.empty(q)
        for c in range(q):
            rho[c] = lr * mu * beta[cls[c]] / N
            for b in range(r):
                acc = 0.0
                for a in range(s):
                    acc += Ur[a, b] * S0[a, c]
                g[c, b] = acc
        alpha = np.empty(s)
        ubar = np.empty(s)
        for a in range(s):
            alpha[a] = lr * cnt[a] / sj
            ubar[a] = u[pts[a]]
        Cm = np.zeros((q, r))
        unew = np.empty(s)
        its, ok, nfb, nch = solve_reduced(Bm, S0, ypos, logw, alpha, ubar, rho, g, tol,
                                          max_newton, dense, Cm, unew)
        newton_total += its
        chord_total += nch
        fallbacks += nfb
        if its > newton_max:
            newton_max = its
        if not ok:
            unconverged += 1
        # apply
        finite = True
        for a in range(s):
            if not math.isfinite(unew[a]):
                finite = False
            if unew[a] == 0.0:
                clamped += 1
            u[pts[a]] = unew[a]
        coef = np.empty(s)
        for c in range(q):
            k = cls[c]
            shrink = 1.0 / (1.0 + rho[c])
            for a in range(s):
                acc = 0.0
                for b in range(r):
                    acc += Ur[a, b] * (Cm[c, b] + rho[c] * shrink * g[c, b])
                coef[a] = acc
            gk = gamma[k] * shrink
            if gk < _SCALE_FLOOR:
                for d in range(D):
                    R[k, d] *= gk
                gk = 1.0
            gamma[k] = gk
            for a in range(s):
                f = coef[a] / gk
                if not math.isfinite(f):
                    finite = False
                i = pts[a]
                for p in range(indptr[i], indptr[i + 1]):
                    R[k, indices[p]] += f * data[p]
        step += 1
        if not finite:
            return (step - 1, step, newton_total, newton_max, unconverged, clamped,
                    fallbacks, chord_total)
    return -1, step, newton_total, newton_max, unconverged, clamped, fallbacks, chord_total
