"""The draw's arithmetic and its passes (seckill.draw.tickets, seckill.passes): what anyone
can recompute once the seed is out, what a pass binds, and the ticket a press shows."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from seckill import passes
from seckill.draw.tickets import (
    admitted,
    ahead,
    commitment,
    early_ticket,
    late_ticket,
    move_size,
    next_cursor,
    step_sizes,
)
from seckill.infra.errors import TryAgain
from seckill.passes import BadKeyRing, KeyRing

SEED = bytes(range(32))
NOW = 1_800_000_000


def test_a_ticket_anyone_can_recompute() -> None:
    """Known answer: printf '7:1010' | openssl dgst -sha256 -mac HMAC -macopt hexkey:000102...1f
    gives 2826302b6e246995..., so user 1010's ticket for voucher 7 is "0" and its first 16 hex."""
    assert early_ticket(SEED, 7, 1010) == "02826302b6e246995"
    assert commitment(SEED) == hashlib.sha256(SEED).hexdigest()
    assert commitment(SEED) == "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd"


def test_late_tickets_follow_every_early_one_in_entry_order() -> None:
    rng = random.Random(7)
    early = [early_ticket(rng.randbytes(32), 7, user) for user in range(1, 200)]
    late = [late_ticket(n) for n in range(1, 50)]
    assert late[0] == "10000000000000001"
    assert late_ticket(255) == "100000000000000ff"
    assert max(early) < min(late)
    assert late == sorted(late)
    assert all(len(t) == 17 for t in early + late)


def test_a_cursor_admits_the_tickets_below_it_and_nobody_before_the_first_move() -> None:
    assert not admitted("0aaaaaaaaaaaaaaaa", None)
    assert admitted("0aaaaaaaaaaaaaaaa", "0aaaaaaaaaaaaaaab")
    assert not admitted("0aaaaaaaaaaaaaaab", "0aaaaaaaaaaaaaaab")
    assert admitted("0ffffffffffffffff", late_ticket(1))
    assert not admitted(late_ticket(1), late_ticket(1))


def test_a_move_admits_exactly_its_size_and_the_cursor_is_the_next_waiting_ticket() -> None:
    waiting = sorted(f"0{random.Random(n).getrandbits(64):016x}" for n in range(10))
    assert move_size(10, 2, 3) == 6
    assert move_size(4, 2, 3) == 4
    assert move_size(10, 2, 0) == 0
    # Six admitted: the cursor is the seventh ticket, which the move left waiting.
    cursor = next_cursor(waiting[6], late_count=0)
    assert cursor == waiting[6]
    assert sum(admitted(t, cursor) for t in waiting) == 6
    # Everyone admitted: the cursor is the ticket the next late entrant will get, which
    # admits every early ticket and every earlier late one.
    cursor = next_cursor(None, late_count=3)
    assert cursor == late_ticket(4)
    assert all(admitted(t, cursor) for t in [*waiting, late_ticket(1), late_ticket(3)])
    assert not admitted(late_ticket(4), cursor)


RING = KeyRing("k2", {"k1": bytes(32), "k2": bytes(range(32))})


def test_a_pass_verifies_for_its_voucher_user_and_token_only() -> None:
    issued = passes.sign(RING, 7, 1010, "token-of-1010", "02826302b6e246995", NOW + 60)
    assert issued.startswith(f"k2.7.1010.{passes.token_hash('token-of-1010')}.02826302b6e246995.{NOW + 60}.")
    assert passes.verify(RING, issued, 7, 1010, "token-of-1010", NOW) == "02826302b6e246995"
    assert passes.verify(RING, issued, 8, 1010, "token-of-1010", NOW) is None  # another voucher
    assert passes.verify(RING, issued, 7, 1011, "token-of-1010", NOW) is None  # another user
    assert passes.verify(RING, issued, 7, 1010, "another-token", NOW) is None  # another token
    assert passes.verify(RING, issued, 7, 1010, None, NOW) is None
    assert passes.verify(RING, issued, 7, 1010, "token-of-1010", NOW + 60) is None  # expired


@pytest.mark.parametrize(
    "tamper",
    [
        lambda p: p.replace(".02826302b6e246995.", ".00000000000000000."),  # a better ticket
        lambda p: p.replace(f".{NOW + 60}.", f".{NOW + 6000}."),  # a longer life
        lambda p: p[:-1] + ("A" if p[-1] != "A" else "B"),  # another signature
        lambda p: "k1" + p[2:],  # signed with k2, named k1
        lambda p: "k9" + p[2:],  # a key id the ring does not have
        lambda p: p + "=",
        lambda p: "",
    ],
)
def test_a_tampered_pass_is_no_pass(tamper: object) -> None:
    issued = passes.sign(RING, 7, 1010, "token-of-1010", "02826302b6e246995", NOW + 60)
    assert callable(tamper)
    assert passes.verify(RING, tamper(issued), 7, 1010, "token-of-1010", NOW) is None


