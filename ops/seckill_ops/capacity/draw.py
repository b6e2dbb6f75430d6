"""seckill-capacity's draw (``--admission draw``): the entry phase before the sale (each user
enters once, looks the entry up, reads the draw record at the edge), then the sale, in which
the edge answers every press of an entrant not admitted and only admitted entrants' presses
reach API Gateway."""

from __future__ import annotations

import math
from dataclasses import replace

from seckill_ops.capacity.costs import price_sale
from seckill_ops.capacity.model import (
    Check,
    Scenario,
    Traffic,
    apigw_check,
    apigw_quota,
    first_over,
    lambda_checks,
    sale,
    throttle,
)
from seckill_ops.capacity.profile import Profile
from seckill_ops.capacity.sources import assumed, figure


def moves(p: Profile) -> list[tuple[int, float]]:
    """The cursor's moves as (second of the sale it takes effect, entrants it admits): the
    first when the draw closes (before the sale), admitting admitFactor x the units; then
    one every waveSeconds while the window is open and units are on sale (those of admitted
    entrants who never press, the --no-show share)."""
    first = float(min(p.users, p.admit_factor * p.stock))
    out = [(0, first)]
    bought = min(float(p.stock), first * (1 - p.no_show))
    admitted, t = first, p.wave_seconds
    while t < p.seconds and bought < p.stock and admitted < p.users:
        more = min(p.users - admitted, p.admit_factor * (p.stock - bought))
        out.append((t, more))
        admitted += more
        bought += min(p.stock - bought, more * (1 - p.no_show))
        t += p.wave_seconds
    return out


def blind_seconds(p: Profile) -> float:
    """How long into the sale the edge does not hold the first cursor yet: the store's
    propagation beyond the time between the draw's close and the opening."""
    return max(0.0, min(p.propagation_seconds - p.draw_close_seconds, float(p.seconds)))


def entry_seconds(p: Profile) -> int:
    return max(1, math.ceil(p.entry_minutes * 60))


def origin_fetches_per_second(p: Profile) -> float:
    """The draw record's reads that reach the origin: each edge location asks at most once
    per cache period, whatever its viewers read."""
    reads = p.users * p.draw_reads / entry_seconds(p)
    return min(reads, p.edge_locations / assumed("draw_cache_seconds"))


def model_draw(profile: Profile) -> Scenario:
    p = profile
    cursor = moves(p)
    pressing = 1 - p.no_show
    first = cursor[0][1]
    arrived = [p.cumulative(i + 1) - p.cumulative(i) for i in range(p.seconds)]
    blind = p.cumulative(blind_seconds(p))
    share = first * pressing / p.users
    forwarded = []
    for i, a in enumerate(arrived):
        unseen = max(0.0, min(p.cumulative(i + 1), blind) - p.cumulative(i))
        forwarded.append(unseen + (a - unseen) * share)
    for t, admitted in cursor[1:]:  # each wave's entrants press when their move takes effect
        arrived[t] += admitted * pressing * p.presses
        forwarded[t] += admitted * pressing * p.presses
    presses = sum(arrived)
    admitted = sum(k for _, k in cursor)
    bought = min(float(p.stock), admitted * pressing)
    users = admitted * pressing + p.users * blind / p.total
    notices = len(cursor) + (1 if bought >= p.stock else 0)  # each move, then the sold-out state
    traffic = Traffic(
        "draw", True, presses, arrived, forwarded, users, bought, notices, assumed("kvs_reads_per_draw_press")
    )
    scenario = sale(p, traffic)
    sale_dollars = scenario.total_dollars
    _entry_phase(p, scenario)
    scenario.counts |= {"admitted": admitted, "waves": float(len(cursor) - 1)}
    scenario.costs, scenario.monthly = price_sale(p, True, scenario.counts)
    scenario.notes.append(
        f"{first:,.0f} entrants admitted when the draw closes ({p.admit_factor} x {p.stock:,} units), "
        f"{len(cursor) - 1} later waves admitting {admitted - first:,.0f}; the edge answers every other press "
        f"from second {blind_seconds(p):g} of the sale (the draw closes {p.draw_close_seconds} s before the "
        f"opening, its first cursor reaches the edge {p.propagation_seconds:g} s later)"
    )
    scenario.notes.append(
        f"the sale costs ${sale_dollars:,.2f} of the ${scenario.total_dollars:,.2f}, its entry phase the rest"
    )
    return scenario


def _entry_phase(p: Profile, scenario: Scenario) -> None:
    """Add the entry phase's requests, second by second, and its checks to the scenario."""
    seconds = entry_seconds(p)
    entrants = p.users / seconds
    fetches = origin_fetches_per_second(p)
    reads = p.users * p.draw_reads / seconds
    demand = [entrants * (1 + p.entry_polls) + fetches] * seconds
    viewers = [entrants * (1 + p.entry_polls) + reads] * seconds
    rate, burst = apigw_quota(p)
    admitted = throttle(demand, rate, burst)
    # One authorizer call per entrant: the look-ups follow the entry within its 30 s cache.
    auth = [entrants * a / d if d else 0.0 for a, d in zip(admitted, demand, strict=True)]
    invocations = [a + au for a, au in zip(admitted, auth, strict=True)]
    share = [a / d if d else 0.0 for a, d in zip(admitted, demand, strict=True)]
    concurrency = [
        s
        * (entrants * p.entry_ms + (entrants * p.entry_polls + fetches) * p.refused_ms + entrants * p.authorizer_ms)
        / 1000
        for s in share
    ]
    cloudfront = p.cloudfront_rps or figure("cloudfront_rps")
    checks = [
        Check("CloudFront", "requests/s per distribution", cloudfront, max(viewers), first_over(viewers, cloudfront)),
        apigw_check(rate, burst, demand, admitted, "entry-phase requests"),
        *lambda_checks(concurrency, invocations),
    ]
    scenario.checks = [replace(c, phase="entry") for c in checks] + scenario.checks
    c = scenario.counts
    api_in, api_ok = sum(demand), sum(admitted)
    c |= {
        "entrants": float(p.users),
        "entry_polls": p.users * p.entry_polls,
        "draw_reads": p.users * p.draw_reads,
        "draw_origin_fetches": fetches * seconds,
        "entry_apigw": api_in,
    }
    entry_requests = sum(viewers)
    c["cloudfront_requests"] += entry_requests
    c["waf_requests"] += entry_requests
    c["apigw_requests"] += api_in
    c["apigw_throttled"] += api_in - api_ok
    c["authorizer_invocations"] += sum(auth)
    c["rds_statements"] += float(p.users)  # each entry is stored durably
    scenario.per_second |= {"entry_cloudfront": viewers, "entry_apigw": demand, "entry_lambda_invocations": invocations}
