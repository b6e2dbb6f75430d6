"""The chaos run's pass faults (``seckill_demo.pass_faults``): their table and their checks,
from a chaos log, a functions' log and MySQL's answer made up here."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from seckill import passes
from seckill_demo.draw import Entry
from seckill_demo.faults import record
from seckill_demo.forged import forged_passes
from seckill_demo.load import Press
from seckill_demo.minted import FORGED_TICKET
from seckill_demo.pass_faults import (
    NONE_HELD,
    STALE,
    MintedOrders,
    check_passes,
    edge_answered,
    minted_users,
    pass_faults_table,
)

ENTRIES = {7: Entry("0" + "a" * 16, False, "p7"), 8: Entry("0" + "f" * 16, False, "p8")}
EXPIRIES = ("long past", "past the skew", "now", "within the skew", "to come")
NOTHING_BOUGHT = MintedOrders({}, {8: "NOT_ADMITTED"})


def chaos_log(tmp_path: Path, **changes: Any) -> Path:
    """A chaos log of a run whose pass faults all were answered as they should be;
    ``changes`` replaces a recorded answer (``forged``, ``probe``, ``during``, ``minted``)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "chaos.jsonl"
    for kind in EXPIRIES:
        record(log, "forged-pass", kind=kind, **changes.get("forged", {"status": 403, "code": "NO_PASS", "edge": True}))
    record(
        log, "minted-pass", user=8, order="99", **changes.get("minted", {"status": 202, "code": None, "edge": False})
    )
    record(log, "pass-key-rotated", kid="k2", keys=["k1", "k2"])
    pressed = {"status": 409, "code": "NOT_ADMITTED", "edge": True}
    record(log, "pass-probe", user=8, outage=False, **changes.get("probe", {"entry": 200, "kid": "k1", **pressed}))
    record(log, "pass-keys-unreadable")
    record(log, "pass-probe", user=8, outage=True, **changes.get("during", {"entry": 200, "kid": "k1", **pressed}))
    record(log, "pass-keys-readable-again", seconds=70.2)
    return log


def api_log(tmp_path: Path, *lines: str) -> Path:
    """The functions' log: one refresh failed and served the last good value, unless ``lines`` say otherwise."""
    path = tmp_path / "api.log"
    path.write_text("".join(f"{line}\n" for line in ("REPORT RequestId: 1", *(lines or (STALE,)))))
    return path


def press(user_id: int, code: str, status: int = 403) -> Press:
    return Press(user_id, status, code, None, 1.0, 0.0, True)


def failed(
    log: Path, api: Path, presses: list[Press] | None = None, minted: MintedOrders = NOTHING_BOUGHT
) -> list[str]:
    return [c.name for c in check_passes(log, api, presses or [], ENTRIES, minted) if not c.ok]


def test_faults_answered_as_they_should_pass_every_check(tmp_path: Path) -> None:
    log, api = chaos_log(tmp_path), api_log(tmp_path, STALE, STALE)
    # A press refused NO_PASS without an entry (a user who never entered) is no valid pass refused.
    assert failed(log, api, [press(7, "NOT_ADMITTED", 409), press(5, "NO_PASS")]) == []
    assert minted_users(log) == [8]
    assert edge_answered(log) == 5 + 2  # the forged passes and the probes' presses; the minted one was forwarded


def test_a_valid_pass_refused_no_pass_fails(tmp_path: Path) -> None:
    rotation = "no valid pass refused NO_PASS, a key rotated mid-sale"
    log, api = chaos_log(tmp_path), api_log(tmp_path)
    assert failed(log, api, [press(7, "NO_PASS")]) == [rotation]
    # A pass issued after the rotation with a key the edge does not hold.
    refused = chaos_log(
        tmp_path / "k2", probe={"entry": 200, "kid": "k2", "status": 403, "code": "NO_PASS", "edge": True}
    )
    assert failed(refused, api) == [rotation]


