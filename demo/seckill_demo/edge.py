"""The edge in the main job (``--edge``): the presses go through the local edge server,
which runs the CloudFront Function in front of the API and answers the presses already
decided from its KeyValueStore. ``EdgeWatch`` samples Redis stock and the voucher's
KeyValueStore entry through the sale; ``edge_figures`` and ``check_edge`` say how many
presses the edge answered, how long the SOLD_OUT flag took to reach it and to leave it,
and whether it only ever said what the function would have; ``plot_edge`` draws the
presses answered at the edge and at the function through the sale."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from seckill.edge.state import StateQueue
from seckill.infra import keys
from seckill.infra.lua_scripts import Scripts
from seckill.infra.results import fail
from seckill.press.gate import ENDED, NO_PASS, NOT_ADMITTED, NOT_STARTED, REFUSALS, SOLD_OUT
from seckill_demo.load import Press
from seckill_demo.report import Check

SAMPLE_EVERY = 0.02  # seconds between two samples: the lags are measured to this
BIN = 0.1  # seconds per bar of the plot
# The edge server's function reads the store it hosts in the same process: a press sent
# after an edge answer said SOLD_OUT reaches a function that sees the flag too. What
# remains is the clock: both times are this process's time.monotonic(), taken before the
# request leaves (sent) and after its answer came back, so no slack is needed beyond one
# millisecond of rounding.
AFTER_FLAG_TOLERANCE = 0.001
# Units back on sale this long must have cleared the flag: locally the clear is one notice
# through EdgeStateQueue, the feeder's next receive (a 1 s long poll at most) and one PutKey
# (docs/edge.md has a run's clear lag).
RETURN_CLEARS_WITHIN = 1.0
# ReconcilerFunction's two schedules at a pace that fits a short sale: the edge notice
# (EdgeNoticeSchedule, a minute in AWS) and the sweep (ReconcileSchedule, 5 minutes).
EDGE_NOTICE_EVERY = 1.0
EDGE_SWEEP_EVERY = 2.0
# The documented bound (docs/edge.md) at the demo's pace: whatever was lost, a unit back
# on sale is refused at the edge for at most one sweep interval plus the way to the store.
REFUSED_ON_SALE_WITHIN = EDGE_SWEEP_EVERY + RETURN_CLEARS_WITHIN
# What the edge may answer, code -> status: the gate's refusals that hold for everyone, and a
# draw's that its store decides (a pass it finds invalid, a ticket not below the cursor).
EDGE_CODES = {
    REFUSALS[outcome].code: REFUSALS[outcome].status
    for outcome in (NOT_STARTED, ENDED, SOLD_OUT, NO_PASS, NOT_ADMITTED)
}


def function_body(code: str) -> bytes:
    """The body the function answers a refusal with (its own rendering, ``Result``)."""
    refusal = next(r for r in REFUSALS.values() if r.code == code)
    return (fail(refusal.status, refusal.code, refusal.message).body or "").encode()


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the watch started
    stock: int | None  # Redis stock; None: unreadable
    sold_out: bool | None  # the KeyValueStore entry's soldOut; None: no entry (or unreadable)


@dataclass
class Run:
    """Consecutive samples with units on sale, or with none."""

    on_sale: bool
    start: float
    end: float  # the next run's first sample, or this run's last
    samples: list[Sample] = field(default_factory=list)


@dataclass(frozen=True)
class SoldOut:
    at: float  # Redis stock reached 0
    flag_at: float | None  # the store first said soldOut; None: not before units came back

    @property
    def lag_ms(self) -> float | None:
        return None if self.flag_at is None else (self.flag_at - self.at) * 1000


@dataclass(frozen=True)
class Return:
    at: float  # Redis stock left 0
    end: float  # sold out again, or the last sample
    flagged: bool  # the store said soldOut while these units were on sale (else nothing to clear)
    cleared_at: float | None  # the store then said not sold out; None: never while they were

    @property
    def lag_ms(self) -> float | None:
        return None if self.cleared_at is None else (self.cleared_at - self.at) * 1000


class EdgeWatch:
    """Redis stock and the KeyValueStore entry's soldOut every ``SAMPLE_EVERY`` seconds."""

    def __init__(self, redis: Any, voucher_id: int, read_entry: Callable[[], str | None], started: float) -> None:
        self.redis = redis
        self.key = keys.stock(voucher_id)
        self.read_entry = read_entry
        self.started = started  # time.monotonic() of the sale's start, shared with the stock sampler
        self.samples: list[Sample] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="edge-watch", daemon=True)

    def __enter__(self) -> EdgeWatch:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        while True:
            stock = sold_out = None
            with contextlib.suppress(RedisError):  # Redis restarted in a chaos run
                value = self.redis.get(self.key)
                stock = None if value is None else int(value)
            with contextlib.suppress(Exception):  # the store not up yet, or the server gone at the end
                entry = self.read_entry()
                sold_out = None if entry is None else bool(json.loads(entry).get("soldOut"))
            # Taken after both reads: whatever they saw was there by then.
            self.samples.append(Sample(time.monotonic() - self.started, stock, sold_out))
            if self.stop.wait(SAMPLE_EVERY):
                return

    def runs(self) -> list[Run]:
        """The samples cut where Redis stock reaches 0 or leaves it (unreadable stock skipped)."""
        runs: list[Run] = []
        for s in self.samples:
            if s.stock is None:
                continue
            if not runs or runs[-1].on_sale != (s.stock > 0):
                if runs:
                    runs[-1].end = s.at
                runs.append(Run(s.stock > 0, s.at, s.at))
            runs[-1].samples.append(s)
            runs[-1].end = max(runs[-1].end, s.at)
        return runs

    def episodes(self) -> tuple[list[SoldOut], list[Return]]:
        """(every sell-out, every return of units after one), with the flag's lags."""
        runs = self.runs()
        sellouts = [
            SoldOut(r.start, next((s.at for s in r.samples if s.sold_out), None)) for r in runs if not r.on_sale
        ]
        returns = []
        for r in runs[1:]:
            if r.on_sale:
                flagged = next((i for i, s in enumerate(r.samples) if s.sold_out), None)
                cleared = None
                if flagged is not None:
                    cleared = next((s.at for s in r.samples[flagged:] if s.sold_out is False), None)
                returns.append(Return(r.start, r.end, flagged is not None, cleared))
        return sellouts, returns

    def stock_at(self, at: float) -> tuple[int | None, int | None]:
        """Redis stock at the samples just before and just after ``at``."""
        before = after = None
        for s in self.samples:
            if s.stock is None:
                continue
            if s.at <= at:
                before = s.stock
            else:
                after = s.stock
                break
        return before, after


