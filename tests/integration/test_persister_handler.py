"""OrderPersisterFunction through events/order_persister_batch.json-shaped events: every
row of the persister's outcome table (tests/outcomes.py) in one batch, with and without a
poison queue; batch item failures; a database outage; a poison queue that refuses."""

from __future__ import annotations

import copy
import json
import sys
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from seckill.ids import next_order_id
from seckill.infra import keys
from seckill.infra.db import Credentials, Database
from seckill.messages import queue_depth
from seckill.press.gate import Gate
from seckill_local.lambdas import load_handler
from seckill_local.template import Template
from tests.helpers import accept, closed_port, db_rows, load_event, module_of, new_user
from tests.outcomes import (
    RECORD_ATTRIBUTES,
    ROWS,
    Arena,
    check_effects,
    check_poison_queue,
    database_unreachable,
    received,
    seen,
)

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


def persister_with_poison_queue(template: Template, poison_url: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh OrderPersisterFunction module, imported as the runtime would with ORDER_POISON_QUEUE_URL
    set. The suite's own import (without the variable) stays what ``handlers`` returns."""
    fn = template.functions["OrderPersisterFunction"]
    with monkeypatch.context() as patch:
        patch.setenv("ORDER_POISON_QUEUE_URL", poison_url)
        patch.setattr(sys, "modules", dict(sys.modules))  # the fresh module does not replace the suite's
        handler = load_handler(fn)
        module = module_of(handler)
    assert module.poison is not None
    return module


def committed(database: Database) -> int:
    """COMMITs on this thread's connection of ``database``, as MariaDB counts them."""
    with database.connection().cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE 'Com_commit'")
        return int(cursor.fetchone()["Value"])


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


@pytest.mark.parametrize("poisoning", [True, False], ids=["poison queue", "no poison queue"])
def test_every_outcome_at_once_in_one_batch(
    poisoning: bool,
    handlers: dict[str, Handler],
    template: Template,
    queues: dict[str, str],
    context: Any,
    arena: Arena,
    db: Database,
    redis: Any,
    sqs: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each row of the table in one batch (all but a database outage, which concerns the
    whole batch: below), decided in one transaction: each record gets its own row's
    outcome, and only the records that failed are reported."""
    poison_url = queues["OrderPoisonQueue"]
    if poisoning:
        module = persister_with_poison_queue(template, poison_url, monkeypatch)
    else:
        module = module_of(handlers["OrderPersisterFunction"])
    rows = [row for row in ROWS if row.arrange is not database_unreachable]
    cases = [row.arrange(arena) for row in rows]
    before = [seen(db, redis, case) for case in cases]
    records = [record(case.body) for case in cases]
    for rec in records:
        rec["messageAttributes"] = RECORD_ATTRIBUTES
    commits = committed(module.db)

    response = module.lambda_handler(json.loads(json.dumps(batch(*records))), context)

    assert committed(module.db) == commits + 1
    assert failures(response) == {
        rec["messageId"] for rec, row in zip(records, rows, strict=True) if row.expect.failed(poisoning)
    }
    for row, case, seen_before in zip(rows, cases, before, strict=True):
        check_effects(case, row.expect, seen_before, seen(db, redis, case))
    moved = [case for row, case in zip(rows, cases, strict=True) if poisoning and row.expect.unstorable]
    check_poison_queue(received(sqs, poison_url, len(moved)), moved)


def test_a_batch_where_every_record_fails_returns_all_of_them(persist: Callable[..., dict[str, Any]]) -> None:
    records = [record(raw) for raw in ("x", "{}", "[1]", '{"orderId": "5"}')]
    response = persist(*records)
    assert failures(response) == {r["messageId"] for r in records}
    assert len(response["batchItemFailures"]) == len(records)


def test_a_database_outage_fails_the_batchs_orders_and_still_moves_its_poison(
    template: Template,
    queues: dict[str, str],
    context: Any,
    sqs: Any,
    arena: Arena,
    creds: Credentials,
    redis: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A retryable failure stays a batch item failure (SQS retries, then the DLQ); a record
    that can never be stored still goes to the poison queue, which needs no database."""
    module = persister_with_poison_queue(template, queues["OrderPoisonQueue"], monkeypatch)
    voucher_id = arena.make_voucher(stock=5)
    orders = [arena.accept(voucher_id) for _ in range(3)]
    records = [record(m.to_json()) for m in orders]
    bad = record("not json")
    unreachable = Credentials("127.0.0.1", closed_port(), creds.user, creds.password, creds.database)
    monkeypatch.setattr(module, "db", Database(unreachable))

    response = module.lambda_handler(json.loads(json.dumps(batch(records[0], bad, *records[1:]))), context)

    assert failures(response) == {rec["messageId"] for rec in records}
    assert [m["Body"] for m in received(sqs, queues["OrderPoisonQueue"], 1)] == ["not json"]
    assert all(redis.hexists(keys.pending(voucher_id), str(m.user_id)) for m in orders)  # nothing decided


def test_a_poison_queue_that_refuses_the_send_makes_it_a_batch_item_failure(
    handlers: dict[str, Handler],
    template: Template,
    queues: dict[str, str],
    context: Any,
    sqs: Any,
    gate: Gate,
    redis: Any,
    make_voucher: Callable[..., int],
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = queues["OrderPoisonQueue"].rsplit("/", 1)[0] + f"/no-such-queue-{uuid.uuid4().hex[:8]}"
    module = persister_with_poison_queue(template, missing, monkeypatch)
    voucher_id = make_voucher(stock=5)
    good = accept(gate, voucher_id, new_user())
    bad = record("not json")

    response = module.lambda_handler(json.loads(json.dumps(batch(bad, record(good.to_json())))), context)

    assert failures(response) == {bad["messageId"]}  # SQS keeps it, and dead-letters it in the end
    assert [int(o["id"]) for o in orders_of(db, voucher_id)] == [good.order_id]
    assert queue_depth(sqs, queues["OrderPoisonQueue"]) == 0
