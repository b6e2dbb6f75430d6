"""The local runner (``seckill_local``): the template reader, the queues on moto with
their redrive, the HTTP API with its authorizer over real HTTP, the SQS feeder with
the real persister, and ``seckill-local invoke`` as a command."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from http.client import HTTPConnection, HTTPResponse
from pathlib import Path
from typing import Any

import boto3
import pytest
import redis as redis_lib
from botocore.exceptions import ClientError

from seckill import vouchers
from seckill.infra import keys
from seckill.infra.db import Credentials, Database
from seckill.messages import queue_depth
from seckill.press.gate import Gate
from seckill.tokens import store_tokens, user_for_token
from seckill.vouchers import MIN_HOLD_SECONDS
from seckill_demo.faults import PrivateRedis
from seckill_local.api import LocalHttpApi, make_server
from seckill_local.checkout import ROOT, TEMPLATE
from seckill_local.feeder import QueueFeeder
from seckill_local.lambdas import WORKER_HOOK, FunctionPool, local_parameters
from seckill_local.ports import free_port
from seckill_local.runner import Runner
from seckill_local.sqs import LOCAL_AWS, ensure_queues
from seckill_local.template import Template
from tests.helpers import EVENTS, accept, closed_port, db_rows, drain, new_user, on_sale, signed, wait_for

SECKILL_LOCAL = ROOT / ".venv" / "bin" / "seckill-local"


def queue_attributes(sqs: Any, url: str) -> dict[str, str]:
    attributes: dict[str, str] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    return attributes


def delete_queues_with_prefix(sqs: Any, prefix: str) -> None:
    for url in sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", []):
        sqs.delete_queue(QueueUrl=url)


# --- template.yaml as the runner reads it ----------------------------------------------------


# --- queues on moto ------------------------------------------------------------------------------


def test_ensure_queues_creates_the_redrive_to_the_dead_letter_queue(
    sqs: Any, template: Template, queues: dict[str, str]
) -> None:
    assert set(queues) == set(template.queues())
    assert {"OrderQueue", "OrderDeadLetterQueue"} <= set(queues)
    main, dlq = queue_attributes(sqs, queues["OrderQueue"]), queue_attributes(sqs, queues["OrderDeadLetterQueue"])
    policy = json.loads(main["RedrivePolicy"])
    assert policy["deadLetterTargetArn"] == dlq["QueueArn"]
    assert int(policy["maxReceiveCount"]) == 5
    assert main["VisibilityTimeout"] == "1"  # the override
    assert main["MessageRetentionPeriod"] == "345600"
    assert dlq["MessageRetentionPeriod"] == "1209600"
    assert "RedrivePolicy" not in dlq
    poison = queue_attributes(sqs, queues["OrderPoisonQueue"])
    assert poison["MessageRetentionPeriod"] == "1209600"
    assert "RedrivePolicy" not in poison

    # Idempotent: the same prefix finds the same queues.
    prefix = queues["OrderQueue"].rsplit("/", 1)[1].removesuffix("OrderQueue")
    assert ensure_queues(sqs, template, prefix=prefix, visibility_timeout=1) == queues


def test_ensure_queues_takes_the_templates_visibility_timeout(sqs: Any, template: Template) -> None:
    prefix = f"v{uuid.uuid4().hex[:10]}-"
    try:
        urls = ensure_queues(sqs, template, prefix=prefix)
        assert queue_attributes(sqs, urls["OrderQueue"])["VisibilityTimeout"] == "180"
    finally:
        delete_queues_with_prefix(sqs, prefix)


def test_a_message_received_max_receive_count_times_moves_to_the_dlq(sqs: Any, queues: dict[str, str]) -> None:
    url, dlq = queues["OrderQueue"], queues["OrderDeadLetterQueue"]
    sent = sqs.send_message(QueueUrl=url, MessageBody="never handled")["MessageId"]
    for attempt in range(1, 6):
        (message,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0, AttributeNames=["All"])["Messages"]
        assert message["MessageId"] == sent
        assert message["Attributes"]["ApproximateReceiveCount"] == str(attempt)
    # The sixth receive finds it gone: the queue itself redrove it.
    assert sqs.receive_message(QueueUrl=url, VisibilityTimeout=0).get("Messages", []) == []
    moved = drain(sqs, dlq)
    assert [m["Body"] for m in moved] == ["never handled"]


# --- a Runner wired to the suite's services ---------------------------------------------------


@pytest.fixture(scope="module")
def env_vars_file(tmp_path_factory: pytest.TempPathFactory, creds: Credentials) -> Path:
    """An env-vars file (as for ``sam local --env-vars``) pointing at the suite's services."""
    path = tmp_path_factory.mktemp("runner") / "env.json"
    parameters = {**local_parameters(os.environ["REDIS_URL"], creds), "SECKILL_REFUSAL_CACHE_SECONDS": "0"}
    path.write_text(json.dumps({"Parameters": parameters}), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runner(sqs_endpoint: str, sqs: Any, env_vars_file: Path) -> Iterator[Runner]:
    prefix = f"r{uuid.uuid4().hex[:10]}-"
    args = argparse.Namespace(
        template=str(TEMPLATE),
        env_vars=env_vars_file,
        sqs_endpoint=sqs_endpoint,
        queue_prefix=prefix,
        visibility_timeout=1,
    )
    yield Runner(args)
    delete_queues_with_prefix(sqs, prefix)


def test_runner_environment_resolves_refs_and_layers_env_vars(runner: Runner, creds: Credentials) -> None:
    queues = runner.queues()
    api = runner.environment(runner.function("SeckillApiFunction"))
    assert api["ORDER_QUEUE_URL"] == queues["OrderQueue"]
    assert api["DB_NAME"] == creds.database  # the env-vars file beats the template's !Ref DbName
    assert api["REDIS_URL"] == os.environ["REDIS_URL"]
    assert api["AWS_ENDPOINT_URL_SQS"] == runner.endpoint
    assert api["AWS_LAMBDA_FUNCTION_NAME"] == "SeckillApiFunction"
    assert api["POWERTOOLS_SERVICE_NAME"] == "seckill"
    persister = runner.environment(runner.function("OrderPersisterFunction"))
    assert "ORDER_QUEUE_URL" not in persister
    assert persister["ORDER_POISON_QUEUE_URL"] == queues["OrderPoisonQueue"]
    reconciler = runner.environment(runner.function("ReconcilerFunction"))
    assert reconciler["ORDER_QUEUE_URL"] == queues["OrderQueue"]
    assert reconciler["ORDER_DLQ_URL"] == queues["OrderDeadLetterQueue"]
    # The Redis AUTH secret is the stack's own: locally there is none, so no password.
    assert "REDIS_AUTH_SECRET_ARN" not in api
    with pytest.raises(SystemExit):
        runner.function("NoSuchFunction")


# --- the HTTP API over real HTTP ---------------------------------------------------------------


@contextlib.contextmanager
def serving(template: Template, pools: dict[str, FunctionPool]) -> Iterator[str]:
    """``start-api`` in-process with these warm containers; closes them at the end."""
    try:
        for pool in pools.values():
            pool.warm()
        server = make_server(LocalHttpApi(template, pools), "127.0.0.1", 0)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
    finally:
        for pool in pools.values():
            pool.close()


@pytest.fixture(scope="module")
def api_url(runner: Runner, template: Template) -> Iterator[str]:
    """One warm container each of the API and the authorizer."""
    with serving(
        template, {name: runner.pool(name, 1) for name in ("SeckillApiFunction", "AuthorizerFunction")}
    ) as url:
        yield url


def http(
    url: str, method: str = "GET", headers: dict[str, str] | None = None, data: bytes | None = None
) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})  # noqa: S310 (localhost)
    try:
        with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310
            status, raw, got = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, raw, got = error.code, error.read(), dict(error.headers)
    return status, {k.lower(): v for k, v in got.items()}, json.loads(raw) if raw else None


