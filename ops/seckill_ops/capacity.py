"""seckill-capacity: what one sale costs and which quota it meets first, with the edge
(CloudFront, its function and WAF in front of the API) and without it.

A model, not a measurement: the sale's presses arrive by an explicit profile, every
request is counted layer by layer, second by second, against AWS's published quotas and
priced at AWS's published prices. Every AWS figure is in FIGURES with the page it comes
from; every other input is in ASSUMPTIONS with where it comes from (a benchmark of this
repository, the template, or a stated assumption), and each is a flag.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from seckill_ops.dlq_replay import positive_int

READ = "2026-12-01"  # the day the pages below were read


@dataclass(frozen=True)
class Figure:
    """An AWS quota or price. ``checked``: the value itself was read on ``source``; False:
    the page is AWS's own but the value was read in a copy of it (the note says which)."""

    name: str
    value: float
    unit: str
    source: str
    checked: bool = True
    note: str = ""
    read: str = READ


_CF_PRICING = "https://aws.amazon.com/cloudfront/pricing/"
# AWS's own WAF guide prices its examples at the rates of https://aws.amazon.com/waf/pricing/.
_WAF_COST = "https://aws.github.io/aws-security-services-best-practices/guides/waf/waf-cost/docs/"
_SECONDARY = "value read in a third-party copy of this page; check it on the page"

FIGURES: dict[str, Figure] = {
    f.name: f
    for f in (
        Figure(
            "apigw_rps",
            10_000,
            "requests/s per account per Region",
            "https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html",
        ),
        Figure(
            "apigw_burst",
            5_000,
            "requests (token bucket capacity)",
            "https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html",
        ),
        Figure(
            "apigw_rps_reduced",
            2_500,
            "requests/s (13 newer Regions, e.g. Milan, Jakarta)",
            "https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html",
        ),
        Figure(
            "apigw_burst_reduced",
            1_250,
            "requests (13 newer Regions)",
            "https://docs.aws.amazon.com/apigateway/latest/developerguide/limits.html",
        ),
        Figure(
            "lambda_concurrency",
            1_000,
            "concurrent executions per account per Region",
            "https://docs.aws.amazon.com/lambda/latest/dg/lambda-concurrency.html",
        ),
        Figure(
            "lambda_ramp",
            1_000,
            "execution environments added per function every 10 s",
            "https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html",
        ),
        Figure(
            "sqs_pollers_start",
            5,
            "concurrent batches when messages appear",
            "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html",
        ),
        Figure(
            "sqs_pollers_per_minute",
            300,
            "concurrent batches added per minute",
            "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html",
        ),
        Figure(
            "sqs_pollers_max",
            1_000,
            "concurrent batches per event source mapping",
            "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html",
        ),
        Figure(
            "cloudfront_rps",
            250_000,
            "requests/s per distribution",
            "https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/cloudfront-limits.html",
        ),
        Figure(
            "elasticache_node_ops",
            1_000_000,
            "requests/s per node (r7g.4xlarge, Redis 7.1, simple commands)",
            "https://aws.amazon.com/blogs/database/achieve-over-500-million-requests-per-second-per-cluster-with-amazon-elasticache-for-redis-7-1/",
            note="a large node's figure, not the template's default cache.t4g.micro",
        ),
        Figure(
            "price_lambda_request",
            0.20,
            "USD per million requests",
            "https://docs.aws.amazon.com/whitepapers/latest/how-aws-pricing-works/lambda.html",
        ),
        Figure(
            "price_lambda_gb_s",
            0.00001667,
            "USD per GB-second (x86)",
            "https://docs.aws.amazon.com/whitepapers/latest/how-aws-pricing-works/lambda.html",
        ),
        Figure(
            "price_apigw_http",
            1.00,
            "USD per million HTTP API requests (first 300 million a month, us-east-1)",
            "https://docs.aws.amazon.com/whitepapers/latest/best-practices-api-gateway-private-apis-integration/cost-optimization.html",
        ),
        Figure(
            "price_cf_https_request",
            0.0100,
            "USD per 10,000 HTTPS requests (United States, Mexico, Canada)",
            _CF_PRICING,
            checked=False,
            note=_SECONDARY + " (POSTs are billed as HTTPS proxy requests)",
        ),
        Figure(
            "price_cf_function",
            0.10,
            "USD per million CloudFront Function invocations",
            _CF_PRICING,
            checked=False,
            note=_SECONDARY,
        ),
        Figure(
            "price_kvs_read",
            0.03,
            "USD per million KeyValueStore reads",
            _CF_PRICING,
            checked=False,
            note="the page bills reads (its free tier counts 2,000,000 a month); the value is not confirmed",
        ),
        Figure(
            "price_cf_transfer",
            0.085,
            "USD per GB out to the internet (first 10 TB, United States, Mexico, Canada)",
            _CF_PRICING,
        ),
        Figure("price_waf_acl", 5.00, "USD per web ACL per month", _WAF_COST),
        Figure("price_waf_rule", 1.00, "USD per rule per month", _WAF_COST),
        Figure(
            "price_waf_request",
            0.60,
            "USD per million requests inspected",
            _WAF_COST,
        ),
        Figure(
            "price_bot_control_month",
            10.00,
            "USD per month (Bot Control, common level)",
            _WAF_COST,
        ),
        Figure(
            "price_bot_control_request",
            1.00,
            "USD per million requests (Bot Control, common level)",
            _WAF_COST,
        ),
        Figure(
            "price_sqs_request",
            0.40,
            "USD per million standard-queue requests",
            "https://aws.amazon.com/sqs/pricing/",
            checked=False,
            note=_SECONDARY,
        ),
    )
}


