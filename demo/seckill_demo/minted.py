"""A pass minted with the service's own key for a buyer the draw has not admitted: what
anyone who can read the key (the pass key ring, or the edge's store, which holds a copy)
could make. The chaos run presses with such passes: the gate, which believes a valid
pass's ticket, reserves a unit; the persister, which re-checks the stored entry against
the recorded moves, fails the order ``NOT_ADMITTED`` and puts the unit back on sale
once (docs/draw.md, "Admission re-checked")."""

from __future__ import annotations

from seckill import passes

# Below every cursor: the ticket a forger picks.
FORGED_TICKET = "0" * 17


def minted_pass(ring: passes.KeyRing, voucher_id: int, user_id: int, token: str, expires: int) -> str:
    """A pass for ``user_id`` (entrant or not) and its login ``token``, signed with the
    ring's active key, carrying ``FORGED_TICKET`` and expiring at ``expires`` (epoch s)."""
    return passes.sign(ring, voucher_id, user_id, token, FORGED_TICKET, expires)
