"""The sampled-softmax kernels' cache hints and fused dot products
(:mod:`scalable_softmax.methods.sampled`); all callable from numba code only.

``hint_row(V, j, indices, q0, q1)``
    hint the lines of row ``j`` of ``V`` at the columns ``indices[q0:q1]``.
``hint_x(indptr, indices, data, i)``
    hint the lines of row ``i`` of ``X`` (its indices and values) for reading.
``hint_ahead(indptr, indices, data, order, t, pf, N)``
    hint the CSR lines of datapoint ``order[t + 2 pf]`` and the ``indptr`` entry of
    ``order[t + 3 pf]``.
``dot3(indices, data, p0, p1, V, j, k, l, q0, q1, hj, hk, hl)``
    the dot products of rows ``j``, ``k``, ``l`` of ``V`` with the non-zeros
    ``p0..p1``, hinting rows ``hj``, ``hk``, ``hl`` at ``indices[q0:q1]`` meanwhile.
"""
from scalable_softmax.methods.sampled import _dot3 as dot3
from scalable_softmax.methods.sampled import _hint_ahead as hint_ahead
from scalable_softmax.methods.sampled import _hint_row as hint_row
from scalable_softmax.methods.sampled import _hint_x as hint_x

__all__ = ["dot3", "hint_ahead", "hint_row", "hint_x"]
