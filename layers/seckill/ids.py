"""Identifiers: validation of ids from the outside, and the order-id generator.

Order ids follow hm-dianping's ``RedisIdWorker``: 31 bits of seconds since
2022-01-01T00:00:00Z, shifted left 32 bits, OR a sequence from a per-day Redis
counter. A press takes its sequence from a block its container leased (``OrderIds``),
not from an INCR of its own.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.errors import BadRequest, TryAgain

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
    """One order id by an INCR of its own, as the seeds' ``RedisIdWorker`` makes it (the
    synchronous design the benchmarks compare with; a press takes ``OrderIds``')."""
    now = time.time() if now is None else now
    moment = datetime.fromtimestamp(now, UTC)
    seconds = int(now) - BEGIN_EPOCH
    sequence = int(redis.incr(keys.order_counter(moment)))
    if sequence >= 1 << COUNT_BITS:
        raise OverflowError("more than 2^32 order ids in one UTC day")
    return seconds << COUNT_BITS | sequence


BLOCK = 1000
DAY_SECONDS = 86400
# After Redis lost the day's counter, it is raised this far above the largest
# sequence MySQL holds and above the counter its last raise of the day set
# (seckill.repair.counter) before Redis is marked loaded again: more than the blocks containers may still hold (ten
# thousand of them: ten million) plus the orders not yet stored, so no sequence is
# handed out twice; a day's 2^32 sequences leave room for 256 recoveries.
LEASE_GAP = 1 << 24


class OrderIds:
    """A container's order ids without a round trip each (a Leaf-segment allocator).

    One INCRBY of the UTC day's counter (``icr:order:<yyyy:MM:dd>``) leases a block of
    ``block`` sequences; each id is ``(now - BEGIN_EPOCH) << 32 | sequence``, so the
    contract's layout holds and every sequence of a day goes to one id at most. A block
    never crosses a UTC day: the first id of a new day drops the old block (and the
    sequences given back) and leases from the new day's counter. An id a press did not
    use (the gate refused it, or resumed another) is given back and serves the next
    press; one whose gate call is in doubt is never given back (its reservation may
    carry it). Winners alone consume sequences, so a lease is one round trip in about
    ``block`` winning presses.

    A cold container leases at its first press that reaches the gate (that press makes
    one more round trip), never at init: a SnapStart snapshot must not hold a block its
    restored copies would share. A reused container keeps its block across invocations.
    A lease made while ``seckill:loaded`` is missing (Redis lost its data, recovery has
    not raised the counter yet) could repeat earlier sequences: it is not kept, and the
    press is answered 503 TRY_AGAIN, as the gate would answer it.
    """

    def __init__(self, redis: RedisClient, block: int = BLOCK, clock: Callable[[], float] = time.time) -> None:
        self._redis = redis
        self.block = block
        self.clock = clock
        self._lock = threading.Lock()  # the local stand-in runs presses in threads
        self._day_start = 0  # the UTC day of the block, in epoch seconds
        self._next = self._end = 0  # sequences next to end, inclusive, are unused
        self._spare: list[int] = []  # sequences given back

    def take(self) -> int:
        """An order id; leases a block (one round trip) when the day's is used up."""
        now = int(self.clock())
        with self._lock:
            if not self._day_start <= now < self._day_start + DAY_SECONDS:
                self._day_start = now - now % DAY_SECONDS
                self._next, self._end, self._spare = 0, -1, []
            if self._spare:
                sequence = self._spare.pop()
            else:
                if self._next > self._end:
                    self._lease()
                sequence = self._next
                self._next += 1
        return (now - BEGIN_EPOCH) << COUNT_BITS | sequence

    def give_back(self, order_id: int) -> None:
        """An id certainly not used: its sequence serves the next ``take`` of the same day."""
        seconds = (order_id >> COUNT_BITS) + BEGIN_EPOCH
        with self._lock:
            if self._day_start <= seconds < self._day_start + DAY_SECONDS:
                self._spare.append(order_id & SEQUENCE_MASK)

    def _lease(self) -> None:
        pipe = self._redis.pipeline(transaction=False)
        pipe.incrby(keys.order_counter(datetime.fromtimestamp(self._day_start, UTC)), self.block)
        pipe.exists(keys.loaded())
        end, loaded = pipe.execute()
        if not loaded:
            raise TryAgain("the sale is being restored, please try again")
        if end >= 1 << COUNT_BITS:
            raise OverflowError("more than 2^32 order ids in one UTC day")
        self._next, self._end = int(end) - self.block + 1, int(end)


def order_id_time(order_id: int) -> datetime:
    """When an order id was made (to the second)."""
    return datetime.fromtimestamp((order_id >> COUNT_BITS) + BEGIN_EPOCH, UTC)
