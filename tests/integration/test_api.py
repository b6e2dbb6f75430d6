"""SeckillApiFunction through the ``events/`` files (docs/contract.md), against real Redis,
MariaDB and a moto SQS server."""

from __future__ import annotations

import copy
import json
import random
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

import pytest
import redis as redis_lib

from seckill import vouchers
from seckill.infra import keys
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database, connect
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderQueue
from seckill.repair.restore import restore, voucher_ids_on_sale
from seckill.vouchers import VoucherIn
from seckill_local.feeder import sqs_event
from seckill_local.template import Template
from tests.helpers import body, closed_port, db_rows, drain, load_event, new_user

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
RESULT_KEYS = {"success", "data", "errorMsg", "code"}


def module_of(handler: Callable[..., Any]) -> ModuleType:
    """The handler's own module (``load_handler`` imports it under a unique name)."""
    return sys.modules[handler.__module__]


def with_path(event: dict[str, Any], path: str, **params: str) -> dict[str, Any]:
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    if params:
        event["pathParameters"] = params
    return event


def as_user(event: dict[str, Any], user_id: int | None) -> dict[str, Any]:
    """The authorizer's context, as API Gateway hands it over (or none at all)."""
    if user_id is None:
        event["requestContext"].pop("authorizer", None)
    else:
        event["requestContext"]["authorizer"] = {"lambda": {"userId": str(user_id)}}
    return event


def seckill_event(voucher_id: int | str, user_id: int | None) -> dict[str, Any]:
    event = load_event("seckill_api_seckill.json")
    return as_user(
        with_path(event, f"/voucher-order/seckill/{voucher_id}", voucherId=str(voucher_id)),
        user_id,
    )


def status_event(order_id: int | str, user_id: int | None) -> dict[str, Any]:
    event = load_event("seckill_api_order_status.json")
    return as_user(with_path(event, f"/voucher-order/{order_id}", orderId=str(order_id)), user_id)


def list_event(shop_id: int | str) -> dict[str, Any]:
    return with_path(load_event("seckill_api_list_vouchers.json"), f"/voucher/list/{shop_id}", shopId=str(shop_id))


def iso(moment: datetime) -> str:
    return moment.isoformat()


def seckill_voucher_body(shop_id: int, **changes: Any) -> dict[str, Any]:
    now = datetime.now(UTC)
    data: dict[str, Any] = json.loads(load_event("seckill_api_add_seckill_voucher.json")["body"])
    data.update(
        shopId=shop_id,
        beginTime=iso(now - timedelta(minutes=1)),
        endTime=iso(now + timedelta(hours=1)),
        stock=3,
    )
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def admin_event(name: str, payload: Any) -> dict[str, Any]:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return load_event(name, body=text)


