"""Writing accepted orders to MySQL, a whole SQS batch in one transaction (the outcomes: docs/contract.md).

A batch is decided as if its orders came one by one in message order, each in a
transaction of its own: the same outcome for every order, with a few statements
for the whole batch instead of several per order. The voucher rows are the hot
rows of a sale, so each is locked once and its stock decremented once, by the
number of orders the batch confirms.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pymysql.cursors import DictCursor
from redis.exceptions import NoScriptError

from seckill import hints
from seckill.draw.admission import NOT_ADMITTED, admitted_orders
from seckill.hints import CONFIRMED, FAILED
from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.db import Database, is_connection_error
from seckill.infra.lua_scripts import Script, Scripts
from seckill.infra.timeutil import from_db, to_db
from seckill.messages import OrderMessage

log = logging.getLogger(__name__)

NOT_QUEUED = "NOT_QUEUED"  # reason of an order failed by reconciliation


@dataclass(frozen=True)
class Decision:
    status: str  # CONFIRMED or FAILED
    reason: str | None = None
    changed: bool = True  # False when an earlier delivery had already decided it
    # The deadline (UTC, by the database's clock) of a stored order still unpaid,
    # newly confirmed or found so by a redelivery; None otherwise.
    pay_by: datetime | None = field(default=None, compare=False)


class OrderIdConflict(RuntimeError):
    """Another order is stored under this order id: the id counter went back (a Redis
    failover or restart within the same second). Never absorbed as a redelivery: the
    record can never be stored, so it goes to the poison queue (or, without one, fails
    and reaches the DLQ), raises its alarm and waits for an operator."""


# Per order, in message order: its decision, or what left it undecided (an
# OrderIdConflict, or a database error that SQS's retry may overcome).
Outcome = Decision | Exception


def persist_orders(
    db: Database, redis: RedisClient, scripts: Scripts, messages: Sequence[OrderMessage]
) -> list[Outcome]:
    """Decide the orders in the database, then clear their pending marks and make their
    status hints final in Redis (one pipelined round trip). One outcome per message."""
    outcomes = decide_orders(db, messages)
    _write_back(redis, scripts, [(m, o) for m, o in zip(messages, outcomes, strict=True) if isinstance(o, Decision)])
    return outcomes


def decide_orders(db: Database, messages: Sequence[OrderMessage]) -> list[Outcome]:
    """All orders in one transaction. Should it fail for a reason of the database's own
    (deadlock, lock wait timeout, a writer outside the locking rules), each order is
    decided again in a transaction of its own, so that only an order at fault fails.
    A connection that is gone even after ``Database.run``'s retry, or lost at COMMIT
    (which may have committed), fails every order: SQS delivers them again, and a
    redelivery finds what was stored."""
    if not messages:
        return []
    try:
        return db.run(lambda cursor: _decide(cursor, messages))
    except Exception as exc:
        if len(messages) == 1 or is_connection_error(exc):
            return [exc] * len(messages)
        log.warning("the batch's transaction failed; deciding its %d orders one by one", len(messages), exc_info=True)
    return [_decide_alone(db, m) for m in messages]


def _decide_alone(db: Database, m: OrderMessage) -> Outcome:
    try:
        (outcome,) = db.run(lambda cursor: _decide(cursor, [m]))
    except Exception as exc:
        return exc
    return outcome


@dataclass(frozen=True)
class _Stored:
    """A decision stored (or taken earlier in the batch) under an order id."""

    user_id: int
    voucher_id: int
    reason: str | None  # None: confirmed
    pay_by: datetime | None = None  # while unpaid (naive UTC, as stored)


@dataclass
class _Found:
    """What the database holds for a batch, read under its vouchers' row locks."""

    stock: dict[int, int]  # voucher id -> stock, for the vouchers that exist
    hold: dict[int, int]  # voucher id -> hold_seconds
    now: datetime | None  # the database's clock (None when no voucher exists)
    draws: set[int]  # the vouchers sold by draw
    stored: dict[int, _Stored]  # order id -> its decision
    holders: set[tuple[int, int]]  # (user id, voucher id) of the orders stored
    admitted: set[int] = field(default_factory=set)  # order ids on a draw whose user was admitted


@dataclass
class _Decided:
    outcomes: list[Outcome]
    confirmed: list[tuple[OrderMessage, datetime]]  # with its pay_by
    rejected: list[tuple[OrderMessage, str]]


def _decide(cursor: DictCursor, messages: Sequence[OrderMessage]) -> list[Outcome]:
    decided = _judge(messages, _read(cursor, messages))
    _write(cursor, decided)
    return decided.outcomes


def _placeholders(values: Sequence[Any]) -> str:
    return ", ".join(["%s"] * len(values))


