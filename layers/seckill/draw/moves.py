"""The draw clock: the cursor's moves, decided on time, recorded in MySQL, then published
to Redis (for the gate) and to the edge (docs/draw.md).

The first move takes effect at the close, decided once it has passed, with the
stock; wave n takes effect at ``beginTime + n x waveSeconds`` while the window is open
and units are on sale, decided ``LEAD_MS`` before. Each is one transaction under the
draw's row lock: read the entrants not yet admitted, record the move, and hand the
clock its next time. The clock is a chain of delayed messages on DrawClockQueue
(``ClockMessage``): each names the ``at`` it is for, and only the message for the
draw's ``clock_at`` decides anything, so a duplicate, a redelivery or a second chain
changes nothing (a move recorded twice is one move: its key is the voucher and ``at``).
SQS delays a message 15 minutes at most: one that comes early is sent again with the
time left. If the chain breaks (a send lost), the reconciler sends its message again
(``restart_stalled``).
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pymysql.cursors import DictCursor

from seckill.draw import entrants
from seckill.draw.entries import Draw, read_draw, recorded_moves
from seckill.draw.tickets import move_size, next_cursor, step_sizes
from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.db import Database
from seckill.infra.errors import NotFound, TryAgain
from seckill.infra.lua_scripts import Script, read_script
from seckill.messages import MalformedMessage

log = logging.getLogger(__name__)

# A wave is decided and published this long before it takes effect, so that the edge
# holds it before it applies.
LEAD_MS = 5000
# SQS's longest DelaySeconds.
MAX_DELAY_SECONDS = 900
# A chain whose next message is this late is restarted by the reconciler.
STALLED_MS = 60_000
# The close's move is recorded within this of the close whatever fails (docs/draw.md,
# "The close's move"); one recorded later is counted, and alarmed on.
CLOSE_BOUND_MS = 5000
# A failed tick is retried after 1 s, then 2, 4, ... up to this (not after the queue's
# visibility timeout): the close's move cannot wait minutes.
RETRY_MAX_SECONDS = 20
# A press that finds the draw closed with no move wakes the clock at most this often.
WAKE_MS = 1000
# While a paced move has steps to come, the clock relays them to the edge this often: an
# edge entry holds the step in effect and the next 15 (seckill.edge.state.MOVES_MAX), so a
# relay decided LEAD_MS ahead lands well before the edge runs out of them.
RELAY_MS = 10_000


@dataclass(frozen=True)
class ClockMessage:
    """DrawClockQueue's body: the move of ``voucher_id`` that takes effect at ``at_ms``."""

    voucher_id: int
    at_ms: int

    def to_json(self) -> str:
        return json.dumps({"voucherId": self.voucher_id, "at": self.at_ms})

    @classmethod
    def from_json(cls, body: str) -> ClockMessage:
        try:
            data = json.loads(body)
            voucher_id, at_ms = data["voucherId"], data["at"]
            if type(voucher_id) is not int or type(at_ms) is not int or voucher_id < 1 or at_ms < 0:
                raise ValueError("voucherId and at must be non-negative integers")
        except (ValueError, TypeError, KeyError) as exc:
            raise MalformedMessage(f"malformed draw clock message: {exc}") from exc
        return cls(voucher_id, at_ms)


class ClockQueue:
    """Sends the clock's messages, each delayed until its move is due (or SQS's longest delay)."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url

    def send(self, message: ClockMessage, due_ms: int, now_ms: int) -> None:
        delay = min(MAX_DELAY_SECONDS, max(0, math.ceil((due_ms - now_ms) / 1000)))
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=message.to_json(), DelaySeconds=delay)

    def retry_soon(self, receipt_handle: str, receives: int) -> None:
        """A message whose tick failed comes back after 1, 2, 4, ... seconds (its
        ``receives``-th failure), up to ``RETRY_MAX_SECONDS``, instead of after the
        queue's visibility timeout; maxReceiveCount bounds the tries."""
        seconds = min(RETRY_MAX_SECONDS, 2 ** max(0, receives - 1))
        self.sqs.change_message_visibility(
            QueueUrl=self.queue_url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
        )


