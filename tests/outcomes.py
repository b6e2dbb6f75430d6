"""The persister's outcome table (docs/contract.md, "What the persister decides"), written once.

Each row arranges one record in the real MariaDB and Redis, then says what the
persister must make of it. ``check`` compares what the record touches before
and after (its order id's rows, its voucher's stock, its user's pending mark, its
status hint) with what that outcome means, so every row is held to the same rules.
test_persistence runs each row alone; test_persister_handler runs them all in one
batch through the Lambda handler.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pymysql

from seckill import hints
from seckill.ids import next_order_id, order_id_time
from seckill.infra import keys
from seckill.infra.db import Credentials, Database
from seckill.infra.timeutil import from_ms, iso, to_db, to_ms
from seckill.messages import MalformedMessage, OrderMessage, queue_depth
from seckill.persist.persistence import Decision, OrderIdConflict, fail_unqueued
from seckill.persist.poison import REASON_ATTRIBUTE, Decided, Failed, Poisoned, Taken
from seckill.press.gate import Gate, Mark
from tests.helpers import HINT_TTL, accept, closed_port, db_rows, new_user, persist_order, wait_for

# Message attributes as Lambda hands them to the function (binary values base64-encoded):
# every record carries them, and a record moved to the poison queue must keep them.
RECORD_ATTRIBUTES = {
    "trace": {"stringValue": "outcome-table", "stringListValues": [], "binaryListValues": [], "dataType": "String"},
    "blob": {
        "stringValue": None,
        "binaryValue": base64.b64encode(b"\x00\xff").decode(),
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": "Binary",
    },
}


@dataclass
class Arena:
    """What a row arranges with; remembers the status hints it wrote, to remove them."""

    db: Database
    creds: Credentials
    redis: Any
    gate: Gate
    make_voucher: Callable[..., int]
    hinted: list[int] = field(default_factory=list)

    def accept(self, voucher_id: int, user_id: int | None = None, *, promise: bool = True) -> OrderMessage:
        """A press answered 202, its PENDING hint written as the API does."""
        return self.hint(accept(self.gate, voucher_id, user_id, promise=promise))

    def fabricate(self, voucher_id: int, user_id: int) -> OrderMessage:
        """A message the gate never saw (drift between Redis and MySQL, or a replay)."""
        now = from_ms(to_ms(datetime.now(UTC)))  # MySQL keeps milliseconds
        return self.hint(OrderMessage(next_order_id(self.redis), user_id, voucher_id, now))

    def hint(self, m: OrderMessage) -> OrderMessage:
        hints.write_pending(self.redis, m, HINT_TTL)
        self.hinted.append(m.order_id)
        return m

    def persist(self, m: OrderMessage) -> Decision:
        """An earlier delivery."""
        return persist_order(self.db, self.redis, self.gate.scripts, m)

    def set_stock(self, voucher_id: int, stock: int) -> None:
        db_rows(self.db, "UPDATE tb_seckill_voucher SET stock = %s WHERE voucher_id = %s", stock, voucher_id)

    def clean(self) -> None:
        if self.hinted:
            self.redis.delete(*(keys.order_status(order_id) for order_id in self.hinted))


@dataclass(frozen=True)
class Case:
    """One arranged record."""

    body: str
    message: OrderMessage | None = None  # None: the body is not an order message
    db: Database | None = None  # the persister's own database, when the row needs one

    def record(self) -> tuple[str, dict[str, Any]]:
        return self.body, RECORD_ATTRIBUTES


@dataclass(frozen=True)
class Expect:
    status: str | None = None  # a decision: CONFIRMED or FAILED
    reason: str | None = None  # the decision's reason
    changed: bool = True
    unstorable: str | None = None  # how the poison queue's reason starts: never storable
    error: type[Exception] | None = None  # the failure's error, without a poison queue (or retryable)

    def failed(self, poisoning: bool) -> bool:
        """True when the record must be a batch item failure."""
        return self.status is None and not (poisoning and self.unstorable)


def decided(status: str, reason: str | None = None, *, changed: bool = True) -> Expect:
    return Expect(status, reason, changed)


def unstorable(reason: str, error: type[Exception]) -> Expect:
    return Expect(unstorable=reason, error=error)


def retried(error: type[Exception]) -> Expect:
    return Expect(error=error)


@dataclass(frozen=True)
class Row:
    """One line of the contract's table. ``again``: what the same record becomes when SQS
    delivers it again to a healthy persister, for a record that failed."""

    name: str
    arrange: Callable[[Arena], Case]
    expect: Expect
    again: Expect | None = None


# --- the rows' arrangements -------------------------------------------------------------------


def new_order(a: Arena) -> Case:
    m = a.accept(a.make_voucher(stock=5))
    return Case(m.to_json(), m)


def redelivered(a: Arena) -> Case:
    m = a.accept(a.make_voucher(stock=5))
    a.persist(m)
    a.hint(m)  # PENDING again: a redelivery must leave the hint alone
    return Case(m.to_json(), m)


def redelivered_with_a_later_reservation(a: Arena) -> Case:
    m = a.accept(a.make_voucher(stock=5))
    a.persist(m)
    # Some later pending mark of the same user: a redelivery settles only its own order id.
    a.redis.hset(keys.pending(m.voucher_id), str(m.user_id), "1:other:42")
    return Case(m.to_json(), m)


def another_order_of_the_user(a: Arena) -> Case:
    first = a.accept(a.make_voucher(stock=5))
    a.persist(first)
    # Another order id for the same (user, voucher): e.g. a Redis failover forgot the buyer.
    second = a.fabricate(first.voucher_id, first.user_id)
    return Case(second.to_json(), second)


def another_order_of_the_user_none_left(a: Arena) -> Case:
    """The user took the last unit: the second order is still a duplicate, not sold out."""
    first = a.accept(a.make_voucher(stock=1))
    a.persist(first)
    second = a.fabricate(first.voucher_id, first.user_id)
    return Case(second.to_json(), second)


def duplicate_redelivered(a: Arena) -> Case:
    case = another_order_of_the_user(a)
    assert case.message is not None
    a.persist(case.message)
    a.hint(case.message)
    return case


def stock_zero_in_the_database(a: Arena) -> Case:
    m = a.accept(a.make_voucher(stock=5))
    a.set_stock(m.voucher_id, 0)  # Redis and MySQL drifted: the database has nothing left
    return Case(m.to_json(), m)


def sold_out_redelivered_after_stock_came_back(a: Arena) -> Case:
    case = stock_zero_in_the_database(a)
    assert case.message is not None
    a.persist(case.message)
    a.set_stock(case.message.voucher_id, 5)  # a rejected order stays rejected: never both
    a.hint(case.message)
    return case


def voucher_not_in_the_database(a: Arena) -> Case:
    m = a.fabricate(secrets.randbelow(10**12) + 10**15, new_user())  # far above the suite's AUTO_INCREMENT
    return Case(m.to_json(), m)


def voucher_not_found_again(a: Arena) -> Case:
    case = voucher_not_in_the_database(a)
    assert case.message is not None
    a.persist(case.message)
    a.hint(case.message)
    return case


def failed_by_reconciliation(a: Arena) -> Case:
    m = a.accept(a.make_voucher(stock=5), promise=False)
    assert fail_unqueued(a.db, m)  # its press answered 503; this copy was still on its way
    return Case(m.to_json(), m)


def order_id_of_another_order(a: Arena) -> Case:
    """The id counter went back (Redis lost it within the same second)."""
    first = a.accept(a.make_voucher(stock=5))
    a.persist(first)
    clash = replace(first, user_id=new_user())
    return Case(clash.to_json(), clash)


def order_id_of_another_users_rejection(a: Arena) -> Case:
    """Absorbing it would lose this user's order and show them another user's."""
    first = a.accept(a.make_voucher(stock=5))
    a.set_stock(first.voucher_id, 0)
    a.persist(first)
    clash = replace(first, user_id=new_user())
    return Case(clash.to_json(), clash)


def malformed(a: Arena) -> Case:
    return Case('{"orderId": "1", "userId": 2}')


def database_unreachable(a: Arena) -> Case:
    m = a.accept(a.make_voucher(stock=5))
    unreachable = Credentials("127.0.0.1", closed_port(), a.creds.user, a.creds.password, a.creds.database)
    return Case(m.to_json(), m, db=Database(unreachable))


CONFLICT = "order id conflict: "
ROWS = [
    Row("order inserted, stock decremented", new_order, decided("CONFIRMED")),
    Row("the same order again", redelivered, decided("CONFIRMED", changed=False)),
    Row(
        "the same order again, a later reservation pending",
        redelivered_with_a_later_reservation,
        decided("CONFIRMED", changed=False),
    ),
    Row("the order id held by another order", order_id_of_another_order, unstorable(CONFLICT, OrderIdConflict)),
    Row(
        "the order id of another user's rejection",
        order_id_of_another_users_rejection,
        unstorable(CONFLICT, OrderIdConflict),
    ),
    Row("the user holds another order", another_order_of_the_user, decided("FAILED", "DUPLICATE_ORDER")),
    Row(
        "the user holds another order, none left",
        another_order_of_the_user_none_left,
        decided("FAILED", "DUPLICATE_ORDER"),
    ),
    Row("a duplicate again", duplicate_redelivered, decided("FAILED", "DUPLICATE_ORDER", changed=False)),
    Row("stock already 0 in the database", stock_zero_in_the_database, decided("FAILED", "SOLD_OUT")),
    Row(
        "sold out, again once stock came back",
        sold_out_redelivered_after_stock_came_back,
        decided("FAILED", "SOLD_OUT", changed=False),
    ),
    Row("the voucher is not in the database", voucher_not_in_the_database, decided("FAILED", "VOUCHER_NOT_FOUND")),
    Row(
        "the voucher is not in the database, again",
        voucher_not_found_again,
        decided("FAILED", "VOUCHER_NOT_FOUND", changed=False),
    ),
    Row("failed by reconciliation", failed_by_reconciliation, decided("FAILED", "NOT_QUEUED", changed=False)),
    Row("malformed message", malformed, unstorable("malformed order message: ", MalformedMessage)),
    Row(
        "database unreachable",
        database_unreachable,
        retried(pymysql.err.OperationalError),
        again=decided("CONFIRMED"),
    ),
]


# --- the checks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """What one record touches."""

    orders: list[tuple[int, int, int, datetime]]
    rejections: list[tuple[int, int, str]]
    stock: int | None  # in the database
    redis_voucher: tuple[str | None, bool]  # Redis's stock, whether the user is a buyer
    mark: str | None
    hint: dict[str, Any] | None


def seen(db: Database, redis: Any, case: Case) -> Seen | None:
    m = case.message
    if m is None:
        return None
    orders = db_rows(db, "SELECT id, user_id, voucher_id, create_time FROM tb_voucher_order WHERE id = %s", m.order_id)
    rejections = db_rows(
        db, "SELECT user_id, voucher_id, reason FROM tb_voucher_order_rejection WHERE order_id = %s", m.order_id
    )
    stock = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", m.voucher_id)
    hint = redis.get(keys.order_status(m.order_id))
    return Seen(
        orders=[(int(r["id"]), int(r["user_id"]), int(r["voucher_id"]), r["create_time"]) for r in orders],
        rejections=[(int(r["user_id"]), int(r["voucher_id"]), r["reason"]) for r in rejections],
        stock=int(stock[0]["stock"]) if stock else None,
        redis_voucher=(
            redis.get(keys.stock(m.voucher_id)),
            bool(redis.sismember(keys.buyers(m.voucher_id), m.user_id)),
        ),
        mark=redis.hget(keys.pending(m.voucher_id), str(m.user_id)),
        hint=json.loads(hint) if hint else None,
    )


def owns(mark: str | None, order_id: int) -> bool:
    """The pending mark is this order's."""
    parsed = None if mark is None else Mark.parse(mark)
    return parsed is not None and parsed.order_id == order_id


