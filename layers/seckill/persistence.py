"""Writing an accepted order to MySQL, one transaction per order (the outcomes: docs/contract.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.cursors import DictCursor

from seckill import hints
from seckill.db import Database
from seckill.gate import Gate
from seckill.hints import CONFIRMED, FAILED
from seckill.messages import OrderMessage
from seckill.timeutil import to_db

log = logging.getLogger(__name__)

DUPLICATE_KEY = 1062
NOT_QUEUED = "NOT_QUEUED"  # reason of an order failed by reconciliation


@dataclass(frozen=True)
class Decision:
    status: str  # CONFIRMED or FAILED
    reason: str | None = None
    changed: bool = True  # False when an earlier delivery had already decided it


class _Refused(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Duplicate(Exception):
    pass


class OrderIdConflict(RuntimeError):
    """Another order is stored under this order id: the id counter went back (a Redis
    failover or restart within the same second). Never absorbed as a redelivery: the
    record can never be stored, so it goes to the poison queue (or, without one, fails
    and reaches the DLQ), raises its alarm and waits for an operator."""


def persist_order(db: Database, redis: Any, gate: Gate, message: OrderMessage) -> Decision:
    """Decide the order in the database, then clear its pending mark in Redis.

    Database errors (unreachable, deadlock, timeout) propagate: the caller
    reports the record as failed and SQS retries it.
    """
    decision = _decide(db, message)
    try:
        gate.settle(message.voucher_id, message.user_id, message.order_id)
        if decision.changed:  # a redelivery's acceptedAt may differ from the stored one
            hints.finalize(redis, message, decision.status, decision.reason)
    except Exception:
        # The database already holds the truth; reconciliation clears stale marks,
        # and the status route asks MySQL when the hint is not final.
        log.warning("could not update Redis for order %s", message.order_id, exc_info=True)
    return decision


def _decide(db: Database, m: OrderMessage) -> Decision:
    def insert(cursor: DictCursor) -> Decision:
        # The voucher's row is locked first, as reconciliation does before it fails an
        # order that never reached the queue: the two never decide one order twice.
        cursor.execute(
            "SELECT sv.voucher_id, r.user_id, r.voucher_id AS rejected_voucher, r.reason"
            " FROM tb_seckill_voucher sv LEFT JOIN tb_voucher_order_rejection r ON r.order_id = %s"
            " WHERE sv.voucher_id = %s FOR UPDATE",
            (m.order_id, m.voucher_id),
        )
        row = cursor.fetchone()
        if row is None:
            raise _Refused("VOUCHER_NOT_FOUND")
        if row["reason"] is not None:
            _same_order(m, row["user_id"], row["rejected_voucher"])
            return Decision(FAILED, row["reason"], changed=False)
        try:
            cursor.execute(
                "INSERT INTO tb_voucher_order (id, user_id, voucher_id, create_time) VALUES (%s, %s, %s, %s)",
                (m.order_id, m.user_id, m.voucher_id, to_db(m.accepted_at)),
            )
        except pymysql.err.IntegrityError as exc:
            if exc.args[0] != DUPLICATE_KEY:
                raise
            raise _Duplicate from exc
        cursor.execute(
            "UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = %s AND stock > 0", (m.voucher_id,)
        )
        if cursor.rowcount == 0:
            raise _Refused("SOLD_OUT")
        return Decision(CONFIRMED)

    def stored(cursor: DictCursor) -> dict[str, Any] | None:
        cursor.execute("SELECT user_id, voucher_id FROM tb_voucher_order WHERE id = %s", (m.order_id,))
        return cursor.fetchone()

    try:
        return db.run(insert)
    except _Duplicate:
        # Which key? Judge by what is stored under this order id, not by the error text.
        order = db.run(stored, read_only=True)
        if order is None:
            return _refuse(db, m, "DUPLICATE_ORDER")  # the user holds another order of this voucher
        _same_order(m, order["user_id"], order["voucher_id"])
        return Decision(CONFIRMED, changed=False)  # a redelivery
    except _Refused as refused:
        return _refuse(db, m, refused.reason)


def _same_order(m: OrderMessage, user_id: Any, voucher_id: Any) -> None:
    """A decision stored under this order id is this order's, or the id was reused."""
    if (int(user_id), int(voucher_id)) != (m.user_id, m.voucher_id):
        raise OrderIdConflict(f"order id {m.order_id} already belongs to another order")


def _reject(cursor: DictCursor, m: OrderMessage, reason: str) -> bool:
    """Record the refusal; False if one is already recorded under this order id."""
    cursor.execute(
        "INSERT IGNORE INTO tb_voucher_order_rejection (order_id, user_id, voucher_id, reason) VALUES (%s, %s, %s, %s)",
        (m.order_id, m.user_id, m.voucher_id, reason),
    )
    return cursor.rowcount == 1


def _refuse(db: Database, m: OrderMessage, reason: str) -> Decision:
    """The order's transaction rolled back; the refusal is recorded on its own."""

    def record(cursor: DictCursor) -> Decision:
        if _reject(cursor, m, reason):
            return Decision(FAILED, reason)
        cursor.execute(
            "SELECT user_id, voucher_id, reason FROM tb_voucher_order_rejection WHERE order_id = %s", (m.order_id,)
        )
        earlier = cursor.fetchone()
        _same_order(m, earlier["user_id"], earlier["voucher_id"])
        return Decision(FAILED, earlier["reason"], changed=False)

    return db.run(record)


def fail_unqueued(db: Database, m: OrderMessage) -> bool:
    """Decide, as FAILED ``NOT_QUEUED``, an order whose client was never told 202 and
    that never reached MySQL, so that a copy still on its way can never confirm it.
    False when MySQL holds the order already (it was queued after all)."""

    def fail(cursor: DictCursor) -> bool:
        cursor.execute("SELECT 1 FROM tb_seckill_voucher WHERE voucher_id = %s FOR UPDATE", (m.voucher_id,))
        cursor.execute("SELECT 1 FROM tb_voucher_order WHERE id = %s", (m.order_id,))
        if cursor.fetchone() is not None:
            return False
        _reject(cursor, m, NOT_QUEUED)
        return True

    return db.run(fail)
