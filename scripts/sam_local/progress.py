"""What a run prints: numbered steps with their timings, and how a run can fail."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class CheckFailed(Exception):
    """An answer or an effect was not what the contract says: exit 1."""


class Unavailable(Exception):
    """Something the run needs is missing and could not be set up: exit 2."""


def seconds(elapsed: float) -> str:
    if elapsed < 60:
        return f"{elapsed:.1f} s"
    return f"{int(elapsed // 60)} min {elapsed % 60:04.1f} s"


class Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.number = 0
        self.started = time.monotonic()
        self.checks = 0
        self._lock = threading.Lock()  # checks pass on several threads at once

    @staticmethod
    def say(text: str) -> None:
        print(text, flush=True)

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        self.number += 1
        self.say(f"[{self.number}/{self.total}] {title}")
        started = time.monotonic()
        try:
            yield
        except BaseException:
            self.say(f"      failed after {seconds(time.monotonic() - started)}")
            raise
        self.say(f"      done in {seconds(time.monotonic() - started)}")

    def detail(self, text: str) -> None:
        self.say(f"      {text}")

    def passed(self, what: str, elapsed: float) -> None:
        """One checked answer and its effects."""
        with self._lock:
            self.checks += 1
            self.say(f"      ok  {what}  ({seconds(elapsed)})")

    def elapsed(self) -> str:
        return seconds(time.monotonic() - self.started)


def warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)
