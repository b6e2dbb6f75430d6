"""Placing a seckill order (gate -> order id -> queue) and reading its status."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from pymysql.cursors import DictCursor
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from seckill import keys
from seckill.db import Database, is_connection_error
from seckill.errors import NotFound, SeckillError, TryAgain
from seckill.gate import ATTACHED, DUPLICATE, ENDED, NOT_FOUND, TAKEN_OVER, Gate, Reservation, refusal
from seckill.ids import next_order_id, order_id_time
from seckill.messages import OrderMessage, OrderQueue, Sent
from seckill.timeutil import from_db, from_ms, iso

log = logging.getLogger(__name__)

PENDING, CONFIRMED, FAILED = "PENDING", "CONFIRMED", "FAILED"
ON_SALE = 1  # tb_voucher.status


def place_order(gate: Gate, queue: OrderQueue, db: Database, voucher_id: int, user_id: int, *, status_ttl: int) -> int:
    """Reserve in Redis, then queue the order; the order id is made only for winners.

    Returns the order id the client is answered 202 with. A refusal raises the
    gate's error. The rule for the rest (docs/reservations.md): once an order id
    may be on the queue, the press is answered 202 with it, and the reservation
    is marked promised, so that reconciliation re-queues an order that never
    arrived. ``TryAgain`` (503) is raised only when this request's order id is
    certainly not on the queue; its reservation is then given back, or, if even
    that fails, left unpromised: the user's next press resumes that order, and
    reconciliation otherwise fails it, so it can never be confirmed unseen.
    """
    try:
        reservation = gate.reserve(voucher_id, user_id, uuid.uuid4().hex)
    except (RedisConnectionError, RedisTimeoutError) as exc:
        # The script may have run before its reply was lost: that reservation carries
        # no order id, and the user's next press takes it over.
        raise TryAgain("the sale is briefly unavailable, please try again") from exc
    except NotFound:
        raise _not_in_redis(gate, db, voucher_id) from None
    # A resumed order id may be on the queue already: an earlier request sent it.
    resumed = reservation.order_id is not None
    order_id = reservation.order_id if resumed else _attach_new_id(gate, reservation)
    message = OrderMessage(order_id, user_id, voucher_id, from_ms(reservation.accepted_ms))
    write_pending_hint(gate.redis, message, status_ttl)
    if queue.send(message) is not Sent.REFUSED or resumed:
        _promise(gate, message)
        return order_id
    # Certainly not on the queue, and no other request ever sent this id.
    _release(gate, reservation, order_id)
    raise TryAgain("the order could not be queued, please try again")


def _attach_new_id(gate: Gate, reservation: Reservation) -> int:
    try:
        order_id = next_order_id(gate.redis)
        attached = gate.attach(reservation, order_id)
    except Exception as exc:
        _release(gate, reservation, None)
        raise TryAgain("the order could not be queued, please try again") from exc
    if attached == TAKEN_OVER:
        # A later press of the same user holds the reservation now and answers for it.
        raise refusal(DUPLICATE)
    if attached != ATTACHED:
        raise TryAgain("the reservation expired, please try again")
    return order_id


def write_pending_hint(redis: Any, m: OrderMessage, ttl: int) -> None:
    """The status route's PENDING answer until the persister has decided the order."""
    hint = _status(m.order_id, m.voucher_id, m.user_id, PENDING, None, iso(m.accepted_at))
    try:
        redis.set(keys.order_status(m.order_id), json.dumps(hint), ex=ttl)
    except RedisError:
        log.warning("could not write the status hint of order %s", m.order_id, exc_info=True)


def _promise(gate: Gate, m: OrderMessage) -> None:
    """Tell reconciliation the client holds a 202. If Redis cannot be told and the
    message never arrived, reconciliation fails the order: decided, never lost."""
    try:
        gate.promise(m.voucher_id, m.user_id, m.order_id)
    except RedisError:
        log.warning("could not mark order %s promised", m.order_id, exc_info=True)


def _release(gate: Gate, reservation: Reservation, order_id: int | None) -> None:
    try:
        gate.release(reservation)
        if order_id is not None:
            # Not queued: the status hint must not report it PENDING.
            gate.redis.delete(keys.order_status(order_id))
    except Exception:
        # Unknown whether it was released. If not, the reservation stays unpromised:
        # the user's next press takes it over, or reconciliation releases it (and
        # fails its order id, so it can never be confirmed).
        log.exception("could not release reservation %s", reservation)


def _not_in_redis(gate: Gate, db: Database, voucher_id: int) -> SeckillError:
    """The gate does not know the voucher (and Redis has not lost its data): MySQL
    tells a voucher that never existed (404) from one whose sale ended or was stopped
    long ago (409 ENDED) and from one the cache is missing (503 until reconciled)."""

    def lookup(cursor: DictCursor) -> dict[str, Any] | None:
        cursor.execute(
            "SELECT sv.end_time, v.status FROM tb_seckill_voucher sv JOIN tb_voucher v ON v.id = sv.voucher_id"
            " WHERE sv.voucher_id = %s",
            (voucher_id,),
        )
        return cursor.fetchone()

    row = db.run(lookup, read_only=True)
    if row is None:
        return refusal(NOT_FOUND)
    if int(row["status"]) != ON_SALE or from_db(row["end_time"]) <= datetime.now(UTC):
        gate.remember_refusal(voucher_id, ENDED)
        return refusal(ENDED)
    return TryAgain("the sale is being restored, please try again")


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
