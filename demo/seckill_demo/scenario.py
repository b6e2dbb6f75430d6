"""The sale, start to end. ``Sale`` is what every sale does through the API and the
queues (a voucher on sale now, the presses, every order re-delivered once more,
the status route asked about every order); ``run_local_sale`` runs it on the local
stand-in, which also sees Redis and MySQL: users minted, presses (under fire in a
chaos run), the queue drained, the dead-letter queue replayed, reconciliation,
and every invariant checked. ``seckill_demo.deployed`` runs it against a stack."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import urllib3
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from seckill.edge.state import StateQueue
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderMessage, OrderQueue, queue_depth
from seckill.repair.reconcile import reconcile
from seckill.repair.recovery import recover_if_lost
from seckill.tokens import mint_tokens
from seckill_demo.admin_client import AdminClient
from seckill_demo.chaos import MALFORMED, Chaos, edge_faults, edge_faults_table
from seckill_demo.draw import (
    EDGE_SKEW,
    DrawRun,
    Entry,
    admitted_crowd,
    check_draw,
    draw_figures,
    entry_budget,
    move_marks,
    open_draw,
)
from seckill_demo.edge import (
    REFUSED_ON_SALE_WITHIN,
    RETURN_CLEARS_WITHIN,
    EdgeWatch,
    check_edge,
    check_refused_on_sale,
    check_server,
    edge_figures,
    edge_schedule,
    plot_edge,
    since,
)
from seckill_demo.holds import HoldsOutcome, HoldsRun, StockSampler, check_holds, return_lag
from seckill_demo.load import TOKEN_TTL, Press, fire, promised
from seckill_demo.report import Check, Outcome, Report, check_invariants, press_figures, render
from seckill_demo.stack import LocalStack
from seckill_demo.timing import PRESS_ROUTE, durations, function_time
from seckill_local.sqs import sqs_client
from seckill_ops.draw import fetch_record

console = Console(stderr=True)
QUEUES = ("OrderQueue", "OrderDeadLetterQueue", "OrderPoisonQueue")
EDGE_STATE_QUEUE = "EdgeStateQueue"


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
            }
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
    ) -> tuple[list[Press], float]:
        """Every user's presses (see ``seckill_demo.load``)."""
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
        chaos: Chaos | None,
    ) -> None:
        sqs = sqs_client(stack.sqs_endpoint)
        queues = {name: sqs.get_queue_url(QueueName=name)["QueueUrl"] for name in QUEUES}
        super().__init__(args, stack.api_url, http, AdminClient(http, stack.api_url), sqs, queues)
        edge_queue = ""
        if stack.edge is not None:
            self.user_url = stack.edge.url
            edge_queue = sqs.get_queue_url(QueueName=EDGE_STATE_QUEUE)["QueueUrl"]
        self.edge_states = StateQueue(sqs, edge_queue)  # no queue URL: sends nothing
        self.stack = stack
        self.redis = redis
        self.db = db
        self.workdir = workdir
        self.chaos = chaos
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
        return {**result.totals(), "rebuilt": sum(r.applied for r in recovery.rebuilt)}

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


