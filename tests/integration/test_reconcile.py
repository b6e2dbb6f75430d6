"""Reconciliation and recovery from Redis loss, against real Redis, MariaDB and moto SQS.

Tests that answer a defect of the original design say which (docs/defects.md).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from seckill.ids import BLOCK, LEASE_GAP, SEQUENCE_MASK, OrderIds, next_order_id
from seckill.infra import keys
from seckill.infra.db import Database
from seckill.infra.errors import Refusal, SeckillError
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderMessage, OrderQueue, Sent, queue_depth, wait_drained
from seckill.press.gate import Gate
from seckill.repair.counter import restore_order_counter
from seckill.repair.recovery import Recovery, read_dead_letters, rebuild, rebuilding
from seckill.repair.restore import restore
from tests.helpers import (
    HINT_TTL,
    accept,
    accepted,
    db_rows,
    drain,
    new_user,
    persist_order,
    reconcile_voucher,
    recover,
)

NOW = timedelta(0)  # every reservation counts as stale


def stocks(db: Database, redis: Any, voucher_id: int) -> tuple[int, int]:
    row = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)[0]
    return int(redis.get(keys.stock(voucher_id))), int(row["stock"])


def confirmed(db: Database, voucher_id: int) -> int:
    return len(db_rows(db, "SELECT id FROM tb_voucher_order WHERE voucher_id = %s", voucher_id))


def win(gate: Gate, redis: Any, voucher_id: int, user_id: int | None = None) -> tuple[Any, int]:
    """A press answered 202: its message, its order id."""
    message = accept(gate, voucher_id, user_id)
    return message, message.order_id


def persist_queue(sqs: Any, url: str, db: Database, redis: Any, gate: Gate) -> int:
    """Persist what is on the queue, as the persister would."""
    messages = drain(sqs, url)
    for m in messages:
        persist_order(db, redis, gate.scripts, OrderMessage.from_json(m["Body"]))
    return len(messages)


@pytest.fixture
def queue(sqs: Any, queues: dict[str, str]) -> OrderQueue:
    return OrderQueue(sqs, queues["OrderQueue"])


@pytest.fixture
def run(db: Database, redis: Any, queue: OrderQueue) -> Callable[..., Any]:
    def run(voucher_id: int, *, drained: bool = True, pending_age: timedelta = NOW) -> Any:
        return reconcile_voucher(db, redis, queue, voucher_id, drained=drained, pending_age=pending_age)

    return run


def test_crash_between_gate_and_send_fails_the_order_and_frees_the_unit(
    db: Database, gate: Gate, redis: Any, sqs: Any, queue: OrderQueue, run: Callable[..., Any], make_voucher: Callable
) -> None:
    """The function died after the gate, before any send (or its gate reply was lost):
    nobody was answered 202, so the order is failed (a late copy could never confirm it) and
    the unit goes back on sale."""
    voucher_id = make_voucher(stock=3)
    message = accept(gate, voucher_id, promise=False)

    result = run(voucher_id)
    assert result.failed == [str(message.order_id)]
    assert result.requeued == []
    assert drain(sqs, queue.queue_url) == []
    assert stocks(db, redis, voucher_id) == (3, 3)
    assert not redis.sismember(keys.buyers(voucher_id), message.user_id)
    assert persist_order(db, redis, gate.scripts, message).status == "FAILED"  # a copy that was sent after all
    assert confirmed(db, voucher_id) == 0
    reasons = db_rows(db, "SELECT reason FROM tb_voucher_order_rejection WHERE order_id = %s", message.order_id)
    assert reasons == [{"reason": "NOT_QUEUED"}]
    gate.reserve(voucher_id, message.user_id, uuid.uuid4().hex)  # the user may try again


def test_a_promised_order_that_never_arrived_is_requeued_and_confirmed(
    db: Database, gate: Gate, redis: Any, sqs: Any, queue: OrderQueue, run: Callable[..., Any], make_voucher: Callable
) -> None:
    """Original design's defect: orders lost (between the gate and the queue). The client holds
    a 202 (the send was in doubt) but the message never reached the queue."""
    voucher_id = make_voucher(stock=3)
    reservation, order_id = win(gate, redis, voucher_id)

    result = run(voucher_id)
    assert result.requeued == [str(order_id)]
    assert persist_queue(sqs, queue.queue_url, db, redis, gate) == 1
    rows = db_rows(db, "SELECT user_id FROM tb_voucher_order WHERE id = %s", order_id)
    assert rows == [{"user_id": reservation.user_id}]
    assert redis.hlen(keys.pending(voucher_id)) == 0
    assert stocks(db, redis, voucher_id) == (2, 2)


def test_live_reservations_are_left_alone(
    gate: Gate, redis: Any, run: Callable[..., Any], make_voucher: Callable
) -> None:
    voucher_id = make_voucher(stock=2)
    accept(gate, voucher_id, promise=False)
    result = run(voucher_id, pending_age=timedelta(minutes=2))
    assert result.failed == []
    assert result.requeued == []
    assert redis.hlen(keys.pending(voucher_id)) == 1
    assert redis.get(keys.stock(voucher_id)) == "1"


def test_decided_order_whose_mark_was_not_cleared_is_cleared(
    gate: Gate, db: Database, redis: Any, run: Callable[..., Any], make_voucher: Callable
) -> None:
    voucher_id = make_voucher(stock=2)
    reservation, order_id = win(gate, redis, voucher_id)
    message = reservation
    # The persister committed, then could not reach Redis to clear the mark.
    unreachable = redis_unreachable()
    persist_order(db, unreachable, Scripts.register(unreachable), message)
    assert redis.hlen(keys.pending(voucher_id)) == 1

    result = run(voucher_id)
    assert result.cleared == [str(order_id)]
    assert result.requeued == []
    assert redis.hlen(keys.pending(voucher_id)) == 0
    assert stocks(db, redis, voucher_id) == (1, 1)


def redis_unreachable() -> Any:
    import redis as redis_lib

    return redis_lib.Redis(port=1, socket_connect_timeout=0.2, decode_responses=True)


def test_drift_is_repaired_only_once_the_queue_is_drained(
    gate: Gate, db: Database, redis: Any, run: Callable[..., Any], make_voucher: Callable
) -> None:
    """Original design's defect: Redis/DB double-write drift."""
    voucher_id = make_voucher(stock=5)
    reservation, _ = win(gate, redis, voucher_id)
    persist_order(db, redis, gate.scripts, reservation)
    stranger = new_user()
    redis.set(keys.stock(voucher_id), 9)
    redis.srem(keys.buyers(voucher_id), reservation.user_id)
    redis.sadd(keys.buyers(voucher_id), stranger)

    reported = run(voucher_id, drained=False)
    assert reported.drift.drifted
    assert not reported.repaired
    assert (reported.drift.redis_stock, reported.drift.expected_stock) == (9, 4)
    assert (reported.drift.buyers_added, reported.drift.buyers_removed) == (1, 1)
    assert redis.get(keys.stock(voucher_id)) == "9"

    repaired = run(voucher_id, drained=True)
    assert repaired.repaired
    assert stocks(db, redis, voucher_id) == (4, 4)
    assert redis.smembers(keys.buyers(voucher_id)) == {str(reservation.user_id)}

    again = run(voucher_id, drained=True)
    assert not again.drift.drifted
    assert not again.repaired


