"""MySQL access: one connection per thread, replaced when it turns out dead.

A Lambda container is frozen between invocations, and RDS Proxy or MySQL may
close its connection meanwhile (idle timeout, failover, KILL). Instead of
pinging before use, ``Database.run`` notices the dead connection on its
first statement, replaces it, and runs the transaction again when that is safe.
"""

from __future__ import annotations

import contextlib
import functools
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pymysql
from pymysql.constants import CR, ER
from pymysql.cursors import DictCursor

from seckill.infra.config import Settings
from seckill.infra.secrets import secrets

T = TypeVar("T")

# Client-side codes of a connection that could not be made or was lost, and the
# server's own "going away" answers: the statement never ran, or ran and was rolled back.
CONNECTION_LOST = frozenset(
    {
        CR.CR_CONN_HOST_ERROR,
        CR.CR_CONNECTION_ERROR,
        CR.CR_SERVER_GONE_ERROR,
        CR.CR_SERVER_LOST,
        CR.CR_SERVER_LOST_EXTENDED,
        ER.SERVER_SHUTDOWN,
        1927,  # MariaDB's ER_CONNECTION_KILLED
        4031,  # MySQL 8's ER_CLIENT_INTERACTION_TIMEOUT
    }
)


def is_connection_error(error: BaseException) -> bool:
    """MySQL unreachable or the connection gone, as opposed to an error in the statement itself."""
    if isinstance(error, pymysql.err.InterfaceError):
        return True
    return isinstance(error, pymysql.err.OperationalError) and bool(error.args) and error.args[0] in CONNECTION_LOST


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
    secret: dict[str, Any] = secrets.get(settings.db_secret_arn, 300, "json")
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
        if conn is None:
            conn = connect(self._creds())
            self._local.conn = conn
        return conn

    def run(self, work: Callable[[DictCursor], T], *, read_only: bool = False) -> T:
        """``work`` in one transaction, committed when it returns, rolled back when it raises.

        A connection that turns out dead (killed, or closed while the container
        was frozen) is replaced and ``work`` runs once more: always when ``read_only``;
        for a write only if it failed before COMMIT was sent, since MySQL rolled the
        transaction back then. A COMMIT whose answer was lost may have committed, so
        that error is raised. ``work`` must be safe to call twice.
        """
        retries = 1
        while True:
            conn = self.connection()  # outside the try: MySQL unreachable is raised at once
            committing = False
            try:
                with conn.cursor(DictCursor) as cursor:
                    result = work(cursor)
                committing = True
                conn.commit()
                return result
            except BaseException as exc:
                self._abandon(conn, exc)
                if not (retries and (read_only or not committing) and is_connection_error(exc)):
                    raise
                retries -= 1

    def _abandon(self, conn: pymysql.Connection, error: BaseException) -> None:
        """Roll back after ``error``; a lost connection is dropped instead (the server
        rolls back a transaction whose connection is gone)."""
        if not is_connection_error(error):
            try:
                conn.rollback()
                return
            except pymysql.Error:
                pass  # gone meanwhile
        self.close()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(pymysql.Error):
                conn.close()
