"""What the holds of a sale did (``Holds``) and what MySQL and Redis say of them
(``HoldsOutcome``): the report's figures about the holds, the lag from a deadline
to the unit back on sale, and the invariants of holds (docs/invariants.md, 6)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from seckill.infra import keys
from seckill.infra.db import Database
from seckill_demo.load import percentiles
from seckill_demo.payer import Answer
from seckill_demo.report import Check

# What the status route says of an order once MySQL holds it, by tb_voucher_order.status (4: close_reason).
STATES = {1: "CONFIRMED", 2: "PAID"}


@dataclass
class Holds:
    """Everything the holds of one sale did, for the report and the checks."""

    # pay / cancel / no-show (chaos: pay or cancel at the deadline), over every wave
    fates: Counter[str] = field(default_factory=Counter)
    answers: list[Answer] = field(default_factory=list)
    waves: int = 1
    why_unsold: str = ""  # empty when every unit ended paid
    lost_answers: set[int] = field(default_factory=set)  # users a press's answer of was lost (a 5xx, none)
    found: dict[int, str] = field(default_factory=dict)  # order id -> its status, as their lookup found it

    def figures(self, outcome: HoldsOutcome, stock: int) -> dict[str, int]:
        """The report's figures about the holds."""
        return {
            "paid": outcome.count("PAID"),
            "expired": outcome.count("EXPIRED"),
            "cancelled": outcome.count("CANCELLED"),
            "payable": outcome.count("CONFIRMED"),
            # Every order beyond the stock took a unit that came back: by a later wave, or by a
            # press of the first still running when an early deadline passed.
            "resold": max(0, len(outcome.states) - stock),
            "waves": self.waves,
            "no_shows": self.fates["no-show"],
            "payments_answered": sum(a.action == "pay" for a in self.answers),
            "same_payment_again": sum(a.action == "pay" for a in self.answers)
            - self.fates["pay"]
            - self.fates["pay at the deadline"],
            # Lost answers, the orders their users found through GET /voucher-order/seckill/{voucherId}, paid.
            "answers_lost": len(self.lost_answers),
            "orders_found": sum(status != "FAILED" for status in self.found.values()),
            "found_paid": sum(outcome.states.get(order_id) == "PAID" for order_id in self.found),
        }


