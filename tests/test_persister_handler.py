"""OrderPersisterFunction through events/order_persister_batch.json-shaped events:
every persister outcome (docs/contract.md), partial batch failures, redelivery."""

from __future__ import annotations

import copy
import json
import random
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from seckill import keys
from seckill.db import Credentials, Database
from seckill.gate import Gate
from seckill.ids import next_order_id
from seckill.messages import OrderMessage
from tests.conftest import closed_port, db_rows, load_event, new_user
from tests.helpers import accept

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


def record(body: str, message_id: str | None = None) -> dict[str, Any]:
    """A record shaped like those of events/order_persister_batch.json."""
    sample = load_event("order_persister_batch.json")["Records"][0]
    rec: dict[str, Any] = copy.deepcopy(sample)
    rec["messageId"] = message_id or str(uuid.uuid4())
    rec["receiptHandle"] = uuid.uuid4().hex
    rec["body"] = body
    return rec


def batch(*records: dict[str, Any]) -> dict[str, Any]:
    event = load_event("order_persister_batch.json")
    event["Records"] = list(records)
    return event


def failures(response: dict[str, Any]) -> set[str]:
    assert set(response) == {"batchItemFailures"}, response
    return {f["itemIdentifier"] for f in response["batchItemFailures"]}


@pytest.fixture
def persist(handlers: dict[str, Handler], context: Any) -> Callable[..., dict[str, Any]]:
    def invoke(*records: dict[str, Any]) -> dict[str, Any]:
        return handlers["OrderPersisterFunction"](json.loads(json.dumps(batch(*records))), context)

    return invoke


def db_stock(db: Database, voucher_id: int) -> int:
    (row,) = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    return int(row["stock"])


def orders_of(db: Database, voucher_id: int) -> list[dict[str, Any]]:
    return db_rows(db, "SELECT id, user_id, voucher_id, status FROM tb_voucher_order WHERE voucher_id = %s", voucher_id)


def rejections_of(db: Database, voucher_id: int) -> list[dict[str, Any]]:
    return db_rows(
        db, "SELECT order_id, user_id, reason FROM tb_voucher_order_rejection WHERE voucher_id = %s", voucher_id
    )


def test_sample_event_shape_is_what_the_handler_takes(
    persist: Callable[..., dict[str, Any]], make_voucher: Callable[..., int], db: Database, redis: Any
) -> None:
    """events/order_persister_batch.json itself, pointed at a voucher of this test."""
    voucher_id = make_voucher(stock=5)
    event = load_event("order_persister_batch.json")
    records = []
    for rec in event["Records"]:
        data = json.loads(rec["body"])
        data["voucherId"] = voucher_id
        data["orderId"] = str(next_order_id(redis))
        records.append(record(json.dumps(data), rec["messageId"]))

    assert failures(persist(*records)) == set()
    assert sorted(int(o["user_id"]) for o in orders_of(db, voucher_id)) == [1010, 1011]
    assert db_stock(db, voucher_id) == 3


def test_confirmed_order_is_stored_stock_decremented_and_pending_cleared(
    persist: Callable[..., dict[str, Any]],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
    redis: Any,
) -> None:
    voucher_id = make_voucher(stock=5)
    user_id = new_user()
    message = accept(gate, voucher_id, user_id)
    assert redis.hexists(keys.pending(voucher_id), str(user_id))

    assert failures(persist(record(message.to_json()))) == set()

    (order,) = orders_of(db, voucher_id)
    assert int(order["id"]) == message.order_id
    assert int(order["user_id"]) == user_id
    assert int(order["status"]) == 1  # unpaid
    assert db_stock(db, voucher_id) == 4
    assert not redis.hexists(keys.pending(voucher_id), str(user_id))
    assert redis.sismember(keys.buyers(voucher_id), str(user_id))
    (row,) = db_rows(db, "SELECT create_time FROM tb_voucher_order WHERE id = %s", message.order_id)
    assert abs(row["create_time"].replace(tzinfo=UTC) - message.accepted_at).total_seconds() < 0.01
    assert rejections_of(db, voucher_id) == []


