"""seckill-capacity's sources: every AWS quota and price the model uses, with the AWS page it
comes from (the model's other inputs: ``assumptions``)."""

from __future__ import annotations

from dataclasses import dataclass

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
CF_PLANS = "https://docs.aws.amazon.com/AmazonCloudFront/latest/DeveloperGuide/flat-rate-pricing-plan.html"
_PLAN_COPY = "value read in a copy of this page's text in a public repository; check it on the page"
_PLAN_PRICE = (
    "the plans' monthly prices are on " + _CF_PRICING + "; read in third-party copies of it (announced "
    "18 November 2025); check it there"
)
_PRICE_COPY = "value read in a third-party transcription of this page; check it on the page"
_LAMBDA_PRICING = "https://aws.amazon.com/lambda/pricing/"
_CW_PRICING = "https://aws.amazon.com/cloudwatch/pricing/"
_SCALING = "https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html"
# No AWS page says whether API Gateway bills a request it throttles: the page that said it did
# not is gone, and AWS's experts answer on re:Post that it does not. The model follows them.
THROTTLED_BILLING = "https://repost.aws/questions/QU5y4fo-e3RWyU5r4VmyPIzA/pricing-clarification-for-api-gateway"
# The launch post of the KeyValueStore: a write reaches the edge locations in "a few seconds".
KVS_LAUNCH = (
    "https://aws.amazon.com/blogs/aws/"
    "introducing-amazon-cloudfront-keyvaluestore-a-low-latency-datastore-for-cloudfront-functions/"
)

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
        Figure("lambda_ramp", 1_000, "execution environments added per function every 10 s", _SCALING),
        Figure("lambda_ramp_rps", 10_000, "requests/s added per function every 10 s", _SCALING),
        Figure(
            "lambda_request_rate",
            10,
            "synchronous invocation requests/s per unit of the concurrency quota (10 x 1,000 = 10,000/s)",
            "https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html",
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
            "waf_rate_reaction",
            30,
            "s: WAF's rate-based rules usually detect and act within this",
            "https://docs.aws.amazon.com/waf/latest/developerguide/waf-rule-statement-type-rate-based-caveats.html",
        ),
        Figure(
            "kvs_list_page",
            50,
            "keys per ListKeys call at most (MaxResults)",
            "https://docs.aws.amazon.com/cloudfront/latest/APIReference/API_kvs_ListKeys.html",
        ),
        Figure(
            "rds_gp3_iops",
            3_000,
            "baseline IOPS of an RDS gp3 volume under 400 GiB (MySQL)",
            "https://docs.aws.amazon.com/AmazonRDS/latest/UserGuide/CHAP_Storage.html",
            checked=False,
            note="value read in third-party material citing this page; check it on the page",
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
            "price_kvs_api_call",
            1.00,
            "USD per 1,000 KeyValueStore API calls (ListKeys, DescribeKeyValueStore, UpdateKeys, ...)",
            _CF_PRICING,
            checked=False,
            note="the stored copy of the page ends before its KeyValueStore API line; the value is not confirmed",
        ),
        Figure(
            "price_cf_transfer",
            0.085,
            "USD per GB out to the internet (first 10 TB, United States, Mexico, Canada)",
            _CF_PRICING,
        ),
        Figure(
            "plan_pro",
            15,
            "USD per month (CloudFront flat-rate Pro plan, one distribution)",
            CF_PLANS,
            False,
            _PLAN_PRICE,
        ),
        Figure(
            "plan_business",
            200,
            "USD per month (flat-rate Business plan, one distribution)",
            CF_PLANS,
            False,
            _PLAN_PRICE,
        ),
        Figure(
            "plan_premium",
            1_000,
            "USD per month (flat-rate Premium plan, one distribution)",
            CF_PLANS,
            False,
            _PLAN_PRICE,
        ),
        Figure("plan_pro_requests", 10e6, "requests a month (Pro plan's allowance)", CF_PLANS, False, _PLAN_COPY),
        Figure(
            "plan_business_requests",
            125e6,
            "requests a month (Business plan's allowance)",
            CF_PLANS,
            False,
            _PLAN_COPY,
        ),
        Figure(
            "plan_premium_requests", 500e6, "requests a month (Premium plan's allowance)", CF_PLANS, False, _PLAN_COPY
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
            "price_captcha_attempt",
            0.40,
            "USD per 1,000 CAPTCHA attempts (WAF rules' CAPTCHA action)",
            "https://aws.amazon.com/waf/pricing/",
            checked=False,
            note=_PRICE_COPY,
        ),
        Figure(
            "plan_premium_top",
            10_000,
            "USD per month (Premium plan's highest usage level)",
            CF_PLANS,
            False,
            _PLAN_COPY,
        ),
        Figure(
            "plan_premium_top_requests",
            6e9,
            "requests a month (Premium plan's highest usage level)",
            CF_PLANS,
            False,
            _PLAN_COPY,
        ),
        Figure(
            "plan_spike",
            3,
            "x a plan's monthly allowance: a first spike up to it does not affect the service that month",
            CF_PLANS,
            False,
            _PLAN_COPY,
        ),
        Figure(
            "price_secret_month",
            0.40,
            "USD per secret per month",
            "https://aws.amazon.com/secrets-manager/pricing/",
            checked=False,
            note=_PRICE_COPY,
        ),
        Figure(
            "price_logs_ingested",
            0.50,
            "USD per GB of CloudWatch Logs ingested (standard, first tier)",
            _CW_PRICING,
            checked=False,
            note=_PRICE_COPY,
        ),
        Figure(
            "price_alarm_month",
            0.10,
            "USD per standard-resolution alarm metric per month",
            _CW_PRICING,
            checked=False,
            note=_PRICE_COPY,
        ),
        Figure(
            "free_lambda_requests",
            1e6,
            "Lambda requests a month in the free tier",
            _LAMBDA_PRICING,
            checked=False,
            note=_PRICE_COPY,
        ),
        Figure(
            "free_lambda_gb_s",
            400_000,
            "Lambda GB-seconds a month in the free tier",
            _LAMBDA_PRICING,
            checked=False,
            note=_PRICE_COPY,
        ),
        Figure(
            "free_cf_requests",
            10e6,
            "CloudFront requests a month in the free tier (pay-as-you-go)",
            _CF_PRICING,
            checked=False,
            note=_PRICE_COPY,
        ),
        Figure(
            "free_cf_functions",
            2e6,
            "CloudFront Function invocations a month in the free tier",
            _CF_PRICING,
            checked=False,
            note=_PRICE_COPY,
        ),
        Figure(
            "free_sqs_requests",
            1e6,
            "SQS requests a month in the free tier",
            "https://aws.amazon.com/sqs/pricing/",
            checked=False,
            note=_SECONDARY,
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


MONTH_MINUTES = 30 * 24 * 60  # a 30-day month


def figure(name: str) -> float:
    return FIGURES[name].value
