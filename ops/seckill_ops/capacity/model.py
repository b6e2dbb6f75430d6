"""seckill-capacity's model of one sale: the presses' arrival, every request counted layer by
layer and second by second, each quota's peak demand and the first second over it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from seckill_ops.capacity.assumptions import assumed
from seckill_ops.capacity.costs import Cost, price_sale
from seckill_ops.capacity.flow import Flow, ramp_limit, through_api
from seckill_ops.capacity.profile import Profile
from seckill_ops.capacity.sources import figure

# The counts only a draw has (its entry phase); zero in a race.
DRAW_COUNTS = ("admitted", "waves", "entrants", "entry_polls", "draw_reads", "draw_origin_fetches", "entry_apigw")


def before_waf(p: Profile) -> float:
    """The share of the presses that arrive before WAF's rate-based rules can act on them."""
    return p.cumulative(figure("waf_rate_reaction")) / p.total


@dataclass
class Check:
    """A quota against the sale's peak demand on it."""

    layer: str
    quota: str
    limit: float | None
    peak: float
    exceeded_at: int | None  # the first second over the limit
    note: str = ""
    phase: str = "sale"  # or "entry": the draw's entry phase, before the sale


@dataclass
class Scenario:
    name: str
    edge: bool
    edge_share: float
    counts: dict[str, float]
    per_second: dict[str, list[float]]
    checks: list[Check]
    costs: list[Cost]
    monthly: list[Cost]
    notes: list[str] = field(default_factory=list)
    sold_out_at: float | None = None  # the second the stock is gone at the gate
    entry_even: list[Check] = field(default_factory=list)  # the entry phase spread evenly instead
    needs: dict[str, float] = field(default_factory=dict)  # quotas the entry phase needs

    @property
    def total_dollars(self) -> float:
        return sum(c.dollars for c in self.costs)

    def first_wall(self) -> Check | None:
        hit = [c for c in self.checks if c.exceeded_at is not None]
        # The entry phase first, then the earliest second, then the order of the path (checks are listed in it).
        return min(hit, key=lambda c: (c.phase != "entry", c.exceeded_at, self.checks.index(c))) if hit else None


def first_over(series: Sequence[float], limit: float | Sequence[float]) -> int | None:
    for i, value in enumerate(series):
        cap = limit if isinstance(limit, int | float) else limit[i]
        if value > cap + 1e-9:
            return i
    return None


def apigw_quota(p: Profile) -> tuple[float, float]:
    """API Gateway's account rate and burst for the profile's Region (or the raised rate)."""
    rate = p.apigw_rps or figure("apigw_rps_reduced" if p.reduced_region else "apigw_rps")
    return rate, figure("apigw_burst_reduced" if p.reduced_region else "apigw_burst")


def lambda_request_rate(p: Profile) -> float:
    """Synchronous invocations a second Lambda takes: 10 x the concurrency quota."""
    return figure("lambda_request_rate") * p.concurrency_quota


def api_flow(p: Profile, fresh: Sequence[float], passes: Sequence[float] | None = None) -> Flow:
    rate, burst = apigw_quota(p)
    return through_api(fresh, rate, burst, p.retries, p.retry_seconds, passes)


def buying_shares(buying: Sequence[float], forwarded: Sequence[float], horizon: int) -> list[float]:
    """The share of each second's requests at API Gateway that can buy; a second of retries
    alone keeps the share of the second before."""
    shares, share = [], 1.0
    for i in range(horizon):
        if i < len(forwarded) and forwarded[i]:
            share = buying[i] / forwarded[i]
        shares.append(share)
    return shares


def sold_out_second(flow: Flow, buying: Sequence[float], forwarded: Sequence[float], target: float) -> float | None:
    """When the presses that can buy, as API Gateway lets them through, have taken the stock:
    ``target`` such presses (each buyer's presses arrive together, so a unit takes them all)."""
    done = 0.0
    for i, (got, share) in enumerate(
        zip(flow.admitted, buying_shares(buying, forwarded, len(flow.admitted)), strict=True)
    ):
        took = got * share
        if took and done + took >= target - 1e-9:
            return i + (target - done) / took
        done += took
    return None


def edge_cut(p: Profile, sold_out: float | None, horizon: int) -> float:
    """When the edge starts answering: once the sold-out state has reached it, and never
    within its clock skew of the start (it forwards those presses to the gate)."""
    if sold_out is None:
        return float(horizon)
    return max(sold_out + p.propagation_seconds, assumed("edge_skew_seconds"))


