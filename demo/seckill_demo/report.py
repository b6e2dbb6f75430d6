"""The main job's report: what happened, and whether the invariants (docs/invariants.md) hold."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from seckill.infra import keys
from seckill.infra.db import Database
from seckill_demo.load import Press, lost, percentiles, promised

# What the status route says of an order MySQL holds.
STORED = ("CONFIRMED", "PAID", "EXPIRED", "CANCELLED")


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Fault:
    """A kind of fault injected by a chaos run, and what absorbed it."""

    fault: str
    injected: int
    absorbed_by: str
    evidence: str


@dataclass
class Report:
    voucher_id: int
    seed: int  # the run's random draws: --seed replays them
    users: int
    stock: int
    presses_per_user: int
    requests: int
    accepted: int
    refusals: dict[str, int]
    errors: int
    wall_seconds: float
    throughput_rps: float
    latency_ms: dict[str, float]
    confirmed: int
    failed: int
    failed_reasons: dict[str, int]
    redis_stock: int | None
    mysql_stock: int | None
    redelivered: int
    reconciliation: dict[str, int] | None  # None: not run (a deployed stack reconciles on its schedule)
    checks: list[Check] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    endpoint: str = ""  # a deployed stack's; empty for a local run
    not_checked: dict[str, str] = field(default_factory=dict)  # invariant -> why it cannot be checked here
    holds: dict[str, int] | None = None  # paid, expired, cancelled, resold, waves...; None: no holds run
    plot: str = ""  # the stock plot's path, or why there is none
    edge: dict[str, Any] | None = None  # what the edge answered and how soon (seckill_demo.edge); None: no edge
    edge_plot: str = ""  # the edge plot's path
    paced_plot: str = ""  # a paced draw's plot of admissions and presses per second (seckill_demo.paced)
    function_time: dict[str, Any] | None = None  # the press route's own time (seckill_demo.timing); None: not measured
    return_lag: dict[str, Any] | None = None  # payBy -> the unit back on sale (seckill_demo.holds.return_lag)
    draw: dict[str, Any] | None = None  # entrants, admitted, moves... (seckill_demo.draw); None: a race

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def press_figures(presses: list[Press], wall: float) -> dict[str, Any]:
    """The report's figures about the presses themselves."""
    return {
        "requests": len(presses),
        "accepted": len(promised(presses)),  # a press that resumed an earlier one's order has the same id
        "refusals": dict(Counter(p.code or str(p.status) for p in presses if 400 <= p.status < 500)),
        "errors": sum(p.status == 0 or p.status >= 500 for p in presses),
        "wall_seconds": wall,
        "throughput_rps": len(presses) / wall if wall else 0.0,
        "latency_ms": percentiles([p.latency_ms for p in presses]),
    }


