"""Tests of the numba Lambert W (scalable_softmax.lambertw).

Reference: scipy.special.lambertw where its argument is finite; beyond, the defining
identity ``w + log w = z`` of ``w = W0(e^z)``.
"""
import math

import numpy as np
import pytest
from scipy.special import lambertw as scipy_lambertw

from scalable_softmax.lambertw import lambertw0, lambertw0_array, lambertw_exp, lambertw_exp_array

RTOL = 1e-15          # the module's claim: ~1 ulp; checked with margin below 1e-15
rng = np.random.default_rng(20180101)


def _scipy_w(x):
    return scipy_lambertw(x).real


def test_lambertw_exp_matches_scipy_where_finite():
    z = np.concatenate([
        rng.uniform(-700.0, 700.0, 4000),
        rng.uniform(-45.0, 30.0, 4000),
        np.linspace(-6.0, 26.0, 3201),                 # every polynomial piece
        np.arange(-4.0, 25.0, 2.0)[:, None] + np.array([-1e-12, 0.0, 1e-12]),  # joins
    ], axis=None)
    w = lambertw_exp_array(z)
    ref = _scipy_w(np.exp(z))
    assert np.all(np.isfinite(w)) and np.all(w > 0)
    np.testing.assert_allclose(w, ref, rtol=RTOL, atol=0)


def test_lambertw_exp_log_domain_far_beyond():
    # e^z overflows: check w + log w = z (relative error of w = residual / (1 + w))
    z = np.concatenate([rng.uniform(710.0, 1e4, 500), 10.0 ** rng.uniform(4, 300, 500),
                        [709.8, 1e300, 1.7e308]])
    w = lambertw_exp_array(z)
    assert np.all(np.isfinite(w))
    resid = (w - z) + np.log(w)
    assert np.all(np.abs(resid) <= 4e-16 * z), np.max(np.abs(resid) / z)
    # asymptotics: w = z - log z + o(1)
    assert np.all(np.abs(w - (z - np.log(z))) <= 1.0 + 1e-15 * z)


def test_lambertw_exp_very_negative():
    # W0(e^z) = e^z - e^{2z} + ... : equals e^z (the C library's, as math.exp) to the
    # last bit below z = -40, through the subnormal range, and 0 once e^z underflows.
    # (NumPy's vectorised np.exp may differ from libm by 1 ulp on AVX-512 machines.)
    z = np.concatenate([rng.uniform(-744.0, -40.0, 1000), [-745.0, -745.1, -746.0,
                                                          -1e4, -1e300]])
    w = lambertw_exp_array(z)
    np.testing.assert_array_equal(w, np.array([math.exp(v) for v in z]))
    np.testing.assert_array_max_ulp(w, np.exp(z), maxulp=1)
    normal = w > 1e-300
    resid = w[normal] + np.log(w[normal]) - z[normal]
    assert np.all(np.abs(resid) <= 4e-16 * np.abs(z[normal]))
    assert lambertw_exp(-1e300) == 0.0


def test_lambertw_exp_special_values():
    assert lambertw_exp(math.inf) == math.inf
    assert lambertw_exp(-math.inf) == 0.0
    assert math.isnan(lambertw_exp(math.nan))
    assert lambertw_exp(1.0) == pytest.approx(1.0, rel=1e-15)   # W0(e) = 1
    assert lambertw_exp(0.0) == pytest.approx(0.5671432904097838, rel=1e-15)


def test_lambertw_exp_monotone_and_smooth_across_pieces():
    z = np.linspace(-8.0, 30.0, 200001)
    w = lambertw_exp_array(z)
    assert np.all(np.diff(w) > 0)
    # derivative dw/dz = w / (1 + w): finite differences agree everywhere
    fd = np.diff(w) / np.diff(z)
    mid = 0.5 * (w[1:] + w[:-1])
    np.testing.assert_allclose(fd, mid / (1 + mid), rtol=1e-6)


def test_lambertw0_positive_matches_scipy():
    x = np.concatenate([10.0 ** rng.uniform(-320, 308, 3000), rng.uniform(0, 10, 2000),
                        [0.0, 1e-8, 1e-300, 5e-324, np.exp(-4.0), 1.7976931348623157e308]])
    w = lambertw0_array(x)
    ref = _scipy_w(x)
    np.testing.assert_allclose(w, ref, rtol=RTOL, atol=0)


def test_lambertw0_negative_matches_scipy():
    # W0 is ill-conditioned at the branch point -1/e (condition number 1/(1+w)):
    # tolerance scaled accordingly
    x = np.concatenate([-np.exp(-1.0) * rng.uniform(0, 1, 3000),
                        -np.exp(-1.0) * (1 - 10.0 ** rng.uniform(-15, 0, 1000)),
                        [-1e-300, -1e-9, -0.3]])
    w = lambertw0_array(x)
    ref = _scipy_w(x)
    assert np.all(w >= -1.0) and np.all(w <= 0.0)
    tol = RTOL * np.abs(ref) / (1.0 + ref) + 1e-16 / (1.0 + ref) ** 2
    assert np.all(np.abs(w - ref) <= tol), np.max(np.abs(w - ref) / tol)
    # defining identity
    np.testing.assert_allclose(w * np.exp(w), x, rtol=1e-14, atol=1e-300)


def test_lambertw0_special_values():
    assert lambertw0(-np.exp(-1.0)) == pytest.approx(-1.0, abs=1e-7)
    assert math.isnan(lambertw0(-0.37))           # below -1/e
    assert math.isnan(lambertw0(-0.3678794411714424))
    assert math.isnan(lambertw0(math.nan))
    assert lambertw0(math.inf) == math.inf
    assert lambertw0(0.0) == 0.0
    assert lambertw0(math.e) == pytest.approx(1.0, rel=1e-15)


def test_lambertw0_agrees_with_lambertw_exp():
    z = rng.uniform(-700, 700, 2000)
    np.testing.assert_allclose(lambertw0_array(np.exp(z)), lambertw_exp_array(z),
                               rtol=2e-15)
