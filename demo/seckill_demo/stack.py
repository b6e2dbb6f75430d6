"""The local stand-in the main job runs on (``seckill-local``: moto SQS, the HTTP API,
the feeder), each in a process of its own, and the services it needs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
import urllib3
from redis.exceptions import RedisError

from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Credentials
from seckill_local.edge import KVS_ARN, local_kvs_client
from seckill_local.ports import free_port
from seckill_local.secrets import ensure_secret
from seckill_local.sqs import sqs_client

START_REDIS = "redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no"
START_MARIADB = (
    "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd  (or: systemctl start mariadb)"
)


@dataclass(frozen=True)
class LocalEdge:
    """The local edge ``seckill-local start-api --edge`` runs: the CloudFront Function in
    front of the API (``url``) and its KeyValueStore's listener."""

    url: str
    kvs_endpoint: str

    def reader(self, voucher_id: int) -> Callable[[], str | None]:
        """Reads the voucher's entry as the publisher writes it: the cloudfront-keyvaluestore
        client, through the listener (see ``seckill_local.edge``); None while it has none."""
        client = local_kvs_client(self.kvs_endpoint)

        def read() -> str | None:
            try:
                return str(client.get_key(KvsARN=KVS_ARN, Key=str(voucher_id))["Value"])
            except client.exceptions.ResourceNotFoundException:
                return None

        return read

    def stats(self) -> dict[str, int] | None:
        """The edge server's own count (``/__edge/stats``); None if it does not answer."""
        http = urllib3.PoolManager(retries=False, timeout=5)
        with contextlib.suppress(urllib3.exceptions.HTTPError, ValueError):
            answer = http.request("GET", f"{self.kvs_endpoint}/__edge/stats")
            if answer.status == 200:
                return {k: int(v) for k, v in json.loads(answer.data).items()}
        return None


class LocalStack:
    """The runner's processes: moto SQS, the HTTP API (behind the edge, with ``edge``)
    and the queue feeder; with ``edge``, EdgePublisherFunction's feeder apart; ``secrets``
    made on the moto server (Secrets Manager's stand-in) before the functions start."""

    def __init__(
        self,
        workdir: Path,
        env_vars: dict[str, Any],
        containers: int,
        visibility_timeout: int,
        edge: bool = False,
        clock_apart: bool = False,
        secrets: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.sqs_port, self.api_port = free_port(), free_port()
        self.sqs_endpoint = f"http://127.0.0.1:{self.sqs_port}"
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.edge = LocalEdge(f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}") if edge else None
        self.containers = containers
        self.visibility_timeout = visibility_timeout
        self.clock_apart = clock_apart
        self.secrets = secrets or {}  # name -> value: made on the moto server before the functions start
        env_vars["Parameters"]["AWS_ENDPOINT_URL_SQS"] = self.sqs_endpoint
        self.env_file = workdir / "env.json"
        self.env_file.write_text(json.dumps(env_vars, indent=2), encoding="utf-8")
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def log(self, name: str) -> Path:
        """Where a runner process (``api``, ``feed``, ``sqs``) writes its output."""
        return self.workdir / f"{name}.log"

    def _spawn(self, name: str, *args: str) -> None:
        log = self.log(name).open("wb")
        command = [sys.executable, "-m", "seckill_local.runner", *args, "--sqs-endpoint", self.sqs_endpoint]
        # Our own runner with our own arguments; a session of its own so stop() reaches its workers.
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # noqa: S603
        self.processes[name] = process

    def start(self) -> None:
        vt = ["--visibility-timeout", str(self.visibility_timeout)]
        self._spawn("sqs", "start-sqs", "--port", str(self.sqs_port), *vt)
        self._wait("moto SQS", lambda: bool(sqs_client(self.sqs_endpoint).get_queue_url(QueueName="OrderQueue")))
        for name, value in self.secrets.items():
            ensure_secret(self.sqs_endpoint, name, value)
        env = ["--env-vars", str(self.env_file)]
        edge: list[str] = []
        api = [str(self.api_port), "--containers", str(self.containers)]
        if self.edge is not None:
            edge = ["--edge", "--kvs-endpoint", self.edge.kvs_endpoint]
            api += ["--edge-port", port(self.edge.url), "--kvs-port", port(self.edge.kvs_endpoint)]
        self._spawn("api", "start-api", "--port", *api, *env, *edge)
        apart = ([PUBLISHER] if self.edge is not None else []) + ([CLOCK] if self.clock_apart else [])
        self._spawn("feed", "feed", *env, *vt, *edge, *[a for f in apart for a in ("--skip", f)])
        # These mappings each in a process of its own: pausing the persister's or the expiry
        # function's (pause_feeder) must not stop the edge's state or the draw clock on its way.
        if self.edge is not None:
            self._spawn("feed-edge", "feed", *env, *vt, *edge, "--only", PUBLISHER)
        if self.clock_apart:
            self._spawn("feed-clock", "feed", *env, *vt, *edge, "--only", CLOCK)
        http = urllib3.PoolManager(retries=False, timeout=2)
        # With the edge, the API's own endpoint refuses the list (no origin header): an answer all the same.
        listed = 200 if self.edge is None else 403
        self._wait("the local HTTP API", lambda: http.request("GET", f"{self.api_url}/voucher/list/1").status == listed)
        if self.edge is not None:
            url = f"{self.edge.url}/voucher/list/1"
            self._wait("the local edge", lambda: http.request("GET", url).status == 200)
            # The sale's first states must reach the store: EdgePublisherFunction fed from the start.
        for name in (n for n in self.processes if n.startswith("feed")):
            log = self.log(name)
            self._wait(f"the {name} feeder", lambda log=log: FEEDING in log.read_text(errors="replace"))

    def pause_feeder(self, paused: bool) -> None:
        """Stop (or resume) the event source mappings of the persister and the expiry function,
        as when they are throttled; EdgePublisherFunction's (and apart, DrawClockFunction's) run on."""
        self._pause("feed", paused)

    def pause_clock(self, paused: bool) -> None:
        """Stop (or resume) DrawClockFunction's event source mapping (``clock_apart`` only)."""
        self._pause("feed-clock", paused)

    def _pause(self, name: str, paused: bool) -> None:
        os.killpg(self.processes[name].pid, signal.SIGSTOP if paused else signal.SIGCONT)

    def _wait(self, what: str, ready: Callable[[], bool], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process in self.processes.values():
                if process.poll() is not None:
                    raise RuntimeError(f"a runner process exited early; see the logs in {self.workdir}")
            with contextlib.suppress(Exception):  # not up yet
                if ready():
                    return
            time.sleep(0.3)
        raise RuntimeError(f"{what} did not come up within {timeout:.0f} s; see the logs in {self.workdir}")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


PUBLISHER = "EdgePublisherFunction"
CLOCK = "DrawClockFunction"
FEEDING = "feeding (Ctrl-C to stop)"  # what `seckill-local feed` says once every queue is fed


def port(url: str) -> str:
    return url.rsplit(":", 1)[1]


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
