"""Ids from the outside (``parse_id``), the order-id generator and a container's blocks of
order ids (``OrderIds``) (docs/contract.md)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from seckill.ids import BEGIN_EPOCH, SEQUENCE_MASK, OrderIds, next_order_id, order_id_time
from seckill.infra import keys
from seckill.infra.errors import TryAgain

MAX_ID = 2**63 - 1

# --- parse_id ----------------------------------------------------------------------------------


# --- next_order_id -----------------------------------------------------------------------------


@pytest.fixture
def fixed_day(redis: Any) -> Iterator[datetime]:
    """A random UTC day far from today, so its counter is this test's own; removed afterwards.

    (Today's counter is left alone: other tests and runs share it, and deleting it
    could hand out an order id twice.)
    """
    day = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(days=secrets.randbelow(365 * 40))
    yield day
    redis.delete(keys.order_counter(day), keys.order_counter(day + timedelta(days=1)))


def test_order_id_layout(redis: Any, fixed_day: datetime) -> None:
    now = (fixed_day + timedelta(hours=13, minutes=7, seconds=9, microseconds=900_000)).timestamp()
    order_id = next_order_id(redis, now=now)
    # High bits: whole seconds since 2022-01-01T00:00:00Z; low 32 bits: that day's INCR.
    assert order_id >> 32 == int(now) - 1640995200
    assert order_id >> 32 == int(now) - BEGIN_EPOCH
    assert order_id & 0xFFFFFFFF == int(redis.get(f"icr:order:{fixed_day:%Y:%m:%d}"))
    assert 0 < order_id <= MAX_ID
    assert order_id_time(order_id) == datetime.fromtimestamp(int(now), UTC)


def test_counter_is_per_utc_day(redis: Any, fixed_day: datetime) -> None:
    # The last second of a day and the first of the next use different counters.
    last = (fixed_day + timedelta(days=1) - timedelta(seconds=1)).timestamp()
    first = (fixed_day + timedelta(days=1)).timestamp()
    a = next_order_id(redis, now=last)
    b = next_order_id(redis, now=first)
    assert a & 0xFFFFFFFF == int(redis.get(keys.order_counter(fixed_day)))
    assert b & 0xFFFFFFFF == int(redis.get(keys.order_counter(fixed_day + timedelta(days=1))))
    assert b > a


def test_the_machine_zone_does_not_decide_the_day(
    redis: Any, fixed_day: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 23:30 UTC is already the next day in Shanghai; the counter must still be the UTC day's.
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        now = (fixed_day + timedelta(hours=23, minutes=30)).timestamp()
        before = int(redis.get(keys.order_counter(fixed_day)) or 0)
        next_day = redis.get(keys.order_counter(fixed_day + timedelta(days=1)))
        order_id = next_order_id(redis, now=now)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert order_id & 0xFFFFFFFF == before + 1
    assert int(redis.get(keys.order_counter(fixed_day))) == before + 1
    assert redis.get(keys.order_counter(fixed_day + timedelta(days=1))) == next_day


def test_default_now_is_the_real_utc_time(redis: Any) -> None:
    before = int(time.time())
    order_id = next_order_id(redis)
    after = int(time.time())
    assert before - BEGIN_EPOCH <= order_id >> 32 <= after - BEGIN_EPOCH


def test_ids_increase_with_time_within_a_day(redis: Any, fixed_day: datetime) -> None:
    base = (fixed_day + timedelta(hours=1)).timestamp()
    ids = [next_order_id(redis, now=base + offset) for offset in (0, 0, 1, 1, 60, 3600)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_ids_unique_and_increasing_across_threads(redis: Any, fixed_day: datetime) -> None:
    threads, per_thread = 8, 500
    # One fixed second for everyone: only the counter can keep the ids apart.
    now = (fixed_day + timedelta(hours=12)).timestamp()
    made: list[list[int]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def work(n: int) -> None:
        start.wait()
        for _ in range(per_thread):
            made[n].append(next_order_id(redis, now=now))

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    every = [order_id for ids in made for order_id in ids]
    assert len(every) == threads * per_thread
    assert len(set(every)) == len(every)
    for ids in made:
        assert ids == sorted(ids)
        assert len(set(ids)) == len(ids)
    assert {order_id >> 32 for order_id in every} == {int(now) - BEGIN_EPOCH}
    # The counter moved by exactly the number of ids handed out.
    counters = sorted(order_id & 0xFFFFFFFF for order_id in every)
    assert counters[-1] == int(redis.get(keys.order_counter(fixed_day)))
    assert counters == list(range(counters[0], counters[0] + len(every)))


# --- OrderIds: a container's block -------------------------------------------------------------


class CountingRedis:
    """The real client, counting the pipelines it runs (a lease is one)."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.round_trips = 0

    def pipeline(self, transaction: bool = True) -> Any:
        self.round_trips += 1
        return self.redis.pipeline(transaction=transaction)


