"""``seckill-flash-sale``: the main job, a whole flash sale on this machine.

Applies the schema, starts moto SQS, the local HTTP API (authorizer included)
and the queue feeder, creates a voucher whose sale is open now, mints users,
fires their presses concurrently through the real request path, drains the
queue, re-delivers every order once more, and reports. Exits 1 if any
invariant of SPEC §6 fails, 2 if a local service is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
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
from redis.exceptions import RedisError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from seckill import keys
from seckill.clients import redis_client
from seckill.config import Settings
from seckill.db import Credentials, Database
from seckill.messages import OrderMessage
from seckill.migrate import migrate
from seckill.tokens import mint_tokens
from seckill_local.sqs import LOCAL_AWS, queue_depth, sqs_client

console = Console(stderr=True)

START_REDIS = "redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no"
START_MARIADB = (
    "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd  (or: systemctl start mariadb)"
)


@dataclass
class Press:
    user_id: int
    status: int
    code: str | None
    order_id: str | None
    latency_ms: float


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    voucher_id: int
    users: int
    stock: int
    presses_per_user: int
    requests: int
    accepted: int
    refusals: dict[str, int]
    errors: int
    wall_seconds: float
    throughput_rps: float
    latency_ms: dict[str, float]
    confirmed: int
    failed: int
    failed_reasons: dict[str, int]
    redis_stock: int | None
    mysql_stock: int | None
    redelivered: int
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalStack:
    """The runner's three processes: moto SQS, the HTTP API and the queue feeder."""

    def __init__(self, workdir: Path, env_vars: dict[str, Any], containers: int, visibility_timeout: int) -> None:
        self.workdir = workdir
        self.sqs_port, self.api_port = free_port(), free_port()
        self.sqs_endpoint = f"http://127.0.0.1:{self.sqs_port}"
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.containers = containers
        self.visibility_timeout = visibility_timeout
        env_vars["Parameters"]["AWS_ENDPOINT_URL_SQS"] = self.sqs_endpoint
        self.env_file = workdir / "env.json"
        self.env_file.write_text(json.dumps(env_vars, indent=2), encoding="utf-8")
        self.processes: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        command = [sys.executable, "-m", "seckill_local.runner", *args, "--sqs-endpoint", self.sqs_endpoint]
        # Our own runner with our own arguments; a session of its own so stop() reaches its workers.
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # noqa: S603
        self.processes.append(process)

    def start(self) -> None:
        vt = ["--visibility-timeout", str(self.visibility_timeout)]
        self._spawn("sqs", "start-sqs", "--port", str(self.sqs_port), *vt)
        self._wait("moto SQS", lambda: bool(sqs_client(self.sqs_endpoint).get_queue_url(QueueName="OrderQueue")))
        env = ["--env-vars", str(self.env_file)]
        self._spawn("api", "start-api", "--port", str(self.api_port), "--containers", str(self.containers), *env)
        self._spawn("feed", "feed", *env, *vt)
        http = urllib3.PoolManager(retries=False, timeout=2)
        self._wait("the local HTTP API", lambda: http.request("GET", f"{self.api_url}/voucher/list/1").status == 200)

    def _wait(self, what: str, ready: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a runner process exited early; see the logs in {self.workdir}")
            with contextlib.suppress(Exception):  # not up yet
                if ready():
                    return
            time.sleep(0.3)
        raise RuntimeError(f"{what} did not come up within {timeout:.0f} s; see the logs in {self.workdir}")

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def preflight(settings: Settings, creds: Credentials) -> str | None:
    """None when Redis and MySQL answer; otherwise exactly what to start."""
    try:
        redis_client(settings).ping()
    except RedisError as exc:
        return f"Redis is not reachable at {settings.redis_url} ({exc}).\nStart it with:\n  {START_REDIS}"
    try:
        pymysql.connect(host=creds.host, port=creds.port, user=creds.user, password=creds.password, connect_timeout=3)
    except pymysql.err.OperationalError as exc:
        return (
            f"MySQL/MariaDB is not reachable at {creds.host}:{creds.port} as {creds.user!r} ({exc.args[-1]}).\n"
            f"Start it with:\n  {START_MARIADB}"
        )
    return None


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
) -> tuple[list[Press], float]:
    plan = [user for user in tokens for _ in range(presses)]
    random.shuffle(plan)
    url = f"{api_url}/voucher-order/seckill/{voucher_id}"
    task = progress.add_task("firing presses", total=len(plan))

    def press(user_id: int) -> Press:
        started = time.perf_counter()
        try:
            response = http.request("POST", url, headers={"authorization": tokens[user_id]})
            elapsed = (time.perf_counter() - started) * 1000
            payload = json.loads(response.data) if response.data else {}
            order = payload.get("data") if response.status == 202 else None
            code = payload.get("code") or payload.get("message")
            result = Press(user_id, response.status, code, order, elapsed)
        except Exception as exc:
            result = Press(user_id, 0, type(exc).__name__, None, (time.perf_counter() - started) * 1000)
        progress.advance(task)
        return result

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(press, plan))
    return results, time.perf_counter() - started


