"""scripts/dlq_replay.py against a real moto SQS server (and moto CloudFormation):
the queue's own redrive puts a message in the DLQ, the replay brings it back and
the real persister confirms it exactly once; dry runs consume nothing; failed,
interrupted and killed replays lose nothing."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pytest

from seckill import keys
from seckill.db import Credentials, Database
from seckill.gate import Gate
from seckill.ids import next_order_id
from seckill.messages import OrderMessage, queue_depth
from seckill.timeutil import from_ms
from seckill_local.feeder import sqs_event
from seckill_local.template import ROOT
from tests.conftest import closed_port, db_rows

SCRIPT = ROOT / "scripts" / "dlq_replay.py"
ATTRIBUTES = {
    "trace": {"DataType": "String", "StringValue": "replay-test"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
}


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dlq_replay", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dlq_replay"] = module
    spec.loader.exec_module(module)
    return module


dlq_replay = load_script()


# ---------------------------------------------------------------- helpers


def order_body(order_id: int | None = None, *, padding: int = 0) -> tuple[int, str]:
    order_id = order_id or random.randint(10**15, 2**62)
    message = OrderMessage(order_id, random.randint(1, 10**9), random.randint(1, 10**9), datetime.now(UTC))
    # Trailing whitespace keeps it a valid order message (json.loads ignores it).
    return order_id, message.to_json() + " " * padding


def fill(sqs: Any, url: str, bodies: list[str]) -> None:
    for start in range(0, len(bodies), 10):
        entries = [
            {"Id": str(i), "MessageBody": body, "MessageAttributes": ATTRIBUTES}
            for i, body in enumerate(bodies[start : start + 10])
        ]
        assert not sqs.send_message_batch(QueueUrl=url, Entries=entries).get("Failed")


def fill_orders(sqs: Any, url: str, count: int, *, padding: int = 0) -> list[int]:
    made = [order_body(padding=padding) for _ in range(count)]
    fill(sqs, url, [body for _, body in made])
    return [order_id for order_id, _ in made]


def take_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Receive and delete everything visible (with attributes)."""
    taken: list[dict[str, Any]] = []
    while messages := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"]
    ).get("Messages", []):
        sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        )
        taken.extend(messages)
    return taken


def order_ids(messages: list[dict[str, Any]]) -> list[int]:
    return [OrderMessage.from_json(m["Body"]).order_id for m in messages]


def visible(sqs: Any, url: str) -> tuple[int, int]:
    """(visible, in flight)"""
    attrs = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])


def queue_args(queues: dict[str, str], *extra: str) -> list[str]:
    # No --endpoint-url: boto3 finds the moto server through AWS_ENDPOINT_URL_SQS, as in a local run.
    return ["--dlq-url", queues["OrderDeadLetterQueue"], "--queue-url", queues["OrderQueue"], "--wait", "0", *extra]


def run_script(*args: str, timeout: float = 30, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)  # noqa: S603


