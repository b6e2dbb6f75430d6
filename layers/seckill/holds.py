"""A confirmed order is a hold: payable until its ``payBy``, then paid, expired or
cancelled (docs/holds.md). Each decision is one MySQL transaction under the voucher's
row lock, taken before the order's row as the persister takes them (no deadlock),
and judged by the database's clock; a unit returned in MySQL is then given back to
Redis's stock, once per order whatever retries (``lua/give_back.lua``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import pymysql
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pymysql.constants import ER
from pymysql.cursors import DictCursor

from seckill import hints
from seckill.edge.state import NO_EDGE, StateQueue
from seckill.hints import CANCELLED, CONFIRMED, EXPIRED, FAILED, PAID, PENDING
from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.db import Database
from seckill.infra.errors import Refusal, TryAgain
from seckill.infra.lua_scripts import Scripts
from seckill.infra.timeutil import from_db

log = logging.getLogger(__name__)

UNPAID, PAID_STATUS, CLOSED_STATUS = 1, 2, 4  # hm-dianping's tb_voucher_order.status
ALREADY_PAID = "ALREADY_PAID"
PAYMENT_USED = "PAYMENT_USED"

NOT_FOUND = Refusal(404, "ORDER_NOT_FOUND", "order not found")
REFUSALS = {
    PENDING: Refusal(409, PENDING, "the order is not decided yet, please try again later"),
    FAILED: Refusal(409, FAILED, "the order failed: there is nothing to pay or cancel"),
    PAID: Refusal(409, PAID, "the order is paid"),
    EXPIRED: Refusal(409, EXPIRED, "the order's payment deadline has passed"),
    CANCELLED: Refusal(409, CANCELLED, "the order was cancelled"),
    ALREADY_PAID: Refusal(409, ALREADY_PAID, "the order was paid by another payment"),
    PAYMENT_USED: Refusal(409, PAYMENT_USED, "this payment has paid another order"),
}


class PaymentIn(BaseModel):
    """The body of ``POST /voucher-order/{orderId}/payment``: the payment service's id of the
    payment (printable ASCII; ``tb_voucher_order.payment_id`` holds 64 characters)."""

    model_config = ConfigDict(alias_generator=to_camel, extra="ignore", strict=True, defer_build=True)

    payment_id: Annotated[str, Field(min_length=1, max_length=64, pattern="^[!-~]+$")]


# An order stored before holds existed may lack pay_by until the migration fills it:
# its deadline counts from when it was stored, as the migration's does.
_DUE = "COALESCE(o.pay_by, o.create_time + INTERVAL sv.hold_seconds SECOND)"
_SELECT_ORDER = (
    "SELECT o.id, o.user_id, o.voucher_id, o.status, o.close_reason, o.payment_id, o.create_time, o.pay_time,"
    f" {_DUE} AS pay_by, {_DUE} <= NOW(3) AS overdue, TIMESTAMPDIFF(MICROSECOND, NOW(3), {_DUE}) AS left_us,"
    " NOW(3) AS now"  # one value for the whole statement
    " FROM tb_voucher_order o JOIN tb_seckill_voucher sv ON sv.voucher_id = o.voucher_id"
)


@dataclass(frozen=True)
class Order:
    """A stored order as the database holds it, read with the database's clock."""

    order_id: int
    user_id: int
    voucher_id: int
    state: str  # CONFIRMED, PAID, EXPIRED or CANCELLED
    created_at: datetime
    pay_by: datetime
    paid_at: datetime | None
    payment_id: str | None
    seconds_left: float  # until pay_by, by the database's clock (<= 0: overdue)

    def data(self) -> dict[str, Any]:
        """The status route's ``data`` (and the payment's and cancel's)."""
        return hints.status(
            self.order_id,
            self.voucher_id,
            self.user_id,
            self.state,
            None,
            self.created_at,
            pay_by=self.pay_by,
            paid_at=self.paid_at,
        )


