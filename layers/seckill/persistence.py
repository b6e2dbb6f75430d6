"""Writing an accepted order to MySQL: the SPEC §5 table, one transaction per order."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pymysql

from seckill.db import Database
from seckill.gate import Gate
from seckill.messages import OrderMessage
from seckill.orders import CONFIRMED, FAILED, record_decision
from seckill.timeutil import to_db

log = logging.getLogger(__name__)

DUPLICATE_KEY = 1062


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
    record fails, reaches the DLQ and its alarm, and waits for an operator."""


def persist_order(db: Database, gate: Gate, message: OrderMessage) -> Decision:
    """Decide the order in the database, then clear its pending mark in Redis.

    Database errors (unreachable, deadlock, timeout) propagate: the caller
    reports the record as failed and SQS retries it.
    """
    decision = _decide(db, message)
    try:
        gate.settle(message.voucher_id, message.user_id, message.order_id)
        record_decision(
            gate.redis, message.order_id, message.user_id, message.voucher_id, decision.status, decision.reason
        )
    except Exception:
        # The database already holds the truth; reconciliation clears stale marks,
        # and the status route asks MySQL when the hint is not final.
        log.warning("could not update Redis for order %s", message.order_id, exc_info=True)
    return decision


def _decide(db: Database, m: OrderMessage) -> Decision:
    try:
        with db.transaction() as cursor:
            cursor.execute("SELECT reason FROM tb_voucher_order_rejection WHERE order_id = %s", (m.order_id,))
            earlier = cursor.fetchone()
            if earlier is not None:
                return Decision(FAILED, earlier["reason"], changed=False)
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
                "UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = %s AND stock > 0",
                (m.voucher_id,),
            )
            if cursor.rowcount == 0:
                cursor.execute("SELECT 1 FROM tb_seckill_voucher WHERE voucher_id = %s", (m.voucher_id,))
                raise _Refused("SOLD_OUT" if cursor.fetchone() else "VOUCHER_NOT_FOUND")
        return Decision(CONFIRMED)
    except _Duplicate:
        # Which key? Judge by what is stored under this order id, not by the error text.
        with db.transaction() as cursor:
            cursor.execute("SELECT user_id, voucher_id FROM tb_voucher_order WHERE id = %s", (m.order_id,))
            stored = cursor.fetchone()
        if stored is None:
            return _refuse(db, m, "DUPLICATE_ORDER")  # the user holds another order of this voucher
        if (int(stored["user_id"]), int(stored["voucher_id"])) != (m.user_id, m.voucher_id):
            raise OrderIdConflict(f"order id {m.order_id} already belongs to another order") from None
        return Decision(CONFIRMED, changed=False)  # a redelivery
    except _Refused as refused:
        return _refuse(db, m, refused.reason)


def _refuse(db: Database, m: OrderMessage, reason: str) -> Decision:
    """The order's transaction rolled back; the refusal is recorded on its own."""
    with db.transaction() as cursor:
        cursor.execute(
            "INSERT IGNORE INTO tb_voucher_order_rejection (order_id, user_id, voucher_id, reason)"
            " VALUES (%s, %s, %s, %s)",
            (m.order_id, m.user_id, m.voucher_id, reason),
        )
        recorded = cursor.rowcount == 1
    return Decision(FAILED, reason, changed=recorded)
