"""Draw vouchers through SeckillApiFunction and the draw clock (docs/draw.md): creation,
entries, the record, every refusal of a press on a draw, the cursor's moves, and a
Redis loss mid-sale; real Redis, MariaDB and a moto SQS server.

A draw's timeline is minutes long; ``shift`` moves one voucher's whole timeline
earlier (MySQL and Redis alike) instead of waiting for it.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from seckill import passes
from seckill.draw import entries, moves
from seckill.draw.moves import ClockMessage, ClockQueue, Tick
from seckill.draw.tickets import ahead, early_ticket, late_ticket
from seckill.edge.state import EdgeState
from seckill.holds import expire
from seckill.infra import keys
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.infra.timeutil import from_ms
from seckill.messages import OrderMessage, OrderQueue
from seckill.passes import KeyRing
from seckill.persist.persistence import Decision, decide_orders, fail_unqueued, persist_orders
from seckill.repair.restore import restore
from seckill_demo.minted import FORGED_TICKET, minted_pass
from seckill_local.template import Template
from seckill_ops import dlq_replay
from tests.helpers import (
    Handler,
    accepted,
    admin_event,
    as_user,
    body,
    db_rows,
    drain,
    expect_refusal,
    fresh,
    iso,
    load_event,
    module_of,
    new_user,
    persist,
    race,
    reconcile_voucher,
    recover,
    seckill_event,
    seckill_voucher_body,
    shop_list,
    sqs_record,
    statements,
    status_event,
    stocks,
    with_path,
)

Call = Callable[[dict[str, Any]], dict[str, Any]]
SHOP = 4242
# A body's draw fields left out: a race.
RACE = {"admission": None, "admitFactor": None, "drawCloseSeconds": None, "waveSeconds": None}


def token_of(user_id: int) -> str:
    return f"token-of-user-{user_id}"


def authorized(event: dict[str, Any], user_id: int | None, token: str | None = None) -> dict[str, Any]:
    as_user(event, user_id)
    event["headers"]["authorization"] = f"Bearer {token or token_of(user_id or 0)}"
    return event


def enter_event(voucher_id: int, user_id: int | None, method: str = "POST", token: str | None = None) -> dict[str, Any]:
    name = "seckill_api_enter_draw.json" if method == "POST" else "seckill_api_get_entry.json"
    event = with_path(load_event(name), f"/voucher-order/seckill/{voucher_id}/entry", voucherId=str(voucher_id))
    return authorized(event, user_id, token)


def draw_event(voucher_id: int | str) -> dict[str, Any]:
    event = load_event("seckill_api_get_draw.json")
    return with_path(event, f"/voucher/seckill/{voucher_id}/draw", voucherId=str(voucher_id))


def press_event(voucher_id: int, user_id: int | None, shown: str | None, token: str | None = None) -> dict[str, Any]:
    event = authorized(seckill_event(voucher_id, user_id), user_id, token)
    if shown is not None:
        event["headers"][passes.PASS_HEADER] = shown
    return event


def draw_body(**changes: Any) -> dict[str, Any]:
    now = datetime.now(UTC)
    values: dict[str, Any] = {
        "beginTime": iso(now + timedelta(seconds=30)),
        "endTime": iso(now + timedelta(hours=1)),
        "admission": "draw",
        "drawCloseSeconds": 20,
        "waveSeconds": 5,
        "admitFactor": 2,
    }
    values.update(changes)
    return seckill_voucher_body(SHOP, **values)


def shift(db: Database, redis: Any, voucher_id: int, seconds: float) -> None:
    """Move the voucher's whole timeline (window, close, clock, moves) ``seconds`` earlier."""
    ms = int(seconds * 1000)

    def update(cursor: Any) -> None:
        cursor.execute(
            "UPDATE tb_seckill_voucher SET begin_time = begin_time - INTERVAL %s MICROSECOND,"
            " end_time = end_time - INTERVAL %s MICROSECOND WHERE voucher_id = %s",
            (ms * 1000, ms * 1000, voucher_id),
        )
        cursor.execute(
            "UPDATE tb_draw SET close_time = close_time - INTERVAL %s MICROSECOND, clock_at = clock_at - %s"
            " WHERE voucher_id = %s",
            (ms * 1000, ms, voucher_id),
        )
        cursor.execute("UPDATE tb_draw_move SET at_ms = at_ms - %s WHERE voucher_id = %s", (ms, voucher_id))

    db.run(update)
    window = redis.hgetall(keys.window(voucher_id))
    times = [f for f in ("begin", "end", "close", "decided") if f in window]
    redis.hset(keys.window(voucher_id), mapping={f: int(window[f]) - ms for f in times})
    moved = redis.zrange(keys.cursor(voucher_id), 0, -1, withscores=True)
    redis.delete(keys.cursor(voucher_id))
    for cursor_, at in moved:
        redis.zadd(keys.cursor(voucher_id), {cursor_: int(at) - ms})


def draw_row(db: Database, voucher_id: int) -> dict[str, Any]:
    [row] = db_rows(db, "SELECT * FROM tb_draw WHERE voucher_id = %s", voucher_id)
    return row


@pytest.fixture
def clock(sqs: Any, queues: dict[str, str]) -> ClockQueue:
    return ClockQueue(sqs, queues["DrawClockQueue"])


@pytest.fixture
def draws(call: Call, redis: Any, sqs: Any, session_queues: dict[str, str]) -> Iterator[Callable[..., int]]:
    """Draw vouchers created through the API; their Redis keys removed afterwards."""
    made: list[int] = []

    def make(**changes: Any) -> int:
        response = call(admin_event("seckill_api_add_seckill_voucher.json", draw_body(**changes)))
        assert response["statusCode"] == 201, response
        made.append(int(body(response)["data"]))
        return made[-1]

    yield make
    drain(sqs, session_queues["DrawClockQueue"])
    for voucher_id in made:
        redis.delete(*keys.gate_keys(voucher_id), keys.returned(voucher_id), keys.edge(voucher_id))


def enter(call: Call, voucher_id: int, user_id: int) -> dict[str, Any]:
    response = call(enter_event(voucher_id, user_id))
    assert response["statusCode"] == 200, response
    entry: dict[str, Any] = body(response)["data"]
    return entry


def decide(db: Database, redis: Any, clock: ClockQueue, voucher_id: int) -> moves.Decided:
    """The clock's message for the draw's next time, as DrawClockFunction handles it."""
    return moves.tick(db, redis, clock, ClockMessage(voucher_id, int(draw_row(db, voucher_id)["clock_at"])))


def cursor_in_redis(redis: Any, voucher_id: int) -> list[tuple[str, int]]:
    return [(c, int(at)) for c, at in redis.zrange(keys.cursor(voucher_id), 0, -1, withscores=True)]


# --- creation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"admission": "lottery"}, "admission"),
        ({"admitFactor": 0}, "admitFactor"),
        ({"admitFactor": 101}, "admitFactor"),
        ({"admitFactor": "2"}, "admitFactor"),
        ({"drawCloseSeconds": 4}, "drawCloseSeconds"),
        # Its close would fall before the year 1.
        ({"beginTime": "0001-01-01T00:00Z"}, "beginTime"),
        ({"drawCloseSeconds": 3601}, "drawCloseSeconds"),
        ({"waveSeconds": 4}, "waveSeconds"),
        ({"waveSeconds": 3601}, "waveSeconds"),
        ({**RACE, "admission": "race", "admitFactor": 2}, "admitFactor"),
        ({**RACE, "waveSeconds": 10}, "waveSeconds"),
        ({**RACE, "admission": "race", "drawCloseSeconds": 60}, "drawCloseSeconds"),
        # The window must open more than drawCloseSeconds from now.
        ({"beginTime": iso(datetime.now(UTC) + timedelta(seconds=50)), "drawCloseSeconds": 60}, "beginTime"),
    ],
)
def test_a_draw_out_of_range_or_a_race_with_draw_fields_is_a_400_naming_the_field(
    call: Call, db: Database, changes: dict[str, Any], field: str
) -> None:
    before = db_rows(db, "SELECT COUNT(*) AS n FROM tb_voucher WHERE shop_id = %s", SHOP)[0]["n"]
    response = call(admin_event("seckill_api_add_seckill_voucher.json", draw_body(**changes)))
    expect_refusal(response, 400, "BAD_REQUEST")
    assert body(response)["errorMsg"].startswith(f"{field}:"), response
    assert db_rows(db, "SELECT COUNT(*) AS n FROM tb_voucher WHERE shop_id = %s", SHOP)[0]["n"] == before


