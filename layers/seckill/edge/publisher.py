"""Writes sale states to CloudFront's KeyValueStore, the newest version winning.

The store takes a write only with its current ETag (If-Match), which any write to any
key changes: two publishers racing make one of them fail with ConflictException, and
it reads again and retries. A state is written only over an older version, so
messages may arrive in any order and any number of times (docs/edge.md).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from enum import Enum
from typing import Any

from botocore.exceptions import ClientError

from seckill.edge.state import EdgeState, MalformedState

log = logging.getLogger(__name__)

ATTEMPTS = 5
# The first retry waits up to this long, each next one up to twice as long (full jitter).
BACKOFF_SECONDS = 0.05


def kvs_client() -> Any:
    """The cloudfront-keyvaluestore client. Its requests are signed with SigV4A, which
    botocore can only do with awscrt installed (``botocore[crt]``). boto3 honours
    AWS_ENDPOINT_URL_CLOUDFRONT_KEYVALUESTORE, which points local runs at the stand-in."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "cloudfront-keyvaluestore",
        config=Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 3, "mode": "standard"}),
    )


class Published(Enum):
    WRITTEN = "written"
    STALE = "stale"  # the store holds this version or a newer one already


class StoreBusy(Exception):
    """Every attempt met a concurrent write: the record fails and SQS delivers it again."""


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


class Publisher:
    def __init__(
        self,
        kvs: Any,
        kvs_arn: str,
        *,
        attempts: int = ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kvs = kvs
        self.kvs_arn = kvs_arn
        self.attempts = attempts
        self.sleep = sleep

    def stored_version(self, voucher_id: int) -> int:
        """The version the store holds for the voucher; 0 when it holds none, or a value
        that is not a state (written by hand?): any state replaces it."""
        try:
            value = self.kvs.get_key(KvsARN=self.kvs_arn, Key=str(voucher_id))["Value"]
        except ClientError as error:
            if _code(error) == "ResourceNotFoundException":
                return 0
            raise
        try:
            return EdgeState.from_value(voucher_id, value).v
        except MalformedState:
            log.warning("voucher %s: the store holds no state but %r; replacing it", voucher_id, value)
            return 0

    def publish(self, state: EdgeState) -> Published:
        for attempt in range(self.attempts):
            # The ETag first: a write to the key after it is read makes the put conflict,
            # so the version compared below is never older than the one overwritten.
            etag = self.kvs.describe_key_value_store(KvsARN=self.kvs_arn)["ETag"]
            if self.stored_version(state.voucher_id) >= state.v:
                return Published.STALE
            try:
                self.kvs.put_key(KvsARN=self.kvs_arn, Key=state.key, Value=state.value(), IfMatch=etag)
                return Published.WRITTEN
            except ClientError as error:
                if _code(error) != "ConflictException":
                    raise
            if attempt + 1 < self.attempts:
                self.sleep(random.uniform(0, BACKOFF_SECONDS * 2**attempt))
        raise StoreBusy(f"voucher {state.voucher_id} v{state.v}: {self.attempts} writes met a concurrent one")
