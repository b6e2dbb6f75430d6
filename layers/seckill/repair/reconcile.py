"""Reconciliation: resolve stale reservations and repair Redis/MySQL drift.

Safe at any time, alongside live traffic, and any number of times in a row:

1. a voucher on sale whose Redis state is gone is left to recovery
   (``seckill.repair.recovery.recover_if_lost``), and reported ``missing``;
2. a reservation pending longer than ``pending_age`` (beyond any request's
   lifetime, so no live request still owns it) is
   - cleared, if MySQL has already decided its order;
   - re-queued, if its order was promised (the client was answered 202): the
     persister is idempotent, so a message that was in fact sent costs only a
     duplicate;
   - failed (``NOT_QUEUED``) and released, if its order was never promised (the
     request answered 503 or died): a copy still on its way is then refused;
3. every hold past its deadline is expired, by ``seckill.holds.expire`` as the
   expiry function would: a lost or dead-lettered expiry (or an order stored
   with no ``pay_by``) keeps a unit off sale one pass at most;
4. every closed order (and every draw order failed ``NOT_ADMITTED``) whose unit
   never reached Redis (a give-back that failed after MySQL committed) is given
   back, whatever is on OrderQueue;
5. once the queue is drained, Redis stock and buyers are compared with MySQL
   and, where they differ, repaired (``lua/restore.lua``).

The stock repair waits for an empty queue because it sets Redis's stock to
MySQL's less the reservations Redis still holds: an order on its way that Redis
no longer holds a mark for (a partial loss) is counted by neither, and would be
sold twice. A missed give-back needs no such count: MySQL's stock holds that
unit already, the order is closed for good, and ``lua/give_back.lua`` returns
it once per order id (``seckill:returned:{v}``), whatever else runs.

``seckill-reconcile`` (``seckill_ops.reconcile``) runs it once; ReconcilerFunction runs it on a schedule.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from pymysql.cursors import DictCursor

from seckill import holds
from seckill.draw.admission import NOT_ADMITTED
from seckill.holds import CLOSED_STATUS, Expiry
from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.infra.timeutil import from_ms
from seckill.messages import OrderMessage, OrderQueue, Sent
from seckill.persist.persistence import fail_unqueued
from seckill.press.gate import Gate, Mark, Reservation
from seckill.repair.restore import Mode, Restored, restore, voucher_ids_on_sale

# A reservation younger than this may still belong to a live request: API Gateway
# gives up on a request after 30 s, so an operator may not go below that.
MIN_PENDING_AGE = timedelta(seconds=30)
DEFAULT_PENDING_AGE = timedelta(minutes=2)


def operator_pending_age(seconds: float, name: str) -> timedelta:
    """A pending age an operator asked for (option or event field ``name``), refused
    below the floor."""
    if seconds < MIN_PENDING_AGE.total_seconds():
        raise ValueError(f"{name} must be at least {MIN_PENDING_AGE.seconds}: a younger reservation may be live")
    return timedelta(seconds=seconds)


@dataclass
class VoucherReconciled:
    voucher_id: int
    missing: bool = False  # lost from Redis: recovery's to rebuild
    requeued: list[str] = field(default_factory=list)  # order ids
    failed: list[str] = field(default_factory=list)  # order ids never promised nor queued
    cleared: list[str] = field(default_factory=list)  # order ids already decided
    expired: list[str] = field(default_factory=list)  # order ids of holds past their deadline, expired now
    returned: list[str] = field(default_factory=list)  # order ids of closed holds whose unit Redis missed
    drift: Restored | None = None
    repaired: bool = False


@dataclass
class Reconciled:
    queue_drained: bool
    vouchers: list[VoucherReconciled]

    def totals(self) -> dict[str, int]:
        v = self.vouchers
        return {
            "vouchers": len(v),
            "missing": sum(x.missing for x in v),
            "requeued": sum(len(x.requeued) for x in v),
            "failed": sum(len(x.failed) for x in v),
            "cleared": sum(len(x.cleared) for x in v),
            "expired": sum(len(x.expired) for x in v),
            "returned": sum(len(x.returned) for x in v),
            "drifted": sum(bool(x.drift and x.drift.drifted) for x in v),
            "repaired": sum(x.repaired for x in v),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "queueDrained": self.queue_drained,
            "totals": self.totals(),
            "vouchers": [asdict(x) for x in self.vouchers],
        }


def decided_orders(db: Database, order_ids: list[int]) -> set[int]:
    if not order_ids:
        return set()
    marks = ", ".join(["%s"] * len(order_ids))

    def read(cursor: DictCursor) -> set[int]:
        cursor.execute(
            f"SELECT id FROM tb_voucher_order WHERE id IN ({marks})"
            f" UNION SELECT order_id FROM tb_voucher_order_rejection WHERE order_id IN ({marks})",
            (*order_ids, *order_ids),
        )
        return {int(next(iter(r.values()))) for r in cursor.fetchall()}

    return db.run(read, read_only=True)


def resolve_pending(
    db: Database,
    redis: RedisClient,
    gate: Gate,
    queue: OrderQueue,
    voucher_id: int,
    older_than_ms: int,
    result: VoucherReconciled,
) -> None:
    stale: list[tuple[int, Mark]] = []
    for user, value in redis.hgetall(keys.pending(voucher_id)).items():
        mark = Mark.parse(value)
        if mark is not None and str(user).isdigit() and mark.accepted_ms <= older_than_ms:
            stale.append((int(user), mark))
    decided = decided_orders(db, [m.order_id for _, m in stale])
    for user_id, mark in stale:
        reservation = Reservation(voucher_id, user_id, mark.token, mark.accepted_ms, mark.order_id)
        order = OrderMessage(mark.order_id, user_id, voucher_id, from_ms(mark.accepted_ms))
        if mark.order_id in decided:
            if gate.settle(voucher_id, user_id, mark.order_id):
                result.cleared.append(str(mark.order_id))
        elif mark.promised:
            # The client holds a 202: the order must reach MySQL (a copy that was in
            # fact sent costs only a duplicate, which the persister absorbs).
            if queue.send(order) is not Sent.REFUSED:
                result.requeued.append(str(mark.order_id))
        elif fail_unqueued(db, order):
            # Nobody was told 202 (the request answered 503 or died): fail the order
            # first, so a copy still on its way cannot confirm it, then free the unit.
            result.failed.append(str(mark.order_id))
            gate.release(reservation)
        elif gate.settle(voucher_id, user_id, mark.order_id):
            result.cleared.append(str(mark.order_id))  # it reached MySQL meanwhile


def give_back_missed(db: Database, scripts: Scripts, voucher_id: int) -> list[str]:
    """Give back the units of the voucher's closed orders, and of its orders failed
    ``NOT_ADMITTED``, that Redis never got; the order ids given back now. Called once a
    check found some (``Restored.returns_recorded``): ``give_back`` skips, atomically,
    every order whose unit is back already."""

    def read(cursor: DictCursor) -> list[int]:
        cursor.execute(
            "SELECT id AS order_id FROM tb_voucher_order WHERE voucher_id = %s AND status = %s"
            " UNION ALL SELECT order_id FROM tb_voucher_order_rejection WHERE voucher_id = %s AND reason = %s",
            (voucher_id, CLOSED_STATUS, voucher_id, NOT_ADMITTED),
        )
        return [int(r["order_id"]) for r in cursor.fetchall()]

    return [str(o) for o in db.run(read, read_only=True) if holds.give_back(scripts, voucher_id, o) == 1]


def reconcile(
    db: Database,
    redis: RedisClient,
    scripts: Scripts,
    queue: OrderQueue,
    *,
    drained: bool,
    pending_age: timedelta = DEFAULT_PENDING_AGE,
    repair: bool = True,
    voucher_ids: list[int] | None = None,
) -> Reconciled:
    """One pass over the vouchers on sale (or ``voucher_ids``).

    ``drained``: no order is on OrderQueue; drift is repaired only then. Without
    ``repair`` nothing is expired, given back or repaired: the pass reports.
    A Redis failure after an expiry committed is raised; the next pass gives its unit back.
    """
    gate = Gate(redis, scripts, refusal_cache_seconds=0)
    # The gate stamps reservations with the Redis server's clock; judge their age by it too.
    seconds, micros = redis.time()
    older_than_ms = seconds * 1000 + micros // 1000 - int(pending_age.total_seconds() * 1000)
    results = []
    for voucher_id in voucher_ids if voucher_ids is not None else voucher_ids_on_sale(db):
        result = VoucherReconciled(voucher_id)
        if repair:
            # Before the check, so that it counts these units back: in MySQL at once, in
            # Redis by each expiry's give-back (a lost voucher's rebuild counts them).
            for order_id in holds.overdue(db, voucher_id):
                if holds.expire(db, redis, scripts, order_id).outcome is Expiry.EXPIRED:
                    result.expired.append(str(order_id))
        state = restore(db, scripts, voucher_id, "check")
        if state is None:
            continue  # not a seckill voucher MySQL knows
        results.append(result)
        if state.redis_stock is None:
            result.missing = True
            continue
        if repair and state.returns_recorded:
            result.returned = give_back_missed(db, scripts, voucher_id)
        resolve_pending(db, redis, gate, queue, voucher_id, older_than_ms, result)
        mode: Mode = "repair" if drained and repair else "check"
        result.drift = restore(db, scripts, voucher_id, mode)
        result.repaired = bool(result.drift and result.drift.applied and result.drift.drifted)
    return Reconciled(drained, results)
