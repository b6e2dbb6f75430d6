"""seckill-capacity's prices: dollars per layer for the requests the model counts (a request
API Gateway answers 429 is not billed), the month's fixed lines, the free tier, and
CloudFront's flat-rate plans."""

from __future__ import annotations

import math
from dataclasses import dataclass

from seckill_ops.capacity.assumptions import assumed
from seckill_ops.capacity.profile import Profile
from seckill_ops.capacity.sources import figure


@dataclass
class Cost:
    layer: str
    item: str
    quantity: float
    unit: str
    price: str  # a FIGURES name
    dollars: float


def ms_billed(ms: float) -> float:
    return float(math.ceil(ms - 1e-9))  # Lambda bills duration rounded up to the next 1 ms


def per_million(count: float, price: str) -> float:
    return count / 1e6 * figure(price)


def price_sale(p: Profile, edge: bool, c: dict[str, float]) -> tuple[list[Cost], list[Cost]]:
    gb = assumed("memory_mb") / 1024
    refused_api = c["api_invocations"] - c["accepted"]
    gb_s = (
        (
            c["accepted"] * ms_billed(p.accepted_ms)
            + refused_api * ms_billed(p.refused_ms)
            + c["authorizer_invocations"] * ms_billed(p.authorizer_ms)
            + c["persister_invocations"] * ms_billed(p.persister_ms)
            + c["publisher_invocations"] * ms_billed(assumed("publisher_ms"))
            + c["entrants"] * ms_billed(p.entry_ms)
            + (c["entry_polls"] + c["draw_origin_fetches"]) * ms_billed(p.refused_ms)
        )
        / 1000
        * gb
    )
    invocations = (
        c["api_invocations"]
        + c["authorizer_invocations"]
        + c["persister_invocations"]
        + c["publisher_invocations"]
        + c["entrants"]
        + c["entry_polls"]
        + c["draw_origin_fetches"]
    )
    sqs = c["sqs_sends"] + c["sqs_receives"] + c["sqs_deletes"]
    costs = []
    if edge:
        transfer_gb = c["cloudfront_requests"] * assumed("response_bytes") / 1e9
        costs += [
            Cost(
                "CloudFront",
                "HTTPS requests",
                c["cloudfront_requests"],
                "requests",
                "price_cf_https_request",
                c["cloudfront_requests"] / 10_000 * figure("price_cf_https_request"),
            ),
            Cost(
                "CloudFront",
                "function invocations",
                c["function_invocations"],
                "invocations",
                "price_cf_function",
                per_million(c["function_invocations"], "price_cf_function"),
            ),
            Cost(
                "CloudFront",
                "KeyValueStore reads",
                c["kvs_reads"],
                "reads",
                "price_kvs_read",
                per_million(c["kvs_reads"], "price_kvs_read"),
            ),
            Cost(
                "CloudFront",
                "data transfer out",
                transfer_gb,
                "GB",
                "price_cf_transfer",
                transfer_gb * figure("price_cf_transfer"),
            ),
            Cost(
                "WAF",
                "requests inspected",
                c["waf_requests"],
                "requests",
                "price_waf_request",
                per_million(c["waf_requests"], "price_waf_request"),
            ),
        ]
        if p.bot_control:
            attempts = p.users * assumed("captcha_share")
            costs += [
                Cost(
                    "WAF",
                    "Bot Control requests",
                    c["waf_requests"],
                    "requests",
                    "price_bot_control_request",
                    per_million(c["waf_requests"], "price_bot_control_request"),
                ),
                Cost(
                    "WAF",
                    "CAPTCHA attempts",
                    attempts,
                    "attempts",
                    "price_captcha_attempt",
                    attempts / 1000 * figure("price_captcha_attempt"),
                ),
            ]
    billed = c["apigw_requests"] - c["apigw_throttled"]  # a 429 is not billed
    logs_gb = (invocations * assumed("log_bytes") + c["apigw_requests"] * assumed("access_log_bytes")) / 1e9
    costs += [
        Cost(
            "API Gateway",
            "HTTP API requests (not the 429s)",
            billed,
            "requests",
            "price_apigw_http",
            per_million(billed, "price_apigw_http"),
        ),
        Cost(
            "Lambda",
            "requests",
            invocations,
            "invocations",
            "price_lambda_request",
            per_million(invocations, "price_lambda_request"),
        ),
        Cost("Lambda", "duration", gb_s, "GB-s", "price_lambda_gb_s", gb_s * figure("price_lambda_gb_s")),
        Cost("SQS", "requests", sqs, "requests", "price_sqs_request", per_million(sqs, "price_sqs_request")),
        Cost(
            "CloudWatch",
            "logs ingested",
            logs_gb,
            "GB",
            "price_logs_ingested",
            logs_gb * figure("price_logs_ingested"),
        ),
    ]
    secrets = assumed("secrets") + (assumed("edge_secrets") if edge else 0)
    monthly = [
        Cost(
            "Secrets Manager",
            "secrets",
            secrets,
            "secrets",
            "price_secret_month",
            secrets * figure("price_secret_month"),
        ),
        Cost(
            "CloudWatch",
            "alarms",
            assumed("alarms"),
            "alarms",
            "price_alarm_month",
            assumed("alarms") * figure("price_alarm_month"),
        ),
    ]
    if edge:
        # With Bot Control: its rule group and the press path's CAPTCHA rule, each a rule.
        rules = assumed("waf_rules") + (2 if p.bot_control else 0)
        monthly += [
            Cost("WAF", "web ACL", 1, "web ACL", "price_waf_acl", figure("price_waf_acl")),
            Cost("WAF", "rules", rules, "rules", "price_waf_rule", rules * figure("price_waf_rule")),
        ]
        if p.bot_control:
            monthly.append(
                Cost(
                    "WAF",
                    "Bot Control",
                    1,
                    "subscription",
                    "price_bot_control_month",
                    figure("price_bot_control_month"),
                )
            )
    return costs, monthly