def decided(db: Database, voucher_id: int) -> tuple[int, int]:
    with db.transaction() as cursor:
        cursor.execute("SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
        confirmed = int(cursor.fetchone()["n"])
        cursor.execute("SELECT COUNT(*) AS n FROM tb_voucher_order_rejection WHERE voucher_id = %s", (voucher_id,))
        return confirmed, int(cursor.fetchone()["n"])


def wait_drained(
    db: Database,
    sqs: Any,
    queue_url: str,
    voucher_id: int,
    expected: int,
    timeout: float,
    progress: Progress,
    what: str = "persisting orders",
) -> bool:
    """Until the queue is empty and the database has decided every accepted order."""
    task = progress.add_task(what, total=expected)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        confirmed, failed = decided(db, voucher_id)
        progress.update(task, completed=confirmed + failed)
        if confirmed + failed >= expected and queue_depth(sqs, queue_url) == 0:
            return True
        time.sleep(0.25)
    return False


def check_invariants(
    db: Database,
    redis: Any,
    http: urllib3.PoolManager,
    api_url: str,
    voucher_id: int,
    stock: int,
    users: int,
    presses: list[Press],
    tokens: dict[int, str],
) -> list[Check]:
    accepted = [p for p in presses if p.status == 202]
    with db.transaction() as cursor:
        cursor.execute("SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
        orders = {int(r["id"]): int(r["user_id"]) for r in cursor.fetchall()}
        cursor.execute("SELECT order_id FROM tb_voucher_order_rejection WHERE voucher_id = %s", (voucher_id,))
        rejected = {int(r["order_id"]) for r in cursor.fetchall()}
        cursor.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", (voucher_id,))
        mysql_stock = int(cursor.fetchone()["stock"])
    redis_stock = int(redis.get(keys.stock(voucher_id)))
    pending = redis.hlen(keys.pending(voucher_id))
    ids = [int(p.order_id or 0) for p in accepted]
    per_user = Counter(orders.values())
    winners = Counter(p.user_id for p in accepted)
    missing = [i for i in ids if i not in orders and i not in rejected]
    both = [i for i in ids if i in orders and i in rejected]
    unknown = [i for i in orders if i not in set(ids)]
    expected_sold = min(stock, users)

    # The status route must agree with the database for every order a client holds.
    statuses = Counter()
    for p in accepted:
        response = http.request(
            "GET", f"{api_url}/voucher-order/{p.order_id}", headers={"authorization": tokens[p.user_id]}
        )
        statuses[json.loads(response.data)["data"]["status"] if response.status == 200 else str(response.status)] += 1

    return [
        Check(
            "never oversold",
            len(orders) <= stock and redis_stock >= 0 and mysql_stock >= 0,
            f"{len(orders)} confirmed of stock {stock}; Redis stock {redis_stock}, MySQL stock {mysql_stock}",
        ),
        Check(
            "sold exactly the stock",
            len(accepted) == expected_sold and len(orders) == expected_sold,
            f"{len(accepted)} accepted, {len(orders)} confirmed, expected {expected_sold}",
        ),
        Check(
            "one order per user",
            max(per_user.values(), default=0) <= 1 and max(winners.values(), default=0) <= 1,
            f"max orders per user {max(per_user.values(), default=0)}, max 202s per user "
            f"{max(winners.values(), default=0)}",
        ),
        Check(
            "every 202 decided, none lost, none both",
            not missing and not both and len(set(ids)) == len(ids),
            f"{len(missing)} lost, {len(both)} both confirmed and failed, {len(ids) - len(set(ids))} duplicate ids",
        ),
        Check("no order without a 202", not unknown, f"{len(unknown)} orders in MySQL nobody was told about"),
        Check("no reservation left pending", pending == 0, f"{pending} pending marks in Redis"),
        Check("Redis stock equals MySQL stock", redis_stock == mysql_stock, f"{redis_stock} vs {mysql_stock}"),
        Check(
            "status route agrees",
            statuses.get("CONFIRMED", 0) == len(orders) and sum(statuses.values()) == len(ids),
            ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) or "no orders",
        ),
    ]


def redeliver(sqs: Any, queue_url: str, presses: list[Press], voucher_id: int) -> int:
    """Send every accepted order once more, as SQS may: the database must not change."""
    sent = 0
    messages = [
        OrderMessage(int(p.order_id), p.user_id, voucher_id, datetime.now(UTC)).to_json()
        for p in presses
        if p.status == 202 and p.order_id
    ]
    for start in range(0, len(messages), 10):
        chunk = messages[start : start + 10]
        sqs.send_message_batch(
            QueueUrl=queue_url, Entries=[{"Id": str(i), "MessageBody": b} for i, b in enumerate(chunk)]
        )
        sent += len(chunk)
    return sent


def percentiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"p50": values[0] if values else 0.0, "p95": 0.0, "p99": 0.0, "max": max(values, default=0.0)}
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": q[49], "p95": q[94], "p99": q[98], "max": max(values)}


