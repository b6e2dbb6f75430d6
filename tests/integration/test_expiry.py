"""Expiry without polling, through the handlers with real SQS (moto) records, MariaDB and
Redis: OrderPersisterFunction sends one delayed expiry per unpaid order after COMMIT, and
OrderExpiryFunction expires the overdue ones, sends early ones again, and fails what a
retry must finish."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pytest

from seckill import hints, holds
from seckill.expiry import MAX_DELAY_SECONDS, ExpiryMessage
from seckill.hints import CONFIRMED
from seckill.ids import next_order_id
from seckill.infra import keys
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderMessage, OrderQueue, queue_depth
from seckill.press.gate import Gate
from seckill.repair.reconcile import reconcile
from seckill_local.template import Template
from tests.helpers import (
    Hold,
    accept,
    closed_port,
    db_rows,
    drain,
    fresh,
    invoke,
    new_user,
    overdue,
    payment_of,
    persist_order,
    reconcile_voucher,
    sqs_record,
    stocks,
)


def expiry_record(message: ExpiryMessage | str) -> dict[str, Any]:
    return sqs_record(message if isinstance(message, str) else message.to_json(), "order_expiry.json")


class Sent:
    """The SendMessageBatch entries a module's SQS client sends, as botocore is given them."""

    def __init__(self, module: ModuleType) -> None:
        self.entries: list[dict[str, Any]] = []
        module.sqs.meta.events.register("provide-client-params.sqs.SendMessageBatch", self._seen)

    def _seen(self, params: dict[str, Any], **_: Any) -> None:
        self.entries.extend(params["Entries"])

    def bodies(self) -> list[ExpiryMessage]:
        return [ExpiryMessage.from_json(e["MessageBody"]) for e in self.entries]


@pytest.fixture
def expiry_queue(queues: dict[str, str]) -> str:
    return queues["OrderExpiryQueue"]


