#!/usr/bin/env python3
"""Move order messages from OrderDeadLetterQueue back to OrderQueue.

What an operator runs once the cause of the failures (database down, a bad
deploy) is fixed. The move is at-least-once: a message is deleted from the
dead-letter queue only after SQS accepted its copy on OrderQueue, so an
interrupted run loses nothing and at worst delivers a message twice, which the
persister absorbs (it is idempotent on the order id).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from seckill.messages import MalformedMessage, OrderMessage

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NATIVE_UNSUPPORTED = 3
EXIT_NOT_CONFIRMED = 4
EXIT_INTERRUPTED = 130

QUEUE_OUTPUT = "OrderQueueUrl"
DLQ_OUTPUT = "OrderDeadLetterQueueUrl"
BATCH = 10  # the most SQS receives, sends or deletes in one call
IDLE_RECEIVES = 3  # receives in a row that bring back only messages already handled: the run is done
NATIVE_MAX_RATE = 500  # StartMessageMoveTask's MaxNumberOfMessagesPerSecond limit
# Error codes with which an SQS-compatible endpoint says it has no such action
# (moto answers an HTTP 500 whose code is just "500").
UNSUPPORTED_CODES = {"InvalidAction", "UnsupportedOperation", "UnknownOperationException", "NotImplemented", "500"}
SEND_KEYS = ("DataType", "StringValue", "BinaryValue")
MALFORMED_SHOWN = 20  # malformed messages named one by one in the summary

EPILOG = """\
examples:
  # what is in the dead-letter queue? (consumes nothing)
  dlq_replay.py --stack-name seckill --dry-run
  # move everything back, asking first
  dlq_replay.py --stack-name seckill
  # unattended, at most 500 messages, 20 per second
  dlq_replay.py --stack-name seckill --yes --max 500 --rate 20
  # explicit queues on a local moto server
  dlq_replay.py --dlq-url http://127.0.0.1:4566/123456789012/OrderDeadLetterQueue \\
                --queue-url http://127.0.0.1:4566/123456789012/OrderQueue --endpoint-url http://127.0.0.1:4566
  # let SQS move them itself (AWS only; moves malformed messages too)
  dlq_replay.py --stack-name seckill --native --include-malformed --rate 50

how it moves:
  receive up to 10 from the DLQ (hidden for --visibility-timeout), send them to
  OrderQueue with the same body and message attributes, then delete from the DLQ
  only the entries SQS accepted. Killed at any moment, it loses nothing: what it
  held reappears in the DLQ after the visibility timeout, and a message sent but
  not yet deleted is delivered twice, which the persister absorbs. Messages that
  are not order messages are reported and left in the DLQ (replaying them can
  only send them round again) unless --include-malformed. Every receive, a dry
  run's too, adds one to a message's ApproximateReceiveCount in the DLQ.

exit codes:
  0    all good (including: nothing to move, malformed messages left as asked)
  1    something failed: a send (the message stays in the DLQ), a delete (it will
       be delivered twice), or the run stopped on an SQS error; run it again
  2    usage or configuration error (arguments, stack, queues, credentials, region)
  3    --native, but the endpoint does not support StartMessageMoveTask
  4    not confirmed (answered no, or no --yes while stdin is not a terminal)
  130  interrupted (Ctrl-C, SIGTERM); nothing is lost, run it again
