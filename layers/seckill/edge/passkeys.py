"""The draw's pass keys at the edge: the ring's verifying keys in the store's `pass-keys`.

The ring (``seckill.passes``: ``{"active": kid, "keys": {kid: 64 hex}}``) signs passes
with ``active`` and verifies with any key of ``keys``. The press function verifies with
``{"keys": ...}`` (no ``active``), written here by EdgePublisherFunction whenever it
differs from what the store holds: at each invocation (its schedule, every 15 minutes, and
each batch of states). docs/deploy.md says how to rotate.
"""

from __future__ import annotations

import json

from seckill.edge.publisher import Publisher
from seckill.passes import KeyRing

KEY = "pass-keys"
# A KeyValueStore value holds at most 1,024 bytes (docs/edge.md, "The runtime and its
# limits"): eleven keys with 16-character ids.
VALUE_MAX_BYTES = 1024


class RingTooLarge(ValueError):
    """A ring whose keys do not fit a store value: the edge could not hold them."""


def value(ring: KeyRing) -> str:
    """The store's `pass-keys` value for a ring; RingTooLarge if it does not fit."""
    text = json.dumps({"keys": {kid: ring.keys[kid].hex() for kid in sorted(ring.keys)}}, separators=(",", ":"))
    if len(text.encode()) > VALUE_MAX_BYTES:
        raise RingTooLarge(f"{len(ring.keys)} pass keys take {len(text)} bytes, over a store value's {VALUE_MAX_BYTES}")
    return text


def publish(publisher: Publisher, text: str) -> bool:
    """Writes `pass-keys` unless the store holds this very value: True if it wrote."""
    return publisher.put(KEY, text)
