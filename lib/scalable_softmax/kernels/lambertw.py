"""Principal branch of the Lambert W function, for numba kernels.

``W0(x)`` is the solution ``w >= -1`` of ``w e^w = x`` (``x >= -1/e``). The implicit
SGD step (docs/math.md section 4) needs ``W0(e^z)`` for arguments ``z`` far beyond the
range of ``exp`` (``z`` up to ~1000 in practice, any real in principle), so
:func:`lambertw_exp` evaluates it in the log domain, as the root of
``w + log w = z``, and never forms ``e^z`` when it would overflow.

All functions are numba ``njit`` kernels compiled with the project's shared flags;
they are callable from Python on scalars, and from other kernels. (The module was
``scalable_softmax.lambertw``, which still re-exports these names.)

Accuracy: about 1 ulp (relative error ~1e-16) on the whole real line for
:func:`lambertw_exp`, and for :func:`lambertw0` away from the branch point
``-1/e`` (where W0 is ill-conditioned).

Method: the Taylor series at 0 for small arguments; otherwise a cheap starting
value (a piecewise polynomial in ``z = log x``, the asymptotic expansion
``z - log z + log z / z + ...``, or the branch point series) refined by the
fourth-order iteration of Fritsch, Shafer and Crowley (1973), written so that it
only needs ``log(x / w) = z - log w``. One refinement step suffices for
:func:`lambertw_exp` (about 25 ns).

Examples
--------
>>> from scalable_softmax.kernels.lambertw import lambertw0, lambertw_exp
>>> round(lambertw0(1.0), 10)        # the omega constant
0.5671432904
>>> w = lambertw_exp(1000.0)         # W0(e^1000); e^1000 overflows
>>> abs(w + math.log(w) - 1000.0) < 1e-12
True
"""
from __future__ import annotations

import math

import numba
import numpy as np

from scalable_softmax.kernels.common import JIT, inner

__all__ = ["lambertw0", "lambertw_exp", "lambertw0_array", "lambertw_exp_array"]

_INV_E = math.exp(-1.0)
# 1/e as an unevaluated sum hi + lo, so that x + 1/e is exact near the branch point
_INV_E_HI = 0.36787944117144233
_INV_E_LO = -1.2428753672788363e-17
# below this, W0(e^z) = e^z - e^{2z} + ... rounds to e^z(1 - e^z) exactly
_Z_SERIES = -40.0
# piecewise polynomial starting values for W0(e^z) on [_POLY_LO, _POLY_HI), pieces of
# width 2, degree 7 in the local variable t = z - centre (fitted once at import by
# Chebyshev interpolation of scipy's lambertw; used only as starting values)
_POLY_LO = -4.0
_POLY_HI = 24.0
_X_SERIES = math.exp(_POLY_LO)


def _fit_start_polynomials():
    from numpy.polynomial import chebyshev as C
    from scipy.special import lambertw as _scipy_lambertw
    n = int((_POLY_HI - _POLY_LO) / 2)
    coef = np.empty((n, 8))
    for q in range(n):
        centre = _POLY_LO + 2.0 * q + 1.0
        cheb = C.chebinterpolate(
            lambda t, centre=centre: _scipy_lambertw(np.exp(centre + t)).real, 7)
        coef[q] = C.cheb2poly(cheb)
    return coef


_POLY_COEF = _fit_start_polynomials()
# Taylor coefficients of W0(t)/t: (-n)^(n-1)/n! for n = 1..13
_SERIES_COEF = np.array([(-n) ** (n - 1) / math.factorial(n) for n in range(1, 14)])
# above this, the FSC iteration's products (1+w)^2 could overflow: use Newton
_W_HUGE = 1e100


@inner(**JIT)
def _fsc_step(w, lx):
    """One Fritsch-Shafer-Crowley step for ``w e^w = x`` given ``lx = log(x)``
    (or, for negative ``x`` and ``w``, ``log(x / w) + log w``: only the residual
    ``r = log(x / w) - w`` is used). Returns the new ``w`` and the relative change."""
    r = lx - math.log(w) - w
    w1 = 1.0 + w
    q = 2.0 * w1 * (w1 + (2.0 / 3.0) * r)
    eps = (r * (q - r)) / (w1 * (q - 2.0 * r))
    return w * (1.0 + eps), eps


@numba.njit(**JIT)
def _fsc_step_x(w, x):
    """One FSC step for ``w e^w = x`` with the residual ``log(x/w) - w`` computed
    from the ratio ``x / w`` (accurate for small and for negative ``x``)."""
    r = math.log(x / w) - w
    w1 = 1.0 + w
    q = 2.0 * w1 * (w1 + (2.0 / 3.0) * r)
    eps = r / w1 * (q - r) / (q - 2.0 * r)
    return w * (1.0 + eps), eps


