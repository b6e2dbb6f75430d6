"""The persister's decisions against the real MariaDB and Redis (and a moto poison queue):
the outcome table of docs/contract.md (tests/outcomes.py), one record at a time; what a
batch adds (orders that meet in one batch, one transaction, a transaction that fails, a
batch delivered again, persisters at work side by side); and the order message's parsing."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from seckill.ids import next_order_id
from seckill.infra import keys
from seckill.infra.db import Credentials, Database, connect, is_connection_error
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderMessage
from seckill.persist.persistence import Decision, Outcome, persist_orders
from seckill.persist.poison import Failed, Poisoned, PoisonQueue, take_batch
from seckill_demo.proxy import LossyProxy
from tests.helpers import db_rows, new_user, statements, wait_for
from tests.outcomes import ROWS, Arena, Row, check_effects, check_poison_queue, check_taken, received, seen

# --- the outcome table, one record at a time ------------------------------------------------------------


@pytest.mark.parametrize("poisoning", [True, False], ids=["poison queue", "no poison queue"])
@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_outcome(
    row: Row, poisoning: bool, arena: Arena, db: Database, redis: Any, scripts: Scripts, sqs: Any, queues: dict
) -> None:
    poison_url = queues["OrderPoisonQueue"]
    poison = PoisonQueue(sqs, poison_url) if poisoning else None
    case = row.arrange(arena)
    before = seen(db, redis, case)

    (taken,) = take_batch(case.db or db, redis, scripts, poison, [case.record()])

    check_taken(row.expect, taken, poisoning=poisoning)
    check_effects(case, row.expect, before, seen(db, redis, case))
    poisoned = [case] if isinstance(taken, Poisoned) else []
    check_poison_queue(received(sqs, poison_url, len(poisoned)), poisoned)
    if isinstance(taken, Failed):
        # SQS delivers it again, to a persister whose database answers.
        again = row.again or row.expect
        before = seen(db, redis, case)
        (retaken,) = take_batch(db, redis, scripts, poison, [case.record()])
        check_taken(again, retaken, poisoning=poisoning)
        check_effects(case, again, before, seen(db, redis, case))


# --- what a batch adds ------------------------------------------------------------------------------------


def described(outcomes: Sequence[Outcome]) -> list[tuple[str, str | None, bool] | str]:
    return [(o.status, o.reason, o.changed) if isinstance(o, Decision) else type(o).__name__ for o in outcomes]


def db_stock(db: Database, voucher_id: int) -> int:
    (row,) = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    return int(row["stock"])


def stored(db: Database, *voucher_ids: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
    """Every order and rejection of these vouchers, and their stock."""
    marks = ", ".join(["%s"] * len(voucher_ids))
    orders = db_rows(db, f"SELECT * FROM tb_voucher_order WHERE voucher_id IN ({marks}) ORDER BY id", *voucher_ids)
    rejections = db_rows(
        db, f"SELECT * FROM tb_voucher_order_rejection WHERE voucher_id IN ({marks}) ORDER BY order_id", *voucher_ids
    )
    return orders, rejections, [db_stock(db, v) for v in voucher_ids]


def in_one_transaction(db: Database, redis: Any, scripts: Scripts, messages: list[OrderMessage]) -> list[Outcome]:
    """``persist_orders``, which must decide the batch in one transaction: were it to fall
    back to one transaction per order, outcomes would hide a fault of the batch's own."""
    before = statements(db)
    outcomes = persist_orders(db, redis, scripts, messages)
    ran = statements(db) - before
    assert (ran["Com_commit"], ran["Com_rollback"]) == (1, 0)
    return outcomes


def test_a_batch_is_one_transaction_with_one_decrement_per_voucher(
    arena: Arena, db: Database, redis: Any, scripts: Scripts
) -> None:
    hot, other, sold_out = (arena.make_voucher(stock=20) for _ in range(3))
    arena.set_stock(sold_out, 0)
    vouchers = [hot, other, hot, sold_out, hot, other, hot, hot, other, hot]
    messages = [arena.accept(v) for v in vouchers]
    before = statements(db)

    outcomes = persist_orders(db, redis, scripts, messages)

    ran = statements(db) - before
    # Lock the vouchers, read what is stored, insert the orders, one decrement per
    # voucher, insert the rejections, commit.
    assert ran == Counter({"Com_commit": 1, "Com_select": 2, "Com_insert": 2, "Com_update": 2})
    assert described(outcomes) == [
        ("FAILED", "SOLD_OUT", True) if v == sold_out else ("CONFIRMED", None, True) for v in vouchers
    ]
    assert [db_stock(db, v) for v in (hot, other, sold_out)] == [14, 17, 0]
    for m in messages:  # every pending mark cleared, every hint final
        assert redis.hget(keys.pending(m.voucher_id), str(m.user_id)) is None
        assert json.loads(redis.get(keys.order_status(m.order_id)))["status"] != "PENDING"


