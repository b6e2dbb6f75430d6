"""The workings of seckill-dlq-replay (the command itself: ``seckill_ops.dlq_replay``).

- ``exits``: the exit codes, and the two errors that end a run early
- ``queues``: the queues by stack or URL, their ARN and depth, SQS's batches
- ``dead_letters``: reading the whole DLQ, holding what it received hidden until deleted or given back
- ``stop``: Ctrl-C and SIGTERM, which stop a run cleanly
- ``mover``: the portable mover: send each message again, delete what SQS accepted
- ``native``: SQS's own move task (StartMessageMoveTask), followed to its end
- ``runs``: the portable runs at the console: the dry run's listing, the move's progress and summary
"""
