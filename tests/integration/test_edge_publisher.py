"""EdgePublisherFunction and seckill.edge.publisher on the local KeyValueStore stand-in
(local/seckill_local/edge/server.mjs), through boto3's own cloudfront-keyvaluestore
client, signed as in AWS: versions, If-Match, conflicts made by real concurrent writes;
and the whole way from Redis (real, with SQS on moto) to the store: what the sweep
repairs when Redis forgot what it had published."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import ModuleType
from typing import Any

import pytest

from seckill.edge import passkeys
from seckill.edge.publisher import Publisher, StoreBusy, kvs_client
from seckill.edge.state import KEPT_AFTER_END, EdgeState, Noticed, StateQueue
from seckill.infra import keys
from seckill.infra.lua_scripts import Scripts
from seckill.passes import KeyRing
from seckill.press.gate import Gate, Reservation
from seckill_local.checkout import ROOT
from seckill_local.edge import EdgeServer, local_kvs_client
from seckill_local.lambdas import load_handler
from seckill_local.template import Function
from tests.helpers import closed_port, drain, invoke, load_event, new_user, sqs_record

STATE = EdgeState(7, v=1_796_040_000_500, begin=1_796_040_000_000, end=1_796_043_600_000, sold_out=True, stopped=False)


@pytest.fixture
def edge() -> Iterator[EdgeServer]:
    # Only the store is used: no press goes to the viewer side, so nothing reaches the upstream.
    with EdgeServer(f"http://127.0.0.1:{closed_port()}") as server:
        yield server


@pytest.fixture
def environment(edge: EdgeServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The variables the local runner gives EdgePublisherFunction, set for the test."""
    env = edge.environment()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def kvs(environment: dict[str, str]) -> Any:
    """The publisher's own client (kvs_client), under the runner's environment."""
    return kvs_client()


@pytest.fixture
def other(edge: EdgeServer) -> Any:
    """Another writer of the same store (another publisher, an operator)."""
    return local_kvs_client(edge.kvs_endpoint)


def write(client: Any, arn: str, key: str, value: str) -> None:
    etag = client.describe_key_value_store(KvsARN=arn)["ETag"]
    client.put_key(KvsARN=arn, Key=key, Value=value, IfMatch=etag)


def stored(client: Any, arn: str, key: str = STATE.key) -> str:
    value: str = client.get_key(KvsARN=arn, Key=key)["Value"]
    return value


def at(v: int, **changes: Any) -> EdgeState:
    return replace(STATE, v=v, **changes)


def written(publisher: Publisher, *states: EdgeState) -> list[int]:
    """The vouchers whose state a batch of these changes wrote."""
    return publisher.publish(states).written


def before_each_put(client: Any, action: Callable[[], None], times: int) -> None:
    """Run ``action`` just before the client's next ``times`` UpdateKeys calls are sent,
    after their ETag was read: a concurrent write exactly where one can hurt."""
    left = [times]

    def hook(**_: Any) -> None:
        if left[0]:
            left[0] -= 1
            action()

    client.meta.events.register("before-call.cloudfront-keyvaluestore.UpdateKeys", hook)


def test_writes_a_key_the_store_lacks(edge: EdgeServer, kvs: Any) -> None:
    assert written(Publisher(kvs, edge.kvs_arn), STATE) == [STATE.voucher_id]
    assert stored(kvs, edge.kvs_arn) == STATE.value()


def test_only_a_newer_version_replaces_the_stored_one(edge: EdgeServer, kvs: Any) -> None:
    publisher = Publisher(kvs, edge.kvs_arn)
    assert written(publisher, at(5, sold_out=False)) == [STATE.voucher_id]
    assert written(publisher, at(6)) == [STATE.voucher_id]
    assert written(publisher, at(6, sold_out=False)) == []  # the same version: a duplicate
    assert written(publisher, at(4, sold_out=False)) == []  # late
    assert written(publisher, at(3), at(4, sold_out=False)) == []  # a batch of late ones
    assert stored(kvs, edge.kvs_arn) == at(6).value()


def test_replaces_a_value_that_is_no_state(edge: EdgeServer, kvs: Any) -> None:
    write(kvs, edge.kvs_arn, STATE.key, "maintenance")
    assert written(Publisher(kvs, edge.kvs_arn), STATE) == [STATE.voucher_id]
    assert stored(kvs, edge.kvs_arn) == STATE.value()