def test_a_draw_gets_its_defaults_a_secret_seed_its_commitment_and_its_first_clock_message(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], sqs: Any, session_queues: dict[str, str]
) -> None:
    drain(sqs, session_queues["DrawClockQueue"])
    begin = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)
    voucher_id = draws(beginTime=iso(begin), admitFactor=None, drawCloseSeconds=None, waveSeconds=None)
    row = draw_row(db, voucher_id)
    assert (row["admit_factor"], row["close_seconds"], row["wave_seconds"]) == (2, 60, 10)
    assert len(bytes(row["seed"])) == 32
    assert row["commitment"] == hashlib.sha256(bytes(row["seed"])).hexdigest()
    close_ms = int((begin - timedelta(seconds=60)).timestamp() * 1000)
    assert int(row["clock_at"]) == close_ms
    window = redis.hgetall(keys.window(voucher_id))
    assert (window["draw"], int(window["close"])) == ("1", close_ms)
    # The clock's first message, due at the close (delayed: nothing to read yet).
    assert drain(sqs, session_queues["DrawClockQueue"]) == []
    listed = shop_list(call, SHOP)
    assert listed[voucher_id]["admission"] == "draw"
    assert datetime.fromisoformat(listed[voucher_id]["closesAt"]) == begin - timedelta(seconds=60)
    record = body(call(draw_event(voucher_id)))["data"]
    assert record["commitment"] == row["commitment"]
    assert (record["seed"], record["cursor"], record["cursorHistory"], record["entrants"]) == (None, None, [], 0)


def test_a_race_is_listed_as_one_and_has_no_draw(call: Call, make_voucher: Callable[..., int]) -> None:
    voucher_id = make_voucher(shop_id=SHOP)
    listed = shop_list(call, SHOP)
    assert (listed[voucher_id]["admission"], listed[voucher_id]["closesAt"]) == ("race", None)
    expect_refusal(call(draw_event(voucher_id)), 404, "VOUCHER_NOT_FOUND")
    expect_refusal(call(enter_event(voucher_id, new_user())), 409, "NOT_A_DRAW")
    expect_refusal(call(enter_event(voucher_id, new_user(), "GET")), 404, "ENTRY_NOT_FOUND")


# --- entries -----------------------------------------------------------------------------------


def test_an_entry_before_the_close_gets_the_seeds_ticket_and_the_same_again(
    call: Call, db: Database, draws: Callable[..., int]
) -> None:
    voucher_id, user = draws(), new_user()
    first = enter(call, voucher_id, user)
    seed = bytes(draw_row(db, voucher_id)["seed"])
    assert (first["ticket"], first["late"]) == (early_ticket(seed, voucher_id, user), False)
    again = enter(call, voucher_id, user)
    assert (again["ticket"], again["late"]) == (first["ticket"], False)
    ring = KeyRing.from_json(passes.load_ring().to_json())  # type: ignore[union-attr]
    end = int(db_rows(db, "SELECT UNIX_TIMESTAMP(end_time) AS e FROM tb_seckill_voucher WHERE voucher_id = %s",
                      voucher_id)[0]["e"])  # fmt: skip
    assert passes.verify(ring, first["pass"], voucher_id, user, token_of(user), end - 1) == first["ticket"]
    assert passes.verify(ring, first["pass"], voucher_id, user, token_of(user), end) is None  # not past the end
    [stored] = db_rows(db, "SELECT ticket, late FROM tb_draw_entry WHERE voucher_id = %s", voucher_id)
    assert (stored["ticket"], stored["late"]) == (first["ticket"], 0)
    status = body(call(enter_event(voucher_id, user, "GET")))["data"]
    # ahead: the share of the one entrant below the ticket, estimated (no cursor yet).
    estimate = ahead(first["ticket"], None, early=1, late=0)
    expected = {"ticket": first["ticket"], "late": False, "admitted": False, "ahead": estimate, "chance": "waiting"}
    assert status == expected


def test_entries_after_the_close_queue_behind_in_order_of_entry(
    call: Call, db: Database, redis: Any, draws: Callable[..., int]
) -> None:
    voucher_id = draws()
    early = enter(call, voucher_id, new_user())
    shift(db, redis, voucher_id, 21)  # the draw closed a second ago
    late_users = [new_user() for _ in range(3)]
    tickets = [enter(call, voucher_id, u) for u in late_users]
    assert [(t["ticket"], t["late"]) for t in tickets] == [(late_ticket(n), True) for n in (1, 2, 3)]
    assert enter(call, voucher_id, late_users[1])["ticket"] == late_ticket(2)  # the same again
    assert early["ticket"] < tickets[0]["ticket"]
    record = body(call(draw_event(voucher_id)))["data"]
    assert (record["entrants"], record["lateEntrants"]) == (4, 3)


def test_late_entries_number_themselves_in_order_while_the_clock_holds_the_draw_row(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], settings: Any
) -> None:
    voucher_id = draws()
    shift(db, redis, voucher_id, 21)  # closed a second ago
    users = [new_user() for _ in range(12)]
    ticks = Database.from_settings(settings)  # another connection: the clock's
    held, release = threading.Event(), threading.Event()

    def tick_holding_the_row(cursor: Any) -> None:
        cursor.execute("SELECT 1 FROM tb_draw WHERE voucher_id = %s FOR UPDATE", (voucher_id,))
        held.set()
        release.wait(30)

    clock_thread = threading.Thread(target=lambda: ticks.run(tick_holding_the_row))
    clock_thread.start()
    try:
        assert held.wait(10)
        # Twelve users at once, each twice: every entry made while the row stays locked. (The
        # core, each thread on a connection of its own: the handler serves one request at a
        # time, as Lambda runs it, and its resolver's current event is one per process.)
        with ThreadPoolExecutor(8) as pool:
            tickets = list(pool.map(lambda u: entries.enter(db, voucher_id, u).ticket, users + users))
    finally:
        release.set()
        clock_thread.join()
    assert tickets[:12] == tickets[12:]  # the same user, the same ticket
    assert sorted(tickets[:12]) == [late_ticket(n) for n in range(1, 13)]  # 1 to 12, no gap, none twice
    record = body(call(draw_event(voucher_id)))["data"]
    assert (record["entrants"], record["lateEntrants"]) == (12, 12)


def test_no_entry_once_the_sale_is_stopped_and_the_seed_is_then_revealed(
    call: Call, db: Database, draws: Callable[..., int]
) -> None:
    voucher_id, user = draws(), new_user()
    ticket = enter(call, voucher_id, user)["ticket"]
    assert body(call(draw_event(voucher_id)))["data"]["seed"] is None
    stop = with_path(load_event("seckill_api_stop_voucher.json"), f"/voucher/seckill/{voucher_id}/stop",
                     voucherId=str(voucher_id))  # fmt: skip
    assert call(stop)["statusCode"] == 200
    expect_refusal(call(enter_event(voucher_id, new_user())), 409, "ENDED")
    record = body(call(draw_event(voucher_id)))["data"]  # the container that stopped it reads it again
    seed = bytes.fromhex(record["seed"])
    assert hashlib.sha256(seed).hexdigest() == record["commitment"]
    assert early_ticket(seed, voucher_id, user) == ticket
    assert body(call(enter_event(voucher_id, user, "GET")))["data"]["chance"] == "over"


def test_the_record_counts_entries_made_at_once_and_reads_the_count_not_the_entries(
    call: Call, db: Database, redis: Any, draws: Callable[..., int]
) -> None:
    voucher_id = draws()
    early, late = [new_user() for _ in range(24)], [new_user() for _ in range(6)]
    # Each user enters twice at once: one entry, counted once.
    race(*[lambda u=u: entries.enter(db, voucher_id, u) for u in early for _ in range(2)])
    shift(db, redis, voucher_id, 21)  # the draw closed a second ago
    race(*[lambda u=u: entries.enter(db, voucher_id, u) for u in late for _ in range(2)])
    [stored] = db_rows(db, "SELECT COUNT(*) AS n FROM tb_draw_entry WHERE voucher_id = %s", voucher_id)
    assert stored["n"] == len(early) + len(late)
    # The record reads the kept count, never the entries: rows deleted behind its back still
    # count (and no record of this draw was read before, so none is cached).
    db_rows(db, "DELETE FROM tb_draw_entry WHERE voucher_id = %s", voucher_id)
    record = body(call(draw_event(voucher_id)))["data"]
    assert (record["entrants"], record["lateEntrants"]) == (len(early) + len(late), len(late))


