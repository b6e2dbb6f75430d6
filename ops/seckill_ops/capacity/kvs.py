"""seckill-capacity's KeyValueStore API calls a month. The edge's store is billed per API call
(its reads at the edge are priced apart): the reconciler's sweep, each state the publisher
writes, each cursor move of a draw and the cleanup of ended vouchers."""

from __future__ import annotations

import math
from dataclasses import dataclass

from seckill_ops.capacity.assumptions import assumed
from seckill_ops.capacity.sources import MONTH_MINUTES, figure


@dataclass(frozen=True)
class Fleet:
    """The vouchers the store holds and how often each changes."""

    live_vouchers: int = int(assumed("live_vouchers"))
    sweep_minutes: float = assumed("sweep_minutes")
    changes_per_sale: float = assumed("changes_per_sale")
    sales_per_month: float = assumed("sales_per_month")
    cursor_moves: float = 0.0  # per draw sale; 0 for a race


@dataclass
class Calls:
    item: str
    calls: float  # a month
    how: str

    @property
    def dollars(self) -> float:
        return self.calls / 1000 * figure("price_kvs_api_call")


def kvs_calls(f: Fleet) -> list[Calls]:
    """A month's calls, as the publisher makes them. The sweep reads the whole store in
    ListKeys pages and writes only what differs from the truth (nothing, unless a notice was
    lost, or a sale ended a day ago: then DescribeKeyValueStore, ListKeys again under the
    ETag, and one UpdateKeys with the deletes); each state change is written once, on its
    notice: DescribeKeyValueStore (the ETag UpdateKeys' If-Match needs), GetKey (the stored
    state, to compare) and UpdateKeys."""
    sweeps = MONTH_MINUTES / f.sweep_minutes
    keys = f.live_vouchers + 1  # and the key list of the draw's passes
    pages = math.ceil(keys / figure("kvs_list_page"))
    per_write = assumed("kvs_calls_per_write")
    sales = f.live_vouchers * f.sales_per_month
    lines = [
        Calls(
            "sweep: ListKeys",
            sweeps * pages,
            f"{sweeps:,.0f} sweeps (one every {f.sweep_minutes:g} min) x {pages} page(s) of up to "
            f"{figure('kvs_list_page'):g} keys ({keys} keys)",
        ),
        Calls(
            "state changes",
            sales * f.changes_per_sale * per_write,
            f"{sales:g} sales x {f.changes_per_sale:g} changes x {per_write:g} calls (ETag, GetKey, UpdateKeys)",
        ),
        Calls(
            "cleanup of ended vouchers",
            sales * (pages + 2),
            f"{sales:g} ended vouchers x {pages + 2} calls: the sweep deleting an entry reads the ETag, lists "
            "again under it and deletes in its UpdateKeys (shared when several end in one sweep)",
        ),
    ]
    if f.cursor_moves:
        lines.insert(
            2,
            Calls(
                "draw: cursor moves",
                sales * f.cursor_moves * per_write,
                f"{sales:g} sales x {f.cursor_moves:g} moves x {per_write:g} calls",
            ),
        )
    return lines


def calls_before(f: Fleet) -> float:
    """The calls of the publisher before the sweep compared: every sweep sent every voucher's
    state, and each publish read the ETag and the key before writing."""
    return MONTH_MINUTES / f.sweep_minutes * f.live_vouchers * 2