# No clock to wake (a caller that places orders on races only).
NO_CLOCK = ClockQueue(None, "")


def due(draw: Draw, at_ms: int) -> int:
    """When the move at ``at_ms`` is decided: the first at the close, a wave ``LEAD_MS`` before."""
    return at_ms if at_ms == draw.close_ms else at_ms - LEAD_MS


def next_wave(draw: Draw, after_ms: int) -> int | None:
    """The first wave taking effect after ``after_ms`` (the move just handled, or now when
    that is later: a wave is never recorded after it took effect); None once none would
    take effect inside the window (or the sale was stopped)."""
    if draw.withdrawn:
        return None
    wave_ms = draw.wave_seconds * 1000
    n = max(1, (after_ms - draw.begin_ms) // wave_ms + 1)
    at = draw.begin_ms + n * wave_ms
    return at if at < draw.end_ms else None


class Tick(Enum):
    MOVED = "moved"  # a move recorded
    STILL = "still"  # decided: no move (nobody waiting, or no unit on sale)
    MISSED = "missed"  # the message came after its wave took effect: none made, the next one scheduled
    EARLY = "early"  # sent again with the time left
    STALE = "stale"  # not the draw's next time (a duplicate, an old chain): nothing done
    RELAY = "relay"  # a paced move's steps still to come: published again, for the edge's next ones


@dataclass(frozen=True)
class Decided:
    tick: Tick
    admitted: int = 0
    cursor: str | None = None
    # For the close's move: how long after the close it was recorded (ms).
    close_lag_ms: int | None = None
    # A paced move's steps: how many, and when the last takes effect.
    steps: int = 1
    last_at: int | None = None


def units_on_sale(redis: RedisClient, voucher_id: int) -> int:
    """The gate's stock: units not reserved, those given back included. Redis without the
    voucher (lost) raises: the message is retried once recovery has rebuilt it."""
    stock = redis.get(keys.stock(voucher_id))
    if stock is None:
        raise LookupError(f"voucher {voucher_id} is not in Redis: its move waits for recovery")
    return max(0, int(stock))


def tick(db: Database, redis: RedisClient, queue: ClockQueue, message: ClockMessage) -> Decided:
    """Handle one clock message: decide the move it names if it is due and the draw's
    next, record it, and send the message of the clock's next time (in the same
    transaction: if the send fails, nothing is recorded and the message is retried).
    Every recorded move is then published to Redis (``publish``)."""
    v = message.voucher_id

    def work(cursor: DictCursor) -> Decided:
        try:
            draw = read_draw(cursor, v, " FOR UPDATE")
        except NotFound:
            return Decided(Tick.STALE)  # a creation that sent its clock and then failed to commit
        if draw is None or draw.clock_at != message.at_ms:
            return Decided(Tick.STALE)
        if draw.now_ms < due(draw, message.at_ms):
            queue.send(message, due(draw, message.at_ms), draw.now_ms)
            return Decided(Tick.EARLY)
        first = message.at_ms == draw.close_ms
        last = None if first else last_step(cursor, v)
        if draw.over:
            decided = Decided(Tick.STILL)
        elif last is not None and last >= message.at_ms:
            decided = Decided(Tick.RELAY, last_at=last)
        elif not first and draw.now_ms >= message.at_ms:
            log.warning("draw %s: the wave at %s was not decided in time", v, message.at_ms)
            decided = Decided(Tick.MISSED)
        elif first:
            decided = _move(cursor, draw, message.at_ms, stored_stock(cursor, v), first=True)
        else:
            decided = _move(cursor, draw, message.at_ms, units_on_sale(redis, v), first=False)
        following = next_time(draw, message.at_ms, decided.last_at)
        cursor.execute("UPDATE tb_draw SET clock_at = %s WHERE voucher_id = %s", (following, v))
        if following is not None:
            queue.send(ClockMessage(v, following), due(draw, following), draw.now_ms)
        return decided

    decided = db.run(work)
    publish(db, redis, v)
    return decided


def next_time(draw: Draw, at_ms: int, last_step: int | None) -> int | None:
    """The clock's next time after the one at ``at_ms``: a relay ``RELAY_MS`` on while a
    paced move's steps go on past it (up to ``last_step``); else the next wave, which
    resumes only after the last step."""
    if last_step is not None and last_step > at_ms + RELAY_MS and not draw.over:
        return at_ms + RELAY_MS
    return next_wave(draw, max(last_step or at_ms, draw.now_ms))


def last_step(cursor: DictCursor, voucher_id: int) -> int | None:
    """When the latest recorded move (or step) takes effect; None before the first."""
    cursor.execute("SELECT MAX(at_ms) AS at FROM tb_draw_move WHERE voucher_id = %s", (voucher_id,))
    at = cursor.fetchone()["at"]  # type: ignore[index]  # an aggregate answers one row
    return None if at is None else int(at)


def stored_stock(cursor: DictCursor, voucher_id: int) -> int:
    """The stock MySQL holds: the units on sale at the close, since nothing is sold
    before the opening. So the close's move needs no Redis (lost at the close, say)."""
    cursor.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", (voucher_id,))
    return max(0, int(cursor.fetchone()["stock"]))  # type: ignore[index]  # read_draw found the voucher


def step_times(draw: Draw, at_ms: int, steps: int, *, first: bool) -> list[int]:
    """When each step of the move at ``at_ms`` takes effect, one second apart: the first at
    ``at_ms``; the close's later steps from the opening on (``beginTime`` + 1 s, + 2 s, ...),
    a wave's right after it."""
    later = draw.begin_ms if first else at_ms
    return [at_ms] + [later + 1000 * k for k in range(1, steps)]


def _move(cursor: DictCursor, draw: Draw, at_ms: int, units: int, *, first: bool) -> Decided:
    """The move at ``at_ms``: in ticket order, admit ``min(waiting, admitFactor x units)``
    more, in steps of at most ``admitRate`` when the draw is paced; after each step the
    cursor is the smallest ticket still waiting, or the next late ticket when none is.
    Every step is recorded now, with its own time. The first move is made even if it
    admits nobody."""
    v = draw.voucher_id
    # The cursor after the last step recorded, and how many the moves admitted: one row
    # however many steps a paced draw has recorded.
    cursor.execute(
        "SELECT COALESCE(SUM(admitted), 0) AS n, (SELECT cursor_after FROM tb_draw_move WHERE voucher_id = %s"
        " ORDER BY at_ms DESC LIMIT 1) AS last FROM tb_draw_move WHERE voucher_id = %s",
        (v, v),
    )
    row = cursor.fetchone()
    moved, current = int(row["n"]), row["last"] or ""  # type: ignore[index]  # an aggregate answers one row
    waiting = entrants.total(cursor, v) - moved
    admit = move_size(waiting, draw.admit_factor, units)
    if admit == 0 and not first:
        return Decided(Tick.STILL)
    sizes = step_sizes(admit, draw.admit_rate)
    ends = list(itertools.accumulate(sizes))  # admitted after each step
    # The ticket just past each step (row end + 1 in ticket order), in one pass over the
    # tickets the move admits.
    cursor.execute(
        "SELECT rn, ticket FROM (SELECT ticket, ROW_NUMBER() OVER (ORDER BY ticket) AS rn FROM tb_draw_entry"
        " WHERE voucher_id = %s AND ticket >= %s ORDER BY ticket LIMIT %s) AS t"
        " WHERE (rn - 1) %% %s = 0 OR rn = %s",
        (v, current, admit + 1, draw.admit_rate or admit + 1, admit + 1),
    )
    past = {int(row["rn"]) - 1: str(row["ticket"]) for row in cursor.fetchall()}
    times = step_times(draw, at_ms, len(sizes), first=first)
    cursors = [next_cursor(past.get(end), draw.late_count) for end in ends]
    cursor.executemany(
        "INSERT INTO tb_draw_move (voucher_id, at_ms, cursor_after, admitted, units, step)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        [(v, t, c, size, units, k) for k, (t, c, size) in enumerate(zip(times, cursors, sizes, strict=True))],
    )
    return Decided(
        Tick.MOVED,
        admit,
        cursors[-1],
        close_lag_ms=draw.now_ms - at_ms if first else None,
        steps=len(sizes),
        last_at=times[-1],
    )


def decided_until(draw: Draw) -> int:
    """How far the draw's moves are decided (epoch ms): every move taking effect before the
    clock's next time has been recorded or decided as none; a finished clock (the window
    over, the sale stopped, no wave left) decides nothing more before the window's end."""
    return draw.clock_at if draw.clock_at is not None else draw.end_ms


@functools.cache
def _publish_moves_text() -> str:
    """``lua/publish_moves.lua``, read once per process (the clock runs it at every tick)."""
    return read_script("publish_moves")


def publish(db: Database, redis: RedisClient, voucher_id: int) -> int:
    """Every recorded move of the draw into its Redis cursor, and how far they are decided
    into its window's ``decided``, never moving back (idempotent); how many moves."""

    def read(cursor: DictCursor) -> tuple[list[tuple[int, str]], Draw | None]:
        return recorded_moves(cursor, voucher_id), read_draw(cursor, voucher_id)

    history, draw = db.run(read, read_only=True)
    if draw is None:
        return 0
    Script(redis, _publish_moves_text())(
        keys=[keys.cursor(voucher_id), keys.window(voucher_id)],
        args=[decided_until(draw), *[part for at, c in history for part in (at, c)]],
    )
    return len(history)


def start(queue: ClockQueue, voucher_id: int, close_ms: int) -> None:
    """The clock's first message, at a draw's creation, inside its transaction: due at
    the close, sent twice (two independent messages: one lost, the other decides; the
    second finds the move made and only publishes it). ``TryAgain`` if it cannot be
    sent: no draw is created without its clock."""
    message, now_ms = ClockMessage(voucher_id, close_ms), int(time.time() * 1000)
    try:
        for _ in range(2):
            queue.send(message, close_ms, now_ms)
    except Exception as exc:
        raise TryAgain("the draw clock could not be started, please try again") from exc


def wake(redis: RedisClient, queue: ClockQueue, voucher_id: int, close_ms: int) -> bool:
    """A press found the draw closed and no move in Redis: the clock's message for the
    close again, due now, at most once per ``WAKE_MS`` per voucher whatever the number
    of containers. Whether the close's tick was lost, failed or its publish did, the
    message decides the move or publishes the one recorded. True if this call sent it."""
    if not queue.queue_url or not redis.set(keys.clock_wake(voucher_id), 1, nx=True, px=WAKE_MS):
        return False
    queue.send(ClockMessage(voucher_id, close_ms), 0, 0)
    return True


def restart_stalled(db: Database, queue: ClockQueue) -> list[int]:
    """The draws whose clock message is overdue by ``STALLED_MS`` (a send lost, a
    message dead-lettered) get it again, due now; the vouchers restarted."""

    def read(cursor: DictCursor) -> list[dict[str, Any]]:
        cursor.execute(
            "SELECT voucher_id, clock_at FROM tb_draw WHERE clock_at IS NOT NULL AND clock_at < %s",
            (int(time.time() * 1000) - STALLED_MS,),
        )
        return list(cursor.fetchall())

    stalled = db.run(read, read_only=True)
    for row in stalled:
        queue.send(ClockMessage(int(row["voucher_id"]), int(row["clock_at"])), 0, 0)
    return [int(row["voucher_id"]) for row in stalled]
