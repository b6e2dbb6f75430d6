"""How a run of seckill-dlq-replay ends: its exit codes (the command's ``--help`` lists
them), and the two errors that end a run early."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_CONFIRMED = 4
EXIT_INTERRUPTED = 130


class ConfigError(Exception):
    """The queues cannot be found or reached: exit 2."""


class RunStopped(Exception):
    """An SQS call failed in a way that makes going on pointless."""
