"""A draw's entrants, counted as they enter (``tb_draw_entrants``), so that the public
record reads a handful of rows instead of counting the entries; and its late entrants'
sequence (``tb_draw_late``).

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

# The late count each draw had on the draw's row, before the sequence had a table of its
# own: what the migration copies when it creates the table (an old database's column).
RELATE = "INSERT IGNORE INTO tb_draw_late (voucher_id, late_count) SELECT voucher_id, late_count FROM tb_draw"


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


def next_late(cursor: DictCursor, voucher_id: int) -> int:
    """The next late entrant's number (1, 2, ...), in the entry's transaction: its row
    lock orders late entries among themselves, never against the clock's moves (which
    lock the draw's row), and a rolled-back entry gives its number back."""
    cursor.execute(
        "INSERT INTO tb_draw_late (voucher_id, late_count) VALUES (%s, LAST_INSERT_ID(1))"
        " ON DUPLICATE KEY UPDATE late_count = LAST_INSERT_ID(late_count + 1)",
        (voucher_id,),
    )
    cursor.execute("SELECT LAST_INSERT_ID() AS n")
    return int(cursor.fetchone()["n"])  # type: ignore[index]  # one row
