"""The local edge (``seckill_local.edge``): edge/press.js on Node.js in front of an
upstream that records what reaches it, and the KeyValueStore stand-in written with
boto3's own ``cloudfront-keyvaluestore`` client (SigV4A, botocore's REST calls); and
the environment the runner gives the edge's functions. Without Node.js the edge's
tests fail, naming ``make bench-setup``, which installs it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
import urllib3

from seckill import passes
from seckill.edge import passkeys
from seckill.edge.state import EdgeState
from seckill.infra import results
from seckill.press.gate import NO_PASS, NOT_ADMITTED, REFUSALS, SOLD_OUT
from seckill_demo.forged import forged_passes
from seckill_local.edge import BUCKET, KVS_ARN, EdgeServer, distribution, kvs_environment, local_kvs_client
from seckill_local.runner import Runner
from seckill_local.template import Template
from tests.helpers import Upstream

TOKEN = "Bearer local-edge-test"  # the edge reads only that there is one; the upstream checks nothing


@pytest.fixture
def kvs(edge: EdgeServer) -> Any:
    """boto3's client as the publisher makes it, its calls routed to the stand-in."""
    return local_kvs_client(edge.kvs_endpoint)


@pytest.fixture
def http() -> urllib3.PoolManager:
    return urllib3.PoolManager(retries=False, timeout=10)


def state(*, sold_out: bool, v: int = 1) -> str:
    """A voucher on sale since a minute ago, for an hour more (the KVS value's shape)."""
    now = int(time.time() * 1000)
    value = {"v": v, "begin": now - 60_000, "end": now + 3_600_000, "soldOut": sold_out, "stopped": False}
    return json.dumps(value, separators=(",", ":"))


def put(kvs: Any, key: str, value: str) -> str:
    etag = kvs.describe_key_value_store(KvsARN=KVS_ARN)["ETag"]
    return str(kvs.put_key(KvsARN=KVS_ARN, Key=key, Value=value, IfMatch=etag)["ETag"])


def press(http: urllib3.PoolManager, edge: EdgeServer, voucher_id: int) -> urllib3.BaseHTTPResponse:
    return http.request(
        "POST", f"{edge.url}/voucher-order/seckill/{voucher_id}", headers={"authorization": TOKEN}, body=b""
    )