@pytest.mark.parametrize(
    ("stock", "expected"),
    [
        (5, [("CONFIRMED", None, True), ("FAILED", "DUPLICATE_ORDER", True)]),
        # Neither is stored, so the second is no duplicate: both are refused for the stock.
        (0, [("FAILED", "SOLD_OUT", True), ("FAILED", "SOLD_OUT", True)]),
    ],
    ids=["stock left", "sold out"],
)
def test_the_same_user_twice_in_a_batch_the_first_wins(
    arena: Arena, db: Database, redis: Any, scripts: Scripts, stock: int, expected: list[tuple[str, Any, bool]]
) -> None:
    voucher_id = arena.make_voucher(stock=5)
    arena.set_stock(voucher_id, stock)
    first = arena.accept(voucher_id)
    second = arena.fabricate(voucher_id, first.user_id)

    assert described(in_one_transaction(db, redis, scripts, [first, second])) == expected

    orders, rejections, stocks = stored(db, voucher_id)
    assert [int(o["id"]) for o in orders] == ([first.order_id] if stock else [])
    assert {int(r["order_id"]): r["reason"] for r in rejections} == {
        m.order_id: reason for m, (_, reason, _) in zip((first, second), expected, strict=True) if reason
    }
    assert stocks == [max(stock - 1, 0)]


def test_the_same_order_id_twice_in_a_batch(arena: Arena, db: Database, redis: Any, scripts: Scripts) -> None:
    """A message stored twice by SQS may come twice in one batch; an id the counter
    handed out twice (for another user) is a conflict there too."""
    voucher_id = arena.make_voucher(stock=5)
    m = arena.accept(voucher_id)
    clash = replace(m, user_id=new_user())

    outcomes = in_one_transaction(db, redis, scripts, [m, m, clash])

    assert described(outcomes) == [("CONFIRMED", None, True), ("CONFIRMED", None, False), "OrderIdConflict"]
    orders, rejections, stocks = stored(db, voucher_id)
    assert ([(int(o["id"]), int(o["user_id"])) for o in orders], rejections, stocks) == (
        [(m.order_id, m.user_id)],
        [],
        [4],
    )


def test_sold_out_mid_batch_the_first_orders_get_the_stock(
    arena: Arena, db: Database, redis: Any, scripts: Scripts
) -> None:
    voucher_id = arena.make_voucher(stock=6)
    messages = [arena.accept(voucher_id) for _ in range(6)]
    arena.set_stock(voucher_id, 3)  # the database has less than Redis let through

    outcomes = in_one_transaction(db, redis, scripts, messages)

    assert described(outcomes) == [("CONFIRMED", None, True)] * 3 + [("FAILED", "SOLD_OUT", True)] * 3
    orders, rejections, stocks = stored(db, voucher_id)
    assert [int(o["id"]) for o in orders] == sorted(m.order_id for m in messages[:3])
    assert [int(r["order_id"]) for r in rejections] == sorted(m.order_id for m in messages[3:])
    assert stocks == [0]
    hints = [json.loads(redis.get(keys.order_status(m.order_id))) for m in messages]
    assert [(h["status"], h["reason"]) for h in hints] == [("CONFIRMED", None)] * 3 + [("FAILED", "SOLD_OUT")] * 3
    assert not redis.exists(keys.pending(voucher_id))


@pytest.mark.parametrize("seed", range(6))
def test_a_batch_decides_as_its_orders_would_one_by_one(
    seed: int, arena: Arena, db: Database, redis: Any, scripts: Scripts
) -> None:
    """Random batches over two vouchers with little stock, users ordering twice, the
    same message twice and an order id reused by another user: the batch's outcomes
    are those of its orders persisted one at a time, each in its own transaction."""
    rng = random.Random(seed)
    stocks = [rng.randint(0, 4), rng.randint(0, 4)]
    users = [new_user() for _ in range(5)]
    plan: list[tuple[int, int, int]] = []  # (voucher, user, order) indexes, in message order
    for _ in range(10):
        if plan and rng.random() < 0.2:
            voucher, user, order = rng.choice(plan)
            plan.append((voucher, user if rng.random() < 0.7 else (user + 1) % len(users), order))
        else:
            plan.append((rng.randrange(2), rng.randrange(len(users)), len(plan)))

    def run(persist: Callable[[list[OrderMessage]], list[Outcome]]) -> tuple[list[Any], Any]:
        """The outcomes, and what the database holds after (orders by their plan's index)."""
        vouchers = [arena.make_voucher(stock=5) for _ in stocks]
        for voucher_id, stock in zip(vouchers, stocks, strict=True):
            arena.set_stock(voucher_id, stock)
        order_ids: dict[int, int] = {}
        now = datetime.now(UTC).replace(microsecond=0)
        messages = [
            OrderMessage(order_ids.setdefault(order, next_order_id(redis)), users[user], vouchers[voucher], now)
            for voucher, user, order in plan
        ]
        outcomes = described(persist(messages))
        orders, rejections, left = stored(db, *vouchers)
        index = {order_id: order for order, order_id in order_ids.items()}
        held = (
            sorted((index[int(o["id"])], int(o["user_id"])) for o in orders),
            sorted((index[int(r["order_id"])], int(r["user_id"]), r["reason"]) for r in rejections),
            left,
        )
        return outcomes, held

    batch = run(lambda messages: in_one_transaction(db, redis, scripts, messages))
    alone = run(lambda messages: [persist_orders(db, redis, scripts, [m])[0] for m in messages])
    assert batch == alone


