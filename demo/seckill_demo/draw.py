"""A draw sale in the main job (``--admission draw``): the users enter before the draw
closes (``--late`` of them after it), a few press without ever entering, and at the
opening the crowd presses with its passes through the local edge; with holds, each
later wave is the entrants a move of the cursor admitted. After the sale is stopped
(which reveals the seed), ``draw_figures`` and ``check_draw`` read the public draw
record and say who was admitted when, what reached the function, and whether every
winner's and a sample of losers' audit (``seckill-draw verify``'s core) passes."""

from __future__ import annotations

import bisect
import json
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import urllib3
from rich.progress import Progress

from seckill_demo.faults import rng
from seckill_demo.load import TRY_AGAIN_RETRIES, Press
from seckill_demo.report import Check
from seckill_demo.sale import LocalSale
from seckill_ops.draw import audit, fetch_record

# How near a move's `at` the edge forwards a press rather than pick a cursor (the clock skew it allows).
EDGE_SKEW = 1.0
# The entry phase is planned from the pace a sample of the users (2%, within these bounds)
# enters a calibration draw at, with this much to spare: the machine may slow down.
CALIBRATION = (50, 400)
ENTRY_MARGIN = 1.5
PASSLESS = 0.01  # share of the users who press without ever entering: no pass, refused at the edge
LOSERS_AUDITED = 200  # losers audited beside every winner
EDGE_SHARE = 0.97  # the share of the presses the edge must answer, first second included...
FUNCTION_SHARE = 0.03  # ...where the first move's admitted (admitFactor x stock) press at most this share of them
# A record read before the stop may be served for 2 s more (docs/draw.md, "The public record").
REVEALED_WITHIN = 5.0


@dataclass(frozen=True)
class Entry:
    """What the entry route gave a user."""

    ticket: str
    late: bool
    pass_: str


def enter(
    http: urllib3.PoolManager,
    url: str,
    voucher_id: int,
    tokens: dict[int, str],
    concurrency: int,
    progress: Progress,
    what: str,
    until: float = float("inf"),
) -> dict[int, Entry]:
    """Every user of ``tokens`` enters the draw (POST .../entry), ``concurrency`` at a time,
    but those whose turn comes after ``until`` (epoch seconds); 503 TRY_AGAIN is tried
    again as the client app does."""
    route = f"{url}/voucher-order/seckill/{voucher_id}/entry"
    task = progress.add_task(what, total=len(tokens))

    def one(user_id: int) -> tuple[int, Entry | None]:
        if time.time() > until:
            progress.advance(task)
            return user_id, None
        for _ in range(TRY_AGAIN_RETRIES + 1):
            response = http.request("POST", route, headers={"authorization": tokens[user_id]})
            if response.status == 200:
                data = json.loads(response.data)["data"]
                progress.advance(task)
                return user_id, Entry(str(data["ticket"]), bool(data["late"]), str(data["pass"]))
            if response.status != 503:
                raise RuntimeError(f"user {user_id}'s entry was answered {response.status}: {response.data[:200]!r}")
            time.sleep(0.2)
        raise RuntimeError(f"user {user_id}'s entry was answered 503 {TRY_AGAIN_RETRIES + 1} times")

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return {user: entry for user, entry in pool.map(one, list(tokens)) if entry is not None}