def _read(cursor: DictCursor, messages: Sequence[OrderMessage]) -> _Found:
    voucher_ids = sorted({m.voucher_id for m in messages})
    order_ids = sorted({m.order_id for m in messages})
    user_ids = sorted({m.user_id for m in messages})
    # The vouchers' rows are locked first, in one order for every batch (no deadlock
    # between batches), as reconciliation does before it fails an order that never
    # reached the queue: the two never decide one order twice.
    # Whether a voucher is a draw comes with it: a race's batch reads nothing more. The
    # subquery takes no lock (a locking read locks the outer statement's rows only), so
    # the draw clock and the entries never wait for the persister on tb_draw.
    cursor.execute(
        "SELECT sv.voucher_id, sv.stock, sv.hold_seconds, NOW(3) AS now,"
        " EXISTS (SELECT 1 FROM tb_draw d WHERE d.voucher_id = sv.voucher_id) AS draw FROM tb_seckill_voucher sv"
        f" WHERE sv.voucher_id IN ({_placeholders(voucher_ids)}) ORDER BY sv.voucher_id FOR UPDATE",
        voucher_ids,
    )
    rows = cursor.fetchall()
    found = _Found(
        {int(row["voucher_id"]): int(row["stock"]) for row in rows},
        {int(row["voucher_id"]): int(row["hold_seconds"]) for row in rows},
        rows[0]["now"] if rows else None,
        {int(row["voucher_id"]) for row in rows if row["draw"]},
        {},
        set(),
    )
    # A plain read once the locks are held sees every decision committed on these
    # vouchers: what is stored under the batch's order ids, and which of its users
    # already hold an order of its vouchers.
    cursor.execute(
        "SELECT 'order' AS kind, id AS order_id, user_id, voucher_id, NULL AS reason, status, pay_by"
        f" FROM tb_voucher_order WHERE id IN ({_placeholders(order_ids)})"
        " UNION ALL SELECT 'rejection', order_id, user_id, voucher_id, reason, NULL, NULL"
        f" FROM tb_voucher_order_rejection WHERE order_id IN ({_placeholders(order_ids)})"
        " UNION ALL SELECT 'holder', id, user_id, voucher_id, NULL, NULL, NULL FROM tb_voucher_order"
        f" WHERE user_id IN ({_placeholders(user_ids)}) AND voucher_id IN ({_placeholders(voucher_ids)})",
        [*order_ids, *order_ids, *user_ids, *voucher_ids],
    )
    for row in cursor.fetchall():
        user_voucher = (int(row["user_id"]), int(row["voucher_id"]))
        if row["kind"] == "holder":
            found.holders.add(user_voucher)
        elif row["kind"] == "rejection" or int(row["order_id"]) not in found.stored:  # a rejection is final
            found.stored[int(row["order_id"])] = _Stored(*user_voucher, row["reason"], _unpaid_until(row))
    # A redelivery keeps its decision: only the draw's orders not decided yet are re-checked.
    found.admitted = admitted_orders(
        cursor, [m for m in messages if m.voucher_id in found.draws and m.order_id not in found.stored]
    )
    return found


def _unpaid_until(row: dict[str, Any]) -> datetime | None:
    """A stored order's deadline while it is unpaid (None for one stored before holds
    whose deadline the migration has not written: it has no expiry message, docs/holds.md)."""
    return row["pay_by"] if row["kind"] == "order" and int(row["status"]) == 1 else None


def _judge(messages: Sequence[OrderMessage], found: _Found) -> _Decided:
    """Each order in message order, as if each had its own transaction: an order id
    already decided keeps its decision; otherwise the voucher must exist, a draw's
    user must have been admitted at the order's acceptance (checked before the rest,
    as the gate does), the user must hold no order of it, and stock must be left."""
    stock, stored, holders = dict(found.stock), dict(found.stored), set(found.holders)
    decided = _Decided([], [], [])
    for m in messages:
        earlier = stored.get(m.order_id)
        if earlier is not None:
            if (earlier.user_id, earlier.voucher_id) != (m.user_id, m.voucher_id):
                decided.outcomes.append(OrderIdConflict(f"order id {m.order_id} already belongs to another order"))
            else:  # a redelivery, or the same message twice in the batch
                status = CONFIRMED if earlier.reason is None else FAILED
                decided.outcomes.append(Decision(status, earlier.reason, changed=False, pay_by=from_db(earlier.pay_by)))
            continue
        if m.voucher_id not in stock:
            reason: str | None = "VOUCHER_NOT_FOUND"
        elif m.voucher_id in found.draws and m.order_id not in found.admitted:
            reason = NOT_ADMITTED  # a pass with a ticket its user does not hold
        elif (m.user_id, m.voucher_id) in holders:
            reason = "DUPLICATE_ORDER"  # the user holds another order of this voucher
        elif stock[m.voucher_id] <= 0:
            reason = "SOLD_OUT"
        else:
            reason = None
            stock[m.voucher_id] -= 1
            holders.add((m.user_id, m.voucher_id))
        pay_by = None
        if reason is None:
            assert found.now is not None  # read with the voucher's row
            pay_by = found.now + timedelta(seconds=found.hold[m.voucher_id])
            decided.confirmed.append((m, pay_by))
        else:
            decided.rejected.append((m, reason))
        stored[m.order_id] = _Stored(m.user_id, m.voucher_id, reason, pay_by)
        decided.outcomes.append(
            Decision(CONFIRMED, pay_by=from_db(pay_by)) if reason is None else Decision(FAILED, reason)
        )
    return decided


