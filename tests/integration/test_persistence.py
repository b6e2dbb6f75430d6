"""``persist_order`` against the real MariaDB and Redis: every persister outcome (docs/contract.md),
and the order message's parsing."""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pymysql
import pytest

from seckill import hints, keys
from seckill.db import Credentials, Database
from seckill.gate import Gate
from seckill.ids import next_order_id
from seckill.messages import OrderMessage
from seckill.persistence import Decision, OrderIdConflict, persist_order
from seckill.timeutil import to_db
from tests.helpers import accept, db_rows, new_user


def fabricated(voucher_id: int, user_id: int, redis: Any) -> OrderMessage:
    """A message the gate never saw (drift between Redis and MySQL, or a replay)."""
    return OrderMessage(next_order_id(redis), user_id, voucher_id, datetime.now(UTC))


def db_stock(db: Database, voucher_id: int) -> int | None:
    rows = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    return int(rows[0]["stock"]) if rows else None


def orders(db: Database, **where: int) -> list[dict[str, Any]]:
    clause = " AND ".join(f"{column} = %s" for column in where)
    return db_rows(db, f"SELECT * FROM tb_voucher_order WHERE {clause}", *where.values())


def rejection(db: Database, order_id: int) -> dict[str, Any] | None:
    rows = db_rows(db, "SELECT * FROM tb_voucher_order_rejection WHERE order_id = %s", order_id)
    return rows[0] if rows else None


def pending_mark(redis: Any, message: OrderMessage) -> str | None:
    return redis.hget(keys.pending(message.voucher_id), str(message.user_id))


# --- inserted, stock decremented -> CONFIRMED ----------------------------------------------


def test_confirmed_inserts_decrements_and_clears_the_pending_mark(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=10)
    message = accept(gate, redis, voucher_id)
    assert pending_mark(redis, message) is not None

    decision = persist_order(db, redis, gate, message)

    assert decision == Decision("CONFIRMED", None, changed=True)
    [row] = orders(db, id=message.order_id)
    assert (row["user_id"], row["voucher_id"], row["status"]) == (message.user_id, voucher_id, 1)
    # The order's time is when the gate accepted it, not when it was persisted.
    assert row["create_time"] == to_db(message.accepted_at)
    assert db_stock(db, voucher_id) == 9
    assert rejection(db, message.order_id) is None
    assert pending_mark(redis, message) is None
    # Confirming does not give anything back in Redis.
    assert redis.sismember(keys.buyers(voucher_id), str(message.user_id))
    assert int(redis.get(keys.stock(voucher_id))) == 9


def test_same_order_id_again_changes_nothing(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=10)
    message = accept(gate, redis, voucher_id)
    assert persist_order(db, redis, gate, message).changed is True

    for _ in range(3):
        assert persist_order(db, redis, gate, message) == Decision("CONFIRMED", None, changed=False)
    assert len(orders(db, id=message.order_id)) == 1
    assert db_stock(db, voucher_id) == 9
    assert rejection(db, message.order_id) is None


def test_redelivery_of_a_confirmed_order_with_a_later_reservation_pending(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=10)
    message = accept(gate, redis, voucher_id)
    persist_order(db, redis, gate, message)
    # Some later pending mark of the same user (e.g. written by hand while reconciling).
    redis.hset(keys.pending(voucher_id), str(message.user_id), "1:other:42")
    persist_order(db, redis, gate, message)
    # A redelivery settles only its own order id.
    assert pending_mark(redis, message) == "1:other:42"


# --- this user already has another order -> DUPLICATE_ORDER -------------------------------


def test_another_order_of_the_same_user_fails_duplicate(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=10)
    first = accept(gate, redis, voucher_id)
    persist_order(db, redis, gate, first)
    second = fabricated(voucher_id, first.user_id, redis)

    decision = persist_order(db, redis, gate, second)

    assert decision == Decision("FAILED", "DUPLICATE_ORDER", changed=True)
    row = rejection(db, second.order_id)
    assert row is not None
    assert (row["user_id"], row["voucher_id"], row["reason"]) == (first.user_id, voucher_id, "DUPLICATE_ORDER")
    assert orders(db, id=second.order_id) == []
    assert [r["id"] for r in orders(db, user_id=first.user_id, voucher_id=voucher_id)] == [first.order_id]
    assert db_stock(db, voucher_id) == 9


