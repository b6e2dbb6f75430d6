"""Percentiles and medians over rounds."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of unsorted values; 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, round(q / 100 * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def latency_ms(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/mean of seconds, in milliseconds."""
    return {
        "p50": round(percentile(values, 50) * 1e3, 3),
        "p95": round(percentile(values, 95) * 1e3, 3),
        "p99": round(percentile(values, 99) * 1e3, 3),
        "mean": round(statistics.fmean(values) * 1e3, 3) if values else 0.0,
    }


def median_of(rounds: Iterable[dict[str, Any]], path: str) -> float:
    """The median over rounds of a dotted field (``latency.p99``)."""
    values = []
    for entry in rounds:
        value: Any = entry
        for part in path.split("."):
            value = value[part]
        values.append(float(value))
    return round(statistics.median(values), 3) if values else 0.0


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0
