"""The schema migration (``python -m seckill.migrate``) on the real MariaDB."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pymysql
import pytest

from seckill import migrate as migrate_module
from seckill.draw import entrants
from seckill.infra.db import Credentials, connect
from seckill.migrate import migrate

TABLES = {
    "tb_voucher",
    "tb_seckill_voucher",
    "tb_voucher_order",
    "tb_voucher_order_rejection",
    "tb_draw",
    "tb_draw_entry",
    "tb_draw_entrants",
    "tb_draw_late",
    "tb_draw_move",
    "tb_order_counter_floor",
}


def query(creds: Credentials, sql: str, *params: Any) -> list[dict[str, Any]]:
    conn = connect(creds, database=False)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            rows = list(cursor.fetchall())
        conn.commit()
        return rows
    finally:
        conn.close()


def database_exists(creds: Credentials, name: str) -> bool:
    return bool(query(creds, "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", name))


def tables(creds: Credentials, name: str) -> set[str]:
    rows = query(creds, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", name)
    return {r["TABLE_NAME"] for r in rows}


@pytest.fixture
def fresh(creds: Credentials) -> Iterator[Credentials]:
    """Credentials for a database that does not exist yet; dropped afterwards."""
    name = f"seckill_mig_{secrets.token_hex(6)}"
    fresh = replace(creds, database=name)
    yield fresh
    query(creds, f"DROP DATABASE IF EXISTS `{name}`")


def test_creates_a_missing_database_and_its_tables(fresh: Credentials) -> None:
    assert not database_exists(fresh, fresh.database)
    migrate(fresh)
    assert database_exists(fresh, fresh.database)
    assert tables(fresh, fresh.database) == TABLES
    [charset] = query(
        fresh,
        "SELECT DEFAULT_CHARACTER_SET_NAME AS c FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s",
        fresh.database,
    )
    assert charset["c"] == "utf8mb4"


def test_running_twice_is_fine_and_keeps_the_data(fresh: Credentials) -> None:
    migrate(fresh)
    query(
        fresh,
        f"INSERT INTO `{fresh.database}`.tb_voucher (shop_id, title, pay_value, actual_value) VALUES (1, 'kept', 1, 2)",
    )
    migrate(fresh)
    migrate(fresh)
    assert tables(fresh, fresh.database) == TABLES
    rows = query(fresh, f"SELECT title FROM `{fresh.database}`.tb_voucher")
    assert [r["title"] for r in rows] == ["kept"]


def test_the_suites_own_database_migrates_again(creds: Credentials) -> None:
    # The session database is already migrated (and in use): a second run changes nothing.
    migrate(creds)
    assert tables(creds, creds.database) >= TABLES


@pytest.mark.parametrize(
    "name",
    ["", "bad-name", "x;DROP DATABASE mysql", "name`", "a b", "a" * 65, "ünicode", "../etc", "db.name"],
)
def test_rejects_an_invalid_database_name(creds: Credentials, name: str) -> None:
    with pytest.raises(ValueError, match="invalid database name"):
        migrate(replace(creds, database=name))
    if name:
        assert not database_exists(creds, name)


def test_order_table_has_unique_user_and_voucher(creds: Credentials) -> None:
    rows = query(
        creds,
        "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'tb_voucher_order' ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        creds.database,
    )
    unique: dict[str, list[str]] = {}
    for r in rows:
        if int(r["NON_UNIQUE"]) == 0:
            unique.setdefault(r["INDEX_NAME"], []).append(r["COLUMN_NAME"])
    assert unique["PRIMARY"] == ["id"]
    assert ["user_id", "voucher_id"] in unique.values()


def test_a_second_order_of_a_user_for_a_voucher_is_refused_by_the_database(fresh: Credentials) -> None:
    migrate(fresh)
    conn = connect(fresh)
    try:
        with conn.cursor() as cursor:
            cursor.execute("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (1, 7, 9)")
            # Another user, or another voucher, is fine.
            cursor.execute("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (2, 8, 9)")
            cursor.execute("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (3, 7, 10)")
            with pytest.raises(pymysql.err.IntegrityError) as caught:
                cursor.execute("INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (4, 7, 9)")
            assert caught.value.args[0] == 1062
            assert "uk_user_voucher" in caught.value.args[1]
        conn.commit()
    finally:
        conn.close()


def test_stock_cannot_go_below_zero_in_the_database(fresh: Credentials) -> None:
    migrate(fresh)
    conn = connect(fresh)
    try:
        with conn.cursor() as cursor, pytest.raises(pymysql.err.OperationalError):
            cursor.execute(
                "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (1, -1, NOW(), NOW())"
            )
    finally:
        with contextlib.suppress(pymysql.Error):
            conn.rollback()
        conn.close()


# --- the command ---------------------------------------------------------------------------


def test_command_applies_the_schema_named_by_the_environment(
    fresh: Credentials, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DB_NAME", fresh.database)
    assert migrate_module.main([]) == 0
    assert fresh.database in capsys.readouterr().out
    assert tables(fresh, fresh.database) == TABLES


def test_command_reports_an_unreachable_database(
    fresh: Credentials, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DB_NAME", fresh.database)
    monkeypatch.setenv("DB_PORT", "1")
    assert migrate_module.main([]) == 2
    assert "cannot reach MySQL" in capsys.readouterr().err
    assert not database_exists(fresh, fresh.database)


# --- columns added since the tables were first created ---------------------------------------------


def columns(creds: Credentials, name: str) -> list[dict[str, Any]]:
    return query(
        creds,
        "SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, COLUMN_COMMENT"
        " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s ORDER BY TABLE_NAME, ORDINAL_POSITION",
        name,
    )


def keys_of(creds: Credentials, name: str) -> list[dict[str, Any]]:
    return query(
        creds,
        "SELECT TABLE_NAME, INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME FROM information_schema.STATISTICS"
        " WHERE TABLE_SCHEMA = %s ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
        name,
    )


def test_a_database_from_before_holds_takes_the_new_columns_and_its_unpaid_orders_a_deadline(
    fresh: Credentials,
) -> None:
    assert migrate(fresh) == []
    expected = columns(fresh, fresh.database)
    expected_keys = keys_of(fresh, fresh.database)
    db = f"`{fresh.database}`"
    # The tables as they were before holds: without the added columns.
    for table, column in migrate_module.ADDED_COLUMNS:
        query(fresh, f"ALTER TABLE {db}.{table} DROP COLUMN {column}")
    query(
        fresh,
        f"INSERT INTO {db}.tb_voucher (id, shop_id, title, pay_value, actual_value, type) VALUES (7, 1, 'v', 1, 2, 1)",
    )
    query(
        fresh,
        f"INSERT INTO {db}.tb_seckill_voucher (voucher_id, stock, begin_time, end_time)"
        " VALUES (7, 5, '2026-01-01', '2026-01-02')",
    )
    query(
        fresh,
        f"INSERT INTO {db}.tb_voucher_order (id, user_id, voucher_id, status, create_time, pay_time) VALUES"
        " (1, 10, 7, 1, '2026-01-01 10:00:00.250', NULL), (2, 11, 7, 2, '2026-01-01 10:00:01', '2026-01-01 10:01:00')",
    )

    assert migrate(fresh) == []

    assert columns(fresh, fresh.database) == expected
    assert keys_of(fresh, fresh.database) == expected_keys  # uk_payment went with its column, and is back
    orders = f"SELECT id, pay_by, payment_id, close_reason FROM {db}.tb_voucher_order ORDER BY id"
    after = query(fresh, orders)
    assert [(r["id"], str(r["pay_by"]), r["payment_id"], r["close_reason"]) for r in after] == [
        (1, "2026-01-01 10:15:00.250000", None, None),  # create_time + the default hold of 900 s
        (2, "None", None, None),  # paid: no deadline to keep
    ]
    [voucher] = query(fresh, f"SELECT hold_seconds FROM {db}.tb_seckill_voucher")
    assert voucher["hold_seconds"] == 900

    # A second run changes nothing: not even an unpaid order given no deadline since.
    query(fresh, f"UPDATE {db}.tb_voucher_order SET pay_by = NULL WHERE id = 1")
    migrate(fresh)
    assert columns(fresh, fresh.database) == expected
    assert query(fresh, orders)[0]["pay_by"] is None


def test_a_payment_id_paying_two_orders_is_reported_and_kept_and_the_rest_migrates(
    fresh: Credentials, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    migrate(fresh)
    db = f"`{fresh.database}`"
    # From before UNIQUE (payment_id), and before close_reason: one payment paid orders 1 and 3.
    query(fresh, f"ALTER TABLE {db}.tb_voucher_order DROP KEY uk_payment, DROP COLUMN close_reason")
    query(
        fresh,
        f"INSERT INTO {db}.tb_voucher_order (id, user_id, voucher_id, status, payment_id) VALUES"
        " (1, 10, 7, 2, 'p-1'), (2, 11, 7, 2, 'p-2'), (3, 12, 7, 2, 'p-1'), (4, 13, 7, 1, NULL), (5, 14, 7, 1, NULL)",
    )
    orders = f"SELECT id, status, payment_id FROM {db}.tb_voucher_order ORDER BY id"
    before = query(fresh, orders)

    [report] = migrate(fresh)

    assert "uk_payment" in report
    assert "'p-1' in rows 1,3" in report
    assert "p-2" not in report
    assert query(fresh, orders) == before  # nothing dropped, nothing changed
    assert "close_reason" in {c["COLUMN_NAME"] for c in columns(fresh, fresh.database)}  # the rest is applied
    assert "uk_payment" not in {k["INDEX_NAME"] for k in keys_of(fresh, fresh.database)}
    # The command says so, and exits 1.
    monkeypatch.setenv("DB_NAME", fresh.database)
    assert migrate_module.main([]) == 1
    assert "not applied: tb_voucher_order.uk_payment" in capsys.readouterr().err

    # Once an operator settles the duplicate, the next migration adds the key.
    query(fresh, f"UPDATE {db}.tb_voucher_order SET payment_id = 'p-3' WHERE id = 3")
    assert migrate(fresh) == []
    assert "uk_payment" in {k["INDEX_NAME"] for k in keys_of(fresh, fresh.database)}


def test_a_database_from_before_the_kept_count_gets_each_draws_count_once(fresh: Credentials) -> None:
    assert migrate(fresh) == []
    db = f"`{fresh.database}`"
    query(fresh, f"DROP TABLE {db}.tb_draw_entrants")  # as it was before the count was kept
    users = {7: range(1000, 1000 + 3 * entrants.SLOTS + 5), 8: range(2000, 2003)}
    for voucher_id, ids in users.items():
        rows = ", ".join(f"({voucher_id}, {user}, '0{user:016x}', 0)" for user in ids)
        query(fresh, f"INSERT INTO {db}.tb_draw_entry (voucher_id, user_id, ticket, late) VALUES {rows}")
    counts = f"SELECT voucher_id, SUM(entrants) AS n FROM {db}.tb_draw_entrants GROUP BY voucher_id ORDER BY voucher_id"

    assert migrate(fresh) == []

    assert tables(fresh, fresh.database) == TABLES
    assert [(r["voucher_id"], int(r["n"])) for r in query(fresh, counts)] == [(7, len(users[7])), (8, len(users[8]))]
    # Once: a later migration counts nothing again (each entry counts itself from now on).
    late = f"(8, 3000, '1{1:016x}', 1)"
    query(fresh, f"INSERT INTO {db}.tb_draw_entry (voucher_id, user_id, ticket, late) VALUES {late}")
    assert migrate(fresh) == []
    assert [(r["voucher_id"], int(r["n"])) for r in query(fresh, counts)] == [(7, len(users[7])), (8, len(users[8]))]


def test_a_database_from_before_the_late_sequence_keeps_each_draws_late_count(fresh: Credentials) -> None:
    assert migrate(fresh) == []
    db = f"`{fresh.database}`"
    # As it was: the late count on the draw's row, no table of its own.
    query(fresh, f"DROP TABLE {db}.tb_draw_late")
    query(fresh, f"ALTER TABLE {db}.tb_draw ADD COLUMN late_count INT NOT NULL DEFAULT 0")
    for voucher_id, late in ((7, 4), (8, 0)):
        query(
            fresh,
            f"INSERT INTO {db}.tb_draw (voucher_id, seed, commitment, admit_factor, close_seconds, wave_seconds,"
            f" close_time, late_count) VALUES ({voucher_id}, REPEAT('a', 32), REPEAT('b', 64), 2, 60, 10,"
            f" '2030-01-01 00:00:00', {late})",
        )
    assert migrate(fresh) == []
    lates = f"SELECT voucher_id, late_count FROM {db}.tb_draw_late ORDER BY voucher_id"
    assert [(r["voucher_id"], r["late_count"]) for r in query(fresh, lates)] == [(7, 4), (8, 0)]
    # The next late entry of voucher 7 is the fifth.
    assert migrate(fresh) == []
    assert [(r["voucher_id"], r["late_count"]) for r in query(fresh, lates)] == [(7, 4), (8, 0)]