def passing(cut: float, horizon: int) -> list[float]:
    """The share of each second the edge still forwards, before ``cut``."""
    return [min(1.0, max(0.0, cut - i)) for i in range(horizon)]


def model(profile: Profile, edge: bool) -> Scenario:
    """The race: every press reaches API Gateway, or with the edge every press until the
    sold-out state reaches it (never within its clock skew of the start). The stock is gone
    once API Gateway has let stock x presses presses through, not once they have arrived."""
    p, n = profile, profile.total
    arrived = p.arrivals()
    sold_out = sold_out_second(api_flow(p, arrived), arrived, arrived, p.accepted * p.presses)
    if edge and p.edge_share is not None:
        cut = p.when((1 - p.edge_share) * n)
        origin = p.edge_share_origin
    elif edge:
        cut = edge_cut(p, sold_out, p.seconds)
        origin = (
            "derived: the stock never sells out, so the edge answers nothing"
            if sold_out is None
            else f"derived: the presses after {cut:.4g} s (sold out at {sold_out:.4g} s, when API Gateway has let "
            f"{p.accepted * p.presses:,} presses through, plus {p.propagation_seconds:g} s of propagation, at least "
            f"{assumed('edge_skew_seconds'):g} s), over all the requests reaching it"
        )
    else:
        cut, origin = float(p.seconds), ""
    forwarded = [max(0.0, min(p.cumulative(i + 1), p.cumulative(cut)) - p.cumulative(i)) for i in range(p.seconds)]
    traffic = Traffic(
        "with the edge" if edge else "without the edge",
        edge,
        arrived,
        forwarded,
        forwarded,
        passing(cut, p.seconds) if edge else None,
        None if edge else float(p.users),
        p.accepted,
        1 if edge and sold_out is not None else 0,  # the sold-out state, once
    )
    scenario = sale(p, traffic)
    if edge:
        scenario.notes.append(f"edge share {scenario.edge_share:.4f} ({origin})")
    return scenario


@dataclass
class Traffic:
    """What a sale asks of the layers behind the edge: every press arriving, the presses
    sent on to API Gateway and those of them that can buy, second by second."""

    name: str
    edge: bool
    arrived: list[float]
    forwarded: list[float]
    buying: list[float]  # forwarded presses of users who can buy (a draw forwards a few who cannot)
    passes: list[float] | None  # the share of a retry the edge forwards each second; None: no edge
    users: float | None  # users reaching API Gateway, whose token answers are cached; None: no cache
    buyers: float  # the units the forwarded presses can take
    notices: int  # states published to the edge
    kvs_reads_per_press: float = 1.0
    reads: float = 0.0  # the draw record's reads at the edge each second (a draw's pages)
    fetches: float = 0.0  # those of them the edge asks the origin for: API Gateway, no authorizer


def _padded(series: Sequence[float], horizon: int) -> list[float]:
    return [*series, *[0.0] * (horizon - len(series))]


