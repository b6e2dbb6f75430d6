"""The secret origin header: only CloudFront's requests reach the routes the edge serves.

With the edge, CloudFront adds ``x-seckill-origin: <secret>`` to every request it sends
the API, and the authorizer refuses a user route's request without it, so no press,
entry, status or cancel goes around the edge to the API's own endpoint; the function
refuses the same way a call of the public routes the edge serves, the voucher list and
the draw record (``AroundTheEdge``; docs/deploy.md, "No way around the edge").

In AWS the secret is a Secrets Manager secret, JSON ``{"current": "...", "previous":
"..."}`` (both accepted while a rotation reaches CloudFront); locally
``SECKILL_ORIGIN_SECRET`` holds the value itself. Neither set: no check (a stack
without an edge).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Any

from seckill.infra.secrets import secrets

HEADER = "x-seckill-origin"
# How long a container keeps the secret before reading it again: a rotation's new
# value is accepted everywhere within this time.
MAX_AGE_SECONDS = 60


class AroundTheEdge(Exception):
    """A public route called without the origin header: answered as API Gateway answers a
    user route's call that its authorizer denied, 403 ``{"message":"Forbidden"}``."""


class OriginCheck:
    """``admits(headers)``: whether a request came through the edge. ``secrets`` gives the
    values accepted now; None: the stack has no edge and every request is admitted."""

    def __init__(self, secrets: Callable[[], tuple[str, ...]] | None) -> None:
        self.secrets = secrets

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OriginCheck:
        local = env.get("SECKILL_ORIGIN_SECRET", "")
        arn = env.get("ORIGIN_SECRET_ARN", "")
        if local:
            return cls(lambda: (local,))
        if arn:
            return cls(lambda: _from_secret(arn))
        return cls(None)

    @property
    def edge(self) -> bool:
        """Whether the stack has an edge (a secret to check)."""
        return self.secrets is not None

    def admits(self, headers: Mapping[str, str]) -> bool:
        if self.secrets is None:
            return True
        sent = headers.get(HEADER, "")
        # Every value compared, each in constant time: no timing tells which one is close.
        matches = [hmac.compare_digest(sent.encode(), secret.encode()) for secret in self.secrets()]
        return bool(sent) and any(matches)

    def require(self, headers: Mapping[str, str]) -> None:
        """``AroundTheEdge`` unless the request came through the edge."""
        if not self.admits(headers):
            raise AroundTheEdge


def _from_secret(arn: str) -> tuple[str, ...]:
    value: Any = secrets.get(arn, MAX_AGE_SECONDS, "json")
    if not isinstance(value, dict):
        raise TypeError(f"{arn}: the origin secret must be JSON with current and previous")
    current, previous = value.get("current"), value.get("previous")
    if not isinstance(current, str) or not current:
        raise TypeError(f"{arn}: the origin secret has no current value")
    # An empty previous (none since the last rotation) admits nothing.
    return (current, previous) if isinstance(previous, str) and previous else (current,)
