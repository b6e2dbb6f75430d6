"""Reading the whole DLQ: what a run received stays hidden (for the visibility timeout)
until it is deleted or given back, and a message seen once is not handled twice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from seckill_ops.replay.exits import RunStopped
from seckill_ops.replay.queues import chunks, error_text

IDLE_RECEIVES = 3  # receives in a row that bring back only messages already handled: the run is done


class DeadLetters:
    """Receives from the DLQ and holds what it received (hidden) until deleted or given back."""

    def __init__(self, sqs: Any, url: str, *, visibility_timeout: int, wait: int) -> None:
        self.sqs, self.url = sqs, url
        self.visibility_timeout, self.wait = visibility_timeout, wait
        self.held: dict[str, str] = {}  # MessageId -> latest receipt handle
        self.seen: set[str] = set()
        self.exhausted = False
        self.not_released = 0
        self._idle = 0

    def receive(self, count: int) -> list[dict[str, Any]]:
        """Up to ``count`` messages this run has not had yet; sets ``exhausted`` when there are no more."""
        try:
            messages = self.sqs.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=count,
                VisibilityTimeout=self.visibility_timeout,
                WaitTimeSeconds=self.wait,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
        except (ClientError, BotoCoreError) as exc:
            raise RunStopped(f"cannot receive from the DLQ: {error_text(exc)}") from exc
        new = [m for m in messages if m["MessageId"] not in self.seen]
        for message in messages:
            self.held[message["MessageId"]] = message["ReceiptHandle"]
            self.seen.add(message["MessageId"])
        # Nothing at all, or only messages handled already (back after their timeout): done.
        self._idle = 0 if new else self._idle + 1
        self.exhausted = not messages or self._idle >= IDLE_RECEIVES
        return new

    def delete(self, messages: Sequence[dict[str, Any]]) -> int:
        """Deletes them; returns how many could not be deleted."""
        failed = 0
        for chunk in chunks(messages):
            entries = [{"Id": str(i), "ReceiptHandle": self.held[m["MessageId"]]} for i, m in enumerate(chunk)]
            try:
                response = self.sqs.delete_message_batch(QueueUrl=self.url, Entries=entries)
            except (ClientError, BotoCoreError) as exc:
                raise RunStopped(f"cannot delete from the DLQ: {error_text(exc)}") from exc
            bad = {f["Id"] for f in response.get("Failed", [])}
            failed += len(bad)
            for i, message in enumerate(chunk):
                if str(i) not in bad:
                    self.held.pop(message["MessageId"], None)
        return failed

    def release(self) -> None:
        """Makes everything still held visible again at once."""
        for chunk in chunks(list(self.held.values())):
            entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(chunk)]
            try:
                response = self.sqs.change_message_visibility_batch(QueueUrl=self.url, Entries=entries)
                self.not_released += len(response.get("Failed", []))
            except (ClientError, BotoCoreError):
                self.not_released += len(chunk)
        self.held.clear()
