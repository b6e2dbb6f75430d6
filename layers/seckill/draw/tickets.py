"""The draw's arithmetic (docs/draw.md): the commitment, tickets and the cursor's moves.

Pure functions, no I/O: what anyone can recompute once the seed is revealed.
Tickets and cursors are 17 lowercase hex characters, compared byte by byte
(as Python compares ``str`` and the gate script compares them).
"""

from __future__ import annotations

import hashlib
import hmac
import re

TICKET = re.compile(r"[0-9a-f]{17}")


def commitment(seed: bytes) -> str:
    """What is published at creation: hex SHA-256 of the 32 raw bytes of the seed."""
    return hashlib.sha256(seed).hexdigest()


def early_ticket(seed: bytes, voucher_id: int, user_id: int) -> str:
    """An entry before the draw closes: ``"0"`` + the first 16 hex of HMAC-SHA256(seed, "<voucherId>:<userId>")."""
    return "0" + hmac.new(seed, f"{voucher_id}:{user_id}".encode("ascii"), hashlib.sha256).hexdigest()[:16]


def late_ticket(sequence: int) -> str:
    """The ``sequence``-th entry (1, 2, ...) after the draw closed: ``"1"`` + 16 hex."""
    return f"1{sequence:016x}"


def admitted(ticket: str, cursor: str | None) -> bool:
    """An entrant is admitted while its ticket is below the cursor; nobody before the first move."""
    return cursor is not None and ticket < cursor


def next_cursor(still_waiting: str | None, late_count: int) -> str:
    """The cursor after a move: the smallest ticket the move left waiting, or, when it
    admitted everyone (``still_waiting`` None), the ticket the next late entrant will get."""
    return late_ticket(late_count + 1) if still_waiting is None else still_waiting


def move_size(waiting: int, admit_factor: int, units_on_sale: int) -> int:
    """How many a move admits: ``min(not yet admitted, admitFactor x units on sale)``."""
    return max(0, min(waiting, admit_factor * units_on_sale))


def step_sizes(admit: int, rate: int | None) -> list[int]:
    """A move of ``admit`` entrants as its steps, one second apart, each admitting at most
    ``rate`` (a paced draw's ``admitRate``); one step without a rate or within it."""
    if rate is None or admit <= rate:
        return [admit]
    full, rest = divmod(admit, rate)
    return [rate] * full + ([rest] if rest else [])


def ahead(ticket: str, cursor: str | None, early: int, late: int) -> int:
    """About how many entrants not yet admitted hold a smaller ticket, from the tickets'
    arithmetic alone (no scan): early tickets are uniform over 16 hex digits, so the
    share of the ``early`` entrants between the cursor and the ticket is their distance
    over 2^64; late tickets count one by one (``late``: the late entrants so far)."""
    if admitted(ticket, cursor):
        return 0
    low = 0 if cursor is None or cursor[0] != "0" else int(cursor[1:], 16)
    if ticket[0] == "0":
        return round((int(ticket[1:], 16) - low) / 2**64 * early)
    sequence = min(int(ticket[1:], 16), late + 1)
    if cursor is not None and cursor[0] == "1":
        return max(0, sequence - int(cursor[1:], 16))
    return round((2**64 - low) / 2**64 * early) + sequence - 1