def check_taken(expect: Expect, taken: Taken, *, poisoning: bool) -> None:
    if expect.status is not None:
        assert isinstance(taken, Decided), taken
        assert taken.decision == Decision(expect.status, expect.reason, expect.changed)
    elif poisoning and expect.unstorable:
        assert isinstance(taken, Poisoned), taken
        assert taken.reason.startswith(expect.unstorable)
    else:
        assert isinstance(taken, Failed), taken
        assert expect.error is not None
        assert isinstance(taken.error, expect.error), taken.error


def check_effects(case: Case, expect: Expect, before: Seen | None, after: Seen | None) -> None:
    """What the outcome means for the database and Redis."""
    m = case.message
    if m is None or before is None or after is None:
        return
    # Deciding never gives stock or a buyer's place back in Redis.
    assert after.redis_voucher == before.redis_voucher
    own_mark = owns(before.mark, m.order_id)
    if expect.status is None or not expect.changed:
        # Nothing changes in the database, nor the hint; a decided order's own mark goes.
        assert (after.orders, after.rejections, after.stock) == (before.orders, before.rejections, before.stock)
        assert after.hint == before.hint
        assert after.mark == (None if expect.status is not None and own_mark else before.mark)
        return
    assert after.mark == (None if own_mark else before.mark)
    assert after.hint is not None
    assert (after.hint["status"], after.hint["reason"]) == (expect.status, expect.reason)
    assert before.stock is not None or expect.reason == "VOUCHER_NOT_FOUND"
    if expect.status == "CONFIRMED":
        # The order's time is when the gate accepted it, not when it was persisted.
        assert after.orders == [(m.order_id, m.user_id, m.voucher_id, to_db(m.accepted_at))]
        assert after.rejections == []
        assert before.stock is not None
        assert after.stock == before.stock - 1
        assert after.hint["createdAt"] == iso(m.accepted_at)
    else:
        assert (before.orders, after.orders) == ([], [])
        assert after.rejections == [(m.user_id, m.voucher_id, expect.reason)]
        assert after.stock == before.stock
        assert after.hint["createdAt"] == iso(order_id_time(m.order_id))  # a failed order: when its id was made


