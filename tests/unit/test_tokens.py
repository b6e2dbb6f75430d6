"""Reading a login token from the authorization header."""

from __future__ import annotations

import pytest

from seckill.tokens import token_from_header

TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (TOKEN, TOKEN),
        (f"Bearer {TOKEN}", TOKEN),
        (f"bearer {TOKEN}", TOKEN),
        (f"BEARER {TOKEN}", TOKEN),
        (f"BeArEr   {TOKEN}  ", TOKEN),
        (f"  {TOKEN}\t", TOKEN),
        ("abc_DEF-12", "abc_DEF-12"),  # hm-dianping-style tokens: letters, digits, _ and -
        ("a" * 8, "a" * 8),
        ("a" * 128, "a" * 128),
    ],
)
def test_token_from_header_accepts(header: str, expected: str) -> None:
    assert token_from_header(header) == expected


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "   ",
        "Bearer",
        "Bearer ",
        "Bearer    ",
        "short",
        "a" * 7,
        "Bearer a1b2c3",
        "a" * 129,
        f"Basic {TOKEN}",
        f"{TOKEN[:10]} {TOKEN[10:]}",
        f"{TOKEN}*",
        f"{TOKEN}:x",
        "login:token:abcdefgh",  # must not address another key
        f"{TOKEN}\n{TOKEN}",
        "Bearer Bearer " + TOKEN,
        "абвгдежзий",  # letters outside ASCII
    ],
)
def test_token_from_header_rejects(header: str | None) -> None:
    assert token_from_header(header) is None
