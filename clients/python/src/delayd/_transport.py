"""Sending a :class:`Call`: headers, timeouts, errors and retries, shared
by the sync and asyncio clients (which differ only in the ``send`` and
``sleep`` they pass in).

Retry rules:
- the request never reached the server (connect failure or timeout, pool
  timeout): always retried;
- 503 ``unavailable``: always retried, because the API promises that a
  failed request changes nothing;
- the connection failed after the request was sent (read error or timeout),
  or a proxy answered 502/504: retried only when repeating the call is
  harmless (``Call.retry_safe``: idempotent routes, enqueues with an id).
"""

from __future__ import annotations

import random
import ssl
from dataclasses import dataclass
from typing import Any, Dict, Optional, Union

import httpx

from ._ops import Call
from .errors import DelaydError, TransportError, error_from_body

__version__ = "0.1.0"

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` is the total number of tries (1 = no retries); the pause
    before retry ``n`` is a random fraction of
    ``min(max_backoff, initial_backoff * multiplier**(n-1))`` ("full
    jitter", so many clients do not retry in step)."""

    attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    multiplier: float = 2.0

    def pause(self, retry: int) -> float:
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier ** (retry - 1))
        return random.uniform(cap / 2, cap)


DEFAULT_RETRY = RetryPolicy()
NO_RETRY = RetryPolicy(attempts=1)


TlsVerify = Union[bool, str, ssl.SSLContext]
"""``True`` (the system's CAs), ``False`` (no check: tests only), a CA
bundle's path (a self-signed or private CA), or an ``ssl.SSLContext``."""


def ssl_verify(verify: TlsVerify) -> Union[bool, ssl.SSLContext]:
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    return verify


def default_headers(token: Optional[str]) -> Dict[str, str]:
    headers = {"user-agent": f"delayd-python/{__version__}", "accept": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    return headers


def build_request(client: Union[httpx.Client, httpx.AsyncClient], call: Call[Any], timeout: float) -> httpx.Request:
    extensions = {}
    if call.extra_timeout:
        # The server holds a lease call up to its wait: do not time out first.
        t = timeout + call.extra_timeout
        extensions["timeout"] = httpx.Timeout(timeout, read=t).as_dict()
    request = client.build_request(
        call.route.method,
        call.url_path(),
        json=call.body,
        params=call.query or None,
        extensions=extensions or None,
    )
    return request


def retryable_exception(call: Call[Any], exc: httpx.HTTPError) -> bool:
    if isinstance(exc, _NOT_SENT):
        return True
    return call.retry_safe and isinstance(exc, httpx.TransportError)


def retryable_status(call: Call[Any], status: int) -> bool:
    return status == 503 or (call.retry_safe and status in (502, 504))


def transport_error(exc: httpx.HTTPError) -> TransportError:
    return TransportError(f"{type(exc).__name__}: {exc}")


def check(resp: httpx.Response) -> None:
    """Raises the API error an error response carries."""
    if resp.status_code < 400:
        return
    try:
        body = resp.json()
    except ValueError:
        body = None
    err: DelaydError = error_from_body(body, resp.status_code)
    if body is None:
        err.message = resp.text[:200] or err.message
    raise err
