"""The edge's state value and queue message: what is written is read back the same, and
anything else is refused (the publisher dead-letters it rather than write it)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from seckill.edge.state import KEPT_AFTER_END, EdgeState, MalformedState, Sweep, parse_message
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


def message(**changes: object) -> str:
    data = json.loads(STATE.message())
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
