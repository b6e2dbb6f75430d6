"""A draw's entries and its public record (docs/draw.md), MySQL being the truth.

An entry before the close gets the seed's ticket, one after it the next late
sequence number. Both decide "before the close" by the database's clock, as the
clock's first move does (``seckill.draw.moves``). An entry before the close holds
the draw's row shared, so the first move (which takes it exclusively once the close
has passed) counts every entry made before it; a late entry takes no lock on it: it
numbers itself by a sequence of its own (``entrants.next_late``), so a surge of late
entries never holds up the clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pymysql
from pymysql.cursors import DictCursor

from seckill import passes
from seckill.draw import entrants
from seckill.draw.tickets import admitted, ahead, early_ticket, late_ticket
from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.db import Database
from seckill.infra.errors import NotFound, Refusal, SeckillError
from seckill.infra.timeutil import from_db, from_ms, iso, to_ms
from seckill.vouchers import WITHDRAWN

Lock = Literal["", " LOCK IN SHARE MODE", " FOR UPDATE"]


class Ended(SeckillError):
    status = 409
    code = "ENDED"


class NotADraw(SeckillError):
    status = 409
    code = "NOT_A_DRAW"


NOT_FOUND = "no such seckill voucher"
# How long a container serves a record as read (``Records``) in a stack without the edge,
# whose cache (2 s) is the record's otherwise: seconds.
RECORD_MAX_AGE = 1.0
NO_DRAW = Refusal(404, "VOUCHER_NOT_FOUND", "no such draw")


@dataclass(frozen=True)
class Draw:
    """A draw voucher's row, with its sale's window and the database's clock (epoch ms)."""

    voucher_id: int
    seed: bytes
    commitment: str
    admit_factor: int
    wave_seconds: int
    admit_rate: int | None
    close_ms: int
    begin_ms: int
    end_ms: int
    withdrawn: bool
    late_count: int
    clock_at: int | None
    now_ms: int

    @property
    def over(self) -> bool:
        """The window is over or the sale was stopped: no entry, no move, the seed revealed."""
        return self.withdrawn or self.now_ms >= self.end_ms


def read_draw(cursor: DictCursor, voucher_id: int, lock: Lock = "") -> Draw | None:
    """The draw of this voucher (its row locked as asked); None for a seckill voucher
    that is a race; ``NotFound`` for no seckill voucher at all."""
    if lock:
        # The draw's row alone: the voucher's is the persister's, hot during a sale. Read
        # after the lock is held, the row below is the latest committed.
        cursor.execute(f"SELECT 1 FROM tb_draw WHERE voucher_id = %s{lock}", (voucher_id,))
    cursor.execute(
        "SELECT sv.begin_time, sv.end_time, v.status, d.seed, d.commitment, d.admit_factor, d.wave_seconds,"
        " d.admit_rate, d.close_time, COALESCE(l.late_count, 0) AS late_count, d.clock_at,"
        " UTC_TIMESTAMP(3) AS now FROM tb_seckill_voucher sv JOIN tb_voucher v ON v.id = sv.voucher_id"
        " LEFT JOIN tb_draw d ON d.voucher_id = sv.voucher_id LEFT JOIN tb_draw_late l ON l.voucher_id = sv.voucher_id"
        " WHERE sv.voucher_id = %s",
        (voucher_id,),
    )
    row = cursor.fetchone()
    if row is None:
        raise NotFound(NOT_FOUND, code="VOUCHER_NOT_FOUND")
    if row["seed"] is None:
        return None
    return Draw(
        voucher_id=voucher_id,
        seed=bytes(row["seed"]),
        commitment=row["commitment"],
        admit_factor=int(row["admit_factor"]),
        wave_seconds=int(row["wave_seconds"]),
        admit_rate=None if row["admit_rate"] is None else int(row["admit_rate"]),
        close_ms=to_ms(from_db(row["close_time"])),
        begin_ms=to_ms(from_db(row["begin_time"])),
        end_ms=to_ms(from_db(row["end_time"])),
        withdrawn=int(row["status"]) == WITHDRAWN,
        late_count=int(row["late_count"]),
        clock_at=None if row["clock_at"] is None else int(row["clock_at"]),
        now_ms=to_ms(from_db(row["now"])),
    )


@dataclass(frozen=True)
class Entry:
    ticket: str
    late: bool
    expires: int  # the window's end, epoch seconds: no pass outlives it