def test_a_batch_delivered_again_changes_nothing(arena: Arena, db: Database, redis: Any, scripts: Scripts) -> None:
    hot, sold_out = arena.make_voucher(stock=3), arena.make_voucher(stock=5)
    arena.set_stock(sold_out, 0)
    won = [arena.accept(hot) for _ in range(3)]
    batch = [won[0], arena.fabricate(hot, won[0].user_id), won[1], arena.accept(sold_out), won[2]]
    first = in_one_transaction(db, redis, scripts, batch)
    kept = stored(db, hot, sold_out)
    for m in batch:
        # PENDING again (it never replaces a final hint): a redelivery must leave the hints alone.
        redis.delete(keys.order_status(m.order_id))
        arena.hint(m)

    # Delivered again, in another order (as a replay from the DLQ would be).
    again = in_one_transaction(db, redis, scripts, list(reversed(batch)))

    assert described(again) == [(d.status, d.reason, False) for d in reversed(first) if isinstance(d, Decision)]
    assert stored(db, hot, sold_out) == kept
    assert {json.loads(redis.get(keys.order_status(m.order_id)))["status"] for m in batch} == {"PENDING"}


# --- a batch whose transaction fails ---------------------------------------------------------------------


def running(creds: Credentials, statement: str, timeout: float = 20) -> int:
    """The connection id of the session of this suite's database that runs ``statement``,
    once it does."""
    admin = connect(creds)

    def session() -> dict[str, Any] | None:
        with admin.cursor() as cursor:
            cursor.execute(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND INFO LIKE %s",
                (creds.database, statement + "%"),
            )
            return cursor.fetchone()

    try:
        row = wait_for(session, f"a session running {statement!r}", timeout=timeout, interval=0.01)
    finally:
        admin.close()
    assert row is not None
    return int(row["ID"])


def in_thread(work: Callable[[], list[Outcome]]) -> Callable[[], list[Outcome]]:
    """Starts ``work`` in a thread; the returned call waits for its outcomes."""
    done: list[list[Outcome]] = []
    thread = threading.Thread(target=lambda: done.append(work()))
    thread.start()

    def outcomes() -> list[Outcome]:
        thread.join(timeout=60)
        assert done, "the persister did not finish"
        return done[0]

    return outcomes


def test_a_batch_whose_connection_is_killed_runs_again_on_a_new_one(
    arena: Arena, creds: Credentials, db: Database, redis: Any, scripts: Scripts
) -> None:
    voucher_id = arena.make_voucher(stock=5)
    messages = [arena.accept(voucher_id) for _ in range(4)]
    holder = connect(creds)  # holds the voucher's row, so the batch waits for it
    with holder.cursor() as cursor:
        cursor.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s FOR UPDATE", (voucher_id,))
    outcomes = in_thread(lambda: persist_orders(Database(creds), redis, scripts, messages))

    victim = running(creds, "SELECT sv.voucher_id, sv.stock, sv.hold_seconds")
    with connect(creds).cursor() as cursor:
        cursor.execute(f"KILL CONNECTION {victim}")
    holder.commit()
    holder.close()

    # Nothing was committed on the killed connection: the whole batch ran again.
    assert described(outcomes()) == [("CONFIRMED", None, True)] * 4
    orders, rejections, stocks = stored(db, voucher_id)
    assert (sorted(int(o["id"]) for o in orders), rejections, stocks) == (sorted(m.order_id for m in messages), [], [1])
    assert not redis.exists(keys.pending(voucher_id))


