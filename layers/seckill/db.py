"""MySQL access: one connection per thread, kept alive across idle periods.

A Lambda container is frozen between invocations and RDS Proxy or MySQL may
close an idle connection meanwhile, so a connection that has sat idle is
pinged (and reconnected) before use.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.cursors import DictCursor

from seckill.config import Settings

IDLE_PING_SECONDS = 5.0


@dataclass(frozen=True)
class Credentials:
    host: str
    port: int
    user: str
    password: str
    database: str
    tls: bool = False


def credentials(settings: Settings) -> Credentials:
    """From DB_* variables, or from the Secrets Manager secret named by DB_SECRET_ARN."""
    if not settings.db_secret_arn:
        return Credentials(
            host=settings.db_host,
            port=settings.db_port,
            user=settings.db_user,
            password=settings.db_password,
            database=settings.db_name,
            tls=settings.db_tls,
        )
    from aws_lambda_powertools.utilities import parameters

    secret: dict[str, Any] = parameters.get_secret(settings.db_secret_arn, transform="json", max_age=300)
    return Credentials(
        host=settings.db_host or secret["host"],
        port=int(secret.get("port", settings.db_port)),
        user=secret["username"],
        password=secret["password"],
        database=settings.db_name,
        tls=settings.db_tls,
    )


def connect(creds: Credentials, *, database: bool = True) -> pymysql.Connection:
    # Verified TLS (the system's CAs, hostname checked) when required; otherwise
    # PyMySQL's default, which uses TLS only if the server offers it.
    tls = ssl.create_default_context() if creds.tls else None
    return pymysql.connect(
        host=creds.host,
        port=creds.port,
        user=creds.user,
        password=creds.password,
        database=creds.database if database else None,
        charset="utf8mb4",
        autocommit=False,
        connect_timeout=3,
        read_timeout=10,
        write_timeout=10,
        cursorclass=DictCursor,
        init_command="SET time_zone = '+00:00'",
        ssl=tls,
    )


class Database:
    """Thread-safe handle: each thread gets its own connection."""

    def __init__(self, creds: Credentials | Callable[[], Credentials]) -> None:
        # Resolved at each new connection, not at import: a cold start that only
        # serves the gate never waits for Secrets Manager, and a rotated secret is
        # picked up (get_secret caches it for 5 minutes).
        self._creds = creds if callable(creds) else lambda: creds
        self._local = threading.local()

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls(functools.partial(credentials, settings))

    def connection(self) -> pymysql.Connection:
        conn: pymysql.Connection | None = getattr(self._local, "conn", None)
        now = time.monotonic()
        if conn is not None and now - self._local.used > IDLE_PING_SECONDS:
            try:
                conn.ping()
            except pymysql.Error:
                self.close()  # gone while idle: start afresh
                conn = None
        if conn is None:
            conn = connect(self._creds())
            self._local.conn = conn
        self._local.used = now
        return conn

    @contextmanager
    def transaction(self) -> Iterator[DictCursor]:
        """Commits when the block ends normally, rolls back on any exception."""
        conn = self.connection()
        try:
            with conn.cursor() as cursor:
                yield cursor
            conn.commit()
        except BaseException:
            try:
                conn.rollback()
            except pymysql.Error:
                # A dead connection rolls back by itself; reconnect next time.
                self.close()
            raise

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(pymysql.Error):
                conn.close()
