"""A draw's moves as MySQL recorded them, checked after the sale (``--admission draw``):
the close's move recorded in time and nothing admitted before it, the cursor never
moving back, each move of its exact size, and what lives in MySQL (the entries, the
moves, the seed) surviving any loss of Redis. ``seckill_demo.draw`` checks the same
sale from the clients' side (the presses, the record, the audits)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from seckill.draw.tickets import move_size
from seckill.infra import keys
from seckill.infra.db import Database
from seckill.infra.timeutil import from_db
from seckill_demo.draw import DrawRun, epoch
from seckill_demo.load import Press
from seckill_demo.report import Check

# The close's move is recorded within this long of the close, whatever fails.
CLOSE_MOVE_WITHIN = 5.0
# An entry stored this long before a move was committed when it was decided: a move that
# admitted fewer than admitFactor x units must have admitted it.
ENTRY_SETTLED = 1.0
# The opening as the demo knows it (microseconds) and as the draw stored it (milliseconds).
BEGIN_MS = 0.001


@dataclass(frozen=True)
class Move:
    at: float  # epoch seconds it takes effect
    cursor: str
    admitted: int
    units: int
    decided: float  # epoch seconds it was recorded (the database's clock)
    step: int = 0  # a paced move's steps: 0, 1, 2, ...; an unpaced move is its step 0


@dataclass(frozen=True)
class DrawStore:
    """What MySQL and Redis hold of the draw once the sale is over."""

    close: float  # epoch seconds
    moves: list[Move]  # by ``at``
    entries: dict[int, tuple[str, float]]  # user -> (ticket, stored at)
    accepted: dict[int, float]  # order id -> acceptedAt of every stored order
    redis_moves: list[tuple[float, str]]  # the cursor sorted set: (at, cursor), by ``at``

    @classmethod
    def read(cls, db: Database, redis: Any, voucher_id: int) -> DrawStore:
        def read(cursor: Any) -> DrawStore:
            cursor.execute("SELECT close_time FROM tb_draw WHERE voucher_id = %s", (voucher_id,))
            close = from_db(cursor.fetchone()["close_time"]).timestamp()
            cursor.execute(
                "SELECT at_ms, cursor_after, admitted, units, decide_time, step FROM tb_draw_move WHERE voucher_id = %s"
                " ORDER BY at_ms",
                (voucher_id,),
            )
            moves = [
                Move(
                    r["at_ms"] / 1000,
                    str(r["cursor_after"]),
                    int(r["admitted"]),
                    int(r["units"]),
                    from_db(r["decide_time"]).timestamp(),
                    int(r["step"]),
                )
                for r in cursor.fetchall()
            ]
            cursor.execute(
                "SELECT user_id, ticket, create_time FROM tb_draw_entry WHERE voucher_id = %s", (voucher_id,)
            )
            entries = {
                int(r["user_id"]): (str(r["ticket"]), from_db(r["create_time"]).timestamp()) for r in cursor.fetchall()
            }
            cursor.execute("SELECT id, create_time FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
            accepted = {int(r["id"]): from_db(r["create_time"]).timestamp() for r in cursor.fetchall()}
            return cls(close, moves, entries, accepted, [])

        store: DrawStore = db.run(read, read_only=True)
        cached = redis.zrange(keys.cursor(voucher_id), 0, -1, withscores=True)
        redis_moves = sorted((float(score) / 1000, str(member)) for member, score in cached)
        return cls(store.close, store.moves, store.entries, store.accepted, redis_moves)

    @property
    def first_move_after_close(self) -> float | None:
        """How long after the close the first move was recorded (seconds); None: never."""
        return self.moves[0].decided - self.close if self.moves else None


def check_moves(store: DrawStore, run: DrawRun, presses: list[Press], commitment: str | None) -> list[Check]:
    """The draw's checks from what MySQL recorded (``commitment``: the record's before the close);
    a paced draw's pace and steps too."""
    checks = [
        check_close_move(store),
        check_nothing_before_move(store, run, presses),
        check_sizes(store, run),
        check_survived(store, run, commitment),
    ]
    if run.rate is not None:
        checks += [check_pace(store, run.rate), check_steps(store, run)]
    return checks