@dataclass(frozen=True)
class HoldsOutcome:
    """What MySQL and Redis say of the voucher's holds."""

    states: dict[int, str]  # order id -> CONFIRMED / PAID / EXPIRED / CANCELLED, as MySQL holds it
    paid_late: int  # paid orders with pay_time > pay_by
    paid_closed: int  # paid orders that also have a close reason
    unpaid_without_deadline: int  # confirmed orders with no pay_by
    expired_early: int  # expired orders closed before their pay_by (update_time: when the row last changed)
    returned: int  # size of seckill:returned:{v}
    mysql_stock: int
    redis_stock: int | None
    not_admitted: int = 0  # draw orders failed NOT_ADMITTED: their units are given back too

    @classmethod
    def read(cls, db: Database, redis: Any, voucher_id: int) -> HoldsOutcome:
        def read(cursor: Any) -> tuple[dict[int, str], dict[str, int], int]:
            cursor.execute("SELECT id, status, close_reason FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
            states = {
                int(r["id"]): STATES.get(int(r["status"])) or str(r["close_reason"] or r["status"])
                for r in cursor.fetchall()
            }
            cursor.execute(
                "SELECT COALESCE(SUM(status = 2 AND pay_time > pay_by), 0) AS late,"
                " COALESCE(SUM(status = 2 AND close_reason IS NOT NULL), 0) AS closed,"
                " COALESCE(SUM(status = 1 AND pay_by IS NULL), 0) AS undated,"
                " COALESCE(SUM(close_reason = 'EXPIRED' AND update_time < pay_by), 0) AS early,"
                " (SELECT COUNT(*) FROM tb_voucher_order_rejection r"
                "  WHERE r.voucher_id = %s AND r.reason = 'NOT_ADMITTED') AS not_admitted"
                " FROM tb_voucher_order WHERE voucher_id = %s",
                (voucher_id, voucher_id),
            )
            odd = {k: int(v) for k, v in cursor.fetchone().items()}
            cursor.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", (voucher_id,))
            return states, odd, int(cursor.fetchone()["stock"])

        states, odd, mysql_stock = db.run(read, read_only=True)
        stock = redis.get(keys.stock(voucher_id))
        return cls(
            states,
            odd["late"],
            odd["closed"],
            odd["undated"],
            odd["early"],
            int(redis.scard(keys.returned(voucher_id))),
            mysql_stock,
            None if stock is None else int(stock),
            odd["not_admitted"],
        )

    def count(self, state: str) -> int:
        return sum(s == state for s in self.states.values())

    @property
    def closed(self) -> int:
        return self.count("EXPIRED") + self.count("CANCELLED")

    @property
    def given_back(self) -> bool:
        """Each unit given back is in the returned set once: a closed hold's, and a draw order's
        failed NOT_ADMITTED; and Redis's stock is MySQL's."""
        return self.returned == self.closed + self.not_admitted and self.redis_stock == self.mysql_stock

    def resolved(self) -> bool:
        """No hold outstanding, and every closed order's unit back in Redis."""
        return self.count("CONFIRMED") == 0 and self.given_back


def return_lag(db: Database, voucher_id: int) -> dict[str, Any] | None:
    """From each expired order's payBy to its unit back on sale: p50, p99, max (ms) and how
    many; None when none expired. The return is MySQL's close of the hold (update_time, by the
    database's clock as payBy is), which the unit's return to Redis follows in the same invocation."""

    def read(cursor: Any) -> list[float]:
        cursor.execute(
            "SELECT TIMESTAMPDIFF(MICROSECOND, pay_by, update_time) AS lag_us FROM tb_voucher_order"
            " WHERE voucher_id = %s AND close_reason = 'EXPIRED' AND pay_by IS NOT NULL",
            (voucher_id,),
        )
        return [int(row["lag_us"]) / 1000 for row in cursor.fetchall()]

    lags = db.run(read, read_only=True)
    return {**percentiles(lags), "expired": len(lags)} if lags else None


def check_holds(outcome: HoldsOutcome, holds: Holds, statuses: dict[int, str], *, stock: int) -> list[Check]:
    """Invariant 6: every unit ends paid or back on sale, never returned twice; no paid
    order expired, none paid after its deadline or after it closed; the answers to the
    payments, the cancels and the status route agree with MySQL."""
    paid, payable = outcome.count("PAID"), outcome.count("CONFIRMED")
    wrong = []
    expect = {("pay", 200): "PAID", ("cancel", 200): "CANCELLED"}
    for a in holds.answers:
        final = outcome.states.get(a.order_id)
        want = expect.get((a.action, a.status)) or (a.code if a.status == 409 and a.code in {"EXPIRED"} else None)
        if want is not None and final != want:
            wrong.append(f"{a.order_id}: {a.action} answered {a.status} {a.code}, now {final}")
    seen = [f"{i}: route {s}, MySQL {outcome.states[i]}" for i, s in statuses.items() if s != outcome.states.get(i, s)]
    return [
        Check(
            "every unit ends paid or back on sale",
            payable == 0 and outcome.mysql_stock + paid == stock,
            f"{paid} paid + {outcome.mysql_stock} on sale of {stock}; {payable} holds outstanding",
        ),
        Check(
            "every unit sold exactly once",
            paid == stock,
            f"{paid} paid of {stock}" + (f" ({holds.why_unsold})" if holds.why_unsold else ""),
        ),
        Check(
            "no unit returned twice",
            outcome.given_back,
            f"returned set {outcome.returned}, closed orders {outcome.closed}"
            + (f" + orders not admitted {outcome.not_admitted}" if outcome.not_admitted else "")
            + f"; Redis stock {outcome.redis_stock}, MySQL stock {outcome.mysql_stock}",
        ),
        Check(
            "no order expired before its deadline",
            outcome.expired_early == 0,
            f"{outcome.expired_early} expired orders closed before their payBy",
        ),
        Check(
            "no paid order expired, none paid after its deadline",
            outcome.paid_closed == 0 and outcome.paid_late == 0 and outcome.unpaid_without_deadline == 0,
            f"{outcome.paid_closed} paid and closed, {outcome.paid_late} paid after pay_by, "
            f"{outcome.unpaid_without_deadline} unpaid without a deadline",
        ),
        Check(
            "created stock = remaining + payable + paid",
            stock == outcome.mysql_stock + payable + paid,
            f"{stock} = {outcome.mysql_stock} + {payable} + {paid}",
        ),
        Check(
            "payments and cancels answered the truth",
            not wrong,
            f"{len(holds.answers)} answers: "
            + ", ".join(f"{k} {v}" for k, v in sorted(Counter(f"{a.action} {a.code}" for a in holds.answers).items()))
            + (f"; disagree: {'; '.join(wrong[:3])}" if wrong else ""),
        ),
        Check(
            "status route shows MySQL's state",
            not seen,
            f"{len(statuses)} orders asked" + (f"; disagree: {'; '.join(seen[:3])}" if seen else ""),
        ),
    ]


def check_known(outcome: HoldsOutcome, holds: Holds, answered: set[int]) -> Check:
    """Every stored order's buyer knows its id: answered 202 with it (``answered``), or found it
    through ``GET /voucher-order/seckill/{voucherId}`` after the answer was lost. Else a win was
    lost to a lost answer: its buyer could never pay, and the hold would only expire."""
    unknown = sorted(set(outcome.states) - answered - set(holds.found))
    found = len(set(outcome.states) & set(holds.found) - answered)
    return Check(
        "every buyer whose press was accepted knows their order id",
        not unknown,
        f"{len(outcome.states)} orders stored: {len(set(outcome.states) & answered)} answered 202, {found} more "
        f"found through GET /voucher-order/seckill/{{voucherId}}"
        + (f"; unknown to their buyers: {', '.join(map(str, unknown[:3]))}" if unknown else ""),
    )