def test_repair_counts_reservations_still_on_their_way(
    gate: Gate, db: Database, redis: Any, run: Callable[..., Any], make_voucher: Callable
) -> None:
    """A reservation pending (message not yet persisted) keeps its stock and its buyer."""
    voucher_id = make_voucher(stock=5)
    reservation, _ = win(gate, redis, voucher_id)
    redis.set(keys.stock(voucher_id), 0)
    result = run(voucher_id, drained=True, pending_age=timedelta(minutes=2))
    assert result.repaired
    assert redis.get(keys.stock(voucher_id)) == "4"
    assert redis.sismember(keys.buyers(voucher_id), reservation.user_id)


def test_reconciling_twice_in_a_row_changes_nothing_the_second_time(
    gate: Gate, db: Database, redis: Any, sqs: Any, queue: OrderQueue, run: Callable[..., Any], make_voucher: Callable
) -> None:
    voucher_id = make_voucher(stock=4)
    win(gate, redis, voucher_id)
    accept(gate, voucher_id, promise=False)
    first = run(voucher_id)
    assert len(first.requeued) == 1
    assert len(first.failed) == 1
    persist_queue(sqs, queue.queue_url, db, redis, gate)
    second = run(voucher_id)
    assert (second.requeued, second.failed, second.cleared) == ([], [], [])
    assert not second.drift.drifted
    assert stocks(db, redis, voucher_id) == (3, 3)