def test_http_user_route_without_authorization_header_is_401(api_url: str, make_voucher: Callable[..., int]) -> None:
    voucher_id = make_voucher(stock=1)
    status, _, answer = http(f"{api_url}/voucher-order/seckill/{voucher_id}", "POST")
    assert (status, answer) == (401, {"message": "Unauthorized"})
    status, _, answer = http(f"{api_url}/voucher-order/123")
    assert (status, answer) == (401, {"message": "Unauthorized"})


def test_http_unknown_token_is_403(api_url: str, make_voucher: Callable[..., int], redis: Any) -> None:
    voucher_id = make_voucher(stock=1)
    status, _, answer = http(
        f"{api_url}/voucher-order/seckill/{voucher_id}", "POST", {"Authorization": f"Bearer {uuid.uuid4().hex}"}
    )
    assert (status, answer) == (403, {"message": "Forbidden"})
    assert redis.get(keys.stock(voucher_id)) == "1"


def test_http_seckill_with_a_minted_token_is_202_and_queued(
    api_url: str,
    runner: Runner,
    make_voucher: Callable[..., int],
    mint: Callable[[int], str],
    sqs: Any,
    redis: Any,
) -> None:
    voucher_id = make_voucher(stock=2)
    user_id, other = new_user(), new_user()
    token = mint(user_id)
    order_queue = runner.queues()["OrderQueue"]
    drain(sqs, order_queue)

    status, headers, answer = http(
        f"{api_url}/voucher-order/seckill/{voucher_id}", "POST", {"Authorization": f"Bearer {token}"}
    )

    assert status == 202, answer
    order_id = answer["data"]
    assert isinstance(order_id, str)
    assert answer["success"] is True
    assert headers["location"] == f"/voucher-order/{order_id}"
    assert headers["content-type"].startswith("application/json")
    try:
        (message,) = drain(sqs, order_queue)
        assert json.loads(message["Body"])["orderId"] == order_id
        assert json.loads(message["Body"])["userId"] == user_id

        # The user behind the token, and only that user, sees the order.
        status, _, answer = http(f"{api_url}/voucher-order/{order_id}", headers={"authorization": token})
        assert status == 200, answer
        assert answer["data"]["status"] == "PENDING"
        assert answer["data"]["userId"] == user_id
        status, _, answer = http(f"{api_url}/voucher-order/{order_id}", headers={"authorization": mint(other)})
        assert (status, answer["code"]) == (404, "ORDER_NOT_FOUND")

        # The function's own refusals come through unchanged.
        status, _, answer = http(f"{api_url}/voucher-order/seckill/{voucher_id}", "POST", {"authorization": token})
        assert (status, answer["code"]) == (409, "DUPLICATE_ORDER")
    finally:
        redis.delete(keys.order_status(int(order_id)))