def test_a_batch_whose_commit_answer_is_lost_fails_whole_then_its_redelivery_changes_nothing(
    arena: Arena, creds: Credentials, db: Database, redis: Any, scripts: Scripts
) -> None:
    """MySQL committed, but the answer never came: the persister cannot know, so every
    record fails and SQS delivers the batch again, which finds it all stored."""
    voucher_id = arena.make_voucher(stock=5)
    messages = [arena.accept(voucher_id) for _ in range(4)]
    with LossyProxy(creds.host, creds.port) as proxy:
        # COM_QUERY's command byte, then the statement: not the SET AUTOCOMMIT of the handshake.
        proxy.only_after, proxy.drop_replies = b"\x03COMMIT", 1
        lossy = Database(replace(creds, host="127.0.0.1", port=proxy.port))
        outcomes = persist_orders(lossy, redis, scripts, messages)
        assert proxy.dropped == 1

    assert all(isinstance(o, Exception) and is_connection_error(o) for o in outcomes), outcomes
    assert stored(db, voucher_id)[2] == [1]  # it had committed
    assert all(redis.hexists(keys.pending(voucher_id), str(m.user_id)) for m in messages)  # Redis untouched

    again = in_one_transaction(db, redis, scripts, messages)

    assert described(again) == [("CONFIRMED", None, False)] * 4
    orders, rejections, stocks = stored(db, voucher_id)
    assert (sorted(int(o["id"]) for o in orders), rejections, stocks) == (sorted(m.order_id for m in messages), [], [1])
    assert not redis.exists(keys.pending(voucher_id))


def test_a_batch_transaction_that_fails_is_decided_again_order_by_order(
    arena: Arena, creds: Credentials, db: Database, redis: Any, scripts: Scripts
) -> None:
    """A writer outside the locking rules stores an order of one of the batch's users
    while the batch inserts: the batch's INSERT meets a duplicate key and its transaction
    rolls back; each order then has a transaction of its own, and only that user's fails."""
    voucher_id = arena.make_voucher(stock=5)
    messages = [arena.accept(voucher_id) for _ in range(4)]
    outsider = connect(creds)
    with outsider.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (%s, %s, %s)",
            (next_order_id(redis), messages[1].user_id, voucher_id),
        )
    outcomes = in_thread(lambda: persist_orders(Database(creds), redis, scripts, messages))

    running(creds, "INSERT INTO tb_voucher_order")  # waiting for the outsider's row
    outsider.commit()
    outsider.close()

    confirmed = ("CONFIRMED", None, True)
    assert described(outcomes()) == [confirmed, ("FAILED", "DUPLICATE_ORDER", True), confirmed, confirmed]
    assert db_stock(db, voucher_id) == 2
    assert not redis.exists(keys.pending(voucher_id))


# --- persisters side by side ----------------------------------------------------------------------------


def test_persisters_on_overlapping_batches_never_oversell_nor_confirm_twice(
    db: Database, redis: Any, scripts: Scripts, make_voucher: Callable[..., int]
) -> None:
    """Three persisters (threads, each with its own connection) get every message of two
    vouchers, shuffled and cut into batches of 8 differently: each batch's vouchers
    come in both orders. More orders than stock."""
    stocks = {make_voucher(stock=6): 6, make_voucher(stock=4): 4}
    vouchers = list(stocks)
    now = datetime.now(UTC).replace(microsecond=0)
    on = [vouchers[1] if i % 3 == 0 else vouchers[0] for i in range(24)]  # 16 orders for 6, 8 for 4
    messages = [OrderMessage(next_order_id(redis), new_user(), voucher_id, now) for voucher_id in on]
    start = threading.Barrier(3)
    results: list[list[tuple[OrderMessage, Outcome]]] = [[] for _ in range(3)]

    def persister(n: int) -> None:
        mine = random.Random(n).sample(messages, len(messages))
        start.wait()
        for i in range(0, len(mine), 8):
            batch = mine[i : i + 8]
            results[n].extend(zip(batch, persist_orders(db, redis, scripts, batch), strict=True))

    threads = [threading.Thread(target=persister, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    by_order: dict[int, list[Outcome]] = {}
    for m, outcome in (pair for result in results for pair in result):
        by_order.setdefault(m.order_id, []).append(outcome)
    assert len(by_order) == len(messages)
    assert all(len(outcomes) == 3 for outcomes in by_order.values())
    for outcomes in by_order.values():
        assert all(isinstance(o, Decision) for o in outcomes), outcomes
        decisions = [o for o in outcomes if isinstance(o, Decision)]
        assert [d.changed for d in decisions].count(True) == 1  # decided once, found decided twice
        assert len({(d.status, d.reason) for d in decisions}) == 1
    for voucher_id, stock in stocks.items():
        orders, rejections, left = stored(db, voucher_id)
        ours = {m.order_id for m in messages if m.voucher_id == voucher_id}
        assert (len(orders), left) == (stock, [0])
        assert {int(o["id"]) for o in orders} | {int(r["order_id"]) for r in rejections} == ours
        assert {r["reason"] for r in rejections} == {"SOLD_OUT"}
        assert len(orders) + len(rejections) == len(ours)
