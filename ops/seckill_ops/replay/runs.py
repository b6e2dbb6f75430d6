"""The portable mover's runs at the console: the dry run lists the DLQ (moving nothing),
the move shows its progress and ends with a summary; each returns the exit code."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from seckill_ops.replay.dead_letters import DeadLetters
from seckill_ops.replay.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, ConfigError, RunStopped
from seckill_ops.replay.mover import Mover, Summary
from seckill_ops.replay.queues import BATCH, queue_info
from seckill_ops.replay.stop import Stop, stop_on_signals


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
