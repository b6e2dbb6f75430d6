"""Passes with a forged signature: what anyone signed in can send without the key. The
edge verifies a pass's signature before it believes any field of it, its expiry
included (docs/edge.md, "A draw"), so each is answered ``NO_PASS`` there; the chaos run
of a draw sends one of each expiry through the local edge (``seckill_demo.pass_faults``)."""

from __future__ import annotations

import secrets

from seckill.passes import KeyRing, sign


def forged_passes(voucher_id: int, user_id: int, token: str, ticket: str, kid: str, now: float) -> dict[str, str]:
    """Passes of this voucher, user, token and ticket under the key id ``kid``, each with a
    forged signature (a random key), one per expiry the edge must not believe before the
    signature: long past, past its clock skew (1 s), ``now`` itself, within the skew, to
    come. Keyed by that name, for a report to count them."""
    forger = KeyRing(kid, {kid: secrets.token_bytes(32)})
    second = int(now)
    expiries = {
        "long past": second - 3600,
        "past the skew": second - 2,
        "now": second,
        "within the skew": second + 1,
        "to come": second + 3600,
    }
    return {name: sign(forger, voucher_id, user_id, token, ticket, exp) for name, exp in expiries.items()}
