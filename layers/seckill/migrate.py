"""``python -m seckill.migrate``: create the database if missing, then the tables, then
the columns added since a table was first created.

Idempotent: safe to run on every deployment and before every local run.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib.resources import files

import pymysql
from pymysql.constants import ER
from pymysql.cursors import DictCursor

from seckill.draw import entrants
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, connect, credentials

_DB_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")

# Columns schema.sql gained after its tables were first created, in order: CREATE TABLE
# IF NOT EXISTS leaves an existing table alone, so each is added where it is missing.
ADDED_COLUMNS = (
    ("tb_seckill_voucher", "hold_seconds"),
    ("tb_voucher_order", "pay_by"),
    ("tb_voucher_order", "payment_id"),
    ("tb_voucher_order", "close_reason"),
    ("tb_draw", "admit_rate"),
    ("tb_draw_move", "step"),
)
# Unique keys schema.sql gained since, each on one column: added where missing, unless
# rows already break one. Those rows are reported, never changed (which order a reused
# payment paid is for an operator to settle); the next migration adds the key.
ADDED_UNIQUE_KEYS = (("tb_voucher_order", "uk_payment", "payment_id"),)


def statements() -> list[str]:
    text = files("seckill").joinpath("schema.sql").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def migrate(creds: Credentials) -> list[str]:
    """Apply the schema; what could not be applied, and why (empty: all of it)."""
    # Identifiers cannot be query parameters, so the name is checked instead.
    if not _DB_NAME.fullmatch(creds.database):
        raise ValueError(f"invalid database name {creds.database!r}")
    conn = connect(creds, database=False)
    try:
        with conn.cursor(DictCursor) as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{creds.database}` CHARACTER SET utf8mb4")
            cursor.execute(f"USE `{creds.database}`")
            cursor.execute(
                "SELECT TABLE_NAME AS t FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (creds.database,)
            )
            existing = {row["t"] for row in cursor.fetchall()}
            for statement in statements():
                cursor.execute(statement)
            if "tb_draw_entrants" not in existing:
                # The draws entered before the count was kept get it once, when its table
                # arrives (as pay_by below): from then on each entry counts itself.
                cursor.execute(entrants.RECOUNT)
            if "tb_draw_late" not in existing and "tb_draw" in existing:
                # Likewise the late count, from the draw's row where it was kept before.
                cursor.execute(entrants.RELATE)
            added = _add_columns(cursor, creds.database)
            if ("tb_voucher_order", "pay_by") in added:
                # Orders confirmed before holds existed get their deadline once, when the
                # column arrives: a scan of the order table at every deployment would lock
                # its rows under a sale's writes. (Reading a NULL pay_by counts from
                # create_time too, should this never run: seckill.holds.)
                cursor.execute(
                    "UPDATE tb_voucher_order o JOIN tb_seckill_voucher sv ON sv.voucher_id = o.voucher_id"
                    " SET o.pay_by = o.create_time + INTERVAL sv.hold_seconds SECOND"
                    " WHERE o.status = 1 AND o.pay_by IS NULL"
                )
            not_applied = _add_unique_keys(cursor, creds.database)
        conn.commit()
        return not_applied
    finally:
        conn.close()


def _definition(table: str, column: str) -> tuple[str, str]:
    """The column's definition in schema.sql, and the column it follows there."""
    [create] = [s for s in statements() if re.match(rf"CREATE TABLE IF NOT EXISTS {table} \(", s)]
    lines = [line.strip().rstrip(",") for line in create.splitlines()[1:]]
    names = [line.split()[0] for line in lines]
    at = names.index(column)
    return lines[at].split(None, 1)[1], names[at - 1]


def _add_columns(cursor: DictCursor, database: str) -> set[tuple[str, str]]:
    """Add the ADDED_COLUMNS a table lacks (MySQL 8 has no ADD COLUMN IF NOT EXISTS);
    returns those this run added."""
    cursor.execute(
        "SELECT TABLE_NAME AS t, COLUMN_NAME AS c FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s",
        (database,),
    )
    present = {(row["t"], row["c"]) for row in cursor.fetchall()}
    added = set()
    for table, column in ADDED_COLUMNS:
        if (table, column) in present:
            continue
        definition, after = _definition(table, column)
        try:
            cursor.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition} AFTER {after}")
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != ER.DUP_FIELDNAME:
                raise
            continue  # another migration, running beside this one, added it
        added.add((table, column))
    return added


def _add_unique_keys(cursor: DictCursor, database: str) -> list[str]:
    """Add the ADDED_UNIQUE_KEYS a table lacks; one line per key the rows break."""
    cursor.execute(
        "SELECT DISTINCT TABLE_NAME AS t, INDEX_NAME AS i FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s",
        (database,),
    )
    present = {(row["t"], row["i"]) for row in cursor.fetchall()}
    not_applied = []
    for table, key, column in ADDED_UNIQUE_KEYS:
        if (table, key) in present:
            continue
        try:
            cursor.execute(f"ALTER TABLE {table} ADD UNIQUE KEY {key} ({column})")
        except pymysql.err.OperationalError as exc:
            if exc.args[0] != ER.DUP_KEYNAME:
                raise
            # another migration, running beside this one, added it
        except pymysql.err.IntegrityError as exc:
            if exc.args[0] != ER.DUP_ENTRY:
                raise
            cursor.execute(
                f"SELECT {column} AS value, GROUP_CONCAT(id ORDER BY id) AS ids FROM {table}"
                f" WHERE {column} IS NOT NULL GROUP BY {column} HAVING COUNT(*) > 1 ORDER BY {column}"
            )
            repeats = "; ".join(f"{row['value']!r} in rows {row['ids']}" for row in cursor.fetchall())
            not_applied.append(
                f"{table}.{key} not added: {column} repeats ({repeats}); rows left unchanged, settle them and"
                " migrate again"
            )
    return not_applied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seckill-migrate",
        description="Create the seckill database (named by DB_NAME) if missing, then its tables. Idempotent. "
        "Exit 0 when the whole schema is applied, 1 when rows keep a unique key from being added (they are "
        "listed, never changed), 2 when MySQL is unreachable.",
    )
    parser.parse_args(argv)
    creds = credentials(Settings.from_env())
    try:
        not_applied = migrate(creds)
    except pymysql.err.OperationalError as exc:
        print(f"cannot reach MySQL at {creds.host}:{creds.port}: {exc.args[-1]}", file=sys.stderr)
        return 2
    print(f"schema applied to {creds.database} on {creds.host}:{creds.port}")
    for line in not_applied:
        print(f"not applied: {line}", file=sys.stderr)
    return 1 if not_applied else 0


if __name__ == "__main__":
    sys.exit(main())
