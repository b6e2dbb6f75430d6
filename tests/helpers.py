"""What several test modules share, written once: test data, reading the services' state,
and steps of the service (accept, reconcile, recover) short of the handlers."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as AwsCredentials
from redis import Redis
from redis.exceptions import RedisError

from seckill.expiry import ExpiryMessage
from seckill.infra import keys
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database
from seckill.infra.lua_scripts import Scripts
from seckill.infra.timeutil import from_ms
from seckill.messages import OrderMessage, OrderQueue
from seckill.persist.persistence import Decision, persist_orders
from seckill.press.gate import Gate, Reservation
from seckill.repair.reconcile import VoucherReconciled, reconcile
from seckill.repair.recovery import Recovery, recover_if_lost
from seckill.vouchers import SeckillVoucherIn
from seckill_local.checkout import ROOT
from seckill_local.feeder import sqs_event
from seckill_local.lambdas import load_handler
from seckill_local.ports import free_port
from seckill_local.sqs import LOCAL_AWS
from seckill_local.template import Template

EVENTS = ROOT / "events"
HINT_TTL = 3600

T = TypeVar("T")


def new_user() -> int:
    """A user id no other test (or earlier run) is likely to hold."""
    return secrets.randbelow(10**12) + 10**6


def closed_port() -> int:
    """A local port nothing listens on: for an unreachable Redis, MySQL or endpoint."""
    return free_port()


def wait_for(
    probe: Callable[[], T],
    what: str,
    *,
    until: Callable[[T], bool] = bool,
    timeout: float = 10,
    interval: float = 0.05,
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``probe`` every ``interval`` seconds until ``until`` accepts its value, and return
    that value. Past ``timeout`` seconds the test fails, naming ``what`` it awaited and the last
    value (or ``ignoring`` exception) seen. Any other exception of ``probe`` ends the wait."""
    deadline = time.monotonic() + timeout
    while True:
        last: object
        try:
            value = probe()
        except ignoring as error:
            last = error
        else:
            if until(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            pytest.fail(f"waited {timeout:g} s for {what}; last seen: {last!r}")
        time.sleep(interval)


@contextlib.contextmanager
def redis_server(*options: str, password: str | None = None) -> Iterator[str]:
    """A redis-server of the caller's own on a free port, without persistence; its URL."""
    assert shutil.which("redis-server"), "Redis must be installed"
    port = free_port()
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen([*command, *options], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    try:
        probe = Redis(port=port, password=password, socket_connect_timeout=0.5)
        wait_for(probe.ping, f"redis-server on port {port}", timeout=20, interval=0.1, ignoring=(RedisError,))
        probe.close()
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.kill()
        process.wait()


def drain(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Receive and delete everything visible (PurgeQueue is limited to once a minute)."""
    taken: list[dict[str, Any]] = []
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
        )
        taken.extend(messages)
    return taken


def load_event(name: str, **changes: Any) -> dict[str, Any]:
    """An ``events/`` file, as ``sam local invoke -e`` would send it."""
    event = json.loads((EVENTS / name).read_text(encoding="utf-8"))
    event.update(changes)
    return event


def body(response: dict[str, Any]) -> dict[str, Any]:
    return json.loads(response["body"])


def db_rows(db: Database, sql: str, *params: Any) -> list[dict[str, Any]]:
    def execute(cursor: Any) -> list[dict[str, Any]]:
        cursor.execute(sql, params)
        return list(cursor.fetchall())

    return db.run(execute)


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Runs the calls at once, each on a thread (and a connection) of its own."""
    barrier = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        answers[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return answers


def statements(db: Database) -> Counter[str]:
    """MariaDB's own count of the statements this thread's connection has run."""
    with db.connection().cursor() as cursor:
        cursor.execute(
            "SHOW SESSION STATUS WHERE Variable_name IN"
            " ('Com_commit', 'Com_rollback', 'Com_select', 'Com_insert', 'Com_update')"
        )
        return Counter({row["Variable_name"]: int(row["Value"]) for row in cursor.fetchall()})


def accept(gate: Gate, voucher_id: int, user_id: int | None = None, *, promise: bool = True) -> OrderMessage:
    """What the API does for a winner, short of the send: reserve (with the next order id
    of the gate's block), and (``promise``) mark it promised, as once its client is
    answered 202."""
    reservation = gate.reserve(voucher_id, user_id or new_user(), uuid.uuid4().hex)
    assert isinstance(reservation, Reservation), reservation
    return accepted(gate, reservation, promise=promise)


def accepted(gate: Gate, reservation: Reservation, *, promise: bool = True) -> OrderMessage:
    """``accept`` once the gate has reserved."""
    order_id = reservation.order_id
    if promise:
        assert gate.promise(reservation.voucher_id, reservation.user_id, order_id)
    return OrderMessage(order_id, reservation.user_id, reservation.voucher_id, from_ms(reservation.accepted_ms))


def persist_order(db: Database, redis: Any, scripts: Scripts, message: OrderMessage) -> Decision:
    """What the persister does for one order, as a batch of one; raises what left it undecided."""
    (outcome,) = persist_orders(db, redis, scripts, [message])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def on_sale(
    stock: int = 10, begin: datetime | None = None, end: datetime | None = None, shop_id: int = 1
) -> SeckillVoucherIn:
    """A seckill voucher on sale from a minute ago for an hour, unless told otherwise."""
    now = datetime.now(UTC)
    return SeckillVoucherIn(
        shop_id=shop_id,
        title="test voucher",
        pay_value=8000,
        actual_value=10000,
        stock=stock,
        begin_time=begin or now - timedelta(minutes=1),
        end_time=end or now + timedelta(hours=1),
    )


def reconcile_voucher(
    db: Database,
    redis: Any,
    queue: OrderQueue,
    voucher_id: int,
    *,
    drained: bool = True,
    pending_age: timedelta = timedelta(0),
) -> VoucherReconciled:
    """One reconciliation pass over one voucher (age 0: every reservation is stale)."""
    result = reconcile(
        db, redis, Scripts.register(redis), queue, drained=drained, pending_age=pending_age, voucher_ids=[voucher_id]
    )
    return result.vouchers[0]


def recover(db: Database, redis: Any, sqs: Any, queues: dict[str, str], *, wait: float = 0) -> Recovery:
    """``recover_if_lost`` as ReconcilerFunction runs it, on the test's own queues."""
    settings = Settings.from_env(
        {**os.environ, "ORDER_QUEUE_URL": queues["OrderQueue"], "ORDER_DLQ_URL": queues["OrderDeadLetterQueue"]}
    )
    return recover_if_lost(db, redis, Scripts.register(redis), sqs, settings, wait=wait)


def mark(redis: Any, voucher_id: int, user_id: int) -> str | None:
    """The user's reservation mark, as the gate wrote it."""
    return redis.hget(keys.pending(voucher_id), str(user_id))


def run_python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` with this interpreter (``-m seckill_ops.reconcile``...), captured."""
    command = [sys.executable, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, check=False)  # noqa: S603


DLQ_REPLAY = Path(sys.executable).parent / "seckill-dlq-replay"  # the installed command


def run_dlq_replay(*args: str, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603
        [str(DLQ_REPLAY), *args], capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def signed(
    method: str,
    url: str,
    data: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    secret: str = LOCAL_AWS["AWS_SECRET_ACCESS_KEY"],
    key: str = LOCAL_AWS["AWS_ACCESS_KEY_ID"],
    service: str = "execute-api",
    region: str = LOCAL_AWS["AWS_DEFAULT_REGION"],
) -> dict[str, str]:
    """The headers of a request SigV4-signed as botocore signs it (the Host included)."""
    request = AWSRequest(method=method, url=url, data=data, headers=headers or {})
    SigV4Auth(AwsCredentials(key, secret), service, region).add_auth(request)
    return {**dict(request.headers), "host": urllib.parse.urlsplit(url).netloc}


# --- SeckillApiFunction's events and answers (the tests/integration/test_api_*.py files) ---

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
RESULT_KEYS = {"success", "data", "errorMsg", "code"}


def module_of(handler: Callable[..., Any]) -> ModuleType:
    """The handler's own module (``load_handler`` imports it under a unique name)."""
    return sys.modules[handler.__module__]


def with_path(event: dict[str, Any], path: str, **params: str) -> dict[str, Any]:
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    if params:
        event["pathParameters"] = params
    return event


def as_user(event: dict[str, Any], user_id: int | None) -> dict[str, Any]:
    """The authorizer's context, as API Gateway hands it over (or none at all)."""
    if user_id is None:
        event["requestContext"].pop("authorizer", None)
    else:
        event["requestContext"]["authorizer"] = {"lambda": {"userId": str(user_id)}}
    return event


def seckill_event(voucher_id: int | str, user_id: int | None) -> dict[str, Any]:
    event = load_event("seckill_api_seckill.json")
    return as_user(
        with_path(event, f"/voucher-order/seckill/{voucher_id}", voucherId=str(voucher_id)),
        user_id,
    )


def status_event(order_id: int | str, user_id: int | None) -> dict[str, Any]:
    event = load_event("seckill_api_order_status.json")
    return as_user(with_path(event, f"/voucher-order/{order_id}", orderId=str(order_id)), user_id)


def payment_of(order_id: int | str, attempt: int = 1) -> str:
    """A payment id of the order's own: one payment pays one order, in the suite's one database."""
    return f"pay-{order_id}-{attempt}"


def payment_event(order_id: int | str, payment_id: str | None = None, **changes: Any) -> dict[str, Any]:
    """The payment service's payment of an order (signed: the IAM context is the sample's),
    by ``payment_of(order_id)`` unless told."""
    changes.setdefault("body", json.dumps({"paymentId": payment_id or payment_of(order_id)}))
    event = load_event("seckill_api_payment.json", **changes)
    return with_path(event, f"/voucher-order/{order_id}/payment", orderId=str(order_id))


def cancel_event(order_id: int | str, user_id: int | None) -> dict[str, Any]:
    event = load_event("seckill_api_cancel.json")
    return as_user(with_path(event, f"/voucher-order/{order_id}/cancel", orderId=str(order_id)), user_id)


def list_event(shop_id: int | str) -> dict[str, Any]:
    return with_path(load_event("seckill_api_list_vouchers.json"), f"/voucher/list/{shop_id}", shopId=str(shop_id))


def shop_list(call: Callable[[dict[str, Any]], dict[str, Any]], shop_id: int) -> dict[int, dict[str, Any]]:
    """Every voucher the shop's list shows, by id, page after page (other tests' vouchers of
    the same shop may fill the first)."""
    found: dict[int, dict[str, Any]] = {}
    after = 0
    while True:
        event = list_event(shop_id)
        event["queryStringParameters"] = {"limit": "100"} | ({"after": str(after)} if after else {})
        event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in event["queryStringParameters"].items())
        page = body(call(event))["data"]
        found |= {v["id"]: v for v in page}
        if len(page) < 100:
            return found
        after = page[-1]["id"]


def iso(moment: datetime) -> str:
    return moment.isoformat()


def seckill_voucher_body(shop_id: int, **changes: Any) -> dict[str, Any]:
    now = datetime.now(UTC)
    data: dict[str, Any] = json.loads(load_event("seckill_api_add_seckill_voucher.json")["body"])
    data.update(
        shopId=shop_id,
        beginTime=iso(now - timedelta(minutes=1)),
        endTime=iso(now + timedelta(hours=1)),
        stock=3,
    )
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def admin_event(name: str, payload: Any) -> dict[str, Any]:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return load_event(name, body=text)


def expect_refusal(response: dict[str, Any], status: int, code: str) -> None:
    assert response["statusCode"] == status, response
    assert body(response)["code"] == code, response


def persist(handlers: dict[str, Handler], context: Any, sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """Take what is on the queue and hand it to the persister, as the event source mapping would."""
    messages = drain(sqs, queue_url)
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    response = handlers["OrderPersisterFunction"](sqs_event(messages, arn), context)
    assert response == {"batchItemFailures": []}
    return messages


def stop_mysql(handlers: dict[str, Handler], creds: Credentials, monkeypatch: pytest.MonkeyPatch) -> int:
    """The API's database on a port nothing listens on (DB_PORT of a closed port); returns the port."""
    port = closed_port()
    module = module_of(handlers["SeckillApiFunction"])
    monkeypatch.setattr(module, "db", Database(replace(creds, port=port)))
    return port


def expect_try_again(response: dict[str, Any], *hidden: str) -> None:
    expect_refusal(response, 503, "TRY_AGAIN")
    for leak in ("Traceback", "pymysql", "OperationalError", "Can't connect", "127.0.0.1", *hidden):
        assert leak not in response["body"]


@dataclass(frozen=True)
class Hold:
    """A confirmed order of a voucher of its own (the ``sell`` fixture makes them)."""

    voucher_id: int
    order_id: int
    user_id: int

    def message(self, pay_by: datetime | None = None) -> ExpiryMessage:
        """Its expiry message, due ``pay_by`` (now by default)."""
        return ExpiryMessage(self.order_id, self.voucher_id, self.user_id, pay_by or datetime.now(UTC))


def overdue(db: Database, *holds: Hold) -> None:
    """Their deadlines passed (no expiry has run)."""
    for hold in holds:
        db_rows(db, "UPDATE tb_voucher_order SET pay_by = NOW(3) - INTERVAL 1 SECOND WHERE id = %s", hold.order_id)


def stocks(db: Database, redis: Any, voucher_id: int) -> tuple[int, int]:
    """(MySQL stock, Redis stock) of a voucher."""
    [row] = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    return int(row["stock"]), int(redis.get(keys.stock(voucher_id)))


def fresh(template: Template, logical_id: str, monkeypatch: pytest.MonkeyPatch, **env: str) -> ModuleType:
    """The function's module imported afresh, as the runtime would, with these variables;
    the suite's own import stays what ``handlers`` returns."""
    modules = dict(sys.modules)
    with monkeypatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        patch.setattr(sys, "modules", modules)
        handler = load_handler(template.functions[logical_id])
    # A library this import brought in for the first time stays imported: imported again
    # later, its classes would be two classes (an event handler's Response no longer the
    # Response it checks for).
    for name, module in modules.items():
        if name != handler.__module__:
            sys.modules.setdefault(name, module)
    return modules[handler.__module__]


def sqs_record(body: str, sample: str, message_id: str | None = None) -> dict[str, Any]:
    """A record shaped like those of events/<sample>."""
    rec: dict[str, Any] = copy.deepcopy(load_event(sample)["Records"][0])
    rec.update(messageId=message_id or str(uuid.uuid4()), receiptHandle=uuid.uuid4().hex, body=body)
    return rec


def invoke(module: ModuleType, context: Any, sample: str, *records: dict[str, Any]) -> set[str]:
    """The handler on a batch; the message ids it reported as failures."""
    event = load_event(sample)
    event["Records"] = list(records)
    response = module.lambda_handler(json.loads(json.dumps(event)), context)
    assert set(response) == {"batchItemFailures"}, response
    return {f["itemIdentifier"] for f in response["batchItemFailures"]}


# --- a stand-in for the local API, behind the local edge ----------------------------------


@dataclass(frozen=True)
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


class Upstream:
    """Stands in for the local API: records each request, answers a fixed 404 of its own."""

    STATUS = 404
    HEADERS = {"content-type": "application/json", "x-upstream": "yes", "set-cookie": "a=1"}
    BODY = b'{"success": false, "data": null, "errorMsg": "voucher not found", "code": "VOUCHER_NOT_FOUND"}'

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        # One connection, one request: the next one on it is dropped unanswered, as by a
        # server that closed the connection while it sat idle in the edge's pool.
        self.one_per_connection = False
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def __getattr__(self, name: str) -> Any:
                if name.startswith("do_"):
                    return self._serve
                raise AttributeError(name)

            served = 0

            def _serve(self) -> None:
                self.served += 1
                if upstream.one_per_connection and self.served > 1:
                    self.close_connection = True
                    return
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                upstream.seen.append(Seen(self.command, self.path, headers, body))
                self.send_response(upstream.STATUS)
                for name, value in upstream.HEADERS.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(upstream.BODY)))
                self.end_headers()
                self.wfile.write(upstream.BODY)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
