"""Times: ISO-8601 at the edges, UTC everywhere inside."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import overload


def to_utc(moment: datetime, default_zone: tzinfo) -> datetime:
    """An aware UTC datetime; a naive one is read in ``default_zone`` (SECKILL_TIMEZONE)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=default_zone)
    return moment.astimezone(UTC)


@overload
def from_db(moment: datetime) -> datetime: ...
@overload
def from_db(moment: None) -> None: ...
def from_db(moment: datetime | None) -> datetime | None:
    """The database stores naive UTC."""
    return None if moment is None else moment.replace(tzinfo=UTC)


def to_db(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None)


def from_ms(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC)


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
