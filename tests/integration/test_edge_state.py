"""The election of each edge state (lua/edge_claim.lua) and its way to EdgeStateQueue,
with a real Redis, MariaDB and SQS (moto): one claim per change however many callers
notice it, the state each trigger leaves, and what a failure leaves for the sweep."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from redis import Redis

from seckill import holds, vouchers
from seckill.edge.state import KEPT_AFTER_END, EdgeState, Noticed, StateQueue, Sweep, claim, parse_message
from seckill.expiry import ExpiryMessage
from seckill.infra import keys
from seckill.infra.db import Database
from seckill.infra.errors import TryAgain
from seckill.infra.lua_scripts import Scripts
from seckill.infra.timeutil import to_ms
from seckill.messages import OrderMessage, OrderQueue
from seckill.press import orders
from seckill.press.gate import Gate
from seckill_local.runner import rate_seconds, scheduled_event
from seckill_local.sqs import sqs_client
from seckill_local.template import Template
from tests.helpers import (
    Hold,
    accept,
    admin_event,
    body,
    closed_port,
    drain,
    fresh,
    invoke,
    load_event,
    new_user,
    overdue,
    seckill_voucher_body,
    sqs_record,
    with_path,
)


@pytest.fixture
def edge_queue(sqs: Any) -> Iterator[str]:
    """A queue of the test's own, standing for EdgeStateQueue."""
    url: str = sqs.create_queue(QueueName=f"edge-{uuid.uuid4().hex[:12]}")["QueueUrl"]
    yield url
    sqs.delete_queue(QueueUrl=url)


@pytest.fixture
def edge(sqs: Any, edge_queue: str) -> StateQueue:
    return StateQueue(sqs, edge_queue)


@pytest.fixture
def voucher(make_voucher: Callable[..., int], redis: Any) -> Iterator[Callable[..., int]]:
    """``make_voucher``, and the vouchers' edge hashes removed afterwards."""
    made: list[int] = []

    def make(**options: Any) -> int:
        made.append(make_voucher(**options))
        return made[-1]

    yield make
    for voucher_id in made:
        redis.delete(keys.edge(voucher_id))


def sent(sqs: Any, url: str) -> list[EdgeState]:
    return [EdgeState.from_message(m["Body"]) for m in drain(sqs, url)]


def test_window_on_creation(voucher: Callable[..., int], redis: Any, scripts: Scripts) -> None:
    begin = datetime.now(UTC) + timedelta(minutes=5)
    voucher_id = voucher(stock=3, begin=begin, end=begin + timedelta(hours=1))
    state = claim(scripts, voucher_id)
    assert state is not None
    assert (state.voucher_id, state.begin, state.end) == (voucher_id, to_ms(begin), to_ms(begin + timedelta(hours=1)))
    assert (state.sold_out, state.stopped) == (False, False)
    assert int(redis.hget(keys.edge(voucher_id), "v")) == state.v
    assert claim(scripts, voucher_id) is None  # nothing changed since


def test_the_record_goes_long_after_the_sale_ends(voucher: Callable[..., int], redis: Any, scripts: Scripts) -> None:
    end = datetime.now(UTC) + timedelta(minutes=5)
    voucher_id = voucher(stock=3, begin=end - timedelta(hours=1), end=end)
    assert claim(scripts, voucher_id) is not None
    seconds, micros = redis.time()
    expires_at = seconds * 1000 + micros // 1000 + redis.pttl(keys.edge(voucher_id))
    assert abs(expires_at - to_ms(end + KEPT_AFTER_END)) < 5_000


def test_a_stopped_sale_s_record_goes_long_after_the_stop(
    voucher: Callable[..., int], db: Database, redis: Any, scripts: Scripts
) -> None:
    voucher_id = voucher(stock=3, end=datetime.now(UTC) + timedelta(days=30))
    vouchers.stop_seckill_voucher(db, redis, voucher_id)
    stopped = claim(scripts, voucher_id)
    assert stopped is not None
    assert stopped.stopped
    kept = redis.pttl(keys.edge(voucher_id))
    assert 0 <= KEPT_AFTER_END.total_seconds() * 1000 - kept < 5_000


