"""AuthorizerFunction: HTTP API Lambda authorizer, payload 2.0, simple responses.

The token (``authorization`` header, ``Bearer`` optional) is looked up in the
hm-dianping login hash; the user id goes to the API as ``context.userId``.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.clients import redis_client
from seckill.config import Settings
from seckill.tokens import token_from_header, user_for_token

logger = Logger()
redis = redis_client(Settings.from_env())

DENY: dict[str, Any] = {"isAuthorized": False}


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    token = token_from_header(headers.get("authorization"))
    if token is None:
        return DENY
    try:
        user_id = user_for_token(redis, token)
    except Exception:
        # Deny rather than fail open; API Gateway answers 403 to the client.
        logger.exception("token lookup failed")
        return DENY
    if user_id is None:
        return DENY
    return {"isAuthorized": True, "context": {"userId": str(user_id)}}
