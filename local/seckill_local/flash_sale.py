"""``seckill-flash-sale``: the main job, a whole flash sale on this machine.

Applies the schema, starts moto SQS, the local HTTP API (authorizer included)
and the queue feeder, creates a voucher whose sale is open now, mints users,
and fires their presses concurrently through the real request path. Then it
drains the queue, replays the dead-letter queue, reconciles, re-delivers every
order once more, asks the status route about every order id it was given, and
reports. ``--chaos`` injects faults all along (see ``seckill_local.chaos``).

Exit status: 0 every invariant (docs/invariants.md) holds; 1 one does not (or the run
could not complete); 2 a local service is missing or an option is invalid.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pymysql
import urllib3
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as AwsCredentials
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from seckill.clients import redis_client
from seckill.config import Settings
from seckill.db import Credentials, Database
from seckill.messages import OrderMessage, OrderQueue, queue_depth
from seckill.migrate import migrate
from seckill.reconcile import MIN_PENDING_AGE, reconcile
from seckill.recovery import recover_if_lost
from seckill.scripts import Scripts
from seckill.tokens import mint_tokens, store_tokens
from seckill_local import chaos
from seckill_local.proxy import LossyProxy
from seckill_local.report import Check, Fault, Outcome, Press, Report, check_invariants, percentiles, render
from seckill_local.sqs import LOCAL_AWS, sqs_client
from seckill_local.stack import LocalStack, free_port, local_parameters, preflight

console = Console(stderr=True)

# Chaos defaults, per function: every fault on, at rates a 1,000-user sale notices.
CHAOS = {
    "SeckillApiFunction": {"sendFailure": 0.05, "sendReplyLost": 0.05, "sendCrash": 0.02},
    "OrderPersisterFunction": {"persisterCrash": 0.03},
}
TRY_AGAIN_RETRIES = 10  # how often the client app repeats a press answered 503 TRY_AGAIN
ARMED = "chaos.armed"  # while this file is in the run's folder, the functions' faults fire
RECONCILE_EVERY = 2.0  # seconds, in chaos runs; ReconcilerFunction runs every few minutes in AWS
REPLY_LOSS_EVERY = 0.5  # seconds between bursts of lost Redis replies, in chaos runs
REPLY_LOSS_BURST = 4  # replies lost in a row: more than redis-py's retries, so some presses get 503
MALFORMED = ['{"orderId": 17}', "not json", '{"orderId": "1", "userId": "me", "voucherId": 1, "acceptedAt": "x"}']


def signed_post(http: urllib3.PoolManager, url: str, body: dict[str, Any]) -> urllib3.BaseHTTPResponse:
    """Admin routes are IAM-authorized: sign with SigV4 as any AWS client would."""
    data = json.dumps(body)
    request = AWSRequest(method="POST", url=url, data=data, headers={"content-type": "application/json"})
    creds = AwsCredentials(os.environ.get("AWS_ACCESS_KEY_ID", "testing"), os.environ.get("AWS_SECRET_ACCESS_KEY", "t"))
    SigV4Auth(creds, "execute-api", os.environ.get("AWS_DEFAULT_REGION", "us-east-1")).add_auth(request)
    return http.request("POST", url, body=data, headers=dict(request.headers))


def fire(
    http: urllib3.PoolManager,
    api_url: str,
    voucher_id: int,
    tokens: dict[int, str],
    presses: int,
    concurrency: int,
    progress: Progress,
    on_press: Callable[[int], None] = lambda done: None,
) -> tuple[list[Press], float]:
    plan = [user for user in tokens for _ in range(presses)]
    random.shuffle(plan)
    url = f"{api_url}/voucher-order/seckill/{voucher_id}"
    task = progress.add_task("firing presses", total=len(plan))
    done = iter(range(1, len(plan) + 1))  # next() on a shared iterator is atomic under the GIL

    def attempt(user_id: int) -> Press:
        started = time.perf_counter()
        try:
            response = http.request("POST", url, headers={"authorization": tokens[user_id]})
            elapsed = (time.perf_counter() - started) * 1000
            payload = json.loads(response.data) if response.data else {}
            order = payload.get("data") if response.status == 202 else None
            code = payload.get("code") or payload.get("message")
            return Press(user_id, response.status, code, order, elapsed)
        except Exception as exc:
            return Press(user_id, 0, type(exc).__name__, None, (time.perf_counter() - started) * 1000)

    def press(user_id: int) -> list[Press]:
        """One press, as the app would make it: 503 TRY_AGAIN is retried after a short pause."""
        attempts = [attempt(user_id)]
        while attempts[-1].code == "TRY_AGAIN" and len(attempts) <= TRY_AGAIN_RETRIES:
            time.sleep(random.uniform(0.1, 0.4))
            attempts.append(attempt(user_id))
        progress.advance(task)
        on_press(next(done))
        return attempts

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = [a for attempts in pool.map(press, plan) for a in attempts]
    return results, time.perf_counter() - started


def promised(presses: list[Press]) -> set[tuple[int, int]]:
    """(order id, user id) of every order a client was answered 202 with (a retry
    that resumed its order is answered with the same id)."""
    return {(int(p.order_id), p.user_id) for p in presses if p.status == 202 and p.order_id}


def decided(db: Database, voucher_id: int) -> tuple[int, int]:
    """(confirmed, failed) orders of the voucher in MySQL."""

    def count(cursor: Any) -> tuple[int, int]:
        cursor.execute("SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
        confirmed = int(cursor.fetchone()["n"])
        cursor.execute("SELECT COUNT(*) AS n FROM tb_voucher_order_rejection WHERE voucher_id = %s", (voucher_id,))
        return confirmed, int(cursor.fetchone()["n"])

    return db.run(count, read_only=True)


@dataclass
class Sale:
    """Everything one run holds."""

    args: argparse.Namespace
    stack: LocalStack
    redis: Any
    db: Database
    workdir: Path
    private_redis: chaos.PrivateRedis | None
    chaos_log: Path
    http: urllib3.PoolManager
    redis_proxy: LossyProxy | None = None  # between the functions and the private Redis, in chaos runs
    sqs: Any = None
    queue_url: str = ""
    dlq_url: str = ""
    poison_url: str = ""
    voucher_id: int = 0
    scripts: Scripts = field(init=False)

    def __post_init__(self) -> None:
        # The client reconnects after a Redis restart and reloads scripts by SHA: one registration serves the run.
        self.scripts = Scripts.register(self.redis)

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
        """What ReconcilerFunction does, for this sale's voucher: recovery if Redis lost
        data, then one reconciliation pass (after the sale no request is in flight: any
        age is stale)."""
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
        return {**result.totals(), "rebuilt": sum(r.applied for r in recovery.rebuilt)}

    def failed_reasons(self) -> dict[str, int]:

        def count(cursor: Any) -> dict[str, int]:
            cursor.execute(
                "SELECT reason, COUNT(*) AS n FROM tb_voucher_order_rejection WHERE voucher_id = %s GROUP BY reason",
                (self.voucher_id,),
            )
            return {r["reason"]: int(r["n"]) for r in cursor.fetchall()}

        return self.db.run(count, read_only=True)

    def redeliver(self, presses: list[Press]) -> int:
        """Send every accepted order once more, as SQS may: MySQL must not change."""
        bodies = [
            OrderMessage(order_id, user_id, self.voucher_id, datetime.now(UTC)).to_json()
            for order_id, user_id in promised(presses)
        ]
        for start in range(0, len(bodies), 10):
            entries = [{"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])]
            self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        return len(bodies)

    def statuses(self, presses: list[Press], tokens: dict[int, str]) -> Counter[str]:
        """What the status route says of every order id a client holds."""
        seen: Counter[str] = Counter()
        for order_id, user_id in promised(presses):
            url = f"{self.stack.api_url}/voucher-order/{order_id}"
            response = self.http.request("GET", url, headers={"authorization": tokens[user_id]})
            seen[json.loads(response.data)["data"]["status"] if response.status == 200 else str(response.status)] += 1
        return seen


def create_voucher(sale: Sale) -> int:
    now = datetime.now(UTC)
    body = {
        "shopId": sale.args.shop_id,
        "title": f"flash sale {now:%H:%M:%S}",
        "subTitle": "local run",
        "rules": "one per user",
        "payValue": 8000,
        "actualValue": 10000,
        "type": 1,
        "stock": sale.args.stock,
        "beginTime": (now - timedelta(seconds=5)).isoformat(),
        "endTime": (now + timedelta(hours=1)).isoformat(),
    }
    response = signed_post(sale.http, f"{sale.stack.api_url}/voucher/seckill", body)
    if response.status != 201:
        raise RuntimeError(f"creating the voucher failed: {response.status} {response.data.decode()}")
    return int(json.loads(response.data)["data"])


def restart_redis(sale: Sale, tokens: dict[int, str]) -> None:
    """Two incidents at once. The persister has been down since the sale began
    (throttled, or MySQL unreachable) and half of the orders waiting for it have
    been dead-lettered, as SQS does after maxReceiveCount; then Redis dies and comes
    back empty. Then what operations would do: the persister comes back, sessions
    come back as users log in again, and recovery rebuilds the vouchers once the
    queue has drained, counting the dead-lettered orders as sold. The DLQ is
    replayed after the sale."""
    assert sale.private_redis is not None
    sale.private_redis.kill()
    chaos.record(sale.chaos_log, "redis-restart")
    moved = dead_letter_half_of_the_queue(sale)
    chaos.record(sale.chaos_log, "messages-dead-lettered", count=moved)
    sale.stack.pause_feeder(False)
    sale.private_redis.start()
    store_tokens(sale.redis, tokens, ttl_seconds=3600)
    for attempt in range(5):  # the connection killer may hit this run's own connections too
        try:
            done = recover_if_lost(sale.db, sale.redis, sale.scripts, sale.sqs, sale.settings(), wait=15)
            if not done.blocked:
                break
            chaos.record(sale.chaos_log, "redis-rebuild-deferred", why=done.blocked)
        except pymysql.Error:
            sale.db.close()
        time.sleep(0.2 * (attempt + 1))
    else:
        return  # the periodic reconciliation (which recovers first) rebuilds it once it can
    rebuilt = sum(r.applied for r in done.rebuilt)
    chaos.record(sale.chaos_log, "redis-rebuilt", vouchers=rebuilt, deadLetters=done.dead_letters)


def dead_letter_half_of_the_queue(sale: Sale) -> int:
    """Move every other message of OrderQueue to its DLQ; the rest are visible again
    after the visibility timeout."""
    moved = seen = 0
    while batch := sale.sqs.receive_message(QueueUrl=sale.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
        "Messages", []
    ):
        for m in batch:
            seen += 1
            if seen % 2:
                sale.sqs.send_message(QueueUrl=sale.dlq_url, MessageBody=m["Body"])
                sale.sqs.delete_message(QueueUrl=sale.queue_url, ReceiptHandle=m["ReceiptHandle"])
                moved += 1
    return moved


def lose_redis_replies(proxy: LossyProxy, armed: Path, stop: threading.Event) -> None:
    """Bursts of Redis answers lost on their way back to the functions (the scripts ran)."""
    while not stop.wait(REPLY_LOSS_EVERY):
        if armed.exists():
            proxy.drop_replies = REPLY_LOSS_BURST


def reconcile_periodically(sale: Sale, stop: threading.Event, totals: Counter[str]) -> None:
    """What ReconcilerFunction's schedule does in AWS, at a pace that fits a short sale."""
    while not stop.wait(RECONCILE_EVERY):
        try:
            totals.update(sale.reconcile(pending_age=MIN_PENDING_AGE))
        except Exception:  # a failed scheduled run; the next one tries again
            sale.db.close()