def test_a_5xx_no_good_value_or_no_refresh_while_the_ring_is_unreadable_fails(tmp_path: Path) -> None:
    outage = "the ring unreadable: the last good one served, no 5xx"
    assert failed(chaos_log(tmp_path / "a", during={"entry": 503}), api_log(tmp_path, STALE)) == [outage]
    assert failed(chaos_log(tmp_path / "b"), api_log(tmp_path / "b", STALE, NONE_HELD)) == [outage]
    # No function refreshed while it was unreadable: the fault was never met.
    assert failed(chaos_log(tmp_path / "c"), api_log(tmp_path / "c", "REPORT RequestId: 2")) == [outage]


def test_a_forged_pass_answered_by_the_function_or_let_through_fails(tmp_path: Path) -> None:
    forged = "every forged pass refused NO_PASS at the edge"
    for n, answer in enumerate(
        [
            {"status": 403, "code": "NO_PASS", "edge": False},  # refused, but by the function
            {"status": 202, "code": None, "edge": False},
            {"status": 403, "code": "NOT_ADMITTED", "edge": True},  # its ticket believed
        ]
    ):
        assert failed(chaos_log(tmp_path / str(n), forged=answer), api_log(tmp_path)) == [forged]


def test_a_minted_pass_whose_order_is_stored_fails(tmp_path: Path) -> None:
    log, api = chaos_log(tmp_path), api_log(tmp_path)
    assert failed(log, api, minted=MintedOrders({8: 99}, {})) == ["no minted pass buys a unit"]
    # Refused at the gate (a 503 that placed nothing): no unit bought either.
    refused = chaos_log(tmp_path / "r", minted={"status": 503, "code": "TRY_AGAIN", "edge": False})
    assert failed(refused, api, minted=MintedOrders({}, {})) == []


def test_faults_never_injected_fail(tmp_path: Path) -> None:
    assert failed(tmp_path / "none.jsonl", api_log(tmp_path)) == [
        "no valid pass refused NO_PASS, a key rotated mid-sale",
        "the ring unreadable: the last good one served, no 5xx",
        "every forged pass refused NO_PASS at the edge",
        "no minted pass buys a unit",
    ]


def test_the_table_counts_each_fault_and_what_answered(tmp_path: Path) -> None:
    log, api = chaos_log(tmp_path), api_log(tmp_path, STALE, STALE, STALE)
    table = pass_faults_table(log, api, NOTHING_BOUGHT)
    assert [f.injected for f in table] == [1, 1, 5, 1]
    rotated, unreadable, forged, minted = (f.evidence for f in table)
    assert rotated.startswith("passes issued after it: k1 2; presses with them answered 409 NOT_ADMITTED at the edge 2")
    assert unreadable == (
        "70 s unreadable; 3 warnings 'serving its last good value', 0 'no good value is held'; "
        "entries asked during it: 200 1"
    )
    assert forged == (
        "answered 403 NO_PASS at the edge 5 (long past, past the skew, now, within the skew, to come); "
        "0 reached the function"
    )
    assert minted == "answered 202 1; orders failed NOT_ADMITTED 1, stored 0"


def test_forged_passes_carry_one_junk_signature_per_expiry() -> None:
    ring = passes.new_ring("k1")
    now = time.time()
    forged = forged_passes(3, 4, "token", FORGED_TICKET, "k1", now)
    assert tuple(forged) == EXPIRIES
    assert all(shown.startswith("k1.3.4.") for shown in forged.values())
    # None verifies with the ring's key, whatever its expiry.
    assert [passes.verify(ring, shown, 3, 4, "token", now - 7200) for shown in forged.values()] == [None] * 5


def test_the_table_says_when_the_new_key_first_signed(tmp_path: Path) -> None:
    pressed = {"status": 409, "code": "NOT_ADMITTED", "edge": True}
    log = chaos_log(tmp_path, during={"entry": 200, "kid": "k2", **pressed})
    rotated = pass_faults_table(log, api_log(tmp_path), NOTHING_BOUGHT)[0].evidence
    assert rotated.startswith("passes issued after it: k1 1, k2 1 (the first with k2 0 s after the rotation);")
