"""Recovery's read of the dead-letter queue: every order once, at any size, whatever
order SQS hands messages back in, and nothing consumed."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from seckill.messages import OrderMessage, dead_lettered_orders


def fill(sqs: Any, size: int, seed: int) -> tuple[str, list[int]]:
    """A fresh queue of ``size`` order messages (ids drawn at random); its URL and the order ids."""
    rng = random.Random(seed)
    url = sqs.create_queue(QueueName=f"dlq-read-{uuid.uuid4().hex[:10]}")["QueueUrl"]
    accepted = datetime(2026, 11, 30, 12, tzinfo=UTC)
    orders = [
        OrderMessage(
            rng.randrange(1, 2**62), rng.randrange(1, 10**9), rng.randrange(1, 10**9), accepted + timedelta(seconds=i)
        )
        for i in range(size)
    ]
    for start in range(0, size, 10):
        entries = [{"Id": str(i), "MessageBody": m.to_json()} for i, m in enumerate(orders[start : start + 10])]
        assert not sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")
    return url, [m.order_id for m in orders]


@contextmanager
def receives(sqs: Any, *, delay: float = 0) -> Iterator[list[int]]:
    """Counts the client's ReceiveMessage calls (the list's one item); ``delay`` makes
    each call that much slower, as a distant or busy SQS would be."""
    count = [0]

    def on_receive(**_: Any) -> None:
        count[0] += 1
        time.sleep(delay)

    sqs.meta.events.register("before-call.sqs.ReceiveMessage", on_receive)
    try:
        yield count
    finally:
        sqs.meta.events.unregister("before-call.sqs.ReceiveMessage", on_receive)


def visibility(sqs: Any, url: str) -> tuple[int, int]:
    """(visible, in flight) messages of a queue."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return int(attrs[names[0]]), int(attrs[names[1]])


def test_thousands_of_dead_letters_are_each_read_once_in_a_receive_per_ten(fauxqs: Any) -> None:
    """3,000 messages on fauxqs: every order once, one receive per ten messages and
    the one that finds nothing more, and all of them visible again afterwards."""
    size = 3000
    url, order_ids = fill(fauxqs, size, seed=16)
    try:
        with receives(fauxqs) as calls:
            letters, complete = dead_lettered_orders(fauxqs, url)
        assert complete
        assert sorted(m.order_id for m in letters) == sorted(order_ids)
        # fauxqs hands back ten whenever ten are visible: the read's length follows the queue's.
        assert calls[0] == size // 10 + 1
        assert visibility(fauxqs, url) == (size, 0)
    finally:
        fauxqs.delete_queue(QueueUrl=url)


def test_a_read_longer_than_its_first_hold_is_whole_when_sqs_returns_the_earliest_hidden_first(sqs: Any) -> None:
    """moto returns visible messages in the order they were sent, so a message whose hold
    ran out comes back before every message not yet received: the earliest hidden first,
    an order real SQS may also choose. Each receive here is made 0.7 s slower, so the
    read of 100 messages (11 receives, the last at least 7 s after the first) outlasts
    its first 6-second hold: held for a fixed 6 s, the first messages would come back
    mid-read and the read stop there, incomplete, at every attempt. Renewed before half
    their hold has run, they stay hidden until the read ends."""
    size = 100
    url, order_ids = fill(sqs, size, seed=4)
    try:
        with receives(sqs, delay=0.7) as calls:
            letters, complete = dead_lettered_orders(sqs, url, hold_seconds=6)
        assert complete
        assert sorted(m.order_id for m in letters) == sorted(order_ids)
        assert calls[0] == size // 10 + 1
        assert visibility(sqs, url) == (size, 0)
    finally:
        sqs.delete_queue(QueueUrl=url)
