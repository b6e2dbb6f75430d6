"""Holds in the main job (``--no-show``, ``--cancel``, ``--hold``): what wave 1's
winners do with their hold (pay through the payment route as a payment service
would, cancel with their token, or never show up), the waits for the deadlines,
the waves of new users that buy back the returned units, the stock sampled all
along (and plotted), and the invariants of holds (docs/invariants.md, 6)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3
from redis.exceptions import RedisError
from rich.progress import Progress

from seckill.infra import keys
from seckill.infra.db import Database
from seckill.messages import queue_depth
from seckill.repair.reconcile import MIN_PENDING_AGE
from seckill.tokens import mint_tokens
from seckill.vouchers import HOLD_SECONDS
from seckill_demo.admin_client import AdminClient
from seckill_demo.chaos import EXPIRY_QUEUE, RECONCILE_EVERY
from seckill_demo.faults import rng
from seckill_demo.load import TOKEN_TTL, Press, percentiles, promised
from seckill_demo.report import Check

if TYPE_CHECKING:
    from seckill_demo.scenario import LocalSale

SAMPLE_EVERY = 0.1  # seconds between two samples of Redis stock
SAME_PAYMENT_AGAIN = 0.1  # share of payments sent twice with the same paymentId: the second changes nothing
RACING = {"pay": 0.15, "cancel": 0.5}  # chaos: share of wave 1's payments and cancels sent at the deadline
EARLY_EXPIRY = 0.25  # chaos: share of wave 1's orders whose expiry also comes early, twice
# What the status route says of an order once MySQL holds it, by tb_voucher_order.status (4: close_reason).
STATES = {1: "CONFIRMED", 2: "PAID"}


@dataclass
class Answer:
    """What a payment or a cancel was answered."""

    order_id: int
    action: str  # pay | cancel
    status: int
    code: str | None  # the order's status on 200, the refusal's code otherwise


@dataclass
class Holds:
    """Everything the holds of one sale did, for the report and the checks."""

    # pay / cancel / no-show (chaos: pay or cancel at the deadline), over every wave
    fates: Counter[str] = field(default_factory=Counter)
    answers: list[Answer] = field(default_factory=list)
    waves: int = 1
    why_unsold: str = ""  # empty when every unit ended paid

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
        }


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Payer:
    """The payment service and the winners: payments signed like the admin calls, cancels
    and status reads with the user's token at ``user_url`` (the edge's, when the sale has one)."""

    def __init__(self, http: urllib3.PoolManager, user_url: str, admin: AdminClient, seed: int) -> None:
        self.http = http
        self.user_url = user_url
        self.admin = admin
        self.ids = rng(seed, "payment-ids")
        self.lock = threading.Lock()

    def payment_id(self, order_id: int) -> str:
        """An order's payment id: opaque, drawn from the seed, and prefixed by the order id, since
        one payment pays one order and a run with the same seed may use the same database."""
        with self.lock:
            return f"{order_id}-{uuid.UUID(int=self.ids.getrandbits(128), version=4)}"

    def pay(self, order_id: int, payment_id: str) -> Answer:
        status, body = self.admin.post(f"/voucher-order/{order_id}/payment", {"paymentId": payment_id})
        return answer(order_id, "pay", status, body)

    def cancel(self, order_id: int, token: str) -> Answer:
        url = f"{self.user_url}/voucher-order/{order_id}/cancel"
        response = self.http.request("POST", url, headers={"authorization": token})
        return answer(order_id, "cancel", response.status, json.loads(response.data) if response.data else None)

    def at_deadline(self, order_id: int, action: str, token: str, *, patience: float, late: float) -> list[Answer]:
        """Pay or cancel ``late`` seconds after the order's payBy (before it, if negative):
        racing the deadline, and the expiry running at it."""
        url = f"{self.user_url}/voucher-order/{order_id}"
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            response = self.http.request("GET", url, headers={"authorization": token})
            data = json.loads(response.data).get("data") if response.status == 200 else None
            if isinstance(data, dict) and data.get("payBy"):
                wait = (parse_time(data["payBy"]) - datetime.now(UTC)).total_seconds() + late
                time.sleep(max(0.0, wait))
                break
            if isinstance(data, dict) and data.get("status") != "PENDING":
                break  # decided otherwise (failed): the action is answered so
            time.sleep(0.2)
        return self.settle(order_id, action, token, patience=patience)

    def settle(self, order_id: int, action: str, token: str, *, patience: float, again: bool = False) -> list[Answer]:
        """Pay (``again``: twice with the same paymentId) or cancel; 503 TRY_AGAIN and 409
        PENDING (the order is still on its way) are tried again for ``patience`` seconds."""
        payment_id = self.payment_id(order_id)
        deadline = time.monotonic() + patience
        while True:
            got = self.pay(order_id, payment_id) if action == "pay" else self.cancel(order_id, token)
            if (got.status != 503 and got.code != "PENDING") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        answers = [got]
        if again and got.status == 200:
            answers.append(self.pay(order_id, payment_id))
        return answers


def answer(order_id: int, action: str, status: int, body: Any) -> Answer:
    body = body if isinstance(body, dict) else {}
    data = body.get("data")
    code = data.get("status") if status == 200 and isinstance(data, dict) else body.get("code")
    return Answer(order_id, action, status, code)


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
                " COALESCE(SUM(close_reason = 'EXPIRED' AND update_time < pay_by), 0) AS early"
                " FROM tb_voucher_order WHERE voucher_id = %s",
                (voucher_id,),
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
        )

    def count(self, state: str) -> int:
        return sum(s == state for s in self.states.values())

    @property
    def closed(self) -> int:
        return self.count("EXPIRED") + self.count("CANCELLED")

    def resolved(self) -> bool:
        """No hold outstanding, and every closed order's unit back in Redis."""
        return self.count("CONFIRMED") == 0 and self.returned == self.closed and self.redis_stock == self.mysql_stock


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
            outcome.returned == outcome.closed and outcome.redis_stock == outcome.mysql_stock,
            f"returned set {outcome.returned}, closed orders {outcome.closed}; Redis stock {outcome.redis_stock}, "
            f"MySQL stock {outcome.mysql_stock}",
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


