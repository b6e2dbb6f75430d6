"""Secrets Manager secrets that outlive a failed refresh (stale-if-error).

Every secret a function reads on its requests (the pass key ring and what the edge
holds of it, the origin header's, the Redis AUTH token, the database's credentials)
comes through Powertools' ``get_secret`` and its cache. When a refresh fails (Secrets
Manager or its VPC endpoint unreachable, throttled, the secret briefly unreadable),
the last value read is served for up to ``STALE_MAX_SECONDS`` more, and the refresh is
tried again after ``RETRY_SECONDS``, not on every request: each failure is logged as a
warning and counted (``SecretRefreshFailed``, alarmed by SecretRefreshFailedAlarm).
Only a secret never read, or whose last good value is older than that, raises
(docs/operations.md, "Alarms").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

# How long the last good value stands in for a secret that cannot be read: an hour
# covers an outage of Secrets Manager or its endpoint without holding on, unseen, to a
# value an operator replaced (a retired pass key verifies again for at most this long).
STALE_MAX_SECONDS = 3600
# After a failed refresh, how long the stale value is served before the next attempt:
# a failing endpoint is not asked on every request (each attempt may wait for timeouts).
RETRY_SECONDS = 10
METRIC = "SecretRefreshFailed"


@dataclass
class _Good:
    value: Any
    read_at: float  # when it was last read successfully (monotonic seconds)
    retry_at: float = 0.0  # no refresh before this, after a failure


class StaleIfError:
    """``get(arn, max_age, transform)``: Powertools' ``get_secret``, or the last good
    value while a refresh fails (bounded by ``stale_max``)."""

    def __init__(
        self,
        fetch: Callable[[str, int, str | None], Any] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        stale_max: float = STALE_MAX_SECONDS,
        retry: float = RETRY_SECONDS,
    ) -> None:
        self._fetch = fetch or _powertools
        self._clock = clock
        self._stale_max = stale_max
        self._retry = retry
        self._good: dict[tuple[str, str | None], _Good] = {}
        self._lock = threading.Lock()

    def get(self, arn: str, max_age: int, transform: str | None = None) -> Any:
        key = (arn, transform)
        now = self._clock()
        good = self._good.get(key)
        if good is not None and now < good.retry_at:
            return good.value
        try:
            value = self._fetch(arn, max_age, transform)
        except Exception as exc:
            if good is None or now - good.read_at > self._stale_max:
                _count(arn, exc, stale=False)
                raise
            _count(arn, exc, stale=True)
            with self._lock:
                good.retry_at = now + self._retry
            return good.value
        with self._lock:
            # Powertools hands back the very object it cached: a new one was just read.
            if good is None or good.value is not value:
                self._good[key] = _Good(value, now)
        return value

    def forget(self) -> None:
        """Drops every last good value (tests: as in a new container)."""
        with self._lock:
            self._good.clear()


def _powertools(arn: str, max_age: int, transform: str | None) -> Any:
    from aws_lambda_powertools.utilities import parameters

    return parameters.get_secret(arn, max_age=max_age, transform=transform)  # type: ignore[arg-type]


def _count(arn: str, exc: Exception, *, stale: bool) -> None:
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    # Flushed with the invoking handler's own metrics (Powertools shares one set per process).
    Metrics(namespace="Seckill").add_metric(name=METRIC, unit=MetricUnit.Count, value=1)
    what = "serving its last good value" if stale else "no good value is held"
    log.warning("a secret could not be read: %s", what, extra={"secret": arn, "error": repr(exc)})


# One per process: every secret of a container shares it.
secrets = StaleIfError()


def secretsmanager_client() -> Any:
    """A Secrets Manager client for the callers that read a secret's version or write one
    (the edge publisher). boto3 honours AWS_ENDPOINT_URL_SECRETS_MANAGER (local runs: moto)."""
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.client("secretsmanager", config=config)