def test_a_retired_key_verifies_nothing_and_a_rotated_ring_still_verifies_the_old_passes() -> None:
    old = passes.sign(RING, 7, 1010, "t", "02826302b6e246995", NOW + 60)  # k2
    rotated = KeyRing("k3", {**RING.keys, "k3": bytes([3]) * 32})
    assert passes.verify(rotated, old, 7, 1010, "t", NOW) == "02826302b6e246995"
    assert passes.sign(rotated, 7, 1010, "t", "02826302b6e246995", NOW + 60).startswith("k3.")
    retired = KeyRing("k3", {"k3": rotated.keys["k3"]})
    assert passes.verify(retired, old, 7, 1010, "t", NOW) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        json.dumps({"active": "k1", "keys": {}}),
        json.dumps({"active": "k1", "keys": {"k1": "00" * 31}}),
        json.dumps({"active": "k1", "keys": {"K1": "00" * 32}}),
        json.dumps({"active": "k1", "keys": {"k1": "GG" * 32}}),
    ],
)
def test_a_malformed_ring_is_refused(text: str) -> None:
    with pytest.raises(BadKeyRing):
        KeyRing.from_json(text)


def test_a_ring_reads_back_what_it_wrote_and_the_local_one_comes_from_the_environment() -> None:
    ring = passes.new_ring("k7")
    assert KeyRing.from_json(ring.to_json()) == ring
    assert len(ring.keys["k7"]) == 32
    assert passes.load_ring({"SECKILL_PASS_KEYS": ring.to_json()}) == ring
    assert passes.load_ring({}) is None


def test_a_press_without_a_pass_has_no_ticket_and_never_reads_the_ring() -> None:
    def no_ring() -> KeyRing:
        raise AssertionError("the ring is read only when a pass is shown")

    assert passes.press_ticket(None, 7, 1010, "token-of-1010", NOW, ring=no_ring) == ""
    assert passes.press_ticket("", 7, 1010, "token-of-1010", NOW, ring=no_ring) == ""
    assert passes.press_ticket(" \t", 7, 1010, "token-of-1010", NOW, ring=no_ring) == ""


def test_a_pass_is_read_without_the_spaces_and_tabs_around_it() -> None:
    issued = passes.sign(RING, 7, 1010, "token-of-1010", "02826302b6e246995", NOW + 60)
    for shown in (f"{issued} ", f" {issued}", f"\t{issued} \t"):
        assert passes.press_ticket(shown, 7, 1010, "token-of-1010", NOW, ring=lambda: RING) == "02826302b6e246995"
    # Only around it: a space inside is no pass.
    spaced = f"{issued[:10]} {issued[10:]}"
    assert passes.press_ticket(spaced, 7, 1010, "token-of-1010", NOW, ring=lambda: RING) == ""


def test_a_press_shows_its_pass_ticket_only_while_the_pass_is_valid() -> None:
    issued = passes.sign(RING, 7, 1010, "token-of-1010", "02826302b6e246995", NOW + 60)
    assert passes.press_ticket(issued, 7, 1010, "token-of-1010", NOW, ring=lambda: RING) == "02826302b6e246995"
    assert passes.press_ticket(issued, 7, 1010, "another-token", NOW, ring=lambda: RING) == ""
    assert passes.press_ticket(issued, 7, 1010, "token-of-1010", NOW + 60, ring=lambda: RING) == ""


def test_no_pass_keys_is_a_503(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PASS_KEYS_SECRET_ARN", raising=False)
    monkeypatch.delenv("SECKILL_PASS_KEYS", raising=False)
    with pytest.raises(TryAgain, match="no pass keys are configured"):
        passes.key_ring()
    monkeypatch.setenv("SECKILL_PASS_KEYS", "not a ring")
    with pytest.raises(TryAgain, match="briefly unavailable"):
        passes.key_ring()
    monkeypatch.setenv("SECKILL_PASS_KEYS", RING.to_json())
    assert passes.key_ring() == RING


def test_a_paced_move_is_split_into_steps_of_at_most_the_rate() -> None:
    assert step_sizes(10, 3) == [3, 3, 3, 1]
    assert step_sizes(9, 3) == [3, 3, 3]
    assert step_sizes(3, 3) == [3]
    assert step_sizes(10, None) == [10]
    assert step_sizes(0, 5) == [0]
    sizes = step_sizes(100_001, 1000)
    assert (len(sizes), sum(sizes), max(sizes)) == (101, 100_001, 1000)


def test_ahead_is_estimated_from_the_tickets_arithmetic() -> None:
    rng = random.Random(7)
    early = sorted(f"0{rng.getrandbits(64):016x}" for _ in range(20_000))
    late = [late_ticket(n) for n in range(1, 51)]
    everyone = early + late
    for cursor in (None, early[5_000], late_ticket(10)):
        for ticket in (early[100], early[12_345], early[-1], late[0], late[30]):
            exact = sum(1 for t in everyone if not admitted(t, cursor) and t < ticket)
            estimate = ahead(ticket, cursor, len(early), len(late))
            # Uniform tickets: within a few standard deviations of a binomial count.
            assert abs(estimate - exact) <= 4 * max(1.0, (exact or 1) ** 0.5) + 2, (cursor, ticket, exact, estimate)
    assert ahead(early[10], early[20], len(early), 0) == 0  # admitted