def test_redelivery_is_success_and_changes_nothing(
    persist: Callable[..., dict[str, Any]],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
) -> None:
    voucher_id = make_voucher(stock=5)
    message = accept(gate, voucher_id, new_user())
    rec = record(message.to_json())
    assert failures(persist(rec)) == set()
    for _ in range(3):
        assert failures(persist(record(message.to_json()))) == set()
    assert [int(o["id"]) for o in orders_of(db, voucher_id)] == [message.order_id]
    assert db_stock(db, voucher_id) == 4
    assert rejections_of(db, voucher_id) == []


def test_second_order_of_the_same_user_is_failed_duplicate_and_not_retried(
    persist: Callable[..., dict[str, Any]],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
    redis: Any,
) -> None:
    voucher_id = make_voucher(stock=5)
    user_id = new_user()
    first = accept(gate, voucher_id, user_id)
    assert failures(persist(record(first.to_json()))) == set()
    # Another order id for the same (user, voucher): e.g. a Redis failover forgot the buyer.
    second = OrderMessage(next_order_id(redis), user_id, voucher_id, datetime.now(UTC))
    rec = record(second.to_json())

    assert failures(persist(rec)) == set()

    assert [int(o["id"]) for o in orders_of(db, voucher_id)] == [first.order_id]
    assert rejections_of(db, voucher_id) == [
        {"order_id": second.order_id, "user_id": user_id, "reason": "DUPLICATE_ORDER"}
    ]
    assert db_stock(db, voucher_id) == 4
    # Redelivered: still decided, still recorded once.
    assert failures(persist(rec)) == set()
    assert len(rejections_of(db, voucher_id)) == 1


def test_database_stock_zero_is_failed_sold_out_recorded_and_not_retried(
    persist: Callable[..., dict[str, Any]],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
    redis: Any,
) -> None:
    voucher_id = make_voucher(stock=5)
    user_id = new_user()
    message = accept(gate, voucher_id, user_id)
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", voucher_id)

    assert failures(persist(record(message.to_json()))) == set()

    assert orders_of(db, voucher_id) == []
    assert rejections_of(db, voucher_id) == [{"order_id": message.order_id, "user_id": user_id, "reason": "SOLD_OUT"}]
    assert db_stock(db, voucher_id) == 0
    assert not redis.hexists(keys.pending(voucher_id), str(user_id))
    assert failures(persist(record(message.to_json()))) == set()
    assert len(rejections_of(db, voucher_id)) == 1


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "",
        "[]",
        '{"orderId": 1224957284261167105, "userId": 1010, "voucherId": 1, "acceptedAt": "2026-11-30T12:00:00Z"}',
        '{"orderId": "abc", "userId": 1010, "voucherId": 1, "acceptedAt": "2026-11-30T12:00:00Z"}',
        '{"orderId": "1224957284261167105", "userId": "1010", "voucherId": 1, "acceptedAt": "2026-11-30T12:00:00Z"}',
        '{"orderId": "1224957284261167105", "userId": 1010, "voucherId": 0, "acceptedAt": "2026-11-30T12:00:00Z"}',
        '{"orderId": "1224957284261167105", "userId": 1010, "voucherId": 1}',
        '{"orderId": "1224957284261167105", "userId": 1010, "voucherId": 1, "acceptedAt": "2026-11-30T12:00:00"}',
        '{"orderId": "1224957284261167105", "userId": 1010, "voucherId": 1, "acceptedAt": "yesterday"}',
    ],
)
def test_malformed_message_is_a_batch_item_failure(
    persist: Callable[..., dict[str, Any]], raw: str, db: Database
) -> None:
    rec = record(raw)
    assert failures(persist(rec)) == {rec["messageId"]}
    assert db_rows(db, "SELECT id FROM tb_voucher_order WHERE id = %s", 1224957284261167105) == []


