"""The edge's state value and queue message: what is written is read back the same, and
anything else is refused (the publisher dead-letters it rather than write it)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from seckill.edge.state import KEPT_AFTER_END, SWEEP_MESSAGE_STATES, EdgeState, MalformedState, Sweep, parse_message
from seckill.repair.restore import ENDED_WITHIN

STATE = EdgeState(
    voucher_id=42, v=1_764_600_000_000, begin=1_764_600_000_000, end=1_764_603_600_000, sold_out=True, stopped=False
)


def test_value_is_compact_json_of_the_shared_design() -> None:
    assert STATE.key == "42"
    assert (
        STATE.value() == '{"v":1764600000000,"begin":1764600000000,"end":1764603600000,"soldOut":true,"stopped":false}'
    )
    assert json.loads(STATE.message()) == {**json.loads(STATE.value()), "voucherId": 42}


def test_round_trips() -> None:
    assert EdgeState.from_message(STATE.message()) == STATE
    assert EdgeState.from_value(42, STATE.value()) == STATE


def message(state: EdgeState = STATE, **changes: object) -> str:
    """The state's message with fields changed, or removed (None)."""
    data = json.loads(state.message())
    data.update(changes)
    return json.dumps({k: v for k, v in data.items() if v is not None})


@pytest.mark.parametrize(
    "text",
    [
        "",
        "null",
        "[]",
        '"42"',
        message(v=None),  # a field missing
        message(extra=1),  # a field unknown
        message(v=0),
        message(v=-1),
        message(v=2**53),  # past what the edge's JavaScript numbers hold exactly
        message(v=1.5),
        message(v="7"),
        message(v=True),  # a bool is an int in Python, not on the wire
        message(begin=-1),
        message(end=None),
        message(soldOut=1),
        message(stopped="false"),
        message(voucherId=0),
        message(voucherId="42"),
    ],
)
def test_refuses_anything_else(text: str) -> None:
    with pytest.raises(MalformedState):
        EdgeState.from_message(text)


def test_a_value_has_no_voucher_id() -> None:
    with pytest.raises(MalformedState):
        EdgeState.from_value(42, STATE.message())


def test_a_sweep_round_trips_and_a_change_is_read_as_one() -> None:
    sweep = Sweep((STATE, replace(STATE, voucher_id=43, sold_out=False)))
    assert parse_message(sweep.message()) == sweep
    assert parse_message(Sweep(()).message()) == Sweep(())
    assert parse_message(STATE.message()) == STATE


@pytest.mark.parametrize(
    "text",
    ['{"sweep": {}}', '{"sweep": [{"v": 1}]}', '{"sweep": [], "v": 1}', message(extra=1), "not json"],
)
def test_a_message_is_a_change_or_a_sweep(text: str) -> None:
    with pytest.raises(MalformedState):
        parse_message(text)


def test_the_same_sale_whatever_the_version() -> None:
    assert STATE.same_sale(replace(STATE, v=STATE.v + 1))
    assert not STATE.same_sale(replace(STATE, sold_out=False))
    assert not STATE.same_sale(replace(STATE, voucher_id=43))


def test_the_edge_keeps_a_state_while_reconciliation_sweeps_it() -> None:
    """Else each sweep would write back what the one before deleted."""
    assert KEPT_AFTER_END >= ENDED_WITHIN


DRAW = EdgeState(
    voucher_id=42,
    v=1_764_600_000_000,
    begin=1_764_600_000_000,
    end=1_764_603_600_000,
    sold_out=False,
    stopped=False,
    draw=True,
    close=1_764_599_940_000,
    decided=1_764_600_020_000,
    moves=((1_764_599_940_000, "0" + "8" * 16), (1_764_600_010_000, "0" + "c" * 16)),
)


def test_a_draw_value_adds_draw_its_close_how_far_it_is_decided_and_its_moves() -> None:
    assert DRAW.value() == (
        '{"v":1764600000000,"begin":1764600000000,"end":1764603600000,"soldOut":false,"stopped":false,'
        '"draw":true,"close":1764599940000,"decided":1764600020000,'
        '"moves":[[1764599940000,"08888888888888888"],[1764600010000,"0cccccccccccccccc"]]}'
    )
    assert EdgeState.from_message(DRAW.message()) == DRAW
    assert EdgeState.from_value(42, DRAW.value()) == DRAW
    # A draw whose cursor has not moved yet (the draw still open).
    closed = replace(DRAW, moves=())
    assert EdgeState.from_value(42, closed.value()) == closed
    # The largest entry fits the store's 1 KB value, and a sweep of the largest SQS's 256 KiB.
    most = 2**53 - 1
    full = replace(
        DRAW,
        voucher_id=2**63 - 1,
        v=most,
        begin=most,
        end=most,
        close=most,
        decided=most,
        moves=tuple((most - 8 + i, "1" + "f" * 16) for i in range(8)),
    )
    assert len(full.value().encode()) < 1024
    assert len(Sweep((full,) * SWEEP_MESSAGE_STATES).message().encode()) <= 256 * 1024


def draw_message(**changes: object) -> str:
    return message(DRAW, **changes)


@pytest.mark.parametrize(
    "text",
    [
        draw_message(draw=None),  # moves without draw
        draw_message(moves=None),  # draw without moves
        draw_message(close=None),  # draw without its close
        draw_message(decided=None),  # draw without how far it is decided
        draw_message(close="1764599940000"),
        draw_message(decided=-1),
        draw_message(decided=1.5),
        draw_message(decided=True),
        message(STATE, close=1764599940000),  # a race with a draw's field
        draw_message(draw=False),
        draw_message(draw=1),
        draw_message(moves={}),
        draw_message(moves=[[1, "0" + "8" * 16, 2]]),
        draw_message(moves=[["1", "0" + "8" * 16]]),
        draw_message(moves=[[True, "0" + "8" * 16]]),
        draw_message(moves=[[-1, "0" + "8" * 16]]),
        draw_message(moves=[[1, "0" + "8" * 15]]),
        draw_message(moves=[[1, "0" + "A" * 16]]),
        draw_message(moves=[[2, "0" + "8" * 16], [1, "0" + "c" * 16]]),  # not ascending
        draw_message(moves=[[1, "0" + "8" * 16], [1, "0" + "c" * 16]]),
        draw_message(moves=[[1, "0" + "c" * 16], [2, "0" + "8" * 16]]),  # the cursor moved back
        draw_message(moves=[[i, "0" + "8" * 16] for i in range(17)]),  # more than an entry holds
    ],
)
def test_refuses_a_malformed_draw(text: str) -> None:
    with pytest.raises(MalformedState):
        EdgeState.from_message(text)