def test_a_sold_out_voucher_is_refused_at_the_edge_as_the_function_would(
    edge: EdgeServer, kvs: Any, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    refusal = REFUSALS[SOLD_OUT]
    put(kvs, "42", state(sold_out=True))

    answer = press(http, edge, 42)

    assert answer.status == 409
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["x-seckill-edge"] == "1"
    assert answer.data == results.fail(refusal.status, refusal.code, refusal.message).body.encode()
    assert upstream.seen == []
    assert edge.stats().answered == 1
    assert edge.stats().forwarded == 0


# A draw: voucher 42, user 7's pass for the ticket TICKET, the ring's keys in the store.
RING = passes.new_ring("k1")
TICKET = "0" + "c" * 16


def draw_state(*, cursor: str, decided_in: int, sold_out: bool = True) -> str:
    """Draw voucher 42 on sale since a minute ago, closed two minutes ago with the move to
    ``cursor``, its moves decided until ``decided_in`` ms from now."""
    now = int(time.time() * 1000)
    close = now - 120_000
    state = EdgeState(
        42, 1, now - 60_000, now + 3_600_000, sold_out, False, True, close, now + decided_in, ((close, cursor),)
    )
    return state.value()


def press_draw(http: urllib3.PoolManager, edge: EdgeServer, shown: str) -> urllib3.BaseHTTPResponse:
    return http.request(
        "POST", f"{edge.url}/voucher-order/seckill/42", headers={"authorization": TOKEN, "x-seckill-pass": shown}
    )


def refused_at_the_edge(answer: urllib3.BaseHTTPResponse, code: int) -> bool:
    refusal = REFUSALS[code]
    expected = results.fail(refusal.status, refusal.code, refusal.message).body.encode()
    return (answer.status, answer.headers.get("x-seckill-edge"), answer.data) == (refusal.status, "1", expected)


def test_a_forged_signature_is_refused_no_pass_at_the_edge_whatever_its_expiry(
    edge: EdgeServer, kvs: Any, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    """Before: a pass expiring within the skew was forwarded before its signature was checked."""
    put(kvs, passkeys.KEY, passkeys.value(RING))
    put(kvs, "42", draw_state(cursor="f" * 17, decided_in=60_000))
    token = TOKEN.removeprefix("Bearer ")
    forged = forged_passes(42, 7, token, "0" * 17, RING.active, time.time())

    answers = {name: press_draw(http, edge, shown) for name, shown in forged.items()}

    assert {name: refused_at_the_edge(a, NO_PASS) for name, a in answers.items()} == dict.fromkeys(forged, True)
    assert upstream.seen == []
    # The same pass signed with the ring's key is the buyer's: admitted, on to the sale (sold out).
    genuine = passes.sign(RING, 42, 7, token, "0" * 17, int(time.time()) + 3600)
    assert refused_at_the_edge(press_draw(http, edge, genuine), SOLD_OUT)


def test_a_pass_with_whitespace_around_it_is_read_without(
    edge: EdgeServer, kvs: Any, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    put(kvs, passkeys.KEY, passkeys.value(RING))
    put(kvs, "42", draw_state(cursor="f" * 17, decided_in=60_000))
    shown = passes.sign(RING, 42, 7, TOKEN.removeprefix("Bearer "), TICKET, int(time.time()) + 3600)

    for spaced in (f"{shown} ", f" {shown}", f"{shown}\t"):
        assert refused_at_the_edge(press_draw(http, edge, spaced), SOLD_OUT)
    assert upstream.seen == []


def test_the_edge_refuses_by_the_moves_only_while_its_store_holds_every_move_decided_up_to_now(
    edge: EdgeServer, kvs: Any, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    """A wave decided as no move moves decided on: the edge refuses the waiting ticket. A
    store that has not heard of the next move (decided now, 5 s after it was decided at
    the origin) forwards the press, which the move may admit: before, the edge refused it."""
    put(kvs, passkeys.KEY, passkeys.value(RING))
    shown = passes.sign(RING, 42, 7, TOKEN.removeprefix("Bearer "), TICKET, int(time.time()) + 3600)
    put(kvs, "42", draw_state(cursor=TICKET, decided_in=10_000))

    assert refused_at_the_edge(press_draw(http, edge, shown), NOT_ADMITTED)
    assert upstream.seen == []

    put(kvs, "42", draw_state(cursor=TICKET, decided_in=0, sold_out=False))
    forwarded = press_draw(http, edge, shown)

    assert forwarded.status == Upstream.STATUS
    assert [(s.method, s.target, s.headers["x-seckill-pass"]) for s in upstream.seen] == [
        ("POST", "/voucher-order/seckill/42", shown)
    ]


def test_a_voucher_still_on_sale_or_unknown_is_forwarded_and_answered_by_the_upstream_unchanged(
    edge: EdgeServer, kvs: Any, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    put(kvs, "7", state(sold_out=False))
    body = b'{"any": "body"}'

    for voucher_id in (7, 8):  # on sale; no key at all
        answer = http.request(
            "POST",
            f"{edge.url}/voucher-order/seckill/{voucher_id}",
            headers={"authorization": TOKEN, "content-type": "application/json", "x-trace": "t1"},
            body=body,
        )
        assert (answer.status, answer.data) == (Upstream.STATUS, Upstream.BODY)
        assert {name: answer.headers[name] for name in Upstream.HEADERS} == Upstream.HEADERS

    assert [(s.method, s.target, s.body) for s in upstream.seen] == [
        ("POST", "/voucher-order/seckill/7", body),
        ("POST", "/voucher-order/seckill/8", body),
    ]
    assert all(s.headers["authorization"] == TOKEN and s.headers["x-trace"] == "t1" for s in upstream.seen)
    assert all(s.headers["x-forwarded-for"] == "127.0.0.1" for s in upstream.seen)  # the viewer, as CloudFront adds it
    assert edge.stats().forwarded == 2


def test_a_sold_out_press_without_a_token_is_left_to_the_api(
    edge: EdgeServer, kvs: Any, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    """The API answers it 401 (its authorizer); the edge decides nothing for a caller it cannot tell apart."""
    put(kvs, "42", state(sold_out=True))

    answer = http.request("POST", f"{edge.url}/voucher-order/seckill/42", body=b"")

    assert answer.status == Upstream.STATUS
    assert [s.target for s in upstream.seen] == ["/voucher-order/seckill/42"]


def test_other_routes_are_forwarded_with_their_query_strings_as_sent(
    edge: EdgeServer, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    targets = ["/voucher/list/1?current=2&name=a%20b&flag&flag=x", "/voucher-order/9?x=%2F"]
    for target in targets:
        answer = http.request("GET", f"{edge.url}{target}", headers={"cookie": "session=s1; theme=dark"})
        assert answer.status == Upstream.STATUS

    assert [(s.method, s.target) for s in upstream.seen] == [("GET", target) for target in targets]
    assert upstream.seen[0].headers["cookie"] == "session=s1; theme=dark"


def test_a_request_on_a_kept_alive_connection_the_upstream_dropped_is_sent_again(
    edge: EdgeServer, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    upstream.one_per_connection = True

    answers = [press(http, edge, voucher_id).status for voucher_id in (1, 2, 3)]

    assert answers == [Upstream.STATUS] * 3
    assert [s.target for s in upstream.seen] == [f"/voucher-order/seckill/{n}" for n in (1, 2, 3)]


def test_a_name_called_proto_is_one_more_entry_and_pollutes_nothing(
    edge: EdgeServer, kvs: Any, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    """A header, query parameter or cookie named __proto__ once wrote Object.prototype: the next
    forwarded request lost its authorization and the next answered press crashed the server."""
    put(kvs, "42", state(sold_out=True))
    polluting = {"authorization": TOKEN, "__proto__": "x", "cookie": "__proto__=1; a=2"}
    answer = http.request("GET", f"{edge.url}/voucher-order/9?__proto__=1&__proto__=2", headers=polluting)
    assert answer.status == Upstream.STATUS

    forwarded = http.request("GET", f"{edge.url}/voucher-order/9", headers={"authorization": "Bearer owner"})
    refused = press(http, edge, 42)

    assert forwarded.status == Upstream.STATUS
    assert upstream.seen[0].target == "/voucher-order/9?__proto__=1&__proto__=2"
    assert (upstream.seen[0].headers["__proto__"], upstream.seen[0].headers["cookie"]) == ("x", "__proto__=1; a=2")
    assert upstream.seen[1].headers["authorization"] == "Bearer owner"
    assert (refused.status, json.loads(refused.data)["code"]) == (409, "SOLD_OUT")
    assert refused.headers["x-seckill-edge"] == "1"


def sent_as_is(edge: EdgeServer, method: str, target: str, headers: dict[str, str]) -> int:
    """The status answered to ``target`` sent byte for byte (urllib3 resolves dot segments itself)."""
    connection = HTTPConnection(urllib3.util.parse_url(edge.url).netloc, timeout=10)
    try:
        connection.request(method, target, body=b"", headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.mark.parametrize(
    "target",
    ["/voucher-order/seckill/999999/../42", "/voucher-order/seckill/999999/%2e%2e/42", "/voucher-order/./seckill/42"],
)
def test_a_path_with_dot_segments_goes_to_the_api_as_sent(
    edge: EdgeServer, kvs: Any, upstream: Upstream, http: urllib3.PoolManager, target: str
) -> None:
    """CloudFront matches the behavior on the normalized path but sends the raw one on: the
    press function, whose pattern the raw path does not fit, forwards it, and the API answers."""
    put(kvs, "42", state(sold_out=True))

    status = sent_as_is(edge, "POST", target, {"authorization": TOKEN})

    assert status == Upstream.STATUS
    assert [s.target for s in upstream.seen] == [target]


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("POST", "/voucher/seckill"),
        ("POST", "/voucher"),
        ("POST", "/voucher/seckill/7/stop"),
        ("POST", "/voucher-order/1/payment"),
        ("POST", "/voucher-order/seckill/../1/payment"),  # the payment route, once normalized
        ("GET", "/voucher/list/../seckill"),
    ],
)
def test_the_routes_the_distribution_denies_are_denied_at_the_edge(
    edge: EdgeServer, upstream: Upstream, http: urllib3.PoolManager, method: str, target: str
) -> None:
    """EdgeDenyFunction's 403 on the admin routes and the payment service's, as in the stack:
    a FORBIDDEN Result, as the API's document gives those routes' 403 (before: no body)."""
    answer = http.request(method, f"{edge.url}{target}", body=b"{}", headers={"authorization": TOKEN})
    status = sent_as_is(edge, method, target, {"authorization": TOKEN})

    assert (answer.status, answer.headers["x-seckill-edge"], status) == (403, "1", 403)
    assert answer.headers["content-type"] == "application/json"
    assert answer.data == results.fail(403, "FORBIDDEN", "not served through the edge").body.encode()
    assert upstream.seen == []


def test_the_list_takes_get_and_head_only_as_its_behavior_allows(
    edge: EdgeServer, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    for method in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH"):
        answer = http.request(method, f"{edge.url}/voucher/list/1", body=b"")
        assert answer.status == 403, method  # CloudFront's "Invalid method"
    assert upstream.seen == []

    for method in ("GET", "HEAD"):
        assert http.request(method, f"{edge.url}/voucher/list/1").status == Upstream.STATUS
    assert [s.method for s in upstream.seen] == ["GET", "HEAD"]


def test_the_page_is_served_from_its_bucket_with_the_policy_s_headers(
    edge: EdgeServer, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    """The page's behavior stands for its S3 origin: edge/page/ under the key prefix page/,
    with PageHeadersPolicy's headers; nothing of it reaches the API."""
    behaviors = distribution(Template.load())["behaviors"]
    page = next(b for b in behaviors if b["pathPattern"] == "/page/*")
    assert page["headers"]["content-security-policy"].startswith("default-src 'none'; script-src 'self'")
    files = [("index.html", "text/html"), ("style.css", "text/css"), ("favicon.svg", "image/svg+xml")]
    for name, kind in files + [(f"{module}.js", "text/javascript") for module in ("app", "audit", "clock")]:
        answer = http.request("GET", f"{edge.url}/page/{name}")
        assert answer.status == 200, name
        assert answer.data == (BUCKET / "page" / name).read_bytes()
        assert answer.headers["content-type"].startswith(kind)
        assert {k: answer.headers[k] for k in page["headers"]} == page["headers"]
    assert all(b["headers"] == {} for b in behaviors if b is not page)  # the API's answers get none
    assert http.request("HEAD", f"{edge.url}/page/index.html").status == 200
    assert upstream.seen == []


@pytest.mark.parametrize(
    "target",
    ["/page/missing.html", "/page/", "/page/%zz", "/page/..%2fpress.js", "/page/%2e%2e%2fpress.js", "/page//app.js"],
)
def test_a_key_the_bucket_does_not_hold_is_s3_s_403(edge: EdgeServer, upstream: Upstream, target: str) -> None:
    """As S3 answers CloudFront, which may GetObject but not list: 403, never a file beside the page."""
    assert sent_as_is(edge, "GET", target, {}) == 403
    assert upstream.seen == []


@pytest.mark.parametrize("target", ["/page/../press.js", "/page/%2e%2e/template.yaml"])
def test_a_dot_segment_leaves_the_page_s_behavior_for_the_default_which_denies(
    edge: EdgeServer, upstream: Upstream, http: urllib3.PoolManager, target: str
) -> None:
    answer = HTTPConnection(urllib3.util.parse_url(edge.url).netloc, timeout=10)
    try:
        answer.request("GET", target)
        response = answer.getresponse()
        assert (response.status, response.getheader("x-seckill-edge"), response.read()) == (
            403,
            "1",
            results.fail(403, "FORBIDDEN", "not served through the edge").body.encode(),
        )
    finally:
        answer.close()
    assert upstream.seen == []


def test_the_page_takes_get_and_head_only(edge: EdgeServer, http: urllib3.PoolManager) -> None:
    for method in ("POST", "PUT", "DELETE"):
        assert http.request(method, f"{edge.url}/page/index.html", body=b"").status == 403, method


def test_a_chunked_body_is_forwarded_whole(edge: EdgeServer, upstream: Upstream, http: urllib3.PoolManager) -> None:
    answer = http.request("POST", f"{edge.url}/voucher-order/1/cancel", body=iter([b'{"a":', b" 1}"]), chunked=True)

    assert answer.status == Upstream.STATUS
    assert upstream.seen[0].body == b'{"a": 1}'
    assert "transfer-encoding" not in upstream.seen[0].headers


def test_a_write_with_a_stale_etag_is_a_conflict_and_changes_nothing(edge: EdgeServer, kvs: Any) -> None:
    stale = kvs.describe_key_value_store(KvsARN=KVS_ARN)["ETag"]
    fresh = put(kvs, "42", state(sold_out=False, v=1))
    assert fresh != stale

    with pytest.raises(kvs.exceptions.ConflictException):
        kvs.put_key(KvsARN=KVS_ARN, Key="42", Value=state(sold_out=True, v=2), IfMatch=stale)
    with pytest.raises(kvs.exceptions.ConflictException):
        kvs.delete_key(KvsARN=KVS_ARN, Key="42", IfMatch=stale)

    assert json.loads(kvs.get_key(KvsARN=KVS_ARN, Key="42")["Value"])["v"] == 1
    assert kvs.describe_key_value_store(KvsARN=KVS_ARN)["ETag"] == fresh


def test_keys_and_values_over_the_documented_sizes_are_refused(edge: EdgeServer, kvs: Any) -> None:
    etag = put(kvs, "k" * 512, "v" * 1024)  # at the limits: kept

    for key, value in (("k" * 513, "v"), ("big", "v" * 1025)):
        with pytest.raises(kvs.exceptions.ValidationException):
            kvs.put_key(KvsARN=KVS_ARN, Key=key, Value=value, IfMatch=etag)

    described = kvs.describe_key_value_store(KvsARN=KVS_ARN)
    assert (described["ItemCount"], described["TotalSizeInBytes"], described["ETag"]) == (1, 512 + 1024, etag)


def test_a_missing_key_is_not_found_and_the_store_lists_its_keys_by_pages(edge: EdgeServer, kvs: Any) -> None:
    with pytest.raises(kvs.exceptions.ResourceNotFoundException):
        kvs.get_key(KvsARN=KVS_ARN, Key="404")
    etag = kvs.describe_key_value_store(KvsARN=KVS_ARN)["ETag"]
    puts = [{"Key": str(n), "Value": state(sold_out=False, v=n)} for n in range(1, 6)]
    etag = kvs.update_keys(KvsARN=KVS_ARN, IfMatch=etag, Puts=puts)["ETag"]
    kvs.delete_key(KvsARN=KVS_ARN, Key="3", IfMatch=etag)

    pages = kvs.get_paginator("list_keys").paginate(KvsARN=KVS_ARN, PaginationConfig={"PageSize": 2})
    listed = [item["Key"] for page in pages for item in page["Items"]]

    assert listed == ["1", "2", "4", "5"]


def test_an_unsigned_call_is_denied(edge: EdgeServer, http: urllib3.PoolManager) -> None:
    answer = http.request("GET", f"{edge.kvs_endpoint}/key-value-stores/{KVS_ARN.replace('/', '%2F')}")

    assert answer.status == 403
    assert answer.headers["x-amzn-errortype"] == "AccessDeniedException"


def test_a_plain_client_writes_the_store_under_the_environment_the_edge_gives(edge: EdgeServer, kvs: Any) -> None:
    """What EdgePublisherFunction runs with locally: no client configuration, only its environment."""
    script = (
        "import boto3, os\n"
        "kvs = boto3.client('cloudfront-keyvaluestore')\n"
        "arn = os.environ['EDGE_KVS_ARN']\n"
        "etag = kvs.describe_key_value_store(KvsARN=arn)['ETag']\n"
        "kvs.put_key(KvsARN=arn, Key='42', Value='from the publisher', IfMatch=etag)\n"
    )
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    env.update({"AWS_DEFAULT_REGION": "us-east-1", **edge.environment()})

    # Our own interpreter, our own script.
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)  # noqa: S603

    assert kvs.get_key(KvsARN=KVS_ARN, Key="42")["Value"] == "from the publisher"


def test_how_long_a_put_takes_to_reach_the_viewer_side(
    edge: EdgeServer, kvs: Any, upstream: Upstream, http: urllib3.PoolManager
) -> None:
    """Printed, not asserted: the figures docs/edge.md quotes for the local edge. The write
    (DescribeKeyValueStore for the ETag, then PutKey, both signed), and from PutKey's
    answer to the first press answered by the new state, presses included."""
    put(kvs, "42", state(sold_out=False))
    assert press(http, edge, 42).status == Upstream.STATUS
    writes, visible, presses = [], [], 0
    for v in range(2, 102):
        sold_out = v % 2 == 0
        started = time.perf_counter()
        put(kvs, "42", state(sold_out=sold_out, v=v))
        written = time.perf_counter()
        while (press(http, edge, 42).status == 409) != sold_out:
            assert time.perf_counter() < written + 5, f"write {v} never reached the viewer side"
            presses += 1
        writes.append((written - started) * 1000)
        visible.append((time.perf_counter() - written) * 1000)

    def median(samples: list[float]) -> float:
        return sorted(samples)[len(samples) // 2]

    print(
        f"\n{len(writes)} writes: Describe+PutKey median {median(writes):.1f} ms (max {max(writes):.1f}); "
        f"then answered by the new state after median {median(visible):.2f} ms (max {max(visible):.2f}), "
        f"{presses} presses answered by the old one"
    )


# --- the runner's environment for the edge's functions ------------------------------------------

# The shape of the stack's edge: a state sender whose queue URL is empty without the edge,
# and the publisher, fed by EdgeStateQueue, on the store's ARN.
EDGE_TEMPLATE = """
Parameters:
  Edge: {Type: String, Default: none}
Conditions:
  HasEdge: !Equals [!Ref Edge, cloudfront]
Resources:
  EdgeStateQueue: {Type: AWS::SQS::Queue}
  SenderFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/seckill_api/
      Environment:
        Variables:
          EDGE_STATE_QUEUE_URL: !If [HasEdge, !Ref EdgeStateQueue, ""]
  PublisherFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/seckill_api/
      Environment:
        Variables:
          EDGE_KVS_ARN: !GetAtt EdgeStack.Outputs.KeyValueStoreArn
          AWS_ENDPOINT_URL_CLOUDFRONT_KEYVALUESTORE: !Ref AWS::NoValue
"""


@pytest.fixture
def edge_runner(tmp_path: Path, sqs_endpoint: str, sqs: Any) -> Iterator[Any]:
    """Runners over EDGE_TEMPLATE, their queues under a prefix of this test's own."""
    template = tmp_path / "template.yaml"
    template.write_text(textwrap.dedent(EDGE_TEMPLATE), encoding="utf-8")
    prefix = f"e{uuid.uuid4().hex[:10]}-"

    def make(*, edge: bool, parameters: dict[str, str] | None = None) -> Runner:
        env_vars = tmp_path / f"env-{uuid.uuid4().hex[:6]}.json"
        env_vars.write_text(json.dumps({"Parameters": parameters or {}}), encoding="utf-8")
        args = argparse.Namespace(
            template=str(template),
            env_vars=env_vars,
            sqs_endpoint=sqs_endpoint,
            queue_prefix=prefix,
            edge=edge,
            kvs_endpoint="http://127.0.0.1:4999",
        )
        return Runner(args)

    yield make
    for url in sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", []):
        sqs.delete_queue(QueueUrl=url)


def test_without_the_edge_the_functions_send_no_notices_and_the_publisher_has_no_store(edge_runner: Any) -> None:
    runner = edge_runner(edge=False)

    sender = runner.environment(runner.function("SenderFunction"))
    publisher = runner.environment(runner.function("PublisherFunction"))

    assert sender["EDGE_STATE_QUEUE_URL"] == ""
    assert not {"EDGE_KVS_ARN", "HTTP_PROXY", "AWS_ENDPOINT_URL_CLOUDFRONT_KEYVALUESTORE"} & set(publisher)


def test_with_the_edge_the_senders_get_the_queue_and_the_publisher_the_local_store(edge_runner: Any) -> None:
    runner = edge_runner(edge=True)

    sender = runner.environment(runner.function("SenderFunction"))
    publisher = runner.environment(runner.function("PublisherFunction"))

    assert sender["EDGE_STATE_QUEUE_URL"] == runner.queues()["EdgeStateQueue"]
    assert "HTTP_PROXY" not in sender  # only the publisher goes through the store's listener
    assert kvs_environment("http://127.0.0.1:4999").items() <= publisher.items()


def test_with_the_edge_the_publisher_writes_the_local_store_whatever_the_env_vars_file_names(
    edge_runner: Any,
) -> None:
    """events/env.json gives the publisher a placeholder ARN, for sam local; the local edge's store has its own."""
    placeholder = "arn:aws:cloudfront::123456789012:key-value-store/00000000-0000-0000-0000-000000000000"
    runner = edge_runner(edge=True, parameters={"EDGE_KVS_ARN": placeholder, "EDGE_STATE_QUEUE_URL": ""})

    sender = runner.environment(runner.function("SenderFunction"))
    publisher = runner.environment(runner.function("PublisherFunction"))

    assert sender["EDGE_STATE_QUEUE_URL"] == runner.queues()["EdgeStateQueue"]
    assert publisher["EDGE_KVS_ARN"] == KVS_ARN
