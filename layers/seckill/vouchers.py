"""Vouchers: creating them (MySQL, then the Redis preload the gate reads), listing them,
and stopping a sale."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Annotated, Any, Final, Literal, TypeVar
from urllib.parse import urlencode

import pymysql
from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError
from pymysql.cursors import DictCursor
from redis.exceptions import RedisError

from seckill.draw.tickets import commitment
from seckill.infra import keys
from seckill.infra.clients import RedisClient
from seckill.infra.db import Database
from seckill.infra.errors import BadRequest, NotFound
from seckill.infra.lua_scripts import Scripts
from seckill.infra.timeutil import ISO_PATTERN, from_db, iso, parse_iso, to_db, to_ms, to_utc
from seckill.repair.counter import restore_order_counter

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

# How long the keys of a preload whose creation never committed linger.
PROVISIONAL_TTL = 3600

ORDINARY: Final = 0
SECKILL: Final = 1
ON_SALE, WITHDRAWN = 1, 2  # tb_voucher.status
# A cache holding every seckill voucher that ended less than this long ago (or has
# not ended) is complete enough for the gate to trust "not found" (keys.loaded()).
LOADED_HORIZON = timedelta(days=1)
PAGE_SIZE, MAX_PAGE_SIZE = 20, 100  # vouchers in a page of the list: by default, at most
# The list's ``limit``: 1 to MAX_PAGE_SIZE in decimal digits (leading zeros allowed).
PAGE_SIZE_PATTERN = "^0*(?:[1-9][0-9]?|100)$"
Money = Annotated[int, Field(ge=0, le=10**12)]
# How long a confirmed order stays payable (docs/holds.md): by default, at least, at most.
HOLD_SECONDS, MIN_HOLD_SECONDS, MAX_HOLD_SECONDS = 900, 10, 86_400
# A draw's parameters (docs/draw.md): their defaults when a draw leaves them out.
DRAW_DEFAULTS: Final = {"admit_factor": 2, "draw_close_seconds": 60, "wave_seconds": 10}
DrawSeconds = Annotated[int | None, Field(ge=5, le=3600)]
# A draw's optional pace (docs/draw.md, "Paced admission"): the most entrants newly
# admitted in any one second; null (the default) for no limit.
MAX_ADMIT_RATE = 1_000_000


def _time(value: Any) -> datetime:
    # Only ISO-8601 text (or a datetime built in Python, never in a JSON body): pydantic's
    # own datetime reads "20301130" as seconds since 1970.
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return parse_iso(value)
        except ValueError:
            pass
    raise PydanticCustomError("iso_time", "must be an ISO-8601 date and time, as 2030-11-30T12:00:00+08:00")


# JSON Schema's date-time needs an offset; these times may come without one.
LocalTime = Annotated[
    datetime,
    PlainValidator(_time),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": ISO_PATTERN,
            "description": "ISO-8601, to the minute at least; a time without an offset is read in SECKILL_TIMEZONE "
            "(UTC by default)",
        }
    ),
]


# Strict ints, not Literals: a Literal takes false, true and 0.0 (Python's 0 == False == 0.0).
OrdinaryType = Annotated[int, WithJsonSchema({"type": "integer", "const": ORDINARY})]
SeckillType = Annotated[int, WithJsonSchema({"type": "integer", "const": SECKILL})]


class VoucherIn(BaseModel):
    """The body of ``POST /voucher`` (hm-dianping's ``Voucher``), amounts in cents."""

    # Built at the first admin request that needs it, not at every cold start of the API.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True, defer_build=True
    )

    shop_id: Annotated[int, Field(gt=0, le=2**63 - 1)]
    title: Annotated[str, Field(min_length=1, max_length=255)]
    sub_title: Annotated[str | None, Field(max_length=255)] = None
    rules: Annotated[str | None, Field(max_length=1024)] = None
    pay_value: Money
    actual_value: Money
    type: OrdinaryType = ORDINARY