def test_a_conflict_reads_again_and_retries(edge: EdgeServer, kvs: Any, other: Any) -> None:
    before_each_put(kvs, lambda: write(other, edge.kvs_arn, "8", at(1).value()), times=1)
    waits: list[float] = []
    assert written(Publisher(kvs, edge.kvs_arn, sleep=waits.append), STATE) == [STATE.voucher_id]
    assert len(waits) == 1
    assert stored(kvs, edge.kvs_arn) == STATE.value()
    assert stored(kvs, edge.kvs_arn, "8") == at(1).value()  # the other write stands


def test_a_conflict_with_a_newer_state_of_the_key_stops(edge: EdgeServer, kvs: Any, other: Any) -> None:
    newer = at(STATE.v + 1, sold_out=False)
    before_each_put(kvs, lambda: write(other, edge.kvs_arn, STATE.key, newer.value()), times=1)
    assert written(Publisher(kvs, edge.kvs_arn, sleep=lambda _: None), STATE) == []
    assert stored(kvs, edge.kvs_arn) == newer.value()


def test_conflicts_without_end_fail_the_record(edge: EdgeServer, kvs: Any, other: Any) -> None:
    before_each_put(kvs, lambda: write(other, edge.kvs_arn, "8", at(1).value()), times=3)
    waits: list[float] = []
    with pytest.raises(StoreBusy):
        written(Publisher(kvs, edge.kvs_arn, attempts=3, sleep=waits.append), STATE)
    assert len(waits) == 2
    assert all(0 <= w <= 0.05 * 2**i for i, w in enumerate(waits))  # jittered, bounded
    with pytest.raises(kvs.exceptions.ResourceNotFoundException):
        stored(kvs, edge.kvs_arn)


def test_other_errors_are_raised(edge: EdgeServer, kvs: Any) -> None:
    unknown = edge.kvs_arn.replace("seckill-local", "no-such-store")
    with pytest.raises(kvs.exceptions.ClientError):
        written(Publisher(kvs, unknown), STATE)


class Signed(Exception):
    pass


def test_the_client_signs_with_sigv4a(monkeypatch: pytest.MonkeyPatch) -> None:
    """What awscrt is installed for: botocore cannot sign these requests without it."""
    monkeypatch.delenv("AWS_ENDPOINT_URL_CLOUDFRONT_KEYVALUESTORE", raising=False)
    client = kvs_client()
    seen: list[Any] = []

    def capture(request: Any, **_: Any) -> None:
        seen.append(request)
        raise Signed

    client.meta.events.register("before-send.cloudfront-keyvaluestore", capture)
    with pytest.raises(Signed):
        client.describe_key_value_store(KvsARN="arn:aws:cloudfront::123456789012:key-value-store/x")
    (request,) = seen
    assert request.headers["Authorization"].startswith(b"AWS4-ECDSA-P256-SHA256 ")
    assert request.headers["X-Amz-Region-Set"] == b"*"
    assert request.url.startswith("https://123456789012.cloudfront-kvs.global.api.aws/")


def publisher_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """EdgePublisherFunction's module, imported afresh as the runtime would, under the
    environment set (its template resource is the stack's; the code is all this needs)."""
    fn = Function("EdgePublisherFunction", ROOT / "functions" / "edge_publisher", "app.lambda_handler", 30, {})
    with monkeypatch.context() as patch:
        patch.setattr(sys, "modules", dict(sys.modules))
        handler = load_handler(fn)
        return sys.modules[handler.__module__]


