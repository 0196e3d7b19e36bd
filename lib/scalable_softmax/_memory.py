"""How much memory the machine has available, and the one check of a model's size
against it (``fit`` before it allocates ``W``, :meth:`FitResult.load` before it reads a
saved model): an impossible size is an error that says how many bytes and why, not
numpy's ``MemoryError`` (or the kernel's out-of-memory killer) half-way through."""
from __future__ import annotations

import os

__all__ = ["available_bytes", "check_fits_in_memory", "ModelTooLargeError", "gib"]


class ModelTooLargeError(MemoryError, ValueError):
    """A model (or a saved model's arrays) would not fit in the machine's available
    memory; raised before anything is allocated. A ``ValueError`` too, so that the
    callers that catch bad arguments catch it."""


def available_bytes() -> int | None:
    """The memory the machine can give this process now: ``MemAvailable`` of
    ``/proc/meminfo`` (Linux), else the free physical pages (``os.sysconf``), else
    None (unknown: no check is made)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


def gib(n: int) -> str:
    """``n`` bytes in words: ``"2.0 GiB (2,147,483,648 bytes)"``."""
    return f"{n / 2**30:,.1f} GiB ({n:,} bytes)"


def check_fits_in_memory(need: int, what: str, fix: str) -> None:
    """Raise :class:`ModelTooLargeError` when ``need`` bytes exceed the available
    memory (:func:`available_bytes`); ``what`` says what needs them and ``fix`` what
    to do. Nothing is checked when the available memory is unknown."""
    have = available_bytes()
    if have is not None and need > have:
        raise ModelTooLargeError(f"{what} needs {gib(need)} but this machine has "
                                 f"{gib(have)} of memory available; {fix}")
