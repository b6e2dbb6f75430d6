"""A draw's faults on its passes in a chaos run (``--admission draw --chaos``), from the
crowd's first press to the end of the waves, each sent through the local edge as a
client would:

- forged passes, one of each expiry (``seckill_demo.forged``): junk signatures, which the
  edge must refuse ``NO_PASS`` before it believes anything in them;
- minted passes (``seckill_demo.minted``): signed with the ring's own key, carrying the
  ticket below every cursor, for the entrants with the highest tickets (not admitted);
  the gate believes a valid pass, so only the persister's re-check of the stored entry
  against the recorded moves keeps them from a unit (``FAILED`` / ``NOT_ADMITTED``);
- the pass key ring (a Secrets Manager secret on the run's moto server,
  ``PASS_KEYS_SECRET_ARN``) rotated mid-sale in one put: a new key active, the old kept;
- once the first wave is over, the ring unreadable (``seckill_local.secrets.unreadable``)
  for longer than the functions keep it (``seckill.passes.RING_MAX_AGE``, not settable
  from outside, and the retry after a failed refresh), or until the run's end once a
  function has refreshed inside it (the run waits for one): each container asked for it
  then refreshes inside the outage and serves its last good ring.

From the rotation on, a few entrants not admitted ask for their entry again every second
(a fresh pass, its key id recorded) and press with it: the edge must verify it, and answer
``NOT_ADMITTED``, never ``NO_PASS``. Every injection and answer is written to the chaos
run's log; ``pass_faults_table`` and ``check_passes`` read it with MySQL and the
functions' log."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seckill.infra.db import Database
from seckill.infra.secrets import RETRY_SECONDS
from seckill.passes import RING_MAX_AGE, KeyRing, new_ring
from seckill_demo.chaos import Chaos
from seckill_demo.draw import Entry
from seckill_demo.faults import read_log, record
from seckill_demo.forged import forged_passes
from seckill_demo.load import TRY_AGAIN_RETRIES, Press, press_once
from seckill_demo.minted import FORGED_TICKET, minted_pass
from seckill_demo.report import Check, Fault
from seckill_demo.sale import LocalSale, console
from seckill_local import secrets as local_secrets

KEYS_SECRET = "SeckillDemoPassKeys"  # noqa: S105  # a secret's name: the ring's, on the run's moto server
FIRST_KID, ROTATED_KID = "k1", "k2"
MINTED = 2  # entrants pressing with a minted pass
PROBES = 2  # entrants asking for a fresh pass every PROBE_EVERY seconds from the rotation on
PROBE_EVERY = 1.0
MINTED_PASS_SECONDS = 600  # how long a minted pass claims to be valid
# Past the functions' cache of the ring and one retry: every container asked for it inside refreshes.
OUTAGE_SECONDS = RING_MAX_AGE + RETRY_SECONDS
# seckill.infra.secrets' warnings, in the functions' log.
STALE = "a secret could not be read: serving its last good value"
NONE_HELD = "a secret could not be read: no good value is held"


def keys_secret() -> dict[str, str]:
    """The secret the run's functions read the ring from (its name -> a ring of one fresh key)."""
    return {KEYS_SECRET: new_ring(FIRST_KID).to_json()}