def render(report: Report) -> None:
    out = Console()
    table = Table(
        title=f"Flash sale: voucher {report.voucher_id}, stock {report.stock}, "
        f"{report.users:,} users x {report.presses_per_user} presses",
        show_header=False,
    )
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("requests", f"{report.requests:,}")
    table.add_row("accepted (202)", f"{report.accepted:,}")
    for code, count in sorted(report.refusals.items()):
        table.add_row(f"refused {code}", f"{count:,}")
    table.add_row("errors (5xx, network)", f"{report.errors:,}")
    table.add_row("orders in MySQL: confirmed", f"{report.confirmed:,}")
    table.add_row(
        "orders in MySQL: failed",
        f"{report.failed:,}"
        + (f" ({', '.join(f'{k} {v}' for k, v in report.failed_reasons.items())})" if report.failed_reasons else ""),
    )
    table.add_row("re-delivered, changed nothing", f"{report.redelivered:,}")
    table.add_row("Redis stock / MySQL stock", f"{report.redis_stock} / {report.mysql_stock}")
    table.add_row("throughput", f"{report.throughput_rps:,.0f} req/s over {report.wall_seconds:.2f} s")
    lat = report.latency_ms
    table.add_row(
        "latency p50 / p95 / p99 / max", f"{lat['p50']:.1f} / {lat['p95']:.1f} / {lat['p99']:.1f} / {lat['max']:.1f} ms"
    )
    out.print(table)
    checks = Table(title="Invariants (SPEC §6)")
    checks.add_column("")
    checks.add_column("invariant")
    checks.add_column("evidence")
    for c in report.checks:
        checks.add_row("[green]PASS[/]" if c.ok else "[red]FAIL[/]", c.name, c.detail)
    out.print(checks)
    out.print("[bold green]All invariants hold.[/]" if report.ok else "[bold red]Invariants violated.[/]")


@contextmanager
def workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="seckill-sale-") as tmp:
        yield Path(tmp)


