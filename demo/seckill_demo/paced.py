"""A paced draw in the main job (``--admission draw --admit-rate N``): each entrant presses
once the step admitting it is in effect, as a client that reads its step's ``at`` in the
draw record would, and the others once while the steps go on (the edge refuses them). After
the sale, the admissions per second (MySQL's steps) and the presses that reached the
function per second are set against the rate, in the report and a plot."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from seckill_demo.draw import Cursor, DrawRun, Entry
from seckill_demo.draw_moves import DrawStore, admitted_per_second
from seckill_demo.faults import rng
from seckill_demo.load import Press
from seckill_demo.report import Check
from seckill_ops.capacity.pace import recommend
from seckill_ops.capacity.profile import Profile

# Presses reaching the function in a second, at most this many times admitRate x presses per buyer:
# each buyer presses within a second of its step, so two steps' presses may share a second.
PRESS_MARGIN = 1.5


def recommended(args: argparse.Namespace) -> str:
    """What seckill-capacity recommends for the run's shape on AWS's default quotas, beside the run's own rate."""
    profile = Profile(
        users=args.users, presses=args.presses, stock=args.stock, seconds=10, admit_factor=args.admit_factor,
        draw_close_seconds=args.draw_close, wave_seconds=args.wave_seconds,
    )  # fmt: skip
    pacing = recommend(profile)
    shape = f"{args.users:,} users x {args.presses} presses, {args.stock:,} units"
    if pacing.rate is None:
        return f"seckill-capacity: no admitRate keeps {shape} under AWS's default quotas"
    seconds = pacing.admission_seconds
    when = "admitted at once" if not seconds else f"all admitted by {seconds} s after the opening"
    wall = "" if pacing.wall is None else f"; one more a second meets {pacing.wall.layer}'s {pacing.wall.quota}"
    return (
        f"seckill-capacity recommends admitRate {pacing.rate:,} for {shape} on AWS's default quotas (the first "
        f"move's {pacing.move:,.0f} {when}{wall}); this run paces at {args.admit_rate:,}"
    )


def paced_plan(
    record: dict[str, Any], entries: dict[int, Entry], passless: list[int], presses: int, seed: int
) -> list[tuple[float, int]]:
    """(epoch seconds, user) of every press, by time: an entrant the record's steps admit
    presses within a second after its step takes effect; the others (never admitted, or
    without an entry) once, at a random moment from the first step to a second after the
    last: told they are not admitted, a waiting client waits for its turn, not pressing on."""
    cursor = Cursor(record)
    if not cursor.ats:
        raise RuntimeError("the draw record shows no move at the opening: nobody could be paced")
    draw = rng(seed, "paced-plan")
    start, end = cursor.ats[0], cursor.ats[-1] + 1
    plan = []
    for user in sorted([*entries, *passless]):
        entry = entries.get(user)
        at = (
            None
            if entry is None
            else next((a for a, c in zip(cursor.ats, cursor.cursors, strict=True) if entry.ticket < c), None)
        )
        if at is None:
            plan.append((draw.uniform(start, end), user))
        else:
            plan += [(at + draw.random(), user) for _ in range(presses)]
    return sorted(plan)


def function_per_second(run: DrawRun, presses: list[Press]) -> dict[int, tuple[int, int]]:
    """Second since the opening (by when the press was sent) -> (presses that reached the
    function, those of them the edge could not place: by an entrant not yet admitted when
    the press was sent, whom a step within the edge's skew admits)."""
    cursor = Cursor(run.record)
    seconds: dict[int, tuple[int, int]] = {}
    for p in presses:
        if not p.status or p.edge:
            continue
        sent, answered = run.seen(p)
        entry = run.entries.get(p.user_id)
        before, after = cursor.at(sent), cursor.at(answered + run.skew) or ""
        unplaced = entry is not None and (before is None or entry.ticket >= before) and entry.ticket < after
        reached, skewed = seconds.get(int((sent - run.opened) // 1), (0, 0))
        seconds[int((sent - run.opened) // 1)] = (reached + 1, skewed + unplaced)
    return seconds


def press_bound(run: DrawRun) -> float:
    return (run.rate or 0) * run.presses_per_user * PRESS_MARGIN


def check_function_pace(run: DrawRun, presses: list[Press]) -> Check:
    """No second's presses at the function beyond admitRate x presses x ``PRESS_MARGIN``,
    but for those the edge forwarded within its skew of a step, not knowing which applied."""
    seconds = function_per_second(run, presses)
    bound = press_bound(run)
    over = sorted((s, n, k) for s, (n, k) in seconds.items() if n - k > bound)
    peak = max(seconds.items(), key=lambda item: item[1][0] - item[1][1], default=(0, (0, 0)))
    return Check(
        f"presses reaching the function within admitRate x presses x {PRESS_MARGIN} per second",
        not over,
        f"at most {peak[1][0]:,} in a second ({peak[1][1]:,} of them within the edge's skew of a step, not yet "
        f"admitted), second {peak[0]:+d} from the opening; bound {bound:,.0f}"
        + "".join(f"; {n:,} ({k:,} within the skew) in second {s:+d}" for s, n, k in over[:3]),
    )


def paced_figures(run: DrawRun, store: DrawStore, presses: list[Press]) -> dict[str, Any]:
    """The report's figures of the pace."""
    admitted = admitted_per_second(store)
    reached = function_per_second(run, presses)
    return {
        "admit_rate": run.rate,
        "steps": len(store.moves),
        "admission_seconds": store.moves[-1].at - store.moves[0].at if store.moves else 0.0,
        "peak_admitted": max(admitted.values(), default=0),
        "peak_function": max((n for n, _ in reached.values()), default=0),
        "press_bound": press_bound(run),
    }


def plot_paced(run: DrawRun, store: DrawStore, presses: list[Press], path: Path, title: str) -> str:
    """New admissions and presses reaching the function per second since the opening, against
    admitRate and its press bound; what to tell the user."""
    import matplotlib  # here, not at import: only a paced sale draws this

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    admitted = {s - int(run.opened // 1): n for s, n in admitted_per_second(store).items()}
    reached = function_per_second(run, presses)
    seconds = sorted({*admitted, *reached})
    x = list(range(seconds[0], seconds[-1] + 1)) if seconds else []
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar(x, [admitted.get(s, 0) for s in x], width=0.9, align="edge", alpha=0.5, label="newly admitted (steps)")
    ax.step(x, [reached.get(s, (0, 0))[0] for s in x], where="post", color="C1", label="presses reaching the function")
    ax.axhline(run.rate or 0, color="C0", linestyle="--", linewidth=1, label=f"admitRate {run.rate:,}")
    ax.axhline(press_bound(run), color="C1", linestyle=":", linewidth=1,
               label=f"admitRate x {run.presses_per_user} presses x {PRESS_MARGIN}")  # fmt: skip
    ax.set_xlabel("seconds since the sale opened")
    ax.set_ylabel("per second")
    ax.set_title(title)
    ax.legend(loc="best")
    ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"pace plot: {path}"
