"""What every benchmark runs on: a MySQL database of its own (random name, dropped
at the end), the shared Redis (random voucher ids, their keys removed at the
end), an SQS stand-in in a process of its own (``benchmarks.servers``), and
each function's environment as ``template.yaml`` gives it, pointed at them."""

from __future__ import annotations

import contextlib
import os
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pymysql

from benchmarks.counters import Counters
from benchmarks.servers import SqsServer, unavailable
from seckill import vouchers
from seckill.infra import keys
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database, connect
from seckill.migrate import migrate
from seckill_demo.stack import preflight
from seckill_local.lambdas import function_environment, local_parameters
from seckill_local.ports import free_port
from seckill_local.sqs import LOCAL_AWS, ensure_queues, sqs_client
from seckill_local.template import Template

DB_PREFIX = "seckill_bench_"
HINT_TTL = 900


@dataclass(frozen=True)
class StackInfo:
    """What a spawned process needs to reach the same stack (picklable)."""

    redis_url: str
    creds: Credentials
    sqs_endpoint: str
    queues: dict[str, str]
    transport: str


def far_id() -> int:
    """A user or voucher id no other run (tests, other benchmarks) is likely to hold."""
    return secrets.randbelow(10**12) + 10**9


def function_env(info: StackInfo, logical_id: str, template: Template | None = None) -> dict[str, str]:
    """The function's variables from the template, pointed at this stack, with Powertools as
    deployed (metrics flushed to stdout, the template's log level) except tracing: there is
    no X-Ray daemon here, so tracing is off, as in every local run."""
    template = template or Template.load()
    params = local_parameters(info.redis_url, info.creds)
    params.update(
        {
            "AWS_ENDPOINT_URL_SQS": info.sqs_endpoint,
            "POWERTOOLS_METRICS_DISABLED": "false",
            "POWERTOOLS_LOG_LEVEL": template.parameters.get("LogLevel") or "INFO",
            # The status hints of benchmark orders need not outlive the run in the shared Redis.
            "SECKILL_STATUS_TTL_SECONDS": str(HINT_TTL),
        }
    )
    refs = {**template.parameters, **params, **info.queues}
    env = {**LOCAL_AWS, "POWERTOOLS_TRACE_DISABLED": "true"}
    env.update(function_environment(template, template.functions[logical_id], refs, {"Parameters": params}))
    return env


class BenchStack:
    """Started by the main process: the run's database, its SQS server and queues."""

    def __init__(self, info: StackInfo, server: SqsServer) -> None:
        self.info = info
        self.server = server

    @classmethod
    def start(cls, transport: str = "werkzeug") -> BenchStack:
        """Raises SystemExit(message) naming what to start when Redis or MySQL is down."""
        settings = Settings.from_env()
        name = f"{DB_PREFIX}{secrets.token_hex(4)}"
        creds = Credentials(settings.db_host, settings.db_port, settings.db_user, settings.db_password, name)
        problem = preflight(settings, creds) or unavailable(transport)
        if problem:
            raise SystemExit(problem)
        migrate(creds)
        conn = connect(creds)
        with conn.cursor() as cursor:
            # Voucher ids become Redis keys: far from other runs' ids.
            cursor.execute(f"ALTER TABLE tb_voucher AUTO_INCREMENT = {far_id()}")
        conn.commit()
        conn.close()
        server = SqsServer(transport, free_port())
        try:
            sqs = sqs_client(server.endpoint)
            queues = ensure_queues(sqs, Template.load(), prefix=f"bench{uuid.uuid4().hex[:8]}-", visibility_timeout=30)
        except Exception:
            server.stop()
            raise
        return cls(StackInfo(settings.redis_url, creds, server.endpoint, queues, transport), server)

    def close(self) -> None:
        """Every voucher of the run's database loses its Redis keys, a draw's cursor too (whichever process made
        it), then the database goes; the SQS server stops."""
        self.server.stop()
        redis = redis_client(Settings.from_env({"REDIS_URL": self.info.redis_url}))
        with contextlib.suppress(pymysql.Error):
            conn = connect(self.info.creds)
            with conn.cursor() as cursor:
                cursor.execute("SELECT voucher_id FROM tb_seckill_voucher")
                for row in cursor.fetchall():
                    redis.delete(*keys.gate_keys(int(row["voucher_id"])))
                cursor.execute(f"DROP DATABASE IF EXISTS `{self.info.creds.database}`")
            conn.close()


class Services:
    """Clients of the stack, made in the process that uses them."""

    def __init__(self, info: StackInfo) -> None:
        self.info = info
        self.template = Template.load()
        self.db = Database(info.creds)
        self.redis = redis_client(Settings.from_env({"REDIS_URL": info.redis_url}))
        self.sqs = sqs_client(info.sqs_endpoint)
        self.counters = Counters(connect(info.creds), self.redis)

    def env(self, logical_id: str) -> dict[str, str]:
        return function_env(self.info, logical_id, self.template)

    def new_voucher(self, stock: int) -> int:
        return create_voucher(self.db, self.redis, stock)


def on_sale_now(stock: int, **fields: Any) -> vouchers.SeckillVoucherIn:
    """A seckill voucher's body whose window opened a minute ago; ``fields`` change or add to it."""
    now = datetime.now(UTC)
    body: dict[str, Any] = {
        "shop_id": 1,
        "title": "benchmark voucher",
        "pay_value": 8000,
        "actual_value": 10000,
        "stock": stock,
        "begin_time": now - timedelta(minutes=1),
        "end_time": now + timedelta(hours=2),
    }
    return vouchers.SeckillVoucherIn(**(body | fields))


def create_voucher(db: Database, redis: Any, stock: int) -> int:
    """A seckill voucher on sale now (MySQL and the Redis preload), as the admin route makes it."""
    return vouchers.create_seckill_voucher(db, redis, on_sale_now(stock))


def apply_env(env: dict[str, str]) -> None:
    """Handlers read their configuration at import: set it first."""
    os.environ.update(env)


__all__ = ["BenchStack", "Services", "StackInfo", "apply_env", "create_voucher", "far_id", "function_env"]
