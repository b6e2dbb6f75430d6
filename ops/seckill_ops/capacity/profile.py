"""seckill-capacity's sale profile: who presses, how often and when (the presses' arrival and
the entries' before a draw), how clients retry, what the functions cost per call and what the
account's quotas and the data nodes take; the model and the prices both read it."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from seckill_ops.capacity.assumptions import assumed
from seckill_ops.capacity.sources import figure


@dataclass(frozen=True)
class Profile:
    """One sale: who presses, how often, when, and what the functions cost per call."""

    users: int
    presses: int
    stock: int
    seconds: int
    burst_share: float = assumed("burst_share")
    burst_seconds: int = int(assumed("burst_seconds"))
    propagation_seconds: float = assumed("propagation_seconds")
    edge_share: float | None = None  # None: derived from the profile
    edge_share_origin: str = ""
    reduced_region: bool = False
    apigw_rps: float | None = None  # a raised quota; None: the published default
    cloudfront_rps: float | None = None
    lambda_concurrency: float | None = None  # the account's quota; None: the published default
    bot_control: bool = False
    accepted_ms: float = assumed("accepted_ms")
    refused_ms: float = assumed("refused_ms")
    authorizer_ms: float = assumed("authorizer_ms")
    persister_ms: float = assumed("persister_ms")
    persister_concurrency: int = int(assumed("persister_concurrency"))
    retries: int = int(assumed("retries"))
    retry_seconds: int = int(assumed("retry_seconds"))
    cache_ops: float = assumed("cache_ops")
    rds_commits: float = assumed("rds_commits")
    # The draw (--admission draw): its parameters and its entry phase.
    admit_factor: int = int(assumed("admit_factor"))
    draw_close_seconds: int = int(assumed("draw_close_seconds"))
    wave_seconds: int = int(assumed("wave_seconds"))
    admit_rate: int | None = None  # paced admission; None: each move at once
    entry_minutes: float = assumed("entry_minutes")
    rush_share: float = assumed("rush_share")
    rush_minutes: float = assumed("rush_minutes")
    entry_polls: float = assumed("entry_polls")
    record_wait_seconds: float = assumed("record_wait_seconds")
    record_poll_seconds: float = assumed("record_poll_seconds")
    edge_locations: int = int(assumed("edge_locations"))
    entry_ms: float = assumed("entry_ms")
    no_show: float = assumed("no_show")

    @property
    def total(self) -> int:
        return self.users * self.presses

    @property
    def accepted(self) -> int:
        return min(self.stock, self.users)

    @property
    def concurrency_quota(self) -> float:
        return self.lambda_concurrency or figure("lambda_concurrency")

    def cumulative(self, t: float) -> float:
        """Presses arrived by t seconds after the start: the burst's share evenly over its
        seconds, the rest evenly over the remaining ones."""
        t = min(max(t, 0.0), float(self.seconds))
        burst = self.burst_share * self.total if self.burst_seconds < self.seconds else float(self.total)
        if t <= self.burst_seconds:
            return burst * t / self.burst_seconds
        return burst + (self.total - burst) * (t - self.burst_seconds) / (self.seconds - self.burst_seconds)

    def arrivals(self) -> list[float]:
        """Presses arriving in each second of the window."""
        return [self.cumulative(i + 1) - self.cumulative(i) for i in range(self.seconds)]

    def when(self, presses: float) -> float:
        """The first t by which ``presses`` presses have arrived (``seconds`` if never)."""
        lo, hi = 0.0, float(self.seconds)
        if presses >= self.cumulative(hi):
            return hi
        for _ in range(60):  # bisection: cumulative() is monotonic
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.cumulative(mid) < presses else (lo, mid)
        return hi

    def entries(self) -> list[float]:
        """Entries arriving in each second of the entry phase: the rush's share rising evenly
        over its last seconds to a peak at the close, the rest evenly over the whole phase."""
        n = max(1, math.ceil(self.entry_minutes * 60))
        rush = min(n, max(1, math.ceil(self.rush_minutes * 60)))
        even = self.users * (1 - self.rush_share) / n
        rushing = self.users * self.rush_share
        ramp = [rushing * (2 * j + 1) / rush**2 for j in range(rush)]  # sums to the rush's entries
        return [even + (ramp[i - (n - rush)] if i >= n - rush else 0.0) for i in range(n)]

    def record_reads(self) -> list[float]:
        """The draw record's reads at the edge in each second of the entry phase: every page
        open so far (one per entrant, from its entry on) once per ``record_wait_seconds``."""
        return [open_pages / self.record_wait_seconds for open_pages in itertools.accumulate(self.entries())]
