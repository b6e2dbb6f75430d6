"""The order-status hint: what the status route may answer from Redis alone.

Written PENDING once an order is queued, before its client is answered (by the
API, in the round trip that promises the order, or by a rebuild for an order
waiting in the dead-letter queue), made final by the persister from what it
decided, and read by the status route, which trusts only a final hint and asks
MySQL otherwise. PENDING never replaces a final hint; should the persister
decide an order before its PENDING hint is written, the hint stays PENDING and
MySQL answers. A hold's fate (PAID, EXPIRED, CANCELLED) is final too, written by
seckill.holds once MySQL has committed it; CONFIRMED is not any more (a payment,
a cancel or the deadline may have closed the hold since). Looked up by order id alone, it cannot live in the voucher's
slot, so nothing ever needs it for correctness.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

from redis.exceptions import RedisError

from seckill.ids import order_id_time
from seckill.infra import keys
from seckill.infra.timeutil import iso
from seckill.messages import OrderMessage

log = logging.getLogger(__name__)

PENDING, CONFIRMED, FAILED = "PENDING", "CONFIRMED", "FAILED"
PAID, EXPIRED, CANCELLED = "PAID", "EXPIRED", "CANCELLED"
# States no later event changes: a hint holding one is the answer.
FINAL = frozenset({FAILED, PAID, EXPIRED, CANCELLED})


def status(
    order_id: int,
    voucher_id: int,
    user_id: int,
    state: str,
    reason: str | None,
    created_at: datetime | None,
    *,
    pay_by: datetime | None = None,
    paid_at: datetime | None = None,
) -> dict[str, Any]:
    """The status route's ``data``."""
    return {
        "orderId": str(order_id),
        "voucherId": voucher_id,
        "userId": user_id,
        "status": state,
        "reason": reason,
        "createdAt": iso(created_at),
        "payBy": iso(pay_by),
        "paidAt": iso(paid_at),
    }


def created_at(order_id: int, state: str, stored: datetime | None) -> datetime | None:
    """A confirmed order was made when MySQL stored it (the gate's time); a failed one
    when its id was made, not when MySQL refused it."""
    return order_id_time(order_id) if state == FAILED else stored


def write_pending(redis: Any, m: OrderMessage, ttl: int) -> None:
    """PENDING, unless the order has a hint already: the persister may have decided it
    (and made its hint final) before this is written. On a pipeline, only queued."""
    hint = status(m.order_id, m.voucher_id, m.user_id, PENDING, None, m.accepted_at)
    try:
        redis.set(keys.order_status(m.order_id), json.dumps(hint), ex=ttl, nx=True)
    except RedisError:
        log.warning("could not write the status hint of order %s", m.order_id, exc_info=True)


def finalize(redis: Any, m: OrderMessage, state: str, reason: str | None) -> None:
    """Once MySQL has stored this very message's decision: polls stop reaching MySQL.
    Only an existing hint is replaced, and it keeps its time to live."""
    replace(
        redis, status(m.order_id, m.voucher_id, m.user_id, state, reason, created_at(m.order_id, state, m.accepted_at))
    )


def replace(redis: Any, hint: dict[str, Any]) -> None:
    """Only an existing hint is replaced (none is made for an order no client polls),
    and it keeps its time to live. On a pipeline, only queued."""
    redis.set(keys.order_status(int(hint["orderId"])), json.dumps(hint), xx=True, keepttl=True)


def read(redis: Any, order_id: int, user_id: int | None) -> dict[str, Any] | None:
    """The order's hint, if Redis has one for this user (None: for any user) and answers at all."""
    try:
        raw = redis.get(keys.order_status(order_id))
    except RedisError:
        return None  # MySQL answers alone
    data = json.loads(raw) if raw else None
    if not data or user_id not in (None, data.get("userId")):
        return None
    return {"payBy": None, "paidAt": None, **data}  # a hint written before holds existed


def cache_complete(redis: Any) -> bool:
    """False when Redis lost its data (or cannot say): a hint may have been lost with it."""
    try:
        return bool(redis.exists(keys.loaded()))
    except RedisError:
        return False
