"""One test per defect of the original design (docs/defects.md, D1-D8); the persister's
outcomes (docs/contract.md) are one table, tests/outcomes.py.

Each docstring names the defect; each body runs the real path: Lua on a real Redis,
MariaDB, the Lambda handlers, and the queues on a moto SQS server.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from seckill.ids import next_order_id
from seckill.infra import keys
from seckill.infra.db import Database
from seckill.infra.errors import Refusal
from seckill.infra.lua_scripts import Scripts, lua_dir, read_script
from seckill.messages import OrderQueue, queue_depth
from seckill.press.gate import SOLD_OUT, Gate
from seckill_local.feeder import sqs_event
from tests.helpers import (
    accept,
    body,
    db_rows,
    module_of,
    new_user,
    reconcile_voucher,
    seckill_event,
    status_event,
)

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
Api = Callable[[dict[str, Any]], dict[str, Any]]
Poll = Callable[[str], tuple[list[str], list[str]]]
MALFORMED = '{"orderId": 42, "userId": "x"}'


# --- helpers -----------------------------------------------------------------------------------


def send(sqs: Any, url: str, *bodies: str) -> None:
    for text in bodies:
        sqs.send_message(QueueUrl=url, MessageBody=text)


def db_stock(db: Database, voucher_id: int) -> int:
    (row,) = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    return int(row["stock"])


def order_ids(db: Database, voucher_id: int) -> set[int]:
    return {int(r["id"]) for r in db_rows(db, "SELECT id FROM tb_voucher_order WHERE voucher_id = %s", voucher_id)}


@pytest.fixture
def api(handlers: dict[str, Handler], context: Any) -> Api:
    return lambda event: handlers["SeckillApiFunction"](json.loads(json.dumps(event)), context)


@pytest.fixture
def poll(sqs: Any, handlers: dict[str, Handler], context: Any) -> Poll:
    """One poll of the event source mapping: receive a batch, invoke the persister, delete what
    succeeded. Failed records are made visible again at once (the visibility timeout running out).
    Returns the bodies (succeeded, failed)."""

    def poll(url: str) -> tuple[list[str], list[str]]:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            return [], []
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        response = handlers["OrderPersisterFunction"](sqs_event(messages, arn), context)
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        done, retried = [], []
        for m in messages:
            if m["MessageId"] in failed:
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
                retried.append(m["Body"])
            else:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
                done.append(m["Body"])
        return done, retried

    return poll


@pytest.fixture
def queue_url(queues: dict[str, str]) -> str:
    """A fresh OrderQueue of this test's own (redrive to its own DLQ, 1 s visibility timeout)."""
    return queues["OrderQueue"]


@pytest.fixture
def status_hints(redis: Any) -> Iterator[list[str]]:
    """Order ids the API accepted in this test; their status hints are removed afterwards."""
    made: list[str] = []
    yield made
    for order_id in made:
        redis.delete(keys.order_status(int(order_id)))


# --- the original design's defects -----------------------------------------------------------------


def test_defect_lua_bugs_every_script_loads_and_answers_on_real_redis(redis: Any, make_voucher: Callable) -> None:
    """D1: the original gate script could not run (a string compared with a number, a
    misspelled command).

    Every script of lua/ is EVAL'd from its source on a real Redis with valid keys, and answers."""
    voucher_id = make_voucher(stock=2)
    stock, buyers, window, pending = (f(voucher_id) for f in (keys.stock, keys.buyers, keys.window, keys.pending))
    all_keys = [stock, buyers, window, pending]
    ran: set[str] = set()

    def run(name: str, script_keys: list[str], *args: Any) -> Any:
        ran.add(name)
        return redis.eval(read_script(name), len(script_keys), *script_keys, *args)

    user, token, order_id = new_user(), uuid.uuid4().hex, next_order_id(redis)
    code, now_ms, reserved, _ = run("gate", all_keys, user, token, order_id)
    assert (code, reserved) == (0, str(order_id))
    assert now_ms > 0
    assert redis.get(stock) == "1"  # deducted: no `incyby`
    assert run("promise", [pending], user, order_id) == 1
    assert run("settle", [pending], user, order_id) == 1
    other, other_token = new_user(), uuid.uuid4().hex
    assert run("gate", all_keys, other, other_token, order_id + 1)[0] == 0
    assert run("gate", all_keys, new_user(), uuid.uuid4().hex, order_id + 2)[0] == SOLD_OUT  # a numeric `stock <= 0`
    assert run("release", [stock, buyers, pending], other, other_token) == 1
    assert redis.get(stock) == "1"
    begin, end = redis.hmget(window, "begin", "end")
    # MySQL holds user's order (stock 1): {written 0, Redis stock 1, expected 1, buyers +0, -0, returns 0}.
    returned = keys.returned(voucher_id)
    restore_args = ("check", 1, begin, end, json.dumps([user]), json.dumps([order_id]), "[]", "[]")
    assert run("restore", [*all_keys, returned], *restore_args) == [0, 1, 1, 0, 0, 0]
    try:
        assert run("give_back", [stock, returned, window], order_id) == 1
        assert run("give_back", [stock, returned, window], order_id) == 0  # once per order
        assert redis.get(stock) == "2"
    finally:
        redis.delete(returned)
    counter = f"icr:order:test:{uuid.uuid4().hex}"  # not today's real counter
    try:
        assert run("counter_floor", [counter], 7) == 7
        assert run("counter_floor", [counter], 3) == 7  # never lowered
    finally:
        redis.delete(counter)
    edge = keys.edge(voucher_id)
    try:
        claimed = json.loads(run("edge_claim", [stock, window, edge], voucher_id, "", 60_000))
        assert (claimed["voucherId"], claimed["soldOut"], claimed["stopped"]) == (voucher_id, False, False)
        assert run("edge_claim", [stock, window, edge], voucher_id, "", 60_000) is None  # unchanged
        assert run("edge_unclaim", [edge], claimed["v"]) == 1
        assert run("edge_unclaim", [edge], claimed["v"] + 1) == 0  # not this claim's
    finally:
        redis.delete(edge)
    cursor = keys.cursor(voucher_id)
    try:
        assert run("publish_moves", [cursor, window], 2000, 1000, "0" + "8" * 16) == "2000"
        assert run("publish_moves", [cursor, window], 1500) == "2000"  # never moved back
        assert redis.zrange(cursor, 0, -1, withscores=True) == [("0" + "8" * 16, 1000.0)]
    finally:
        redis.delete(cursor)
        redis.hdel(window, "decided")
    assert ran == {path.stem for path in lua_dir().glob("*.lua")}