"""


class ConfigError(Exception):
    """The queues cannot be found or reached: exit 2."""


class RunStopped(Exception):
    """An SQS call failed in a way that makes going on pointless."""


@dataclass(frozen=True)
class Queues:
    queue_url: str
    dlq_url: str


@dataclass(frozen=True)
class QueueInfo:
    url: str
    arn: str
    depth: int
    redrive_target: str | None


@dataclass
class Summary:
    moved: int = 0
    malformed_moved: int = 0
    failed: int = 0
    malformed_left: int = 0
    not_deleted: int = 0
    not_released: int = 0
    remaining: int | None = None
    stopped: str | None = None
    interrupted: bool = False
    malformed: list[tuple[str, str]] = field(default_factory=list)  # (message id, why) of those left
    send_errors: Counter[str] = field(default_factory=Counter)  # why SQS refused an entry -> how many

    @property
    def attempted(self) -> int:
        return self.moved + self.failed + self.not_deleted

    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.failed or self.not_deleted or self.stopped:
            return EXIT_FAILED
        return EXIT_OK


# ---------------------------------------------------------------- arguments


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dlq_replay.py",
        description="Move order messages from OrderDeadLetterQueue back to OrderQueue, losing none.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_argument_group("queues (a stack name, or both URLs)")
    where.add_argument(
        "--stack-name", help=f"CloudFormation stack whose outputs {QUEUE_OUTPUT} / {DLQ_OUTPUT} name them"
    )
    where.add_argument("--dlq-url", help="URL of the dead-letter queue to move from")
    where.add_argument("--queue-url", help="URL of the queue to move to")
    where.add_argument("--region", help="AWS region (default: as boto3 finds it, e.g. AWS_DEFAULT_REGION)")
    where.add_argument(
        "--endpoint-url",
        help="endpoint for SQS and CloudFormation, e.g. a moto server "
        "(default: boto3's, which honours AWS_ENDPOINT_URL_SQS / AWS_ENDPOINT_URL)",
    )
    what = parser.add_argument_group("what to do")
    what.add_argument("--dry-run", action="store_true", help="list the DLQ's messages and move nothing")
    what.add_argument("--max", type=positive_int, metavar="N", help="move (or list) at most N messages")
    what.add_argument("--rate", type=positive_float, metavar="PER_SECOND", help="send at most this many per second")
    what.add_argument(
        "--yes", "-y", action="store_true", help="do not ask before moving (needed when not on a terminal)"
    )
    what.add_argument("--include-malformed", action="store_true", help="move messages that are not order messages too")
    what.add_argument(
        "--native",
        action="store_true",
        help="start SQS's own move task (StartMessageMoveTask) instead; moves every message, malformed ones too",
    )
    tuning = parser.add_argument_group("tuning")
    tuning.add_argument(
        "--visibility-timeout",
        type=positive_int,
        default=120,
        metavar="SECONDS",
        help="how long a received message stays hidden in the DLQ while being handled; "
        "after a crash it reappears after this long (default: %(default)s)",
    )
    tuning.add_argument(
        "--wait",
        type=int,
        choices=range(21),
        default=2,
        metavar="SECONDS",
        help="long-poll wait of each receive, 0-20; the run ends at a receive that finds nothing "
        "(default: %(default)s)",
    )
    return parser


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with a combination of arguments, if anything."""
    urls = (args.dlq_url, args.queue_url)
    if args.stack_name and any(urls):
        return "give --stack-name or --dlq-url/--queue-url, not both"
    if not args.stack_name and not all(urls):
        return "give --stack-name, or both --dlq-url and --queue-url"
    if args.native:
        if args.dry_run or args.max:
            return "--native moves everything at SQS's pace: it cannot be combined with --dry-run or --max"
        if not args.include_malformed:
            return (
                "--native moves every message, malformed ones too (SQS cannot filter them): "
                "add --include-malformed to accept that, or run without --native"
            )
        if args.rate is not None and not (args.rate.is_integer() and args.rate <= NATIVE_MAX_RATE):
            return f"with --native, --rate must be a whole number from 1 to {NATIVE_MAX_RATE}"
    return None


# ---------------------------------------------------------------- AWS


def clients(args: argparse.Namespace) -> tuple[Any, Any]:
    """SQS and CloudFormation clients (the latter only needed for --stack-name)."""
    try:
        session = boto3.session.Session(region_name=args.region)
        sqs = session.client("sqs", endpoint_url=args.endpoint_url)
        cfn = session.client("cloudformation", endpoint_url=args.endpoint_url) if args.stack_name else None
    except BotoCoreError as exc:
        raise ConfigError(str(exc)) from exc
    return sqs, cfn


