"""A Redis database of a test run's own. The service's global keys (seckill:loaded, the
rebuild lock, the id counter) are not per voucher, so two suites sharing a database would
see each other's. Each run claims a database with ``SET NX EX`` on a key in database 0,
renews the claim while it lives and releases it at its end; a run that dies lets it expire."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from redis.exceptions import RedisError

from tests.helpers import wait_for

CLAIM_PREFIX = "seckill:test-claim:"
CLAIM_TTL = 120  # seconds a dead run keeps its database
DATABASES = range(1, 16)  # database 0 holds the claims

# Renew or release a claim only while it is still this run's.
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def claim_database(client: Any, owner: str, prefix: str = CLAIM_PREFIX) -> int | None:
    """The first database nobody has claimed, now ``owner``'s; None if all are taken."""
    for database in DATABASES:
        if client.set(f"{prefix}{database}", owner, nx=True, ex=CLAIM_TTL):
            return database
    return None


def renew_claim(client: Any, owner: str, database: int, prefix: str = CLAIM_PREFIX) -> bool:
    return bool(client.eval(_RENEW, 1, f"{prefix}{database}", owner, CLAIM_TTL))


def release_claim(client: Any, owner: str, database: int, prefix: str = CLAIM_PREFIX) -> bool:
    """False if the claim was no longer ``owner``'s (it lapsed)."""
    return bool(client.eval(_RELEASE, 1, f"{prefix}{database}", owner))


@contextlib.contextmanager
def claimed_database(client: Any, owner: str, *, prefix: str = CLAIM_PREFIX, wait: float = 600) -> Iterator[int]:
    """A database of ``owner``'s own while the block runs (waiting up to ``wait`` seconds for
    one to be released), renewed in the background."""
    database = wait_for(
        lambda: claim_database(client, owner, prefix),
        f"a free Redis database: {DATABASES.start}-{DATABASES.stop - 1} are all claimed by other runs "
        f"(keys {prefix}N in database 0)",
        until=lambda claimed: claimed is not None,
        timeout=wait,
        interval=1,
    )
    assert database is not None
    stop = threading.Event()

    def keep() -> None:
        while not stop.wait(CLAIM_TTL / 4):
            with contextlib.suppress(RedisError):  # a blip: the next renewal is well within the TTL
                renew_claim(client, owner, database, prefix)

    keeper = threading.Thread(target=keep, name="redis-claim", daemon=True)
    keeper.start()
    try:
        yield database
    finally:
        stop.set()
        keeper.join()
        assert release_claim(client, owner, database, prefix), (
            f"the claim on Redis database {database} lapsed while the run used it: another run may have shared it"
        )