def entry_budget(sale: LocalSale, tokens: dict[int, str], progress: Progress) -> float:
    """How long the entries before the close may take (``--entry-seconds``' default), from the
    rate this machine takes them at now: a sample of the users enters a calibration draw,
    which is then stopped."""
    args = sale.args
    sample = sorted(tokens)[: max(CALIBRATION[0], min(CALIBRATION[1], len(tokens) // 50))]
    args.entry_seconds = 3600.0  # the calibration draw is never opened
    sale.create_voucher("the entries' pace, measured")
    started = time.monotonic()
    enter(sale.http, sale.user_url, sale.voucher_id, {u: tokens[u] for u in sample}, args.concurrency, progress,
          "measuring the entries")  # fmt: skip
    rate = len(sample) / (time.monotonic() - started)
    sale.admin.stop(sale.voucher_id)
    early = len(split_users(sorted(tokens), args.late, args.seed)[0])
    budget = max(10.0, ENTRY_MARGIN * early / rate)
    progress.console.print(f"{rate:,.0f} entries a second here now: {budget:,.0f} s for the entries before the close")
    return budget


def split_users(users: list[int], late: float, seed: int) -> tuple[list[int], list[int], list[int]]:
    """(who enter before the close, who enter after it, who never enter), drawn from ``seed``."""
    shuffled = list(users)
    rng(seed, "draw-users").shuffle(shuffled)
    passless = round(len(users) * PASSLESS)
    late_count = round((len(users) - passless) * late)
    return (
        sorted(shuffled[passless + late_count :]),
        sorted(shuffled[passless : passless + late_count]),
        sorted(shuffled[:passless]),
    )


def open_draw(
    sale: LocalSale,
    tokens: dict[int, str],
    progress: Progress,
    at_close: Callable[[float], None] | None = None,
) -> tuple[dict[int, Entry], list[int]]:
    """The entry phase, through the edge as the users would: most enter before the draw closes,
    ``--late`` of them after it, a few never; then the wait for the opening. (the entries, who
    never entered); every entrant's pass is the sale's from then on. ``at_close`` (a chaos
    run's faults at the close) is called with the close (epoch seconds) before it and
    returns once it has passed."""
    args = sale.args
    early, late, passless = split_users(sorted(tokens), args.late, args.seed)
    closes = sale.opens_at - args.draw_close

    def entered(users: list[int], what: str) -> dict[int, Entry]:
        # Nobody starts entering within a second of the opening: the presses begin then.
        return enter(sale.http, sale.user_url, sale.voucher_id, {u: tokens[u] for u in users}, args.concurrency,
                     progress, what, until=sale.opens_at - 1)  # fmt: skip

    entries = entered(early, "entering the draw")
    if time.time() > closes:
        progress.console.print(
            f"[yellow]the entries took {time.time() - closes:.0f} s past the draw's close[/]: the last of them are "
            "late entries (a longer --entry-seconds keeps them in the draw)"
        )
    if at_close is not None:
        at_close(closes)
    time.sleep(max(0.0, closes - time.time()))
    entries |= entered(late, "late entries")
    if len(entries) < len(early) + len(late):
        progress.console.print(
            f"[yellow]{len(early) + len(late) - len(entries):,} users could not enter before the opening[/]: they "
            "press without a pass (a longer --entry-seconds or --draw-close lets them in)"
        )
        passless = sorted(set(tokens) - set(entries))
    progress.console.print(
        f"{len(entries):,} entered ({sum(e.late for e in entries.values()):,} late), {len(passless)} never did; "
        f"the sale opens in {max(0.0, sale.opens_at - time.time()):.1f} s"
    )
    time.sleep(max(0.0, sale.opens_at - time.time()))
    sale.passes = {u: e.pass_ for u, e in entries.items()}
    return entries, passless


def revealed_record(sale: LocalSale) -> dict[str, Any]:
    """The draw record once it shows the seed the stop revealed (or as it is after
    ``REVEALED_WITHIN``), read where buyers read it."""
    deadline = time.monotonic() + REVEALED_WITHIN
    while True:
        record = fetch_record(sale.user_url, sale.voucher_id, sale.http)
        if record.get("seed") is not None or time.monotonic() >= deadline:
            return record
        time.sleep(0.2)


def admitted_crowd(
    sale: LocalSale, tokens: dict[int, str], entries: dict[int, Entry], patience: float, again: Counter[int]
) -> Callable[[object], dict[int, str]]:
    """A draw's later waves (``HoldsRun``'s crowd): the entrants a move of the cursor admitted
    since they last pressed, as a waiting client learns it from the draw record. Once every
    entrant is admitted, no move can admit more: the admitted who hold no order press again,
    as buyers waiting for a unit to come back would (``again`` counts each such wave per user:
    ``--presses`` more presses of theirs may reach the function)."""
    pressed = Cursor(fetch_record(sale.user_url, sale.voucher_id, sale.http)).admitted(entries)

    def crowd(_: object) -> dict[int, str]:
        fresh = newly_admitted(lambda: fetch_record(sale.user_url, sale.voucher_id, sale.http), entries, pressed,
                               patience)  # fmt: skip
        if not fresh and everyone_admitted(fetch_record(sale.user_url, sale.voucher_id, sale.http), entries):
            fresh = set(entries) - holders(sale)
            again.update(fresh)
        pressed.update(fresh)
        return {u: tokens[u] for u in sorted(fresh)}

    return crowd


def everyone_admitted(record: dict[str, Any], entries: dict[int, Entry]) -> bool:
    return len(Cursor(record).admitted(entries)) == len(entries)


def holders(sale: LocalSale) -> set[int]:
    """The users holding an order of the sale's voucher (one order per user: they cannot buy again)."""

    def read(cursor: Any) -> set[int]:
        cursor.execute("SELECT user_id FROM tb_voucher_order WHERE voucher_id = %s", (sale.voucher_id,))
        return {int(r["user_id"]) for r in cursor.fetchall()}

    return sale.db.run(read, read_only=True)


def epoch(at: Any) -> float:
    """A time of the draw record (ISO-8601) in epoch seconds."""
    return datetime.fromisoformat(str(at)).timestamp()


class Cursor:
    """The cursor's moves from the draw record: which was in effect when."""

    def __init__(self, record: dict[str, Any]) -> None:
        moves = sorted((epoch(m["at"]), str(m["cursor"])) for m in record.get("cursorHistory") or [])
        self.ats = [at for at, _ in moves]
        self.cursors = [c for _, c in moves]

    def at(self, when: float) -> str | None:
        """The cursor in effect at ``when`` (epoch seconds); None before the first move."""
        i = bisect.bisect_right(self.ats, when)
        return self.cursors[i - 1] if i else None

    def near_move(self, start: float, end: float, skew: float) -> bool:
        """A move within ``skew`` seconds of [start, end]: the edge may forward what it saw then,
        not knowing which cursor applies."""
        return any(start - skew <= at <= end + skew for at in self.ats)

    def admitted(self, entries: dict[int, Entry]) -> set[int]:
        final = self.cursors[-1] if self.cursors else None
        return {u for u, e in entries.items() if final is not None and e.ticket < final}


def newly_admitted(
    read_record: Callable[[], dict[str, Any]], entries: dict[int, Entry], pressed: set[int], patience: float
) -> set[int]:
    """Wait (up to ``patience`` seconds) for a move that admits entrants who have not pressed since
    being admitted (``pressed``) and is in effect, as a waiting client reads the draw record; them."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        cursor = Cursor(read_record())
        now = cursor.at(time.time())
        fresh = {u for u, e in entries.items() if now is not None and e.ticket < now and u not in pressed}
        if fresh or (now is not None and all(e.ticket < now for e in entries.values())):
            return fresh  # none left to admit: no move will come
        time.sleep(0.5)
    return set()


@dataclass(frozen=True)
class DrawRun:
    """What the draw sale's figures and checks need beyond the presses."""

    voucher_id: int
    record: dict[str, Any]  # the draw record, read once the seed was revealed
    entries: dict[int, Entry]
    passless: list[int]
    opened: float  # epoch seconds of beginTime
    offset: float  # time.time() - time.monotonic(): a press's sent time in epoch seconds
    factor: int
    stock: int
    presses_per_user: int
    skew: float  # how near a move the edge may forward a press it cannot place
    again: Counter[int] = field(default_factory=Counter)  # admitted users asked to press again (admitted_crowd)
    rate: int | None = None  # a paced draw's admitRate

    def seen(self, press: Press) -> tuple[float, float]:
        """When the edge may have seen the press (epoch seconds): between its sending and its
        answer, as a press can wait on the way (for a connection, for a core)."""
        sent = press.sent + self.offset
        return sent, sent + press.latency_ms / 1000

    def near_move(self, press: Press) -> bool:
        """The edge may have seen the press within its skew of a move: it may forward it."""
        return Cursor(self.record).near_move(*self.seen(press), self.skew)

    def crowd_start(self, presses: list[Press]) -> float:
        """When the crowd's first second begins (epoch seconds): the opening, or the first
        press if the entries ran past the opening."""
        return max(self.opened, min((p.sent + self.offset for p in presses), default=self.opened))


def move_marks(run: DrawRun, started: float) -> list[tuple[float, str]]:
    """The opening and the cursor's moves, in seconds since ``started`` (epoch), for the edge plot."""
    cursor = Cursor(run.record)
    marks = [(run.opened - started, "the sale opens")]
    marks += [(at - started, f"cursor {c[:5]}..") for at, c in zip(cursor.ats, cursor.cursors, strict=True)]
    return marks


def winners(presses: list[Press]) -> dict[int, Press]:
    """User -> the first press answered 202."""
    won: dict[int, Press] = {}
    for p in sorted((p for p in presses if p.status == 202), key=lambda p: p.sent):
        won.setdefault(p.user_id, p)
    return won


def draw_figures(run: DrawRun, presses: list[Press]) -> dict[str, Any]:
    """The report's figures about the draw (``seckill_demo.report.draw_rows``)."""
    cursor = Cursor(run.record)
    admitted = cursor.admitted(run.entries)
    start = run.crowd_start(presses)
    first = [p for p in presses if p.status and 0 <= p.sent + run.offset - start < 1]
    won = winners(presses)
    at_win = {u: cursor.at(p.sent + run.offset + p.latency_ms / 1000) or "" for u, p in won.items()}
    highest = max(won, key=lambda u: run.entries[u].ticket, default=None)
    forwarded = [p for p in presses if p.status and not p.edge]
    return {
        "entrants": len(run.entries),
        "late_entrants": sum(e.late for e in run.entries.values()),
        "record_entrants": run.record.get("entrants"),
        "record_late_entrants": run.record.get("lateEntrants"),
        "without_entry": len(run.passless),
        "admitted": len(admitted),
        "admitted_late": sum(run.entries[u].late for u in admitted),
        "moves": len(cursor.cursors),
        "first_move": cursor.cursors[0] if cursor.cursors else None,
        "final_cursor": cursor.cursors[-1] if cursor.cursors else None,
        "admit_factor": run.factor,
        "first_second_after_opening_s": start - run.opened,
        "first_second": len(first),
        "first_second_at_edge": sum(p.edge for p in first),
        "reached_function": len(forwarded),
        "budget": (len(admitted) + sum(run.again[u] for u in admitted)) * run.presses_per_user,
        "winners": len(won),
        "highest_winning_ticket": None if highest is None else run.entries[highest].ticket,
        "cursor_at_that_win": None if highest is None else at_win[highest],
    }


def stray_detail(run: DrawRun, press: Press) -> str:
    """Where a stray press stands: its user and answer, and when it was sent and answered
    against the opening and the nearest move."""
    sent, answered = run.seen(press)
    nearest = min(Cursor(run.record).ats, key=lambda at: abs(at - sent), default=None)
    move = "" if nearest is None else f", the nearest move at {nearest - run.opened:+.3f} s"
    return (
        f"user {press.user_id} ({press.status} {press.code or ''}) sent at {sent - run.opened:+.3f} s, "
        f"answered at {answered - run.opened:+.3f} s from the opening{move}"
    )


def check_draw(
    run: DrawRun, presses: list[Press], figures: dict[str, Any], orders: dict[int, int], seed: int
) -> list[Check]:
    """Invariant 7 as the main job sees it, the audit of winners and losers, and the issue's
    figure: only admitted entrants' presses reach the function, and the edge answers the rest."""
    cursor = Cursor(run.record)
    won = winners(presses)
    below = [
        u
        for u, p in won.items()
        if u in run.entries and run.entries[u].ticket < (cursor.at(p.sent + run.offset + p.latency_ms / 1000) or "")
    ]
    passless = set(run.passless)
    unpassed = sorted({u for u in orders.values() if u not in run.entries} | (passless & set(won)))
    passless_answers = [p for p in presses if p.user_id in passless]
    no_pass = sum(p.status == 403 and p.code == "NO_PASS" for p in passless_answers)

    losers = sorted(set(run.entries) - set(won))
    sample = rng(seed, "audited-losers").sample(losers, min(LOSERS_AUDITED, len(losers)))
    audited = [u for u in [*won, *sample] if u in run.entries]
    audits = {u: audit(run.record, run.voucher_id, u, run.entries[u].ticket) for u in audited}
    failed = [u for u, a in audits.items() if a.exit_code != 0]
    unadmitted_winners = [u for u in won if u in audits and audits[u].admitted_by is None]

    forwarded = [p for p in presses if p.status and not p.edge]

    def admitted_when(p: Press) -> bool:
        # The cursor only grows: admitted by the press's answer is admitted when the edge last saw it.
        entry = run.entries.get(p.user_id)
        now = cursor.at(run.seen(p)[1])
        return entry is not None and now is not None and entry.ticket < now

    strays = [p for p in forwarded if not admitted_when(p) and not run.near_move(p)]
    # The app presses again on 503 TRY_AGAIN (a chaos run's faults): one press, more answers.
    again = sum(p.code == "TRY_AGAIN" for p in forwarded)
    checks = [
        Check(
            "every order's ticket below the cursor at its press",
            len(below) == len(won),
            f"{len(below)} of {len(won)} winners' tickets below the cursor in effect when answered; highest "
            f"{figures['highest_winning_ticket']} < {figures['cursor_at_that_win']}",
        ),
        Check(
            "no order without a pass",
            not unpassed and no_pass == len(passless_answers),
            f"{len(orders)} orders, {len(unpassed)} of users without an entry; {no_pass} of "
            f"{len(passless_answers)} presses without a pass answered 403 NO_PASS",
        ),
        Check(
            "seckill-draw verify passes for every winner and a sample of losers",
            bool(audits) and not failed and not unadmitted_winners,
            f"{len(audits) - len(failed)} of {len(audits)} audits passed ({len(won)} winners, {len(sample)} "
            f"losers); {len(unadmitted_winners)} winners the record never admitted"
            + (f"; failed: {failed[:5]}" if failed else ""),
        ),
        Check(
            "only admitted entrants' presses reach the function",
            not strays and len(forwarded) - again <= figures["budget"],
            f"{len(forwarded):,} reached it ({again:,} answered 503 TRY_AGAIN, pressed again), at most "
            f"{figures['budget']:,} presses ({figures['admitted']} admitted"
            + (f", {sum(run.again.values())} asked again" if run.again else "")
            + f" x {run.presses_per_user}); "
            f"{len(strays)} from users not admitted when the edge saw the press"
            + "".join(f"; {stray_detail(run, p)}" for p in strays[:3]),
        ),
    ]
    total = sum(1 for p in presses if p.status)
    if total and run.factor * run.stock * run.presses_per_user <= FUNCTION_SHARE * total:
        share = 1 - len(forwarded) / total
        first = figures["first_second_at_edge"] / figures["first_second"] if figures["first_second"] else 0.0
        checks.append(
            Check(
                f"at least {EDGE_SHARE:.0%} of the presses answered at the edge, first second included",
                share >= EDGE_SHARE and first >= EDGE_SHARE,
                f"{share:.1%} of {total:,}; first second {first:.1%} of {figures['first_second']:,}",
            )
        )
    return checks
