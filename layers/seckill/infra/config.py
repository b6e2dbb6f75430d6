"""Configuration, read once from the environment (the variables: docs/operations.md, Configuration)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from zoneinfo import ZoneInfo


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _get(env: os._Environ[str] | dict[str, str], name: str, default: str) -> str:
    """The variable, or the default when unset or empty (``sam local`` passes a
    declared variable it has no value for as an empty string)."""
    return env.get(name) or default


@dataclass(frozen=True)
class Settings:
    redis_url: str
    redis_cluster: bool
    # Secrets Manager secret whose plain string is the Redis AUTH token (unset: no password).
    redis_auth_secret_arn: str
    order_queue_url: str
    # Read by reconciliation and recovery, to count orders waiting there.
    order_dlq_url: str
    db_host: str
    db_port: int
    db_name: str
    db_user: str
    db_password: str
    db_secret_arn: str
    timezone: ZoneInfo
    # How long a warm function refuses a sold-out or ended voucher without Redis.
    refusal_cache_seconds: float
    # How long the order-status hint for a pending order lives in Redis: longer than the
    # dead-letter queue keeps a message (14 days), so a replayed order is never "not found".
    status_ttl_seconds: int
    # Require TLS to MySQL and verify the server's certificate (RDS Proxy requires TLS).
    db_tls: bool = False
    # Where the persister moves records that can never be stored (unset: they fail and are dead-lettered).
    order_poison_queue_url: str = ""
    # Where confirmed orders wait for their payment deadline (persister and OrderExpiryFunction).
    order_expiry_queue_url: str = ""
    # Where a sale's new state goes on its way to the edge's KeyValueStore (unset: the stack has no edge).
    edge_state_queue_url: str = ""
    # The KeyValueStore EdgePublisherFunction writes the sales' states to.
    edge_kvs_arn: str = ""
    # Where the draw clock's delayed messages wait for their move (docs/draw.md).
    draw_clock_queue_url: str = ""

    @classmethod
    def from_env(cls, env: os._Environ[str] | dict[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            redis_url=_get(env, "REDIS_URL", "redis://127.0.0.1:6379/0"),
            redis_cluster=_flag(env.get("REDIS_CLUSTER")),
            redis_auth_secret_arn=env.get("REDIS_AUTH_SECRET_ARN", ""),
            order_queue_url=env.get("ORDER_QUEUE_URL", ""),
            order_dlq_url=env.get("ORDER_DLQ_URL", ""),
            db_host=_get(env, "DB_HOST", "127.0.0.1"),
            db_port=int(_get(env, "DB_PORT", "3306")),
            db_name=_get(env, "DB_NAME", "seckill"),
            db_user=_get(env, "DB_USER", "root"),
            db_password=env.get("DB_PASSWORD", ""),
            db_secret_arn=env.get("DB_SECRET_ARN", ""),
            timezone=ZoneInfo(env.get("SECKILL_TIMEZONE") or "UTC"),
            refusal_cache_seconds=float(env.get("SECKILL_REFUSAL_CACHE_SECONDS", "1.0")),
            status_ttl_seconds=int(env.get("SECKILL_STATUS_TTL_SECONDS", str(15 * 86400))),
            # Credentials from Secrets Manager mean a managed database in AWS: TLS unless told otherwise.
            db_tls=_flag(env.get("DB_TLS")) if env.get("DB_TLS") else bool(env.get("DB_SECRET_ARN")),
            order_poison_queue_url=env.get("ORDER_POISON_QUEUE_URL", ""),
            order_expiry_queue_url=env.get("ORDER_EXPIRY_QUEUE_URL", ""),
            edge_state_queue_url=env.get("EDGE_STATE_QUEUE_URL", ""),
            edge_kvs_arn=env.get("EDGE_KVS_ARN", ""),
            draw_clock_queue_url=env.get("DRAW_CLOCK_QUEUE_URL", ""),
        )
