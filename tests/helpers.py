"""Steps of the service that several test modules take, written once."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from seckill import keys
from seckill.db import Database
from seckill.gate import ATTACHED, Gate
from seckill.ids import next_order_id
from seckill.messages import OrderMessage, OrderQueue
from seckill.reconcile import VoucherReconciled, reconcile
from seckill.timeutil import from_ms
from tests.conftest import new_user

HINT_TTL = 3600


def accept(gate: Gate, voucher_id: int, user_id: int | None = None, *, promise: bool = True) -> OrderMessage:
    """What the API does for a winner, short of the send: reserve, make the order id,
    attach it, and (``promise``) mark it promised, as once its client is answered 202."""
    reservation = gate.reserve(voucher_id, user_id or new_user(), uuid.uuid4().hex)
    order_id = next_order_id(gate.redis)
    assert gate.attach(reservation, order_id) == ATTACHED
    if promise:
        assert gate.promise(voucher_id, reservation.user_id, order_id)
    return OrderMessage(order_id, reservation.user_id, voucher_id, from_ms(reservation.accepted_ms))


def reconcile_voucher(
    db: Database,
    gate: Gate,
    queue: OrderQueue,
    voucher_id: int,
    *,
    drained: bool = True,
    pending_age: timedelta = timedelta(0),
    dead_letters: Sequence[OrderMessage] | None = (),
) -> VoucherReconciled:
    """One reconciliation pass over one voucher (age 0: every reservation is stale)."""
    letters = None if dead_letters is None else list(dead_letters)
    result = reconcile(
        db,
        gate,
        queue,
        drained=drained,
        dead_letters=lambda: letters,
        hint_ttl=HINT_TTL,
        pending_age=pending_age,
        voucher_ids=[voucher_id],
    )
    return result.vouchers[0]


def mark(redis: Any, voucher_id: int, user_id: int) -> str | None:
    """The user's reservation mark, as the gate wrote it."""
    return redis.hget(keys.pending(voucher_id), str(user_id))