def test_http_public_route_needs_no_token(api_url: str, make_voucher: Callable[..., int]) -> None:
    shop_id = random.randint(10**12, 10**15)
    voucher_id = make_voucher(shop_id=shop_id)
    status, _, answer = http(f"{api_url}/voucher/list/{shop_id}")
    assert status == 200, answer
    assert [v["id"] for v in answer["data"]] == [voucher_id]
    status, _, answer = http(f"{api_url}/voucher/list/abc")
    assert (status, answer["code"]) == (400, "BAD_REQUEST")


def test_http_admin_route_needs_a_valid_sigv4_signature(api_url: str, redis: Any) -> None:
    """Signed with the local credentials: 201. Unsigned, a bearer token, another secret,
    another access key, a body changed after signing: API Gateway's 403, nothing created."""
    shop_id = random.randint(10**12, 10**15)
    payload = json.loads(json.loads((EVENTS / "seckill_api_add_seckill_voucher.json").read_text())["body"])
    payload.update(shopId=shop_id, beginTime="2031-01-01T00:00:00Z", endTime="2031-01-02T00:00:00Z")
    data = json.dumps(payload).encode()
    url = f"{api_url}/voucher/seckill"
    json_type = {"content-type": "application/json"}
    tampered = json.dumps(payload | {"stock": payload["stock"] + 1}).encode()

    refused = [
        (json_type, data),
        (json_type | {"authorization": "Bearer whatever-token"}, data),
        (json_type | {"authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/execute-api/"
                                        "aws4_request, SignedHeaders=host, Signature=" + "0" * 64}, data),
        (signed("POST", url, data, json_type, secret="not-the-local-secret"), data),
        (signed("POST", url, data, json_type, key="AKIDSOMEONEELSE"), data),
        (signed("POST", url, data, json_type), tampered),
        (signed("POST", url, data, json_type, service="lambda"), data),
        (signed("POST", url, data, json_type, region="eu-west-1"), data),  # a real region, not the local one
        (signed("POST", url, data, json_type, region="xx-nowhere-9"), data),
    ]  # fmt: skip
    for headers, body in refused:
        status, _, answer = http(url, "POST", headers, body)
        assert (status, answer) == (403, {"message": "Forbidden"}), headers
    status, _, answer = http(f"{api_url}/voucher/list/{shop_id}")
    assert answer["data"] == []

    status, _, answer = http(url, "POST", signed("POST", url, data, json_type), data)
    assert status == 201, answer
    voucher_id = answer["data"]
    try:
        assert type(voucher_id) is int
        assert redis.get(keys.stock(voucher_id)) == str(payload["stock"])
        stop = f"{api_url}/voucher/seckill/{voucher_id}/stop"
        status, _, answer = http(stop, "POST", signed("POST", stop))
        assert (status, answer["data"]) == (200, voucher_id)
    finally:
        redis.delete(*keys.voucher_keys(voucher_id))


def test_http_a_redis_outage_in_the_authorizer_is_a_500_and_no_cached_deny(
    runner: Runner, template: Template, tmp_path: Path
) -> None:
    """API Gateway answers a failed authorizer with 500 and caches nothing: once Redis is
    back, the same token is authorized at once, not denied for ReauthorizeEvery seconds."""
    assert template.authorizer() is not None
    assert template.authorizer()[1] > 0  # answers are cached: a cached deny would outlive the outage
    sessions = PrivateRedis(tmp_path, free_port())
    user_id, token = new_user(), uuid.uuid4().hex
    authorizer = runner.function("AuthorizerFunction")
    pools = {
        "SeckillApiFunction": runner.pool("SeckillApiFunction", 1),
        "AuthorizerFunction": FunctionPool(authorizer, runner.environment(authorizer) | {"REDIS_URL": sessions.url}, 1),
    }
    order_url = f"{{}}/voucher-order/{random.randint(2**60, 2**62)}"
    try:
        with serving(template, pools) as api:
            # Redis is down: the token cannot be looked up.
            status, headers, answer = http(order_url.format(api), headers={"authorization": f"Bearer {token}"})
            assert (status, answer) == (500, {"message": "Internal Server Error"})
            assert headers["content-type"] == "application/json"

            sessions.start()  # back (empty, as after a restart), and the login service writes the session again
            store_tokens(redis_lib.Redis(port=sessions.port), {user_id: token}, 300)

            status, _, answer = http(order_url.format(api), headers={"authorization": f"Bearer {token}"})
            assert status == 404, answer  # the function's own answer: authorized, the order is unknown
            assert answer["code"] == "ORDER_NOT_FOUND"
    finally:
        sessions.kill()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/nope"),
        ("DELETE", "/voucher/list/1"),
        ("GET", "/voucher"),
        # Methods no route has are routed like any other: API Gateway's JSON 404, not a 501 page.
        ("TRACE", "/voucher/list/1"),
        ("OPTIONS", "/voucher-order/seckill/1"),
        # Nor one http.server has no do_<METHOD> for.
        ("QUERY", "/voucher/list/1"),
        ("FOO", "/nope"),
    ],
)
def test_http_unknown_route_is_404(api_url: str, method: str, path: str) -> None:
    status, _, answer = http(f"{api_url}{path}", method)
    assert (status, answer) == (404, {"message": "Not Found"})


