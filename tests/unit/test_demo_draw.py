"""The main job's figures, checks and report rows about a draw sale, from a draw record,
entries and presses made up here (the tickets are derived from a known seed, so the
audit of ``seckill-draw verify`` passes for them)."""

from __future__ import annotations

import io
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import urllib3
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from seckill.draw.tickets import early_ticket, late_ticket
from seckill_demo.draw import DrawRun, Entry, check_draw, draw_figures, enter, newly_admitted, split_users
from seckill_demo.load import Press
from seckill_demo.report import draw_rows
from tests.helpers import closed_port

SEED = bytes(range(32))
VOUCHER = 7
OPENED = 1_800_000_000.0  # epoch seconds of the opening
OFFSET = 1_799_999_000.0  # a press sent at monotonic 1000 + t was sent at OPENED + t


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()


def entries(users: int = 40) -> dict[int, Entry]:
    """Users 1..users entered before the close; users+1 and users+2 after it."""
    drawn = {u: Entry(early_ticket(SEED, VOUCHER, u), False, f"pass-{u}") for u in range(1, users + 1)}
    late = {users + n: Entry(f"1{n:016x}", True, f"pass-{users + n}") for n in (1, 2)}
    return drawn | late


def run(entered: dict[int, Entry], admitted: int = 10, passless: tuple[int, ...] = (99,)) -> DrawRun:
    """One move at the close admitting the ``admitted`` smallest tickets; the seed revealed."""
    tickets = sorted(e.ticket for e in entered.values())
    record = {
        "commitment": "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd",
        "closesAt": iso(OPENED - 5),
        "entrants": len(entered),
        "lateEntrants": 2,
        "cursor": tickets[admitted],
        "cursorHistory": [{"at": iso(OPENED - 5), "cursor": tickets[admitted]}],
        "seed": SEED.hex(),
    }
    return DrawRun(VOUCHER, record, entered, list(passless), OPENED, OFFSET, 2, 5, 3, 1.0)


def press(user: int, t: float, status: int, code: str | None, *, edge: bool) -> Press:
    return Press(user, status, code, str(user) if status == 202 else None, 5.0, 1000 + t, edge, b"")


def sale(draw: DrawRun) -> list[Press]:
    """The admitted press (the 5 smallest tickets win), every other entrant is refused at
    the edge, the user without an entry gets NO_PASS there."""
    ranked = sorted(draw.entries, key=lambda u: draw.entries[u].ticket)
    presses = []
    for i, user in enumerate(ranked[:10]):
        presses.append(press(user, 0.1 + i * 0.01, 202 if i < 5 else 409, None if i < 5 else "SOLD_OUT", edge=False))
    presses += [press(u, 0.5, 409, "NOT_ADMITTED", edge=True) for u in ranked[10:]]
    presses += [press(99, 0.6, 403, "NO_PASS", edge=True), press(99, 1.5, 403, "NO_PASS", edge=True)]
    return presses


def orders_of(presses: list[Press]) -> dict[int, int]:
    return {int(p.order_id or 0): p.user_id for p in presses if p.status == 202}


def test_a_draw_sale_passes_every_check_and_reports_its_figures() -> None:
    draw = run(entries())
    presses = sale(draw)
    figures = draw_figures(draw, presses)
    assert (figures["entrants"], figures["late_entrants"], figures["without_entry"]) == (42, 2, 1)
    assert (figures["admitted"], figures["admitted_late"], figures["moves"]) == (10, 0, 1)
    assert (figures["reached_function"], figures["budget"]) == (10, 30)
    assert (figures["first_second"], figures["first_second_at_edge"]) == (43, 33)  # 99's second press at 1.5 s
    assert figures["winners"] == 5
    ranked = sorted(e.ticket for e in draw.entries.values())
    assert figures["highest_winning_ticket"] == ranked[4]
    assert figures["cursor_at_that_win"] == ranked[10]
    checks = check_draw(draw, presses, figures, orders_of(presses), seed=1)
    assert [c.name for c in checks if not c.ok] == []
    # The first move's 2 x 5 units x 3 presses is far over 3% of 44 presses: the edge's share is not asked for.
    assert len(checks) == 4
    audited = next(c for c in checks if c.name.startswith("seckill-draw verify"))
    assert audited.detail.startswith("42 of 42 audits passed (5 winners, 37 losers)")