def error_text(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code", "?")
        message = str(error.get("Message", "")).strip()
        if message.startswith("<"):  # an HTML error page: the code says all there is
            message = ""
        return f"{code}: {message}" if message else str(code)
    return str(exc)


def stack_queues(cfn: Any, stack_name: str) -> Queues:
    try:
        stacks = cfn.describe_stacks(StackName=stack_name)["Stacks"]
    except (ClientError, BotoCoreError) as exc:
        raise ConfigError(f"cannot read stack {stack_name!r}: {error_text(exc)}") from exc
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    missing = [key for key in (QUEUE_OUTPUT, DLQ_OUTPUT) if key not in outputs]
    if missing:
        raise ConfigError(f"stack {stack_name!r} has no output {' or '.join(missing)}")
    return Queues(queue_url=outputs[QUEUE_OUTPUT], dlq_url=outputs[DLQ_OUTPUT])


def queue_info(sqs: Any, url: str) -> QueueInfo:
    names = ["QueueArn", "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "RedrivePolicy"]
    try:
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    except (ClientError, BotoCoreError) as exc:
        raise ConfigError(f"cannot use queue {url}: {error_text(exc)}") from exc
    redrive = attrs.get("RedrivePolicy")
    target = json.loads(redrive).get("deadLetterTargetArn") if redrive else None
    depth = sum(int(attrs.get(name, 0)) for name in names[1:3])
    return QueueInfo(url=url, arn=attrs["QueueArn"], depth=depth, redrive_target=target)


def approximate_depth(sqs: Any, url: str) -> int | None:
    try:
        return queue_info(sqs, url).depth
    except ConfigError:
        return None


def send_entry(entry_id: str, message: dict[str, Any]) -> dict[str, Any]:
    """The received message as a SendMessageBatch entry: same body, same message attributes."""
    entry: dict[str, Any] = {"Id": entry_id, "MessageBody": message["Body"]}
    attributes = message.get("MessageAttributes")
    if attributes:
        entry["MessageAttributes"] = {
            name: {key: value[key] for key in SEND_KEYS if key in value} for name, value in attributes.items()
        }
    system = message.get("Attributes", {})
    if "AWSTraceHeader" in system:
        entry["MessageSystemAttributes"] = {
            "AWSTraceHeader": {"DataType": "String", "StringValue": system["AWSTraceHeader"]}
        }
    if "MessageGroupId" in system:  # only messages from a FIFO (or fair) queue carry one
        entry["MessageGroupId"] = system["MessageGroupId"]
    return entry


def chunks(items: Sequence[Any], size: int = BATCH) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# ---------------------------------------------------------------- the dead-letter queue


class DeadLetters:
    """Receives from the DLQ and remembers every message it holds (hidden by the
    visibility timeout) until it is deleted, or given back (visibility 0) at the end."""

    def __init__(self, sqs: Any, url: str, *, visibility_timeout: int, wait: int) -> None:
        self.sqs = sqs
        self.url = url
        self.visibility_timeout = visibility_timeout
        self.wait = wait
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

    def release(self) -> int:
        """Makes everything still held visible again at once; returns how many could not be."""
        failed = 0
        handles = list(self.held.values())
        for chunk in chunks(handles):
            entries = [{"Id": str(i), "ReceiptHandle": h, "VisibilityTimeout": 0} for i, h in enumerate(chunk)]
            try:
                response = self.sqs.change_message_visibility_batch(QueueUrl=self.url, Entries=entries)
                failed += len(response.get("Failed", []))
            except (ClientError, BotoCoreError):
                failed += len(chunk)
        self.held.clear()
        self.not_released += failed
        return failed


def parse(message: dict[str, Any]) -> OrderMessage | MalformedMessage:
    try:
        return OrderMessage.from_json(message["Body"])
    except MalformedMessage as exc:
        return exc


def age(message: dict[str, Any], now: float) -> str:
    sent = message.get("Attributes", {}).get("SentTimestamp")
    if not sent:
        return "?"
    seconds = max(0, int(now - int(sent) / 1000))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


# ---------------------------------------------------------------- dry run


def dry_run(dlq: DeadLetters, limit: int | None) -> list[dict[str, Any]]:
    """Everything in the DLQ (up to ``limit``), given back at once afterwards."""
    listed: list[dict[str, Any]] = []
    try:
        while not dlq.exhausted and (limit is None or len(listed) < limit):
            want = BATCH if limit is None else min(BATCH, limit - len(listed))
            listed.extend(dlq.receive(want))
    finally:
        dlq.release()
    return listed


def listing(messages: Sequence[dict[str, Any]]) -> Table:
    table = Table(title="OrderDeadLetterQueue", title_justify="left")
    for name in ("message id", "order id", "user", "voucher"):
        table.add_column(name, no_wrap=True)
    table.add_column("receives", justify="right")
    table.add_column("age", justify="right")
    table.add_column("note")
    now = time.time()
    for message in messages:
        parsed = parse(message)
        receives = message.get("Attributes", {}).get("ApproximateReceiveCount", "?")
        if isinstance(parsed, OrderMessage):
            ids = (str(parsed.order_id), str(parsed.user_id), str(parsed.voucher_id))
            note = ""
        else:
            ids = ("-", "-", "-")
            note = str(parsed)[:100]
        table.add_row(message["MessageId"], *ids, receives, age(message, now), note, style="" if not note else "yellow")
    return table


# ---------------------------------------------------------------- the move


class Throttle:
    """At most ``rate`` messages per second, on average since the start."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.start = time.monotonic()
        self.count = 0

    def take(self, n: int) -> None:
        if self.rate:
            delay = self.start + self.count / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        self.count += n


class Mover:
    def __init__(
        self,
        sqs: Any,
        dlq: DeadLetters,
        queue_url: str,
        *,
        include_malformed: bool,
        limit: int | None,
        rate: float | None,
        report: Callable[[Summary], None],
    ) -> None:
        self.sqs = sqs
        self.dlq = dlq
        self.queue_url = queue_url
        self.include_malformed = include_malformed
        self.limit = limit
        self.batch = BATCH if rate is None else max(1, min(BATCH, int(rate)))
        self.throttle = Throttle(rate)
        self.report = report
        self.summary = Summary()
        self._sent: list[dict[str, Any]] = []  # accepted by OrderQueue, not yet deleted from the DLQ

    def run(self) -> Summary:
        try:
            while not self.dlq.exhausted and self._room() > 0:
                messages = self.dlq.receive(min(self.batch, self._room()))
                if messages:
                    self._move(messages)
                    self.report(self.summary)
        except RunStopped as exc:
            self.summary.stopped = str(exc)
        except KeyboardInterrupt:
            self.summary.interrupted = True
        finally:
            self._finish()
        return self.summary

    def _room(self) -> int:
        return BATCH if self.limit is None else self.limit - self.summary.attempted

    def _move(self, messages: list[dict[str, Any]]) -> None:
        parsed = {m["MessageId"]: parse(m) for m in messages}
        malformed = {key: str(why) for key, why in parsed.items() if isinstance(why, MalformedMessage)}
        if self.include_malformed:
            to_send = messages
        else:
            to_send = [m for m in messages if m["MessageId"] not in malformed]
            self.summary.malformed_left += len(malformed)  # they stay held, given back at the end
            self.summary.malformed.extend(malformed.items())
        if not to_send:
            return
        self.throttle.take(len(to_send))
        sent, failed = self._send(to_send)
        self.summary.failed += len(failed)  # they stay held too
        self._sent = sent
        not_deleted = self.dlq.delete(sent)
        self._sent = []
        self.summary.not_deleted += not_deleted
        self.summary.moved += len(sent) - not_deleted
        self.summary.malformed_moved += sum(1 for m in sent if m["MessageId"] in malformed)

    def _send(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Sends them to OrderQueue; returns (accepted, refused), matched by entry Id."""
        entries = [send_entry(str(i), m) for i, m in enumerate(messages)]
        try:
            response = self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except (ClientError, BotoCoreError) as exc:
            self.summary.failed += len(messages)
            raise RunStopped(f"cannot send to OrderQueue: {error_text(exc)}") from exc
        accepted = {s["Id"] for s in response.get("Successful", [])}
        for refused in response.get("Failed", []):
            self.summary.send_errors[f"{refused.get('Code', '?')}: {refused.get('Message', '')}".strip()] += 1
        sent = [m for i, m in enumerate(messages) if str(i) in accepted]
        failed = [m for i, m in enumerate(messages) if str(i) not in accepted]
        return sent, failed

    def _finish(self) -> None:
        """Deletes what was sent (an interruption may fall between send and delete),
        then gives back everything else still held."""
        if self._sent:
            try:
                not_deleted = self.dlq.delete(self._sent)
            except RunStopped:
                not_deleted = len(self._sent)
            self.summary.not_deleted += not_deleted
            self.summary.moved += len(self._sent) - not_deleted
            self._sent = []
        self.dlq.release()
        self.summary.not_released = self.dlq.not_released


# ---------------------------------------------------------------- output


@contextmanager
def progress(err: Console, total: int) -> Iterator[Callable[[Summary], None]]:
    """A progress bar on a terminal, a line per batch otherwise."""
    if not err.is_terminal:

        def log(s: Summary) -> None:
            err.print(f"moved {s.moved}, failed {s.failed}, malformed left {s.malformed_left}")

        yield log
        return
    columns = (TextColumn("moving"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"))
    with Progress(*columns, TimeElapsedColumn(), console=err) as bar:
        task = bar.add_task("move", total=total or None, note="")

        def update(s: Summary) -> None:
            note = f"failed {s.failed}, malformed left {s.malformed_left}"
            bar.update(task, completed=s.moved + s.failed + s.malformed_left, note=note)

        yield update


def print_summary(out: Console, summary: Summary) -> None:
    table = Table.grid(padding=(0, 2))
    table.add_column()
    table.add_column(justify="right")
    rows = [  # (name, value, shown even when 0)
        ("moved", summary.moved, True),
        ("  of which malformed", summary.malformed_moved, False),
        ("failed to send (still in the DLQ)", summary.failed, True),
        ("malformed left in the DLQ", summary.malformed_left, False),
        ("sent but not deleted (delivered twice)", summary.not_deleted, False),
        ("remaining in the DLQ (approx.)", "?" if summary.remaining is None else summary.remaining, True),
    ]
    for name, value, always in rows:
        if value or always:
            table.add_row(name, str(value))
    out.print(table)
    for message_id, why in summary.malformed[:MALFORMED_SHOWN]:
        out.print(f"left in the DLQ: {message_id}: {why}", style="yellow")
    if len(summary.malformed) > MALFORMED_SHOWN:
        out.print(f"... and {len(summary.malformed) - MALFORMED_SHOWN} more malformed (see --dry-run)", style="yellow")
    for why, count in summary.send_errors.most_common():
        out.print(f"OrderQueue refused {count}: {why}", style="red")
    if summary.stopped:
        out.print(f"stopped: {summary.stopped}", style="red")
    if summary.interrupted:
        out.print("interrupted: nothing is lost; run again to move the rest", style="yellow")
    if summary.not_released:
        out.print(f"{summary.not_released} message(s) stay hidden in the DLQ until their visibility timeout ends")
    if summary.exit_code() == EXIT_FAILED:
        out.print("some messages were not moved: fix the cause and run again", style="red")


# ---------------------------------------------------------------- commands


def confirmation(question: str, *, yes: bool, err: Console) -> int | None:
    """None to go on, else the exit code."""
    if yes:
        return None
    if sys.stdin is None or not sys.stdin.isatty():
        err.print(
            "refusing to move without --yes: stdin is not a terminal, so nobody can confirm "
            "(use --dry-run to look first)",
            style="red",
        )
        return EXIT_NOT_CONFIRMED
    err.print(f"{question} [y/N] ", end="")
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return None
    err.print("nothing moved")
    return EXIT_NOT_CONFIRMED


def native_unsupported(exc: Exception) -> bool:
    if isinstance(exc, AttributeError):  # a botocore too old to know the operation
        return True
    if not isinstance(exc, ClientError):
        return False
    code = str(exc.response.get("Error", {}).get("Code", ""))
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return code in UNSUPPORTED_CODES or status == 501


def run_native(sqs: Any, queue: QueueInfo, dlq: QueueInfo, rate: float | None, out: Console, err: Console) -> int:
    request: dict[str, Any] = {"SourceArn": dlq.arn, "DestinationArn": queue.arn}
    if rate is not None:
        request["MaxNumberOfMessagesPerSecond"] = int(rate)
    try:
        handle = sqs.start_message_move_task(**request)["TaskHandle"]
    except (ClientError, BotoCoreError, AttributeError) as exc:
        if native_unsupported(exc):
            err.print(
                f"--native: this endpoint does not support StartMessageMoveTask ({error_text(exc)}); "
                "run without --native to move the messages with this script",
                style="red",
            )
            return EXIT_NATIVE_UNSUPPORTED
        err.print(f"--native: StartMessageMoveTask failed: {error_text(exc)}", style="red")
        return EXIT_FAILED
    out.print(f"SQS is moving the DLQ's messages to OrderQueue (task {handle})")
    out.print(f"  watch:  aws sqs list-message-move-tasks --source-arn {dlq.arn}")
    out.print(f"  cancel: aws sqs cancel-message-move-task --task-handle {handle}")
    return EXIT_OK


def run_dry(dlq: DeadLetters, args: argparse.Namespace, out: Console, err: Console) -> int:
    try:
        messages = dry_run(dlq, args.max)
    except RunStopped as exc:
        err.print(str(exc), style="red")
        return EXIT_FAILED
    malformed = sum(1 for m in messages if not isinstance(parse(m), OrderMessage))
    if messages:
        out.print(listing(messages))
    out.print(f"dry run: {len(messages)} message(s) listed, {malformed} malformed; nothing moved")
    if dlq.not_released:
        hidden = f"{dlq.not_released} message(s) stay hidden"
        err.print(f"{hidden} until their visibility timeout ({dlq.visibility_timeout}s) ends")
    return EXIT_OK


def run_move(
    sqs: Any, dlq: DeadLetters, depth: int, queue: QueueInfo, args: argparse.Namespace, out: Console, err: Console
) -> int:
    total = min(depth, args.max) if args.max else depth
    err.print(f"moving up to {total} of ~{depth} message(s) from {dlq.url} to {queue.url}")
    with progress(err, total) as report:
        mover = Mover(
            sqs, dlq, queue.url, include_malformed=args.include_malformed, limit=args.max, rate=args.rate, report=report
        )
        summary = mover.run()
    summary.remaining = approximate_depth(sqs, dlq.url)
    print_summary(out, summary)
    return summary.exit_code()


def replay(args: argparse.Namespace, out: Console, err: Console) -> int:
    sqs, cfn = clients(args)
    queues = stack_queues(cfn, args.stack_name) if args.stack_name else Queues(args.queue_url, args.dlq_url)
    if queues.queue_url == queues.dlq_url:
        raise ConfigError("the DLQ and the target queue are the same queue")
    dlq_info = queue_info(sqs, queues.dlq_url)
    queue = queue_info(sqs, queues.queue_url)
    if queue.redrive_target and queue.redrive_target != dlq_info.arn:
        err.print(f"note: {queue.url} sends its dead letters to {queue.redrive_target}, not to this DLQ")
    dlq = DeadLetters(sqs, dlq_info.url, visibility_timeout=args.visibility_timeout, wait=args.wait)
    if args.dry_run:
        return run_dry(dlq, args, out, err)
    if dlq_info.depth == 0 and not args.native:
        out.print(f"the DLQ looks empty (approximate count 0): nothing to move ({dlq_info.url})")
        return EXIT_OK
    scope = f"up to {args.max} of " if args.max else ""
    question = f"Move {scope}~{dlq_info.depth} message(s) from {dlq_info.url} to {queue.url}?"
    refused = confirmation(question, yes=args.yes, err=err)
    if refused is not None:
        return refused
    if args.native:
        return run_native(sqs, queue, dlq_info, args.rate, out, err)
    return run_move(sqs, dlq, dlq_info.depth, queue, args, out, err)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the run as Ctrl-C does: held messages are given back first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code or 0)
    out = Console(highlight=False, markup=False, width=None if sys.stdout.isatty() else 200)
    err = Console(stderr=True, highlight=False, markup=False, soft_wrap=True)
    problem = usage_problem(args)
    if problem:
        parser.print_usage(sys.stderr)
        err.print(f"dlq_replay.py: error: {problem}", style="red")
        return EXIT_USAGE
    with sigterm_interrupts():
        try:
            return replay(args, out, err)
        except ConfigError as exc:
            err.print(f"dlq_replay.py: {exc}", style="red")
            return EXIT_USAGE
        except KeyboardInterrupt:  # outside the move loop, which reports for itself
            err.print("interrupted: nothing is lost; anything held reappears in the DLQ after its visibility timeout")
            return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