def exchange(api_url: str, request: bytes) -> tuple[int, dict[str, str], Any]:
    """One request sent as these bytes, and the answer: a server that waits for more of the
    request, or closes without answering, fails the test (the socket's timeout) instead of hanging it."""
    address = urllib.parse.urlsplit(api_url)
    with socket.create_connection((address.hostname, address.port), timeout=20) as sock:
        sock.sendall(request)
        response = HTTPResponse(sock)
        response.begin()
        raw = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, json.loads(raw) if raw else None


@pytest.mark.parametrize("length", ["abc", "1e3", "-1"])
def test_http_a_malformed_content_length_is_api_gateways_400_at_once(api_url: str, length: str) -> None:
    request = f"POST /voucher-order/seckill/1 HTTP/1.1\r\nHost: local\r\nContent-Length: {length}\r\n\r\n{{}}"
    status, headers, answer = exchange(api_url, request.encode())
    assert (status, answer) == (400, {"message": "Bad Request"})
    assert headers["content-type"] == "application/json"
    assert headers["connection"] == "close"  # what follows on the connection cannot be delimited either


def test_http_a_chunked_body_reaches_the_function_whole(api_url: str, redis: Any) -> None:
    """As the edge forwards it: a signed voucher sent in chunks is created (201), where the body
    was once read as empty, the signature found wrong and the request refused 403."""
    shop_id = random.randint(10**12, 10**15)
    payload = {"shopId": shop_id, "title": "chunked", "payValue": 100, "actualValue": 200}
    data = json.dumps(payload).encode()
    url = f"{api_url}/voucher"
    headers = signed("POST", url, data, {"content-type": "application/json"})
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (data[:10], data[10:])) + b"0\r\n\r\n"
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = f"POST /voucher HTTP/1.1\r\n{head}Transfer-Encoding: chunked\r\n\r\n"  # the Host is signed

    status, _, answer = exchange(api_url, request.encode() + chunks)

    assert status == 201, answer
    listed = http(f"{api_url}/voucher/list/{shop_id}")[2]["data"]
    assert [voucher["title"] for voucher in listed] == ["chunked"]


@pytest.mark.parametrize(
    "framing",
    [
        "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",  # both: ambiguous
        "Transfer-Encoding: gzip\r\n\r\n{}",
        "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",  # no chunk size
    ],
)
def test_http_a_body_that_cannot_be_delimited_is_api_gateways_400(api_url: str, framing: str) -> None:
    request = f"POST /voucher-order/seckill/1 HTTP/1.1\r\nHost: local\r\n{framing}"
    status, headers, answer = exchange(api_url, request.encode())
    assert (status, answer) == (400, {"message": "Bad Request"})
    assert headers["connection"] == "close"


def test_http_a_repeated_or_empty_query_parameter_reaches_the_function_as_api_gateway_sends_it(
    api_url: str, make_voucher: Callable[..., int]
) -> None:
    """API Gateway joins a repeated parameter's values with commas and keeps an empty value:
    the function refuses both, where keeping the last value or dropping the empty one let them in."""
    shop_id = random.randint(10**12, 10**15)
    voucher_id = make_voucher(shop_id=shop_id)
    status, _, answer = http(f"{api_url}/voucher/list/{shop_id}?limit=5")
    assert (status, [v["id"] for v in answer["data"]]) == (200, [voucher_id])
    for query, name in (("limit=5&limit=6", "limit"), ("limit=", "limit"), (f"after=0&after={voucher_id}", "after")):
        status, _, answer = http(f"{api_url}/voucher/list/{shop_id}?{query}")
        assert (status, answer["code"]) == (400, "BAD_REQUEST"), query
        assert name in answer["errorMsg"], query


def test_http_a_repeated_authorization_header_is_joined_and_refused(api_url: str, mint: Callable[[int], str]) -> None:
    """Two authorization headers reach the authorizer as one value, joined by a comma, which is no token."""
    token = mint(new_user())
    path = f"/voucher-order/{random.randint(2**60, 2**62)}"
    status, _, answer = http(f"{api_url}{path}", headers={"authorization": f"Bearer {token}"})
    assert (status, answer["code"]) == (404, "ORDER_NOT_FOUND")  # one header: authorized

    address = urllib.parse.urlsplit(api_url)
    connection = HTTPConnection(address.hostname or "", address.port, timeout=20)
    try:
        connection.putrequest("GET", path)
        for value in (f"Bearer {token}", f"Bearer {token}"):
            connection.putheader("Authorization", value)
        connection.endheaders()
        response = connection.getresponse()
        assert (response.status, json.loads(response.read())) == (403, {"message": "Forbidden"})
    finally:
        connection.close()


