"""seckill-dlq-replay: move OrderDeadLetterQueue's messages back to OrderQueue
(or, with ``--queues expiries``, OrderExpiryDeadLetterQueue's back to OrderExpiryQueue).

What an operator runs once the cause of the failures (database down, a bad
deploy) is fixed. Records that can never be stored go to the poison queue, not
the DLQ, so everything in the DLQ is an order to replay. By default SQS moves
them itself (StartMessageMoveTask) and the command follows the task to its end.
An endpoint without that action (moto) gets the portable mover instead: receive
up to 10, send them to OrderQueue with the same body and attributes, then delete
from the DLQ only what SQS accepted. Either way an interrupted run loses nothing
and at worst delivers a message twice, which the persister absorbs.
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

from seckill_ops import stack_outputs
from seckill_ops.stack_outputs import REPLAYABLE

PROG = "seckill-dlq-replay"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_CONFIRMED = 4
EXIT_INTERRUPTED = 130

# A replayed expiry arrives at once: the expiry function expires its order, or
# sends it again if it is early.
BATCH = 10  # the most SQS receives, sends or deletes in one call
IDLE_RECEIVES = 3  # receives in a row that bring back only messages already handled: the run is done
NATIVE_MAX_RATE = 500  # StartMessageMoveTask's MaxNumberOfMessagesPerSecond limit
NATIVE_POLL = 2.0  # seconds between looks at a running move task
# How an SQS-compatible endpoint says it has no such action (moto answers a 500 whose code is "500").
UNSUPPORTED_CODES = {"InvalidAction", "UnsupportedOperation", "UnknownOperationException", "NotImplemented", "500"}
SEND_KEYS = ("DataType", "StringValue", "BinaryValue")

EPILOG = f"""\
examples:
  {PROG} --stack-name seckill --dry-run      # what is in the DLQ? (consumes nothing)
  {PROG} --stack-name seckill                # move it all back, asking first
  {PROG} --stack-name seckill --yes --rate 20
  {PROG} --stack-name seckill --queues expiries   # dead-lettered expiries back to OrderExpiryQueue
  {PROG} --dlq-url URL --queue-url URL --endpoint-url http://127.0.0.1:4566 --max 100 --yes

how it moves:
  SQS's own move task (StartMessageMoveTask), followed until it ends; Ctrl-C
  cancels it, and what was moved stays moved. Where the endpoint lacks it, or
  with --portable or --max: receive up to 10 (hidden for --visibility-timeout),
  send them with the same body and attributes, delete from the DLQ only those
  SQS accepted. Killed at any moment, nothing is lost: what it held reappears
  after the visibility timeout. Every receive, a dry run's too, adds one to a
  message's ApproximateReceiveCount.

exit codes:
  0    all moved (or nothing to move, or a dry run)
  1    something failed (a send, a delete, the move task, an SQS call); run it again
  2    usage or configuration error (arguments, stack, queues, credentials, region)
  4    not confirmed (answered no, or no --yes while stdin is not a terminal)
  130  interrupted (Ctrl-C, SIGTERM); nothing is lost, run it again
