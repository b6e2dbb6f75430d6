"""The order message on OrderQueue (SPEC §5) and the queue it travels on."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from seckill.ids import parse_id
from seckill.timeutil import iso


class MalformedMessage(ValueError):
    """A body that is not an order message: it can never succeed, so it goes to the DLQ."""


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
            data = json.loads(body)
            if not isinstance(data, dict) or not isinstance(data.get("orderId"), str):
                raise ValueError("orderId must be a string")
            if not isinstance(data.get("userId"), int) or not isinstance(data.get("voucherId"), int):
                raise ValueError("userId and voucherId must be numbers")
            accepted_at = datetime.fromisoformat(data["acceptedAt"])
            if accepted_at.tzinfo is None:
                raise ValueError("acceptedAt needs an offset")
            return cls(
                order_id=parse_id(data["orderId"], "orderId"),
                user_id=parse_id(data["userId"], "userId"),
                voucher_id=parse_id(data["voucherId"], "voucherId"),
                accepted_at=accepted_at,
            )
        except Exception as exc:  # any shape error at all means the same thing
            raise MalformedMessage(f"malformed order message: {exc}") from exc


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


class OrderQueue:
    """Sends order messages to SQS."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url

    def send(self, message: OrderMessage) -> str:
        response = self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=message.to_json())
        return str(response["MessageId"])
