"""The expiry message on OrderExpiryQueue (docs/holds.md) and the queue it travels on.

One message per confirmed order, delayed until its ``payBy``: SQS delays a message
at most 15 minutes, so a longer hold arrives early and is sent again with the time
left (OrderExpiryFunction). Duplicates are harmless: expiring is idempotent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from seckill.infra.timeutil import iso
from seckill.messages import MalformedMessage, Sent, parse_order_body, send_watched

# SQS's longest DelaySeconds (15 minutes), and its most entries per SendMessageBatch.
MAX_DELAY_SECONDS = 900
MAX_BATCH = 10


class ExpiryNotSent(RuntimeError):
    """An expiry that may not be on the queue: the record that needed it fails, and
    SQS's retry sends it again."""


@dataclass(frozen=True)
class ExpiryMessage:
    order_id: int
    voucher_id: int
    user_id: int
    pay_by: datetime  # aware, UTC

    def to_json(self) -> str:
        body = {"orderId": str(self.order_id), "voucherId": self.voucher_id, "userId": self.user_id}
        return json.dumps({**body, "payBy": iso(self.pay_by)})

    @classmethod
    def from_json(cls, body: str) -> ExpiryMessage:
        try:
            order_id, user_id, voucher_id, pay_by = parse_order_body(body, "payBy")
        except Exception as exc:  # any shape error at all means the same thing
            raise MalformedMessage(f"malformed expiry message: {exc}") from exc
        return cls(order_id=order_id, voucher_id=voucher_id, user_id=user_id, pay_by=pay_by.astimezone(UTC))

    def delay_seconds(self, now: datetime, at_least: int = 0) -> int:
        """How long SQS should hold the message: until ``payBy``, within what SQS allows."""
        left = math.ceil((self.pay_by - now).total_seconds())
        return min(MAX_DELAY_SECONDS, max(at_least, left))


class ExpiryQueue:
    """Sends expiry messages, each delayed until its deadline (or SQS's longest delay)."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url

    def send(self, messages: Sequence[ExpiryMessage], *, at_least: int = 0) -> list[Sent]:
        """One SendMessageBatch per ten messages; what became of each message, in order.
        An entry SQS refuses as the sender's fault stored nothing (REFUSED); one failed on
        SQS's side, or a call that failed after an attempt, may have (IN_DOUBT, as OrderQueue says).
        ``at_least``: the shortest delay, for a message sent again because it came early."""
        outcomes: list[Sent] = []
        for start in range(0, len(messages), MAX_BATCH):
            outcomes.extend(self._send_batch(messages[start : start + MAX_BATCH], at_least))
        return outcomes

    def _send_batch(self, messages: Sequence[ExpiryMessage], at_least: int) -> list[Sent]:
        now = datetime.now(UTC)
        entries = [
            {"Id": str(i), "MessageBody": m.to_json(), "DelaySeconds": m.delay_seconds(now, at_least)}
            for i, m in enumerate(messages)
        ]
        sent, response = send_watched(
            self.sqs,
            "SendMessageBatch",
            lambda: self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries),
        )
        if response is None:
            return [sent] * len(messages)
        stored = {entry["Id"] for entry in response.get("Successful", [])}
        refused = {entry["Id"] for entry in response.get("Failed", []) if entry.get("SenderFault")}
        return [
            Sent.SENT if str(i) in stored else Sent.REFUSED if str(i) in refused else Sent.IN_DOUBT
            for i in range(len(messages))
        ]
