"""seckill-capacity's model of one sale: the presses' arrival, every request counted layer by
layer and second by second, each quota's peak demand and the first second over it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from seckill_ops.capacity.costs import Cost, price_sale
from seckill_ops.capacity.profile import Profile
from seckill_ops.capacity.sources import assumed, figure

# The counts only a draw has (its entry phase); zero in a race.
DRAW_COUNTS = ("admitted", "waves", "entrants", "entry_polls", "draw_reads", "draw_origin_fetches", "entry_apigw")


def before_waf(p: Profile) -> float:
    """The share of the presses that arrive before WAF's rate-based rules can act on them."""
    return p.cumulative(figure("waf_rate_reaction")) / p.total


def derived_origin(profile: Profile) -> str:
    sold_out = profile.sold_out_at()
    if sold_out is None:
        return "derived: the stock never sells out, so the edge answers nothing"
    return (
        f"derived: the presses after {profile.edge_from():g} s (sell-out at {sold_out:.4f} s plus "
        f"{profile.propagation_seconds:g} s of propagation, at least {assumed('edge_skew_seconds'):g} s), "
        "over all presses"
    )


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

    @property
    def total_dollars(self) -> float:
        return sum(c.dollars for c in self.costs)

    def first_wall(self) -> Check | None:
        hit = [c for c in self.checks if c.exceeded_at is not None]
        # The entry phase first, then the earliest second, then the order of the path (checks are listed in it).
        return min(hit, key=lambda c: (c.phase != "entry", c.exceeded_at, self.checks.index(c))) if hit else None


def throttle(demand: list[float], rate: float, burst: float) -> list[float]:
    """API Gateway's token bucket, a second at a time: refilled at ``rate`` per second up
    to ``burst`` tokens, full at the start."""
    tokens, admitted = burst, []
    for wanted in demand:
        got = min(wanted, tokens + rate)
        tokens = min(burst, tokens + rate - got)
        admitted.append(got)
    return admitted


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


def lambda_request_rate() -> float:
    """Synchronous invocations a second Lambda takes: 10 x the concurrency quota."""
    return figure("lambda_request_rate") * figure("lambda_concurrency")


def model(profile: Profile, edge: bool) -> Scenario:
    """The race: every press reaches API Gateway, or with the edge every press until the
    sold-out state reaches it (never within its clock skew of the start)."""
    p, n = profile, profile.total
    arrived = [p.cumulative(i + 1) - p.cumulative(i) for i in range(p.seconds)]
    share = p.share_at_edge() if edge else 0.0
    cut = p.cumulative(p.edge_from()) if edge else float(n)
    forwarded = [max(0.0, min(p.cumulative(i + 1), cut) - p.cumulative(i)) for i in range(p.seconds)]
    # A user reaches the API unless all their presses are answered at the edge (presses
    # answered at the edge taken as independent of the user).
    users = p.users * (1 - share**p.presses) if edge else float(p.users)
    notices = 1 if edge and p.sold_out_at() is not None else 0  # the sold-out state, once
    scenario = sale(
        p,
        Traffic(
            "with the edge" if edge else "without the edge",
            edge,
            float(n),
            arrived,
            forwarded,
            users,
            p.accepted,
            notices,
        ),
    )
    if edge:
        scenario.notes.append(f"edge share {share:.4f} ({p.edge_share_origin or derived_origin(p)})")
    return scenario


@dataclass
class Traffic:
    """What a sale asks of the layers behind the edge: every press arriving, the presses
    sent on to API Gateway, second by second, and by how many users."""

    name: str
    edge: bool
    presses: float
    arrived: list[float]
    forwarded: list[float]
    users: float  # users whose presses reach API Gateway
    buyers: float  # the units the forwarded presses can take
    notices: int  # states published to the edge
    kvs_reads_per_press: float = 1.0


