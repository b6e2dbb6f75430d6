"""Recovery and reconciliation know returned units (lua/restore.lua, seckill:returned:{v}):
a return Redis missed is repaired once, a rebuild counts every fate of a hold right, and a
give-back racing a rebuild never doubles a unit. Real MariaDB and Redis."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from seckill import holds
from seckill.holds import Expiry
from seckill.infra import keys
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderQueue, queue_depth
from seckill.press.gate import Gate, Reservation
from seckill.repair.restore import restore
from tests.helpers import (
    Hold,
    accept,
    closed_port,
    new_user,
    overdue,
    payment_of,
    reconcile_voucher,
    stocks,
)


@pytest.fixture
def redis_down() -> tuple[Any, Scripts]:
    """A Redis client (and its scripts) on a port nobody listens on."""
    dead = redis_client(Settings.from_env({"REDIS_URL": f"redis://127.0.0.1:{closed_port()}/0"}))
    return dead, Scripts.register(dead)


def returned(redis: Any, voucher_id: int) -> set[int]:
    return {int(order_id) for order_id in redis.smembers(keys.returned(voucher_id))}


@pytest.mark.parametrize("route", ["expiry", "cancel", "payment"])
def test_a_return_redis_missed_is_given_back_by_the_next_pass_whatever_the_queue_holds(
    db: Database,
    redis: Any,
    scripts: Scripts,
    gate: Gate,
    sqs: Any,
    queues: dict[str, str],
    sell: Callable[..., list[Hold]],
    redis_down: tuple[Any, Scripts],
    route: str,
) -> None:
    hold, buyer = sell(2, stock=3)
    # MySQL commits the return; the give-back never reaches Redis (the routes answer the truth).
    if route == "cancel":
        assert isinstance(holds.cancel(db, *redis_down, hold.order_id, hold.user_id), dict)
    else:
        overdue(db, hold)
        if route == "payment":
            assert holds.pay(db, *redis_down, hold.order_id, payment_of(hold.order_id)) == holds.REFUSALS["EXPIRED"]
        else:
            with pytest.raises(RedisConnectionError):
                holds.expire(db, *redis_down, hold.order_id)
    assert stocks(db, redis, hold.voucher_id) == (2, 1)
    # A sale goes on meanwhile: an order waits on OrderQueue, so the stock is not repaired.
    queue = OrderQueue(sqs, queues["OrderQueue"])
    queue.send(accept(gate, hold.voucher_id))
    assert queue_depth(sqs, queues["OrderQueue"]) > 0

    result = reconcile_voucher(db, redis, queue, hold.voucher_id, drained=False)

    assert result.returned == [str(hold.order_id)]
    assert not result.repaired
    assert stocks(db, redis, hold.voucher_id) == (2, 1)  # the unit back, the queued order's unit held
    assert returned(redis, hold.voucher_id) == {hold.order_id}
    # The give-back SQS (or the caller) retries now finds it back, and adds nothing; nor does the next pass.
    assert holds.give_back(scripts, hold.voucher_id, hold.order_id) == 0
    again = reconcile_voucher(db, redis, queue, hold.voucher_id, drained=False)
    assert again.returned == []
    assert stocks(db, redis, hold.voucher_id) == (2, 1)
    assert buyer.order_id not in returned(redis, hold.voucher_id)


def test_a_rebuild_counts_payable_paid_expired_and_cancelled_holds(
    db: Database, redis: Any, scripts: Scripts, gate: Gate, sell: Callable[..., list[Hold]]
) -> None:
    payable, paid, expired, cancelled = sell(4, stock=10)
    voucher_id = payable.voucher_id
    assert isinstance(holds.pay(db, redis, scripts, paid.order_id, payment_of(paid.order_id)), dict)
    assert isinstance(holds.cancel(db, redis, scripts, cancelled.order_id, cancelled.user_id), dict)
    overdue(db, expired)
    assert holds.expire(db, redis, scripts, expired.order_id).outcome is Expiry.EXPIRED
    assert stocks(db, redis, voucher_id) == (8, 8)

    # Redis loses the voucher while the expiries of all four are still on their way.
    redis.delete(*keys.voucher_keys(voucher_id), keys.returned(voucher_id))
    rebuilt = restore(db, scripts, voucher_id, "missing")
    assert rebuilt is not None
    assert rebuilt.applied
    assert stocks(db, redis, voucher_id) == (8, 8)
    everyone = {str(h.user_id) for h in (payable, paid, expired, cancelled)}
    assert redis.smembers(keys.buyers(voucher_id)) == everyone  # one order per user, whatever its fate
    assert returned(redis, voucher_id) == {expired.order_id, cancelled.order_id}

    # The expiries arrive: the closed ones give back nothing more, the paid one nothing at all,
    # the payable one is early; once it is overdue its unit comes back, once.
    for hold in (expired, cancelled):
        arrived = holds.expire(db, redis, scripts, hold.order_id)
        assert (arrived.outcome, arrived.given_back) == (Expiry.CLOSED, 0)
    assert holds.expire(db, redis, scripts, paid.order_id).outcome is Expiry.PAID
    assert holds.expire(db, redis, scripts, payable.order_id).outcome is Expiry.NOT_YET
    assert stocks(db, redis, voucher_id) == (8, 8)
    overdue(db, payable)
    assert holds.expire(db, redis, scripts, payable.order_id).given_back == 1
    assert stocks(db, redis, voucher_id) == (9, 9)
    # Their users may not buy again; a new one may.
    for hold in (payable, paid, expired, cancelled):
        assert not isinstance(gate.reserve(voucher_id, hold.user_id, "again"), Reservation)
    assert isinstance(gate.reserve(voucher_id, new_user(), "new"), Reservation)


def test_a_give_back_after_a_rebuild_that_counted_its_return_adds_nothing(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]], redis_down: tuple[Any, Scripts]
) -> None:
    """The interleaving a race can produce: COMMIT of the return, the rebuild, then the give-back."""
    (hold,) = sell(1, stock=2)
    overdue(db, hold)
    with pytest.raises(RedisConnectionError):
        holds.expire(db, *redis_down, hold.order_id)
    restored = restore(db, scripts, hold.voucher_id, "repair")
    assert restored is not None
    assert stocks(db, redis, hold.voucher_id) == (2, 2)
    assert holds.give_back(scripts, hold.voucher_id, hold.order_id) == 0
    assert stocks(db, redis, hold.voucher_id) == (2, 2)


def close_while_rebuilding(db: Database, redis: Any, scripts: Scripts, sold: list[Hold], expiring: list[Hold]) -> None:
    """Closes every hold (expires the overdue ones, cancels the rest) in one thread while
    another repairs their voucher from MySQL over and over, until the first is done."""
    done = threading.Event()
    errors: list[BaseException] = []

    def close_all() -> None:
        try:
            for hold in sold:
                if hold in expiring:
                    holds.expire(db, redis, scripts, hold.order_id)
                else:
                    holds.cancel(db, redis, scripts, hold.order_id, hold.user_id)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    def rebuild() -> None:
        try:
            while not done.is_set():
                restore(db, scripts, sold[0].voucher_id, "repair")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=close_all), threading.Thread(target=rebuild)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors


def test_give_backs_racing_rebuilds_never_double_a_unit(
    db: Database, redis: Any, scripts: Scripts, sell: Callable[..., list[Hold]]
) -> None:
    """Holds closed one after another while reconciliation repairs the voucher over and
    over: each unit comes back exactly once."""
    rng = random.Random(18)
    for _ in range(5):
        sold = sell(8, stock=8)
        voucher_id = sold[0].voucher_id
        expiring = [h for h in sold if rng.random() < 0.5]
        overdue(db, *expiring)
        close_while_rebuilding(db, redis, scripts, sold, expiring)
        assert stocks(db, redis, voucher_id) == (8, 8)
        assert returned(redis, voucher_id) == {h.order_id for h in sold}
