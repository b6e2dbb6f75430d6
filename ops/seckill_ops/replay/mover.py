"""The portable mover, for an endpoint without SQS's move task (or with ``--portable`` or
``--max``): receive up to 10, send them to the queue with the same body and attributes,
then delete from the DLQ only what SQS accepted. Stopped at any moment it loses nothing:
what was sent is deleted, what it holds is given back."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from seckill_ops.replay.dead_letters import DeadLetters
from seckill_ops.replay.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, RunStopped
from seckill_ops.replay.queues import BATCH, error_text
from seckill_ops.replay.stop import Stop

SEND_KEYS = ("DataType", "StringValue", "BinaryValue")


@dataclass
class Summary:
    moved: int = 0
    failed: int = 0  # refused by OrderQueue: still in the DLQ
    not_deleted: int = 0  # sent but still in the DLQ: delivered twice
    not_released: int = 0
    remaining: int | None = None
    stopped: str | None = None
    interrupted: bool = False
    send_errors: Counter[str] = field(default_factory=Counter)

    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_FAILED if self.failed or self.not_deleted or self.stopped else EXIT_OK


def send_entry(entry_id: str, message: dict[str, Any]) -> dict[str, Any]:
    """The received message as a SendMessageBatch entry: same body, same attributes."""
    entry: dict[str, Any] = {"Id": entry_id, "MessageBody": message["Body"]}
    if message.get("MessageAttributes"):
        entry["MessageAttributes"] = {
            name: {key: value[key] for key in SEND_KEYS if key in value}
            for name, value in message["MessageAttributes"].items()
        }
    trace = message.get("Attributes", {}).get("AWSTraceHeader")
    if trace:
        entry["MessageSystemAttributes"] = {"AWSTraceHeader": {"DataType": "String", "StringValue": trace}}
    return entry


class Throttle:
    """At most ``rate`` messages per second, on average since the start."""

    def __init__(self, rate: float | None, stop: Stop) -> None:
        self.rate, self.stop, self.start, self.count = rate, stop, time.monotonic(), 0

    def take(self, n: int) -> None:
        if self.rate:
            delay = self.start + self.count / self.rate - time.monotonic()
            if delay > 0:
                self.stop.sleep(delay)
        self.count += n


class Mover:
    def __init__(
        self,
        sqs: Any,
        dlq: DeadLetters,
        queue_url: str,
        *,
        limit: int | None,
        rate: float | None,
        report: Callable[[Summary], None],
        stop: Stop,
    ) -> None:
        self.sqs, self.dlq, self.queue_url, self.limit, self.report = sqs, dlq, queue_url, limit, report
        self.batch = BATCH if rate is None else max(1, min(BATCH, int(rate)))
        self.stop = stop
        self.throttle = Throttle(rate, stop)
        self.summary = Summary()
        self._sent: list[dict[str, Any]] = []  # accepted by OrderQueue, not yet deleted from the DLQ

    def run(self) -> Summary:
        try:
            while not self.stop.is_set() and not self.dlq.exhausted and self._room() > 0:
                messages = self.dlq.receive(min(self.batch, self._room()))
                if messages:
                    self.throttle.take(len(messages))
                    if self.stop.is_set():
                        break
                    self._move(messages)
                    self.report(self.summary)
            self.summary.interrupted = self.stop.is_set()
        except RunStopped as exc:
            self.summary.stopped = str(exc)
        except KeyboardInterrupt:
            self.summary.interrupted = True
        finally:
            self._finish()
        return self.summary

    def _room(self) -> int:
        s = self.summary
        return BATCH if self.limit is None else self.limit - (s.moved + s.failed + s.not_deleted)

    def _move(self, messages: list[dict[str, Any]]) -> None:
        entries = [send_entry(str(i), m) for i, m in enumerate(messages)]
        try:
            response = self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except (ClientError, BotoCoreError) as exc:
            self.summary.failed += len(messages)  # they stay held, given back at the end
            raise RunStopped(f"cannot send to OrderQueue: {error_text(exc)}") from exc
        for refused in response.get("Failed", []):
            self.summary.send_errors[f"{refused.get('Code', '?')}: {refused.get('Message', '')}".strip()] += 1
        accepted = {s["Id"] for s in response.get("Successful", [])}
        self._sent = [m for i, m in enumerate(messages) if str(i) in accepted]
        self.summary.failed += len(messages) - len(self._sent)
        self._delete_sent()

    def _delete_sent(self) -> None:
        sent, self._sent = self._sent, []
        try:
            not_deleted = self.dlq.delete(sent)
        except RunStopped:
            self.summary.not_deleted += len(sent)
            raise
        self.summary.not_deleted += not_deleted
        self.summary.moved += len(sent) - not_deleted

    def _finish(self) -> None:
        """Deletes what was sent (an interruption may fall between send and delete), then gives back the rest."""
        if self._sent:
            try:
                self._delete_sent()
            except RunStopped as exc:
                self.summary.stopped = self.summary.stopped or str(exc)
        self.dlq.release()
        self.summary.not_released = self.dlq.not_released