@pytest.fixture
def call(handlers: dict[str, Handler], context: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Invoke SeckillApiFunction; every answer must be a ``Result`` and never a stack trace."""

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        response = handlers["SeckillApiFunction"](json.loads(json.dumps(event)), context)
        assert "Traceback" not in response["body"], response
        result = body(response)
        assert set(result) == RESULT_KEYS, result
        assert result["success"] is (response["statusCode"] < 400), response
        if not result["success"]:
            assert result["data"] is None
            assert isinstance(result["errorMsg"], str)
            assert result["errorMsg"]
            assert isinstance(result["code"], str)
        return response

    return invoke


@pytest.fixture
def orders_made(redis: Any) -> Iterator[list[int]]:
    """Order ids the test got a 202 for; their status hints are removed afterwards."""
    made: list[int] = []
    yield made
    for order_id in made:
        redis.delete(keys.order_status(order_id))


@pytest.fixture
def created_vouchers(redis: Any) -> Iterator[list[int]]:
    """Vouchers created through the admin route; their Redis preload is removed afterwards."""
    made: list[int] = []
    yield made
    for voucher_id in made:
        redis.delete(*keys.voucher_keys(voucher_id))


@pytest.fixture
def buy(
    call: Callable[[dict[str, Any]], dict[str, Any]], orders_made: list[int]
) -> Callable[[int, int], dict[str, Any]]:
    def place(voucher_id: int, user_id: int) -> dict[str, Any]:
        response = call(seckill_event(voucher_id, user_id))
        if response["statusCode"] == 202:
            orders_made.append(int(body(response)["data"]))
        return response

    return place


def status_hints_of(redis: Any, user_id: int) -> list[int]:
    """Order ids whose status-route hint names this user."""
    found = []
    for key in redis.scan_iter(keys.order_status(0).removesuffix("0") + "*", count=1000):
        hint = redis.get(key)
        if hint and json.loads(hint).get("userId") == user_id:
            found.append(int(key.rsplit(":", 1)[1]))
    return found


def expect_refusal(response: dict[str, Any], status: int, code: str) -> None:
    assert response["statusCode"] == status, response
    assert body(response)["code"] == code, response


# --- POST /voucher-order/seckill/{voucherId} ---------------------------------------------------


def test_a_press_without_its_route_key_is_answered_the_same_through_the_resolver(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    make_voucher: Callable[..., int],
    orders_made: list[int],
    order_queue: str,
    sqs: Any,
) -> None:
    """The handler answers a press by its route key, past the resolver; the resolver
    holds the route too (it is what the OpenAPI document is made from)."""
    voucher_id, winner = make_voucher(stock=2), new_user()

    def untagged(user_id: int | None) -> dict[str, Any]:
        event = seckill_event(voucher_id, user_id)
        event["routeKey"] = event["requestContext"]["routeKey"] = "$default"
        return event

    accepted = call(untagged(winner))
    assert accepted["statusCode"] == 202, accepted
    orders_made.append(int(body(accepted)["data"]))
    assert accepted["headers"]["Location"] == f"/voucher-order/{body(accepted)['data']}"
    assert [json.loads(m["Body"])["userId"] for m in drain(sqs, order_queue)] == [winner]
    expect_refusal(call(untagged(winner)), 409, "DUPLICATE_ORDER")
    expect_refusal(call(untagged(None)), 401, "UNAUTHORIZED")


def test_seckill_accepted_is_202_with_order_id_location_and_queued_message(
    buy: Callable[[int, int], dict[str, Any]], make_voucher: Callable[..., int], order_queue: str, sqs: Any, redis: Any
) -> None:
    voucher_id = make_voucher(stock=5)
    user_id = new_user()
    before = datetime.now(UTC) - timedelta(seconds=5)

    response = buy(voucher_id, user_id)

    assert response["statusCode"] == 202, response
    result = body(response)
    assert result["success"] is True
    assert result["errorMsg"] is None
    assert result["code"] is None
    order_id = result["data"]
    assert isinstance(order_id, str)
    assert order_id.isdigit()
    assert int(order_id) > 2**53  # beyond JavaScript's safe integers: hence the string
    assert response["headers"]["Location"] == f"/voucher-order/{order_id}"

    assert redis.get(keys.stock(voucher_id)) == "4"
    assert redis.sismember(keys.buyers(voucher_id), str(user_id))
    messages = drain(sqs, order_queue)
    assert len(messages) == 1
    message = json.loads(messages[0]["Body"])
    assert set(message) == {"orderId", "userId", "voucherId", "acceptedAt"}
    assert message["orderId"] == order_id
    assert type(message["userId"]) is int
    assert message["userId"] == user_id
    assert type(message["voucherId"]) is int
    assert message["voucherId"] == voucher_id
    accepted_at = datetime.fromisoformat(message["acceptedAt"])
    assert accepted_at.tzinfo is not None
    assert before <= accepted_at <= datetime.now(UTC) + timedelta(seconds=5)


def test_sold_out_is_409(
    buy: Callable[[int, int], dict[str, Any]], make_voucher: Callable[..., int], order_queue: str, sqs: Any, redis: Any
) -> None:
    voucher_id = make_voucher(stock=1)
    assert buy(voucher_id, new_user())["statusCode"] == 202
    loser = new_user()
    expect_refusal(buy(voucher_id, loser), 409, "SOLD_OUT")
    assert redis.get(keys.stock(voucher_id)) == "0"
    assert not redis.sismember(keys.buyers(voucher_id), str(loser))
    assert len(drain(sqs, order_queue)) == 1


def test_second_order_of_a_user_is_409_duplicate(
    buy: Callable[[int, int], dict[str, Any]], make_voucher: Callable[..., int], order_queue: str, sqs: Any, redis: Any
) -> None:
    voucher_id = make_voucher(stock=5)
    user_id = new_user()
    assert buy(voucher_id, user_id)["statusCode"] == 202
    expect_refusal(buy(voucher_id, user_id), 409, "DUPLICATE_ORDER")
    assert redis.get(keys.stock(voucher_id)) == "4"
    assert len(drain(sqs, order_queue)) == 1


def test_before_the_window_is_409_not_started(
    buy: Callable[[int, int], dict[str, Any]], make_voucher: Callable[..., int], order_queue: str, redis: Any
) -> None:
    now = datetime.now(UTC)
    voucher_id = make_voucher(stock=5, begin=now + timedelta(hours=1), end=now + timedelta(hours=2))
    expect_refusal(buy(voucher_id, new_user()), 409, "NOT_STARTED")
    assert redis.get(keys.stock(voucher_id)) == "5"


def test_after_the_window_is_409_ended(
    buy: Callable[[int, int], dict[str, Any]], make_voucher: Callable[..., int], order_queue: str, redis: Any
) -> None:
    now = datetime.now(UTC)
    voucher_id = make_voucher(stock=5, begin=now - timedelta(hours=2), end=now - timedelta(hours=1))
    expect_refusal(buy(voucher_id, new_user()), 409, "ENDED")
    assert redis.get(keys.stock(voucher_id)) == "5"


def test_unknown_voucher_is_404(buy: Callable[[int, int], dict[str, Any]], order_queue: str, redis: Any) -> None:
    voucher_id = random.randint(10**15, 10**16)
    assert not redis.exists(keys.stock(voucher_id))
    expect_refusal(buy(voucher_id, new_user()), 404, "VOUCHER_NOT_FOUND")
    assert not redis.exists(keys.stock(voucher_id), keys.buyers(voucher_id), keys.pending(voucher_id))


@pytest.mark.parametrize("voucher_id", ["0", "-1", "abc", "01", "1.5", "99999999999999999999"])
def test_voucher_id_not_a_positive_integer_is_400(
    call: Callable[[dict[str, Any]], dict[str, Any]], voucher_id: str, order_queue: str, sqs: Any
) -> None:
    response = call(seckill_event(voucher_id, new_user()))
    expect_refusal(response, 400, "BAD_REQUEST")
    assert "voucherId" in body(response)["errorMsg"]
    assert drain(sqs, order_queue) == []


@pytest.mark.parametrize("authorizer", [None, {}, {"lambda": {}}, {"lambda": {"nickName": "x"}}, {"iam": {"a": 1}}])
def test_seckill_without_the_authorizers_user_is_401(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    make_voucher: Callable[..., int],
    authorizer: dict[str, Any] | None,
    order_queue: str,
    sqs: Any,
    redis: Any,
) -> None:
    voucher_id = make_voucher(stock=5)
    event = seckill_event(voucher_id, None)
    if authorizer is not None:
        event["requestContext"]["authorizer"] = authorizer
    expect_refusal(call(event), 401, "UNAUTHORIZED")
    assert redis.get(keys.stock(voucher_id)) == "5"
    assert drain(sqs, order_queue) == []


def test_user_id_comes_only_from_the_authorizer(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    orders_made: list[int],
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    redis: Any,
) -> None:
    voucher_id = make_voucher(stock=5)
    user_id, impostor = new_user(), new_user()
    event = seckill_event(voucher_id, user_id)
    event["rawQueryString"] = f"userId={impostor}"
    event["queryStringParameters"] = {"userId": str(impostor)}
    event["body"] = json.dumps({"userId": impostor})
    event["headers"]["x-user-id"] = str(impostor)

    response = call(event)

    assert response["statusCode"] == 202, response
    orders_made.append(int(body(response)["data"]))
    assert redis.smembers(keys.buyers(voucher_id)) == {str(user_id)}
    (message,) = drain(sqs, order_queue)
    assert json.loads(message["Body"])["userId"] == user_id

    # Without the authorizer's context, a user id elsewhere does not log anyone in.
    expect_refusal(call(as_user(event, None)), 401, "UNAUTHORIZED")


def test_queue_refusing_the_message_is_503_and_the_reservation_is_released(
    handlers: dict[str, Handler],
    buy: Callable[[int, int], dict[str, Any]],
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    redis: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    voucher_id = make_voucher(stock=3)
    first, user_id = new_user(), new_user()
    assert buy(voucher_id, first)["statusCode"] == 202
    stock, buyers = redis.get(keys.stock(voucher_id)), redis.smembers(keys.buyers(voucher_id))
    pending = redis.hgetall(keys.pending(voucher_id))
    assert stock == "2"
    assert set(pending) == {str(first)}

    gone = sqs.create_queue(QueueName=f"gone-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    sqs.delete_queue(QueueUrl=gone)
    module = module_of(handlers["SeckillApiFunction"])
    monkeypatch.setattr(module, "queue", OrderQueue(sqs, gone))

    response = buy(voucher_id, user_id)

    expect_refusal(response, 503, "TRY_AGAIN")
    assert "Location" not in response["headers"]
    assert redis.get(keys.stock(voucher_id)) == stock
    assert redis.smembers(keys.buyers(voucher_id)) == buyers
    assert redis.hgetall(keys.pending(voucher_id)) == pending
    assert not redis.hexists(keys.pending(voucher_id), str(user_id))
    assert status_hints_of(redis, user_id) == []  # the unqueued order is not reported PENDING

    monkeypatch.undo()
    retry = buy(voucher_id, user_id)
    assert retry["statusCode"] == 202, retry
    assert status_hints_of(redis, user_id) == [int(body(retry)["data"])]
    assert redis.get(keys.stock(voucher_id)) == "1"
    queued = [json.loads(m["Body"]) for m in drain(sqs, order_queue)]
    assert sorted(m["userId"] for m in queued) == sorted([first, user_id])


# --- GET /voucher-order/{orderId} ------------------------------------------------------------


def persist(handlers: dict[str, Handler], context: Any, sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """Take what is on the queue and hand it to the persister, as the event source mapping would."""
    messages = drain(sqs, queue_url)
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    response = handlers["OrderPersisterFunction"](sqs_event(messages, arn), context)
    assert response == {"batchItemFailures": []}
    return messages


def test_order_status_pending_then_confirmed(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
) -> None:
    voucher_id = make_voucher(stock=2)
    user_id = new_user()
    order_id = body(buy(voucher_id, user_id))["data"]

    pending = call(status_event(order_id, user_id))
    assert pending["statusCode"] == 200, pending
    data = body(pending)["data"]
    assert data["orderId"] == order_id
    assert data["voucherId"] == voucher_id
    assert data["userId"] == user_id
    assert data["status"] == "PENDING"
    assert data["reason"] is None
    assert datetime.fromisoformat(data["createdAt"]).tzinfo is not None

    persist(handlers, context, sqs, order_queue)

    confirmed = call(status_event(order_id, user_id))
    assert confirmed["statusCode"] == 200, confirmed
    data = body(confirmed)["data"]
    assert data == {
        "orderId": order_id,
        "voucherId": voucher_id,
        "userId": user_id,
        "status": "CONFIRMED",
        "reason": None,
        "createdAt": data["createdAt"],
        "payBy": data["payBy"],
        "paidAt": None,
    }
    assert isinstance(data["createdAt"], str)
    assert datetime.fromisoformat(data["payBy"]) > datetime.fromisoformat(data["createdAt"])
    assert datetime.fromisoformat(data["createdAt"]).tzinfo is not None


def test_order_status_failed_with_reason(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    db: Database,
) -> None:
    voucher_id = make_voucher(stock=2)
    user_id = new_user()
    order_id = body(buy(voucher_id, user_id))["data"]
    pending = body(call(status_event(order_id, user_id)))["data"]
    # The database ran out (e.g. Redis had drifted): the persister rejects the order.
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", voucher_id)

    persist(handlers, context, sqs, order_queue)

    response = call(status_event(order_id, user_id))
    assert response["statusCode"] == 200, response
    data = body(response)["data"]
    assert data["status"] == "FAILED"
    assert data["reason"] == "SOLD_OUT"
    assert data["orderId"] == order_id
    assert data["voucherId"] == voucher_id
    assert data["userId"] == user_id
    # Still when the order was made (to the second its id carries), not when it was refused.
    made = datetime.fromisoformat(pending["createdAt"])
    assert abs(datetime.fromisoformat(data["createdAt"]) - made) < timedelta(seconds=1)
    assert db_rows(db, "SELECT id FROM tb_voucher_order WHERE id = %s", int(order_id)) == []


def test_order_status_unknown_or_another_users_order_is_404(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
) -> None:
    expect_refusal(call(status_event(random.randint(2**60, 2**62), new_user())), 404, "ORDER_NOT_FOUND")

    voucher_id = make_voucher(stock=2)
    owner, other = new_user(), new_user()
    order_id = body(buy(voucher_id, owner))["data"]
    expect_refusal(call(status_event(order_id, other)), 404, "ORDER_NOT_FOUND")  # while pending
    persist(handlers, context, sqs, order_queue)
    expect_refusal(call(status_event(order_id, other)), 404, "ORDER_NOT_FOUND")  # once confirmed
    assert body(call(status_event(order_id, owner)))["data"]["status"] == "CONFIRMED"


@pytest.mark.parametrize("order_id", ["abc", "0", "-5", "012", "1e9"])
def test_order_status_bad_id_is_400(call: Callable[[dict[str, Any]], dict[str, Any]], order_id: str) -> None:
    expect_refusal(call(status_event(order_id, new_user())), 400, "BAD_REQUEST")


def test_order_status_without_context_is_401(call: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    expect_refusal(call(status_event(random.randint(2**60, 2**62), None)), 401, "UNAUTHORIZED")


def test_a_programming_error_is_500_without_details(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    handlers: dict[str, Handler],
    creds: Credentials,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """MySQL answers, but the statement is wrong for it (here: a database without the schema)."""
    empty = f"seckill_empty_{uuid.uuid4().hex[:8]}"
    admin = connect(creds, database=False)
    with admin.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{empty}`")
    try:
        module = module_of(handlers["SeckillApiFunction"])
        monkeypatch.setattr(module, "db", Database(replace(creds, database=empty)))
        response = call(status_event(random.randint(2**60, 2**62), new_user()))
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{empty}`")
        admin.close()

    expect_refusal(response, 500, "INTERNAL_ERROR")
    assert body(response)["errorMsg"] == "internal error"
    for leak in ("Traceback", "pymysql", "ProgrammingError", "tb_voucher", empty):
        assert leak not in response["body"]


def stop_mysql(handlers: dict[str, Handler], creds: Credentials, monkeypatch: pytest.MonkeyPatch) -> int:
    """The API's database on a port nothing listens on (DB_PORT of a closed port); returns the port."""
    port = closed_port()
    module = module_of(handlers["SeckillApiFunction"])
    monkeypatch.setattr(module, "db", Database(replace(creds, port=port)))
    return port


@pytest.fixture
def mysql_down(handlers: dict[str, Handler], creds: Credentials, monkeypatch: pytest.MonkeyPatch) -> int:
    return stop_mysql(handlers, creds, monkeypatch)


def expect_try_again(response: dict[str, Any], *hidden: str) -> None:
    expect_refusal(response, 503, "TRY_AGAIN")
    for leak in ("Traceback", "pymysql", "OperationalError", "Can't connect", "127.0.0.1", *hidden):
        assert leak not in response["body"]


def test_mysql_down_is_503_on_the_list_and_the_create_routes(
    call: Callable[[dict[str, Any]], dict[str, Any]], mysql_down: int, redis: Any
) -> None:
    shop_id = random.randint(10**12, 10**15)
    expect_try_again(call(list_event(shop_id)), str(mysql_down))
    seckill = admin_event("seckill_api_add_seckill_voucher.json", seckill_voucher_body(shop_id))
    expect_try_again(call(seckill), str(mysql_down))
    ordinary = json.loads(load_event("seckill_api_add_voucher.json")["body"]) | {"shopId": shop_id}
    expect_try_again(call(admin_event("seckill_api_add_voucher.json", ordinary)), str(mysql_down))
    # Bad input is still judged first.
    expect_refusal(call(admin_event("seckill_api_add_voucher.json", "{")), 400, "BAD_REQUEST")


def test_mysql_down_the_status_of_a_pending_order_comes_from_its_hint(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    make_voucher: Callable[..., int],
    order_queue: str,
    handlers: dict[str, Handler],
    creds: Credentials,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    voucher_id, user_id = make_voucher(stock=2), new_user()
    order_id = body(buy(voucher_id, user_id))["data"]
    before = body(call(status_event(order_id, user_id)))["data"]
    assert before["status"] == "PENDING"

    port = stop_mysql(handlers, creds, monkeypatch)
    response = call(status_event(order_id, user_id))
    assert response["statusCode"] == 200, response
    assert body(response)["data"] == before
    # Without a hint MySQL alone could answer: try again.
    expect_try_again(call(status_event(random.randint(2**60, 2**62), user_id)), str(port))
    expect_try_again(call(status_event(order_id, new_user())), str(port))


def test_a_killed_database_connection_does_not_fail_the_next_request(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    make_voucher: Callable[..., int],
    order_queue: str,
    handlers: dict[str, Handler],
    creds: Credentials,
) -> None:
    """A warm container's connection killed between requests (a failover, an idle
    timeout, KILL CONNECTION): the next request gets a fresh connection, not a 500."""
    module = module_of(handlers["SeckillApiFunction"])
    shop_id = random.randint(10**12, 10**15)
    voucher_id = make_voucher(shop_id=shop_id)
    order_id = body(buy(voucher_id, new_user()))["data"]
    requests = [
        list_event(shop_id),
        admin_event("seckill_api_add_voucher.json", {"shopId": shop_id, "title": "t", "payValue": 1, "actualValue": 2}),
        status_event(order_id, new_user()),
    ]
    expected = [200, 201, 404]
    for event, status in zip(requests, expected, strict=True):
        assert call(list_event(shop_id))["statusCode"] == 200  # warm: the connection is open
        thread_id = module.db.connection().thread_id()
        admin = connect(creds)
        with admin.cursor() as cursor:
            cursor.execute(f"KILL CONNECTION {int(thread_id)}")
        admin.close()
        response = call(event)
        assert response["statusCode"] == status, response
        assert module.db.connection().thread_id() != thread_id


# --- GET /voucher/list/{shopId} --------------------------------------------------------------


def test_list_vouchers_of_a_shop(
    call: Callable[[dict[str, Any]], dict[str, Any]], make_voucher: Callable[..., int]
) -> None:
    shop_id = random.randint(10**12, 10**15)
    assert body(call(list_event(shop_id)))["data"] == []
    begin = datetime(2031, 5, 1, 12, 0, tzinfo=UTC)
    first = make_voucher(stock=7, shop_id=shop_id, begin=begin, end=begin + timedelta(hours=2))
    second = make_voucher(stock=3, shop_id=shop_id)
    make_voucher(stock=1, shop_id=shop_id + 1)

    response = call(list_event(shop_id))

    assert response["statusCode"] == 200, response
    listed = body(response)["data"]
    assert [v["id"] for v in listed] == [first, second]
    assert all(type(v["id"]) is int and v["shopId"] == shop_id for v in listed)
    assert [v["stock"] for v in listed] == [7, 3]
    assert datetime.fromisoformat(listed[0]["beginTime"]) == begin
    assert datetime.fromisoformat(listed[0]["endTime"]) == begin + timedelta(hours=2)


def test_list_vouchers_needs_no_login(
    call: Callable[[dict[str, Any]], dict[str, Any]], make_voucher: Callable[..., int]
) -> None:
    shop_id = random.randint(10**12, 10**15)
    voucher_id = make_voucher(shop_id=shop_id)
    event = list_event(shop_id)
    event["requestContext"].pop("authorizer", None)
    assert [v["id"] for v in body(call(event))["data"]] == [voucher_id]


@pytest.mark.parametrize("shop_id", ["abc", "0", "-1", "07"])
def test_list_vouchers_bad_shop_id_is_400(call: Callable[[dict[str, Any]], dict[str, Any]], shop_id: str) -> None:
    response = call(list_event(shop_id))
    expect_refusal(response, 400, "BAD_REQUEST")
    assert "shopId" in body(response)["errorMsg"]


# --- POST /voucher/seckill and POST /voucher --------------------------------------------------


def test_add_seckill_voucher_is_201_and_purchasable(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    created_vouchers: list[int],
    order_queue: str,
    sqs: Any,
    redis: Any,
) -> None:
    shop_id = random.randint(10**12, 10**15)
    response = call(admin_event("seckill_api_add_seckill_voucher.json", seckill_voucher_body(shop_id, stock=2)))

    assert response["statusCode"] == 201, response
    voucher_id = body(response)["data"]
    assert type(voucher_id) is int
    created_vouchers.append(voucher_id)
    assert redis.get(keys.stock(voucher_id)) == "2"
    (listed,) = body(call(list_event(shop_id)))["data"]
    assert listed["id"] == voucher_id
    assert listed["type"] == 1
    assert listed["stock"] == 2

    assert buy(voucher_id, new_user())["statusCode"] == 202
    assert buy(voucher_id, new_user())["statusCode"] == 202
    expect_refusal(buy(voucher_id, new_user()), 409, "SOLD_OUT")
    assert len(drain(sqs, order_queue)) == 2


def test_add_seckill_voucher_naive_times_read_in_the_configured_zone(
    call: Callable[[dict[str, Any]], dict[str, Any]], created_vouchers: list[int]
) -> None:
    shop_id = random.randint(10**12, 10**15)
    payload = seckill_voucher_body(shop_id, beginTime="2031-01-02T03:04:05", endTime="2031-01-02T05:00:00")
    response = call(admin_event("seckill_api_add_seckill_voucher.json", payload))
    assert response["statusCode"] == 201, response
    created_vouchers.append(body(response)["data"])
    (listed,) = body(call(list_event(shop_id)))["data"]
    # SECKILL_TIMEZONE is unset in the suite: UTC.
    assert datetime.fromisoformat(listed["beginTime"]) == datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"stock": None}, "stock"),
        ({"stock": 0}, "stock"),
        ({"stock": "ten"}, "stock"),
        ({"shopId": None}, "shopId"),
        ({"title": ""}, "title"),
        ({"payValue": -1}, "payValue"),
        ({"beginTime": "not a time"}, "beginTime"),
        ({"endTime": None}, "endTime"),
        ({"beginTime": "2031-01-02T10:00:00Z", "endTime": "2031-01-02T09:00:00Z"}, "endTime"),
        ({"type": 0}, "type"),
    ],
)
def test_add_seckill_voucher_invalid_field_is_400_naming_it(
    call: Callable[[dict[str, Any]], dict[str, Any]], changes: dict[str, Any], field: str
) -> None:
    shop_id = random.randint(10**12, 10**15)
    payload = seckill_voucher_body(shop_id)
    for name, value in changes.items():
        if value is None:
            payload.pop(name, None)
        else:
            payload[name] = value

    response = call(admin_event("seckill_api_add_seckill_voucher.json", payload))

    expect_refusal(response, 400, "BAD_REQUEST")
    assert field in body(response)["errorMsg"]
    assert body(call(list_event(shop_id)))["data"] == []


