"""Pass keys that never refuse a valid pass (seckill.edge.passkeys), and secrets that
outlive a failed refresh (seckill.infra.secrets): the ring and what the edge holds on the
suite's moto Secrets Manager, the publisher writing the local edge's store, presses
going through edge/press.js on Node.js."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import boto3
import pytest
import urllib3
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities import parameters

from seckill import passes
from seckill.edge import passkeys
from seckill.edge.passkeys import Held
from seckill.edge.publisher import Publisher
from seckill.edge.state import EdgeState
from seckill.infra import secrets
from seckill.infra.errors import TryAgain
from seckill.origin import HEADER, OriginCheck
from seckill.passes import KeyRing
from seckill_local import secrets as local_secrets
from seckill_local.checkout import ROOT, TEMPLATE
from seckill_local.edge import EdgeServer, local_kvs_client
from seckill_local.runner import Runner
from tests.helpers import load_event, module_of, new_user
from tests.integration.test_edge_publisher import publisher_module

K1 = "11" * 32
RING1 = json.dumps({"active": "k1", "keys": {"k1": K1}})
TOKEN = "rotation-token"


@pytest.fixture
def secretsmanager(sqs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Makes secrets on the moto server (a name serves as the ARN); deleted afterwards."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", sqs_endpoint)
    client: Any = boto3.client("secretsmanager", endpoint_url=sqs_endpoint)
    made: list[str] = []

    def make(value: str) -> str:
        name = f"seckill-keys-{uuid.uuid4().hex}"
        client.create_secret(Name=name, SecretString=value)
        made.append(name)
        return name

    parameters.clear_caches()
    secrets.secrets.forget()
    yield make
    for name in made:
        client.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
    parameters.clear_caches()
    secrets.secrets.forget()


def client() -> Any:
    return boto3.client("secretsmanager")


@contextlib.contextmanager
def unreadable(*names: str) -> Iterator[None]:
    """Every read of these secrets fails inside, as in an outage (the local chaos hook)."""
    endpoint = os.environ["AWS_ENDPOINT_URL_SECRETS_MANAGER"]
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(local_secrets.unreadable(endpoint, name))
        parameters.clear_caches()  # as once the cache's max age has passed
        yield


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    shared = Metrics(namespace="Seckill")
    shared.clear_metrics()
    yield shared
    shared.clear_metrics()


@dataclass
class Stack:
    """The API's side (the variables it signs with) and the publisher's, on one edge."""

    ring: str
    held: str
    publisher: ModuleType
    edge: EdgeServer

    def publish(self) -> None:
        """The publisher's scheduled run."""
        self.publisher.publish_pass_keys(ask_store=True)

    def rotate(self) -> KeyRing:
        """The operator's one put (the local chaos hook): k2 added and made active."""
        return local_secrets.rotate(os.environ["AWS_ENDPOINT_URL_SECRETS_MANAGER"], self.ring, "k2")

    def held_now(self) -> Held:
        return Held.from_json(client().get_secret_value(SecretId=self.held)["SecretString"])

    def stored(self) -> dict[str, Any]:
        kvs = local_kvs_client(self.edge.kvs_endpoint)
        return dict(json.loads(kvs.get_key(KvsARN=self.edge.kvs_arn, Key=passkeys.KEY)["Value"]))


@pytest.fixture
def stack(secretsmanager: Callable[[str], str], edge: EdgeServer, monkeypatch: pytest.MonkeyPatch) -> Stack:
    ring, held = secretsmanager(RING1), secretsmanager(Held({}).to_json())
    for name, value in edge.environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PASS_KEYS_SECRET_ARN", ring)
    monkeypatch.setenv("PASS_KEYS_HELD_SECRET_ARN", held)
    # The local store answers at once: a second stands in for CloudFront's propagation.
    monkeypatch.setattr(passkeys, "PROPAGATION_SECONDS", 1.0)
    # Every pass signed with the newest ring and what the edge holds, not a minute's cache.
    monkeypatch.setattr(passes, "RING_MAX_AGE", 0)
    monkeypatch.setattr(passkeys, "HELD_MAX_AGE", 0)
    return Stack(ring, held, publisher_module(monkeypatch), edge)


def open_draw(edge: EdgeServer, voucher_id: int) -> None:
    """A draw on sale whose cursor admits every early ticket."""
    now = int(time.time() * 1000)
    state = EdgeState(
        voucher_id, v=now, begin=now - 60_000, end=now + 3_600_000, sold_out=False, stopped=False,
        draw=True, moves=((now - 30_000, "f" * 17),),
    )  # fmt: skip
    kvs = local_kvs_client(edge.kvs_endpoint)
    etag = kvs.describe_key_value_store(KvsARN=edge.kvs_arn)["ETag"]
    kvs.put_key(KvsARN=edge.kvs_arn, Key=state.key, Value=state.value(), IfMatch=etag)