@pytest.fixture
def expiry_fn(template: Template, expiry_queue: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """OrderExpiryFunction sending to this test's own expiry queue."""
    return fresh(template, "OrderExpiryFunction", monkeypatch, ORDER_EXPIRY_QUEUE_URL=expiry_queue)


def status(db: Database, hold: Hold) -> tuple[int, str | None]:
    [row] = db_rows(db, "SELECT status, close_reason FROM tb_voucher_order WHERE id = %s", hold.order_id)
    return int(row["status"]), row["close_reason"]


# --- OrderExpiryFunction ------------------------------------------------------------------------


def test_an_overdue_hold_expires_and_its_unit_is_back_once(
    expiry_fn: ModuleType, context: Any, db: Database, redis: Any, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    overdue(db, hold)
    assert stocks(db, redis, hold.voucher_id) == (2, 2)
    record = expiry_record(hold.message())
    assert invoke(expiry_fn, context, "order_expiry.json", record) == set()
    assert status(db, hold) == (4, "EXPIRED")
    assert stocks(db, redis, hold.voucher_id) == (3, 3)
    assert hints.read(redis, hold.order_id, hold.user_id)["status"] == "EXPIRED"
    # The same record redelivered, and a duplicate message: nothing more comes back.
    assert invoke(expiry_fn, context, "order_expiry.json", record, expiry_record(hold.message())) == set()
    assert stocks(db, redis, hold.voucher_id) == (3, 3)
    assert redis.smembers(keys.returned(hold.voucher_id)) == {str(hold.order_id)}


def test_an_early_expiry_is_sent_again_with_the_time_left_and_acknowledged(
    expiry_fn: ModuleType,
    context: Any,
    db: Database,
    redis: Any,
    sqs: Any,
    expiry_queue: str,
    sell: Callable[..., list[Hold]],
) -> None:
    (hold,) = sell()
    db_rows(db, "UPDATE tb_voucher_order SET pay_by = NOW(3) + INTERVAL 120 SECOND WHERE id = %s", hold.order_id)
    [row] = db_rows(db, "SELECT pay_by FROM tb_voucher_order WHERE id = %s", hold.order_id)
    sent = Sent(expiry_fn)
    # It arrives with a deadline a clock wrongly ahead would give: the database's deadline wins.
    assert invoke(expiry_fn, context, "order_expiry.json", expiry_record(hold.message())) == set()
    (entry,) = sent.entries
    assert sent.bodies() == [hold.message(row["pay_by"].replace(tzinfo=UTC))]
    assert 118 <= entry["DelaySeconds"] <= 120  # what is left of the 120 s, rounded up
    assert status(db, hold) == (1, None)
    assert stocks(db, redis, hold.voucher_id) == (2, 2)
    attributes = sqs.get_queue_attributes(QueueUrl=expiry_queue, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert int(attributes["Attributes"]["ApproximateNumberOfMessagesDelayed"]) == 1


def test_an_expiry_due_beyond_fifteen_minutes_waits_the_longest_sqs_allows(
    expiry_fn: ModuleType, context: Any, db: Database, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    db_rows(db, "UPDATE tb_voucher_order SET pay_by = NOW(3) + INTERVAL 1 HOUR WHERE id = %s", hold.order_id)
    sent = Sent(expiry_fn)
    assert invoke(expiry_fn, context, "order_expiry.json", expiry_record(hold.message())) == set()
    assert [e["DelaySeconds"] for e in sent.entries] == [MAX_DELAY_SECONDS]


def test_an_early_expiry_that_cannot_be_sent_again_is_a_batch_item_failure(
    template: Template,
    context: Any,
    db: Database,
    expiry_queue: str,
    sell: Callable[..., list[Hold]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (hold,) = sell()
    module = fresh(
        template, "OrderExpiryFunction", monkeypatch, ORDER_EXPIRY_QUEUE_URL=f"{expiry_queue}-that-does-not-exist"
    )
    record = expiry_record(hold.message())
    assert invoke(module, context, "order_expiry.json", record) == {record["messageId"]}
    assert status(db, hold) == (1, None)


def test_a_paid_a_cancelled_and_an_unknown_order_change_nothing(
    expiry_fn: ModuleType,
    context: Any,
    db: Database,
    redis: Any,
    scripts: Scripts,
    sell: Callable[..., list[Hold]],
) -> None:
    paid, cancelled = sell(2)
    assert isinstance(holds.pay(db, redis, scripts, paid.order_id, payment_of(paid.order_id)), dict)
    assert isinstance(holds.cancel(db, redis, scripts, cancelled.order_id, cancelled.user_id), dict)
    overdue(db, paid)
    overdue(db, cancelled)
    before = stocks(db, redis, paid.voucher_id)
    unknown = Hold(paid.voucher_id, paid.order_id + 10**6, 7)
    records = [expiry_record(h.message()) for h in (paid, cancelled, unknown)]
    assert invoke(expiry_fn, context, "order_expiry.json", *records) == set()
    assert status(db, paid)[0] == 2
    assert status(db, cancelled) == (4, "CANCELLED")
    assert stocks(db, redis, paid.voucher_id) == before


def test_a_malformed_expiry_is_a_batch_item_failure_and_the_rest_of_the_batch_goes_on(
    expiry_fn: ModuleType, context: Any, db: Database, redis: Any, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    overdue(db, hold)
    bad = [expiry_record(body) for body in ("not json", '{"orderId": "x"}', json.dumps({"orderId": "1"}))]
    good = expiry_record(hold.message())
    assert invoke(expiry_fn, context, "order_expiry.json", *bad, good) == {r["messageId"] for r in bad}
    assert status(db, hold) == (4, "EXPIRED")
    assert stocks(db, redis, hold.voucher_id) == (3, 3)


def test_redis_down_after_the_commit_fails_the_record_and_the_retry_gives_the_unit_back_once(
    template: Template,
    expiry_fn: ModuleType,
    expiry_queue: str,
    context: Any,
    db: Database,
    redis: Any,
    sell: Callable[..., list[Hold]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (hold,) = sell()
    overdue(db, hold)
    redis_down = fresh(
        template,
        "OrderExpiryFunction",
        monkeypatch,
        ORDER_EXPIRY_QUEUE_URL=expiry_queue,
        REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0",
    )
    record = expiry_record(hold.message())
    assert invoke(redis_down, context, "order_expiry.json", record) == {record["messageId"]}
    # MySQL committed the expiry; Redis never heard of it.
    assert status(db, hold) == (4, "EXPIRED")
    assert stocks(db, redis, hold.voucher_id) == (3, 2)
    # SQS delivers it again, Redis is back.
    assert invoke(expiry_fn, context, "order_expiry.json", record) == set()
    assert stocks(db, redis, hold.voucher_id) == (3, 3)
    assert invoke(expiry_fn, context, "order_expiry.json", record) == set()
    assert stocks(db, redis, hold.voucher_id) == (3, 3)


# --- OrderPersisterFunction's expiries --------------------------------------------------------------------


@pytest.fixture
def persister_fn(template: Template, expiry_queue: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return fresh(template, "OrderPersisterFunction", monkeypatch, ORDER_EXPIRY_QUEUE_URL=expiry_queue)


def order_record(m: OrderMessage) -> dict[str, Any]:
    return sqs_record(m.to_json(), "order_persister_batch.json")


def deadlines(db: Database, order_ids: list[int]) -> dict[int, datetime]:
    rows = db_rows(
        db, f"SELECT id, pay_by FROM tb_voucher_order WHERE id IN ({', '.join(['%s'] * len(order_ids))})", *order_ids
    )
    return {int(r["id"]): r["pay_by"].replace(tzinfo=UTC) for r in rows}


def test_after_a_batch_one_expiry_per_stored_unpaid_order_waits_on_the_queue(
    persister_fn: ModuleType,
    context: Any,
    db: Database,
    redis: Any,
    sqs: Any,
    gate: Gate,
    expiry_queue: str,
    make_voucher: Callable[..., int],
) -> None:
    voucher_id = make_voucher(stock=12)
    orders = [accept(gate, voucher_id) for _ in range(12)]
    # Twelve confirmed, one delivered twice, one malformed record: expiries go out in two batches.
    records = [order_record(m) for m in orders] + [
        order_record(orders[0]),
        sqs_record("junk", "order_persister_batch.json"),
    ]
    sent = Sent(persister_fn)
    failed = invoke(persister_fn, context, "order_persister_batch.json", *records)
    assert failed == {records[-1]["messageId"]}  # the malformed one (no poison queue here)
    stored = deadlines(db, [m.order_id for m in orders])
    expected = sorted(
        (ExpiryMessage(m.order_id, voucher_id, m.user_id, stored[m.order_id]) for m in orders), key=lambda e: e.order_id
    )
    assert sorted(sent.bodies(), key=lambda e: e.order_id) == expected
    assert all(0 < e["DelaySeconds"] <= MAX_DELAY_SECONDS for e in sent.entries)
    assert queue_depth(sqs, expiry_queue) == 12
    # Delayed until their deadlines: nothing is there to receive yet.
    assert drain(sqs, expiry_queue) == []


def test_a_paid_order_redelivered_sends_no_expiry(
    persister_fn: ModuleType,
    context: Any,
    db: Database,
    redis: Any,
    scripts: Scripts,
    gate: Gate,
    make_voucher: Callable[..., int],
) -> None:
    voucher_id = make_voucher(stock=2)
    m = accept(gate, voucher_id)
    assert persist_order(db, redis, scripts, m).status == CONFIRMED
    assert isinstance(holds.pay(db, redis, scripts, m.order_id, payment_of(m.order_id)), dict)
    sent = Sent(persister_fn)
    assert invoke(persister_fn, context, "order_persister_batch.json", order_record(m)) == set()
    assert sent.entries == []


def test_an_expiry_not_sent_fails_its_records_and_the_redelivery_sends_it(
    template: Template,
    persister_fn: ModuleType,
    expiry_queue: str,
    context: Any,
    db: Database,
    redis: Any,
    sqs: Any,
    gate: Gate,
    make_voucher: Callable[..., int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    voucher_id = make_voucher(stock=5)
    confirmed = [accept(gate, voucher_id) for _ in range(2)]
    # An order of a voucher that does not exist: FAILED, a final decision that needs no expiry.
    unknown = OrderMessage(next_order_id(redis), new_user(), voucher_id + 10**6, datetime.now(UTC))
    records = [order_record(m) for m in (*confirmed, unknown)]
    broken = fresh(
        template, "OrderPersisterFunction", monkeypatch, ORDER_EXPIRY_QUEUE_URL=f"{expiry_queue}-that-does-not-exist"
    )
    failed = invoke(broken, context, "order_persister_batch.json", *records)
    assert failed == {r["messageId"] for r in records[:2]}
    assert set(deadlines(db, [m.order_id for m in confirmed])) == {m.order_id for m in confirmed}  # stored all the same
    assert queue_depth(sqs, expiry_queue) == 0
    # SQS delivers the failed records again: nothing changes in MySQL, the expiries go out.
    sent = Sent(persister_fn)
    assert invoke(persister_fn, context, "order_persister_batch.json", *records[:2]) == set()
    assert sorted(e.order_id for e in sent.bodies()) == sorted(m.order_id for m in confirmed)
    assert queue_depth(sqs, expiry_queue) == 2


# --- a lost expiry: the reconciler expires what is overdue --------------------------------------


def test_a_hold_whose_expiry_was_lost_is_expired_by_the_next_reconcile(
    persister_fn: ModuleType,
    context: Any,
    db: Database,
    redis: Any,
    sqs: Any,
    gate: Gate,
    queues: dict[str, str],
    expiry_queue: str,
    make_voucher: Callable[..., int],
) -> None:
    voucher_id = make_voucher(stock=5)
    lost, legacy, recent, payable = orders = [accept(gate, voucher_id) for _ in range(4)]
    assert invoke(persister_fn, context, "order_persister_batch.json", *map(order_record, orders)) == set()
    # Every expiry message deleted from its queue (as if dead-lettered and gone).
    assert queue_depth(sqs, expiry_queue) == 4
    sqs.purge_queue(QueueUrl=expiry_queue)
    assert queue_depth(sqs, expiry_queue) == 0
    db_rows(db, "UPDATE tb_voucher_order SET pay_by = NOW(3) - INTERVAL 1 SECOND WHERE id = %s", lost.order_id)
    # Orders stored with no pay_by (an older persister, after the migration): due holdSeconds
    # (900) after create_time, when the gate accepted them.
    for m, age in ((legacy, 901), (recent, 899)):
        db_rows(
            db,
            "UPDATE tb_voucher_order SET pay_by = NULL, create_time = NOW(3) - INTERVAL %s SECOND WHERE id = %s",
            age,
            m.order_id,
        )
    assert stocks(db, redis, voucher_id) == (1, 1)

    queue = OrderQueue(sqs, queues["OrderQueue"])
    result = reconcile_voucher(db, redis, queue, voucher_id, drained=False)

    assert sorted(result.expired) == sorted([str(lost.order_id), str(legacy.order_id)])
    closed = db_rows(db, "SELECT id FROM tb_voucher_order WHERE voucher_id = %s AND status = 4", voucher_id)
    assert {int(r["id"]) for r in closed} == {lost.order_id, legacy.order_id}
    assert stocks(db, redis, voucher_id) == (3, 3)  # both units back, in MySQL and on sale in Redis
    assert not {recent.order_id, payable.order_id} & {int(r["id"]) for r in closed}
    # The next pass finds nothing more to expire, and returns nothing twice.
    again = reconcile_voucher(db, redis, queue, voucher_id, drained=False)
    assert (again.expired, again.returned) == ([], [])
    assert stocks(db, redis, voucher_id) == (3, 3)


def test_reconcile_without_repair_expires_nothing(
    db: Database, redis: Any, sqs: Any, queues: dict[str, str], sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    overdue(db, hold)
    queue = OrderQueue(sqs, queues["OrderQueue"])
    result = reconcile(
        db, redis, Scripts.register(redis), queue, drained=True, repair=False, voucher_ids=[hold.voucher_id]
    )
    assert result.vouchers[0].expired == []
    assert status(db, hold) == (1, None)
    assert stocks(db, redis, hold.voucher_id) == (2, 2)