@pytest.mark.parametrize("raw", ["{not json", "", "[1, 2]", "null"])
def test_add_seckill_voucher_unreadable_body_is_400(call: Callable[[dict[str, Any]], dict[str, Any]], raw: str) -> None:
    expect_refusal(call(admin_event("seckill_api_add_seckill_voucher.json", raw)), 400, "BAD_REQUEST")


def test_add_seckill_voucher_binary_body_is_400(call: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    event = load_event("seckill_api_add_seckill_voucher.json", body="/w==", isBase64Encoded=True)
    expect_refusal(call(event), 400, "BAD_REQUEST")


@pytest.mark.parametrize("route", ["seckill_api_add_seckill_voucher.json", "seckill_api_add_voucher.json"])
@pytest.mark.parametrize("authorizer", [None, {"lambda": {"userId": "1010"}}, {"iam": {}}])
def test_admin_routes_without_iam_are_403(
    call: Callable[[dict[str, Any]], dict[str, Any]], route: str, authorizer: dict[str, Any] | None
) -> None:
    shop_id = random.randint(10**12, 10**15)
    payload = json.loads(load_event(route)["body"])
    if "stock" in payload:
        payload = seckill_voucher_body(shop_id)
    payload["shopId"] = shop_id
    event = admin_event(route, payload)
    if authorizer is None:
        event["requestContext"].pop("authorizer")
    else:
        event["requestContext"]["authorizer"] = authorizer

    expect_refusal(call(event), 403, "FORBIDDEN")
    assert body(call(list_event(shop_id)))["data"] == []


def test_add_voucher_is_201(call: Callable[[dict[str, Any]], dict[str, Any]], redis: Any) -> None:
    shop_id = random.randint(10**12, 10**15)
    payload = json.loads(load_event("seckill_api_add_voucher.json")["body"])
    payload["shopId"] = shop_id

    response = call(admin_event("seckill_api_add_voucher.json", payload))

    assert response["statusCode"] == 201, response
    voucher_id = body(response)["data"]
    assert type(voucher_id) is int
    assert not redis.exists(keys.stock(voucher_id))  # an ordinary voucher is not on the gate
    (listed,) = body(call(list_event(shop_id)))["data"]
    assert listed["id"] == voucher_id
    assert listed["type"] == 0
    assert listed["title"] == payload["title"]
    assert listed["payValue"] == payload["payValue"]
    assert listed["stock"] is None
    assert listed["beginTime"] is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"title": None}, "title"), ({"shopId": "x"}, "shopId"), ({"type": 1}, "type"), ({"actualValue": None}, "actual")],
)
def test_add_voucher_invalid_is_400(
    call: Callable[[dict[str, Any]], dict[str, Any]], changes: dict[str, Any], field: str
) -> None:
    shop_id = random.randint(10**12, 10**15)
    payload = json.loads(load_event("seckill_api_add_voucher.json")["body"])
    payload["shopId"] = shop_id
    for name, value in changes.items():
        if value is None:
            payload.pop(name)
        else:
            payload[name] = value
    response = call(admin_event("seckill_api_add_voucher.json", payload))
    expect_refusal(response, 400, "BAD_REQUEST")
    assert field in body(response)["errorMsg"]
    assert body(call(list_event(shop_id)))["data"] == []