class SeckillVoucherIn(VoucherIn):
    """The body of ``POST /voucher/seckill``: a voucher plus stock, sale window and hold. The window's
    end is after its begin and not yet passed, and both times fall within the years 1 to 9999 in UTC."""

    # The document says what _admission checks: a draw's parameters only with admission "draw".
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"properties": {"admission": {"const": "draw"}}, "required": ["admission"]},
                {"properties": {to_camel(name): {"type": "null"} for name in (*DRAW_DEFAULTS, "admit_rate")}},
            ]
        }
    )

    type: SeckillType = SECKILL
    stock: Annotated[int, Field(gt=0, le=10_000_000)]
    begin_time: LocalTime
    end_time: LocalTime
    hold_seconds: Annotated[int, Field(ge=MIN_HOLD_SECONDS, le=MAX_HOLD_SECONDS)] = HOLD_SECONDS
    # A race (first come, first served) or a draw (docs/draw.md), and a draw's parameters:
    # absent (None) for a race; a draw that leaves one out gets DRAW_DEFAULTS'.
    admission: Literal["race", "draw"] = "race"
    admit_factor: Annotated[int | None, Field(ge=1, le=100)] = None
    draw_close_seconds: DrawSeconds = None
    wave_seconds: DrawSeconds = None
    admit_rate: Annotated[int | None, Field(ge=1, le=MAX_ADMIT_RATE)] = None

    @property
    def draw(self) -> bool:
        return self.admission == "draw"

    @property
    def closes_at(self) -> datetime | None:
        """When a draw closes: ``drawCloseSeconds`` before the window opens."""
        if self.draw_close_seconds is None:
            return None
        return self.begin_time - timedelta(seconds=self.draw_close_seconds)


def parse_model(body: str | None, model: type[M]) -> M:
    """Validate a JSON body; the first offending field is named in the 400."""
    try:
        return model.model_validate_json(body or "")
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "body"
        raise BadRequest(f"{field}: {error['msg']}") from None


V = TypeVar("V", bound=VoucherIn)
S = TypeVar("S", bound=SeckillVoucherIn)


def parse_voucher(body: str | None, model: type[V], zone: tzinfo) -> V:
    """Validate a voucher's JSON body; the first offending field is named in the 400."""
    voucher = parse_model(body, model)
    expected = SECKILL if model is SeckillVoucherIn else ORDINARY
    if voucher.type != expected:
        raise BadRequest(f"type: must be {expected} on this route")
    if isinstance(voucher, SeckillVoucherIn):
        begin, end = _utc(voucher.begin_time, zone, "beginTime"), _utc(voucher.end_time, zone, "endTime")
        if end <= begin:
            raise BadRequest("endTime: must be after beginTime")
        if end <= datetime.now(UTC):
            raise BadRequest("endTime: the sale window has already ended")
        voucher = _admission(voucher.model_copy(update={"begin_time": begin, "end_time": end}))
    return voucher


def _admission(voucher: S) -> S:
    """A race takes no draw parameter; a draw gets the defaults of those it leaves out,
    and its window must open more than ``drawCloseSeconds`` from now."""
    given = {name: getattr(voucher, name) for name in DRAW_DEFAULTS}
    if not voucher.draw:
        for name, value in {**given, "admit_rate": voucher.admit_rate}.items():
            if value is not None:
                raise BadRequest(f'{to_camel(name)}: only a draw (admission "draw") takes it')
        return voucher
    voucher = voucher.model_copy(
        update={name: DRAW_DEFAULTS[name] if value is None else value for name, value in given.items()}
    )
    try:
        closes_at = voucher.closes_at
    except OverflowError:  # the close would fall before the year 1: long past
        closes_at = None
    if closes_at is None or closes_at <= datetime.now(UTC):
        raise BadRequest("beginTime: a draw's must be more than drawCloseSeconds from now")
    return voucher


def _utc(moment: datetime, zone: tzinfo, field: str) -> datetime:
    try:
        return to_utc(moment, zone)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is in year 0 in UTC
        raise BadRequest(f"{field}: must fall within the years 1 to 9999 in UTC") from None


_INSERT_VOUCHER = (
    "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, actual_value, type)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
)


def _voucher_row(v: VoucherIn) -> tuple[Any, ...]:
    return (v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value, v.type)


def create_voucher(db: Database, voucher: VoucherIn) -> int:
    def insert(cursor: DictCursor) -> int:
        cursor.execute(_INSERT_VOUCHER, _voucher_row(voucher))
        return int(cursor.lastrowid)

    return db.run(insert)


