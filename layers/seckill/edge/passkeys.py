"""The draw's pass keys at the edge: the store's `pass-keys`, what the edge is known to
hold, and so which key signs (docs/draw.md, "Passes").

The ring (``seckill.passes``: ``{"active": kid, "keys": {kid: 64 hex}}``) verifies with
any key of ``keys``. The press function verifies with ``pass-keys``, ``{"keys": ...,
"v": ring version}`` (no ``active``; ``v`` the epoch ms its secret version was created,
0 for a local ring), written by EdgePublisherFunction at each invocation (its schedule,
every 15 minutes, and each batch of states) unless the store holds it or a newer ring's.

The publisher, which alone reaches the store, then confirms it in the secret
``PASS_KEYS_HELD_SECRET_ARN``: ``{"keys": {kid: epoch seconds}}``, each kid of the
store's value with the time from which every edge location holds it (first seen in the
store + ``PROPAGATION_SECONDS``). The functions inside the VPC read that secret as they
read the ring (through the Secrets Manager endpoint), and sign with the ring's active key
only once it is held, else with the newest held key of the ring: a pass they issue is
never one the edge refuses. Without an edge (no such secret) the active key signs at once.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seckill.edge.publisher import Publisher
from seckill.infra.errors import TryAgain
from seckill.infra.secrets import secrets
from seckill.passes import KeyRing, key_ring

KEY = "pass-keys"
# A KeyValueStore value holds at most 1,024 bytes (docs/edge.md, "The runtime and its
# limits"): eleven keys with 16-character ids, and the version.
VALUE_MAX_BYTES = 1024
# From a write of the store to every edge location holding it. AWS gives no bound, only
# "a few seconds" (docs/draw.md, "Passes"): a minute leaves a wide margin.
PROPAGATION_SECONDS = 60
# How long a function keeps what the edge holds before reading it again (as the ring).
HELD_MAX_AGE = 60


class RingTooLarge(ValueError):
    """A ring whose keys do not fit a store value: the edge could not hold them."""


def value(ring: KeyRing, version: int = 0) -> str:
    """The store's `pass-keys` value for a ring; RingTooLarge if it does not fit."""
    keys = {kid: ring.keys[kid].hex() for kid in sorted(ring.keys)}
    text = json.dumps({"keys": keys, "v": version}, separators=(",", ":"))
    if len(text.encode()) > VALUE_MAX_BYTES:
        raise RingTooLarge(f"{len(ring.keys)} pass keys take {len(text)} bytes, over a store value's {VALUE_MAX_BYTES}")
    return text


def _parts(text: str | None) -> tuple[int, list[str]] | None:
    """A stored value's version and key ids; None for no value or one of another shape."""
    try:
        data = json.loads(text or "")
        return int(data.get("v", 0)), sorted(data["keys"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def replaces(text: str, stored: str | None) -> bool:
    """Whether `text` goes over what the store holds: anything but the same value or a
    newer ring's (a publisher that read the ring before an operator's change never
    takes the new keys back out)."""
    if stored == text:
        return False
    held, ours = _parts(stored), _parts(text)
    return held is None or ours is None or held[0] <= ours[0]


def publish(publisher: Publisher, text: str) -> tuple[bool, str | None]:
    """Writes `pass-keys` unless the store holds this very value or a newer ring's:
    whether it wrote, and the value the store holds now."""
    return publisher.put(KEY, text, replaces=lambda stored: replaces(text, stored))


@dataclass(frozen=True)
class Held:
    """What the publisher confirmed: each key id with the epoch second from which every
    edge location holds it. None held: the store has no `pass-keys`, and the edge
    forwards every pass for the function to verify (docs/edge.md, "A draw")."""

    keys: dict[str, float]

    @classmethod
    def from_json(cls, text: str) -> Held:
        data = json.loads(text)
        keys = data["keys"]
        if not isinstance(keys, dict):
            raise ValueError("keys: an object of key id -> epoch seconds")
        return cls({str(kid): float(at) for kid, at in keys.items()})

    def to_json(self) -> str:
        return json.dumps({"keys": dict(sorted(self.keys.items()))}, separators=(",", ":"))


def confirmed(previous: Held, stored: str | None, now: float) -> Held:
    """What the edge holds once the store holds `stored`: a key already confirmed keeps its
    time; a new one is held ``PROPAGATION_SECONDS`` from now. When none was held before,
    the edge forwarded every pass, so the first keys are held at once."""
    parts = _parts(stored)
    kids = parts[1] if parts else []
    if not previous.keys:
        return Held(dict.fromkeys(kids, now))
    return Held({kid: previous.keys.get(kid, now + PROPAGATION_SECONDS) for kid in kids})


def signing_kid(ring: KeyRing, held: Held | None, now: float) -> str:
    """The key a new pass is signed with: the active one without an edge, or once the edge
    holds it (or holds none); else the ring's key the edge has held the shortest time.
    503 TRY_AGAIN when the edge holds no key of the ring (the old keys removed in the same
    change that added the new one): the publisher's next run ends it."""
    if held is None or not held.keys:
        return ring.active
    usable = {kid: at for kid, at in held.keys.items() if kid in ring.keys and at <= now}
    if ring.active in usable:
        return ring.active
    if not usable:
        raise TryAgain("a new pass key is on its way to the edge, please try again")
    return max(usable, key=lambda kid: (usable[kid], kid))


def load_held(env: os._Environ[str] | dict[str, str] | None = None) -> Held | None:
    """What the edge holds (the secret, cached ``HELD_MAX_AGE`` s, its last good value kept
    while a refresh fails); None without an edge (no secret named)."""
    env = os.environ if env is None else env
    arn = env.get("PASS_KEYS_HELD_SECRET_ARN", "")
    if not arn:
        return None
    text: Any = secrets.get(arn, HELD_MAX_AGE)
    return Held.from_json(text if isinstance(text, str) else text.decode("utf-8"))


def signing_ring(ring: Callable[[], KeyRing] = key_ring, clock: Callable[[], float] = time.time) -> KeyRing:
    """The ring, its active key the one to sign with now (``signing_kid``); 503 TRY_AGAIN
    if it or what the edge holds cannot be read."""
    current = ring()
    try:
        held = load_held()
    except Exception as exc:
        raise TryAgain("the pass keys are briefly unavailable, please try again") from exc
    return KeyRing(signing_kid(current, held, clock()), current.keys)


def current_ring(
    secretsmanager: Any, env: os._Environ[str] | dict[str, str] | None = None
) -> tuple[KeyRing, int] | None:
    """The publisher's ring, read afresh (never a cached or stale one: it would take new
    keys back out of the store), and its version; None when none is configured."""
    env = os.environ if env is None else env
    arn = env.get("PASS_KEYS_SECRET_ARN", "")
    if arn:
        answer = secretsmanager.get_secret_value(SecretId=arn)
        return KeyRing.from_json(answer["SecretString"]), int(answer["CreatedDate"].timestamp() * 1000)
    text = env.get("SECKILL_PASS_KEYS", "")
    return (KeyRing.from_json(text), 0) if text else None


def confirm(secretsmanager: Any, arn: str, stored: str | None, now: float) -> Held | None:
    """Records in the secret what the edge holds once the store holds `stored`; the new
    value if it changed, else None."""
    previous = Held.from_json(secretsmanager.get_secret_value(SecretId=arn)["SecretString"])
    held = confirmed(previous, stored, now)
    if held == previous:
        return None
    secretsmanager.put_secret_value(SecretId=arn, SecretString=held.to_json())
    return held
