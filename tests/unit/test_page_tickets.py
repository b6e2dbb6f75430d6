"""edge/page/tickets.js, the page's port of seckill.draw.tickets.ahead and admitted: run on
Node.js over many random inputs (early and late tickets, no cursor, an early or a late one,
counts from none to billions, and exact ties for Python's round), it answers what Python
does. The inputs come from a fresh seed each run, said on a failure."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from seckill.draw.tickets import admitted, ahead, late_ticket
from seckill_local.checkout import ROOT
from seckill_local.node import MISSING, node

CASES = 20_000
# Reads [[ticket, cursor, early, late], ...] on stdin, prints [[admitted, ahead], ...].
PORT = """
import { readFileSync } from 'node:fs';
import { admitted, ahead } from %s;
const cases = JSON.parse(readFileSync(0, 'utf8'));
console.log(JSON.stringify(cases.map(([t, c, e, l]) => [admitted(t, c), ahead(t, c, e, l)])));
"""

Case = tuple[str, str | None, int, int]


def early(value: int) -> str:
    return f"0{value:016x}"


def count(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, rng.randrange(1, 1000), 5_000_000, rng.randrange(1, 2**40)])


def plain(rng: random.Random) -> Case:
    """Any ticket against any cursor: none yet, early (at times the ticket's own or next to
    it), or late (at times past every late entrant)."""
    late_count = count(rng)
    ticket = early(rng.getrandbits(64)) if rng.random() < 0.5 else late_ticket(rng.randrange(1, late_count + 3))
    own = int(ticket[1:], 16)
    cursor = rng.choice(
        [
            None,
            early(rng.getrandbits(64)),
            early(min(own + rng.randrange(-2, 3), 2**64 - 1) if own > 2 else 0),
            late_ticket(rng.randrange(1, late_count + 3)),
        ]
    )
    return ticket, cursor, count(rng), late_count


def tie(rng: random.Random) -> Case:
    """A share of exactly n + 1/2 entrants (2^k entrants, a distance of an odd multiple of
    2^(63-k)): Python rounds it to the even n, where rounding half up would not."""
    k = rng.randrange(1, 40)
    distance = (2 * rng.randrange(2**k) + 1) << (63 - k)
    if rng.random() < 0.5:  # an early ticket that far above the cursor (or above 0)
        low = rng.randrange(2**64 - distance)
        cursor = rng.choice([None, early(low)]) if low else None
        return early((0 if cursor is None else low) + distance), cursor, 2**k, rng.randrange(100)
    # a late ticket, the early entrants above an early cursor that far from 2^64
    late_count = rng.randrange(1, 100)
    return late_ticket(rng.randrange(1, late_count + 2)), early(2**64 - distance), 2**k, late_count


def test_the_page_reckons_ahead_and_admitted_as_the_service_does() -> None:
    found = node()
    if found is None:
        pytest.fail(MISSING)
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    cases = [tie(rng) if rng.random() < 0.2 else plain(rng) for _ in range(CASES)]
    script = PORT % json.dumps((ROOT / "edge" / "page" / "tickets.js").as_uri())
    # Our own fixed command line; the inputs go on stdin.
    done = subprocess.run(  # noqa: S603
        [str(found), "--input-type=module", "-e", script],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"seed {seed}: {done.stderr}"
    answers = json.loads(done.stdout)
    wrong = [
        (case, page, [admitted(case[0], case[1]), ahead(*case)])
        for case, page in zip(cases, answers, strict=True)
        if page != [admitted(case[0], case[1]), ahead(*case)]
    ]
    assert not wrong, f"seed {seed}: {len(wrong)} of {CASES} differ, e.g. (case, page, service) {wrong[:5]}"
    cursors = {None if c is None else c[0] for _, c, _, _ in cases}
    assert cursors == {None, "0", "1"}  # the inputs reach each branch
    assert {t[0] for t, _, _, _ in cases} == {"0", "1"}
