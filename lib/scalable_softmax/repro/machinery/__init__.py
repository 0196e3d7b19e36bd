"""What runs, checks and publishes the notebooks, whichever paper they serve: the
runner (papermill, the record), staged outputs, the figure style, cached training runs,
the check of a rerun against the record, the BLAS kernel, the numbers the pages quote
and the HTML site. The map of the whole collection is :mod:`scalable_softmax.repro`'s
docstring.
"""
