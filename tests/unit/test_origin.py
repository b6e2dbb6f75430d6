"""seckill.origin: which requests count as having come through the edge."""

from __future__ import annotations

from seckill.origin import HEADER, OriginCheck


def test_without_a_secret_every_request_is_admitted() -> None:
    check = OriginCheck.from_env({})
    assert check.admits({})
    assert check.admits({HEADER: "anything"})


def test_with_a_local_secret_only_that_value_is_admitted() -> None:
    check = OriginCheck.from_env({"SECKILL_ORIGIN_SECRET": "s3cret-value"})
    assert check.admits({HEADER: "s3cret-value"})
    for headers in ({}, {HEADER: ""}, {HEADER: "s3cret-valu"}, {HEADER: "s3cret-value "}, {"x-other": "s3cret-value"}):
        assert not check.admits(headers), headers


def test_the_local_secret_wins_over_an_arn() -> None:
    check = OriginCheck.from_env({"SECKILL_ORIGIN_SECRET": "local", "ORIGIN_SECRET_ARN": "arn:never-read"})
    assert check.admits({HEADER: "local"})
