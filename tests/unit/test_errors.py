"""A raised no carries the same Refusal the gate returns: one type for every client-facing no;
a dependency out of reach is the client's cue to try again (seckill.infra.unreachable)."""

from __future__ import annotations

import pymysql
import pytest
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import ReadTimeoutError as BotoReadTimeoutError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from seckill.infra.errors import BadRequest, NotFound, Refusal, TryAgain
from seckill.infra.unreachable import unreachable


def test_a_raised_error_carries_its_refusal() -> None:
    assert BadRequest("limit must be an integer").refusal == Refusal(400, "BAD_REQUEST", "limit must be an integer")
    assert TryAgain("please try again").refusal == Refusal(503, "TRY_AGAIN", "please try again")


def test_a_code_given_replaces_the_default_one() -> None:
    refusal = NotFound("order not found", code="ORDER_NOT_FOUND").refusal
    assert refusal == Refusal(404, "ORDER_NOT_FOUND", "order not found")


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
