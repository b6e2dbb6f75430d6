"""A hold's fate (seckill.holds) on the real MariaDB and Redis: payment, cancel and
expiry, each alone, repeated, and racing one another; the unit back in stock once."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import redis as redis_lib

from seckill import hints, holds
from seckill.hints import CANCELLED, CONFIRMED, EXPIRED, PAID
from seckill.holds import NOT_FOUND, PAYMENT_USED, REFUSALS, Expiry
from seckill.infra import keys
from seckill.infra.db import Credentials, Database, connect
from seckill.infra.errors import Refusal
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderMessage
from seckill.persist.persistence import OrderIdConflict, persist_orders
from seckill.press.gate import Gate
from tests.helpers import (
    Hold,
    closed_port,
    db_rows,
    new_user,
    overdue,
    payment_of,
    persist_order,
    race,
    stocks,
)


def stored(db: Database, hold: Hold) -> dict[str, Any]:
    [row] = db_rows(
        db,
        "SELECT status, close_reason, payment_id, pay_time, pay_by, pay_time <= pay_by AS in_time"
        " FROM tb_voucher_order WHERE id = %s",
        hold.order_id,
    )
    return row


def hint_status(redis: Any, hold: Hold) -> str:
    hint = hints.read(redis, hold.order_id, hold.user_id)
    assert hint is not None
    return hint["status"]


# --- payment ---------------------------------------------------------------------------------------


def test_a_payment_in_time_pays_the_hold(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    paid = holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id))
    assert isinstance(paid, dict)
    assert paid["status"] == PAID
    assert paid["orderId"] == str(hold.order_id)
    assert paid["paidAt"] is not None
    assert paid["payBy"] is not None
    assert paid["paidAt"] < paid["payBy"]
    row = stored(db, hold)
    assert (row["status"], row["payment_id"], row["in_time"]) == (2, payment_of(hold.order_id), 1)
    assert stocks(db, redis, hold.voucher_id) == (2, 2)
    assert hint_status(redis, hold) == PAID


def test_the_same_payment_again_answers_paid_and_changes_nothing(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    first = holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id))
    before = stored(db, hold)
    again = holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id))
    assert again == first
    assert stored(db, hold) == before


def test_another_payment_of_a_paid_hold_is_already_paid(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id))
    assert holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id, 2)) == REFUSALS["ALREADY_PAID"]
    assert stored(db, hold)["payment_id"] == payment_of(hold.order_id)


def test_one_payment_pays_one_order(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    first, second = sell(count=2)
    (other,) = sell()  # another voucher's order: a payment pays one order, whatever the voucher
    payment = payment_of(first.order_id)
    assert isinstance(holds.pay(db, redis, scripts, first.order_id, payment), dict)
    for hold in (second, other):
        assert holds.pay(db, redis, scripts, hold.order_id, payment) == REFUSALS[PAYMENT_USED]
        assert (stored(db, hold)["status"], stored(db, hold)["payment_id"]) == (1, None)
    assert stocks(db, redis, second.voucher_id) == (1, 1)
    # The refused order is still payable, by a payment of its own.
    paid = holds.pay(db, redis, scripts, second.order_id, payment_of(second.order_id))
    assert isinstance(paid, dict)
    assert paid["status"] == PAID
    assert stored(db, first)["payment_id"] == payment


def test_a_payment_after_the_deadline_expires_the_hold_before_any_expiry_ran(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    overdue(db, hold)
    assert holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id)) == REFUSALS[EXPIRED]
    row = stored(db, hold)
    assert (row["status"], row["close_reason"], row["payment_id"]) == (4, EXPIRED, None)
    assert stocks(db, redis, hold.voucher_id) == (3, 3)  # the unit is back, in both
    # Paid again, or expired by the expiry that follows: back once only.
    assert holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id)) == REFUSALS[EXPIRED]
    assert holds.expire(db, redis, scripts, hold.order_id).outcome is Expiry.CLOSED
    assert stocks(db, redis, hold.voucher_id) == (3, 3)
    assert hint_status(redis, hold) == EXPIRED
    assert redis.smembers(keys.returned(hold.voucher_id)) == {str(hold.order_id)}


def test_a_payment_of_an_unknown_order_is_not_found(db: Database, redis: Any, scripts: Scripts) -> None:
    unknown = 10**15 + random.randrange(10**9)
    assert holds.pay(db, redis, scripts, unknown, payment_of(unknown)) == NOT_FOUND


# --- cancel ----------------------------------------------------------------------------------------


def test_the_owner_cancels_and_the_unit_is_back_once(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    cancelled = holds.cancel(db, redis, scripts, hold.order_id, hold.user_id)
    assert isinstance(cancelled, dict)
    assert cancelled["status"] == CANCELLED
    assert stocks(db, redis, hold.voucher_id) == (3, 3)
    # A retry whose first answer was lost: the same answer, nothing more given back.
    assert holds.cancel(db, redis, scripts, hold.order_id, hold.user_id) == cancelled
    assert stocks(db, redis, hold.voucher_id) == (3, 3)
    assert holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id)) == REFUSALS[CANCELLED]
    assert hint_status(redis, hold) == CANCELLED


def test_another_users_cancel_is_not_found_as_an_unknown_order(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    assert holds.cancel(db, redis, scripts, hold.order_id, new_user()) == NOT_FOUND
    assert stored(db, hold)["status"] == 1
    assert stocks(db, redis, hold.voucher_id) == (2, 2)


def test_a_paid_hold_cannot_be_cancelled(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id))
    assert holds.cancel(db, redis, scripts, hold.order_id, hold.user_id) == REFUSALS[PAID]
    assert stocks(db, redis, hold.voucher_id) == (2, 2)


# --- expiry ----------------------------------------------------------------------------------------


def test_expire_waits_for_the_deadline_then_returns_the_unit_once(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell(hold_seconds=600)
    early = holds.expire(db, redis, scripts, hold.order_id)
    assert early.outcome is Expiry.NOT_YET
    assert early.order is not None
    assert 590 < early.order.seconds_left <= 600
    assert stocks(db, redis, hold.voucher_id) == (2, 2)
    overdue(db, hold)
    expired = holds.expire(db, redis, scripts, hold.order_id)
    assert (expired.outcome, expired.given_back) == (Expiry.EXPIRED, 1)
    again = holds.expire(db, redis, scripts, hold.order_id)
    assert (again.outcome, again.given_back) == (Expiry.CLOSED, 0)
    assert stocks(db, redis, hold.voucher_id) == (3, 3)


def test_expire_leaves_a_paid_hold_and_a_missing_order_alone(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id))
    overdue(db, hold)
    assert holds.expire(db, redis, scripts, hold.order_id).outcome is Expiry.PAID
    assert stored(db, hold)["status"] == 2
    assert stocks(db, redis, hold.voucher_id) == (2, 2)
    assert holds.expire(db, redis, scripts, 10**15 + random.randrange(10**9)).outcome is Expiry.MISSING


def test_an_expiry_that_finds_its_hold_paid_or_not_yet_due_waits_for_no_lock(
    db: Database, creds: Credentials, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    """Most of a sale's expiries find their order paid, or come early: decided without the voucher's
    row lock, they go on while a persister batch (here another transaction) holds it."""
    paid, early = sell(count=2)
    holds.pay(db, redis, scripts, paid.order_id, "pay-1")
    with connect(creds) as busy:
        busy.begin()
        with busy.cursor() as cursor:
            cursor.execute("SELECT 1 FROM tb_seckill_voucher WHERE voucher_id = %s FOR UPDATE", (paid.voucher_id,))
        outcomes: list[Expiry] = []
        worker = threading.Thread(
            target=lambda: outcomes.extend(holds.expire(db, redis, scripts, h.order_id).outcome for h in (paid, early))
        )
        worker.start()
        worker.join(timeout=10)
        decided_while_locked = not worker.is_alive()
        busy.rollback()
    worker.join()

    assert decided_while_locked
    assert outcomes == [Expiry.PAID, Expiry.NOT_YET]


def test_a_give_back_whose_reply_was_lost_is_not_given_twice(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    overdue(db, hold)
    # MySQL committed the expiry; Redis ran the script but its reply never arrived.
    db_rows(db, "UPDATE tb_voucher_order SET status = 4, close_reason = 'EXPIRED' WHERE id = %s", hold.order_id)
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = stock + 1 WHERE voucher_id = %s", hold.voucher_id)
    holds.give_back(scripts, hold.voucher_id, hold.order_id)  # its reply, lost
    # The caller retries (SQS redelivers the expiry).
    retried = holds.expire(db, redis, scripts, hold.order_id)
    assert (retried.outcome, retried.given_back) == (Expiry.CLOSED, 0)
    assert stocks(db, redis, hold.voucher_id) == (3, 3)


def test_give_back_leaves_a_voucher_redis_lost_to_its_rebuild(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    redis.delete(keys.stock(hold.voucher_id))
    assert holds.give_back(scripts, hold.voucher_id, hold.order_id) == -1
    assert not redis.exists(keys.stock(hold.voucher_id), keys.returned(hold.voucher_id))


# --- races -----------------------------------------------------------------------------------------


def test_payment_and_cancel_racing_on_one_hold_one_wins_and_stock_is_right(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    rng = random.Random(18)
    for _ in range(12):
        (hold,) = sell(stock=2)
        calls = [
            lambda h=hold: holds.pay(db, redis, scripts, h.order_id, payment_of(h.order_id)),
            lambda h=hold: holds.cancel(db, redis, scripts, h.order_id, h.user_id),
        ]
        rng.shuffle(calls)
        answers = race(*calls)
        won = [a for a in answers if isinstance(a, dict)]
        lost = [a for a in answers if isinstance(a, Refusal)]
        assert (len(won), len(lost)) == (1, 1), answers
        if won[0]["status"] == PAID:
            assert lost[0] == REFUSALS[PAID]
            assert stocks(db, redis, hold.voucher_id) == (1, 1)
        else:
            assert lost[0] == REFUSALS[CANCELLED]
            assert stocks(db, redis, hold.voucher_id) == (2, 2)


def test_payment_racing_the_expiry_at_the_deadline_one_wins(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    overdue(db, hold)
    paid, expired = race(
        lambda: holds.pay(db, redis, scripts, hold.order_id, payment_of(hold.order_id)),
        lambda: holds.expire(db, redis, scripts, hold.order_id),
    )
    # Past the deadline the payment can only lose, whichever ran first.
    assert paid == REFUSALS[EXPIRED]
    assert expired.outcome in (Expiry.EXPIRED, Expiry.CLOSED)
    assert stocks(db, redis, hold.voucher_id) == (3, 3)


def test_cancel_racing_the_expiry_one_wins_and_the_unit_is_back_once(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    overdue(db, hold)
    cancelled, expired = race(
        lambda: holds.cancel(db, redis, scripts, hold.order_id, hold.user_id),
        lambda: holds.expire(db, redis, scripts, hold.order_id),
    )
    assert cancelled == REFUSALS[EXPIRED]  # the deadline decides, not who came first
    assert expired.outcome in (Expiry.EXPIRED, Expiry.CLOSED)
    assert stored(db, hold)["close_reason"] == EXPIRED
    assert stocks(db, redis, hold.voucher_id) == (3, 3)


def test_a_redelivered_order_reports_its_stored_deadline(
    db: Database, redis: Any, scripts: Scripts, gate: Gate, sell: Callable[..., list[Hold]]
) -> None:
    (hold,) = sell()
    [row] = db_rows(db, "SELECT create_time, pay_by FROM tb_voucher_order WHERE id = %s", hold.order_id)
    again = persist_order(
        db, redis, scripts, OrderMessage(hold.order_id, hold.user_id, hold.voucher_id, row["create_time"])
    )
    assert again.changed is False
    assert again.pay_by is not None
    assert again.pay_by.replace(tzinfo=None) == row["pay_by"]


# --- Redis failing after MySQL committed -----------------------------------------------------------


@pytest.fixture
def lost_redis() -> tuple[Any, Scripts]:
    """A Redis that cannot be reached (as if it failed right after the commit)."""
    unreachable = redis_lib.Redis(port=closed_port(), socket_connect_timeout=0.2, retry=None)
    return unreachable, Scripts.register(unreachable)


def test_a_cancel_answers_what_mysql_committed_when_redis_fails_and_a_retry_gives_back_once(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]], lost_redis: tuple[Any, Scripts]
) -> None:
    (hold,) = sell()
    cancelled = holds.cancel(db, lost_redis[0], lost_redis[1], hold.order_id, hold.user_id)
    assert isinstance(cancelled, dict)
    assert cancelled["status"] == CANCELLED
    assert stocks(db, redis, hold.voucher_id) == (3, 2)  # Redis missed the return
    assert holds.cancel(db, redis, scripts, hold.order_id, hold.user_id) == cancelled
    assert holds.cancel(db, redis, scripts, hold.order_id, hold.user_id) == cancelled
    assert stocks(db, redis, hold.voucher_id) == (3, 3)


def test_an_expiry_whose_give_back_fails_raises_and_its_retry_gives_back_once(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]], lost_redis: tuple[Any, Scripts]
) -> None:
    (hold,) = sell()
    overdue(db, hold)
    with pytest.raises(redis_lib.ConnectionError):
        holds.expire(db, lost_redis[0], lost_redis[1], hold.order_id)
    assert stored(db, hold)["close_reason"] == EXPIRED  # committed before Redis was asked
    assert stocks(db, redis, hold.voucher_id) == (3, 2)
    retried = holds.expire(db, redis, scripts, hold.order_id)
    assert (retried.outcome, retried.given_back) == (Expiry.CLOSED, 1)
    assert holds.expire(db, redis, scripts, hold.order_id).given_back == 0
    assert stocks(db, redis, hold.voucher_id) == (3, 3)


def test_a_redelivered_order_paid_or_closed_has_no_deadline_to_keep(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (paid,), (cancelled,) = sell(), sell()
    holds.pay(db, redis, scripts, paid.order_id, payment_of(paid.order_id))
    holds.cancel(db, redis, scripts, cancelled.order_id, cancelled.user_id)
    for hold in (paid, cancelled):
        [row] = db_rows(db, "SELECT create_time FROM tb_voucher_order WHERE id = %s", hold.order_id)
        message = OrderMessage(hold.order_id, hold.user_id, hold.voucher_id, row["create_time"])
        again = persist_order(db, redis, scripts, message)
        assert (again.status, again.changed, again.pay_by) == (CONFIRMED, False, None)


def test_an_order_id_stored_for_another_vouchers_order_is_still_a_conflict(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    (stored,), (other,) = sell(), sell()
    clash = OrderMessage(stored.order_id, new_user(), other.voucher_id, datetime.now(UTC))
    (outcome,) = persist_orders(db, redis, scripts, [clash])
    assert isinstance(outcome, OrderIdConflict)