"""


class ConfigError(Exception):
    """The queues cannot be found or reached: exit 2."""


class RunStopped(Exception):
    """An SQS call failed in a way that makes going on pointless."""


@dataclass(frozen=True)
class QueueInfo:
    url: str
    arn: str
    depth: int  # visible and in flight


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


# ---------------------------------------------------------------- arguments


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Move the orders in OrderDeadLetterQueue back to OrderQueue, losing none.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_argument_group("queues (a stack name, or both URLs)")
    where.add_argument("--stack-name", help="stack whose outputs name the queues (see --queues)")
    where.add_argument(
        "--queues",
        choices=REPLAYABLE,
        default="orders",
        help="with --stack-name: "
        + "; ".join(f"{name}: {' / '.join(outputs)}" for name, outputs in REPLAYABLE.items())
        + " (default: %(default)s)",
    )
    where.add_argument("--dlq-url", help="URL of the dead-letter queue to move from")
    where.add_argument("--queue-url", help="URL of the queue to move to")
    where.add_argument("--region", help="AWS region (default: as boto3 finds it)")
    where.add_argument(
        "--endpoint-url", help="SQS/CloudFormation endpoint (default: boto3's, e.g. AWS_ENDPOINT_URL_SQS)"
    )
    what = parser.add_argument_group("what to do")
    what.add_argument("--dry-run", action="store_true", help="list the DLQ's messages and move nothing")
    what.add_argument("--max", type=positive_int, metavar="N", help="move (or list) at most N; implies --portable")
    what.add_argument("--rate", type=positive_float, metavar="PER_SECOND", help="move at most this many per second")
    what.add_argument("--yes", "-y", action="store_true", help="do not ask first (needed when not on a terminal)")
    what.add_argument("--portable", action="store_true", help="move with this command, not SQS's move task")
    tuning = parser.add_argument_group("the portable mover")
    tuning.add_argument(
        "--visibility-timeout",
        type=positive_int,
        default=120,
        metavar="SECONDS",
        help="how long a received message stays hidden in the DLQ; after a crash it reappears after this long "
        "(default: %(default)s)",
    )
    tuning.add_argument(
        "--wait",
        type=int,
        choices=range(21),
        default=2,
        metavar="SECONDS",
        help="long-poll wait of each receive, 0-20 (default: %(default)s)",
    )
    return parser


def usage_problem(args: argparse.Namespace) -> str | None:
    urls = (args.dlq_url, args.queue_url)
    if args.stack_name and any(urls):
        return "give --stack-name or --dlq-url/--queue-url, not both"
    if not args.stack_name and not all(urls):
        return "give --stack-name, or both --dlq-url and --queue-url"
    native = not (args.portable or args.max or args.dry_run)
    if native and args.rate is not None and not (args.rate.is_integer() and args.rate <= NATIVE_MAX_RATE):
        return f"SQS's move task takes --rate as a whole number from 1 to {NATIVE_MAX_RATE} (or add --portable)"
    return None


# ---------------------------------------------------------------- AWS


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


def chunks(items: Sequence[Any], size: int = BATCH) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# ---------------------------------------------------------------- the portable mover


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


class Stop:
    """Set by Ctrl-C or SIGTERM while moving: the SQS call under way completes, then the
    run stops cleanly (deletes what was sent, gives back what it holds)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def is_set(self) -> bool:
        return self.event.is_set()

    def sleep(self, seconds: float) -> None:
        self.event.wait(seconds)