@dataclass(frozen=True)
class Assumption:
    """A model input that is not an AWS figure: its default and where the default comes from."""

    name: str
    value: float
    unit: str
    origin: str


ASSUMPTIONS: dict[str, Assumption] = {
    a.name: a
    for a in (
        Assumption(
            "burst_share",
            0.5,
            "share of all presses",
            "assumed: half the presses land in the first burst",
        ),
        Assumption("burst_seconds", 1, "s", "assumed: the burst is the sale's first second"),
        Assumption(
            "propagation_seconds",
            5,
            "s",
            "assumed: sell-out to the edge answering; the local run measured 0.42 s from sell-out to the "
            "store (docs/edge.md), and AWS gives no figure for the store's propagation to the edge",
        ),
        Assumption(
            "edge_skew_seconds",
            1,
            "s",
            "edge/press.js: SKEW_MS, the edge forwards every press until 1 s after the start",
        ),
        Assumption(
            "accepted_ms",
            3.6,
            "ms per accepted press",
            "benchmarks/README.md: the handler's accepted press, 2.90-3.65 ms, SendMessage to fauxqs included",
        ),
        Assumption(
            "refused_ms",
            1.0,
            "ms per refused press",
            "benchmarks/README.md: 0.15 ms with the refusal cache off (3 µs warm), billed as Lambda's 1 ms minimum",
        ),
        Assumption(
            "authorizer_ms",
            1.0,
            "ms per authorizer invocation",
            "assumed: one Redis read, like a refused press; not benchmarked",
        ),
        Assumption(
            "persister_ms",
            17.9,
            "ms per batch of 10",
            "benchmarks/README.md: the persister drains about 560 rows/s with its expiry sends",
        ),
        Assumption("publisher_ms", 100, "ms per edge publisher invocation", "assumed: a few KeyValueStore calls"),
        Assumption("memory_mb", 512, "MB per function", "template.yaml: Globals MemorySize"),
        Assumption("persister_batch", 10, "orders per batch", "template.yaml: PersisterBatchSize default"),
        Assumption(
            "persister_concurrency",
            5,
            "concurrent batches",
            "template.yaml: PersisterMaxConcurrency default (MaximumConcurrency)",
        ),
        Assumption("authorizer_cache_s", 30, "s", "template.yaml: ReauthorizeEvery (answers cached per token)"),
        Assumption(
            "redis_per_accepted",
            2,
            "Redis commands per accepted press",
            "benchmarks/README.md: the gate, the promise (the block lease: one in 1,000)",
        ),
        Assumption(
            "redis_per_refused",
            1,
            "Redis commands per refused press",
            "benchmarks/README.md: one EVALSHA with the refusal cache off (none once a container's cache is warm)",
        ),
        Assumption("redis_per_authorizer", 1, "Redis commands per authorizer invocation", "functions/authorizer"),
        Assumption(
            "response_bytes",
            400,
            "bytes per answer",
            "assumed: the 77-byte Result body and its headers",
        ),
        Assumption(
            "waf_rules",
            4,
            "rules",
            "template.yaml / edge/waf.yaml: two rate-based rules and two AWS managed rule groups",
        ),
    )
}


