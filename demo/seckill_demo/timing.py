"""Figures a reader can trust: the function's own time beside what the clients measured.

A press's client-side latency in a local run is mostly queueing on this machine: the
clients, the local edge, the API's HTTP server, its containers (a process each), moto
SQS, Redis and MySQL share its cores. The function's own time is what the local runner
measures in the container around each invocation, printed as Lambda's REPORT line
(``seckill_local.lambdas``); a deployed stack has the same figure as the function's
``Duration`` metric in CloudWatch, which this report does not read: locally only.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from seckill_demo.load import percentiles

PRESS_ROUTE = "POST /voucher-order/seckill/{voucherId}"
_REPORT = re.compile(r"^REPORT RequestId: \S+ Function: (\S+)(?: Route: (.+?))? Duration: ([0-9.]+) ms$")


def durations(log: Path, function: str, route: str | None = None) -> list[float]:
    """The durations (ms) of ``function``'s invocations (on ``route``, if given) in a runner's log."""
    found = []
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        match = _REPORT.match(line)
        if match and match[1] == function and (route is None or match[2] == route):
            found.append(float(match[3]))
    return found


def function_time(press_durations: list[float], containers: int, cores: int | None = None) -> dict[str, Any]:
    """The report's figures of the press route's own time, and what bounds the client-side latency."""
    cores = cores or os.cpu_count() or 1
    return {
        "handler_ms": percentiles(press_durations),
        "invocations": len(press_durations),
        "bound": (
            f"client-side latency is bounded by this machine, not the function: {cores} cores shared by the "
            f"clients, the local edge, the API's server and its {containers} containers, moto SQS, Redis and MySQL "
            "(requests queue for a core and a free container)"
        ),
    }
