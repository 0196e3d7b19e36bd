"""The package version (one place; ``scalable_softmax.__version__`` re-exports it)."""

__version__ = "0.1.0"
