"""``SIGTERM`` and ``SIGHUP`` as exceptions, so that ``finally`` blocks run.

Python's default action for ``SIGTERM`` and ``SIGHUP`` ends the process at once:
no ``finally`` block runs, so temporary files stay and pools are not stopped. Inside
:func:`terminate_raises` they raise :class:`SystemExit` (status 128 + the signal
number, as a shell reports it) in the main thread instead.
"""
from __future__ import annotations

import contextlib
import signal
import threading

__all__ = ["terminate_raises"]


def _handler(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def terminate_raises():
    """While inside, ``SIGTERM`` and ``SIGHUP`` raise ``SystemExit(128 + signum)``.

    Only in the main thread (elsewhere Python cannot set handlers), and only for a
    signal whose handler is the default one: a handler someone else installed is left
    alone. The previous handlers are restored on the way out.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {}
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, None):
            old[sig] = signal.signal(sig, _handler)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
