"""SeckillApiFunction, GET /voucher-order/seckill/{voucherId}: the caller's own order on a voucher,
through the ``events/`` files (docs/contract.md), against real Redis, MariaDB and a moto SQS server.
How a buyer whose press's answer was lost learns its order id (docs/reservations.md)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import redis as redis_lib

from seckill import vouchers
from seckill.infra import keys
from seckill.infra.db import Credentials, Database
from seckill.messages import OrderMessage, OrderQueue, Sent
from seckill.persist.persistence import NOT_QUEUED
from seckill.press.gate import Gate, Mark
from seckill.press.orders import IN_FLIGHT_AFTER_REBUILD
from seckill.repair.reconcile import MIN_PENDING_AGE
from tests.helpers import (
    Handler,
    accept,
    as_user,
    body,
    closed_port,
    db_rows,
    expect_refusal,
    expect_try_again,
    load_event,
    mark,
    module_of,
    new_user,
    persist,
    reconcile_voucher,
    recover,
    seckill_event,
    status_event,
    stop_mysql,
    with_path,
)

Call = Callable[[dict[str, Any]], dict[str, Any]]


def my_order_event(voucher_id: int | str, user_id: int | None) -> dict[str, Any]:
    event = load_event("seckill_api_my_order.json")
    return as_user(with_path(event, f"/voucher-order/seckill/{voucher_id}", voucherId=str(voucher_id)), user_id)


def my_order(call: Call, voucher_id: int, user_id: int) -> dict[str, Any]:
    response = call(my_order_event(voucher_id, user_id))
    assert response["statusCode"] == 200, response
    data: dict[str, Any] = body(response)["data"]
    return data


def status(call: Call, order_id: str, user_id: int) -> dict[str, Any]:
    response = call(status_event(order_id, user_id))
    assert response["statusCode"] == 200, response
    data: dict[str, Any] = body(response)["data"]
    return data


def died_after_queueing(gate: Gate, queue: OrderQueue, voucher_id: int, user_id: int) -> OrderMessage:
    """A press whose function died once SQS had stored its order, before the promise and the
    202: the client saw a 5xx, and the mark says nobody was told."""
    message = accept(gate, voucher_id, user_id, promise=False)
    assert queue.send(message) is Sent.SENT
    return message


def age(redis: Any, voucher_id: int, user_id: int) -> None:
    """The mark as it is once its request is gone: older than any request lives."""
    found = Mark.parse(mark(redis, voucher_id, user_id) or "")
    assert found is not None
    older = found.accepted_ms - int(MIN_PENDING_AGE.total_seconds() * 1000) - 1000
    promised = ":promised" if found.promised else ""
    redis.hset(keys.pending(voucher_id), str(user_id), f"{older}:{found.token}:{found.order_id}{promised}")


def test_pending_from_the_202_then_confirmed_as_the_status_route_shows_it(
    call: Call,
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    redis: Any,
) -> None:
    voucher_id, user_id = make_voucher(stock=2), new_user()
    order_id = body(buy(voucher_id, user_id))["data"]
    redis.delete(keys.order_status(int(order_id)))  # the mark alone says PENDING, not the status hint

    pending = my_order(call, voucher_id, user_id)
    assert pending["orderId"] == order_id
    assert (pending["voucherId"], pending["userId"], pending["status"]) == (voucher_id, user_id, "PENDING")
    assert pending["reason"] is None

    persist(handlers, context, sqs, order_queue)
    confirmed = my_order(call, voucher_id, user_id)
    assert confirmed["status"] == "CONFIRMED"
    assert confirmed["payBy"] is not None
    assert confirmed == status(call, order_id, user_id)
    assert confirmed["createdAt"] == pending["createdAt"]


def test_failed_with_its_reason(
    call: Call,
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    db: Database,
) -> None:
    voucher_id, user_id = make_voucher(stock=2), new_user()
    order_id = body(buy(voucher_id, user_id))["data"]
    # The database ran out (Redis had drifted): the persister refuses the order.
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 0 WHERE voucher_id = %s", voucher_id)
    persist(handlers, context, sqs, order_queue)

    failed = my_order(call, voucher_id, user_id)
    assert (failed["orderId"], failed["status"], failed["reason"]) == (order_id, "FAILED", "SOLD_OUT")
    assert failed == status(call, order_id, user_id)


def test_another_users_order_is_never_shown(
    call: Call,
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
) -> None:
    voucher_id, owner, other, third = make_voucher(stock=3), new_user(), new_user(), new_user()
    order_id = body(buy(voucher_id, owner))["data"]
    expect_refusal(call(my_order_event(voucher_id, other)), 404, "ORDER_NOT_FOUND")  # while pending
    theirs = body(buy(voucher_id, third))["data"]
    persist(handlers, context, sqs, order_queue)
    expect_refusal(call(my_order_event(voucher_id, other)), 404, "ORDER_NOT_FOUND")  # once confirmed
    assert my_order(call, voucher_id, owner)["orderId"] == order_id
    assert my_order(call, voucher_id, third)["orderId"] == theirs
    # The owner's order on another voucher is not theirs on this one.
    expect_refusal(call(my_order_event(make_voucher(stock=1), owner)), 404, "ORDER_NOT_FOUND")


def test_no_such_seckill_voucher_is_404(call: Call, db: Database) -> None:
    expect_refusal(call(my_order_event(random.randint(2**60, 2**62), new_user())), 404, "VOUCHER_NOT_FOUND")
    ordinary = vouchers.create_voucher(
        db, vouchers.VoucherIn(shop_id=1, title="plain", pay_value=100, actual_value=200)
    )
    expect_refusal(call(my_order_event(ordinary, new_user())), 404, "VOUCHER_NOT_FOUND")


@pytest.mark.parametrize("voucher_id", ["abc", "0", "-5", "012", "1e9", str(2**63)])
def test_a_bad_voucher_id_is_400(call: Call, voucher_id: str) -> None:
    expect_refusal(call(my_order_event(voucher_id, new_user())), 400, "BAD_REQUEST")


def test_without_a_user_is_401(call: Call, make_voucher: Callable[..., int]) -> None:
    expect_refusal(call(my_order_event(make_voucher(stock=1), None)), 401, "UNAUTHORIZED")


def test_a_function_that_died_after_queueing_lets_its_buyer_find_the_order(
    call: Call,
    gate: Gate,
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    redis: Any,
) -> None:
    """The buyer saw a 5xx; its order is on the queue. While the request might still be running
    (and might still give the unit back) the route says "try again", never "none"; once it is
    surely gone, PENDING with the order id, then what the persister decided."""
    voucher_id, user_id = make_voucher(stock=2), new_user()
    message = died_after_queueing(gate, OrderQueue(sqs, order_queue), voucher_id, user_id)

    expect_try_again(call(my_order_event(voucher_id, user_id)))
    age(redis, voucher_id, user_id)
    pending = my_order(call, voucher_id, user_id)
    assert (pending["orderId"], pending["status"]) == (str(message.order_id), "PENDING")

    persist(handlers, context, sqs, order_queue)
    assert mark(redis, voucher_id, user_id) is None
    confirmed = my_order(call, voucher_id, user_id)
    assert (confirmed["orderId"], confirmed["status"]) == (str(message.order_id), "CONFIRMED")


def test_a_function_that_died_after_its_promise_is_found_at_once_though_a_press_says_duplicate(
    call: Call, gate: Gate, make_voucher: Callable[..., int], order_queue: str, sqs: Any
) -> None:
    """Promised (a 202 was on its way) but the answer was lost: the user's next press is a
    DUPLICATE_ORDER with no id, and this route is how its buyer learns it."""
    voucher_id, user_id = make_voucher(stock=2), new_user()
    message = accept(gate, voucher_id, user_id)
    assert OrderQueue(sqs, order_queue).send(message) is Sent.SENT

    expect_refusal(call(seckill_event(voucher_id, user_id)), 409, "DUPLICATE_ORDER")
    found = my_order(call, voucher_id, user_id)
    assert (found["orderId"], found["status"]) == (str(message.order_id), "PENDING")


def test_an_order_never_sent_ends_failed_under_the_id_the_route_showed(
    call: Call,
    gate: Gate,
    db: Database,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    redis: Any,
) -> None:
    """A request gone before its send (the mark alone cannot tell): PENDING, then reconciliation
    fails it NOT_QUEUED; the id shown is decided, never gone. A later order of the user's is
    then the one shown, not the failed one."""
    voucher_id, user_id = make_voucher(stock=2), new_user()
    never_sent = accept(gate, voucher_id, user_id, promise=False)
    age(redis, voucher_id, user_id)
    assert my_order(call, voucher_id, user_id)["orderId"] == str(never_sent.order_id)

    assert reconcile_voucher(db, redis, OrderQueue(sqs, order_queue), voucher_id).failed == [str(never_sent.order_id)]
    failed = my_order(call, voucher_id, user_id)
    assert (failed["orderId"], failed["status"], failed["reason"]) == (str(never_sent.order_id), "FAILED", NOT_QUEUED)

    again = body(call(seckill_event(voucher_id, user_id)))["data"]
    latest = my_order(call, voucher_id, user_id)
    assert (latest["orderId"], latest["status"]) == (again, "PENDING")


def test_redis_down_is_503_unless_mysql_holds_the_order(
    call: Call,
    buy: Callable[[int, int], dict[str, Any]],
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    sqs: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    voucher_id, stored, waiting = make_voucher(stock=2), new_user(), new_user()
    buy(voucher_id, stored)
    persist(handlers, context, sqs, order_queue)
    body(buy(voucher_id, waiting))  # on the queue: only Redis knows it

    module = module_of(handlers["SeckillApiFunction"])
    monkeypatch.setattr(module, "redis", redis_lib.Redis(port=closed_port(), socket_connect_timeout=0.2, retry=None))
    expect_try_again(call(my_order_event(voucher_id, waiting)))
    expect_try_again(call(my_order_event(voucher_id, new_user())))
    assert my_order(call, voucher_id, stored)["status"] == "CONFIRMED"  # MySQL's is certain


def test_redis_without_its_data_is_503_not_404(
    call: Call, buy: Callable[[int, int], dict[str, Any]], make_voucher: Callable[..., int], redis: Any
) -> None:
    voucher_id, user_id = make_voucher(stock=2), new_user()
    body(buy(voucher_id, user_id))  # on the queue, not in MySQL yet
    redis.delete(keys.pending(voucher_id), keys.loaded())  # Redis lost its data, the mark with it
    try:
        expect_try_again(call(my_order_event(voucher_id, user_id)))
    finally:
        redis.set(keys.loaded(), 1)


def test_after_redis_lost_its_data_an_order_still_on_its_way_is_503_not_404(
    call: Call,
    gate: Gate,
    handlers: dict[str, Handler],
    context: Any,
    db: Database,
    make_voucher: Callable[..., int],
    queues: dict[str, str],
    sqs: Any,
    redis: Any,
) -> None:
    """A press accepted just before Redis lost its data sends its order only once recovery has
    found the queue drained and rebuilt the voucher: no mark shows it, MySQL does not hold it
    yet. Until the persister stores it the route says "try again", never "none"; a user with
    no order at all is told so again once an order accepted before the loss must have arrived."""
    voucher_id, kept, user_id = make_voucher(stock=2), make_voucher(stock=1), new_user()
    message = accept(gate, voucher_id, user_id, promise=False)  # the gate said yes; the send is to come

    redis.delete(*keys.voucher_keys(voucher_id), keys.loaded())  # Redis lost its data, the mark with it
    expect_try_again(call(my_order_event(voucher_id, user_id)))
    recovery = recover(db, redis, sqs, queues)
    assert [r.applied for r in recovery.rebuilt if r.voucher_id == voucher_id] == [True]
    assert redis.exists(keys.loaded())

    queue = OrderQueue(sqs, queues["OrderQueue"])
    assert queue.send(message) is Sent.SENT
    assert not gate.promise(voucher_id, user_id, message.order_id)  # no mark left to promise
    expect_try_again(call(my_order_event(voucher_id, user_id)))
    expect_try_again(call(my_order_event(voucher_id, new_user())))  # nobody can tell them apart
    # A voucher whose state was not lost knows its marks: no order there is no order.
    expect_refusal(call(my_order_event(kept, new_user())), 404, "ORDER_NOT_FOUND")

    persist(handlers, context, sqs, queues["OrderQueue"])
    found = my_order(call, voucher_id, user_id)
    assert (found["orderId"], found["status"]) == (str(message.order_id), "CONFIRMED")

    rebuilt = int(redis.hget(keys.window(voucher_id), "rebuilt"))
    bound_ms = int(IN_FLIGHT_AFTER_REBUILD.total_seconds() * 1000)
    redis.hset(keys.window(voucher_id), "rebuilt", rebuilt - bound_ms)  # as it is once the bound has passed
    expect_refusal(call(my_order_event(voucher_id, new_user())), 404, "ORDER_NOT_FOUND")
    assert my_order(call, voucher_id, user_id) == found


def test_mysql_down_a_promised_order_is_still_pending(
    call: Call,
    buy: Callable[[int, int], dict[str, Any]],
    make_voucher: Callable[..., int],
    order_queue: str,
    handlers: dict[str, Handler],
    creds: Credentials,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    voucher_id, user_id = make_voucher(stock=2), new_user()
    order_id = body(buy(voucher_id, user_id))["data"]
    before = my_order(call, voucher_id, user_id)

    port = stop_mysql(handlers, creds, monkeypatch)
    assert my_order(call, voucher_id, user_id) == before
    assert before["orderId"] == order_id
    expect_try_again(call(my_order_event(voucher_id, new_user())), str(port))
