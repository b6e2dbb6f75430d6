"""Placing a seckill order (gate -> order id -> queue) and reading its status."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from pymysql.cursors import DictCursor
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from seckill import keys
from seckill.db import Database, is_connection_error
from seckill.errors import NotFound, TryAgain
from seckill.gate import Gate, Reservation
from seckill.ids import next_order_id, order_id_time
from seckill.messages import OrderMessage, OrderQueue
from seckill.timeutil import from_db, from_ms, iso

log = logging.getLogger(__name__)

PENDING, CONFIRMED, FAILED = "PENDING", "CONFIRMED", "FAILED"


def place_order(gate: Gate, queue: OrderQueue, voucher_id: int, user_id: int, *, status_ttl: int) -> int:
    """Reserve in Redis, then queue the order; the order id is made only for winners.

    A refusal raises the gate's error. If anything after the reservation fails,
    the reservation is given back and ``TryAgain`` is raised: the client never
    holds an order id that is not on the queue.
    """
    try:
        reservation = gate.reserve(voucher_id, user_id, uuid.uuid4().hex)
    except (RedisConnectionError, RedisTimeoutError) as exc:
        # Redis unreachable or restarting. Had the script run before the reply was
        # lost, its reservation carries no order id, so reconciliation releases it.
        raise TryAgain("the sale is briefly unavailable, please try again") from exc
    order_id: int | None = None
    try:
        order_id = next_order_id(gate.redis)
        accepted_at = from_ms(reservation.accepted_ms)
        if not gate.attach(reservation, order_id):
            raise RuntimeError("the reservation vanished before its order id was recorded")
        hint = _status(order_id, voucher_id, user_id, PENDING, None, iso(accepted_at))
        gate.redis.set(keys.order_status(order_id), json.dumps(hint), ex=status_ttl)
        queue.send(OrderMessage(order_id, user_id, voucher_id, accepted_at))
    except Exception as exc:
        _release(gate, reservation, order_id)
        raise TryAgain("the order could not be queued, please try again") from exc
    return order_id


def _release(gate: Gate, reservation: Reservation, order_id: int | None) -> None:
    try:
        gate.release(reservation)
        if order_id is not None:
            # Not queued: the status hint must not report it PENDING for a day.
            gate.redis.delete(keys.order_status(order_id))
    except Exception:
        # Redis is unreachable too: the pending record stays, and reconciliation
        # releases it (no order id reached the client).
        log.exception("could not release reservation %s", reservation)


def record_decision(redis: Any, order_id: int, user_id: int, voucher_id: int, status: str, reason: str | None) -> None:
    """Turn an order's status hint into its final status, once MySQL has committed it,
    so that polling clients stop reaching MySQL. Only an existing hint is updated, and
    it keeps its time to live."""
    created = order_id_time(order_id) if status == FAILED else None
    hint = redis.get(keys.order_status(order_id))
    if not hint:
        return
    data = json.loads(hint)
    final = _status(order_id, voucher_id, user_id, status, reason, iso(created) if created else data.get("createdAt"))
    redis.set(keys.order_status(order_id), json.dumps(final), xx=True, keepttl=True)


def _hint(redis: Any, order_id: int, user_id: int) -> dict[str, Any] | None:
    """The order's status hint, if Redis has one for this user (and answers at all)."""
    try:
        raw = redis.get(keys.order_status(order_id))
    except RedisError:
        return None  # MySQL answers alone
    data = json.loads(raw) if raw else None
    return data if data and data.get("userId") == user_id else None


def _cache_complete(redis: Any) -> bool:
    """False when Redis lost its data (or cannot say): a hint may have been lost with it."""
    try:
        return bool(redis.exists(keys.loaded()))
    except RedisError:
        return False


def order_status(db: Database, redis: Any, order_id: int, user_id: int) -> dict[str, Any]:
    """A final status (CONFIRMED/FAILED) comes from the hint the persister wrote after
    MySQL committed it, or from MySQL itself; PENDING only from the hint, when MySQL
    has not decided yet or cannot be asked.

    Another user's order is reported exactly like an unknown one. An order neither
    knows is "not found" only while Redis holds its data: an accepted order whose
    hint was lost (and which is still on its way to MySQL) is a 503, never a 404.
    """
    hint = _hint(redis, order_id, user_id)
    if hint is not None and hint.get("status") in {CONFIRMED, FAILED}:
        return hint

    def lookup(cursor: DictCursor) -> tuple[dict[str, Any] | None, str, str | None]:
        cursor.execute(
            "SELECT user_id, voucher_id, create_time FROM tb_voucher_order WHERE id = %s AND user_id = %s",
            (order_id, user_id),
        )
        row = cursor.fetchone()
        if row is not None:
            return row, CONFIRMED, None
        cursor.execute(
            "SELECT user_id, voucher_id, reason, create_time FROM tb_voucher_order_rejection"
            " WHERE order_id = %s AND user_id = %s",
            (order_id, user_id),
        )
        row = cursor.fetchone()
        return row, FAILED, row and row["reason"]

    try:
        row, status, reason = db.run(lookup, read_only=True)
    except Exception as exc:
        if hint is None or not is_connection_error(exc):
            raise
        row = None  # MySQL is down: the hint still says PENDING
    if row is not None:
        # A rejection's own time is when MySQL refused it; the order was made when its id was.
        created = from_db(row["create_time"]) if status == CONFIRMED else order_id_time(order_id)
        return _status(order_id, int(row["voucher_id"]), user_id, status, reason, iso(created))
    if hint is not None:
        return _status(order_id, int(hint["voucherId"]), user_id, PENDING, None, hint.get("createdAt"))
    if not _cache_complete(redis):
        raise TryAgain("the order's status is briefly unavailable, please try again")
    raise NotFound("order not found", code="ORDER_NOT_FOUND")


def _status(
    order_id: int, voucher_id: int, user_id: int, status: str, reason: str | None, created_at: str | None
) -> dict[str, Any]:
    return {
        "orderId": str(order_id),
        "voucherId": voucher_id,
        "userId": user_id,
        "status": status,
        "reason": reason,
        "createdAt": created_at,
    }
