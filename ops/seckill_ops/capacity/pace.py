"""seckill-capacity's recommended ``admitRate``: the largest whose sale keeps API Gateway,
Lambda (its rate, concurrency and scaling, the authorizer's too), the cache node and the
database under their quotas in every second, found by bisection (more entrants a second
never asks less of any of them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from seckill_ops.capacity.draw import draw_sale, moves
from seckill_ops.capacity.model import Check, Scenario
from seckill_ops.capacity.profile import Profile

PACED = ("API Gateway", "Lambda", "ElastiCache", "RDS")  # what admitRate bounds (CloudFront sees every press)
MAX_RATE = 1_000_000  # admitRate's largest value
MAX_ADMISSION_SECONDS = 3_600  # a first move admitted over more than an hour is not a sale


@dataclass
class Pacing:
    rate: int | None  # the largest admitRate that fits; None: none does
    move: float  # the first move's entrants
    scenario: Scenario  # the sale at ``rate`` (or at the smallest rate tried, when none fits)
    wall: Check | None  # what one entrant a second more meets (or the smallest rate tried)

    @property
    def admission_seconds(self) -> int | None:
        """Seconds from the opening to the first move's last step, at ``rate``."""
        return None if self.rate is None else max(1, math.ceil(self.move / self.rate - 1e-9)) - 1


def paced_wall(s: Scenario) -> Check | None:
    hit = [c for c in s.checks if c.phase == "sale" and c.layer in PACED and c.exceeded_at is not None]
    return min(hit, key=lambda c: (c.exceeded_at, s.checks.index(c))) if hit else None


def recommend(p: Profile) -> Pacing:
    move = moves(replace(p, admit_rate=None))[0][1]
    lo = max(1, math.ceil(move / MAX_ADMISSION_SECONDS))
    hi = min(math.ceil(move), MAX_RATE)
    best = draw_sale(replace(p, admit_rate=lo))
    if paced_wall(best) is not None:
        return Pacing(None, move, best, paced_wall(best))
    while lo < hi:  # lo fits, hi + 1 does not (or is past the move)
        mid = (lo + hi + 1) // 2
        tried = draw_sale(replace(p, admit_rate=mid))
        if paced_wall(tried) is None:
            lo, best = mid, tried
        else:
            hi = mid - 1
    wall = None if lo >= min(math.ceil(move), MAX_RATE) else paced_wall(draw_sale(replace(p, admit_rate=lo + 1)))
    return Pacing(lo, move, best, wall)