class HoldsRun:
    """The holds of a sale: every winner on its fate in the background as soon as it
    is answered 202, then the waits for the deadlines and the waves that buy back
    what came back on sale."""

    def __init__(
        self, sale: LocalSale, sampler: StockSampler, crowd: Callable[[HoldsOutcome], dict[int, str]] | None = None
    ) -> None:
        self.sale = sale
        # Who presses in each later wave: new users by default; a draw's, the entrants a move admitted.
        self.crowd = crowd or self.newcomers
        self.next_user = sale.args.first_user + sale.args.users
        self.args = sale.args
        self.sampler = sampler
        self.payer = Payer(sale.http, sale.user_url, sale.admin, sale.args.seed)
        self.holds = Holds()
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="payer")
        self.running: list[Future[list[Answer]]] = []
        self.started: set[int] = set()  # order ids whose winner is on its fate
        self.lock = threading.Lock()
        self.reconciled: Counter[str] = Counter()  # chaos: reconciliation passes while the holds resolve

    def winners(self, tokens: dict[int, str], wave: int) -> Callable[[Press], None]:
        """What to do with each press of the wave answered 202, as soon as it is: start
        its winner on its fate (once per order: a resumed press has the same id). Wave 1's
        fates are drawn from --no-show and --cancel; later waves' winners all pay."""
        chaos, seed, patience = self.sale.chaos, self.args.seed, self.args.drain_timeout
        # A chaos run's second wave has no-shows too: their deadlines pass while the expiry consumer is down.
        drawn = wave == 1 or (chaos is not None and wave == 2)

        def won(press: Press) -> None:
            order_id, user_id = int(press.order_id or 0), press.user_id
            with self.lock:
                if order_id in self.started:
                    return
                self.started.add(order_id)
            draws = rng(seed, "fate", wave, user_id)  # per user: the same whatever order the presses end in
            roll = draws.random() if drawn else 1.0
            fate = (
                "no-show"
                if roll < self.args.no_show
                else "cancel"
                if roll < self.args.no_show + self.args.cancel
                else "pay"
            )
            token = tokens[user_id]
            if chaos is not None and wave == 1 and draws.random() < EARLY_EXPIRY:
                # Early (due now, long before the deadline) and duplicated: the function re-delays them.
                chaos.send_expiries(self.sale, {order_id: (user_id, datetime.now(UTC))}, "expiry-early", copies=2)
            if fate == "no-show":
                job = None
            elif chaos is not None and wave == 1 and draws.random() < RACING[fate]:
                late = draws.uniform(-0.3, 0.3)
                job = self.pool.submit(self.payer.at_deadline, order_id, fate, token, patience=patience, late=late)
                fate = f"{fate} at the deadline"
            else:
                again = draws.random() < SAME_PAYMENT_AGAIN
                job = self.pool.submit(self.payer.settle, order_id, fate, token, patience=patience, again=again)
            with self.lock:
                self.holds.fates[fate] += 1
                if job is not None:
                    self.running.append(job)

        return won

    def collect(self) -> None:
        """Wait for every payment and cancel started so far."""
        with self.lock:
            running, self.running = self.running, []
        for future in running:
            self.holds.answers.extend(future.result())

    def wait_resolved(self, what: str, progress: Progress) -> HoldsOutcome:
        """Until no hold is outstanding and every closed order's unit is back on sale
        (the deadlines are at most --hold away: every order of the wave is stored)."""
        self.collect()
        sale, chaos = self.sale, self.sale.chaos
        task = progress.add_task(what, total=None)
        deadline = time.monotonic() + (self.args.hold or HOLD_SECONDS) + self.args.drain_timeout
        reconciled = time.monotonic()
        while True:
            outcome = HoldsOutcome.read(sale.db, sale.redis, sale.voucher_id)
            progress.update(task, completed=outcome.count("PAID") + outcome.closed)
            if outcome.resolved() or time.monotonic() > deadline:
                progress.update(task, total=len(outcome.states))
                return outcome
            if chaos is not None and time.monotonic() - reconciled > RECONCILE_EVERY:
                # ReconcilerFunction's schedule: it repairs a return Redis lost.
                self.reconciled.update(sale.reconcile(pending_age=MIN_PENDING_AGE))
                reconciled = time.monotonic()
            time.sleep(0.25)

    def late_expiries(self, progress: Progress, presses: list[Press]) -> None:
        """A chaos run's end: duplicated expiry messages long after every hold was decided
        (paid, expired or cancelled): they change nothing."""
        sale, chaos = self.sale, self.sale.chaos
        assert chaos is not None
        draws = rng(self.args.seed, "late-expiries")
        past = datetime.now(UTC) - timedelta(seconds=1)
        late = {o: (u, past) for o, u in sorted(promised(presses)) if draws.random() < 0.25}
        chaos.send_expiries(sale, late, "expiry-late", copies=2)
        url = sale.sqs.get_queue_url(QueueName=EXPIRY_QUEUE)["QueueUrl"]
        task = progress.add_task("late expiry copies", total=None)
        deadline = time.monotonic() + self.args.drain_timeout
        while queue_depth(sale.sqs, url) and time.monotonic() < deadline:
            time.sleep(0.25)
        progress.update(task, total=1, completed=1)

    def newcomers(self, outcome: HoldsOutcome) -> dict[int, str]:
        """A later wave of a race: new users, three per unit back on sale (at least ten)."""
        users = range(self.next_user, self.next_user + max(10, 3 * outcome.mysql_stock))
        self.next_user = users.stop
        return mint_tokens(self.sale.redis, users, ttl_seconds=TOKEN_TTL)

    def waves(self, progress: Progress, presses: list[Press], tokens: dict[int, str]) -> None:
        """Waves of new users after the deadlines, until every unit is paid or --waves is reached;
        their presses and tokens join the sale's."""
        args, sale = self.args, self.sale
        wave = 1
        while True:
            outcome = self.wait_resolved(f"wave {wave}: holds", progress)
            paid = outcome.count("PAID")
            if not outcome.resolved():
                self.holds.why_unsold = (
                    f"holds outstanding {outcome.count('CONFIRMED')}, returned {outcome.returned} of "
                    f"{outcome.closed} closed after the wait"
                )
                break
            if paid >= args.stock:
                break
            if wave >= args.waves:
                self.holds.why_unsold = f"{args.stock - paid} units left after {wave} waves (--waves)"
                break
            fresh = self.crowd(outcome)
            if not fresh:
                self.holds.why_unsold = f"{args.stock - paid} units left after {wave} waves: nobody more admitted"
                break
            wave += 1
            self.sampler.mark(f"wave {wave}")
            more, _ = sale.fire(fresh, progress, on_win=self.winners(fresh, wave))
            presses.extend(more)
            tokens.update(fresh)
            sale.wait_drained(progress, f"wave {wave}: persisting", need_decided=len(promised(presses)))
            if sale.chaos is not None and wave == 2:
                self.sampler.mark("expiry down, Redis lost")
                sale.chaos.outage(sale, tokens, (args.hold or HOLD_SECONDS) + 2)
                self.sampler.mark("expiry back")
        if sale.chaos is not None:
            self.late_expiries(progress, presses)
            self.wait_resolved("after late expiries", progress)
        self.holds.waves = wave
        self.pool.shutdown()
