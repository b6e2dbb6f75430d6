"""Counts a hot path makes too often to publish one metrics document each.

A sale refuses tens of thousands of presses a second. Serializing and printing
an EMF document for each would cost more than the refusal itself (and a log
line each in CloudWatch Logs), so each warm function sums its counts in memory
and publishes them through Powertools Metrics as one value per name: at the end
of the first invocation ``every`` seconds after the last publication, or of any
invocation that records a metric of its own (an accepted order, a 503), which
carries the sums along at no extra cost.

What this gives up: the counts of a container's last ``every`` seconds are
lost if it is never invoked again (Lambda gives a runtime no shutdown call
without an extension). The API's access log keeps every request's status.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

Handler = TypeVar("Handler", bound=Callable[..., Any])

DEFAULT_EVERY = 10.0


class Tally:
    def __init__(self, metrics: Metrics, every: float = DEFAULT_EVERY, clock: Callable[[], float] = time.monotonic):
        self.metrics = metrics
        self.every = every
        self.clock = clock
        self.counts: Counter[str] = Counter()
        self._published = clock()

    def count(self, name: str) -> None:
        """One more of ``name``, published with the next flush."""
        self.counts[name] += 1

    def flush(self) -> None:
        """Publish the sums (and any metric recorded directly) when they are due."""
        if not self.metrics.metric_set and (not self.counts or self.clock() - self._published < self.every):
            return
        for name, value in self.counts.items():
            self.metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
        self.counts.clear()
        self._published = self.clock()
        self.metrics.flush_metrics()

    def log_metrics(self, handler: Handler) -> Handler:
        """Like ``Metrics.log_metrics``: flush (when due) after every invocation, even a failed one."""

        @functools.wraps(handler)
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return handler(*args, **kwargs)
            finally:
                self.flush()

        return run  # type: ignore[return-value]
