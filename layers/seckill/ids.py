"""Identifiers: validation of ids from the outside, and the order-id generator.

Order ids follow hm-dianping's ``RedisIdWorker``: 31 bits of seconds since
2022-01-01T00:00:00Z, shifted left 32 bits, OR a per-day Redis counter.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.errors import BadRequest

BEGIN_EPOCH = 1640995200  # 2022-01-01T00:00:00Z
COUNT_BITS = 32
SEQUENCE_MASK = (1 << COUNT_BITS) - 1
MAX_ID = 2**63 - 1


def _up_to(bound: str) -> str:
    """A regex of the numbers written with as many digits as ``bound``, up to it: at the
    first digit that differs, a smaller one, then any digits."""
    branches = [bound]
    for i, digit in enumerate(bound):
        low = 1 if i == 0 else 0
        if int(digit) > low:
            rest = len(bound) - i - 1
            branches.append(f"{bound[:i]}[{low}-{int(digit) - 1}]" + (f"[0-9]{{{rest}}}" if rest else ""))
    return "|".join(branches)


# 1 to MAX_ID in canonical decimal, exactly (the OpenAPI document carries it as ID_PATTERN).
_POSITIVE = re.compile(rf"[1-9][0-9]{{0,{len(str(MAX_ID)) - 2}}}|{_up_to(str(MAX_ID))}")
ID_PATTERN = f"^(?:{_POSITIVE.pattern})$"


def parse_id(value: Any, name: str) -> int:
    """A positive 64-bit id from a path, body or context value; anything else is a 400.

    Ids become Redis keys, so only canonical decimal digits pass.
    """
    # Text first: a request's ids arrive as text (its path, the authorizer's context).
    if isinstance(value, str):
        text = value
    elif isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    else:
        raise BadRequest(f"{name} must be a positive integer")
    if _POSITIVE.fullmatch(text) is None:
        raise BadRequest(f"{name} must be a positive integer")
    return int(text)


def next_order_id(redis: RedisClient, now: float | None = None) -> int:
    """A unique, time-ordered 64-bit order id (one INCR round trip)."""
    now = time.time() if now is None else now
    moment = datetime.fromtimestamp(now, UTC)
    seconds = int(now) - BEGIN_EPOCH
    sequence = int(redis.incr(keys.order_counter(moment)))
    if sequence >= 1 << COUNT_BITS:
        raise OverflowError("more than 2^32 order ids in one UTC day")
    return seconds << COUNT_BITS | sequence


def order_id_time(order_id: int) -> datetime:
    """When an order id was made (to the second)."""
    return datetime.fromtimestamp((order_id >> COUNT_BITS) + BEGIN_EPOCH, UTC)
