"""SIGINT and SIGTERM as an exception that long commands unwind through, never lost.

`raising_on_signals()` turns both signals into `Interrupted` (a `KeyboardInterrupt`) for the
duration of a command, so progress bars, worker pools and temporary files are cleaned up by
their ``finally`` blocks, as with Ctrl-C. An exception raised inside a garbage-collector
callback or a ``__del__`` (JAX registers one that runs at every collection) is printed and
dropped by Python ("Exception ignored in ..."), and the command would run on as if it had not
been interrupted. So a signal that arrives there is kept pending, and a short timer
(``SIGALRM``) raises it as soon as the main thread is back in ordinary code.
"""

from __future__ import annotations

import _weakrefset
import contextlib
import gc
import signal
import threading
import weakref
from collections.abc import Iterator
from types import FrameType

INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
RETRY_SECONDS = 0.02
"""How soon a signal that landed in a collector callback is raised again."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM, raised in the main thread; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


_WEAKREF_FILES = {weakref.__file__, _weakrefset.__file__}
"""Where the standard library's weak-reference callbacks live (``WeakKeyDictionary``'s
``remove`` and the like): Python prints and drops what such a callback raises, as it does for
a collector callback. A signal that lands in an ordinary call into these modules is only
retried a moment later."""


def _swallowing(frame: FrameType | None) -> bool:
    """Whether an exception raised at `frame` may be dropped: it runs inside a
    garbage-collector callback, a weak-reference callback or a ``__del__``."""
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        code = frame.f_code
        if code in callbacks or code.co_name == "__del__" or code.co_filename in _WEAKREF_FILES:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def raising_on_signals() -> Iterator[None]:
    """Raise `Interrupted` on SIGINT or SIGTERM inside the block (whatever the parent set them
    to: a background job inherits SIGINT ignored); restore the handlers after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    retry = hasattr(signal, "setitimer")
    pending: list[int] = []

    def raise_when_safe(signum: int, frame: FrameType | None) -> None:
        if signum in INTERRUPT_SIGNALS:
            pending[:] = [signum]
        if not pending:
            return
        if retry and _swallowing(frame):
            signal.setitimer(signal.ITIMER_REAL, RETRY_SECONDS)
            return
        raise Interrupted(pending.pop())

    handled = (*INTERRUPT_SIGNALS, *((signal.SIGALRM,) if retry else ()))
    previous = {s: signal.signal(s, raise_when_safe) for s in handled}
    try:
        yield
    finally:
        if retry:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in previous.items():
            signal.signal(s, handler)


__all__ = ["INTERRUPT_SIGNALS", "Interrupted", "raising_on_signals"]
