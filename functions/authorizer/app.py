"""AuthorizerFunction: HTTP API Lambda authorizer, payload 2.0, simple responses.

The token (``authorization`` header, ``Bearer`` optional) is looked up in the
hm-dianping login hash; the user id goes to the API as ``context.userId``.

A request without the edge's origin header (seckill.origin; with the edge only) is
denied and counted (``OriginRefused``) before its token is read: no user route is
reached around the edge. A missing or unknown token is denied, as is one whose key
holds no login hash with a valid user id (another type of key, no ``id``). A lookup that fails (Redis unreachable)
raises instead: API Gateway caches a deny for ReauthorizeEvery, locking the
token's user out well past a short outage, whereas a failed invocation is
answered 500 and cached by nobody, so the next request asks again.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.infra import warmup
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.origin import OriginCheck
from seckill.tokens import token_from_header, user_for_token

logger = Logger()
metrics = Metrics(namespace="Seckill")
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)
origin = OriginCheck.from_env(os.environ)
redis = redis_client(Settings.from_env())
warmup.prepare(warmup.Connections(redis))

DENY: dict[str, Any] = {"isAuthorized": False}


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    if not origin.admits(headers):
        metrics.add_metric(name="OriginRefused", unit=MetricUnit.Count, value=1)
        logger.warning("a user route reached without the edge's origin header", extra={"route": event.get("routeKey")})
        return DENY
    token = token_from_header(headers.get("authorization"))
    if token is None:
        return DENY
    try:
        user_id = user_for_token(redis, token)
    except Exception:
        logger.exception("token lookup failed")
        raise
    if user_id is None:
        return DENY
    return {"isAuthorized": True, "context": {"userId": str(user_id)}}
