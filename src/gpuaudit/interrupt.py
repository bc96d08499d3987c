"""Ctrl-C that is never lost.

Python turns SIGINT into a KeyboardInterrupt wherever the main thread happens to be. Most of
the time that is what the long commands want (the runner keeps what was measured), but a
KeyboardInterrupt raised inside a library's import or inside code that catches everything is
swallowed there, and the work goes on as if nothing had been pressed. The handler here raises
it as Python's does and also remembers it: `check()`, called by the runner between steps,
raises it again until somebody has dealt with it (`clear()`), so a swallowed Ctrl-C costs at
most one step. Where raising it would lose it or turn it into another error (inside an import,
a `__del__`), the handler holds it back and sends it again every RETRY_S until it lands
outside. `shielded()` defers Ctrl-C while what finished is
being saved.

Layer 0: no gpuaudit imports; the CLI installs the handler, the runner checks it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _State:
    pending = False  # a Ctrl-C came and nobody has cleared it yet
    delivered = True  # the last Ctrl-C was raised as KeyboardInterrupt
    shield = 0  # > 0 while a shielded block runs: Ctrl-C is remembered, not raised


_state = _State()


def _unsafe(frame: Any) -> bool:
    """Whether an exception raised here would be lost or changed into another: inside the
    import machinery (its weakref callbacks print 'Exception ignored' and go on; a class body
    being created turns it into a RuntimeError) or inside a `__del__`."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith("<frozen importlib") or code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


RETRY_S = 0.05


def _resend() -> None:
    """Deliver a Ctrl-C held back inside an import again, until it lands outside one."""
    if _state.pending and not _state.delivered:
        with contextlib.suppress(OSError):
            os.kill(os.getpid(), signal.SIGINT)


def _hold_back() -> None:
    _state.delivered = False
    retry = threading.Timer(RETRY_S, _resend)
    retry.daemon = True
    retry.start()


def _unraisable(previous: Any) -> Any:
    """A KeyboardInterrupt raised where Python can only print it and go on (a weakref
    callback, a `__del__` run by the garbage collector) is held back and sent again, not
    printed; anything else goes to the previous hook."""
    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _state.pending = True
            _hold_back()
            return
        previous(unraisable)
    return hook


def _handler(signum: int, frame: Any) -> None:
    _state.pending = True
    if _state.shield:
        return  # remembered: `check()` raises it after the block
    if _unsafe(frame):
        _hold_back()  # sent again shortly, so it lands as soon as the import is over
        return
    _state.delivered = True
    raise KeyboardInterrupt


@contextmanager
def installed() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt and is remembered (see the module doc) inside the
    block; the caller's handler is back afterwards. Only the main thread can set a handler:
    elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.signal(signal.SIGINT, _handler)
    except (ValueError, OSError):  # an embedded interpreter without signals
        yield
        return
    hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(hook)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = hook


def pending() -> bool:
    return _state.pending


def check() -> None:
    """Raise KeyboardInterrupt when a Ctrl-C came and was not dealt with (it was swallowed
    somewhere, or arrived while shielded)."""
    if _state.pending and not _state.shield:
        raise KeyboardInterrupt


def clear() -> None:
    """The Ctrl-C has been dealt with (the caller caught it and kept what finished)."""
    _state.pending = False
    _state.delivered = True


@contextmanager
def shielded() -> Iterator[None]:
    """Run the block to its end whatever is pressed (saving a partial run takes well under a
    second); a Ctrl-C that came meanwhile stays pending."""
    _state.shield += 1
    try:
        yield
    finally:
        _state.shield -= 1
