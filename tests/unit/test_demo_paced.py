"""The main job's checks, figures and plot of a paced draw (``--admit-rate``:
``seckill_demo.draw_moves``' pace and steps, ``seckill_demo.paced``), on steps, entries
and presses made up here: the close at CLOSE, the opening 5 s later, admitRate 3."""

from __future__ import annotations

import argparse
import io
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from seckill_demo.draw import DrawRun, Entry
from seckill_demo.draw_moves import DrawStore, Move, check_moves
from seckill_demo.load import Press
from seckill_demo.paced import check_function_pace, paced_figures, paced_plan, plot_paced, recommended
from seckill_demo.report import draw_rows

CLOSE = 1_800_000_000.0
OPENED = CLOSE + 5
OFFSET = OPENED - 1000  # a press sent at monotonic 1000 + t was sent t s after the opening
COMMITMENT = "ab" * 32
TICKETS = [f"0{n:016x}" for n in range(1, 41)]  # 40 entrants before the close, ascending
RATE = 3
PACE = "no second admitted more than admitRate"
STEPS = "every step as recorded"
SIZES = "the cursor never moves back, each move of its exact size"
PRESSES = "presses reaching the function within admitRate x presses x 1.5 per second"


def steps() -> list[Move]:
    """The close's move (5 units, admitFactor 2: 10) in steps of 3, 3, 3, 1: the first at the
    close, the others from the opening on; a wave 15 s after the opening (2 units back: 4)
    in steps of 3, 1."""
    sizes = [(CLOSE, 3, 5, 0), (OPENED + 1, 3, 5, 1), (OPENED + 2, 3, 5, 2), (OPENED + 3, 1, 5, 3)]
    sizes += [(OPENED + 15, 3, 2, 0), (OPENED + 16, 1, 2, 1)]
    moves, admitted = [], 0
    for at, size, units, step in sizes:
        admitted += size
        decided = CLOSE + 0.5 if at < OPENED + 15 else OPENED + 10
        moves.append(Move(at, TICKETS[admitted], size, units, decided, step))
    return moves


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def draw_run(moves: list[Move] | None = None) -> DrawRun:
    history = [{"at": iso(m.at), "cursor": m.cursor} for m in moves or steps()]
    record = {"commitment": COMMITMENT, "cursorHistory": history}
    entries = {u: Entry(t, False, f"pass-{u}") for u, t in enumerate(TICKETS, start=1)}
    return DrawRun(7, record, entries, [99], OPENED, OFFSET, 2, 5, 3, 1.0, rate=RATE)


def store(moves: list[Move] | None = None, **changes: object) -> DrawStore:
    recorded = moves or steps()
    stored = {u: (t, CLOSE - 30) for u, t in enumerate(TICKETS, start=1)}
    cached = [(m.at, m.cursor) for m in recorded]
    return replace(DrawStore(CLOSE, recorded, stored, {}, cached), **changes)  # type: ignore[arg-type]


def failed(draw_store: DrawStore, run: DrawRun | None = None) -> list[str]:
    checks = check_moves(draw_store, run or draw_run(draw_store.moves), [], COMMITMENT)
    assert len(checks) == 6
    return [c.name for c in checks if not c.ok]


def test_a_draw_paced_as_recorded_passes_every_check() -> None:
    assert failed(store()) == []
    # Unpaced, the same draw's steps are moves of the wrong size, and neither pace check is made.
    unpaced = check_moves(store(), replace(draw_run(), rate=None), [], COMMITMENT)
    assert [c.name for c in unpaced if not c.ok] == [SIZES]


def test_two_steps_in_one_second_fail_the_pace() -> None:
    moved = steps()
    moved[2] = replace(moved[2], at=OPENED + 1.5)  # 3 + 3 admitted in the second after the opening
    assert failed(store(moved)) == [PACE, STEPS]
    assert "at most 6 admitted in a second" in check_moves(store(moved), draw_run(moved), [], COMMITMENT)[4].detail


def test_steps_not_one_second_apart_or_not_in_the_record_fail() -> None:
    # The close's later steps from the close on, not from the opening: one per second still.
    early = [steps()[0], *(replace(m, at=CLOSE + m.step) for m in steps()[1:4]), *steps()[4:]]
    assert failed(store(early)) == [STEPS]
    # The opening the demo asked for has microseconds, the one the draw stored milliseconds.
    assert failed(store(), replace(draw_run(), opened=OPENED + 0.0009)) == []
    # A step the record does not show.
    run = draw_run()
    missing = {**run.record, "cursorHistory": run.record["cursorHistory"][:-1]}
    assert failed(store(), replace(run, record=missing)) == [STEPS]


def test_steps_of_other_sizes_than_admit_rate_fail() -> None:
    odd = steps()
    odd[2] = replace(odd[2], cursor=TICKETS[8], admitted=2)  # 3, 3, 2, 2: the move's total still 10
    odd[3] = replace(odd[3], admitted=2)
    assert failed(store(odd)) == [SIZES]


def press(user: int, t: float, status: int = 202, *, edge: bool = False) -> Press:
    return Press(user, status, None, str(user) if status == 202 else None, 5.0, 1000 + t, edge, b"")


