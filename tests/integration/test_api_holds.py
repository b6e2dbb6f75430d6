"""The hold routes of SeckillApiFunction (payment, cancel) and the status route's hold
states, through the ``events/`` files, against real Redis, MariaDB and moto SQS."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from seckill import hints
from seckill.infra import keys
from seckill.infra.db import Credentials, Database
from seckill_local.feeder import sqs_event
from tests.helpers import body, closed_port, db_rows, drain, load_event, new_user

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
Call = Callable[[dict[str, Any]], dict[str, Any]]


def event(name: str, path: str, order_id: str, user_id: int | None = None, **changes: Any) -> dict[str, Any]:
    """An ``events/`` file for another order (and user, on a user route)."""
    made = load_event(name, **changes)
    made["rawPath"] = made["requestContext"]["http"]["path"] = path
    made["pathParameters"] = {"orderId": order_id}
    if user_id is not None:
        made["requestContext"]["authorizer"] = {"lambda": {"userId": str(user_id)}}
    return made


def payment(order_id: str, payment_id: str = "pay-1", **changes: Any) -> dict[str, Any]:
    changes.setdefault("body", json.dumps({"paymentId": payment_id}))
    return event("seckill_api_payment.json", f"/voucher-order/{order_id}/payment", order_id, **changes)


def cancel(order_id: str, user_id: int) -> dict[str, Any]:
    return event("seckill_api_cancel.json", f"/voucher-order/{order_id}/cancel", order_id, user_id)


def status(order_id: str, user_id: int) -> dict[str, Any]:
    return event("seckill_api_order_status.json", f"/voucher-order/{order_id}", order_id, user_id)


def press(voucher_id: int, user_id: int) -> dict[str, Any]:
    made = load_event("seckill_api_seckill.json")
    made["rawPath"] = made["requestContext"]["http"]["path"] = f"/voucher-order/seckill/{voucher_id}"
    made["pathParameters"] = {"voucherId": str(voucher_id)}
    made["requestContext"]["authorizer"] = {"lambda": {"userId": str(user_id)}}
    return made


@pytest.fixture
def call(handlers: dict[str, Handler], context: Any) -> Call:
    """Invoke SeckillApiFunction; every answer is a ``Result``, never a stack trace."""

    def invoke(request: dict[str, Any]) -> dict[str, Any]:
        response = handlers["SeckillApiFunction"](json.loads(json.dumps(request)), context)
        assert "Traceback" not in response["body"], response
        result = body(response)
        assert set(result) == {"success", "data", "errorMsg", "code"}, result
        assert result["success"] is (response["statusCode"] < 400), response
        return response

    return invoke


def answer(response: dict[str, Any], status_code: int, code: str | None = None) -> dict[str, Any]:
    assert response["statusCode"] == status_code, response
    assert body(response)["code"] == code, response
    return body(response)


@pytest.fixture
def hint_cleanup(redis: Any) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for order_id in made:
        redis.delete(keys.order_status(int(order_id)))


@pytest.fixture
def sold(
    call: Call,
    handlers: dict[str, Handler],
    context: Any,
    sqs: Any,
    order_queue: str,
    make_voucher: Callable[..., int],
    redis: Any,
    hint_cleanup: list[str],
) -> Iterator[Callable[..., tuple[int, str, int]]]:
    """A voucher of stock 2, one unit pressed for by a new user: (voucher id, order id,
    user id); stored (CONFIRMED) by the persister unless ``stored`` is False."""

    vouchers: list[int] = []

    def make(*, stored: bool = True) -> tuple[int, str, int]:
        voucher_id, user_id = make_voucher(stock=2), new_user()
        vouchers.append(voucher_id)
        order_id = answer(call(press(voucher_id, user_id)), 202)["data"]
        hint_cleanup.append(order_id)
        if stored:
            persist(handlers, context, sqs, order_queue)
        return voucher_id, order_id, user_id

    yield make
    for voucher_id in vouchers:
        redis.delete(keys.returned(voucher_id))


def persist(handlers: dict[str, Handler], context: Any, sqs: Any, queue_url: str) -> None:
    """What is on the queue, handed to the persister as the event source mapping would."""
    messages = drain(sqs, queue_url)
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    assert handlers["OrderPersisterFunction"](sqs_event(messages, arn), context) == {"batchItemFailures": []}


def stocks(db: Database, redis: Any, voucher_id: int) -> tuple[int, int]:
    [row] = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    return int(row["stock"]), int(redis.get(keys.stock(voucher_id)))


def overdue(db: Database, order_id: str) -> None:
    db_rows(db, "UPDATE tb_voucher_order SET pay_by = NOW(3) - INTERVAL 1 SECOND WHERE id = %s", int(order_id))


def module_of(handlers: dict[str, Handler]) -> Any:
    return sys.modules[handlers["SeckillApiFunction"].__module__]


# --- POST /voucher-order/{orderId}/payment ---------------------------------------------------------


def test_a_payment_pays_once_and_the_status_route_shows_it(
    call: Call, sold: Callable[..., tuple[int, str, int]], db: Database, redis: Any
) -> None:
    voucher_id, order_id, user_id = sold()
    confirmed = answer(call(status(order_id, user_id)), 200)["data"]
    assert confirmed["status"] == "CONFIRMED"
    assert confirmed["paidAt"] is None

    paid = answer(call(payment(order_id, "pay-1")), 200)["data"]
    assert {k: paid[k] for k in ("orderId", "voucherId", "userId", "status", "payBy")} == {
        "orderId": order_id,
        "voucherId": voucher_id,
        "userId": user_id,
        "status": "PAID",
        "payBy": confirmed["payBy"],
    }
    assert datetime.fromisoformat(paid["paidAt"]) < datetime.fromisoformat(paid["payBy"])
    # The same payment again (its answer was lost): the same answer, nothing changes.
    assert answer(call(payment(order_id, "pay-1")), 200)["data"] == paid
    answer(call(payment(order_id, "pay-2")), 409, "ALREADY_PAID")
    assert answer(call(status(order_id, user_id)), 200)["data"] == paid
    answer(call(cancel(order_id, user_id)), 409, "PAID")
    assert stocks(db, redis, voucher_id) == (1, 1)


def test_the_payment_route_needs_iam_and_names_bad_input(call: Call, sold: Callable[..., tuple[int, str, int]]) -> None:
    _, order_id, _ = sold()
    unsigned = payment(order_id)
    unsigned["requestContext"].pop("authorizer")
    answer(call(unsigned), 403, "FORBIDDEN")
    as_user = payment(order_id)
    as_user["requestContext"]["authorizer"] = {"lambda": {"userId": "1010"}}
    answer(call(as_user), 403, "FORBIDDEN")

    refused = answer(call(payment(order_id, body='{"paymentId": ""}')), 400, "BAD_REQUEST")
    assert refused["errorMsg"].startswith("paymentId:")
    assert answer(call(payment(order_id, body="not json")), 400, "BAD_REQUEST")["errorMsg"].startswith("body:")
    bad_id = payment("0")
    assert answer(call(bad_id), 400, "BAD_REQUEST")["errorMsg"].startswith("orderId")
    unknown = str(random.randint(2**60, 2**62))
    answer(call(payment(unknown)), 404, "ORDER_NOT_FOUND")
    # Nothing was paid on the way.
    answer(call(payment(order_id, "pay-9")), 200)


def test_a_payment_after_pay_by_is_expired_before_any_expiry_ran(
    call: Call, sold: Callable[..., tuple[int, str, int]], db: Database, redis: Any
) -> None:
    voucher_id, order_id, user_id = sold()
    overdue(db, order_id)
    # Past its deadline the order shows EXPIRED at once: nothing can pay it any more.
    assert answer(call(status(order_id, user_id)), 200)["data"]["status"] == "EXPIRED"
    assert stocks(db, redis, voucher_id) == (1, 1)  # its expiry has not run

    answer(call(payment(order_id)), 409, "EXPIRED")
    # It expired as if the expiry had run: its unit is back, once.
    assert stocks(db, redis, voucher_id) == (2, 2)
    answer(call(payment(order_id)), 409, "EXPIRED")
    answer(call(cancel(order_id, user_id)), 409, "EXPIRED")
    assert stocks(db, redis, voucher_id) == (2, 2)
    [row] = db_rows(db, "SELECT status, close_reason, pay_time FROM tb_voucher_order WHERE id = %s", int(order_id))
    assert (row["status"], row["close_reason"], row["pay_time"]) == (4, "EXPIRED", None)
    assert answer(call(status(order_id, user_id)), 200)["data"]["status"] == "EXPIRED"
    # One order per user per voucher, whatever its fate.
    answer(call(press(voucher_id, user_id)), 409, "DUPLICATE_ORDER")


def test_an_order_on_its_way_is_pending_and_a_failed_one_failed(
    call: Call,
    sold: Callable[..., tuple[int, str, int]],
    handlers: dict[str, Handler],
    context: Any,
    sqs: Any,
    order_queue: str,
    db: Database,
) -> None:
    voucher_id, order_id, user_id = sold(stored=False)
    answer(call(payment(order_id)), 409, "PENDING")
    answer(call(cancel(order_id, user_id)), 409, "PENDING")
    # Another user learns nothing of it.
    answer(call(cancel(order_id, new_user())), 404, "ORDER_NOT_FOUND")

    # The database ran out (Redis had drifted): the persister fails the order.
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", voucher_id)
    persist(handlers, context, sqs, order_queue)
    answer(call(payment(order_id)), 409, "FAILED")
    answer(call(cancel(order_id, user_id)), 409, "FAILED")
    answer(call(cancel(order_id, new_user())), 404, "ORDER_NOT_FOUND")
    assert answer(call(status(order_id, user_id)), 200)["data"]["status"] == "FAILED"


def test_a_payment_with_mysql_down_is_503_and_pays_nothing(
    call: Call,
    sold: Callable[..., tuple[int, str, int]],
    handlers: dict[str, Handler],
    creds: Credentials,
    monkeypatch: pytest.MonkeyPatch,
    db: Database,
) -> None:
    _, order_id, user_id = sold()
    module = module_of(handlers)
    unreachable = Credentials("127.0.0.1", closed_port(), creds.user, creds.password, creds.database)
    monkeypatch.setattr(module, "db", Database(unreachable))
    answer(call(payment(order_id)), 503, "TRY_AGAIN")
    answer(call(cancel(order_id, user_id)), 503, "TRY_AGAIN")
    [row] = db_rows(db, "SELECT status FROM tb_voucher_order WHERE id = %s", int(order_id))
    assert row["status"] == 1


# --- POST /voucher-order/{orderId}/cancel ----------------------------------------------------------


def test_the_owner_cancels_and_the_unit_is_sold_again(
    call: Call,
    sold: Callable[..., tuple[int, str, int]],
    db: Database,
    redis: Any,
    handlers: dict[str, Handler],
    context: Any,
    sqs: Any,
    order_queue: str,
    hint_cleanup: list[str],
) -> None:
    voucher_id, order_id, user_id = sold()
    cancelled = answer(call(cancel(order_id, user_id)), 200)["data"]
    assert (cancelled["status"], cancelled["paidAt"]) == ("CANCELLED", None)
    assert answer(call(cancel(order_id, user_id)), 200)["data"] == cancelled  # again: nothing changes
    assert stocks(db, redis, voucher_id) == (2, 2)
    assert answer(call(status(order_id, user_id)), 200)["data"] == cancelled
    answer(call(payment(order_id)), 409, "CANCELLED")
    answer(call(press(voucher_id, user_id)), 409, "DUPLICATE_ORDER")

    # Both units sell to others.
    for _ in range(2):
        hint_cleanup.append(answer(call(press(voucher_id, new_user())), 202)["data"])
    answer(call(press(voucher_id, new_user())), 409, "SOLD_OUT")
    persist(handlers, context, sqs, order_queue)
    assert stocks(db, redis, voucher_id) == (0, 0)


def test_cancel_of_another_users_order_is_answered_as_an_unknown_one(
    call: Call, sold: Callable[..., tuple[int, str, int]], db: Database, redis: Any
) -> None:
    voucher_id, order_id, _ = sold()
    stranger = call(cancel(order_id, new_user()))
    unknown = call(cancel(str(random.randint(2**60, 2**62)), new_user()))
    assert (stranger["statusCode"], stranger["body"]) == (unknown["statusCode"], unknown["body"])
    assert body(unknown)["code"] == "ORDER_NOT_FOUND"
    anonymous = cancel(order_id, 1)
    anonymous["requestContext"].pop("authorizer")
    answer(call(anonymous), 401, "UNAUTHORIZED")
    assert answer(call(cancel("x", 1)), 400, "BAD_REQUEST")["errorMsg"].startswith("orderId")
    assert stocks(db, redis, voucher_id) == (1, 1)


# --- the status route ------------------------------------------------------------------------------


def test_the_status_route_never_goes_back_to_confirmed_after_a_payment(
    call: Call, sold: Callable[..., tuple[int, str, int]], redis: Any
) -> None:
    _, order_id, user_id = sold()
    confirmed = answer(call(status(order_id, user_id)), 200)["data"]
    paid = answer(call(payment(order_id)), 200)["data"]
    # A late CONFIRMED hint (the persister's write-back racing the payment) is not final:
    # the route asks MySQL.
    hints.replace(redis, confirmed)
    assert answer(call(status(order_id, user_id)), 200)["data"] == paid
    # Without any hint (expired, or Redis lost it), MySQL answers alike.
    redis.delete(keys.order_status(int(order_id)))
    assert answer(call(status(order_id, user_id)), 200)["data"] == paid
