"""The main job's report as printed."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console

from seckill_demo.load import Press, percentiles
from seckill_demo.report import Check, Outcome, Report, check_invariants, render
from seckill_demo.timing import PRESS_ROUTE, durations, function_time
from seckill_local.lambdas import report_line


def test_a_failed_report_says_how_to_replay_it() -> None:
    report = Report(
        voucher_id=1, seed=1234, users=1, stock=1, presses_per_user=1, requests=1, accepted=0, refusals={},
        errors=1, wall_seconds=1.0, throughput_rps=1.0, latency_ms=percentiles([5.0]), confirmed=0, failed=0,
        failed_reasons={}, redis_stock=1, mysql_stock=1, redelivered=0, reconciliation={},
        checks=[Check("never oversold", True, ""), Check("sold exactly the stock", False, "0 accepted")],
    )  # fmt: skip
    out = Console(file=io.StringIO(), width=200)
    render(report, out)
    text = out.file.getvalue()
    assert "FAIL" in text
    assert "replay with --seed 1234" in text


def rendered(report: Report) -> str:
    out = Console(file=io.StringIO(), width=300)
    render(report, out)
    text: str = out.file.getvalue()
    return text


def a_report(**fields: Any) -> Report:
    return Report(
        voucher_id=1, seed=1, users=1, stock=1, presses_per_user=1, requests=3, accepted=1, refusals={},
        errors=0, wall_seconds=1.0, throughput_rps=3.0, latency_ms=percentiles([40.0, 80.0, 900.0]), confirmed=1,
        failed=0, failed_reasons={}, redis_stock=0, mysql_stock=0, redelivered=0, reconciliation={}, **fields,
    )  # fmt: skip


def test_the_function_s_own_time_is_shown_beside_the_client_side_latency_each_labelled(tmp_path: Path) -> None:
    """The press route's durations read from the runner's REPORT lines, not the other routes' or functions'."""
    log = tmp_path / "api.log"
    lines = [
        report_line("SeckillApiFunction", {"routeKey": PRESS_ROUTE}, 0.5),
        report_line("SeckillApiFunction", {"routeKey": PRESS_ROUTE}, 1.5),
        report_line("SeckillApiFunction", {"routeKey": "GET /voucher-order/{orderId}"}, 99.0),
        report_line("AuthorizerFunction", {"routeKey": PRESS_ROUTE}, 77.0),
        "a line of the function's own log",
    ]
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    durations_ms = durations(log, "SeckillApiFunction", PRESS_ROUTE)
    assert durations_ms == [0.5, 1.5]

    text = rendered(a_report(function_time=function_time(durations_ms, containers=4, cores=2)))

    assert "client-side latency p50 / p95 / p99 / max" in text
    assert "function's own time, press route p50 / p99 / max" in text
    assert "1.00 / 1.49 / 1.50 ms over 2 invocations" in text
    assert "2 cores shared by the clients, the local edge, the API's server and its 4 containers" in text


def test_without_figures_of_its_own_the_report_shows_no_such_rows() -> None:
    text = rendered(a_report())

    assert "function's own time" not in text
    assert "units back after payBy" not in text


def test_the_lag_of_units_back_after_their_deadline_is_shown() -> None:
    lag = {**percentiles([100.0, 200.0, 5000.0]), "expired": 3}

    text = rendered(a_report(return_lag=lag))

    assert "units back after payBy p50 / p99 / max" in text
    assert "200 / 4,904 / 5,000 ms over 3 expired" in text


def test_an_order_nobody_was_answered_202_for_is_named() -> None:
    # Order 7 is user 1's, answered 202; order 9 is stored for user 2, who was only ever answered 503.
    presses = [
        Press(1, 202, None, "7", 5.0, 100.0),
        Press(2, 503, "TRY_AGAIN", None, 5.0, 100.1),
    ]
    outcome = Outcome({7: 1, 9: 2}, set(), mysql_stock=0, redis_stock=0, pending=0)
    checks = check_invariants(outcome, presses, Counter({"CONFIRMED": 1}), stock=2, users=2, chaos=True)
    failed = next(c for c in checks if c.name == "a 503 leaves no order")
    assert not failed.ok
    assert failed.detail == "1 confirmed orders whose user was never answered 202 with their id; order 9 of user 2"


def test_an_order_whose_press_lost_its_answer_may_stand() -> None:
    """A 500 (the function died after queueing the order) or no answer promises nothing: the order
    stands, and the buyer asks for it; only 503 TRY_AGAIN promises that none exists."""
    presses = [
        Press(1, 500, "Internal Server Error", None, 5.0, 100.0),
        Press(1, 409, "DUPLICATE_ORDER", None, 5.0, 100.1),
        Press(2, 0, "ReadTimeoutError", None, 30000.0, 100.2),
    ]
    outcome = Outcome({7: 1, 9: 2}, set(), mysql_stock=0, redis_stock=0, pending=0)
    checks = check_invariants(outcome, presses, Counter(), stock=2, users=2, chaos=True)
    check = next(c for c in checks if c.name == "a 503 leaves no order")
    assert check.ok, check.detail
    assert check.detail.endswith("; 2 more of users whose answer was lost (a 5xx, none)")
