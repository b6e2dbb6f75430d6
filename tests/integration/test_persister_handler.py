"""OrderPersisterFunction through events/order_persister_batch.json-shaped events:
every persister outcome (docs/contract.md), partial batch failures, redelivery, and
records that can never be stored, with and without a poison queue."""

from __future__ import annotations

import base64
import copy
import json
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pytest

from seckill import keys
from seckill.db import Credentials, Database
from seckill.gate import Gate
from seckill.ids import next_order_id
from seckill.messages import OrderMessage, queue_depth
from seckill.poison import REASON_ATTRIBUTE
from seckill_local.lambdas import load_handler
from seckill_local.template import Template
from tests.helpers import accept, closed_port, db_rows, load_event, new_user

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
    message = accept(gate, redis, voucher_id, user_id)
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
    redis: Any,
    persist: Callable[..., dict[str, Any]],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
) -> None:
    voucher_id = make_voucher(stock=5)
    message = accept(gate, redis, voucher_id, new_user())
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
    first = accept(gate, redis, voucher_id, user_id)
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
    message = accept(gate, redis, voucher_id, user_id)
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
    message = accept(gate, redis, voucher_id, user_id)
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
    redis: Any,
    persist: Callable[..., dict[str, Any]],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
) -> None:
    voucher_id = make_voucher(stock=10)
    messages = [accept(gate, redis, voucher_id, new_user()) for _ in range(6)]
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
    good = [accept(gate, redis, voucher_id, new_user()) for _ in range(3)]
    refused = accept(gate, redis, sold_out, new_user())
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


# ---------------------------------------------------------------- records that can never be stored

# Message attributes as Lambda hands them to the function (binary values base64-encoded).
RECORD_ATTRIBUTES = {
    "trace": {"stringValue": "poison-test", "stringListValues": [], "binaryListValues": [], "dataType": "String"},
    "blob": {
        "stringValue": None,
        "binaryValue": base64.b64encode(b"\x00\xff").decode(),
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "Binary",
    },
}
MALFORMED = ["not json", '{"orderId": "1", "userId": 2}', '{"orderId": 5, "userId": 1, "voucherId": 1}']


def persister_with_poison_queue(template: Template, poison_url: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh OrderPersisterFunction module, imported as the runtime would with ORDER_POISON_QUEUE_URL
    set. The suite's own import (without the variable) stays what ``handlers`` returns."""
    fn = template.functions["OrderPersisterFunction"]
    with monkeypatch.context() as patch:
        patch.setenv("ORDER_POISON_QUEUE_URL", poison_url)
        patch.setattr(sys, "modules", dict(sys.modules))  # the fresh module does not replace the suite's
        handler = load_handler(fn)
        module = sys.modules[handler.__module__]
    assert module.poison is not None
    return module


def received(sqs: Any, url: str, count: int, timeout: float = 10) -> list[dict[str, Any]]:
    """Receive (and delete) until ``count`` messages came, or ``timeout`` seconds passed."""
    taken: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(taken) < count and time.monotonic() < deadline:
        messages = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=1
        ).get("Messages", [])
        for m in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        taken.extend(messages)
    return taken


