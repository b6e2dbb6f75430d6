"""The one poll helper of the suite (tests/helpers.py)."""

from __future__ import annotations

import itertools

import pytest

from tests.helpers import wait_for


def test_returns_the_first_value_the_condition_accepts() -> None:
    counter = itertools.count()
    assert wait_for(lambda: next(counter), "three calls", until=lambda n: n >= 3, interval=0) == 3


def test_fails_naming_what_it_awaited_and_the_last_value_seen() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"for the queue to fill; last seen: \[\]"):
        wait_for(list, "the queue to fill", timeout=0, interval=0)


def test_an_ignored_exception_is_retried_and_reported_if_it_lasts() -> None:
    calls: list[str | Exception] = [ConnectionError("not yet"), "up"]

    def probe() -> str:
        value = calls.pop(0)
        if isinstance(value, Exception):
            raise value
        return value

    assert wait_for(probe, "the server", interval=0, ignoring=(ConnectionError,)) == "up"

    def refused() -> str:
        raise ConnectionError("refused")

    with pytest.raises(pytest.fail.Exception, match=r"ConnectionError\('refused'\)"):
        wait_for(refused, "the server", timeout=0, interval=0, ignoring=(ConnectionError,))


def test_any_other_exception_ends_the_wait() -> None:
    def broken() -> bool:
        raise ValueError("broken")

    with pytest.raises(ValueError, match="broken"):
        wait_for(broken, "nothing", ignoring=(ConnectionError,))
