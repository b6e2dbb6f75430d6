"""A draw's faults at its close in a chaos run (``--admission draw --chaos``): the
clock's message due at the close lost (taken off DrawClockQueue and deleted before
DrawClockFunction saw it, as a message purged or dead-lettered), and the run's Redis
emptied right at the close (its close, its moves, the sessions gone). Nothing
rebuilds Redis but reconciliation's recovery, run on its schedule from the close
to the run's end (``Chaos.reconcile_from_now``); nothing sends the tick again but
the product. Written to the chaos run's log, with the table of what answered each;
``seckill_demo.draw_moves`` checks the close's move and what was admitted before it."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from pathlib import Path

from seckill.draw.moves import ClockMessage
from seckill.messages import MalformedMessage
from seckill.tokens import store_tokens
from seckill_demo.chaos import Chaos
from seckill_demo.faults import read_log, record
from seckill_demo.load import TOKEN_TTL
from seckill_demo.report import Fault
from seckill_demo.sale import LocalSale

# The clock's consumer is held from this long before the close (longer than its long
# poll), so that no receive already waiting takes the close's message.
HOLD_BEFORE_CLOSE = 2.0
# How long after the close the close's message is looked for (SQS delays in whole seconds).
TICK_VISIBLE_WITHIN = 4.0


class CloseFaults:
    """Both faults at the draw's close; then reconciliation on its schedule to the run's end."""

    def __init__(self, chaos: Chaos, sale: LocalSale, tokens: dict[int, str], reconciled: Counter[str]) -> None:
        self.chaos = chaos
        self.sale = sale
        self.tokens = tokens
        self.reconciled = reconciled

    def at_close(self, closes: float) -> None:
        """Wait for the close (epoch seconds) and inject both faults there."""
        stack = self.sale.stack
        time.sleep(max(0.0, closes - HOLD_BEFORE_CLOSE - time.time()))
        stack.pause_clock(True)
        try:
            time.sleep(max(0.0, closes - time.time()))
            self.empty_redis()
            self.lose_tick(closes + TICK_VISIBLE_WITHIN)
        finally:
            stack.pause_clock(False)
        self.chaos.reconcile_from_now(self.sale, self.reconciled)

    def empty_redis(self) -> None:
        """Redis dies at the close and comes back empty; the users log in again."""
        self.chaos.private_redis.kill()
        record(self.chaos.log, "redis-emptied-at-close")
        self.chaos.private_redis.start()
        store_tokens(self.sale.redis, self.tokens, ttl_seconds=TOKEN_TTL)

    def lose_tick(self, until: float) -> None:
        """The first clock message of this draw to become visible (the close's) deleted unseen;
        any other message is made visible again at once."""
        sqs, voucher_id = self.sale.sqs, self.sale.voucher_id
        url = self.sale.clock_url
        while time.time() < until:
            for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
                with contextlib.suppress(MalformedMessage):
                    message = ClockMessage.from_json(m["Body"])
                    if message.voucher_id == voucher_id:
                        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
                        record(self.chaos.log, "close-tick-lost", due=message.at_ms)
                        return
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
        record(self.chaos.log, "close-tick-not-found")


def draw_faults_table(log: Path, first_move_after_close: float | None, reconciled: Counter[str]) -> list[Fault]:
    """The close's faults and what answered them. To add a fault: ``record`` it in the log
    where it is injected, and one ``Fault`` here naming what answers it."""
    injected = Counter(line["fault"] for line in read_log(log))
    first = "no move recorded"
    if first_move_after_close is not None:
        first = f"first move recorded {first_move_after_close:.1f} s after the close"
    missed = (
        " (the close's message was not found: handled before the fault)" if injected["close-tick-not-found"] else ""
    )
    return [
        Fault(
            "the close's tick lost (its clock message deleted unseen)",
            injected["close-tick-lost"],
            "the product sends the close's tick again (a clock whose message is overdue is restarted); "
            "meanwhile the gate and the edge admit nobody",
            f"{first}; reconciliation restarted {reconciled['clocks_restarted']} clocks{missed}",
        ),
        Fault(
            "Redis emptied at the close",
            injected["redis-emptied-at-close"],
            "recovery rebuilds the voucher, its close and its recorded moves from MySQL (entries, moves and seed "
            "live there); a tick that finds the voucher missing is retried",
            f"{first}; {reconciled['rebuilt']} vouchers rebuilt by reconciliation; see checks: entries, moves and "
            "seed survive",
        ),
    ]
