"""EdgePublisherFunction and seckill.edge.publisher against the cloudfront-keyvaluestore API.

AWS has no local KeyValueStore, and the repository's stand-in is not on this branch
yet: the API's answers come from botocore's Stubber, which checks every request
against the service's own model (operations, parameters, the If-Match header's
member) but runs none of the store's logic; the version and conflict rules tested
here are the publisher's. Signing is checked apart, on a real client: SigV4A.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from seckill.edge.publisher import Published, Publisher, StoreBusy, kvs_client
from seckill.edge.state import EdgeState
from seckill_local.checkout import ROOT
from seckill_local.lambdas import load_handler
from seckill_local.template import Function
from tests.helpers import invoke, load_event, sqs_record

ARN = "arn:aws:cloudfront::123456789012:key-value-store/0f7c3a2e-1b2d-4c5e-8f90-a1b2c3d4e5f6"
CREATED = datetime(2026, 11, 30, tzinfo=UTC)
STATE = EdgeState(7, v=1_796_040_000_500, begin=1_796_040_000_000, end=1_796_043_600_000, sold_out=True, stopped=False)


@pytest.fixture
def kvs() -> Any:
    return boto3.client("cloudfront-keyvaluestore", region_name="us-east-1")


@pytest.fixture
def store(kvs: Any) -> Iterator[Stubber]:
    with Stubber(kvs) as stub:
        yield stub
        stub.assert_no_pending_responses()


def described(store: Stubber, etag: str) -> None:
    store.add_response(
        "describe_key_value_store",
        {"ItemCount": 1, "TotalSizeInBytes": 100, "KvsARN": ARN, "Created": CREATED, "ETag": etag},
        {"KvsARN": ARN},
    )


def holds(store: Stubber, value: str | None, key: str = "7") -> None:
    if value is None:
        store.add_client_error("get_key", "ResourceNotFoundException", http_status_code=404)
    else:
        store.add_response("get_key", {"Key": key, "Value": value, "ItemCount": 1, "TotalSizeInBytes": 100})


def put(store: Stubber, etag: str, state: EdgeState = STATE, conflict: bool = False) -> None:
    expected = {"KvsARN": ARN, "Key": state.key, "Value": state.value(), "IfMatch": etag}
    if conflict:
        store.add_client_error("put_key", "ConflictException", http_status_code=409, expected_params=expected)
    else:
        store.add_response("put_key", {"ItemCount": 1, "TotalSizeInBytes": 100, "ETag": f"{etag}+"}, expected)


def older(v: int) -> str:
    return EdgeState(7, v, 0, 0, False, True).value()


def test_writes_a_key_the_store_lacks(kvs: Any, store: Stubber) -> None:
    described(store, "E1")
    holds(store, None)
    put(store, "E1")
    assert Publisher(kvs, ARN).publish(STATE) is Published.WRITTEN


def test_writes_over_an_older_version(kvs: Any, store: Stubber) -> None:
    described(store, "E1")
    holds(store, older(STATE.v - 1))
    put(store, "E1")
    assert Publisher(kvs, ARN).publish(STATE) is Published.WRITTEN


@pytest.mark.parametrize("stored", [STATE.v, STATE.v + 1])
def test_never_writes_over_the_same_or_a_newer_version(kvs: Any, store: Stubber, stored: int) -> None:
    described(store, "E1")
    holds(store, older(stored))
    assert Publisher(kvs, ARN).publish(STATE) is Published.STALE  # no put_key queued: one would fail


def test_replaces_a_value_that_is_no_state(kvs: Any, store: Stubber) -> None:
    described(store, "E1")
    holds(store, "maintenance")
    put(store, "E1")
    assert Publisher(kvs, ARN).publish(STATE) is Published.WRITTEN


def test_a_conflict_reads_again_and_retries(kvs: Any, store: Stubber) -> None:
    described(store, "E1")
    holds(store, older(1))
    put(store, "E1", conflict=True)  # another key was written meanwhile
    described(store, "E2")
    holds(store, older(1))
    put(store, "E2")
    waits: list[float] = []
    assert Publisher(kvs, ARN, sleep=waits.append).publish(STATE) is Published.WRITTEN
    assert len(waits) == 1


def test_a_conflict_with_a_newer_state_stops(kvs: Any, store: Stubber) -> None:
    described(store, "E1")
    holds(store, older(1))
    put(store, "E1", conflict=True)  # this very key, by a newer state
    described(store, "E2")
    holds(store, older(STATE.v + 1))
    assert Publisher(kvs, ARN, sleep=lambda _: None).publish(STATE) is Published.STALE


def test_conflicts_without_end_fail_the_record(kvs: Any, store: Stubber) -> None:
    for attempt in range(3):
        described(store, f"E{attempt}")
        holds(store, None)
        put(store, f"E{attempt}", conflict=True)
    waits: list[float] = []
    with pytest.raises(StoreBusy):
        Publisher(kvs, ARN, attempts=3, sleep=waits.append).publish(STATE)
    assert len(waits) == 2
    assert all(0 <= w <= 0.05 * 2**i for i, w in enumerate(waits))  # jittered, bounded


def test_other_errors_are_raised(kvs: Any, store: Stubber) -> None:
    described(store, "E1")
    store.add_client_error("get_key", "AccessDeniedException", http_status_code=403)
    with pytest.raises(kvs.exceptions.AccessDeniedException):
        Publisher(kvs, ARN).publish(STATE)


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
        client.describe_key_value_store(KvsARN=ARN)
    (request,) = seen
    assert request.headers["Authorization"].startswith(b"AWS4-ECDSA-P256-SHA256 ")
    assert request.headers["X-Amz-Region-Set"] == b"*"
    assert request.url.startswith("https://123456789012.cloudfront-kvs.global.api.aws/")


@pytest.fixture
def publisher_fn(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """EdgePublisherFunction's module, imported as the runtime would (its template
    resource is the stack's; the code is all this needs)."""
    fn = Function("EdgePublisherFunction", ROOT / "functions" / "edge_publisher", "app.lambda_handler", 30, {})
    with monkeypatch.context() as patch:
        patch.setenv("EDGE_KVS_ARN", ARN)
        patch.setattr(sys, "modules", dict(sys.modules))
        handler = load_handler(fn)
        return sys.modules[handler.__module__]


def test_handler_writes_each_record_and_fails_the_malformed(publisher_fn: ModuleType, context: Any) -> None:
    sample = "edge_state_batch.json"
    newer, older_one = (r["body"] for r in load_event(sample)["Records"])
    assert EdgeState.from_message(newer).v > EdgeState.from_message(older_one).v
    with Stubber(publisher_fn.publisher.kvs) as stub:
        described(stub, "E1")
        holds(stub, None, key="1")
        put(stub, "E1", EdgeState.from_message(newer))
        described(stub, "E2")
        holds(stub, newer.split(',"voucherId"')[0] + "}", key="1")  # the newer one, stored just now
        bad = sqs_record('{"v": 1, "voucherId": 1}', sample, "bad")
        failed = invoke(publisher_fn, context, sample, sqs_record(newer, sample), sqs_record(older_one, sample), bad)
        stub.assert_no_pending_responses()
    assert failed == {"bad"}
