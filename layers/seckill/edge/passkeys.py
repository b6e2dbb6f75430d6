"""The draw's pass keys at the edge: the ring's verifying keys in the store's `pass-keys`.

The ring (JSON ``{"active": kid, "keys": {kid: 64 hex}}``; Secrets Manager in AWS,
``PASS_KEYS_SECRET_ARN``; locally ``SECKILL_PASS_KEYS`` holds the JSON itself) signs
passes with ``active`` and verifies with any key of ``keys``. The press function
verifies with ``{"keys": ...}`` (no ``active``), written here by EdgePublisherFunction
whenever it differs from what the store holds: at each invocation (its schedule, every
minute, and each batch of states). docs/deploy.md says how to rotate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError

from seckill.edge.publisher import Published, Publisher

KEY = "pass-keys"
# A KeyValueStore value holds at most 1,024 bytes (docs/edge.md, "The runtime and its
# limits"): eleven keys with 16-character ids.
VALUE_MAX_BYTES = 1024
# A container reads the ring again after this long: a change reaches the store within it.
MAX_AGE_SECONDS = 60

_KID = re.compile(r"[a-z0-9]{1,16}")
_KEY = re.compile(r"[0-9a-f]{64}")


class NotARing(ValueError):
    """Text that is no pass key ring, or one whose keys do not fit a store value."""


def value(ring_text: str) -> str:
    """The store's `pass-keys` value for a ring; NotARing for anything else."""
    try:
        ring = json.loads(ring_text)
    except ValueError as exc:
        raise NotARing("the pass key ring is not JSON") from exc
    keys = ring.get("keys") if isinstance(ring, dict) else None
    if not isinstance(keys, dict) or not keys:
        raise NotARing('the pass key ring has no "keys"')
    for kid, key in keys.items():
        if not _KID.fullmatch(kid) or not isinstance(key, str) or not _KEY.fullmatch(key):
            raise NotARing(f"the pass key ring's key {kid!r} is not [a-z0-9]{{1,16}} -> 64 lowercase hex")
    text = json.dumps({"keys": dict(sorted(keys.items()))}, separators=(",", ":"))
    if len(text.encode()) > VALUE_MAX_BYTES:
        raise NotARing(f"{len(keys)} pass keys take {len(text)} bytes, over a store value's {VALUE_MAX_BYTES}")
    return text


def ring_source(env: Mapping[str, str]) -> Callable[[], str] | None:
    """Where the ring's text comes from; None when the stack has none."""
    local = env.get("SECKILL_PASS_KEYS", "")
    arn = env.get("PASS_KEYS_SECRET_ARN", "")
    if local:
        return lambda: local
    if arn:
        from aws_lambda_powertools.utilities import parameters

        def secret() -> str:
            text: Any = parameters.get_secret(arn, max_age=MAX_AGE_SECONDS)
            return str(text)

        return secret
    return None


def publish(publisher: Publisher, text: str) -> Published:
    """Writes `pass-keys` unless the store holds this very value. A concurrent write makes
    the put fail (its If-Match is stale): it raises, and the next invocation writes."""
    etag = publisher.kvs.describe_key_value_store(KvsARN=publisher.kvs_arn)["ETag"]
    try:
        stored = publisher.kvs.get_key(KvsARN=publisher.kvs_arn, Key=KEY)["Value"]
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        stored = None
    if stored == text:
        return Published.STALE
    publisher.kvs.put_key(KvsARN=publisher.kvs_arn, Key=KEY, Value=text, IfMatch=etag)
    return Published.WRITTEN
