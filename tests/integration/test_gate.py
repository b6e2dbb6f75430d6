"""The Lua gate on a real Redis, driven through ``seckill.press.gate.Gate``.

Vouchers here live only in Redis (the gate never reads MySQL); ids are drawn at
random so leftovers of other runs never collide, and every key is removed after
the test. Stock and buyers are read through the contract's literal key names, so
a change to ``keys.py`` that broke the contract would fail these tests.
"""

from __future__ import annotations

import secrets
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis as redis_lib

from seckill.ids import SEQUENCE_MASK, OrderIds
from seckill.infra import keys
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.errors import Refusal, TryAgain
from seckill.infra.lua_scripts import Scripts, lua_dir
from seckill.press.gate import Gate, Mark, Reservation, Unsent
from tests.helpers import new_user, redis_server

HOUR_MS = 3_600_000


def stock_key(voucher_id: int) -> str:
    return f"seckill:stock:{{{voucher_id}}}"


def buyers_key(voucher_id: int) -> str:
    return f"seckill:order:{{{voucher_id}}}"


def server_ms(redis: Any) -> int:
    """The Redis server's clock, which the gate judges the window by."""
    seconds, micros = redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def token() -> str:
    return uuid.uuid4().hex


def win(gate: Gate, voucher_id: int, user_id: int) -> tuple[Reservation, int]:
    """A press answered 202: reserved with its order id, and promised."""
    reservation = gate.reserve(voucher_id, user_id, token())
    assert isinstance(reservation, Reservation), reservation
    assert gate.promise(voucher_id, user_id, reservation.order_id)
    return reservation, reservation.order_id


