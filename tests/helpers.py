"""Steps of the service that several test modules take, written once."""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from typing import Any

from seckill import keys
from seckill.config import Settings
from seckill.db import Database
from seckill.gate import ATTACHED, Gate
from seckill.ids import next_order_id
from seckill.messages import OrderMessage, OrderQueue
from seckill.reconcile import VoucherReconciled, reconcile
from seckill.recovery import Recovery, recover_if_lost
from seckill.scripts import Scripts
from seckill.timeutil import from_ms
from tests.conftest import new_user

HINT_TTL = 3600


def accept(
    gate: Gate, redis: Any, voucher_id: int, user_id: int | None = None, *, promise: bool = True
) -> OrderMessage:
    """What the API does for a winner, short of the send: reserve, make the order id,
    attach it, and (``promise``) mark it promised, as once its client is answered 202."""
    reservation = gate.reserve(voucher_id, user_id or new_user(), uuid.uuid4().hex)
    order_id = next_order_id(redis)
    assert gate.attach(reservation, order_id) == ATTACHED
    if promise:
        assert gate.promise(voucher_id, reservation.user_id, order_id)
    return OrderMessage(order_id, reservation.user_id, voucher_id, from_ms(reservation.accepted_ms))


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
