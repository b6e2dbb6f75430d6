"""Configuration, read once from the environment (SPEC §7)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from zoneinfo import ZoneInfo


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Settings:
    redis_url: str
    redis_cluster: bool
    order_queue_url: str
    db_host: str
    db_port: int
    db_name: str
    db_user: str
    db_password: str
    db_secret_arn: str
    timezone: ZoneInfo
    # How long a warm function refuses a sold-out or ended voucher without Redis.
    refusal_cache_seconds: float
    # How long the order-status hint for a pending order lives in Redis.
    status_ttl_seconds: int

    @classmethod
    def from_env(cls, env: os._Environ[str] | dict[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            redis_url=env.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
            redis_cluster=_flag(env.get("REDIS_CLUSTER")),
            order_queue_url=env.get("ORDER_QUEUE_URL", ""),
            db_host=env.get("DB_HOST", "127.0.0.1"),
            db_port=int(env.get("DB_PORT", "3306")),
            db_name=env.get("DB_NAME", "seckill"),
            db_user=env.get("DB_USER", "root"),
            db_password=env.get("DB_PASSWORD", ""),
            db_secret_arn=env.get("DB_SECRET_ARN", ""),
            timezone=ZoneInfo(env.get("SECKILL_TIMEZONE") or "UTC"),
            refusal_cache_seconds=float(env.get("SECKILL_REFUSAL_CACHE_SECONDS", "1.0")),
            status_ttl_seconds=int(env.get("SECKILL_STATUS_TTL_SECONDS", "86400")),
        )