def fire_with_chaos(
    sale: Sale, tokens: dict[int, str], progress: Progress, creds: Credentials, reconciled: Counter[str]
) -> tuple[list[Press], float]:
    args = sale.args
    for body in MALFORMED:
        sale.sqs.send_message(QueueUrl=sale.queue_url, MessageBody=body)
        chaos.record(sale.chaos_log, "malformed-message", body=body)
    restart_at = int(len(tokens) * args.presses * 0.4)
    trigger = threading.Event()
    restarter = threading.Thread(target=lambda: trigger.wait() and restart_redis(sale, tokens), daemon=True)
    restarter.start()
    armed = sale.workdir / ARMED
    armed.touch()
    sale.stack.pause_feeder(True)  # until the Redis restart: orders wait on the queue
    spare = {sale.db.connection().thread_id()}
    stop = threading.Event()
    reconciler = threading.Thread(target=reconcile_periodically, args=(sale, stop, reconciled), daemon=True)
    reconciler.start()
    loser = threading.Thread(target=lose_redis_replies, args=(sale.redis_proxy, armed, stop), daemon=True)
    loser.start()
    with chaos.ConnectionKiller(creds, sale.chaos_log, interval=0.5, share=0.5, spare=spare):
        result = fire(
            sale.http,
            sale.stack.api_url,
            sale.voucher_id,
            tokens,
            args.presses,
            args.concurrency,
            progress,
            on_press=lambda done: done == restart_at and trigger.set(),
        )
        trigger.set()
        restarter.join()
    armed.unlink()
    stop.set()
    reconciler.join()
    loser.join()
    sale.redis_proxy.drop_replies = 0
    chaos.record(sale.chaos_log, "redis-replies-lost", count=sale.redis_proxy.dropped)
    return result