@dataclass(frozen=True)
class Outcome:
    """What MySQL and Redis hold for the voucher once everything has settled."""

    orders: dict[int, int]  # order id -> user id
    rejected: set[int]
    mysql_stock: int
    redis_stock: int
    pending: int

    @classmethod
    def read(cls, db: Database, redis: Any, voucher_id: int) -> Outcome:
        def read(cursor: Any) -> tuple[dict[int, int], set[int], int]:
            cursor.execute("SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
            orders = {int(r["id"]): int(r["user_id"]) for r in cursor.fetchall()}
            cursor.execute("SELECT order_id FROM tb_voucher_order_rejection WHERE voucher_id = %s", (voucher_id,))
            rejected = {int(r["order_id"]) for r in cursor.fetchall()}
            cursor.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", (voucher_id,))
            return orders, rejected, int(cursor.fetchone()["stock"])

        orders, rejected, mysql_stock = db.run(read, read_only=True)
        return cls(
            orders, rejected, mysql_stock, int(redis.get(keys.stock(voucher_id))), redis.hlen(keys.pending(voucher_id))
        )


def check_invariants(
    outcome: Outcome,
    presses: list[Press],
    statuses: Counter[str],
    *,
    stock: int,
    users: int,
    chaos: bool,
    closed: int = 0,
) -> list[Check]:
    """The invariants, from the clients' answers and the stores' final state.

    In a chaos run presses fail on purpose, so fewer than the stock may sell;
    every other invariant holds exactly as in a clean run. ``closed`` orders
    (expired or cancelled) gave their unit back: it was sold again.
    """
    accepted = [p for p in presses if p.status == 202]
    promised: dict[int, set[int]] = {}  # order id -> users answered 202 with it
    for p in accepted:
        promised.setdefault(int(p.order_id or 0), set()).add(p.user_id)
    orders, rejected = outcome.orders, outcome.rejected
    per_user = Counter(orders.values())
    ids_per_user = Counter(user for users_ in promised.values() for user in users_)
    missing = [i for i in promised if i not in orders and i not in rejected]
    both = [i for i in orders if i in rejected]
    shared = [i for i, holders in promised.items() if len(holders) > 1]
    # A press whose answer was lost (a 5xx but TRY_AGAIN, none at all) promised nothing: its order may stand.
    unanswered = {p.user_id for p in presses if lost(p)}
    unpromised = [i for i, user in orders.items() if user not in promised.get(i, set())]
    unseen = [i for i in unpromised if orders[i] in unanswered]
    unpromised = [i for i in unpromised if orders[i] not in unanswered]
    confirmed_202 = sum(i in orders for i in promised)
    max_orders = max(per_user.values(), default=0)
    max_ids = max(ids_per_user.values(), default=0)
    held = len(orders) - closed
    stored = sum(statuses.get(state, 0) for state in STORED)
    again = f" + {closed} returned" if closed else ""

    checks = [
        Check(
            "never oversold",
            held <= stock and outcome.redis_stock >= 0 and outcome.mysql_stock >= 0,
            f"{held} confirmed and not closed of stock {stock}; Redis stock {outcome.redis_stock}, "
            f"MySQL stock {outcome.mysql_stock}",
        ),
        Check(
            "no more 202s than stock",
            len(promised) <= stock + closed,
            f"{len(promised)} order ids answered 202 ({len(accepted)} answers: a retry may resume its order) "
            f"for stock {stock}{again}",
        ),
        Check(
            "one order per user",
            max_orders <= 1 and max_ids <= 1,
            f"max orders per user {max_orders}, max order ids answered 202 per user {max_ids}",
        ),
        Check(
            "every 202 decided, none lost, none both",
            not missing and not both and not shared,
            f"{len(missing)} lost, {len(both)} both confirmed and failed, {len(shared)} ids given to two users",
        ),
        Check(
            "a 503 leaves no order",
            not unpromised,
            f"{len(unpromised)} confirmed orders whose user was never answered 202 with their id"
            # Named, so that the runner's logs (--logs) can be searched for them.
            + "".join(f"; order {i} of user {orders[i]}" for i in unpromised[:3])
            + (f"; {len(unseen)} more of users whose answer was lost (a 5xx, none)" if unseen else ""),
        ),
        Check("no reservation left pending", outcome.pending == 0, f"{outcome.pending} pending marks in Redis"),
        Check(
            "Redis stock equals MySQL stock",
            outcome.redis_stock == outcome.mysql_stock,
            f"{outcome.redis_stock} vs {outcome.mysql_stock}",
        ),
        Check(
            "status route agrees",
            stored == confirmed_202 and stored + statuses.get("FAILED", 0) == len(promised),
            ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) or "no orders",
        ),
    ]
    if not chaos:
        expected = min(stock, users)
        checks.insert(
            1,
            Check(
                "sold exactly the stock",
                len(promised) == expected + closed and held == expected,
                f"{len(promised)} accepted, {len(orders)} confirmed"
                + (f" ({closed} of them closed: their units went back on sale)" if closed else "")
                + f", expected {expected} held",
            ),
        )
    return checks