def paced_presses() -> list[Press]:
    """Each admitted entrant's three presses within the second of its step; the others at the edge."""
    presses = []
    for n, move in enumerate(steps()[:4]):
        first = sum(m.admitted for m in steps()[:n])
        start = max(0.0, move.at - OPENED)
        for user in range(first + 1, first + move.admitted + 1):
            presses += [press(user, start + 0.1 * k, 202 if k == 0 else 409) for k in range(3)]
    return presses + [press(u, 0.5, 409, edge=True) for u in range(11, 41)]


def test_presses_at_the_function_within_the_bound_pass_and_beyond_it_fail() -> None:
    run = draw_run()
    check = check_function_pace(run, paced_presses())
    assert (check.name, check.ok) == (PRESSES, True)
    assert "at most 9 in a second" in check.detail
    assert "bound 14" in check.detail  # 3 x 3 x 1.5 = 13.5
    # Five more admitted entrants' presses in the second after the opening: 14 there.
    crowded = paced_presses() + [press(1, 1.5 + 0.01 * k, 409) for k in range(5)]
    check = check_function_pace(run, crowded)
    assert not check.ok
    assert "14 (0 within the skew) in second +1" in check.detail


def test_presses_the_edge_could_not_place_near_a_step_are_beside_the_bound() -> None:
    # Entrants the step at the opening + 2 s admits, pressing 0.5 s before it: the edge forwards them.
    near = paced_presses() + [press(user, 1.5 + 0.01 * k, 409) for user in (7, 8, 9) for k in range(2)]
    assert check_function_pace(draw_run(), near).ok
    # The same presses by entrants no step admits within the skew are not.
    far = paced_presses() + [press(user, 1.5 + 0.01 * k, 409) for user in (30, 31, 32) for k in range(2)]
    assert not check_function_pace(draw_run(), far).ok


def test_each_entrant_presses_once_its_step_is_in_effect() -> None:
    run = draw_run()
    plan = paced_plan(run.record, run.entries, [99], 3, seed=5)
    assert plan == sorted(plan) == paced_plan(run.record, run.entries, [99], 3, seed=5)
    assert len(plan) == 14 * 3 + 27  # the 14 the steps admit press 3 times, the others once
    by_user: dict[int, list[float]] = {}
    for at, user in plan:
        by_user.setdefault(user, []).append(at)
    assert all(CLOSE <= at < CLOSE + 1 for at in by_user[1])  # the close's first step
    assert all(OPENED + 2 <= at < OPENED + 3 for at in by_user[9])  # the third step
    assert all(OPENED + 16 <= at < OPENED + 17 for at in by_user[14])  # the wave's last step
    never = by_user[15] + by_user[99]  # no step admits them: once, from the first step to the last's second
    assert len(never) == 2
    assert all(CLOSE <= at <= OPENED + 17 for at in never)


def test_the_pace_rows_and_plot(tmp_path: Path) -> None:
    run, presses = draw_run(), paced_presses()
    figures = paced_figures(run, store(), presses)
    assert figures == {
        "admit_rate": 3,
        "steps": 6,
        "admission_seconds": 21.0,
        "peak_admitted": 3,
        "peak_function": 9,
        "press_bound": 13.5,
    }
    table = Table()
    table.add_column()
    table.add_column()
    draw_rows(table, {**DRAW_FIGURES, "paced": figures})
    out = io.StringIO()
    Console(file=out, width=200).print(table)
    assert "draw: paced at admitRate 3: steps / admission took" in out.getvalue()
    assert "9 / 14" in out.getvalue()
    said = plot_paced(run, store(), presses, tmp_path / "pace.png", "paced")
    assert said == f"pace plot: {tmp_path / 'pace.png'}"
    assert (tmp_path / "pace.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_run_says_what_the_model_recommends_for_its_shape() -> None:
    shape = {"presses": 3, "admit_factor": 2, "draw_close": 5, "wave_seconds": 5, "admit_rate": 200}
    said = recommended(argparse.Namespace(users=20_000, stock=2_000, **shape))
    # The first move's 4,000 presses x 3 in one second would pass Lambda's 10 x 1,000 invocations
    # a second, with the draw record's 375 origin fetches a second beside them.
    assert said.startswith("seckill-capacity recommends admitRate 1,604 for 20,000 users x 3 presses, 2,000 units")
    assert "the first move's 4,000 all admitted by 2 s after the opening; one more a second meets Lambda's" in said
    assert said.endswith("this run paces at 200")
    # Few enough to admit at once: the whole move is the rate.
    said = recommended(argparse.Namespace(users=1_000, stock=200, **shape))
    assert "recommends admitRate 400 for 1,000 users x 3 presses, 200 units" in said
    assert "(the first move's 400 admitted at once)" in said


DRAW_FIGURES = {
    "entrants": 40,
    "late_entrants": 0,
    "record_entrants": 40,
    "record_late_entrants": 0,
    "without_entry": 1,
    "admitted": 14,
    "admitted_late": 0,
    "moves": 6,
    "admit_factor": 2,
    "first_second": 10,
    "first_second_at_edge": 0,
    "first_second_after_opening_s": 0.0,
    "reached_function": 30,
    "budget": 42,
    "highest_winning_ticket": None,
    "cursor_at_that_win": None,
    "first_move": None,
    "final_cursor": None,
}
