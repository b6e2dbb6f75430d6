"""What several test modules share, written once: test data, reading the services' state,
and steps of the service (accept, reconcile, recover) short of the handlers."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import urllib.parse
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as AwsCredentials

from seckill import keys
from seckill.config import Settings
from seckill.db import Database
from seckill.gate import ATTACHED, Gate, Reservation
from seckill.ids import next_order_id
from seckill.messages import OrderMessage, OrderQueue
from seckill.reconcile import VoucherReconciled, reconcile
from seckill.recovery import Recovery, recover_if_lost
from seckill.scripts import Scripts
from seckill.timeutil import from_ms
from seckill.vouchers import SeckillVoucherIn
from seckill_local.checkout import ROOT
from seckill_local.ports import free_port
from seckill_local.sqs import LOCAL_AWS

EVENTS = ROOT / "events"
HINT_TTL = 3600


def new_user() -> int:
    """A user id no other test (or earlier run) is likely to hold."""
    return secrets.randbelow(10**12) + 10**6


def closed_port() -> int:
    """A local port nothing listens on: for an unreachable Redis, MySQL or endpoint."""
    return free_port()


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


def accept(
    gate: Gate, redis: Any, voucher_id: int, user_id: int | None = None, *, promise: bool = True
) -> OrderMessage:
    """What the API does for a winner, short of the send: reserve, make the order id,
    attach it, and (``promise``) mark it promised, as once its client is answered 202."""
    reservation = gate.reserve(voucher_id, user_id or new_user(), uuid.uuid4().hex)
    assert isinstance(reservation, Reservation), reservation
    return accepted(gate, redis, reservation, promise=promise)


def accepted(gate: Gate, redis: Any, reservation: Reservation, *, promise: bool = True) -> OrderMessage:
    """``accept`` once the gate has reserved."""
    order_id = next_order_id(redis)
    assert gate.attach(reservation, order_id) == ATTACHED
    if promise:
        assert gate.promise(reservation.voucher_id, reservation.user_id, order_id)
    return OrderMessage(order_id, reservation.user_id, reservation.voucher_id, from_ms(reservation.accepted_ms))


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
    """``python ARGS`` with this interpreter (``-m seckill.reconcile``...), captured."""
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
) -> dict[str, str]:
    """The headers of a request SigV4-signed as botocore signs it (the Host included)."""
    request = AWSRequest(method=method, url=url, data=data, headers=headers or {})
    SigV4Auth(AwsCredentials(key, secret), service, "us-east-1").add_auth(request)
    return {**dict(request.headers), "host": urllib.parse.urlsplit(url).netloc}
