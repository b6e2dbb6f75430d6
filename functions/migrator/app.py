"""MigratorFunction: applies the schema during deployment (the ``Schema`` custom resource).

CloudFormation sends Create, Update or Delete and then waits for a reply PUT to
the event's pre-signed ``ResponseURL``. Every path replies exactly once:

- Create / Update run ``seckill.migrate.migrate`` (idempotent) with the
  credentials from ``DB_SECRET_ARN``, retrying connection errors while RDS
  Proxy may still be registering its target; an error that outlasts the
  retries replies FAILED with its reason, so the stack rolls back.
- Create / Update also give the draw passes' secret its first key ring
  (``seckill.passes.ensure_ring``) while it holds none.
- Delete replies SUCCESS without touching the database: the data outlives the
  schema resource (the instance has its own deletion policy).
- A watchdog replies FAILED shortly before the function would time out, in
  case the database hangs past the driver's own timeouts.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import boto3
import pymysql
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.infra.config import Settings
from seckill.infra.db import Credentials, credentials
from seckill.migrate import migrate
from seckill.passes import ensure_ring

logger = Logger()

SUCCESS, FAILED = "SUCCESS", "FAILED"
# Time kept back from the function's timeout to reply before Lambda kills us.
REPLY_MARGIN_SECONDS = 10.0
REPLY_ATTEMPTS = 3
# An attempt's own worst case (connect timeout and the DDL) kept back from the last retry.
ATTEMPT_SECONDS = 5.0
MAX_RETRY_DELAY_SECONDS = 15.0


class Reply:
    """The single reply to one CloudFormation request, whoever sends it first."""

    def __init__(self, event: dict[str, Any], physical_id: str) -> None:
        self.event = event
        self.physical_id = physical_id
        self._lock = threading.Lock()
        self.sent: str | None = None

    def send(self, status: str, reason: str = "", data: dict[str, str] | None = None) -> None:
        with self._lock:
            if self.sent is not None:
                return
            self.sent = status
        body = {
            "Status": status,
            # CloudFormation shows the reason in the stack events; it caps the whole reply at 4 KB.
            "Reason": (reason or status)[:1000],
            "PhysicalResourceId": self.physical_id,
            "StackId": self.event["StackId"],
            "RequestId": self.event["RequestId"],
            "LogicalResourceId": self.event["LogicalResourceId"],
            "NoEcho": False,
            "Data": data or {},
        }
        put(self.event["ResponseURL"], json.dumps(body).encode("utf-8"))


def put(url: str, payload: bytes) -> None:
    """PUT the reply; retried, because a lost reply leaves the stack waiting for ServiceTimeout."""
    if urlsplit(url).scheme not in {"https", "http"}:
        raise ValueError(f"refusing to reply to {url!r}")
    # The URL is pre-signed without a content type: send an empty one.
    request = urllib.request.Request(  # noqa: S310 (scheme checked above)
        url, data=payload, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(payload))}
    )
    for attempt in range(REPLY_ATTEMPTS):
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (scheme checked above)
                logger.info("reply sent", extra={"httpStatus": response.status})
                return
        except (urllib.error.URLError, OSError):
            logger.exception("reply failed", extra={"attempt": attempt + 1})
            if attempt + 1 < REPLY_ATTEMPTS:
                time.sleep(0.5 * 2**attempt)


def migrate_when_ready(settings: Settings, deadline: float) -> Credentials:
    """Migrate, retrying connection errors until ``deadline`` (time.monotonic)."""
    delay = 2.0
    while True:
        try:
            creds = credentials(settings)
            migrate(creds)
            return creds
        except pymysql.err.OperationalError:
            if time.monotonic() + delay + ATTEMPT_SECONDS > deadline:
                raise
            logger.warning("database not reachable yet, retrying", exc_info=True, extra={"retryInSeconds": delay})
            time.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY_SECONDS)


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = event.get("RequestType", "")
    settings = Settings.from_env()
    # Stable across updates, so CloudFormation never replaces (and deletes) the schema.
    reply = Reply(event, event.get("PhysicalResourceId") or f"seckill-schema-{settings.db_name}")
    logger.info("custom resource request", extra={"requestType": request, "physicalId": reply.physical_id})

    budget = context.get_remaining_time_in_millis() / 1000 - REPLY_MARGIN_SECONDS
    deadline = time.monotonic() + budget
    watchdog = threading.Timer(max(budget, 0.0), reply.send, args=(FAILED, "migration timed out"))
    watchdog.daemon = True
    watchdog.start()
    try:
        if request in {"Create", "Update"}:
            creds = migrate_when_ready(settings, deadline)
            pass_keys = os.environ.get("PASS_KEYS_SECRET_ARN", "")
            if pass_keys and ensure_ring(boto3.client("secretsmanager"), pass_keys):
                logger.info("draw pass key ring created")
            reply.send(SUCCESS, f"schema applied to {creds.database}", {"Database": creds.database})
        elif request == "Delete":
            reply.send(SUCCESS, "schema left in place")
        else:
            reply.send(FAILED, f"unknown RequestType {request!r}")
    except Exception as exc:
        # Any error is the stack's to see, never a hang.
        logger.exception("migration failed")
        reply.send(FAILED, f"{type(exc).__name__}: {exc}")
    finally:
        watchdog.cancel()
    return {"Status": reply.sent, "PhysicalResourceId": reply.physical_id}