@contextlib.contextmanager
def edge_schedule(states: StateQueue, scripts: Scripts, redis: Any, voucher_id: int) -> Iterator[None]:
    """ReconcilerFunction's edge work on its two schedules, for the sale's voucher, in a
    thread: the edge notice every ``EDGE_NOTICE_EVERY`` and the sweep every ``EDGE_SWEEP_EVERY``."""
    stop = threading.Event()

    def run() -> None:
        swept = time.monotonic()
        while not stop.wait(EDGE_NOTICE_EVERY):
            try:
                redis.ping()
            except RedisError:
                continue  # restarted in a chaos run: the function's run would fail as well, and log it
            states.notice_each(scripts, [voucher_id])
            if time.monotonic() - swept >= EDGE_SWEEP_EVERY:
                states.sweep(scripts, [voucher_id])
                swept = time.monotonic()

    thread = threading.Thread(target=run, name="edge-schedule", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def refused_on_sale(watch: EdgeWatch) -> list[tuple[float, float]]:
    """Each stretch (start, seconds) of samples in which Redis stock was above 0 (units on
    sale) while the store said sold out (the edge refused every press): from the first
    such sample to the first that was not, unreadable stock skipped."""
    stretches: list[tuple[float, float]] = []
    start = None
    for s in watch.samples:
        if s.stock is None:
            continue
        if s.stock > 0 and s.sold_out:
            start = s.at if start is None else start
        elif start is not None:
            stretches.append((start, s.at - start))
            start = None
    if start is not None:
        stretches.append((start, watch.samples[-1].at - start))
    return stretches


def check_refused_on_sale(watch: EdgeWatch, within: float = REFUSED_ON_SALE_WITHIN) -> Check:
    """No unit refused at the edge for longer than the documented bound while it was on sale."""
    stretches = refused_on_sale(watch)
    longest = max(stretches, key=lambda s: s[1], default=None)
    return Check(
        "no unit refused at the edge longer than the bound while on sale",
        longest is None or longest[1] <= within,
        f"{len(stretches)} stretches of stock > 0 with the store saying sold out, the longest "
        + ("none" if longest is None else f"{longest[1] * 1000:,.0f} ms at {longest[0]:.2f} s")
        + f"; the bound: {within:.0f} s (one sweep interval of {EDGE_SWEEP_EVERY:.0f} s and the way to the store)",
    )


# Presses sent this long after the sell-out are counted apart: by then the flag should
# be at the edge (the last unit's press sends it), so nearly all are answered there.
SETTLED_S = 0.2


def answered_at(press: Press, started: float) -> float:
    """When the press's answer came back, in seconds since the sale started."""
    return press.sent - started + press.latency_ms / 1000


def edge_figures(
    presses: list[Press], watch: EdgeWatch, stats: dict[str, Any] | None, first_wave: int
) -> dict[str, Any]:
    """The report's figures about the edge; ``presses[:first_wave]`` are the first wave's."""
    started = watch.started
    answered = [p for p in presses if p.edge]
    forwarded = [p for p in presses if not p.edge and p.status]
    refusals = [p for p in presses if 400 <= p.status < 500]
    sellouts, returns = watch.episodes()
    sold_out_at = sellouts[0].at if sellouts else None
    after = [p for p in presses if sold_out_at is not None and p.sent - started >= sold_out_at]
    # Time enough for the flag to reach the store: the press that sold the last unit sends it.
    settled = [p for p in after if p.sent - started >= sold_out_at + SETTLED_S] if sold_out_at is not None else []
    first_edge = min((answered_at(p, started) for p in answered if p.code == "SOLD_OUT"), default=None)
    # The unit the flag is about: the 202 answered last before the edge first said SOLD_OUT
    # (without one, the first wave's last, to show when it sold out).
    wins = [answered_at(p, started) for p in presses if p.status == 202]
    if first_edge is None:
        wins = [answered_at(p, started) for p in presses[:first_wave] if p.status == 202]
    last_202 = max((t for t in wins if first_edge is None or t < first_edge), default=None)
    # The crowd's first second, from its first press: what reached the function before any flag could.
    crowd = min((p.sent for p in presses), default=started)
    first = [p for p in presses if p.status and p.sent - crowd < 1]
    flag_lags = [lag for lag in (s.lag_ms for s in sellouts) if lag is not None]
    flagged = [r for r in returns if r.flagged]
    clear_lags = [lag for lag in (r.lag_ms for r in flagged) if lag is not None]
    return {
        "answered": len(answered),
        "forwarded": len(forwarded),
        "share_of_presses": len(answered) / len(presses) if presses else 0.0,
        "share_of_refusals": len(answered) / len(refusals) if refusals else 0.0,
        "first_second": len(first),
        "first_second_forwarded": sum(not p.edge for p in first),
        "share_after_sellout": sum(p.edge for p in after) / len(after) if after else 0.0,
        "presses_after_sellout": len(after),
        "share_settled_after_sellout": sum(p.edge for p in settled) / len(settled) if settled else None,
        "presses_settled_after_sellout": len(settled),
        "codes": dict(Counter(p.code or "" for p in answered)),
        "sold_out_at_s": sold_out_at,
        "last_202_at_s": last_202,
        "first_edge_sold_out_at_s": first_edge,
        # The flag's lag as the clients saw it: the first SOLD_OUT answered at the edge after the last unit's 202.
        "flag_lag_ms": None if first_edge is None or last_202 is None else (first_edge - last_202) * 1000,
        # The same as the store shows it, sampled: Redis stock 0 to the entry's soldOut, the longest of the sale.
        "flag_lag_sampled_ms": max(flag_lags, default=None),
        "sellouts": len(sellouts),
        "sellouts_flagged": len(flag_lags),
        "returns": len(returns),
        "returns_flagged": len(flagged),  # the others came back before the flag reached the store
        "returns_cleared": len(clear_lags),
        "clear_lag_ms": max(clear_lags, default=None),
        "server": stats or {},
    }


def check_edge(
    presses: list[Press],
    watch: EdgeWatch,
    figures: dict[str, Any],
    first_wave: int,
    clears_within: float = RETURN_CLEARS_WITHIN,
    unsure: Callable[[Press], bool] = lambda press: False,
) -> list[Check]:
    """What the edge may do (it answers only what the gate has decided, as the function
    would) and how soon its flag follows the stock, from the presses and the samples.
    ``unsure``: a press the edge may forward whatever its store says (a draw's, within
    the skew of a move of the cursor).
    ``clears_within``: how long units back on sale may stay behind the flag."""
    started = watch.started
    answered = [p for p in presses if p.edge]
    not_refusal = [p for p in answered if EDGE_CODES.get(p.code or "") != p.status]
    differ = [p for p in answered if p not in not_refusal and p.body != function_body(p.code or "")]
    codes = {p.code for p in answered}
    # The function's own answers for the same codes, a second witness of the body.
    theirs = {p.body for p in presses if not p.edge and p.code in codes and EDGE_CODES.get(p.code or "") == p.status}
    mine = {function_body(code) for code in codes if code in EDGE_CODES}
    checks = [
        Check(
            "the edge never answered 202",
            not not_refusal,
            f"{len(answered):,} edge answers: "
            + (", ".join(f"{k} {v:,}" for k, v in sorted(figures["codes"].items())) or "none")
            + (f"; {len(not_refusal)} not a refusal it may give" if not_refusal else ""),
        ),
        Check(
            "every edge answer is the function's, byte for byte",
            not differ and theirs <= mine,
            f"{len(answered) - len(differ) - len(not_refusal):,} of {len(answered):,} bodies equal the "
            f"function's for their code; the function itself sent {len(theirs)} distinct bodies for those codes",
        ),
    ]
    _, returns = watch.episodes()
    first_edge = figures["first_edge_sold_out_at_s"]
    if first_edge is not None:
        # Until units come back (the flag may clear from then on, one sample early at most).
        until = min((r.at for r in returns if r.at > first_edge), default=float("inf")) - SAMPLE_EVERY
        late = [
            p
            for p in presses
            if not p.edge
            and p.status
            and first_edge + AFTER_FLAG_TOLERANCE < p.sent - started < until
            and not unsure(p)
        ]
        checks.append(
            Check(
                "once the edge says SOLD_OUT, only earlier presses reach the function",
                not late,
                f"first SOLD_OUT at the edge {figures['flag_lag_ms']:,.0f} ms after the last 202 before it; "
                f"{len(late)} presses sent after it reached the function"
                + (f" (the first {late[0].sent - started - first_edge:.3f} s after)" if late else ""),
            )
        )
    flagged = [r for r in returns if r.flagged]
    if flagged:
        uncleared = [r for r in flagged if r.cleared_at is None and r.end - r.at > clears_within]
        checks.append(
            Check(
                "the flag clears when units come back",
                not uncleared,
                f"{len(returns)} returns, {len(flagged)} while the store said sold out: it cleared after "
                f"{figures['returns_cleared']} of them (at most {figures['clear_lag_ms'] or 0:,.0f} ms after); "
                f"{len(uncleared)} on sale over {clears_within:.0f} s without clearing",
            )
        )
    if returns:
        # A refusal of a unit on sale is the flag's lag: until it cleared, or at most clears_within.
        windows = [
            (r.at, r.cleared_at + SAMPLE_EVERY if r.cleared_at is not None else r.at + clears_within) for r in returns
        ]
        stale = []
        for p in answered:
            at = answered_at(p, started)
            before, after = watch.stock_at(at)
            on_sale = (before or 0) > 0 and (after or 0) > 0
            if p.code == "SOLD_OUT" and on_sale and not any(a <= at <= b for a, b in windows):
                stale.append(p)
        again = [p for p in presses[first_wave:] if not p.edge and p.status]
        checks.append(
            Check(
                "the edge refuses units on sale only until the flag clears",
                not stale and (len(presses) == first_wave or bool(again)),
                f"{len(stale)} SOLD_OUT at the edge with units on sale outside the clear lag; "
                f"{len(again):,} presses of the later waves reached the function",
            )
        )
    return checks


def plot_edge(
    presses: list[Press],
    watch: EdgeWatch,
    figures: dict[str, Any],
    path: Path,
    title: str,
    extra: list[tuple[float, str]] | None = None,
) -> str:
    """Presses per ``BIN`` seconds answered at the edge and by the function, with the
    sell-outs, the flag reaching the edge, the returns and the ``extra`` marks (a draw's
    opening and cursor moves); what to tell the user."""
    import matplotlib  # here, not at import: only a sale with the edge draws this

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    started = watch.started
    sent = [(p.sent - started, p.edge) for p in presses if p.status]
    bins = int(max((t for t, _ in sent), default=0) / BIN) + 1
    edge, function = [0] * bins, [0] * bins
    for t, at_edge in sent:
        (edge if at_edge else function)[max(0, int(t / BIN))] += 1
    x = [i * BIN for i in range(bins)]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.step(x, function, where="post", label="reached the function")
    ax.step(x, edge, where="post", label="answered at the edge")
    sellouts, returns = watch.episodes()
    # Every sell-out the flag followed, and every return it had to clear (a sale with holds has many).
    marks = [(s.at, "sold out (Redis)") for s in sellouts if s.flag_at is not None]
    marks += [(r.at, "units back") for r in returns if r.flagged]
    marks += [(r.cleared_at, "flag cleared") for r in returns if r.cleared_at is not None]
    if figures["last_202_at_s"] is not None:
        marks.append((figures["last_202_at_s"], "last 202 before it"))
    if figures["first_edge_sold_out_at_s"] is not None:
        marks.append((figures["first_edge_sold_out_at_s"], "first SOLD_OUT at the edge"))
    marks += extra or []
    for i, (at, label) in enumerate(sorted(marks)):
        ax.axvline(at, color="grey", linestyle=":", linewidth=1)
        height = 1 - 0.3 * (i % 3)  # marks close together would write over each other
        ax.annotate(label, (at, height), xycoords=("data", "axes fraction"), rotation=90, va="top", fontsize=8)
    ax.set_xlabel("seconds since the sale opened (when the press was sent)")
    ax.set_ylabel(f"presses per {BIN * 1000:.0f} ms")
    ax.set_title(title)
    ax.legend(loc="best")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"edge plot: {path}"


def since(now: dict[str, int] | None, before: dict[str, int] | None) -> dict[str, int] | None:
    """The edge server's counts between two reads of ``/__edge/stats``; None if either failed."""
    if now is None or before is None:
        return None
    return {name: count - before.get(name, 0) for name, count in now.items()}


def check_server(presses: list[Press], stats: dict[str, Any] | None, faults_answered: int = 0) -> Check:
    """The edge server's own count (``/__edge/stats``) against the clients' (and the
    ``faults_answered`` presses a chaos run sent apart). Only presses are answered there;
    status and cancel calls go through it too, so it forwards at least the presses the
    clients saw forwarded."""
    answered = sum(p.edge for p in presses) + faults_answered
    forwarded = sum(not p.edge and p.status != 0 for p in presses)
    if stats is None:
        return Check("the edge server counted the same", False, "/__edge/stats did not answer")
    return Check(
        "the edge server counted the same",
        stats.get("answered") == answered and stats.get("forwarded", 0) >= forwarded and not stats.get("failed"),
        f"server: answered {stats.get('answered')}, forwarded {stats.get('forwarded')}, function failed "
        f"{stats.get('failed')}; clients: answered at the edge {answered:,}, by the function {forwarded:,}",
    )