def test_a_container_serves_a_record_as_read_for_a_second_and_never_past_the_windows_end(
    db: Database, redis: Any, draws: Callable[..., int]
) -> None:
    voucher_id = draws()
    now = [1000.0]
    records = entries.Records(db, entries.RECORD_MAX_AGE, clock=lambda: now[0])
    uncached = entries.Records(db, 0, clock=lambda: now[0])  # a stack with the edge: its cache is the record's
    assert records.get(voucher_id)["entrants"] == uncached.get(voucher_id)["entrants"] == 0
    entries.enter(db, voucher_id, new_user())
    now[0] += entries.RECORD_MAX_AGE * 0.9
    assert records.get(voucher_id)["entrants"] == 0  # as read
    assert uncached.get(voucher_id)["entrants"] == 1
    now[0] += entries.RECORD_MAX_AGE * 0.2
    assert records.get(voucher_id)["entrants"] == 1
    # The window ends 0.6 s from now: the record read before is not served past its end.
    [left] = db_rows(db, "SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(3), end_time) AS us"
                         " FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)  # fmt: skip
    shift(db, redis, voucher_id, int(left["us"]) / 1e6 - 0.6)
    now[0] += 5
    assert records.get(voucher_id)["seed"] is None
    time.sleep(0.8)  # the window is over now
    now[0] += 0.7  # less than RECORD_MAX_AGE after that reading
    assert records.get(voucher_id)["seed"] is not None


def test_unknown_vouchers_and_bad_ids(call: Call) -> None:
    expect_refusal(call(enter_event(2**62, new_user())), 404, "VOUCHER_NOT_FOUND")
    expect_refusal(call(draw_event(2**62)), 404, "VOUCHER_NOT_FOUND")
    expect_refusal(call(draw_event("abc")), 400, "BAD_REQUEST")
    expect_refusal(call(enter_event(1, None)), 401, "UNAUTHORIZED")


# --- a press on a draw: every refusal of the function -------------------------------------------


@pytest.fixture
def sale(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, order_queue: str
) -> dict[str, Any]:
    """A draw of 1 unit, admitFactor 2, three entrants; closed, first move made (2 admitted), open."""
    voucher_id = draws(stock=1)
    users = [new_user() for _ in range(3)]
    entries = {u: enter(call, voucher_id, u) for u in users}
    shift(db, redis, voucher_id, 31)  # opened a second ago
    assert decide(db, redis, clock, voucher_id).tick is Tick.MOVED
    ranked = sorted(users, key=lambda u: entries[u]["ticket"])
    return {"voucher": voucher_id, "entries": entries, "admitted": ranked[:2], "waiting": ranked[2]}


def test_a_draw_press_without_a_valid_pass_is_no_pass(call: Call, sale: dict[str, Any], monkeypatch: Any) -> None:
    v, entries = sale["voucher"], sale["entries"]
    user, other = sale["admitted"]
    own = entries[user]["pass"]
    expect_refusal(call(press_event(v, None, own)), 401, "UNAUTHORIZED")
    for shown, token in [
        (None, None),  # no pass
        ("not-a-pass", None),
        (own[:-2] + ("AA" if not own.endswith("AA") else "BB"), None),  # a bad signature
        (entries[other]["pass"], None),  # another user's pass
        (own, "another-token-of-the-user"),  # the pass shown with another token
        ("k9" + own[own.index(".") :], None),  # a key id the ring does not have
    ]:
        response = call(press_event(v, user, shown, token))
        expect_refusal(response, 403, "NO_PASS")
        assert response["body"] == (
            '{"success": false, "data": null, "errorMsg": "no valid pass for this voucher", "code": "NO_PASS"}'
        )
    # The ring rotated: the old key retired, the pass signed with it is worth nothing.
    monkeypatch.setenv("SECKILL_PASS_KEYS", passes.new_ring("t2").to_json())
    expect_refusal(call(press_event(v, user, own)), 403, "NO_PASS")


def test_a_pass_is_read_without_the_whitespace_around_it(
    call: Call, sale: dict[str, Any], orders_made: list[int]
) -> None:
    """As CloudFront and API Gateway pass a header (before: refused NO_PASS, where the
    local edge, whose Node.js trims it, let it through)."""
    v, entries = sale["voucher"], sale["entries"]
    expect_refusal(call(press_event(v, sale["waiting"], f" {entries[sale['waiting']]['pass']}\t")), 409, "NOT_ADMITTED")
    user = sale["admitted"][0]
    accepted = call(press_event(v, user, f"{entries[user]['pass']} "))
    assert accepted["statusCode"] == 202, accepted
    orders_made.append(int(body(accepted)["data"]))


def test_another_vouchers_pass_and_an_expired_pass_are_no_pass(
    call: Call, sale: dict[str, Any], draws: Callable[..., int]
) -> None:
    v, user = sale["voucher"], sale["admitted"][0]
    other = draws()
    elsewhere = enter(call, other, user)["pass"]
    expect_refusal(call(press_event(v, user, elsewhere)), 403, "NO_PASS")
    ring = passes.load_ring()
    assert ring is not None
    expired = passes.sign(ring, v, user, token_of(user), sale["entries"][user]["ticket"], 1_000_000_000)
    expect_refusal(call(press_event(v, user, expired)), 403, "NO_PASS")


def test_a_rotated_ring_verifies_the_old_passes_and_signs_new_ones_with_the_new_key(
    call: Call, sale: dict[str, Any], monkeypatch: Any, orders_made: list[int]
) -> None:
    v, user = sale["voucher"], sale["admitted"][0]
    old = passes.load_ring()
    assert old is not None
    rotated = KeyRing("t9", {**old.keys, "t9": bytes(range(32))})
    monkeypatch.setenv("SECKILL_PASS_KEYS", rotated.to_json())
    fresh = enter(call, v, user)
    assert fresh["pass"].startswith("t9.")
    assert fresh["ticket"] == sale["entries"][user]["ticket"]
    accepted = call(press_event(v, user, sale["entries"][user]["pass"]))  # signed with the old key
    assert accepted["statusCode"] == 202, accepted
    orders_made.append(int(body(accepted)["data"]))


def test_not_admitted_before_the_opening_and_after_a_sell_out_admitted_then_sold_out(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, orders_made: list[int],
    order_queue: str,
) -> None:  # fmt: skip
    voucher_id = draws(stock=1, admitFactor=2)
    users = [new_user() for _ in range(4)]
    entries = {u: enter(call, voucher_id, u) for u in users}
    ranked = sorted(users, key=lambda u: entries[u]["ticket"])
    shift(db, redis, voucher_id, 21)  # closed a second ago, opens in 9 s

    def press(user: int) -> dict[str, Any]:
        response = call(press_event(voucher_id, user, entries[user]["pass"]))
        if response["statusCode"] == 202:
            orders_made.append(int(body(response)["data"]))
        return response

    # Closed, no move recorded yet: a missing cursor admits nobody.
    expect_refusal(press(ranked[0]), 409, "NOT_ADMITTED")
    decided = decide(db, redis, clock, voucher_id)
    assert (decided.tick, decided.admitted, decided.cursor) == (Tick.MOVED, 2, entries[ranked[2]]["ticket"])
    response = press(ranked[2])
    expect_refusal(response, 409, "NOT_ADMITTED")
    assert (
        response["body"] == '{"success": false, "data": null, "errorMsg": "not admitted yet", "code": "NOT_ADMITTED"}'
    )
    expect_refusal(press(ranked[0]), 409, "NOT_STARTED")  # admitted, before the opening
    shift(db, redis, voucher_id, 10)
    assert press(ranked[1])["statusCode"] == 202
    expect_refusal(press(ranked[0]), 409, "SOLD_OUT")  # admitted, too late
    expect_refusal(press(ranked[3]), 409, "NOT_ADMITTED")  # not admitted, after the sell-out
    status = body(call(enter_event(voucher_id, ranked[3], "GET")))["data"]
    estimate = ahead(entries[ranked[3]]["ticket"], entries[ranked[2]]["ticket"], early=4, late=0)
    assert (status["admitted"], status["ahead"], status["chance"]) == (False, estimate, "waiting")


# --- the clock ---------------------------------------------------------------------------------


def test_the_first_move_admits_admit_factor_times_the_stock_and_is_one_move_however_often_told(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, sqs: Any,
    queues: dict[str, str],
) -> None:  # fmt: skip
    voucher_id = draws(stock=3, admitFactor=2)
    users = [new_user() for _ in range(10)]
    tickets = sorted(enter(call, voucher_id, u)["ticket"] for u in users)
    shift(db, redis, voucher_id, 21)
    close_at = int(draw_row(db, voucher_id)["clock_at"])
    early = moves.tick(db, redis, clock, ClockMessage(voucher_id, close_at + 1))
    assert early.tick is Tick.STALE  # not the draw's next time
    decided = moves.tick(db, redis, clock, ClockMessage(voucher_id, close_at))
    assert (decided.tick, decided.admitted, decided.cursor) == (Tick.MOVED, 6, tickets[6])
    again = moves.tick(db, redis, clock, ClockMessage(voucher_id, close_at))
    assert again.tick is Tick.STALE
    assert db_rows(db, "SELECT at_ms, cursor_after, admitted FROM tb_draw_move WHERE voucher_id = %s", voucher_id) == [
        {"at_ms": close_at, "cursor_after": tickets[6], "admitted": 6}
    ]
    assert cursor_in_redis(redis, voucher_id) == [(tickets[6], close_at)]
    # The next message is the first wave's, due 5 s before it takes effect.
    first_wave = int(draw_row(db, voucher_id)["clock_at"])
    begin = int(redis.hget(keys.window(voucher_id), "begin"))
    assert first_wave == begin + 5000
    [sent] = drain(sqs, queues["DrawClockQueue"]) or [None]  # delayed: perhaps not visible yet
    assert sent is None or json.loads(sent["Body"]) == {"voucherId": voucher_id, "at": first_wave}
    record = body(call(draw_event(voucher_id)))["data"]
    assert record["cursor"] == tickets[6]
    assert [m["cursor"] for m in record["cursorHistory"]] == [tickets[6]]


def test_a_message_that_comes_early_is_sent_again_and_decides_nothing(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, sqs: Any,
    queues: dict[str, str],
) -> None:  # fmt: skip
    voucher_id = draws()
    assert decide(db, redis, clock, voucher_id).tick is Tick.EARLY
    assert db_rows(db, "SELECT * FROM tb_draw_move WHERE voucher_id = %s", voucher_id) == []
    sqs.purge_queue(QueueUrl=queues["DrawClockQueue"])


def test_a_wave_admits_exactly_admit_factor_times_the_units_on_sale_even_after_an_expiry(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, scripts: Scripts,
    handlers: dict[str, Handler], context: Any, sqs: Any, order_queue: str, orders_made: list[int],
) -> None:  # fmt: skip
    voucher_id = draws(stock=2, admitFactor=2, waveSeconds=5)
    users = [new_user() for _ in range(12)]
    entries = {u: enter(call, voucher_id, u) for u in users}
    tickets = sorted(e["ticket"] for e in entries.values())
    shift(db, redis, voucher_id, 21)
    assert decide(db, redis, clock, voucher_id).admitted == 4
    shift(db, redis, voucher_id, 9)  # opened a second ago
    by_ticket = {e["ticket"]: u for u, e in entries.items()}
    buyer = by_ticket[tickets[0]]
    accepted = call(press_event(voucher_id, buyer, entries[buyer]["pass"]))
    assert accepted["statusCode"] == 202, accepted
    orders_made.append(int(body(accepted)["data"]))
    persist(handlers, context, sqs, order_queue)
    # Wave 1 (at begin + 5 s) is decided now, 5 s before: one unit on sale, so 2 more.
    shift(db, redis, voucher_id, 0.5)
    wave = decide(db, redis, clock, voucher_id)
    assert (wave.tick, wave.admitted, wave.cursor) == (Tick.MOVED, 2, tickets[6])
    # The buyer's hold expires: its unit goes back on sale, and the next wave counts it.
    db.run(lambda c: c.execute("UPDATE tb_voucher_order SET pay_by = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND"
                               " WHERE voucher_id = %s", (voucher_id,)))  # fmt: skip
    expire(db, redis, scripts, orders_made[-1])
    assert redis.get(keys.stock(voucher_id)) == "2"
    shift(db, redis, voucher_id, 5)
    wave = decide(db, redis, clock, voucher_id)
    assert (wave.tick, wave.admitted, wave.cursor) == (Tick.MOVED, 4, tickets[10])
    history = db_rows(db, "SELECT admitted, units FROM tb_draw_move WHERE voucher_id = %s ORDER BY at_ms", voucher_id)
    assert [(m["admitted"], m["units"]) for m in history] == [(4, 2), (2, 1), (4, 2)]
    assert [c for c, _ in cursor_in_redis(redis, voucher_id)] == [tickets[4], tickets[6], tickets[10]]


def test_a_wave_with_no_unit_on_sale_moves_nothing_and_the_clock_goes_on(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, template: Template,
    monkeypatch: pytest.MonkeyPatch, context: Any, sqs: Any,
) -> None:  # fmt: skip
    """And the wave decided as no move is published as decided, to Redis and to the edge
    (before: nothing, and the edge could not tell it from a wave it had not heard of)."""
    voucher_id = draws(stock=1)
    for _ in range(5):
        enter(call, voucher_id, new_user())
    shift(db, redis, voucher_id, 21)
    decide(db, redis, clock, voucher_id)
    at = int(draw_row(db, voucher_id)["clock_at"])
    assert redis.hget(keys.window(voucher_id), "decided") == str(at)  # every move before the first wave
    redis.set(keys.stock(voucher_id), 0)
    shift(db, redis, voucher_id, 9 + 0.5)
    edge_queue = sqs.create_queue(QueueName=f"edge-{new_user()}")["QueueUrl"]
    try:
        clock_function = fresh(template, "DrawClockFunction", monkeypatch, EDGE_STATE_QUEUE_URL=edge_queue)
        record = sqs_record(ClockMessage(voucher_id, at - 9500).to_json(), "draw_clock.json")
        assert clock_function.lambda_handler({"Records": [record]}, context) == {"batchItemFailures": []}
        assert int(draw_row(db, voucher_id)["clock_at"]) == at - 9500 + 5000  # the next wave
        assert len(cursor_in_redis(redis, voucher_id)) == 1
        assert redis.hget(keys.window(voucher_id), "decided") == str(at - 9500 + 5000)
        [message] = drain(sqs, edge_queue)
        state = EdgeState.from_message(message["Body"])
        assert (state.decided, len(state.moves)) == (at - 9500 + 5000, 1)
    finally:
        sqs.delete_queue(QueueUrl=edge_queue)


def test_decided_never_moves_back_and_the_moves_come_with_it(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue
) -> None:
    voucher_id = draws(stock=1)
    enter(call, voucher_id, new_user())
    shift(db, redis, voucher_id, 21)
    decide(db, redis, clock, voucher_id)
    at = int(draw_row(db, voucher_id)["clock_at"])
    # A publish that read MySQL before a later one ran after it: decided stays.
    redis.hset(keys.window(voucher_id), "decided", at + 60_000)
    redis.delete(keys.cursor(voucher_id))
    assert moves.publish(db, redis, voucher_id) == 1
    assert redis.hget(keys.window(voucher_id), "decided") == str(at + 60_000)
    assert len(cursor_in_redis(redis, voucher_id)) == 1
    # A window Redis lost gets no half hash: recovery brings it back, decided too.
    redis.delete(keys.window(voucher_id))
    moves.publish(db, redis, voucher_id)
    assert not redis.exists(keys.window(voucher_id))


def test_a_finished_clock_is_decided_until_the_end_of_the_window(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue
) -> None:
    voucher_id = draws(stock=1, waveSeconds=3600)  # no wave inside the hour's window
    shift(db, redis, voucher_id, 21)
    decide(db, redis, clock, voucher_id)
    assert draw_row(db, voucher_id)["clock_at"] is None
    assert redis.hget(keys.window(voucher_id), "decided") == redis.hget(keys.window(voucher_id), "end")


def test_the_clock_function_handles_its_sample_shaped_messages(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], handlers: dict[str, Handler], context: Any
) -> None:
    voucher_id = draws()
    shift(db, redis, voucher_id, 21)
    event = load_event("draw_clock.json")
    event["Records"][0]["body"] = ClockMessage(voucher_id, int(draw_row(db, voucher_id)["clock_at"])).to_json()
    malformed = json.loads(json.dumps(event["Records"][0]))
    malformed.update(messageId="bad", body='{"voucherId": "x"}')
    event["Records"].append(malformed)
    answer = handlers["DrawClockFunction"](event, context)
    assert answer == {"batchItemFailures": [{"itemIdentifier": "bad"}]}
    assert len(cursor_in_redis(redis, voucher_id)) == 1


