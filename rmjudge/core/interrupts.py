"""Ctrl-C and SIGTERM during a run: delivered as `KeyboardInterrupt` at a safe point.

While a store write is in flight (`critical()`), a signal is held and delivered by the run at
its next `deliver_pending()` (after it has noted what the write stored), so a transaction is
never cut in half and the run's counts stay true. After the first signal, further ones are ignored
while the run saves what it has and records its status. SIGTERM (a batch system's time limit,
`docker stop`) is treated like Ctrl-C. Only the main thread installs handlers.

Python runs a signal handler in whatever Python code the main thread executes next, and while
llama.cpp loads a model or creates a context that is its log callback (a ctypes callback,
`c_callback`). An exception raised there is printed ("Exception ignored on calling ctypes
callback function") and dropped by ctypes, so the Ctrl-C would be lost, and after it every
later one too (the run would think it is already stopping). A C extension that is being
imported (DuckDB's) turns it into an ImportError. A signal that arrives inside a C callback or
an import is therefore sent again a moment later, until it lands in ordinary Python code.
DuckDB checks for signals while a query runs and turns the KeyboardInterrupt into
`RuntimeError("Query interrupted")`, so a signal that arrives during a call through
`held_calls(con)` is held and delivered as the call returns (`is_interrupt` recognises the
error of a query run without it).
`graceful()` nests (the CLI holds it from before the model loads; `score()` holds it too).
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

_state = {"depth": 0, "pending": False, "stopping": False, "installed": False,
          "deferred_since": None, "native": 0, "native_pending": False}
_C_CALLBACKS: set = set()  # code objects of the Python functions C code calls back
REDELIVER_SECONDS = 0.05
IMPORT_WAIT_SECONDS = 2.0


def c_callback(func: Callable) -> Callable:
    """Mark `func` as called from C (a ctypes callback, e.g. llama.cpp's log callback): a
    signal that arrives while it runs is delivered after it returns, not inside it, where
    ctypes would drop the KeyboardInterrupt. Returns `func`."""
    _C_CALLBACKS.add(func.__code__)
    return func


def _unsafe_to_raise(frame) -> bool:
    """Whether a KeyboardInterrupt raised in `frame` would be lost or turned into another
    error: inside a C callback (ctypes drops it), or inside an import (a C extension's
    initialization, e.g. DuckDB's, turns it into an ImportError). An import is waited for at
    most IMPORT_WAIT_SECONDS, in case a whole program runs inside one (`import my_job`)."""
    in_import = False
    while frame is not None:
        code = frame.f_code
        if code in _C_CALLBACKS:
            return True
        in_import = in_import or code.co_filename.startswith("<frozen importlib")
        frame = frame.f_back
    if not in_import:
        return False
    now = time.monotonic()
    since = _state["deferred_since"] = _state["deferred_since"] or now
    return now - since < IMPORT_WAIT_SECONDS


def _redeliver(signum: int) -> None:
    """Deliver `signum` to the main thread again shortly (from a timer thread), unless the
    handlers are gone by then (the run ended)."""
    import _thread

    def again() -> None:
        if _state["installed"]:
            _thread.interrupt_main(signum)

    t = threading.Timer(REDELIVER_SECONDS, again)
    t.daemon = True
    t.start()


def _handler(signum, frame) -> None:
    if _state["stopping"]:
        return
    if _unsafe_to_raise(frame):
        _redeliver(signum)
        return
    _state["deferred_since"] = None
    if _state["depth"]:
        _state["pending"] = True
        return
    if _state["native"]:
        _state["native_pending"] = True
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


@contextmanager
def native_call() -> Iterator[None]:
    """A call into C code that would turn a KeyboardInterrupt raised inside it into another
    error (a DuckDB query): a signal that arrives during it is delivered as it returns (or
    held for `deliver_pending` inside a `critical()` section). Signals reach the main thread
    only, so a call in another thread is not held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _state["native"] += 1
    try:
        yield
    finally:  # a call that failed leaves a held signal to the next `deliver_pending`
        _state["native"] -= 1
    if _state["native_pending"] and not _state["native"]:
        _state["native_pending"] = False
        if _state["depth"]:
            _state["pending"] = True
        elif _state["installed"] and not _state["stopping"]:
            _state["stopping"] = True
            raise KeyboardInterrupt


class held_calls:
    """`obj` (a DuckDB connection) whose method calls run as `native_call()`s; a call that
    returns `obj` itself (DuckDB's `execute`) returns this wrapper, so `.fetchall()` after it is
    held too."""

    __slots__ = ("_obj",)

    def __init__(self, obj) -> None:
        self._obj = obj

    def __getattr__(self, name: str):
        attr = getattr(self._obj, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            with native_call():
                result = attr(*args, **kwargs)
            return self if result is self._obj else result

        return call

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._obj.close()


def is_query_interrupt(exc: BaseException) -> bool:
    """Whether `exc` is DuckDB's form of a Ctrl-C that arrived during a query (DuckDB 1.x:
    `duckdb.InterruptException`; 2.x: `RuntimeError("Query interrupted")`)."""
    return (type(exc).__name__ == "InterruptException"
            or (type(exc) is RuntimeError and str(exc) == "Query interrupted"))


def is_interrupt(exc: BaseException) -> bool:
    """Whether `exc` is a Ctrl-C: a KeyboardInterrupt, or DuckDB's form of one."""
    return isinstance(exc, KeyboardInterrupt) or is_query_interrupt(exc)


def deliver_pending() -> None:
    """Raise the KeyboardInterrupt held during a critical section, once the caller's own
    bookkeeping of that section's effect is done."""
    if _state["native_pending"] and not _state["native"]:  # held by a call that failed
        _state["native_pending"], _state["pending"] = False, True
    if _state["pending"] and not _state["depth"] and not _state["stopping"]:
        _state["pending"] = False
        _state["stopping"] = True
        raise KeyboardInterrupt


@contextmanager
def graceful() -> Iterator[None]:
    """Install the handlers for the duration of a run (no-op outside the main thread, and
    inside an outer `graceful()`, whose handlers and state stay)."""
    if threading.current_thread() is not threading.main_thread() or _state["installed"]:
        yield
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    _state.update(depth=0, pending=False, stopping=False, installed=True, deferred_since=None,
                  native=0, native_pending=False)
    for s in old:
        signal.signal(s, _handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        _state.update(depth=0, pending=False, stopping=False, installed=False,
                      deferred_since=None, native=0, native_pending=False)
