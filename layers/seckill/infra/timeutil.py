"""Times: ISO-8601 at the edges, UTC everywhere inside."""

from __future__ import annotations

import re
from datetime import UTC, datetime, tzinfo
from typing import overload

# A time as clients send it: an ISO-8601 date and time (minutes at least, an offset
# optional; "T" and "Z" in either case, as RFC 3339 allows), each field within its
# calendar range, so that the pattern, which the OpenAPI document carries, admits
# exactly the times that parse. [0-9], not \d: the
# document's pattern is ECMA-262, and Python's \d takes other scripts' digits.
_YEAR = r"(?:000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = r"(?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1[0-9]|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31)"
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,6})?)?"
_OFFSET = r"(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
ISO_PATTERN = rf"^(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)[Tt]{_TIME}{_OFFSET}?$"
_ISO = re.compile(ISO_PATTERN)


def parse_iso(text: str) -> datetime:
    """A client's time; anything but ISO_PATTERN (a number, a digit string read as an
    epoch, a date alone) is a ValueError."""
    if _ISO.fullmatch(text) is None:  # fullmatch: $ alone would let a trailing newline through
        raise ValueError(text)
    return datetime.fromisoformat(text.upper())  # fromisoformat takes "T" and "Z" only


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
