"""Which connections and clients a function opens before its first request.

Lambda says how it initializes a function in ``AWS_LAMBDA_INITIALIZATION_TYPE``:

- ``on-demand``: a request is waiting for init to finish, so init only builds
  client objects. Redis and MySQL connect at their first command, the SQS client
  is made at the first send (seckill.infra.lazy.OnFirstUse): a container that only
  refuses never pays for the ones it does not use.
- ``provisioned-concurrency``: init runs before any traffic (the sale window's
  schedule), so it connects to Redis and MySQL and makes the SQS client then.
- ``snap-start``: the same at init, so that the snapshot holds the imported code,
  the made clients and the TLS context; connections do not survive a snapshot,
  so they are closed before it and opened again after each restore
  (``snapshot_restore_py``, part of the Python runtimes that support SnapStart).

A dependency that cannot be reached ahead of traffic is not an init failure:
the warning is logged and the connection is made at first use, as on demand.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from seckill.infra.lazy import OnFirstUse

if TYPE_CHECKING:  # the authorizer uses no database, the edge publisher neither Redis nor MySQL
    from seckill.infra.clients import RedisClient
    from seckill.infra.db import Database

log = logging.getLogger(__name__)

ON_DEMAND = "on-demand"
SNAP_START = "snap-start"


def initialization_type() -> str:
    return os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") or ON_DEMAND


@dataclass
class Connections:
    """What one function holds: a Redis client, a database, clients made on first use."""

    redis: RedisClient | None = None
    db: Database | None = None
    clients: list[OnFirstUse] = field(default_factory=list)

    def open(self) -> None:
        """Connect and make every client now; a failure is logged, not raised."""
        steps: list[tuple[str, Callable[[], Any]]] = []
        if self.redis is not None:
            steps.append(("Redis", self.redis.ping))
        if self.db is not None:
            steps.append(("MySQL", self.db.connection))
        steps.extend(("an AWS client", client.get) for client in self.clients)
        for name, step in steps:
            try:
                step()
            except Exception:
                log.warning("could not reach %s ahead of traffic; it connects at first use", name, exc_info=True)

    def close(self) -> None:
        """Close every connection (the clients stay; they hold none that matters)."""
        if self.redis is not None:
            client: Any = self.redis  # Redis and RedisCluster hold their pools differently
            pool = getattr(client, "connection_pool", None)
            if pool is not None:
                pool.disconnect()
            else:  # RedisCluster: a pool per node
                client.disconnect_connection_pools()
        if self.db is not None:
            self.db.close()

    def reopen(self) -> None:
        self.close()
        self.open()


def prepare(connections: Connections) -> Connections:
    """Call at the end of a handler module's init: see the module's docstring."""
    kind = initialization_type()
    if kind == ON_DEMAND:
        return connections
    connections.open()
    if kind == SNAP_START:
        from snapshot_restore_py import register_after_restore, register_before_snapshot

        register_before_snapshot(connections.close)
        register_after_restore(connections.reopen)
    return connections
