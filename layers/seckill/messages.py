"""The order message on OrderQueue (docs/contract.md) and the queue it travels on."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TypeVar

from botocore.exceptions import ClientError, EndpointConnectionError

from seckill.ids import BEGIN_EPOCH, parse_id
from seckill.infra.timeutil import iso

# Order ids count seconds from BEGIN_EPOCH, and MySQL's DATETIME ends with year 9999.
_EARLIEST = datetime.fromtimestamp(BEGIN_EPOCH, UTC)
_LATEST = datetime(9999, 1, 1, tzinfo=UTC)


class MalformedMessage(ValueError):
    """A body that is not an order message: it can never succeed, so it goes to the
    poison queue, or without one fails until SQS dead-letters it (seckill.persist.poison)."""


@dataclass(frozen=True)
class OrderMessage:
    order_id: int
    user_id: int
    voucher_id: int
    accepted_at: datetime

    def to_json(self) -> str:
        return json.dumps(
            {
                "orderId": str(self.order_id),
                "userId": self.user_id,
                "voucherId": self.voucher_id,
                "acceptedAt": iso(self.accepted_at),
            }
        )

    @classmethod
    def from_json(cls, body: str) -> OrderMessage:
        try:
            order_id, user_id, voucher_id, accepted_at = parse_order_body(body, "acceptedAt")
            # A time MySQL cannot store would fail at every delivery and cycle DLQ -> replay -> DLQ.
            if not _EARLIEST <= accepted_at.astimezone(UTC) < _LATEST:
                raise ValueError("acceptedAt is out of range")
            return cls(order_id, user_id, voucher_id, accepted_at)
        except Exception as exc:  # any shape error at all means the same thing
            raise MalformedMessage(f"malformed order message: {exc}") from exc


def parse_order_body(body: str, time_field: str) -> tuple[int, int, int, datetime]:
    """The order id, user id, voucher id and the aware time ``time_field`` of a message
    about one order (the order message, the expiry message); ValueError (or another
    error of shape) when the body is not one."""
    data = json.loads(body)
    if not isinstance(data, dict) or not isinstance(data.get("orderId"), str):
        raise ValueError("orderId must be a string")
    if not isinstance(data.get("userId"), int) or not isinstance(data.get("voucherId"), int):
        raise ValueError("userId and voucherId must be numbers")
    if not isinstance(data.get(time_field), str):
        raise ValueError(f"{time_field} must be a string")
    moment = datetime.fromisoformat(data[time_field])
    if moment.tzinfo is None:
        raise ValueError(f"{time_field} needs an offset")
    return (
        parse_id(data["orderId"], "orderId"),
        parse_id(data["userId"], "userId"),
        parse_id(data["voucherId"], "voucherId"),
        moment,
    )


def queue_depth(sqs: Any, queue_url: str) -> int:
    """Messages on a queue: visible, in flight and delayed (SQS's approximate counts)."""
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attrs = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=names)["Attributes"]
    return sum(int(attrs.get(name, 0)) for name in names)


def wait_drained(sqs: Any, queue_url: str, timeout: float, poll: float = 0.5) -> bool:
    """Until the queue is empty, or ``timeout`` seconds; True if it emptied."""
    deadline = time.monotonic() + timeout
    while queue_depth(sqs, queue_url):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


# SQS's longest visibility timeout (12 hours).
MAX_HOLD_SECONDS = 43200


def _change_visibility(sqs: Any, queue_url: str, handles: list[str], seconds: int) -> None:
    for start in range(0, len(handles), 10):
        sqs.change_message_visibility_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": seconds}
                for i, h in enumerate(handles[start : start + 10])
            ],
        )