def order_of(row: dict[str, Any]) -> Order:
    """A row of ``_SELECT_ORDER``. An unpaid order past its deadline is EXPIRED already:
    nothing can pay it any more, and the expiry that returns its unit only follows."""
    status = int(row["status"])
    if status == UNPAID:
        state = EXPIRED if row["overdue"] else CONFIRMED
    elif status == PAID_STATUS:
        state = PAID
    else:
        state = row["close_reason"] or CANCELLED
    return Order(
        int(row["id"]),
        int(row["user_id"]),
        int(row["voucher_id"]),
        state,
        from_db(row["create_time"]),
        from_db(row["pay_by"]),
        from_db(row["pay_time"]),
        row["payment_id"],
        int(row["left_us"]) / 1_000_000,
    )


def read_order(cursor: DictCursor, order_id: int, user_id: int | None = None) -> Order | None:
    """The stored order (only if it is ``user_id``'s, unless None), without locks."""
    if user_id is None:
        cursor.execute(f"{_SELECT_ORDER} WHERE o.id = %s", (order_id,))
    else:
        cursor.execute(f"{_SELECT_ORDER} WHERE o.id = %s AND o.user_id = %s", (order_id, user_id))
    row = cursor.fetchone()
    return None if row is None else order_of(row)


def read_users_order(cursor: DictCursor, voucher_id: int, user_id: int) -> Order | None:
    """The user's stored order on the voucher (at most one: ``uk_user_voucher``), without locks."""
    cursor.execute(f"{_SELECT_ORDER} WHERE o.user_id = %s AND o.voucher_id = %s", (user_id, voucher_id))
    row = cursor.fetchone()
    return None if row is None else order_of(row)


@dataclass(frozen=True)
class _Locked:
    order: Order
    status: int  # tb_voucher_order.status
    now: datetime  # the database's clock when ``order.state`` was judged (naive UTC)


def _lock(cursor: DictCursor, order_id: int, user_id: int | None = None) -> _Locked | None:
    """The stored order (only if it is ``user_id``'s, unless None) under its voucher's row
    lock, then its own. The owner is checked first by a plain read (an order's user never
    changes): order ids are guessable, and another user's call must neither wait for the
    voucher's row nor hold it up for the persister."""
    cursor.execute("SELECT voucher_id, user_id FROM tb_voucher_order WHERE id = %s", (order_id,))
    row = cursor.fetchone()
    if row is None or user_id not in (None, int(row["user_id"])):
        return None
    # A voucher id never changes, so this lock is the one the order's writers take.
    cursor.execute("SELECT 1 FROM tb_seckill_voucher WHERE voucher_id = %s FOR UPDATE", (row["voucher_id"],))
    cursor.execute(f"{_SELECT_ORDER} WHERE o.id = %s FOR UPDATE", (order_id,))
    row = cursor.fetchone()
    assert row is not None  # read above, and an order row is never deleted
    return _Locked(order_of(row), int(row["status"]), row["now"])


def _close(cursor: DictCursor, order: Order, reason: str) -> Order:
    """EXPIRED or CANCELLED, and the unit back in MySQL's stock, in the caller's transaction."""
    cursor.execute(
        "UPDATE tb_voucher_order SET status = %s, close_reason = %s WHERE id = %s AND status = %s",
        (CLOSED_STATUS, reason, order.order_id, UNPAID),
    )
    if cursor.rowcount != 1:
        raise RuntimeError(f"order {order.order_id} changed under its row lock")
    cursor.execute("UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = %s", (order.voucher_id,))
    return replace(order, state=reason)


def give_back(scripts: Scripts, voucher_id: int, order_id: int) -> int:
    """Put a closed order's unit back in Redis's stock: 1 given back now, 0 back already,
    -1 Redis does not hold the voucher (its rebuild from MySQL counts the return)."""
    return int(scripts.give_back(keys=keys.give_back_keys(voucher_id), args=[order_id]))


