"""The client's no: a ``Refusal`` (the contract's status, code and message), and the
exception that carries one when the no cuts a request short."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    """A no as the client is told it (docs/contract.md), in the ``Result`` shape. Returned
    where it is the answer (the gate's: most presses of a sale end here, so none is
    raised); carried by a ``SeckillError`` where it is raised from deep in a request."""

    status: int
    code: str
    message: str


class SeckillError(Exception):
    """A request cut short by a refusal, ``self.refusal``."""

    status = 400
    code = "BAD_REQUEST"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.refusal = Refusal(self.status, code or self.code, message)


class BadRequest(SeckillError):
    status = 400
    code = "BAD_REQUEST"


class Unauthorized(SeckillError):
    status = 401
    code = "UNAUTHORIZED"


class Forbidden(SeckillError):
    status = 403
    code = "FORBIDDEN"


class NotFound(SeckillError):
    status = 404


class TryAgain(SeckillError):
    status = 503
    code = "TRY_AGAIN"