@pytest.fixture
def publisher_fn(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The publisher's module on the local store."""
    return publisher_module(monkeypatch)


def test_handler_writes_the_newest_and_fails_the_malformed(
    publisher_fn: ModuleType, edge: EdgeServer, kvs: Any, context: Any
) -> None:
    sample = "edge_publisher.json"
    newer, older = (r["body"] for r in load_event(sample)["Records"])
    assert EdgeState.from_message(newer).v > EdgeState.from_message(older).v
    records = [
        sqs_record(newer, sample),
        sqs_record(older, sample),
        sqs_record('{"v": 1, "voucherId": 1}', sample, "bad"),
    ]
    assert invoke(publisher_fn, context, sample, *records) == {"bad"}
    assert stored(kvs, edge.kvs_arn, "1") == EdgeState.from_message(newer).value()


# ---- The whole way: Redis, EdgeStateQueue, the publisher, the store ------------------


@pytest.fixture
def states(sqs: Any, redis: Any) -> Iterator[StateQueue]:
    """The functions' StateQueue on a queue of the test's own, standing for EdgeStateQueue."""
    url: str = sqs.create_queue(QueueName=f"edge-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    yield StateQueue(sqs, url)
    sqs.delete_queue(QueueUrl=url)


def deliver(states: StateQueue, publisher_fn: ModuleType, context: Any) -> None:
    """What the queue holds, to EdgePublisherFunction in one batch, as the event source mapping does."""
    sample = "edge_publisher.json"
    records = [sqs_record(m["Body"], sample) for m in drain(states.sqs, states.queue_url)]
    if records:  # the event source mapping invokes with one record at least
        assert invoke(publisher_fn, context, sample, *records) == set()


def entry(kvs: Any, edge: EdgeServer, voucher_id: int) -> EdgeState:
    return EdgeState.from_value(voucher_id, stored(kvs, edge.kvs_arn, str(voucher_id)))


def take(gate: Gate, voucher_id: int) -> Reservation:
    reservation = gate.reserve(voucher_id, new_user())
    assert isinstance(reservation, Reservation), reservation
    return reservation


@pytest.fixture
def sold_out(
    make_voucher: Callable[..., int],
    redis: Any,
    scripts: Scripts,
    gate: Gate,
    states: StateQueue,
    publisher_fn: ModuleType,
    edge: EdgeServer,
    kvs: Any,
    context: Any,
) -> Iterator[tuple[int, Reservation, dict[str, str]]]:
    """A voucher of one unit whose sale opened and sold out, each published to the store;
    with the reservation of its last unit, and its edge record as a backup taken before
    the sell-out holds it."""
    voucher_id = make_voucher(stock=1)
    try:
        assert states.notice(scripts, voucher_id) is Noticed.SENT
        deliver(states, publisher_fn, context)
        backup = redis.hgetall(keys.edge(voucher_id))
        last = take(gate, voucher_id)
        assert states.notice(scripts, voucher_id) is Noticed.SENT
        deliver(states, publisher_fn, context)
        assert entry(kvs, edge, voucher_id).sold_out
        yield voucher_id, last, backup
    finally:
        redis.delete(keys.edge(voucher_id))


def test_the_sweep_clears_a_flag_redis_forgot_it_had_published(
    sold_out: tuple[int, Reservation, dict[str, str]],
    redis: Any,
    scripts: Scripts,
    gate: Gate,
    states: StateQueue,
    publisher_fn: ModuleType,
    edge: EdgeServer,
    kvs: Any,
    context: Any,
) -> None:
    voucher_id, last, backup = sold_out
    flagged = entry(kvs, edge, voucher_id)
    # Redis restored from the backup (or failed over to a replica that missed the last
    # writes): its record says the open state was the last one published.
    redis.delete(keys.edge(voucher_id))
    redis.hset(keys.edge(voucher_id), mapping=backup)
    assert gate.release(last)  # the unit back on sale
    assert states.notice(scripts, voucher_id) is Noticed.UNCHANGED  # as far as Redis knows
    deliver(states, publisher_fn, context)
    assert entry(kvs, edge, voucher_id).sold_out  # the edge refuses a unit on sale
    assert states.sweep(scripts, [voucher_id]) == 0
    deliver(states, publisher_fn, context)
    repaired = entry(kvs, edge, voucher_id)
    assert not repaired.sold_out
    assert repaired.v > flagged.v
    # And the next change wins over the repair.
    take(gate, voucher_id)
    assert states.notice(scripts, voucher_id) is Noticed.SENT
    deliver(states, publisher_fn, context)
    assert entry(kvs, edge, voucher_id).sold_out


def test_a_sweep_overtaken_by_a_change_leaves_the_change(
    sold_out: tuple[int, Reservation, dict[str, str]],
    scripts: Scripts,
    gate: Gate,
    states: StateQueue,
    publisher_fn: ModuleType,
    edge: EdgeServer,
    kvs: Any,
    context: Any,
) -> None:
    voucher_id, last, _ = sold_out
    assert states.sweep(scripts, [voucher_id]) == 0  # says sold out; still on its way
    (swept,) = drain(states.sqs, states.queue_url)
    assert gate.release(last)
    assert states.notice(scripts, voucher_id) is Noticed.SENT
    deliver(states, publisher_fn, context)
    states.sqs.send_message(QueueUrl=states.queue_url, MessageBody=swept["Body"])  # it arrives late
    deliver(states, publisher_fn, context)
    assert not entry(kvs, edge, voucher_id).sold_out


def calls(client: Any) -> list[str]:
    """The names of the store's API calls the client makes from now on (each is billed)."""
    made: list[str] = []
    client.meta.events.register(
        "before-call.cloudfront-keyvaluestore", lambda model, **_: made.append(model.name), unique_id="count"
    )
    return made


def test_a_sweep_that_finds_the_store_right_costs_one_call(
    sold_out: tuple[int, Reservation, dict[str, str]],
    make_voucher: Callable[..., int],
    redis: Any,
    scripts: Scripts,
    states: StateQueue,
    publisher_fn: ModuleType,
    edge: EdgeServer,
    kvs: Any,
    context: Any,
) -> None:
    voucher_id, _, _ = sold_out
    other = make_voucher(stock=5)
    try:
        made = calls(publisher_fn.publisher.kvs)
        assert states.notice(scripts, other) is Noticed.SENT
        deliver(states, publisher_fn, context)
        assert made == ["DescribeKeyValueStore", "GetKey", "UpdateKeys"]  # a change
        before = {v: stored(kvs, edge.kvs_arn, str(v)) for v in (voucher_id, other)}
        made.clear()
        assert states.sweep(scripts, [voucher_id, other]) == 0
        deliver(states, publisher_fn, context)
        assert made == ["ListKeys"]  # one page holds every entry; nothing to write
        assert {v: stored(kvs, edge.kvs_arn, str(v)) for v in (voucher_id, other)} == before
    finally:
        redis.delete(keys.edge(other))


def test_a_sweep_deletes_the_entries_of_sales_long_ended_and_nothing_else(
    sold_out: tuple[int, Reservation, dict[str, str]],
    scripts: Scripts,
    states: StateQueue,
    publisher_fn: ModuleType,
    edge: EdgeServer,
    kvs: Any,
    other: Any,
    context: Any,
) -> None:
    voucher_id, _, _ = sold_out
    now_ms = int(time.time() * 1000)
    day = int(KEPT_AFTER_END.total_seconds() * 1000)
    hour = 3_600_000
    ended = EdgeState(
        900_001,
        v=now_ms - day - 2 * hour,
        begin=now_ms - day - 3 * hour,
        end=now_ms - day - hour,
        sold_out=True,
        stopped=False,
    )
    entries = {
        "900001": ended.value(),  # ended a day and an hour ago: deleted
        "900002": replace(ended, voucher_id=900_002, v=now_ms - day - hour, begin=0, end=0, stopped=True).value(),
        "900003": replace(ended, voucher_id=900_003, end=now_ms - hour).value(),  # an hour ago: kept
        "900004": replace(ended, voucher_id=900_004, v=now_ms - hour, begin=0, end=0, stopped=True).value(),
        "900005": "maintenance",  # no state: nothing tells when its sale ended
        "pass-keys": '{"end": 1}',  # not a voucher's
        "0900006": ended.value(),  # not a voucher id as the publisher writes one
    }
    for key, value in entries.items():
        write(other, edge.kvs_arn, key, value)
    assert states.sweep(scripts, [voucher_id]) == 0
    deliver(states, publisher_fn, context)
    left = publisher_fn.publisher.list_keys()
    assert set(entries) - set(left) == {"900001", "900002"}
    assert str(voucher_id) in left
    # Changes alone delete nothing: only a sweep knows which sales are looked after.
    write(other, edge.kvs_arn, "900001", ended.value())
    assert states.notice(scripts, voucher_id) is Noticed.UNCHANGED
    assert Publisher(kvs, edge.kvs_arn).publish([replace(ended, voucher_id=900_007)]).deleted == []
    assert "900001" in publisher_fn.publisher.list_keys()


RING = {"active": "k2", "keys": {"k2": "b2" * 32, "k1": "a1" * 32}}


def ring(data: dict[str, Any]) -> KeyRing:
    return KeyRing.from_json(json.dumps(data))


def test_the_pass_keys_are_written_without_active_and_only_when_they_change(edge: EdgeServer, kvs: Any) -> None:
    publisher = Publisher(kvs, edge.kvs_arn)
    text = passkeys.value(ring(RING), 1000)
    assert json.loads(text) == {"keys": RING["keys"], "v": 1000}
    assert passkeys.publish(publisher, text) == (True, text)
    assert stored(kvs, edge.kvs_arn, passkeys.KEY) == text
    etag = kvs.describe_key_value_store(KvsARN=edge.kvs_arn)["ETag"]
    assert passkeys.publish(publisher, text) == (False, text)
    assert kvs.describe_key_value_store(KvsARN=edge.kvs_arn)["ETag"] == etag  # nothing written
    retired = passkeys.value(ring({"active": "k2", "keys": {"k2": RING["keys"]["k2"]}}), 2000)
    assert passkeys.publish(publisher, retired) == (True, retired)
    assert stored(kvs, edge.kvs_arn, passkeys.KEY) == retired
    # A ring read before that change (an older version) leaves it.
    assert passkeys.publish(publisher, text) == (False, retired)


def test_a_concurrent_write_fails_the_pass_keys_write(edge: EdgeServer, kvs: Any, other: Any) -> None:
    before_each_put(kvs, lambda: write(other, edge.kvs_arn, "8", at(1).value()), times=1)
    with pytest.raises(kvs.exceptions.ConflictException):
        passkeys.publish(Publisher(kvs, edge.kvs_arn), passkeys.value(ring(RING)))
    with pytest.raises(kvs.exceptions.ResourceNotFoundException):
        stored(kvs, edge.kvs_arn, passkeys.KEY)


def ring_of(count: int) -> dict[str, Any]:
    """A ring of ``count`` keys with 16-character ids, the longest there are."""
    kids = [f"{i:016d}" for i in range(count)]
    return {"active": kids[0], "keys": dict.fromkeys(kids, "a1" * 32)}


def test_a_ring_over_a_store_value_is_refused() -> None:
    with pytest.raises(passkeys.RingTooLarge):
        passkeys.value(ring(ring_of(12)))


def test_the_largest_ring_that_fits(edge: EdgeServer, kvs: Any) -> None:
    text = passkeys.value(ring(ring_of(11)), 1_796_040_000_000)  # a version in epoch ms
    assert len(text) == 974
    assert passkeys.publish(Publisher(kvs, edge.kvs_arn), text) == (True, text)  # the store takes it


@pytest.fixture
def ring_publisher(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """EdgePublisherFunction's module with the ring in SECKILL_PASS_KEYS, as the runner gives it."""
    monkeypatch.setenv("SECKILL_PASS_KEYS", json.dumps(RING))
    return publisher_module(monkeypatch)


def test_the_handler_publishes_the_pass_keys_on_its_schedule_and_with_each_batch(
    ring_publisher: ModuleType, edge: EdgeServer, kvs: Any, other: Any, context: Any
) -> None:
    # The schedule's event (EventBridge Scheduler): no records.
    assert ring_publisher.lambda_handler({}, context) == {"batchItemFailures": []}
    assert json.loads(stored(kvs, edge.kvs_arn, passkeys.KEY)) == {"keys": RING["keys"], "v": 0}
    # Someone replaced it: the next scheduled run puts it back.
    write(other, edge.kvs_arn, passkeys.KEY, "{}")
    ring_publisher.lambda_handler({}, context)
    assert json.loads(stored(kvs, edge.kvs_arn, passkeys.KEY)) == {"keys": RING["keys"], "v": 0}
    # A batch: the ring is published, and the states too.
    write(other, edge.kvs_arn, passkeys.KEY, "{}")
    ring_publisher.confirmed.clear()  # as in a new container
    sample = "edge_publisher.json"
    newer, _ = (r["body"] for r in load_event(sample)["Records"])
    assert invoke(ring_publisher, context, sample, sqs_record(newer, sample)) == set()
    assert json.loads(stored(kvs, edge.kvs_arn, passkeys.KEY)) == {"keys": RING["keys"], "v": 0}


def test_the_handler_never_fails_a_batch_for_the_pass_keys(
    ring_publisher: ModuleType, edge: EdgeServer, kvs: Any, context: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECKILL_PASS_KEYS", "not a ring")
    sample = "edge_publisher.json"
    newer, _ = (r["body"] for r in load_event(sample)["Records"])
    assert invoke(ring_publisher, context, sample, sqs_record(newer, sample)) == set()
    assert stored(kvs, edge.kvs_arn, "1") == EdgeState.from_message(newer).value()
    with pytest.raises(kvs.exceptions.ResourceNotFoundException):
        stored(kvs, edge.kvs_arn, passkeys.KEY)