def _settled(redis: RedisClient, scripts: Scripts, order: Order, edge: StateQueue) -> None:
    """After COMMIT, for a route: the unit back in Redis if the hold closed, and the final
    hint. MySQL holds the truth already, which the caller answers whatever Redis does:
    reconciliation repairs a stock Redis missed, and the status route reads MySQL
    while the hint is not final. A unit back on sale may clear the edge's "sold out"."""
    try:
        if order.state in (EXPIRED, CANCELLED):
            give_back(scripts, order.voucher_id, order.order_id)
        hints.replace(redis, order.data())
    except Exception:  # the cluster client raises its own errors besides RedisError
        log.warning("order %s is %s; Redis could not be told", order.order_id, order.state, exc_info=True)
    if order.state in (EXPIRED, CANCELLED):
        edge.notice(scripts, order.voucher_id)


def _unstored(db: Database, redis: RedisClient, order_id: int, user_id: int | None) -> Refusal:
    """The answer for an order id MySQL holds no order under: FAILED if refused, PENDING
    while a hint says it is on its way, else not found (503 if Redis lost its hints)."""

    def rejected(cursor: DictCursor) -> bool:
        cursor.execute("SELECT user_id FROM tb_voucher_order_rejection WHERE order_id = %s", (order_id,))
        row = cursor.fetchone()
        return row is not None and user_id in (None, int(row["user_id"]))

    if db.run(rejected, read_only=True):
        return REFUSALS[FAILED]
    if hints.read(redis, order_id, user_id) is not None:
        return REFUSALS[PENDING]
    if not hints.cache_complete(redis):
        raise TryAgain("the order's status is briefly unavailable, please try again")
    return NOT_FOUND


def pay(
    db: Database,
    redis: RedisClient,
    scripts: Scripts,
    order_id: int,
    payment_id: str,
    *,
    edge: StateQueue = NO_EDGE,
) -> dict[str, Any] | Refusal:
    """Pay a hold: its order ``data``, PAID (again, for the payment that paid it), or why
    not. Past its deadline the hold expires now, as if the expiry had run: 409 EXPIRED."""

    def decide(cursor: DictCursor) -> Order | Refusal | None:
        locked = _lock(cursor, order_id)
        if locked is None:
            return None
        order = locked.order
        if locked.status == UNPAID and order.state == EXPIRED:
            return _close(cursor, order, EXPIRED)
        if locked.status == UNPAID:
            # Stamped with the clock that judged it payable: never after its deadline.
            try:
                cursor.execute(
                    "UPDATE tb_voucher_order SET status = %s, pay_time = %s, payment_id = %s WHERE id = %s",
                    (PAID_STATUS, locked.now, payment_id, order_id),
                )
            except pymysql.err.IntegrityError as exc:
                # uk_payment: the payment paid another order (of any voucher, so under
                # another lock: the unique key, not a read, is what decides).
                if exc.args[0] != ER.DUP_ENTRY:
                    raise
                return REFUSALS[PAYMENT_USED]
            return replace(order, state=PAID, paid_at=from_db(locked.now), payment_id=payment_id)
        if order.state == PAID and order.payment_id != payment_id:
            return REFUSALS[ALREADY_PAID]
        return order

    decided = db.run(decide)
    if decided is None:
        return _unstored(db, redis, order_id, None)
    if isinstance(decided, Refusal):
        return decided
    _settled(redis, scripts, decided, edge)
    return decided.data() if decided.state == PAID else REFUSALS[decided.state]


