"""Voucher bodies: validation, times and zones, named fields; the list's page size and next-page link."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from seckill.infra.errors import BadRequest
from seckill.vouchers import PAGE_SIZE, Page, SeckillVoucherIn, VoucherIn, page_headers, page_size, parse_voucher
from tests.helpers import load_event

SAMPLE = load_event("seckill_api_add_seckill_voucher.json")["body"]


def sample(**changes: Any) -> str:
    """The sample event's body with fields changed (None removes one)."""
    data = json.loads(SAMPLE)
    for name, value in changes.items():
        if value is None:
            data.pop(name)
        else:
            data[name] = value
    return json.dumps(data)


@pytest.fixture
def shop_id() -> int:
    return secrets.randbelow(10**12) + 10**6


def test_the_sample_body_is_valid() -> None:
    voucher = parse_voucher(SAMPLE, SeckillVoucherIn, UTC)
    assert isinstance(voucher, SeckillVoucherIn)
    assert (voucher.shop_id, voucher.title, voucher.pay_value, voucher.actual_value) == (1, "100元代金券", 8000, 10000)
    assert (voucher.type, voucher.stock) == (1, 200)
    assert voucher.sub_title == "周一至周五均可使用"
    assert voucher.begin_time == datetime(2030, 11, 30, 12, 0, tzinfo=UTC)
    assert voucher.end_time == datetime(2030, 11, 30, 23, 59, 59, tzinfo=UTC)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(sample(shopId=None), "shopId", id="missing-shopId"),
        pytest.param(sample(shopId=0), "shopId", id="shopId-zero"),
        pytest.param(sample(shopId=-3), "shopId", id="shopId-negative"),
        pytest.param(sample(shopId="1"), "shopId", id="shopId-string"),
        pytest.param(sample(title=""), "title", id="title-empty"),
        pytest.param(sample(title=None), "title", id="title-missing"),
        pytest.param(sample(stock=0), "stock", id="stock-zero"),
        pytest.param(sample(stock="10"), "stock", id="stock-string"),
        pytest.param(sample(stock=10.5), "stock", id="stock-float"),
        pytest.param(sample(stock=True), "stock", id="stock-bool"),
        pytest.param(sample(stock=None), "stock", id="stock-missing"),
        pytest.param(sample(payValue=-1), "payValue", id="payValue-negative"),
        pytest.param(sample(endTime="2030-11-30T11:00:00"), "endTime", id="end-before-begin"),
        pytest.param(sample(endTime="2030-11-30T12:00:00"), "endTime", id="end-equals-begin"),
        pytest.param(sample(beginTime="tomorrow"), "beginTime", id="beginTime-not-a-date"),
        pytest.param(sample(endTime=None), "endTime", id="endTime-missing"),
        pytest.param(sample(type=0), "type", id="ordinary-type-on-seckill-route"),
        pytest.param(sample(type=2), "type", id="type-unknown"),
    ],
)
def test_bad_seckill_bodies_name_the_field(body: str, field: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_voucher(body, SeckillVoucherIn, UTC)
    assert caught.value.refusal.status == 400
    assert caught.value.refusal.message.startswith(f"{field}:"), caught.value.refusal.message


@pytest.mark.parametrize("body", ["not json", "", None, "[]", '"a string"', "{"])
def test_body_that_is_not_a_json_object_is_a_400(body: str | None) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_voucher(body, SeckillVoucherIn, UTC)
    assert caught.value.refusal.status == 400


def test_seckill_type_on_the_ordinary_route_is_a_400() -> None:
    with pytest.raises(BadRequest) as caught:
        parse_voucher(sample(), VoucherIn, UTC)
    assert caught.value.refusal.message.startswith("type:")


def test_ordinary_voucher_body() -> None:
    body = json.dumps({"shopId": 3, "title": "t", "payValue": 100, "actualValue": 200})
    voucher = parse_voucher(body, VoucherIn, UTC)
    assert (voucher.shop_id, voucher.type, voucher.sub_title) == (3, 0, None)


def test_naive_times_are_read_in_the_given_zone() -> None:
    voucher = parse_voucher(SAMPLE, SeckillVoucherIn, ZoneInfo("Asia/Shanghai"))
    assert isinstance(voucher, SeckillVoucherIn)
    # 12:00 in Shanghai (UTC+8) is 04:00 UTC.
    assert voucher.begin_time == datetime(2030, 11, 30, 4, 0, tzinfo=UTC)
    assert voucher.end_time == datetime(2030, 11, 30, 15, 59, 59, tzinfo=UTC)
    assert voucher.begin_time.utcoffset() == timedelta(0)


def test_times_with_an_offset_ignore_the_zone() -> None:
    body = sample(beginTime="2030-11-30T12:00:00+02:00", endTime="2030-11-30T13:00:00Z")
    voucher = parse_voucher(body, SeckillVoucherIn, ZoneInfo("Asia/Shanghai"))
    assert isinstance(voucher, SeckillVoucherIn)
    assert voucher.begin_time == datetime(2030, 11, 30, 10, 0, tzinfo=UTC)
    assert voucher.end_time == datetime(2030, 11, 30, 13, 0, tzinfo=UTC)


def test_end_before_begin_is_judged_after_the_zone() -> None:
    # 10:00+00:00 is after 12:00 in Shanghai (04:00Z): valid only once the zone applies.
    body = sample(beginTime="2030-11-30T12:00:00", endTime="2030-11-30T10:00:00+00:00")
    voucher = parse_voucher(body, SeckillVoucherIn, ZoneInfo("Asia/Shanghai"))
    assert isinstance(voucher, SeckillVoucherIn)
    with pytest.raises(BadRequest):
        parse_voucher(body, SeckillVoucherIn, UTC)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        pytest.param({"beginTime": "0001-01-01T00:00:00+01:00"}, "beginTime", id="begin-before-year-1-in-utc"),
        pytest.param({"endTime": "9999-12-31T23:59:59-01:00"}, "endTime", id="end-after-year-9999-in-utc"),
    ],
)
def test_times_outside_the_years_1_to_9999_in_utc_name_the_field(changes: dict[str, str], field: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_voucher(sample(**changes), SeckillVoucherIn, UTC)
    assert caught.value.refusal.message.startswith(f"{field}:"), caught.value.refusal.message


def test_a_naive_time_pushed_out_of_range_by_the_zone_names_the_field() -> None:
    body = sample(beginTime="0001-01-01T00:00:00", endTime="2030-01-01T00:00:00Z")
    with pytest.raises(BadRequest) as caught:
        parse_voucher(body, SeckillVoucherIn, ZoneInfo("Asia/Shanghai"))
    assert caught.value.refusal.message.startswith("beginTime:"), caught.value.refusal.message


@pytest.mark.parametrize("begin", ["0001-01-01T00:00Z", "0001-01-01T00:00:59Z", "0001-01-01T01:00Z"])
def test_a_draw_opening_in_the_year_1_is_refused_naming_begin_time(begin: str) -> None:
    """Its close, drawCloseSeconds (60) before, is before the year 1 for the first two."""
    body = sample(beginTime=begin, endTime="2099-01-01T00:00Z", admission="draw", drawCloseSeconds=60)
    with pytest.raises(BadRequest) as caught:
        parse_voucher(body, SeckillVoucherIn, UTC)
    assert caught.value.refusal.message.startswith("beginTime:"), caught.value.refusal.message


def test_a_window_that_has_already_ended_is_refused_naming_end_time() -> None:
    now = datetime.now(UTC)
    ended = sample(beginTime=(now - timedelta(hours=2)).isoformat(), endTime=(now - timedelta(seconds=1)).isoformat())
    with pytest.raises(BadRequest) as caught:
        parse_voucher(ended, SeckillVoucherIn, UTC)
    assert caught.value.refusal.message.startswith("endTime:"), caught.value.refusal.message
    # Still open, if only just: accepted.
    open_ = sample(beginTime=(now - timedelta(hours=2)).isoformat(), endTime=(now + timedelta(minutes=1)).isoformat())
    assert isinstance(parse_voucher(open_, SeckillVoucherIn, UTC), SeckillVoucherIn)


@pytest.mark.parametrize(
    "begin",
    [
        pytest.param("20301130", id="digits-read-as-an-epoch"),
        pytest.param("1", id="one-digit"),
        pytest.param("1.5", id="decimal-text"),
        pytest.param(20301130, id="a-number"),
        pytest.param(True, id="a-boolean"),
        pytest.param("2030-11-30", id="a-date-alone"),
        pytest.param("2030-11-30 12:00:00", id="a-space-for-the-T"),
        pytest.param("2030-11-30T12", id="an-hour-alone"),
        pytest.param("2030-11-30T12:00:00+08", id="an-offset-without-minutes"),
        pytest.param("2030-11-30T12:00:00\n", id="a-trailing-newline"),
        pytest.param("2030-02-29T12:00:00", id="february-29-of-a-common-year"),
        pytest.param("", id="empty"),
    ],
)
def test_a_time_that_is_not_iso_8601_names_the_field(begin: object) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_voucher(sample(beginTime=begin), SeckillVoucherIn, UTC)
    assert caught.value.refusal.message.startswith("beginTime: must be an ISO-8601"), caught.value.refusal.message


@pytest.mark.parametrize(
    ("begin", "expected"),
    [
        ("2030-11-30T12:00", datetime(2030, 11, 30, 12, tzinfo=UTC)),
        ("2030-11-30T12:00:00.250+08:00", datetime(2030, 11, 30, 4, 0, 0, 250_000, tzinfo=UTC)),
        ("2032-02-29T00:00:00Z", datetime(2032, 2, 29, tzinfo=UTC)),
        # RFC 3339 lets the "T" and the "Z" be lowercase.
        ("2030-11-30t12:00:00z", datetime(2030, 11, 30, 12, tzinfo=UTC)),
        ("2030-11-30T12:00:00.5z", datetime(2030, 11, 30, 12, 0, 0, 500_000, tzinfo=UTC)),
        ("2030-11-30t12:00+08:00", datetime(2030, 11, 30, 4, tzinfo=UTC)),
    ],
)
def test_iso_8601_times_to_the_minute_or_finer(begin: str, expected: datetime) -> None:
    voucher = parse_voucher(sample(beginTime=begin, endTime="2033-01-01T00:00:00Z"), SeckillVoucherIn, UTC)
    assert isinstance(voucher, SeckillVoucherIn)
    assert voucher.begin_time == expected


@pytest.mark.parametrize("value", [True, False, 0.0, 1.0, "1"], ids=repr)
@pytest.mark.parametrize("model", [VoucherIn, SeckillVoucherIn], ids=lambda model: model.__name__)
def test_type_is_a_json_integer_strictly(model: type[VoucherIn], value: object) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_voucher(sample(type=value), model, UTC)
    assert caught.value.refusal.message.startswith("type:"), caught.value.refusal.message


@pytest.mark.parametrize("field", ["shopId", "payValue", "actualValue", "stock"])
def test_a_whole_float_is_not_an_integer(field: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_voucher(sample(**{field: 1.0}), SeckillVoucherIn, UTC)
    assert caught.value.refusal.message.startswith(f"{field}:"), caught.value.refusal.message


@pytest.mark.parametrize("hold", [9, 0, -900, 86_401, 900.0, 900.5, "900", True, [900]])
def test_hold_seconds_is_an_integer_from_10_to_86400_else_a_400_naming_it(hold: object) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_voucher(sample(holdSeconds=hold), SeckillVoucherIn, UTC)
    assert caught.value.refusal.status == 400
    assert caught.value.refusal.message.startswith("holdSeconds:"), caught.value.refusal.message


@pytest.mark.parametrize(("hold", "expected"), [(None, 900), (10, 10), (86_400, 86_400), (3600, 3600)])
def test_hold_seconds_takes_its_bounds_and_defaults_to_900(hold: int | None, expected: int) -> None:
    voucher = parse_voucher(sample(holdSeconds=hold), SeckillVoucherIn, UTC)
    assert isinstance(voucher, SeckillVoucherIn)
    assert voucher.hold_seconds == expected


@pytest.mark.parametrize(("limit", "size"), [(None, PAGE_SIZE), ("1", 1), ("007", 7), ("100", 100)])
def test_the_page_size_is_the_limit_or_the_default(limit: str | None, size: int) -> None:
    assert page_size(limit) == size


@pytest.mark.parametrize("limit", ["0", "101", "-1", "1.5", "", "ten"])
def test_a_limit_out_of_range_is_a_400(limit: str) -> None:
    with pytest.raises(BadRequest, match="limit must be an integer from 1 to 100"):
        page_size(limit)


def test_only_a_page_with_a_next_one_links_to_it() -> None:
    assert page_headers(3, 20, Page([], None)) == {}
    assert page_headers(3, 20, Page([], 41)) == {"Link": '</voucher/list/3?limit=20&after=41>; rel="next"'}
