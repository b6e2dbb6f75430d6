"""Passes: what an entrant of a draw shows on every press (docs/draw.md).

A pass is the text ``<kid>.<voucherId>.<userId>.<th>.<ticket>.<exp>.<sig>``: the key
id, the voucher and user ids in decimal, ``th`` the first 32 hex characters of the
SHA-256 of the user's login token (so a pass is worth nothing with another token),
the entrant's ticket, the expiry in epoch seconds, and ``sig`` the unpadded base64url
HMAC-SHA256, with the key named by ``kid``, of everything before ``.<sig>``. The edge
(``edge/press.js``) verifies the same text in JavaScript.

The keys are a ring, ``{"active": kid, "keys": {kid: 64 hex, ...}}``: passes are signed
with the active key; any key of the ring verifies; a retired key is removed from it.
In AWS the ring is a Secrets Manager secret (``PASS_KEYS_SECRET_ARN``), read again
after ``RING_MAX_AGE`` seconds so a rotation is picked up (its last good value kept
while a refresh fails: seckill.infra.secrets); locally ``SECKILL_PASS_KEYS`` holds the
JSON itself. Which key signs, given what the edge holds: seckill.edge.passkeys.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seckill.infra.errors import TryAgain
from seckill.infra.secrets import secrets

PASS_HEADER = "x-seckill-pass"  # noqa: S105  # a header name
# How long a function keeps the ring it read from Secrets Manager.
RING_MAX_AGE = 60

_KID = re.compile(r"[a-z0-9]{1,16}")
_KEY = re.compile(r"[0-9a-f]{64}")
_ID = r"[1-9][0-9]{0,18}"
_PASS = re.compile(
    rf"(?P<kid>[a-z0-9]{{1,16}})\.(?P<voucher>{_ID})\.(?P<user>{_ID})\.(?P<th>[0-9a-f]{{32}})"
    r"\.(?P<ticket>[0-9a-f]{17})\.(?P<exp>[1-9][0-9]{0,11})\.(?P<sig>[A-Za-z0-9_-]{43})"
)


class BadKeyRing(ValueError):
    """A ring that is not ``{"active": kid, "keys": {kid: 64 hex}}`` with its active key in it."""


@dataclass(frozen=True)
class KeyRing:
    active: str
    keys: dict[str, bytes]

    @classmethod
    def from_json(cls, text: str) -> KeyRing:
        try:
            data = json.loads(text)
            active, keys = data["active"], data["keys"]
        except (ValueError, TypeError, KeyError) as exc:
            raise BadKeyRing(f"not a pass key ring: {exc}") from None
        if not isinstance(keys, dict) or not all(
            isinstance(kid, str) and _KID.fullmatch(kid) and isinstance(key, str) and _KEY.fullmatch(key)
            for kid, key in keys.items()
        ):
            raise BadKeyRing("keys: each key id is [a-z0-9]{1,16} and each key 64 lowercase hex digits")
        if active not in keys:
            raise BadKeyRing("active: must name a key of the ring")
        return cls(active, {kid: bytes.fromhex(key) for kid, key in keys.items()})

    def to_json(self) -> str:
        return json.dumps({"active": self.active, "keys": {kid: key.hex() for kid, key in self.keys.items()}})


def new_ring(kid: str = "k1") -> KeyRing:
    """A ring of one fresh random key."""
    return KeyRing(kid, {kid: os.urandom(32)})


def token_hash(token: str) -> str:
    """The pass's ``th``: binds it to the login token it was issued for."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]


def _signature(key: bytes, text: str) -> str:
    # hmac.digest: one call into OpenSSL, several times cheaper than hmac.new on every press.
    digest = hmac.digest(key, text.encode("ascii"), "sha256")
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def sign(ring: KeyRing, voucher_id: int, user_id: int, token: str, ticket: str, exp: int) -> str:
    """A pass for this entrant, signed with the ring's active key."""
    text = f"{ring.active}.{voucher_id}.{user_id}.{token_hash(token)}.{ticket}.{exp}"
    return f"{text}.{_signature(ring.keys[ring.active], text)}"


def verify(ring: KeyRing, text: str | None, voucher_id: int, user_id: int, token: str | None, now: float) -> str | None:
    """The pass's ticket if it is valid for this voucher, user and token at ``now`` (epoch
    seconds); None otherwise (malformed, a key id not in the ring, a bad signature,
    expired, or another voucher's, user's or token's)."""
    found = _PASS.fullmatch(text) if text else None
    if found is None or token is None:
        return None
    key = ring.keys.get(found["kid"])
    if key is None:
        return None
    signed, _, sig = text.rpartition(".")  # type: ignore[union-attr]  # matched above
    if not hmac.compare_digest(_signature(key, signed), sig):
        return None
    if (
        int(found["voucher"]) != voucher_id
        or int(found["user"]) != user_id
        or not hmac.compare_digest(found["th"], token_hash(token))
        or int(found["exp"]) <= now
    ):
        return None
    return found["ticket"]


def load_ring(env: os._Environ[str] | dict[str, str] | None = None) -> KeyRing | None:
    """The ring: Secrets Manager's (cached ``RING_MAX_AGE`` seconds) when
    ``PASS_KEYS_SECRET_ARN`` is set, else ``SECKILL_PASS_KEYS``'s; None when neither is."""
    env = os.environ if env is None else env
    arn = env.get("PASS_KEYS_SECRET_ARN", "")
    if arn:
        secret: Any = secrets.get(arn, RING_MAX_AGE)
        return _parsed(secret if isinstance(secret, str) else secret.decode("utf-8"))
    text = env.get("SECKILL_PASS_KEYS", "")
    return _parsed(text) if text else None


def key_ring() -> KeyRing:
    """The ring a request signs or verifies with (``load_ring``'s); 503 TRY_AGAIN if it
    cannot be read or none is configured."""
    try:
        ring = load_ring()
    except Exception as exc:
        raise TryAgain("the pass keys are briefly unavailable, please try again") from exc
    if ring is None:
        raise TryAgain("no pass keys are configured")
    return ring


def press_ticket(
    text: str | None,
    voucher_id: int,
    user_id: int,
    token: str | None,
    now: float,
    ring: Callable[[], KeyRing] = key_ring,
) -> str:
    """The ticket of the pass a press shows (``text``) if it is valid for this voucher,
    user and token; '' otherwise, and the gate refuses a draw's press without one
    (NO_PASS) while a race's ignores it (docs/draw.md). The ring is read only when a
    pass is shown: a race's press never needs the keys. Whitespace around it is not part of
    it (RFC 9110, 5.5): CloudFront and API Gateway pass header values without."""
    shown = (text or "").strip(" \t")
    if not shown:
        return ""
    return verify(ring(), shown, voucher_id, user_id, token, now) or ""


@functools.lru_cache(maxsize=4)
def _parsed(text: str) -> KeyRing:
    # Every press of a draw asks for the ring: parsed once per text, not per press.
    return KeyRing.from_json(text)


def ensure_ring(secretsmanager: Any, secret_arn: str) -> bool:
    """Make the secret a ring: one that holds none yet (the random placeholder the
    stack creates it with) gets a ring of one fresh key; a ring is left alone, so a
    deployment never rotates keys. Whether it wrote one."""
    current = secretsmanager.get_secret_value(SecretId=secret_arn).get("SecretString", "")
    try:
        KeyRing.from_json(current)
        return False
    except BadKeyRing:
        secretsmanager.put_secret_value(SecretId=secret_arn, SecretString=new_ring().to_json())
        return True
