"""SIGTERM (and SIGHUP) end a command the way Ctrl-C does, so its cleanup runs.

Python turns SIGINT into KeyboardInterrupt, which unwinds every `with` and `finally`: the
cluster lock is released, ranks started so far are stopped, a switched pointer is put back.
SIGTERM by default kills the process on the spot, leaving all of that behind; inside
`terminate_as_interrupt` it raises KeyboardInterrupt instead. A second signal during cleanup is
ignored (cleanup finishes); SIGKILL still ends the process at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While inside, SIGTERM/SIGHUP raise KeyboardInterrupt in the main thread (once)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(number: int, _frame: FrameType | None) -> None:
        for each in SIGNALS:
            signal.signal(each, signal.SIG_IGN)  # let the cleanup finish
        raise KeyboardInterrupt(signal.Signals(number).name)

    previous = {each: signal.signal(each, interrupt) for each in SIGNALS}
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)
