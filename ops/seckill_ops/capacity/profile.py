"""seckill-capacity's sale profile: who presses, how often and when (the presses' arrival),
and what the functions cost per call; the model and the prices both read it."""

from __future__ import annotations

from dataclasses import dataclass

from seckill_ops.capacity.sources import assumed


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
    bot_control: bool = False
    accepted_ms: float = assumed("accepted_ms")
    refused_ms: float = assumed("refused_ms")
    authorizer_ms: float = assumed("authorizer_ms")
    persister_ms: float = assumed("persister_ms")
    persister_concurrency: int = int(assumed("persister_concurrency"))
    # The draw (--admission draw): its parameters and its entry phase.
    admit_factor: int = int(assumed("admit_factor"))
    draw_close_seconds: int = int(assumed("draw_close_seconds"))
    wave_seconds: int = int(assumed("wave_seconds"))
    entry_minutes: float = assumed("entry_minutes")
    entry_polls: float = assumed("entry_polls")
    draw_reads: float = assumed("draw_reads")
    edge_locations: int = int(assumed("edge_locations"))
    entry_ms: float = assumed("entry_ms")
    no_show: float = assumed("no_show")

    @property
    def total(self) -> int:
        return self.users * self.presses

    @property
    def accepted(self) -> int:
        return min(self.stock, self.users)

    def cumulative(self, t: float) -> float:
        """Presses arrived by t seconds after the start: the burst's share evenly over its
        seconds, the rest evenly over the remaining ones."""
        t = min(max(t, 0.0), float(self.seconds))
        burst = self.burst_share * self.total if self.burst_seconds < self.seconds else float(self.total)
        if t <= self.burst_seconds:
            return burst * t / self.burst_seconds
        return burst + (self.total - burst) * (t - self.burst_seconds) / (self.seconds - self.burst_seconds)

    def when(self, presses: float) -> float:
        """The first t by which ``presses`` presses have arrived (``seconds`` if never)."""
        lo, hi = 0.0, float(self.seconds)
        if presses >= self.cumulative(hi):
            return hi
        for _ in range(60):  # bisection: cumulative() is monotonic
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.cumulative(mid) < presses else (lo, mid)
        return hi

    def sold_out_at(self) -> float | None:
        """Each user's presses arrive together, so the stock is gone once stock x presses
        presses have arrived; never when there are more units than users."""
        if self.stock >= self.users:
            return None
        return self.when(self.accepted * self.presses)

    def edge_from(self) -> float:
        """When the edge starts answering: once the sold-out state has reached it, and never
        within its clock skew of the start (it forwards those presses to the gate)."""
        if self.edge_share is not None:
            return self.when((1 - self.edge_share) * self.total)
        sold_out = self.sold_out_at()
        if sold_out is None:
            return float(self.seconds)
        return min(max(sold_out + self.propagation_seconds, assumed("edge_skew_seconds")), float(self.seconds))

    def share_at_edge(self) -> float:
        if self.edge_share is not None:
            return self.edge_share
        return (self.total - self.cumulative(self.edge_from())) / self.total