def cancel(
    db: Database,
    redis: RedisClient,
    scripts: Scripts,
    order_id: int,
    user_id: int,
    *,
    edge: StateQueue = NO_EDGE,
) -> dict[str, Any] | Refusal:
    """The owner gives a hold up: its order ``data``, CANCELLED (again, if it was), and the
    unit back on sale; or why not. Another user's order is not found, as an unknown one."""

    def decide(cursor: DictCursor) -> Order | None:
        locked = _lock(cursor, order_id, user_id)
        if locked is None:
            return None
        if locked.status == UNPAID:
            return _close(cursor, locked.order, EXPIRED if locked.order.state == EXPIRED else CANCELLED)
        return locked.order

    decided = db.run(decide)
    if decided is None:
        return _unstored(db, redis, order_id, user_id)
    _settled(redis, scripts, decided, edge)
    return decided.data() if decided.state == CANCELLED else REFUSALS[decided.state]


def overdue(db: Database, voucher_id: int) -> list[int]:
    """The voucher's unpaid orders past their deadline by the database's clock, as
    ``expire`` judges them (a NULL ``pay_by`` counting from ``create_time``)."""

    def read(cursor: DictCursor) -> list[int]:
        cursor.execute(
            "SELECT o.id FROM tb_voucher_order o JOIN tb_seckill_voucher sv ON sv.voucher_id = o.voucher_id"
            f" WHERE o.voucher_id = %s AND o.status = %s AND {_DUE} <= NOW(3) ORDER BY o.id",
            (voucher_id, UNPAID),
        )
        return [int(r["id"]) for r in cursor.fetchall()]

    return db.run(read, read_only=True)


class Expiry(StrEnum):
    EXPIRED = "EXPIRED"  # expired now: MySQL's stock +1, then Redis's
    CLOSED = "CLOSED"  # expired or cancelled before: its unit given back again (a no-op if back)
    NOT_YET = "NOT_YET"  # payable still: look again in ``seconds_left``
    PAID = "PAID"  # nothing to do
    MISSING = "MISSING"  # not stored (yet): nothing to do; the persister sends its own expiry


@dataclass(frozen=True)
class Expired:
    outcome: Expiry
    order: Order | None  # None when MISSING
    given_back: int | None = None  # give_back's answer (EXPIRED, CLOSED); None otherwise


def expire(db: Database, redis: RedisClient, scripts: Scripts, order_id: int, *, edge: StateQueue = NO_EDGE) -> Expired:
    """Expire a hold whose deadline has passed (idempotent: any number of times, in any
    order with payments and cancels). A Redis error after MySQL committed is raised: the
    caller retries, and the retry gives the unit back (once) and writes the hint.

    Most expiries of a sale find their order paid, or come before the deadline: those are
    decided from one read without locks (a paid order stays paid; a deadline only passes),
    so that they do not queue on the voucher's hot row with the persister, the payments
    and the expiries that close a hold (docs/holds.md, "Units back on time")."""

    def peek(cursor: DictCursor) -> Expired | None:
        order = read_order(cursor, order_id)
        if order is None:
            return Expired(Expiry.MISSING, None)
        if order.state == PAID:
            return Expired(Expiry.PAID, order)
        return Expired(Expiry.NOT_YET, order) if order.state == CONFIRMED else None

    def decide(cursor: DictCursor) -> Expired:
        locked = _lock(cursor, order_id)
        if locked is None:
            return Expired(Expiry.MISSING, None)
        order = locked.order
        if locked.status == UNPAID:
            if order.state != EXPIRED:
                return Expired(Expiry.NOT_YET, order)
            return Expired(Expiry.EXPIRED, _close(cursor, order, EXPIRED))
        return Expired(Expiry.PAID if locked.status == PAID_STATUS else Expiry.CLOSED, order)

    decided = db.run(peek, read_only=True) or db.run(decide)
    if decided.outcome not in (Expiry.EXPIRED, Expiry.CLOSED):
        return decided
    assert decided.order is not None
    given = give_back(scripts, decided.order.voucher_id, order_id)
    hints.replace(redis, decided.order.data())
    edge.notice(scripts, decided.order.voucher_id)
    return Expired(decided.outcome, decided.order, given)