def test_one_claim_per_change_under_concurrent_claimers(
    voucher: Callable[..., int], scripts: Scripts, gate: Gate, redis: Any
) -> None:
    voucher_id = voucher(stock=1)
    claims: list[EdgeState | None] = []
    start = threading.Barrier(16)

    def claimer() -> None:
        start.wait()
        claims.append(claim(scripts, voucher_id))

    def race() -> list[EdgeState]:
        claims.clear()
        threads = [threading.Thread(target=claimer) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [c for c in claims if c is not None]

    (first,) = race()
    accept(gate, voucher_id)  # the last unit
    (second,) = race()
    assert (first.sold_out, second.sold_out) == (False, True)
    assert second.v > first.v
    assert race() == []


def test_sold_out_after_the_last_unit_then_cleared_by_a_cancel(
    sell: Callable[..., list[Hold]],
    db: Database,
    redis: Any,
    scripts: Scripts,
    sqs: Any,
    edge_queue: str,
    edge: StateQueue,
) -> None:
    (hold,) = sell(count=1, stock=1)
    try:
        assert edge.notice(scripts, hold.voucher_id) is Noticed.SENT
        (sold_out,) = sent(sqs, edge_queue)
        assert sold_out.sold_out
        cancelled = holds.cancel(db, redis, scripts, hold.order_id, hold.user_id, edge=edge)
        assert isinstance(cancelled, dict)
        (cleared,) = sent(sqs, edge_queue)
        assert not cleared.sold_out
        assert cleared.v > sold_out.v
    finally:
        redis.delete(keys.edge(hold.voucher_id))


def test_stopped(voucher: Callable[..., int], db: Database, redis: Any, scripts: Scripts) -> None:
    voucher_id = voucher(stock=3)
    assert claim(scripts, voucher_id) is not None
    vouchers.stop_seckill_voucher(db, redis, voucher_id)
    state = claim(scripts, voucher_id)
    assert state is not None
    assert (state.stopped, state.begin, state.end) == (True, 0, 0)


def test_provisional_or_missing_voucher_is_not_claimed(redis: Any, scripts: Scripts) -> None:
    voucher_id = 10**12 + uuid.uuid4().int % 10**9
    assert claim(scripts, voucher_id) is None
    now = datetime.now(UTC)
    vouchers.preload(redis, voucher_id, 5, now, now + timedelta(hours=1), provisional=True)
    try:
        assert claim(scripts, voucher_id) is None
        assert not redis.exists(keys.edge(voucher_id))
        vouchers.make_final(redis, voucher_id)
        assert claim(scripts, voucher_id) is not None
    finally:
        redis.delete(*keys.voucher_keys(voucher_id), keys.edge(voucher_id))


def test_one_message_per_change_under_concurrent_notices(
    voucher: Callable[..., int], scripts: Scripts, sqs: Any, edge_queue: str, edge: StateQueue
) -> None:
    voucher_id = voucher(stock=3)
    noticed: list[Noticed] = []
    threads = [threading.Thread(target=lambda: noticed.append(edge.notice(scripts, voucher_id))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(n.value for n in noticed) == sorted(["sent"] + ["unchanged"] * 7)
    assert [s.voucher_id for s in sent(sqs, edge_queue)] == [voucher_id]


def test_a_failed_send_gives_the_claim_back(
    voucher: Callable[..., int], redis: Any, scripts: Scripts, sqs: Any, edge_queue: str, edge: StateQueue
) -> None:
    voucher_id = voucher(stock=3)
    metrics = Metrics(namespace="SeckillTest")
    lost = StateQueue(sqs, f"{edge_queue}-that-does-not-exist", metrics)
    assert lost.notice(scripts, voucher_id) is Noticed.FAILED
    assert metrics.metric_set["EdgeStateNotSent"]["Value"] == [1.0]
    version = int(redis.hget(keys.edge(voucher_id), "v"))
    assert redis.hget(keys.edge(voucher_id), "state") is None  # given back, version kept
    # The next notice claims the same state again, under a newer version, and sends it.
    assert edge.notice(scripts, voucher_id) is Noticed.SENT
    (state,) = sent(sqs, edge_queue)
    assert state.v > version
    metrics.clear_metrics()


def test_the_sweep_sends_every_state_again_in_one_message(
    voucher: Callable[..., int], scripts: Scripts, sqs: Any, edge_queue: str, edge: StateQueue
) -> None:
    voucher_id, other = voucher(stock=3), voucher(stock=2)
    lost = claim(scripts, voucher_id)  # claimed; its message never reached the queue
    assert lost is not None
    assert edge.sweep(scripts, [voucher_id, other, voucher_id]) == 0
    (message,) = drain(sqs, edge_queue)
    sweep = parse_message(message["Body"])
    assert isinstance(sweep, Sweep)
    swept = {s.voucher_id: s for s in sweep.states}
    assert set(swept) == {voucher_id, other}
    # Claimed anew: the same state under a newer version, which beats every older one.
    assert swept[voucher_id].same_sale(lost)
    assert swept[voucher_id].v > lost.v
    assert claim(scripts, voucher_id) is None  # and nothing changed for the notices


def test_a_unit_a_503_gave_back_reaches_the_edge_at_the_next_edge_notice(
    template: Template,
    monkeypatch: pytest.MonkeyPatch,
    context: Any,
    voucher: Callable[..., int],
    db: Database,
    redis: Any,
    scripts: Scripts,
    gate: Gate,
    sqs_endpoint: str,
    sqs: Any,
    edge_queue: str,
    edge: StateQueue,
) -> None:
    voucher_id = voucher(stock=1)
    assert edge.notice(scripts, voucher_id) is Noticed.SENT
    sent(sqs, edge_queue)
    # The last unit's press: while its send is under way the persister stores the other
    # orders and publishes the sell-out; then the send is refused, and the press gives
    # its unit back before answering 503.
    press_sqs = sqs_client(sqs_endpoint)

    def sell_out(**_: Any) -> None:
        # None, or botocore would take what it returns for the call's response.
        edge.notice(scripts, voucher_id)

    press_sqs.meta.events.register("before-call.sqs.SendMessage", sell_out, unique_id="sell-out")
    with pytest.raises(TryAgain):
        orders.place_order(
            gate, redis, OrderQueue(press_sqs, f"{edge_queue}-gone"), db, voucher_id, new_user(), status_ttl=60
        )
    (flag,) = sent(sqs, edge_queue)
    assert flag.sold_out
    assert redis.get(keys.stock(voucher_id)) == "1"  # on sale again, and the edge says sold out
    # ReconcilerFunction's edge notice, as its schedule (at least once a minute) invokes it.
    (schedule,) = [p for p in template.functions["ReconcilerFunction"].schedules if p.get("Input")]
    every = rate_seconds(template.resolve(schedule["Schedule"], {}) or "")
    assert every is not None
    assert every <= 60
    reconciler = fresh(template, "ReconcilerFunction", monkeypatch, EDGE_STATE_QUEUE_URL=edge_queue)
    answer = reconciler.lambda_handler(scheduled_event(schedule), context)
    assert set(answer) == {"edgeStatesSent"}  # nothing reconciled
    assert [s.sold_out for s in sent(sqs, edge_queue) if s.voucher_id == voucher_id] == [False]


def test_no_queue_url_asks_nothing_of_redis(voucher: Callable[..., int]) -> None:
    dead = Scripts.register(Redis(port=closed_port(), socket_connect_timeout=0.2))
    off = StateQueue(None, "")
    assert off.notice(dead, voucher(stock=1)) is Noticed.OFF
    assert off.sweep(dead, [1, 2]) == 0
    # With a queue, the same Redis fails the notice, which still does not raise.
    assert StateQueue(None, "http://127.0.0.1:1/queue").notice(dead, 1) is Noticed.FAILED


def test_the_persister_notices_each_voucher_of_its_batch(
    template: Template,
    monkeypatch: pytest.MonkeyPatch,
    context: Any,
    voucher: Callable[..., int],
    gate: Gate,
    redis: Any,
    sqs: Any,
    edge_queue: str,
    queues: dict[str, str],
) -> None:
    voucher_id = voucher(stock=2)
    orders = [accept(gate, voucher_id) for _ in range(2)]
    persister = fresh(
        template,
        "OrderPersisterFunction",
        monkeypatch,
        EDGE_STATE_QUEUE_URL=edge_queue,
        ORDER_EXPIRY_QUEUE_URL=queues["OrderExpiryQueue"],
    )
    records = [sqs_record(m.to_json(), "order_persister_batch.json") for m in orders]
    assert invoke(persister, context, "order_persister_batch.json", *records) == set()
    (state,) = sent(sqs, edge_queue)  # one claim for the batch's voucher
    assert (state.voucher_id, state.sold_out) == (voucher_id, True)


def test_the_expiry_function_clears_sold_out(
    template: Template,
    monkeypatch: pytest.MonkeyPatch,
    context: Any,
    sell: Callable[..., list[Hold]],
    db: Database,
    redis: Any,
    scripts: Scripts,
    sqs: Any,
    edge_queue: str,
) -> None:
    (hold,) = sell(count=1, stock=1, hold_seconds=10)
    try:
        assert claim(scripts, hold.voucher_id) is not None  # sold out, published
        overdue(db, hold)
        expiry = fresh(template, "OrderExpiryFunction", monkeypatch, EDGE_STATE_QUEUE_URL=edge_queue)
        message = ExpiryMessage(hold.order_id, hold.voucher_id, hold.user_id, datetime.now(UTC))
        assert invoke(expiry, context, "order_expiry.json", sqs_record(message.to_json(), "order_expiry.json")) == set()
        (state,) = sent(sqs, edge_queue)
        assert not state.sold_out
    finally:
        redis.delete(keys.edge(hold.voucher_id))


def test_the_api_notices_creation_and_stop(
    template: Template,
    monkeypatch: pytest.MonkeyPatch,
    context: Any,
    redis: Any,
    sqs: Any,
    edge_queue: str,
) -> None:
    api = fresh(template, "SeckillApiFunction", monkeypatch, EDGE_STATE_QUEUE_URL=edge_queue)
    created = api.lambda_handler(
        admin_event("seckill_api_add_seckill_voucher.json", seckill_voucher_body(shop_id=new_user())), context
    )
    assert created["statusCode"] == 201, created
    voucher_id = body(created)["data"]
    try:
        (opened,) = sent(sqs, edge_queue)
        assert (opened.voucher_id, opened.stopped, opened.sold_out) == (voucher_id, False, False)
        path = f"/voucher/seckill/{voucher_id}/stop"
        stop = with_path(load_event("seckill_api_stop_voucher.json"), path, voucherId=str(voucher_id))
        assert api.lambda_handler(stop, context)["statusCode"] == 200
        (stopped,) = sent(sqs, edge_queue)
        assert (stopped.stopped, stopped.v > opened.v) == (True, True)
    finally:
        redis.delete(*keys.voucher_keys(voucher_id), keys.edge(voucher_id))


def test_a_draw_claims_its_moves_in_effect_and_later(voucher: Callable[..., int], redis: Any, scripts: Scripts) -> None:
    voucher_id = voucher(stock=3)
    race = claim(scripts, voucher_id)
    assert race is not None
    assert (race.draw, race.moves) == (False, ())
    # The fields draw-core's creation gives a draw voucher; no move yet (the draw is open).
    close = race.begin - 60_000
    redis.hset(keys.window(voucher_id), mapping={"draw": "1", "close": str(close)})
    try:
        opened = claim(scripts, voucher_id)
        assert opened is not None
        # Nothing of the clock published yet: decided 0, the edge sure of nothing after the close.
        assert (opened.draw, opened.close, opened.decided, opened.moves) == (True, close, 0, ())
        now = to_ms(datetime.now(UTC))
        # Two moves past (only the later one is in effect), 17 ahead (15 of them fit).
        cursors = [f"0{i:016x}" for i in range(19)]
        past = {cursors[0]: now - 20_000, cursors[1]: now - 10_000}
        ahead = {c: now + 60_000 * (i + 1) for i, c in enumerate(cursors[2:])}
        redis.zadd(keys.cursor(voucher_id), {**past, **ahead})
        redis.hset(keys.window(voucher_id), "decided", str(race.end))
        moved = claim(scripts, voucher_id)
        assert moved is not None
        assert moved.moves == ((now - 10_000, cursors[1]), *((ahead[c], c) for c in cursors[2:17]))
        # Every move is decided until the end, but the entry holds those before the first it left out.
        assert (moved.close, moved.decided) == (close, ahead[cursors[17]])
        assert moved.v > opened.v
        assert claim(scripts, voucher_id) is None  # nothing changed since
        # What the publisher would write is a value the edge reads back the same.
        assert EdgeState.from_value(voucher_id, moved.value()) == moved
        # Once the moves fit, decided is the window's own; a later decided is a new state.
        redis.zremrangebyscore(keys.cursor(voucher_id), ahead[cursors[17]], "+inf")
        assert (decided := claim(scripts, voucher_id)) is not None
        assert decided.decided == race.end
        redis.hset(keys.window(voucher_id), "decided", str(race.end + 1))
        assert (later := claim(scripts, voucher_id)) is not None
        assert later.decided == race.end + 1
    finally:
        redis.delete(keys.cursor(voucher_id))


def test_the_press_that_takes_the_last_unit_sends_the_sold_out_state_once_and_the_persister_sends_nothing(
    voucher: Callable[..., int],
    db: Database,
    gate: Gate,
    redis: Any,
    scripts: Scripts,
    sqs: Any,
    queues: dict[str, str],
    edge_queue: str,
    edge: StateQueue,
) -> None:
    """Before: the edge heard of the sell-out only when the persister's batch noticed
    it, a batch later; presses in between reached the function."""
    voucher_id = voucher(stock=3)
    assert claim(scripts, voucher_id) is not None  # the edge holds the sale as created
    order_queue = OrderQueue(sqs, queues["OrderQueue"])
    placed = [
        orders.place_order(gate, redis, order_queue, db, voucher_id, new_user(), status_ttl=60, edge=edge)
        for _ in range(4)
    ]
    assert [isinstance(p, int) for p in placed] == [True, True, True, False]
    (message,) = drain(sqs, edge_queue)  # the third press's, and only it
    state = EdgeState.from_message(message["Body"])
    assert (state.voucher_id, state.sold_out) == (voucher_id, True)
    # Its own order went first: already on the queue when the edge heard of it.
    queued = [OrderMessage.from_json(m["Body"]) for m in drain(sqs, queues["OrderQueue"])]
    assert set(placed[:3]) <= {o.order_id for o in queued}
    # The persister's notice, the backstop, finds the state claimed already: nothing more is sent.
    assert edge.notice(scripts, voucher_id) is Noticed.UNCHANGED
    assert drain(sqs, edge_queue) == []


def test_a_last_unit_whose_state_send_fails_leaves_the_claim_to_the_persisters_notice(
    voucher: Callable[..., int],
    db: Database,
    gate: Gate,
    redis: Any,
    scripts: Scripts,
    sqs: Any,
    queues: dict[str, str],
    edge_queue: str,
) -> None:
    voucher_id = voucher(stock=1)
    claim(scripts, voucher_id)
    broken = StateQueue(sqs, edge_queue + "-gone")
    order_id = orders.place_order(
        gate, redis, OrderQueue(sqs, queues["OrderQueue"]), db, voucher_id, new_user(), status_ttl=60, edge=broken
    )
    assert isinstance(order_id, int), "the 202 does not depend on the edge"
    assert drain(sqs, edge_queue) == []
    assert StateQueue(sqs, edge_queue).notice(scripts, voucher_id) is Noticed.SENT
    (message,) = drain(sqs, edge_queue)
    assert EdgeState.from_message(message["Body"]).sold_out is True
