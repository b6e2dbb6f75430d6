"""(7) A draw's press against a race's, in one process, one request at a time.

Two contenders per kind of press, ``SeckillApiFunction``'s handler on both (the
request path's, ``request_path.Paths``):

- ``race``: a race voucher (first come, first served); the press carries the same
  ``authorization`` header, which a race ignores;
- ``draw``: a draw voucher whose first move has admitted every entrant (docs/draw.md):
  the press shows the entrant's pass (``seckill.passes``, signed for its token), the
  function verifies it, and the gate script checks its ticket below the cursor.

Kinds of press: accepted (a fresh user; SQS included, and shown without it) and
duplicate (the user already holds an order). The two contenders take turns of a
twentieth of their presses each, in a rotating order; every press is timed alone
(its answer is checked once the clock has stopped). Then the pass check alone:
``seckill.passes.verify`` on a valid pass, to say what share of the press it is.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from typing import Any

from benchmarks.request_path import TURNS, Paths
from benchmarks.stats import percentile
from benchmarks.testbed import StackInfo, far_id, on_sale_now
from benchmarks.workers import bench_token, outcome, press_event
from seckill import passes, vouchers
from seckill.draw import entries, moves
from seckill.infra.timeutil import to_ms
from seckill_local.lambdas import LocalContext

KINDS = {"accepted": "202", "duplicate": "409 DUPLICATE_ORDER"}
MODES = ("race", "draw")
STOCK = 10_000_000


@dataclasses.dataclass(frozen=True)
class Sizes:
    presses: int  # per contender per kind per round
    rounds: int
    verifies: int  # passes.verify calls per round


class DrawSale:
    """A draw voucher on sale now, ``users`` entered and all admitted by its first move."""

    def __init__(self, paths: Paths, info: StackInfo, users: list[int]) -> None:
        voucher = on_sale_now(
            STOCK,
            title="benchmark draw voucher",
            admission="draw",
            admit_factor=1,
            draw_close_seconds=20,
            wave_seconds=5,
        )
        closes_at = voucher.closes_at
        assert closes_at is not None  # a draw's
        # Made directly (the route wants the close ahead): closed already, so entries are late tickets.
        self.voucher = vouchers.create_seckill_voucher(paths.db, paths.redis, voucher)
        ring = passes.load_ring()
        if ring is None:
            raise RuntimeError("no pass keys: SeckillApiFunction's environment should carry the local ring")
        self.ring = ring
        self.passes: dict[int, str] = {}
        for user in users:
            entry = entries.enter(paths.db, self.voucher, user)
            self.passes[user] = passes.sign(ring, self.voucher, user, bench_token(user), entry.ticket, entry.expires)
        clock = moves.ClockQueue(paths.queue.sqs, info.queues["DrawClockQueue"])
        decided = moves.tick(paths.db, paths.redis, clock, moves.ClockMessage(self.voucher, to_ms(closes_at)))
        if (decided.tick, decided.admitted) != (moves.Tick.MOVED, len(users)):
            raise RuntimeError(f"the draw's first move should admit all {len(users)} entrants: {decided}")


class Presses:
    def __init__(self, info: StackInfo, sizes: Sizes) -> None:
        self.paths = Paths(info)
        self.sizes = sizes
        # Every fresh draw user must be an entrant before the first move: enter them all now.
        self.fresh = {m: [far_id() for _ in range(sizes.presses * sizes.rounds)] for m in MODES}
        self.buyer = {m: far_id() for m in MODES}
        self.sale = DrawSale(self.paths, info, [*self.fresh["draw"], self.buyer["draw"]])
        self.voucher = {"race": self.paths.open_sale, "draw": self.sale.voucher}
        for mode in MODES:  # the duplicate's first order
            answer = self.press(mode, self.buyer[mode], 0)
            if outcome(answer)[0] != "202":
                raise RuntimeError(f"{mode}: the duplicate buyer's first press was {outcome(answer)[0]}")
        self.paths.empty_queue()

    def event(self, mode: str, user: int, n: int) -> dict[str, Any]:
        event = press_event(self.paths.event, self.voucher[mode], user, n)
        headers = event.setdefault("headers", {})
        headers["authorization"] = f"Bearer {bench_token(user)}"
        if mode == "draw":
            headers[passes.PASS_HEADER] = self.sale.passes[user]
        return event

    def press(self, mode: str, user: int, n: int) -> dict[str, Any]:
        fn = self.paths.fn
        answer: dict[str, Any] = self.paths.handler_warm(self.event(mode, user, n), LocalContext(fn.logical_id, 30))
        return answer

    def turn(self, kind: str, mode: str, users: list[int]) -> tuple[list[float], list[float]]:
        """Each press's seconds, with and without its SendMessage; answers checked after the clock."""
        events = [self.event(mode, u, i) for i, u in enumerate(users)]
        seconds, without, answers = self.paths.each_timed(self.paths.handler_warm, events)
        wrong = [label for label in (outcome(a)[0] for a in answers) if label != KINDS[kind]]
        if wrong:
            raise RuntimeError(f"{mode} on {kind}: expected {KINDS[kind]}, got {wrong[0]} ({len(wrong)})")
        return seconds, without

    def round(self, r: int) -> dict[tuple[str, str], dict[str, float]]:
        n, size = self.sizes.presses, max(1, self.sizes.presses // TURNS)
        out: dict[tuple[str, str], dict[str, float]] = {}
        kinds = list(KINDS)
        for kind in kinds[r % 2 :] + kinds[: r % 2]:
            seconds: dict[str, list[float]] = {m: [] for m in MODES}
            without: dict[str, list[float]] = {m: [] for m in MODES}
            for turn, start in enumerate(range(0, n, size)):
                count = min(size, n - start)
                for mode in MODES[(turn + r) % 2 :] + MODES[: (turn + r) % 2]:
                    first = r * n + start
                    users = (
                        self.fresh[mode][first : first + count] if kind == "accepted" else [self.buyer[mode]] * count
                    )
                    took, bare = self.turn(kind, mode, users)
                    seconds[mode] += took
                    without[mode] += bare
                if kind == "accepted":
                    self.paths.empty_queue()
            for mode in MODES:
                out[(kind, mode)] = {
                    "p50_us": percentile(seconds[mode], 50) * 1e6,
                    "p99_us": percentile(seconds[mode], 99) * 1e6,
                    "p50_us_without_transport": percentile(without[mode], 50) * 1e6,
                }
        return out

    def verify_us(self) -> float:
        """µs per ``passes.verify`` of a valid pass (the function's own check, alone)."""
        user = self.buyer["draw"]
        shown, token, voucher, ring = self.sale.passes[user], bench_token(user), self.sale.voucher, self.sale.ring
        n = self.sizes.verifies
        now = time.time()
        started = time.perf_counter()
        for _ in range(n):
            passes.verify(ring, shown, voucher, user, token, now)
        took = time.perf_counter() - started
        if passes.verify(ring, shown, voucher, user, token, now) is None:
            raise RuntimeError("the benchmark's pass does not verify")
        return took / n * 1e6


def run(info: StackInfo, sizes: Sizes) -> dict[str, Any]:
    """In a process of its own (it imports the handler)."""
    presses = Presses(info, sizes)
    rounds: list[dict[tuple[str, str], dict[str, float]]] = []
    verifies: list[float] = []
    for r in range(sizes.rounds):
        rounds.append(presses.round(r))
        verifies.append(presses.verify_us())
        print(f"draw: round {r + 1}/{sizes.rounds} done", file=sys.stderr, flush=True)
    rows = []
    for kind in KINDS:
        for mode in MODES:
            row: dict[str, Any] = {"kind": kind, "mode": mode}
            for field in ("p50_us", "p99_us", "p50_us_without_transport"):
                row[field] = round(statistics.median(rd[(kind, mode)][field] for rd in rounds), 1)
            if mode == "draw":  # ratios of figures taken in the same round, then their median
                row["vs_race"] = {
                    field: round(
                        statistics.median(rd[(kind, "draw")][field] / rd[(kind, "race")][field] for rd in rounds), 3
                    )
                    for field in ("p50_us", "p99_us", "p50_us_without_transport")
                }
            rows.append(row)
    verify = round(statistics.median(verifies), 2)
    accepted = next(r for r in rows if r["kind"] == "accepted" and r["mode"] == "draw")
    return {
        "sizes": dataclasses.asdict(sizes),
        "results": rows,
        "verify_us": verify,
        "verify_share_of_accepted": round(verify / accepted["p50_us"], 4) if accepted["p50_us"] else None,
    }
