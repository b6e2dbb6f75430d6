"""SeckillApiFunction, POST /voucher/seckill/{voucherId}/stop: ending a sale early (IAM only);
through the ``events/`` files (docs/contract.md), against real Redis, MariaDB and a moto SQS server."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import redis as redis_lib

from seckill.infra import keys
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.repair.restore import restore, voucher_ids_on_sale
from tests.helpers import (
    Handler,
    admin_event,
    body,
    closed_port,
    db_rows,
    expect_refusal,
    expect_try_again,
    list_event,
    load_event,
    module_of,
    new_user,
    with_path,
)


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
