"""``python -m seckill.migrate``: create the database if missing, then the tables.

Idempotent: safe to run on every deployment and before every local run.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib.resources import files

import pymysql

from seckill.infra.config import Settings
from seckill.infra.db import Credentials, connect, credentials

_DB_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")


def statements() -> list[str]:
    text = files("seckill").joinpath("schema.sql").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def migrate(creds: Credentials) -> None:
    # Identifiers cannot be query parameters, so the name is checked instead.
    if not _DB_NAME.fullmatch(creds.database):
        raise ValueError(f"invalid database name {creds.database!r}")
    conn = connect(creds, database=False)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{creds.database}` CHARACTER SET utf8mb4")
            cursor.execute(f"USE `{creds.database}`")
            for statement in statements():
                cursor.execute(statement)
        conn.commit()
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seckill-migrate",
        description="Create the seckill database (named by DB_NAME) if missing, then its tables. Idempotent.",
    )
    parser.parse_args(argv)
    creds = credentials(Settings.from_env())
    try:
        migrate(creds)
    except pymysql.err.OperationalError as exc:
        print(f"cannot reach MySQL at {creds.host}:{creds.port}: {exc.args[-1]}", file=sys.stderr)
        return 2
    print(f"schema applied to {creds.database} on {creds.host}:{creds.port}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
