"""The hold routes of SeckillApiFunction (payment, cancel) and the status route's hold
states, through the ``events/`` files, against real Redis, MariaDB and moto SQS."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest

from seckill import hints
from seckill.infra import keys
from seckill.infra.db import Credentials, Database
from tests.helpers import (
    Handler,
    as_user,
    body,
    cancel_event,
    db_rows,
    new_user,
    payment_event,
    payment_of,
    persist,
    seckill_event,
    status_event,
    stop_mysql,
)

Call = Callable[[dict[str, Any]], dict[str, Any]]
Sold = Callable[..., tuple[int, str, int]]


def answer(response: dict[str, Any], status_code: int, code: str | None = None) -> dict[str, Any]:
    """The response's ``Result``, once its status and code are the expected ones."""
    assert response["statusCode"] == status_code, response
    assert body(response)["code"] == code, response
    return body(response)


@pytest.fixture
def sold(
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    sqs: Any,
    order_queue: str,
    make_voucher: Callable[..., int],
    redis: Any,
) -> Iterator[Sold]:
    """A voucher of stock 2, one unit pressed for by a new user: (voucher id, order id,
    user id); stored (CONFIRMED) by the persister unless ``stored`` is False."""
    made: list[int] = []

    def make(*, stored: bool = True) -> tuple[int, str, int]:
        voucher_id, user_id = make_voucher(stock=2), new_user()
        made.append(voucher_id)
        order_id = answer(buy(voucher_id, user_id), 202)["data"]
        if stored:
            persist(handlers, context, sqs, order_queue)
        return voucher_id, order_id, user_id

    yield make
    for voucher_id in made:
        redis.delete(keys.returned(voucher_id))


def stocks(db: Database, redis: Any, voucher_id: int) -> tuple[int, int]:
    """(MySQL stock, Redis stock) of the voucher."""
    [row] = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    return int(row["stock"]), int(redis.get(keys.stock(voucher_id)))


def overdue(db: Database, order_id: str) -> None:
    """Its deadline passed (no expiry has run)."""
    db_rows(db, "UPDATE tb_voucher_order SET pay_by = NOW(3) - INTERVAL 1 SECOND WHERE id = %s", int(order_id))


# --- POST /voucher-order/{orderId}/payment ---------------------------------------------------------


def test_a_payment_pays_once_and_the_status_route_shows_it(call: Call, sold: Sold, db: Database, redis: Any) -> None:
    voucher_id, order_id, user_id = sold()
    confirmed = answer(call(status_event(order_id, user_id)), 200)["data"]
    assert confirmed["status"] == "CONFIRMED"
    assert confirmed["paidAt"] is None

    paid = answer(call(payment_event(order_id)), 200)["data"]
    assert {k: paid[k] for k in ("orderId", "voucherId", "userId", "status", "payBy")} == {
        "orderId": order_id,
        "voucherId": voucher_id,
        "userId": user_id,
        "status": "PAID",
        "payBy": confirmed["payBy"],
    }
    assert datetime.fromisoformat(paid["paidAt"]) < datetime.fromisoformat(paid["payBy"])
    # The same payment again (its answer was lost): the same answer, nothing changes.
    assert answer(call(payment_event(order_id)), 200)["data"] == paid
    answer(call(payment_event(order_id, payment_of(order_id, 2))), 409, "ALREADY_PAID")
    assert answer(call(status_event(order_id, user_id)), 200)["data"] == paid
    answer(call(cancel_event(order_id, user_id)), 409, "PAID")
    assert stocks(db, redis, voucher_id) == (1, 1)


def test_a_payment_that_paid_another_order_is_409_payment_used(call: Call, sold: Sold) -> None:
    _, paid, _ = sold()
    _, order_id, user_id = sold()
    answer(call(payment_event(paid)), 200)
    answer(call(payment_event(order_id, payment_of(paid))), 409, "PAYMENT_USED")
    assert answer(call(status_event(order_id, user_id)), 200)["data"]["status"] == "CONFIRMED"


