"""seckill-capacity: what one sale costs and which quota it meets first, with the edge
(CloudFront, its function and WAF in front of the API) and without it.

A model, not a measurement: the sale's presses arrive by an explicit profile, every
request is counted layer by layer, second by second, against AWS's published quotas and
priced at AWS's published prices. Every AWS figure is in FIGURES (sources.py) with the page
it comes from; every other input is in ASSUMPTIONS with where it comes from (a benchmark of
this repository, the template, or a stated assumption), and each is a flag.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from seckill_ops.capacity.assumptions import ASSUMPTIONS, assumed
from seckill_ops.capacity.draw import model_draw, moves
from seckill_ops.capacity.kvs import Fleet
from seckill_ops.capacity.model import model
from seckill_ops.capacity.pace import MAX_RATE, recommend
from seckill_ops.capacity.profile import Profile
from seckill_ops.capacity.report import plot, render, render_sources, to_json
from seckill_ops.dlq_replay import positive_int


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


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _within(low: int, high: int) -> Callable[[str], int]:
    """An integer between low and high, as the voucher's own field takes it."""

    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high}, not {text}")
        return value

    return parse


def _add_draw(parser: argparse.ArgumentParser) -> None:
    draw = parser.add_argument_group(
        "the draw (--admission draw)",
        "a third scenario beside the race's two: the entry phase before the sale, then the sale, where the edge "
        "answers every press of an entrant not admitted",
    )
    draw.add_argument(
        "--admission",
        choices=["race", "draw"],
        default="race",
        help="race: the two race scenarios (default); draw: the draw beside them",
    )
    draw.add_argument(
        "--admit-factor",
        type=_within(1, 100),
        default=int(assumed("admit_factor")),
        help="entrants admitted per unit on sale, at the close and in each wave (default %(default)s)",
    )
    draw.add_argument(
        "--draw-close-seconds",
        type=_within(5, 3600),
        default=int(assumed("draw_close_seconds")),
        help="the draw closes this long before the opening; the first cursor must reach the edge in it "
        "(default %(default)s)",
    )
    draw.add_argument(
        "--wave-seconds",
        type=_within(5, 3600),
        default=int(assumed("wave_seconds")),
        help="a wave every this many seconds while units are on sale (default %(default)s)",
    )
    draw.add_argument(
        "--admit-rate",
        type=_within(1, MAX_RATE),
        help="admitRate: at most this many entrants newly admitted a second, a move in steps one second apart "
        "(default: the recommended one, the largest whose sale stays under the quotas in every second)",
    )
    draw.add_argument(
        "--entry-minutes",
        type=_positive,
        default=assumed("entry_minutes"),
        help="entries arrive over this many minutes before the draw closes (default %(default)s)",
    )
    draw.add_argument(
        "--rush-share",
        type=_share,
        default=assumed("rush_share"),
        help="share of the entries in a last-minute rush rising to its peak at the close; 0: an even spread "
        "(default %(default)s, assumed)",
    )
    draw.add_argument(
        "--rush-minutes",
        type=_positive,
        default=assumed("rush_minutes"),
        help="the rush's length in minutes (default %(default)s, assumed)",
    )
    draw.add_argument(
        "--no-show",
        type=_share,
        default=assumed("no_show"),
        help="share of admitted entrants who never press: their units go to the next wave (default %(default)s)",
    )
    for name, flag_type in (
        ("entry_polls", _non_negative),
        ("record_wait_seconds", _positive),
        ("record_poll_seconds", _positive),
        ("entry_ms", _non_negative),
    ):
        a = ASSUMPTIONS[name]
        draw.add_argument(
            "--" + name.replace("_", "-"),
            type=flag_type,
            default=a.value,
            help=f"{a.unit} (default %(default)s: {a.origin})",
        )
    a = ASSUMPTIONS["edge_locations"]
    draw.add_argument(
        "--edge-locations",
        type=positive_int,
        default=int(a.value),
        help=f"edge locations asking the origin for the draw record (default %(default)s: {a.origin})",
    )


