"""SQS's own move task (StartMessageMoveTask), followed until it ends; Ctrl-C cancels it,
and what was moved stays moved."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console

from seckill_ops.replay.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, RunStopped
from seckill_ops.replay.queues import QueueInfo, error_text
from seckill_ops.replay.stop import Stop

NATIVE_MAX_RATE = 500  # StartMessageMoveTask's MaxNumberOfMessagesPerSecond limit
NATIVE_POLL = 2.0  # seconds between looks at a running move task
# How an SQS-compatible endpoint says it has no such action (moto answers a 500 whose code is "500").
UNSUPPORTED_CODES = {"InvalidAction", "UnsupportedOperation", "UnknownOperationException", "NotImplemented", "500"}


def native_unsupported(exc: Exception) -> bool:
    if isinstance(exc, AttributeError):  # a botocore too old to know the operation
        return True
    if not isinstance(exc, ClientError):
        return False
    code = str(exc.response.get("Error", {}).get("Code", ""))
    return code in UNSUPPORTED_CODES or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 501


def start_native(sqs: Any, dlq: QueueInfo, queue: QueueInfo, rate: float | None) -> str | None:
    """Starts SQS's move task; its handle, or None when the endpoint has no such action."""
    request: dict[str, Any] = {"SourceArn": dlq.arn, "DestinationArn": queue.arn}
    if rate is not None:
        request["MaxNumberOfMessagesPerSecond"] = int(rate)
    try:
        return str(sqs.start_message_move_task(**request)["TaskHandle"])
    except (ClientError, BotoCoreError, AttributeError) as exc:
        if native_unsupported(exc):
            return None
        raise RunStopped(f"StartMessageMoveTask failed: {error_text(exc)}") from exc


def follow_native(
    sqs: Any, dlq: QueueInfo, handle: str, out: Console, err: Console, stop: Stop, *, poll: float = NATIVE_POLL
) -> int:
    """Follows the move task to its end; Ctrl-C cancels it (what moved stays moved)."""
    last = ""
    try:
        while not stop.is_set():
            tasks = sqs.list_message_move_tasks(SourceArn=dlq.arn, MaxResults=1).get("Results", [])
            task = tasks[0] if tasks else {}
            status = task.get("Status", "?")
            moved, total = (
                task.get("ApproximateNumberOfMessagesMoved", 0),
                task.get("ApproximateNumberOfMessagesToMove"),
            )
            line = f"{status}: moved {moved}" + (f" of {total}" if total is not None else "")
            if line != last:
                err.print(line)
                last = line
            if status == "COMPLETED":
                out.print(f"moved {moved} message(s) with SQS's move task")
                return EXIT_OK
            if status in ("FAILED", "CANCELLED"):
                why = task.get("FailureReason") or "cancelled by someone else"
                out.print(f"the move task ended {status} after {moved} message(s): {why}; run again", style="red")
                return EXIT_FAILED
            stop.sleep(poll)
    except (ClientError, BotoCoreError) as exc:
        err.print(f"cannot follow the move task {handle}: {error_text(exc)}", style="red")
        return EXIT_FAILED
    try:
        sqs.cancel_message_move_task(TaskHandle=handle)
        out.print("interrupted: the move task is cancelled; what it moved stays moved, the rest stays in the DLQ")
    except (ClientError, BotoCoreError) as exc:
        out.print(f"interrupted, but could not cancel the move task ({error_text(exc)}): it goes on", style="red")
    return EXIT_INTERRUPTED