@pytest.fixture
def poisoned(
    handlers: dict[str, Handler],
    template: Template,
    queues: dict[str, str],
    context: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[..., dict[str, Any]]:
    """Invokes a persister whose poison queue is this test's OrderPoisonQueue."""
    module = persister_with_poison_queue(template, queues["OrderPoisonQueue"], monkeypatch)

    def invoke(*records: dict[str, Any]) -> dict[str, Any]:
        return module.lambda_handler(json.loads(json.dumps(batch(*records))), context)

    return invoke


def test_malformed_records_move_to_the_poison_queue_unchanged_and_are_acknowledged(
    redis: Any,
    poisoned: Callable[..., dict[str, Any]],
    sqs: Any,
    queues: dict[str, str],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
) -> None:
    voucher_id = make_voucher(stock=5)
    good = accept(gate, redis, voucher_id, new_user())
    bad = [record(raw) for raw in MALFORMED]
    for rec in bad:
        rec["messageAttributes"] = RECORD_ATTRIBUTES
    records = [bad[0], record(good.to_json()), bad[1], bad[2]]

    assert failures(poisoned(*records)) == set()  # every record acknowledged

    assert [int(o["id"]) for o in orders_of(db, voucher_id)] == [good.order_id]
    moved = received(sqs, queues["OrderPoisonQueue"], len(MALFORMED))
    assert sorted(m["Body"] for m in moved) == sorted(MALFORMED)  # unchanged, each once
    for m in moved:
        attributes = m["MessageAttributes"]
        assert attributes["trace"] == {"StringValue": "poison-test", "DataType": "String"}
        assert attributes["blob"] == {"BinaryValue": b"\x00\xff", "DataType": "Binary"}
        assert attributes[REASON_ATTRIBUTE]["DataType"] == "String"
        assert attributes[REASON_ATTRIBUTE]["StringValue"].startswith("malformed order message: ")
    assert queue_depth(sqs, queues["OrderPoisonQueue"]) == 0
    assert queue_depth(sqs, queues["OrderDeadLetterQueue"]) == 0


def test_an_order_id_held_by_another_order_moves_to_the_poison_queue(
    redis: Any,
    poisoned: Callable[..., dict[str, Any]],
    sqs: Any,
    queues: dict[str, str],
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
) -> None:
    """The id counter went back: a second order under a stored id can never be stored,
    so it is kept apart (with why) rather than cycle DLQ -> replay -> DLQ."""
    voucher_id = make_voucher(stock=5)
    first = accept(gate, redis, voucher_id, new_user())
    assert failures(poisoned(record(first.to_json()))) == set()
    clash = replace(first, user_id=new_user())

    assert failures(poisoned(record(clash.to_json()))) == set()

    (moved,) = received(sqs, queues["OrderPoisonQueue"], 1)
    assert moved["Body"] == clash.to_json()
    assert moved["MessageAttributes"][REASON_ATTRIBUTE]["StringValue"].startswith("order id conflict: ")
    assert [(int(o["id"]), int(o["user_id"])) for o in orders_of(db, voucher_id)] == [(first.order_id, first.user_id)]
    assert db_stock(db, voucher_id) == 4


def test_a_poison_queue_that_refuses_the_send_makes_it_a_batch_item_failure(
    redis: Any,
    handlers: dict[str, Handler],
    template: Template,
    queues: dict[str, str],
    context: Any,
    sqs: Any,
    gate: Gate,
    make_voucher: Callable[..., int],
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = queues["OrderPoisonQueue"].rsplit("/", 1)[0] + f"/no-such-queue-{uuid.uuid4().hex[:8]}"
    module = persister_with_poison_queue(template, missing, monkeypatch)
    voucher_id = make_voucher(stock=5)
    good = accept(gate, redis, voucher_id, new_user())
    bad = record("not json")

    response = module.lambda_handler(json.loads(json.dumps(batch(bad, record(good.to_json())))), context)

    assert failures(response) == {bad["messageId"]}  # SQS keeps it, and dead-letters it in the end
    assert [int(o["id"]) for o in orders_of(db, voucher_id)] == [good.order_id]
    assert queue_depth(sqs, queues["OrderPoisonQueue"]) == 0


def test_without_a_poison_queue_a_malformed_record_is_a_batch_item_failure(
    persist: Callable[..., dict[str, Any]], sqs: Any, session_queues: dict[str, str]
) -> None:
    """ORDER_POISON_QUEUE_URL unset (as for the suite's handlers): nothing is sent anywhere."""
    records = [record(raw) for raw in MALFORMED]
    assert failures(persist(*records)) == {r["messageId"] for r in records}
    assert queue_depth(sqs, session_queues["OrderPoisonQueue"]) == 0


def test_a_database_outage_never_sends_an_order_to_the_poison_queue(
    template: Template,
    queues: dict[str, str],
    context: Any,
    sqs: Any,
    gate: Gate,
    make_voucher: Callable[..., int],
    creds: Credentials,
    redis: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A retryable failure stays a batch item failure (SQS retries, then the DLQ)."""
    module = persister_with_poison_queue(template, queues["OrderPoisonQueue"], monkeypatch)
    voucher_id, user_id = make_voucher(stock=5), new_user()
    rec = record(accept(gate, redis, voucher_id, user_id).to_json())
    unreachable = Credentials("127.0.0.1", closed_port(), creds.user, creds.password, creds.database)
    monkeypatch.setattr(module, "db", Database(unreachable))

    assert failures(module.lambda_handler(json.loads(json.dumps(batch(rec))), context)) == {rec["messageId"]}

    assert queue_depth(sqs, queues["OrderPoisonQueue"]) == 0
    assert redis.hexists(keys.pending(voucher_id), str(user_id))