def test_a_winner_above_the_cursor_and_a_non_admitted_press_at_the_function_fail() -> None:
    draw = run(entries())
    presses = sale(draw)
    outsider = max(draw.entries, key=lambda u: draw.entries[u].ticket if not draw.entries[u].late else "")
    presses.append(press(outsider, 2.0, 202, None, edge=False))
    checks = check_draw(draw, presses, draw_figures(draw, presses), orders_of(presses), seed=1)
    failed = {c.name for c in checks if not c.ok}
    assert failed == {
        "every order's ticket below the cursor at its press",
        "seckill-draw verify passes for every winner and a sample of losers",  # the record never admitted them
        "only admitted entrants' presses reach the function",
    }


def test_a_press_near_a_move_may_reach_the_function() -> None:
    draw = run(entries())
    presses = sale(draw)
    ranked = sorted(draw.entries, key=lambda u: draw.entries[u].ticket)
    # Sent 0.5 s before the move at the close: the edge may forward it, and the function refuses it.
    presses.append(press(ranked[20], -5.5, 409, "NOT_ADMITTED", edge=False))
    checks = check_draw(draw, presses, draw_figures(draw, presses), orders_of(presses), seed=1)
    assert [c.name for c in checks if not c.ok] == []


def test_a_press_that_waited_on_its_way_until_near_a_move_may_reach_the_function() -> None:
    draw = run(entries())
    ranked = sorted(draw.entries, key=lambda u: draw.entries[u].ticket)
    # Sent 3 s before the move at the close (outside the skew of 1 s): answered 5 ms later it
    # is a stray; answered 2.5 s later, the edge may have seen it 0.5 s before the move.
    for waited_ms, stray in ((5.0, True), (2500.0, False)):
        presses = [*sale(draw), Press(ranked[20], 409, "NOT_ADMITTED", None, waited_ms, 1000 - 8.0, False, b"")]
        checks = check_draw(draw, presses, draw_figures(draw, presses), orders_of(presses), seed=1)
        assert [c.name for c in checks if not c.ok] == (["only admitted entrants' presses reach the function"] * stray)


def test_presses_again_after_503_try_again_are_not_more_presses() -> None:
    """The app presses again on 503 TRY_AGAIN (a chaos run): those answers reach the function
    beyond admitted x presses; any other answer beyond it is a press too many."""
    draw = run(entries())
    ranked = sorted(draw.entries, key=lambda u: draw.entries[u].ticket)
    budget = "only admitted entrants' presses reach the function"
    for code, too_many in (("TRY_AGAIN", False), ("DUPLICATE_ORDER", True)):
        status = 503 if code == "TRY_AGAIN" else 409
        presses = sale(draw) + [press(ranked[0], 0.2 + i / 100, status, code, edge=False) for i in range(25)]
        checks = check_draw(draw, presses, draw_figures(draw, presses), orders_of(presses), seed=1)
        assert [c.name for c in checks if not c.ok] == [budget] * too_many
        detail = next(c.detail for c in checks if c.name == budget)
        assert detail.startswith(f"35 reached it ({25 * (not too_many)} answered 503 TRY_AGAIN, pressed again)")


def test_users_asked_to_press_again_may_press_that_much_more() -> None:
    """Once every entrant is admitted, a later wave asks those without an order again: each
    such wave is 3 more presses of theirs the function may see."""
    draw = run(entries())
    ranked = sorted(draw.entries, key=lambda u: draw.entries[u].ticket)
    # 31 presses at the function: one more than 10 admitted x 3.
    extra = [press(ranked[5], 20 + i / 10, 409, "SOLD_OUT", edge=False) for i in range(21)]
    presses = sale(draw) + extra
    budget = "only admitted entrants' presses reach the function"
    checks = check_draw(draw, presses, draw_figures(draw, presses), orders_of(presses), seed=1)
    assert [c.name for c in checks if not c.ok] == [budget]
    again = replace(draw, again=Counter({ranked[5]: 1}))
    figures = draw_figures(again, presses)
    assert figures["budget"] == 33
    checks = check_draw(again, presses, figures, orders_of(presses), seed=1)
    assert [c.name for c in checks if not c.ok] == []
    assert "at most 33 presses (10 admitted, 1 asked again x 3)" in next(c.detail for c in checks if c.name == budget)