class PassFaults:
    """The four faults, in a thread of their own while the sale runs (``during_sale``);
    ``wave_one_over`` starts the outage."""

    def __init__(self, chaos: Chaos, sale: LocalSale, tokens: Mapping[int, str], entries: Mapping[int, Entry]) -> None:
        self.log = chaos.log
        self.sale = sale
        self.tokens = tokens
        self.entries = entries
        self.endpoint = sale.stack.sqs_endpoint
        self.press_url = f"{sale.user_url}/voucher-order/seckill/{sale.voucher_id}"
        # The last to be admitted: none is when the crowd starts pressing (the moves may admit them later).
        ranked = sorted(entries, key=lambda u: entries[u].ticket, reverse=True)
        self.minted_users = ranked[:MINTED]
        self.probe_users = ranked[MINTED : MINTED + PROBES]
        self.api_log = sale.stack.log("api")
        self.wave_one_over = threading.Event()
        self.unreadable = threading.Event()
        self.outage_over = threading.Event()
        self.ending = threading.Event()  # the sale's waves are over
        self.stop = threading.Event()  # the probes stop

    @contextlib.contextmanager
    def during_sale(self) -> Iterator[None]:
        thread = threading.Thread(target=self._run, name="pass-faults", daemon=True)
        thread.start()
        try:
            yield
        finally:
            # The outage lasts across one refresh at least: the run waits for it (at most OUTAGE_SECONDS).
            self.ending.set()
            if self.unreadable.is_set():
                console.print(
                    f"the pass key ring stays unreadable until a function refreshes it (<= {OUTAGE_SECONDS} s)"
                )
            self.outage_over.wait(OUTAGE_SECONDS + 10)
            self.stop.set()
            thread.join()

    def _run(self) -> None:
        try:
            self.forge()
            self.mint()
            record(self.log, "pass-key-rotated", kid=ROTATED_KID, keys=sorted(self._rotate().keys))
        except Exception:
            self.outage_over.set()  # no outage: the run does not wait for one
            raise
        outage = threading.Thread(target=self.outage, name="pass-keys-outage", daemon=True)
        outage.start()
        while not self.stop.wait(PROBE_EVERY):
            self.probe()
        outage.join()

    def _rotate(self) -> KeyRing:
        return local_secrets.rotate(self.endpoint, KEYS_SECRET, ROTATED_KID)

    def ring(self) -> KeyRing:
        text = local_secrets.client(self.endpoint).get_secret_value(SecretId=KEYS_SECRET)["SecretString"]
        return KeyRing.from_json(text)

    def cursor(self) -> str | None:
        """The largest cursor recorded (None: no move); raises if MySQL cannot say."""

        def read(cursor: Any) -> str | None:
            cursor.execute(
                "SELECT MAX(cursor_after) AS c FROM tb_draw_move WHERE voucher_id = %s", (self.sale.voucher_id,)
            )
            found = cursor.fetchone()["c"]
            return None if found is None else str(found)

        return self.sale.db.run(read, read_only=True)

    def not_admitted(self, user_id: int) -> bool:
        """Whether no recorded move admits the entrant (False when MySQL cannot say: a chaos run kills connections)."""
        try:
            cursor = self.cursor()
        except Exception:
            self.sale.db.close()
            return False
        return cursor is None or self.entries[user_id].ticket >= cursor

    def press(self, user_id: int, shown: str) -> Press:
        """A press with this pass, a 503 TRY_AGAIN pressed again as the app does."""
        answer = press_once(self.sale.http, self.press_url, user_id, self.tokens[user_id], shown)
        for _ in range(TRY_AGAIN_RETRIES):
            if answer.code != "TRY_AGAIN":
                break
            time.sleep(0.2)
            answer = press_once(self.sale.http, self.press_url, user_id, self.tokens[user_id], shown)
        return answer

    def forge(self) -> None:
        user = min(self.entries)
        forged = forged_passes(
            self.sale.voucher_id, user, self.tokens[user], FORGED_TICKET, self.ring().active, time.time()
        )
        for kind, shown in forged.items():
            answer = press_once(self.sale.http, self.press_url, user, self.tokens[user], shown)
            record(self.log, "forged-pass", kind=kind, status=answer.status, code=answer.code, edge=answer.edge)

    def mint(self) -> None:
        ring = self.ring()
        for user in self.minted_users:
            if not self.not_admitted(user):
                continue
            shown = minted_pass(
                ring, self.sale.voucher_id, user, self.tokens[user], int(time.time()) + MINTED_PASS_SECONDS
            )
            answer = self.press(user, shown)
            record(self.log, "minted-pass", user=user, status=answer.status, code=answer.code, edge=answer.edge,
                   order=answer.order_id)  # fmt: skip

    def outage(self) -> None:
        """From the first wave's end, OUTAGE_SECONDS long, or less if the run ends once a
        function has served its last good ring (a refresh failed inside)."""
        try:
            while not self.wave_one_over.wait(0.2):
                if self.ending.is_set():
                    return
            started, refreshes = time.time(), warnings(self.api_log)[STALE]
            with local_secrets.unreadable(self.endpoint, KEYS_SECRET):
                record(self.log, "pass-keys-unreadable")
                self.unreadable.set()
                while time.time() - started < OUTAGE_SECONDS:
                    time.sleep(1.0)
                    if self.ending.is_set() and warnings(self.api_log)[STALE] > refreshes:
                        break
                self.unreadable.clear()
            record(self.log, "pass-keys-readable-again", seconds=time.time() - started)
        finally:
            self.outage_over.set()

    def probe(self) -> None:
        """Each probe entrant asks for its entry again (a fresh pass) and, while still not
        admitted, presses with it."""
        route = f"{self.press_url}/entry"
        for user in self.probe_users:
            outage = self.unreadable.is_set()
            try:
                answer = self.sale.http.request("POST", route, headers={"authorization": self.tokens[user]})
            except Exception as exc:  # an answer that never came
                record(self.log, "pass-probe", user=user, entry=0, error=type(exc).__name__, outage=outage)
                continue
            if answer.status != 200:
                record(self.log, "pass-probe", user=user, entry=answer.status, outage=outage)
                continue
            shown = str(json.loads(answer.data)["data"]["pass"])
            line: dict[str, Any] = {"user": user, "entry": 200, "kid": shown.partition(".")[0], "outage": outage}
            if self.not_admitted(user):
                pressed = self.press(user, shown)
                line |= {"status": pressed.status, "code": pressed.code, "edge": pressed.edge}
            record(self.log, "pass-probe", **line)


