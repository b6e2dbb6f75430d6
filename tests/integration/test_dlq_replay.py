"""seckill-dlq-replay (seckill_ops.dlq_replay) against a real moto SQS server (and moto
CloudFormation): the queue's own redrive puts a message in the DLQ, the replay brings it
back and the real persister confirms it exactly once; dry runs consume nothing; refused,
interrupted and killed replays lose nothing. SQS's own move task, which moto lacks, is
followed through botocore's Stubber. No verdict waits on a fixed sleep: every wait is a
condition with a deadline."""

from __future__ import annotations

import contextlib
import io
import json
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from seckill.infra import keys
from seckill.infra.db import Credentials, Database
from seckill.messages import OrderMessage, queue_depth
from seckill.press.gate import Gate
from seckill_local.feeder import sqs_event
from seckill_ops import dlq_replay
from seckill_ops.replay import exits
from tests.helpers import DLQ_REPLAY, accept, closed_port, db_rows, module_of, run_dlq_replay, wait_for

ATTRIBUTES = {
    "trace": {"DataType": "String", "StringValue": "replay-test"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
}


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


def fill_orders(sqs: Any, url: str, count: int, *, padding: int = 0) -> dict[int, str]:
    """Order id -> body of ``count`` orders sent to ``url``."""
    made = dict(order_body(padding=padding) for _ in range(count))
    fill(sqs, url, list(made.values()))
    return made


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
    message = accept(gate, voucher_id, user_id, promise=False)
    order_id = message.order_id
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
    module = module_of(persister)
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

    # ...the database is back; replay (moto has no StartMessageMoveTask: the portable mover), and
    # the persister confirms it.
    assert dlq_replay.main(queue_args(queues, "--yes")) == 0
    done = capsys.readouterr()
    assert "no StartMessageMoveTask: moving with the portable mover" in done.err
    assert "moved" in done.out
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
    made = fill_orders(sqs, dlq, 13)

    # A long visibility timeout: only the command's own release makes them visible again.
    assert dlq_replay.main(queue_args(queues, "--dry-run", "--visibility-timeout", "300")) == 0

    out = capsys.readouterr().out
    for order_id in made:
        assert str(order_id) in out
    assert "13 message(s) listed; nothing moved" in out
    assert visible(sqs, dlq) == (13, 0)
    assert queue_depth(sqs, queues["OrderQueue"]) == 0
    assert sorted(order_ids(take_all(sqs, dlq))) == sorted(made)


def test_dry_run_max_lists_only_that_many(sqs: Any, queues: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    fill_orders(sqs, queues["OrderDeadLetterQueue"], 6)
    assert dlq_replay.main(queue_args(queues, "--dry-run", "--max", "4", "--visibility-timeout", "300")) == 0
    assert "4 message(s) listed" in capsys.readouterr().out
    assert visible(sqs, queues["OrderDeadLetterQueue"]) == (6, 0)


# ---------------------------------------------------------------- moving


def test_max_moves_at_most_n_keeping_body_and_attributes(sqs: Any, queues: dict[str, str]) -> None:
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    made = fill_orders(sqs, dlq, 7)

    assert dlq_replay.main(queue_args(queues, "--yes", "--max", "3", "--visibility-timeout", "300")) == 0

    moved = take_all(sqs, queue)
    assert len(moved) == 3
    assert all(m["MessageAttributes"] == ATTRIBUTES for m in moved)
    assert all(m["Body"] == made[order_id] for m, order_id in zip(moved, order_ids(moved), strict=True))
    assert visible(sqs, dlq) == (4, 0)  # the rest given back at once, not after 300 s
    left = take_all(sqs, dlq)
    assert sorted(order_ids(moved) + order_ids(left)) == sorted(made)


def test_whatever_is_in_the_dlq_is_moved_unchanged(sqs: Any, queues: dict[str, str]) -> None:
    """The DLQ is not sorted: what the persister could never store goes to the poison queue,
    so a body that is not an order (put there by hand) is moved like any other."""
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    made = fill_orders(sqs, dlq, 3)
    fill(sqs, dlq, ["not an order"])

    assert dlq_replay.main(queue_args(queues, "--yes", "--portable")) == 0

    assert queue_depth(sqs, dlq) == 0
    assert sorted(m["Body"] for m in take_all(sqs, queue)) == sorted([*made.values(), "not an order"])


def test_confirmation_on_a_terminal(
    sqs: Any, queues: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    fill_orders(sqs, dlq, 2)

    monkeypatch.setattr(sys, "stdin", TerminalInput("n\n"))
    assert dlq_replay.main(queue_args(queues)) == exits.EXIT_NOT_CONFIRMED
    assert "Move ~2 message(s)" in capsys.readouterr().err
    assert visible(sqs, dlq) == (2, 0)

    monkeypatch.setattr(sys, "stdin", TerminalInput("y\n"))
    assert dlq_replay.main(queue_args(queues)) == 0
    assert queue_depth(sqs, dlq) == 0
    assert len(take_all(sqs, queue)) == 2


def test_no_yes_with_stdin_not_a_terminal_refuses_and_moves_nothing(sqs: Any, queues: dict[str, str]) -> None:
    dlq = queues["OrderDeadLetterQueue"]
    fill_orders(sqs, dlq, 3)

    result = run_dlq_replay(*queue_args(queues), stdin=subprocess.DEVNULL)

    assert result.returncode == exits.EXIT_NOT_CONFIRMED, result.stderr
    assert "refusing to move without --yes" in result.stderr
    assert visible(sqs, dlq) == (3, 0)
    assert queue_depth(sqs, queues["OrderQueue"]) == 0


def test_empty_dlq_is_nothing_to_do(queues: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert dlq_replay.main(queue_args(queues)) == 0  # no --yes needed: there is nothing to confirm
    assert "nothing to move" in capsys.readouterr().out


def test_rate_limits_the_portable_mover(sqs: Any, queues: dict[str, str]) -> None:
    fill_orders(sqs, queues["OrderDeadLetterQueue"], 6)
    started = time.monotonic()
    assert dlq_replay.main(queue_args(queues, "--yes", "--rate", "4")) == 0
    # 4 a second: the first 4 at once, the next 2 no sooner than a second later (a lower bound only).
    assert time.monotonic() - started >= 1.0
    assert len(take_all(sqs, queues["OrderQueue"])) == 6


# ---------------------------------------------------------------- failures lose nothing


def test_sends_refused_by_the_target_delete_nothing(
    sqs: Any, queues: dict[str, str], extra_queues: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    dlq = queues["OrderDeadLetterQueue"]
    made = fill_orders(sqs, dlq, 5)
    # The wrong target: a FIFO queue refuses messages without a group id.
    fifo = sqs.create_queue(QueueName=f"t{uuid.uuid4().hex[:10]}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    extra_queues.append(fifo)

    args = ["--dlq-url", dlq, "--queue-url", fifo, "--wait", "0", "--yes", "--visibility-timeout", "300"]
    assert dlq_replay.main(args) == exits.EXIT_FAILED

    out = capsys.readouterr().out
    assert "cannot send to OrderQueue" in out
    assert visible(sqs, dlq) == (5, 0)  # nothing deleted, all given back at once
    assert queue_depth(sqs, fifo) == 0
    assert sorted(order_ids(take_all(sqs, dlq))) == sorted(made)


def test_a_target_that_refuses_some_messages_loses_none(
    sqs: Any, queues: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    small = fill_orders(sqs, dlq, 10)
    large = fill_orders(sqs, dlq, 10, padding=1200)
    # OrderQueue now refuses the large ones: the run stops at the first batch holding one.
    sqs.set_queue_attributes(QueueUrl=queue, Attributes={"MaximumMessageSize": "1024"})

    assert dlq_replay.main(queue_args(queues, "--yes", "--visibility-timeout", "300")) == exits.EXIT_FAILED

    assert "cannot send to OrderQueue" in capsys.readouterr().out
    moved = take_all(sqs, queue)
    assert set(order_ids(moved)) <= set(small)
    assert visible(sqs, dlq) == (20 - len(moved), 0)  # the rest given back at once, not after 300 s
    left = take_all(sqs, dlq)
    assert sorted(order_ids(moved) + order_ids(left)) == sorted([*small, *large])  # each in exactly one queue


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_replay_killed_midway_loses_nothing(sqs: Any, sqs_endpoint: str, queues: dict[str, str], signum: int) -> None:
    dlq, queue = queues["OrderDeadLetterQueue"], queues["OrderQueue"]
    made = fill_orders(sqs, dlq, 60)
    # 4 a second: 15 s for all of them, and the signal comes once 4 have moved.
    timeout = "300" if signum != signal.SIGKILL else "2"
    args = [
        *queue_args(queues, "--yes", "--rate", "4", "--visibility-timeout", timeout),
        "--endpoint-url",
        sqs_endpoint,
    ]
    process = subprocess.Popen([str(DLQ_REPLAY), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # noqa: S603
    try:
        wait_for(
            lambda: queue_depth(sqs, queue), "the replay to move 4 records", until=lambda depth: depth >= 4, timeout=30
        )
        process.send_signal(signum)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    if signum in (signal.SIGINT, signal.SIGTERM):
        assert process.returncode == exits.EXIT_INTERRUPTED, err
        assert "interrupted: nothing is lost" in out
        # It finished the call under way, deleted what it had sent and gave back what it held
        # before it exited: with a 300 s visibility timeout nothing else would show them.
        assert visible(sqs, dlq)[1] == 0
    else:
        assert process.returncode == -signal.SIGKILL
        # What it held comes back after its 2 s visibility timeout.
        wait_for(
            lambda: visible(sqs, dlq), "no record in flight on the DLQ", until=lambda counts: counts[1] == 0, timeout=30
        )
    moved, left = order_ids(take_all(sqs, queue)), order_ids(take_all(sqs, dlq))
    assert 4 <= len(set(moved)) < 60
    assert set(moved) | set(left) == set(made)  # duplicates allowed, nothing lost
    if signum != signal.SIGKILL:
        assert sorted(moved + left) == sorted(made)  # stopped cleanly: not even a duplicate


# ---------------------------------------------------------------- SQS's own move task


def test_on_moto_the_default_falls_back_to_the_portable_mover(
    sqs: Any, queues: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    made = fill_orders(sqs, queues["OrderDeadLetterQueue"], 3)
    assert dlq_replay.main(queue_args(queues, "--yes", "--rate", "10")) == 0
    assert "no StartMessageMoveTask: moving with the portable mover" in capsys.readouterr().err
    assert sorted(order_ids(take_all(sqs, queues["OrderQueue"]))) == sorted(made)
    assert queue_depth(sqs, queues["OrderDeadLetterQueue"]) == 0


# ---------------------------------------------------------------- stack, usage


def test_stack_name_finds_the_queues_from_the_outputs(
    sqs: Any, sqs_endpoint: str, extra_queues: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
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
        made = fill_orders(sqs, dlq, 4)
        args = ["--stack-name", prefix, "--endpoint-url", sqs_endpoint, "--region", "us-east-1", "--wait", "0"]
        assert dlq_replay.main([*args, "--yes"]) == 0
        assert sorted(order_ids(take_all(sqs, queue))) == sorted(made)
        assert queue_depth(sqs, dlq) == 0

        assert dlq_replay.main([*args[:1], "no-such-stack", *args[2:]]) == exits.EXIT_USAGE
        assert "cannot read stack 'no-such-stack'" in capsys.readouterr().err
    finally:
        cfn.delete_stack(StackName=prefix)


def test_stack_name_with_queues_expiries_replays_the_expiry_dlq_only(
    sqs: Any, sqs_endpoint: str, extra_queues: list[str]
) -> None:
    cfn = boto3.client("cloudformation", endpoint_url=sqs_endpoint, region_name="us-east-1")
    prefix = f"t{uuid.uuid4().hex[:10]}"
    names = ("OrderQueue", "OrderDeadLetterQueue", "OrderExpiryQueue", "OrderExpiryDeadLetterQueue")
    template = {
        "Resources": {n: {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": f"{prefix}-{n}"}} for n in names},
        "Outputs": {f"{n}Url": {"Value": {"Ref": n}} for n in names},
    }
    cfn.create_stack(StackName=prefix, TemplateBody=json.dumps(template))
    urls = {n: sqs.get_queue_url(QueueName=f"{prefix}-{n}")["QueueUrl"] for n in names}
    extra_queues.extend(urls.values())
    try:
        order_dead = fill_orders(sqs, urls["OrderDeadLetterQueue"], 2)
        expiry = json.dumps({"orderId": "42", "voucherId": 9, "userId": 7, "payBy": "2026-11-30T12:15:00.000Z"})
        fill(sqs, urls["OrderExpiryDeadLetterQueue"], [expiry])
        args = ["--stack-name", prefix, "--queues", "expiries", "--endpoint-url", sqs_endpoint, "--region", "us-east-1"]
        assert dlq_replay.main([*args, "--wait", "0", "--yes"]) == 0
        assert [m["Body"] for m in take_all(sqs, urls["OrderExpiryQueue"])] == [expiry]
        assert queue_depth(sqs, urls["OrderExpiryDeadLetterQueue"]) == 0
        # The orders' DLQ is another pair's: left as it was.
        assert sorted(order_ids(take_all(sqs, urls["OrderDeadLetterQueue"]))) == sorted(order_dead)
        assert queue_depth(sqs, urls["OrderQueue"]) == 0
    finally:
        cfn.delete_stack(StackName=prefix)


def test_a_fractional_rate_is_fine_for_the_portable_mover(sqs: Any, queues: dict[str, str]) -> None:
    fill_orders(sqs, queues["OrderDeadLetterQueue"], 1)
    assert dlq_replay.main(queue_args(queues, "--yes", "--portable", "--rate", "0.5")) == 0
    assert len(take_all(sqs, queues["OrderQueue"])) == 1


def test_a_queue_that_does_not_exist_is_a_configuration_error(
    queues: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = queues["OrderQueue"].rsplit("/", 1)[0] + "/no-such-queue"
    args = ["--dlq-url", queues["OrderDeadLetterQueue"], "--queue-url", missing, "--yes"]
    assert dlq_replay.main(args) == exits.EXIT_USAGE
    assert "cannot use queue" in capsys.readouterr().err
