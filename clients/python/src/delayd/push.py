"""Receiving push deliveries: checking ``delayd-signature``.

For a queue with ``push.secret``, delayd signs each push request with
``delayd-signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>``
where ``timestamp`` is the ``delayd-timestamp`` header (Unix seconds). The
check here is framework-agnostic: give it the request's headers (any
mapping; names are matched case-insensitively) and its raw body bytes, as
every WSGI/ASGI framework exposes them. Answer 2xx to ack; anything else
makes delayd retry with the queue's backoff.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from typing import Dict, Iterable, Mapping, Optional, Tuple, Union

HeaderText = Union[str, bytes]
HeaderSource = Union[Mapping[str, HeaderText], Mapping[bytes, HeaderText], Iterable[Tuple[HeaderText, HeaderText]]]
"""A request's headers: a mapping or ``(name, value)`` pairs, ``str`` or
``bytes`` (bytes are decoded as Latin-1, as HTTP/1.1 header bytes are)."""

DEFAULT_TOLERANCE = 300.0
"""Seconds a signed request stays acceptable (limits replays of a captured
request; delayd signs each attempt anew)."""


class SignatureError(Exception):
    """The request is not a valid, fresh delivery signed with the secret."""


@dataclass(frozen=True)
class PushDelivery:
    """A verified push request."""

    id: str
    queue: str
    attempt: int
    deliver_at: int
    timestamp: int
    headers: Dict[str, str]
    """Every header, names lowercased (the message's own headers included)."""
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


def sign(secret: Union[str, bytes], timestamp: int, body: bytes) -> str:
    """The ``delayd-signature`` value delayd sends (useful in tests)."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    mac = hmac.new(key, str(timestamp).encode("ascii") + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


def _lower(headers: HeaderSource) -> Dict[str, str]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: Dict[str, str] = {}
    for name, value in items:
        name = name.decode("latin-1") if isinstance(name, bytes) else name
        value = value.decode("latin-1") if isinstance(value, bytes) else value
        out[name.lower()] = value
    return out


def verify(
    secret: Union[str, bytes],
    headers: HeaderSource,
    body: bytes,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: Optional[float] = None,
) -> PushDelivery:
    """Checks the signature (constant-time) and the timestamp (within
    ``tolerance`` seconds of ``now``, default the current time); returns
    the delivery or raises :class:`SignatureError`. ``headers`` may be a
    mapping or ``(name, value)`` pairs (ASGI's byte pairs work too)."""
    h = _lower(headers)
    signature = h.get("delayd-signature")
    raw_ts = h.get("delayd-timestamp")
    if not signature or not raw_ts:
        raise SignatureError("missing delayd-signature or delayd-timestamp")
    try:
        timestamp = int(raw_ts)
    except ValueError:
        raise SignatureError("delayd-timestamp is not an integer") from None
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance:
        raise SignatureError("delayd-timestamp is outside the tolerance")
    expected = sign(secret, timestamp, body)
    # A header may carry several signatures (e.g. during a secret rotation).
    candidates = [s.strip() for s in signature.split(",")]
    if not any(hmac.compare_digest(expected.encode(), c.encode()) for c in candidates):
        raise SignatureError("signature mismatch")
    try:
        return PushDelivery(
            id=h["delayd-id"],
            queue=h["delayd-queue"],
            attempt=int(h.get("delayd-attempt", "1")),
            deliver_at=int(h.get("delayd-deliver-at", "0")),
            timestamp=timestamp,
            headers=h,
            body=body,
        )
    except (KeyError, ValueError) as err:
        raise SignatureError(f"malformed delivery headers: {err}") from None


def wsgi_headers(environ: Mapping[str, object]) -> Dict[str, str]:
    """The request headers of a WSGI ``environ`` (``HTTP_DELAYD_ID`` ->
    ``delayd-id``)."""
    out = {}
    for key, value in environ.items():
        if key.startswith("HTTP_") and isinstance(value, str):
            out[key[5:].replace("_", "-").lower()] = value
    return out