def run_local_sale(sale: LocalSale, creds: Credentials) -> int:
    args = sale.args
    tokens = mint_tokens(sale.redis, range(args.first_user, args.first_user + args.users), ttl_seconds=TOKEN_TTL)
    if args.admission == "draw" and args.entry_seconds is None:
        with progress_bars() as progress:
            args.entry_seconds = entry_budget(sale, tokens, progress)
    sale.create_voucher("local run")
    opens = "on sale" if args.admission == "race" else f"(a draw) opens in {sale.opens_at - time.time():.0f} s"
    console.print(f"voucher {sale.voucher_id} {opens} with stock {args.stock}; {len(tokens):,} users minted")

    holds_on = bool(args.no_show or args.cancel) or args.hold is not None
    edge = sale.stack.edge
    entries: dict[int, Entry] = {}
    passless: list[int] = []
    if args.admission == "draw":
        with progress_bars() as progress:
            entries, passless = open_draw(sale, tokens, progress)
    offset = time.time() - time.monotonic()  # a press's sent time in epoch seconds
    counted = None if edge is None else edge.stats()  # the readiness probes (and the entries) went through it too
    with ExitStack() as stack, progress_bars() as progress, StockSampler(sale.redis, sale.voucher_id) as sampler:
        watch = None
        if edge is not None:
            watch = stack.enter_context(
                EdgeWatch(sale.redis, sale.voucher_id, edge.reader(sale.voucher_id), sampler.started)
            )
            stack.enter_context(edge_schedule(sale.edge_states, sale.scripts, sale.redis, sale.voucher_id))
        reconciled: Counter[str] = Counter()
        crowd = None
        if entries and holds_on:
            crowd = admitted_crowd(sale, tokens, entries, patience=2 * args.wave_seconds + args.drain_timeout)
        run = HoldsRun(sale, sampler, crowd) if holds_on else None
        # Winners pay (or cancel) as soon as they win, while the sale and the queue go on.
        on_win = run.winners(tokens, wave=1) if run is not None else lambda press: None
        if sale.chaos is not None:
            presses, wall = sale.chaos.fire(sale, tokens, progress, creds, reconciled, on_win)
        else:
            presses, wall = sale.fire(tokens, progress, on_win=on_win)
        sampler.mark("wave 1 ends")
        if run is not None and sale.chaos is not None:
            # From here to the end: Redis answers lost, those of the gives-back among them.
            stack.enter_context(sale.chaos.losing_replies())
            if edge is not None:  # and, in the waves, Redis forgetting its edge record, a 503 after a sell-out
                stack.enter_context(edge_faults(sale, sale.chaos.log, args.first_user + args.users + 10**6))
        # A press that resumed an earlier press's order is answered with the same id.
        accepted = len(promised(presses))
        drained = sale.wait_drained(progress, "draining the queue")
        dlq = sale.replay_dlq()
        drained = drained and sale.wait_drained(progress, "draining the replay")
        reconciled.update(sale.reconcile())
        drained = drained and sale.wait_drained(progress, "persisting orders", need_decided=accepted)
        reconciled.update(sale.reconcile())  # clears what the first pass re-queued, repairs drift
        before = decided(sale.db, sale.voucher_id)
        redelivered = sale.redeliver(presses)
        drained = drained and sale.wait_drained(progress, "re-delivered", need_decided=accepted)
        after = decided(sale.db, sale.voucher_id)
        rush = list(presses)  # the report's press figures are the first wave's
        if run is not None:
            run.waves(progress, presses, tokens)
    draw_run = None
    if entries:
        sale.admin.stop(sale.voucher_id)  # the sale is over: the seed is revealed
        record = fetch_record(sale.api_url, sale.voucher_id, sale.http)
        draw_run = DrawRun(
            sale.voucher_id, record, entries, passless, sale.opens_at, offset, args.admit_factor, args.stock,
            args.presses, EDGE_SKEW,
        )  # fmt: skip
    plot_path = args.plot or (Path(f"seckill-sale-{sale.voucher_id}-stock.png") if holds_on else None)
    plot = "" if plot_path is None else sampler.plot(plot_path, f"voucher {sale.voucher_id}: Redis stock")
    edge_report, edge_plot, edge_checks = None, "", []
    if edge is not None and watch is not None:
        stats = since(edge.stats(), counted)
        edge_report = edge_figures(presses, watch, stats, first_wave=len(rush))
        # A chaos run gives units back unnoticed (a 503's release, Redis forgetting): the sweep clears them.
        within = REFUSED_ON_SALE_WITHIN if sale.chaos is not None else RETURN_CLEARS_WITHIN
        unsure = (lambda press: False) if draw_run is None else draw_run.near_move
        edge_checks = [
            *check_edge(presses, watch, edge_report, len(rush), within, unsure),
            check_refused_on_sale(watch),
            check_server(presses, stats),
        ]
        path = args.edge_plot or Path(f"seckill-sale-{sale.voucher_id}-edge.png")
        moves = [] if draw_run is None else move_marks(draw_run, offset + watch.started)
        edge_plot = plot_edge(
            presses,
            watch,
            edge_report,
            path,
            f"voucher {sale.voucher_id}: presses at the edge and at the function",
            moves,
        )

    outcome = Outcome.read(sale.db, sale.redis, sale.voucher_id)
    poisoned = sale.poisoned() if sale.chaos is not None else []
    statuses = sale.statuses(presses, tokens)
    held = HoldsOutcome.read(sale.db, sale.redis, sale.voucher_id) if run is not None else None
    checks = check_invariants(
        outcome,
        presses,
        Counter(status for status, _ in statuses.values()),
        stock=args.stock,
        users=len(tokens),
        chaos=sale.chaos is not None,
        closed=0 if held is None else held.closed,
    )
    checks.insert(0, Check("queue drained", drained, f"within {args.drain_timeout:.0f} s per phase"))
    checks.append(
        Check(
            "re-delivery changes nothing",
            before == after,
            f"{redelivered} re-sent; (confirmed, failed) {before} -> {after}",
        )
    )
    if sale.chaos is not None:
        # At least once: a crash after a record's move, before its batch was acknowledged, moves it again.
        checks.append(
            Check(
                "malformed messages in the poison queue, DLQ empty after the replay",
                sorted(set(poisoned)) == sorted(MALFORMED) and dlq[1] == 0,
                f"poison queue: {len(set(poisoned))} distinct bodies ({len(poisoned)} copies), "
                f"{len(MALFORMED)} malformed injected; DLQ {dlq[0]} -> {dlq[1]}",
            )
        )
    confirmed, failed = decided(sale.db, sale.voucher_id)  # with the later waves' orders
    report = Report(
        **sale.figures(rush, wall),
        confirmed=confirmed,
        failed=failed,
        failed_reasons=sale.failed_reasons(),
        redis_stock=outcome.redis_stock,
        mysql_stock=outcome.mysql_stock,
        redelivered=redelivered,
        reconciliation=dict(reconciled),
        checks=checks,
        faults=sale.chaos.faults_table(sale, presses, reconciled, dlq, poisoned) if sale.chaos is not None else [],
        plot=plot,
        edge=edge_report,
        edge_plot=edge_plot,
    )
    report.checks.extend(edge_checks)
    press_durations = durations(sale.stack.log("api"), "SeckillApiFunction", PRESS_ROUTE)
    report.function_time = function_time(press_durations, args.containers)
    if draw_run is not None:
        report.draw = draw_figures(draw_run, presses)
        report.checks.extend(check_draw(draw_run, presses, report.draw, outcome.orders, args.seed))
    if held is not None and run is not None:
        report.return_lag = return_lag(sale.db, sale.voucher_id)
        report.reconciliation = dict(reconciled + run.reconciled)
        if sale.chaos is not None:
            answers = Counter(f"{a.action} {a.code}" for a in run.holds.answers)
            report.faults.extend(sale.chaos.holds_faults(run.holds, answers))
            if edge is not None:
                refused = next(c for c in edge_checks if c.name.startswith("no unit refused")).detail
                report.faults.extend(edge_faults_table(sale.chaos.log, f"see checks: {refused}"))
        report.checks.extend(check_holds(held, run.holds, {i: s for i, (s, _) in statuses.items()}, stock=args.stock))
        report.holds = run.holds.figures(held, args.stock)
    return finish(report, args)