def faults_table(
    sale: Sale, presses: list[Press], reconciled: dict[str, int], dlq: tuple[int, int], poisoned: list[str]
) -> list[Fault]:
    log = chaos.read_log(sale.chaos_log)
    injected = Counter(line["fault"] for line in log)
    statuses = Counter(p.status for p in presses)

    def total(fault: str, field: str) -> int:
        return sum(line.get(field, 0) for line in log if line["fault"] == fault)

    failed = sale.failed_reasons()
    resumed = sum(n - 1 for n in Counter((p.order_id, p.user_id) for p in presses if p.status == 202).values())
    return [
        Fault(
            "SQS send refused (nothing stored)",
            injected["sqs-send-failure"],
            "reservation released, client told 503 TRY_AGAIN, the app retried",
            f"{statuses[503]} answers 503 (with the outages')",
        ),
        Fault(
            "SQS stored the order, its reply was lost",
            injected["sqs-reply-lost"],
            "send in doubt: answered 202 and promised (re-queued if it never arrives); copies absorbed",
            "see invariants: no order lost, none twice",
        ),
        Fault(
            "Redis answers lost (the scripts ran)",
            total("redis-replies-lost", "count"),
            "redis-py's retry gets its own reservation back; after a 503 the next press takes it over or "
            "resumes its order id",
            f"{resumed} presses answered with the order of an earlier press",
        ),
        Fault(
            "API container crashed after the gate, before the send",
            injected["api-crash-before-send"],
            "no 202 was given: the user's next press resumes the reservation, or reconciliation fails "
            "the order id (NOT_QUEUED) and frees the unit",
            f"reconciliation failed {reconciled.get('failed', 0)}, released {reconciled.get('released', 0)}; "
            f"{statuses[500]} answers 500",
        ),
        Fault(
            "persister crashed mid-batch",
            injected["persister-crash-mid-batch"],
            "batch redelivered after the visibility timeout; idempotent on order id",
            "see invariants",
        ),
        Fault(
            "MySQL connection killed",
            injected["mysql-connection-killed"],
            "transaction rolled back, batch item failure, SQS retried (DLQ + replay past maxReceiveCount)",
            f"DLQ held {dlq[0]} before replay",
        ),
        Fault(
            "malformed message",
            injected["malformed-message"],
            "moved unchanged to the poison queue with its reason, acknowledged; never dead-lettered",
            f"poison queue holds {len(set(poisoned))} distinct ({len(poisoned)} with the copies a crash "
            f"mid-batch moved twice); DLQ holds {dlq[1]} after replay",
        ),
        Fault(
            "Redis restarted empty, orders waiting in the DLQ",
            injected["redis-restart"],
            "(the persister was down until then, and half the waiting orders were dead-lettered) 503 until "
            "the queue drained; vouchers rebuilt from MySQL with the dead-lettered orders counted as sold "
            "(no false 404, no unit sold twice); sessions restored",
            f"{total('messages-dead-lettered', 'count')} messages dead-lettered, "
            f"{total('redis-rebuilt', 'deadLetters')} orders counted at the rebuild; "
            f"{injected['redis-rebuild-deferred']} rebuilds deferred; {statuses[404]} answers 404; "
            f"FAILED: {', '.join(f'{k} {v}' for k, v in sorted(failed.items())) or 'none'}",
        ),
    ]


