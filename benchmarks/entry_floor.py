"""The floor of a draw's entry, as a Lambda handler: bare PyMySQL doing the entry
route's writes and nothing else, the yardstick of section (9) (``benchmarks.entries``).

Per entry, one transaction on a connection made at import: the entry's INSERT (IGNORE
before the close, as the route's), the entrants' count (INSERT ... ON DUPLICATE KEY
UPDATE of the user's slot) and, for a late entry, the late sequence's row (its INSERT
... ON DUPLICATE KEY UPDATE and the ``LAST_INSERT_ID()`` it sets) first; one COMMIT.
The tickets come from the same pure functions as the route's, so the rows are the
same. No read of the draw, no pass, no Redis, no resolver: what the route does beyond
these statements is what the benchmark sets against them.
"""

from __future__ import annotations

import json
from typing import Any

import pymysql

from seckill.draw.entrants import SLOTS
from seckill.draw.tickets import early_ticket, late_ticket
from seckill.infra.config import Settings
from seckill.infra.db import credentials

SEED = bytes(32)  # the floor's tickets need a seed, not the draw's secret one

_creds = credentials(Settings.from_env())
_conn = pymysql.connect(
    host=_creds.host,
    port=_creds.port,
    user=_creds.user,
    password=_creds.password,
    database=_creds.database,
    charset="utf8mb4",
    autocommit=False,
)


def _ids(event: dict[str, Any]) -> tuple[int, int]:
    return int(event["pathParameters"]["voucherId"]), int(event["requestContext"]["authorizer"]["lambda"]["userId"])


def _answer(ticket: str, late: bool) -> dict[str, Any]:
    return {"statusCode": 200, "body": json.dumps({"success": True, "data": {"ticket": ticket, "late": late}})}


def _count(cursor: Any, voucher_id: int, user_id: int) -> None:
    """The entrant counted in its slot, as the route's writes do."""
    cursor.execute(
        "INSERT INTO tb_draw_entrants (voucher_id, slot, entrants) VALUES (%s, %s, 1)"
        " ON DUPLICATE KEY UPDATE entrants = entrants + 1",
        (voucher_id, user_id % SLOTS),
    )


def early(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    voucher_id, user_id = _ids(event)
    ticket = early_ticket(SEED, voucher_id, user_id)
    with _conn.cursor() as cursor:
        cursor.execute(
            "INSERT IGNORE INTO tb_draw_entry (voucher_id, user_id, ticket, late) VALUES (%s, %s, %s, 0)",
            (voucher_id, user_id, ticket),
        )
        _count(cursor, voucher_id, user_id)
    _conn.commit()
    return _answer(ticket, False)


def late(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    voucher_id, user_id = _ids(event)
    with _conn.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tb_draw_late (voucher_id, late_count) VALUES (%s, LAST_INSERT_ID(1))"
            " ON DUPLICATE KEY UPDATE late_count = LAST_INSERT_ID(late_count + 1)",
            (voucher_id,),
        )
        cursor.execute("SELECT LAST_INSERT_ID()")
        ticket = late_ticket(int(cursor.fetchone()[0]))
        cursor.execute(
            "INSERT INTO tb_draw_entry (voucher_id, user_id, ticket, late) VALUES (%s, %s, %s, 1)",
            (voucher_id, user_id, ticket),
        )
        _count(cursor, voucher_id, user_id)
    _conn.commit()
    return _answer(ticket, True)
