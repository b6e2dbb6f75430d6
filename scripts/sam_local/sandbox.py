"""What one run makes for itself, under names of its own, and removes at the end:
a MySQL user and database, Redis keys, a moto server with the template's
queues, and a listener for the migrator's CloudFormation reply."""

from __future__ import annotations

import copy
import json
import logging
import secrets
import threading
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pymysql
from moto.server import ThreadedMotoServer
from redis.exceptions import RedisError

from scripts.sam_local.progress import CheckFailed, Unavailable
from seckill.infra import keys
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, connect
from seckill_local.sqs import ensure_queues, sqs_client
from seckill_local.template import Template

# What docs/local.md's setup grants the `seckill` user of events/env.docker.json,
# and so all the functions get here: rows, and CREATE for the migrator's schema.
GRANTS = "SELECT, INSERT, UPDATE, DELETE, CREATE"


class Sandbox:
    def __init__(self, settings: Settings, template: Template) -> None:
        self.run_id = secrets.token_hex(4)
        self.template = template
        # A Redis database of the run's own (1-15), as the test suite does: the global keys
        # (seckill:loaded, the rebuild lock, the order-id counter) are not shared with other runs.
        self.redis_db = secrets.randbelow(15) + 1
        self.settings = replace(
            settings, redis_url=urlunsplit(urlsplit(settings.redis_url)._replace(path=f"/{self.redis_db}"))
        )
        self.queue_prefix = f"sam{self.run_id}-"
        self.db_name = f"seckill_sam_{self.run_id}"
        self.db_user = f"seckill_sam_{self.run_id}"
        self.db_password = secrets.token_urlsafe(18)
        # The local server's administrator (DB_USER, default root): creates and drops what the run uses.
        self.admin = Credentials(
            settings.db_host, settings.db_port, settings.db_user, settings.db_password, self.db_name
        )
        self.redis = redis_client(self.settings)
        self.tokens: list[str] = []
        self._user_created = False
        self._moto: ThreadedMotoServer | None = None
        self.sqs_endpoint = ""
        self.sqs: Any = None
        self.queues: dict[str, str] = {}
        self._listener: ThreadingHTTPServer | None = None
        self.replies: list[dict[str, Any]] = []

    @property
    def redis_port(self) -> int:
        return urlsplit(self.settings.redis_url).port or 6379

    def check_services(self) -> None:
        try:
            self.redis.ping()
        except RedisError as exc:
            raise Unavailable(f"Redis at {self.settings.redis_url} is not answering ({exc}): make services") from exc
        try:
            connect(self.admin, database=False).close()
        except pymysql.err.MySQLError as exc:
            where = f"{self.admin.host}:{self.admin.port}"
            raise Unavailable(f"MySQL at {where} refused {self.admin.user} ({exc}): make services") from exc

    # --- MySQL -------------------------------------------------------------------------

    def create_db_user(self) -> None:
        """A user granted only on the run's database, which does not exist yet: the migrator makes it."""
        conn = connect(self.admin, database=False)
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"CREATE USER '{self.db_user}'@'%%' IDENTIFIED BY %s", (self.db_password,))
                self._user_created = True
                cursor.execute(f"GRANT {GRANTS} ON `{self.db_name}`.* TO '{self.db_user}'@'%'")
            conn.commit()
        finally:
            conn.close()

    def query(self, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        """A statement on the run's database, as its administrator (committed)."""
        conn = connect(self.admin)
        try:
            with conn.cursor() as cursor:
                cursor.execute(sql, args)
                rows = list(cursor.fetchall())
            conn.commit()
            return rows
        finally:
            conn.close()

    def _database_exists(self) -> bool:
        conn = connect(self.admin, database=False)
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (self.db_name,))
                return cursor.fetchone() is not None
        finally:
            conn.close()

    def start_ids_far_apart(self) -> None:
        """Voucher ids become keys in the shared Redis: start far from other runs' ids."""
        self.query(f"ALTER TABLE tb_voucher AUTO_INCREMENT = {secrets.randbelow(10**12) + 10**9}")

    # --- SQS ---------------------------------------------------------------------------

    def start_moto(self) -> None:
        """A moto server on 127.0.0.1 (SQS for the functions, STS for the SAM CLI) with the template's queues."""
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._moto.start()
        host, port = self._moto.get_host_and_port()
        self.sqs_endpoint = f"http://{host}:{port}"
        self.sqs = sqs_client(self.sqs_endpoint)
        self.queues = ensure_queues(self.sqs, self.template, prefix=self.queue_prefix)

    @property
    def moto_port(self) -> int:
        return int(self.sqs_endpoint.rsplit(":", 1)[1])

    def messages(self, logical_id: str, *, visibility: int = 0) -> list[dict[str, Any]]:
        """Up to 10 visible messages of a queue; with ``visibility`` 0 they stay visible (a peek)."""
        return self.sqs.receive_message(
            QueueUrl=self.queues[logical_id], MaxNumberOfMessages=10, VisibilityTimeout=visibility,
            MessageAttributeNames=["All"],
        ).get("Messages", [])  # fmt: skip

    def queue_arn(self, logical_id: str) -> str:
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.queues[logical_id], AttributeNames=["QueueArn"])
        return str(attributes["Attributes"]["QueueArn"])

    # --- the functions' configuration ------------------------------------------------

    def env_vars(self, shipped: dict[str, Any], *, redis_port: int, mysql_port: int, sqs_port: int) -> dict[str, Any]:
        """events/env.docker.json with the run's own database, user, queues and relay ports
        put in; its hosts, its other variables and which queue each function gets stay as shipped."""
        env = copy.deepcopy(shipped)
        params = env["Parameters"]
        redis_url = urlsplit(_with_port(params["REDIS_URL"], redis_port))
        params["REDIS_URL"] = urlunsplit(redis_url._replace(path=f"/{self.redis_db}"))
        params["AWS_ENDPOINT_URL_SQS"] = _with_port(params["AWS_ENDPOINT_URL_SQS"], sqs_port)
        params.update(DB_PORT=str(mysql_port), DB_NAME=self.db_name, DB_USER=self.db_user, DB_PASSWORD=self.db_password)
        for function, variables in env.items():
            if function == "Parameters":
                continue
            for name, value in variables.items():
                if not value.startswith("http"):
                    continue
                queue = urlsplit(value).path.rsplit("/", 1)[-1]
                if queue not in self.queues:
                    raise CheckFailed(f"env.docker.json gives {function} {name}={value}: no such queue in the template")
                run_url = urlsplit(self.queues[queue])
                variables[name] = urlunsplit(urlsplit(_with_port(value, sqs_port))._replace(path=run_url.path))
        return env

    # --- the migrator's reply --------------------------------------------------------

    def listen_for_replies(self, bind: str) -> int:
        """An HTTP listener on ``bind`` (the bridge address) that keeps every PUT body:
        the reply a custom resource sends to CloudFormation's pre-signed URL."""
        replies = self.replies

        class Reply(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                replies.append(json.loads(body or b"{}"))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self._listener = ThreadingHTTPServer((bind, 0), Reply)
        threading.Thread(target=self._listener.serve_forever, daemon=True).start()
        return int(self._listener.server_address[1])

    # --- the end ------------------------------------------------------------------------

    def undo_steps(self) -> list[tuple[str, Callable[[], str | None]]]:
        """How to remove what the run made, in the order to register them (they run last first)."""
        return [
            ("the run's MySQL user and database", self.drop_mysql),
            ("moto", self.stop_moto),
            ("the run's Redis keys", self.delete_keys),
            ("the reply listener", self.stop_listener),
        ]

    def stop_listener(self) -> None:
        if self._listener is not None:
            self._listener.shutdown()
            self._listener.server_close()

    def delete_keys(self) -> str | None:
        """The run's tokens, and every key of the vouchers and orders in its database."""
        redis_keys = [keys.login_token(t) for t in self.tokens]
        if self._user_created and self._database_exists():
            vouchers = [row["voucher_id"] for row in self.query("SELECT voucher_id FROM tb_seckill_voucher")]
            orders = [row["id"] for row in self.query("SELECT id FROM tb_voucher_order")]
            orders += [row["order_id"] for row in self.query("SELECT order_id FROM tb_voucher_order_rejection")]
            redis_keys += [k for v in vouchers for k in keys.voucher_keys(int(v))]
            redis_keys += [keys.order_status(int(o)) for o in orders]
        return f"{self.redis.delete(*redis_keys)} Redis keys deleted" if redis_keys else None

    def stop_moto(self) -> str | None:
        if self._moto is None:
            return None
        for url in self.queues.values():
            self.sqs.delete_queue(QueueUrl=url)
        self._moto.stop()
        return f"moto stopped ({len(self.queues)} queues deleted)"

    def drop_mysql(self) -> str | None:
        if not self._user_created:
            return None
        dropped = self._database_exists()
        conn = connect(self.admin, database=False)
        try:
            with conn.cursor() as cursor:
                if dropped:
                    cursor.execute(f"DROP DATABASE `{self.db_name}`")
                cursor.execute(f"DROP USER IF EXISTS '{self.db_user}'@'%'")
            conn.commit()
        finally:
            conn.close()
        return f"MySQL user {self.db_user}" + (f" and database {self.db_name}" if dropped else "") + " dropped"


def _with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.hostname}:{port}"))
