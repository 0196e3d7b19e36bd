"""Unbiased scalable softmax optimisation (Fagan & Iyengar 2018) and the
One-vs-Each approximation (Titsias 2016): data, reference math and fast kernels."""

from scalable_softmax._version import __version__

__all__ = ["SoftmaxSGDClassifier", "__version__"]


def __getattr__(name):
    # the scikit-learn estimator is imported on first use, so that the library itself
    # does not need scikit-learn (an optional extra)
    if name == "SoftmaxSGDClassifier":
        from scalable_softmax.estimator import SoftmaxSGDClassifier
        return SoftmaxSGDClassifier
    raise AttributeError(f"module 'scalable_softmax' has no attribute {name!r}")
