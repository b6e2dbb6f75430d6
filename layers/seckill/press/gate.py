"""The seckill gate: who may buy, decided atomically in Redis by ``lua/gate.lua``."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from seckill.ids import OrderIds
from seckill.infra import keys
from seckill.infra.clients import RedisClient, RedisPipeline
from seckill.infra.errors import Refusal, TryAgain
from seckill.infra.lua_scripts import Scripts

OK, NOT_FOUND, NOT_STARTED, ENDED, SOLD_OUT, DUPLICATE, RESUMED, ENDED_UNSENT = 0, 1, 2, 3, 4, 5, 6, 7
# A draw voucher's own refusals (docs/draw.md); UNMOVED is NOT_ADMITTED because the
# draw has closed and its first move is not in Redis yet.
NO_PASS, NOT_ADMITTED, UNMOVED = 8, 9, 10


REFUSALS: dict[int, Refusal] = {
    NOT_FOUND: Refusal(404, "VOUCHER_NOT_FOUND", "voucher not found"),
    NOT_STARTED: Refusal(409, "NOT_STARTED", "the sale has not started"),
    ENDED: Refusal(409, "ENDED", "the sale has ended"),
    SOLD_OUT: Refusal(409, "SOLD_OUT", "sold out"),
    DUPLICATE: Refusal(409, "DUPLICATE_ORDER", "one order per user"),
    NO_PASS: Refusal(403, "NO_PASS", "no valid pass for this voucher"),
    NOT_ADMITTED: Refusal(409, "NOT_ADMITTED", "not admitted yet"),
}
# Refusals that stay true for everyone for a while, so a warm function may
# repeat them without asking Redis.
_CACHEABLE = {ENDED, SOLD_OUT}


@dataclass(frozen=True)
class Reservation:
    """One unit of stock held for one user by one request, for one order id: the press's
    own, or with ``resumed`` that of an earlier request of the user which no client was
    told 202 for (see ``lua/gate.lua``). ``last``: this press took the voucher's last unit."""

    voucher_id: int
    user_id: int
    token: str
    accepted_ms: int
    order_id: int
    resumed: bool = False
    last: bool = False


_MARK = re.compile(r"(\d+):([^:]+):(\d+)(:promised)?")


@dataclass(frozen=True)
class Mark:
    """A reservation as ``seckill:pending:{v}`` holds it (docs/reservations.md):
    ``<acceptedMs>:<requestToken>:<orderId>[:promised]``."""

    accepted_ms: int
    token: str
    order_id: int
    promised: bool

    @classmethod
    def parse(cls, value: str) -> Mark | None:
        found = _MARK.fullmatch(value)
        if found is None:
            return None
        return cls(int(found[1]), found[2], int(found[3]), bool(found[4]))


@dataclass(frozen=True)
class Unsent:
    """The gate's ENDED to a user whose reservation, left by an earlier request that
    answered 503 or died, carries an order id no client was told 202 for: the caller
    resolves it as reconciliation would (fails the order, then releases the unit) and
    answers ENDED (docs/reservations.md)."""

    reservation: Reservation


@dataclass(frozen=True)
class Unmoved:
    """The gate's NOT_ADMITTED on a draw that has closed (at ``close_ms``) with no move
    in Redis: the caller answers NOT_ADMITTED and wakes the draw clock
    (``seckill.draw.moves.wake``)."""

    close_ms: int


class Gate:
    def __init__(
        self,
        redis: RedisClient,
        scripts: Scripts,
        refusal_cache_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        ids: OrderIds | None = None,
    ) -> None:
        self._redis = redis
        self.scripts = scripts
        self.ids = ids or OrderIds(redis)
        self.refusal_cache_seconds = refusal_cache_seconds
        self.clock = clock
        self._refused: dict[int, tuple[float, Refusal]] = {}

    def reserve(
        self,
        voucher_id: int,
        user_id: int,
        token: str | None = None,
        order_id: int | None = None,
        ticket: str = "",
    ) -> Reservation | Refusal | Unsent | Unmoved:
        """One Redis round trip (and, about once in ``OrderIds.block`` winners, a lease);
        none while a recent SOLD_OUT/ENDED is remembered. ``token`` names this request's
        reservation (by default 32 random hex digits, made only when Redis is asked);
        ``order_id`` the id it brings (by default the next of the container's block; an
        id the gate did not use goes back to the block, one whose call failed does not:
        the script may have run). ``ticket``: the press's valid pass's, on a draw voucher
        (a draw's refusals depend on it, so none is remembered for it). ``TryAgain`` when
        Redis has lost its data (the voucher may exist after all)."""
        cached = None if ticket else self._refused.get(voucher_id)
        if cached is not None:
            expires, refusal = cached
            if self.clock() < expires:
                return refusal
            # pop, not del: a release in another thread may have dropped it already.
            self._refused.pop(voucher_id, None)
        if token is None:
            # As uuid4().hex, from os.urandom at a third of its cost.
            token = os.urandom(16).hex()
        offered = self.ids.take() if order_id is None else order_id
        code, now_ms, reserved, extra = self.scripts.gate(
            keys=keys.gate_keys(voucher_id), args=(user_id, token, offered, ticket)
        )
        if order_id is None and (code != OK or int(reserved) != offered):
            self.ids.give_back(offered)
        if code == OK:
            return Reservation(voucher_id, user_id, token, now_ms, int(reserved), last=extra == 0)
        if code == RESUMED:
            return Reservation(voucher_id, user_id, token, now_ms, int(reserved), resumed=True)
        if code == ENDED_UNSENT:
            # The earlier request's reservation: its token and acceptance time.
            if not ticket:
                self.remember_refusal(voucher_id, ENDED)
            return Unsent(Reservation(voucher_id, user_id, extra, now_ms, int(reserved)))
        if code == UNMOVED:
            return Unmoved(int(reserved))
        if code == NOT_FOUND and not self._redis.exists(keys.loaded()):
            raise TryAgain("the sale is being restored, please try again")
        if code in _CACHEABLE and not ticket:
            self.remember_refusal(voucher_id, code)
        return REFUSALS[code]

    def remember_refusal(self, voucher_id: int, code: int) -> None:
        """Repeat this refusal without asking Redis for a while (SOLD_OUT, ENDED)."""
        if self.refusal_cache_seconds > 0:
            self._refused[voucher_id] = (self.clock() + self.refusal_cache_seconds, REFUSALS[code])

    def promise(self, voucher_id: int, user_id: int, order_id: int) -> bool:
        """Record that the client is told 202 for this order; False if its mark is
        gone (the persister already decided the order)."""
        return bool(self.scripts.promise(keys=[keys.pending(voucher_id)], args=[user_id, order_id]))

    def promise_in(self, pipe: RedisPipeline, voucher_id: int, user_id: int, order_id: int) -> None:
        """``promise`` queued on a pipeline: its reply, 1 or 0, comes with the others; a
        NoScriptError there means Redis lost the script, and ``promise`` loads it again."""
        # A plain command: redis-py's cluster pipeline refuses its evalsha() method,
        # though EVALSHA routes by its key like any other command.
        pipe.execute_command("EVALSHA", self.scripts.promise.sha, 1, keys.pending(voucher_id), user_id, order_id)

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
