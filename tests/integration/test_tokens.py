"""Login tokens as hm-dianping stores them: the hash ``login:token:<token>``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from seckill.infra import keys
from seckill.tokens import mint_tokens, token_from_header, user_for_token

# --- token_from_header ---------------------------------------------------------------------


# --- user_for_token and mint_tokens --------------------------------------------------------


@pytest.fixture
def token_keys(redis: Any) -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for start in range(0, len(made), 500):
        redis.delete(*made[start : start + 500])


def test_mint_tokens_writes_the_login_hash_with_a_ttl(redis: Any, token_keys: list[str]) -> None:
    users = [900_000_001, 900_000_002, 900_000_003]
    minted = mint_tokens(redis, users, ttl_seconds=120)
    token_keys.extend(keys.login_token(t) for t in minted.values())

    assert set(minted) == set(users)
    assert len(set(minted.values())) == len(users)
    for user_id, tok in minted.items():
        key = f"login:token:{tok}"
        assert redis.hgetall(key) == {"id": str(user_id), "nickName": f"user_{user_id}", "icon": ""}
        assert 0 < redis.ttl(key) <= 120
        # A minted token passes the header check and maps back to its user.
        assert token_from_header(f"Bearer {tok}") == tok
        assert user_for_token(redis, tok) == user_id


def test_mint_tokens_in_several_batches(redis: Any, token_keys: list[str]) -> None:
    # More than one pipeline batch (1000 users each).
    users = range(910_000_000, 910_002_500)
    minted = mint_tokens(redis, users, ttl_seconds=60)
    token_keys.extend(keys.login_token(t) for t in minted.values())
    assert len(minted) == 2500
    with redis.pipeline(transaction=False) as pipe:
        for tok in minted.values():
            pipe.hget(keys.login_token(tok), "id")
        ids = pipe.execute()
    assert [int(i) for i in ids] == list(users)


def test_unknown_token_has_no_user(redis: Any) -> None:
    assert user_for_token(redis, uuid.uuid4().hex) is None


@pytest.mark.parametrize("stored", ["", "abc", "0", "-5", "1.5", " 7", "7 ", "²", "١٢", str(2**63)])
def test_a_junk_user_id_in_redis_has_no_user(redis: Any, token_keys: list[str], stored: str) -> None:
    tok = uuid.uuid4().hex
    token_keys.append(keys.login_token(tok))
    redis.hset(keys.login_token(tok), mapping={"id": stored, "nickName": "x", "icon": ""})
    assert user_for_token(redis, tok) is None


def test_a_hash_without_id_has_no_user(redis: Any, token_keys: list[str]) -> None:
    tok = uuid.uuid4().hex
    token_keys.append(keys.login_token(tok))
    redis.hset(keys.login_token(tok), mapping={"nickName": "x", "icon": ""})
    assert user_for_token(redis, tok) is None


def test_an_expired_token_has_no_user(redis: Any, token_keys: list[str]) -> None:
    tok = mint_tokens(redis, [920_000_001], ttl_seconds=60)[920_000_001]
    token_keys.append(keys.login_token(tok))
    redis.pexpire(keys.login_token(tok), 1)
    time.sleep(0.02)
    assert user_for_token(redis, tok) is None
