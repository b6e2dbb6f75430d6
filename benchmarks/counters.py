"""MySQL statements and Redis commands, counted by the servers themselves.

``SHOW GLOBAL STATUS`` (``Questions`` and ``Com_*``) and ``INFO commandstats``
are read just before and just after a measured phase; the difference, divided
by the requests of the phase, is what one request cost. The servers are
shared: whatever other clients sent meanwhile is counted too, and only ever
adds. So a phase is measured more than once and the smallest figure is the
least disturbed one. Our own reads are taken out (``SHOW STATUS``, ``INFO``).
Redis counts the commands a Lua script runs as well as the script's own call
(EVALSHA): ``redis_commands`` is everything Redis executed, and the breakdown
by command shows how many of them were script calls.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pymysql
from redis.connection import AbstractConnection

# Com_* counters worth showing per request; the total is Questions.
MYSQL_KINDS = ("select", "insert", "update", "delete", "commit", "begin", "rollback", "set_option")


@dataclass(frozen=True)
class Snapshot:
    mysql: dict[str, int]
    redis: dict[str, int]


@dataclass
class Usage:
    """What a phase cost per request (or per row)."""

    mysql_statements: float = 0.0
    redis_commands: float = 0.0
    mysql: dict[str, float] = field(default_factory=dict)
    redis: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "mysql_statements": round(self.mysql_statements, 3),
            "redis_commands": round(self.redis_commands, 3),
            "mysql": {k: round(v, 3) for k, v in self.mysql.items()},
            "redis": {k: round(v, 3) for k, v in self.redis.items()},
        }


class RoundTrips:
    """Redis round trips this process makes, counted where redis-py writes to a socket:
    one write per command, one per pipeline (every command of it in one packet)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        send = AbstractConnection.send_packed_command

        def counted(connection: AbstractConnection, command: Any, check_health: bool = True) -> None:
            with self._lock:
                self.count += 1
            send(connection, command, check_health)

        AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


class MysqlRoundTrips:
    """MySQL round trips this process makes, counted at PyMySQL's public methods that send
    one: ``query`` (every statement a cursor executes), ``commit`` and ``rollback``."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()
        for name in ("query", "commit", "rollback"):
            self._count_calls(name)

    def _count_calls(self, name: str) -> None:
        sent = getattr(pymysql.connections.Connection, name)

        def counted(connection: pymysql.connections.Connection, *args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.count += 1
            return sent(connection, *args, **kwargs)

        setattr(pymysql.connections.Connection, name, counted)


class Counters:
    """Reads both servers' counters on connections of its own."""

    def __init__(self, mysql: pymysql.Connection, redis: Any) -> None:
        self.mysql = mysql
        self.redis = redis

    def snapshot(self) -> Snapshot:
        with self.mysql.cursor() as cursor:
            cursor.execute("SHOW GLOBAL STATUS WHERE Variable_name = 'Questions' OR Variable_name LIKE 'Com\\_%'")
            mysql = {row["Variable_name"].lower(): int(row["Value"]) for row in cursor.fetchall()}
        stats = self.redis.info("commandstats")
        redis = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
        return Snapshot(mysql, redis)

    @staticmethod
    def usage(before: Snapshot, after: Snapshot, requests: int) -> Usage:
        """Per request, without our own SHOW STATUS and INFO."""
        per = max(requests, 1)
        m = {k: after.mysql.get(k, 0) - before.mysql.get(k, 0) for k in after.mysql}
        statements = m.get("questions", 0) - m.get("com_show_status", 0)
        r = {k: v - before.redis.get(k, 0) for k, v in after.redis.items() if k != "info"}
        r = {k: v for k, v in r.items() if v > 0}
        return Usage(
            mysql_statements=statements / per,
            redis_commands=sum(r.values()) / per,
            mysql={k: m.get(f"com_{k}", 0) / per for k in MYSQL_KINDS if m.get(f"com_{k}", 0) > 0},
            redis={k: v / per for k, v in sorted(r.items(), key=lambda kv: -kv[1])},
        )
