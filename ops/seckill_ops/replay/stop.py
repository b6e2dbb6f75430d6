"""Stopping a run: Ctrl-C and SIGTERM while moving let the SQS call under way complete,
then the run ends cleanly; outside the moves they interrupt at once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Stop:
    """Set by Ctrl-C or SIGTERM while moving: the SQS call under way completes, then the
    run stops cleanly (deletes what was sent, gives back what it holds)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def is_set(self) -> bool:
        return self.event.is_set()

    def sleep(self, seconds: float) -> None:
        self.event.wait(seconds)


@contextmanager
def stop_on_signals(stop: Stop) -> Iterator[None]:
    """Ctrl-C and SIGTERM set ``stop``; a second one raises KeyboardInterrupt (still nothing is
    lost: what was held reappears after its visibility timeout)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.event.set()

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Outside the moves, SIGTERM is a Ctrl-C (KeyboardInterrupt): nothing is held then."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
