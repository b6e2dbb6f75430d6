"""moto's SQS made fit for a sale in one local server (``seckill-local start-sqs``).

Each message moto sends reads its queue's attributes, which counts the queue's
messages three times, and each receive scans them; every test of a message's
visibility or delay builds datetimes (a few microseconds each). OrderExpiryQueue
holds one message per hold, delayed for SQS's longest 15 minutes, and each
long-polling receiver scanned it again at every send. At 2,000 holds a
SendMessageBatch of expiries took past the functions' 3 s read timeout, so every
persister batch waited for it and sent it again.

``install`` patches moto's message class in this process, through its public
name: a message's visibility and delay are read against ``time.time()``, the
same test moto makes against the epoch time it builds from datetimes.
"""

from __future__ import annotations

import time

from moto.sqs.models import Message

_installed = False


def _visible(self: Message) -> bool:
    return bool(time.time() * 1000.0 > self.visible_at)


def _delayed(self: Message) -> bool:
    return bool(time.time() * 1000.0 < self.delayed_until)


def install() -> None:
    """Patch moto's SQS in this process (once; again is a no-op)."""
    global _installed
    if _installed:
        return
    Message.visible = property(_visible)  # type: ignore[method-assign,assignment]
    Message.delayed = property(_delayed)  # type: ignore[method-assign,assignment]
    _installed = True
