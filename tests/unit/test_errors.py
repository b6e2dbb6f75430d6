"""A dependency out of reach is the client's cue to try again (seckill.infra.unreachable);
any other error is the service's. How each raised no reaches the client (its status, code and
message) is tested through the handlers, in tests/integration/test_api_*.py."""

from __future__ import annotations

import pymysql
import pytest
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import ReadTimeoutError as BotoReadTimeoutError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from seckill.infra.unreachable import unreachable


@pytest.mark.parametrize(
    ("error", "down"),
    [
        (pymysql.err.InterfaceError(0, ""), True),
        (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), True),
        (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), False),  # about the statement
        (pymysql.err.ProgrammingError(1146, "Table doesn't exist"), False),
        (RedisConnectionError("refused"), True),
        (RedisTimeoutError("timed out"), True),
        (BotoConnectionError(error="refused"), True),
        (BotoReadTimeoutError(endpoint_url="https://sqs"), True),
        (ValueError("a bug"), False),
    ],
)
def test_only_a_dependency_out_of_reach_is_unreachable(error: Exception, down: bool) -> None:
    assert unreachable(error) is down