def test_the_payment_route_needs_iam_and_names_bad_input(call: Call, sold: Sold) -> None:
    _, order_id, _ = sold()
    answer(call(as_user(payment_event(order_id), None)), 403, "FORBIDDEN")
    answer(call(as_user(payment_event(order_id), 1010)), 403, "FORBIDDEN")  # a user's token is not enough

    refused = answer(call(payment_event(order_id, body='{"paymentId": ""}')), 400, "BAD_REQUEST")
    assert refused["errorMsg"].startswith("paymentId:")
    assert answer(call(payment_event(order_id, body="not json")), 400, "BAD_REQUEST")["errorMsg"].startswith("body:")
    assert answer(call(payment_event("0")), 400, "BAD_REQUEST")["errorMsg"].startswith("orderId")
    unknown = str(random.randint(2**60, 2**62))
    answer(call(payment_event(unknown)), 404, "ORDER_NOT_FOUND")
    # Nothing was paid on the way.
    answer(call(payment_event(order_id, payment_of(order_id, 9))), 200)


def test_a_payment_after_pay_by_is_expired_before_any_expiry_ran(
    call: Call, sold: Sold, db: Database, redis: Any
) -> None:
    voucher_id, order_id, user_id = sold()
    overdue(db, order_id)
    # Past its deadline the order shows EXPIRED at once: nothing can pay it any more.
    assert answer(call(status_event(order_id, user_id)), 200)["data"]["status"] == "EXPIRED"
    assert stocks(db, redis, voucher_id) == (1, 1)  # its expiry has not run

    answer(call(payment_event(order_id)), 409, "EXPIRED")
    # It expired as if the expiry had run: its unit is back, once.
    assert stocks(db, redis, voucher_id) == (2, 2)
    answer(call(payment_event(order_id)), 409, "EXPIRED")
    answer(call(cancel_event(order_id, user_id)), 409, "EXPIRED")
    assert stocks(db, redis, voucher_id) == (2, 2)
    [row] = db_rows(db, "SELECT status, close_reason, pay_time FROM tb_voucher_order WHERE id = %s", int(order_id))
    assert (row["status"], row["close_reason"], row["pay_time"]) == (4, "EXPIRED", None)
    assert answer(call(status_event(order_id, user_id)), 200)["data"]["status"] == "EXPIRED"
    # One order per user per voucher, whatever its fate.
    answer(call(seckill_event(voucher_id, user_id)), 409, "DUPLICATE_ORDER")


def test_an_order_on_its_way_is_pending_and_a_failed_one_failed(
    call: Call,
    sold: Sold,
    handlers: dict[str, Handler],
    context: Any,
    sqs: Any,
    order_queue: str,
    db: Database,
) -> None:
    voucher_id, order_id, user_id = sold(stored=False)
    answer(call(payment_event(order_id)), 409, "PENDING")
    answer(call(cancel_event(order_id, user_id)), 409, "PENDING")
    # Another user learns nothing of it.
    answer(call(cancel_event(order_id, new_user())), 404, "ORDER_NOT_FOUND")

    # The database ran out (Redis had drifted): the persister fails the order.
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", voucher_id)
    persist(handlers, context, sqs, order_queue)
    answer(call(payment_event(order_id)), 409, "FAILED")
    answer(call(cancel_event(order_id, user_id)), 409, "FAILED")
    answer(call(cancel_event(order_id, new_user())), 404, "ORDER_NOT_FOUND")
    assert answer(call(status_event(order_id, user_id)), 200)["data"]["status"] == "FAILED"


def test_a_payment_with_mysql_down_is_503_and_pays_nothing(
    call: Call,
    sold: Sold,
    handlers: dict[str, Handler],
    creds: Credentials,
    monkeypatch: pytest.MonkeyPatch,
    db: Database,
) -> None:
    _, order_id, user_id = sold()
    stop_mysql(handlers, creds, monkeypatch)
    answer(call(payment_event(order_id)), 503, "TRY_AGAIN")
    answer(call(cancel_event(order_id, user_id)), 503, "TRY_AGAIN")
    [row] = db_rows(db, "SELECT status FROM tb_voucher_order WHERE id = %s", int(order_id))
    assert row["status"] == 1


# --- POST /voucher-order/{orderId}/cancel ----------------------------------------------------------


