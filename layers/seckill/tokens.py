"""Login tokens, stored as hm-dianping does: the hash ``login:token:<token>``."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

from seckill.ids import MAX_ID, parse_id
from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.errors import Unauthorized

_TOKEN = re.compile(r"[A-Za-z0-9_-]{8,128}")


def token_from_header(header: str | None) -> str | None:
    """The token of an ``authorization`` header, with or without ``Bearer``; None if unusable."""
    if not header:
        return None
    token = header.strip()
    if token[:7].lower() == "bearer ":
        token = token[7:].strip()
    return token if _TOKEN.fullmatch(token) else None


def user_for_token(redis: RedisClient, token: str) -> int | None:
    """The user a token logs in, or None when its key holds no login hash with a valid id.
    Redis unreachable still raises (the authorizer answers 500, cached by nobody)."""
    try:
        user_id = redis.hget(keys.login_token(token), "id")
    except ResponseError as exc:
        # A key of another type (string, list, set...) is no login: Redis says WRONGTYPE.
        if not str(exc).startswith("WRONGTYPE"):
            raise
        return None
    text = "" if user_id is None else str(user_id)
    # ASCII digits only: str.isdigit() also passes '²' (int() raises) and other scripts' digits.
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= MAX_ID:
        return None
    return int(text)


def mint_tokens(redis: RedisClient, user_ids: Iterable[int], ttl_seconds: int) -> dict[int, str]:
    """A fresh token per user."""
    tokens = {user_id: uuid.uuid4().hex for user_id in user_ids}
    store_tokens(redis, tokens, ttl_seconds)
    return tokens


def store_tokens(redis: RedisClient, tokens: dict[int, str], ttl_seconds: int) -> None:
    """Write login hashes in pipelined batches (also how sessions come back after Redis lost them)."""
    with redis.pipeline(transaction=False) as pipe:
        for user_id, token in tokens.items():
            key = keys.login_token(token)
            pipe.hset(key, mapping={"id": user_id, "nickName": f"user_{user_id}", "icon": ""})
            pipe.expire(key, ttl_seconds)
            if len(pipe) >= 1000:
                pipe.execute()
        pipe.execute()


def user_of(event: dict[str, Any]) -> int:
    """The user id the authorizer put in a request's context; nothing else is trusted."""
    context = event.get("requestContext", {}).get("authorizer") or {}
    user_id = (context.get("lambda") or {}).get("userId")
    if user_id is None:
        raise Unauthorized("login required")
    return parse_id(user_id, "userId")
