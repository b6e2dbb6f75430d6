"""PNG plots of a report (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from benchmarks.servers import STAND_INS

SIDE_COLORS = {"ours": "tab:blue", "baseline": "tab:orange"}


def _save(fig: Any, path: Path) -> Path:
    """Lay out, write and close one figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _experiment(exp: dict[str, Any], out: Path) -> list[Path]:
    rows = exp["results"]
    groups = sorted({(r["scenario"], r["workers"]) for r in rows})
    labels = [f"{s}, {w} workers" for s, w in groups]
    by = {(r["scenario"], r["workers"], r["side"]): r for r in rows}
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.38
    for i, side in enumerate(("ours", "baseline")):
        values = [by[(s, w, side)]["throughput"] if (s, w, side) in by else 0 for s, w in groups]
        ax.bar([x + (i - 0.5) * width for x in range(len(groups))], values, width, label=side, color=SIDE_COLORS[side])
    ours_without = [
        by[(s, w, "ours")]["without_transport"]["throughput_estimate"] if (s, w, "ours") in by else 0 for s, w in groups
    ]
    ax.scatter(
        [x - 0.5 * width for x in range(len(groups))],
        ours_without,
        marker="_",
        s=400,
        color="black",
        label="ours without SQS time (estimate)",
        zorder=3,
    )
    ax.set_xticks(range(len(groups)), labels)
    ax.set_ylabel("presses per second")
    ax.set_title("Throughput: Seckill vs the synchronous baseline (a: full sale, b: losers' storm, c: many in flight)")
    ax.legend()
    throughput = _save(fig, out / "experiment_throughput.png")

    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 4), sharey=True, squeeze=False)
    for ax, (s, w) in zip(axes[0], groups, strict=True):
        for i, side in enumerate(("ours", "baseline")):
            row = by.get((s, w, side))
            if row is None:
                continue
            values = [row["latency"][q] for q in ("p50", "p95", "p99")]
            ax.bar([x + (i - 0.5) * width for x in range(3)], values, width, label=side, color=SIDE_COLORS[side])
        ax.set_xticks(range(3), ["p50", "p95", "p99"])
        ax.set_yscale("log")
        ax.set_title(f"{s}, {w} workers")
    axes[0][0].set_ylabel("ms (log)")
    axes[0][0].legend()
    fig.suptitle("Latency percentiles per press")
    latency = _save(fig, out / "experiment_latency.png")
    return [throughput, latency]


