"""SeckillApiFunction, GET /voucher-order/{orderId}: an order's status, through the ``events/`` files
(docs/contract.md), against real Redis, MariaDB and a moto SQS server."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis as redis_lib

from seckill.infra import keys
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database
from seckill_local.template import Template
from tests.helpers import (
    Handler,
    body,
    closed_port,
    db_rows,
    expect_refusal,
    expect_try_again,
    module_of,
    new_user,
    payment_event,
    persist,
    status_event,
    stop_mysql,
)


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
    assert call(payment_event(order_id))["statusCode"] == 200
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
