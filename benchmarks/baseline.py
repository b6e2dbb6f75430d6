"""The synchronous design Seckill replaces, as a Lambda handler: the yardstick of ``benchmarks``.

It does per press what the original service did before its Redis gate, and is
correct (no oversell, one order per user):

1. read the sale's window and stock from MySQL (autocommit, one SELECT);
   refuse NOT_STARTED / ENDED / SOLD_OUT from that row;
2. take a per-user lock in Redis (redis-py's ``Lock``: SET NX PX, released by a
   script); a user already holding it is refused DUPLICATE_ORDER;
3. one transaction: count the user's orders of this voucher, decrement
   ``stock = stock - 1 WHERE stock > 0``, take an order id (one INCR) and insert
   the order; COMMIT.

It answers 200 with the order id (the order is stored when it answers) and the
same ``Result`` bodies and refusal codes as Seckill. The benchmark loads it with
``seckill_local.lambdas.load_handler``, exactly as it loads Seckill's handlers.

MySQL connections can be bounded, as a servlet container's threads share a small
pool: ``use_pool`` hands the module a semaphore shared by every worker process,
and each MySQL use (the read, the transaction) holds one of its slots.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pymysql
from redis.exceptions import RedisError

from seckill.ids import next_order_id
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import connect, credentials
from seckill.infra.timeutil import from_db

LOCK_SECONDS = 10  # the original's per-user lock timeout

settings = Settings.from_env()
redis = redis_client(settings)
_creds = credentials(settings)
_conn: pymysql.Connection | None = None
_pool: Any = None  # a multiprocessing semaphore when connections are bounded


def use_pool(semaphore: Any) -> None:
    """Bound MySQL use by a semaphore shared across processes (the pool's size is its value)."""
    global _pool
    _pool = semaphore


@contextlib.contextmanager
def _connection() -> Iterator[pymysql.Connection]:
    global _conn
    if _pool is not None:
        _pool.acquire()
    try:
        if _conn is None:
            _conn = connect(_creds)
            _conn.autocommit(True)  # a plain read needs no COMMIT, as with a pooled JDBC connection
        yield _conn
    except pymysql.Error:
        _conn = None  # a broken connection is replaced at the next use
        raise
    finally:
        if _pool is not None:
            _pool.release()


def _result(status: int, data: Any = None, code: str | None = None, message: str | None = None) -> dict[str, Any]:
    body = {"success": code is None, "data": data, "errorMsg": message, "code": code}
    return {"statusCode": status, "headers": {"Content-Type": "application/json"}, "body": json.dumps(body)}


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        self.code, self.message = code, message


def _read_voucher(voucher_id: int) -> dict[str, Any] | None:
    with _connection() as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT stock, begin_time, end_time FROM tb_seckill_voucher WHERE voucher_id = %s", (voucher_id,)
        )
        return cursor.fetchone()


def _create_order(voucher_id: int, user_id: int) -> int:
    with _connection() as conn:
        conn.begin()
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT COUNT(*) AS n FROM tb_voucher_order WHERE user_id = %s AND voucher_id = %s",
                    (user_id, voucher_id),
                )
                if cursor.fetchone()["n"] > 0:
                    raise _Refused("DUPLICATE_ORDER", "one order per user")
                cursor.execute(
                    "UPDATE tb_seckill_voucher SET stock = stock - 1 WHERE voucher_id = %s AND stock > 0",
                    (voucher_id,),
                )
                if cursor.rowcount == 0:
                    raise _Refused("SOLD_OUT", "sold out")
                order_id = next_order_id(redis)
                cursor.execute(
                    "INSERT INTO tb_voucher_order (id, user_id, voucher_id) VALUES (%s, %s, %s)",
                    (order_id, user_id, voucher_id),
                )
            conn.commit()
        except BaseException:
            with contextlib.suppress(pymysql.Error):
                conn.rollback()
            raise
    return order_id


def _press(voucher_id: int, user_id: int) -> int:
    voucher = _read_voucher(voucher_id)
    if voucher is None:
        raise _Refused("VOUCHER_NOT_FOUND", "voucher not found")
    now = datetime.now(UTC)
    if now < from_db(voucher["begin_time"]):
        raise _Refused("NOT_STARTED", "the sale has not started")
    if now >= from_db(voucher["end_time"]):
        raise _Refused("ENDED", "the sale has ended")
    if voucher["stock"] < 1:
        raise _Refused("SOLD_OUT", "sold out")
    lock = redis.lock(f"lock:order:{user_id}", timeout=LOCK_SECONDS, blocking=False)
    if not lock.acquire():
        raise _Refused("DUPLICATE_ORDER", "one order per user")
    try:
        return _create_order(voucher_id, user_id)
    finally:
        lock.release()


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """``POST /voucher-order/seckill/{voucherId}`` only, the route the experiment drives."""
    try:
        user_id = int(event["requestContext"]["authorizer"]["lambda"]["userId"])
        voucher_id = int(event["pathParameters"]["voucherId"])
    except (KeyError, TypeError, ValueError):
        return _result(400, code="BAD_REQUEST", message="voucherId and a user are required")
    try:
        return _result(200, data=str(_press(voucher_id, user_id)))
    except _Refused as refused:
        status = 404 if refused.code == "VOUCHER_NOT_FOUND" else 409
        return _result(status, code=refused.code, message=refused.message)
    except (pymysql.Error, RedisError, OSError):
        return _result(503, code="TRY_AGAIN", message="the service is briefly unavailable, please try again")
