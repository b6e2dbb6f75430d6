"""What reaches the functions, second by second: API Gateway's token bucket, the clients'
retries after its 429s (through the edge again, which answers those it can), and how fast
Lambda lets one function grow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Flow:
    demand: list[float]  # requests reaching API Gateway each second, retries included
    admitted: list[float]  # those it lets through
    retries: list[float]  # retries clients send each second, at the edge when there is one

    @property
    def throttled(self) -> float:
        return sum(self.demand) - sum(self.admitted)


def throttle(demand: Sequence[float], rate: float, burst: float) -> list[float]:
    """API Gateway's token bucket, a second at a time: refilled at ``rate`` per second up
    to ``burst`` tokens, full at the start."""
    tokens, admitted = burst, []
    for wanted in demand:
        got = min(wanted, tokens + rate)
        tokens = min(burst, tokens + rate - got)
        admitted.append(got)
    return admitted


def through_api(
    fresh: Sequence[float],
    rate: float,
    burst: float,
    retries: int,
    after: int,
    passes: Sequence[float] | None = None,
) -> Flow:
    """API Gateway's bucket over ``fresh`` requests and the retries of those it answers 429:
    each is sent again ``after`` seconds later, at most ``retries`` times. ``passes[i]`` is
    the share of the retries sent in second i that the edge forwards (1 without an edge).
    The series run ``retries x after`` seconds past ``fresh`` for the last retries."""
    horizon = len(fresh) + retries * after
    pending = [[0.0] * (retries + 1) for _ in range(horizon)]  # [second][attempts made before]
    demand, admitted, sent = [], [], []
    tokens = burst
    for i in range(horizon):
        share = 1.0 if passes is None or i >= len(passes) else passes[i]
        waves = [fresh[i] if i < len(fresh) else 0.0] + [r * share for r in pending[i][1:]]
        asked = sum(waves)
        got = min(asked, tokens + rate)
        tokens = min(burst, tokens + rate - got)
        refused = 1 - got / asked if asked else 0.0
        for attempt, count in enumerate(waves[:retries]):
            if count and refused:  # never past the horizon: an attempt k arrives by len(fresh) + k x after
                pending[i + after][attempt + 1] += count * refused
        demand.append(asked)
        admitted.append(got)
        sent.append(sum(pending[i][1:]))
    return Flow(demand, admitted, sent)


def ramp_limit(served: Sequence[float], step: float, period: int = 10) -> list[float]:
    """What one function can take each second: ``step`` more than it had before the current
    ``period`` (Lambda adds at most 1,000 environments, or 10,000 requests a second, per
    function every 10 s), starting from none; what it has grown to it keeps."""
    limits, before, had = [], 0.0, 0.0
    for i, value in enumerate(served):
        if i % period == 0:
            before = had
        limit = before + step
        limits.append(limit)
        had = max(had, min(value, limit))
    return limits