def _entry(cursor: DictCursor, voucher_id: int, user_id: int) -> tuple[str, bool] | None:
    cursor.execute(
        "SELECT ticket, late FROM tb_draw_entry WHERE voucher_id = %s AND user_id = %s", (voucher_id, user_id)
    )
    row = cursor.fetchone()
    return None if row is None else (row["ticket"], bool(row["late"]))


def _open(cursor: DictCursor, voucher_id: int, user_id: int) -> tuple[Draw, Entry | None]:
    """The draw and the user's entry if made already; ``Ended`` once the window is over or
    the sale stopped, ``NotADraw`` for a race."""
    draw = read_draw(cursor, voucher_id)
    if draw is None:
        raise NotADraw("this voucher is sold first come, first served: no entry")
    if draw.over:
        raise Ended("the sale has ended")
    known = _entry(cursor, voucher_id, user_id)
    return draw, None if known is None else Entry(known[0], known[1], draw.end_ms // 1000)


def enter(db: Database, voucher_id: int, user_id: int) -> Entry:
    """The user's entry, stored (once) before this returns, and counted with it; the same
    ticket again for an entrant. ``Ended`` once the window is over or the sale stopped,
    ``NotADraw`` for a race, ``NotFound`` for no such voucher. One transaction."""

    def work(cursor: DictCursor) -> Entry:
        draw, known = _open(cursor, voucher_id, user_id)
        if known is not None:
            return known
        expires = draw.end_ms // 1000
        if draw.now_ms < draw.close_ms and _open_under_lock(cursor, voucher_id):
            ticket = early_ticket(draw.seed, voucher_id, user_id)
            # IGNORE: the same user entering twice at once gets the same ticket either way,
            # and only the one whose row went in counts it.
            cursor.execute(
                "INSERT IGNORE INTO tb_draw_entry (voucher_id, user_id, ticket, late) VALUES (%s, %s, %s, 0)",
                (voucher_id, user_id, ticket),
            )
            if cursor.rowcount == 1:
                entrants.count(cursor, voucher_id, user_id)
            return Entry(ticket, False, expires)
        # Past the close: numbered by the late sequence, never waiting on the draw's row.
        ticket = late_ticket(entrants.next_late(cursor, voucher_id))
        cursor.execute(
            "INSERT INTO tb_draw_entry (voucher_id, user_id, ticket, late) VALUES (%s, %s, %s, 1)",
            (voucher_id, user_id, ticket),
        )
        entrants.count(cursor, voucher_id, user_id)
        return Entry(ticket, True, expires)

    try:
        return db.run(work)
    except pymysql.err.IntegrityError:
        # The same user's other request entered late first: its entry stands, and this
        # one's rollback gave its number back, so late numbers have no gap.
        return db.run(work)


def _open_under_lock(cursor: DictCursor, voucher_id: int) -> bool:
    """Whether the draw is still open, by the database's clock, under a shared lock on its
    row: the close's move takes it exclusively, so it counts every entry made under it."""
    cursor.execute(
        "SELECT UTC_TIMESTAMP(3) < close_time AS open FROM tb_draw WHERE voucher_id = %s LOCK IN SHARE MODE",
        (voucher_id,),
    )
    return bool(cursor.fetchone()["open"])  # type: ignore[index]  # _open found the draw


def enter_with_pass(db: Database, ring: passes.KeyRing, voucher_id: int, user_id: int, token: str) -> dict[str, Any]:
    """The entry route's answer: the user's entry (``enter``) and the pass every press of
    this entrant shows, issued afresh for the login token (bound to it)."""
    entry = enter(db, voucher_id, user_id)
    issued = passes.sign(ring, voucher_id, user_id, token, entry.ticket, entry.expires)
    return {"pass": issued, "ticket": entry.ticket, "late": entry.late}


def recorded_moves(cursor: DictCursor, voucher_id: int) -> list[tuple[int, str]]:
    """Every recorded move, (at in epoch ms, cursor), by time."""
    cursor.execute("SELECT at_ms, cursor_after FROM tb_draw_move WHERE voucher_id = %s ORDER BY at_ms", (voucher_id,))
    return [(int(r["at_ms"]), r["cursor_after"]) for r in cursor.fetchall()]


def in_effect(history: list[tuple[int, str]], now_ms: int) -> str | None:
    """The cursor in effect at ``now_ms``: that of the last move not after it."""
    current = None
    for at, cursor in history:
        if at <= now_ms:
            current = cursor
    return current


def look_up(db: Database, redis: RedisClient, voucher_id: int, user_id: int) -> dict[str, Any]:
    """The user's entry and chance: ``ahead`` is about how many entrants not yet admitted
    hold a smaller ticket (``tickets.ahead``: an estimate, and those who never press let
    later ones in); ``chance``
    is ``over`` once the window is over, or sold out with no hold outstanding."""

    def read(cursor: DictCursor) -> tuple[Draw, tuple[str, bool], str | None, int, bool]:
        draw = read_draw(cursor, voucher_id)
        known = None if draw is None else _entry(cursor, voucher_id, user_id)
        if draw is None or known is None:
            raise NotFound("no entry for this user", code="ENTRY_NOT_FOUND")
        current = in_effect(recorded_moves(cursor, voucher_id), draw.now_ms)
        # From the tickets' arithmetic and the kept count: no scan of the entries.
        early = entrants.total(cursor, voucher_id) - draw.late_count
        waiting = ahead(known[0], current, early, draw.late_count)
        cursor.execute(
            "SELECT stock = 0 AND NOT EXISTS (SELECT 1 FROM tb_voucher_order WHERE voucher_id = %s AND status = 1)"
            " AS gone FROM tb_seckill_voucher WHERE voucher_id = %s",
            (voucher_id, voucher_id),
        )
        return draw, known, current, waiting, bool(cursor.fetchone()["gone"])  # type: ignore[index]

    draw, (ticket, late), current, waiting, stored_out = db.run(read, read_only=True)
    yes = admitted(ticket, current)
    # Sold out with no hold outstanding: MySQL sold every unit and none is payable, and
    # Redis has no unit on sale nor an order on its way to MySQL.
    sold_out = stored_out and redis.get(keys.stock(voucher_id)) in ("0", None) and not _pending(redis, voucher_id)
    chance = "over" if draw.over or sold_out else "admitted" if yes else "waiting"
    return {"ticket": ticket, "late": late, "admitted": yes, "ahead": waiting, "chance": chance}


def _pending(redis: RedisClient, voucher_id: int) -> bool:
    return bool(redis.execute_command("HLEN", keys.pending(voucher_id)))


@dataclass(frozen=True)
class Record:
    """The draw's public record, and how long from its reading it stays as read while only
    time passes (ms): until the next recorded move takes effect or the window ends (and the
    seed is out); None once the draw is over, when nothing changes it any more."""

    data: dict[str, Any]
    steady_ms: int | None


def record(db: Database, voucher_id: int) -> Record:
    """The draw's public record: the commitment, the close, the counts, the cursor in
    effect and every move decided, and the seed once the window is over or the sale stopped."""

    def read(cursor: DictCursor) -> tuple[Draw, list[tuple[int, str]], int]:
        draw = read_draw(cursor, voucher_id)
        if draw is None:
            raise NotFound(NO_DRAW.message, code=NO_DRAW.code)
        return draw, recorded_moves(cursor, voucher_id), entrants.total(cursor, voucher_id)

    draw, history, count = db.run(read, read_only=True)
    changes = [at for at, _ in history if at > draw.now_ms] + ([] if draw.over else [draw.end_ms])
    data = {
        "commitment": draw.commitment,
        "closesAt": iso(from_ms(draw.close_ms)),
        "entrants": count,
        "lateEntrants": draw.late_count,
        "cursor": in_effect(history, draw.now_ms),
        "cursorHistory": [{"at": iso(from_ms(at)), "cursor": cursor} for at, cursor in history],
        "seed": draw.seed.hex() if draw.over else None,
    }
    return Record(data, min(changes) - draw.now_ms if changes else None)


class Records:
    """A container's cache of the records: each served for ``max_age`` seconds from its
    reading, so that calls to the API's own endpoint read MySQL once per draw and period at
    most; never past the moment time alone changes it (``Record.steady_ms``). 0: no cache."""

    def __init__(self, db: Database, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.max_age = max_age
        self.clock = clock
        self._kept: dict[int, tuple[float, dict[str, Any]]] = {}  # voucher id -> (until, record)

    def get(self, voucher_id: int) -> dict[str, Any]:
        now = self.clock()
        kept = self._kept.get(voucher_id)
        if kept is not None and now < kept[0]:
            return kept[1]
        read = record(self.db, voucher_id)
        steady = self.max_age if read.steady_ms is None else min(self.max_age, read.steady_ms / 1000)
        self._kept[voucher_id] = (now + steady, read.data)
        return read.data

    def forget(self, voucher_id: int) -> None:
        """A change this container made (the sale stopped): the next call reads it."""
        self._kept.pop(voucher_id, None)
