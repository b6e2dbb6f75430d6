"""Admission re-checked where it is durable (docs/draw.md, "Admission re-checked").

The gate believes the ticket inside a pass; whoever holds a pass key can sign any
ticket. So the persister confirms an order on a draw voucher only if its user's
stored entry has a ticket below the cursor in effect at the order's acceptance:
the recorded move with the largest ``at_ms`` not after ``acceptedAt``, compared as
the gate compares them (``at <= acceptedAt`` on the Redis server's clock, which
stamped both; the ticket below the cursor, byte by byte). No entry, or no move yet:
not admitted.
"""

from __future__ import annotations

from collections.abc import Sequence

from pymysql.cursors import DictCursor

from seckill.draw.tickets import admitted
from seckill.infra.timeutil import to_ms
from seckill.messages import OrderMessage

NOT_ADMITTED = "NOT_ADMITTED"  # the reason of a draw order failed by the re-check


def admitted_orders(cursor: DictCursor, orders: Sequence[OrderMessage]) -> set[int]:
    """The ids of ``orders`` (each on a draw voucher) whose user was admitted at its
    acceptance. One statement for them all, one index read per order for its entry and
    one for the move in effect: each order's values are constants of its own branch, so
    the move's is a backward range read of the key (voucher_id, at_ms) that stops at
    its first row (a subquery correlated to a joined list would scan every later move)."""
    if not orders:
        return set()
    one = (
        "SELECT %s AS order_id,"
        " (SELECT e.ticket FROM tb_draw_entry e WHERE e.voucher_id = %s AND e.user_id = %s) AS ticket,"
        " (SELECT m.cursor_after FROM tb_draw_move m WHERE m.voucher_id = %s AND m.at_ms <= %s"
        " ORDER BY m.at_ms DESC LIMIT 1) AS in_effect"
    )
    cursor.execute(
        " UNION ALL ".join([one] * len(orders)),
        [value for m in orders for value in (m.order_id, m.voucher_id, m.user_id, m.voucher_id, to_ms(m.accepted_at))],
    )
    return {
        int(row["order_id"])
        for row in cursor.fetchall()
        if row["ticket"] is not None and admitted(row["ticket"], row["in_effect"])
    }
