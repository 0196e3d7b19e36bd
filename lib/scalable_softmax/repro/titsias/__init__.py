"""The experiments of Titsias (2016), "One-vs-Each approximation to softmax": what
notebooks 08 to 10 compute (non-parametric estimation, the 2-D toy problem, Table 2
and Figure 3). The map of the whole collection is :mod:`scalable_softmax.repro`'s
docstring.
"""
