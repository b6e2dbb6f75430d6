"""Holds in the main job (``--no-show``, ``--cancel``, ``--hold``): what wave 1's
winners do with their hold (pay through the payment route as a payment service
would, cancel with their token, or never show up: ``seckill_demo.payer``), the
waits for the deadlines, and the waves of new users that buy back the returned
units; in a chaos run, the holds' faults (``seckill_demo.chaos``) on the way.
What the holds did is checked by ``seckill_demo.holds_outcome``."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from rich.progress import Progress

from seckill.messages import queue_depth
from seckill.repair.reconcile import MIN_PENDING_AGE
from seckill.tokens import mint_tokens
from seckill.vouchers import HOLD_SECONDS
from seckill_demo.chaos import RECONCILE_EVERY, Chaos
from seckill_demo.faults import rng
from seckill_demo.holds_outcome import Holds, HoldsOutcome
from seckill_demo.load import TOKEN_TTL, Press, promised
from seckill_demo.payer import Answer, Payer
from seckill_demo.sale import EXPIRY_QUEUE, LocalSale
from seckill_demo.stock_sampler import StockSampler

SAME_PAYMENT_AGAIN = 0.1  # share of payments sent twice with the same paymentId: the second changes nothing
RACING = {"pay": 0.15, "cancel": 0.5}  # chaos: share of wave 1's payments and cancels sent at the deadline
EARLY_EXPIRY = 0.25  # chaos: share of wave 1's orders whose expiry also comes early, twice


class HoldsRun:
    """The holds of a sale: every winner on its fate in the background as soon as it
    is answered 202, then the waits for the deadlines and the waves that buy back
    what came back on sale."""

    def __init__(
        self,
        sale: LocalSale,
        sampler: StockSampler,
        chaos: Chaos | None,
        crowd: Callable[[HoldsOutcome], dict[int, str]] | None = None,
    ) -> None:
        self.sale = sale
        self.chaos = chaos
        # Who presses in each later wave: new users by default; a draw's, the entrants a move admitted.
        self.crowd = crowd or self.newcomers
        self.next_user = sale.args.first_user + sale.args.users
        self.args = sale.args
        self.sampler = sampler
        self.payer = Payer(sale.http, sale.user_url, sale.admin, sale.args.seed)
        self.holds = Holds()
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="payer")
        self.running: list[Future[list[Answer]]] = []
        self.finding: list[Future[None]] = []  # lookups of the orders of lost answers
        self.started: set[int] = set()  # order ids whose winner is on its fate
        self.lock = threading.Lock()
        self.reconciled: Counter[str] = Counter()  # chaos: reconciliation passes while the holds resolve

    def winners(self, tokens: dict[int, str], wave: int) -> Callable[[Press], None]:
        """What to do with each press of the wave answered 202, as soon as it is: start its
        winner on its fate (``start``)."""

        def won(press: Press) -> None:
            self.start(int(press.order_id or 0), press.user_id, tokens[press.user_id], wave)

        return won

    def losers(self, tokens: dict[int, str], wave: int) -> Callable[[Press], None]:
        """What the app does for each press of the wave whose answer was lost (a 5xx, none at
        all): in the background, it asks for the user's order on the voucher, and a user who
        holds one goes on as any winner (``find``)."""

        def lost(press: Press) -> None:
            with self.lock:
                self.holds.lost_answers.add(press.user_id)
                self.finding.append(self.pool.submit(self.find, press.user_id, tokens[press.user_id], wave))

        return lost

    def find(self, user_id: int, token: str, wave: int) -> None:
        """The user's order through ``GET /voucher-order/seckill/{voucherId}``, then its fate."""
        order = self.payer.find_order(self.sale.voucher_id, token, patience=self.args.drain_timeout)
        if order is None:
            return
        order_id = int(order["orderId"])
        with self.lock:
            self.holds.found[order_id] = order["status"]
        if order["status"] != "FAILED":
            self.start(order_id, user_id, token, wave)

    def start(self, order_id: int, user_id: int, token: str, wave: int) -> None:
        """Start a winner on its fate, once per order (a resumed press, or an order found
        after a lost answer, has the same id). Wave 1's fates are drawn from --no-show and
        --cancel; later waves' winners all pay."""
        chaos, seed, patience = self.chaos, self.args.seed, self.args.drain_timeout
        # A chaos run's second wave has no-shows too: their deadlines pass while the expiry consumer is down.
        drawn = wave == 1 or (chaos is not None and wave == 2)
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

    def collect(self) -> None:
        """Wait for every lookup of a lost answer's order, then every payment and cancel started so far."""
        with self.lock:
            finding, self.finding = self.finding, []
        for lookup in finding:
            lookup.result()
        with self.lock:
            running, self.running = self.running, []
        for future in running:
            self.holds.answers.extend(future.result())

    def wait_resolved(self, what: str, progress: Progress) -> HoldsOutcome:
        """Until no hold is outstanding and every closed order's unit is back on sale
        (the deadlines are at most --hold away: every order of the wave is stored)."""
        self.collect()
        sale, chaos = self.sale, self.chaos
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
        sale, chaos = self.sale, self.chaos
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
            more, _ = sale.fire(fresh, progress, on_win=self.winners(fresh, wave), on_lost=self.losers(fresh, wave))
            presses.extend(more)
            tokens.update(fresh)
            sale.wait_drained(progress, f"wave {wave}: persisting", need_decided=len(promised(presses)))
            if self.chaos is not None and wave == 2:
                self.sampler.mark("expiry down, Redis lost")
                self.chaos.outage(sale, tokens, (args.hold or HOLD_SECONDS) + 2)
                self.sampler.mark("expiry back")
        if self.chaos is not None:
            self.late_expiries(progress, presses)
            self.wait_resolved("after late expiries", progress)
        self.holds.waves = wave
        self.pool.shutdown()