def test_nobody_is_waited_for_once_every_entrant_is_admitted() -> None:
    draw = run(entries())
    everyone = {**draw.record, "cursorHistory": [{"at": iso(time.time() - 10), "cursor": late_ticket(3)}]}
    started = time.monotonic()
    assert newly_admitted(lambda: everyone, draw.entries, set(draw.entries), patience=5) == set()
    assert time.monotonic() - started < 1  # no move can admit anyone more: no wait for one
    assert newly_admitted(lambda: everyone, draw.entries, set(), patience=5) == set(draw.entries)


def test_an_order_without_a_pass_fails() -> None:
    draw = run(entries())
    presses = sale(draw)
    orders = orders_of(presses) | {123: 99}  # user 99 never entered
    failed = [c.name for c in check_draw(draw, presses, draw_figures(draw, presses), orders, seed=1) if not c.ok]
    assert failed == ["no order without a pass"]


def test_the_edge_share_is_checked_where_the_admitted_are_few() -> None:
    draw = replace(run(entries(200), admitted=2), stock=1)  # the first move: 2 x 1 x 3 presses of 602
    ranked = sorted(draw.entries, key=lambda u: draw.entries[u].ticket)
    presses = [press(ranked[0], 0.1, 202, None, edge=False), press(ranked[1], 0.2, 409, "SOLD_OUT", edge=False)]
    presses += [press(u, 0.3 + k, 409, "NOT_ADMITTED", edge=True) for u in ranked[2:] for k in range(3)]
    checks = check_draw(draw, presses, draw_figures(draw, presses), orders_of(presses), seed=1)
    share = checks[-1]
    assert share.name == "at least 97% of the presses answered at the edge, first second included"
    assert share.ok, share.detail
    # Twenty of the first second's presses forwarded instead: the first second falls under 97%.
    presses += [press(u, 0.4, 409, "NOT_ADMITTED", edge=False) for u in ranked[2:22]]
    checks = check_draw(draw, presses, draw_figures(draw, presses), orders_of(presses), seed=1)
    assert not checks[-1].ok


def test_the_draw_rows() -> None:
    draw = run(entries())
    presses = sale(draw)
    figures: dict[str, Any] = draw_figures(draw, presses)
    table = Table()
    table.add_column()
    table.add_column()
    draw_rows(table, figures)
    out = io.StringIO()
    Console(file=out, width=200).print(table)
    text = out.getvalue()
    assert "42 (2) / 1" in text  # entrants (late) / never entered
    assert "10 (0) / 1" in text  # admitted (late) / moves
    assert "33 of 43 (76.7%)" in text
    assert "10 / 30" in text
    assert figures["highest_winning_ticket"] in text
    assert "the record says" not in text
    figures["record_entrants"] = 41
    out = io.StringIO()
    table = Table()
    table.add_column()
    table.add_column()
    draw_rows(table, figures)
    Console(file=out, width=200).print(table)
    assert "the record says 41 (2)" in out.getvalue()


def test_the_users_split_into_early_late_and_never() -> None:
    early, late, never = split_users(list(range(1, 1001)), 0.05, seed=3)
    assert (len(early), len(late), len(never)) == (940, 50, 10)
    assert sorted(early + late + never) == list(range(1, 1001))
    assert split_users(list(range(1, 1001)), 0.05, seed=3) == (early, late, never)


def test_nobody_enters_once_the_entries_time_is_up() -> None:
    """``until`` passed: no request is made (the API's port is closed) and nobody has entered."""
    http = urllib3.PoolManager(retries=False, timeout=1)
    with Progress(console=Console(file=io.StringIO())) as progress:
        entered = enter(http, f"http://127.0.0.1:{closed_port()}", 7, {1: "t1", 2: "t2"}, 2, progress, "x", until=0)
    assert entered == {}


def test_the_first_second_is_the_crowds_when_it_came_after_the_opening() -> None:
    """Entries that ran past the opening: the first second is counted from the first press."""
    draw = run(entries())
    late = [replace(p, sent=p.sent + 5) for p in sale(draw)]
    figures = draw_figures(draw, late)
    assert round(figures["first_second_after_opening_s"], 3) == 5.1  # the first press, 0.1 s in, now 5 s late
    assert (figures["first_second"], figures["first_second_at_edge"]) == (43, 33)
