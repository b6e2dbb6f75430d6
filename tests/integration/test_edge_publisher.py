"""EdgePublisherFunction and seckill.edge.publisher on the local KeyValueStore stand-in
(local/seckill_local/edge/server.mjs), through boto3's own cloudfront-keyvaluestore
client, signed as in AWS: versions, If-Match, conflicts made by real concurrent writes."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import ModuleType
from typing import Any

import pytest

from seckill.edge import passkeys
from seckill.edge.publisher import Published, Publisher, StoreBusy, kvs_client
from seckill.edge.state import EdgeState
from seckill_local.checkout import ROOT
from seckill_local.edge import EdgeServer, local_kvs_client
from seckill_local.lambdas import load_handler
from seckill_local.template import Function
from tests.helpers import closed_port, invoke, load_event, sqs_record

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


def before_each_put(client: Any, action: Callable[[], None], times: int) -> None:
    """Run ``action`` just before the client's next ``times`` PutKey calls are sent,
    after their ETag was read: a concurrent write exactly where one can hurt."""
    left = [times]

    def hook(**_: Any) -> None:
        if left[0]:
            left[0] -= 1
            action()

    client.meta.events.register("before-call.cloudfront-keyvaluestore.PutKey", hook)


def test_writes_a_key_the_store_lacks(edge: EdgeServer, kvs: Any) -> None:
    assert Publisher(kvs, edge.kvs_arn).publish(STATE) is Published.WRITTEN
    assert stored(kvs, edge.kvs_arn) == STATE.value()


def test_only_a_newer_version_replaces_the_stored_one(edge: EdgeServer, kvs: Any) -> None:
    publisher = Publisher(kvs, edge.kvs_arn)
    assert publisher.publish(at(5, sold_out=False)) is Published.WRITTEN
    assert publisher.publish(at(6)) is Published.WRITTEN
    assert publisher.publish(at(6, sold_out=False)) is Published.STALE  # the same version: a duplicate
    assert publisher.publish(at(4, sold_out=False)) is Published.STALE  # late
    assert stored(kvs, edge.kvs_arn) == at(6).value()


def test_replaces_a_value_that_is_no_state(edge: EdgeServer, kvs: Any) -> None:
    write(kvs, edge.kvs_arn, STATE.key, "maintenance")
    assert Publisher(kvs, edge.kvs_arn).publish(STATE) is Published.WRITTEN
    assert stored(kvs, edge.kvs_arn) == STATE.value()


def test_a_conflict_reads_again_and_retries(edge: EdgeServer, kvs: Any, other: Any) -> None:
    before_each_put(kvs, lambda: write(other, edge.kvs_arn, "8", at(1).value()), times=1)
    waits: list[float] = []
    assert Publisher(kvs, edge.kvs_arn, sleep=waits.append).publish(STATE) is Published.WRITTEN
    assert len(waits) == 1
    assert stored(kvs, edge.kvs_arn) == STATE.value()
    assert stored(kvs, edge.kvs_arn, "8") == at(1).value()  # the other write stands


def test_a_conflict_with_a_newer_state_of_the_key_stops(edge: EdgeServer, kvs: Any, other: Any) -> None:
    newer = at(STATE.v + 1, sold_out=False)
    before_each_put(kvs, lambda: write(other, edge.kvs_arn, STATE.key, newer.value()), times=1)
    assert Publisher(kvs, edge.kvs_arn, sleep=lambda _: None).publish(STATE) is Published.STALE
    assert stored(kvs, edge.kvs_arn) == newer.value()


def test_conflicts_without_end_fail_the_record(edge: EdgeServer, kvs: Any, other: Any) -> None:
    before_each_put(kvs, lambda: write(other, edge.kvs_arn, "8", at(1).value()), times=3)
    waits: list[float] = []
    with pytest.raises(StoreBusy):
        Publisher(kvs, edge.kvs_arn, attempts=3, sleep=waits.append).publish(STATE)
    assert len(waits) == 2
    assert all(0 <= w <= 0.05 * 2**i for i, w in enumerate(waits))  # jittered, bounded
    with pytest.raises(kvs.exceptions.ResourceNotFoundException):
        stored(kvs, edge.kvs_arn)


def test_other_errors_are_raised(edge: EdgeServer, kvs: Any) -> None:
    unknown = edge.kvs_arn.replace("seckill-local", "no-such-store")
    with pytest.raises(kvs.exceptions.ClientError):
        Publisher(kvs, unknown).publish(STATE)


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


@pytest.fixture
def publisher_fn(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """EdgePublisherFunction's module, imported as the runtime would, on the local store
    (its template resource is the stack's; the code is all this needs)."""
    fn = Function("EdgePublisherFunction", ROOT / "functions" / "edge_publisher", "app.lambda_handler", 30, {})
    with monkeypatch.context() as patch:
        patch.setattr(sys, "modules", dict(sys.modules))
        handler = load_handler(fn)
        return sys.modules[handler.__module__]


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


RING = {"active": "k2", "keys": {"k2": "b2" * 32, "k1": "a1" * 32}}


def test_the_pass_keys_are_written_without_active_and_only_when_they_change(edge: EdgeServer, kvs: Any) -> None:
    publisher = Publisher(kvs, edge.kvs_arn)
    text = passkeys.value(json.dumps(RING))
    assert json.loads(text) == {"keys": RING["keys"]}
    assert passkeys.publish(publisher, text) is Published.WRITTEN
    assert stored(kvs, edge.kvs_arn, passkeys.KEY) == text
    etag = kvs.describe_key_value_store(KvsARN=edge.kvs_arn)["ETag"]
    assert passkeys.publish(publisher, text) is Published.STALE
    assert kvs.describe_key_value_store(KvsARN=edge.kvs_arn)["ETag"] == etag  # nothing written
    retired = passkeys.value(json.dumps({"active": "k2", "keys": {"k2": RING["keys"]["k2"]}}))
    assert passkeys.publish(publisher, retired) is Published.WRITTEN
    assert stored(kvs, edge.kvs_arn, passkeys.KEY) == retired


def test_a_concurrent_write_fails_the_pass_keys_write(edge: EdgeServer, kvs: Any, other: Any) -> None:
    before_each_put(kvs, lambda: write(other, edge.kvs_arn, "8", at(1).value()), times=1)
    with pytest.raises(kvs.exceptions.ConflictException):
        passkeys.publish(Publisher(kvs, edge.kvs_arn), passkeys.value(json.dumps(RING)))
    with pytest.raises(kvs.exceptions.ResourceNotFoundException):
        stored(kvs, edge.kvs_arn, passkeys.KEY)


@pytest.mark.parametrize(
    "ring",
    [
        "not json",
        "[]",
        json.dumps({"active": "k1"}),
        json.dumps({"active": "k1", "keys": {}}),
        json.dumps({"keys": {"K1": "a1" * 32}}),
        json.dumps({"keys": {"k" * 17: "a1" * 32}}),
        json.dumps({"keys": {"k1": "A1" * 32}}),
        json.dumps({"keys": {"k1": "a1" * 31}}),
        json.dumps({"keys": {"k1": 1}}),
        # Twelve keys of 16-character ids: over a KeyValueStore value's 1,024 bytes.
        json.dumps({"keys": {f"{i:016d}": "a1" * 32 for i in range(12)}}),
    ],
)
def test_a_ring_that_is_none_or_does_not_fit_is_refused(ring: str) -> None:
    with pytest.raises(passkeys.NotARing):
        passkeys.value(ring)


def test_the_largest_ring_that_fits(edge: EdgeServer, kvs: Any) -> None:
    text = passkeys.value(json.dumps({"keys": {f"{i:016d}": "a1" * 32 for i in range(11)}}))
    assert len(text) == 956
    assert passkeys.publish(Publisher(kvs, edge.kvs_arn), text) is Published.WRITTEN  # the store takes it


@pytest.fixture
def ring_publisher(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """EdgePublisherFunction's module with the ring in SECKILL_PASS_KEYS, as the runner gives it."""
    monkeypatch.setenv("SECKILL_PASS_KEYS", json.dumps(RING))
    fn = Function("EdgePublisherFunction", ROOT / "functions" / "edge_publisher", "app.lambda_handler", 30, {})
    with monkeypatch.context() as patch:
        patch.setattr(sys, "modules", dict(sys.modules))
        handler = load_handler(fn)
        return sys.modules[handler.__module__]


def test_the_handler_publishes_the_pass_keys_on_its_schedule_and_with_each_batch(
    ring_publisher: ModuleType, edge: EdgeServer, kvs: Any, other: Any, context: Any
) -> None:
    # The schedule's event (EventBridge Scheduler): no records.
    assert ring_publisher.lambda_handler({}, context) == {"batchItemFailures": []}
    assert json.loads(stored(kvs, edge.kvs_arn, passkeys.KEY)) == {"keys": RING["keys"]}
    # Someone replaced it: the next scheduled run puts it back.
    write(other, edge.kvs_arn, passkeys.KEY, "{}")
    ring_publisher.lambda_handler({}, context)
    assert json.loads(stored(kvs, edge.kvs_arn, passkeys.KEY)) == {"keys": RING["keys"]}
    # A batch: the ring is published, and the states too.
    write(other, edge.kvs_arn, passkeys.KEY, "{}")
    ring_publisher.confirmed.clear()  # as in a new container
    sample = "edge_publisher.json"
    newer, _ = (r["body"] for r in load_event(sample)["Records"])
    assert invoke(ring_publisher, context, sample, sqs_record(newer, sample)) == set()
    assert json.loads(stored(kvs, edge.kvs_arn, passkeys.KEY)) == {"keys": RING["keys"]}


def test_the_handler_never_fails_a_batch_for_the_pass_keys(
    ring_publisher: ModuleType, edge: EdgeServer, kvs: Any, context: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ring_publisher, "ring", lambda: "not a ring")
    sample = "edge_publisher.json"
    newer, _ = (r["body"] for r in load_event(sample)["Records"])
    assert invoke(ring_publisher, context, sample, sqs_record(newer, sample)) == set()
    assert stored(kvs, edge.kvs_arn, "1") == EdgeState.from_message(newer).value()
    with pytest.raises(kvs.exceptions.ResourceNotFoundException):
        stored(kvs, edge.kvs_arn, passkeys.KEY)