@contextmanager
def stop_on_signals(stop: Stop) -> Iterator[None]:
    """Ctrl-C and SIGTERM set ``stop``; a second one raises KeyboardInterrupt (still nothing is
    lost: what was held reappears after its visibility timeout)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.event.set()

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


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


# ---------------------------------------------------------------- SQS's move task


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


# ---------------------------------------------------------------- output and commands


def order_ids(body: str) -> tuple[str, str, str]:
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return ("-", "-", "-")
    return (str(data.get("orderId", "-")), str(data.get("userId", "-")), str(data.get("voucherId", "-")))


def run_dry(dlq: DeadLetters, limit: int | None, out: Console, err: Console, stop: Stop) -> int:
    listed: list[dict[str, Any]] = []
    try:
        while not stop.is_set() and not dlq.exhausted and (limit is None or len(listed) < limit):
            listed.extend(dlq.receive(BATCH if limit is None else min(BATCH, limit - len(listed))))
    except RunStopped as exc:
        err.print(str(exc), style="red")
        return EXIT_FAILED
    finally:
        dlq.release()
    if listed:
        table = Table(title="OrderDeadLetterQueue", title_justify="left")
        for name in ("message id", "order id", "user", "voucher", "receives"):
            table.add_column(name, no_wrap=True)
        for m in listed:
            table.add_row(
                m["MessageId"], *order_ids(m["Body"]), m.get("Attributes", {}).get("ApproximateReceiveCount", "?")
            )
        out.print(table)
    out.print(f"dry run: {len(listed)} message(s) listed; nothing moved" + (" (interrupted)" if stop.is_set() else ""))
    if dlq.not_released:
        err.print(f"{dlq.not_released} message(s) stay hidden until their visibility timeout ends")
    return EXIT_INTERRUPTED if stop.is_set() else EXIT_OK


@contextmanager
def progress(err: Console, total: int) -> Iterator[Callable[[Summary], None]]:
    """A progress bar on a terminal, a line per batch otherwise."""
    if not err.is_terminal:
        yield lambda s: err.print(f"moved {s.moved}, failed {s.failed}")
        return
    columns = (TextColumn("moving"), BarColumn(), MofNCompleteColumn(), TextColumn("failed {task.fields[failed]}"))
    with Progress(*columns, TimeElapsedColumn(), console=err) as bar:
        task = bar.add_task("move", total=total or None, failed=0)
        yield lambda s: bar.update(task, completed=s.moved + s.failed, failed=s.failed)


def run_portable(
    sqs: Any,
    dlq: DeadLetters,
    depth: int,
    queue_url: str,
    args: argparse.Namespace,
    out: Console,
    err: Console,
    stop: Stop,
) -> int:
    total = min(depth, args.max) if args.max else depth
    err.print(f"moving up to {total} of ~{depth} message(s) from {dlq.url} to {queue_url}")
    with progress(err, total) as report, stop_on_signals(stop):
        summary = Mover(sqs, dlq, queue_url, limit=args.max, rate=args.rate, report=report, stop=stop).run()
    try:
        summary.remaining = queue_info(sqs, dlq.url).depth
    except ConfigError:
        summary.remaining = None
    rows: list[tuple[str, int | str]] = [
        ("moved", summary.moved),
        ("failed to send (still in the DLQ)", summary.failed),
    ]
    if summary.not_deleted:
        rows.append(("sent but not deleted (delivered twice)", summary.not_deleted))
    rows.append(("remaining in the DLQ (approx.)", "?" if summary.remaining is None else summary.remaining))
    grid = Table.grid(padding=(0, 2))
    grid.add_column()
    grid.add_column(justify="right")
    for name, value in rows:
        grid.add_row(name, str(value))
    out.print(grid)
    for why, count in summary.send_errors.most_common():
        out.print(f"OrderQueue refused {count}: {why}", style="red")
    if summary.stopped:
        out.print(f"stopped: {summary.stopped}", style="red")
    if summary.interrupted:
        out.print("interrupted: nothing is lost; run again to move the rest", style="yellow")
    if summary.not_released:
        out.print(f"{summary.not_released} message(s) stay hidden in the DLQ until their visibility timeout ends")
    return summary.exit_code()


def confirmed(question: str, *, yes: bool, err: Console) -> bool:
    if yes:
        return True
    if sys.stdin is None or not sys.stdin.isatty():
        err.print("refusing to move without --yes: stdin is not a terminal (--dry-run looks first)", style="red")
        return False
    err.print(f"{question} [y/N] ", end="")
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return True
    err.print("nothing moved")
    return False


def replay(args: argparse.Namespace, out: Console, err: Console) -> int:
    try:
        session = boto3.session.Session(region_name=args.region)
        sqs = session.client("sqs", endpoint_url=args.endpoint_url)
        if args.stack_name:
            cfn = session.client("cloudformation", endpoint_url=args.endpoint_url)
            queue_url, dlq_url = stack_queues(cfn, args.stack_name, args.queues)
        else:
            queue_url, dlq_url = args.queue_url, args.dlq_url
    except BotoCoreError as exc:
        raise ConfigError(str(exc)) from exc
    if queue_url == dlq_url:
        raise ConfigError("the DLQ and the target queue are the same queue")
    dlq_info, queue = queue_info(sqs, dlq_url), queue_info(sqs, queue_url)
    dlq = DeadLetters(sqs, dlq_info.url, visibility_timeout=args.visibility_timeout, wait=args.wait)
    stop = Stop()
    if args.dry_run:
        with stop_on_signals(stop):
            return run_dry(dlq, args.max, out, err, stop)
    if dlq_info.depth == 0:
        out.print(f"the DLQ looks empty (approximate count 0): nothing to move ({dlq_info.url})")
        return EXIT_OK
    scope = f"up to {args.max} of " if args.max else ""
    if not confirmed(
        f"Move {scope}~{dlq_info.depth} message(s) from {dlq_info.url} to {queue.url}?", yes=args.yes, err=err
    ):
        return EXIT_NOT_CONFIRMED
    if not (args.portable or args.max):
        try:
            handle = start_native(sqs, dlq_info, queue, args.rate)
        except RunStopped as exc:
            err.print(str(exc), style="red")
            return EXIT_FAILED
        if handle is not None:
            err.print(f"SQS is moving the DLQ's messages to {queue.url} (task {handle})")
            with stop_on_signals(stop):
                return follow_native(sqs, dlq_info, handle, out, err, stop)
        err.print("this endpoint has no StartMessageMoveTask: moving with the portable mover")
    return run_portable(sqs, dlq, dlq_info.depth, queue.url, args, out, err, stop)


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Outside the moves, SIGTERM is a Ctrl-C (KeyboardInterrupt): nothing is held then."""
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
        err.print(f"{PROG}: error: {problem}", style="red")
        return EXIT_USAGE
    with sigterm_interrupts():
        try:
            return replay(args, out, err)
        except ConfigError as exc:
            err.print(f"{PROG}: {exc}", style="red")
            return EXIT_USAGE
        except KeyboardInterrupt:  # outside the move loops, which report for themselves
            err.print("interrupted: nothing is lost; anything held reappears in the DLQ after its visibility timeout")
            return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
