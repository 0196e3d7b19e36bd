"""The float32 scoring kernels of :func:`scalable_softmax.evaluate.evaluate`
(:mod:`scalable_softmax.evaluate`), each documented where it is defined.

``per_row(X, y, W, *, rows=None, subsample=None, seed=0, block_rows=None, threads=None,
tile=None, precision=None)``
    the per-row log-loss, error and defective metric ``(nll, err, dfc, rows)`` that
    ``evaluate`` averages (plain Python; validates its inputs as ``evaluate`` does).
``tile_width(K, D, tile=None, itemsize=8)``
    the number of classes scored per tile of ``W``.
``transpose32(W, k0, kc, T)``
    ``T[:, :kc] = float32(W[k0:k0+kc].T)`` in parallel.
``scores32``, ``vexp32_sum``, ``max32``, ``sum32to64``
    the float32 inner kernels (scores of one row against a tile, exponentials and their
    sum, maximum, float64 sum); numba code.
``JIT32``, ``JIT32R``
    the numba options they are compiled with (``fastmath`` contraction; with
    reassociation for ``sum32to64``).
"""
from scalable_softmax.evaluate import JIT32, JIT32R
from scalable_softmax.evaluate import _max32 as max32
from scalable_softmax.evaluate import _per_row as per_row
from scalable_softmax.evaluate import _scores32 as scores32
from scalable_softmax.evaluate import _sum32to64 as sum32to64
from scalable_softmax.evaluate import _tile_width as tile_width
from scalable_softmax.evaluate import _transpose32 as transpose32
from scalable_softmax.evaluate import _vexp32_sum as vexp32_sum

__all__ = ["per_row", "tile_width", "transpose32", "scores32", "vexp32_sum", "max32",
           "sum32to64", "JIT32", "JIT32R"]
