"""Placing a seckill order (gate, with its order id -> queue), reading its status, and finding
a user's order on a voucher."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pymysql.cursors import DictCursor
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from seckill import hints, holds
from seckill.draw.moves import NO_CLOCK, ClockQueue, wake
from seckill.edge.state import NO_EDGE, StateQueue
from seckill.hints import FAILED, PENDING
from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.db import Database, is_connection_error
from seckill.infra.errors import NotFound, Refusal, TryAgain
from seckill.infra.timeutil import from_db, from_ms
from seckill.messages import OrderMessage, OrderQueue, Sent
from seckill.persist.persistence import fail_unqueued
from seckill.press.gate import (
    ENDED,
    NO_PASS,
    NOT_ADMITTED,
    NOT_FOUND,
    REFUSALS,
    Gate,
    Mark,
    Reservation,
    Unmoved,
    Unsent,
)
from seckill.repair.reconcile import DEFAULT_PENDING_AGE, MIN_PENDING_AGE
from seckill.vouchers import ON_SALE

log = logging.getLogger(__name__)

# How long after a voucher's Redis state was rebuilt (lost, then recovered) an order accepted
# before the loss may still be on its way to MySQL with no mark to show it: sent by a request
# that lives at most MIN_PENDING_AGE, then stored within seconds. Reconciliation's scheduled
# pending age, which the service already gives a promised order to reach MySQL before it
# sends it again (docs/reservations.md, "Finding one's order").
IN_FLIGHT_AFTER_REBUILD = DEFAULT_PENDING_AGE


def place_order(
    gate: Gate,
    redis: RedisClient,
    queue: OrderQueue,
    db: Database,
    voucher_id: int,
    user_id: int,
    *,
    status_ttl: int,
    ticket: str = "",
    edge: StateQueue = NO_EDGE,
    clock: ClockQueue = NO_CLOCK,
) -> int | Refusal:
    """Reserve in Redis with an order id in hand, then queue the order.

    Returns the order id the client is answered 202 with, or the gate's refusal
    (returned, not raised: most presses of a sale are refused). The rule for the
    rest (docs/reservations.md): once an order id may be on the queue, the press
    is answered 202 with it, and the reservation is marked promised (in the round
    trip that writes the PENDING status hint), so that reconciliation re-queues an
    order that never arrived. ``TryAgain`` (503) is raised only when this request's
    order id is certainly not on the queue; its reservation is then given back, or,
    if even that fails, left unpromised: the user's next press resumes that order
    (after the sale, fails it), and reconciliation otherwise fails it, so it can never
    be confirmed unseen. ``ticket``: that of the press's valid pass ('' without one),
    which a draw voucher's gate wants (docs/draw.md). The press that took the voucher's
    last unit then tells the edge itself (``edge``), one message in the sale; the
    persister's notice is the backstop. A press on a draw closed with no move in Redis
    wakes its clock (``clock``).
    """
    try:
        reservation = gate.reserve(voucher_id, user_id, ticket=ticket)
    except (RedisConnectionError, RedisTimeoutError) as exc:
        # The script may have run before its reply was lost: that reservation carries
        # this press's order id, never sent; the user's next press takes it over.
        raise TryAgain("the sale is briefly unavailable, please try again") from exc
    if isinstance(reservation, Refusal):
        return _not_in_redis(gate, db, voucher_id, ticket) if reservation is REFUSALS[NOT_FOUND] else reservation
    if isinstance(reservation, Unmoved):
        _wake(redis, clock, voucher_id, reservation.close_ms)
        return REFUSALS[NOT_ADMITTED]
    if isinstance(reservation, Unsent):
        _fail_unsent(gate, db, reservation.reservation)
        return REFUSALS[ENDED]
    message = OrderMessage(reservation.order_id, user_id, voucher_id, from_ms(reservation.accepted_ms))
    # A resumed order id may be on the queue already: an earlier request sent it.
    if queue.send(message) is Sent.REFUSED and not reservation.resumed:
        # Certainly not on the queue, and no other request ever sent this id.
        _release(gate, reservation)
        raise TryAgain("the order could not be queued, please try again")
    _promise(gate, redis, message, status_ttl)
    if reservation.last:
        edge.notice(gate.scripts, voucher_id)
    return reservation.order_id


def _promise(gate: Gate, redis: RedisClient, m: OrderMessage, status_ttl: int) -> None:
    """Tell reconciliation the client holds a 202, and write the PENDING status hint
    the client's polls read, in one pipelined round trip. Neither can undo the 202: if
    Redis cannot be told and the message never arrived, reconciliation fails the
    order (decided, never lost); without a hint the status route asks MySQL."""
    pipe = redis.pipeline(transaction=False)
    gate.promise_in(pipe, m.voucher_id, m.user_id, m.order_id)
    hints.write_pending(pipe, m, status_ttl)
    try:
        promised, _ = pipe.execute(raise_on_error=False)
        if isinstance(promised, NoScriptError):  # Redis restarted or failed over: load it again
            gate.promise(m.voucher_id, m.user_id, m.order_id)
        elif isinstance(promised, Exception):
            raise promised
    except Exception:  # the cluster client raises its own errors besides RedisError
        log.warning("could not mark order %s promised", m.order_id, exc_info=True)


def _wake(redis: RedisClient, clock: ClockQueue, voucher_id: int, close_ms: int) -> None:
    # The answer is NOT_ADMITTED either way: a failed wake leaves the clock's own retries.
    try:
        if wake(redis, clock, voucher_id, close_ms):
            log.warning("draw %s: closed with no move in Redis; its clock woken", voucher_id)
    except Exception:
        log.exception("could not wake the clock of draw %s", voucher_id)


def _release(gate: Gate, reservation: Reservation) -> None:
    # No edge notice here (seckill.edge.state): this runs before the press is answered,
    # and the answer must not wait on an SQS send. The unit back may clear a "sold out"
    # the edge holds: ReconcilerFunction's edge notice, every minute, finds the stock
    # differing from the state last claimed and publishes it. Until then the edge
    # refuses, as sold out, a press the gate would take (docs/edge.md).
    try:
        gate.release(reservation)
    except Exception:
        # Unknown whether it was released. If not, the reservation stays unpromised:
        # the user's next press takes it over, or reconciliation releases it (and
        # fails its order id, so it can never be confirmed).
        log.exception("could not release reservation %s", reservation)


def _fail_unsent(gate: Gate, db: Database, reservation: Reservation) -> None:
    """After the close, an order nobody was told 202 for is failed, as reconciliation
    fails it (so a copy still on the queue is refused), and only then is its unit
    released; one MySQL already holds was accepted in the window and stays. Whatever
    happens here, the press is answered ENDED: a failure is left to reconciliation."""
    order_id = reservation.order_id
    try:
        if fail_unqueued(
            db, OrderMessage(order_id, reservation.user_id, reservation.voucher_id, from_ms(reservation.accepted_ms))
        ):
            # No edge notice: the sale has closed, and the edge answers ENDED by the window.
            gate.release(reservation)
    except Exception:
        log.exception("could not fail order %s left unsent after the sale", order_id)


def _not_in_redis(gate: Gate, db: Database, voucher_id: int, ticket: str) -> Refusal:
    """The gate does not know the voucher (and Redis has not lost its data): MySQL
    tells a voucher that never existed (404) from one whose sale ended or was stopped
    long ago (409 ENDED, after NO_PASS for a draw's press without a pass) and from one
    the cache is missing (``TryAgain``, 503, until reconciled)."""

    def lookup(cursor: DictCursor) -> dict[str, Any] | None:
        cursor.execute(
            "SELECT sv.end_time, v.status, d.voucher_id IS NOT NULL AS draw FROM tb_seckill_voucher sv"
            " JOIN tb_voucher v ON v.id = sv.voucher_id LEFT JOIN tb_draw d ON d.voucher_id = sv.voucher_id"
            " WHERE sv.voucher_id = %s",
            (voucher_id,),
        )
        return cursor.fetchone()

    row = db.run(lookup, read_only=True)
    if row is None:
        return REFUSALS[NOT_FOUND]
    if row["draw"] and not ticket:
        return REFUSALS[NO_PASS]
    if int(row["status"]) != ON_SALE or from_db(row["end_time"]) <= datetime.now(UTC):
        if not row["draw"]:
            gate.remember_refusal(voucher_id, ENDED)
        return REFUSALS[ENDED]
    raise TryAgain("the sale is being restored, please try again")


def order_status(db: Database, redis: RedisClient, order_id: int, user_id: int) -> dict[str, Any]:
    """A final status (FAILED, PAID, EXPIRED, CANCELLED) comes from the hint written after
    MySQL committed it, or from MySQL itself; CONFIRMED only from MySQL, since a payment,
    a cancel or the deadline may have closed the hold since its hint was written; PENDING
    only from the hint, when MySQL has not decided yet or cannot be asked.

    Another user's order is reported exactly like an unknown one. An order neither
    knows is "not found" only while Redis holds its data: an accepted order whose
    hint was lost (and which is still on its way to MySQL) is a 503, never a 404.
    """
    hint = hints.read(redis, order_id, user_id)
    if hint is not None and hint.get("status") in hints.FINAL:
        return hint

    def lookup(cursor: DictCursor) -> dict[str, Any] | None:
        order = holds.read_order(cursor, order_id, user_id)
        return order.data() if order is not None else _failed(cursor, user_id, order_id=order_id)

    try:
        data = db.run(lookup, read_only=True)
    except Exception as exc:
        # MySQL is down: a PENDING hint still says PENDING; a CONFIRMED one may be stale.
        if hint is None or hint.get("status") != PENDING or not is_connection_error(exc):
            raise
        data = None
    if data is not None:
        return data
    if hint is not None:
        return {**hint, "status": PENDING, "reason": None}
    if not hints.cache_complete(redis):
        raise TryAgain("the order's status is briefly unavailable, please try again")
    raise NotFound("order not found", code="ORDER_NOT_FOUND")


def _failed(
    cursor: DictCursor, user_id: int, *, order_id: int | None = None, voucher_id: int | None = None
) -> dict[str, Any] | None:
    """The status of an order MySQL refused: this one (``order_id``), or the user's latest
    on ``voucher_id``; None if there is none of the user's."""
    select = "SELECT order_id, voucher_id, reason FROM tb_voucher_order_rejection"
    if order_id is not None:
        cursor.execute(f"{select} WHERE order_id = %s AND user_id = %s", (order_id, user_id))
    else:
        # The voucher's refusals are a few (orders the gate accepted and MySQL refused), never its presses.
        cursor.execute(
            f"{select} WHERE voucher_id = %s AND user_id = %s ORDER BY order_id DESC LIMIT 1", (voucher_id, user_id)
        )
    row = cursor.fetchone()
    if row is None:
        return None
    refused = int(row["order_id"])
    created = hints.created_at(refused, FAILED, None)
    return hints.status(refused, int(row["voucher_id"]), user_id, FAILED, row["reason"], created)


@dataclass(frozen=True)
class _Stored:
    """What MySQL holds of a user's order on a voucher: its status (None: nothing decided),
    and whether the seckill voucher exists at all."""

    data: dict[str, Any] | None
    voucher_known: bool = True


def my_order(db: Database, redis: RedisClient, voucher_id: int, user_id: int) -> dict[str, Any]:
    """The caller's own order on a voucher, as the status route shows it: how a buyer whose
    press's answer was lost (a timeout, a 5xx after the order was queued) learns its id.

    The reservation mark is read first, then MySQL, so an order decided (and its mark cleared)
    in between is found in MySQL. A stored order is the answer (one per user and voucher);
    else the mark's order: FAILED if MySQL refused it, else PENDING while a client was or may
    have been told 202 for it (promised, or left by a request that is gone, which may have
    queued it: the persister stores it or reconciliation fails it, decided either way). A
    younger unpromised mark's request may still be running and may yet give it back: 503.
    Without a mark, the user's latest refused order; else 404, or 503 while Redis cannot say:
    its data lost, or the voucher's state rebuilt less than ``IN_FLIGHT_AFTER_REBUILD`` ago
    (docs/reservations.md, "Finding one's order").
    """
    try:
        mark = _mark(redis, voucher_id, user_id)
    except RedisError:
        mark = None
    # Without a mark, Redis must hold its data (and answer), and no order accepted before it
    # lost them may still be on its way, for "no order on its way" to be true; otherwise only
    # MySQL's stored order is certain.
    certain = mark is not None or (hints.cache_complete(redis) and not _rebuilt_lately(redis, voucher_id))

    def lookup(cursor: DictCursor) -> _Stored:
        order = holds.read_users_order(cursor, voucher_id, user_id)
        if order is not None:
            return _Stored(order.data())
        if mark is not None:
            return _Stored(_failed(cursor, user_id, order_id=mark.order_id))
        if certain and (failed := _failed(cursor, user_id, voucher_id=voucher_id)) is not None:
            return _Stored(failed)
        cursor.execute("SELECT 1 FROM tb_seckill_voucher WHERE voucher_id = %s", (voucher_id,))
        return _Stored(None, cursor.fetchone() is not None)

    told = mark is not None and (mark.promised or _request_gone(redis, mark))
    try:
        stored = db.run(lookup, read_only=True)
    except Exception as exc:
        # MySQL is down: an order a client holds a 202 for is still PENDING (or just decided).
        if not told or not is_connection_error(exc):
            raise
        stored = _Stored(None)
    if stored.data is not None:
        return stored.data
    if not stored.voucher_known:
        raise NotFound("voucher not found", code="VOUCHER_NOT_FOUND")
    if mark is not None:
        if not told:
            raise TryAgain("the order is still being placed, please try again")
        return hints.status(mark.order_id, voucher_id, user_id, PENDING, None, from_ms(mark.accepted_ms))
    if not certain:
        raise TryAgain("the order is briefly unavailable, please try again")
    raise NotFound("order not found", code="ORDER_NOT_FOUND")


def _mark(redis: RedisClient, voucher_id: int, user_id: int) -> Mark | None:
    raw = redis.hget(keys.pending(voucher_id), str(user_id))
    return Mark.parse(raw) if raw else None


def _rebuilt_lately(redis: RedisClient, voucher_id: int) -> bool:
    """The voucher's state was rebuilt after a loss (``lua/restore.lua`` stamps the window) less
    than ``IN_FLIGHT_AFTER_REBUILD`` ago, by the Redis server's clock, or Redis cannot say."""
    try:
        rebuilt = redis.hget(keys.window(voucher_id), "rebuilt")
        if rebuilt is None:
            return False
        seconds, micros = redis.time()
    except RedisError:
        return True
    return seconds * 1000 + micros // 1000 - int(rebuilt) < IN_FLIGHT_AFTER_REBUILD.total_seconds() * 1000


def _request_gone(redis: RedisClient, mark: Mark) -> bool:
    """The request that made an unpromised mark is over (by the Redis server's clock, which
    stamped the mark): past the age after which reconciliation resolves it."""
    try:
        seconds, micros = redis.time()
    except RedisError:
        return False
    return seconds * 1000 + micros // 1000 - mark.accepted_ms >= MIN_PENDING_AGE.total_seconds() * 1000
