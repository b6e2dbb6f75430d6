"""Module-level clients for Redis and SQS, built once per Lambda container."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config
from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from seckill.config import Settings

RedisClient = Redis | RedisCluster


def redis_client(settings: Settings) -> RedisClient:
    """Short timeouts (a flash sale must answer fast or not at all), health checks
    on idle connections, and a few quick retries on connection errors."""
    options: dict[str, Any] = {
        "socket_timeout": 1.0,
        "socket_connect_timeout": 1.0,
        "health_check_interval": 30,
        "retry": Retry(ExponentialBackoff(cap=0.2, base=0.01), retries=3),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "decode_responses": True,
    }
    if settings.redis_cluster:
        return RedisCluster.from_url(settings.redis_url, **options)
    return Redis.from_url(settings.redis_url, **options)


def sqs_client() -> Any:
    """boto3 honours AWS_ENDPOINT_URL_SQS, which points local runs at moto.
    Few, quick attempts: the caller answers 503 rather than keep a user waiting."""
    return boto3.client(
        "sqs",
        config=Config(connect_timeout=2, read_timeout=3, retries={"max_attempts": 3, "mode": "standard"}),
    )