def test_a_stalled_clock_is_restarted(
    db: Database, redis: Any, call: Call, draws: Callable[..., int], clock: ClockQueue, sqs: Any,
    queues: dict[str, str],
) -> None:  # fmt: skip
    voucher_id = draws()
    shift(db, redis, voucher_id, 21 + 61)
    assert voucher_id in moves.restart_stalled(db, clock)
    sent = [json.loads(m["Body"]) for m in drain(sqs, queues["DrawClockQueue"])]
    assert {"voucherId": voucher_id, "at": int(draw_row(db, voucher_id)["clock_at"])} in sent


# --- a Redis loss mid-sale ---------------------------------------------------------------------


def test_entries_moves_and_the_seed_survive_a_redis_loss_mid_sale(
    call: Call, db: Database, redis: Any, sale: dict[str, Any], sqs: Any, queues: dict[str, str],
    orders_made: list[int],
) -> None:  # fmt: skip
    v, entries = sale["voucher"], sale["entries"]
    before = cursor_in_redis(redis, v)
    record = body(call(draw_event(v)))["data"]
    redis.delete(*keys.gate_keys(v), keys.loaded())
    expect_refusal(call(press_event(v, sale["waiting"], entries[sale["waiting"]]["pass"])), 503, "TRY_AGAIN")
    recovered = recover(db, redis, sqs, queues)
    assert v in {r.voucher_id for r in recovered.rebuilt}
    assert cursor_in_redis(redis, v) == before
    assert redis.hget(keys.window(v), "draw") == "1"
    assert redis.hget(keys.window(v), "decided") == str(draw_row(db, v)["clock_at"])
    expect_refusal(call(press_event(v, sale["waiting"], entries[sale["waiting"]]["pass"])), 409, "NOT_ADMITTED")
    expect_refusal(call(press_event(v, sale["waiting"], None)), 403, "NO_PASS")
    user = sale["admitted"][0]
    accepted = call(press_event(v, user, entries[user]["pass"]))
    assert accepted["statusCode"] == 202, accepted
    orders_made.append(int(body(accepted)["data"]))
    assert body(call(draw_event(v)))["data"] == record
    assert enter(call, v, user)["ticket"] == entries[user]["ticket"]