def create_seckill_voucher(
    db: Database, redis: RedisClient, voucher: SeckillVoucherIn, start_clock: Callable[[int, int], None] | None = None
) -> int:
    """Both tables in one transaction, with the Redis preload inside it: if Redis
    refuses, nothing is committed. A draw's clock is started inside it too
    (``start_clock(voucherId, closeMs)``, ``seckill.draw.moves.start``): no draw is
    committed without its clock. The preload is provisional (the gate does not
    sell it) until the commit has succeeded: a creation that dies before or during
    its commit leaves nothing sellable, only keys that expire. If marking it final
    fails after the commit, the voucher is created and reconciliation, which counts
    a provisional voucher as missing, makes it sellable. The only voucher of the last
    day then marks the cache complete (``_mark_complete``)."""
    preloaded: int | None = None
    alone = False

    def insert_and_preload(cursor: DictCursor) -> int:
        nonlocal preloaded, alone
        cursor.execute(_INSERT_VOUCHER, _voucher_row(voucher))
        voucher_id = int(cursor.lastrowid)
        cursor.execute(
            "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time, hold_seconds)"
            " VALUES (%s, %s, %s, %s, %s)",
            (voucher_id, voucher.stock, to_db(voucher.begin_time), to_db(voucher.end_time), voucher.hold_seconds),
        )
        closes_at = voucher.closes_at
        if closes_at is not None:
            _insert_draw(cursor, voucher_id, voucher, closes_at)
            if start_clock is not None:
                start_clock(voucher_id, to_ms(closes_at))
        # Only when this is the one voucher the gate may need is the cache complete with
        # it; otherwise Redis may have lost others, and recovery or reconciliation says so.
        cursor.execute(
            "SELECT 1 FROM tb_seckill_voucher WHERE voucher_id <> %s AND end_time > %s LIMIT 1",
            (voucher_id, to_db(datetime.now(UTC) - LOADED_HORIZON)),
        )
        alone = cursor.fetchone() is None
        # The last step of the transaction: a lost connection can only come before it.
        preload(
            redis, voucher_id, voucher.stock, voucher.begin_time, voucher.end_time, provisional=True, close=closes_at
        )
        preloaded = voucher_id
        return voucher_id

    try:
        voucher_id = db.run(insert_and_preload)
    except Exception:
        if preloaded is not None:
            unload(redis, preloaded)
        raise
    try:
        make_final(redis, voucher_id)
    except RedisError:
        log.warning("voucher %s created; reconciliation will put it on sale in Redis", voucher_id, exc_info=True)
    if alone:
        _mark_complete(db, redis)
    return voucher_id


def _mark_complete(db: Database, redis: RedisClient) -> None:
    """Mark Redis loaded (it holds every voucher the gate may need). Missing, the mark
    says Redis lost its data (or is new), the day's order-id counter with it, while warm
    containers may still hold blocks leased before: the counter is raised first, as
    recovery raises it, or a new container would lease those blocks again and make the
    same ids. A failure leaves the mark to recovery: the voucher is created either way."""
    try:
        if not redis.exists(keys.loaded()):
            restore_order_counter(db, Scripts.register(redis))
            redis.set(keys.loaded(), 1)
    except (RedisError, pymysql.Error):
        log.warning("voucher created; recovery will mark Redis loaded", exc_info=True)


def _insert_draw(cursor: DictCursor, voucher_id: int, voucher: SeckillVoucherIn, closes_at: datetime) -> None:
    """A draw's row: a fresh secret seed and its commitment; the clock's first move is the close."""
    seed = os.urandom(32)
    cursor.execute(
        "INSERT INTO tb_draw (voucher_id, seed, commitment, admit_factor, close_seconds, wave_seconds, admit_rate,"
        " close_time, clock_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            voucher_id,
            seed,
            commitment(seed),
            voucher.admit_factor,
            voucher.draw_close_seconds,
            voucher.wave_seconds,
            voucher.admit_rate,
            to_db(closes_at),
            to_ms(closes_at),
        ),
    )


def preload(
    redis: RedisClient,
    voucher_id: int,
    stock: int,
    begin: datetime,
    end: datetime,
    *,
    provisional: bool = False,
    close: datetime | None = None,
) -> None:
    """Write the gate's view of a fresh voucher in one MULTI (one slot, thanks to the hash tag).

    Buyers, pending marks, returned orders and a draw's cursor are reset: an id reused after
    a database was recreated must not inherit an old sale's buyers. A ``provisional`` preload is
    not sold by the gate and expires unless ``make_final`` follows. ``close``: a draw's close
    (the gate then wants a pass's ticket below the cursor, docs/draw.md).
    """
    window: dict[str, int] = {"begin": to_ms(begin), "end": to_ms(end)}
    if close is not None:
        window.update(draw=1, close=to_ms(close))
    with redis.pipeline(transaction=True) as pipe:
        pipe.delete(
            keys.buyers(voucher_id),
            keys.pending(voucher_id),
            keys.window(voucher_id),
            keys.returned(voucher_id),
            keys.cursor(voucher_id),
        )
        pipe.set(keys.stock(voucher_id), stock, ex=PROVISIONAL_TTL if provisional else None)
        pipe.hset(keys.window(voucher_id), mapping={**window, "provisional": 1} if provisional else window)
        if provisional:
            pipe.expire(keys.window(voucher_id), PROVISIONAL_TTL)
        pipe.execute()


