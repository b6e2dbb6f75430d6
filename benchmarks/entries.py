"""(9) A draw's entries: the entry route beside a press, and entries per second
against the floor of their writes.

(a) ``SeckillApiFunction``'s handler in one process, one request at a time (as in
(3) and (7)), five contenders taking turns of a twentieth of their calls each, in a
rotating order, each call timed alone (its answer checked once the clock stopped):

- ``enter_early``: ``POST .../entry`` of a fresh user before the draw's close (the
  seed's ticket, under the draw row's shared lock);
- ``enter_late``: the same after the close (numbered by the late sequence);
- ``look_up``: ``GET .../entry`` of an entrant (its ``ahead`` from the tickets'
  arithmetic and the kept counts);
- ``press_accepted``: a race's press by a fresh user (SQS included, and shown without);
- ``press_refused``: a sold-out voucher's press answered by the gate in Redis (the
  sold-out cache off: with it on, the refusal costs a few µs, section (3)).

(b) Entries per second on one draw voucher from ``workers`` long-lived processes
(``benchmarks.workers``, as in (1)), early and late, against the floor: bare PyMySQL
doing the same writes (``benchmarks/entry_floor.py``), in pools of as many
processes. Each phase is a fresh voucher; the four phases of a round run in a
rotating order; the figures are medians of rounds and the ratios medians of the
rounds' own. Every phase is checked in MySQL: one entry per user, the kept count
equal to the entries, the late numbers 1..N without a gap or a repeat. The MySQL and
Redis round trips of each call of (a) are counted in the process (``benchmarks.counters``);
the floor's are its code's (3 before the close, 5 after).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.counters import MysqlRoundTrips
from benchmarks.request_path import TURNS, Paths
from benchmarks.stats import latency_ms, percentile
from benchmarks.testbed import Services, StackInfo, far_id, on_sale_now
from benchmarks.workers import WorkerPool, WorkerResult, entry_event, outcome, press_event
from seckill import vouchers
from seckill.draw import entries
from seckill.infra.db import Database
from seckill_local.checkout import ROOT
from seckill_local.template import Function

CALLS = {  # contender: the answer each of its calls must get
    "enter_early": "200",
    "enter_late": "200",
    "look_up": "200",
    "press_accepted": "202",
    "press_refused": "409 SOLD_OUT",
}
ENTRY_CALLS = ("enter_early", "enter_late", "look_up")
PRESSES = ("press_accepted", "press_refused")
WHEN = ("early", "late")
PHASES = [(side, when) for when in WHEN for side in ("handler", "floor")]
STOCK = 10_000_000
LOOKED_UP = 50  # entrants whose entry the look-ups read, in turn


def floor_function(when: str) -> Function:
    return Function(
        logical_id=f"EntryFloor{when.title()}",
        code_uri=Path(__file__).resolve().parent,
        handler=f"entry_floor.{when}",
        timeout=30,
        environment={},
    )


@dataclasses.dataclass(frozen=True)
class Sizes:
    calls: int  # (a): per contender per round
    entries: int  # (b): per phase (one voucher, all workers)
    workers: int
    rounds: int


def template(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "events" / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def draw_voucher(db: Database, redis: Any, when: str) -> int:
    """A draw voucher taking entries: before its close (which is an hour away), or after
    it (on sale since a minute, closed 20 s before that). No clock: nothing moves."""
    now = datetime.now(UTC)
    fields: dict[str, Any] = {"title": "benchmark draw voucher", "admission": "draw", "admit_factor": 1}
    if when == "early":
        fields |= {"begin_time": now + timedelta(hours=1), "end_time": now + timedelta(hours=3)}
    return vouchers.create_seckill_voucher(
        db, redis, on_sale_now(STOCK, draw_close_seconds=20, wave_seconds=5, **fields)
    )


class Calls:
    """(a): the handler in this process, on each contender's voucher."""

    def __init__(self, info: StackInfo) -> None:
        self.paths = Paths(info)
        self.mysql = MysqlRoundTrips()
        self.trips: dict[str, list[int]] = {c: [0, 0, 0] for c in CALLS}  # calls, MySQL, Redis round trips
        db, redis = self.paths.db, self.paths.redis
        self.voucher = {
            "enter_early": draw_voucher(db, redis, "early"),
            "enter_late": draw_voucher(db, redis, "late"),
            "press_accepted": self.paths.open_sale,
            "press_refused": self.paths.sold_out,
        }
        self.voucher["look_up"] = self.voucher["enter_early"]
        self.entrants = [far_id() for _ in range(LOOKED_UP)]
        for user in self.entrants:
            entries.enter(db, self.voucher["look_up"], user)
        self.templates = {
            "enter": template("seckill_api_enter_draw"),
            "look_up": template("seckill_api_get_entry"),
            "press": self.paths.event,
        }

    def event(self, contender: str, user: int, n: int) -> dict[str, Any]:
        voucher = self.voucher[contender]
        if contender in PRESSES:
            return press_event(self.templates["press"], voucher, user, n)
        return entry_event(self.templates["look_up" if contender == "look_up" else "enter"], voucher, user, n)

    def turn(self, contender: str, first: int, count: int) -> tuple[list[float], list[float]]:
        """``count`` calls, each timed alone, with and without its SendMessage; answers checked after."""
        if contender == "look_up":
            users = [self.entrants[(first + i) % LOOKED_UP] for i in range(count)]
        else:
            users = [far_id() for _ in range(count)]
        events = [self.event(contender, u, first + i) for i, u in enumerate(users)]
        handler = self.paths.handler_cold if contender == "press_refused" else self.paths.handler_warm
        mysql, redis = self.mysql.count, self.paths.round_trips.count
        seconds, without, answers = self.paths.each_timed(handler, events)
        trips = self.trips[contender]
        trips[0] += count
        trips[1] += self.mysql.count - mysql
        trips[2] += self.paths.round_trips.count - redis
        for answer in answers:
            label, data = outcome(answer)
            late = contender == "enter_late"
            if label != CALLS[contender] or (contender in ENTRY_CALLS and data["late"] is not late):
                raise RuntimeError(f"{contender}: expected {CALLS[contender]} (late {late}), got {label} {data}")
        return seconds, without

    def round(self, r: int, n: int) -> dict[str, dict[str, float]]:
        size = max(1, n // TURNS)
        seconds: dict[str, list[float]] = {c: [] for c in CALLS}
        without: dict[str, list[float]] = {c: [] for c in CALLS}
        names = list(CALLS)
        for turn, start in enumerate(range(0, n, size)):
            k = (turn + r) % len(names)
            for contender in names[k:] + names[:k]:
                took, bare = self.turn(contender, r * n + start, min(size, n - start))
                seconds[contender] += took
                without[contender] += bare
            self.paths.empty_queue()
        return {
            c: {
                "p50_us": percentile(seconds[c], 50) * 1e6,
                "p99_us": percentile(seconds[c], 99) * 1e6,
                "p50_us_without_transport": percentile(without[c], 50) * 1e6,
            }
            for c in CALLS
        }


def calls_report(rounds: list[dict[str, dict[str, float]]], trips: dict[str, list[int]]) -> list[dict[str, Any]]:
    """Medians of rounds; each entry call against each press, the median of the rounds'
    ratios; MySQL and Redis round trips per call (counted in the process, every round)."""
    rows = []
    for contender in CALLS:
        calls, mysql, redis = trips[contender]
        row: dict[str, Any] = {
            "contender": contender,
            "mysql_round_trips": round(mysql / calls, 3),
            "redis_round_trips": round(redis / calls, 3),
        }
        for field in ("p50_us", "p99_us", "p50_us_without_transport"):
            row[field] = round(statistics.median(rd[contender][field] for rd in rounds), 1)
        if contender in ENTRY_CALLS:
            row["vs"] = {
                press: {
                    field: round(statistics.median(rd[contender][field] / rd[press][field] for rd in rounds), 3)
                    for field in ("p50_us", "p99_us")
                }
                for press in PRESSES
            }
        rows.append(row)
    return rows


class Rates:
    """(b): the route's handler and the floor, each in a pool of ``workers`` processes."""

    def __init__(self, info: StackInfo, sizes: Sizes) -> None:
        self.stack = Services(info)
        self.sizes = sizes
        env = self.stack.env("SeckillApiFunction")
        fn = self.stack.template.functions["SeckillApiFunction"]
        entry = template("seckill_api_enter_draw")
        self.pools = {
            ("handler", "early"): WorkerPool(fn, env, sizes.workers, entry, make_event=entry_event),
            ("floor", "early"): WorkerPool(floor_function("early"), env, sizes.workers, entry, make_event=entry_event),
            ("floor", "late"): WorkerPool(floor_function("late"), env, sizes.workers, entry, make_event=entry_event),
        }
        self.pools[("handler", "late")] = self.pools[("handler", "early")]

    def close(self) -> None:
        for pool in {id(p): p for p in self.pools.values()}.values():
            pool.close()

    def phase(self, side: str, when: str, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """``n`` fresh users entering one fresh voucher; its summary and its check."""
        voucher = draw_voucher(self.stack.db, self.stack.redis, when)
        base = far_id()
        presses = [(voucher, base + i) for i in range(n)]
        workers = self.sizes.workers
        pool = self.pools[(side, when)]
        pool.prepare([presses[i::workers] for i in range(workers)])
        results = pool.run()
        return summarize(results, n), self.check(voucher, when, n, results)

    def check(self, voucher: int, when: str, n: int, results: list[WorkerResult]) -> dict[str, Any]:
        def read(cursor: Any) -> dict[str, Any]:
            cursor.execute(
                "SELECT COUNT(*) AS entries, COUNT(DISTINCT ticket) AS tickets, COALESCE(SUM(late), 0) AS late,"
                " MIN(ticket) AS first, MAX(ticket) AS last FROM tb_draw_entry WHERE voucher_id = %s",
                (voucher,),
            )
            row = dict(cursor.fetchone())
            cursor.execute(
                "SELECT COALESCE(SUM(entrants), 0) AS n FROM tb_draw_entrants WHERE voucher_id = %s", (voucher,)
            )
            row["counted"] = cursor.fetchone()["n"]
            cursor.execute("SELECT late_count FROM tb_draw_late WHERE voucher_id = %s", (voucher,))
            late = cursor.fetchone()
            row["late_count"] = 0 if late is None else late["late_count"]
            return row

        row = self.stack.db.run(read, read_only=True)
        answered = sum(r.outcomes.get("200", 0) for r in results)
        late = n if when == "late" else 0
        check: dict[str, Any] = {
            "entries": n,
            "answered_200": answered,
            "entries_in_mysql": int(row["entries"]),
            "tickets_distinct": int(row["tickets"]),
            "counted": int(row["counted"]),
            "late_entries": int(row["late"]),
            "late_count": int(row["late_count"]),
        }
        numbered = when == "early" or (row["first"], row["last"]) == (f"1{1:016x}", f"1{n:016x}")
        check["exact"] = (
            answered == n
            and len({check[k] for k in ("entries_in_mysql", "tickets_distinct", "counted")} | {n}) == 1
            and check["late_entries"] == check["late_count"] == late
            and numbered
        )
        return check

    def run(self, progress: Callable[[str], None]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        for side, when in PHASES:  # every worker opens its connections before anything is timed
            self.phase(side, when, 4 * self.sizes.workers)
        rounds: list[dict[tuple[str, str], dict[str, Any]]] = []
        checks = []
        for r in range(self.sizes.rounds):
            figures = {}
            k = r % len(PHASES)
            for side, when in PHASES[k:] + PHASES[:k]:
                summary, check = self.phase(side, when, self.sizes.entries)
                figures[(side, when)] = summary
                checks.append({"round": r + 1, "side": side, "entry": when, **check})
            rounds.append(figures)
            progress(f"entries: rates, round {r + 1}/{self.sizes.rounds} done")
        return rates_report(rounds), checks


def summarize(results: list[WorkerResult], n: int) -> dict[str, Any]:
    wall = max(r.ended for r in results) - min(r.started for r in results)
    return {"entries_per_s": round(n / wall, 1), "latency": latency_ms([x for r in results for x in r.latencies])}


def rates_report(rounds: list[dict[tuple[str, str], dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for side, when in PHASES:
        figures = [rd[(side, when)] for rd in rounds]
        row: dict[str, Any] = {
            "side": side,
            "entry": when,
            "entries_per_s": round(statistics.median(f["entries_per_s"] for f in figures), 1),
            "latency": {q: round(statistics.median(f["latency"][q] for f in figures), 3) for q in ("p50", "p99")},
            "per_round": [f["entries_per_s"] for f in figures],
        }
        if side == "handler":
            row["vs_floor"] = round(
                statistics.median(
                    rd[("handler", when)]["entries_per_s"] / rd[("floor", when)]["entries_per_s"] for rd in rounds
                ),
                3,
            )
        rows.append(row)
    return rows


def run(info: StackInfo, sizes: Sizes) -> dict[str, Any]:
    """In a process of its own (it imports the handler)."""

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    calls = Calls(info)
    rounds = []
    for r in range(sizes.rounds):
        rounds.append(calls.round(r, sizes.calls))
        progress(f"entries: calls, round {r + 1}/{sizes.rounds} done")
    rates = Rates(info, sizes)
    try:
        rows, checks = rates.run(progress)
    finally:
        rates.close()
    return {
        "sizes": dataclasses.asdict(sizes),
        "calls": calls_report(rounds, calls.trips),
        "rates": rows,
        "checks": checks,
    }


def print_entries(report: dict[str, Any], console: Console) -> None:
    table = Table(
        title="(9) A draw's entry route beside a press: SeckillApiFunction's handler, one process, one call at a "
        "time, taking turns (µs, medians of rounds)"
    )
    for col in (
        "call",
        "p50 µs",
        "p99 µs",
        "p50 µs without SQS",
        "p50 / accepted press",
        "p50 / refused press",
        "MySQL / Redis round trips",
    ):
        table.add_column(col, justify="left" if col == "call" else "right")
    for r in report["calls"]:
        vs = r.get("vs")
        table.add_row(
            r["contender"],
            f"{r['p50_us']:,.1f}",
            f"{r['p99_us']:,.1f}",
            f"{r['p50_us_without_transport']:,.1f}",
            f"{vs['press_accepted']['p50_us']:.2f}x" if vs else "",
            f"{vs['press_refused']['p50_us']:.2f}x" if vs else "",
            f"{r['mysql_round_trips']:.2f} / {r['redis_round_trips']:.2f}",
        )
    console.print(table)
    s = report["sizes"]
    table = Table(
        title=f"(9) Entries per second on one draw voucher, {s['workers']} worker processes, {s['entries']:,} "
        "entries a phase: the route's handler vs bare PyMySQL doing the same writes (medians of rounds)"
    )
    for col in ("entry", "side", "entries/s", "p50 ms", "p99 ms", "handler / floor"):
        table.add_column(col, justify="left" if col in {"entry", "side"} else "right")
    for r in report["rates"]:
        table.add_row(
            r["entry"],
            r["side"],
            f"{r['entries_per_s']:,.0f}",
            f"{r['latency']['p50']:,.2f}",
            f"{r['latency']['p99']:,.2f}",
            f"{r['vs_floor']:.2f}x" if "vs_floor" in r else "",
        )
    console.print(table)
    wrong = [c for c in report["checks"] if not c["exact"]]
    console.print(
        f"every phase's entries one per user, counted and numbered exactly in MySQL: {not wrong}"
        + (f" (wrong: {wrong})" if wrong else "")
    )
