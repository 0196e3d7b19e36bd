"""One shared set of numba JIT flags for every kernel of the project
(``numba.njit(**JIT)`` for serial kernels, ``numba.njit(**PJIT)`` for kernels
parallelised with ``numba.prange``)."""
from __future__ import annotations

#: flags for serial kernels
JIT = dict(nogil=True, cache=True, fastmath=False, boundscheck=False)
#: flags for kernels parallelised with ``numba.prange``
PJIT = dict(JIT, parallel=True)