class Vouchers:
    """Writes a voucher's gate keys by hand, so tests control each one."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.made: list[int] = []

    def new_id(self) -> int:
        voucher_id = secrets.randbelow(10**12) + 10**14
        self.made.append(voucher_id)
        # A leftover of an earlier run must not leak into this test.
        self.delete(voucher_id)
        return voucher_id

    def make(
        self,
        stock: int | None = 10,
        begin_offset_ms: int | None = -HOUR_MS,
        end_offset_ms: int | None = HOUR_MS,
        buyers: tuple[int, ...] = (),
    ) -> int:
        """None leaves the stock key or the window key out."""
        voucher_id = self.new_id()
        now = server_ms(self.redis)
        if stock is not None:
            self.redis.set(stock_key(voucher_id), stock)
        if begin_offset_ms is not None and end_offset_ms is not None:
            self.redis.hset(
                keys.window(voucher_id), mapping={"begin": now + begin_offset_ms, "end": now + end_offset_ms}
            )
        if buyers:
            self.redis.sadd(buyers_key(voucher_id), *buyers)
        return voucher_id

    def delete(self, voucher_id: int) -> None:
        self.redis.delete(
            stock_key(voucher_id), buyers_key(voucher_id), keys.window(voucher_id), keys.pending(voucher_id)
        )

    def stock(self, voucher_id: int) -> int | None:
        value = self.redis.get(stock_key(voucher_id))
        return None if value is None else int(value)

    def buyers(self, voucher_id: int) -> set[int]:
        return {int(u) for u in self.redis.smembers(buyers_key(voucher_id))}

    def pending(self, voucher_id: int) -> dict[str, str]:
        return dict(self.redis.hgetall(keys.pending(voucher_id)))


@pytest.fixture
def v(redis: Any) -> Iterator[Vouchers]:
    made = Vouchers(redis)
    yield made
    for voucher_id in made.made:
        made.delete(voucher_id)


def refused(gate: Gate, voucher_id: int, user_id: int) -> Refusal:
    answer = gate.reserve(voucher_id, user_id, token())
    assert isinstance(answer, Refusal), answer
    return answer


# --- the contract's key names -------------------------------------------------------------


# --- every outcome ------------------------------------------------------------------------


def test_ok_takes_one_unit_and_records_the_pending_reservation(gate: Gate, v: Vouchers, redis: Any) -> None:
    voucher_id = v.make(stock=10)
    user_id, tok, order_id = new_user(), token(), secrets.randbelow(10**15) + 1
    before = server_ms(redis)
    reservation = gate.reserve(voucher_id, user_id, tok, order_id)
    after = server_ms(redis)

    assert reservation == Reservation(voucher_id, user_id, tok, reservation.accepted_ms, order_id)
    # Accepted by the server's clock, in milliseconds.
    assert before <= reservation.accepted_ms <= after
    assert v.stock(voucher_id) == 9
    assert v.buyers(voucher_id) == {user_id}
    # The pending record: "<acceptedMs>:<token>:<orderId>", the id the press brought.
    assert v.pending(voucher_id) == {str(user_id): f"{reservation.accepted_ms}:{tok}:{order_id}"}


def test_a_press_brings_the_next_id_of_its_block_and_a_refused_one_leaves_it(
    scripts: Scripts, v: Vouchers, redis: Any
) -> None:
    day = datetime(2031, 1, 1, tzinfo=UTC) + timedelta(days=secrets.randbelow(3650))  # a counter of its own
    gate = Gate(redis, scripts, 0, ids=OrderIds(redis, clock=lambda: day.timestamp()))
    voucher_id, sold_out = v.make(stock=10), v.make(stock=0)
    try:
        assert isinstance(gate.reserve(sold_out, new_user()), Refusal)
        first = gate.reserve(voucher_id, new_user())
        second = gate.reserve(voucher_id, new_user())
        assert int(redis.get(keys.order_counter(day))) == gate.ids.block  # one lease for all three
    finally:
        redis.delete(keys.order_counter(day))
    assert isinstance(first, Reservation)
    assert isinstance(second, Reservation)
    # The refused press's id went to the first winner.
    assert [first.order_id & SEQUENCE_MASK, second.order_id & SEQUENCE_MASK] == [1, 2]


def test_missing_stock_key_is_voucher_not_found_not_a_lua_error(gate: Gate, v: Vouchers, redis: Any) -> None:
    voucher_id = v.make(stock=None)
    error = refused(gate, voucher_id, new_user())
    assert (error.code, error.status) == ("VOUCHER_NOT_FOUND", 404)
    # A refusal writes nothing (in particular, no stock key appears from a DECR).
    assert redis.exists(stock_key(voucher_id), buyers_key(voucher_id), keys.pending(voucher_id)) == 0


def test_missing_window_key_is_voucher_not_found(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=5, begin_offset_ms=None, end_offset_ms=None)
    error = refused(gate, voucher_id, new_user())
    assert error.code == "VOUCHER_NOT_FOUND"
    assert v.stock(voucher_id) == 5
    assert v.buyers(voucher_id) == set()


def test_half_written_window_is_voucher_not_found(gate: Gate, v: Vouchers, redis: Any) -> None:
    voucher_id = v.make(stock=5, begin_offset_ms=None, end_offset_ms=None)
    redis.hset(keys.window(voucher_id), "begin", server_ms(redis) - HOUR_MS)
    assert refused(gate, voucher_id, new_user()).code == "VOUCHER_NOT_FOUND"


def test_unknown_voucher_is_voucher_not_found(gate: Gate, v: Vouchers) -> None:
    assert refused(gate, v.new_id(), new_user()).code == "VOUCHER_NOT_FOUND"


def test_unknown_voucher_after_redis_lost_its_data_is_try_again_not_404(gate: Gate, v: Vouchers, redis: Any) -> None:
    """Until vouchers are rebuilt, "not found" may be false: the client is told to retry."""
    redis.delete(keys.loaded())
    try:
        with pytest.raises(TryAgain) as caught:
            gate.reserve(v.new_id(), new_user(), token())
        assert (caught.value.refusal.status, caught.value.refusal.code) == (503, "TRY_AGAIN")
    finally:
        redis.set(keys.loaded(), 1)
    assert refused(gate, v.new_id(), new_user()).code == "VOUCHER_NOT_FOUND"


def test_non_numeric_stock_is_voucher_not_found(gate: Gate, v: Vouchers, redis: Any) -> None:
    voucher_id = v.make(stock=None)
    redis.set(stock_key(voucher_id), "garbage")
    assert refused(gate, voucher_id, new_user()).code == "VOUCHER_NOT_FOUND"


def test_not_started_by_the_server_clock(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=5, begin_offset_ms=60_000, end_offset_ms=HOUR_MS)
    error = refused(gate, voucher_id, new_user())
    assert (error.code, error.status) == ("NOT_STARTED", 409)
    assert v.stock(voucher_id) == 5
    assert v.pending(voucher_id) == {}


def test_ended_by_the_server_clock(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=5, begin_offset_ms=-HOUR_MS, end_offset_ms=-60_000)
    error = refused(gate, voucher_id, new_user())
    assert (error.code, error.status) == ("ENDED", 409)
    assert v.stock(voucher_id) == 5


def test_window_opens_and_closes_with_the_server_clock(gate: Gate, v: Vouchers, redis: Any) -> None:
    # Opened 1 s ago and closing in 1 min by the server's clock: inside.
    voucher_id = v.make(stock=5, begin_offset_ms=-1_000, end_offset_ms=60_000)
    gate.reserve(voucher_id, new_user(), token())
    # Same voucher, window moved to have closed 1 s ago: refused.
    now = server_ms(redis)
    redis.hset(keys.window(voucher_id), mapping={"begin": now - HOUR_MS, "end": now - 1_000})
    assert refused(gate, voucher_id, new_user()).code == "ENDED"


def test_sold_out(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=0)
    error = refused(gate, voucher_id, new_user())
    assert (error.code, error.status) == ("SOLD_OUT", 409)
    # Never below zero.
    assert v.stock(voucher_id) == 0
    assert v.buyers(voucher_id) == set()


def test_last_unit_then_sold_out(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=2)
    first, second = new_user(), new_user()
    one, last = gate.reserve(voucher_id, first, token()), gate.reserve(voucher_id, second, token())
    # The gate tells the press that took the last unit (it tells the edge: seckill.press.orders).
    assert isinstance(one, Reservation)
    assert isinstance(last, Reservation)
    assert (one.last, last.last) == (False, True)
    assert refused(gate, voucher_id, new_user()).code == "SOLD_OUT"
    assert v.stock(voucher_id) == 0
    assert v.buyers(voucher_id) == {first, second}


def test_duplicate_order(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=5)
    user_id = new_user()
    first, order_id = win(gate, voucher_id, user_id)
    error = refused(gate, voucher_id, user_id)
    assert (error.code, error.status) == ("DUPLICATE_ORDER", 409)
    assert v.stock(voucher_id) == 4
    # The first reservation's record is left as it was.
    assert v.pending(voucher_id) == {str(user_id): f"{first.accepted_ms}:{first.token}:{order_id}:promised"}


def test_a_buyer_without_a_reservation_is_a_duplicate(gate: Gate, v: Vouchers) -> None:
    """Once the persister has settled the order, only the buyers set remembers the user."""
    voucher_id = v.make(stock=5, buyers=(BUYER,))
    assert refused(gate, voucher_id, BUYER).code == "DUPLICATE_ORDER"


def test_a_new_press_resumes_an_order_id_nobody_was_answered_for(gate: Gate, v: Vouchers) -> None:
    """No 202 was promised for the reservation (the gate's reply was lost, or the send was
    refused and the release failed, or the request died): the user's next press resumes
    that very order at once, without a second unit, and its own id is left unused."""
    voucher_id = v.make(stock=5)
    user_id = new_user()
    first = gate.reserve(voucher_id, user_id, "lost-request", 4242)
    resumed = gate.reserve(voucher_id, user_id, "retry", 5151)
    assert resumed == Reservation(voucher_id, user_id, "retry", resumed.accepted_ms, 4242, resumed=True)
    assert v.stock(voucher_id) == 4
    assert v.buyers(voucher_id) == {user_id}
    assert v.pending(voucher_id) == {str(user_id): f"{resumed.accepted_ms}:retry:4242"}
    # The first request, had it lived on, can no longer give back what it lost.
    assert gate.release(first) is False
    assert v.stock(voucher_id) == 4


def test_a_resumed_press_gives_its_own_id_back_to_the_block(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=5)
    user_id = new_user()
    gate.reserve(voucher_id, user_id, "lost-request", 4242)
    resumed = gate.reserve(voucher_id, user_id)
    fresh = gate.reserve(voucher_id, new_user())
    assert isinstance(resumed, Reservation)
    assert isinstance(fresh, Reservation)
    assert resumed.order_id == 4242
    assert gate.ids.take() & SEQUENCE_MASK == (fresh.order_id & SEQUENCE_MASK) + 1  # nothing skipped


def close(v: Vouchers, voucher_id: int) -> None:
    """The window's end passes, by the server's clock (a stop closes it to 0/0 alike)."""
    v.redis.hset(keys.window(voucher_id), "end", server_ms(v.redis) - 1)


def test_after_the_close_an_unpromised_order_id_is_handed_to_the_caller_not_resumed(gate: Gate, v: Vouchers) -> None:
    """The script cannot fail the order in MySQL: it names the earlier request's
    reservation, and writes nothing (the caller fails the order, then releases it)."""
    voucher_id = v.make(stock=5)
    user_id = new_user()
    first = gate.reserve(voucher_id, user_id, "died-after-the-gate", 4242)
    close(v, voucher_id)
    held = v.pending(voucher_id)
    assert gate.reserve(voucher_id, user_id, "retry") == Unsent(first)
    assert (v.stock(voucher_id), v.buyers(voucher_id), v.pending(voucher_id)) == (4, {user_id}, held)


def test_after_the_close_a_promised_order_is_ended_and_left_alone(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=5)
    user_id = new_user()
    win(gate, voucher_id, user_id)
    held = v.pending(voucher_id)
    close(v, voucher_id)
    assert refused(gate, voucher_id, user_id).code == "ENDED"
    assert (v.stock(voucher_id), v.buyers(voucher_id), v.pending(voucher_id)) == (4, {user_id}, held)


def test_after_the_close_a_retried_gate_call_still_gets_its_own_reservation_back(gate: Gate, v: Vouchers) -> None:
    """redis-py retried the call whose first run reserved inside the window: that
    request is accepted, like any request still running at the close."""
    voucher_id = v.make(stock=5)
    user_id = new_user()
    first = gate.reserve(voucher_id, user_id, "request-1")
    close(v, voucher_id)
    assert gate.reserve(voucher_id, user_id, "request-1") == first
    assert v.stock(voucher_id) == 4


def test_promise_marks_the_order_whichever_request_holds_it(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=5)
    user_id = new_user()
    first = gate.reserve(voucher_id, user_id, token(), 77)
    assert gate.promise(voucher_id, user_id, 78) is False
    assert gate.promise(voucher_id, user_id, 77) is True
    assert gate.promise(voucher_id, user_id, 77) is True
    assert v.pending(voucher_id) == {str(user_id): f"{first.accepted_ms}:{first.token}:77:promised"}
    assert gate.settle(voucher_id, user_id, 77) is True
    assert gate.promise(voucher_id, user_id, 77) is False


# --- precedence: found, window, stock, duplicate --------------------------------------------

BUYER = 77


@pytest.mark.parametrize(
    ("stock", "begin", "end", "buyers", "expected"),
    [
        pytest.param(None, HOUR_MS, 2 * HOUR_MS, (BUYER,), "VOUCHER_NOT_FOUND", id="not-found-beats-not-started"),
        pytest.param(None, -2 * HOUR_MS, -HOUR_MS, (), "VOUCHER_NOT_FOUND", id="not-found-beats-ended"),
        pytest.param(0, -2 * HOUR_MS, -HOUR_MS, (), "ENDED", id="ended-beats-sold-out"),
        pytest.param(0, HOUR_MS, 2 * HOUR_MS, (), "NOT_STARTED", id="not-started-beats-sold-out"),
        pytest.param(5, HOUR_MS, 2 * HOUR_MS, (BUYER,), "NOT_STARTED", id="not-started-beats-duplicate"),
        pytest.param(5, -2 * HOUR_MS, -HOUR_MS, (BUYER,), "ENDED", id="ended-beats-duplicate"),
        pytest.param(0, -HOUR_MS, HOUR_MS, (BUYER,), "SOLD_OUT", id="sold-out-beats-duplicate"),
    ],
)
def test_order_of_precedence(
    gate: Gate,
    v: Vouchers,
    stock: int | None,
    begin: int,
    end: int,
    buyers: tuple[int, ...],
    expected: str,
) -> None:
    voucher_id = v.make(stock=stock, begin_offset_ms=begin, end_offset_ms=end, buyers=buyers)
    assert refused(gate, voucher_id, BUYER).code == expected
    assert v.stock(voucher_id) == stock
    assert v.pending(voucher_id) == {}


# --- a retried call -------------------------------------------------------------------------


def test_a_retried_gate_call_gets_its_own_reservation_back_not_duplicate(gate: Gate, v: Vouchers) -> None:
    """redis-py retries a command whose reply timed out: the retry must not be refused as
    DUPLICATE_ORDER by the reservation the first attempt made, nor take a second unit."""
    voucher_id = v.make(stock=2)
    first = gate.reserve(voucher_id, BUYER, "request-1", 5)
    again = gate.reserve(voucher_id, BUYER, "request-1", 5)
    assert again == first
    assert v.stock(voucher_id) == 1
    # Once promised, another request of the same user is a duplicate.
    gate.promise(voucher_id, BUYER, 5)
    assert refused(gate, voucher_id, BUYER).code == "DUPLICATE_ORDER"
    assert v.stock(voucher_id) == 1


# --- release ---------------------------------------------------------------------------------


def test_release_restores_stock_and_buyers_and_is_idempotent(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=3)
    keeper = gate.reserve(voucher_id, new_user(), token())
    reservation = gate.reserve(voucher_id, new_user(), token())
    assert v.stock(voucher_id) == 1

    assert gate.release(reservation) is True
    assert v.stock(voucher_id) == 2
    assert v.buyers(voucher_id) == {keeper.user_id}
    assert set(v.pending(voucher_id)) == {str(keeper.user_id)}

    # Again (a retry): nothing more is given back.
    assert gate.release(reservation) is False
    assert v.stock(voucher_id) == 2
    assert v.buyers(voucher_id) == {keeper.user_id}

    # The user may now buy again.
    gate.reserve(voucher_id, reservation.user_id, token())
    assert v.stock(voucher_id) == 1


def test_release_refuses_a_different_token(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=3)
    reservation = gate.reserve(voucher_id, new_user(), token())
    other = replace(reservation, token=token())
    assert gate.release(other) is False
    assert v.stock(voucher_id) == 2
    assert v.buyers(voucher_id) == {reservation.user_id}
    assert str(reservation.user_id) in v.pending(voucher_id)


def test_release_of_an_old_request_leaves_a_newer_reservation_alone(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=3)
    old = gate.reserve(voucher_id, new_user(), token())
    assert gate.release(old) is True
    new = gate.reserve(voucher_id, old.user_id, token())
    # A late retry of the old request's release must not undo the new reservation.
    assert gate.release(old) is False
    assert v.stock(voucher_id) == 2
    assert v.pending(voucher_id) == {str(new.user_id): f"{new.accepted_ms}:{new.token}:{new.order_id}"}


def test_release_with_nothing_reserved(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=3)
    assert gate.release(Reservation(voucher_id, new_user(), token(), 1, 1)) is False
    assert v.stock(voucher_id) == 3


# --- settle ----------------------------------------------------------------------------------


def test_settle_clears_only_the_matching_order_id(gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=3)
    reservation = gate.reserve(voucher_id, new_user(), token(), 9001)

    assert gate.settle(voucher_id, reservation.user_id, 9002) is False
    assert str(reservation.user_id) in v.pending(voucher_id)

    assert gate.settle(voucher_id, reservation.user_id, 9001) is True
    assert v.pending(voucher_id) == {}
    # Settling is not releasing: the unit stays sold and the user stays a buyer.
    assert v.stock(voucher_id) == 2
    assert v.buyers(voucher_id) == {reservation.user_id}

    assert gate.settle(voucher_id, reservation.user_id, 9001) is False


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def dead_scripts() -> Scripts:
    """Scripts bound to a Redis that is not there: any call would raise ConnectionError."""
    dead = redis_lib.Redis(port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=None)
    return Scripts.register(dead)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def caching_gate(redis: Any, scripts: Scripts, clock: FakeClock) -> Gate:
    return Gate(redis, scripts, refusal_cache_seconds=5.0, clock=clock)


def test_sold_out_is_refused_from_the_cache_without_redis(caching_gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=0)
    assert refused(caching_gate, voucher_id, new_user()).code == "SOLD_OUT"
    # Any call to Redis now fails loudly; the cached refusal must not make one.
    caching_gate.scripts = dead_scripts()
    error = refused(caching_gate, voucher_id, new_user())
    assert (error.code, error.status) == ("SOLD_OUT", 409)


def test_cached_refusal_expires(caching_gate: Gate, v: Vouchers, clock: FakeClock) -> None:
    voucher_id = v.make(stock=0)
    assert refused(caching_gate, voucher_id, new_user()).code == "SOLD_OUT"
    # Redis now says "not found"; while the cache holds, the answer is still SOLD_OUT.
    v.delete(voucher_id)
    clock.now += 4.9
    assert refused(caching_gate, voucher_id, new_user()).code == "SOLD_OUT"
    clock.now += 0.2
    assert refused(caching_gate, voucher_id, new_user()).code == "VOUCHER_NOT_FOUND"


def test_ended_is_cached(caching_gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=5, begin_offset_ms=-HOUR_MS, end_offset_ms=-1_000)
    assert refused(caching_gate, voucher_id, new_user()).code == "ENDED"
    caching_gate.scripts = dead_scripts()
    assert refused(caching_gate, voucher_id, new_user()).code == "ENDED"


def test_cache_is_per_voucher(caching_gate: Gate, v: Vouchers) -> None:
    sold_out, on_sale = v.make(stock=0), v.make(stock=5)
    assert refused(caching_gate, sold_out, new_user()).code == "SOLD_OUT"
    caching_gate.reserve(on_sale, new_user(), token())
    assert v.stock(on_sale) == 4


def test_not_started_and_duplicate_are_not_cached(caching_gate: Gate, v: Vouchers, redis: Any) -> None:
    # NOT_STARTED changes by itself as time passes.
    voucher_id = v.make(stock=5, begin_offset_ms=HOUR_MS, end_offset_ms=2 * HOUR_MS)
    assert refused(caching_gate, voucher_id, new_user()).code == "NOT_STARTED"
    now = server_ms(redis)
    redis.hset(keys.window(voucher_id), mapping={"begin": now - 1_000, "end": now + HOUR_MS})
    caching_gate.reserve(voucher_id, new_user(), token())

    # DUPLICATE_ORDER is about one user; caching it per voucher would refuse everyone.
    buyer = new_user()
    win(caching_gate, voucher_id, buyer)
    assert refused(caching_gate, voucher_id, buyer).code == "DUPLICATE_ORDER"
    caching_gate.reserve(voucher_id, new_user(), token())
    assert v.stock(voucher_id) == 2


def test_zero_cache_seconds_always_asks_redis(gate: Gate, v: Vouchers, redis: Any) -> None:
    voucher_id = v.make(stock=0)
    assert refused(gate, voucher_id, new_user()).code == "SOLD_OUT"
    redis.set(stock_key(voucher_id), 1)
    gate.reserve(voucher_id, new_user(), token())
    assert v.stock(voucher_id) == 0


def test_release_clears_the_cached_refusal(caching_gate: Gate, v: Vouchers) -> None:
    voucher_id = v.make(stock=1)
    reservation = caching_gate.reserve(voucher_id, new_user(), token())
    assert refused(caching_gate, voucher_id, new_user()).code == "SOLD_OUT"
    # Queueing failed, the unit comes back: the next buyer must not be refused from the cache.
    assert caching_gate.release(reservation) is True
    winner = caching_gate.reserve(voucher_id, new_user(), token())
    assert v.stock(voucher_id) == 0
    assert v.buyers(voucher_id) == {winner.user_id}


def test_cache_expiry_survives_a_release_in_between(redis: Any, scripts: Scripts, v: Vouchers) -> None:
    # A threaded server shares one Gate: another request's release may drop the cached
    # refusal between this request's look-up and its expiry check. Simulated here by a
    # clock that runs that release when asked the time.
    clock = FakeClock()
    gate = Gate(redis, scripts, refusal_cache_seconds=5.0, clock=clock)
    voucher_id = v.make(stock=1)
    holder = gate.reserve(voucher_id, new_user(), token())
    assert refused(gate, voucher_id, new_user()).code == "SOLD_OUT"

    def interleaved() -> float:
        gate.release(holder)
        return clock.now + 10

    gate.clock = interleaved
    winner = gate.reserve(voucher_id, new_user(), token())
    assert v.buyers(voucher_id) == {winner.user_id}


# --- concurrency -----------------------------------------------------------------------------


def test_concurrent_flash_sale_sells_exactly_the_stock(gate: Gate, v: Vouchers, redis: Any) -> None:
    stock, users, requests, threads = 100, 400, 2000, 50
    voucher_id = v.make(stock=stock)
    base = secrets.randbelow(10**9) + 1
    done = threading.Event()
    samples: list[int] = []

    def sample() -> None:
        # Watch the stock key while the sale runs: it must never go below 0.
        while not done.is_set():
            samples.append(int(redis.get(stock_key(voucher_id))))

    def attempt(i: int) -> tuple[int, str, int | None]:
        """As the API does: reserve with an order id of the block (or resume one), promise."""
        user_id = base + i % users
        reservation = gate.reserve(voucher_id, user_id, token())
        if isinstance(reservation, Refusal):
            return user_id, reservation.code, None
        assert isinstance(reservation, Reservation)
        order_id = reservation.order_id
        gate.promise(voucher_id, user_id, order_id)
        return user_id, "OK", order_id

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            outcomes = list(pool.map(attempt, range(requests)))
    finally:
        done.set()
        sampler.join()

    orders = {(u, o) for u, code, o in outcomes if code == "OK"}
    winners = [u for u, _ in orders]
    assert len(orders) == stock, "one order id per unit sold (a resumed press shares its order)"
    assert len(set(winners)) == stock, "a user won twice"
    assert {code for _, code, _ in outcomes} <= {"OK", "SOLD_OUT", "DUPLICATE_ORDER"}
    assert v.stock(voucher_id) == 0
    assert v.buyers(voucher_id) == set(winners)
    assert set(v.pending(voucher_id)) == {str(u) for u in winners}
    assert samples
    assert min(samples) >= 0


# --- scripts survive SCRIPT FLUSH ------------------------------------------------------------


def test_scripts_are_reloaded_after_script_flush() -> None:
    """On a Redis server of its own: SCRIPT FLUSH empties the scripts of the whole server,
    and another suite or worker sharing it would load them back in between."""
    with redis_server() as url:
        redis = redis_client(Settings.from_env({"REDIS_URL": url}))
        scripts = Scripts.register(redis)
        gate, v = Gate(redis, scripts, refusal_cache_seconds=0), Vouchers(redis)
        voucher_id = v.make(stock=2)
        redis.script_flush()
        assert redis.script_exists(scripts.gate.sha) == [False]
        reservation = gate.reserve(voucher_id, new_user(), token(), 777)
        assert redis.script_exists(scripts.gate.sha) == [True]

        redis.script_flush()
        assert gate.promise(voucher_id, reservation.user_id, 777) is True

        redis.script_flush()
        assert gate.settle(voucher_id, reservation.user_id, 777) is True
        redis.script_flush()
        assert gate.release(reservation) is False
        assert v.stock(voucher_id) == 1


# --- one mark format, one parser per language -----------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "1700000000000:tok",
        "1700000000000:tok:1234567890123456789",
        "1700000000000:tok:1234567890123456789:",
        "1700000000000:tok:1234567890123456789:promised",
        "1:dlq:42:promised",
        "1700000000000:tok:123:sent",
        "1700000000000:tok:",
        "x:tok",
        "1700000000000",
        "",
    ],
)
def test_the_lua_and_python_parsers_of_a_mark_agree(redis: Any, value: str) -> None:
    library = (lua_dir() / "lib" / "mark.lua").read_text(encoding="utf-8")
    parsed = redis.eval(library + "return {parse_mark(ARGV[1])}", 0, value)
    mark = Mark.parse(value)
    if mark is None:
        assert parsed == []
    else:
        # Lua returns true as 1 and drops a trailing false (nil-terminated table).
        lua = (int(parsed[0]), parsed[1], int(parsed[2]), len(parsed) > 3 and parsed[3] == 1)
        assert lua == (mark.accepted_ms, mark.token, mark.order_id, mark.promised)
