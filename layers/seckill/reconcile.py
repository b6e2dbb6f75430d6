"""Reconciliation: resolve stale reservations and repair Redis/MySQL drift.

Safe at any time, alongside live traffic, and any number of times in a row:

1. a voucher on sale whose Redis state is gone is rebuilt from MySQL, once the
   queue is drained (orders still on their way would otherwise count as
   unsold); until then the gate answers 503 TRY_AGAIN for it;
2. a reservation pending longer than ``pending_age`` (far beyond any request's
   lifetime, so no live request still owns it) is
   - cleared, if MySQL has already decided its order;
   - re-queued, if it carries an order id (the persister is idempotent, so a
     message that was in fact sent costs only a duplicate);
   - released, if it has none: the request died before it could answer 202;
3. once the queue is drained, Redis stock and buyers are compared with MySQL
   and, where they differ, repaired (``lua/restore.lua``).

``python -m seckill.reconcile`` runs it once; ReconcilerFunction runs it on a schedule.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from seckill import keys
from seckill.clients import redis_client, sqs_client
from seckill.config import Settings
from seckill.db import Database
from seckill.gate import Gate, Reservation
from seckill.messages import OrderMessage, OrderQueue, queue_depth
from seckill.recovery import Restored, restore, restore_order_counter, voucher_ids_on_sale
from seckill.scripts import Scripts
from seckill.timeutil import from_ms

_PENDING = re.compile(r"(\d+):([^:]+)(?::(\d+))?")
# Pending orders of a sale that ended recently still need resolving.
ENDED_WITHIN = timedelta(days=1)


@dataclass
class VoucherReconciled:
    voucher_id: int
    rebuilt: bool = False
    rebuild_deferred: bool = False  # lost from Redis, but orders are still on the queue
    requeued: list[str] = field(default_factory=list)  # order ids
    released: list[int] = field(default_factory=list)  # user ids
    cleared: list[str] = field(default_factory=list)  # order ids already decided
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
            "rebuilt": sum(x.rebuilt for x in v),
            "deferred": sum(x.rebuild_deferred for x in v),
            "requeued": sum(len(x.requeued) for x in v),
            "released": sum(len(x.released) for x in v),
            "cleared": sum(len(x.cleared) for x in v),
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
    with db.transaction() as cursor:
        cursor.execute(
            f"SELECT id FROM tb_voucher_order WHERE id IN ({marks})"
            f" UNION SELECT order_id FROM tb_voucher_order_rejection WHERE order_id IN ({marks})",
            (*order_ids, *order_ids),
        )
        return {int(next(iter(r.values()))) for r in cursor.fetchall()}


def resolve_pending(
    db: Database, gate: Gate, queue: OrderQueue, voucher_id: int, older_than_ms: int, result: VoucherReconciled
) -> None:
    stale: list[tuple[int, int, str, int | None]] = []
    for user, value in gate.redis.hgetall(keys.pending(voucher_id)).items():
        found = _PENDING.fullmatch(value)
        if found is None or not str(user).isdigit():
            continue
        accepted_ms, token, order_id = int(found[1]), found[2], found[3]
        if accepted_ms <= older_than_ms:
            stale.append((int(user), accepted_ms, token, int(order_id) if order_id else None))
    decided = decided_orders(db, [o for *_, o in stale if o is not None])
    for user_id, accepted_ms, token, order_id in stale:
        if order_id is None:
            if gate.release(Reservation(voucher_id, user_id, token, accepted_ms)):
                result.released.append(user_id)
        elif order_id in decided:
            if gate.settle(voucher_id, user_id, order_id):
                result.cleared.append(str(order_id))
        else:
            queue.send(OrderMessage(order_id, user_id, voucher_id, from_ms(accepted_ms)))
            result.requeued.append(str(order_id))


def reconcile(
    db: Database,
    gate: Gate,
    queue: OrderQueue,
    *,
    drained: bool,
    pending_age: timedelta = timedelta(minutes=2),
    repair: bool = True,
    voucher_ids: list[int] | None = None,
) -> Reconciled:
    """One pass over the vouchers on sale (or ``voucher_ids``). Drift is only
    repaired when ``drained`` (no order still on its way to MySQL) and ``repair``."""
    scripts = gate.scripts
    # The gate stamps reservations with the Redis server's clock; judge their age by it too.
    seconds, micros = gate.redis.time()
    older_than_ms = seconds * 1000 + micros // 1000 - int(pending_age.total_seconds() * 1000)
    if drained and not gate.redis.exists(keys.loaded()):
        restore_order_counter(db, scripts)  # Redis lost its data: the id counter too
    results = []
    for voucher_id in voucher_ids if voucher_ids is not None else voucher_ids_on_sale(db, ended_within=ENDED_WITHIN):
        result = VoucherReconciled(voucher_id)
        rebuilt = restore(db, gate.redis, scripts, voucher_id, "missing" if drained else "check")
        if rebuilt is None:
            continue  # not a seckill voucher MySQL knows
        results.append(result)
        if rebuilt.redis_stock is None and not drained:
            result.rebuild_deferred = True
            continue
        result.rebuilt = rebuilt.applied
        resolve_pending(db, gate, queue, voucher_id, older_than_ms, result)
        mode = "repair" if drained and repair else "check"
        result.drift = restore(db, gate.redis, scripts, voucher_id, mode)
        result.repaired = bool(result.drift and result.drift.applied and result.drift.drifted)
    if voucher_ids is None and not any(r.rebuild_deferred for r in results):
        gate.redis.set(keys.loaded(), 1)  # every voucher on sale is in Redis now
    return Reconciled(drained, results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m seckill.reconcile",
        description="Resolve stale pending reservations (re-queue or release) and repair Redis/MySQL drift "
        "once the order queue is drained. Safe to run at any time and repeatedly. Exit 0 when nothing "
        "is left drifting, 1 when drift remains (e.g. the queue was not drained).",
    )
    parser.add_argument("--pending-age", type=float, default=120, help="seconds before a reservation is stale")
    parser.add_argument("--no-repair", action="store_true", help="report drift without repairing it")
    parser.add_argument("--voucher", type=int, action="append", help="only this voucher (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if not settings.order_queue_url:
        parser.error("ORDER_QUEUE_URL must name the order queue")
    redis = redis_client(settings)
    sqs = sqs_client()
    result = reconcile(
        Database.from_settings(settings),
        Gate(redis, Scripts.register(redis)),
        OrderQueue(sqs, settings.order_queue_url),
        drained=queue_depth(sqs, settings.order_queue_url) == 0,
        pending_age=timedelta(seconds=args.pending_age),
        repair=not args.no_repair,
        voucher_ids=args.voucher,
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        totals = result.totals()
        print(", ".join(f"{k} {v}" for k, v in totals.items()) + f"; queue drained: {result.queue_drained}")
    remaining = [v for v in result.vouchers if v.drift and v.drift.drifted and not v.repaired]
    return 1 if remaining else 0


if __name__ == "__main__":
    sys.exit(main())