def make_final(redis: RedisClient, voucher_id: int) -> None:
    """The voucher's creation has committed: the gate may sell it."""
    with redis.pipeline(transaction=True) as pipe:
        pipe.hdel(keys.window(voucher_id), "provisional")
        pipe.persist(keys.stock(voucher_id))
        pipe.persist(keys.window(voucher_id))
        pipe.execute()


def unload(redis: RedisClient, voucher_id: int) -> None:
    try:
        redis.delete(*keys.voucher_keys(voucher_id))
    except Exception:
        log.exception("could not remove the Redis preload of voucher %s", voucher_id)


@dataclass(frozen=True)
class Page:
    vouchers: list[dict[str, Any]]
    next_after: int | None  # the ``after`` of the next page; None on the last one


def list_vouchers(db: Database, shop_id: int, *, limit: int = PAGE_SIZE, after: int = 0) -> Page:
    """A page of a shop's vouchers on sale, by id (seckill ones with their stock, window
    and hold): the first ``limit`` whose id is above ``after``."""

    def select(cursor: DictCursor) -> list[dict[str, Any]]:
        cursor.execute(
            "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value, v.type, v.status,"
            " sv.stock, sv.begin_time, sv.end_time, sv.hold_seconds, d.close_time,"
            " d.admit_rate"
            " FROM tb_voucher v LEFT JOIN tb_seckill_voucher sv ON sv.voucher_id = v.id"
            " LEFT JOIN tb_draw d ON d.voucher_id = v.id"
            " WHERE v.shop_id = %s AND v.status = %s AND v.id > %s ORDER BY v.id LIMIT %s",
            (shop_id, ON_SALE, after, limit + 1),  # one more says whether a next page exists
        )
        return list(cursor.fetchall())

    rows = db.run(select, read_only=True)
    listed = [
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
            "holdSeconds": r["hold_seconds"],
            # A seckill voucher's admission, and a draw's close; nulls for an ordinary one.
            "admission": None if r["stock"] is None else "race" if r["close_time"] is None else "draw",
            "closesAt": None if r["close_time"] is None else iso(from_db(r["close_time"])),
            "admitRate": r["admit_rate"],
        }
        for r in rows[:limit]
    ]
    return Page(listed, listed[-1]["id"] if len(rows) > limit else None)


def page_size(limit: str | None) -> int:
    """The list's ``limit`` query parameter as a page size: ``PAGE_SIZE`` without one."""
    if limit is None:
        return PAGE_SIZE
    if re.fullmatch(PAGE_SIZE_PATTERN, limit) is None:
        raise BadRequest(f"limit must be an integer from 1 to {MAX_PAGE_SIZE}")
    return int(limit)


def page_headers(shop_id: int, limit: int, page: Page) -> dict[str, str]:
    """The page's headers: a ``Link`` to the next page while there is one."""
    headers: dict[str, str] = {}
    if page.next_after is not None:
        next_page = f"/voucher/list/{shop_id}?{urlencode({'limit': limit, 'after': page.next_after})}"
        headers["Link"] = f'<{next_page}>; rel="next"'
    return headers


def stop_seckill_voucher(db: Database, redis: RedisClient, voucher_id: int) -> None:
    """Withdraw a seckill voucher: MySQL first, then the gate's window closes (0/0, so
    every press is ENDED). Idempotent. If Redis fails after MySQL has committed, the
    error is raised (the caller answers 503): a retry finishes the job, and so does
    reconciliation, which rebuilds a withdrawn voucher with a closed window."""

    def withdraw(cursor: DictCursor) -> None:
        cursor.execute(
            "SELECT v.id FROM tb_voucher v JOIN tb_seckill_voucher sv ON sv.voucher_id = v.id"
            " WHERE v.id = %s FOR UPDATE",
            (voucher_id,),
        )
        if cursor.fetchone() is None:
            raise NotFound("no such seckill voucher", code="VOUCHER_NOT_FOUND")
        cursor.execute("UPDATE tb_voucher SET status = %s WHERE id = %s", (WITHDRAWN, voucher_id))

    db.run(withdraw)
    redis.hset(keys.window(voucher_id), mapping={"begin": 0, "end": 0})
