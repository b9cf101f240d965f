"""Graceful stop on SIGTERM/SIGINT for the sync workers.

The first signal asks the worker to stop (finish the messages in hand,
lease no more); a second SIGINT goes to the previous handler (usually
``KeyboardInterrupt``), so a stuck worker can still be interrupted. Signal
handlers can only be installed from the main thread; elsewhere this does
nothing and the caller stops the worker itself.
"""

from __future__ import annotations

import signal
import threading
from typing import Any, Callable, Dict

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(BaseException):
    """Raised by the handler into a blocking lease call so that a stop does
    not wait for the server's long poll to end (a ``BaseException`` so no
    ``except Exception`` on the way swallows it)."""


def install(on_stop: Callable[[], None], interruptible: Callable[[], bool]) -> Callable[[], None]:
    """Installs the handlers; returns the function that restores the previous ones."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: Dict[int, Any] = {}
    stopping = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        if stopping.is_set():
            prev = previous.get(signum)
            if callable(prev):
                prev(signum, frame)
            return
        stopping.set()
        on_stop()
        if interruptible():
            raise Interrupted()

    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, handler)

    def restore() -> None:
        for sig, prev in previous.items():
            signal.signal(sig, prev)

    return restore
