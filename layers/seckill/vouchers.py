"""Vouchers: creating them (MySQL, then the Redis preload the gate reads) and listing them."""

from __future__ import annotations

import logging
from datetime import datetime, tzinfo
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from seckill import keys
from seckill.db import Database
from seckill.errors import BadRequest
from seckill.timeutil import from_db, iso, to_db, to_ms, to_utc

log = logging.getLogger(__name__)

ORDINARY, SECKILL = 0, 1
Money = Annotated[int, Field(ge=0, le=10**12)]


class VoucherIn(BaseModel):
    """The body of ``POST /voucher`` (hm-dianping's ``Voucher``), amounts in cents."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True)

    shop_id: Annotated[int, Field(gt=0, le=2**63 - 1)]
    title: Annotated[str, Field(min_length=1, max_length=255)]
    sub_title: Annotated[str | None, Field(max_length=255)] = None
    rules: Annotated[str | None, Field(max_length=1024)] = None
    pay_value: Money
    actual_value: Money
    type: Literal[0, 1] = ORDINARY


class SeckillVoucherIn(VoucherIn):
    """The body of ``POST /voucher/seckill``: a voucher plus stock and sale window."""

    type: Literal[0, 1] = SECKILL
    stock: Annotated[int, Field(gt=0, le=10_000_000)]
    begin_time: datetime
    end_time: datetime


def parse_voucher(body: str | None, model: type[VoucherIn], zone: tzinfo) -> VoucherIn:
    """Validate a JSON body; the first offending field is named in the 400."""
    try:
        voucher = model.model_validate_json(body or "")
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "body"
        raise BadRequest(f"{field}: {error['msg']}") from None
    expected = SECKILL if model is SeckillVoucherIn else ORDINARY
    if voucher.type != expected:
        raise BadRequest(f"type: must be {expected} on this route")
    if isinstance(voucher, SeckillVoucherIn):
        begin, end = to_utc(voucher.begin_time, zone), to_utc(voucher.end_time, zone)
        if end <= begin:
            raise BadRequest("endTime: must be after beginTime")
        voucher = voucher.model_copy(update={"begin_time": begin, "end_time": end})
    return voucher


_INSERT_VOUCHER = (
    "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, actual_value, type)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
)


def _voucher_row(v: VoucherIn) -> tuple[Any, ...]:
    return (v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value, v.type)


def create_voucher(db: Database, voucher: VoucherIn) -> int:
    with db.transaction() as cursor:
        cursor.execute(_INSERT_VOUCHER, _voucher_row(voucher))
        return int(cursor.lastrowid)


def create_seckill_voucher(db: Database, redis: Any, voucher: SeckillVoucherIn) -> int:
    """Both tables in one transaction, with the Redis preload inside it: if Redis
    refuses, nothing is committed; if the commit fails, the preload is undone."""
    preloaded: int | None = None
    try:
        with db.transaction() as cursor:
            cursor.execute(_INSERT_VOUCHER, _voucher_row(voucher))
            voucher_id = int(cursor.lastrowid)
            cursor.execute(
                "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (%s, %s, %s, %s)",
                (voucher_id, voucher.stock, to_db(voucher.begin_time), to_db(voucher.end_time)),
            )
            preload(redis, voucher_id, voucher.stock, voucher.begin_time, voucher.end_time)
            preloaded = voucher_id
    except Exception:
        if preloaded is not None:
            unload(redis, preloaded)
        raise
    return voucher_id


def preload(redis: Any, voucher_id: int, stock: int, begin: datetime, end: datetime) -> None:
    """Write the gate's view of a fresh voucher in one MULTI (one slot, thanks to the hash tag).

    Buyers and pending marks are reset: an id reused after a database was
    recreated must not inherit an old sale's buyers.
    """
    with redis.pipeline(transaction=True) as pipe:
        pipe.delete(keys.buyers(voucher_id), keys.pending(voucher_id), keys.window(voucher_id))
        pipe.set(keys.stock(voucher_id), stock)
        pipe.hset(keys.window(voucher_id), mapping={"begin": to_ms(begin), "end": to_ms(end)})
        pipe.execute()
    redis.set(keys.loaded(), 1)


def unload(redis: Any, voucher_id: int) -> None:
    try:
        redis.delete(keys.stock(voucher_id), keys.window(voucher_id), keys.buyers(voucher_id), keys.pending(voucher_id))
    except Exception:
        log.exception("could not remove the Redis preload of voucher %s", voucher_id)


def list_vouchers(db: Database, shop_id: int) -> list[dict[str, Any]]:
    """A shop's vouchers on sale, seckill ones with their stock and window."""
    with db.transaction() as cursor:
        cursor.execute(
            "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value, v.type, v.status,"
            " sv.stock, sv.begin_time, sv.end_time"
            " FROM tb_voucher v LEFT JOIN tb_seckill_voucher sv ON sv.voucher_id = v.id"
            " WHERE v.shop_id = %s AND v.status = 1 ORDER BY v.id",
            (shop_id,),
        )
        rows = cursor.fetchall()
    return [
        {
            "id": int(r["id"]),
            "shopId": int(r["shop_id"]),
            "title": r["title"],
            "subTitle": r["sub_title"],
            "rules": r["rules"],
            "payValue": int(r["pay_value"]),
            "actualValue": int(r["actual_value"]),
            "type": int(r["type"]),
            "status": int(r["status"]),
            "stock": r["stock"],
            "beginTime": iso(from_db(r["begin_time"])),
            "endTime": iso(from_db(r["end_time"])),
        }
        for r in rows
    ]