@numba.njit(**JIT)
def _w0_negative(x):
    """W0(x) for ``-1/e <= x < 0``."""
    p2 = 2.0 * math.e * ((x + _INV_E_HI) + _INV_E_LO)
    if p2 <= 0.0:
        return -1.0
    p = math.sqrt(p2)
    if p < 0.3:
        # series at the branch point (Corless et al. 1996), error O(p^6) ~ 1e-4 * p
        w = -1.0 + p * (1.0 + p * (-1.0 / 3.0 + p * (11.0 / 72.0 + p * (-43.0 / 540.0
                                                     + p * (769.0 / 17280.0)))))
        if p < 1e-3:
            return w
    else:
        # series at 0 as a start: x in (-0.33, 0), refined below
        w = x * (1.0 - x * (1.0 - x * (1.5 - x * (8.0 / 3.0))))
        if x > -1e-8:
            return w
        if w <= -0.99:
            w = -1.0 + p - p * p / 3.0
    for _ in range(6):
        w, eps = _fsc_step_x(w, x)
        if abs(eps) < 1e-5:
            break
    return w


@numba.njit(**JIT)
def lambertw0(x):
    """Principal branch ``W0(x)`` of the Lambert W function for real ``x``.

    Parameters
    ----------
    x : float
        Argument, ``x >= -1/e``. ``+inf`` gives ``+inf``.

    Returns
    -------
    float
        ``w >= -1`` with ``w e^w = x``; NaN for ``x < -1/e`` or NaN ``x``.
    """
    if x != x:
        return np.nan
    if x >= 0.0:
        if x == np.inf:
            return np.inf
        if x <= _X_SERIES:
            return _series_small(x)
        # start in the log domain, refine from the exact ratio x / w
        w = _lambertw_exp_start(math.log(x))
        if w > _W_HUGE:
            return lambertw_exp(math.log(x))
        for _ in range(3):
            w, eps = _fsc_step_x(w, x)
            if abs(eps) < 1e-5:
                break
        return w
    if (x + _INV_E_HI) + _INV_E_LO < -6e-17:
        # below -1/e by more than one rounding unit (float(-1/e) itself maps to -1)
        return np.nan
    return _w0_negative(x)


@inner(**JIT)
def _lambertw_exp_start(z):
    """Starting value for ``W0(e^z)``, ``-4 <= z``: a piecewise degree-7 polynomial
    on ``[-4, 24)`` (relative error < 3e-7), the asymptotic expansion beyond."""
    if z < _POLY_HI:
        q = int((z - _POLY_LO) * 0.5)
        t = z - (_POLY_LO + 2.0 * q + 1.0)
        c = _POLY_COEF[q]
        return c[0] + t * (c[1] + t * (c[2] + t * (c[3] + t * (c[4] + t * (c[5] + t * (
            c[6] + t * c[7]))))))
    L1 = z
    L2 = math.log(z)
    i1 = 1.0 / L1
    # de Bruijn / Corless et al. (1996) eq. 4.19, five terms: relative error < 1e-6
    return (L1 - L2 + L2 * i1 * (1.0 + i1 * (0.5 * (L2 - 2.0) + i1 * (
        (6.0 - 9.0 * L2 + 2.0 * L2 * L2) / 6.0 + i1 * (
            (-12.0 + 36.0 * L2 - 22.0 * L2 * L2 + 3.0 * L2 * L2 * L2) / 12.0)))))


@inner(**JIT)
def _series_small(t):
    """``W0(t)`` for ``0 <= t <= e^-4``: Taylor series to ``t^13`` (relative
    truncation error < 3e-19)."""
    c = _SERIES_COEF
    acc = c[12]
    for n in range(11, -1, -1):
        acc = c[n] + t * acc
    return t * acc


@inner(**JIT)
def lambertw_exp(z):
    """``W0(e^z)`` for any real ``z``, computed without forming ``e^z`` when it
    would overflow.

    For ``z < -4`` this is the Taylor series of ``W0`` in ``x = e^z`` (accurate
    relative to ``x``, down to the underflow of ``e^z`` near ``z = -745``, below
    which the result is 0). For ``z >= -4`` it is the root of ``w + log w = z``:
    a starting value (piecewise polynomial up to ``z = 24``, the asymptotic
    expansion ``z - log z + log z / z + ...`` beyond) refined by one
    Fritsch-Shafer-Crowley step (fourth order) in the log domain; for ``w > 1e100``
    by a Newton step written so that nothing overflows.

    Parameters
    ----------
    z : float
        Any real number; ``+inf`` gives ``+inf``, ``-inf`` gives 0.

    Returns
    -------
    float
        ``w > 0`` with ``w + log w = z`` (``w = 0`` when ``e^z`` underflows).
    """
    if z < _POLY_LO:
        if z < _Z_SERIES:
            t = math.exp(z)  # 0 below z ~ -745.13
            return t - t * t
        return _series_small(math.exp(z))
    if z != z:
        return np.nan
    if z == np.inf:
        return np.inf
    w = _lambertw_exp_start(z)
    if w > _W_HUGE:
        return w - (w - z + math.log(w)) / (1.0 + 1.0 / w)
    w, eps = _fsc_step(w, z)
    return w


@numba.njit(**JIT)
def lambertw0_array(x):
    """:func:`lambertw0` applied elementwise to a 1-D float64 array."""
    out = np.empty(x.shape[0])
    for j in range(x.shape[0]):
        out[j] = lambertw0(x[j])
    return out


@numba.njit(**JIT)
def lambertw_exp_array(z):
    """:func:`lambertw_exp` applied elementwise to a 1-D float64 array."""
    out = np.empty(z.shape[0])
    for j in range(z.shape[0]):
        out[j] = lambertw_exp(z[j])
    return out
