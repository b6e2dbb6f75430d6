"""SeckillApiFunction, POST /voucher-order/seckill/{voucherId}: the press, through the ``events/`` files
(docs/contract.md), against real Redis, MariaDB and a moto SQS server."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from seckill.infra import keys
from seckill.messages import OrderQueue
from tests.helpers import (
    Handler,
    as_user,
    body,
    drain,
    expect_refusal,
    module_of,
    new_user,
    seckill_event,
)


def status_hints_of(redis: Any, user_id: int) -> list[int]:
    """Order ids whose status-route hint names this user."""
    found = []
    for key in redis.scan_iter(keys.order_status(0).removesuffix("0") + "*", count=1000):
        hint = redis.get(key)
        if hint and json.loads(hint).get("userId") == user_id:
            found.append(int(key.rsplit(":", 1)[1]))
    return found


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