def received(sqs: Any, url: str, count: int, timeout: float = 10) -> list[dict[str, Any]]:
    """Receive (and delete) until ``count`` messages came (the test fails past ``timeout``
    seconds); then the queue must be empty."""
    taken: list[dict[str, Any]] = []

    def take() -> int:
        messages = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=1
        ).get("Messages", [])
        for m in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        taken.extend(messages)
        return len(taken)

    if count:  # none expected: no receive to wait out, the queue is checked empty below
        wait_for(
            take,
            f"{count} messages on {url}",
            until=lambda taken_count: taken_count >= count,
            timeout=timeout,
            interval=0,
        )
    assert queue_depth(sqs, url) == 0
    return taken


def check_poison_queue(moved: list[dict[str, Any]], cases: list[Case]) -> None:
    """Each record sent there arrived once, unchanged, with its attributes and a reason."""
    assert sorted(m["Body"] for m in moved) == sorted(c.body for c in cases)
    for m in moved:
        attributes = m["MessageAttributes"]
        assert attributes["trace"] == {"StringValue": "outcome-table", "DataType": "String"}
        assert attributes["blob"] == {"BinaryValue": b"\x00\xff", "DataType": "Binary"}
        assert attributes[REASON_ATTRIBUTE]["DataType"] == "String"
