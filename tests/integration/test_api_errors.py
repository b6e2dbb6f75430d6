"""SeckillApiFunction, what every route shares: an unknown route, a programming error, MySQL
down or its connection killed; through the ``events/`` files (docs/contract.md), against real
Redis, MariaDB and a moto SQS server."""

from __future__ import annotations

import copy
import json
import random
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from seckill.infra.db import Credentials, Database, connect
from tests.helpers import (
    Handler,
    admin_event,
    body,
    expect_refusal,
    expect_try_again,
    list_event,
    load_event,
    module_of,
    new_user,
    seckill_voucher_body,
    status_event,
    stop_mysql,
    with_path,
)


@pytest.fixture
def mysql_down(handlers: dict[str, Handler], creds: Credentials, monkeypatch: pytest.MonkeyPatch) -> int:
    return stop_mysql(handlers, creds, monkeypatch)


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
