"""seckill-draw verify: audit one user's place in a draw sale from its public record.

It fetches the draw record (GET /voucher/seckill/{voucherId}/draw, no token), checks
that the revealed seed is the one committed to at creation (SHA-256), recomputes the
user's ticket from the seed (HMAC-SHA256(seed, "<voucherId>:<userId>"): "0" + its
first 16 hex), checks that the cursor never moved back, and says whether and when the
user was admitted: the first move of the cursor above their ticket, and when it took
effect. How the draw works: docs/draw.md.

A late entrant's ticket ("1" + their place in the late queue) cannot be derived from
the seed: pass the ticket the entry route gave with --ticket, and the command checks
that it is either the user's derived ticket or a late one the record accounts for.
"""

from __future__ import annotations

import argparse
import hmac
import itertools
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import urllib3

from seckill.draw.tickets import TICKET, admitted, commitment, early_ticket, late_ticket

LOCAL_ENDPOINT = "http://127.0.0.1:3000"  # seckill-local start-api's default port
RECORD_PATH = "/voucher/seckill/{voucher_id}/draw"
HEX64 = re.compile(r"[0-9a-f]{64}")

# Exit codes (documented in --help and docs/operations.md).
OK = 0  # every check passed (admitted or not)
MISMATCH = 1  # the seed, the ticket or the cursor's history does not add up
USAGE = 2  # argparse's own
NOT_REVEALED = 3  # the seed is still secret: the sale is not over
UNREACHABLE = 4  # no draw record: the endpoint did not answer, or not with a draw record


def late_number(ticket: str) -> int | None:
    """A late ticket's place in the late queue (1, 2, ...); None for a drawn ticket."""
    number = int(ticket[1:], 16)
    return number if ticket == late_ticket(number) else None


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Audit:
    """What the record says of one user's ticket."""

    voucher_id: int
    user_id: int
    ticket: str | None  # the ticket audited: --ticket, or the derived one; None: neither known
    revealed: bool
    checks: list[Check] = field(default_factory=list)
    admitted_at: Any = None  # the `at` of the first move above the ticket, as the record gives it
    admitted_by: str | None = None  # that move's cursor

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def exit_code(self) -> int:
        if not self.ok:
            return MISMATCH
        return OK if self.revealed else NOT_REVEALED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok, "admitted": self.admitted_by is not None}


def audit(record: Mapping[str, Any], voucher_id: int, user_id: int, ticket: str | None = None) -> Audit:
    """Check the draw record (the route's ``data``) for one user; ``ticket`` is the one the
    entry route gave them, if known (a late entrant's must be given)."""
    committed, seed = record.get("commitment"), record.get("seed")
    history = record.get("cursorHistory") or []
    result = Audit(voucher_id, user_id, ticket, revealed=seed is not None)
    moves = [(m.get("at"), m.get("cursor")) for m in history if isinstance(m, Mapping)]
    well_formed = (
        isinstance(committed, str)
        and HEX64.fullmatch(committed) is not None
        and (seed is None or (isinstance(seed, str) and HEX64.fullmatch(seed) is not None))
        and len(moves) == len(history)
        and all(isinstance(c, str) and TICKET.fullmatch(c) for _, c in moves)
    )
    result.checks.append(
        Check(
            "the record is well formed",
            well_formed,
            "commitment and seed are 64 hex, every move's cursor 17 hex"
            if well_formed
            else f"commitment {committed!r}, seed {seed!r}, {len(history)} moves",
        )
    )
    if not well_formed:
        return result
    cursors = [str(c) for _, c in moves]
    back = [(a, b) for a, b in itertools.pairwise(cursors) if b < a]
    result.checks.append(
        Check(
            "the cursor never moved back",
            not back,
            f"{len(cursors)} moves" + (f"; {back[0][0]} then {back[0][1]}" if back else ""),
        )
    )
    derived = None
    if seed is not None:
        seed_bytes = bytes.fromhex(seed)
        digest = commitment(seed_bytes)
        result.checks.append(
            Check(
                "the seed matches the commitment",
                hmac.compare_digest(digest, str(committed)),
                f"SHA-256(seed) = {digest}" + ("" if digest == committed else f", committed {committed}"),
            )
        )
        derived = early_ticket(seed_bytes, voucher_id, user_id)
    if ticket is None:
        result.ticket = derived
    else:
        result.checks.append(ticket_check(ticket, derived, int(record.get("lateEntrants") or 0)))
    if result.ticket is not None and TICKET.fullmatch(result.ticket):
        first = next(((at, c) for at, c in moves if admitted(str(result.ticket), str(c))), None)
        if first is not None:
            result.admitted_at, result.admitted_by = first
    return result