def test_database_unreachable_is_a_batch_item_failure_then_succeeds_on_retry(
    handlers: dict[str, Handler],
    persist: Callable[..., dict[str, Any]],
    gate: Gate,
    make_voucher: Callable[..., int],
    creds: Credentials,
    db: Database,
    redis: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    voucher_id = make_voucher(stock=5)
    user_id = new_user()
    message = accept(gate, voucher_id, user_id)
    rec = record(message.to_json())
    module = sys.modules[handlers["OrderPersisterFunction"].__module__]
    unreachable = Credentials("127.0.0.1", closed_port(), creds.user, creds.password, creds.database)
    monkeypatch.setattr(module, "db", Database(unreachable))

    assert failures(persist(rec)) == {rec["messageId"]}
    # Nothing decided: the pending mark stays for the retry.
    assert redis.hexists(keys.pending(voucher_id), str(user_id))

    monkeypatch.undo()
    assert failures(persist(rec)) == set()
    assert [int(o["id"]) for o in orders_of(db, voucher_id)] == [message.order_id]
    assert not redis.hexists(keys.pending(voucher_id), str(user_id))


def test_the_same_batch_twice_leaves_one_row_per_order(
    persist: Callable[..., dict[str, Any]],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
) -> None:
    voucher_id = make_voucher(stock=10)
    messages = [accept(gate, voucher_id, new_user()) for _ in range(6)]
    records = [record(m.to_json()) for m in messages]

    assert failures(persist(*records)) == set()
    # Delivered again, in another order, with new message ids (as a replay from the DLQ would be).
    again = [record(m.to_json()) for m in reversed(messages)]
    assert failures(persist(*again)) == set()

    assert sorted(int(o["id"]) for o in orders_of(db, voucher_id)) == sorted(m.order_id for m in messages)
    assert db_stock(db, voucher_id) == 4
    assert rejections_of(db, voucher_id) == []


def test_mixed_batch_reports_exactly_the_failing_records(
    persist: Callable[..., dict[str, Any]],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
    redis: Any,
) -> None:
    voucher_id = make_voucher(stock=10)
    sold_out = make_voucher(stock=10)
    good = [accept(gate, voucher_id, new_user()) for _ in range(3)]
    refused = accept(gate, sold_out, new_user())
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", sold_out)
    bad = [record("{oops"), record('{"orderId": "1", "userId": 2}')]
    records = [
        record(good[0].to_json()),
        bad[0],
        record(good[1].to_json()),
        record(refused.to_json()),
        bad[1],
        record(good[2].to_json()),
    ]

    assert failures(persist(*records)) == {r["messageId"] for r in bad}

    assert sorted(int(o["id"]) for o in orders_of(db, voucher_id)) == sorted(m.order_id for m in good)
    assert db_stock(db, voucher_id) == 7
    assert [r["reason"] for r in rejections_of(db, sold_out)] == ["SOLD_OUT"]


def test_a_batch_where_every_record_fails_returns_all_of_them(persist: Callable[..., dict[str, Any]]) -> None:
    records = [record(raw) for raw in ("x", "{}", "[1]", '{"orderId": "5"}')]
    response = persist(*records)
    assert failures(response) == {r["messageId"] for r in records}
    assert len(response["batchItemFailures"]) == len(records)


def test_unknown_voucher_in_the_database_is_failed_not_retried(
    persist: Callable[..., dict[str, Any]], db: Database, redis: Any
) -> None:
    voucher_id = random.randint(10**15, 10**16)
    message = OrderMessage(next_order_id(redis), new_user(), voucher_id, datetime.now(UTC))
    assert failures(persist(record(message.to_json()))) == set()
    assert orders_of(db, voucher_id) == []
    assert [r["reason"] for r in rejections_of(db, voucher_id)] == ["VOUCHER_NOT_FOUND"]
