"""The order message: what the queue carries, and what is malformed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from seckill.messages import MalformedMessage, OrderMessage

GOOD = {"orderId": "123456789012345678", "userId": 7, "voucherId": 9, "acceptedAt": "2026-11-30T12:00:00.123Z"}


def test_from_json_reads_a_good_body() -> None:
    message = OrderMessage.from_json(json.dumps(GOOD))
    assert message == OrderMessage(123456789012345678, 7, 9, datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=UTC))


def test_round_trip_keeps_the_order_id_a_string() -> None:
    order_id = (2**31 - 5) << 32 | 123  # far beyond JavaScript's safe integers
    message = OrderMessage(order_id, 7, 9, datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=UTC))
    body = json.loads(message.to_json())
    assert body == {"orderId": str(order_id), "userId": 7, "voucherId": 9, "acceptedAt": "2026-11-30T12:00:00.123Z"}
    assert OrderMessage.from_json(message.to_json()) == message


def test_offset_times_are_kept_as_the_same_instant() -> None:
    body = dict(GOOD, acceptedAt="2026-11-30T20:00:00.123+08:00")
    message = OrderMessage.from_json(json.dumps(body))
    assert message.accepted_at == datetime(2026, 11, 30, 12, 0, 0, 123000, tzinfo=UTC)
    assert message.accepted_at.utcoffset() == timedelta(hours=8)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("not json", id="not-json"),
        pytest.param("", id="empty"),
        pytest.param("[]", id="array"),
        pytest.param("null", id="null"),
        pytest.param(json.dumps({k: v for k, v in GOOD.items() if k != "orderId"}), id="missing-orderId"),
        pytest.param(json.dumps({k: v for k, v in GOOD.items() if k != "userId"}), id="missing-userId"),
        pytest.param(json.dumps({k: v for k, v in GOOD.items() if k != "voucherId"}), id="missing-voucherId"),
        pytest.param(json.dumps({k: v for k, v in GOOD.items() if k != "acceptedAt"}), id="missing-acceptedAt"),
        pytest.param(json.dumps(dict(GOOD, orderId=123456789012345678)), id="orderId-number"),
        pytest.param(json.dumps(dict(GOOD, orderId="0")), id="orderId-zero"),
        pytest.param(json.dumps(dict(GOOD, orderId="12x")), id="orderId-junk"),
        pytest.param(json.dumps(dict(GOOD, userId="7")), id="userId-string"),
        pytest.param(json.dumps(dict(GOOD, userId=True)), id="userId-bool"),
        pytest.param(json.dumps(dict(GOOD, userId=7.0)), id="userId-float"),
        pytest.param(json.dumps(dict(GOOD, userId=-7)), id="userId-negative"),
        pytest.param(json.dumps(dict(GOOD, voucherId="9")), id="voucherId-string"),
        pytest.param(json.dumps(dict(GOOD, voucherId=0)), id="voucherId-zero"),
        pytest.param(json.dumps(dict(GOOD, acceptedAt="yesterday")), id="acceptedAt-bad"),
        pytest.param(json.dumps(dict(GOOD, acceptedAt=1796040000)), id="acceptedAt-number"),
        pytest.param(json.dumps(dict(GOOD, acceptedAt="2026-11-30T12:00:00")), id="acceptedAt-naive"),
        # Parse, but MySQL could never store them: every delivery would fail, DLQ -> replay -> DLQ.
        pytest.param(json.dumps(dict(GOOD, acceptedAt="0001-01-01T00:00:00+01:00")), id="acceptedAt-overflows"),
        pytest.param(json.dumps(dict(GOOD, acceptedAt="9999-12-31T23:59:59-01:00")), id="acceptedAt-past-9999"),
        pytest.param(json.dumps(dict(GOOD, acceptedAt="2021-12-31T23:59:59Z")), id="acceptedAt-before-order-ids"),
    ],
)
def test_from_json_rejects_malformed_bodies(body: str) -> None:
    with pytest.raises(MalformedMessage):
        OrderMessage.from_json(body)