# What a client of a deployed stack cannot see, and why.
NOT_CHECKED_FROM_OUTSIDE = {
    "no reservation left pending": "the pending marks are in Redis, which only the stack's VPC reaches",
    "Redis stock equals MySQL stock": "Redis is private to the VPC: only MySQL's stock is listed",
    "never both confirmed and failed": "the status route gives one status; the order and rejection tables "
    "are in MySQL, which only the VPC reaches",
}


def check_from_outside(
    presses: list[Press],
    statuses: dict[int, tuple[str, str | None]],
    listed_stock: int | None,
    *,
    stock: int,
    users: int,
) -> list[Check]:
    """The invariants a client can check: from the answers to its presses, the status
    route's answer for every order id it was given, and the voucher's stock in MySQL
    as the voucher list shows it (each confirmed order took one unit of it)."""
    promised: dict[int, set[int]] = {}  # order id -> users answered 202 with it
    for p in presses:
        if p.status == 202:
            promised.setdefault(int(p.order_id or 0), set()).add(p.user_id)
    ids_per_user = Counter(user for holders in promised.values() for user in holders)
    max_ids = max(ids_per_user.values(), default=0)
    shared = [i for i, holders in promised.items() if len(holders) > 1]
    seen = Counter(status for status, _ in statuses.values())
    confirmed = seen["CONFIRMED"]
    undecided = len(statuses) - confirmed - seen["FAILED"]
    sold = None if listed_stock is None else stock - listed_stock
    listed = "the voucher is not on the list" if listed_stock is None else f"MySQL stock {listed_stock} (voucher list)"
    expected = min(stock, users)
    return [
        Check("never oversold", sold is not None and 0 <= sold <= stock, f"{sold} sold of stock {stock}; {listed}"),
        Check(
            "sold exactly the stock",
            len(promised) == expected and sold == expected,
            f"{len(promised)} accepted, {sold} sold, expected {expected}",
        ),
        Check("no more 202s than stock", len(promised) <= stock, f"{len(promised)} order ids answered 202"),
        Check(
            "one order per user",
            max_ids <= 1 and sold == confirmed,
            f"max order ids answered 202 per user {max_ids}; no order beyond those (sold {sold}, "
            f"confirmed {confirmed})",
        ),
        Check(
            "every 202 decided, none lost",
            undecided == 0 and not shared,
            ", ".join(f"{k} {v}" for k, v in sorted(seen.items())) + f"; {len(shared)} ids given to two users",
        ),
        Check(
            "a 503 leaves no order",
            sold == confirmed,
            f"{sold} units sold in MySQL, {confirmed} of them to orders answered 202",
        ),
    ]


def ms(value: float | None) -> str:
    return "never" if value is None else f"{value:,.0f} ms"


def edge_rows(table: Table, edge: dict[str, Any]) -> None:
    """The edge's figures (``seckill_demo.edge.edge_figures``)."""
    table.add_row("edge: answered / reached the function", f"{edge['answered']:,} / {edge['forwarded']:,}")
    table.add_row(
        "edge: share of presses / of refusals",
        f"{edge['share_of_presses']:.1%} / {edge['share_of_refusals']:.1%}",
    )
    table.add_row(
        "edge: the first second (from the first press), reached the function",
        f"{edge['first_second_forwarded']:,} of {edge['first_second']:,}",
    )
    table.add_row(
        "edge: share of presses after sell-out",
        f"{edge['share_after_sellout']:.1%} of {edge['presses_after_sellout']:,}",
    )
    if edge["share_settled_after_sellout"] is not None:
        table.add_row(
            "edge: share of presses sent 200 ms or more after sell-out",
            f"{edge['share_settled_after_sellout']:.1%} of {edge['presses_settled_after_sellout']:,}",
        )
    table.add_row("edge: SOLD_OUT lag (last 202 -> first at the edge)", ms(edge["flag_lag_ms"]))
    table.add_row(
        "edge: SOLD_OUT lag (Redis stock 0 -> the store), sell-outs",
        f"{ms(edge['flag_lag_sampled_ms'])}, {edge['sellouts_flagged']} of {edge['sellouts']} flagged",
    )
    if edge["returns"]:
        table.add_row(
            "edge: units back (while flagged) / flag cleared, within",
            f"{edge['returns']} ({edge['returns_flagged']}) / {edge['returns_cleared']}, {ms(edge['clear_lag_ms'])}",
        )


