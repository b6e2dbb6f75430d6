"""seckill-dlq-replay with SQS's own move task (StartMessageMoveTask), which moto lacks:
botocore's Stubber stands in for SQS; and its usage."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from rich.console import Console

from seckill_local.checkout import ROOT
from seckill_ops import dlq_replay
from seckill_ops.replay import exits, native
from seckill_ops.replay.queues import QueueInfo
from seckill_ops.replay.stop import Stop
from tests.helpers import run_dlq_replay, run_python

DLQ_INFO = QueueInfo("https://sqs/1/dlq", "arn:aws:sqs:us-east-1:123456789012:dlq", 5)


QUEUE_INFO = QueueInfo("https://sqs/1/q", "arn:aws:sqs:us-east-1:123456789012:q", 0)


@pytest.fixture
def stubbed() -> Iterator[tuple[Any, Stubber]]:
    """An SQS client whose answers are AWS's documented shapes, given by botocore's Stubber."""
    client = boto3.client("sqs", region_name="us-east-1", endpoint_url="https://sqs.invalid")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def task(status: str, moved: int, **extra: Any) -> dict[str, Any]:
    return {"Results": [{"Status": status, "SourceArn": DLQ_INFO.arn, "ApproximateNumberOfMessagesMoved": moved,
                         "ApproximateNumberOfMessagesToMove": 5, **extra}]}  # fmt: skip


def quiet() -> Console:
    return Console(file=io.StringIO(), width=200)


def test_the_native_move_task_is_started_and_followed_to_its_end(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    start = {"SourceArn": DLQ_INFO.arn, "DestinationArn": QUEUE_INFO.arn, "MaxNumberOfMessagesPerSecond": 20}
    stubber.add_response("start_message_move_task", {"TaskHandle": "h-1"}, start)
    listing = {"SourceArn": DLQ_INFO.arn, "MaxResults": 1}
    stubber.add_response("list_message_move_tasks", task("RUNNING", 2), listing)
    stubber.add_response("list_message_move_tasks", task("COMPLETED", 5), listing)
    out, err = quiet(), quiet()

    assert native.start_native(client, DLQ_INFO, QUEUE_INFO, 20.0) == "h-1"
    code = native.follow_native(client, DLQ_INFO, "h-1", out, err, Stop(), poll=0)

    assert code == exits.EXIT_OK
    assert "RUNNING: moved 2 of 5" in err.file.getvalue()
    assert "moved 5 message(s) with SQS's move task" in out.file.getvalue()


def test_a_failed_native_move_task_exits_1_with_its_reason(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_response("list_message_move_tasks", task("FAILED", 1, FailureReason="AccessDenied on the target"))
    out = quiet()
    code = native.follow_native(client, DLQ_INFO, "h-1", out, quiet(), Stop(), poll=0)
    assert code == exits.EXIT_FAILED
    assert "ended FAILED after 1 message(s): AccessDenied on the target" in out.file.getvalue()


def test_an_interrupted_native_move_is_cancelled(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_response("cancel_message_move_task", {"ApproximateNumberOfMessagesMoved": 2}, {"TaskHandle": "h-1"})
    stop = Stop()
    stop.event.set()  # Ctrl-C
    out = quiet()
    assert native.follow_native(client, DLQ_INFO, "h-1", out, quiet(), stop, poll=0) == exits.EXIT_INTERRUPTED
    assert "the move task is cancelled" in out.file.getvalue()


def test_a_native_move_already_running_is_a_failure_not_a_fallback(stubbed: tuple[Any, Stubber]) -> None:
    client, stubber = stubbed
    stubber.add_client_error("start_message_move_task", "InvalidParameterValue", "a task is already running", 400)
    with pytest.raises(exits.RunStopped, match="already running"):
        native.start_native(client, DLQ_INFO, QUEUE_INFO, None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give --stack-name, or both"),
        (["--dlq-url", "http://x/1/a"], "give --stack-name, or both"),
        (["--stack-name", "s", "--queue-url", "http://x/1/a"], "not both"),
        (["--stack-name", "s", "--rate", "0.5"], "whole number from 1 to 500"),
        (["--stack-name", "s", "--rate", "501"], "whole number from 1 to 500"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert dlq_replay.main(args) == exits.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_help_explains_itself() -> None:
    result = run_dlq_replay("--help")
    assert result.returncode == 0
    for text in ("seckill-dlq-replay", "--stack-name", "--dry-run", "--portable", "examples:", "exit codes:"):
        assert text in result.stdout


def test_the_checkout_path_runs_the_same_command() -> None:
    """``scripts/dlq_replay.py`` is the documented path of the replay in a checkout."""
    script = ROOT / "scripts" / "dlq_replay.py"
    result = run_python(str(script), "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout == run_dlq_replay("--help").stdout
    usage_error = run_python(str(script), "--dlq-url", "x")
    assert usage_error.returncode == 2
