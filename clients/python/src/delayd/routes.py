"""The client's map of the HTTP API: every operation it calls, with the
request fields it may send.

Request bodies are built only through :meth:`Route.body`, which refuses a
field this table does not list, so the table is exactly what the client
sends. The test suite compares it with the server's ``/openapi.json``
(every operation of the document is here, every field here is in the
document's request schema), so the client cannot drift from the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

_PAYLOAD = ("payload", "payload_base64")
_MESSAGE = _PAYLOAD + (
    "id",
    "delay_ms",
    "deliver_at",
    "priority",
    "headers",
    "max_attempts",
    "key",
    "on_conflict",
    "debounce_max_ms",
)
_RATE = ("limit", "period_ms", "burst")
_SCHEDULE_TIMES = ("cron", "every_ms", "tz", "start_at")


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    """Path template; ``{queue}``, ``{id}``, ``{key}`` are percent-encoded path segments."""
    fields: Tuple[str, ...] = ()
    """Top-level body fields the client may send (empty: no body)."""
    nested: Mapping[str, Tuple[str, ...]] = field(default_factory=dict)
    """For an object-valued (or list-of-object) field: its fields."""
    query: Tuple[str, ...] = ()
    idempotent: bool = False
    """Repeating the request has the effect of sending it once, so it is
    retried after a lost answer."""

    def body(self, **values: Any) -> Optional[Dict[str, Any]]:
        """The JSON body from ``values``, leaving out ``None``s."""
        if not self.fields:
            return None
        unknown = set(values) - set(self.fields)
        if unknown:
            raise AssertionError(f"{self.method} {self.path}: fields {sorted(unknown)} not in the route table")
        return {k: v for k, v in values.items() if v is not None}

    def check_nested(self, name: str, obj: Mapping[str, Any]) -> Dict[str, Any]:
        allowed = self.nested[name]
        unknown = set(obj) - set(allowed)
        if unknown:
            raise AssertionError(f"{self.path}: {name}.{sorted(unknown)} not in the route table")
        return {k: v for k, v in obj.items() if v is not None}


_Q = "/v1/queues/{queue}"
_S = _Q + "/schedules/{id}"

ROUTES: Dict[str, Route] = {
    "healthz": Route("GET", "/healthz", idempotent=True),
    "readyz": Route("GET", "/readyz", idempotent=True),
    "metrics": Route("GET", "/metrics", idempotent=True),
    "openapi": Route("GET", "/openapi.json", idempotent=True),
    "whoami": Route("GET", "/v1/whoami", idempotent=True),
    # Queues
    "list_queues": Route("GET", "/v1/queues", idempotent=True),
    "get_queue": Route("GET", _Q, idempotent=True),
    "put_queue": Route(
        "PUT",
        _Q,
        fields=("lease_ms", "max_attempts", "retry", "push", "flow", "retain_ms"),
        nested={
            "retry": ("initial_ms", "max_ms", "multiplier"),
            "push": ("url", "timeout_ms", "concurrency", "secret", "headers"),
            "flow": ("rate", "key_rate", "concurrency", "key_concurrency", "ordered", "max_deferrals"),
        },
        idempotent=True,
    ),
    "delete_queue": Route("DELETE", _Q, idempotent=True),
    "pause": Route("POST", _Q + "/pause", idempotent=True),
    "resume": Route("POST", _Q + "/resume", idempotent=True),
    "histogram": Route("GET", _Q + "/histogram", query=("from", "to", "buckets"), idempotent=True),
    "get_key": Route("GET", _Q + "/keys/{key}", idempotent=True),
    # Messages
    "enqueue": Route("POST", _Q + "/messages", fields=_MESSAGE),
    "batch": Route("POST", _Q + "/batch", fields=("messages",), nested={"messages": _MESSAGE}),
    "list_messages": Route("GET", _Q + "/messages", query=("state", "limit", "after"), idempotent=True),
    "get_message": Route("GET", _Q + "/messages/{id}", idempotent=True),
    "events": Route("GET", _Q + "/messages/{id}/events", idempotent=True),
    "cancel": Route("DELETE", _Q + "/messages/{id}", idempotent=True),
    "reschedule": Route("PATCH", _Q + "/messages/{id}", fields=("delay_ms", "deliver_at", "priority"), idempotent=True),
    # Consuming
    "lease": Route("POST", _Q + "/leases", fields=("max", "wait_ms", "lease_ms")),
    "ack": Route("POST", _Q + "/messages/{id}/ack", fields=("lease_id",)),
    "ack_many": Route("POST", _Q + "/acks", fields=("acks",), nested={"acks": ("id", "lease_id")}),
    "nack": Route("POST", _Q + "/messages/{id}/nack", fields=("lease_id", "delay_ms", "defer", "error")),
    "extend": Route("POST", _Q + "/messages/{id}/extend", fields=("lease_id", "lease_ms"), idempotent=True),
    # Dead letters
    "list_dead": Route("GET", _Q + "/dead", query=("limit", "after"), idempotent=True),
    "redrive": Route("POST", _Q + "/dead/redrive", fields=("ids",), idempotent=True),
    # Schedules
    "put_schedule": Route(
        "PUT",
        _S,
        fields=_SCHEDULE_TIMES
        + ("end_at", "max_fires", "message", "catchup", "catchup_window_ms", "overlap", "jitter_ms", "paused"),
        nested={"message": _PAYLOAD + ("priority", "headers", "max_attempts", "key")},
        idempotent=True,
    ),
    "list_schedules": Route("GET", _Q + "/schedules", idempotent=True),
    "get_schedule": Route("GET", _S, idempotent=True),
    "delete_schedule": Route("DELETE", _S, idempotent=True),
    "pause_schedule": Route("POST", _S + "/pause", idempotent=True),
    "resume_schedule": Route("POST", _S + "/resume", idempotent=True),
    "trigger_schedule": Route("POST", _S + "/trigger"),
    "preview_schedule": Route("POST", "/v1/schedules/preview", fields=_SCHEDULE_TIMES + ("count",), idempotent=True),
}
