"""A raised no carries the same Refusal the gate returns: one type for every client-facing no."""

from __future__ import annotations

from seckill.infra.errors import BadRequest, NotFound, Refusal, TryAgain


def test_a_raised_error_carries_its_refusal() -> None:
    assert BadRequest("limit must be an integer").refusal == Refusal(400, "BAD_REQUEST", "limit must be an integer")
    assert TryAgain("please try again").refusal == Refusal(503, "TRY_AGAIN", "please try again")


def test_a_code_given_replaces_the_default_one() -> None:
    refusal = NotFound("order not found", code="ORDER_NOT_FOUND").refusal
    assert refusal == Refusal(404, "ORDER_NOT_FOUND", "order not found")
