"""Redis stock sampled all through a sale with holds, the moments worth marking,
and the plot of both."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from seckill.infra import keys

SAMPLE_EVERY = 0.1  # seconds between two samples of Redis stock


class StockSampler:
    """Redis stock every ``SAMPLE_EVERY`` seconds through the sale, with the moments worth marking."""

    def __init__(self, redis: Any, voucher_id: int) -> None:
        self.redis = redis
        self.key = keys.stock(voucher_id)
        self.started = time.monotonic()
        self.samples: list[tuple[float, int]] = []
        self.marks: list[tuple[float, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="stock-sampler", daemon=True)

    def __enter__(self) -> StockSampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()

    def mark(self, label: str) -> None:
        self.marks.append((time.monotonic() - self.started, label))

    def _run(self) -> None:
        while True:
            value = None
            with contextlib.suppress(RedisError):  # Redis restarted in a chaos run: a gap in the plot
                value = self.redis.get(self.key)
            if value is not None:
                self.samples.append((time.monotonic() - self.started, int(value)))
            if self.stop.wait(SAMPLE_EVERY):
                return

    def plot(self, path: Path, title: str) -> str:
        """Write the PNG; what to tell the user."""
        import matplotlib  # here, not at import: only a sale with holds draws

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(10, 4))
        if self.samples:
            ax.step(*zip(*self.samples, strict=True), where="post", label="Redis stock")
        for i, (at, label) in enumerate(self.marks):
            ax.axvline(at, color="grey", linestyle=":", linewidth=1)
            height = 1 - 0.3 * (i % 3)  # marks close together would write over each other
            ax.annotate(label, (at, height), xycoords=("data", "axes fraction"), rotation=90, va="top", fontsize=8)
        ax.set_xlabel("seconds since the sale opened")
        ax.set_ylabel("units on sale")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return f"stock plot: {path}"
