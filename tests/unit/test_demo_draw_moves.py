"""The main job's checks of a draw's recorded moves (``seckill_demo.draw_moves``) and the
table of the faults at its close (``seckill_demo.draw_faults``), on moves, entries and
orders made up here: the close at CLOSE, the opening 5 s later."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from seckill.draw.tickets import late_ticket
from seckill_demo.draw import DrawRun, Entry
from seckill_demo.draw_faults import draw_faults_table
from seckill_demo.draw_moves import DrawStore, Move, check_moves
from seckill_demo.faults import record
from seckill_demo.load import Press

CLOSE = 1_800_000_000.0
OFFSET = CLOSE + 5 - 1000  # a press sent at monotonic 1000 + t was sent t s after the opening
COMMITMENT = "ab" * 32
TICKETS = [f"0{n:016x}" for n in range(1, 41)]  # 40 entrants before the close, ascending


def entries() -> dict[int, Entry]:
    return {u: Entry(t, False, f"pass-{u}") for u, t in enumerate(TICKETS, start=1)}


def draw_run(record_commitment: str = COMMITMENT) -> DrawRun:
    # admitFactor 2, stock 5: the close's move admits 10.
    record = {"commitment": record_commitment, "cursorHistory": []}
    return DrawRun(7, record, entries(), [], CLOSE + 5, OFFSET, 2, 5, 3, 1.0)


def store(decided_after_close: float = 0.8, **changes: object) -> DrawStore:
    """The close's move admitting 10 of 40 (5 units), decided ``decided_after_close`` s after
    the close; a wave 10 s after the opening admitting 4 more (2 units back); five orders."""
    moves = [
        Move(CLOSE, TICKETS[10], 10, 5, CLOSE + decided_after_close),
        Move(CLOSE + 15, TICKETS[14], 4, 2, CLOSE + 10),
    ]
    stored = {u: (t, CLOSE - 30) for u, t in enumerate(TICKETS, start=1)}
    accepted = {100 + n: CLOSE + 5.1 + n / 10 for n in range(5)}
    cached = [(m.at, m.cursor) for m in moves]
    return replace(DrawStore(CLOSE, moves, stored, accepted, cached), **changes)  # type: ignore[arg-type]


def press(user: int, t: float, status: int) -> Press:
    return Press(user, status, None, str(user) if status == 202 else None, 5.0, 1000 + t, False, b"")


def failed(draw_store: DrawStore, presses: list[Press] | None = None, run: DrawRun | None = None) -> list[str]:
    checks = check_moves(draw_store, run or draw_run(), presses or [], COMMITMENT)
    assert len(checks) == 4
    return [c.name for c in checks if not c.ok]


def test_a_draw_recorded_on_time_passes_every_check() -> None:
    assert failed(store(), [press(1, 0.1, 202), press(30, 0.1, 409)]) == []
    assert store().first_move_after_close == pytest.approx(0.8)


def test_a_close_move_recorded_late_fails_and_says_how_late() -> None:
    """As on a clock whose message at the close was lost and restarted a minute later."""
    late = store(decided_after_close=61.5)
    checks = check_moves(late, draw_run(), [press(1, 0.1, 202)], COMMITMENT)
    by_name = {c.name: c for c in checks}
    assert not by_name["the close's move recorded within 5 s"].ok
    assert by_name["the close's move recorded within 5 s"].detail.startswith(
        "first move recorded 61.5 s after the close"
    )
    # The sale opened 5 s after the close: every order and 202 came before the first move.
    early = by_name["no order accepted after the close before the first move"]
    assert not early.ok
    assert early.detail.startswith("5 stored orders accepted and 1 presses answered 202")


def test_no_move_at_all_fails_both_close_checks() -> None:
    none = store(moves=[], redis_moves=[], accepted={})
    assert none.first_move_after_close is None
    assert failed(none) == ["the close's move recorded within 5 s"]
    assert failed(none, [press(1, 30.0, 202)]) == [
        "the close's move recorded within 5 s",
        "no order accepted after the close before the first move",
    ]


def test_a_202_answered_before_the_first_move_fails_even_with_no_stored_order() -> None:
    # Decided 4 s after the close: on time, but a press answered 3.5 s before the opening... after it.
    late = store(decided_after_close=4.0, accepted={})
    assert failed(late, [press(1, -1.5, 202)]) == ["no order accepted after the close before the first move"]


def test_a_cursor_moving_back_or_a_move_of_the_wrong_size_fails() -> None:
    good = store()
    back = replace(good.moves[1], cursor=TICKETS[8], admitted=0)
    assert failed(
        store(moves=[good.moves[0], back], redis_moves=[(m.at, m.cursor) for m in (good.moves[0], back)])
    ) == ["the cursor never moves back, each move of its exact size"]
    # Says it admitted 10 while 11 tickets lie between the cursors.
    wide = replace(good.moves[0], cursor=TICKETS[11])
    assert failed(store(moves=[wide, good.moves[1]], redis_moves=[(wide.at, wide.cursor), good.redis_moves[1]])) == [
        "the cursor never moves back, each move of its exact size"
    ]
    # Admitted 8 of the 10 its 5 units allow while 40 were waiting.
    short = replace(good.moves[0], cursor=TICKETS[8], admitted=8)
    assert failed(store(moves=[short, good.moves[1]], redis_moves=[(short.at, short.cursor), good.redis_moves[1]])) == [
        "the cursor never moves back, each move of its exact size"
    ]


def test_a_move_admitting_everyone_waiting_may_be_smaller_than_its_units_allow() -> None:
    # 2 units back admit up to 4: 3 waiting (stored a while before it), all admitted.
    few = {u: (t, CLOSE - 30) for u, t in enumerate(TICKETS[:13], start=1)}
    everyone = Move(CLOSE + 15, late_ticket(1), 3, 2, CLOSE + 10)
    draw_store = store(entries=few, moves=[store().moves[0], everyone])
    draw_store = replace(draw_store, redis_moves=[(m.at, m.cursor) for m in draw_store.moves])
    run = replace(draw_run(), entries={u: Entry(t, False, "") for u, (t, _) in few.items()})
    assert failed(draw_store, run=run) == []


def test_what_redis_lost_must_come_back_from_mysql() -> None:
    survived = "entries, moves and seed survive the loss of Redis"
    assert failed(store(redis_moves=store().redis_moves[:1])) == [survived]  # a move missing from the cursor
    changed = dict(store().entries) | {3: (TICKETS[20], CLOSE - 30)}
    assert failed(store(entries=changed)) == ["the cursor never moves back, each move of its exact size", survived]
    assert failed(store(), run=draw_run("cd" * 32)) == [survived]  # another seed committed


def test_the_close_faults_table_counts_each_fault_and_what_answered(tmp_path: Path) -> None:
    log = tmp_path / "chaos.jsonl"
    record(log, "redis-emptied-at-close")
    record(log, "close-tick-lost", due=1)
    table = draw_faults_table(log, 61.5, Counter(clocks_restarted=1, rebuilt=2))
    assert [(f.fault, f.injected) for f in table] == [
        ("the close's tick lost (its clock message deleted unseen)", 1),
        ("Redis emptied at the close", 1),
    ]
    assert table[0].evidence == "first move recorded 61.5 s after the close; reconciliation restarted 1 clocks"
    assert table[1].evidence.startswith("first move recorded 61.5 s after the close; 2 vouchers rebuilt")
    nothing = draw_faults_table(tmp_path / "none.jsonl", None, Counter())
    assert [f.injected for f in nothing] == [0, 0]
    assert nothing[0].evidence.startswith("no move recorded")
