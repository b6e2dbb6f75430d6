"""The main job's figures and checks about the edge, from presses and samples made up here."""

from __future__ import annotations

import io
import re

from rich.console import Console

from seckill_demo.edge import (
    EdgeWatch,
    Sample,
    check_edge,
    check_refused_on_sale,
    check_server,
    edge_figures,
    function_body,
    refused_on_sale,
)
from seckill_demo.load import Press, percentiles
from seckill_demo.report import Report, render

SOLD_OUT = function_body("SOLD_OUT")


def watch(*samples: tuple[float, int, bool | None]) -> EdgeWatch:
    """A watch that never ran, with these (at, stock, soldOut) samples; the sale started at 100."""
    w = EdgeWatch(None, 1, lambda: None, started=100.0)
    w.samples = [Sample(at, stock, flag) for at, stock, flag in samples]
    return w


def win(sent: float) -> Press:
    return Press(1, 202, None, "7", 10.0, 100 + sent, False, b'{"data": "7"}')


def at_edge(sent: float, body: bytes = SOLD_OUT, status: int = 409) -> Press:
    return Press(2, status, "SOLD_OUT", None, 1.0, 100 + sent, True, body)


def at_function(sent: float) -> Press:
    return Press(3, 409, "SOLD_OUT", None, 10.0, 100 + sent, False, SOLD_OUT)


# Sold out at 1.0 s, the store says so from 1.3 s; no unit comes back.
SOLD = watch((0.9, 1, False), (1.0, 0, False), (1.2, 0, None), (1.3, 0, True), (3.0, 0, True))


def test_a_sale_the_edge_took_over_after_the_flag() -> None:
    presses = [win(0.5), win(0.99), at_function(1.1), at_function(1.35), at_edge(1.4), at_edge(1.5), at_edge(2.0)]
    figures = edge_figures(presses, SOLD, {"answered": 3, "forwarded": 4, "failed": 0}, first_wave=len(presses))
    assert (figures["answered"], figures["forwarded"]) == (3, 4)
    assert figures["share_of_presses"] == 3 / 7
    assert figures["share_of_refusals"] == 3 / 5
    assert figures["share_after_sellout"] == 3 / 5  # sent from 1.0 s on
    # The first second runs from the first press (0.5 s): 1.4 s is in it, 1.5 s is not.
    assert (figures["first_second"], figures["first_second_forwarded"]) == (5, 4)
    assert figures["share_settled_after_sellout"] == 3 / 4  # sent from 1.2 s on
    assert figures["presses_settled_after_sellout"] == 4
    assert round(figures["flag_lag_ms"]) == round((1.401 - 1.0) * 1000)  # answered 1 ms after sent; 202 after 10 ms
    assert round(figures["flag_lag_sampled_ms"]) == 300
    assert figures["returns"] == 0
    checks = check_edge(presses, SOLD, figures, first_wave=len(presses))
    assert [c.name for c in checks if not c.ok] == []
    # 1.35 s was sent before the first edge answer (1.401 s): it may reach the function.
    assert "0 presses sent after it reached the function" in checks[2].detail
    assert check_server(presses, {"answered": 3, "forwarded": 4, "failed": 0}).ok
    # Status and cancel calls go through the edge too: more forwarded is fine, fewer is not.
    assert check_server(presses, {"answered": 3, "forwarded": 9, "failed": 0}).ok
    assert not check_server(presses, {"answered": 3, "forwarded": 3, "failed": 0}).ok
    assert not check_server(presses, {"answered": 2, "forwarded": 4, "failed": 0}).ok
    # A chaos run's forged passes, pressed apart from the crowd, were answered there too.
    assert check_server(presses, {"answered": 8, "forwarded": 4, "failed": 0}, faults_answered=5).ok
    assert not check_server(presses, {"answered": 8, "forwarded": 4, "failed": 0}).ok


def test_a_press_reaching_the_function_after_the_flag_fails() -> None:
    presses = [win(0.99), at_edge(1.4), at_function(1.45)]
    figures = edge_figures(presses, SOLD, None, first_wave=len(presses))
    failed = {c.name for c in check_edge(presses, SOLD, figures, first_wave=len(presses)) if not c.ok}
    assert failed == {"once the edge says SOLD_OUT, only earlier presses reach the function"}
    assert not check_server(presses, None).ok


def test_an_edge_202_or_another_body_fails() -> None:
    presses = [win(0.99), at_edge(1.4, status=202), at_edge(1.5, body=SOLD_OUT.replace(b": ", b":"))]
    figures = edge_figures(presses, SOLD, None, first_wave=len(presses))
    failed = {c.name for c in check_edge(presses, SOLD, figures, first_wave=len(presses)) if not c.ok}
    assert failed == {"the edge never answered 202", "every edge answer is the function's, byte for byte"}