def test_a_pool_reports_each_invocation_as_lambda_does_with_its_route(runner: Runner) -> None:
    """The REPORT line the main job reads the function's own time from: one per invocation, its
    duration measured in the container, the API's route key when the event has one."""
    fn = runner.function("AuthorizerFunction")
    reports = io.StringIO()
    event = json.loads((EVENTS / "authorizer.json").read_text())
    pool = FunctionPool(fn, runner.environment(fn), 1, reports=reports)
    try:
        pool.invoke(event)
        pool.invoke({"type": "REQUEST"})
    finally:
        pool.close()

    lines = reports.getvalue().splitlines()
    pattern = r"REPORT RequestId: \S+ Function: AuthorizerFunction{} Duration: \d+\.\d\d ms"
    assert re.fullmatch(pattern.format(re.escape(f" Route: {event['routeKey']}")), lines[0]), lines
    assert re.fullmatch(pattern.format(""), lines[1]), lines
    assert len(lines) == 2


# --- the worker-start hook ---------------------------------------------------------------------

HOOK_LOG = "SECKILL_TEST_HOOK_LOG"


def record_container_start(function: str, container: int) -> None:
    """A worker hook (named by SECKILL_LOCAL_WORKER_HOOK): one line per container that starts."""
    handler_imported = any(name.startswith(f"_local_{function}_") for name in sys.modules)
    with open(os.environ[HOOK_LOG], "a", encoding="utf-8") as log:
        log.write(f"{function} {container} {os.getpid()} {handler_imported}\n")


@contextlib.contextmanager
def hooked_authorizer(runner: Runner, hook: str, log: Path, containers: int) -> Iterator[FunctionPool]:
    """AuthorizerFunction's pool, warm, each container calling ``hook`` (of this module) as it starts."""
    fn = runner.function("AuthorizerFunction")
    env = runner.environment(fn) | {WORKER_HOOK: f"tests.e2e.test_local_runner:{hook}", HOOK_LOG: str(log)}
    pool = FunctionPool(fn, env, containers)
    try:
        pool.warm()
        yield pool
    finally:
        pool.close()


def test_the_worker_hook_runs_in_each_container_before_the_handler(runner: Runner, tmp_path: Path) -> None:
    log = tmp_path / "starts.log"
    with hooked_authorizer(runner, "record_container_start", log, 2) as pool:
        assert pool.invoke(json.loads((EVENTS / "authorizer.json").read_text())) == {"isAuthorized": False}
    starts = sorted(line.split() for line in log.read_text().splitlines())
    assert [(name, number, imported) for name, number, _, imported in starts] == [
        ("AuthorizerFunction", "0", "False"),
        ("AuthorizerFunction", "1", "False"),
    ]
    assert len({pid for _, _, pid, _ in starts}) == 2
    assert str(os.getpid()) not in {pid for _, _, pid, _ in starts}


LATE = "SECKILL_TEST_SET_LATE"


def record_container_environment(function: str, container: int) -> None:
    """A worker hook: what the container's environment says of the runner's and the function's."""
    with open(os.environ[HOOK_LOG], "a", encoding="utf-8") as log:
        log.write(json.dumps({name: os.environ.get(name) for name in (LATE, "AWS_LAMBDA_FUNCTION_NAME")}) + "\n")


def test_a_container_starts_with_the_runners_environment_of_its_pools_start(
    runner: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Containers fork from a server that started with the first pool; a pool started
    later still gives its containers the runner's environment as it is then."""
    fn = runner.function("AuthorizerFunction")
    first = FunctionPool(fn, runner.environment(fn), 1)
    first.warm()  # the fork server runs from here on, without LATE
    first.close()
    monkeypatch.setenv(LATE, "set after the server started")
    log = tmp_path / "environment.log"
    with hooked_authorizer(runner, "record_container_environment", log, 1):
        pass  # warm: its container has started and written what it saw
    assert json.loads(log.read_text()) == {
        LATE: "set after the server started",
        "AWS_LAMBDA_FUNCTION_NAME": fn.logical_id,
    }


@pytest.mark.parametrize("spec", ["tests.e2e.test_local_runner:no_such_function", "no_such_module:hook", "no colon"])
def test_a_worker_hook_that_names_nothing_is_refused_before_any_container_starts(runner: Runner, spec: str) -> None:
    fn = runner.function("AuthorizerFunction")
    with pytest.raises(ValueError, match="SECKILL_LOCAL_WORKER_HOOK"):
        FunctionPool(fn, runner.environment(fn) | {WORKER_HOOK: spec}, 1)


# --- the SQS feeder with the real persister ---------------------------------------------------


@pytest.fixture(scope="module")
def persister_pool(runner: Runner) -> Iterator[FunctionPool]:
    """The persister as the runner wires it: its poison queue is the runner's OrderPoisonQueue."""
    pool = runner.pool("OrderPersisterFunction", 1)
    pool.warm()
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def persister_pool_without_poison_queue(runner: Runner) -> Iterator[FunctionPool]:
    """The persister with ORDER_POISON_QUEUE_URL empty: a record it can never store fails."""
    fn = runner.function("OrderPersisterFunction")
    pool = FunctionPool(fn, {**runner.environment(fn), "ORDER_POISON_QUEUE_URL": ""}, 1)
    pool.warm()
    yield pool
    pool.close()


def test_feeder_deletes_the_good_records_and_leaves_the_bad_one(
    persister_pool_without_poison_queue: FunctionPool,
    queues: dict[str, str],
    sqs: Any,
    gate: Gate,
    redis: Any,
    db: Database,
    make_voucher: Callable[..., int],
) -> None:
    url = queues["OrderQueue"]
    voucher_id = make_voucher(stock=5)
    good = [accept(gate, voucher_id, new_user(), promise=False) for _ in range(3)]
    for message in good[:2]:
        sqs.send_message(QueueUrl=url, MessageBody=message.to_json())
    bad_id = sqs.send_message(QueueUrl=url, MessageBody='{"orderId": "not a number"}')["MessageId"]
    sqs.send_message(QueueUrl=url, MessageBody=good[2].to_json())
    feeder = QueueFeeder(sqs, url, persister_pool_without_poison_queue, batch_size=10, concurrency=1)

    received = 0
    for _ in range(10):
        received += feeder.poll_once()
        if received >= 4:
            break

    assert received == 4
    assert (feeder.stats.records, feeder.stats.deleted, feeder.stats.failed, feeder.stats.errors) == (4, 3, 1, 0)
    stored = db_rows(db, "SELECT id FROM tb_voucher_order WHERE voucher_id = %s", voucher_id)
    assert sorted(int(r["id"]) for r in stored) == sorted(m.order_id for m in good)
    assert db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id) == [{"stock": 2}]
    assert redis.hlen(keys.pending(voucher_id)) == 0
    attributes = queue_attributes(sqs, url)
    assert (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]) == (
        "0",
        "1",
    )

    # After the visibility timeout (1 s here) the failed record is back, and only it.
    back = wait_for(
        lambda: sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1, AttributeNames=["All"]).get("Messages", []),
        "the failed record back",
        timeout=5,
        interval=0,
    )
    assert [m["MessageId"] for m in back] == [bad_id]
    assert back[0]["Attributes"]["ApproximateReceiveCount"] == "2"