@dataclass(frozen=True)
class Press:
    issued_at: float
    kid: str
    status: int
    forwarded: bool


class Presses:
    """Entrants pressing through the edge, each with a pass issued just before (as the
    entry route signs it), until stopped."""

    def __init__(self, edge: EdgeServer, voucher_id: int, threads: int = 3) -> None:
        self.edge, self.voucher_id = edge, voucher_id
        self.done: list[Press] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        self._http = urllib3.PoolManager(retries=False, timeout=10, maxsize=threads)

    def __enter__(self) -> Presses:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)

    def _run(self) -> None:
        try:
            self._press_until_stopped()
        except BaseException as error:  # the test reads it: a thread's failure is otherwise unseen
            self.errors.append(error)

    @staticmethod
    def _signing_ring() -> tuple[float, KeyRing]:
        """When the key was chosen (by the clock it was chosen with), and the ring signing with it."""
        chosen: list[float] = []

        def clock() -> float:
            chosen.append(time.time())
            return chosen[-1]

        ring = passkeys.signing_ring(clock=clock)
        return chosen[0], ring

    def _press_until_stopped(self) -> None:
        user = new_user()
        while not self._stop.is_set():
            issued_at, ring = self._signing_ring()
            shown = passes.sign(ring, self.voucher_id, user, TOKEN, "0" + "1" * 16, int(issued_at) + 3600)
            answer = self._http.request(
                "POST",
                f"{self.edge.url}/voucher-order/seckill/{self.voucher_id}",
                headers={"authorization": f"Bearer {TOKEN}", passes.PASS_HEADER: shown},
                body=b"",
            )
            forwarded = answer.headers.get("x-upstream") == "yes"
            self.done.append(Press(issued_at, shown.partition(".")[0], answer.status, forwarded))

    def wait_for(self, kid: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not any(p.kid == kid for p in self.done):
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, f"no pass signed with {kid}"
            time.sleep(0.05)


def test_a_key_rotated_under_load_never_refuses_a_valid_pass_at_the_edge(stack: Stack) -> None:
    voucher_id = 7_000_000 + new_user() % 1_000_000
    open_draw(stack.edge, voucher_id)
    stack.publish()
    assert stack.stored()["keys"] == {"k1": K1}
    with Presses(stack.edge, voucher_id) as presses:
        presses.wait_for("k1")
        rotated_ring = stack.rotate()
        rotated = time.time()
        time.sleep(1.0)
        assert not presses.errors, presses.errors
        # The store lacks k2: every pass is still signed with k1.
        assert {p.kid for p in presses.done if p.issued_at > rotated + 0.2} == {"k1"}
        published = time.time()
        stack.publish()
        assert stack.stored()["keys"] == {kid: key.hex() for kid, key in rotated_ring.keys.items()}
        held = stack.held_now().keys
        assert published + 1.0 <= held["k2"] <= time.time() + 1.0
        presses.wait_for("k2")
        time.sleep(0.5)
    done = presses.done
    assert len(done) > 20
    refused = [p for p in done if not p.forwarded]
    assert not refused, f"{len(refused)} of {len(done)} valid passes refused at the edge, e.g. {refused[0]}"
    # k1 until the edge holds k2, then k2 alone.
    first_k2 = min(p.issued_at for p in done if p.kid == "k2")
    assert first_k2 >= held["k2"]
    assert {p.kid for p in done if p.issued_at < first_k2} == {"k1"}
    assert {p.kid for p in done if p.issued_at > first_k2 + 0.2} == {"k2"}


def test_a_publisher_that_read_the_ring_before_a_rotation_never_takes_the_new_key_out(stack: Stack) -> None:
    stack.rotate()
    time.sleep(1.1)  # a later version of the secret (its creation time counts whole seconds)
    stack.publish()
    newer = stack.stored()
    stale = passkeys.value(KeyRing.from_json(RING1), newer["v"] - 1000)
    kvs = local_kvs_client(stack.edge.kvs_endpoint)
    written, stored = passkeys.publish(Publisher(kvs, stack.edge.kvs_arn), stale)
    assert not written
    assert json.loads(stored or "") == newer
    assert passkeys.confirm(client(), stack.held, stored, time.time()) is None  # k2 stays held
    assert set(stack.held_now().keys) == {"k1", "k2"}


def test_without_an_edge_the_active_key_signs_at_once(
    secretsmanager: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PASS_KEYS_SECRET_ARN", secretsmanager(RING1))
    monkeypatch.delenv("PASS_KEYS_HELD_SECRET_ARN", raising=False)
    assert passkeys.signing_ring().active == "k1"
    local_secrets.rotate(os.environ["AWS_ENDPOINT_URL_SECRETS_MANAGER"], os.environ["PASS_KEYS_SECRET_ARN"], "k2")
    parameters.clear_caches()
    assert passkeys.signing_ring().active == "k2"


def test_a_failed_refresh_keeps_the_last_good_ring_and_counts_it(stack: Stack, metrics: Metrics) -> None:
    stack.publish()
    signed = passkeys.signing_ring()
    assert signed.active == "k1"
    with unreadable(stack.ring, stack.held):
        assert passkeys.signing_ring() == signed
        shown = passes.sign(signed, 7, 1010, TOKEN, "0" + "1" * 16, int(time.time()) + 60)
        assert passes.press_ticket(shown, 7, 1010, TOKEN, time.time()) == "0" + "1" * 16
        assert metrics.metric_set[secrets.METRIC]["Value"] == [1.0, 1.0]  # the ring, what the edge holds
        # The publisher writes nothing it could not read afresh: the store keeps its keys.
        stack.publish()
        assert stack.stored()["keys"] == {"k1": K1}


def test_a_ring_never_read_is_a_503(secretsmanager: Callable[[str], str], monkeypatch: pytest.MonkeyPatch) -> None:
    name = secretsmanager(RING1)
    monkeypatch.setenv("PASS_KEYS_SECRET_ARN", name)
    with unreadable(name), pytest.raises(TryAgain):
        passkeys.signing_ring()


def test_the_authorizer_keeps_answering_while_its_origin_secret_cannot_be_read(
    secretsmanager: Callable[[str], str],
    handlers: dict[str, Any],
    mint: Callable[[int], str],
    context: Any,
    metrics: Metrics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = secretsmanager(json.dumps({"current": "edge-secret", "previous": ""}))
    authorizer = module_of(handlers["AuthorizerFunction"])
    monkeypatch.setattr(authorizer, "origin", OriginCheck.from_env({"ORIGIN_SECRET_ARN": name}))
    user_id = new_user()
    event = {**load_event("authorizer.json"), "headers": {"authorization": f"Bearer {mint(user_id)}"}}
    event["headers"][HEADER] = "edge-secret"
    allowed = {"isAuthorized": True, "context": {"userId": str(user_id)}}
    assert authorizer.lambda_handler(event, context) == allowed
    with unreadable(name):
        assert authorizer.lambda_handler(event, context) == allowed
        assert authorizer.lambda_handler({**event, "headers": {**event["headers"], HEADER: "x"}}, context) == {
            "isAuthorized": False
        }
        assert metrics.metric_set[secrets.METRIC]["Value"] == [1.0]


@pytest.mark.parametrize("edge", [True, False])
def test_the_local_runner_gives_the_publisher_and_the_api_what_the_edge_holds_only_with_the_edge(
    edge: bool, sqs_endpoint: str, sqs: Any
) -> None:
    prefix = f"k{uuid.uuid4().hex[:10]}-"
    args = argparse.Namespace(
        template=str(TEMPLATE), env_vars=ROOT / "events" / "env.json", sqs_endpoint=sqs_endpoint,
        queue_prefix=prefix, edge=edge, kvs_endpoint="http://127.0.0.1:4999",
    )  # fmt: skip
    runner = Runner(args)
    try:
        api = runner.environment(runner.function("SeckillApiFunction"))
        publisher = runner.environment(runner.function("EdgePublisherFunction"))
        assert api["PASS_KEYS_HELD_SECRET_ARN"] == publisher["PASS_KEYS_HELD_SECRET_ARN"]
        assert api["AWS_ENDPOINT_URL_SECRETS_MANAGER"] == sqs_endpoint
        if edge:
            held = api["PASS_KEYS_HELD_SECRET_ARN"]
            manager: Any = boto3.client("secretsmanager", endpoint_url=sqs_endpoint)
            assert Held.from_json(manager.get_secret_value(SecretId=held)["SecretString"]) == Held({})
            manager.delete_secret(SecretId=held, ForceDeleteWithoutRecovery=True)
        else:
            assert api["PASS_KEYS_HELD_SECRET_ARN"] == ""  # the active key signs at once
    finally:
        for url in sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", []):
            sqs.delete_queue(QueueUrl=url)