def test_queue_depth_and_waiting_for_the_queue_to_drain(sqs: Any, queue: OrderQueue) -> None:
    assert queue_depth(sqs, queue.queue_url) == 0
    sqs.send_message(QueueUrl=queue.queue_url, MessageBody="{}")
    assert queue_depth(sqs, queue.queue_url) == 1
    assert not wait_drained(sqs, queue.queue_url, timeout=0.3, poll=0.1)
    drain(sqs, queue.queue_url)
    assert wait_drained(sqs, queue.queue_url, timeout=0.3, poll=0.1)


def lose_redis_state(redis: Any, voucher_id: int) -> None:
    """What a restart without persistence does to a voucher (and to the loaded mark)."""
    redis.delete(*keys.voucher_keys(voucher_id))
    redis.delete(keys.loaded())


def test_redis_flushed_mid_sale_then_rebuilt(
    gate: Gate, db: Database, redis: Any, scripts: Scripts, make_voucher: Callable
) -> None:
    """No oversell, no wrongly refused user, final counts match."""
    voucher_id = make_voucher(stock=10)
    first_buyers = [new_user() for _ in range(4)]
    for user_id in first_buyers:
        reservation, _ = win(gate, redis, voucher_id, user_id)
        message = reservation
        persist_order(db, redis, gate.scripts, message)

    lose_redis_state(redis, voucher_id)
    # Until the rebuild, nobody is told the voucher does not exist: they are told to try again.
    with pytest.raises(SeckillError) as refused:
        gate.reserve(voucher_id, new_user(), uuid.uuid4().hex)
    assert (refused.value.refusal.status, refused.value.refusal.code) == (503, "TRY_AGAIN")

    rebuilt = [r for r in rebuild(db, redis, scripts, dead_letters=[], hint_ttl=HINT_TTL) if r.voucher_id == voucher_id]
    assert redis.exists(keys.loaded())
    assert rebuilt
    assert rebuilt[0].applied
    assert rebuilt[0].expected_stock == 6
    # A present voucher is never clobbered by a rebuild.
    assert not restore(db, scripts, voucher_id, "missing").applied

    for user_id in first_buyers:  # they already hold an order
        assert gate.reserve(voucher_id, user_id, uuid.uuid4().hex) == Refusal(
            409, "DUPLICATE_ORDER", "one order per user"
        )
    newcomers = [new_user() for _ in range(8)]
    for user_id in newcomers[:6]:
        message, _ = win(gate, redis, voucher_id, user_id)
        persist_order(db, redis, gate.scripts, message)
    for user_id in newcomers[6:]:
        assert gate.reserve(voucher_id, user_id, uuid.uuid4().hex) == Refusal(409, "SOLD_OUT", "sold out")
    assert confirmed(db, voucher_id) == 10
    assert stocks(db, redis, voucher_id) == (0, 0)


def test_redis_flushed_with_orders_still_queued_oversells_nothing(
    gate: Gate, db: Database, redis: Any, scripts: Scripts, run: Callable[..., Any], make_voucher: Callable
) -> None:
    """The cache is lost while accepted orders wait on the queue: the rebuilt gate
    over-accepts, MySQL refuses the excess (FAILED, recorded), and reconciliation
    then brings Redis back to MySQL's count."""
    voucher_id = make_voucher(stock=3)
    queued = []
    for _ in range(3):
        reservation, _ = win(gate, redis, voucher_id)
        queued.append(reservation)
    lose_redis_state(redis, voucher_id)
    rebuild(db, redis, scripts, dead_letters=[], hint_ttl=HINT_TTL)
    late = []
    for _ in range(3):
        reservation, _ = win(gate, redis, voucher_id)
        late.append(reservation)
    decisions = [persist_order(db, redis, gate.scripts, m).status for m in queued + late]
    assert decisions == ["CONFIRMED"] * 3 + ["FAILED"] * 3
    assert confirmed(db, voucher_id) == 3
    reasons = db_rows(db, "SELECT reason FROM tb_voucher_order_rejection WHERE voucher_id = %s", voucher_id)
    assert [r["reason"] for r in reasons] == ["SOLD_OUT"] * 3
    run(voucher_id, drained=True)
    assert stocks(db, redis, voucher_id) == (0, 0)