def test_feeder_failing_record_reaches_the_dlq_through_the_queues_redrive(
    persister_pool_without_poison_queue: FunctionPool, queues: dict[str, str], sqs: Any
) -> None:
    url, dlq = queues["OrderQueue"], queues["OrderDeadLetterQueue"]
    # Retry at once instead of after the visibility timeout, to keep the test fast.
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "0"})
    sent = sqs.send_message(QueueUrl=url, MessageBody="not an order")["MessageId"]
    feeder = QueueFeeder(sqs, url, persister_pool_without_poison_queue, batch_size=10, concurrency=1)

    attempts = 0
    while feeder.poll_once() and attempts < 10:
        attempts += 1

    assert attempts == 5  # maxReceiveCount
    assert feeder.stats.failed == 5
    assert feeder.stats.deleted == 0
    moved = drain(sqs, dlq)
    assert [(m["MessageId"], m["Body"]) for m in moved] == [(sent, "not an order")]
    assert drain(sqs, url) == []


def test_feeder_with_the_runners_poison_queue_moves_the_bad_record_there_and_deletes_it(
    persister_pool: FunctionPool, runner: Runner, queues: dict[str, str], sqs: Any
) -> None:
    url, poison = queues["OrderQueue"], runner.queues()["OrderPoisonQueue"]
    sent = sqs.send_message(
        QueueUrl=url,
        MessageBody="not an order",
        MessageAttributes={"blob": {"DataType": "Binary", "BinaryValue": b"\x01\x02"}},
    )["MessageId"]
    feeder = QueueFeeder(sqs, url, persister_pool, batch_size=10, concurrency=1)

    assert feeder.poll_once() == 1

    assert (feeder.stats.records, feeder.stats.deleted, feeder.stats.failed, feeder.stats.errors) == (1, 1, 0, 0)
    assert queue_depth(sqs, url) == 0
    moved = drain(sqs, poison)
    assert [m["Body"] for m in moved] == ["not an order"]
    assert moved[0]["MessageId"] != sent
    assert queue_depth(sqs, queues["OrderDeadLetterQueue"]) == 0