def run(args: argparse.Namespace) -> int:
    os.environ.update({k: v for k, v in LOCAL_AWS.items() if k not in os.environ})
    creds = Credentials(args.db_host, args.db_port, args.db_user, args.db_password, args.db_name)
    if args.chaos and not shutil.which("redis-server"):
        console.print("[bold red]--chaos restarts a Redis of its own: redis-server must be installed")
        return 2
    problem = preflight(Settings.from_env({**os.environ, "REDIS_URL": args.redis_url}), creds)
    if problem:
        console.print(f"[bold red]{problem}")
        return 2
    migrate(creds)
    console.print(f"schema applied to [bold]{creds.database}[/] on {creds.host}:{creds.port}")
    with workdir(args.logs) as tmp:
        private = chaos.PrivateRedis(tmp, free_port()) if args.chaos else None
        redis_url = functions_redis_url = args.redis_url
        proxy = None
        if private is not None:
            private.start()
            redis_url = private.url
            # The functions reach it through a proxy that loses some answers (only those to scripts).
            proxy = LossyProxy("127.0.0.1", private.port)
            proxy.only_after = b"EVALSHA"
            functions_redis_url = f"redis://{proxy.url_host}/0"
            console.print(f"chaos: a Redis of the run's own on {redis_url}, restarted mid-sale")
        chaos_log = tmp / "chaos.jsonl"
        chaos_log.unlink(missing_ok=True)  # a kept --logs folder may hold an earlier run's
        env_vars: dict[str, Any] = {"Parameters": local_parameters(functions_redis_url, creds)}
        if args.chaos:
            for function, faults in CHAOS.items():
                config = {**faults, "log": str(chaos_log), "armed": str(tmp / ARMED)}
                env_vars[function] = {chaos.ENV: json.dumps(config)}
        stack = LocalStack(tmp, env_vars, args.containers, visibility_timeout=2 if args.chaos else 10)
        redis = redis_client(Settings.from_env({**os.environ, "REDIS_URL": redis_url}))
        http = urllib3.PoolManager(maxsize=args.concurrency + 4, block=True, retries=False, timeout=30)
        sale = Sale(args, stack, redis, Database(creds), tmp, private, chaos_log, http, proxy)
        try:
            with console.status("starting moto SQS, the local HTTP API and the queue feeder..."):
                stack.start()
            console.print(f"local API on {stack.api_url}, SQS on {stack.sqs_endpoint}, logs in {tmp}")
            return run_sale(sale, creds)
        finally:
            stack.stop()
            if proxy is not None:
                proxy.close()
            if private is not None:
                private.kill()


