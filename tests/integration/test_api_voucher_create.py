"""SeckillApiFunction, POST /voucher/seckill and POST /voucher: creating vouchers (IAM only);
through the ``events/`` files (docs/contract.md), against real Redis, MariaDB and a moto SQS server."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis as redis_lib

from seckill.infra import keys
from tests.helpers import (
    Handler,
    admin_event,
    body,
    closed_port,
    drain,
    expect_refusal,
    expect_try_again,
    list_event,
    load_event,
    module_of,
    new_user,
    seckill_voucher_body,
)


@pytest.fixture
def created_vouchers(redis: Any) -> Iterator[list[int]]:
    """Vouchers created through the admin route; their Redis preload is removed afterwards."""
    made: list[int] = []
    yield made
    for voucher_id in made:
        redis.delete(*keys.voucher_keys(voucher_id))


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


@pytest.mark.parametrize(
    ("begin", "end", "listed"),
    [
        # Without an offset: read in SECKILL_TIMEZONE, unset in the suite (UTC).
        ("2031-01-02T03:04:05", "2031-01-02T05:00:00", ("2031-01-02T03:04:05.000Z", "2031-01-02T05:00:00.000Z")),
        # RFC 3339 allows a lowercase "t" and "z".
        ("2031-01-02t03:04:05z", "2031-01-02T05:00:00.5z", ("2031-01-02T03:04:05.000Z", "2031-01-02T05:00:00.500Z")),
    ],
)
def test_add_seckill_voucher_times_as_written(
    call: Callable[[dict[str, Any]], dict[str, Any]],
    created_vouchers: list[int],
    begin: str,
    end: str,
    listed: tuple[str, str],
) -> None:
    shop_id = random.randint(10**12, 10**15)
    payload = seckill_voucher_body(shop_id, beginTime=begin, endTime=end)
    response = call(admin_event("seckill_api_add_seckill_voucher.json", payload))
    assert response["statusCode"] == 201, response
    created_vouchers.append(body(response)["data"])
    (voucher,) = body(call(list_event(shop_id)))["data"]
    assert (voucher["beginTime"], voucher["endTime"]) == listed


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