@pytest.mark.parametrize("missing", [keys.stock, keys.window, None], ids=["stock key", "window key", "whole voucher"])
def test_defect_missing_stock_key_is_voucher_not_found_not_a_lua_error(
    gate: Gate, redis: Any, make_voucher: Callable, missing: Callable[[int], str] | None
) -> None:
    """D2: a missing stock key made the original script fail on nil."""
    if missing is None:
        voucher_id = random.randint(10**15, 10**16)  # never created
    else:
        voucher_id = make_voucher(stock=3)
        redis.delete(missing(voucher_id))

    refused = gate.reserve(voucher_id, new_user(), uuid.uuid4().hex)

    assert refused == Refusal(404, "VOUCHER_NOT_FOUND", "voucher not found")
    assert not redis.exists(keys.buyers(voucher_id), keys.pending(voucher_id))


@pytest.mark.parametrize(
    ("begin_s", "end_s", "code"), [(60, 3600, "NOT_STARTED"), (-3600, -60, "ENDED")], ids=["before", "after"]
)
def test_defect_lost_time_window_is_decided_in_the_script_by_the_redis_clock(
    gate: Gate, redis: Any, make_voucher: Callable, begin_s: int, end_s: int, code: str
) -> None:
    """D3: the original optimized path never checked the sale window, so a voucher could be
    bought before the sale began or after it ended.

    MySQL and this process's clock say the sale is open; only the window the script reads,
    set by the Redis server's clock, says otherwise, and the script refuses."""
    voucher_id = make_voucher(stock=3)
    seconds, _ = redis.time()
    redis.hset(keys.window(voucher_id), mapping={"begin": (seconds + begin_s) * 1000, "end": (seconds + end_s) * 1000})

    refused = gate.reserve(voucher_id, new_user(), uuid.uuid4().hex)

    assert isinstance(refused, Refusal)
    assert (refused.status, refused.code) == (409, code)
    assert redis.get(keys.stock(voucher_id)) == "3"
    assert not redis.exists(keys.buyers(voucher_id), keys.pending(voucher_id))


def test_defect_consumer_dying_on_first_exception_fails_only_that_record(
    redis: Any, sqs: Any, queue_url: str, poll: Poll, gate: Gate, db: Database, make_voucher: Callable
) -> None:
    """D4: the original consumer stopped for good at its first unexpected exception, and
    its queue then only grew.

    A bad record in a batch is reported alone in batchItemFailures; the good records of that
    batch are confirmed, and a later batch is still processed."""
    voucher_id = make_voucher(stock=5)
    first, second, later = (accept(gate, voucher_id) for _ in range(3))
    send(sqs, queue_url, first.to_json(), MALFORMED, second.to_json())

    done, failed = poll(queue_url)

    assert (sorted(done), failed) == (sorted([first.to_json(), second.to_json()]), [MALFORMED])
    assert order_ids(db, voucher_id) == {first.order_id, second.order_id}
    send(sqs, queue_url, later.to_json())
    done, failed = poll(queue_url)
    assert (done, failed) == ([later.to_json()], [MALFORMED])
    assert order_ids(db, voucher_id) == {first.order_id, second.order_id, later.order_id}
    assert db_stock(db, voucher_id) == 2