def _transport(transport: dict[str, Any], out: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in transport["results"]:
        depths = [p["depth"] for p in r["points"]]
        ax.plot(depths, [p["p50"] for p in r["points"]], marker="o", label=f"{STAND_INS[r['server']]} (p50)")
    ax.set_xlabel("messages already on the queue")
    ax.set_ylabel("SendMessage ms")
    ax.set_title("The SQS stand-ins: one SendMessage by queue depth")
    ax.legend()
    return [_save(fig, out / "transport.png")]


def _request_path(path_report: dict[str, Any], out: Path) -> list[Path]:
    rows = path_report["results"]
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    contenders = list(dict.fromkeys(r["contender"] for r in rows))
    by = {(r["kind"], r["contender"]): r["us"] for r in rows}
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(contenders)
    for i, contender in enumerate(contenders):
        ax.bar(
            [x + (i - (len(contenders) - 1) / 2) * width for x in range(len(kinds))],
            [by.get((k, contender), 0) for k in kinds],
            width,
            label=contender,
        )
    ax.set_xticks(range(len(kinds)), [k.replace("_", " ") for k in kinds])
    ax.set_yscale("log")
    ax.set_ylabel("µs per request (log)")
    ax.set_title("The request path: full handler (and through the resolver) vs place_order vs a bare EVALSHA")
    ax.legend()
    return [_save(fig, out / "request_path.png")]


def _persister(persister: dict[str, Any], out: Path) -> list[Path]:
    rows = persister["results"]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.bar(
        [r["contender"].replace("_", " ") for r in rows],
        [r["rows_per_s"] for r in rows],
        color=["tab:blue"] + ["tab:gray"] * (len(rows) - 1),
    )
    ax.set_ylabel("rows per second")
    ax.set_title("The persister vs raw PyMySQL on one hot voucher row")
    bars = _save(fig, out / "persister_throughput.png")

    fig, ax = plt.subplots(figsize=(7, 4))
    for drain in (persister["drain"], persister["drain_via_sqs"]):
        ax.plot(
            [t for t, _ in drain["curve"]],
            [n for _, n in drain["curve"]],
            label=f"{drain['orders']:,} from {drain['via']}",
        )
    ax.set_xlabel("seconds")
    ax.set_ylabel("orders stored")
    ax.set_title(f"Draining the orders of one voucher ({persister['drain']['concurrency']} persister containers)")
    ax.legend()
    curve = _save(fig, out / "persister_drain.png")
    return [bars, curve]


def _cold_start(cold: dict[str, Any], out: Path) -> list[Path]:
    rows = cold["results"]
    fig, ax = plt.subplots(figsize=(9, 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["init_ms"] for r in rows], 0.4, label="import app (init)")
    ax.bar([x + 0.2 for x in xs], [r["bare_imports_ms"] for r in rows], 0.4, label="its libraries, bare")
    ax.set_xticks(list(xs), [r["function"].removesuffix("Function") for r in rows], rotation=15)
    ax.set_ylabel("ms in a fresh process")
    ax.set_title("Cold start per function")
    ax.legend()
    return [_save(fig, out / "cold_start.png")]


def _edge(edge: dict[str, Any], out: Path) -> list[Path]:
    rows = edge["results"]
    names = [r["contender"] for r in rows]
    fig, (lat, thr, lag) = plt.subplots(1, 3, figsize=(13, 4))
    width = 0.8 / len(rows)
    for i, r in enumerate(rows):
        values = [r["latency"][q] for q in ("p50", "p95", "p99")]
        lat.bar([x + (i - (len(rows) - 1) / 2) * width for x in range(3)], values, width, label=r["contender"])
    lat.set_xticks(range(3), ["p50", "p95", "p99"])
    lat.set_yscale("log")
    lat.set_ylabel("ms per press (log)")
    lat.set_title(f"Latency, {edge['sizes']['concurrency']} in flight")
    lat.legend()
    thr.bar(names, [r["throughput"] for r in rows], color=[f"C{i}" for i in range(len(rows))])
    thr.set_ylabel("presses per second")
    thr.set_title("Throughput, same run, interleaved")
    changes = edge["state"]["changes"]
    for i, kind in enumerate(("sold out", "given back")):
        ms = [c["ms"] for c in changes if c["change"] == kind]
        lag.scatter([i] * len(ms), ms, alpha=0.6)
    lag.set_xticks([0, 1], ["last unit sold", "unit given back"])
    lag.set_xlim(-0.5, 1.5)
    lag.set_ylabel("ms until the edge answers differently")
    lag.set_title("A state change's way to the edge")
    fig.suptitle("A sold-out voucher's refusals: the local edge vs the local API without it vs Node's floor")
    return [_save(fig, out / "edge.png")]


def _draw(draw_report: dict[str, Any], out: Path) -> list[Path]:
    by = {(r["kind"], r["mode"]): r for r in draw_report["results"]}
    kinds = list(dict.fromkeys(k for k, _ in by))
    fig, axes = plt.subplots(1, 2, figsize=(9, 4))
    for ax, field, name in zip(axes, ("p50_us", "p99_us"), ("p50", "p99"), strict=True):
        for i, mode in enumerate(("race", "draw")):
            ax.bar([x + (i - 0.5) * 0.38 for x in range(len(kinds))], [by[(k, mode)][field] for k in kinds], 0.38)
            ax.containers[-1].set_label(mode)
        ax.set_xticks(range(len(kinds)), kinds)
        ax.set_yscale("log")
        ax.set_ylabel(f"{name} µs per press (log)")
        ax.set_title(name)
        ax.legend()
    fig.suptitle(
        f"A draw's press (pass verified, ticket below the cursor) vs a race's; the pass check alone "
        f"{draw_report['verify_us']:.1f} µs"
    )
    return [_save(fig, out / "draw.png")]


def plot(report: dict[str, Any], out: Path) -> list[Path]:
    """Every plot the report has data for; returns their paths."""
    made: list[Path] = []
    for section, draw in (
        ("experiment", _experiment),
        ("transport", _transport),
        ("request_path", _request_path),
        ("persister", _persister),
        ("cold_start", _cold_start),
        ("edge", _edge),
        ("draw", _draw),
    ):
        if section in report:
            made.extend(draw(report[section], out))
    return made
