"""The day's order-id counter after Redis lost its data (``lua/counter_floor.lua``'s one
caller), raised before anything marks Redis loaded again: recovery's rebuild
(``seckill.repair.recovery``) and the creation of the only voucher of the last day
(``seckill.vouchers``), which imports this module and so cannot import recovery."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from seckill.ids import BEGIN_EPOCH, COUNT_BITS, LEASE_GAP, SEQUENCE_MASK
from seckill.infra import keys

if TYPE_CHECKING:
    from pymysql.cursors import DictCursor

    from seckill.infra.db import Database
    from seckill.infra.lua_scripts import Scripts


def restore_order_counter(db: Database, scripts: Scripts, now: datetime | None = None) -> int:
    """Raise today's order-id counter ``LEASE_GAP`` above the largest sequence MySQL holds
    for today and above where the day's last recovery left it (``tb_order_counter_floor``),
    so ids made after a loss repeat neither stored ids nor those of the blocks containers
    leased before it (seckill.ids.OrderIds). MySQL's orders alone are not enough: after an
    earlier recovery raised the counter, containers hold blocks above it that no stored
    order may show yet, and a second loss would lease them again. The counter's new value
    is recorded before the caller marks Redis loaded, so no lease is kept until it is."""
    now = now or datetime.now(UTC)
    day_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    first_id = (int(day_start.timestamp()) - BEGIN_EPOCH) << COUNT_BITS

    def read(cursor: DictCursor) -> int:
        cursor.execute(
            "SELECT GREATEST(COALESCE((SELECT MAX(id & %s) FROM tb_voucher_order WHERE id >= %s), 0),"
            " COALESCE((SELECT MAX(order_id & %s) FROM tb_voucher_order_rejection WHERE order_id >= %s), 0),"
            " COALESCE((SELECT floor FROM tb_order_counter_floor WHERE day = %s), 0)) AS seq",
            (SEQUENCE_MASK, first_id, SEQUENCE_MASK, first_id, day_start.date()),
        )
        row = cursor.fetchone()
        assert row is not None  # an aggregate answers one row
        return int(row["seq"])

    floor = db.run(read, read_only=True)
    counter = int(scripts.counter_floor(keys=[keys.order_counter(now)], args=[floor + LEASE_GAP]))

    def record(cursor: DictCursor) -> None:
        cursor.execute(
            "INSERT INTO tb_order_counter_floor (day, floor) VALUES (%s, %s)"
            " ON DUPLICATE KEY UPDATE floor = GREATEST(floor, %s)",  # VALUES() is deprecated in MySQL 8
            (day_start.date(), counter, counter),
        )

    db.run(record)
    return counter
