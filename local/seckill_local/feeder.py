"""OrderQueue -> OrderPersisterFunction, as Lambda's SQS event source mapping does it.

Up to MaximumConcurrency pollers each receive a batch (BatchSize, at most 10
per receive on SQS), invoke the function, and delete the records not listed
in ``batchItemFailures``. A record that failed stays on the queue, comes back
after the visibility timeout, and after maxReceiveCount receives the queue
itself moves it to the dead-letter queue. An invocation that raises fails the
whole batch.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass, field
from typing import Any

from seckill_local.lambdas import FunctionPool
from seckill_local.sqs import local_region


@dataclass
class FeedStats:
    batches: int = 0
    records: int = 0
    deleted: int = 0
    failed: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, records: int, deleted: int, failed: int, error: bool) -> None:
        with self.lock:
            self.batches += 1
            self.records += records
            self.deleted += deleted
            self.failed += failed
            self.errors += int(error)


def sqs_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {
                    name: {
                        "stringValue": a.get("StringValue"),
                        # Lambda passes binary values base64-encoded, as JSON must.
                        "binaryValue": base64.b64encode(a["BinaryValue"]).decode() if "BinaryValue" in a else None,
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": a["DataType"],
                    }
                    for name, a in m.get("MessageAttributes", {}).items()
                },
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": local_region(),
            }
            for m in messages
        ]
    }


class QueueFeeder:
    def __init__(self, sqs: Any, queue_url: str, pool: FunctionPool, *, batch_size: int, concurrency: int) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.pool = pool
        self.batch_size = max(1, min(batch_size, 10))
        self.concurrency = concurrency
        self.queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        self.stats = FeedStats()
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for n in range(self.concurrency):
            thread = threading.Thread(target=self._poll, name=f"poller-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _poll(self) -> None:
        while not self.stop.is_set():
            try:
                self.poll_once(wait_seconds=1)
            except Exception:
                # The queue endpoint hiccuped; poll again, as the mapping would.
                self.stop.wait(0.5)

    def poll_once(self, wait_seconds: int = 0) -> int:
        """One receive -> invoke -> delete cycle; returns the number of records received."""
        messages = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            WaitTimeSeconds=wait_seconds,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return 0
        error = False
        try:
            result = self.pool.invoke(sqs_event(messages, self.queue_arn))
            failed_ids = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
        except Exception:
            error = True
            failed_ids = {m["MessageId"] for m in messages}
        done = [m for m in messages if m["MessageId"] not in failed_ids]
        for start in range(0, len(done), 10):
            chunk = done[start : start + 10]
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
        self.stats.add(len(messages), len(done), len(failed_ids), error)
        return len(messages)
