"""The main job's checks of holds (invariant 6), on outcomes built by hand: each
way a hold can go wrong fails its own check and no other."""

from __future__ import annotations

import io

from rich.console import Console

from seckill_demo.holds_outcome import Holds, HoldsOutcome, check_holds, check_known
from seckill_demo.load import Press, lost, percentiles
from seckill_demo.payer import Answer
from seckill_demo.report import Report, render

# Stock 4: orders 1 and 2 paid, 3 expired and 4 cancelled (their units resold to 5 and 6).
STATES = {1: "PAID", 2: "PAID", 3: "EXPIRED", 4: "CANCELLED", 5: "PAID", 6: "PAID"}


def outcome(**changes: object) -> HoldsOutcome:
    fields: dict[str, object] = {
        "states": STATES,
        "paid_late": 0,
        "paid_closed": 0,
        "unpaid_without_deadline": 0,
        "expired_early": 0,
        "returned": 2,
        "mysql_stock": 0,
        "redis_stock": 0,
    }
    return HoldsOutcome(**(fields | changes))  # type: ignore[arg-type]


def failed(result: HoldsOutcome, holds: Holds | None = None, statuses: dict[int, str] | None = None) -> list[str]:
    checks = check_holds(result, holds or Holds(), STATES if statuses is None else statuses, stock=4)
    return [c.name for c in checks if not c.ok]


def test_a_sale_whose_holds_all_resolved_passes() -> None:
    holds = Holds(answers=[Answer(1, "pay", 200, "PAID"), Answer(3, "pay", 409, "EXPIRED")])
    assert failed(outcome(), holds) == []


def test_each_fault_fails_its_own_check() -> None:
    assert failed(outcome(returned=3)) == ["no unit returned twice"]
    assert failed(outcome(redis_stock=1)) == ["no unit returned twice"]
    assert failed(outcome(paid_late=1)) == ["no paid order expired, none paid after its deadline"]
    assert failed(outcome(expired_early=1)) == ["no order expired before its deadline"]
    # A unit neither paid nor on sale: expired, given back, but not counted in MySQL's stock.
    lost = outcome(states={**STATES, 6: "EXPIRED"}, returned=3)
    assert failed(lost, statuses=lost.states) == [
        "every unit ends paid or back on sale",
        "every unit sold exactly once",
        "created stock = remaining + payable + paid",
    ]
    # A hold still outstanding: sold, not yet paid.
    outstanding = outcome(states={**STATES, 6: "CONFIRMED"})
    assert failed(outstanding, statuses=outstanding.states) == [
        "every unit ends paid or back on sale",
        "every unit sold exactly once",
    ]


def test_a_unit_given_back_for_an_order_not_admitted_counts_as_returned_once() -> None:
    # A draw order failed NOT_ADMITTED gave its unit back too: the returned set holds it.
    assert failed(outcome(returned=3, not_admitted=1)) == []
    assert failed(outcome(returned=2, not_admitted=1)) == ["no unit returned twice"]
    assert outcome(returned=3, not_admitted=1).resolved()


def test_answers_that_disagree_with_mysql_fail() -> None:
    paid_then_expired = Holds(answers=[Answer(3, "pay", 200, "PAID")])
    assert failed(outcome(), paid_then_expired) == ["payments and cancels answered the truth"]
    assert failed(outcome(), statuses={**STATES, 1: "CONFIRMED"}) == ["status route shows MySQL's state"]


def test_the_report_shows_the_holds_and_the_plot() -> None:
    report = Report(
        voucher_id=1, seed=1, users=10, stock=4, presses_per_user=1, requests=10, accepted=4, refusals={},
        errors=0, wall_seconds=1.0, throughput_rps=10.0, latency_ms=percentiles([5.0]), confirmed=6, failed=0,
        failed_reasons={}, redis_stock=0, mysql_stock=0, redelivered=4, reconciliation={},
        holds=Holds(waves=2).figures(outcome(), stock=4), plot=f"stock plot: /tmp/{'a' * 70}/stock.png",
    )  # fmt: skip
    out = Console(file=io.StringIO(), width=60)
    render(report, out)
    text = out.file.getvalue()
    assert "4 / 1 / 1" in text  # paid / expired / cancelled
    assert "2 / 2" in text  # resold / waves
    assert f"stock plot: /tmp/{'a' * 70}/stock.png" in text  # whole, however narrow the terminal


def test_every_stored_order_must_be_known_to_its_buyer() -> None:
    """Order 6's answer was lost: its buyer knows it only by finding it (GET /voucher-order/seckill/{id})."""
    answered = {1, 2, 3, 4, 5}
    known = check_known(outcome(), Holds(found={6: "PENDING"}), answered)
    assert known.ok, known.detail
    assert "5 answered 202, 1 more found" in known.detail
    unknown = check_known(outcome(), Holds(found={7: "FAILED"}), answered)
    assert not unknown.ok
    assert "unknown to their buyers: 6" in unknown.detail


def test_a_lost_answer_is_a_5xx_other_than_try_again_or_none() -> None:
    def press(status: int, code: str | None) -> Press:
        return Press(1, status, code, None, 1.0)

    assert lost(press(0, "ReadTimeoutError"))
    assert lost(press(500, "Internal Server Error"))
    assert lost(press(504, None))
    assert not lost(press(503, "TRY_AGAIN"))  # promises that no order exists
    assert not lost(press(409, "DUPLICATE_ORDER"))
    assert not lost(press(202, None))


def test_the_report_counts_the_lost_answers_and_what_their_buyers_found() -> None:
    holds = Holds(lost_answers={10, 11, 12}, found={6: "CONFIRMED", 3: "PENDING", 9: "FAILED"})
    figures = holds.figures(outcome(), stock=4)
    assert (figures["answers_lost"], figures["orders_found"], figures["found_paid"]) == (3, 2, 1)
    report = Report(
        voucher_id=1, seed=1, users=10, stock=4, presses_per_user=1, requests=10, accepted=4, refusals={},
        errors=0, wall_seconds=1.0, throughput_rps=10.0, latency_ms=percentiles([5.0]), confirmed=6, failed=0,
        failed_reasons={}, redis_stock=0, mysql_stock=0, redelivered=4, reconciliation={}, holds=figures,
    )  # fmt: skip
    out = Console(file=io.StringIO(), width=120)
    render(report, out)
    assert "answers lost: orders found through my-order / paid" in out.file.getvalue()
    assert "3: 2 / 1" in out.file.getvalue()