def run(args: argparse.Namespace) -> int:
    os.environ.update({k: v for k, v in LOCAL_AWS.items() if k not in os.environ})
    settings = Settings.from_env({**os.environ, "REDIS_URL": args.redis_url})
    creds = Credentials(args.db_host, args.db_port, args.db_user, args.db_password, args.db_name)
    problem = preflight(settings, creds)
    if problem:
        console.print(f"[bold red]{problem}")
        return 2
    migrate(creds)
    console.print(f"schema applied to [bold]{creds.database}[/] on {creds.host}:{creds.port}")
    redis, db = redis_client(settings), Database(creds)
    env_vars = {
        "Parameters": {
            "REDIS_URL": args.redis_url,
            "DB_HOST": creds.host,
            "DB_PORT": str(creds.port),
            "DB_NAME": creds.database,
            "DB_USER": creds.user,
            "DB_PASSWORD": creds.password,
            "DB_SECRET_ARN": "",
            **LOCAL_AWS,
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
    }
    with workdir(args.logs) as tmp:
        stack = LocalStack(tmp, env_vars, args.containers, visibility_timeout=10)
        try:
            with console.status("starting moto SQS, the local HTTP API and the queue feeder..."):
                stack.start()
            console.print(f"local API on {stack.api_url}, SQS on {stack.sqs_endpoint}, logs in {tmp}")
            return sale(args, stack, redis, db)
        finally:
            stack.stop()


def sale(args: argparse.Namespace, stack: LocalStack, redis: Any, db: Database) -> int:
    http = urllib3.PoolManager(maxsize=args.concurrency + 4, block=True, retries=False, timeout=30)
    now = datetime.now(UTC)
    body = {
        "shopId": args.shop_id,
        "title": f"flash sale {now:%H:%M:%S}",
        "subTitle": "local run",
        "rules": "one per user",
        "payValue": 8000,
        "actualValue": 10000,
        "type": 1,
        "stock": args.stock,
        "beginTime": (now - timedelta(seconds=5)).isoformat(),
        "endTime": (now + timedelta(hours=1)).isoformat(),
    }
    response = signed_post(http, f"{stack.api_url}/voucher/seckill", body)
    if response.status != 201:
        console.print(f"[red]creating the voucher failed: {response.status} {response.data.decode()}")
        return 1
    voucher_id = int(json.loads(response.data)["data"])
    tokens = mint_tokens(redis, range(args.first_user, args.first_user + args.users), ttl_seconds=3600)
    console.print(f"voucher {voucher_id} on sale with stock {args.stock}; {len(tokens):,} users minted")

    sqs = sqs_client(stack.sqs_endpoint)
    queue_url = sqs.get_queue_url(QueueName="OrderQueue")["QueueUrl"]
    columns = (TextColumn("{task.description:<18}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        presses, wall = fire(http, stack.api_url, voucher_id, tokens, args.presses, args.concurrency, progress)
        accepted = sum(p.status == 202 for p in presses)
        drained = wait_drained(db, sqs, queue_url, voucher_id, accepted, args.drain_timeout, progress)
        before = decided(db, voucher_id)
        redelivered = redeliver(sqs, queue_url, presses, voucher_id) if drained else 0
        if redelivered:
            drained = wait_drained(
                db, sqs, queue_url, voucher_id, accepted, args.drain_timeout, progress, "re-delivered"
            )
    after = decided(db, voucher_id)

    checks = check_invariants(db, redis, http, stack.api_url, voucher_id, args.stock, args.users, presses, tokens)
    checks.insert(0, Check("queue drained", drained, f"within {args.drain_timeout:.0f} s"))
    checks.append(
        Check(
            "re-delivery changes nothing",
            before == after,
            f"{redelivered} re-sent; (confirmed, failed) {before} -> {after}",
        )
    )
    refusals = Counter(p.code or str(p.status) for p in presses if 400 <= p.status < 500)
    errors = sum(p.status == 0 or p.status >= 500 for p in presses)
    with db.transaction() as cursor:
        cursor.execute(
            "SELECT reason, COUNT(*) AS n FROM tb_voucher_order_rejection WHERE voucher_id = %s GROUP BY reason",
            (voucher_id,),
        )
        failed_reasons = {r["reason"]: int(r["n"]) for r in cursor.fetchall()}
        cursor.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", (voucher_id,))
        mysql_stock = int(cursor.fetchone()["stock"])
    report = Report(
        voucher_id=voucher_id,
        users=args.users,
        stock=args.stock,
        presses_per_user=args.presses,
        requests=len(presses),
        accepted=accepted,
        refusals=dict(refusals),
        errors=errors,
        wall_seconds=wall,
        throughput_rps=len(presses) / wall if wall else 0.0,
        latency_ms=percentiles([p.latency_ms for p in presses]),
        confirmed=after[0],
        failed=after[1],
        failed_reasons=failed_reasons,
        redis_stock=int(redis.get(keys.stock(voucher_id))),
        mysql_stock=mysql_stock,
        redelivered=redelivered,
        checks=checks,
    )
    render(report)
    if args.json:
        args.json.write_text(json.dumps(asdict(report) | {"ok": report.ok}, indent=2), encoding="utf-8")
    return 0 if report.ok else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="seckill-flash-sale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--users", type=int, default=1000, help="distinct users (default %(default)s)")
    p.add_argument("--stock", type=int, default=200, help="vouchers on sale (default %(default)s)")
    p.add_argument("--presses", type=int, default=3, help="presses per user (default %(default)s)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight at once (default %(default)s)")
    p.add_argument("--containers", type=int, default=4, help="warm API function containers (default %(default)s)")
    p.add_argument("--shop-id", type=int, default=1, help="shop the voucher belongs to (default %(default)s)")
    p.add_argument("--first-user", type=int, default=1, help="first user id (default %(default)s)")
    p.add_argument("--drain-timeout", type=float, default=120, help="seconds to wait for the queue (default 120)")
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
