"""The state of a sale the edge reads, and how a change of it leaves for the edge.

Once a change of a sale's state has committed (creation, stop, each batch of stored
orders, a unit given back by a route or an expiry), ``StateQueue.notice`` runs
(every call site: docs/edge.md, "Every trigger"). ``lua/edge_claim.lua``
elects one caller per change, whatever the number of containers that notice it, and
hands it a new version; only that caller sends the state to EdgeStateQueue. Nothing
here ever raises into its caller: the edge is an optimisation, never the authority,
and the reconciler's sweep claims every sale's state anew and sends them in one
message, which the publisher compares with the store (docs/edge.md).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import Enum
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from seckill.infra import keys

if TYPE_CHECKING:
    # Only a type here: the publisher, outside the VPC, imports this module without Redis.
    from seckill.infra.lua_scripts import Scripts

log = logging.getLogger(__name__)

_VALUE_KEYS = {"v", "begin", "end", "soldOut", "stopped"}
_MESSAGE_KEYS = {*_VALUE_KEYS, "voucherId"}
_DRAW_KEYS = {"draw", "close", "decided", "moves"}
# A version is a positive integer a JavaScript number holds exactly (the edge's parser).
_MAX_SAFE = 2**53 - 1
# States per sweep message: about 110 bytes each (a draw's up to about 800), inside
# SQS's 256 KiB.
SWEEP_MESSAGE_STATES = 300
# How long after its sale ended (or was stopped) a voucher's state is kept, in Redis and
# in the store: as long as reconciliation looks after the sale and its sweep keeps the
# state right (seckill.repair.restore.ENDED_WITHIN); then both are deleted.
KEPT_AFTER_END = timedelta(days=1)
# A draw's entry holds the move in effect and the later ones, at most this many.
MOVES_MAX = 16
_CURSOR = re.compile(r"[0-9a-f]{17}")

# A cursor move: the epoch ms it takes effect, and the cursor (17 lowercase hex).
Move = tuple[int, str]


class MalformedState(ValueError):
    """Text that is not an edge state: a message dead-lettered rather than written."""


def _integer(data: dict[str, Any], name: str, low: int) -> int:
    value = data[name]
    # bool is an int in Python; the edge would read true as no number at all.
    if type(value) is not int or not low <= value <= _MAX_SAFE:
        raise ValueError(f"{name} must be an integer from {low} to 2^53-1")
    return value


def _flag(data: dict[str, Any], name: str) -> bool:
    value = data[name]
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false")
    return value


def _moves(data: dict[str, Any]) -> tuple[Move, ...]:
    """A draw's moves: "draw" true, and up to MOVES_MAX [at, cursor] pairs, ascending by at,
    the cursor never moving back; () for a race (none of the draw's fields)."""
    if not _DRAW_KEYS & set(data):
        return ()
    moves = data["moves"]
    if data["draw"] is not True or not isinstance(moves, list) or len(moves) > MOVES_MAX:
        raise ValueError(f'a draw has "draw": true and at most {MOVES_MAX} moves')
    parsed: list[Move] = []
    for move in moves:
        if not (isinstance(move, list) and len(move) == 2 and isinstance(move[1], str)):
            raise ValueError("a move is [at, cursor]")
        at = _integer({"at": move[0]}, "at", 0)
        if not _CURSOR.fullmatch(move[1]) or (parsed and (at <= parsed[-1][0] or move[1] < parsed[-1][1])):
            raise ValueError("moves must be 17-hex cursors, ascending by at, never moving back")
        parsed.append((at, move[1]))
    return tuple(parsed)


@dataclass(frozen=True)
class EdgeState:
    """One voucher's entry in the KeyValueStore: the sale window as the gate holds it
    (epoch ms; 0/0 once stopped), whether it is sold out or stopped, and its version; for
    a draw also its close, ``decided`` (every move taking effect before it is in ``moves``,
    so the edge may refuse by them; epoch ms, 0 when unknown) and its cursor's moves (the
    one in effect when claimed, then the later ones)."""

    voucher_id: int
    v: int
    begin: int
    end: int
    sold_out: bool
    stopped: bool
    draw: bool = False
    close: int = 0
    decided: int = 0
    moves: tuple[Move, ...] = ()

    @property
    def key(self) -> str:
        return str(self.voucher_id)

    def value(self) -> str:
        """The KVS value, compact JSON (a value holds at most 1 KB)."""
        value: dict[str, Any] = {
            "v": self.v,
            "begin": self.begin,
            "end": self.end,
            "soldOut": self.sold_out,
            "stopped": self.stopped,
        }
        if self.draw:
            value |= {
                "draw": True,
                "close": self.close,
                "decided": self.decided,
                "moves": [list(move) for move in self.moves],
            }
        return json.dumps(value, separators=(",", ":"))

    def message(self) -> str:
        """EdgeStateQueue's body: the value plus the voucher id."""
        return json.dumps(self.message_fields(), separators=(",", ":"))

    def message_fields(self) -> dict[str, Any]:
        """The message's fields, as JSON types."""
        return {**json.loads(self.value()), "voucherId": self.voucher_id}

    def same_sale(self, other: EdgeState) -> bool:
        """The same answer at the edge: every field but the version equal."""
        return replace(self, v=other.v) == other

    @classmethod
    def from_value(cls, voucher_id: int, text: str) -> EdgeState:
        """A stored KVS value; MalformedState unless it has exactly the value's fields, each well typed."""
        return cls.from_fields(_json(text), _VALUE_KEYS, voucher_id)

    @classmethod
    def from_message(cls, text: str) -> EdgeState:
        """An EdgeStateQueue body of one change; MalformedState unless it is one."""
        return cls.from_fields(_json(text), _MESSAGE_KEYS, None)

    @classmethod
    def from_fields(cls, data: Any, fields: set[str], voucher_id: int | None) -> EdgeState:
        try:
            if not isinstance(data, dict) or set(data) not in (fields, fields | _DRAW_KEYS):
                raise ValueError(f"expected exactly the fields {sorted(fields)} (a draw's with {sorted(_DRAW_KEYS)})")
            draw = "draw" in data
            return cls(
                voucher_id if voucher_id is not None else _integer(data, "voucherId", 1),
                _integer(data, "v", 1),
                _integer(data, "begin", 0),
                _integer(data, "end", 0),
                _flag(data, "soldOut"),
                _flag(data, "stopped"),
                draw,
                _integer(data, "close", 0) if draw else 0,
                _integer(data, "decided", 0) if draw else 0,
                _moves(data),
            )
        except ValueError as exc:
            raise MalformedState(f"not an edge state: {exc}") from exc


@dataclass(frozen=True)
class Sweep:
    """The reconciler's sweep, one message: the state of every sale it looks after,
    each claimed anew under a version above all those handed out before it. The
    publisher writes each where the store holds an older version of another state
    (a lost message, or one Redis forgot it had sent), and nothing else."""

    states: tuple[EdgeState, ...]

    def message(self) -> str:
        return json.dumps({"sweep": [s.message_fields() for s in self.states]}, separators=(",", ":"))


def parse_message(text: str) -> EdgeState | Sweep:
    """An EdgeStateQueue body: one change, or a sweep; MalformedState unless either."""
    data = _json(text)
    if isinstance(data, dict) and set(data) == {"sweep"}:
        if not isinstance(data["sweep"], list):
            raise MalformedState("not a sweep: its states are not a list")
        return Sweep(tuple(EdgeState.from_fields(s, _MESSAGE_KEYS, None) for s in data["sweep"]))
    return EdgeState.from_fields(data, _MESSAGE_KEYS, None)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise MalformedState(f"not JSON: {exc}") from exc


def claim(scripts: Scripts, voucher_id: int, *, again: bool = False) -> EdgeState | None:
    """The voucher's state if it changed since the last claim (this call now owns its
    publication), else None; None too for a voucher the gate does not sell. ``again``:
    the state even when unchanged, under a new version all the same (the sweep's)."""
    claimed = scripts.edge_claim(
        keys=[keys.stock(voucher_id), keys.window(voucher_id), keys.edge(voucher_id), keys.cursor(voucher_id)],
        args=[voucher_id, "1" if again else "", int(KEPT_AFTER_END.total_seconds() * 1000)],
    )
    return None if claimed is None else EdgeState.from_message(claimed)


def unclaim(scripts: Scripts, state: EdgeState) -> bool:
    """Give up a claim whose message was not sent, unless claimed again since."""
    return bool(scripts.edge_unclaim(keys=[keys.edge(state.voucher_id)], args=[state.v]))


class Noticed(Enum):
    OFF = "off"  # the stack has no edge
    UNCHANGED = "unchanged"  # nothing new, or another caller publishes it
    SENT = "sent"
    FAILED = "failed"  # logged and counted; the claim given back where Redis allowed


class StateQueue:
    """Sends claimed states to EdgeStateQueue. Without a queue URL it does nothing at all,
    not even ask Redis. ``metrics``: where a failure is counted (``EdgeStateNotSent``)."""

    def __init__(self, sqs: Any, queue_url: str, metrics: Metrics | None = None) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.metrics = metrics

    def notice(self, scripts: Scripts, voucher_id: int) -> Noticed:
        """After a change of the voucher's sale committed: its new state to the queue, if
        this call is the one elected to send it. Never raises."""
        if not self.queue_url:
            return Noticed.OFF
        try:
            state = claim(scripts, voucher_id)
        except Exception:  # the cluster client raises its own errors besides RedisError
            return self._failed(voucher_id, "could not be claimed")
        if state is None:
            return Noticed.UNCHANGED
        try:
            self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=state.message())
        except Exception:
            # The state stays claimed unless given back: then no later notice would send
            # it, and the edge would keep the old one until the sweep. A message that was
            # in fact stored costs only a duplicate: the publisher skips versions it has.
            try:
                unclaim(scripts, state)
            except Exception:
                log.warning("the edge state of voucher %s stays claimed", voucher_id, exc_info=True)
            return self._failed(voucher_id, "could not be sent")
        return Noticed.SENT

    def notice_each(self, scripts: Scripts, voucher_ids: Iterable[int]) -> int:
        """``notice`` for each voucher; how many states this call sent."""
        return sum(self.notice(scripts, v) is Noticed.SENT for v in sorted(set(voucher_ids)))

    def sweep(self, scripts: Scripts, voucher_ids: Iterable[int]) -> int:
        """Every voucher's state claimed anew, changed or not, and sent in one message
        (the reconciler's pass), for the publisher to compare with the store: repairs a
        message lost after its claim, one the publisher dead-lettered, a claim whose
        give-back failed, and a store entry newer than what Redis remembers having
        claimed (Redis lost its last writes). Returns how many vouchers failed; never raises."""
        if not self.queue_url:
            return 0
        states: list[EdgeState] = []
        failed = 0
        for voucher_id in sorted(set(voucher_ids)):
            try:
                state = claim(scripts, voucher_id, again=True)
            except Exception:
                self._failed(voucher_id, "could not be swept")
                failed += 1
                continue
            if state is not None:
                states.append(state)
        for start in range(0, len(states), SWEEP_MESSAGE_STATES):
            chunk = tuple(states[start : start + SWEEP_MESSAGE_STATES])
            try:
                self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=Sweep(chunk).message())
            except Exception:
                self._failed(chunk[0].voucher_id, f"could not be swept (nor {len(chunk) - 1} after it)")
                failed += len(chunk)
        return failed

    def _failed(self, voucher_id: int, what: str) -> Noticed:
        log.warning("the edge state of voucher %s %s", voucher_id, what, exc_info=True)
        if self.metrics is not None:
            self.metrics.add_metric(name="EdgeStateNotSent", unit=MetricUnit.Count, value=1)
        return Noticed.FAILED


# The stack without an edge: every notice is a no-op.
NO_EDGE = StateQueue(None, "")
