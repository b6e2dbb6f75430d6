"""Promises that hold when a reply is lost.

Each test puts a ``LossyProxy`` between the service and a real server (the moto
SQS server, Redis): the request reaches the server, which does the work, and
the answer never comes back. The service must then know which outcomes remain
possible and keep its promises in each: a 202 ends CONFIRMED or FAILED and
never lost; a 503 leaves no order nobody holds an id for; a user's retry after
a 503 succeeds at once; no more 202s than stock.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from seckill import hints
from seckill.infra import keys
from seckill.infra.clients import redis_client, sqs_client
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database
from seckill.infra.errors import Refusal, SeckillError
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderMessage, OrderQueue, Sent
from seckill.persist.persistence import NOT_QUEUED, decide_orders
from seckill.press.gate import Gate, Mark, Reservation
from seckill.press.orders import place_order
from seckill.vouchers import stop_seckill_voucher
from seckill_demo.proxy import FOREVER, LossyProxy
from tests.helpers import accept, closed_port, db_rows, drain, new_user, persist_order, reconcile_voucher

TTL = 600


@pytest.fixture
def sqs_proxy(sqs_endpoint: str) -> Iterator[LossyProxy]:
    host, port = sqs_endpoint.removeprefix("http://").split(":")
    with LossyProxy(host, int(port)) as proxy:
        yield proxy


@pytest.fixture
def lossy_sqs(sqs_proxy: LossyProxy, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The service's own SQS client (its timeouts and retries), reaching moto through the proxy."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", f"http://{sqs_proxy.url_host}")
    return sqs_client()


@pytest.fixture
def redis_proxy(settings: Settings) -> Iterator[LossyProxy]:
    host, port = settings.redis_url.removeprefix("redis://").split("/")[0].split(":")
    with LossyProxy(host, int(port)) as proxy:
        yield proxy


@pytest.fixture
def lossy_redis(redis_proxy: LossyProxy, settings: Settings) -> Any:
    """The service's own Redis client (timeouts, retries) reaching Redis through the proxy."""
    database = settings.redis_url.rsplit("/", 1)[1]
    return redis_client(Settings.from_env({"REDIS_URL": f"redis://{redis_proxy.url_host}/{database}"}))


@pytest.fixture
def lossy_gate(lossy_redis: Any) -> Gate:
    return Gate(lossy_redis, Scripts.register(lossy_redis), refusal_cache_seconds=0)


def lose_gate_replies(redis: Any, redis_proxy: LossyProxy, gate: Gate) -> None:
    """From now on the gate script runs and its replies are lost (it is loaded first:
    what is lost is its answer, not a NOSCRIPT)."""
    redis.script_load(gate.scripts.gate.text)
    redis_proxy.only_after, redis_proxy.drop_replies = b"EVALSHA", FOREVER


def persist_all(sqs: Any, url: str, db: Database, redis: Any, gate: Gate) -> list[tuple[int, str]]:
    """What the persister does with everything on the queue: (order id, status) per message."""
    decided = []
    for m in drain(sqs, url):
        message = OrderMessage.from_json(m["Body"])
        decided.append((message.order_id, persist_order(db, redis, gate.scripts, message).status))
    return decided


def stocks(db: Database, redis: Any, voucher_id: int) -> tuple[str, int]:
    (row,) = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    return redis.get(keys.stock(voucher_id)), int(row["stock"])


def confirmed(db: Database, voucher_id: int) -> list[dict[str, Any]]:
    return db_rows(db, "SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = %s", voucher_id)


# --- 1. SQS stored the message but its reply was lost ------------------------------------------


