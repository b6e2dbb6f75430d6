"""Rebuilding the gate's Redis state from MySQL (``seckill.repair.restore``, voucher by voucher).

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
``seckill-recovery`` (the operator's command, ``seckill_ops.recovery``) and by the demo.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from redis.exceptions import LockError

from seckill import hints
from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderMessage, dead_lettered_orders, queue_depth, wait_drained
from seckill.repair.counter import restore_order_counter
from seckill.repair.restore import Mode, Restored, restore, voucher_ids_on_sale


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
    restored = restore(db, scripts, voucher_id, mode, waiting)
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
    every other reader while it reads, so two rebuilds at once would each see
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


def some_voucher_missing(db: Database, scripts: Scripts) -> bool:
    """The state of some voucher on sale is missing (evicted, or a preload whose
    creation never committed) while Redis kept the rest."""
    states = (restore(db, scripts, v, "check") for v in voucher_ids_on_sale(db))
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
    if not everything and not (some_voucher_missing(db, scripts) if missing is None else missing):
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
