"""The seckill gate: who may buy, decided atomically in Redis by ``lua/gate.lua``."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seckill import keys
from seckill.errors import Conflict, NotFound, SeckillError, TryAgain
from seckill.scripts import Scripts

NOT_FOUND, NOT_STARTED, ENDED, SOLD_OUT, DUPLICATE = 1, 2, 3, 4, 5
REFUSALS: dict[int, tuple[type[SeckillError], str, str]] = {
    NOT_FOUND: (NotFound, "VOUCHER_NOT_FOUND", "voucher not found"),
    NOT_STARTED: (Conflict, "NOT_STARTED", "the sale has not started"),
    ENDED: (Conflict, "ENDED", "the sale has ended"),
    SOLD_OUT: (Conflict, "SOLD_OUT", "sold out"),
    DUPLICATE: (Conflict, "DUPLICATE_ORDER", "one order per user"),
}
# Refusals that stay true for everyone for a while, so a warm function may
# repeat them without asking Redis.
_CACHEABLE = {ENDED, SOLD_OUT}


def refusal(code: int) -> SeckillError:
    cls, error_code, message = REFUSALS[code]
    return cls(message, code=error_code)


@dataclass(frozen=True)
class Reservation:
    """One unit of stock held for one user by one request."""

    voucher_id: int
    user_id: int
    token: str
    accepted_ms: int


class Gate:
    def __init__(
        self,
        redis: Any,
        scripts: Scripts,
        refusal_cache_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.scripts = scripts
        self.refusal_cache_seconds = refusal_cache_seconds
        self.clock = clock
        self._refused: dict[int, tuple[float, int]] = {}

    def reserve(self, voucher_id: int, user_id: int, token: str) -> Reservation:
        """One Redis round trip; none while a recent SOLD_OUT/ENDED is remembered."""
        cached = self._refused.get(voucher_id)
        if cached is not None:
            expires, code = cached
            if self.clock() < expires:
                raise refusal(code)
            # pop, not del: a release in another thread may have dropped it already.
            self._refused.pop(voucher_id, None)
        code, now_ms = self.scripts.gate(
            keys=[keys.stock(voucher_id), keys.buyers(voucher_id), keys.window(voucher_id), keys.pending(voucher_id)],
            args=[user_id, token],
        )
        code = int(code)
        if code == 0:
            return Reservation(voucher_id, user_id, token, int(now_ms))
        if code == NOT_FOUND and not self.redis.exists(keys.loaded()):
            raise TryAgain("the sale is being restored, please try again")
        if code in _CACHEABLE and self.refusal_cache_seconds > 0:
            self._refused[voucher_id] = (self.clock() + self.refusal_cache_seconds, code)
        raise refusal(code)

    def attach(self, reservation: Reservation, order_id: int, client: Any = None) -> Any:
        """Write the order id onto the reservation (``client`` may be a pipeline)."""
        return self.scripts.attach(
            keys=[keys.pending(reservation.voucher_id)],
            args=[reservation.user_id, reservation.token, order_id],
            client=client or self.redis,
        )

    def release(self, reservation: Reservation) -> bool:
        """Give the stock and the user's place back; idempotent."""
        v = reservation.voucher_id
        released = self.scripts.release(
            keys=[keys.stock(v), keys.buyers(v), keys.pending(v)],
            args=[reservation.user_id, reservation.token],
        )
        self._refused.pop(v, None)
        return bool(released)

    def settle(self, voucher_id: int, user_id: int, order_id: int) -> bool:
        """Clear the pending mark of an order the database has decided."""
        return bool(self.scripts.settle(keys=[keys.pending(voucher_id)], args=[user_id, order_id]))
