"""seckill-capacity: the sources (quotas and prices with their pages), the model, the report."""

from seckill_ops.capacity.cli import main

__all__ = ["main"]
