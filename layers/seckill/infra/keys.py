"""Redis key names. Every key of one voucher shares the ``{voucherId}`` hash tag,
so the Lua scripts see all of them in one cluster slot."""

from __future__ import annotations

import functools
from datetime import datetime


def stock(voucher_id: int) -> str:
    return f"seckill:stock:{{{voucher_id}}}"


def buyers(voucher_id: int) -> str:
    return f"seckill:order:{{{voucher_id}}}"


def window(voucher_id: int) -> str:
    return f"seckill:window:{{{voucher_id}}}"


def pending(voucher_id: int) -> str:
    return f"seckill:pending:{{{voucher_id}}}"


def returned(voucher_id: int) -> str:
    """Set of the order ids whose unit is back in the stock key: none goes back twice."""
    return f"seckill:returned:{{{voucher_id}}}"


def cursor(voucher_id: int) -> str:
    """Sorted set of a draw's cursor moves: member = the cursor (17 hex), score = when it
    takes effect (epoch ms). The cursor in effect is the member with the largest score
    not after now; none before the draw closes (docs/draw.md)."""
    return f"seckill:cursor:{{{voucher_id}}}"


def clock_wake(voucher_id: int) -> str:
    """Set for a second when a press wakes a draw's clock (``seckill.draw.moves.wake``)."""
    return f"seckill:clock-wake:{{{voucher_id}}}"


def edge(voucher_id: int) -> str:
    """Hash: the version and the last state claimed for the edge (``lua/edge_claim.lua``)."""
    return f"seckill:edge:{{{voucher_id}}}"


@functools.lru_cache(maxsize=1024)
def voucher_keys(voucher_id: int) -> tuple[str, ...]:
    """Every key of one voucher's gate state, in the order the gate and restore scripts take them
    (remembered: a sale's presses name a handful of vouchers, tens of thousands of times)."""
    return (stock(voucher_id), buyers(voucher_id), window(voucher_id), pending(voucher_id))


@functools.lru_cache(maxsize=1024)
def gate_keys(voucher_id: int) -> tuple[str, ...]:
    """The gate script's keys: the voucher's gate state, then its draw's cursor."""
    return (*voucher_keys(voucher_id), cursor(voucher_id))


def give_back_keys(voucher_id: int) -> list[str]:
    """``lua/give_back.lua``'s keys: the stock, the returned set, the window."""
    return [stock(voucher_id), returned(voucher_id), window(voucher_id)]


def loaded() -> str:
    """Set whenever vouchers are loaded or rebuilt: its absence means Redis lost its data,
    so a voucher the gate cannot find may exist after all (answer 503, not 404)."""
    return "seckill:loaded"


def rebuild_lock() -> str:
    """Held while the vouchers Redis lost are rebuilt: one rebuild at a time."""
    return "seckill:rebuild-lock"


def order_status(order_id: int) -> str:
    """Looked up by order id alone: a hint for the status route, never needed for correctness."""
    return f"seckill:order-status:{order_id}"


def order_counter(day: datetime) -> str:
    """The order-id counter of a UTC day."""
    return f"icr:order:{day:%Y:%m:%d}"


def login_token(token: str) -> str:
    return f"login:token:{token}"
