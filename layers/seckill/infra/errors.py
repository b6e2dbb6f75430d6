"""Domain errors. Each carries the contract's error code and HTTP status."""

from __future__ import annotations


class SeckillError(Exception):
    """A refusal the client is told about, in the ``Result`` shape."""

    status = 400
    code = "BAD_REQUEST"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status


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


class Conflict(SeckillError):
    status = 409


class TryAgain(SeckillError):
    status = 503
    code = "TRY_AGAIN"