def _add_kvs(parser: argparse.ArgumentParser) -> None:
    kvs = parser.add_argument_group("the KeyValueStore's API calls a month")
    kvs.add_argument(
        "--live-vouchers",
        type=positive_int,
        default=int(assumed("live_vouchers")),
        help="vouchers whose entries the store holds (default %(default)s)",
    )
    kvs.add_argument(
        "--sweep-minutes",
        type=_positive,
        default=assumed("sweep_minutes"),
        help="the reconciler's sweep interval (default %(default)s: ReconcileSchedule's)",
    )
    kvs.add_argument(
        "--changes-per-sale",
        type=_non_negative,
        default=assumed("changes_per_sale"),
        help="states published per sale, besides a draw's cursor moves (default %(default)s: created, sold out)",
    )
    kvs.add_argument(
        "--sales-per-month",
        type=_non_negative,
        default=assumed("sales_per_month"),
        help="sales per live voucher a month, for the store's calls and the flat-rate plans (default %(default)s)",
    )


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
        default=assumed("burst_share"),
        help="share of the presses in the first --burst-seconds (default %(default)s, assumed)",
    )
    parser.add_argument("--burst-seconds", type=positive_int, default=int(assumed("burst_seconds")))
    parser.add_argument(
        "--propagation-seconds",
        type=_non_negative,
        default=assumed("propagation_seconds"),
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
    parser.add_argument(
        "--lambda-concurrency",
        type=positive_int,
        help="Lambda's account concurrency quota, raised or a new account's lower one (default 1,000)",
    )
    parser.add_argument(
        "--retries",
        type=_within(0, 10),
        default=int(assumed("retries")),
        help="times a client sends a request again after a 429 (default %(default)s, assumed)",
    )
    parser.add_argument(
        "--retry-seconds",
        type=_within(1, 60),
        default=int(assumed("retry_seconds")),
        help="seconds between a 429 and its retry (default %(default)s, assumed)",
    )
    for name in ("cache_ops", "rds_commits"):
        a = ASSUMPTIONS[name]
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=_positive,
            default=a.value,
            help=f"{a.unit} (default %(default)s, unconfirmed: see --sources)",
        )
    parser.add_argument(
        "--bot-control", action="store_true", help="price WAF Bot Control (common level) and its CAPTCHA too"
    )
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
        default=int(assumed("persister_concurrency")),
        help="the persister's MaximumConcurrency (default %(default)s, the template's)",
    )
    _add_draw(parser)
    _add_kvs(parser)
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
        lambda_concurrency=args.lambda_concurrency,
        bot_control=args.bot_control,
        accepted_ms=args.accepted_ms,
        refused_ms=args.refused_ms,
        authorizer_ms=args.authorizer_ms,
        persister_ms=args.persister_ms,
        persister_concurrency=args.persister_concurrency,
        retries=args.retries,
        retry_seconds=args.retry_seconds,
        cache_ops=args.cache_ops,
        rds_commits=args.rds_commits,
        admit_factor=args.admit_factor,
        draw_close_seconds=args.draw_close_seconds,
        wave_seconds=args.wave_seconds,
        admit_rate=args.admit_rate,
        entry_minutes=args.entry_minutes,
        rush_share=args.rush_share,
        rush_minutes=args.rush_minutes,
        entry_polls=args.entry_polls,
        record_wait_seconds=args.record_wait_seconds,
        record_poll_seconds=args.record_poll_seconds,
        edge_locations=args.edge_locations,
        entry_ms=args.entry_ms,
        no_show=args.no_show,
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
    fleet = Fleet(args.live_vouchers, args.sweep_minutes, args.changes_per_sale, args.sales_per_month)
    pacing = None
    if args.admission == "draw":
        pacing = recommend(replace(profile, admit_rate=None))
        drawn = profile if profile.admit_rate is not None else replace(profile, admit_rate=pacing.rate)
        scenarios.append(model_draw(drawn))
        fleet = replace(fleet, cursor_moves=float(len(moves(drawn))))
    if args.plot is not None:
        try:
            plot(profile, scenarios, args.plot)
        except ImportError:
            err.print("--plot needs matplotlib: pip install 'seckill-ops[plot]'")
            return 2
    out = Console(width=1000, soft_wrap=True)  # wide: a wrapped Markdown row is no longer one
    if args.json:
        print(json.dumps(to_json(profile, scenarios, fleet, pacing), indent=2))
    else:
        render(profile, scenarios, fleet, out, pacing)
        if args.sources:
            render_sources(out)
    return 0