def _write(cursor: DictCursor, decided: _Decided) -> None:
    """Multi-row INSERTs (PyMySQL's executemany) and one decrement per voucher."""
    if decided.confirmed:
        cursor.executemany(
            "INSERT INTO tb_voucher_order (id, user_id, voucher_id, create_time, pay_by) VALUES (%s, %s, %s, %s, %s)",
            [(m.order_id, m.user_id, m.voucher_id, to_db(m.accepted_at), pay_by) for m, pay_by in decided.confirmed],
        )
    taken = Counter(m.voucher_id for m, _ in decided.confirmed)
    for voucher_id, count in sorted(taken.items()):
        # The guard holds even if the row lock were ever missing: then the batch rolls back.
        cursor.execute(
            "UPDATE tb_seckill_voucher SET stock = stock - %s WHERE voucher_id = %s AND stock >= %s",
            (count, voucher_id, count),
        )
        if cursor.rowcount != 1:
            raise RuntimeError(f"the stock of voucher {voucher_id} changed under its row lock")
    if decided.rejected:
        cursor.executemany(
            "INSERT INTO tb_voucher_order_rejection (order_id, user_id, voucher_id, reason) VALUES (%s, %s, %s, %s)",
            [(m.order_id, m.user_id, m.voucher_id, reason) for m, reason in decided.rejected],
        )


def _write_back(redis: RedisClient, scripts: Scripts, decided: Sequence[tuple[OrderMessage, Decision]]) -> None:
    """Clear the decided orders' pending marks (one script call per voucher), give back
    the unit of each order failed ``NOT_ADMITTED``, and make their status hints final,
    in one pipeline. The database already holds the truth: if Redis fails,
    reconciliation clears stale marks and gives back the units Redis missed, and the
    status route asks MySQL while a hint is not final."""
    if not decided:
        return
    settles: dict[int, list[int]] = {}
    for m, _ in decided:
        settles.setdefault(m.voucher_id, []).extend((m.user_id, m.order_id))
    calls: list[tuple[Script, list[str], list[int]]] = [
        (scripts.settle, [keys.pending(voucher_id)], args) for voucher_id, args in settles.items()
    ]
    # The gate took a unit for an order MySQL never counted: back on sale, once per order
    # (lua/give_back.lua), so a redelivery or a replay may run it again and adds nothing.
    calls += [
        (scripts.give_back, keys.give_back_keys(m.voucher_id), [m.order_id])
        for m, decision in decided
        if decision.reason == NOT_ADMITTED
    ]
    pipe = redis.pipeline(transaction=False)
    for script, script_keys, args in calls:
        # Queued as a plain command: redis-py's cluster pipeline refuses its evalsha()
        # method, though EVALSHA routes by its key like any other command.
        pipe.execute_command("EVALSHA", script.sha, len(script_keys), *script_keys, *args)
    for m, decision in decided:
        if decision.changed:  # a redelivery's acceptedAt may differ from the stored one
            hints.finalize(pipe, m, decision.status, decision.reason)
    try:
        results = pipe.execute(raise_on_error=False)
        for (script, script_keys, args), result in zip(calls, results, strict=False):
            if isinstance(result, NoScriptError):  # Redis restarted or failed over: load it again
                script(keys=script_keys, args=args)
    except Exception:  # the cluster client raises its own errors besides RedisError
        log.warning("could not update Redis for %d decided orders", len(decided), exc_info=True)
        return
    errors = [r for r in results if isinstance(r, Exception) and not isinstance(r, NoScriptError)]
    if errors:
        log.warning("could not update Redis for some of %d decided orders: %s", len(decided), errors[0])


def fail_unqueued(db: Database, m: OrderMessage) -> bool:
    """Decide, as FAILED ``NOT_QUEUED``, an order whose client was never told 202 and
    that never reached MySQL, so that a copy still on its way can never confirm it.
    True when it is failed, so the caller releases its unit. False when MySQL holds
    the order already (it was queued after all), or when the persister failed it
    ``NOT_ADMITTED``: the persister gives that unit back itself, and a release would
    return it twice."""

    def fail(cursor: DictCursor) -> bool:
        cursor.execute("SELECT 1 FROM tb_seckill_voucher WHERE voucher_id = %s FOR UPDATE", (m.voucher_id,))
        cursor.execute(
            "SELECT 1 FROM tb_voucher_order WHERE id = %s"
            " UNION ALL SELECT 1 FROM tb_voucher_order_rejection WHERE order_id = %s AND reason = %s",
            (m.order_id, m.order_id, NOT_ADMITTED),
        )
        if cursor.fetchall():
            return False
        cursor.execute(
            "INSERT IGNORE INTO tb_voucher_order_rejection (order_id, user_id, voucher_id, reason)"
            " VALUES (%s, %s, %s, %s)",
            (m.order_id, m.user_id, m.voucher_id, NOT_QUEUED),
        )
        return True

    return db.run(fail)