def test_reconciling_alongside_live_traffic_keeps_every_count(
    db: Database, gate: Gate, redis: Any, scripts: Scripts, queue: OrderQueue, make_voucher: Callable
) -> None:
    """Buyers reserve and persist on 8 threads while reconciliation (drift repair
    included) runs in a loop: nothing oversold, nothing released that was live,
    and Redis ends equal to MySQL."""
    voucher_id = make_voucher(stock=60)
    stop = threading.Event()
    passes: list[Any] = []

    def reconcile_loop() -> None:
        while not stop.is_set():
            passes.append(reconcile_voucher(db, redis, queue, voucher_id, pending_age=timedelta(minutes=2)))

    def buyer(users: list[int]) -> list[str]:
        outcomes = []
        for user_id in users:
            reservation = gate.reserve(voucher_id, user_id, uuid.uuid4().hex)
            if isinstance(reservation, Refusal):
                outcomes.append(reservation.code)
                continue
            outcomes.append(persist_order(db, redis, gate.scripts, accepted(gate, reservation)).status)
        return outcomes

    looping = threading.Thread(target=reconcile_loop)
    looping.start()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = [o for batch in pool.map(buyer, [[new_user() for _ in range(10)] for _ in range(8)]) for o in batch]
    stop.set()
    looping.join()

    assert len(passes) > 1
    assert all(p.failed == [] and p.requeued == [] for p in passes)  # live reservations are never stale
    assert results.count("CONFIRMED") == 60
    assert results.count("SOLD_OUT") == 20
    assert confirmed(db, voucher_id) == 60
    assert stocks(db, redis, voucher_id) == (0, 0)
    assert redis.hlen(keys.pending(voucher_id)) == 0


def test_a_lost_voucher_is_rebuilt_only_once_the_queue_is_drained(
    gate: Gate, db: Database, redis: Any, sqs: Any, queues: dict[str, str], queue: OrderQueue, make_voucher: Callable
) -> None:
    """Orders still on the queue are not in MySQL yet: rebuilding before they land
    would count them as unsold. Until then the gate keeps answering 503."""
    voucher_id = make_voucher(stock=3)
    message, _ = win(gate, redis, voucher_id)
    assert queue.send(message) is Sent.SENT  # accepted; still on its way to MySQL
    lose_redis_state(redis, voucher_id)
    try:
        blocked = recover(db, redis, sqs, queues)
        assert blocked.lost
        assert blocked.blocked == "1 orders are still on the order queue"
        assert not redis.exists(keys.stock(voucher_id))
        assert reconcile_voucher(db, redis, queue, voucher_id).missing  # reconciliation leaves it to recovery
        with pytest.raises(SeckillError) as refused:
            gate.reserve(voucher_id, new_user(), uuid.uuid4().hex)
        assert refused.value.refusal.code == "TRY_AGAIN"

        assert persist_queue(sqs, queues["OrderQueue"], db, redis, gate) == 1
        rebuilt = recover(db, redis, sqs, queues)
        assert rebuilt.blocked == ""
        assert voucher_id in [r.voucher_id for r in rebuilt.rebuilt if r.applied]
        assert stocks(db, redis, voucher_id) == (2, 2)
        assert redis.exists(keys.loaded())
        assert recover(db, redis, sqs, queues) == Recovery(False, [], 0)  # nothing lost any more
    finally:
        redis.set(keys.loaded(), 1)


def test_rebuild_raises_the_order_id_counter_to_what_mysql_holds(
    gate: Gate, db: Database, redis: Any, scripts: Scripts, make_voucher: Callable
) -> None:
    """A restart resets ``icr:order:<day>`` to nothing: ids made in the same second
    would repeat stored ones, or those of blocks containers still hold. Recovery puts
    the counter back a lease gap above MySQL's largest."""
    voucher_id = make_voucher(stock=3)
    reservation, order_id = win(gate, redis, voucher_id)
    persist_order(db, redis, gate.scripts, reservation)
    key = keys.order_counter(datetime.now(UTC))
    before = int(redis.get(key))
    try:
        redis.delete(key)
        raised = restore_order_counter(db, scripts)
        assert raised >= (order_id & SEQUENCE_MASK) + LEASE_GAP
        assert int(redis.get(key)) == raised
        # Never lowered: a counter already past the gap (the recorded one's) stays where it is.
        redis.set(key, raised + 2 * LEASE_GAP)
        assert restore_order_counter(db, scripts) == raised + 2 * LEASE_GAP
    finally:
        redis.set(key, max(before, int(redis.get(key) or 0)))
    assert next_order_id(redis) & SEQUENCE_MASK > order_id & SEQUENCE_MASK


