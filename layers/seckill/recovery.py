"""Rebuilding the gate's Redis state from MySQL (``lua/restore.lua``).

After Redis lost its data (a restart without persistence, a failover to an
empty node) every voucher on sale is unknown to the gate. ``rebuild`` puts
back stock, buyers and window from the database, never clobbering a voucher
whose state is still there; ``repair`` overwrites a drifted one.

Orders still on the queue are not in MySQL yet, and their pending marks were
lost with Redis: rebuilt before the queue drains, the stock would count them
as unsold and the gate would accept orders MySQL must then refuse (FAILED).
So the command first waits for the queue to drain (``--wait-for-queue``);
meanwhile the gate answers 503 TRY_AGAIN, never a false "not found".

``python -m seckill.recovery`` rebuilds every voucher whose sale has not ended.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from seckill import keys
from seckill.clients import redis_client, sqs_client
from seckill.config import Settings
from seckill.db import Database
from seckill.ids import BEGIN_EPOCH, COUNT_BITS, SEQUENCE_MASK, day_key
from seckill.messages import wait_drained
from seckill.scripts import Scripts
from seckill.timeutil import from_db, to_db, to_ms
from seckill.vouchers import WITHDRAWN

Mode = Literal["missing", "repair", "check"]


@dataclass(frozen=True)
class Restored:
    voucher_id: int
    applied: bool
    redis_stock: int | None  # before; None when the key was missing
    expected_stock: int
    buyers_added: int
    buyers_removed: int

    @property
    def drifted(self) -> bool:
        return self.redis_stock != self.expected_stock or self.buyers_added > 0 or self.buyers_removed > 0


def voucher_ids_on_sale(db: Database, *, ended_within: timedelta = timedelta(0)) -> list[int]:
    """Seckill vouchers whose sale has not ended (or ended less than ``ended_within`` ago),
    withdrawn ones included: their pending orders still need resolving."""
    since = to_db(datetime.now(UTC) - ended_within)
    with db.transaction() as cursor:
        cursor.execute("SELECT voucher_id FROM tb_seckill_voucher WHERE end_time > %s ORDER BY voucher_id", (since,))
        return [int(r["voucher_id"]) for r in cursor.fetchall()]


def restore(db: Database, redis: Any, scripts: Scripts, voucher_id: int, mode: Mode) -> Restored | None:
    """Align one voucher's Redis state with MySQL; None if MySQL does not know it.

    The voucher's row stays locked (FOR UPDATE) while the script runs, so no
    persister commits an order between what MySQL says and what Redis is told.
    """
    with db.transaction() as cursor:
        cursor.execute(
            "SELECT sv.stock, sv.begin_time, sv.end_time, v.status FROM tb_seckill_voucher sv"
            " JOIN tb_voucher v ON v.id = sv.voucher_id WHERE sv.voucher_id = %s FOR UPDATE",
            (voucher_id,),
        )
        row = cursor.fetchone()
        if row is None:
            return None
        # A withdrawn sale keeps a closed window (0/0): the gate answers ENDED to every press.
        withdrawn = int(row["status"]) == WITHDRAWN
        begin_ms = 0 if withdrawn else to_ms(from_db(row["begin_time"]))
        end_ms = 0 if withdrawn else to_ms(from_db(row["end_time"]))
        cursor.execute("SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
        orders = cursor.fetchall()
        cursor.execute("SELECT order_id FROM tb_voucher_order_rejection WHERE voucher_id = %s", (voucher_id,))
        rejected = cursor.fetchall()
        # Ids travel as JSON strings: Lua numbers are doubles and would round 64-bit order ids.
        decided = [str(r["id"]) for r in orders] + [str(r["order_id"]) for r in rejected]
        applied, old, expected, added, removed = scripts.restore(
            keys=[keys.stock(voucher_id), keys.buyers(voucher_id), keys.window(voucher_id), keys.pending(voucher_id)],
            args=[
                mode,
                int(row["stock"]),
                begin_ms,
                end_ms,
                json.dumps([str(r["user_id"]) for r in orders]),
                json.dumps(decided),
            ],
        )
    return Restored(
        voucher_id, bool(applied), None if int(old) < 0 else int(old), int(expected), int(added), int(removed)
    )


def restore_order_counter(db: Database, scripts: Scripts, now: datetime | None = None) -> int:
    """Raise today's order-id counter to the largest sequence MySQL holds for today,
    so ids made after a loss never repeat ids already handed out."""
    now = now or datetime.now(UTC)
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    first_id = (int(day_start.timestamp()) - BEGIN_EPOCH) << COUNT_BITS
    with db.transaction() as cursor:
        cursor.execute(
            "SELECT GREATEST(COALESCE((SELECT MAX(id & %s) FROM tb_voucher_order WHERE id >= %s), 0),"
            " COALESCE((SELECT MAX(order_id & %s) FROM tb_voucher_order_rejection WHERE order_id >= %s), 0)) AS seq",
            (SEQUENCE_MASK, first_id, SEQUENCE_MASK, first_id),
        )
        floor = int(cursor.fetchone()["seq"])
    return int(scripts.counter_floor(keys=[day_key(now)], args=[floor]))


def rebuild(db: Database, redis: Any, scripts: Scripts, *, force: bool = False) -> list[Restored]:
    """Every voucher on sale whose Redis state is missing (or, with ``force``, every one),
    and the order-id counter."""
    mode: Mode = "repair" if force else "missing"
    restore_order_counter(db, scripts)
    results = [restore(db, redis, scripts, v, mode) for v in voucher_ids_on_sale(db)]
    redis.set(keys.loaded(), 1)
    return [r for r in results if r is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m seckill.recovery",
        description="Rebuild the Redis state (stock, buyers, sale window) of every voucher on sale from MySQL, "
        "after Redis lost its data. Vouchers whose state is present are left alone unless --force.",
    )
    parser.add_argument("--force", action="store_true", help="overwrite present state too (repairs drift)")
    parser.add_argument(
        "--wait-for-queue",
        type=float,
        default=30,
        metavar="SECONDS",
        help="first wait up to this long for ORDER_QUEUE_URL to drain (default 30; 0 to skip)",
    )
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    waiting = args.wait_for_queue > 0 and bool(settings.order_queue_url)
    if waiting and not wait_drained(sqs_client(), settings.order_queue_url, args.wait_for_queue):
        print(f"the order queue did not drain within {args.wait_for_queue:.0f} s; rebuilding anyway")
    redis = redis_client(settings)
    results = rebuild(Database.from_settings(settings), redis, Scripts.register(redis), force=args.force)
    for r in results:
        if r.applied:
            print(
                f"voucher {r.voucher_id}: stock {r.redis_stock} -> {r.expected_stock}, "
                f"buyers +{r.buyers_added} -{r.buyers_removed}"
            )
    rebuilt = sum(r.applied for r in results)
    print(f"{rebuilt} of {len(results)} vouchers on sale rebuilt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
