"""The main job's report as printed."""

from __future__ import annotations

import io

from rich.console import Console

from seckill_demo.load import percentiles
from seckill_demo.report import Check, Report, render


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
