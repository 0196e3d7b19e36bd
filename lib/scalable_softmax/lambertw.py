"""The principal branch of the Lambert W function for numba kernels: the public names of
:mod:`scalable_softmax.kernels.lambertw`, where the numba code lives (re-exported
here, the module's former home).

>>> from scalable_softmax.lambertw import lambertw0
>>> round(lambertw0(1.0), 10)        # the omega constant
0.5671432904
"""
from __future__ import annotations

from scalable_softmax.kernels.lambertw import (
    lambertw0,
    lambertw0_array,
    lambertw_exp,
    lambertw_exp_array,
)

__all__ = ["lambertw0", "lambertw_exp", "lambertw0_array", "lambertw_exp_array"]
