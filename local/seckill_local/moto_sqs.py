"""moto's SQS made fit for a sale in one local server (``seckill-local start-sqs``).

Two defects of moto's SQS that a sale of a few thousand holds runs into:

- Cost. Each message moto sends reads its queue's attributes, which counts the
  queue's messages three times, and each receive scans them; every test of a
  message's visibility or delay builds datetimes (a few microseconds each).
  OrderExpiryQueue holds one message per hold, delayed for SQS's longest 15
  minutes, and each long-polling receiver scanned it again at every send. At
  2,000 holds a SendMessageBatch of expiries took past the functions' 3 s read
  timeout, so every persister batch waited for it and sent it again.
- Concurrency. Its receive, delete and send are not atomic, and the server
  runs each request in a thread of its own: two receivers get the same message,
  or both move one to the dead-letter queue (``list.remove(x): x not in list``),
  and a delete that rebuilds a queue's list drops a message sent meanwhile.

``install`` patches moto's classes in this process, through their public names
only: a message's visibility and delay are read against ``time.time()``, every
SQS action runs under one lock, and a long poll waits outside it, until a send
or a visibility change on its queue, or the next look at the queue (a delay or a
visibility timeout that ends wakes nobody).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any

from moto.sqs.models import Message, SQSBackend

# A waiting long poll looks at its queue again this often, for the messages whose
# delay or visibility timeout ended meanwhile (moto itself looked every second).
RECHECK_SECONDS = 0.2
# Every SQS action of the server, one at a time; a long poll's wait releases it.
_lock = threading.RLock()
# Per queue (account, region, name): notified when a message may have become receivable.
_arrivals: dict[tuple[str, str, str], threading.Condition] = {}
_installed = False
# The actions that read or change a queue's messages, run under the lock as they are.
_LOCKED = (
    "send_message_batch",
    "delete_message",
    "delete_message_batch",
    "change_message_visibility_batch",
    "purge_queue",
    "get_queue_attributes",
    "set_queue_attributes",
    "create_queue",
    "delete_queue",
)


def _visible(self: Message) -> bool:
    # moto's own test, against the epoch time in ms its unix_time_millis() builds from datetimes.
    return bool(time.time() * 1000.0 > self.visible_at)


def _delayed(self: Message) -> bool:
    return bool(time.time() * 1000.0 < self.delayed_until)


def _arrival(backend: SQSBackend, queue_name: str) -> threading.Condition:
    key = (backend.account_id, backend.region_name, queue_name)
    if key not in _arrivals:
        _arrivals[key] = threading.Condition(_lock)
    return _arrivals[key]


def _locked(action: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(action)
    def run(self: SQSBackend, *args: Any, **kwargs: Any) -> Any:
        with _lock:
            return action(self, *args, **kwargs)

    return run


def _notifying(action: Callable[..., Any]) -> Callable[..., Any]:
    """An action after which the queue (its first argument) may hold a receivable message."""

    @functools.wraps(action)
    def run(self: SQSBackend, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        with _lock:
            result = action(self, queue_name, *args, **kwargs)
            _arrival(self, queue_name).notify_all()
            return result

    return run


def _long_poll(receive: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
    @functools.wraps(receive)
    def run(
        self: SQSBackend,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        deadline = time.monotonic() + (wait_seconds_timeout or 0)
        with _lock:
            arrival = _arrival(self, queue_name)
            while True:
                # moto's own receive, without its wait (which scans the queue under its lock).
                found = receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
                left = deadline - time.monotonic()
                if found or left <= 0:
                    return found
                arrival.wait(min(left, RECHECK_SECONDS))

    return run


def install() -> None:
    """Patch moto's SQS in this process (once; again is a no-op)."""
    global _installed
    if _installed:
        return
    Message.visible = property(_visible)  # type: ignore[method-assign,assignment]
    Message.delayed = property(_delayed)  # type: ignore[method-assign,assignment]
    for name in _LOCKED:
        setattr(SQSBackend, name, _locked(getattr(SQSBackend, name)))
    # A batch sends through send_message: each message wakes its queue's receivers.
    SQSBackend.send_message = _notifying(SQSBackend.send_message)  # type: ignore[method-assign]
    SQSBackend.change_message_visibility = _notifying(SQSBackend.change_message_visibility)  # type: ignore[method-assign]
    SQSBackend.receive_message = _long_poll(SQSBackend.receive_message)  # type: ignore[method-assign]
    _installed = True