def function_time_rows(table: Table, timing: dict[str, Any]) -> None:
    """The function's own time (``seckill_demo.timing.function_time``), and what bounds the client's."""
    own = timing["handler_ms"]
    table.add_row(
        "function's own time, press route p50 / p99 / max",
        f"{own['p50']:.2f} / {own['p99']:.2f} / {own['max']:.2f} ms over {timing['invocations']:,} invocations",
    )
    table.add_row("client-side latency: bounded by", timing["bound"])


def return_lag_rows(table: Table, lag: dict[str, Any]) -> None:
    """How late units came back (``seckill_demo.holds.return_lag``)."""
    table.add_row(
        "units back after payBy p50 / p99 / max",
        f"{lag['p50']:,.0f} / {lag['p99']:,.0f} / {lag['max']:,.0f} ms over {lag['expired']:,} expired",
    )


def draw_rows(table: Table, draw: dict[str, Any]) -> None:
    """A draw sale's figures (``seckill_demo.draw.draw_figures``); locally the tickets may show."""
    table.add_row(
        "draw: entrants (late) / never entered",
        f"{draw['entrants']:,} ({draw['late_entrants']:,}) / {draw['without_entry']:,}"
        + (
            ""
            if (draw["record_entrants"], draw["record_late_entrants"]) == (draw["entrants"], draw["late_entrants"])
            else f"; the record says {draw['record_entrants']} ({draw['record_late_entrants']})"
        ),
    )
    table.add_row(
        f"draw: admitted (late) / cursor moves, admitFactor {draw['admit_factor']}",
        f"{draw['admitted']:,} ({draw['admitted_late']:,}) / {draw['moves']}",
    )
    first = draw["first_second"]
    share = f"{draw['first_second_at_edge'] / first:.1%}" if first else "-"
    late = draw["first_second_after_opening_s"]
    table.add_row(
        "draw: first second at the edge" + (f" ({late:.1f} s after the opening)" if late >= 1 else ""),
        f"{draw['first_second_at_edge']:,} of {first:,} ({share})",
    )
    table.add_row(
        "draw: presses at the function / admitted x presses",
        f"{draw['reached_function']:,} / {draw['budget']:,}",
    )
    table.add_row(
        "draw: winners' highest ticket / cursor then",
        f"{draw['highest_winning_ticket'] or '-'} / {draw['cursor_at_that_win'] or '-'}",
    )
    table.add_row("draw: first cursor / final cursor", f"{draw['first_move'] or '-'} / {draw['final_cursor'] or '-'}")
    paced = draw.get("paced")
    if paced is not None:
        table.add_row(
            f"draw: paced at admitRate {paced['admit_rate']:,}: steps / admission took",
            f"{paced['steps']} / {paced['admission_seconds']:.0f} s",
        )
        table.add_row(
            "draw: most admitted in a second / admitRate", f"{paced['peak_admitted']:,} / {paced['admit_rate']:,}"
        )
        table.add_row(
            "draw: most presses at the function in a second / bound",
            f"{paced['peak_function']:,} / {paced['press_bound']:,.0f}",
        )
    lag = draw.get("first_move_after_close_s")
    table.add_row("draw: first move recorded after the close", "never" if lag is None else f"{lag:.1f} s")