# --- stock already 0 in the database -> SOLD_OUT -----------------------------------------


def test_database_stock_zero_fails_sold_out_and_clears_the_mark(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=5)
    message = accept(gate, redis, voucher_id)
    # Redis and MySQL drifted: the database has nothing left.
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", voucher_id)

    decision = persist_order(db, redis, gate, message)

    assert decision == Decision("FAILED", "SOLD_OUT", changed=True)
    assert orders(db, id=message.order_id) == []
    assert orders(db, user_id=message.user_id, voucher_id=voucher_id) == []
    row = rejection(db, message.order_id)
    assert row is not None
    assert row["reason"] == "SOLD_OUT"
    assert db_stock(db, voucher_id) == 0
    # Decided (as failed): the pending mark goes too.
    assert pending_mark(redis, message) is None


def test_last_unit_goes_to_the_first_order_only(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=1)
    winner = accept(gate, redis, voucher_id)
    late = fabricated(voucher_id, new_user(), redis)
    assert persist_order(db, redis, gate, winner).status == "CONFIRMED"
    assert persist_order(db, redis, gate, late) == Decision("FAILED", "SOLD_OUT", changed=True)
    assert db_stock(db, voucher_id) == 0
    assert [r["id"] for r in orders(db, voucher_id=voucher_id)] == [winner.order_id]


# --- unknown voucher -----------------------------------------------------------------------


def test_unknown_voucher_fails_voucher_not_found(db: Database, gate: Gate, redis: Any) -> None:
    voucher_id = secrets.randbelow(10**12) + 10**15  # far above the suite's AUTO_INCREMENT
    message = fabricated(voucher_id, new_user(), redis)

    assert persist_order(db, redis, gate, message) == Decision("FAILED", "VOUCHER_NOT_FOUND", changed=True)
    # The inserted order rolled back with its transaction.
    assert orders(db, id=message.order_id) == []
    row = rejection(db, message.order_id)
    assert row is not None
    assert row["reason"] == "VOUCHER_NOT_FOUND"


# --- a rejected order stays rejected --------------------------------------------------------


def test_rejected_order_redelivered_stays_failed_never_both(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=5)
    message = accept(gate, redis, voucher_id)
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", voucher_id)
    assert persist_order(db, redis, gate, message).reason == "SOLD_OUT"

    # Stock comes back in the database; a redelivery must still not confirm the order.
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 5 WHERE voucher_id = %s", voucher_id)
    for _ in range(2):
        assert persist_order(db, redis, gate, message) == Decision("FAILED", "SOLD_OUT", changed=False)
    assert orders(db, id=message.order_id) == []
    assert db_stock(db, voucher_id) == 5
    assert len(db_rows(db, "SELECT * FROM tb_voucher_order_rejection WHERE order_id = %s", message.order_id)) == 1


def test_duplicate_redelivered_stays_failed(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=5)
    first = accept(gate, redis, voucher_id)
    persist_order(db, redis, gate, first)
    second = fabricated(voucher_id, first.user_id, redis)
    persist_order(db, redis, gate, second)
    assert persist_order(db, redis, gate, second) == Decision("FAILED", "DUPLICATE_ORDER", changed=False)
    assert orders(db, id=second.order_id) == []
    assert db_stock(db, voucher_id) == 4


# --- concurrent deliveries of one message -----------------------------------------------


