"""The reservation mark is built in one place, ``make_mark`` of ``lua/lib/mark.lua``, which
every script that writes a mark calls; the parsers' agreement is test_gate's."""

from __future__ import annotations

from typing import Any

import pytest

from seckill.infra.lua_scripts import lua_dir
from seckill.press.gate import Mark


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (("1700000000000", "tok", "1234567890123456789"), "1700000000000:tok:1234567890123456789"),
        (("1700000000000", "tok", "1234567890123456789", "promised"), "1700000000000:tok:1234567890123456789:promised"),
        (("1", "dlq", "42", "promised"), "1:dlq:42:promised"),
    ],
)
def test_make_mark_builds_the_documented_mark(redis: Any, args: tuple[str, ...], text: str) -> None:
    library = (lua_dir() / "lib" / "mark.lua").read_text(encoding="utf-8")
    # ARGV[4], when given, stands for true: Redis passes every argument as text.
    built = redis.eval(library + "return make_mark(ARGV[1], ARGV[2], ARGV[3], ARGV[4] ~= nil)", 0, *args)
    assert built == text
    assert Mark.parse(built) is not None