def test_a_send_whose_reply_is_lost_is_in_doubt_not_refused(
    sqs: Any, lossy_sqs: Any, sqs_proxy: LossyProxy, queues: dict[str, str]
) -> None:
    url = queues["OrderQueue"]
    queue = OrderQueue(lossy_sqs, url)
    message = OrderMessage(123, 7, 8, datetime.now(UTC))
    sqs_proxy.drop_replies = FOREVER
    assert queue.send(message) is Sent.IN_DOUBT
    assert sqs_proxy.dropped >= 2, "botocore retried the send"
    stored = drain(sqs, url)
    assert stored, "SQS stored it although no answer came back"
    assert {m["Body"] for m in stored} == {message.to_json()}

    sqs_proxy.drop_replies = 0
    assert queue.send(message) is Sent.SENT


def test_a_send_that_never_reached_sqs_is_refused(queues: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", f"http://127.0.0.1:{closed_port()}")
    queue = OrderQueue(sqs_client(), queues["OrderQueue"])
    message = OrderMessage(123, 7, 8, datetime.now(UTC))
    assert queue.send(message) is Sent.REFUSED


def test_sqs_stored_the_order_but_its_reply_was_lost_so_the_press_is_202_and_confirmed_once(
    db: Database,
    gate: Gate,
    redis: Any,
    sqs: Any,
    lossy_sqs: Any,
    sqs_proxy: LossyProxy,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
) -> None:
    """Before: the reservation was released and the press answered 503, while the
    message (several copies) was on the queue: the order was confirmed for a user
    told it failed, and the next buyer's 202 ended FAILED SOLD_OUT."""
    url = queues["OrderQueue"]
    voucher_id, buyer, late = make_voucher(stock=1), new_user(), new_user()
    sqs_proxy.drop_replies = FOREVER
    order_id = place_order(gate, redis, OrderQueue(lossy_sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    sqs_proxy.drop_replies = 0

    mark = Mark.parse(redis.hget(keys.pending(voucher_id), str(buyer)))
    assert mark is not None
    assert (mark.order_id, mark.promised) == (order_id, True)
    refused = place_order(gate, redis, OrderQueue(lossy_sqs, url), db, voucher_id, late, status_ttl=TTL)
    assert refused == Refusal(409, "SOLD_OUT", "sold out")
    decided = persist_all(sqs, url, db, redis, gate)
    assert len(decided) > 1, "botocore's retries stored several copies"
    assert set(decided) == {(order_id, "CONFIRMED")}
    assert confirmed(db, voucher_id) == [{"id": order_id, "user_id": buyer}]
    assert stocks(db, redis, voucher_id) == ("0", 0)
    assert not redis.hexists(keys.pending(voucher_id), str(buyer))


def test_a_promised_order_whose_send_was_in_doubt_and_never_arrived_is_requeued(
    db: Database,
    gate: Gate,
    redis: Any,
    sqs: Any,
    lossy_sqs: Any,
    sqs_proxy: LossyProxy,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
) -> None:
    """The same 202, where the stored copies were lost after all (here: taken off the
    queue): reconciliation re-queues the promised order, which is then confirmed."""
    url = queues["OrderQueue"]
    voucher_id, buyer = make_voucher(stock=2), new_user()
    sqs_proxy.drop_replies = FOREVER
    order_id = place_order(gate, redis, OrderQueue(lossy_sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    sqs_proxy.drop_replies = 0
    drain(sqs, url)

    result = reconcile_voucher(db, redis, OrderQueue(sqs, url), voucher_id, drained=True)
    assert result.requeued == [str(order_id)]
    assert persist_all(sqs, url, db, redis, gate) == [(order_id, "CONFIRMED")]
    assert stocks(db, redis, voucher_id) == ("1", 1)


# --- 2. SQS refuses and the release fails too --------------------------------------------------


@pytest.fixture
def refused_send_then_redis_gone(
    redis_proxy: LossyProxy, monkeypatch: pytest.MonkeyPatch, queues: dict[str, str]
) -> OrderQueue:
    """A queue whose every send is refused (nothing listens), and whose refusal comes
    exactly when Redis stops answering, so the release that follows fails."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", f"http://127.0.0.1:{closed_port()}")
    client = sqs_client()

    def redis_goes(**_: Any) -> None:
        redis_proxy.go_down()

    client.meta.events.register("before-send.sqs.SendMessage", redis_goes)
    return OrderQueue(client, queues["OrderQueue"])


def test_a_refused_send_whose_release_fails_is_503_and_the_retry_resumes_the_same_order(
    lossy_redis: Any,
    db: Database,
    redis: Any,
    sqs: Any,
    lossy_gate: Gate,
    redis_proxy: LossyProxy,
    refused_send_then_redis_gone: OrderQueue,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
) -> None:
    """Before: the 503'd reservation kept its order id, the user's retry got
    DUPLICATE_ORDER, and reconciliation later re-queued and confirmed an order whose
    id the user never received."""
    voucher_id, buyer = make_voucher(stock=2), new_user()
    with pytest.raises(SeckillError) as first:
        place_order(lossy_gate, lossy_redis, refused_send_then_redis_gone, db, voucher_id, buyer, status_ttl=TTL)
    assert (first.value.refusal.status, first.value.refusal.code) == (503, "TRY_AGAIN")
    redis_proxy.come_back()
    stranded = Mark.parse(redis.hget(keys.pending(voucher_id), str(buyer)))
    assert stranded is not None
    assert not stranded.promised

    url = queues["OrderQueue"]
    order_id = place_order(lossy_gate, lossy_redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    assert order_id == stranded.order_id, "the retry is answered with the order the 503 left behind"
    assert persist_all(sqs, url, db, lossy_redis, lossy_gate) == [(order_id, "CONFIRMED")]
    assert stocks(db, redis, voucher_id) == ("1", 1)


def test_a_refused_send_whose_release_fails_and_no_retry_ends_with_no_order(
    lossy_redis: Any,
    db: Database,
    gate: Gate,
    redis: Any,
    sqs: Any,
    lossy_gate: Gate,
    redis_proxy: LossyProxy,
    refused_send_then_redis_gone: OrderQueue,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
) -> None:
    voucher_id, buyer = make_voucher(stock=2), new_user()
    with pytest.raises(SeckillError):
        place_order(lossy_gate, lossy_redis, refused_send_then_redis_gone, db, voucher_id, buyer, status_ttl=TTL)
    redis_proxy.come_back()
    stranded = Mark.parse(redis.hget(keys.pending(voucher_id), str(buyer)))
    assert stranded is not None

    url = queues["OrderQueue"]
    result = reconcile_voucher(db, redis, OrderQueue(sqs, url), voucher_id)
    assert (result.failed, result.requeued) == ([str(stranded.order_id)], [])
    assert drain(sqs, url) == []
    assert confirmed(db, voucher_id) == []
    assert stocks(db, redis, voucher_id) == ("2", 2)
    assert not redis.sismember(keys.buyers(voucher_id), buyer)


def test_a_release_that_fails_logs_the_reservations_order_id(
    lossy_redis: Any,
    db: Database,
    redis: Any,
    lossy_gate: Gate,
    redis_proxy: LossyProxy,
    refused_send_then_redis_gone: OrderQueue,
    make_voucher: Callable[..., int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The log names the order id the 503'd reservation still carries (the one the
    user's next press resumes, or reconciliation fails)."""
    voucher_id, buyer = make_voucher(stock=2), new_user()
    with pytest.raises(SeckillError):
        place_order(lossy_gate, lossy_redis, refused_send_then_redis_gone, db, voucher_id, buyer, status_ttl=TTL)
    redis_proxy.come_back()
    stranded = Mark.parse(redis.hget(keys.pending(voucher_id), str(buyer)))
    assert stranded is not None
    (record,) = [r for r in caplog.records if r.getMessage().startswith("could not release reservation")]
    assert f"order_id={stranded.order_id}," in record.getMessage()


# --- 3. The gate ran but its reply was lost ----------------------------------------------------


def test_a_lost_gate_reply_is_503_and_the_retry_succeeds_at_once(
    lossy_redis: Any,
    db: Database,
    redis: Any,
    sqs: Any,
    lossy_gate: Gate,
    redis_proxy: LossyProxy,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
) -> None:
    """Before: the retry was refused DUPLICATE_ORDER for the pending age plus a
    reconcile period, while the user held no order. The lost press's order id, which
    its reservation carries, is the one the retry is answered with."""
    url = queues["OrderQueue"]
    voucher_id, buyer = make_voucher(stock=2), new_user()
    lose_gate_replies(redis, redis_proxy, lossy_gate)
    with pytest.raises(SeckillError) as lost:
        place_order(lossy_gate, lossy_redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    assert (lost.value.refusal.status, lost.value.refusal.code) == (503, "TRY_AGAIN")
    redis_proxy.drop_replies = 0
    assert redis.get(keys.stock(voucher_id)) == "1", "the script ran: one unit is held"
    held = Mark.parse(redis.hget(keys.pending(voucher_id), str(buyer)))
    assert held is not None
    assert not held.promised

    order_id = place_order(lossy_gate, lossy_redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    assert order_id == held.order_id, "the retry resumed the order the lost reply left"
    assert redis.get(keys.stock(voucher_id)) == "1", "the retry took the held unit over, not a second one"
    assert persist_all(sqs, url, db, lossy_redis, lossy_gate) == [(order_id, "CONFIRMED")]
    assert stocks(db, redis, voucher_id) == ("1", 1)


def test_the_order_id_of_a_lost_gate_reply_is_never_handed_to_another_press(
    lossy_redis: Any,
    db: Database,
    redis: Any,
    sqs: Any,
    lossy_gate: Gate,
    redis_proxy: LossyProxy,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
) -> None:
    """The script may have reserved with the press's id (here it did): that id stays
    out of the block, so another user's press cannot win with it too; a refused
    press's id, which no reservation carries, serves the next press."""
    url = queues["OrderQueue"]
    voucher_id, sold_out, buyer = make_voucher(stock=2), make_voucher(stock=1), new_user()
    first = place_order(lossy_gate, lossy_redis, OrderQueue(sqs, url), db, sold_out, new_user(), status_ttl=TTL)
    assert isinstance(first, int)
    assert isinstance(
        place_order(lossy_gate, lossy_redis, OrderQueue(sqs, url), db, sold_out, new_user(), status_ttl=TTL), Refusal
    )
    lose_gate_replies(redis, redis_proxy, lossy_gate)
    with pytest.raises(SeckillError):
        place_order(lossy_gate, lossy_redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    redis_proxy.drop_replies = 0
    held = Mark.parse(redis.hget(keys.pending(voucher_id), str(buyer)))
    assert held is not None
    assert held.order_id & 0xFFFFFFFF == (first & 0xFFFFFFFF) + 1, "the refused press's id served the next"

    other = place_order(lossy_gate, lossy_redis, OrderQueue(sqs, url), db, voucher_id, new_user(), status_ttl=TTL)
    assert isinstance(other, int)
    assert other & 0xFFFFFFFF == (held.order_id & 0xFFFFFFFF) + 1, "the lost reply's id is not handed out again"
    assert sorted(order_id for order_id, _ in persist_all(sqs, url, db, redis, lossy_gate)) == sorted([first, other])


def test_an_unreachable_gate_is_503_and_nothing_is_held(
    db: Database, redis: Any, sqs: Any, queues: dict[str, str], make_voucher: Callable[..., int]
) -> None:
    client = redis_client(Settings.from_env({"REDIS_URL": f"redis://127.0.0.1:{closed_port()}/0"}))
    unreachable = Gate(client, Scripts.register(client))
    voucher_id = make_voucher(stock=2)
    with pytest.raises(SeckillError) as error:
        place_order(
            unreachable, client, OrderQueue(sqs, queues["OrderQueue"]), db, voucher_id, new_user(), status_ttl=TTL
        )
    assert error.value.refusal.code == "TRY_AGAIN"
    assert isinstance(error.value.__cause__, RedisConnectionError)
    assert redis.get(keys.stock(voucher_id)) == "2"


def test_a_concurrent_second_press_of_the_same_user_never_gets_a_second_unit(
    db: Database, gate: Gate, redis: Any, sqs: Any, queues: dict[str, str], make_voucher: Callable[..., int]
) -> None:
    """A press that takes over a live request's reservation sends that request's order
    and is answered 202 with it; the slow request, if its send is refused, can no longer
    give the unit back (its 503 is then about an order its user holds an id for), and
    one order is made."""
    url = queues["OrderQueue"]
    voucher_id, buyer = make_voucher(stock=3), new_user()
    slow = gate.reserve(voucher_id, buyer, uuid.uuid4().hex)  # a press still running
    assert isinstance(slow, Reservation)
    order_id = place_order(gate, redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    assert order_id == slow.order_id
    assert gate.release(slow) is False  # the slow press's send refused: its release finds another token
    assert persist_all(sqs, url, db, redis, gate) == [(order_id, "CONFIRMED")]
    assert stocks(db, redis, voucher_id) == ("2", 2)


def test_a_send_botocore_never_made_is_refused(
    sqs_endpoint: str, queues: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No credentials: botocore raises before any request leaves, so nothing can be stored."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = boto3.session.Session().client("sqs", endpoint_url=sqs_endpoint, region_name="us-east-1")
    queue = OrderQueue(client, queues["OrderQueue"])
    assert queue.send(OrderMessage(123, 7, 8, datetime.now(UTC))) is Sent.REFUSED


def test_a_client_shared_with_an_order_queue_still_sends_on_its_own(sqs: Any, queues: dict[str, str]) -> None:
    """The attempt watcher hooks the client itself: a send made without OrderQueue, from
    a thread that never used it, must go through untouched (it once raised after SQS
    had stored the message, twice)."""
    url = queues["OrderQueue"]
    assert OrderQueue(sqs, url).send(OrderMessage(123, 7, 8, datetime.now(UTC))) is Sent.SENT
    errors: list[BaseException] = []

    def send() -> None:
        try:
            sqs.send_message(QueueUrl=url, MessageBody="direct")
        except Exception as exc:  # what the test looks for
            errors.append(exc)

    thread = threading.Thread(target=send)
    thread.start()
    thread.join()
    assert errors == []
    bodies = [m["Body"] for m in drain(sqs, url)]
    assert len(bodies) == 2
    assert "direct" in bodies


# --- the promise and the status hint, written after the send --------------------------------


def test_an_accepted_press_leaves_its_mark_promised_and_its_hint_pending_after_a_script_flush(
    db: Database, gate: Gate, redis: Any, sqs: Any, queues: dict[str, str], make_voucher: Callable[..., int]
) -> None:
    """The promise and the PENDING hint share one pipelined round trip after the send;
    a Redis that lost its scripts (a restart) gets the promise script loaded again."""
    voucher_id, buyer = make_voucher(stock=1), new_user()
    redis.script_flush()
    order_id = place_order(gate, redis, OrderQueue(sqs, queues["OrderQueue"]), db, voucher_id, buyer, status_ttl=TTL)

    mark = Mark.parse(redis.hget(keys.pending(voucher_id), str(buyer)))
    assert mark is not None
    assert (mark.order_id, mark.promised) == (order_id, True)
    hint = json.loads(redis.get(keys.order_status(order_id)))
    assert (hint["status"], hint["userId"], hint["voucherId"]) == ("PENDING", buyer, voucher_id)
    assert 0 < redis.ttl(keys.order_status(order_id)) <= TTL


def test_a_pending_hint_written_after_the_persister_decided_leaves_the_final_hint(
    db: Database, gate: Gate, redis: Any, sqs: Any, queues: dict[str, str], make_voucher: Callable[..., int]
) -> None:
    """The persister may decide an order before its press writes the PENDING hint:
    PENDING never replaces a final hint."""
    url = queues["OrderQueue"]
    voucher_id, buyer = make_voucher(stock=1), new_user()
    order_id = place_order(gate, redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    ((message_id, status),) = persist_all(sqs, url, db, redis, gate)
    assert (message_id, status) == (order_id, "CONFIRMED")

    hints.write_pending(redis, OrderMessage(order_id, buyer, voucher_id, datetime.now(UTC)), TTL)
    assert json.loads(redis.get(keys.order_status(order_id)))["status"] == "CONFIRMED"


# --- 4. The sale closes on a reservation nobody was answered for ------------------------------


def close_by_stop(db: Database, redis: Any, voucher_id: int) -> None:
    stop_seckill_voucher(db, redis, voucher_id)


def close_by_end(db: Database, redis: Any, voucher_id: int) -> None:
    """The window's end passes, by the Redis server's clock the gate reads."""
    seconds, micros = redis.time()
    redis.hset(keys.window(voucher_id), "end", seconds * 1000 + micros // 1000 - 1)


CLOSES = [pytest.param(close_by_stop, id="stopped"), pytest.param(close_by_end, id="ended")]
ENDED_ANSWER = Refusal(409, "ENDED", "the sale has ended")


def nothing_held(redis: Any, voucher_id: int, user_id: int) -> bool:
    return not redis.hexists(keys.pending(voucher_id), str(user_id)) and not redis.sismember(
        keys.buyers(voucher_id), user_id
    )


@pytest.mark.parametrize("close", CLOSES)
def test_after_the_close_a_lost_gate_reply_is_failed_released_and_the_press_is_ended(
    close: Callable[[Database, Any, int], None],
    lossy_redis: Any,
    db: Database,
    redis: Any,
    sqs: Any,
    lossy_gate: Gate,
    redis_proxy: LossyProxy,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
) -> None:
    """Before: the press took the reservation over and was answered 202, and its order
    was confirmed after the sale, while everyone else was answered ENDED. The lost
    press's order id was never sent, but nothing in Redis can tell: it is failed
    NOT_QUEUED as any unpromised order, then its unit is released."""
    url = queues["OrderQueue"]
    voucher_id, buyer = make_voucher(stock=2), new_user()
    lose_gate_replies(redis, redis_proxy, lossy_gate)
    with pytest.raises(SeckillError):
        place_order(lossy_gate, lossy_redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    redis_proxy.drop_replies = 0
    assert redis.get(keys.stock(voucher_id)) == "1", "the script ran: one unit is held"
    held = Mark.parse(redis.hget(keys.pending(voucher_id), str(buyer)))
    assert held is not None
    close(db, redis, voucher_id)

    answer = place_order(lossy_gate, lossy_redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    assert answer == ENDED_ANSWER
    assert redis.get(keys.stock(voucher_id)) == "2", "the held unit is back"
    assert nothing_held(redis, voucher_id, buyer)
    rejections = db_rows(db, "SELECT reason FROM tb_voucher_order_rejection WHERE order_id = %s", held.order_id)
    assert rejections == [{"reason": NOT_QUEUED}]
    assert drain(sqs, url) == []
    assert confirmed(db, voucher_id) == []


@pytest.fixture
def sent_then_died(gate: Gate, redis: Any, sqs: Any, queues: dict[str, str]) -> Callable[[int, int], OrderMessage]:
    """A press that reserved with its order id and sent it, then died before its promise
    and its 202: an unpromised mark, and a copy of the order on the queue."""

    def press(voucher_id: int, user_id: int) -> OrderMessage:
        message = accept(gate, voucher_id, user_id, promise=False)
        assert OrderQueue(sqs, queues["OrderQueue"]).send(message) is Sent.SENT
        return message

    return press


@pytest.mark.parametrize("close", CLOSES)
def test_after_the_close_an_unpromised_order_is_failed_released_and_its_copy_refused(
    close: Callable[[Database, Any, int], None],
    db: Database,
    gate: Gate,
    redis: Any,
    sqs: Any,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
    sent_then_died: Callable[[int, int], OrderMessage],
) -> None:
    """Before: the press resumed the order and was answered 202 with it after the sale,
    and the order was confirmed."""
    url = queues["OrderQueue"]
    voucher_id, buyer = make_voucher(stock=2), new_user()
    stranded = sent_then_died(voucher_id, buyer)
    close(db, redis, voucher_id)

    answer = place_order(gate, redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    assert answer == ENDED_ANSWER
    assert redis.get(keys.stock(voucher_id)) == "2", "the held unit is back"
    assert nothing_held(redis, voucher_id, buyer)
    rejections = db_rows(db, "SELECT reason FROM tb_voucher_order_rejection WHERE order_id = %s", stranded.order_id)
    assert rejections == [{"reason": NOT_QUEUED}]
    assert persist_all(sqs, url, db, redis, gate) == [(stranded.order_id, "FAILED")], "the copy sent is refused"
    assert confirmed(db, voucher_id) == []
    assert stocks(db, redis, voucher_id) == ("2", 2)


def test_after_the_close_an_order_the_persister_confirmed_stays(
    db: Database,
    gate: Gate,
    redis: Any,
    sqs: Any,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
    sent_then_died: Callable[[int, int], OrderMessage],
) -> None:
    """The persister committed the order inside the window but has not cleared its mark
    yet: it was accepted in the window, so it stays, and so does its unit."""
    url = queues["OrderQueue"]
    voucher_id, buyer = make_voucher(stock=2), new_user()
    stranded = sent_then_died(voucher_id, buyer)
    (message,) = drain(sqs, url)
    assert decide_orders(db, [OrderMessage.from_json(message["Body"])])[0].status == "CONFIRMED"
    close_by_stop(db, redis, voucher_id)

    answer = place_order(gate, redis, OrderQueue(sqs, url), db, voucher_id, buyer, status_ttl=TTL)
    assert answer == ENDED_ANSWER
    assert confirmed(db, voucher_id) == [{"id": stranded.order_id, "user_id": buyer}]
    assert redis.get(keys.stock(voucher_id)) == "1", "the unit stays sold"
    assert redis.sismember(keys.buyers(voucher_id), buyer)


def test_after_the_close_a_cleanup_that_fails_is_still_ended_and_left_to_reconciliation(
    creds: Credentials,
    db: Database,
    gate: Gate,
    redis: Any,
    sqs: Any,
    queues: dict[str, str],
    make_voucher: Callable[..., int],
    sent_then_died: Callable[[int, int], OrderMessage],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = queues["OrderQueue"]
    voucher_id, buyer = make_voucher(stock=2), new_user()
    stranded = sent_then_died(voucher_id, buyer)
    close_by_stop(db, redis, voucher_id)

    unreachable = Database(replace(creds, port=closed_port()))
    answer = place_order(gate, redis, OrderQueue(sqs, url), unreachable, voucher_id, buyer, status_ttl=TTL)
    assert answer == ENDED_ANSWER
    assert f"could not fail order {stranded.order_id}" in caplog.text
    assert redis.get(keys.stock(voucher_id)) == "1", "nothing is released before the order is failed"

    result = reconcile_voucher(db, redis, OrderQueue(sqs, url), voucher_id, drained=False)
    assert result.failed == [str(stranded.order_id)]
    assert persist_all(sqs, url, db, redis, gate) == [(stranded.order_id, "FAILED")]
    assert stocks(db, redis, voucher_id) == ("2", 2)
