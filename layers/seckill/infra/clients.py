"""Module-level clients for Redis and SQS, built once per Lambda container.

boto3 is imported, and an SQS client made, only when a function first sends:
loading SQS's service model is the largest part of a cold start, and most cold
starts of a sale only refuse (seckill.infra.warmup makes it ahead of traffic where
init does not delay a request).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Protocol, Self

from redis import Redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.credentials import CredentialProvider
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from seckill.infra.config import Settings
from seckill.infra.secrets import secrets


class RedisCommands(Protocol):
    """The commands the layer sends that a client and its pipelines both take (a
    pipeline queues them and answers at ``execute``, hence the ``Any`` answers)."""

    def get(self, name: str) -> Any: ...
    def set(
        self,
        name: str,
        value: str | int,
        ex: int | None = None,
        px: int | None = None,
        nx: bool = False,
        xx: bool = False,
        keepttl: bool = False,
    ) -> Any: ...
    def hset(
        self,
        name: str,
        key: str | None = None,
        value: str | None = None,
        mapping: Mapping[Any, str | int] | None = None,
    ) -> Any: ...
    def hdel(self, name: str, *keys: str) -> Any: ...
    def delete(self, *names: str) -> Any: ...
    def expire(self, name: str, time: int) -> Any: ...
    def persist(self, name: str) -> Any: ...
    def execute_command(self, *args: Any, **options: Any) -> Any: ...
    def incrby(self, name: str, amount: int = 1) -> Any: ...
    def exists(self, *names: str) -> Any: ...


class RedisPipeline(RedisCommands, Protocol):
    """A pipeline of a Redis or a RedisCluster: commands queued, sent at ``execute``."""

    def execute(self, raise_on_error: bool = True) -> list[Any]: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class RedisClient(RedisCommands, Protocol):
    """What the layer asks of a Redis client: a ``Redis`` or a ``RedisCluster``
    (``decode_responses``: answers are ``str``)."""

    def ping(self) -> Any: ...
    def exists(self, *names: str) -> int: ...
    def incr(self, name: str, amount: int = 1) -> int: ...
    def hget(self, name: str, key: str) -> Any: ...
    def hgetall(self, name: str) -> Any: ...
    def time(self) -> tuple[int, int]: ...
    def evalsha(self, sha: str, numkeys: int, *keys_and_args: str | int) -> Any: ...
    def script_load(self, script: str) -> Any: ...
    def lock(self, name: str, timeout: float | None = None, *, blocking_timeout: float | None = None) -> Any: ...
    def pipeline(self, transaction: bool = True) -> RedisPipeline: ...


class SecretToken(CredentialProvider):
    """The Redis AUTH token, the plain string of a Secrets Manager secret. redis-py asks
    for it at each new connection, so the secret is read when Redis is first used (not at
    import) and a changed token reaches new connections once get_secret's 5-minute cache expires;
    a failed refresh keeps the last good token (seckill.infra.secrets)."""

    def __init__(self, secret_arn: str) -> None:
        self.secret_arn = secret_arn

    def get_credentials(self) -> tuple[str]:
        token = secrets.get(self.secret_arn, 300)
        if not isinstance(token, str):
            raise TypeError(f"{self.secret_arn}: the Redis AUTH token must be a plain string secret")
        return (token,)


def redis_client(settings: Settings) -> RedisClient:
    """Short timeouts (a flash sale must answer fast or not at all), health checks
    on idle connections, and a few quick retries on connection errors. With
    REDIS_AUTH_SECRET_ARN (ElastiCache), the secret's token is the password."""
    options: dict[str, Any] = {
        "socket_timeout": 1.0,
        "socket_connect_timeout": 1.0,
        "health_check_interval": 30,
        "retry": Retry(ExponentialBackoff(cap=0.2, base=0.01), retries=3),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "decode_responses": True,
    }
    if settings.redis_auth_secret_arn:
        options["credential_provider"] = SecretToken(settings.redis_auth_secret_arn)
    if settings.redis_cluster:
        return RedisCluster.from_url(settings.redis_url, **options)
    return Redis.from_url(settings.redis_url, **options)


def sqs_client() -> Any:
    """boto3 honours AWS_ENDPOINT_URL_SQS, which points local runs at moto.
    Few, quick attempts: the caller answers 503 rather than keep a user waiting.
    No client-side parameter validation: every request is built by our own code
    (OrderQueue, ExpiryQueue, StateQueue), and SQS validates it anyway (what each
    part of a send costs: benchmarks/README.md)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "sqs",
        config=Config(
            connect_timeout=2,
            read_timeout=3,
            retries={"max_attempts": 3, "mode": "standard"},
            parameter_validation=False,
        ),
    )