def test_concurrent_redeliveries_confirm_once(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=10)
    message = accept(gate, redis, voucher_id)
    decisions: list[Decision] = []
    start = threading.Barrier(4)

    def deliver() -> None:
        start.wait()
        decisions.append(persist_order(db, redis, gate, message))  # each thread has its own connection

    workers = [threading.Thread(target=deliver) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert sorted(d.changed for d in decisions) == [False, False, False, True]
    assert {d.status for d in decisions} == {"CONFIRMED"}
    assert db_stock(db, voucher_id) == 9
    assert len(orders(db, id=message.order_id)) == 1


def test_concurrent_redeliveries_of_a_rejected_order_record_it_once(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=5)
    message = accept(gate, redis, voucher_id)
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", voucher_id)
    decisions: list[Decision] = []
    deadlocks: list[pymysql.err.OperationalError] = []
    start = threading.Barrier(4)

    def deliver() -> None:
        start.wait()
        try:
            decisions.append(persist_order(db, redis, gate, message))
        except pymysql.err.OperationalError as exc:
            # Waiters on a rolled-back duplicate insert may deadlock: the contract has SQS retry those.
            deadlocks.append(exc)

    workers = [threading.Thread(target=deliver) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert all(exc.args[0] == 1213 for exc in deadlocks)
    # The retries SQS would make.
    decisions.extend(persist_order(db, redis, gate, message) for _ in deadlocks)

    # Exactly one delivery recorded the refusal; the others found it decided.
    assert sorted(d.changed for d in decisions) == [False, False, False, True]
    assert {(d.status, d.reason) for d in decisions} == {("FAILED", "SOLD_OUT")}
    assert orders(db, id=message.order_id) == []


# --- database unreachable --------------------------------------------------------------------


def test_unreachable_database_propagates_and_writes_nothing(
    db: Database, creds: Credentials, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    voucher_id = make_voucher(stock=5)
    message = accept(gate, redis, voucher_id)
    mark = pending_mark(redis, message)
    unreachable = Database(replace(creds, port=1))

    with pytest.raises(pymysql.err.OperationalError):
        persist_order(unreachable, redis, gate, message)

    # SQS will retry: nothing was decided, so the pending mark stays for the retry.
    assert pending_mark(redis, message) == mark
    assert orders(db, id=message.order_id) == []
    assert rejection(db, message.order_id) is None
    assert db_stock(db, voucher_id) == 5
    # The retry, once the database is back, confirms it.
    assert persist_order(db, redis, gate, message).status == "CONFIRMED"


# --- the order message -----------------------------------------------------------------------


def test_an_order_id_held_by_another_order_is_never_taken_for_a_redelivery(
    redis: Any, db: Database, gate: Gate, make_voucher: Callable[..., int]
) -> None:
    """If the id counter ever went back (Redis lost it within the same second), a new
    order could arrive under a stored order's id: it must fail loudly (SQS retries,
    then the DLQ and its alarm), not be absorbed as a redelivery and lost."""
    voucher_id = make_voucher(stock=5)
    first = accept(gate, redis, voucher_id)
    assert persist_order(db, redis, gate, first).status == "CONFIRMED"
    clash = replace(first, user_id=new_user())
    with pytest.raises(OrderIdConflict):
        persist_order(db, redis, gate, clash)
    assert [row["user_id"] for row in orders(db, id=first.order_id)] == [first.user_id]
    assert rejection(db, first.order_id) is None
    assert db_stock(db, voucher_id) == 4


def test_a_rejected_order_id_reused_for_another_user_is_a_conflict_not_a_redelivery(
    db: Database, gate: Gate, redis: Any, make_voucher: Callable[..., int]
) -> None:
    """An id stored as FAILED arriving again for another user is not "already decided":
    absorbing it would lose that user's order and rewrite the status hint to them,
    showing them another user's order."""
    voucher_id = make_voucher(stock=5)
    first = accept(gate, redis, voucher_id)
    hints.write_pending(redis, first, 60)
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", voucher_id)
    assert persist_order(db, redis, gate, first) == Decision("FAILED", "SOLD_OUT")
    hint = redis.get(keys.order_status(first.order_id))
    assert json.loads(hint)["userId"] == first.user_id
    clash = replace(first, user_id=new_user())
    with pytest.raises(OrderIdConflict):
        persist_order(db, redis, gate, clash)
    assert rejection(db, first.order_id)["user_id"] == first.user_id
    assert redis.get(keys.order_status(first.order_id)) == hint
    # The same order again is still absorbed as decided.
    assert persist_order(db, redis, gate, first) == Decision("FAILED", "SOLD_OUT", changed=False)
