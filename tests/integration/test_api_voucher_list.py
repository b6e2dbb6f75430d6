"""SeckillApiFunction, GET /voucher/list/{shopId}: a shop's vouchers, paged, through the ``events/`` files
(docs/contract.md), against real Redis, MariaDB and a moto SQS server."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit

import pytest

from seckill import vouchers
from seckill.infra.db import Database
from seckill.vouchers import VoucherIn
from tests.helpers import (
    body,
    expect_refusal,
    list_event,
)


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