def test_the_owner_cancels_and_the_unit_is_sold_again(
    call: Call,
    sold: Sold,
    db: Database,
    redis: Any,
    handlers: dict[str, Handler],
    context: Any,
    sqs: Any,
    order_queue: str,
    buy: Callable[[int, int], dict[str, Any]],
) -> None:
    voucher_id, order_id, user_id = sold()
    cancelled = answer(call(cancel_event(order_id, user_id)), 200)["data"]
    assert (cancelled["status"], cancelled["paidAt"]) == ("CANCELLED", None)
    assert answer(call(cancel_event(order_id, user_id)), 200)["data"] == cancelled  # again: nothing changes
    assert stocks(db, redis, voucher_id) == (2, 2)
    assert answer(call(status_event(order_id, user_id)), 200)["data"] == cancelled
    answer(call(payment_event(order_id)), 409, "CANCELLED")
    answer(call(seckill_event(voucher_id, user_id)), 409, "DUPLICATE_ORDER")

    # Both units sell to others.
    for _ in range(2):
        answer(buy(voucher_id, new_user()), 202)
    answer(call(seckill_event(voucher_id, new_user())), 409, "SOLD_OUT")
    persist(handlers, context, sqs, order_queue)
    assert stocks(db, redis, voucher_id) == (0, 0)


def test_cancel_of_another_users_order_is_answered_as_an_unknown_one(
    call: Call, sold: Sold, db: Database, redis: Any
) -> None:
    voucher_id, order_id, _ = sold()
    stranger = call(cancel_event(order_id, new_user()))
    unknown = call(cancel_event(str(random.randint(2**60, 2**62)), new_user()))
    assert (stranger["statusCode"], stranger["body"]) == (unknown["statusCode"], unknown["body"])
    assert body(unknown)["code"] == "ORDER_NOT_FOUND"
    answer(call(cancel_event(order_id, None)), 401, "UNAUTHORIZED")
    assert answer(call(cancel_event("x", 1)), 400, "BAD_REQUEST")["errorMsg"].startswith("orderId")
    assert stocks(db, redis, voucher_id) == (1, 1)


def test_another_users_cancel_is_not_found_without_waiting_for_the_voucher_lock(
    call: Call, sold: Sold, creds: Credentials, db: Database, redis: Any
) -> None:
    voucher_id, order_id, _ = sold()
    holder = Database(creds)  # a transaction of its own holds the voucher's row, as a persister would
    locked, release = threading.Event(), threading.Event()

    def hold_the_row(cursor: Any) -> None:
        cursor.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s FOR UPDATE", (voucher_id,))
        locked.set()
        release.wait(60)

    holding = threading.Thread(target=holder.run, args=(hold_the_row,))
    holding.start()
    try:
        assert locked.wait(30)
        answers: list[dict[str, Any]] = []
        stranger = threading.Thread(target=lambda: answers.append(call(cancel_event(order_id, new_user()))))
        stranger.start()
        # The row stays locked until the stranger is answered: a cancel that locked
        # before checking the owner would wait for it (and end in a lock wait timeout).
        stranger.join(timeout=30)
        assert not stranger.is_alive(), "another user's cancel waited for the voucher's row lock"
    finally:
        release.set()
        holding.join(timeout=60)
        holder.close()
    answer(answers[0], 404, "ORDER_NOT_FOUND")
    assert stocks(db, redis, voucher_id) == (1, 1)


# --- the status route ------------------------------------------------------------------------------


def test_the_status_route_never_goes_back_to_confirmed_after_a_payment(call: Call, sold: Sold, redis: Any) -> None:
    _, order_id, user_id = sold()
    confirmed = answer(call(status_event(order_id, user_id)), 200)["data"]
    paid = answer(call(payment_event(order_id)), 200)["data"]
    # A late CONFIRMED hint (the persister's write-back racing the payment) is not final:
    # the route asks MySQL.
    hints.replace(redis, confirmed)
    assert answer(call(status_event(order_id, user_id)), 200)["data"] == paid
    # Without any hint (expired, or Redis lost it), MySQL answers alike.
    redis.delete(keys.order_status(int(order_id)))
    assert answer(call(status_event(order_id, user_id)), 200)["data"] == paid