def run_sale(sale: Sale, creds: Credentials) -> int:
    args = sale.args
    sale.voucher_id = create_voucher(sale)
    tokens = mint_tokens(sale.redis, range(args.first_user, args.first_user + args.users), ttl_seconds=3600)
    console.print(f"voucher {sale.voucher_id} on sale with stock {args.stock}; {len(tokens):,} users minted")
    sale.sqs = sqs_client(sale.stack.sqs_endpoint)
    sale.queue_url = sale.sqs.get_queue_url(QueueName="OrderQueue")["QueueUrl"]
    sale.dlq_url = sale.sqs.get_queue_url(QueueName="OrderDeadLetterQueue")["QueueUrl"]
    sale.poison_url = sale.sqs.get_queue_url(QueueName="OrderPoisonQueue")["QueueUrl"]

    columns = (TextColumn("{task.description:<22}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        reconciled: Counter[str] = Counter()
        if args.chaos:
            presses, wall = fire_with_chaos(sale, tokens, progress, creds, reconciled)
        else:
            presses, wall = fire(
                sale.http, sale.stack.api_url, sale.voucher_id, tokens, args.presses, args.concurrency, progress
            )
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

    outcome = Outcome.read(sale.db, sale.redis, sale.voucher_id)
    poisoned = sale.poisoned() if args.chaos else []
    checks = check_invariants(
        outcome,
        presses,
        sale.statuses(presses, tokens),
        stock=args.stock,
        users=args.users,
        chaos=args.chaos,
    )
    checks.insert(0, Check("queue drained", drained, f"within {args.drain_timeout:.0f} s per phase"))
    checks.append(
        Check(
            "re-delivery changes nothing",
            before == after,
            f"{redelivered} re-sent; (confirmed, failed) {before} -> {after}",
        )
    )
    if args.chaos:
        # At least once: a crash after a record's move, before its batch was acknowledged, moves it again.
        checks.append(
            Check(
                "malformed messages in the poison queue, DLQ empty after the replay",
                sorted(set(poisoned)) == sorted(MALFORMED) and dlq[1] == 0,
                f"poison queue: {len(set(poisoned))} distinct bodies ({len(poisoned)} copies), "
                f"{len(MALFORMED)} malformed injected; DLQ {dlq[0]} -> {dlq[1]}",
            )
        )
    failed_reasons = sale.failed_reasons()
    report = Report(
        voucher_id=sale.voucher_id,
        users=args.users,
        stock=args.stock,
        presses_per_user=args.presses,
        requests=len(presses),
        accepted=accepted,
        refusals=dict(Counter(p.code or str(p.status) for p in presses if 400 <= p.status < 500)),
        errors=sum(p.status == 0 or p.status >= 500 for p in presses),
        wall_seconds=wall,
        throughput_rps=len(presses) / wall if wall else 0.0,
        latency_ms=percentiles([p.latency_ms for p in presses]),
        confirmed=after[0],
        failed=after[1],
        failed_reasons=failed_reasons,
        redis_stock=outcome.redis_stock,
        mysql_stock=outcome.mysql_stock,
        redelivered=redelivered,
        reconciliation=dict(reconciled),
        checks=checks,
        faults=faults_table(sale, presses, reconciled, dlq, poisoned) if args.chaos else [],
    )
    render(report)
    if args.json:
        args.json.write_text(json.dumps(asdict(report) | {"ok": report.ok}, indent=2), encoding="utf-8")
    return 0 if report.ok else 1


@contextmanager
def workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="seckill-sale-") as tmp:
        yield Path(tmp)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="seckill-flash-sale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--users", type=int, default=1000, help="distinct users (default %(default)s)")
    p.add_argument("--stock", type=int, default=200, help="vouchers on sale (default %(default)s)")
    p.add_argument("--presses", type=int, default=3, help="presses per user (default %(default)s)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight at once (default %(default)s)")
    p.add_argument("--containers", type=int, default=4, help="warm API function containers (default %(default)s)")
    p.add_argument(
        "--chaos",
        action="store_true",
        help="inject every fault: SQS sends refused, API crashes after the gate, persister crashes "
        "mid-batch, MySQL connections killed, malformed messages, Redis restarted empty mid-sale",
    )
    p.add_argument("--shop-id", type=int, default=1, help="shop the voucher belongs to (default %(default)s)")
    p.add_argument("--first-user", type=int, default=1, help="first user id (default %(default)s)")
    p.add_argument("--drain-timeout", type=float, default=120, help="seconds to wait per drain phase (default 120)")
    p.add_argument("--redis-url", default=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    p.add_argument("--db-host", default=os.environ.get("DB_HOST", "127.0.0.1"))
    p.add_argument("--db-port", type=int, default=int(os.environ.get("DB_PORT", "3306")))
    p.add_argument("--db-user", default=os.environ.get("DB_USER", "root"))
    p.add_argument("--db-password", default=os.environ.get("DB_PASSWORD", ""))
    p.add_argument(
        "--db-name", default=os.environ.get("DB_NAME", "seckill"), help="created if missing (default %(default)s)"
    )
    p.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    p.add_argument("--logs", type=Path, help="keep the runner's logs in this folder (default: a temporary one)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name in ("users", "stock", "presses", "concurrency", "containers", "shop_id", "first_user"):
        if getattr(args, name) < 1:
            parser().error(f"--{name.replace('_', '-')} must be at least 1")
    try:
        return run(args)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted")
        return 130
    except RuntimeError as exc:
        console.print(f"[bold red]{exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