def dead_lettered_orders(sqs: Any, dlq_url: str, *, hold_seconds: int = 10) -> tuple[list[OrderMessage], bool]:
    """The orders waiting in the dead-letter queue, read without consuming them, and
    whether that is all of them (False when some are in flight, e.g. a replay is running).

    Every message received stays hidden until the read ends, so no receive hands one
    back and each brings new ones, whatever order SQS returns messages in: the read
    stops at the first receive with nothing new, about one receive per ten messages.
    A hold is renewed before half of it has run, for at least twice as long as the read
    has taken so far: each message is renewed a few times (the holds double), and those
    of a reader that dies reappear within about twice the time it had read. Then every
    message is made visible again. Malformed messages are not orders and are left out.
    """
    expected = queue_depth(sqs, dlq_url)
    started = time.monotonic()
    seen: dict[str, OrderMessage | None] = {}
    held: dict[str, str] = {}  # message id -> its latest receipt handle
    renewals: deque[tuple[float, str, str]] = deque()  # (when, message id, handle), soonest first

    def hold(now: float) -> int:
        return min(MAX_HOLD_SECONDS, max(hold_seconds, math.ceil(2 * (now - started))))

    def renew_due() -> None:
        now = time.monotonic()
        due: list[tuple[str, str]] = []
        while renewals and renewals[0][0] <= now:
            _, message_id, handle = renewals.popleft()
            if held[message_id] == handle:  # else received again since: its newer entry is queued
                due.append((message_id, handle))
        seconds = hold(now)
        _change_visibility(sqs, dlq_url, [h for _, h in due], seconds)
        renewals.extend((now + seconds / 2, m, h) for m, h in due)

    try:
        while True:
            renew_due()
            asked = time.monotonic()
            seconds = hold(asked)
            batch = sqs.receive_message(
                QueueUrl=dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=seconds, WaitTimeSeconds=1
            ).get("Messages", [])
            fresh = [m for m in batch if m["MessageId"] not in seen]
            for m in batch:
                held[m["MessageId"]] = m["ReceiptHandle"]
                renewals.append((asked + seconds / 2, m["MessageId"], m["ReceiptHandle"]))
            if not fresh:
                # Nothing visible (or only holds that ran out): the queue was read whole.
                break
            for m in fresh:
                try:
                    seen[m["MessageId"]] = OrderMessage.from_json(m["Body"])
                except MalformedMessage:
                    seen[m["MessageId"]] = None
    finally:
        _change_visibility(sqs, dlq_url, list(held.values()), 0)
    return [m for m in seen.values() if m is not None], len(seen) >= expected


class Sent(Enum):
    """What became of a SendMessage call. Only REFUSED means the message is not on the queue."""

    SENT = "sent"
    REFUSED = "refused"  # every attempt was refused or never reached SQS
    IN_DOUBT = "in doubt"  # an attempt may have stored it (timeout, lost reply, 5xx)


def _nothing_stored(error: BaseException | None, status: int | None) -> bool:
    """True when an attempt certainly stored nothing: the connection was never made,
    or SQS answered with a client error (4xx)."""
    if error is not None:
        if isinstance(error, ClientError):
            status_code: int = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500)
            return status_code < 500
        return isinstance(error, EndpointConnectionError)  # includes connect timeouts
    return status is not None and status < 500


# Per thread: the attempts of the send under way (send_watched), if any.
_send = threading.local()

T = TypeVar("T")


def _watch_attempt(response: Any = None, caught_exception: BaseException | None = None, **_: Any) -> None:
    """botocore's ``needs-retry`` event, after every attempt of a watched send."""
    if not getattr(_send, "watching", False):
        return  # a send of the same client made without send_watched
    _send.attempts += 1
    status = response[0].status_code if response else None
    if (caught_exception is not None or (status is not None and status >= 300)) and not _nothing_stored(
        caught_exception, status
    ):
        _send.in_doubt = True


def send_watched(sqs: Any, operation: str, call: Callable[[], T]) -> tuple[Sent, T | None]:
    """Runs ``call``, an SQS ``operation`` (SendMessage, SendMessageBatch), and says which
    outcomes remain possible, with its response when SENT.

    botocore retries a failed send; one attempt may have stored the message even
    when the last one was refused. Every attempt is watched, so a send is REFUSED
    only when no attempt could have stored anything.
    """
    # At each send rather than once, so that a client made on first use
    # (seckill.infra.lazy.OnFirstUse) is not made before it sends; the unique id keeps one hook.
    sqs.meta.events.register(f"needs-retry.sqs.{operation}", _watch_attempt, unique_id=f"seckill-watch-{operation}")
    _send.watching, _send.in_doubt, _send.attempts = True, False, 0
    try:
        return Sent.SENT, call()
    except Exception as exc:
        # No attempt at all (no credentials, a parameter botocore refused): nothing left.
        if _send.attempts and (_send.in_doubt or not _nothing_stored(exc, None)):
            return Sent.IN_DOUBT, None
        return Sent.REFUSED, None
    finally:
        _send.watching = False


class OrderQueue:
    """Sends order messages to SQS and says which outcomes remain possible (send_watched)."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url

    def send(self, message: OrderMessage) -> Sent:
        sent, _ = send_watched(
            self.sqs,
            "SendMessage",
            lambda: self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=message.to_json()),
        )
        return sent
