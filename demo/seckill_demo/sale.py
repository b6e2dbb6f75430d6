"""What a sale needs and does wherever it runs. ``Sale`` is what every sale does
through the API and the queues (a voucher on sale now, the presses, every order
re-delivered once more, the status route asked about every order); ``LocalSale``
is a sale on the local stand-in, which also sees Redis and MySQL (the queue
drained, the dead-letter queue replayed, reconciliation). Every phase of a local
run (``seckill_demo.draw``, ``seckill_demo.chaos``, ``seckill_demo.holds``) acts
on a ``LocalSale``; ``seckill_demo.scenario`` and ``seckill_demo.deployed`` run
the sale and print its report through ``finish``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import urllib3
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from seckill.draw.moves import ClockQueue, restart_stalled
from seckill.edge.state import StateQueue
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderMessage, OrderQueue, queue_depth
from seckill.repair.reconcile import reconcile
from seckill.repair.recovery import recover_if_lost
from seckill_demo.admin_client import AdminClient
from seckill_demo.load import Press, fire, promised
from seckill_demo.report import Report, press_figures, render
from seckill_demo.stack import LocalStack
from seckill_local.sqs import sqs_client

console = Console(stderr=True)
QUEUES = ("OrderQueue", "OrderDeadLetterQueue", "OrderPoisonQueue")
EDGE_STATE_QUEUE = "EdgeStateQueue"
EXPIRY_QUEUE = "OrderExpiryQueue"
CLOCK_QUEUE = "DrawClockQueue"  # the draw clock's (seckill.draw.moves)


def decided(db: Database, voucher_id: int) -> tuple[int, int]:
    """(confirmed, failed) orders of the voucher in MySQL."""

    def count(cursor: Any) -> tuple[int, int]:
        cursor.execute("SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
        confirmed = int(cursor.fetchone()["n"])
        cursor.execute("SELECT COUNT(*) AS n FROM tb_voucher_order_rejection WHERE voucher_id = %s", (voucher_id,))
        return confirmed, int(cursor.fetchone()["n"])

    return db.run(count, read_only=True)


class Sale:
    """What a sale needs wherever it runs: the API, the signed admin client, the queues."""

    def __init__(
        self,
        args: argparse.Namespace,
        api_url: str,
        http: urllib3.PoolManager,
        admin: AdminClient,
        sqs: Any,
        queues: dict[str, str],
    ) -> None:
        self.args = args
        self.api_url = api_url
        # Where the users call the user routes (press, status, cancel): the edge's, when the
        # sale has one; the API's own endpoint refuses them then (seckill.origin).
        self.user_url = api_url
        self.http = http
        self.admin = admin
        self.sqs = sqs
        self.queue_url = queues["OrderQueue"]
        self.dlq_url = queues["OrderDeadLetterQueue"]
        self.poison_url = queues["OrderPoisonQueue"]
        self.voucher_id = 0
        self.passes: dict[int, str] = {}  # a draw sale's: user -> the pass its entry gave
        self.opens_at = 0.0  # epoch seconds of the sale's beginTime

    def create_voucher(self, what: str) -> None:
        """A voucher on sale now; a draw's (``--admission draw``) opens once its entries and the draw are done."""
        now = datetime.now(UTC)
        begin = now - timedelta(seconds=5)
        draw: dict[str, Any] = {}
        if self.args.admission == "draw":
            begin = now + timedelta(seconds=self.args.entry_seconds + self.args.draw_close)
            draw = {
                "admission": "draw",
                "admitFactor": self.args.admit_factor,
                "drawCloseSeconds": self.args.draw_close,
                "waveSeconds": self.args.wave_seconds,
            } | ({} if self.args.admit_rate is None else {"admitRate": self.args.admit_rate})
        self.opens_at = begin.timestamp()
        self.voucher_id = self.admin.create_seckill_voucher(
            {
                "shopId": self.args.shop_id,
                "title": f"flash sale {now:%H:%M:%S}",
                "subTitle": what,
                "rules": "one per user",
                "payValue": 8000,
                "actualValue": 10000,
                "type": 1,
                "stock": self.args.stock,
                "beginTime": begin.isoformat(),
                "endTime": (begin + timedelta(hours=1)).isoformat(),
            }
            | ({} if self.args.hold is None else {"holdSeconds": self.args.hold})
            | draw
        )

    def fire(
        self,
        tokens: dict[int, str],
        progress: Progress,
        on_press: Callable[[int], None] = lambda done: None,
        on_win: Callable[[Press], None] = lambda press: None,
        on_lost: Callable[[Press], None] = lambda press: None,
        timed: list[tuple[float, int]] | None = None,
    ) -> tuple[list[Press], float]:
        """Every user's presses (see ``seckill_demo.load``), at their times if ``timed``."""
        args = self.args
        return fire(
            self.http,
            self.user_url,
            self.voucher_id,
            tokens,
            args.presses,
            args.concurrency,
            progress,
            args.seed,
            on_press,
            on_win,
            self.passes,
            on_lost,
            timed,
        )

    def redeliver(self, presses: list[Press]) -> int:
        """Send every accepted order once more, as SQS may: nothing may change."""
        bodies = [
            OrderMessage(order_id, user_id, self.voucher_id, datetime.now(UTC)).to_json()
            for order_id, user_id in promised(presses)
        ]
        for start in range(0, len(bodies), 10):
            entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])]
            self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        return len(bodies)

    def figures(self, presses: list[Press], wall: float) -> dict[str, Any]:
        """The report's figures about the sale and its presses."""
        args = self.args
        return {
            "voucher_id": self.voucher_id,
            "seed": args.seed,
            "users": args.users,
            "stock": args.stock,
            "presses_per_user": args.presses,
            **press_figures(presses, wall),
        }

    def status(self, order_id: int, token: str) -> tuple[str, str | None]:
        """What the status route says of an order: (its status or the HTTP status, the reason it failed)."""
        url = f"{self.user_url}/voucher-order/{order_id}"
        response = self.http.request("GET", url, headers={"authorization": token})
        if response.status != 200:
            return str(response.status), None
        data = json.loads(response.data)["data"]
        return data["status"], data.get("reason")

    def statuses(self, presses: list[Press], tokens: dict[int, str]) -> dict[int, tuple[str, str | None]]:
        """What the status route says of every order id a client holds."""
        return {order_id: self.status(order_id, tokens[user_id]) for order_id, user_id in promised(presses)}