def test_the_flag_must_clear_when_units_come_back() -> None:
    # Sold out at 1.0 s, flag at 1.2 s; a unit back at 5.0 s, the flag cleared at 5.4 s; sold out again at 8 s.
    samples = [(0.9, 1, False), (1.0, 0, False), (1.2, 0, True), (5.0, 1, True), (5.4, 1, False), (8.0, 0, True)]
    cleared = watch(*samples)
    rush, later = [win(0.9), at_edge(1.3), at_edge(5.2)], [at_function(6.0), win(6.1)]
    figures = edge_figures([*rush, *later], cleared, None, first_wave=len(rush))
    assert (figures["returns"], figures["returns_cleared"]) == (1, 1)
    assert round(figures["clear_lag_ms"]) == 400
    assert all(c.ok for c in check_edge([*rush, *later], cleared, figures, first_wave=len(rush)))

    # The store never cleared through 3 s on sale, and the edge refused a unit on sale at 6 s.
    stuck = watch(*samples[:4], (5.4, 1, True), (7.0, 1, True), (8.0, 0, True))
    stale = [*rush, at_edge(6.0)]
    figures = edge_figures([*stale, *later], stuck, None, first_wave=len(stale))
    assert figures["clear_lag_ms"] is None
    failed = {c.name for c in check_edge([*stale, *later], stuck, figures, first_wave=len(stale)) if not c.ok}
    assert failed == {
        "the flag clears when units come back",
        "the edge refuses units on sale only until the flag clears",
    }


def test_the_report_shows_the_edge() -> None:
    presses = [win(0.99), at_edge(1.4)]
    report = Report(
        voucher_id=1, seed=1, users=1, stock=1, presses_per_user=2, requests=2, accepted=1,
        refusals={"SOLD_OUT": 1}, errors=0, wall_seconds=1.0, throughput_rps=2.0, latency_ms=percentiles([5.0]),
        confirmed=1, failed=0, failed_reasons={}, redis_stock=0, mysql_stock=0, redelivered=1, reconciliation={},
        edge=edge_figures(presses, SOLD, None, first_wave=2), edge_plot="edge plot: x.png",
    )  # fmt: skip
    out = Console(file=io.StringIO(), width=200)
    render(report, out)
    text = out.file.getvalue()
    assert "edge: answered / reached the function" in text
    assert "50.0% / 100.0%" in text
    assert re.search(r"edge: share of presses sent 200 ms or more after sell-out +│ +100.0% of 1 ", text)
    assert "edge plot: x.png" in text


def test_a_unit_back_before_the_flag_has_nothing_to_clear() -> None:
    # Sold out at 1.0 s, a cancel puts a unit back at 1.1 s before any flag, bought again at 1.5 s;
    # the flag then comes at 2.5 s, and the edge says SOLD_OUT from 2.6 s.
    samples = [(0.9, 1, False), (1.0, 0, False), (1.1, 1, False), (1.5, 0, False), (2.5, 0, True), (4.0, 0, True)]
    early = watch(*samples)
    presses = [win(0.9), win(1.45), at_function(2.0), at_edge(2.6)]
    figures = edge_figures(presses, early, None, first_wave=len(presses))
    assert (figures["sellouts"], figures["sellouts_flagged"]) == (2, 1)
    assert (figures["returns"], figures["returns_flagged"]) == (1, 0)
    assert round(figures["flag_lag_sampled_ms"]) == 1000  # from the second sell-out
    assert round(figures["last_202_at_s"], 2) == 1.46  # the 202 before the first edge SOLD_OUT
    checks = check_edge(presses, early, figures, first_wave=len(presses))
    assert "the flag clears when units come back" not in {c.name for c in checks}
    assert all(c.ok for c in checks)


def test_a_unit_refused_at_the_edge_longer_than_the_bound_fails() -> None:
    # Units back at 2.0 s under a sold-out store: cleared at 4.5 s (2.5 s refused); again at
    # 6.0 s, never cleared to the end (7.0 s: 1 s); stock unreadable (Redis restarting) skipped.
    samples = watch(
        (1.0, 0, True),
        (2.0, 1, True),
        (3.0, None, True),
        (4.5, 1, False),
        (5.0, 0, True),
        (6.0, 2, True),
        (7.0, 2, True),
    )
    assert refused_on_sale(samples) == [(2.0, 2.5), (6.0, 1.0)]
    assert check_refused_on_sale(samples, within=3.0).ok
    failed = check_refused_on_sale(samples, within=2.0)
    assert not failed.ok
    assert "the longest 2,500 ms at 2.00 s" in failed.detail
    assert check_refused_on_sale(SOLD).ok  # nothing on sale under the flag
