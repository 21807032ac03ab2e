"""Ctrl-C and SIGTERM during a run: delivered as `KeyboardInterrupt` at a safe point.

While a store write is in flight (`critical()`), a signal is held and delivered by the run at
its next `deliver_pending()` (after it has noted what the write stored), so a transaction is
never cut in half and the run's counts stay true. After the first signal, further ones are ignored
while the run saves what it has and records its status. SIGTERM (a batch system's time limit,
`docker stop`) is treated like Ctrl-C. Only the main thread installs handlers.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

_state = {"depth": 0, "pending": False, "stopping": False}


def _handler(signum, frame) -> None:
    if _state["stopping"]:
        return
    if _state["depth"]:
        _state["pending"] = True
        return
    _state["stopping"] = True
    raise KeyboardInterrupt


@contextmanager
def critical() -> Iterator[None]:
    """A section a signal must not cut (a store transaction); a signal that arrives in it is
    held until `deliver_pending`."""
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1


def deliver_pending() -> None:
    """Raise the KeyboardInterrupt held during a critical section, once the caller's own
    bookkeeping of that section's effect is done."""
    if _state["pending"] and not _state["depth"] and not _state["stopping"]:
        _state["pending"] = False
        _state["stopping"] = True
        raise KeyboardInterrupt


@contextmanager
def graceful() -> Iterator[None]:
    """Install the handlers for the duration of a run (no-op outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    _state.update(depth=0, pending=False, stopping=False)
    for s in old:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        _state.update(depth=0, pending=False, stopping=False)
