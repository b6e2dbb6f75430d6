"""TokenMinterFunction: login tokens for smoke and load tests of a deployed stack.

Logging in belongs to the wider app, which writes hm-dianping's
``login:token:<token>`` hashes into this stack's Redis. Redis is private to the
VPC, so an operator who needs tokens before that app exists invokes this
function (``aws lambda invoke``; it has no HTTP route) with
``{"userIds": [1010, 1011], "ttlSeconds": 3600}`` and gets
``{"tokens": {"1010": "<token>", ...}, "ttlSeconds": 3600}``. Whoever may invoke
it may act as any user: the stack creates it only with EnableTestTokens=true.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.ids import MAX_ID
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.tokens import mint_tokens

logger = Logger()
redis = redis_client(Settings.from_env())

MAX_USERS = 10_000
DEFAULT_TTL_SECONDS = 3600
MAX_TTL_SECONDS = 7 * 86400


def _user_ids(event: dict[str, Any]) -> list[int]:
    ids = event.get("userIds")
    if not isinstance(ids, list) or not 0 < len(ids) <= MAX_USERS:
        raise ValueError(f"userIds: a list of 1 to {MAX_USERS} user ids")
    # bool is an int subclass; true is not user 1.
    if not all(isinstance(i, int) and not isinstance(i, bool) and 0 < i <= MAX_ID for i in ids):
        raise ValueError("userIds: positive 64-bit integers only")
    return list(dict.fromkeys(ids))


def _ttl(event: dict[str, Any]) -> int:
    ttl = event.get("ttlSeconds", DEFAULT_TTL_SECONDS)
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not 60 <= ttl <= MAX_TTL_SECONDS:
        raise ValueError(f"ttlSeconds: an integer from 60 to {MAX_TTL_SECONDS}")
    return ttl


@logger.inject_lambda_context
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        user_ids, ttl = _user_ids(event), _ttl(event)
    except ValueError as exc:
        return {"error": str(exc)}
    tokens = mint_tokens(redis, user_ids, ttl)
    # The tokens themselves stay out of the logs.
    logger.info("tokens minted", extra={"users": len(tokens), "ttlSeconds": ttl})
    return {"tokens": {str(user_id): token for user_id, token in tokens.items()}, "ttlSeconds": ttl}
