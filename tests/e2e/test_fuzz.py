"""Property-based fuzzing of the HTTP API against its OpenAPI document (docs/openapi.json).

Schemathesis generates requests for every operation, valid ones and invalid ones, and
sends them to the local HTTP API (``seckill-local start-api`` in-process: the template's
routes, the Lambda authorizer, the real functions) over real HTTP, with real MariaDB,
moto SQS and a redis-server of this test's own (so no other run's keys can change an
answer). User routes carry a minted token, admin routes a SigV4 signature (but for every
``ANONYMOUS_EVERY``-th case, which has only what schemathesis made up). Every check
schemathesis has runs on every answer (all are on by default): no 5xx, a documented
status, headers and content type, a body matching its schema; a request the document
admits is accepted and one it refuses is refused, so the document says exactly what the
service takes; and the stateful ones (ignored auth, use after free...).

A seckill voucher's window has rules no JSON Schema can state (its end after its begin
and not yet passed, a draw's begin more than ``drawCloseSeconds`` from now; the route's
description says so): a positive case that breaks them is not sent, as it is no
well-formed request.

OrderPersisterFunction is fed from OrderQueue as its event source mapping would, so a press
the gate let through becomes a CONFIRMED order: the owner's known order can be cancelled or
paid by the generated cases, and a stateful phase takes orders of its own from the press to
CONFIRMED, then cancels or pays them, every answer checked against the document as the
generated cases' are.

Bounded and deterministic: ``MAX_EXAMPLES`` per operation and phase, a fixed seed. The
number of cases sent per operation is printed at the end of the run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis as redis_lib
import requests
import schemathesis
from hypothesis import strategies as st
from schemathesis.core.failures import Failure
from schemathesis.core.parameters import ParameterLocation
from schemathesis.openapi.checks import MissingHeaderNotRejected

from seckill.infra import keys
from seckill.infra.db import Credentials
from seckill.infra.timeutil import parse_iso, to_utc
from seckill.openapi import ADMIN, USER
from seckill.tokens import mint_tokens
from seckill.vouchers import DRAW_DEFAULTS
from seckill_demo.faults import PrivateRedis
from seckill_local.checkout import TEMPLATE
from seckill_local.feeder import QueueFeeder
from seckill_local.lambdas import local_parameters
from seckill_local.openapi_command import DOCUMENT
from seckill_local.ports import free_port
from seckill_local.runner import Runner
from seckill_local.template import Template
from tests.e2e.test_local_runner import delete_queues_with_prefix, serving
from tests.helpers import new_user, signed

pytestmark = pytest.mark.e2e

MAX_EXAMPLES = 100
BUYERS = 500  # users pressing (more than the presses a run sends)
STATEFUL_ORDERS = 6  # orders the stateful phase takes to CANCELLED or PAID, half each
CONFIRMED_WITHIN = 60.0  # seconds for the persister to store a press
ANONYMOUS_EVERY = 5  # every 5th case of an operation goes without our credentials (API Gateway refuses it)
SEED = 20260101
# A window that ends this soon is kept out of positive cases: it may have ended by the time it is sent.
WINDOW_MARGIN = timedelta(hours=1)

SPEC: dict[str, Any] = json.loads(DOCUMENT.read_text(encoding="utf-8"))
schema = schemathesis.openapi.from_dict(SPEC)
schema.config.seed = SEED
schema.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE],
    max_examples=MAX_EXAMPLES,
    deterministic=True,
    database="none",
)
# API Gateway answers a method a path does not have with its own 404, which no OpenAPI
# operation can describe (test_local_runner checks it); no probes with other methods.
schema.config.phases.coverage.unexpected_methods = set()

# Ids that exist, mixed into the generated ones so that cases reach past "not found".
KNOWN: dict[str, list[str]] = {"voucherId": [], "orderId": [], "shopId": []}
SENT: Counter[str] = Counter()  # cases per operation
ANSWERED: dict[str, Counter[int]] = {}  # statuses per operation


@schema.hook
def flatmap_path_parameters(context: schemathesis.HookContext, path_parameters: dict[str, Any] | None) -> Any:
    known = {name: st.sampled_from(KNOWN[name]) for name in path_parameters or {} if KNOWN.get(name)}
    if not known:
        return st.just(path_parameters)
    return st.one_of(st.just(path_parameters), st.builds(dict, st.just(path_parameters), **known))


def in_utc(text: str) -> datetime:
    """A body's time in UTC; a naive one is read in UTC, the fuzzed API's SECKILL_TIMEZONE."""
    return to_utc(parse_iso(text), UTC)


@schema.hook
def filter_case(context: schemathesis.HookContext, case: schemathesis.Case) -> bool:
    """Keeps a positive seckill voucher only if its window is one the service can open
    (a draw's, one whose entries can still close before it)."""
    meta = case.meta
    if case.operation.label != "POST /voucher/seckill" or meta is None or not meta.generation.mode.is_positive:
        return True
    try:
        begin, end = in_utc(case.body["beginTime"]), in_utc(case.body["endTime"])
    except OverflowError:  # outside the years 1-9999 in UTC
        return False
    now = datetime.now(UTC)
    if case.body.get("admission") == "draw":
        close = case.body.get("drawCloseSeconds") or DRAW_DEFAULTS["draw_close_seconds"]
        if begin <= now + timedelta(seconds=close) + WINDOW_MARGIN:
            return False
    return begin < end and end > now + WINDOW_MARGIN


@schema.hook
def map_case(context: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    """A positive body's whole floats, where the document says integer, written as integers: JSON
    Schema counts 4.0 an integer, the contract (and the document's description) does not."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or not isinstance(case.body, dict):
        return case
    for name in integer_fields(case.operation) & case.body.keys():
        value = case.body[name]
        if isinstance(value, float) and value.is_integer():
            case.body[name] = int(value)
    return case


def integer_fields(operation: schemathesis.APIOperation) -> set[str]:
    """The integer properties of an operation's JSON body, by the document (an optional one too)."""
    body = operation.definition.raw.get("requestBody")
    if body is None:
        return set()
    model = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    properties = SPEC["components"]["schemas"][model]["properties"]
    return {
        name
        for name, definition in properties.items()
        if any(branch.get("type") == "integer" for branch in definition.get("anyOf", [definition]))
    }


@schema.hook
def filter_failure(
    context: schemathesis.HookContext, failure: Failure, case: schemathesis.Case, response: schemathesis.Response
) -> bool:
    """Drops one disagreement with schemathesis's own rule, not with the document: it expects a 401
    for a missing ``authorization`` header, where API Gateway answers an unsigned request to an IAM
    route with its documented 403 Forbidden."""
    unsigned = isinstance(failure, MissingHeaderNotRejected) and response.status_code == 403
    return not (unsigned and ADMIN in schemes(case) and response.json() == {"message": "Forbidden"})


def schemes(case: schemathesis.Case) -> set[str]:
    """The security schemes of the case's operation."""
    return {name for requirement in case.operation.definition.raw.get("security") or [] for name in requirement}


class UserToken(requests.auth.AuthBase):
    """A logged-in user's token; the next of ``tokens`` per request when there are several."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = itertools.cycle(tokens)
        self.token = tokens[0] if len(tokens) == 1 else None

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["authorization"] = f"Bearer {self.token or next(self.tokens)}"
        return request


class SigV4(requests.auth.AuthBase):
    """Signs the request as an IAM principal would (``execute-api``), with the local credentials."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        assert request.url is not None
        assert request.method is not None
        body = request.body.encode() if isinstance(request.body, str) else request.body or b""
        request.headers.update(signed(request.method, request.url, body))
        return request


@dataclass
class LocalApi:
    url: str
    owner: UserToken  # the user whose order is known
    buyers: UserToken  # a new user per press, so that presses can win
    admin: SigV4
    players: list[str]  # the stateful phase's users, one order each

    def auth_for(self, case: schemathesis.Case) -> requests.auth.AuthBase | None:
        headers = case.meta.components.get(ParameterLocation.HEADER) if case.meta else None
        if headers is not None and headers.mode.is_negative:
            return None  # the case is about a missing or malformed authorization header: sent as made
        names = schemes(case)
        if ADMIN in names:
            return self.admin
        if USER in names:
            return self.buyers if case.method == "POST" else self.owner
        return None


@pytest.fixture(scope="module")
def local_api(
    sqs_endpoint: str, sqs: Any, creds: Credentials, template: Template, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalApi]:
    workdir = tmp_path_factory.mktemp("fuzz")
    private = PrivateRedis(workdir, free_port())
    private.start()
    try:
        redis = redis_lib.Redis(port=private.port, decode_responses=True)
        redis.set(keys.loaded(), 1)  # this Redis holds every voucher on sale: unknown is really unknown
        env_file = workdir / "env.json"
        env_file.write_text(json.dumps({"Parameters": local_parameters(private.url, creds)}), encoding="utf-8")
        prefix = f"f{uuid.uuid4().hex[:10]}-"
        runner = Runner(
            argparse.Namespace(
                template=str(TEMPLATE),
                env_vars=env_file,
                sqs_endpoint=sqs_endpoint,
                queue_prefix=prefix,
                visibility_timeout=1,
            )
        )
        users = [new_user() for _ in range(1 + BUYERS + STATEFUL_ORDERS)]
        owner, *buyers = mint_tokens(redis, users, ttl_seconds=3600).values()
        buyers, players = buyers[:BUYERS], buyers[BUYERS:]
        pools = {name: runner.pool(name, 1) for name in ("SeckillApiFunction", "AuthorizerFunction")}
        persister = runner.pool("OrderPersisterFunction", 1)
        feeder = QueueFeeder(runner.sqs, runner.queues()["OrderQueue"], persister, batch_size=10, concurrency=1)
        try:
            persister.warm()
            feeder.start()  # OrderQueue -> the persister, as the event source mapping
            with serving(template, pools) as url:
                api = LocalApi(url, UserToken([owner]), UserToken(buyers), SigV4(), players)
                seed(api)
                yield api
        finally:
            feeder.close()
            persister.close()
            delete_queues_with_prefix(sqs, prefix)
    finally:
        private.kill()


def seed(api: LocalApi) -> None:
    """A shop with vouchers the fuzz knows the ids of: one on sale, one the token's owner bought the
    only unit of (its order is known), and two it does not know, so the shop's list is never empty."""
    shop_id = new_user()
    now = datetime.now(UTC)

    def create(route: str, **fields: Any) -> str:
        voucher = {"shopId": shop_id, "title": "fuzz voucher", "payValue": 100, "actualValue": 200, **fields}
        created = requests.post(f"{api.url}{route}", json=voucher, auth=api.admin, timeout=20)
        assert created.status_code == 201, created.text
        return str(created.json()["data"])

    window = {"beginTime": (now - timedelta(minutes=1)).isoformat(), "endTime": (now + timedelta(hours=1)).isoformat()}
    on_sale, sold_out, _ = (create("/voucher/seckill", stock=stock, **window) for stock in (1000, 1, 10))
    create("/voucher")
    placed = requests.post(f"{api.url}/voucher-order/seckill/{sold_out}", auth=api.owner, timeout=20)
    assert placed.status_code == 202, placed.text
    order_id = placed.json()["data"]
    confirmed(api, order_id, api.owner)  # stored: the generated cancels and payments can succeed on it
    KNOWN.update(voucherId=[on_sale, sold_out], orderId=[order_id], shopId=[str(shop_id)])


def documented(
    api: LocalApi, method: str, path: str, auth: requests.auth.AuthBase, body: Any = None, **parameters: str
) -> requests.Response:
    """One request of the stateful phase, its answer put through every check the generated cases get."""
    operation = schema[path][method]
    case = (
        operation.Case(path_parameters=parameters, body=body)
        if body is not None
        else operation.Case(path_parameters=parameters)
    )
    response: requests.Response = case.call_and_validate(base_url=api.url, auth=auth, timeout=20)
    return response


def confirmed(api: LocalApi, order_id: str, auth: requests.auth.AuthBase) -> None:
    """Until the status route says CONFIRMED (the persister stored the order and its hold)."""
    deadline = time.monotonic() + CONFIRMED_WITHIN
    while True:
        status = documented(api, "GET", "/voucher-order/{orderId}", auth, orderId=order_id)
        assert status.status_code == 200, status.text
        if status.json()["data"]["status"] == "CONFIRMED":
            return
        assert time.monotonic() < deadline, f"order {order_id} still {status.json()['data']['status']}"
        time.sleep(0.2)


@pytest.fixture(scope="module", autouse=True)
def report_counts(request: pytest.FixtureRequest) -> Iterator[None]:
    """Prints, after the run, how many cases each operation was sent and what it answered."""
    yield
    if not SENT:
        return
    lines = [f"fuzz: {sum(SENT.values())} cases sent (seed {SEED}, at most {MAX_EXAMPLES} a phase and mode):"]
    for label, count in sorted(SENT.items()):
        statuses = ", ".join(f"{status} x{n}" for status, n in sorted(ANSWERED.get(label, Counter()).items()))
        lines.append(f"  {label}: {count} ({statuses})")
    with request.config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print("\n" + "\n".join(lines))


def test_orders_go_from_the_press_to_confirmed_then_cancelled_or_paid_as_documented(local_api: LocalApi) -> None:
    """The stateful phase: each player presses and waits for CONFIRMED, then cancels twice (the
    even ones) or pays twice with the same paymentId (the odd ones): both answered 200, the second
    changing nothing; then the other close is refused 409 with the order's state. Every answer
    passes the document's checks."""
    on_sale = KNOWN["voucherId"][0]
    for n, token in enumerate(local_api.players):
        player = UserToken([token])
        pressed = documented(local_api, "POST", "/voucher-order/seckill/{voucherId}", player, voucherId=on_sale)
        assert pressed.status_code == 202, pressed.text
        order_id = pressed.json()["data"]
        confirmed(local_api, order_id, player)
        payment = {"paymentId": f"fuzz-{order_id}"}
        close, other, final = ("cancel", "payment", "CANCELLED") if n % 2 == 0 else ("payment", "cancel", "PAID")
        auth = {"cancel": player, "payment": local_api.admin}
        body = {"cancel": None, "payment": payment}
        path = "/voucher-order/{orderId}/"
        answers = [
            documented(local_api, "POST", path + close, auth[close], body[close], orderId=order_id) for _ in range(2)
        ]
        assert [(a.status_code, a.json()["data"]["status"]) for a in answers] == [(200, final)] * 2
        refused = documented(local_api, "POST", path + other, auth[other], body[other], orderId=order_id)
        assert (refused.status_code, refused.json()["code"]) == (409, final), refused.text
        status = documented(local_api, "GET", "/voucher-order/{orderId}", player, orderId=order_id)
        assert status.json()["data"]["status"] == final


@schema.parametrize()
def test_every_answer_is_documented(case: schemathesis.Case, local_api: LocalApi) -> None:
    SENT[case.operation.label] += 1
    auth = None if SENT[case.operation.label] % ANONYMOUS_EVERY == 0 else local_api.auth_for(case)
    response = case.call_and_validate(base_url=local_api.url, auth=auth, timeout=20)
    ANSWERED.setdefault(case.operation.label, Counter())[response.status_code] += 1