def grouped(moves: list[Move]) -> list[list[Move]]:
    """The recorded rows (by ``at``) as moves, each its steps: a move's steps come before the next move."""
    groups: list[list[Move]] = []
    for move in moves:
        if move.step == 0 or not groups:
            groups.append([move])
        else:
            groups[-1].append(move)
    return groups


def admitted_per_second(store: DrawStore) -> dict[int, int]:
    """Epoch second -> the entrants newly admitted by the steps taking effect within it."""
    seconds: dict[int, int] = {}
    for move in store.moves:
        seconds[int(move.at // 1)] = seconds.get(int(move.at // 1), 0) + move.admitted
    return seconds


def check_pace(store: DrawStore, rate: int) -> Check:
    """No second admits more than ``admitRate`` new entrants (the steps taking effect in it, summed)."""
    seconds = admitted_per_second(store)
    over = sorted((s, n) for s, n in seconds.items() if n > rate)
    return Check(
        "no second admitted more than admitRate",
        not over,
        f"at most {max(seconds.values(), default=0):,} admitted in a second over {len(seconds)} seconds with "
        f"admissions, admitRate {rate:,}"
        + "".join(f"; {n:,} in the second {s - store.close:+.0f} s from the close" for s, n in over[:3]),
    )


def check_steps(store: DrawStore, run: DrawRun) -> Check:
    """The record's ``cursorHistory`` is MySQL's steps, at their times and cursors; within a
    move they are one second apart: the first at the move's time, the later ones the close's
    from the opening on (``beginTime`` + 1 s, + 2 s, ...), a wave's right after it."""
    history = [(round(epoch(m["at"]), 3), str(m["cursor"])) for m in run.record.get("cursorHistory") or []]
    recorded = [(round(m.at, 3), m.cursor) for m in store.moves]
    apart: list[str] = []
    for n, steps in enumerate(grouped(store.moves)):
        later = run.opened if n == 0 else steps[0].at
        due = [steps[0].at] + [later + k for k in range(1, len(steps))]
        numbered = [m.step for m in steps] == list(range(len(steps)))
        if not numbered or any(abs(m.at - at) > BEGIN_MS for m, at in zip(steps, due, strict=True)):
            apart.append(
                f"the move at {steps[0].at - store.close:+.3f} s from the close: steps "
                + ", ".join(f"{m.step} at {m.at - store.close:+.3f} s" for m in steps[:4])
            )
    return Check(
        "every step as recorded",
        history == recorded and not apart,
        f"{len(recorded)} steps in MySQL, {len(history)} in the record's cursorHistory"
        + ("" if history == recorded else " (they differ)")
        + f"; {len(grouped(store.moves)) - len(apart)} of {len(grouped(store.moves))} moves' steps one second apart"
        + "".join(f"; {a}" for a in apart[:2]),
    )


def check_close_move(store: DrawStore) -> Check:
    lag = store.first_move_after_close
    first = store.moves[0] if store.moves else None
    at_close = first is not None and abs(first.at - store.close) < 0.001
    return Check(
        f"the close's move recorded within {CLOSE_MOVE_WITHIN:.0f} s",
        lag is not None and at_close and lag <= CLOSE_MOVE_WITHIN,
        "no move recorded"
        if first is None or lag is None
        else f"first move recorded {lag:.1f} s after the close (it takes effect "
        f"{first.at - store.close:+.3f} s from the close, cursor {first.cursor})",
    )


def check_nothing_before_move(store: DrawStore, run: DrawRun, presses: list[Press]) -> Check:
    """After the close, nothing is admitted until a move is recorded: no stored order was
    accepted, and no press answered 202, before the first move's record."""
    first = store.moves[0].decided if store.moves else float("inf")
    early_orders = sorted(i for i, at in store.accepted.items() if store.close <= at < first)
    early_202s = [p for p in presses if p.status == 202 and run.seen(p)[1] < first]
    named = "".join(
        f"; order {i} accepted {store.accepted[i] - store.close:.1f} s after the close" for i in early_orders[:3]
    )
    return Check(
        "no order accepted after the close before the first move",
        not early_orders and not early_202s,
        f"{len(early_orders)} stored orders accepted and {len(early_202s)} presses answered 202 between the close "
        f"and the first move's record" + ("" if store.moves else " (none recorded)") + named,
    )


def check_sizes(store: DrawStore, run: DrawRun) -> Check:
    """The cursor never moves back, and each move admits exactly what it says: the entrants
    between the cursor before and after each of its steps, at most admitFactor x its units,
    and all who were waiting when it admitted fewer; a paced move in steps of exactly
    admitRate, the last the rest."""
    back = [(a.cursor, b.cursor) for a, b in itertools.pairwise(store.moves) if b.cursor < a.cursor]
    wrong: list[str] = []
    previous = ""
    for steps in grouped(store.moves):
        first, admitted = steps[0], sum(m.admitted for m in steps)
        waiting = sum(
            ticket >= previous and stored < first.decided - ENTRY_SETTLED for ticket, stored in store.entries.values()
        )
        between = []
        for step in steps:
            between.append(sum(previous <= ticket < step.cursor for ticket, _ in store.entries.values()))
            previous = max(previous, step.cursor)
        sizes = [m.admitted for m in steps]
        bound = run.factor * first.units
        paced = (
            len(steps) == 1
            if run.rate is None
            else all(n == run.rate for n in sizes[:-1])
            and 0 <= sizes[-1] <= run.rate
            and (len(steps) == 1 or sizes[-1] > 0)
        )
        if between != sizes or admitted > bound or (admitted < bound and waiting > admitted) or not paced:
            wrong.append(
                f"the move at {first.at - store.close:+.1f} s from the close admitted {admitted} in {len(steps)} "
                f"steps of {sizes[:3]}{'...' if len(sizes) > 3 else ''} ({sum(between)} between its cursors, "
                f"{waiting} waiting, {first.units} units: {move_size(waiting, run.factor, first.units)} due)"
            )
    moves = grouped(store.moves)
    return Check(
        "the cursor never moves back, each move of its exact size",
        not back and not wrong,
        f"{len(moves)} moves in {len(store.moves)} steps, {sum(m.admitted for m in store.moves)} admitted"
        + "".join(f"; back from {a} to {b}" for a, b in back[:2])
        + "".join(f"; {w}" for w in wrong[:3]),
    )


def check_survived(store: DrawStore, run: DrawRun, commitment: str | None) -> Check:
    """Entries, moves and seed live in MySQL: after every loss of Redis, each entrant's
    ticket is the one the entry route gave, Redis's cursor holds every recorded move
    and no other, and the record's commitment is the one published before the close."""
    tickets = {u: e.ticket for u, e in run.entries.items()}
    stored = {u: t for u, (t, _) in store.entries.items()}
    changed = sorted(u for u in tickets if stored.get(u) != tickets[u])
    extra = sorted(set(stored) - set(tickets))
    recorded = [(round(m.at, 3), m.cursor) for m in store.moves]
    cached = [(round(at, 3), c) for at, c in store.redis_moves]
    after = run.record.get("commitment")
    same_seed = commitment is not None and after == commitment
    return Check(
        "entries, moves and seed survive the loss of Redis",
        not changed and not extra and recorded == cached and same_seed,
        f"{len(tickets) - len(changed)} of {len(tickets)} entrants' tickets as given, {len(extra)} entries "
        f"nobody made; Redis cursor {len(cached)} moves, MySQL {len(recorded)}"
        + ("" if recorded == cached else " (they differ)")
        + ("; commitment unchanged" if same_seed else f"; commitment {commitment} before the close, {after} after"),
    )
