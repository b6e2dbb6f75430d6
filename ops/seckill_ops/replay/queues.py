"""The queues of a replay: found by a stack's outputs or given by URL, with their ARN
and depth; SQS's batches, and how its errors read."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from seckill_ops import stack_outputs
from seckill_ops.replay.exits import ConfigError
from seckill_ops.stack_outputs import REPLAYABLE

BATCH = 10  # the most SQS receives, sends or deletes in one call


@dataclass(frozen=True)
class QueueInfo:
    url: str
    arn: str
    depth: int  # visible and in flight


def error_text(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), str(error.get("Message", "")).strip()
        return f"{code}: {message}" if message and not message.startswith("<") else str(code)
    return str(exc)


def stack_queues(cfn: Any, stack_name: str, queues: str = "orders") -> tuple[str, str]:
    """(queue URL, DLQ URL) from the stack's outputs: OrderQueue's, or OrderExpiryQueue's."""
    try:
        outputs = stack_outputs.read(cfn, stack_name)
    except (ClientError, BotoCoreError) as exc:
        raise ConfigError(f"cannot read stack {stack_name!r}: {error_text(exc)}") from exc
    queue_output, dlq_output = REPLAYABLE[queues]
    missing = [key for key in (queue_output, dlq_output) if key not in outputs]
    if missing:
        raise ConfigError(f"stack {stack_name!r} has no output {' or '.join(missing)}")
    return outputs[queue_output], outputs[dlq_output]


def queue_info(sqs: Any, url: str) -> QueueInfo:
    names = ["QueueArn", "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    try:
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    except (ClientError, BotoCoreError) as exc:
        raise ConfigError(f"cannot use queue {url}: {error_text(exc)}") from exc
    return QueueInfo(url, attrs["QueueArn"], sum(int(attrs.get(name, 0)) for name in names[1:]))


def chunks(items: Sequence[Any], size: int = BATCH) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
