"""The sale on the local stand-in, start to end: ``run_local_sale`` runs a
``seckill_demo.sale.LocalSale`` and checks it: users minted, the presses (under fire
in a chaos run, ``seckill_demo.chaos``), the winners' holds and the waves after
them (``seckill_demo.holds``), the queue drained, the dead-letter queue replayed,
reconciliation, and every invariant checked. ``seckill_demo.deployed`` runs the
sale against a stack."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from seckill.infra.db import Credentials
from seckill.tokens import mint_tokens
from seckill_demo.chaos import MALFORMED, Chaos
from seckill_demo.draw import (
    EDGE_SKEW,
    DrawRun,
    Entry,
    admitted_crowd,
    check_draw,
    draw_figures,
    entry_budget,
    move_marks,
    open_draw,
    revealed_record,
)
from seckill_demo.draw_faults import CloseFaults, draw_faults_table
from seckill_demo.draw_moves import DrawStore, check_moves
from seckill_demo.edge import (
    REFUSED_ON_SALE_WITHIN,
    RETURN_CLEARS_WITHIN,
    EdgeWatch,
    check_edge,
    check_refused_on_sale,
    check_server,
    edge_figures,
    edge_schedule,
    plot_edge,
    since,
)
from seckill_demo.edge_faults import edge_faults, edge_faults_table
from seckill_demo.holds import HoldsRun
from seckill_demo.holds_outcome import HoldsOutcome, check_holds, check_known, return_lag
from seckill_demo.load import TOKEN_TTL, promised
from seckill_demo.paced import check_function_pace, paced_figures, paced_plan, plot_paced, recommended
from seckill_demo.pass_faults import (
    MintedOrders,
    PassFaults,
    check_passes,
    edge_answered,
    minted_users,
    pass_faults_table,
)
from seckill_demo.report import Check, Outcome, Report, check_invariants
from seckill_demo.sale import LocalSale, console, decided, finish, progress_bars
from seckill_demo.stock_sampler import StockSampler
from seckill_demo.timing import PRESS_ROUTE, durations, function_time
from seckill_local.edge import page_url
from seckill_ops.draw import fetch_record


def run_local_sale(sale: LocalSale, chaos: Chaos | None, creds: Credentials) -> int:
    args = sale.args
    tokens = mint_tokens(sale.redis, range(args.first_user, args.first_user + args.users), ttl_seconds=TOKEN_TTL)
    if args.admission == "draw" and args.entry_seconds is None:
        with progress_bars() as progress:
            args.entry_seconds = entry_budget(sale, tokens, progress)
    sale.create_voucher("local run")
    opens = "on sale" if args.admission == "race" else f"(a draw) opens in {sale.opens_at - time.time():.0f} s"
    console.print(f"voucher {sale.voucher_id} {opens} with stock {args.stock}; {len(tokens):,} users minted")
    if sale.stack.edge is not None:
        page = page_url(sale.stack.edge.url, args.shop_id, sale.voucher_id)
        console.print(f"the buyer's page, while the sale runs: {page} (a token: seckill-tokens)", soft_wrap=True)

    if args.admit_rate is not None:
        console.print(recommended(args))
    holds_on = bool(args.no_show or args.cancel) or args.hold is not None
    edge = sale.stack.edge
    entries: dict[int, Entry] = {}
    passless: list[int] = []
    reconciled: Counter[str] = Counter()
    again: Counter[int] = Counter()  # a draw's admitted users asked to press again in a later wave
    commitment = None
    if args.admission == "draw":
        commitment = fetch_record(sale.user_url, sale.voucher_id, sale.http).get("commitment")
        at_close = None if chaos is None else CloseFaults(chaos, sale, tokens, reconciled).at_close
        with progress_bars() as progress:
            entries, passless = open_draw(sale, tokens, progress, at_close)
    timed = None
    if entries and args.admit_rate is not None and chaos is None:
        # Each entrant presses once its step is in effect, as the record (every step decided at the close) says.
        timed = paced_plan(fetch_record(sale.user_url, sale.voucher_id, sale.http), entries, passless, args.presses,
                           args.seed)  # fmt: skip
    offset = time.time() - time.monotonic()  # a press's sent time in epoch seconds
    counted = None if edge is None else edge.stats()  # the readiness probes (and the entries) went through it too
    with ExitStack() as stack, progress_bars() as progress, StockSampler(sale.redis, sale.voucher_id) as sampler:
        watch = None
        if edge is not None:
            watch = stack.enter_context(
                EdgeWatch(sale.redis, sale.voucher_id, edge.reader(sale.voucher_id), sampler.started)
            )
            stack.enter_context(edge_schedule(sale.edge_states, sale.scripts, sale.redis, sale.voucher_id))
        crowd = None
        if entries and holds_on:
            crowd = admitted_crowd(sale, tokens, entries, 2 * args.wave_seconds + args.drain_timeout, again)
        run = HoldsRun(sale, sampler, chaos, crowd) if holds_on else None
        # Winners pay (or cancel) as soon as they win, while the sale and the queue go on.
        on_win = run.winners(tokens, wave=1) if run is not None else lambda press: None
        # And the buyers whose answer was lost ask for their order (GET /voucher-order/seckill/{voucherId}).
        on_lost = run.losers(tokens, wave=1) if run is not None else lambda press: None
        pass_faults = None
        if chaos is not None and entries and edge is not None:
            # Forged and minted passes, the key rotated and then unreadable: from now to the last wave's end.
            pass_faults = PassFaults(chaos, sale, tokens, entries)
            stack.enter_context(pass_faults.during_sale())
        if chaos is not None:
            presses, wall = chaos.fire(sale, tokens, progress, creds, reconciled, on_win, on_lost)
            if pass_faults is not None:
                pass_faults.wave_one_over.set()
        else:
            presses, wall = sale.fire(tokens, progress, on_win=on_win, on_lost=on_lost, timed=timed)
        sampler.mark("wave 1 ends")
        if run is not None and chaos is not None:
            # From here to the end: Redis answers lost, those of the gives-back among them.
            stack.enter_context(chaos.losing_replies())
            if edge is not None:  # and, in the waves, Redis forgetting its edge record, a 503 after a sell-out
                stack.enter_context(edge_faults(sale, chaos.log, args.first_user + args.users + 10**6))
        # A press that resumed an earlier press's order is answered with the same id.
        accepted = len(promised(presses))
        drained = sale.wait_drained(progress, "draining the queue")
        dlq = sale.replay_dlq()
        drained = drained and sale.wait_drained(progress, "draining the replay")
        reconciled.update(sale.reconcile())
        drained = drained and sale.wait_drained(progress, "persisting orders", need_decided=accepted)
        reconciled.update(sale.reconcile())  # clears what the first pass re-queued, repairs drift
        before = decided(sale.db, sale.voucher_id)
        redelivered = sale.redeliver(presses)
        drained = drained and sale.wait_drained(progress, "re-delivered", need_decided=accepted)
        after = decided(sale.db, sale.voucher_id)
        rush = list(presses)  # the report's press figures are the first wave's
        if run is not None:
            run.waves(progress, presses, tokens)
    if chaos is not None:
        chaos.stop_reconciling()  # the sale is over: what is read now stays as it is
    draw_run = None
    if entries:
        sale.admin.stop(sale.voucher_id)  # the sale is over: the seed is revealed
        record = revealed_record(sale)
        draw_run = DrawRun(
            sale.voucher_id, record, entries, passless, sale.opens_at, offset, args.admit_factor, args.stock,
            args.presses, EDGE_SKEW, again, args.admit_rate,
        )  # fmt: skip
    plot_path = args.plot or (Path(f"seckill-sale-{sale.voucher_id}-stock.png") if holds_on else None)
    plot = "" if plot_path is None else sampler.plot(plot_path, f"voucher {sale.voucher_id}: Redis stock")
    edge_report, edge_plot, edge_checks = None, "", []
    if edge is not None and watch is not None:
        stats = since(edge.stats(), counted)
        edge_report = edge_figures(presses, watch, stats, first_wave=len(rush))
        # A chaos run gives units back unnoticed (a 503's release, Redis forgetting): the sweep clears them.
        within = REFUSED_ON_SALE_WITHIN if chaos is not None else RETURN_CLEARS_WITHIN
        unsure = (lambda press: False) if draw_run is None else draw_run.near_move
        edge_checks = [
            *check_edge(presses, watch, edge_report, len(rush), within, unsure),
            check_refused_on_sale(watch),
            check_server(presses, stats, 0 if chaos is None else edge_answered(chaos.log)),
        ]
        path = args.edge_plot or Path(f"seckill-sale-{sale.voucher_id}-edge.png")
        moves = [] if draw_run is None else move_marks(draw_run, offset + watch.started)
        edge_plot = plot_edge(
            presses,
            watch,
            edge_report,
            path,
            f"voucher {sale.voucher_id}: presses at the edge and at the function",
            moves,
        )

    outcome = Outcome.read(sale.db, sale.redis, sale.voucher_id)
    poisoned = sale.poisoned() if chaos is not None else []
    statuses = sale.statuses(presses, tokens)
    held = HoldsOutcome.read(sale.db, sale.redis, sale.voucher_id) if run is not None else None
    checks = check_invariants(
        outcome,
        presses,
        Counter(status for status, _ in statuses.values()),
        stock=args.stock,
        users=len(tokens),
        chaos=chaos is not None,
        closed=0 if held is None else held.closed,
    )
    checks.insert(0, Check("queue drained", drained, f"within {args.drain_timeout:.0f} s per phase"))
    checks.append(
        Check(
            "re-delivery changes nothing",
            before == after,
            f"{redelivered} re-sent; (confirmed, failed) {before} -> {after}",
        )
    )
    if chaos is not None:
        # At least once: a crash after a record's move, before its batch was acknowledged, moves it again.
        checks.append(
            Check(
                "malformed messages in the poison queue, DLQ empty after the replay",
                sorted(set(poisoned)) == sorted(MALFORMED) and dlq[1] == 0,
                f"poison queue: {len(set(poisoned))} distinct bodies ({len(poisoned)} copies), "
                f"{len(MALFORMED)} malformed injected; DLQ {dlq[0]} -> {dlq[1]}",
            )
        )
    confirmed, failed = decided(sale.db, sale.voucher_id)  # with the later waves' orders
    holds = run.holds.figures(held, args.stock) if held is not None and run is not None else None
    report = Report(
        **sale.figures(rush, wall),
        confirmed=confirmed,
        failed=failed,
        failed_reasons=sale.failed_reasons(),
        redis_stock=outcome.redis_stock,
        mysql_stock=outcome.mysql_stock,
        redelivered=redelivered,
        reconciliation=dict(reconciled),
        checks=checks,
        faults=chaos.faults_table(sale, presses, reconciled, dlq, poisoned, holds) if chaos is not None else [],
        plot=plot,
        edge=edge_report,
        edge_plot=edge_plot,
    )
    report.checks.extend(edge_checks)
    press_durations = durations(sale.stack.log("api"), "SeckillApiFunction", PRESS_ROUTE)
    report.function_time = function_time(press_durations, args.containers)
    if draw_run is not None:
        store = DrawStore.read(sale.db, sale.redis, sale.voucher_id)
        report.draw = draw_figures(draw_run, presses) | {"first_move_after_close_s": store.first_move_after_close}
        report.checks.extend(check_draw(draw_run, presses, report.draw, outcome.orders, args.seed))
        report.checks.extend(check_moves(store, draw_run, presses, commitment))
        if draw_run.rate is not None:
            report.draw["paced"] = paced_figures(draw_run, store, presses)
            report.checks.append(check_function_pace(draw_run, presses))
            folder = args.edge_plot.parent if args.edge_plot else Path()
            pace_path = folder / f"seckill-sale-{sale.voucher_id}-pace.png"
            pace_title = f"voucher {sale.voucher_id}: admission paced at {draw_run.rate:,} a second"
            report.paced_plot = plot_paced(draw_run, store, presses, pace_path, pace_title)
        if chaos is not None:
            report.faults.extend(draw_faults_table(chaos.log, store.first_move_after_close, reconciled))
        if chaos is not None and pass_faults is not None:
            api_log = sale.stack.log("api")
            minted = MintedOrders.read(sale.db, sale.voucher_id, minted_users(chaos.log))
            report.faults.extend(pass_faults_table(chaos.log, api_log, minted))
            report.checks.extend(check_passes(chaos.log, api_log, presses, entries, minted))
    if held is not None and run is not None:
        report.return_lag = return_lag(sale.db, sale.voucher_id)
        report.reconciliation = dict(reconciled + run.reconciled)
        if chaos is not None:
            answers = Counter(f"{a.action} {a.code}" for a in run.holds.answers)
            report.faults.extend(chaos.holds_faults(run.holds, answers))
            if edge is not None:
                refused = next(c for c in edge_checks if c.name.startswith("no unit refused")).detail
                report.faults.extend(edge_faults_table(chaos.log, f"see checks: {refused}"))
        report.checks.extend(check_holds(held, run.holds, {i: s for i, (s, _) in statuses.items()}, stock=args.stock))
        report.checks.append(check_known(held, run.holds, {order_id for order_id, _ in promised(presses)}))
        report.holds = holds
    return finish(report, args)
