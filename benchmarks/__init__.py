"""Seckill's benchmarks: ``make bench`` (``python -m benchmarks --help``); see benchmarks/README.md."""