def allocator(redis: Any, moment: datetime, block: int = 100) -> tuple[OrderIds, CountingRedis, list[float]]:
    clock = [moment.timestamp()]
    counting = CountingRedis(redis)
    return OrderIds(counting, block, clock=lambda: clock[0]), counting, clock  # type: ignore[arg-type]


def test_ids_come_from_one_lease_per_block_in_the_contracts_layout(redis: Any, fixed_day: datetime) -> None:
    ids, counting, clock = allocator(redis, fixed_day + timedelta(hours=9), block=100)
    made = []
    for n in range(250):
        clock[0] += n % 2  # the seconds move on between presses
        made.append(ids.take())
    assert counting.round_trips == 3  # 250 ids from blocks of 100
    assert int(redis.get(keys.order_counter(fixed_day))) == 300
    assert [i & SEQUENCE_MASK for i in made] == list(range(1, 251))
    assert [i >> 32 for i in made] == [int(clock[0]) - BEGIN_EPOCH - 125 + (n + 1) // 2 for n in range(250)]
    assert made == sorted(made)


def test_a_given_back_id_serves_the_next_press(redis: Any, fixed_day: datetime) -> None:
    ids, counting, clock = allocator(redis, fixed_day + timedelta(hours=9))
    refused = ids.take()
    ids.give_back(refused)
    clock[0] += 5
    reused = ids.take()
    assert reused & SEQUENCE_MASK == refused & SEQUENCE_MASK  # the same sequence
    assert reused >> 32 == (refused >> 32) + 5  # made at its own second
    assert ids.take() & SEQUENCE_MASK == (refused & SEQUENCE_MASK) + 1
    assert counting.round_trips == 1


def test_a_block_never_crosses_a_utc_day(redis: Any, fixed_day: datetime) -> None:
    ids, counting, clock = allocator(redis, fixed_day + timedelta(days=1) - timedelta(seconds=1))
    last = ids.take()
    ids.give_back(ids.take())  # a spare of the old day is not carried over either
    clock[0] += 1
    first = ids.take()
    assert order_id_time(last).date() == fixed_day.date()
    assert order_id_time(first).date() == (fixed_day + timedelta(days=1)).date()
    assert first & SEQUENCE_MASK == 1  # from the new day's counter
    assert int(redis.get(keys.order_counter(fixed_day + timedelta(days=1)))) == 100
    assert counting.round_trips == 2
    ids.give_back(last)  # yesterday's id is not today's to hand out again
    assert ids.take() & SEQUENCE_MASK == 2


def test_containers_never_share_an_id(redis: Any, fixed_day: datetime) -> None:
    # One fixed second for everyone: only the sequences keep the ids apart.
    moment = fixed_day + timedelta(hours=12)
    containers = [allocator(redis, moment, block=7)[0] for _ in range(4)]
    made: list[int] = []

    def work(ids: OrderIds) -> None:
        for n in range(200):
            order_id = ids.take()
            if n % 3:
                made.append(order_id)
            else:
                ids.give_back(order_id)  # refused: the next press uses it

    threads = [threading.Thread(target=work, args=(ids,)) for ids in containers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == len(set(made)) == 4 * 133


def test_a_lease_while_redis_has_lost_its_data_is_not_kept(redis: Any, fixed_day: datetime) -> None:
    ids, counting, _ = allocator(redis, fixed_day + timedelta(hours=9))
    redis.delete(keys.loaded())
    try:
        with pytest.raises(TryAgain):
            ids.take()
    finally:
        redis.set(keys.loaded(), 1)
    # The next press leases again, above the refused block.
    assert ids.take() & SEQUENCE_MASK == 101
    assert counting.round_trips == 2
