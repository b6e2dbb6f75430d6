"""seckill-capacity's assumptions: every model input that is not an AWS figure, with where
its default comes from (AWS's figures: ``sources``)."""

from __future__ import annotations

from dataclasses import dataclass

from seckill_ops.capacity.sources import CF_PLANS, KVS_LAUNCH


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
            "store (docs/edge.md), and AWS's launch post of the KeyValueStore says a write reaches the edge "
            "locations in a few seconds (" + KVS_LAUNCH + ")",
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
        Assumption(
            "authorizer_cache_s",
            30,
            "s",
            "template.yaml: ReauthorizeEvery, answers cached per token without the edge; with it 0, so the "
            "authorizer runs on every request API Gateway lets through",
        ),
        Assumption(
            "retries",
            2,
            "retries per request answered 429",
            "assumed: a client tries a throttled request twice more, as the AWS SDKs' standard mode does "
            "(3 attempts); the edge's answers and the function's are final and never retried",
        ),
        Assumption("retry_seconds", 1, "s", "assumed: a retry follows its 429 one second later"),
        Assumption(
            "cache_ops",
            25_000,
            "commands/s one cache node (shard) takes",
            "unconfirmed: AWS publishes no requests/s for the template's cache.t4g.micro (Valkey 8.0), a "
            "burstable 2-vCPU node; assumed a quarter of what one Redis core does with simple commands "
            "(about 100,000/s), the gate being a Lua script. One voucher's keys live on one shard, so more "
            "shards do not raise it: a larger node does. Measure yours and set --cache-ops",
        ),
        Assumption(
            "rds_commits",
            1_500,
            "durable commits/s the writer takes",
            "unconfirmed: AWS publishes no commits/s for db.t4g.micro; the gp3 volume's 3,000 baseline IOPS "
            "(rds_gp3_iops) over the two synchronous writes of a MySQL commit (redo log and binary log, "
            "both flushed at commit), group commit aside. Set --rds-commits from a measurement",
        ),
        Assumption(
            "rush_share",
            0.1,
            "share of the entries",
            "assumed: a tenth of the entries come in the last --rush-minutes before the close, rising evenly "
            "to their peak at the close (0: an even spread)",
        ),
        Assumption("rush_minutes", 5, "min", "assumed: the last-minute rush's length"),
        Assumption(
            "log_bytes",
            300,
            "bytes of CloudWatch Logs per Lambda invocation",
            "assumed: the START, END and REPORT lines Lambda writes, the handlers logging nothing at INFO on "
            "their fast path",
        ),
        Assumption(
            "access_log_bytes",
            350,
            "bytes of CloudWatch Logs per API Gateway request",
            "template.yaml: AccessLogSettings, one JSON line per request, throttled ones too",
        ),
        Assumption(
            "secrets",
            3,
            "Secrets Manager secrets without the edge",
            "template.yaml's PassKeysSecret, data/template.yaml's RedisAuthSecret and the secret RDS manages "
            "(ManageMasterUserPassword)",
        ),
        Assumption(
            "edge_secrets",
            2,
            "Secrets Manager secrets the edge adds",
            "template.yaml's OriginSecret and PassKeysHeldSecret (Condition: HasEdge)",
        ),
        Assumption("alarms", 9, "CloudWatch alarms", "template.yaml: its AWS::CloudWatch::Alarm resources"),
        Assumption(
            "captcha_share",
            0.1,
            "share of the users shown a CAPTCHA (with --bot-control)",
            "assumed: one attempt for each user Bot Control labels a bot",
        ),
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
            "edge/waf.yaml (the one rule set): two rate-based rules and two AWS managed rule groups",
        ),
        Assumption("admit_factor", 2, "x the units on sale", "the draw's admitFactor default"),
        Assumption("draw_close_seconds", 60, "s", "the draw's drawCloseSeconds default"),
        Assumption("wave_seconds", 10, "s", "the draw's waveSeconds default"),
        Assumption("entry_minutes", 60, "min", "assumed: entries spread evenly over the hour before the draw closes"),
        Assumption(
            "entry_polls",
            0,
            "GET entry per entrant",
            "edge/page/app.js: the buyer's page never looks its entry up (POST entry is idempotent and answers "
            "the ticket; the page reckons `ahead` from the draw record); a client of your own that polls sets it",
        ),
        Assumption(
            "record_wait_seconds",
            300,
            "s between a page's reads of the draw record before the close",
            "edge/page/app.js RECORD_WAIT_MS; every entrant's page counted open from its entry to the sale's "
            "end: an upper bound",
        ),
        Assumption(
            "record_close_jitter_seconds",
            5,
            "s",
            "edge/page/app.js CLOSE_JITTER_MS: each page reads the record once at the close, spread over these seconds",
        ),
        Assumption(
            "record_poll_seconds",
            10,
            "s between a page's reads of the draw record from the close on",
            "edge/page/app.js RECORD_EVERY_MS: a recorded move carries its steps' times, so the page learns of a "
            "step without reading; only a wave (every waveSeconds) is new",
        ),
        Assumption(
            "draw_cache_seconds",
            2,
            "s",
            "the draw record's cache at the edge (at most 2 s): an edge location asks the origin once per 2 s at most",
        ),
        Assumption(
            "edge_locations",
            750,
            "edge locations",
            "an upper bound: each of CloudFront's 750+ edge locations (" + CF_PLANS + ") missing its cache "
            "once per TTL; regional edge caches and Origin Shield only lower it",
        ),
        Assumption(
            "entry_ms",
            5,
            "ms per POST entry",
            "assumed: `make bench` section 9 measures an early entry's handler at about 1.5 ms in-process here "
            "(6 MySQL round trips, one commit); through RDS Proxy each round trip and the commit's flush cost "
            "more, unmeasured on AWS",
        ),
        Assumption(
            "no_show",
            0,
            "share of admitted entrants",
            "assumed: every admitted entrant presses (their units otherwise go to the next wave)",
        ),
        Assumption(
            "kvs_reads_per_draw_press",
            2,
            "KeyValueStore reads per press on a draw voucher",
            "the edge reads the voucher's entry and the key list (pass-keys)",
        ),
        Assumption(
            "kvs_calls_per_write",
            3,
            "API calls per state written",
            "the publisher (seckill/edge/publisher.py): DescribeKeyValueStore for the ETag UpdateKeys needs "
            "(If-Match), GetKey for the stored state to compare, then one UpdateKeys",
        ),
        Assumption("sweep_minutes", 5, "min", "template.yaml: ReconcileSchedule rate(5 minutes), one sweep per run"),
        Assumption("live_vouchers", 10, "vouchers", "assumed: vouchers whose entries the store holds"),
        Assumption(
            "changes_per_sale",
            2,
            "state changes per voucher per sale",
            "assumed: created, then sold out (the edge knows the window's end without a write)",
        ),
        Assumption("sales_per_month", 1, "sales per live voucher per month", "assumed"),
    )
}


def assumed(name: str) -> float:
    return ASSUMPTIONS[name].value
