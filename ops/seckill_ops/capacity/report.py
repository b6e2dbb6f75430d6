"""seckill-capacity's output: the tables, the JSON, the plot."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from seckill_ops.capacity.assumptions import ASSUMPTIONS, assumed
from seckill_ops.capacity.costs import PLAN_NAMES, free_tier, plan_choice
from seckill_ops.capacity.kvs import Calls, Fleet, calls_before, kvs_calls
from seckill_ops.capacity.model import (
    DRAW_COUNTS,
    Check,
    Scenario,
    apigw_quota,
    before_waf,
    lambda_request_rate,
)
from seckill_ops.capacity.pace import PACED, Pacing
from seckill_ops.capacity.profile import Profile
from seckill_ops.capacity.sources import FIGURES, READ, THROTTLED_BILLING, figure

LAYERS = [  # (count key, label) in the order of the path
    ("presses", "presses"),
    ("retries", "retries after a 429"),
    ("cloudfront_requests", "CloudFront requests"),
    ("function_invocations", "CloudFront Function invocations"),
    ("kvs_reads", "KeyValueStore reads"),
    ("waf_requests", "WAF requests"),
    ("answered_at_edge", "answered at the edge"),
    ("admitted", "entrants admitted (the first move and the waves)"),
    ("waves", "waves"),
    ("entrants", "entries (POST entry, before the sale)"),
    ("entry_polls", "entry look-ups (GET entry)"),
    ("draw_reads", "draw record reads at the edge (the pages' schedule)"),
    ("draw_origin_fetches", "  of which from the origin (2 s cache per edge location)"),
    ("apigw_requests", "API Gateway requests"),
    ("entry_apigw", "  of which in the entry phase"),
    ("apigw_throttled", "  of which throttled (429)"),
    ("authorizer_invocations", "authorizer invocations (cached 30 s per token without the edge, never with it)"),
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


def render(
    profile: Profile, scenarios: list[Scenario], fleet: Fleet, out: Console, pacing: Pacing | None = None
) -> None:
    p = profile
    out.print(
        f"Sale: {p.users:,} users x {p.presses} presses = {p.total:,} presses for {p.stock:,} units over "
        f"{p.seconds} s; {p.burst_share:.0%} of the presses in the first {p.burst_seconds} s, the rest evenly after; "
        f"a request answered 429 is sent again {p.retry_seconds} s later, at most {p.retries} times."
    )
    if any(s.counts["entrants"] for s in scenarios):
        out.print(
            f"Draw: {p.users:,} entries over the {p.entry_minutes:g} min before the draw closes "
            f"({p.draw_close_seconds} s before the opening), {p.rush_share:.0%} of them in a rush over the last "
            f"{p.rush_minutes:g} min rising to the close, the rest evenly; {p.entry_polls:g} entry look-ups each; "
            f"each page reads the draw record every {p.record_wait_seconds:g} s before the close, then every "
            f"{p.record_poll_seconds:g} s; admitFactor {p.admit_factor}, waveSeconds {p.wave_seconds}."
        )
    if pacing is not None:
        _render_pacing(pacing, out)
    for s in scenarios:
        for note in s.notes:
            out.print(f"{s.name}: {note}")
    counts = _table("Requests per layer")
    counts.add_column("layer")
    for s in scenarios:
        counts.add_column(s.name, justify="right")
    for key, label in LAYERS:
        if key in DRAW_COUNTS and not any(s.counts[key] for s in scenarios):
            continue
        counts.add_row(label, *(f"{s.counts[key]:,.0f}" for s in scenarios))
    _emit(out, counts)

    checks = _table("Peak demand against each quota")
    for column in ("scenario", "layer", "quota", "limit", "peak", "first over", "note"):
        checks.add_column(column)
    for s in scenarios:
        for c in s.checks:
            checks.add_row(
                s.name,
                _layer(c),
                c.quota,
                "-" if c.limit is None else f"{c.limit:,.0f}",
                f"{c.peak:,.1f}",
                _second(c),
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
                f"First wall {s.name}: {_layer(wall)}, {wall.quota}, in second {wall.exceeded_at} "
                f"(peak {wall.peak:,.0f}, {over} the limit)."
            )
    _render_entry(p, scenarios, out)
    _render_waf(p, scenarios, out)

    costs = _table("Dollars per sale (no free tier; a 429 is not billed)")
    for column in ("scenario", "layer", "item", "quantity", "price", "USD", "USD per million presses"):
        costs.add_column(column)
    for s in scenarios:
        presses = s.counts["presses"]
        for line in s.costs:
            costs.add_row(
                s.name,
                line.layer,
                line.item,
                f"{line.quantity:,.2f} {line.unit}",
                _price(line.price),
                _money(line.dollars),
                _money(line.dollars / presses * 1e6),
            )
        costs.add_row(s.name, "total", "", "", "", _money(s.total_dollars), _money(s.total_dollars / presses * 1e6))
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
    out.print("Cost per sale: " + "; ".join(f"{s.name} {_money(s.total_dollars)}" for s in scenarios) + ".")
    out.print(
        "The free tier takes at most "
        + "; ".join(f"{_money(free_tier(s.costs))} off {s.name}" for s in scenarios)
        + " (Lambda's, CloudFront's and SQS's monthly allowances, shared with the account's other use that month)."
    )
    for s in scenarios:
        throttled = s.counts["apigw_throttled"]
        if throttled:
            out.print(
                f"API Gateway's 429s ({s.name}): {throttled:,.0f}, not billed (no AWS page says either way; AWS's "
                f"experts say they are not: {THROTTLED_BILLING}); billed, they would add "
                f"{_money(throttled / 1e6 * figure('price_apigw_http'))}."
            )
    _render_plans(p, fleet, scenarios, out)
    _render_kvs(fleet, out)
    out.print("* the value is not confirmed on AWS's own page (see seckill-capacity --sources)")


def _layer(c: Check) -> str:
    return f"{c.layer} (entry phase)" if c.phase == "entry" else c.layer


def _render_pacing(pacing: Pacing, out: Console) -> None:
    layers = ", ".join(PACED)
    if pacing.rate is None:
        wall = pacing.wall
        where = "" if wall is None else f": {_layer(wall)}, {wall.quota}, in second {wall.exceeded_at}"
        out.print(
            f"admitRate: none keeps {layers} under their quotas in every second, even admitting the first move's "
            f"{pacing.move:,.0f} entrants over an hour{where}."
        )
        return
    sold = pacing.scenario.sold_out_at
    wall = pacing.wall
    next_wall = (
        "it admits the whole first move at once"
        if wall is None
        else f"{pacing.rate + 1:,} meets {_layer(wall)}, {wall.quota}, in second {wall.exceeded_at}"
    )
    out.print(
        f"Recommended admitRate {pacing.rate:,}: the largest that keeps {layers} under their quotas in every second "
        f"of the sale ({next_wall}). The first move's {pacing.move:,.0f} entrants are all admitted "
        + (
            "when the draw closes; "
            if pacing.admission_seconds == 0
            else f"by {pacing.admission_seconds} s after the opening; "
        )
        + ("the stock is never sold out." if sold is None else f"the stock is gone at {sold:.1f} s.")
    )


def _render_entry(p: Profile, scenarios: list[Scenario], out: Console) -> None:
    drawn = [s for s in scenarios if s.entry_even]
    if not drawn:
        return
    table = _table(
        f"The entry phase: a {p.rush_share:.0%} rush in the last {p.rush_minutes:g} min against an even spread"
    )
    for column in (
        "scenario",
        "layer",
        "quota",
        "limit",
        "peak, rush",
        "first over, rush",
        "peak, even",
        "first over, even",
    ):
        table.add_column(column)
    for s in drawn:
        rushed = [c for c in s.checks if c.phase == "entry"]
        for r, e in zip(rushed, s.entry_even, strict=True):
            table.add_row(
                s.name,
                r.layer,
                r.quota,
                "-" if r.limit is None else f"{r.limit:,.0f}",
                f"{r.peak:,.1f}",
                _second(r),
                f"{e.peak:,.1f}",
                _second(e),
            )
    _emit(out, table)
    for s in drawn:
        apigw, concurrency = s.needs["apigw_rps"], s.needs["lambda_concurrency"]
        if apigw > apigw_quota(p)[0] or concurrency > p.concurrency_quota:
            out.print(
                f"The entry phase ({s.name}) goes through without a 429 with API Gateway's account rate at "
                f"{apigw:,.0f} requests/s and Lambda's concurrency at {concurrency:,.0f} (its request rate 10 x "
                f"that): quotas AWS raises on request (--apigw-rps {apigw:.0f} --lambda-concurrency {concurrency:.0f})."
            )
        commits = s.needs["rds_commits"]
        if commits > p.rds_commits:
            out.print(
                f"The entry phase's ({s.name}) peak second stores {commits:,.0f} entries, each a durable commit: over "
                f"the {p.rds_commits:,.0f} commits/s the model takes for the writer (DbInstanceClass, see "
                f"--sources). A larger writer, or one measured to take them through group commit "
                f"(--rds-commits {commits:.0f}), or a gentler rush (--rush-share, --rush-minutes)."
            )


def _second(c: Check) -> str:
    return "-" if c.exceeded_at is None else f"second {c.exceeded_at}"


def _render_waf(p: Profile, scenarios: list[Scenario], out: Console) -> None:
    if not any(s.edge for s in scenarios):
        return
    delay = figure("waf_rate_reaction")
    blind = before_waf(p)
    out.print(
        f"WAF's rate-based rules usually take up to {delay:g} s to act ({FIGURES['waf_rate_reaction'].source}): "
        f"the first {min(delay, p.seconds):g} s of the sale, {blind:.0%} of its presses, arrive before they can; "
        "WAF does not protect the sale's first seconds (an entry phase lasting minutes it can)."
    )


def _render_plans(p: Profile, fleet: Fleet, scenarios: list[Scenario], out: Console) -> None:
    edged = [s for s in scenarios if s.edge]
    if not edged:
        return
    plans = _table(f"CloudFront flat-rate plans against pay-as-you-go ({fleet.sales_per_month:g} sale(s) a month)")
    for column in ("scenario", "requests a month", "pay-as-you-go: requests, transfer, WAF", "flat-rate plan"):
        plans.add_column(column)
    for s in edged:
        choice = plan_choice(s.costs, s.monthly, s.counts["cloudfront_requests"], fleet.sales_per_month, p.bot_control)
        plan = (
            "above Premium's top allowance: custom pricing"
            if choice.plan is None or choice.plan_dollars is None
            else f"{PLAN_NAMES[choice.plan]}, {_money(choice.plan_dollars)} *"
        )
        if choice.spike_of is not None:
            plan += f" (a first month's spike within 3x {PLAN_NAMES[choice.spike_of]}'s allowance)"
        plans.add_row(s.name, f"{choice.requests:,.0f}", _money(choice.pay_as_you_go), plan)
    _emit(out, plans)
    out.print(
        "A plan covers the distribution's requests and transfer and WAF (Bot Control's common bots from Business "
        "up, the rules' CAPTCHA from Pro up; targeted Bot Control not at all), with no overage charges: a first "
        "spike up to 3x the allowance leaves the service as it is that month; sustained excess may be served from "
        "fewer or more distant edge locations. The function's invocations and the store's reads stay priced apart "
        "here. The 250,000 requests/s per distribution quota does not apply to a distribution on a plan ("
        + FIGURES["cloudfront_rps"].source
        + ")."
    )


def _render_kvs(fleet: Fleet, out: Console) -> None:
    lines = kvs_calls(fleet)
    table = _table(
        f"KeyValueStore API calls a month ({fleet.live_vouchers} live vouchers, a sweep every "
        f"{fleet.sweep_minutes:g} min)"
    )
    for column in ("item", "calls", "how", "USD"):
        table.add_column(column)
    for line in lines:
        table.add_row(line.item, f"{line.calls:,.0f}", line.how, _money(line.dollars))
    total = sum(line.calls for line in lines)
    table.add_row("total", f"{total:,.0f}", _price("price_kvs_api_call"), _money(sum(c.dollars for c in lines)))
    _emit(out, table)
    out.print(
        "Assumed: the sweep reads the store in ListKeys pages and writes only what differs (nothing unless a "
        "notice was lost or a sale ended a day ago); each state change and cursor move is written once, by the "
        f"publisher, {assumed('kvs_calls_per_write'):g} calls. Before the sweep compared (every state sent on "
        f"every sweep, read before each write): {calls_before(fleet):,.0f} calls a month."
    )


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


def to_json(profile: Profile, scenarios: list[Scenario], fleet: Fleet, pacing: Pacing | None = None) -> dict[str, Any]:
    kvs: list[Calls] = kvs_calls(fleet)
    return {
        "profile": asdict(profile) | {"total": profile.total, "accepted": profile.accepted},
        "pacing": None
        if pacing is None
        else {
            "admit_rate": pacing.rate,
            "first_move": pacing.move,
            "admission_seconds": pacing.admission_seconds,
            "sold_out_at": pacing.scenario.sold_out_at,
            "next_wall": _wall_json(pacing.wall),
        },
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
                "sold_out_at": s.sold_out_at,
                "entry_even": [asdict(c) for c in s.entry_even],
                "needs": s.needs,
                "free_tier_dollars": free_tier(s.costs),
                "costs": [asdict(c) for c in s.costs],
                "monthly": [asdict(c) for c in s.monthly],
                "total_dollars": s.total_dollars,
                "dollars_per_million_presses": s.total_dollars / s.counts["presses"] * 1e6,
            }
            for s in scenarios
        ],
        "kvs_calls_per_month": {
            "fleet": asdict(fleet),
            "lines": [asdict(c) | {"dollars": c.dollars} for c in kvs],
            "total": sum(c.calls for c in kvs),
            "dollars": sum(c.dollars for c in kvs),
        },
        "figures": [asdict(f) for f in FIGURES.values()],
        "assumptions": [asdict(a) for a in ASSUMPTIONS.values()],
    }


PLOTTED = [  # per_second key, label: one colour each in every panel
    ("cloudfront", "CloudFront"),
    ("apigw", "API Gateway (asked)"),
    ("api_admitted", "SeckillApiFunction"),
    ("authorizer", "authorizer"),
    ("redis_commands", "ElastiCache commands"),
    ("lambda_invocations", "Lambda invocations"),
]


def plot(profile: Profile, scenarios: list[Scenario], path: Path) -> None:
    """Requests per second per layer over the sale, one panel per scenario, quotas drawn."""
    import matplotlib  # an optional dependency: seckill-ops[plot]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(scenarios), figsize=(6 * len(scenarios), 4.5), sharey=True, squeeze=False)
    for ax, s in zip(axes[0], scenarios, strict=True):
        # The edges of each second, the last value repeated so the last second is drawn too.
        edges = list(range(len(s.per_second["arrived"]) + 1))
        for (key, label), color in zip(PLOTTED, ("C0", "C1", "C2", "C3", "C4", "C5"), strict=True):
            values = s.per_second[key]
            if any(values):
                ax.step(edges, [*values, values[-1]], where="post", label=label, color=color)
        if s.edge:
            ax.axhline(
                profile.cloudfront_rps or figure("cloudfront_rps"), linestyle="--", color="C0", label="CloudFront quota"
            )
        ax.axhline(apigw_quota(profile)[0], linestyle=":", color="C1", label="API Gateway quota")
        ax.axhline(lambda_request_rate(profile), linestyle="-.", color="C5", label="Lambda request-rate quota")
        ax.set_yscale("symlog", linthresh=100)
        ax.set_title(s.name)
        ax.set_xlabel("second of the sale")
        ax.legend(fontsize="small")
    axes[0][0].set_ylabel("requests per second")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