@pytest.mark.parametrize(
    ("ticket", "code"),
    [
        ("000000001fffffffe", "OK"),  # the last admitted, differing in the low 8 hex only
        ("000000001ffffffff", "NOT_ADMITTED"),  # the cursor itself
        (
            "00000000200000000",
            "NOT_ADMITTED",
        ),  # above it in the high 9 hex, lower in the rest (and below the future move)
        ("0000000010fffffff", "OK"),
        ("10000000000000001", "NOT_ADMITTED"),  # a late entry
        ("", "NO_PASS"),
    ],
)
def test_the_gate_compares_tickets_byte_by_byte(
    redis: Any, gate: Any, make_voucher: Callable[..., int], ticket: str, code: str
) -> None:
    voucher_id = make_voucher()
    redis.hset(keys.window(voucher_id), mapping={"draw": 1, "close": 1})
    # An old move, the move in effect, and one decided ahead that does not apply yet.
    moves_ = {"000000000000000ff": 0, "000000001ffffffff": 1, "0ffffffffffffffff": 2**52}
    redis.zadd(keys.cursor(voucher_id), moves_)
    answer = gate.reserve(voucher_id, new_user(), ticket=ticket)
    assert getattr(answer, "code", "OK") == code
    redis.delete(keys.cursor(voucher_id))


# --- the close's move, whatever fails -------------------------------------------------------------


def clock_messages(sqs: Any, handlers_queues: dict[str, str]) -> list[dict[str, Any]]:
    """The clock's messages visible now on the queue the handlers send to."""
    return [json.loads(m["Body"]) for m in drain(sqs, handlers_queues["DrawClockQueue"])]


def test_after_the_close_no_move_admits_nobody_and_a_press_wakes_the_clock(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], sqs: Any, session_queues: dict[str, str],
    handlers: dict[str, Handler], context: Any, orders_made: list[int],
) -> None:  # fmt: skip
    voucher_id = draws(stock=5)
    early, late = new_user(), new_user()
    entries = {early: enter(call, voucher_id, early)}
    shift(db, redis, voucher_id, 21)  # closed a second ago
    entries[late] = enter(call, voucher_id, late)
    assert entries[late]["ticket"] == late_ticket(1)
    shift(db, redis, voucher_id, 10)  # and opened a second ago: the close's tick is lost
    close_at = int(draw_row(db, voucher_id)["close_time"].replace(tzinfo=UTC).timestamp() * 1000)
    for user in (early, late):  # an early entrant and a late one alike
        expect_refusal(call(press_event(voucher_id, user, entries[user]["pass"])), 409, "NOT_ADMITTED")
    # The first press woke the clock, once for both (at most one message a second).
    woken = [m for m in clock_messages(sqs, session_queues) if m["voucherId"] == voucher_id]
    assert woken == [{"voucherId": voucher_id, "at": close_at}]
    event = load_event("draw_clock.json")
    event["Records"][0]["body"] = ClockMessage(voucher_id, close_at).to_json()
    assert handlers["DrawClockFunction"](event, context) == {"batchItemFailures": []}
    [move] = db_rows(db, "SELECT at_ms, admitted FROM tb_draw_move WHERE voucher_id = %s", voucher_id)
    assert (move["at_ms"], move["admitted"]) == (close_at, 2)  # both, in ticket order
    accepted = call(press_event(voucher_id, late, entries[late]["pass"]))
    assert accepted["statusCode"] == 202, accepted
    orders_made.append(int(body(accepted)["data"]))


def test_the_close_move_is_made_from_mysql_when_redis_was_lost_at_the_close(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, sqs: Any,
    queues: dict[str, str], orders_made: list[int],
) -> None:  # fmt: skip
    voucher_id = draws(stock=2, admitFactor=1)
    users = [new_user() for _ in range(3)]
    entries = {u: enter(call, voucher_id, u) for u in users}
    ranked = sorted(users, key=lambda u: entries[u]["ticket"])
    shift(db, redis, voucher_id, 31)
    redis.delete(*keys.gate_keys(voucher_id), keys.loaded())  # emptied at the close
    decided = decide(db, redis, clock, voucher_id)
    assert (decided.tick, decided.admitted, decided.cursor) == (Tick.MOVED, 2, entries[ranked[2]]["ticket"])
    assert decided.close_lag_ms is not None
    assert decided.close_lag_ms >= 0
    recover(db, redis, sqs, queues)
    expect_refusal(call(press_event(voucher_id, ranked[2], entries[ranked[2]]["pass"])), 409, "NOT_ADMITTED")
    accepted = call(press_event(voucher_id, ranked[0], entries[ranked[0]]["pass"]))
    assert accepted["statusCode"] == 202, accepted
    orders_made.append(int(body(accepted)["data"]))


def test_a_failed_tick_comes_back_within_seconds_not_after_the_visibility_timeout(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, sqs: Any,
    session_queues: dict[str, str], handlers: dict[str, Handler], context: Any,
) -> None:  # fmt: skip
    voucher_id = draws(stock=1)
    enter(call, voucher_id, new_user())
    shift(db, redis, voucher_id, 21)
    assert decide(db, redis, clock, voucher_id).tick is Tick.MOVED
    drain(sqs, session_queues["DrawClockQueue"])
    shift(db, redis, voucher_id, 10)  # the first wave is due in 4 s: decided now
    redis.delete(keys.stock(voucher_id))  # its units cannot be read: the tick fails
    wave = int(draw_row(db, voucher_id)["clock_at"])
    url = session_queues["DrawClockQueue"]
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "180"})
    try:
        retried(sqs, url, handlers["DrawClockFunction"], context, ClockMessage(voucher_id, wave))
    finally:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "1"})