def edge_answered(log: Path) -> int:
    """The faults' presses the edge answered (the edge server counts them with the crowd's)."""
    return sum(
        bool(line.get("edge"))
        for line in read_log(log)
        if line["fault"] in ("forged-pass", "minted-pass", "pass-probe")
    )


def warnings(api_log: Path) -> Counter[str]:
    """The functions' warnings of a secret that could not be read: STALE and NONE_HELD lines."""
    text = api_log.read_text(errors="replace") if api_log.exists() else ""
    return Counter({STALE: text.count(STALE), NONE_HELD: text.count(NONE_HELD)})


@dataclass(frozen=True)
class MintedOrders:
    """What MySQL holds of the minted presses' users on the voucher."""

    stored: dict[int, int]  # user -> its stored order's id (tb_voucher_order): a unit bought
    failed: dict[int, str]  # user -> the reason its order failed

    @classmethod
    def read(cls, db: Database, voucher_id: int, users: list[int]) -> MintedOrders:
        def read(cursor: Any) -> MintedOrders:
            cursor.execute("SELECT id, user_id FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
            stored = {int(r["user_id"]): int(r["id"]) for r in cursor.fetchall() if int(r["user_id"]) in users}
            cursor.execute(
                "SELECT user_id, reason FROM tb_voucher_order_rejection WHERE voucher_id = %s", (voucher_id,)
            )
            failed = {int(r["user_id"]): str(r["reason"]) for r in cursor.fetchall() if int(r["user_id"]) in users}
            return cls(stored, failed)

        return db.run(read, read_only=True)


def minted_users(log: Path) -> list[int]:
    return sorted({int(line["user"]) for line in read_log(log) if line["fault"] == "minted-pass"})


def _lines(log: Path, fault: str) -> list[dict[str, Any]]:
    return [line for line in read_log(log) if line["fault"] == fault]


def _after_rotation(log: Path) -> Counter[str]:
    """The key ids of the passes issued after the rotation (the probes' entries)."""
    return Counter(str(line["kid"]) for line in _lines(log, "pass-probe") if "kid" in line)


def _kids(counted: Counter[str]) -> str:
    return ", ".join(f"{kid} {n}" for kid, n in sorted(counted.items())) or "none issued"


def _first_signed(log: Path) -> str:
    """How long after the rotation a pass was first signed with the new key."""
    rotated = [line["at"] for line in _lines(log, "pass-key-rotated")]
    signed = [line["at"] for line in _lines(log, "pass-probe") if line.get("kid") == ROTATED_KID]
    if not rotated or not signed:
        return ""
    return f" (the first with {ROTATED_KID} {min(signed) - rotated[0]:.0f} s after the rotation)"


def _outage_seconds(log: Path) -> float:
    return sum(float(line["seconds"]) for line in _lines(log, "pass-keys-readable-again"))


def pass_faults_table(log: Path, api_log: Path, minted: MintedOrders) -> list[Fault]:
    """The pass faults and what answered each."""
    injected = Counter(line["fault"] for line in read_log(log))
    probes = _lines(log, "pass-probe")
    pressed = [p for p in probes if "status" in p]
    forged = _lines(log, "forged-pass")
    minted_lines = _lines(log, "minted-pass")
    during = [p for p in probes if p["outage"]]
    warned = warnings(api_log)
    return [
        Fault(
            "a pass key rotated mid-sale (one put: a new key active, the old kept)",
            injected["pass-key-rotated"],
            "every key of the ring verifies; the functions sign with the new key only once the publisher has "
            "confirmed the edge holds it (its store's write + the propagation allowance), with the old one meanwhile",
            f"passes issued after it: {_kids(_after_rotation(log))}{_first_signed(log)}; presses with them answered "
            f"{_count(_answer(p) for p in pressed)}; see checks: no valid pass refused NO_PASS",
        ),
        Fault(
            "the pass key ring unreadable in Secrets Manager (a failed refresh)",
            injected["pass-keys-unreadable"],
            "each function keeps its last good ring (stale-if-error: a warning and SecretRefreshFailed, a retry "
            f"after {RETRY_SECONDS} s); the publisher leaves the edge's keys as they are",
            f"{_outage_seconds(log):.0f} s unreadable; {warned[STALE]} warnings 'serving its last good value', "
            f"{warned[NONE_HELD]} 'no good value is held'; entries asked during it: "
            f"{_count(p['entry'] for p in during)}",
        ),
        Fault(
            "a forged pass with each exp (a junk signature)",
            injected["forged-pass"],
            "the edge checks the signature before anything in the pass: NO_PASS there, nothing forwarded",
            f"answered {_count(_answer(f) for f in forged)} ({', '.join(str(f['kind']) for f in forged)}); "
            f"{sum(not f['edge'] for f in forged)} reached the function",
        ),
        Fault(
            "a minted pass (the ring's key, ticket 0...0) for an entrant not admitted",
            injected["minted-pass"],
            "the gate believes a valid pass; the persister re-checks the stored entry against the recorded moves "
            "and fails the order NOT_ADMITTED, its unit back once",
            f"answered {_count(_answer(m) for m in minted_lines)}; orders failed "
            f"{_count(minted.failed.values())}, stored {len(minted.stored)}",
        ),
    ]


def _answer(line: dict[str, Any]) -> str:
    """A recorded press's answer: its status and code, and where it was given."""
    return f"{line['status']} {line['code'] or ''}".strip() + (" at the edge" if line["edge"] else "")


def _count(values: Any) -> str:
    counted = Counter(values)
    return ", ".join(f"{k} {n}" for k, n in sorted(counted.items(), key=str)) or "none"


def check_passes(
    log: Path, api_log: Path, presses: list[Press], entries: Mapping[int, Entry], minted: MintedOrders
) -> list[Check]:
    """The pass faults' checks: no valid pass refused across the rotation; while the ring was
    unreadable, a refresh failed and served the last good ring, none found no good one, no
    entry answered 5xx; every forged pass refused at the edge; no minted pass buying a unit."""
    injected = Counter(line["fault"] for line in read_log(log))
    probes = _lines(log, "pass-probe")
    pressed = [p for p in probes if "status" in p]
    refused = [p for p in presses if p.code == "NO_PASS" and p.user_id in entries]
    probes_refused = [p for p in pressed if p["code"] == "NO_PASS"]
    during = [p for p in probes if p["outage"]]
    failed_entries = [p for p in during if p["entry"] == 0 or p["entry"] >= 500]
    warned = warnings(api_log)
    forged = _lines(log, "forged-pass")
    answered = [f for f in forged if f["status"] == 403 and f["code"] == "NO_PASS" and f["edge"]]
    minted_lines = _lines(log, "minted-pass")
    bought = sorted(minted.stored.items())
    not_admitted = sum(reason == "NOT_ADMITTED" for reason in minted.failed.values())
    return [
        Check(
            "no valid pass refused NO_PASS, a key rotated mid-sale",
            injected["pass-key-rotated"] == 1 and not refused and not probes_refused,
            f"{len(refused)} entrants' presses refused NO_PASS; {len(probes_refused)} of {len(pressed)} presses "
            f"with a pass issued after the rotation ({_kids(_after_rotation(log))})",
        ),
        Check(
            "the ring unreadable: the last good one served, no 5xx",
            injected["pass-keys-unreadable"] == 1
            and warned[STALE] > 0
            and not failed_entries
            and not warned[NONE_HELD],
            f"{_outage_seconds(log):.0f} s unreadable; {len(during) - len(failed_entries)} of {len(during)} entries "
            f"answered during it; {warned[STALE]} refreshes served the last good value, {warned[NONE_HELD]} "
            "had none",
        ),
        Check(
            "every forged pass refused NO_PASS at the edge",
            bool(forged) and len(answered) == len(forged),
            f"{len(answered)} of {len(forged)} forged passes (one per exp) answered 403 NO_PASS at the edge",
        ),
        Check(
            "no minted pass buys a unit",
            bool(minted_lines) and not bought,
            f"{len(minted_lines)} minted presses, {sum(m['status'] == 202 for m in minted_lines)} answered 202; "
            f"{not_admitted} orders failed NOT_ADMITTED, {len(bought)} stored"
            + "".join(f"; order {order} of user {user} stored" for user, order in bought[:3]),
        ),
    ]
