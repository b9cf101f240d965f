"""Exceptions: one class per error code of the HTTP API.

Every error the server answers is ``{"error": {"code", "message"}}``; the
client raises the class registered for ``code`` (an unknown code, which a
newer server may send, raises the plain :class:`DelaydError`), so callers
can catch ``LeaseMismatch`` rather than compare strings.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type


class DelaydError(Exception):
    """An error answered by the server (or, for :class:`TransportError`, the
    failure to get an answer). ``code`` is the API's snake_case code,
    ``status`` the HTTP status (``None`` when no answer came)."""

    code: str = "error"

    def __init__(self, message: str, *, code: Optional[str] = None, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.status = status

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class TransportError(DelaydError):
    """The server could not be reached or the connection failed mid-request."""

    code = "transport"


class InvalidJson(DelaydError):
    code = "invalid_json"


class InvalidArgument(DelaydError):
    code = "invalid_argument"


class Unauthorized(DelaydError):
    code = "unauthorized"


class Forbidden(DelaydError):
    """The token is valid but lacks the scope (``VERB:QUEUE_GLOB``) the call
    needs; the message names the verb and the queue."""

    code = "forbidden"


class NotFound(DelaydError):
    """Unknown route (``not_found``); the base of the specific not-found codes."""

    code = "not_found"


class QueueNotFound(NotFound):
    code = "queue_not_found"


class MessageNotFound(NotFound):
    code = "message_not_found"


class ScheduleNotFound(NotFound):
    code = "schedule_not_found"


class MethodNotAllowed(DelaydError):
    code = "method_not_allowed"


class LeaseMismatch(DelaydError):
    """The lease expired or was superseded: another worker may hold it now."""

    code = "lease_mismatch"


class InvalidState(DelaydError):
    code = "invalid_state"


class PayloadTooLarge(DelaydError):
    code = "payload_too_large"


class InsufficientStorage(DelaydError):
    """The embedded store is below its disk reserve: enqueues are refused."""

    code = "insufficient_storage"


class Unavailable(DelaydError):
    """Store failure or shutdown; the request changed nothing."""

    code = "unavailable"


ERRORS: Dict[str, Type[DelaydError]] = {
    cls.code: cls
    for cls in (
        InvalidJson,
        InvalidArgument,
        Unauthorized,
        Forbidden,
        NotFound,
        QueueNotFound,
        MessageNotFound,
        ScheduleNotFound,
        MethodNotAllowed,
        LeaseMismatch,
        InvalidState,
        PayloadTooLarge,
        InsufficientStorage,
        Unavailable,
    )
}


def error_from_body(body: Any, status: Optional[int]) -> DelaydError:
    """The exception for an API error object ``{"error": {...}}`` (a whole
    response, or one item of a batch)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        return DelaydError(f"HTTP {status} without an error body", code="http_error", status=status)
    code = str(detail.get("code", "error"))
    message = str(detail.get("message", ""))
    return ERRORS.get(code, DelaydError)(message, code=code, status=status)