def sale(p: Profile, traffic: Traffic) -> Scenario:
    """Counts, checks and costs of the sale phase, from what reaches API Gateway."""
    edge = traffic.edge
    sent = [f + traffic.fetches for f in traffic.forwarded]
    flow = api_flow(p, sent, traffic.passes)
    horizon = len(flow.demand)
    arrived = _padded(traffic.arrived, horizon)
    # The record's fetches share API Gateway's bucket with the presses: each second's share.
    press_share = buying_shares(traffic.forwarded, sent, horizon)
    admitted = [a * s for a, s in zip(flow.admitted, press_share, strict=True)]
    fetched = [a - b for a, b in zip(flow.admitted, admitted, strict=True)]
    fetches_in = sum(d * (1 - s) for d, s in zip(flow.demand, press_share, strict=True))
    pressed = [a + r for a, r in zip(arrived, flow.retries, strict=True)]
    viewers = [v + traffic.reads for v in pressed]
    n = sum(traffic.arrived)
    api_in, api_ok = sum(flow.demand), sum(admitted)
    buying_ok = [
        a * s for a, s in zip(admitted, buying_shares(traffic.buying, traffic.forwarded, horizon), strict=True)
    ]
    accepted = min(traffic.buyers, sum(buying_ok) / p.presses)
    # The accepted presses are the first buyers' ones; each buyer's other presses are refused.
    accepted_ps = _first(accepted, [b / p.presses for b in buying_ok])
    refused_ps = [a - acc for a, acc in zip(admitted, accepted_ps, strict=True)]
    if traffic.users is None:  # ReauthorizeEvery 0: every request let through runs the authorizer
        auth_ps = list(admitted)
    else:  # a token's answer cached ReauthorizeEvery seconds: once per user per period
        periods = math.ceil(horizon / assumed("authorizer_cache_s"))
        calls = min(traffic.users * periods, api_ok)
        auth_ps = [a * calls / api_ok if api_ok else 0.0 for a in admitted]
    authorizer = sum(auth_ps)
    batch = int(assumed("persister_batch"))
    orders = math.ceil(accepted - 1e-9)
    persister = math.ceil(orders / batch)
    commits_ps = _persisted(p, [a / batch for a in accepted_ps])
    notices = traffic.notices
    sends = orders + persister + notices  # each order; each batch's expiries; the notices
    receives = persister + notices  # at least one ReceiveMessage per batch, and one DeleteMessageBatch each
    redis_ps = [
        acc * assumed("redis_per_accepted") + ref * assumed("redis_per_refused") + au * assumed("redis_per_authorizer")
        for acc, ref, au in zip(accepted_ps, refused_ps, auth_ps, strict=True)
    ]
    at_cloudfront = sum(pressed) if edge else 0.0  # the presses, through the edge's function
    counts = {
        "presses": n,
        "retries": sum(flow.retries),
        "cloudfront_requests": sum(viewers) if edge else 0.0,
        "function_invocations": at_cloudfront,
        "kvs_reads": at_cloudfront * traffic.kvs_reads_per_press,
        "waf_requests": sum(viewers) if edge else 0.0,
        "answered_at_edge": at_cloudfront - (api_in - fetches_in) if edge else 0.0,
        "apigw_requests": api_in,
        "apigw_throttled": flow.throttled,
        "authorizer_invocations": authorizer,
        "api_invocations": api_ok,
        "accepted": float(orders),
        "sqs_sends": float(sends),
        "sqs_receives": float(receives),
        "sqs_deletes": float(receives),
        "persister_invocations": float(persister),
        "publisher_invocations": float(notices),
        "rds_statements": 2.0 * orders,  # the INSERT and the conditional decrement
        "rds_transactions": float(persister),
        "redis_commands": sum(redis_ps),
        **dict.fromkeys(DRAW_COUNTS, 0.0),
        "draw_reads": traffic.reads * horizon,
        "draw_origin_fetches": sum(fetched),
    }
    api_conc = [
        (acc * p.accepted_ms + (ref + f) * p.refused_ms) / 1000
        for acc, ref, f in zip(accepted_ps, refused_ps, fetched, strict=True)
    ]
    auth_conc = [a * p.authorizer_ms / 1000 for a in auth_ps]
    persister_conc = [c * p.persister_ms / 1000 for c in commits_ps]
    total_conc = [a + b + c for a, b, c in zip(api_conc, auth_conc, persister_conc, strict=True)]
    invocations = [a + b for a, b in zip(flow.admitted, auth_ps, strict=True)]
    per_second = {
        "arrived": arrived,
        "cloudfront": viewers if edge else [0.0] * horizon,
        "apigw": flow.demand,
        "api_admitted": flow.admitted,
        "authorizer": auth_ps,
        "lambda_invocations": invocations,
        "lambda_concurrency": total_conc,
        "redis_commands": redis_ps,
        "rds_commits": commits_ps,
    }
    drain = _drain_seconds(persister, p.persister_concurrency, p.persister_ms / 1000)
    checks = []
    if edge:
        checks.append(cloudfront_check(p, viewers))
    checks += [
        apigw_check(p, flow, "presses"),
        *lambda_checks(
            p,
            total_conc,
            invocations,
            [("SeckillApiFunction", flow.admitted, api_conc), ("the authorizer", auth_ps, auth_conc)],
        ),
        Check(
            "SQS -> persister",
            f"MaximumConcurrency {p.persister_concurrency} (pollers: 5, then +300 a minute, at most 1,000)",
            float(p.persister_concurrency),
            min(float(persister), float(_pollers(0, p.persister_concurrency))),
            None,
            f"{persister} batches drain in {drain:.2f} s; a bound on the drain, never on a press",
        ),
        rds_check(p, commits_ps, "the persister's transactions"),
        cache_check(p, redis_ps),
    ]
    costs, monthly = price_sale(p, edge, counts)
    sold = sold_out_second(flow, traffic.buying, sent, traffic.buyers * p.presses)
    share = counts["answered_at_edge"] / at_cloudfront if at_cloudfront else 0.0
    return Scenario(traffic.name, edge, share, counts, per_second, checks, costs, monthly, sold_out_at=sold)