# --- the rest ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/nope"), ("DELETE", "/voucher-order/123"), ("GET", "/voucher/seckill"), ("POST", "/voucher/list/1")],
)
def test_unknown_route_is_404(call: Callable[[dict[str, Any]], dict[str, Any]], method: str, path: str) -> None:
    event = copy.deepcopy(load_event("seckill_api_list_vouchers.json"))
    event.pop("pathParameters")
    event["routeKey"] = event["requestContext"]["routeKey"] = f"{method} {path}"
    event["requestContext"]["http"]["method"] = method
    with_path(event, path)
    response = call(event)
    assert response["statusCode"] == 404, response
    assert body(response)["success"] is False


def test_a_decided_order_is_answered_from_redis_without_mysql(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    creds: Credentials,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Clients poll: once an order's fate is final (here PAID), its hint says so, and
    the polls stop reaching MySQL (here unreachable) until the hint expires. CONFIRMED
    is not final: a payment, a cancel or the deadline may have closed the hold since."""
    voucher_id, user_id = make_voucher(stock=2), new_user()
    order_id = body(buy(voucher_id, user_id))["data"]
    persist(handlers, context, sqs, order_queue)
    module = module_of(handlers["SeckillApiFunction"])
    working = module.db
    unreachable = Credentials("127.0.0.1", closed_port(), creds.user, creds.password, creds.database)
    monkeypatch.setattr(module, "db", Database(unreachable))
    expect_refusal(call(status_event(order_id, user_id)), 503, "TRY_AGAIN")

    monkeypatch.setattr(module, "db", working)
    payment = load_event("seckill_api_payment.json", body=json.dumps({"paymentId": "pay-1"}))
    assert call(with_path(payment, f"/voucher-order/{order_id}/payment", orderId=order_id))["statusCode"] == 200
    through_mysql = body(call(status_event(order_id, user_id)))["data"]

    monkeypatch.setattr(module, "db", Database(unreachable))
    response = call(status_event(order_id, user_id))
    assert response["statusCode"] == 200, response
    assert body(response)["data"] == through_mysql
    assert through_mysql["status"] == "PAID"
    # Another user still learns nothing.
    expect_refusal(call(status_event(order_id, new_user())), 503, "TRY_AGAIN")


def test_the_status_route_needs_no_redis_to_be_right(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    redis: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    voucher_id, user_id = make_voucher(stock=2), new_user()
    order_id = body(buy(voucher_id, user_id))["data"]
    persist(handlers, context, sqs, order_queue)
    redis.delete(keys.order_status(int(order_id)))  # the hint expired or was lost
    assert body(call(status_event(order_id, user_id)))["data"]["status"] == "CONFIRMED"

    module = module_of(handlers["SeckillApiFunction"])
    monkeypatch.setattr(module, "redis", redis_lib.Redis(port=closed_port(), socket_connect_timeout=0.2, retry=None))
    response = call(status_event(order_id, user_id))
    assert response["statusCode"] == 200, response
    assert body(response)["data"]["status"] == "CONFIRMED"


# --- edges of the admin input -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"beginTime": "0001-01-01T00:00:00+01:00"}, "beginTime"),
        ({"endTime": "9999-12-31T23:59:59-01:00"}, "endTime"),
        ({"beginTime": "2020-01-01T00:00:00Z", "endTime": "2020-01-02T00:00:00Z"}, "endTime"),
    ],
    ids=["begin-in-year-0-utc", "end-in-year-10000-utc", "window-already-ended"],
)
def test_add_seckill_voucher_times_out_of_range_or_past_are_400_naming_the_field(
    call: Callable[[dict[str, Any]], dict[str, Any]], changes: dict[str, Any], field: str
) -> None:
    shop_id = random.randint(10**12, 10**15)
    response = call(admin_event("seckill_api_add_seckill_voucher.json", seckill_voucher_body(shop_id, **changes)))
    expect_refusal(response, 400, "BAD_REQUEST")
    assert body(response)["errorMsg"].startswith(f"{field}:"), response
    assert body(call(list_event(shop_id)))["data"] == []


# --- POST /voucher/seckill/{voucherId}/stop -----------------------------------------------------


def stop_event(voucher_id: int | str, authorizer: dict[str, Any] | None = None) -> dict[str, Any]:
    event = with_path(
        load_event("seckill_api_stop_voucher.json"), f"/voucher/seckill/{voucher_id}/stop", voucherId=str(voucher_id)
    )
    if authorizer is not None:
        event["requestContext"]["authorizer"] = authorizer
    return event


def test_stopped_sale_answers_ended_leaves_the_list_and_is_withdrawn_in_mysql(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    make_voucher: Callable[..., int],
    order_queue: str,
    db: Database,
    redis: Any,
    scripts: Scripts,
) -> None:
    shop_id = random.randint(10**12, 10**15)
    voucher_id = make_voucher(stock=5, shop_id=shop_id)
    assert buy(voucher_id, new_user())["statusCode"] == 202

    response = call(stop_event(voucher_id))

    assert response["statusCode"] == 200, response
    assert body(response)["data"] == voucher_id
    expect_refusal(buy(voucher_id, new_user()), 409, "ENDED")
    assert body(call(list_event(shop_id)))["data"] == []
    assert db_rows(db, "SELECT status FROM tb_voucher WHERE id = %s", voucher_id) == [{"status": 2}]
    assert redis.hgetall(keys.window(voucher_id)) == {"begin": "0", "end": "0"}
    # Idempotent.
    assert call(stop_event(voucher_id))["statusCode"] == 200
    expect_refusal(buy(voucher_id, new_user()), 409, "ENDED")

    # Redis loses the voucher: recovery still knows it (its pending order needs resolving)
    # and brings it back closed.
    assert voucher_id in voucher_ids_on_sale(db)
    redis.delete(keys.stock(voucher_id), keys.window(voucher_id), keys.buyers(voucher_id))
    restored = restore(db, scripts, voucher_id, "missing")
    assert restored is not None
    assert restored.applied
    expect_refusal(buy(voucher_id, new_user()), 409, "ENDED")


def test_stop_when_redis_fails_is_503_and_reconciliation_finishes_it(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    make_voucher: Callable[..., int],
    db: Database,
    redis: Any,
    scripts: Scripts,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    voucher_id = make_voucher(stock=5)
    module = module_of(handlers["SeckillApiFunction"])
    with monkeypatch.context() as patch:
        patch.setattr(module, "redis", redis_lib.Redis(port=closed_port(), socket_connect_timeout=0.2, retry=None))
        expect_try_again(call(stop_event(voucher_id)))
    # MySQL already says withdrawn; Redis still has the sale open until repaired.
    assert db_rows(db, "SELECT status FROM tb_voucher WHERE id = %s", voucher_id) == [{"status": 2}]
    assert redis.hget(keys.window(voucher_id), "end") != "0"

    restored = restore(db, scripts, voucher_id, "repair")

    assert restored is not None
    assert restored.applied
    expect_refusal(buy(voucher_id, new_user()), 409, "ENDED")


def test_stop_an_unknown_or_ordinary_voucher_is_404(
    call: Callable[[dict[str, Any]], dict[str, Any]], db: Database
) -> None:
    expect_refusal(call(stop_event(random.randint(10**15, 10**16))), 404, "VOUCHER_NOT_FOUND")
    ordinary = body(
        call(admin_event("seckill_api_add_voucher.json", {"shopId": 1, "title": "t", "payValue": 1, "actualValue": 2}))
    )["data"]
    expect_refusal(call(stop_event(ordinary)), 404, "VOUCHER_NOT_FOUND")
    assert db_rows(db, "SELECT status FROM tb_voucher WHERE id = %s", ordinary) == [{"status": 1}]


@pytest.mark.parametrize("voucher_id", ["abc", "0", "-1", "07"])
def test_stop_a_bad_id_is_400(call: Callable[[dict[str, Any]], dict[str, Any]], voucher_id: str) -> None:
    response = call(stop_event(voucher_id))
    expect_refusal(response, 400, "BAD_REQUEST")
    assert "voucherId" in body(response)["errorMsg"]


@pytest.mark.parametrize("authorizer", [{}, {"lambda": {"userId": "1010"}}, {"iam": {}}])
def test_stop_without_iam_is_403(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    make_voucher: Callable[..., int],
    db: Database,
    authorizer: dict[str, Any],
) -> None:
    voucher_id = make_voucher()
    expect_refusal(call(stop_event(voucher_id, authorizer)), 403, "FORBIDDEN")
    assert db_rows(db, "SELECT status FROM tb_voucher WHERE id = %s", voucher_id) == [{"status": 1}]


# --- paging the voucher list ----------------------------------------------------------------------


def page_event(shop_id: int, query: dict[str, str]) -> dict[str, Any]:
    event = list_event(shop_id)
    event["rawQueryString"] = urlencode(query)
    event["queryStringParameters"] = query
    return event


def next_page(response: dict[str, Any]) -> dict[str, str] | None:
    """The query of the ``Link: <...>; rel="next"`` header, if there is one."""
    link = (response.get("headers") or {}).get("Link")
    if link is None:
        return None
    target, rel = link.split("; ")
    assert rel == 'rel="next"'
    return dict(parse_qsl(urlsplit(target.strip("<>")).query))


def test_the_list_is_paged_with_a_link_to_the_next_page(
    call: Callable[[dict[str, Any]], dict[str, Any]], db: Database
) -> None:
    shop_id = random.randint(10**12, 10**15)
    made = [
        vouchers.create_voucher(db, VoucherIn(shop_id=shop_id, title=f"v{i}", pay_value=1, actual_value=2))
        for i in range(25)
    ]

    first = call(list_event(shop_id))  # no parameters: the default page size
    assert [v["id"] for v in body(first)["data"]] == made[:20]
    assert next_page(first) == {"limit": "20", "after": str(made[19])}

    seen: list[int] = []
    query: dict[str, str] | None = {"limit": "10"}
    while query is not None:
        response = call(page_event(shop_id, query))
        assert response["statusCode"] == 200, response
        page = body(response)["data"]
        assert isinstance(page, list)
        assert len(page) <= 10
        seen += [v["id"] for v in page]
        query = next_page(response)
    assert seen == made

    # A page that ends exactly at the last voucher says there is no next one.
    last = call(page_event(shop_id, {"limit": "5", "after": str(made[19])}))
    assert [v["id"] for v in body(last)["data"]] == made[20:]
    assert next_page(last) is None


def test_the_page_size_is_capped(call: Callable[[dict[str, Any]], dict[str, Any]], db: Database) -> None:
    shop_id = random.randint(10**12, 10**15)
    for i in range(101):
        vouchers.create_voucher(db, VoucherIn(shop_id=shop_id, title=f"v{i}", pay_value=1, actual_value=2))
    response = call(page_event(shop_id, {"limit": "100"}))
    assert len(body(response)["data"]) == 100
    assert next_page(response) is not None


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": ""}, "limit"),
        ({"limit": "²"}, "limit"),
        ({"after": "abc"}, "after"),
        ({"after": "0"}, "after"),
        ({"limit": "5", "after": "-3"}, "after"),
    ],
)
def test_bad_paging_parameters_are_400_naming_them(
    call: Callable[[dict[str, Any]], dict[str, Any]], query: dict[str, str], name: str
) -> None:
    response = call(page_event(random.randint(10**12, 10**15), query))
    expect_refusal(response, 400, "BAD_REQUEST")
    assert body(response)["errorMsg"].startswith(name), response


@pytest.mark.parametrize(
    ("raw", "name"), [("limit=5&limit=6", "limit"), ("after=5&after=6", "after"), ("limit=5&after=1&after=2", "after")]
)
def test_a_repeated_paging_parameter_is_400_naming_it(
    call: Callable[[dict[str, Any]], dict[str, Any]], raw: str, name: str
) -> None:
    """API Gateway hands a repeated parameter over joined by commas ("5,6"), which is no number."""
    event = list_event(random.randint(10**12, 10**15))
    event["rawQueryString"] = raw
    event["queryStringParameters"] = {key: ",".join(values) for key, values in parse_qs(raw).items()}
    response = call(event)
    expect_refusal(response, 400, "BAD_REQUEST")
    assert body(response)["errorMsg"].startswith(name), response


# --- an accepted order is never "not found" to its owner -----------------------------------------


def test_an_order_unknown_to_both_while_redis_has_lost_its_data_is_503_not_404(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    buy: Callable[[int, int], dict[str, Any]],
    make_voucher: Callable[..., int],
    order_queue: str,
    redis: Any,
) -> None:
    voucher_id, user_id = make_voucher(stock=2), new_user()
    order_id = body(buy(voucher_id, user_id))["data"]  # on the queue, not in MySQL yet
    redis.delete(keys.order_status(int(order_id)), keys.loaded())  # Redis lost its data
    try:
        expect_refusal(call(status_event(order_id, user_id)), 503, "TRY_AGAIN")
    finally:
        redis.set(keys.loaded(), 1)
    # Once Redis holds its data again, an order nobody knows is really unknown.
    expect_refusal(call(status_event(order_id, user_id)), 404, "ORDER_NOT_FOUND")


def test_the_pending_hint_outlives_the_dead_letter_queue(
    buy: Callable[[int, int], dict[str, Any]],
    make_voucher: Callable[..., int],
    order_queue: str,
    redis: Any,
    template: Template,
) -> None:
    retention = int(template.resource("OrderDeadLetterQueue")["Properties"]["MessageRetentionPeriod"])
    assert Settings.from_env({}).status_ttl_seconds > retention
    order_id = body(buy(make_voucher(stock=1), new_user()))["data"]
    assert redis.ttl(keys.order_status(int(order_id))) > retention


def test_redis_down_creating_a_seckill_voucher_is_503_and_writes_nothing(
    call: Callable[[dict[str, Any]], dict[str, Any]], handlers: dict[str, Handler], monkeypatch: pytest.MonkeyPatch
) -> None:
    shop_id = random.randint(10**12, 10**15)
    module = module_of(handlers["SeckillApiFunction"])
    with monkeypatch.context() as patch:
        patch.setattr(module, "redis", redis_lib.Redis(port=closed_port(), socket_connect_timeout=0.2, retry=None))
        expect_try_again(
            call(admin_event("seckill_api_add_seckill_voucher.json", seckill_voucher_body(shop_id))), "redis"
        )
    assert body(call(list_event(shop_id)))["data"] == []
