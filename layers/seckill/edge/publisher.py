"""Writes sale states to CloudFront's KeyValueStore, the newest version winning.

The store takes a write only with its current ETag (If-Match), which any write to any
key changes: two publishers racing make one of them fail with ConflictException, and
it reads again and retries. A state is written only over an older version, so
messages may arrive in any order and any number of times; a sweep's state only where
the store holds another state as well, and a sweep deletes the entries of sales long
ended (docs/edge.md). Every call to the store's API is billed, so one batch of messages
costs one read of the store and, if anything is to change, one write.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from seckill.edge.state import KEPT_AFTER_END, EdgeState, MalformedState, Sweep

log = logging.getLogger(__name__)

ATTEMPTS = 5
# The first retry waits up to this long, each next one up to twice as long (full jitter).
BACKOFF_SECONDS = 0.05
# ListKeys' largest page (the API's bound), and the keys one UpdateKeys carries.
PAGE = 50


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


class StoreBusy(Exception):
    """Every attempt met a concurrent write: the records fail and SQS delivers them again."""


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


@dataclass
class Published:
    """What one batch did to the store: the vouchers written, and the states not written
    because the store held them (or newer ones) already."""

    written: list[int] = field(default_factory=list)
    stale: int = 0
    deleted: list[str] = field(default_factory=list)  # the keys of sales long ended


@dataclass(frozen=True)
class _Candidate:
    state: EdgeState
    swept: bool  # a sweep's: written only over another state


def _candidates(messages: Iterable[EdgeState | Sweep]) -> dict[int, _Candidate]:
    """Per voucher, the newest state of the batch: an older one is decided by it."""
    newest: dict[int, _Candidate] = {}
    for message in messages:
        for state, swept in ((s, True) for s in message.states) if isinstance(message, Sweep) else [(message, False)]:
            held = newest.get(state.voucher_id)
            if held is None or state.v > held.state.v:
                newest[state.voucher_id] = _Candidate(state, swept)
    return newest


def _voucher_id(key: str) -> int | None:
    """The voucher a key of the store is the entry of; None for a key of anything else."""
    return int(key) if key.isascii() and key.isdigit() and key == str(int(key)) and int(key) > 0 else None


def _long_ended(key: str, value: str, now_ms: float) -> bool:
    """An entry of a sale that ended (or was stopped: its version is at least the Redis
    clock when the stop was claimed) over ``KEPT_AFTER_END`` ago. Anything else is kept,
    whatever it is."""
    voucher_id = _voucher_id(key)
    if voucher_id is None:
        return False
    try:
        state = EdgeState.from_value(voucher_id, value)
    except MalformedState:
        return False
    return (state.v if state.stopped else state.end) + KEPT_AFTER_END.total_seconds() * 1000 < now_ms


def _stored_state(voucher_id: int, value: str | None) -> EdgeState | None:
    """The state the store holds for the voucher; None when it holds none, or a value
    that is not a state (written by hand?): any state replaces it."""
    if value is None:
        return None
    try:
        return EdgeState.from_value(voucher_id, value)
    except MalformedState:
        log.warning("voucher %s: the store holds no state but %r; replacing it", voucher_id, value)
        return None


class Publisher:
    def __init__(
        self,
        kvs: Any,
        kvs_arn: str,
        *,
        attempts: int = ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kvs = kvs
        self.kvs_arn = kvs_arn
        self.attempts = attempts
        self.sleep = sleep
        self.clock = clock

    def publish(self, messages: Sequence[EdgeState | Sweep]) -> Published:
        """Write what the messages hold that the store lacks, in one UpdateKeys (per
        ``PAGE`` keys); with a sweep, delete the entries of sales long ended too. A batch
        of changes reads the ETag first (it mostly writes); a sweep alone reads the store
        first, and takes the ETag only when it has something to write, then reads again
        under it."""
        candidates = _candidates(messages)
        if not candidates:
            return Published()
        sweeping = any(isinstance(m, Sweep) for m in messages)
        etag, count = (None, None) if all(isinstance(m, Sweep) for m in messages) else self._describe()
        attempt = 0
        while True:
            stored = self._read(candidates, None if sweeping else count)
            result, puts = self._plan(candidates, stored, sweeping)
            if not puts and not result.deleted:
                return result
            if etag is None:  # read before the ETag: read again under it before writing
                etag, count = self._describe()
                continue
            try:
                self._update(etag, puts, result.deleted)
                return result
            except ClientError as error:
                if _code(error) != "ConflictException":
                    raise
            attempt += 1
            if attempt >= self.attempts:
                raise StoreBusy(f"vouchers {sorted(candidates)}: {self.attempts} writes met a concurrent one")
            self.sleep(random.uniform(0, BACKOFF_SECONDS * 2 ** (attempt - 1)))
            etag, count = self._describe()

    def _describe(self) -> tuple[str, int]:
        """The store's ETag, and how many keys it holds. Read before the entries: a
        write after it makes the update conflict, so what is compared is never older
        than what is overwritten."""
        described = self.kvs.describe_key_value_store(KvsARN=self.kvs_arn)
        return described["ETag"], int(described.get("ItemCount", 0))

    def _read(self, candidates: dict[int, _Candidate], count: int | None) -> dict[str, str]:
        """The stored values by key: of the candidates' vouchers, one GetKey each, when
        that takes fewer calls than ListKeys' pages; else every key of the store."""
        if count is not None and len(candidates) <= math.ceil(count / PAGE):
            return {str(v): value for v in candidates if (value := self.get(str(v))) is not None}
        return self.list_keys()

    def get(self, key: str) -> str | None:
        """One key's value; None when the store holds no such key."""
        try:
            value: str = self.kvs.get_key(KvsARN=self.kvs_arn, Key=key)["Value"]
            return value
        except ClientError as error:
            if _code(error) == "ResourceNotFoundException":
                return None
            raise

    def put(
        self, key: str, value: str, replaces: Callable[[str | None], bool] | None = None
    ) -> tuple[bool, str | None]:
        """Writes one key that is no sale's state if ``replaces(the stored value)`` (by
        default: unless the store holds this very value): whether it wrote, and the value
        the store holds now. One GetKey when nothing changes; else the ETag, the key read
        again under it, and one UpdateKeys. A concurrent write makes UpdateKeys fail (its
        If-Match is stale): it raises, and the caller's next run writes."""
        over = replaces or (lambda stored: stored != value)
        stored = self.get(key)
        if not over(stored):
            return False, stored
        etag, _ = self._describe()
        stored = self.get(key)
        if not over(stored):
            return False, stored
        self.kvs.update_keys(KvsARN=self.kvs_arn, IfMatch=etag, Puts=[{"Key": key, "Value": value}])
        return True, value

    def list_keys(self) -> dict[str, str]:
        """Every key of the store and its value, by pages of ``PAGE``."""
        found: dict[str, str] = {}
        token: dict[str, str] = {}
        while True:
            page = self.kvs.list_keys(KvsARN=self.kvs_arn, MaxResults=PAGE, **token)
            found.update((item["Key"], item["Value"]) for item in page.get("Items", []))
            if not page.get("NextToken"):
                return found
            token = {"NextToken": page["NextToken"]}

    def _plan(
        self, candidates: dict[int, _Candidate], stored: dict[str, str], sweeping: bool
    ) -> tuple[Published, list[EdgeState]]:
        result, puts = Published(), []
        if sweeping:
            now_ms = self.clock() * 1000
            result.deleted = sorted(
                k for k, value in stored.items() if _voucher_id(k) not in candidates and _long_ended(k, value, now_ms)
            )
        for voucher_id, candidate in sorted(candidates.items()):
            held = _stored_state(voucher_id, stored.get(str(voucher_id)))
            state = candidate.state
            if held is not None and (held.v >= state.v or (candidate.swept and held.same_sale(state))):
                result.stale += 1
                continue
            puts.append(state)
            result.written.append(voucher_id)
        return result, puts

    def _update(self, etag: str, puts: list[EdgeState], deletes: list[str]) -> None:
        """One UpdateKeys per ``PAGE`` keys, each with the ETag the one before returned."""
        items: list[tuple[str, dict[str, str]]] = [("Puts", {"Key": s.key, "Value": s.value()}) for s in puts]
        items += [("Deletes", {"Key": key}) for key in deletes]
        for start in range(0, len(items), PAGE):
            chunk = items[start : start + PAGE]
            answer = self.kvs.update_keys(
                KvsARN=self.kvs_arn,
                IfMatch=etag,
                **{kind: [item for k, item in chunk if k == kind] for kind in ("Puts", "Deletes")},
            )
            etag = answer["ETag"]