def test_a_second_loss_leases_no_block_a_container_still_holds(db: Database, redis: Any, scripts: Scripts) -> None:
    """Redis loses its data twice in a day, and no order made since the first recovery
    is stored yet. MySQL's largest sequence alone put the counter back where the first
    recovery had: a new container leased the very block an old one still held, and both
    gave a user the same order id in the same second (a chaos run under load: the second
    order went to the poison queue after its 202)."""
    key = keys.order_counter(datetime.now(UTC))
    before = int(redis.get(key) or 0)
    try:
        redis.delete(key)  # the first loss
        restore_order_counter(db, scripts)
        old = OrderIds(redis)  # a container that leased after the first recovery
        held = old.take() & SEQUENCE_MASK
        redis.delete(key)  # the second loss, before any order of that block is stored
        restore_order_counter(db, scripts)
        fresh = OrderIds(redis)  # a container started after the second recovery
        assert fresh.take() & SEQUENCE_MASK >= held + BLOCK
    finally:
        redis.set(key, max(before, int(redis.get(key) or 0)))


def test_a_lost_voucher_is_rebuilt_with_its_dead_lettered_orders_counted(
    gate: Gate, db: Database, redis: Any, sqs: Any, queues: dict[str, str], make_voucher: Callable
) -> None:
    """Orders in the DLQ (MySQL was down for them) when Redis loses its data. Before:
    the rebuild counted their units as unsold, new buyers got 202s, and after the
    replay the earlier 202s ended FAILED SOLD_OUT: more 202s than stock."""
    voucher_id = make_voucher(stock=3)
    stored, dead = accept(gate, voucher_id), accept(gate, voucher_id)
    persist_order(db, redis, gate.scripts, stored)
    sqs.send_message(QueueUrl=queues["OrderDeadLetterQueue"], MessageBody=dead.to_json())
    lose_redis_state(redis, voucher_id)
    try:
        unread = recover(db, redis, sqs, {**queues, "OrderDeadLetterQueue": ""})  # the DLQ cannot be counted
        assert unread.blocked.startswith("ORDER_DLQ_URL is not set")
        assert not redis.exists(keys.stock(voucher_id))

        rebuilt = recover(db, redis, sqs, queues)
        assert rebuilt.blocked == ""
        assert rebuilt.dead_letters == 1
        assert redis.get(keys.stock(voucher_id)) == "1"
        assert redis.smembers(keys.buyers(voucher_id)) == {str(stored.user_id), str(dead.user_id)}
        assert json.loads(redis.get(keys.order_status(dead.order_id)))["status"] == "PENDING"
    finally:
        redis.set(keys.loaded(), 1)

    late = accept(gate, voucher_id)
    assert gate.reserve(voucher_id, new_user(), uuid.uuid4().hex) == Refusal(409, "SOLD_OUT", "sold out")
    # The DLQ is replayed: every 202 is confirmed, none fails.
    decisions = [persist_order(db, redis, gate.scripts, m).status for m in (dead, late)]
    assert decisions == ["CONFIRMED", "CONFIRMED"]
    assert confirmed(db, voucher_id) == 3
    assert stocks(db, redis, voucher_id) == (0, 0)
    assert redis.hlen(keys.pending(voucher_id)) == 0


def test_dead_lettered_orders_are_read_without_being_consumed(sqs: Any, queues: dict[str, str]) -> None:
    dlq = queues["OrderDeadLetterQueue"]
    orders = [OrderMessage(1000 + i, 7 + i, 9, datetime.now(UTC)) for i in range(13)]
    for m in orders:
        sqs.send_message(QueueUrl=dlq, MessageBody=m.to_json())
    sqs.send_message(QueueUrl=dlq, MessageBody="not an order")
    letters, why = read_dead_letters(sqs, dlq)
    assert why == ""
    assert sorted(m.order_id for m in letters or []) == [m.order_id for m in orders]
    assert queue_depth(sqs, dlq) == 14
    assert len(drain(sqs, dlq)) == 14, "every message is visible again at once"
    assert read_dead_letters(sqs, "") == (
        None,
        "ORDER_DLQ_URL is not set, so the orders in the dead-letter queue cannot be counted",
    )


def test_one_rebuild_at_a_time(
    db: Database, redis: Any, sqs: Any, queues: dict[str, str], make_voucher: Callable
) -> None:
    """Reading the DLQ hides its messages from other readers for a while: a rebuild that
    finds another one running changes nothing instead of reading half of it."""
    voucher_id = make_voucher(stock=3)
    lose_redis_state(redis, voucher_id)
    try:
        with rebuilding(redis, wait=0) as first:
            assert first
            assert recover(db, redis, sqs, queues).blocked == "another rebuild is running"
            assert not redis.exists(keys.stock(voucher_id))
        assert recover(db, redis, sqs, queues).blocked == ""
        assert redis.get(keys.stock(voucher_id)) == "3"
    finally:
        redis.set(keys.loaded(), 1)