def sale(p: Profile, traffic: Traffic) -> Scenario:
    """Counts, checks and costs of the sale phase, from what reaches API Gateway."""
    edge, n, arrived, forwarded = traffic.edge, traffic.presses, traffic.arrived, traffic.forwarded
    seconds = range(len(arrived))
    rate, burst = apigw_quota(p)
    cloudfront = p.cloudfront_rps or figure("cloudfront_rps")
    admitted = throttle(forwarded, rate, burst)
    api_in, api_ok = sum(forwarded), sum(admitted)
    accepted = min(traffic.buyers, api_ok)
    refused = api_ok - accepted
    # A token's answer is cached ReauthorizeEvery seconds: one call per user reaching the
    # API per cache period, and never more users than presses reaching it.
    periods = math.ceil(len(arrived) / assumed("authorizer_cache_s"))
    authorizer = min(traffic.users, api_in) * (api_ok / api_in if api_in else 0.0) * periods
    batch = int(assumed("persister_batch"))
    persister = math.ceil(accepted / batch)
    notices = traffic.notices
    sends = accepted + persister + notices  # each order; each batch's expiries (one SendMessageBatch); the notices
    receives = persister + notices  # at least one ReceiveMessage per batch, and one DeleteMessageBatch each
    redis = (
        accepted * assumed("redis_per_accepted")
        + refused * assumed("redis_per_refused")
        + authorizer * assumed("redis_per_authorizer")
    )
    counts = {
        "presses": n,
        "cloudfront_requests": n if edge else 0.0,
        "function_invocations": n if edge else 0.0,
        "kvs_reads": n * traffic.kvs_reads_per_press if edge else 0.0,
        "waf_requests": n if edge else 0.0,
        "answered_at_edge": n - api_in,
        "apigw_requests": api_in,
        "apigw_throttled": api_in - api_ok,
        "authorizer_invocations": authorizer,
        "api_invocations": api_ok,
        "accepted": float(accepted),
        "sqs_sends": float(sends),
        "sqs_receives": float(receives),
        "sqs_deletes": float(receives),
        "persister_invocations": float(persister),
        "publisher_invocations": float(notices),
        "rds_statements": 2.0 * accepted,  # the INSERT and the conditional decrement
        "rds_transactions": float(persister),
        "redis_commands": redis,
        **dict.fromkeys(DRAW_COUNTS, 0.0),
    }

    # Per second: who asks what of each layer. The accepted presses are the first admitted ones.
    accepted_ps = _first(float(accepted), admitted)
    refused_ps = [a - acc for a, acc in zip(admitted, accepted_ps, strict=True)]
    auth_ps = [a * authorizer / api_ok if api_ok else 0.0 for a in admitted]
    api_conc = [
        (acc * p.accepted_ms + ref * p.refused_ms) / 1000 for acc, ref in zip(accepted_ps, refused_ps, strict=True)
    ]
    auth_conc = [a * p.authorizer_ms / 1000 for a in auth_ps]
    persister_conc = [float(min(_pollers(0, p.persister_concurrency), persister))] + [0.0] * (len(arrived) - 1)
    redis_ps = [
        acc * assumed("redis_per_accepted") + ref * assumed("redis_per_refused") + au * assumed("redis_per_authorizer")
        for acc, ref, au in zip(accepted_ps, refused_ps, auth_ps, strict=True)
    ]
    total_conc = [a + b + c for a, b, c in zip(api_conc, auth_conc, persister_conc, strict=True)]
    invocations = [a + b for a, b in zip(admitted, auth_ps, strict=True)]
    ramp = [figure("lambda_ramp") * (1 + i // 10) for i in seconds]
    per_second = {
        "arrived": arrived,
        "cloudfront": arrived if edge else [0.0] * len(arrived),
        "apigw": forwarded,
        "api_admitted": admitted,
        "authorizer": auth_ps,
        "lambda_invocations": invocations,
        "lambda_concurrency": total_conc,
        "redis_commands": redis_ps,
    }
    drain = _drain_seconds(persister, p.persister_concurrency, p.persister_ms / 1000)
    checks = []
    if edge:
        checks.append(
            Check(
                "CloudFront",
                "requests/s per distribution",
                cloudfront,
                max(arrived),
                first_over(arrived, cloudfront),
            )
        )
    checks += [
        apigw_check(rate, burst, forwarded, admitted, "presses"),
        *lambda_checks(total_conc, invocations),
        Check(
            "Lambda",
            "ramp of SeckillApiFunction (+1,000 per 10 s)",
            figure("lambda_ramp"),
            max(api_conc),
            first_over(api_conc, ramp),
        ),
        Check(
            "Lambda",
            "ramp of the authorizer (+1,000 per 10 s)",
            figure("lambda_ramp"),
            max(auth_conc),
            first_over(auth_conc, ramp),
        ),
        Check(
            "SQS -> persister",
            f"MaximumConcurrency {p.persister_concurrency} (pollers: 5, then +300 a minute, at most 1,000)",
            float(p.persister_concurrency),
            min(float(persister), float(_pollers(0, p.persister_concurrency))),
            None,
            f"{persister} batches drain in {drain:.2f} s; a bound on the drain, never on a press",
        ),
        Check(
            "RDS Proxy",
            "connections (the persister's MaximumConcurrency bounds them)",
            None,
            float(min(persister, p.persister_concurrency)),
            None,
            "the limit is the instance's max_connections x MaxConnectionsPercent 90: not modelled",
        ),
        Check(
            "ElastiCache",
            "commands/s per node (r7g.4xlarge figure)",
            figure("elasticache_node_ops"),
            max(redis_ps),
            first_over(redis_ps, figure("elasticache_node_ops")),
            "one voucher's gate keys live on one shard",
        ),
    ]
    costs, monthly = price_sale(p, edge, counts)
    share = (n - api_in) / n if n else 0.0
    return Scenario(traffic.name, edge, share, counts, per_second, checks, costs, monthly)


def apigw_check(rate: float, burst: float, demand: list[float], admitted: list[float], what: str) -> Check:
    return Check(
        "API Gateway",
        f"{rate:,.0f} requests/s, burst {burst:,.0f}",
        rate + burst,
        max(demand, default=0.0),
        first_over(demand, admitted),
        f"{sum(demand) - sum(admitted):,.0f} {what} answered 429",
    )


def lambda_checks(concurrency: list[float], invocations: list[float]) -> list[Check]:
    """The account's concurrency and its synchronous request rate (10 x the concurrency)."""
    return [
        Check(
            "Lambda",
            "account concurrency",
            figure("lambda_concurrency"),
            max(concurrency, default=0.0),
            first_over(concurrency, figure("lambda_concurrency")),
            "all functions together",
        ),
        Check(
            "Lambda",
            f"invocation requests/s ({figure('lambda_request_rate'):g} x concurrency)",
            lambda_request_rate(),
            max(invocations, default=0.0),
            first_over(invocations, lambda_request_rate()),
            "synchronous: the functions behind API Gateway and its authorizer",
        ),
    ]


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


def _first(count: float, admitted: list[float]) -> list[float]:
    """The first ``count`` of the admitted requests, second by second."""
    left, out = count, []
    for a in admitted:
        took = min(a, left)
        left -= took
        out.append(took)
    return out