def ticket_check(ticket: str, derived: str | None, late_entrants: int) -> Check:
    """A ticket given by the user: their drawn ticket, or a late one within the late count."""
    name = "the ticket is the user's"
    if not TICKET.fullmatch(ticket) or ticket[0] not in "01":
        return Check(name, False, f"{ticket!r} is not 17 lowercase hex characters starting 0 or 1")
    late = late_number(ticket)
    if late is not None:
        ok = 1 <= late <= late_entrants
        return Check(name, ok, f"late entry number {late} of {late_entrants} late entrants")
    if derived is None:
        return Check(name, True, "a drawn ticket: derivable once the seed is revealed")
    if hmac.compare_digest(ticket, derived):
        return Check(name, True, "derived from the seed: drawn before the close")
    return Check(name, False, f"the seed gives this user {derived}, not {ticket}")


class RecordUnavailable(Exception):
    """No draw record: the endpoint did not answer, or not with one."""


def fetch_record(endpoint: str, voucher_id: int, http: urllib3.PoolManager | None = None) -> dict[str, Any]:
    """The draw record's ``data`` from the route."""
    url = endpoint.rstrip("/") + RECORD_PATH.format(voucher_id=voucher_id)
    pool = http or urllib3.PoolManager(retries=urllib3.Retry(2, backoff_factor=0.2), timeout=10)
    try:
        response = pool.request("GET", url)
    except urllib3.exceptions.HTTPError as exc:
        raise RecordUnavailable(f"{url} did not answer ({exc})") from exc
    try:
        body = json.loads(response.data)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise RecordUnavailable(f"{url} answered {response.status} without a JSON body")
    if response.status != 200 or not isinstance(body.get("data"), dict):
        raise RecordUnavailable(
            f"{url} answered {response.status} {body.get('code') or ''}: {body.get('errorMsg') or 'no draw record'}"
        )
    return dict(body["data"])


def render(result: Audit, record: Mapping[str, Any]) -> str:
    lines = [
        f"voucher {result.voucher_id}, user {result.user_id}: draw closed at {record.get('closesAt')}, "
        f"{record.get('entrants')} entrants ({record.get('lateEntrants')} late), "
        f"{len(record.get('cursorHistory') or [])} cursor moves",
    ]
    lines += [f"  {'PASS' if c.ok else 'FAIL'}  {c.name}: {c.detail}" for c in result.checks]
    if not result.revealed:
        lines.append("  the seed is not revealed yet (it is, once the sale is over or stopped): run this again then")
    if result.ticket is None:
        lines.append("  ticket unknown until the seed is revealed (or give it with --ticket)")
    elif result.admitted_by is not None:
        lines.append(f"  ticket {result.ticket}: admitted at {result.admitted_at} (cursor {result.admitted_by})")
    else:
        lines.append(f"  ticket {result.ticket}: not admitted (final cursor {record.get('cursor')})")
    return "\n".join(lines)


def verify(args: argparse.Namespace) -> int:
    try:
        record = fetch_record(args.endpoint, args.voucher)
    except RecordUnavailable as exc:
        print(f"seckill-draw: {exc}", file=sys.stderr)
        return UNREACHABLE
    result = audit(record, args.voucher, args.user, args.ticket)
    print(json.dumps(result.to_dict(), indent=2) if args.json else render(result, record))
    return result.exit_code


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="seckill-draw",
        description="Audit a draw sale from its public record (no credentials needed).",
        epilog="How the draw works: docs/draw.md.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser(
        "verify",
        help="check the revealed seed, a user's ticket and when they were admitted",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Exit status: {OK} every check passed (whether or not the user was admitted); {MISMATCH} a "
        f"mismatch (the seed against the commitment, the ticket, a cursor moving back); {USAGE} bad options; "
        f"{NOT_REVEALED} the seed is not revealed yet (the sale is not over); {UNREACHABLE} no draw record (the "
        "endpoint unreachable, or the voucher unknown or not a draw).",
    )
    v.add_argument("--voucher", type=positive, required=True, metavar="ID", help="the draw voucher's id")
    v.add_argument("--user", type=positive, required=True, metavar="ID", help="the user id to audit")
    v.add_argument(
        "--ticket",
        type=str.lower,
        help="the ticket the entry route gave the user (required to audit a late entrant; default: the one "
        "derived from the seed)",
    )
    v.add_argument(
        "--endpoint",
        default=LOCAL_ENDPOINT,
        help="the CloudFront distribution serving the draw record, or the API of a stack without one (default: the "
        "local API, %(default)s)",
    )
    v.add_argument("--json", action="store_true", help="print the audit as JSON")
    return p


def positive(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"a positive integer, not {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return verify(args)


if __name__ == "__main__":
    sys.exit(main())