def cloudfront_check(p: Profile, viewers: Sequence[float]) -> Check:
    limit = p.cloudfront_rps or figure("cloudfront_rps")
    return Check(
        "CloudFront",
        "requests/s per distribution",
        limit,
        max(viewers, default=0.0),
        first_over(viewers, limit),
        "none on a flat-rate plan",
    )


def apigw_check(p: Profile, flow: Flow, what: str) -> Check:
    rate, burst = apigw_quota(p)
    return Check(
        "API Gateway",
        f"{rate:,.0f} requests/s, burst {burst:,.0f}",
        rate + burst,
        max(flow.demand, default=0.0),
        first_over(flow.demand, flow.admitted),
        f"{flow.throttled:,.0f} {what} answered 429 (retries included), not billed",
    )


def lambda_checks(
    p: Profile,
    concurrency: Sequence[float],
    invocations: Sequence[float],
    functions: Sequence[tuple[str, Sequence[float], Sequence[float]]],
) -> list[Check]:
    """The account's concurrency and its synchronous request rate (10 x the concurrency), and
    how fast each function may grow from none at the phase's start: 1,000 environments or
    10,000 requests a second more every 10 s."""
    checks = [
        Check(
            "Lambda",
            "account concurrency",
            p.concurrency_quota,
            max(concurrency, default=0.0),
            first_over(concurrency, p.concurrency_quota),
            "all functions together",
        ),
        Check(
            "Lambda",
            f"invocation requests/s ({figure('lambda_request_rate'):g} x concurrency)",
            lambda_request_rate(p),
            max(invocations, default=0.0),
            first_over(invocations, lambda_request_rate(p)),
            "synchronous: the functions behind API Gateway and its authorizer",
        ),
    ]
    for name, requests, conc in functions:
        checks += [
            Check(
                "Lambda",
                f"scaling of {name}: requests/s (+10,000 per 10 s)",
                figure("lambda_ramp_rps"),
                max(requests, default=0.0),
                first_over(requests, ramp_limit(requests, figure("lambda_ramp_rps"))),
                "from none at the start; the limit is the first 10 s's",
            ),
            Check(
                "Lambda",
                f"scaling of {name}: environments (+1,000 per 10 s)",
                figure("lambda_ramp"),
                max(conc, default=0.0),
                first_over(conc, ramp_limit(conc, figure("lambda_ramp"))),
            ),
        ]
    return checks


def rds_check(p: Profile, commits: Sequence[float], what: str) -> Check:
    return Check(
        "RDS",
        "durable commits/s of the writer (db.t4g.micro, gp3; unconfirmed)",
        p.rds_commits,
        max(commits, default=0.0),
        first_over(commits, p.rds_commits),
        what,
    )


def cache_check(p: Profile, commands: Sequence[float]) -> Check:
    return Check(
        "ElastiCache",
        "commands/s of the voucher's shard (cache.t4g.micro; unconfirmed)",
        p.cache_ops,
        max(commands, default=0.0),
        first_over(commands, p.cache_ops),
        "one voucher's keys live on one shard",
    )


def _persisted(p: Profile, batches: Sequence[float]) -> list[float]:
    """The persister's transactions each second: the batches queued so far, as many as its
    pollers take (each a transaction of ``persister_ms``)."""
    backlog, out = 0.0, []
    for i, queued in enumerate(batches):
        backlog += queued
        took = min(backlog, _pollers(i, p.persister_concurrency) * 1000 / p.persister_ms)
        backlog -= took
        out.append(took)
    return out


def _pollers(second: float, maximum: int) -> int:
    """Concurrent batches Lambda reads from SQS ``second`` s after messages appear."""
    grown = figure("sqs_pollers_start") + figure("sqs_pollers_per_minute") * (second // 60)
    return int(min(grown, figure("sqs_pollers_max"), maximum))


def _drain_seconds(batches: int, maximum: int, batch_s: float) -> float:
    """How long the persister takes over ``batches`` batches, its pollers growing as Lambda adds them."""
    left, t = float(batches), 0.0
    while left > 0:
        per_minute = _pollers(t, maximum) * 60 / batch_s
        if left <= per_minute:
            return t + left / per_minute * 60
        left -= per_minute
        t += 60
    return t


def _first(count: float, admitted: Sequence[float]) -> list[float]:
    """The first ``count`` of the admitted requests, second by second."""
    left, out = count, []
    for a in admitted:
        took = min(a, left)
        left -= took
        out.append(took)
    return out