def test_feeders_take_an_order_to_its_expiry_through_the_runners_two_queues(
    runner: Runner, sqs: Any, db: Database, redis: Any, gate: Gate
) -> None:
    """As ``seckill-local feed`` wires them from the template's event source mappings: the
    persister stores the order and sends its expiry, delayed until its deadline (the contract's
    shortest hold, 10 s); the expiry function receives it then, expires the order and puts
    its unit back on sale."""
    feeds = {fn.logical_id: source["Queue"]["Fn::GetAtt"][0] for fn in runner.template.functions.values()
             for source in fn.sqs_events}  # fmt: skip
    assert feeds == {
        "OrderPersisterFunction": "OrderQueue",
        "OrderExpiryFunction": "OrderExpiryQueue",
        "EdgePublisherFunction": "EdgeStateQueue",
        "DrawClockFunction": "DrawClockQueue",
    }
    queues = runner.queues()

    def delayed() -> int:
        # The runner's queue is the module's: earlier tests' expiries wait there for 15 minutes.
        return int(queue_attributes(sqs, queues["OrderExpiryQueue"])["ApproximateNumberOfMessagesDelayed"])

    waiting = delayed()
    voucher = on_sale(3).model_copy(update={"hold_seconds": MIN_HOLD_SECONDS})
    voucher_id = vouchers.create_seckill_voucher(db, redis, voucher)
    message = accept(gate, voucher_id, new_user(), promise=False)
    sqs.send_message(QueueUrl=queues["OrderQueue"], MessageBody=message.to_json())
    pools = {logical_id: runner.pool(logical_id, 1) for logical_id in feeds}
    feeders = {
        logical_id: QueueFeeder(sqs, queues[feeds[logical_id]], pool, batch_size=10, concurrency=1)
        for logical_id, pool in pools.items()
    }
    try:
        assert feeders["OrderPersisterFunction"].poll_once(wait_seconds=1) == 1
        assert feeders["OrderPersisterFunction"].stats.deleted == 1
        assert delayed() == waiting + 1
        assert feeders["OrderExpiryFunction"].poll_once() == 0  # delayed: not there yet
        wait_for(lambda: feeders["OrderExpiryFunction"].poll_once(wait_seconds=1), "the expiry, once due", timeout=60)
        assert feeders["OrderExpiryFunction"].stats.deleted == 1
        rows = db_rows(db, "SELECT status, close_reason FROM tb_voucher_order WHERE id = %s", message.order_id)
        assert rows == [{"status": 4, "close_reason": "EXPIRED"}]
        assert db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id) == [{"stock": 3}]
        assert redis.get(keys.stock(voucher_id)) == "3"
    finally:
        for pool in pools.values():
            pool.close()
        redis.delete(*keys.voucher_keys(voucher_id), keys.returned(voucher_id))


def test_seckill_local_feed_feeds_only_the_functions_it_is_told(
    env_vars_file: Path, sqs_endpoint: str, sqs: Any
) -> None:
    """``--only`` and ``--skip`` choose whose queues the command feeds (the main job runs
    EdgePublisherFunction's feeder apart, so that pausing the others leaves it running)."""
    prefix = f"f{uuid.uuid4().hex[:10]}-"
    command = [str(SECKILL_LOCAL), "feed", "--env-vars", str(env_vars_file), "--sqs-endpoint", sqs_endpoint]
    command += ["--queue-prefix", prefix]

    def fed(*options: str) -> list[str]:
        """The queues it says it feeds ("feeding <queue> -> <function> ..."), once it is feeding."""
        process = subprocess.Popen(  # noqa: S603 (our own command)
            [*command, *options], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT
        )
        queues = []
        try:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith("feeding ("):
                    return queues
                if line.startswith("feeding "):
                    queues.append(line.split()[1])
            raise AssertionError(f"seckill-local feed {' '.join(options)} exited before feeding: {queues}")
        finally:
            process.terminate()
            process.wait(timeout=30)

    try:
        assert fed("--only", "OrderPersisterFunction") == ["OrderQueue"]
        assert fed("--skip", "OrderPersisterFunction", "--skip", "OrderExpiryFunction") == ["DrawClockQueue"]
    finally:
        delete_queues_with_prefix(sqs, prefix)


# --- seckill-local invoke as a command ---------------------------------------------------------


def seckill_local_invoke(
    logical_id: str, event: dict[str, Any], env_vars: Path, tmp_path: Path, sqs_endpoint: str, sqs: Any
) -> subprocess.CompletedProcess[str]:
    event_file = tmp_path / f"{logical_id}-event.json"
    event_file.write_text(json.dumps(event), encoding="utf-8")
    prefix = f"i{uuid.uuid4().hex[:10]}-"
    # Only the env-vars file can point the function at the suite's services.
    env = dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{closed_port()}/0", DB_NAME="no_such_db")
    command = [str(SECKILL_LOCAL), "invoke", logical_id, "-e", str(event_file), "--env-vars", str(env_vars)]
    command += ["--sqs-endpoint", sqs_endpoint, "--queue-prefix", prefix]
    try:
        return subprocess.run(  # noqa: S603 (our own command)
            command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=False
        )
    finally:
        delete_queues_with_prefix(sqs, prefix)


def test_seckill_local_invoke_prints_the_json_result(
    tmp_path: Path, env_vars_file: Path, sqs_endpoint: str, sqs: Any, mint: Callable[[int], str]
) -> None:
    user_id = new_user()
    token = mint(user_id)
    event = json.loads((EVENTS / "authorizer.json").read_text(encoding="utf-8"))
    event["headers"]["authorization"] = f"Bearer {token}"
    event["identitySource"] = [f"Bearer {token}"]

    done = seckill_local_invoke("AuthorizerFunction", event, env_vars_file, tmp_path, sqs_endpoint, sqs)

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"isAuthorized": True, "context": {"userId": str(user_id)}}


def test_seckill_local_invoke_keeps_function_logs_off_stdout(
    tmp_path: Path, env_vars_file: Path, sqs_endpoint: str, sqs: Any
) -> None:
    """As ``sam local invoke``: stdout is the result alone, the function's logs go to stderr.
    The function's own section of the env-vars file points it at a closed database port."""
    env_vars = json.loads(env_vars_file.read_text(encoding="utf-8"))
    env_vars["SeckillApiFunction"] = {"DB_PORT": str(closed_port()), "POWERTOOLS_LOG_LEVEL": "INFO"}
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps(env_vars), encoding="utf-8")
    event = json.loads((EVENTS / "seckill_api_order_status.json").read_text(encoding="utf-8"))

    done = seckill_local_invoke("SeckillApiFunction", event, env_file, tmp_path, sqs_endpoint, sqs)

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["statusCode"] == 503
    assert json.loads(result["body"])["code"] == "TRY_AGAIN"
    assert "Traceback" not in result["body"]
    assert "dependency unavailable" in done.stderr