class TerminalInput(io.StringIO):
    """Stdin as a terminal, with what the operator types."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def extra_queues(sqs: Any) -> Iterator[list[str]]:
    """Queue URLs a test creates itself; deleted afterwards."""
    urls: list[str] = []
    yield urls
    for url in urls:
        with contextlib.suppress(sqs.exceptions.QueueDoesNotExist):
            sqs.delete_queue(QueueUrl=url)


# ---------------------------------------------------------------- the whole story


def test_a_message_redriven_to_the_dlq_is_replayed_and_confirmed_exactly_once(
    sqs: Any,
    queues: dict[str, str],
    handlers: dict[str, Callable[..., Any]],
    make_voucher: Callable[..., int],
    gate: Gate,
    redis: Any,
    db: Database,
    creds: Credentials,
    context: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    persister = handlers["OrderPersisterFunction"]
    queue, dlq = queues["OrderQueue"], queues["OrderDeadLetterQueue"]
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn", "RedrivePolicy"])["Attributes"]
    queue_arn, max_receives = attrs["QueueArn"], json.loads(attrs["RedrivePolicy"])["maxReceiveCount"]

    # An order the gate accepted, as the API queues it.
    voucher_id, user_id = make_voucher(stock=5), random.randint(10**6, 10**12)
    reservation = gate.reserve(voucher_id, user_id, uuid.uuid4().hex)
    order_id = next_order_id(redis)
    assert gate.attach(reservation, order_id)
    message = OrderMessage(order_id, user_id, voucher_id, from_ms(reservation.accepted_ms))
    sqs.send_message(QueueUrl=queue, MessageBody=message.to_json())

    def feed_once() -> tuple[list[dict[str, Any]], set[str]]:
        """What the event source mapping does: receive, invoke, delete what succeeded."""
        messages = sqs.receive_message(
            QueueUrl=queue, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"]
        ).get("Messages", [])
        if not messages:
            return [], set()
        result = persister(sqs_event(messages, queue_arn), context)
        failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
        done = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        done = [e for e, m in zip(done, messages, strict=True) if m["MessageId"] not in failed]
        if done:
            sqs.delete_message_batch(QueueUrl=queue, Entries=done)
        return messages, failed

    # The database is unreachable: every delivery fails, and after maxReceiveCount
    # receives the queue's own redrive moves the message to the DLQ.
    module = sys.modules[persister.__module__]
    with monkeypatch.context() as patch:
        patch.setattr(module, "db", Database(Credentials("127.0.0.1", closed_port(), "x", "x", creds.database)))
        for _ in range(max_receives):
            messages, failed = feed_once()
            assert len(messages) == 1
            assert failed == {messages[0]["MessageId"]}
            # The visibility timeout running out, without the wait.
            sqs.change_message_visibility(
                QueueUrl=queue, ReceiptHandle=messages[0]["ReceiptHandle"], VisibilityTimeout=0
            )
        assert feed_once() == ([], set())  # this receive moved it
    assert queue_depth(sqs, queue) == 0
    assert queue_depth(sqs, dlq) == 1
    assert db_rows(db, "SELECT id FROM tb_voucher_order WHERE voucher_id = %s", voucher_id) == []

    # The operator looks first...
    assert dlq_replay.main(queue_args(queues, "--dry-run")) == 0
    listing = capsys.readouterr().out
    for shown in (order_id, user_id, voucher_id):
        assert str(shown) in listing
    assert queue_depth(sqs, queue) == 0

    # ...the database is back; replay, and the persister confirms it.
    assert dlq_replay.main(queue_args(queues, "--yes")) == 0
    assert "moved" in capsys.readouterr().out
    assert queue_depth(sqs, dlq) == 0
    messages, failed = feed_once()
    assert order_ids(messages) == [order_id]
    assert failed == set()
    # A duplicate (a replay run twice, a send before an interrupted delete) changes nothing.
    sqs.send_message(QueueUrl=queue, MessageBody=message.to_json())
    assert feed_once()[1] == set()

    orders = db_rows(db, "SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = %s", voucher_id)
    assert [(int(o["id"]), int(o["user_id"])) for o in orders] == [(order_id, user_id)]
    stock = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    assert stock == [{"stock": 4}]
    assert not redis.hexists(keys.pending(voucher_id), str(user_id))
    assert queue_depth(sqs, queue) == 0


# ---------------------------------------------------------------- dry run


def test_dry_run_lists_everything_moves_nothing_and_leaves_all_receivable(
    sqs: Any, queues: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dlq = queues["OrderDeadLetterQueue"]
    ids = fill_orders(sqs, dlq, 13)
    fill(sqs, dlq, ["not an order"])

    # A long visibility timeout: only the script's own release makes them visible again.
    assert dlq_replay.main(queue_args(queues, "--dry-run", "--visibility-timeout", "300")) == 0

    out = capsys.readouterr().out
    for order_id in ids:
        assert str(order_id) in out
    assert "malformed" in out
    assert "14 message(s) listed, 1 malformed" in out
    assert visible(sqs, dlq) == (14, 0)
    assert queue_depth(sqs, queues["OrderQueue"]) == 0
    assert len({m["MessageId"] for m in take_all(sqs, dlq)}) == 14


def test_dry_run_max_lists_only_that_many(sqs: Any, queues: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    fill_orders(sqs, queues["OrderDeadLetterQueue"], 6)
    assert dlq_replay.main(queue_args(queues, "--dry-run", "--max", "4")) == 0
    assert "4 message(s) listed" in capsys.readouterr().out
    assert visible(sqs, queues["OrderDeadLetterQueue"]) == (6, 0)


# ---------------------------------------------------------------- moving


def test_max_moves_at_most_n_keeping_body_and_attributes(sqs: Any, queues: dict[str, str]) -> None:
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    ids = fill_orders(sqs, dlq, 7)
    before = {m["Body"] for m in sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10).get("Messages", [])}
    time.sleep(1.1)  # the queues' 1 s visibility timeout

    assert dlq_replay.main(queue_args(queues, "--yes", "--max", "3")) == 0

    moved = take_all(sqs, queue)
    assert len(moved) == 3
    assert all(m["MessageAttributes"] == ATTRIBUTES for m in moved)
    assert {m["Body"] for m in moved} <= before
    assert visible(sqs, dlq) == (4, 0)
    left = take_all(sqs, dlq)
    assert sorted(order_ids(moved) + order_ids(left)) == sorted(ids)


def test_malformed_messages_stay_in_the_dlq_unless_included(
    sqs: Any, queues: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    ids = fill_orders(sqs, dlq, 3)
    malformed = ["not json", json.dumps({"orderId": 7, "userId": 1, "voucherId": 2, "acceptedAt": "2025-01-01"})]
    fill(sqs, dlq, malformed)

    assert dlq_replay.main(queue_args(queues, "--yes")) == 0
    out = capsys.readouterr().out
    assert "malformed left in the DLQ" in out
    assert out.count("left in the DLQ: ") == 2  # each named, with why
    assert visible(sqs, dlq) == (2, 0)  # left, and visible again at once
    assert sorted(order_ids(take_all(sqs, queue))) == sorted(ids)

    assert dlq_replay.main(queue_args(queues, "--yes", "--include-malformed")) == 0
    assert "of which malformed" in capsys.readouterr().out
    assert queue_depth(sqs, dlq) == 0
    assert sorted(m["Body"] for m in take_all(sqs, queue)) == sorted(malformed)


def test_confirmation_on_a_terminal(
    sqs: Any, queues: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    fill_orders(sqs, dlq, 2)

    monkeypatch.setattr(sys, "stdin", TerminalInput("n\n"))
    assert dlq_replay.main(queue_args(queues)) == dlq_replay.EXIT_NOT_CONFIRMED
    assert "Move ~2 message(s)" in capsys.readouterr().err
    assert visible(sqs, dlq) == (2, 0)

    monkeypatch.setattr(sys, "stdin", TerminalInput("y\n"))
    assert dlq_replay.main(queue_args(queues)) == 0
    assert queue_depth(sqs, dlq) == 0
    assert len(take_all(sqs, queue)) == 2


def test_no_yes_with_stdin_not_a_terminal_refuses_and_moves_nothing(sqs: Any, queues: dict[str, str]) -> None:
    dlq = queues["OrderDeadLetterQueue"]
    fill_orders(sqs, dlq, 3)

    result = run_script(*queue_args(queues), stdin=subprocess.DEVNULL)

    assert result.returncode == 4, result.stderr
    assert "refusing to move without --yes" in result.stderr
    assert visible(sqs, dlq) == (3, 0)
    assert queue_depth(sqs, queues["OrderQueue"]) == 0


def test_empty_dlq_is_nothing_to_do(queues: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert dlq_replay.main(queue_args(queues)) == 0  # no --yes needed: there is nothing to confirm
    assert "nothing to move" in capsys.readouterr().out


# ---------------------------------------------------------------- failures lose nothing


def test_sends_refused_by_the_target_delete_nothing(
    sqs: Any, queues: dict[str, str], extra_queues: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    dlq = queues["OrderDeadLetterQueue"]
    ids = fill_orders(sqs, dlq, 5)
    # The wrong target: a FIFO queue refuses messages without a group id.
    fifo = sqs.create_queue(QueueName=f"t{uuid.uuid4().hex[:10]}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    extra_queues.append(fifo)

    args = ["--dlq-url", dlq, "--queue-url", fifo, "--wait", "0", "--yes", "--visibility-timeout", "300"]
    assert dlq_replay.main(args) == dlq_replay.EXIT_FAILED

    out = capsys.readouterr().out
    assert "cannot send to OrderQueue" in out
    assert visible(sqs, dlq) == (5, 0)  # nothing deleted, all given back at once
    assert queue_depth(sqs, fifo) == 0
    assert sorted(order_ids(take_all(sqs, dlq))) == sorted(ids)


def test_a_target_that_starts_refusing_midway_loses_nothing(
    sqs: Any, queues: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    ids = fill_orders(sqs, dlq, 20, padding=1200)
    results: list[int] = []
    # 5 a second: a batch of 5 at once, then a batch a second.
    args = queue_args(queues, "--yes", "--rate", "5")
    worker = threading.Thread(target=lambda: results.append(dlq_replay.main(args)))
    worker.start()
    deadline = time.monotonic() + 10
    while queue_depth(sqs, queue) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    # From now on OrderQueue refuses these (too large) messages.
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"MaximumMessageSize": "1024"})
    worker.join(timeout=20)

    assert results == [dlq_replay.EXIT_FAILED]
    assert "cannot send to OrderQueue" in capsys.readouterr().out
    moved, left = order_ids(take_all(sqs, queue)), order_ids(take_all(sqs, dlq))
    assert 0 < len(moved) < 20
    assert sorted(moved + left) == sorted(ids)  # every message in exactly one queue


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_replay_killed_midway_loses_nothing(sqs: Any, sqs_endpoint: str, queues: dict[str, str], signum: int) -> None:
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    ids = fill_orders(sqs, dlq, 16)
    args = [*queue_args(queues, "--yes", "--rate", "4", "--visibility-timeout", "2"), "--endpoint-url", sqs_endpoint]
    command = [sys.executable, str(SCRIPT), *args]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # noqa: S603
    try:
        deadline = time.monotonic() + 15
        while queue_depth(sqs, queue) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signum)
        out, err = process.communicate(timeout=15)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    if signum in (signal.SIGINT, signal.SIGTERM):
        assert process.returncode == dlq_replay.EXIT_INTERRUPTED, err
        assert "interrupted" in out
        # What it held was given back before it exited.
        assert visible(sqs, dlq)[1] == 0
    else:
        assert process.returncode == -signal.SIGKILL
        time.sleep(2.2)  # what it held comes back after its visibility timeout
    moved, left = order_ids(take_all(sqs, queue)), order_ids(take_all(sqs, dlq))
    assert len(moved) < 16
    assert set(moved) | set(left) == set(ids)  # duplicates allowed, nothing lost


# ---------------------------------------------------------------- native, stack, usage


def test_native_on_moto_says_it_is_unsupported(
    sqs: Any, queues: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dlq = queues["OrderDeadLetterQueue"]
    fill_orders(sqs, dlq, 2)

    code = dlq_replay.main(queue_args(queues, "--native", "--include-malformed", "--yes", "--rate", "10"))

    assert code == dlq_replay.EXIT_NATIVE_UNSUPPORTED
    lines = [line for line in capsys.readouterr().err.splitlines() if "--native" in line]
    assert len(lines) == 1
    assert "does not support StartMessageMoveTask" in lines[0]
    assert "run without --native" in lines[0]
    assert visible(sqs, dlq) == (2, 0)


def test_native_needs_include_malformed(queues: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert dlq_replay.main(queue_args(queues, "--native", "--yes")) == dlq_replay.EXIT_USAGE
    assert "--include-malformed" in capsys.readouterr().err


def test_stack_name_finds_the_queues_from_the_outputs(
    sqs: Any, sqs_endpoint: str, extra_queues: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3

    cfn = boto3.client("cloudformation", endpoint_url=sqs_endpoint, region_name="us-east-1")
    prefix = f"t{uuid.uuid4().hex[:10]}"
    template = {
        "Resources": {
            "OrderQueue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": f"{prefix}-OrderQueue"}},
            "OrderDeadLetterQueue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": f"{prefix}-Dlq"}},
        },
        "Outputs": {
            "OrderQueueUrl": {"Value": {"Ref": "OrderQueue"}},
            "OrderDeadLetterQueueUrl": {"Value": {"Ref": "OrderDeadLetterQueue"}},
        },
    }
    cfn.create_stack(StackName=prefix, TemplateBody=json.dumps(template))
    queue = sqs.get_queue_url(QueueName=f"{prefix}-OrderQueue")["QueueUrl"]
    dlq = sqs.get_queue_url(QueueName=f"{prefix}-Dlq")["QueueUrl"]
    extra_queues.extend([queue, dlq])
    try:
        ids = fill_orders(sqs, dlq, 4)
        args = ["--stack-name", prefix, "--endpoint-url", sqs_endpoint, "--region", "us-east-1", "--wait", "0"]
        assert dlq_replay.main([*args, "--yes"]) == 0
        assert sorted(order_ids(take_all(sqs, queue))) == sorted(ids)
        assert queue_depth(sqs, dlq) == 0

        assert dlq_replay.main([*args[:1], "no-such-stack", *args[2:]]) == dlq_replay.EXIT_USAGE
        assert "cannot read stack 'no-such-stack'" in capsys.readouterr().err
    finally:
        cfn.delete_stack(StackName=prefix)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give --stack-name, or both"),
        (["--dlq-url", "http://x/1/a"], "give --stack-name, or both"),
        (["--stack-name", "s", "--queue-url", "http://x/1/a"], "not both"),
        (["--stack-name", "s", "--native", "--include-malformed", "--max", "3"], "cannot be combined"),
        (["--stack-name", "s", "--native", "--include-malformed", "--rate", "0.5"], "whole number"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert dlq_replay.main(args) == dlq_replay.EXIT_USAGE
    assert message in capsys.readouterr().err


def test_a_queue_that_does_not_exist_is_a_configuration_error(
    queues: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = queues["OrderQueue"].rsplit("/", 1)[0] + "/no-such-queue"
    args = ["--dlq-url", queues["OrderDeadLetterQueue"], "--queue-url", missing, "--yes"]
    assert dlq_replay.main(args) == dlq_replay.EXIT_USAGE
    assert "cannot use queue" in capsys.readouterr().err


def test_help_explains_itself() -> None:
    result = run_script("--help")
    assert result.returncode == 0
    for text in ("--stack-name", "--dry-run", "--native", "examples:", "exit codes:"):
        assert text in result.stdout
