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

This module is the command (its options, the confirmation, which mover runs); the
workings are in ``seckill_ops.replay``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import boto3
from botocore.exceptions import BotoCoreError
from rich.console import Console

from seckill_ops.replay.dead_letters import DeadLetters
from seckill_ops.replay.exits import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_CONFIRMED,
    EXIT_OK,
    EXIT_USAGE,
    ConfigError,
    RunStopped,
)
from seckill_ops.replay.native import NATIVE_MAX_RATE, follow_native, start_native
from seckill_ops.replay.queues import queue_info, stack_queues
from seckill_ops.replay.runs import run_dry, run_portable
from seckill_ops.replay.stop import Stop, sigterm_interrupts, stop_on_signals
from seckill_ops.stack_outputs import REPLAYABLE

PROG = "seckill-dlq-replay"

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
    # A replayed expiry arrives at once: the expiry function expires its order, or
    # sends it again if it is early.
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


# ---------------------------------------------------------------- the command


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