# --- seckill-local start-lambda: Lambda's Invoke API ------------------------------------------


def wait_until(ready: Callable[[], bool], what: str, process: subprocess.Popen[Any], timeout: float = 60) -> None:
    def up() -> bool:
        assert process.poll() is None, f"{what} exited early"
        return ready()

    wait_for(up, f"{what} to come up", timeout=timeout, interval=0.2, ignoring=(OSError,))


@pytest.fixture(scope="module")
def lambda_endpoint(env_vars_file: Path, sqs_endpoint: str, sqs: Any) -> Iterator[str]:
    """``seckill-local start-lambda`` as a user starts it, on a free port."""
    port, prefix = free_port(), f"l{uuid.uuid4().hex[:10]}-"
    command = [str(SECKILL_LOCAL), "start-lambda", "--env-vars", str(env_vars_file), "--port", str(port)]
    command += ["--sqs-endpoint", sqs_endpoint, "--queue-prefix", prefix]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    try:
        wait_until(lambda: bool(socket.create_connection(("127.0.0.1", port), timeout=1)), "start-lambda", process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        delete_queues_with_prefix(sqs, prefix)


def lambda_client(endpoint: str, secret: str = LOCAL_AWS["AWS_SECRET_ACCESS_KEY"]) -> Any:
    return boto3.client(
        "lambda",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=secret,
    )


def test_start_lambda_invokes_a_function_as_boto3_calls_it(lambda_endpoint: str, redis: Any) -> None:
    client = lambda_client(lambda_endpoint)
    user_id = new_user()
    answer = client.invoke(
        FunctionName="TokenMinterFunction", Payload=json.dumps({"userIds": [user_id], "ttlSeconds": 60})
    )
    assert answer["StatusCode"] == 200
    assert "FunctionError" not in answer
    minted = json.loads(answer["Payload"].read())
    token = minted["tokens"][str(user_id)]
    try:
        assert user_for_token(redis, token) == user_id
        assert 0 < redis.ttl(keys.login_token(token)) <= 60
    finally:
        redis.delete(keys.login_token(token))
    # An ARN ending in the name is the same function; the function's own refusal comes back as its result.
    arn = "arn:aws:lambda:us-east-1:123456789012:function:TokenMinterFunction"
    refused = json.loads(client.invoke(FunctionName=arn, Payload=b'{"userIds": []}')["Payload"].read())
    assert refused == {"error": "userIds: a list of 1 to 10000 user ids"}


def test_start_lambda_reports_what_lambda_reports(lambda_endpoint: str) -> None:
    client = lambda_client(lambda_endpoint)
    with pytest.raises(client.exceptions.ResourceNotFoundException):
        client.invoke(FunctionName="NoSuchFunction", Payload=b"{}")
    crashed = client.invoke(FunctionName="SeckillApiFunction", Payload=b'{"not": "an http event"}')
    assert crashed["FunctionError"] == "Unhandled"
    assert set(json.loads(crashed["Payload"].read())) == {"errorMessage", "errorType"}
    with pytest.raises(ClientError) as refused:
        lambda_client(lambda_endpoint, secret="not-the-local-secret").invoke(
            FunctionName="TokenMinterFunction", Payload=b'{"userIds": [1]}'
        )
    assert refused.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


# --- scheduled functions -----------------------------------------------------------------------


def test_seckill_local_schedule_once_runs_the_reconciler(
    tmp_path: Path, env_vars_file: Path, sqs_endpoint: str, sqs: Any
) -> None:
    prefix = f"sched{uuid.uuid4().hex[:8]}-"
    command = [str(SECKILL_LOCAL), "schedule", "--once", "--env-vars", str(env_vars_file)]
    command += ["--sqs-endpoint", sqs_endpoint, "--queue-prefix", prefix]
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)  # noqa: S603
    finally:
        delete_queues_with_prefix(sqs, prefix)
    assert done.returncode == 0, done.stderr
    reconciled, edge_noticed = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert reconciled["function"] == edge_noticed["function"] == "ReconcilerFunction"
    assert reconciled["result"]["queueDrained"] is True
    assert set(reconciled["result"]["totals"]) >= {"vouchers", "requeued", "failed", "repaired"}
    assert edge_noticed["result"] == {"edgeStatesSent": 0}  # its second schedule: the edge's notice


def test_seckill_local_says_when_sqs_is_unreachable(env_vars_file: Path) -> None:
    command = [str(SECKILL_LOCAL), "schedule", "--once", "--env-vars", str(env_vars_file)]
    command += ["--sqs-endpoint", f"http://127.0.0.1:{closed_port()}"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)  # noqa: S603
    assert done.returncode == 2
    assert "cannot reach SQS" in done.stderr
    assert "Traceback" not in done.stderr
