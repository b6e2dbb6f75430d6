"""One voucher's Redis state aligned with MySQL, atomically with the gate (``lua/restore.lua``).

The one caller of that script: recovery rebuilds a lost voucher with it
(``missing``), reconciliation checks a voucher for drift (``check``) and repairs
it (``repair``). Both look after the same vouchers, ``voucher_ids_on_sale``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from pymysql.cursors import DictCursor

from seckill.draw.admission import NOT_ADMITTED
from seckill.draw.entries import read_draw, recorded_moves
from seckill.draw.moves import decided_until
from seckill.holds import CLOSED_STATUS
from seckill.infra import keys
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.infra.timeutil import from_db, to_db, to_ms
from seckill.messages import OrderMessage
from seckill.vouchers import WITHDRAWN

Mode = Literal["missing", "repair", "check"]


@dataclass(frozen=True)
class Restored:
    voucher_id: int
    applied: bool
    redis_stock: int | None  # before; None when the key was missing
    expected_stock: int
    buyers_added: int
    buyers_removed: int
    # Closed orders missing from the returned set: their give_back would return a unit twice.
    returns_recorded: int = 0

    @property
    def drifted(self) -> bool:
        return (
            self.redis_stock != self.expected_stock
            or self.buyers_added > 0
            or self.buyers_removed > 0
            or self.returns_recorded > 0
        )


# A sale that ended recently is still looked after: its pending orders need resolving,
# and its Redis state answers ENDED without asking MySQL.
ENDED_WITHIN = timedelta(days=1)


def voucher_ids_on_sale(db: Database) -> list[int]:
    """Seckill vouchers whose sale has not ended, or ended less than ``ENDED_WITHIN``
    ago; withdrawn ones included."""
    since = to_db(datetime.now(UTC) - ENDED_WITHIN)

    def read(cursor: DictCursor) -> list[int]:
        cursor.execute("SELECT voucher_id FROM tb_seckill_voucher WHERE end_time > %s ORDER BY voucher_id", (since,))
        return [int(r["voucher_id"]) for r in cursor.fetchall()]

    return db.run(read, read_only=True)


def restore(
    db: Database,
    scripts: Scripts,
    voucher_id: int,
    mode: Mode,
    dead_letters: Sequence[OrderMessage] = (),
) -> Restored | None:
    """Align one voucher's Redis state with MySQL; None if MySQL does not know it.

    ``dead_letters``: this voucher's orders waiting in the dead-letter queue; those
    MySQL has not decided get their reservation back (when rebuilding a lost voucher).

    The voucher's row stays locked (FOR UPDATE) while the script runs, so no
    persister commits an order, and no payment, cancel or expiry closes one (they
    take the same lock first), between what MySQL says and what Redis is told. A
    unit returned in MySQL whose give_back is still on its way is counted by the
    stock read here, and its order id joins the returned set: that give_back adds nothing.
    The same holds for the unit of an order failed ``NOT_ADMITTED``.
    """

    def align(cursor: DictCursor) -> Restored | None:
        cursor.execute(
            "SELECT sv.stock, sv.begin_time, sv.end_time, v.status FROM tb_seckill_voucher sv"
            " JOIN tb_voucher v ON v.id = sv.voucher_id WHERE sv.voucher_id = %s FOR UPDATE",
            (voucher_id,),
        )
        row = cursor.fetchone()
        if row is None:
            return None
        # A withdrawn sale keeps a closed window (0/0): the gate answers ENDED to every press.
        withdrawn = int(row["status"]) == WITHDRAWN
        begin_ms = 0 if withdrawn else to_ms(from_db(row["begin_time"]))
        end_ms = 0 if withdrawn else to_ms(from_db(row["end_time"]))
        # Every order whatever its status: its user may not buy the voucher again.
        cursor.execute("SELECT id, user_id, status FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
        orders = cursor.fetchall()
        cursor.execute(
            "SELECT order_id, user_id, reason FROM tb_voucher_order_rejection WHERE voucher_id = %s", (voucher_id,)
        )
        rejected = cursor.fetchall()
        # An order failed NOT_ADMITTED is counted as a closed hold is: its user keeps its
        # place among the buyers, and its unit (which MySQL never took) joins the returned
        # set, so the persister's give-back still on its way adds nothing.
        not_admitted = [r for r in rejected if r["reason"] == NOT_ADMITTED]
        # Ids travel as JSON strings: Lua numbers are doubles and would round 64-bit order ids.
        decided = [str(r["id"]) for r in orders] + [str(r["order_id"]) for r in rejected]
        closed = [str(r["id"]) for r in orders if int(r["status"]) == CLOSED_STATUS]
        returned = closed + [str(r["order_id"]) for r in not_admitted]
        buyers = [str(r["user_id"]) for r in [*orders, *not_admitted]]
        applied, old, expected, added, removed, returns = scripts.restore(
            keys=[*keys.voucher_keys(voucher_id), keys.returned(voucher_id), keys.cursor(voucher_id)],
            args=[
                mode,
                int(row["stock"]),
                begin_ms,
                end_ms,
                json.dumps(buyers),
                json.dumps(decided),
                json.dumps([[str(m.user_id), str(m.order_id), str(to_ms(m.accepted_at))] for m in dead_letters]),
                json.dumps(returned),
                _draw_fields(cursor, voucher_id),
            ],
        )
        return Restored(
            voucher_id,
            bool(applied),
            None if int(old) < 0 else int(old),
            int(expected),
            int(added),
            int(removed),
            int(returns),
        )

    # Safe to run twice: the script only ever aligns Redis with what MySQL says.
    return db.run(align)


def _draw_fields(cursor: DictCursor, voucher_id: int) -> str:
    """A draw's close, how far its moves are decided and its recorded moves, as the script
    takes them; '' for a race."""
    draw = read_draw(cursor, voucher_id)
    if draw is None:
        return ""
    history = recorded_moves(cursor, voucher_id)
    return json.dumps({"close": draw.close_ms, "decided": decided_until(draw), "moves": history})
