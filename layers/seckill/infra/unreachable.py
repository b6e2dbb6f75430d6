"""Which errors say that a dependency (MySQL, Redis, SQS) cannot be reached: the
client's cue to try again (503 TRY_AGAIN), where any other error is the service's (500)."""

from __future__ import annotations

import pymysql
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import ReadTimeoutError as BotoReadTimeoutError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from seckill.infra.db import is_connection_error


def unreachable(error: BaseException) -> bool:
    """Whether ``error`` says a dependency cannot be reached. An error MySQL reports about
    the statement itself (some are OperationalErrors too) does not."""
    if isinstance(error, pymysql.Error):
        return is_connection_error(error)
    return isinstance(error, (RedisConnectionError, RedisTimeoutError, BotoConnectionError, BotoReadTimeoutError))
