"""After a batch commits: one expiry message per order it holds unpaid (docs/holds.md).

New orders and redeliveries of orders already stored alike: a redelivery is how
an expiry whose send failed is sent again. A record whose expiry was not certainly
sent fails, so SQS delivers it again; the redelivery changes nothing in MySQL and
sends the expiry once more. A duplicate costs nothing: expiring is idempotent.
"""

from __future__ import annotations

from collections.abc import Sequence

from seckill.expiry import ExpiryMessage, ExpiryNotSent, ExpiryQueue
from seckill.messages import Sent
from seckill.persist.poison import Decided, Failed, Taken


def expiry_of(taken: Taken) -> ExpiryMessage | None:
    """The expiry a record's order needs: one MySQL holds unpaid (its decision has a deadline)."""
    if not isinstance(taken, Decided) or taken.decision.pay_by is None:
        return None
    order = taken.order
    return ExpiryMessage(order.order_id, order.voucher_id, order.user_id, taken.decision.pay_by)


def send_expiries(queue: ExpiryQueue, taken: Sequence[Taken]) -> list[Taken]:
    """``taken`` with every record whose order's expiry was not sent made a failure."""
    # One message per order, though the batch may hold it twice (a duplicate delivery).
    expiries = {m.order_id: m for m in map(expiry_of, taken) if m is not None}
    outcomes = queue.send(list(expiries.values()))
    unsent = {order_id for order_id, sent in zip(expiries, outcomes, strict=True) if sent is not Sent.SENT}
    if not unsent:
        return list(taken)
    failed = Failed(ExpiryNotSent(f"the expiries of {len(unsent)} orders may not be on the queue"))
    return [failed if isinstance(t, Decided) and t.order.order_id in unsent else t for t in taken]
