"""Each test run's Redis database (tests/claims.py): two runs never hold the same one.
Claimed here under a prefix of the test's own, so the real claims are left alone."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.claims import CLAIM_TTL, DATABASES, claim_database, claimed_database, release_claim, renew_claim


@pytest.fixture
def prefix(redis: Any) -> Iterator[str]:
    made = f"seckill:test-claim-test:{uuid.uuid4().hex}:"
    yield made
    redis.delete(*(f"{made}{n}" for n in DATABASES))


def test_two_runs_claiming_at_once_never_get_the_same_database(redis: Any, prefix: str) -> None:
    got: dict[str, list[int]] = {"a": [], "b": []}
    start = threading.Barrier(2)

    def run(owner: str) -> None:
        start.wait()
        while (database := claim_database(redis, owner, prefix)) is not None:
            got[owner].append(database)

    threads = [threading.Thread(target=run, args=(owner,)) for owner in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert not set(got["a"]) & set(got["b"])
    assert sorted(got["a"] + got["b"]) == list(DATABASES)


def test_a_claim_is_renewed_and_released_only_by_its_owner(redis: Any, prefix: str) -> None:
    for _ in DATABASES:
        assert claim_database(redis, "a", prefix) is not None
    assert claim_database(redis, "b", prefix) is None  # all taken

    assert not renew_claim(redis, "b", 7, prefix)
    assert not release_claim(redis, "b", 7, prefix)
    redis.expire(f"{prefix}7", 5)
    assert renew_claim(redis, "a", 7, prefix)
    assert redis.ttl(f"{prefix}7") > CLAIM_TTL - 10
    assert release_claim(redis, "a", 7, prefix)
    assert claim_database(redis, "b", prefix) == 7
    assert not release_claim(redis, "a", 7, prefix)


def test_claimed_databases_differ_and_a_run_finding_none_free_says_so(redis: Any, prefix: str) -> None:
    with claimed_database(redis, "a", prefix=prefix) as first, claimed_database(redis, "b", prefix=prefix) as second:
        assert first != second
        assert redis.get(f"{prefix}{first}") == "a"
        for _ in range(len(DATABASES) - 2):
            assert claim_database(redis, "c", prefix) is not None
        with (
            pytest.raises(pytest.fail.Exception, match="all claimed by other runs"),
            claimed_database(redis, "d", prefix=prefix, wait=0),
        ):
            pass
    assert not redis.exists(f"{prefix}{first}", f"{prefix}{second}")  # released
