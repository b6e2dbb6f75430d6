"""Order ids and path ids, without any service."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from seckill.ids import parse_id
from seckill.infra import keys
from seckill.infra.errors import BadRequest

MAX_ID = 2**63 - 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1", 1),
        (1, 1),
        ("42", 42),
        (1234567890123, 1234567890123),
        (str(MAX_ID), MAX_ID),
        (MAX_ID, MAX_ID),
    ],
)
def test_parse_id_accepts_canonical_positive_integers(value: Any, expected: int) -> None:
    result = parse_id(value, "voucherId")
    assert result == expected
    assert type(result) is int


@pytest.mark.parametrize(
    "value",
    [
        "0",
        0,
        "-1",
        -1,
        "007",
        "01",
        True,
        False,
        1.0,
        "1.0",
        "1e3",
        " 1",
        "1 ",
        "1\n",
        "+1",
        "0x10",
        "1_000",
        "",
        "abc",
        "12a",
        "١٢",  # Arabic-Indic digits: str.isdigit() says yes, a Redis key must not
        str(MAX_ID + 1),
        MAX_ID + 1,
        "9" * 20,
        None,
        [1],
        {"id": 1},
    ],
)
def test_parse_id_rejects_everything_else(value: Any) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_id(value, "voucherId")
    assert caught.value.refusal.status == 400
    assert caught.value.refusal.code == "BAD_REQUEST"
    # The 400 names the offending parameter.
    assert "voucherId" in caught.value.refusal.message


def test_the_order_counter_is_per_utc_day() -> None:
    assert keys.order_counter(datetime(2024, 3, 5, 23, 59, 59, tzinfo=UTC)) == "icr:order:2024:03:05"