def render(report: Report, console: Console | None = None) -> None:
    out = console or Console()
    table = Table(
        title=f"Flash sale: voucher {report.voucher_id}, stock {report.stock}, "
        f"{report.users:,} users x {report.presses_per_user} presses"
        + (f" at {report.endpoint}" if report.endpoint else ""),
        show_header=False,
    )
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("requests", f"{report.requests:,}")
    table.add_row("accepted (202)", f"{report.accepted:,}")
    for code, count in sorted(report.refusals.items()):
        table.add_row(f"refused {code}", f"{count:,}")
    table.add_row("errors (5xx, network)", f"{report.errors:,}")
    source = "by the status route" if report.endpoint else "in MySQL"
    table.add_row(f"orders {source}: confirmed", f"{report.confirmed:,}")
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(report.failed_reasons.items()))
    table.add_row(f"orders {source}: failed", f"{report.failed:,}" + (f" ({reasons})" if reasons else ""))
    rec = report.reconciliation
    if rec is not None:
        table.add_row("reconciled: re-queued / failed", f"{rec.get('requeued', 0)} / {rec.get('failed', 0)}")
        table.add_row("reconciled: repaired", f"{rec.get('repaired', 0)}")
        table.add_row(
            "reconciled: holds expired / units given back", f"{rec.get('expired', 0)} / {rec.get('returned', 0)}"
        )
    table.add_row("re-delivered, changed nothing", f"{report.redelivered:,}")
    if report.holds is not None:
        h = report.holds
        table.add_row("holds: paid / expired / cancelled", f"{h['paid']:,} / {h['expired']:,} / {h['cancelled']:,}")
        table.add_row("holds: never paid (no-shows) / still payable", f"{h['no_shows']:,} / {h['payable']:,}")
        table.add_row("units resold / waves", f"{h['resold']:,} / {h['waves']}")
        table.add_row("payments sent twice (same paymentId)", f"{h['same_payment_again']:,}")
        table.add_row(
            "answers lost: orders found through my-order / paid",
            f"{h['answers_lost']:,}: {h['orders_found']:,} / {h['found_paid']:,}",
        )
    if report.redis_stock is None:
        table.add_row("MySQL stock (voucher list)", f"{report.mysql_stock}")
    else:
        table.add_row("Redis stock / MySQL stock", f"{report.redis_stock} / {report.mysql_stock}")
    table.add_row("throughput", f"{report.throughput_rps:,.0f} req/s over {report.wall_seconds:.2f} s")
    lat = report.latency_ms
    table.add_row(
        "client-side latency p50 / p95 / p99 / max",
        f"{lat['p50']:.1f} / {lat['p95']:.1f} / {lat['p99']:.1f} / {lat['max']:.1f} ms",
    )
    if report.function_time is not None:
        function_time_rows(table, report.function_time)
    if report.return_lag is not None:
        return_lag_rows(table, report.return_lag)
    if report.edge is not None:
        edge_rows(table, report.edge)
    if report.draw is not None:
        draw_rows(table, report.draw)
    table.add_row("seed", str(report.seed))
    out.print(table)
    for plot in (report.plot, report.edge_plot, report.paced_plot):
        if plot:
            out.print(plot, soft_wrap=True)  # a path must stay whole to be copied
    if report.faults:
        faults = Table(title="Faults injected")
        for column in ("fault", "injected", "absorbed by", "evidence"):
            faults.add_column(column, justify="right" if column == "injected" else "left")
        for f in report.faults:
            faults.add_row(f.fault, f"{f.injected:,}", f.absorbed_by, f.evidence)
        out.print(faults)
    checks = Table(title="Invariants")
    checks.add_column("")
    checks.add_column("invariant")
    checks.add_column("evidence")
    for c in report.checks:
        checks.add_row("[green]PASS[/]" if c.ok else "[red]FAIL[/]", c.name, c.detail)
    out.print(checks)
    if report.not_checked:
        unseen = Table(title="Not checked from outside the stack")
        unseen.add_column("invariant")
        unseen.add_column("why")
        for name, why in report.not_checked.items():
            unseen.add_row(name, why)
        out.print(unseen)
    if report.ok:
        out.print("[bold green]All invariants hold.[/]")
    else:
        out.print(f"[bold red]Invariants violated:[/] replay with --seed {report.seed}")