class LocalSale(Sale):
    """A sale on the local stand-in, which also sees Redis and MySQL."""

    def __init__(
        self,
        args: argparse.Namespace,
        stack: LocalStack,
        redis: Any,
        db: Database,
        workdir: Path,
        http: urllib3.PoolManager,
    ) -> None:
        sqs = sqs_client(stack.sqs_endpoint)
        queues = {name: sqs.get_queue_url(QueueName=name)["QueueUrl"] for name in QUEUES}
        super().__init__(args, stack.api_url, http, AdminClient(http, stack.api_url), sqs, queues)
        edge_queue = ""
        if stack.edge is not None:
            self.user_url = stack.edge.url
            edge_queue = sqs.get_queue_url(QueueName=EDGE_STATE_QUEUE)["QueueUrl"]
        self.edge_states = StateQueue(sqs, edge_queue)  # no queue URL: sends nothing
        self.clock_url = sqs.get_queue_url(QueueName=CLOCK_QUEUE)["QueueUrl"]
        self.stack = stack
        self.redis = redis
        self.db = db
        self.workdir = workdir
        # The client reconnects after a Redis restart and reloads scripts by SHA: one registration serves the run.
        self.scripts = Scripts.register(redis)

    def settings(self) -> Settings:
        return Settings.from_env({**os.environ, "ORDER_QUEUE_URL": self.queue_url, "ORDER_DLQ_URL": self.dlq_url})

    def wait_drained(self, progress: Progress, what: str, need_decided: int = 0) -> bool:
        """Until the queue is empty and MySQL has decided at least ``need_decided`` orders."""
        task = progress.add_task(what, total=need_decided or None)
        deadline = time.monotonic() + self.args.drain_timeout
        while time.monotonic() < deadline:
            confirmed, failed = decided(self.db, self.voucher_id)
            progress.update(task, completed=confirmed + failed)
            if confirmed + failed >= need_decided and queue_depth(self.sqs, self.queue_url) == 0:
                progress.update(task, total=confirmed + failed)
                return True
            time.sleep(0.25)
        return False

    def replay_dlq(self) -> tuple[int, int]:
        """Run the operator's replay command; returns (DLQ depth before, after)."""
        before = queue_depth(self.sqs, self.dlq_url)
        if before:
            command = [
                sys.executable,
                "-m",
                "seckill_ops.dlq_replay",  # seckill-dlq-replay
                "--queue-url",
                self.queue_url,
                "--dlq-url",
                self.dlq_url,
                "--yes",
            ]
            env = {**os.environ, "AWS_ENDPOINT_URL_SQS": self.stack.sqs_endpoint}
            with (self.workdir / "dlq_replay.log").open("ab") as log:
                subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)  # noqa: S603
        return before, queue_depth(self.sqs, self.dlq_url)

    def poisoned(self) -> list[str]:
        """The bodies on the poison queue, read (each once) without deleting any."""
        bodies: list[str] = []
        while messages := self.sqs.receive_message(
            QueueUrl=self.poison_url, MaxNumberOfMessages=10, VisibilityTimeout=60
        ).get("Messages", []):
            bodies.extend(m["Body"] for m in messages)
        return bodies

    def reconcile(self, pending_age: timedelta = timedelta(0)) -> dict[str, int]:
        """ReconcilerFunction's two steps for this sale's voucher, recovery first (so the
        end of a run needs no second schedule to reconcile what was rebuilt): recovery if
        Redis lost data, then one pass (after the sale no request is in flight: any age
        is stale)."""
        recovery = recover_if_lost(self.db, self.redis, self.scripts, self.sqs, self.settings(), wait=0)
        result = reconcile(
            self.db,
            self.redis,
            self.scripts,
            OrderQueue(self.sqs, self.queue_url),
            drained=queue_depth(self.sqs, self.queue_url) == 0,
            pending_age=pending_age,
            voucher_ids=[self.voucher_id],
        )
        # As ReconcilerFunction does: the sale's state sent to the edge again (a unit released
        # or rebuilt here is on sale again; only this tells the edge).
        self.edge_states.sweep(self.scripts, [self.voucher_id])
        # As ReconcilerFunction does: a draw clock whose next message is overdue goes on.
        restarted = restart_stalled(self.db, ClockQueue(self.sqs, self.clock_url))
        return {
            **result.totals(),
            "rebuilt": sum(r.applied for r in recovery.rebuilt),
            "clocks_restarted": len(restarted),
        }

    def failed_reasons(self) -> dict[str, int]:

        def count(cursor: Any) -> dict[str, int]:
            cursor.execute(
                "SELECT reason, COUNT(*) AS n FROM tb_voucher_order_rejection WHERE voucher_id = %s GROUP BY reason",
                (self.voucher_id,),
            )
            return {r["reason"]: int(r["n"]) for r in cursor.fetchall()}

        return self.db.run(count, read_only=True)


def progress_bars() -> Progress:
    columns = (TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console)


def finish(report: Report, args: argparse.Namespace) -> int:
    """Print the report (and write it as JSON if asked); the exit status."""
    render(report)
    if args.json:
        args.json.write_text(json.dumps(asdict(report) | {"ok": report.ok}, indent=2), encoding="utf-8")
    return 0 if report.ok else 1
