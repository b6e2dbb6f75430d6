"""Login tokens, stored as hm-dianping does: the hash ``login:token:<token>``."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from typing import Any

from seckill import keys

_TOKEN = re.compile(r"[A-Za-z0-9_-]{8,128}")


def token_from_header(header: str | None) -> str | None:
    """The token of an ``authorization`` header, with or without ``Bearer``; None if unusable."""
    if not header:
        return None
    token = header.strip()
    if token[:7].lower() == "bearer ":
        token = token[7:].strip()
    return token if _TOKEN.fullmatch(token) else None


def user_for_token(redis: Any, token: str) -> int | None:
    user_id = redis.hget(keys.login_token(token), "id")
    if user_id is None or not str(user_id).isdigit() or int(user_id) <= 0:
        return None
    return int(user_id)


def mint_tokens(redis: Any, user_ids: Iterable[int], ttl_seconds: int) -> dict[int, str]:
    """A fresh token per user, written in pipelined batches."""
    minted: dict[int, str] = {}
    with redis.pipeline(transaction=False) as pipe:
        for user_id in user_ids:
            token = uuid.uuid4().hex
            key = keys.login_token(token)
            pipe.hset(key, mapping={"id": user_id, "nickName": f"user_{user_id}", "icon": ""})
            pipe.expire(key, ttl_seconds)
            minted[user_id] = token
            if len(pipe) >= 1000:
                pipe.execute()
        pipe.execute()
    return minted
