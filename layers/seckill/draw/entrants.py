"""A draw's entrants, counted as they enter (``tb_draw_entrants``), so that the public
record reads a handful of rows instead of counting the entries.

The count is kept in rows of its own, not on the draw's row: an entry before the close
holds that row shared (``seckill.draw.entries``), and two entries raising a counter there
would each wait for the other's shared lock, a deadlock. It is split in ``SLOTS`` rows
by user id, so that entries made at once seldom wait on the same row.
"""

from __future__ import annotations

from pymysql.cursors import DictCursor

SLOTS = 16

# Every draw's count from its entries: what the migration writes when it creates the table.
RECOUNT = (
    "INSERT IGNORE INTO tb_draw_entrants (voucher_id, slot, entrants)"
    f" SELECT voucher_id, user_id % {SLOTS}, COUNT(*) FROM tb_draw_entry GROUP BY voucher_id, user_id % {SLOTS}"
)


def count(cursor: DictCursor, voucher_id: int, user_id: int) -> None:
    """One more entrant, in the transaction that stored the entry."""
    cursor.execute(
        "INSERT INTO tb_draw_entrants (voucher_id, slot, entrants) VALUES (%s, %s, 1)"
        " ON DUPLICATE KEY UPDATE entrants = entrants + 1",
        (voucher_id, user_id % SLOTS),
    )


def total(cursor: DictCursor, voucher_id: int) -> int:
    """The draw's entrants: at most ``SLOTS`` rows read, by primary key."""
    cursor.execute("SELECT COALESCE(SUM(entrants), 0) AS n FROM tb_draw_entrants WHERE voucher_id = %s", (voucher_id,))
    return int(cursor.fetchone()["n"])  # type: ignore[index]  # an aggregate answers one row