def test_defect_send_failing_after_redis_deducted_releases_and_answers_503(
    api: Api, handlers: dict[str, Handler], sqs: Any, queue_url: str, redis: Any, make_voucher: Callable
) -> None:
    """D5: when the original in-process queue was full, the order was not queued although
    Redis had already taken the unit and recorded the user: both were wasted."""
    voucher_id = make_voucher(stock=3)
    user_id = new_user()
    missing = queue_url.rsplit("/", 1)[0] + f"/no-such-queue-{uuid.uuid4().hex[:8]}"
    module = module_of(handlers["SeckillApiFunction"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "queue", OrderQueue(sqs, missing))
        response = api(seckill_event(voucher_id, user_id))

    assert (response["statusCode"], body(response)["code"]) == (503, "TRY_AGAIN")
    assert redis.get(keys.stock(voucher_id)) == "3"
    assert not redis.exists(keys.buyers(voucher_id), keys.pending(voucher_id))


def test_defect_crash_between_gate_and_send_with_an_order_id_frees_the_unit(
    sqs: Any, queue_url: str, gate: Gate, scripts: Scripts, db: Database, redis: Any, make_voucher: Callable
) -> None:
    """D6: in the original, a crash lost the queued orders while Redis kept their units and
    users: the user could not buy again and the stock stayed short.

    The function died after the gate (which holds the order id), before the send and any 202:
    reconciliation fails that order id (no late copy can confirm it) and gives the unit back."""
    voucher_id = make_voucher(stock=3)
    message = accept(gate, voucher_id, promise=False)  # ...and nothing was sent

    result = reconcile_voucher(db, redis, OrderQueue(sqs, queue_url), voucher_id, drained=False)

    assert result.failed == [str(message.order_id)]
    assert queue_depth(sqs, queue_url) == 0
    assert order_ids(db, voucher_id) == set()
    assert (redis.get(keys.stock(voucher_id)), db_stock(db, voucher_id)) == ("3", 3)
    assert not redis.exists(keys.buyers(voucher_id), keys.pending(voucher_id))
    gate.reserve(voucher_id, message.user_id, uuid.uuid4().hex)  # the user may order again


def test_defect_redis_db_drift_is_reported_then_repaired_once_the_queue_is_drained(
    sqs: Any, queue_url: str, poll: Poll, gate: Gate, scripts: Scripts, db: Database, redis: Any, make_voucher: Callable
) -> None:
    """D7: the original wrote Redis and MySQL separately and never compensated a failure
    between the two, so they stayed apart."""
    voucher_id = make_voucher(stock=5)
    message = accept(gate, voucher_id)
    queue = OrderQueue(sqs, queue_url)
    queue.send(message)
    redis.set(keys.stock(voucher_id), 9)  # drifted

    def run() -> Any:
        drained = queue_depth(sqs, queue_url) == 0
        return reconcile_voucher(db, redis, queue, voucher_id, drained=drained, pending_age=timedelta(minutes=2))

    reported = run()  # the order is still on the queue
    assert (reported.drift.drifted, reported.repaired) == (True, False)
    assert (reported.drift.redis_stock, reported.drift.expected_stock) == (9, 4)
    assert redis.get(keys.stock(voucher_id)) == "9"

    assert poll(queue_url) == ([message.to_json()], [])
    repaired = run()
    assert repaired.repaired
    assert (redis.get(keys.stock(voucher_id)), db_stock(db, voucher_id)) == ("4", 4)
    assert not run().drift.drifted


@pytest.mark.parametrize(("stock_in_db", "status", "reason"), [(None, "CONFIRMED", None), (0, "FAILED", "SOLD_OUT")])
def test_defect_success_before_persisted_is_202_then_the_status_route(
    api: Api,
    poll: Poll,
    order_queue: str,
    status_hints: list[str],
    db: Database,
    make_voucher: Callable,
    stock_in_db: int | None,
    status: str,
    reason: str | None,
) -> None:
    """D8: the original answered success with the order id before the order was stored,
    and a later failure left the client holding a "successful" order.

    The API answers 202 (accepted, not done); the status route says PENDING until the persister
    has decided, then CONFIRMED, or FAILED with its reason."""
    voucher_id = make_voucher(stock=2)
    user_id = new_user()
    accepted = api(seckill_event(voucher_id, user_id))
    assert accepted["statusCode"] == 202, accepted
    order_id = body(accepted)["data"]
    status_hints.append(order_id)
    assert accepted["headers"]["Location"] == f"/voucher-order/{order_id}"
    assert body(api(status_event(order_id, user_id)))["data"]["status"] == "PENDING"
    if stock_in_db is not None:
        db_rows(db, "UPDATE tb_seckill_voucher SET stock = %s WHERE voucher_id = %s", stock_in_db, voucher_id)

    assert len(poll(order_queue)[0]) == 1

    data = body(api(status_event(order_id, user_id)))["data"]
    assert (data["orderId"], data["status"], data["reason"]) == (order_id, status, reason)