def retried(sqs: Any, url: str, handler: Handler, context: Any, message: ClockMessage) -> None:
    drain(sqs, url)  # other tests' messages
    sent = sqs.send_message(QueueUrl=url, MessageBody=message.to_json())["MessageId"]
    received = receive(sqs, url, sent, 2)
    record = {
        "messageId": received["MessageId"],
        "receiptHandle": received["ReceiptHandle"],
        "body": received["Body"],
        "attributes": received["Attributes"],
        "messageAttributes": {},
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:DrawClockQueue",
    }
    answer = handler({"Records": [record]}, context)
    assert answer == {"batchItemFailures": [{"itemIdentifier": received["MessageId"]}]}
    # Back after about a second (its first failure), where the queue's timeout is 180 s.
    again = receive(sqs, url, sent, 5)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=again["ReceiptHandle"])


def receive(sqs: Any, url: str, message_id: str, seconds: float) -> dict[str, Any]:
    """That message, received within ``seconds`` (others' messages passed over)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for message in sqs.receive_message(QueueUrl=url, AttributeNames=["All"], MaxNumberOfMessages=10,
                                           WaitTimeSeconds=1).get("Messages", []):  # fmt: skip
            if message["MessageId"] == message_id:
                return dict(message)
    raise AssertionError(f"message {message_id} not received within {seconds} s")


def test_a_draw_is_created_with_two_clock_messages_or_not_at_all(
    call: Call, db: Database, draws: Callable[..., int], sqs: Any, handlers: dict[str, Handler],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # A queue of its own: the session's holds other tests' delayed messages, which may come
    # due while this one counts.
    url = sqs.create_queue(QueueName=f"draw-clock-{uuid.uuid4().hex}")["QueueUrl"]
    app = module_of(handlers["SeckillApiFunction"])
    monkeypatch.setattr(app.clock, "queue_url", url)
    draws()
    delayed = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    assert int(delayed["Attributes"]["ApproximateNumberOfMessagesDelayed"]) == 2
    # The clock cannot be started: 503, and no voucher.
    count = "SELECT COUNT(*) AS n FROM tb_voucher WHERE shop_id = %s"
    vouchers_before = db_rows(db, count, SHOP)[0]["n"]
    monkeypatch.setattr(app.clock, "queue_url", url + "-gone")
    response = call(admin_event("seckill_api_add_seckill_voucher.json", draw_body()))
    expect_refusal(response, 503, "TRY_AGAIN")
    assert db_rows(db, count, SHOP)[0]["n"] == vouchers_before
    sqs.delete_queue(QueueUrl=url)


# --- paced admission ------------------------------------------------------------------------------


@pytest.mark.parametrize(("rate", "ok"), [(0, False), (1, True), (1_000_000, True), (1_000_001, False), ("5", False)])
def test_admit_rate_is_an_integer_from_1_to_a_million_on_a_draw_only(
    call: Call, draws: Callable[..., int], rate: Any, ok: bool
) -> None:
    if ok:
        voucher_id = draws(admitRate=rate)
        listed = shop_list(call, SHOP)
        assert listed[voucher_id]["admitRate"] == rate
        return
    response = call(admin_event("seckill_api_add_seckill_voucher.json", draw_body(admitRate=rate)))
    expect_refusal(response, 400, "BAD_REQUEST")
    assert body(response)["errorMsg"].startswith("admitRate:"), response


def test_admit_rate_on_a_race_is_a_400_and_a_draw_without_one_is_unpaced(call: Call, draws: Callable[..., int]) -> None:
    response = call(admin_event("seckill_api_add_seckill_voucher.json", draw_body(**RACE, admitRate=10)))
    expect_refusal(response, 400, "BAD_REQUEST")
    assert body(response)["errorMsg"].startswith("admitRate:"), response
    voucher_id = draws()
    listed = shop_list(call, SHOP)
    assert listed[voucher_id]["admitRate"] is None


def test_a_paced_move_is_recorded_as_steps_one_second_apart_and_the_gate_applies_each_at_its_time(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, orders_made: list[int]
) -> None:
    voucher_id = draws(stock=5, admitFactor=2, admitRate=3)
    users = [new_user() for _ in range(12)]
    entries = {u: enter(call, voucher_id, u) for u in users}
    ranked = sorted(users, key=lambda u: entries[u]["ticket"])
    tickets = [entries[u]["ticket"] for u in ranked]
    shift(db, redis, voucher_id, 21)  # closed a second ago, opens in 9 s
    close_at = int(draw_row(db, voucher_id)["clock_at"])
    begin = int(redis.hget(keys.window(voucher_id), "begin"))
    decided = decide(db, redis, clock, voucher_id)
    # min(12 waiting, 2 x 5 units) = 10, in steps of at most 3.
    assert (decided.tick, decided.admitted, decided.steps) == (Tick.MOVED, 10, 4)
    rows = db_rows(db, "SELECT * FROM tb_draw_move WHERE voucher_id = %s ORDER BY at_ms", voucher_id)
    assert [(r["at_ms"], r["cursor_after"], r["admitted"], r["step"]) for r in rows] == [
        (close_at, tickets[3], 3, 0),
        (begin + 1000, tickets[6], 3, 1),
        (begin + 2000, tickets[9], 3, 2),
        (begin + 3000, tickets[10], 1, 3),
    ]
    assert cursor_in_redis(redis, voucher_id) == [(r["cursor_after"], r["at_ms"]) for r in rows]
    record = body(call(draw_event(voucher_id)))["data"]
    assert [m["cursor"] for m in record["cursorHistory"]] == [tickets[3], tickets[6], tickets[9], tickets[10]]
    # Opened 1.5 s ago (by Redis's clock, whatever the entries took): two steps in effect.
    seconds, micros = redis.time()
    shift(db, redis, voucher_id, (begin + 1500 - (seconds * 1000 + micros // 1000)) / 1000)
    fourth, eighth = ranked[3], ranked[7]
    first = call(press_event(voucher_id, fourth, entries[fourth]["pass"]))
    assert first["statusCode"] == 202, first
    expect_refusal(call(press_event(voucher_id, eighth, entries[eighth]["pass"])), 409, "NOT_ADMITTED")
    shift(db, redis, voucher_id, 1)  # the third step too
    second = call(press_event(voucher_id, eighth, entries[eighth]["pass"]))
    assert second["statusCode"] == 202, second
    orders_made.extend(int(body(r)["data"]) for r in (first, second))


def test_waves_due_during_a_paced_move_are_not_made_and_resume_after_its_last_step(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, sqs: Any,
    queues: dict[str, str],
) -> None:  # fmt: skip
    voucher_id = draws(stock=5, admitFactor=2, admitRate=1, waveSeconds=5)
    for _ in range(10):
        enter(call, voucher_id, new_user())
    shift(db, redis, voucher_id, 21)
    begin = int(redis.hget(keys.window(voucher_id), "begin"))
    decided = decide(db, redis, clock, voucher_id)
    assert (decided.steps, decided.last_at) == (10, begin + 9000)
    # First the steps' relays to the edge, 10 s apart from the close (20 s before the opening)...
    assert int(draw_row(db, voucher_id)["clock_at"]) == begin - 10_000  # due already
    assert decide(db, redis, clock, voucher_id).tick is Tick.RELAY
    assert int(draw_row(db, voucher_id)["clock_at"]) == begin
    shift(db, redis, voucher_id, 4.1)  # the next relay's message due (5 s before the opening)
    assert decide(db, redis, clock, voucher_id).tick is Tick.RELAY
    # ... then the wave at begin + 5 s falls during the steps: the next is the one at begin + 10 s.
    begin = int(redis.hget(keys.window(voucher_id), "begin"))
    assert int(draw_row(db, voucher_id)["clock_at"]) == begin + 10_000
    # Redis lost mid-steps: every step comes back, so each still applies at its time.
    shift(db, redis, voucher_id, 8.5)  # three steps in effect
    before = cursor_in_redis(redis, voucher_id)
    redis.delete(*keys.gate_keys(voucher_id), keys.loaded())
    recover(db, redis, sqs, queues)
    assert cursor_in_redis(redis, voucher_id) == before
    assert len(before) == 10


def test_ahead_is_estimated_from_the_tickets_without_reading_the_entries(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue
) -> None:
    voucher_id = draws(stock=10, admitFactor=2)
    users = [new_user() for _ in range(200)]
    tickets = {u: enter(call, voucher_id, u)["ticket"] for u in users}
    shift(db, redis, voucher_id, 21)
    late_user = new_user()
    tickets[late_user] = enter(call, voucher_id, late_user)["ticket"]
    assert decide(db, redis, clock, voucher_id).admitted == 20
    ranked = sorted(users, key=tickets.__getitem__)
    asked = (ranked[60], ranked[150], late_user)
    estimates = {u: body(call(enter_event(voucher_id, u, "GET")))["data"]["ahead"] for u in asked}
    for user in asked:
        exact = sum(1 for t in tickets.values() if tickets[ranked[20]] <= t < tickets[user])
        # Uniform tickets: the estimate is within a few standard deviations of the count.
        assert abs(estimates[user] - exact) <= 4 * exact**0.5 + 2, (user, estimates[user], exact)
    # Every other entry gone: the same estimates, read from the kept counts alone.
    others = "DELETE FROM tb_draw_entry WHERE voucher_id = %s AND user_id NOT IN (%s, %s, %s)"
    db.run(lambda cursor: cursor.execute(others, (voucher_id, *asked)))
    assert {u: body(call(enter_event(voucher_id, u, "GET")))["data"]["ahead"] for u in asked} == estimates


def test_a_long_paced_move_is_relayed_to_the_edge_every_ten_seconds_until_its_last_step(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue
) -> None:
    voucher_id = draws(stock=20, admitFactor=2, admitRate=1, waveSeconds=60)
    for _ in range(40):
        enter(call, voucher_id, new_user())
    shift(db, redis, voucher_id, 21)

    def next_time() -> int:
        """The clock's next time, from the opening (both move with every shift)."""
        return int(draw_row(db, voucher_id)["clock_at"]) - int(redis.hget(keys.window(voucher_id), "begin"))

    decided = decide(db, redis, clock, voucher_id)
    assert decided.steps == 40  # the close's step, then one a second from the opening + 1 s to + 39 s
    times, ticks = [next_time()], []
    while len(ticks) < 5:
        seconds, micros = redis.time()
        due = int(draw_row(db, voucher_id)["clock_at"]) - moves.LEAD_MS
        shift(db, redis, voucher_id, (due - (seconds * 1000 + micros // 1000)) / 1000 + 0.1)
        ticks.append(decide(db, redis, clock, voucher_id).tick)
        times.append(next_time())
    # Relays 10 s apart from the close (20 s before the opening) while steps go on; then the
    # first wave after the last step; no move added by a relay.
    assert ticks == [Tick.RELAY] * 5
    assert times == [-10_000, 0, 10_000, 20_000, 30_000, 60_000]
    assert len(db_rows(db, "SELECT * FROM tb_draw_move WHERE voucher_id = %s", voucher_id)) == 40


# --- admission re-checked by the persister -----------------------------------------------------


def forged_press(call: Call, voucher_id: int, user_id: int, orders_made: list[int]) -> int:
    """A press showing a pass minted with the ring's key (ticket 000...0): the gate takes it."""
    ring = passes.load_ring()
    assert ring is not None
    shown = minted_pass(ring, voucher_id, user_id, token_of(user_id), int(time.time()) + 600)
    response = call(press_event(voucher_id, user_id, shown))
    assert response["statusCode"] == 202, response
    orders_made.append(int(body(response)["data"]))
    return orders_made[-1]


def order_status(call: Call, order_id: int, user_id: int) -> tuple[str, str | None]:
    response = call(status_event(order_id, user_id))
    assert response["statusCode"] == 200, response
    data = body(response)["data"]
    return data["status"], data["reason"]


def not_admitted_rows(db: Database, voucher_id: int) -> list[int]:
    rows = db_rows(db, "SELECT order_id FROM tb_voucher_order_rejection WHERE voucher_id = %s AND reason = %s",
                   voucher_id, "NOT_ADMITTED")  # fmt: skip
    return [int(r["order_id"]) for r in rows]


@pytest.mark.parametrize("who", ["an entrant not admitted", "a user who never entered"])
def test_a_pass_minted_with_the_key_gets_no_unit_and_the_unit_goes_back_once(
    call: Call, db: Database, redis: Any, sale: dict[str, Any], handlers: dict[str, Handler], context: Any,
    sqs: Any, order_queue: str, orders_made: list[int], who: str,
) -> None:  # fmt: skip
    v = sale["voucher"]
    user = sale["waiting"] if who == "an entrant not admitted" else new_user()
    order_id = forged_press(call, v, user, orders_made)
    assert stocks(db, redis, v) == (1, 0)  # the gate believed the pass and took the one unit
    [message] = persist(handlers, context, sqs, order_queue)
    assert order_status(call, order_id, user) == ("FAILED", "NOT_ADMITTED")
    assert not_admitted_rows(db, v) == [order_id]
    assert db_rows(db, "SELECT id FROM tb_voucher_order WHERE voucher_id = %s", v) == []
    assert stocks(db, redis, v) == (1, 1)  # back on sale
    assert redis.smembers(keys.returned(v)) == {str(order_id)}
    assert redis.hget(keys.pending(v), str(user)) is None
    # Redelivered: the same decision, and the unit is not given back again.
    for _ in range(2):
        sqs.send_message(QueueUrl=order_queue, MessageBody=message["Body"])
        persist(handlers, context, sqs, order_queue)
    assert order_status(call, order_id, user) == ("FAILED", "NOT_ADMITTED")
    assert stocks(db, redis, v) == (1, 1)
    # One try per account: the forger keeps its place among the buyers.
    ring = passes.load_ring()
    assert ring is not None
    again = minted_pass(ring, v, user, token_of(user), int(time.time()) + 600)
    expect_refusal(call(press_event(v, user, again)), 409, "DUPLICATE_ORDER")
    # The unit is on sale again, and an admitted entrant wins it.
    winner = sale["admitted"][0]
    accepted = call(press_event(v, winner, sale["entries"][winner]["pass"]))
    assert accepted["statusCode"] == 202, accepted
    orders_made.append(int(body(accepted)["data"]))
    persist(handlers, context, sqs, order_queue)
    assert order_status(call, orders_made[-1], winner)[0] == "CONFIRMED"
    assert stocks(db, redis, v) == (0, 0)
    # Redis and MySQL agree: reconciliation finds nothing to repair.
    drift = restore(db, Scripts.register(redis), v, "check")
    assert drift is not None
    assert not drift.drifted


def test_an_order_accepted_just_before_the_move_that_admits_its_user_fails(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, handlers: dict[str, Handler],
    context: Any, sqs: Any, order_queue: str, orders_made: list[int],
) -> None:  # fmt: skip
    voucher_id = draws(stock=2, admitFactor=1, waveSeconds=5)
    users = [new_user() for _ in range(4)]
    entries = {u: enter(call, voucher_id, u) for u in users}
    ranked = sorted(users, key=lambda u: entries[u]["ticket"])
    shift(db, redis, voucher_id, 21)
    assert decide(db, redis, clock, voucher_id).admitted == 2
    shift(db, redis, voucher_id, 9.5)  # open; wave 1 takes effect in about 5 s, decided now
    wave = decide(db, redis, clock, voucher_id)
    assert (wave.tick, wave.admitted) == (Tick.MOVED, 2)  # ranked[2] and ranked[3], from its at on
    wave_at = cursor_in_redis(redis, voucher_id)[-1][1]
    # Before the wave's at, a minted pass gets ranked[2] through the gate; the wave, though
    # recorded by now, was not in effect at the order's acceptance.
    order_id = forged_press(call, voucher_id, ranked[2], orders_made)
    persist(handlers, context, sqs, order_queue)
    assert order_status(call, order_id, ranked[2]) == ("FAILED", "NOT_ADMITTED")
    assert stocks(db, redis, voucher_id) == (2, 2)
    # The boundary, as the gate draws it: a move applies from its at on (at <= acceptedAt).
    before, at = (OrderMessage(random.randint(10**15, 2**62), ranked[3], voucher_id, from_ms(wave_at + d))
                  for d in (-1, 0))  # fmt: skip
    assert decide_orders(db, [before, at]) == [Decision("FAILED", "NOT_ADMITTED"), Decision("CONFIRMED")]


def test_a_replayed_or_requeued_order_not_admitted_still_fails_and_its_unit_goes_back_once(
    call: Call, db: Database, redis: Any, sale: dict[str, Any], handlers: dict[str, Handler], context: Any,
    sqs: Any, order_queue: str, session_queues: dict[str, str], orders_made: list[int],
) -> None:  # fmt: skip
    v, user = sale["voucher"], sale["waiting"]
    order_id = forged_press(call, v, user, orders_made)
    # Its message lost on the way (the mark is promised): reconciliation queues it again.
    [message] = drain(sqs, order_queue)
    assert reconcile_voucher(db, redis, OrderQueue(sqs, order_queue), v, drained=False).requeued == [str(order_id)]
    persist(handlers, context, sqs, order_queue)
    assert order_status(call, order_id, user) == ("FAILED", "NOT_ADMITTED")
    assert stocks(db, redis, v) == (1, 1)
    # A copy dead-lettered meanwhile is replayed: decided as before, the unit not given back again.
    dlq = session_queues["OrderDeadLetterQueue"]
    drain(sqs, dlq)
    sqs.send_message(QueueUrl=dlq, MessageBody=message["Body"])
    assert dlq_replay.main(["--dlq-url", dlq, "--queue-url", order_queue, "--wait", "0", "--yes"]) == 0
    [replayed] = persist(handlers, context, sqs, order_queue)
    assert replayed["Body"] == message["Body"]
    assert order_status(call, order_id, user) == ("FAILED", "NOT_ADMITTED")
    assert not_admitted_rows(db, v) == [order_id]
    assert stocks(db, redis, v) == (1, 1)
    drift = reconcile_voucher(db, redis, OrderQueue(sqs, order_queue), v).drift
    assert drift is not None
    assert not drift.drifted


def test_a_unit_given_back_for_an_order_not_admitted_is_counted_once_whatever_runs_between(
    call: Call, db: Database, redis: Any, sale: dict[str, Any], sqs: Any, order_queue: str, orders_made: list[int]
) -> None:
    v, user = sale["voucher"], sale["waiting"]
    order_id = forged_press(call, v, user, orders_made)
    [sent] = drain(sqs, order_queue)
    message = OrderMessage.from_json(sent["Body"])
    scripts = Scripts.register(redis)
    # MySQL decided it; Redis has not heard yet (the persister's write-back still to come).
    assert decide_orders(db, [message]) == [Decision("FAILED", "NOT_ADMITTED")]
    # A press after the close, or reconciliation, finding the mark: not failed NOT_QUEUED,
    # so not released, since the persister gives the unit back itself.
    assert not fail_unqueued(db, message)
    assert stocks(db, redis, v) == (1, 0)
    # Redis lost the voucher, rebuilt from MySQL (as recovery does): the unit counted back,
    # the forger still a buyer.
    redis.delete(*keys.gate_keys(v), keys.returned(v))
    rebuilt = restore(db, scripts, v, "missing")
    assert rebuilt is not None
    assert rebuilt.applied
    assert stocks(db, redis, v) == (1, 1)
    assert redis.sismember(keys.buyers(v), str(user))
    # The write-back (or a redelivery) comes after the rebuild: it adds nothing.
    assert persist_orders(db, redis, scripts, [message]) == [Decision("FAILED", "NOT_ADMITTED", changed=False)]
    assert stocks(db, redis, v) == (1, 1)
    # A give-back Redis missed is made by reconciliation, once.
    redis.srem(keys.returned(v), str(order_id))
    redis.decr(keys.stock(v))
    assert reconcile_voucher(db, redis, OrderQueue(sqs, order_queue), v).returned == [str(order_id)]
    assert stocks(db, redis, v) == (1, 1)
    assert reconcile_voucher(db, redis, OrderQueue(sqs, order_queue), v).returned == []


def test_the_re_check_is_one_statement_for_a_batchs_draw_orders(
    call: Call, db: Database, redis: Any, gate: Any, scripts: Scripts, draws: Callable[..., int], clock: ClockQueue,
    orders_made: list[int],
) -> None:  # fmt: skip
    voucher_id = draws(stock=3, admitFactor=1)
    users = [new_user() for _ in range(4)]
    entries = {u: enter(call, voucher_id, u) for u in users}
    ranked = sorted(users, key=lambda u: entries[u]["ticket"])
    shift(db, redis, voucher_id, 31)  # opened a second ago
    assert decide(db, redis, clock, voucher_id).admitted == 3

    def accepted_with(user: int, ticket: str) -> OrderMessage:
        reservation = gate.reserve(voucher_id, user, ticket=ticket)
        orders_made.append(reservation.order_id)
        return accepted(gate, reservation)

    batch = [
        accepted_with(ranked[3], FORGED_TICKET),  # an entrant not admitted, with a minted pass
        accepted_with(new_user(), FORGED_TICKET),  # and one who never entered
        accepted_with(ranked[0], entries[ranked[0]]["ticket"]),
    ]
    assert stocks(db, redis, voucher_id) == (3, 0)
    before = statements(db)
    outcomes = persist_orders(db, redis, scripts, batch)
    ran = statements(db) - before
    # Lock the vouchers (learning which are draws), read what is stored, re-check the
    # batch's draw orders, insert the order and the rejections, one decrement, commit.
    assert ran == Counter({"Com_commit": 1, "Com_select": 3, "Com_insert": 2, "Com_update": 1})
    assert outcomes == [Decision("FAILED", "NOT_ADMITTED")] * 2 + [Decision("CONFIRMED")]
    assert stocks(db, redis, voucher_id) == (2, 2)


def test_a_unit_given_back_during_a_paced_move_is_counted_by_the_wave_after_its_steps(
    call: Call, db: Database, redis: Any, draws: Callable[..., int], clock: ClockQueue, scripts: Scripts,
    handlers: dict[str, Handler], context: Any, sqs: Any, order_queue: str, orders_made: list[int],
) -> None:  # fmt: skip
    voucher_id = draws(stock=2, admitFactor=2, admitRate=1, waveSeconds=10)
    users = [new_user() for _ in range(12)]
    entries = {u: enter(call, voucher_id, u) for u in users}
    ranked = sorted(users, key=lambda u: entries[u]["ticket"])
    shift(db, redis, voucher_id, 21)
    assert decide(db, redis, clock, voucher_id).steps == 4  # the close, then the opening + 1, + 2, + 3 s
    assert decide(db, redis, clock, voucher_id).tick is Tick.RELAY  # 10 s after the close, due already

    def now_at(offset_ms: int) -> None:
        """Shift the timeline so that now is the opening + ``offset_ms`` by Redis's clock."""
        seconds, micros = redis.time()
        begin = int(redis.hget(keys.window(voucher_id), "begin"))
        shift(db, redis, voucher_id, (begin + offset_ms - (seconds * 1000 + micros // 1000)) / 1000)

    now_at(1500)  # mid-steps: the first buyer wins, then its hold expires and its unit comes back
    buyer = ranked[0]
    accepted = call(press_event(voucher_id, buyer, entries[buyer]["pass"]))
    assert accepted["statusCode"] == 202, accepted
    orders_made.append(int(body(accepted)["data"]))
    persist(handlers, context, sqs, order_queue)
    db.run(lambda c: c.execute("UPDATE tb_voucher_order SET pay_by = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND"
                               " WHERE voucher_id = %s", (voucher_id,)))  # fmt: skip
    expire(db, redis, scripts, orders_made[-1])
    assert redis.get(keys.stock(voucher_id)) == "2"
    assert decide(db, redis, clock, voucher_id).tick is Tick.RELAY  # at the opening
    now_at(5100)  # the first wave after the last step, at the opening + 10 s, is due
    wave = decide(db, redis, clock, voucher_id)
    # Both units on sale, the one given back included: 2 x 2 admitted, one a second.
    assert (wave.tick, wave.admitted, wave.steps) == (Tick.MOVED, 4, 4)
    begin = int(redis.hget(keys.window(voucher_id), "begin"))
    rows = db_rows(db, "SELECT * FROM tb_draw_move WHERE voucher_id = %s ORDER BY at_ms", voucher_id)
    assert [(r["at_ms"] - begin, r["admitted"], r["units"], r["step"]) for r in rows[4:]] == [
        (10_000 + 1000 * k, 1, 2, k) for k in range(4)
    ]
    assert [r["cursor_after"] for r in rows] == [entries[u]["ticket"] for u in ranked[1:9]]