def _a(name: str) -> float:
    return ASSUMPTIONS[name].value


def _f(name: str) -> float:
    return FIGURES[name].value


@dataclass(frozen=True)
class Profile:
    """One sale: who presses, how often, when, and what the functions cost per call."""

    users: int
    presses: int
    stock: int
    seconds: int
    burst_share: float = _a("burst_share")
    burst_seconds: int = int(_a("burst_seconds"))
    propagation_seconds: float = _a("propagation_seconds")
    edge_share: float | None = None  # None: derived from the profile
    edge_share_origin: str = ""
    reduced_region: bool = False
    apigw_rps: float | None = None  # a raised quota; None: the published default
    cloudfront_rps: float | None = None
    bot_control: bool = False
    accepted_ms: float = _a("accepted_ms")
    refused_ms: float = _a("refused_ms")
    authorizer_ms: float = _a("authorizer_ms")
    persister_ms: float = _a("persister_ms")
    persister_concurrency: int = int(_a("persister_concurrency"))

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
        return min(max(sold_out + self.propagation_seconds, _a("edge_skew_seconds")), float(self.seconds))

    def share_at_edge(self) -> float:
        if self.edge_share is not None:
            return self.edge_share
        return (self.total - self.cumulative(self.edge_from())) / self.total


def derived_origin(profile: Profile) -> str:
    sold_out = profile.sold_out_at()
    if sold_out is None:
        return "derived: the stock never sells out, so the edge answers nothing"
    return (
        f"derived: the presses after {profile.edge_from():g} s (sell-out at {sold_out:.4f} s plus "
        f"{profile.propagation_seconds:g} s of propagation, at least {_a('edge_skew_seconds'):g} s), over all presses"
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


@dataclass
class Cost:
    layer: str
    item: str
    quantity: float
    unit: str
    price: str  # a FIGURES name
    dollars: float


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
        # The earliest second, then the order of the path (checks are listed in it).
        return min(hit, key=lambda c: (c.exceeded_at, self.checks.index(c))) if hit else None


def _throttle(demand: list[float], rate: float, burst: float) -> list[float]:
    """API Gateway's token bucket, a second at a time: refilled at ``rate`` per second up
    to ``burst`` tokens, full at the start."""
    tokens, admitted = burst, []
    for wanted in demand:
        got = min(wanted, tokens + rate)
        tokens = min(burst, tokens + rate - got)
        admitted.append(got)
    return admitted


def _first_over(series: Sequence[float], limit: float | Sequence[float]) -> int | None:
    for i, value in enumerate(series):
        cap = limit if isinstance(limit, int | float) else limit[i]
        if value > cap + 1e-9:
            return i
    return None


def _ms_billed(ms: float) -> float:
    return float(math.ceil(ms - 1e-9))  # Lambda bills duration rounded up to the next 1 ms


def model(profile: Profile, edge: bool) -> Scenario:
    p, n = profile, profile.total
    seconds = range(p.seconds)
    arrived = [p.cumulative(i + 1) - p.cumulative(i) for i in seconds]
    share = p.share_at_edge() if edge else 0.0
    cut = p.cumulative(p.edge_from()) if edge else float(n)
    forwarded = [max(0.0, min(p.cumulative(i + 1), cut) - p.cumulative(i)) for i in seconds]

    rate = p.apigw_rps or _f("apigw_rps_reduced" if p.reduced_region else "apigw_rps")
    cloudfront = p.cloudfront_rps or _f("cloudfront_rps")
    burst = _f("apigw_burst_reduced" if p.reduced_region else "apigw_burst")
    admitted = _throttle(forwarded, rate, burst)
    api_in, api_ok = sum(forwarded), sum(admitted)
    accepted = min(p.accepted, api_ok)
    refused = api_ok - accepted
    # A token's answer is cached ReauthorizeEvery seconds: one call per user reaching the
    # API per cache period (presses answered at the edge taken as independent of the user).
    periods = math.ceil(p.seconds / _a("authorizer_cache_s"))
    users_at_api = p.users * (1 - share**p.presses) if edge else float(p.users)
    users_at_api *= api_ok / api_in if api_in else 0.0
    authorizer = users_at_api * periods
    batch = int(_a("persister_batch"))
    persister = math.ceil(accepted / batch)
    notices = 1 if edge and p.sold_out_at() is not None else 0  # the sold-out state, once
    sends = accepted + persister + notices  # each order; each batch's expiries (one SendMessageBatch); the notice
    receives = persister + notices  # at least one ReceiveMessage per batch, and one DeleteMessageBatch each
    redis = (
        accepted * _a("redis_per_accepted")
        + refused * _a("redis_per_refused")
        + authorizer * _a("redis_per_authorizer")
    )
    counts = {
        "presses": float(n),
        "cloudfront_requests": float(n) if edge else 0.0,
        "function_invocations": float(n) if edge else 0.0,
        "kvs_reads": float(n) if edge else 0.0,
        "waf_requests": float(n) if edge else 0.0,
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
    }

    # Per second: who asks what of each layer. The accepted presses are the first admitted ones.
    accepted_ps = _first(float(accepted), admitted)
    refused_ps = [a - acc for a, acc in zip(admitted, accepted_ps, strict=True)]
    auth_ps = [a * authorizer / api_ok if api_ok else 0.0 for a in admitted]
    api_conc = [
        (acc * p.accepted_ms + ref * p.refused_ms) / 1000 for acc, ref in zip(accepted_ps, refused_ps, strict=True)
    ]
    auth_conc = [a * p.authorizer_ms / 1000 for a in auth_ps]
    persister_conc = [float(min(_pollers(0, p.persister_concurrency), persister))] + [0.0] * (p.seconds - 1)
    redis_ps = [
        acc * _a("redis_per_accepted") + ref * _a("redis_per_refused") + au * _a("redis_per_authorizer")
        for acc, ref, au in zip(accepted_ps, refused_ps, auth_ps, strict=True)
    ]
    total_conc = [a + b + c for a, b, c in zip(api_conc, auth_conc, persister_conc, strict=True)]
    ramp = [_f("lambda_ramp") * (1 + i // 10) for i in seconds]
    per_second = {
        "arrived": arrived,
        "cloudfront": arrived if edge else [0.0] * p.seconds,
        "apigw": forwarded,
        "api_admitted": admitted,
        "authorizer": auth_ps,
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
                _first_over(arrived, cloudfront),
            )
        )
    checks += [
        Check(
            "API Gateway",
            f"{rate:,.0f} requests/s, burst {burst:,.0f}",
            rate + burst,
            max(forwarded),
            _first_over(forwarded, admitted),
            f"{api_in - api_ok:,.0f} presses answered 429",
        ),
        Check(
            "Lambda",
            "account concurrency",
            _f("lambda_concurrency"),
            max(total_conc),
            _first_over(total_conc, _f("lambda_concurrency")),
            "all functions together",
        ),
        Check(
            "Lambda",
            "ramp of SeckillApiFunction (+1,000 per 10 s)",
            _f("lambda_ramp"),
            max(api_conc),
            _first_over(api_conc, ramp),
        ),
        Check(
            "Lambda",
            "ramp of the authorizer (+1,000 per 10 s)",
            _f("lambda_ramp"),
            max(auth_conc),
            _first_over(auth_conc, ramp),
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
            _f("elasticache_node_ops"),
            max(redis_ps),
            _first_over(redis_ps, _f("elasticache_node_ops")),
            "one voucher's gate keys live on one shard",
        ),
    ]
    costs, monthly = _costs(profile, edge, counts)
    scenario = Scenario(
        "with the edge" if edge else "without the edge", edge, share, counts, per_second, checks, costs, monthly
    )
    if edge:
        scenario.notes.append(f"edge share {share:.4f} ({p.edge_share_origin or derived_origin(p)})")
    return scenario


def _pollers(second: float, maximum: int) -> int:
    """Concurrent batches Lambda reads from SQS ``second`` s after messages appear."""
    grown = _f("sqs_pollers_start") + _f("sqs_pollers_per_minute") * (second // 60)
    return int(min(grown, _f("sqs_pollers_max"), maximum))


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


def _per_million(count: float, price: str) -> float:
    return count / 1e6 * _f(price)


def _costs(p: Profile, edge: bool, c: dict[str, float]) -> tuple[list[Cost], list[Cost]]:
    gb = _a("memory_mb") / 1024
    refused_api = c["api_invocations"] - c["accepted"]
    gb_s = (
        (
            c["accepted"] * _ms_billed(p.accepted_ms)
            + refused_api * _ms_billed(p.refused_ms)
            + c["authorizer_invocations"] * _ms_billed(p.authorizer_ms)
            + c["persister_invocations"] * _ms_billed(p.persister_ms)
            + c["publisher_invocations"] * _ms_billed(_a("publisher_ms"))
        )
        / 1000
        * gb
    )
    invocations = (
        c["api_invocations"] + c["authorizer_invocations"] + c["persister_invocations"] + c["publisher_invocations"]
    )
    sqs = c["sqs_sends"] + c["sqs_receives"] + c["sqs_deletes"]
    costs = []
    if edge:
        transfer_gb = c["presses"] * _a("response_bytes") / 1e9
        costs += [
            Cost(
                "CloudFront",
                "HTTPS requests",
                c["cloudfront_requests"],
                "requests",
                "price_cf_https_request",
                c["cloudfront_requests"] / 10_000 * _f("price_cf_https_request"),
            ),
            Cost(
                "CloudFront",
                "function invocations",
                c["function_invocations"],
                "invocations",
                "price_cf_function",
                _per_million(c["function_invocations"], "price_cf_function"),
            ),
            Cost(
                "CloudFront",
                "KeyValueStore reads",
                c["kvs_reads"],
                "reads",
                "price_kvs_read",
                _per_million(c["kvs_reads"], "price_kvs_read"),
            ),
            Cost(
                "CloudFront",
                "data transfer out",
                transfer_gb,
                "GB",
                "price_cf_transfer",
                transfer_gb * _f("price_cf_transfer"),
            ),
            Cost(
                "WAF",
                "requests inspected",
                c["waf_requests"],
                "requests",
                "price_waf_request",
                _per_million(c["waf_requests"], "price_waf_request"),
            ),
        ]
        if p.bot_control:
            costs.append(
                Cost(
                    "WAF",
                    "Bot Control requests",
                    c["waf_requests"],
                    "requests",
                    "price_bot_control_request",
                    _per_million(c["waf_requests"], "price_bot_control_request"),
                )
            )
    costs += [
        Cost(
            "API Gateway",
            "HTTP API requests",
            c["apigw_requests"],
            "requests",
            "price_apigw_http",
            _per_million(c["apigw_requests"], "price_apigw_http"),
        ),
        Cost(
            "Lambda",
            "requests",
            invocations,
            "invocations",
            "price_lambda_request",
            _per_million(invocations, "price_lambda_request"),
        ),
        Cost("Lambda", "duration", gb_s, "GB-s", "price_lambda_gb_s", gb_s * _f("price_lambda_gb_s")),
        Cost("SQS", "requests", sqs, "requests", "price_sqs_request", _per_million(sqs, "price_sqs_request")),
    ]
    monthly = []
    if edge:
        # With Bot Control: its rule group and the press path's CAPTCHA rule, each a rule.
        rules = _a("waf_rules") + (2 if p.bot_control else 0)
        monthly += [
            Cost("WAF", "web ACL", 1, "web ACL", "price_waf_acl", _f("price_waf_acl")),
            Cost("WAF", "rules", rules, "rules", "price_waf_rule", rules * _f("price_waf_rule")),
        ]
        if p.bot_control:
            monthly.append(
                Cost("WAF", "Bot Control", 1, "subscription", "price_bot_control_month", _f("price_bot_control_month"))
            )
    return costs, monthly


LAYERS = [  # (count key, label) in the order of the path
    ("presses", "presses"),
    ("cloudfront_requests", "CloudFront requests"),
    ("function_invocations", "CloudFront Function invocations"),
    ("kvs_reads", "KeyValueStore reads"),
    ("waf_requests", "WAF requests"),
    ("answered_at_edge", "answered at the edge"),
    ("apigw_requests", "API Gateway requests"),
    ("apigw_throttled", "  of which throttled (429)"),
    ("authorizer_invocations", "authorizer invocations (30 s cache per token)"),
    ("api_invocations", "SeckillApiFunction invocations"),
    ("accepted", "accepted presses"),
    ("sqs_sends", "SQS sends"),
    ("sqs_receives", "SQS receives"),
    ("sqs_deletes", "SQS deletes"),
    ("persister_invocations", "persister invocations"),
    ("publisher_invocations", "edge publisher invocations"),
    ("rds_statements", "RDS write statements"),
    ("rds_transactions", "RDS transactions"),
    ("redis_commands", "ElastiCache commands (upper bound)"),
]


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left", box=box.MARKDOWN)


def _emit(out: Console, table: Table) -> None:
    """A table as Markdown, without the blank padded lines around it."""
    with out.capture() as captured:
        out.print(table)
    out.print(
        "\n".join(line.rstrip() for line in captured.get().splitlines() if line.strip()), markup=False, highlight=False
    )


def _money(d: float) -> str:
    return f"${d:,.4f}" if d < 1 else f"${d:,.2f}"


def _price(name: str) -> str:
    f = FIGURES[name]
    return f"{f.value:g} {f.unit}" + ("" if f.checked else " *")


def render(profile: Profile, scenarios: list[Scenario], out: Console) -> None:
    p = profile
    out.print(
        f"Sale: {p.users:,} users x {p.presses} presses = {p.total:,} presses for {p.stock:,} units over "
        f"{p.seconds} s; {p.burst_share:.0%} of the presses in the first {p.burst_seconds} s, the rest evenly after."
    )
    for s in scenarios:
        for note in s.notes:
            out.print(f"{s.name}: {note}")
    counts = _table("Requests per layer")
    counts.add_column("layer")
    for s in scenarios:
        counts.add_column(s.name, justify="right")
    for key, label in LAYERS:
        counts.add_row(label, *(f"{s.counts[key]:,.0f}" for s in scenarios))
    _emit(out, counts)

    checks = _table("Peak demand against each quota")
    for column in ("scenario", "layer", "quota", "limit", "peak", "first over", "note"):
        checks.add_column(column)
    for s in scenarios:
        for c in s.checks:
            checks.add_row(
                s.name,
                c.layer,
                c.quota,
                "-" if c.limit is None else f"{c.limit:,.0f}",
                f"{c.peak:,.1f}",
                "-" if c.exceeded_at is None else f"second {c.exceeded_at}",
                c.note,
            )
    _emit(out, checks)
    for s in scenarios:
        wall = s.first_wall()
        if wall is None:
            out.print(f"First wall {s.name}: none of the modelled quotas is reached.")
        else:
            over = f"{wall.peak / wall.limit:,.1f}x" if wall.limit else ""
            out.print(
                f"First wall {s.name}: {wall.layer}, {wall.quota}, in second {wall.exceeded_at} "
                f"(peak {wall.peak:,.0f}, {over} the limit)."
            )

    costs = _table("Dollars per sale (no free tier)")
    for column in ("scenario", "layer", "item", "quantity", "price", "USD", "USD per million presses"):
        costs.add_column(column)
    for s in scenarios:
        for line in s.costs:
            costs.add_row(
                s.name,
                line.layer,
                line.item,
                f"{line.quantity:,.2f} {line.unit}",
                _price(line.price),
                _money(line.dollars),
                _money(line.dollars / p.total * 1e6),
            )
        costs.add_row(s.name, "total", "", "", "", _money(s.total_dollars), _money(s.total_dollars / p.total * 1e6))
        for line in s.monthly:
            costs.add_row(
                s.name,
                line.layer,
                f"{line.item} (per month, not per sale)",
                f"{line.quantity:g} {line.unit}",
                _price(line.price),
                _money(line.dollars),
                "",
            )
    _emit(out, costs)
    out.print("* the value is not confirmed on AWS's own page (see seckill-capacity --sources)")


def render_sources(out: Console) -> None:
    figures = _table(f"AWS figures (pages read {READ})")
    for column in ("name", "value", "unit", "source", "checked"):
        figures.add_column(column)
    for f in FIGURES.values():
        figures.add_row(f.name, f"{f.value:g}", f.unit, f.source, "yes" if f.checked else f"no: {f.note}")
    _emit(out, figures)
    assumptions = _table("Other inputs (each a flag or the template's default)")
    for column in ("name", "value", "unit", "origin"):
        assumptions.add_column(column)
    for a in ASSUMPTIONS.values():
        assumptions.add_row(a.name, f"{a.value:g}", a.unit, a.origin)
    _emit(out, assumptions)


def _wall_json(wall: Check | None) -> dict[str, Any] | None:
    return None if wall is None else asdict(wall)


def to_json(profile: Profile, scenarios: list[Scenario]) -> dict[str, Any]:
    return {
        "profile": asdict(profile) | {"total": profile.total, "accepted": profile.accepted},
        "scenarios": [
            {
                "name": s.name,
                "edge": s.edge,
                "edge_share": s.edge_share,
                "notes": s.notes,
                "counts": s.counts,
                "per_second": s.per_second,
                "checks": [asdict(c) for c in s.checks],
                "first_wall": _wall_json(s.first_wall()),
                "costs": [asdict(c) for c in s.costs],
                "monthly": [asdict(c) for c in s.monthly],
                "total_dollars": s.total_dollars,
                "dollars_per_million_presses": s.total_dollars / profile.total * 1e6,
            }
            for s in scenarios
        ],
        "figures": [asdict(f) for f in FIGURES.values()],
        "assumptions": [asdict(a) for a in ASSUMPTIONS.values()],
    }


PLOTTED = [  # per_second key, label: one colour each in every panel
    ("cloudfront", "CloudFront"),
    ("apigw", "API Gateway (asked)"),
    ("api_admitted", "SeckillApiFunction"),
    ("authorizer", "authorizer"),
    ("redis_commands", "ElastiCache commands"),
]


def plot(profile: Profile, scenarios: list[Scenario], path: Path) -> None:
    """Requests per second per layer over the sale, one panel per scenario, quotas drawn."""
    import matplotlib  # an optional dependency: seckill-ops[plot]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(scenarios), figsize=(6 * len(scenarios), 4.5), sharey=True, squeeze=False)
    # The edges of each second, the last value repeated so the last second is drawn too.
    edges = list(range(profile.seconds + 1))
    for ax, s in zip(axes[0], scenarios, strict=True):
        for (key, label), color in zip(PLOTTED, ("C0", "C1", "C2", "C3", "C4"), strict=True):
            values = s.per_second[key]
            if any(values):
                ax.step(edges, [*values, values[-1]], where="post", label=label, color=color)
        if s.edge:
            ax.axhline(
                profile.cloudfront_rps or _f("cloudfront_rps"), linestyle="--", color="C0", label="CloudFront quota"
            )
        apigw = profile.apigw_rps or _f("apigw_rps_reduced" if profile.reduced_region else "apigw_rps")
        ax.axhline(apigw, linestyle=":", color="C1", label="API Gateway quota")
        ax.set_yscale("symlog", linthresh=100)
        ax.set_title(s.name)
        ax.set_xlabel("second of the sale")
        ax.legend(fontsize="small")
    axes[0][0].set_ylabel("requests per second")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="seckill-capacity",
        description="What one sale costs and which AWS quota it meets first, with the edge (CloudFront, its "
        "function, WAF) and without it: requests per layer, peak demand against each quota, dollars per "
        "layer. A model: every AWS figure comes with its page (--sources). Exit 0, or 2 on bad arguments "
        "(or --plot without matplotlib: pip install 'seckill-ops[plot]').",
    )
    parser.add_argument(
        "--users", type=positive_int, default=1_000_000, help="distinct users pressing (default %(default)s)"
    )
    parser.add_argument("--presses", type=positive_int, default=3, help="presses per user (default %(default)s)")
    parser.add_argument("--stock", type=positive_int, default=200, help="units on sale (default %(default)s)")
    parser.add_argument(
        "--seconds", type=positive_int, default=10, help="the window the presses arrive in (default %(default)s)"
    )
    parser.add_argument(
        "--burst-share",
        type=_share,
        default=_a("burst_share"),
        help="share of the presses in the first --burst-seconds (default %(default)s, assumed)",
    )
    parser.add_argument("--burst-seconds", type=positive_int, default=int(_a("burst_seconds")))
    parser.add_argument(
        "--propagation-seconds",
        type=_non_negative,
        default=_a("propagation_seconds"),
        help="sell-out to the edge answering, for the derived edge share (default %(default)s, assumed)",
    )
    parser.add_argument("--edge-share", type=_share, help="share of the presses the edge answers (default: derived)")
    parser.add_argument(
        "--from-report",
        type=Path,
        metavar="FILE",
        help="the demo's JSON report: its edge.share_of_presses, when present, is the edge share",
    )
    parser.add_argument(
        "--region-burst",
        choices=["standard", "reduced"],
        default="standard",
        help="API Gateway's account quota: standard 10,000/s burst 5,000, or the 13 newer Regions' 2,500/s burst 1,250",
    )
    parser.add_argument(
        "--apigw-rps",
        type=positive_int,
        help="API Gateway's account quota raised to this many requests/s (it can be raised; the burst stays)",
    )
    parser.add_argument(
        "--cloudfront-rps",
        type=positive_int,
        help="CloudFront's per-distribution quota raised to this many requests/s",
    )
    parser.add_argument("--bot-control", action="store_true", help="price WAF Bot Control (common level) too")
    for name in ("accepted_ms", "refused_ms", "authorizer_ms", "persister_ms"):
        a = ASSUMPTIONS[name]
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=_non_negative,
            default=a.value,
            help=f"{a.unit} (default %(default)s: {a.origin})",
        )
    parser.add_argument(
        "--persister-concurrency",
        type=positive_int,
        default=int(_a("persister_concurrency")),
        help="the persister's MaximumConcurrency (default %(default)s, the template's)",
    )
    parser.add_argument("--plot", type=Path, metavar="FILE", help="draw requests per second per layer to FILE (PNG)")
    parser.add_argument("--json", action="store_true", help="print the whole model as JSON")
    parser.add_argument("--sources", action="store_true", help="list every AWS figure with its page, and the inputs")
    return parser


def edge_share_from_report(path: Path) -> float | None:
    """The demo report's ``edge.share_of_presses``; None when it has no edge section."""
    report = json.loads(path.read_text(encoding="utf-8"))
    edge = report.get("edge") if isinstance(report, dict) else None
    share = edge.get("share_of_presses") if isinstance(edge, dict) else None
    if share is None:
        return None
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
        raise ValueError(f"edge.share_of_presses is not a share: {share!r}")
    return float(share)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code or 0)
    err = Console(stderr=True, soft_wrap=True, markup=False, highlight=False)
    if args.burst_seconds > args.seconds:
        err.print("--burst-seconds cannot exceed --seconds")
        return 2
    profile = Profile(
        users=args.users,
        presses=args.presses,
        stock=args.stock,
        seconds=args.seconds,
        burst_share=args.burst_share,
        burst_seconds=args.burst_seconds,
        propagation_seconds=args.propagation_seconds,
        reduced_region=args.region_burst == "reduced",
        apigw_rps=args.apigw_rps,
        cloudfront_rps=args.cloudfront_rps,
        bot_control=args.bot_control,
        accepted_ms=args.accepted_ms,
        refused_ms=args.refused_ms,
        authorizer_ms=args.authorizer_ms,
        persister_ms=args.persister_ms,
        persister_concurrency=args.persister_concurrency,
    )
    if args.edge_share is not None:
        profile = replace(profile, edge_share=args.edge_share, edge_share_origin="--edge-share")
    elif args.from_report is not None:
        try:
            share = edge_share_from_report(args.from_report)
        except (OSError, ValueError) as exc:
            err.print(f"cannot read the edge share from {args.from_report}: {exc}")
            return 2
        if share is None:
            err.print(f"{args.from_report} has no edge.share_of_presses: the edge share is derived")
        else:
            profile = replace(profile, edge_share=share, edge_share_origin=f"measured: {args.from_report}")
    scenarios = [model(profile, edge=False), model(profile, edge=True)]
    if args.plot is not None:
        try:
            plot(profile, scenarios, args.plot)
        except ImportError:
            err.print("--plot needs matplotlib: pip install 'seckill-ops[plot]'")
            return 2
    out = Console(width=1000, soft_wrap=True)  # wide: a wrapped Markdown row is no longer one
    if args.json:
        print(json.dumps(to_json(profile, scenarios), indent=2))
    else:
        render(profile, scenarios, out)
        if args.sources:
            render_sources(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