# The plans in order of price; Premium's allowance can be raised, up to its top level.
PLANS = ("pro", "business", "premium", "premium_top")
PLAN_NAMES = {"pro": "Pro", "business": "Business", "premium": "Premium", "premium_top": "Premium at its top level"}
# Bot Control (common bots) comes with Business and up; the WAF rules' CAPTCHA with Pro and up.
BOT_CONTROL_PLANS = ("business", "premium", "premium_top")


@dataclass
class PlanChoice:
    """CloudFront's flat-rate plan for a month of sales, beside pay-as-you-go's edge lines."""

    requests: float  # a month, through the distribution
    pay_as_you_go: float  # the edge's requests, transfer, WAF (per request and monthly)
    plan: str | None  # the smallest plan whose allowance holds the month's requests
    plan_dollars: float | None
    spike_of: str | None = None  # a smaller plan whose allowance a first month's spike may pass


def plan_choice(
    s_costs: list[Cost], s_monthly: list[Cost], requests: float, sales_per_month: float, bot_control: bool = False
) -> PlanChoice:
    """The plans cover the distribution's requests and transfer and WAF (web ACL, rules,
    requests, Bot Control's common bots on Business and up, the rules' CAPTCHA); the
    CloudFront Function's invocations and the KeyValueStore's reads stay priced apart. An
    allowance bills no overage: a first spike up to 3x it leaves the service as it is that
    month, sustained excess may be served from fewer or farther edge locations."""
    covered = {
        ("CloudFront", "HTTPS requests"),
        ("CloudFront", "data transfer out"),
        ("WAF", "requests inspected"),
        ("WAF", "Bot Control requests"),
        ("WAF", "CAPTCHA attempts"),
    }
    per_sale = sum(c.dollars for c in s_costs if (c.layer, c.item) in covered)
    waf_monthly = sum(c.dollars for c in s_monthly if c.layer == "WAF")
    month = requests * sales_per_month
    offered = BOT_CONTROL_PLANS if bot_control else PLANS
    fits = [name for name in offered if figure(f"plan_{name}_requests") >= month]
    plan = fits[0] if fits else None
    smaller = [name for name in offered if name not in fits]
    spike = smaller[-1] if smaller and month <= figure("plan_spike") * figure(f"plan_{smaller[-1]}_requests") else None
    return PlanChoice(
        month,
        per_sale * sales_per_month + waf_monthly,
        plan,
        figure(f"plan_{plan}") if plan is not None else None,
        spike,
    )


FREE = (  # (the cost line's price, the free tier's figure a month)
    ("price_lambda_request", "free_lambda_requests"),
    ("price_lambda_gb_s", "free_lambda_gb_s"),
    ("price_cf_https_request", "free_cf_requests"),
    ("price_cf_function", "free_cf_functions"),
    ("price_sqs_request", "free_sqs_requests"),
)


def free_tier(costs: list[Cost]) -> float:
    """The most the always-free allowances take off one sale's bill (a month's allowance,
    shared with whatever else the account runs that month)."""
    off = 0.0
    for price, allowance in FREE:
        for c in costs:
            if c.price == price and c.quantity:
                off += c.dollars * min(1.0, figure(allowance) / c.quantity)
    return off
