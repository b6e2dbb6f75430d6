"""The fault injectors of a chaos run (``seckill-flash-sale --chaos``).

``install`` is the local runner's worker hook
(``SECKILL_LOCAL_WORKER_HOOK=seckill_demo.faults:install``): it runs in a
function's container before its handler is imported and, when the env var
``SECKILL_DEMO_FAULTS`` holds a JSON config, arms the faults below. They work
below our code, at the libraries' edges, so the service meets the faults exactly
as it would in AWS:

- ``sendFailure``: share of the orders' SendMessage calls (to ``ORDER_QUEUE_URL``)
  refused before anything left (a connection that could not be made: certainly
  not stored);
- ``sendReplyLost``: share of those calls whose message SQS stored but whose
  reply never arrived (a read timeout after the request went out);
- ``sendCrash``: share of those calls at which the container dies, after the
  gate reserved and before the message left. Only the order's send, not the
  sell-out's edge notice, which goes through the same client;
- ``queuedCrash``: share of those calls after which the container dies once SQS
  has stored the message: half of them at once (the reservation not yet
  promised), half just after the promise and the status hint (redis-py's
  pipeline answered), before the 202 left. Either way the order stands while its
  client saw a 500, and its next press answers ``DUPLICATE_ORDER`` once the
  mark is promised or cleared: the client asks for its order instead;
- ``persisterCrash``: share of database commits after which the container dies,
  mid-batch, before it could answer.

Faults fire only while the config's ``armed`` file exists (the main job arms
them for the sale and disarms them before draining, so the recovery it then
checks is not itself under fire). Each container draws its rolls from the run's
``seed``, its function and its number. Every fault injected is appended as one
JSON line to the config's ``log`` file.
Faults from outside a function (connections killed in MySQL, malformed
messages, a Redis restart) are injected by the main job itself
(``seckill_demo.chaos``), with the instruments at the end of this module.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import redis as redis_lib

ENV = "SECKILL_DEMO_FAULTS"
HOOK = "seckill_demo.faults:install"
CRASH_EXIT_CODE = 70


def rng(seed: int, *labels: object) -> random.Random:
    """The random stream of one part of a run: the same seed and labels, the same draws."""
    return random.Random(":".join(map(str, (seed, *labels))))


def record(log: str | Path, fault: str, **details: Any) -> None:
    line = json.dumps({"fault": fault, "at": time.time(), "pid": os.getpid(), **details})
    # O_APPEND writes of one short line are atomic across processes.
    with open(log, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def read_log(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


def install(function: str, container: int) -> None:
    """Arm the faults configured in ``SECKILL_DEMO_FAULTS`` for this container, if any."""
    raw = os.environ.get(ENV)
    if not raw:
        return
    config = json.loads(raw)
    log = config["log"]
    armed = Path(config["armed"])
    rolls = rng(config["seed"], function, container)

    def chance() -> float:
        return rolls.random() if armed.exists() else 1.0

    send_failure = float(config.get("sendFailure", 0))
    send_crash = float(config.get("sendCrash", 0))
    reply_lost = float(config.get("sendReplyLost", 0))
    queued_crash = float(config.get("queuedCrash", 0))
    if send_failure or send_crash or reply_lost or queued_crash:
        import boto3
        from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

        # The orders' sends only: the sell-out's edge notice goes through the same client.
        order_queue = os.environ.get("ORDER_QUEUE_URL", "")
        current = threading.local()

        def which(params: dict[str, Any], **_: Any) -> None:
            current.order = params.get("QueueUrl") == order_queue

        def before_send(request: Any, **_: Any) -> None:
            if not getattr(current, "order", False):
                return
            roll = chance()
            if roll < send_crash:
                record(log, "api-crash-before-send", function=function)
                os._exit(CRASH_EXIT_CODE)
            if roll < send_crash + send_failure:
                record(log, "sqs-send-failure", function=function)
                raise EndpointConnectionError(endpoint_url=request.url)

        def after_call(http_response: Any = None, **_: Any) -> None:
            if not getattr(current, "order", False):
                return
            roll = chance()
            if roll < queued_crash and http_response is not None and http_response.status_code < 300:
                if rolls.random() < 0.5:
                    record(log, "api-crash-after-send", function=function)
                    os._exit(CRASH_EXIT_CODE)
                current.crash_after_promise = True  # at the press's next pipeline: the promise's
            elif roll < queued_crash + reply_lost:
                record(log, "sqs-reply-lost", function=function)
                raise ReadTimeoutError(endpoint_url="SendMessage (reply lost, injected)")

        if queued_crash:
            import redis.client

            execute = redis.client.Pipeline.execute

            def execute_then_maybe_crash(self: Any, raise_on_error: bool = True) -> Any:
                crash, current.crash_after_promise = getattr(current, "crash_after_promise", False), False
                answers = execute(self, raise_on_error)
                if crash:  # only once Redis answered: the promise and the hint are written
                    record(log, "api-crash-after-promise", function=function)
                    os._exit(CRASH_EXIT_CODE)
                return answers

            redis.client.Pipeline.execute = execute_then_maybe_crash

        boto3.setup_default_session()
        boto3.DEFAULT_SESSION.events.register("before-parameter-build.sqs.SendMessage", which)
        boto3.DEFAULT_SESSION.events.register("before-send.sqs.SendMessage", before_send)
        boto3.DEFAULT_SESSION.events.register("after-call.sqs.SendMessage", after_call)

    persister_crash = float(config.get("persisterCrash", 0))
    if persister_crash:
        import pymysql

        commit = pymysql.connections.Connection.commit

        def commit_then_maybe_crash(self: Any) -> None:
            commit(self)
            if chance() < persister_crash:
                record(log, "persister-crash-mid-batch", function=function)
                os._exit(CRASH_EXIT_CODE)

        pymysql.connections.Connection.commit = commit_then_maybe_crash


class PrivateRedis:
    """A redis-server of the run's own, without persistence, so it can be
    restarted mid-sale (losing everything, as a restart without persistence
    or a failover to an empty node does) without touching the machine's Redis."""

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir = workdir
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.workdir / "redis.log").open("ab")
        command = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
        ]
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603
        client = redis_lib.Redis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(redis_lib.RedisError):
                if client.ping():
                    return
            time.sleep(0.1)
        raise RuntimeError(f"redis-server did not start on port {self.port}; see {self.workdir / 'redis.log'}")

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


class ConnectionKiller:
    """Kills a share of the database's connections now and then: the persister's
    transactions fail mid-way as they would on a failover or a network cut."""

    def __init__(
        self, creds: Any, log: Path, *, interval: float, share: float, spare: set[int], chance: random.Random
    ) -> None:
        import pymysql

        self.conn = pymysql.connect(
            host=creds.host, port=creds.port, user=creds.user, password=creds.password, autocommit=True
        )
        self.database = creds.database
        self.log = log
        self.interval = interval
        self.share = share
        self.spare = spare | {self.conn.thread_id()}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="connection-killer", daemon=True)
        self.chance = chance

    def __enter__(self) -> ConnectionKiller:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()
        self.conn.close()

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            with self.conn.cursor() as cursor:
                cursor.execute(
                    "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s ORDER BY ID", (self.database,)
                )
                ids = [int(row[0]) for row in cursor.fetchall()]
                for thread_id in ids:
                    if thread_id in self.spare or self.chance.random() >= self.share:
                        continue
                    with contextlib.suppress(Exception):  # it may have gone by itself
                        cursor.execute(f"KILL CONNECTION {thread_id}")
                        record(self.log, "mysql-connection-killed", thread=thread_id)
