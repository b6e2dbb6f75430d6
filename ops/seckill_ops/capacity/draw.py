"""seckill-capacity's draw (``--admission draw``): the entry phase before the sale (each user
enters once; the buyer's page reads the draw record at the edge on its schedule), then the sale, in which
the edge answers every press of an entrant not admitted and only admitted entrants' presses
reach API Gateway; with ``admitRate`` a move admits its entrants in steps one second apart."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace

from seckill_ops.capacity.assumptions import assumed
from seckill_ops.capacity.costs import price_sale
from seckill_ops.capacity.model import (
    Check,
    Scenario,
    Traffic,
    api_flow,
    apigw_check,
    cache_check,
    cloudfront_check,
    edge_cut,
    lambda_checks,
    passing,
    rds_check,
    sale,
    sold_out_second,
)
from seckill_ops.capacity.profile import Profile


def _last_step(at: int, size: float, rate: float) -> int:
    return at + max(1, math.ceil(size / rate - 1e-9)) - 1


def moves(p: Profile) -> list[tuple[int, float]]:
    """The cursor's moves as (second of the sale its first step takes effect, entrants it
    admits): the first when the draw closes (before the sale), admitting admitFactor x the
    units; then one at each beginTime + n x waveSeconds after the last step of the one before,
    while the window is open and units are on sale (those of admitted entrants who never
    press, the --no-show share). The window is --seconds, or the first move's steps if longer."""
    rate = float(p.admit_rate or math.inf)
    first = float(min(p.users, p.admit_factor * p.stock))
    out = [(0, first)]
    last = _last_step(0, first, rate)
    window = max(p.seconds, last + 1)
    bought = min(float(p.stock), first * (1 - p.no_show))
    admitted, t = first, (last // p.wave_seconds + 1) * p.wave_seconds
    while t < window and bought < p.stock and admitted < p.users:
        more = min(p.users - admitted, p.admit_factor * (p.stock - bought))
        out.append((t, more))
        admitted += more
        bought += min(p.stock - bought, more * (1 - p.no_show))
        t = (_last_step(t, more, rate) // p.wave_seconds + 1) * p.wave_seconds
    return out


def steps(p: Profile) -> list[tuple[int, float]]:
    """Each move split into steps of at most admitRate entrants, one second apart: (second of
    the sale it takes effect, entrants). The first move's first step takes effect at the close."""
    rate = float(p.admit_rate or math.inf)
    out = []
    for at, size in moves(p):
        k, left = 0, size
        while left > 1e-9:
            out.append((at + k, min(rate, left)))
            left -= rate
            k += 1
    return out


def blind_seconds(p: Profile) -> float:
    """How long into the sale the edge does not hold the first cursor yet: the store's
    propagation beyond the time between the draw's close and the opening."""
    return max(0.0, min(p.propagation_seconds - p.draw_close_seconds, float(p.seconds)))


def origin_fetches(p: Profile, reads: float) -> float:
    """Of ``reads`` draw record reads a second at the edge, those that reach the origin: each
    edge location asks at most once per cache period, whatever its viewers read."""
    return min(reads, p.edge_locations / assumed("draw_cache_seconds"))


def draw_sale(p: Profile) -> Scenario:
    """The sale of a draw: every user presses along the arrival; the first step's entrants'
    presses reach API Gateway with them, and each later step's entrants press again along
    the same arrival from their step. The edge forwards the presses of entrants within its
    clock skew of the next step (it cannot tell which side of its ``at`` they are) and every
    press until it holds the first cursor; from the stock's sell-out plus propagation it
    answers everything."""
    cursor = steps(p)
    pressing = 1 - p.no_show
    reads = p.users / p.record_poll_seconds  # every page reads the record, entrant or not
    last = cursor[-1][0]
    horizon = last + p.seconds
    shape = [a / p.total for a in p.arrivals()]  # a user's share of presses in each second
    crowd = [*p.arrivals(), *[0.0] * (horizon - p.seconds)]
    by_second: dict[int, float] = defaultdict(float)
    for t, size in cursor:
        by_second[t] += size
    own = cursor[0][1] * pressing / p.users
    blind = p.cumulative(blind_seconds(p))
    arrived, forwarded, buying = list(crowd), [], []
    for i, pressed in enumerate(crowd):
        unseen = max(0.0, min(p.cumulative(i + 1), blind) - p.cumulative(i)) if i < p.seconds else 0.0
        forwarded.append(unseen + (pressed - unseen) * (own + by_second.get(i + 1, 0.0) / p.users))
        buying.append(pressed * own)
    for t, size in cursor[1:]:
        for j, s in enumerate(shape):
            presses = size * pressing * p.presses * s
            arrived[t + j] += presses
            forwarded[t + j] += presses
            buying[t + j] += presses
    admitted = sum(size for _, size in cursor)
    buyers = min(float(p.stock), admitted * pressing)
    sold = sold_out_second(api_flow(p, forwarded), buying, forwarded, buyers * p.presses)
    passes = passing(edge_cut(p, sold, horizon), horizon)
    made = moves(p)
    traffic = Traffic(
        "draw",
        True,
        arrived,
        [f * s for f, s in zip(forwarded, passes, strict=True)],
        [b * s for b, s in zip(buying, passes, strict=True)],
        passes,
        None,  # the authorizer's cache is off with the edge
        buyers,
        len(made) + (1 if buyers >= p.stock else 0),  # each move with its steps, then the sold-out state
        assumed("kvs_reads_per_draw_press"),
        reads=reads,
        fetches=origin_fetches(p, reads),
    )
    scenario = sale(p, traffic)
    scenario.counts |= {"admitted": admitted, "waves": float(len(made) - 1)}
    first = made[0][1]
    first_steps = sum(1 for t, _ in cursor if t <= _last_step(0, first, float(p.admit_rate or math.inf)))
    pace = (
        f"admitRate {p.admit_rate:,}: the first move's {first:,.0f} entrants in {first_steps} steps, the last "
        f"{first_steps - 1} s after the opening"
        if p.admit_rate is not None
        else f"no admitRate: the first move admits its {first:,.0f} entrants at once"
    )
    sold_text = "never sold out" if scenario.sold_out_at is None else f"sold out at {scenario.sold_out_at:.1f} s"
    scenario.notes.append(
        f"{pace} ({p.admit_factor} x {p.stock:,} units); {len(made) - 1} later waves admitting "
        f"{admitted - first:,.0f}; {sold_text}; the edge answers every other press from second "
        f"{blind_seconds(p):g} of the sale (the draw closes {p.draw_close_seconds} s before the opening, its first "
        f"cursor reaches the edge {p.propagation_seconds:g} s later)"
    )
    return scenario


def model_draw(profile: Profile) -> Scenario:
    p = profile
    scenario = draw_sale(p)
    sale_dollars = scenario.total_dollars
    checks, per_second, counts, needs = entry_phase(p)
    scenario.checks = checks + scenario.checks
    scenario.entry_even = entry_phase(replace(p, rush_share=0.0))[0]
    scenario.needs = needs
    scenario.per_second |= per_second
    c = scenario.counts
    for key, value in counts.items():
        c[key] = c.get(key, 0.0) + value
    scenario.costs, scenario.monthly = price_sale(p, True, c)
    scenario.notes.append(
        f"the sale costs ${sale_dollars:,.2f} of the ${scenario.total_dollars:,.2f}, its entry phase the rest"
    )
    return scenario


def entry_phase(p: Profile) -> tuple[list[Check], dict[str, list[float]], dict[str, float], dict[str, float]]:
    """The entry phase, second by second, to the opening: each entrant's POST entry and
    look-ups (each through the authorizer, its cache off with the edge) and the draw record's
    origin fetches at API Gateway; the record's reads at the edge, by the page's schedule
    (``Profile.record_reads``, then every page at the close and every ``record_poll_seconds``
    until the opening). Its checks, series, counts, and the quotas it needs to go through
    without a 429 or a writer over its commits."""
    jitter = int(assumed("record_close_jitter_seconds"))
    after = max(0, p.draw_close_seconds - jitter)
    entrants = [*p.entries(), *[0.0] * (min(jitter, p.draw_close_seconds) + after)]
    reads = [
        *p.record_reads(),
        *[p.users / jitter] * min(jitter, p.draw_close_seconds),
        *[p.users / p.record_poll_seconds] * after,
    ]
    seconds = len(entrants)
    fetches = [origin_fetches(p, r) for r in reads]
    asked = [e * (1 + p.entry_polls) + f for e, f in zip(entrants, fetches, strict=True)]
    flow = api_flow(p, asked)
    horizon = len(flow.demand)
    tokened = [e * (1 + p.entry_polls) / a if a else 0.0 for e, a in zip(entrants, asked, strict=True)]
    entered = [e / a if a else 0.0 for e, a in zip(entrants, asked, strict=True)]
    tokened += [tokened[-1]] * (horizon - seconds)  # the retries, in the last second's mix
    entered += [entered[-1]] * (horizon - seconds)
    auth = [a * t for a, t in zip(flow.admitted, tokened, strict=True)]
    commits = [a * e for a, e in zip(flow.admitted, entered, strict=True)]
    api_conc = [(c * p.entry_ms + (a - c) * p.refused_ms) / 1000 for a, c in zip(flow.admitted, commits, strict=True)]
    auth_conc = [a * p.authorizer_ms / 1000 for a in auth]
    concurrency = [a + b for a, b in zip(api_conc, auth_conc, strict=True)]
    invocations = [a + b for a, b in zip(flow.admitted, auth, strict=True)]
    viewers = [e * (1 + p.entry_polls) + r for e, r in zip(entrants, reads, strict=True)] + [0.0] * (horizon - seconds)
    viewers = [v + r for v, r in zip(viewers, flow.retries, strict=True)]
    redis = [a * assumed("redis_per_authorizer") for a in auth]
    checks = [
        cloudfront_check(p, viewers),
        apigw_check(p, flow, "entry-phase requests"),
        *lambda_checks(
            p,
            concurrency,
            invocations,
            [("SeckillApiFunction", flow.admitted, api_conc), ("the authorizer", auth, auth_conc)],
        ),
        rds_check(p, commits, "the entries, each stored durably"),
        cache_check(p, redis),
    ]
    # Without a 429: API Gateway's rate at the peak, and Lambda's concurrency for its peak
    # concurrency and for its request rate (10 x the concurrency); the writer's commits for
    # every entry of the peak second.
    unthrottled = [
        (e * p.entry_ms + (e * p.entry_polls + f) * p.refused_ms + e * (1 + p.entry_polls) * p.authorizer_ms) / 1000
        for e, f in zip(entrants, fetches, strict=True)
    ]
    needs = {
        "apigw_rps": float(math.ceil(max(asked))),
        "lambda_concurrency": float(
            math.ceil(
                max(
                    max(unthrottled),
                    max(a + e * (1 + p.entry_polls) for a, e in zip(asked, entrants, strict=True)) / 10,
                )
            )
        ),
        "rds_commits": float(math.ceil(max(entrants))),
    }
    counts = {
        "entrants": float(p.users),
        "entry_polls": p.users * p.entry_polls,
        "draw_reads": sum(reads),
        "draw_origin_fetches": sum(fetches),
        "entry_apigw": sum(flow.demand),
        "retries": sum(flow.retries),
        "cloudfront_requests": sum(viewers),
        "waf_requests": sum(viewers),
        "apigw_requests": sum(flow.demand),
        "apigw_throttled": flow.throttled,
        "authorizer_invocations": sum(auth),
        "rds_statements": float(p.users),  # each entry is stored durably
        "redis_commands": sum(redis),
    }
    per_second = {
        "entry_cloudfront": viewers,
        "entry_apigw": flow.demand,
        "entry_lambda_invocations": invocations,
        "entry_rds_commits": commits,
    }
    return [replace(c, phase="entry") for c in checks], per_second, counts, needs
