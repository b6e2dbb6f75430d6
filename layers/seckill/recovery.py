"""Rebuilding the gate's Redis state from MySQL (``lua/restore.lua``).

After Redis lost its data (a restart without persistence, a failover to an
empty node) every voucher on sale is unknown to the gate. ``rebuild`` puts
back stock, buyers and window from the database, never clobbering a voucher
whose state is still there; ``repair`` overwrites a drifted one.

Orders accepted but not yet in MySQL are on OrderQueue or in its dead-letter
queue, and their reservations were lost with Redis: rebuilt without them, the
stock would count them as unsold and the gate would accept orders MySQL must
then refuse. So ``recover_if_lost`` first waits for the queue to drain, then reads the
dead-letter queue (without consuming it) and gives those orders their
reservations back; if either cannot be done it changes nothing, and the gate
keeps answering 503 TRY_AGAIN, never a false "not found".

``recover_if_lost`` is the one way back, used by ReconcilerFunction on its schedule, by
``python -m seckill.recovery`` (the operator's ``seckill-recovery``) and by the demo.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pymysql.cursors import DictCursor
from redis.exceptions import LockError

from seckill import hints, keys
from seckill.clients import RedisClient, redis_client, sqs_client
from seckill.config import Settings
from seckill.db import Database
from seckill.ids import BEGIN_EPOCH, COUNT_BITS, SEQUENCE_MASK
from seckill.messages import OrderMessage, dead_lettered_orders, queue_depth, wait_drained
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


# A sale that ended recently is still looked after: its pending orders need resolving,
# and its Redis state answers ENDED without asking MySQL.
ENDED_WITHIN = timedelta(days=1)


def voucher_ids_on_sale(db: Database) -> list[int]:
    """Seckill vouchers whose sale has not ended, or ended less than ``ENDED_WITHIN``
    ago; withdrawn ones included."""
    since = to_db(datetime.now(UTC) - ENDED_WITHIN)

    def read(cursor: DictCursor) -> list[int]:
        cursor.execute("SELECT voucher_id FROM tb_seckill_voucher WHERE end_time > %s ORDER BY voucher_id", (since,))
        return [int(r["voucher_id"]) for r in cursor.fetchall()]

    return db.run(read, read_only=True)


def restore(
    db: Database,
    redis: RedisClient,
    scripts: Scripts,
    voucher_id: int,
    mode: Mode,
    dead_letters: Sequence[OrderMessage] = (),
) -> Restored | None:
    """Align one voucher's Redis state with MySQL; None if MySQL does not know it.

    ``dead_letters``: this voucher's orders waiting in the dead-letter queue; those
    MySQL has not decided get their reservation back (when rebuilding a lost voucher).

    The voucher's row stays locked (FOR UPDATE) while the script runs, so no
    persister commits an order between what MySQL says and what Redis is told.
    """

    def align(cursor: DictCursor) -> Restored | None:
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
            keys=keys.voucher_keys(voucher_id),
            args=[
                mode,
                int(row["stock"]),
                begin_ms,
                end_ms,
                json.dumps([str(r["user_id"]) for r in orders]),
                json.dumps(decided),
                json.dumps([[str(m.user_id), str(m.order_id), str(to_ms(m.accepted_at))] for m in dead_letters]),
            ],
        )
        return Restored(
            voucher_id, bool(applied), None if int(old) < 0 else int(old), int(expected), int(added), int(removed)
        )

    # Safe to run twice: the script only ever aligns Redis with what MySQL says.
    return db.run(align)


def restore_order_counter(db: Database, scripts: Scripts, now: datetime | None = None) -> int:
    """Raise today's order-id counter to the largest sequence MySQL holds for today,
    so ids made after a loss never repeat ids already handed out."""
    now = now or datetime.now(UTC)
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    first_id = (int(day_start.timestamp()) - BEGIN_EPOCH) << COUNT_BITS

    def read(cursor: DictCursor) -> int:
        cursor.execute(
            "SELECT GREATEST(COALESCE((SELECT MAX(id & %s) FROM tb_voucher_order WHERE id >= %s), 0),"
            " COALESCE((SELECT MAX(order_id & %s) FROM tb_voucher_order_rejection WHERE order_id >= %s), 0)) AS seq",
            (SEQUENCE_MASK, first_id, SEQUENCE_MASK, first_id),
        )
        row = cursor.fetchone()
        assert row is not None  # an aggregate answers one row
        return int(row["seq"])

    floor = db.run(read, read_only=True)
    return int(scripts.counter_floor(keys=[keys.order_counter(now)], args=[floor]))


def rebuild_voucher(
    db: Database,
    redis: RedisClient,
    scripts: Scripts,
    voucher_id: int,
    mode: Mode,
    dead_letters: Sequence[OrderMessage],
    hint_ttl: int,
) -> Restored | None:
    """Rebuild one voucher, its orders waiting in the dead-letter queue counted as
    outstanding (their status hints, lost with Redis, written again)."""
    waiting = [m for m in dead_letters if m.voucher_id == voucher_id]
    restored = restore(db, redis, scripts, voucher_id, mode, waiting)
    if restored is not None and restored.applied:
        for m in waiting:
            hints.write_pending(redis, m, hint_ttl)
    return restored


def rebuild(
    db: Database,
    redis: RedisClient,
    scripts: Scripts,
    *,
    dead_letters: Sequence[OrderMessage],
    hint_ttl: int,
    force: bool = False,
) -> list[Restored]:
    """Every voucher on sale whose Redis state is missing (or, with ``force``, every one),
    and the order-id counter. Call it only once OrderQueue has drained, with every
    order of the dead-letter queue: ``recover_if_lost`` does both."""
    mode: Mode = "repair" if force else "missing"
    restore_order_counter(db, scripts)
    ids = voucher_ids_on_sale(db)
    results = [rebuild_voucher(db, redis, scripts, v, mode, dead_letters, hint_ttl) for v in ids]
    redis.set(keys.loaded(), 1)
    return [r for r in results if r is not None]


REBUILD_LOCK_SECONDS = 120


@contextmanager
def rebuilding(redis: RedisClient, *, wait: float) -> Iterator[bool]:
    """One rebuild at a time: reading the dead-letter queue hides its messages from
    every other reader for a few seconds, so two rebuilds at once would each see
    part of it and both defer. Yields whether this one may go ahead."""
    lock = redis.lock(keys.rebuild_lock(), timeout=REBUILD_LOCK_SECONDS, blocking_timeout=wait)
    acquired = bool(lock.acquire(blocking=wait > 0))
    try:
        yield acquired
    finally:
        if acquired:
            with contextlib.suppress(LockError):
                lock.release()  # it may have expired: the rebuild is done either way


def read_dead_letters(sqs: Any, dlq_url: str, *, attempts: int = 3) -> tuple[list[OrderMessage] | None, str]:
    """Every order waiting in the dead-letter queue, or None and why not."""
    if not dlq_url:
        return None, "ORDER_DLQ_URL is not set, so the orders in the dead-letter queue cannot be counted"
    for attempt in range(attempts):
        orders, complete = dead_lettered_orders(sqs, dlq_url)
        if complete:
            return orders, ""
        # Another reader (a replay, a concurrent reconciliation) holds some for a few seconds.
        time.sleep(2 * (attempt + 1))
    return None, "some dead-lettered messages are in flight (is a replay running?)"


@dataclass(frozen=True)
class Recovery:
    lost: bool  # Redis had lost its data, or some voucher's (or ``force``)
    rebuilt: list[Restored]
    dead_letters: int  # orders of the dead-letter queue counted as outstanding
    blocked: str = ""  # why nothing was rebuilt


def some_voucher_missing(db: Database, redis: RedisClient, scripts: Scripts) -> bool:
    """The state of some voucher on sale is missing (evicted, or a preload whose
    creation never committed) while Redis kept the rest."""
    states = (restore(db, redis, scripts, v, "check") for v in voucher_ids_on_sale(db))
    return any(s is not None and s.redis_stock is None for s in states)


def recover_if_lost(
    db: Database,
    redis: RedisClient,
    scripts: Scripts,
    sqs: Any,
    settings: Settings,
    *,
    wait: float,
    force: bool = False,
    missing: bool | None = None,
) -> Recovery:
    """When Redis lost data (or with ``force``): once every accepted order can be counted
    (OrderQueue drained, the dead-letter queue read whole), rebuild what is missing
    (everything, with ``force``). Changes nothing otherwise.

    Up to ``wait`` seconds go to the queue's draining when Redis lost everything (the
    gate answers 503 for every voucher meanwhile) or with ``force``; a voucher missing
    alone is rebuilt only if the queue is drained already, or on a later run.

    ``missing``: whether some voucher is missing, when the caller has just seen it
    (a reconciliation pass); None to look."""
    everything = force or not redis.exists(keys.loaded())
    if not everything and not (some_voucher_missing(db, redis, scripts) if missing is None else missing):
        return Recovery(False, [], 0)
    if not wait_drained(sqs, settings.order_queue_url, wait if everything else 0):
        depth = queue_depth(sqs, settings.order_queue_url)
        return Recovery(True, [], 0, f"{depth} orders are still on the order queue")
    with rebuilding(redis, wait=wait) as alone:
        if not alone:
            return Recovery(True, [], 0, "another rebuild is running")
        letters, why = read_dead_letters(sqs, settings.order_dlq_url)
        if letters is None:
            return Recovery(True, [], 0, why)
        rebuilt = rebuild(db, redis, scripts, dead_letters=letters, hint_ttl=settings.status_ttl_seconds, force=force)
    return Recovery(True, rebuilt, len(letters))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seckill-recovery",
        description="Rebuild the Redis state (stock, buyers, sale window) of every voucher on sale from MySQL, "
        "after Redis lost its data. It first waits for the order queue (ORDER_QUEUE_URL) to drain and reads "
        "the dead-letter queue (ORDER_DLQ_URL) without consuming it: orders still waiting count as sold. "
        "Vouchers whose state is present are left alone unless --force. Exit 0 when rebuilt, 1 when it "
        "could not be done yet (nothing is changed), 2 on a usage or configuration error.",
    )
    parser.add_argument("--force", action="store_true", help="overwrite present state too (repairs drift)")
    parser.add_argument(
        "--wait-for-queue",
        type=float,
        default=30,
        metavar="SECONDS",
        help="wait up to this long for the order queue to drain (default 30)",
    )
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if not settings.order_queue_url or not settings.order_dlq_url:
        parser.error("ORDER_QUEUE_URL and ORDER_DLQ_URL must name the order queue and its dead-letter queue")
    redis = redis_client(settings)
    done = recover_if_lost(
        Database.from_settings(settings),
        redis,
        Scripts.register(redis),
        sqs_client(),
        settings,
        wait=args.wait_for_queue,
        force=args.force,
    )
    if done.blocked:
        print(
            f"not rebuilt: {done.blocked}. Nothing was changed; the gate answers 503 TRY_AGAIN for lost vouchers "
            "until this succeeds. Let the persister drain the queue (is MySQL up?), let any replay finish, "
            "then run this again.",
            file=sys.stderr,
        )
        return 1
    if not done.lost:
        print("nothing to rebuild: Redis holds every voucher on sale (--force rebuilds them anyway)")
        return 0
    for r in done.rebuilt:
        if r.applied:
            print(
                f"voucher {r.voucher_id}: stock {r.redis_stock} -> {r.expected_stock}, "
                f"buyers +{r.buyers_added} -{r.buyers_removed}"
            )
    rebuilt = sum(r.applied for r in done.rebuilt)
    print(f"{rebuilt} of {len(done.rebuilt)} vouchers on sale rebuilt")
    if done.dead_letters:
        print(
            f"{done.dead_letters} orders in the dead-letter queue were counted as sold; "
            "replay them (seckill-dlq-replay) once their cause is fixed"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
