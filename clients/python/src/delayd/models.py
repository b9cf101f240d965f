"""Wire types: the objects the HTTP API answers with, as dataclasses.

Payloads are held as ``bytes`` whichever key carried them (``payload`` for
UTF-8 text, ``payload_base64`` otherwise); ``.text`` and ``.json()`` decode
them. Fields a newer server adds are ignored, so an older client keeps
working against it.
"""

from __future__ import annotations

import base64
import json as _json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Optional, Protocol, Tuple, Union, runtime_checkable

PayloadLike = Union[str, bytes, bytearray, memoryview]
"""What an enqueue accepts: ``str`` is sent as ``payload`` (UTF-8),
bytes as ``payload_base64``."""


MessageState = Literal["scheduled", "ready", "leased", "dead", "acked", "cancelled"]
"""A message's ``state``: ``scheduled``, ``ready``, ``leased`` or ``dead``
while it lives; ``acked`` or ``cancelled`` only for a message that ended and
that its queue retains (``retain_ms``). :attr:`Message.state` is a plain
``str``, so a state a newer server adds still reads."""

ENDED_STATES: Tuple[str, ...] = ("acked", "cancelled")
"""The states of a retained message (ended, kept without its payload)."""

OnConflict = Literal["keep", "replace", "debounce"]
"""What an enqueue does when its ``id`` names a message that lives in the
queue: ``keep`` (the default) changes nothing; ``replace`` gives a waiting
(scheduled or ready) message the request's payload, headers, priority, key,
max_attempts and due time; ``debounce`` does the same with the due time
capped at the message's ``enqueued_at`` plus ``debounce_max``. A leased
message is not changed: the request becomes its successor, applied when the
lease ends. A dead message is :class:`InvalidState` for both."""


def payload_fields(payload: PayloadLike) -> Dict[str, str]:
    """The one payload key of a request body."""
    if isinstance(payload, str):
        return {"payload": payload}
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return {"payload_base64": base64.b64encode(bytes(payload)).decode("ascii")}
    raise TypeError(f"payload must be str or bytes, not {type(payload).__name__}")


def payload_bytes(obj: Mapping[str, Any]) -> bytes:
    """The payload of a response object, from whichever key carries it."""
    if "payload" in obj and obj["payload"] is not None:
        return str(obj["payload"]).encode("utf-8")
    encoded = obj.get("payload_base64")
    if encoded is None:
        return b""
    return base64.b64decode(encoded)


class _HasPayload:
    payload: bytes

    @property
    def text(self) -> str:
        """The payload as UTF-8 text (raises ``UnicodeDecodeError`` when it is not)."""
        return self.payload.decode("utf-8")

    def json(self) -> Any:
        """The payload parsed as JSON."""
        return _json.loads(self.payload)


def _opt_int(obj: Mapping[str, Any], key: str) -> Optional[int]:
    value = obj.get(key)
    return None if value is None else int(value)


def _opt_str(obj: Mapping[str, Any], key: str) -> Optional[str]:
    value = obj.get(key)
    return None if value is None else str(value)


@dataclass(frozen=True)
class EnqueueResult:
    """Answer to an enqueue: ``created`` is False when a live message with
    this id already existed (with ``on_conflict`` ``keep``, nothing
    changed)."""

    id: str
    seq: int
    deliver_at: int
    created: bool
    replaced: bool = False
    """A ``replace`` or ``debounce`` changed the existing message (or, with
    :attr:`after_lease`, became its successor); ``seq`` is the message's,
    ``deliver_at`` its new due time (the successor's, after a lease)."""
    after_lease: bool = False
    """The message was leased: it is not changed now, the request became
    its successor, applied when the lease ends (after an ack: a new message
    with this id; after a retry: its content and the later due time; after
    its death: in its place). A cancel drops it."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "EnqueueResult":
        return cls(
            str(obj["id"]),
            int(obj["seq"]),
            int(obj["deliver_at"]),
            bool(obj["created"]),
            replaced=bool(obj.get("replaced", False)),
            after_lease=bool(obj.get("after_lease", False)),
        )


@dataclass(frozen=True)
class Message(_HasPayload):
    """The message object (get, reschedule, dead list, listing)."""

    id: str
    seq: int
    queue: str
    state: str
    """One of :data:`MessageState`: a live state, or ``acked`` /
    ``cancelled`` for a retained message."""
    deliver_at: int
    attempts: int
    priority: int
    headers: Dict[str, str]
    payload: bytes
    enqueued_at: int
    lease_until: Optional[int] = None
    died_at: Optional[int] = None
    max_attempts: Optional[int] = None
    key: Optional[str] = None
    """The message's flow key (``None`` when it has none)."""
    deferrals: int = 0
    """Deferrals in a row so far."""
    last_error: Optional[str] = None
    """The last failure recorded (a nack's ``error``, what a failed push
    answered), or ``None``."""
    ended_at: Optional[int] = None
    """When a retained message ended (epoch ms); ``None`` while it lives."""

    @property
    def ended(self) -> bool:
        """Whether the message ended (acked or cancelled) and is only
        retained: its payload is not kept (``b""``), and it is never
        delivered again."""
        return self.state in ENDED_STATES

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Message":
        return cls(
            id=str(obj["id"]),
            seq=int(obj["seq"]),
            queue=str(obj["queue"]),
            state=str(obj["state"]),
            deliver_at=int(obj["deliver_at"]),
            attempts=int(obj["attempts"]),
            priority=int(obj["priority"]),
            headers=dict(obj.get("headers") or {}),
            payload=payload_bytes(obj),
            enqueued_at=int(obj["enqueued_at"]),
            lease_until=_opt_int(obj, "lease_until"),
            died_at=_opt_int(obj, "died_at"),
            max_attempts=_opt_int(obj, "max_attempts"),
            key=_opt_str(obj, "key"),
            deferrals=int(obj.get("deferrals") or 0),
            last_error=_opt_str(obj, "last_error"),
            ended_at=_opt_int(obj, "ended_at"),
        )


@dataclass(frozen=True)
class LeasedMessage(_HasPayload):
    """One message of a lease answer; ``lease_id`` is what ack, nack and
    extend need."""

    id: str
    seq: int
    lease_id: str
    lease_until: int
    attempt: int
    deliver_at: int
    priority: int
    headers: Dict[str, str]
    payload: bytes
    key: Optional[str] = None
    """The message's flow key (``None`` when it has none)."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "LeasedMessage":
        return cls(
            id=str(obj["id"]),
            seq=int(obj["seq"]),
            lease_id=str(obj["lease_id"]),
            lease_until=int(obj["lease_until"]),
            attempt=int(obj["attempt"]),
            deliver_at=int(obj["deliver_at"]),
            priority=int(obj["priority"]),
            headers=dict(obj.get("headers") or {}),
            payload=payload_bytes(obj),
            key=_opt_str(obj, "key"),
        )


@dataclass(frozen=True)
class Retry:
    """A queue's retry backoff: ``min(max_ms, initial_ms * multiplier^(attempt-1))``."""

    initial_ms: int = 1000
    max_ms: int = 3_600_000
    multiplier: float = 2.0

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Retry":
        return cls(int(obj["initial_ms"]), int(obj["max_ms"]), float(obj["multiplier"]))


@dataclass(frozen=True)
class Push:
    """A queue's push target as the server shows it (secrets are never
    returned: ``secret_set`` and ``headers_set`` say what is configured)."""

    url: str
    timeout_ms: int
    concurrency: int
    secret_set: bool
    headers_set: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Push":
        return cls(
            url=str(obj["url"]),
            timeout_ms=int(obj["timeout_ms"]),
            concurrency=int(obj["concurrency"]),
            secret_set=bool(obj.get("secret_set", False)),
            headers_set=list(obj.get("headers_set") or []),
        )


@dataclass(frozen=True)
class Rate:
    """A token bucket: ``limit`` deliveries per ``period_ms``, up to
    ``burst`` at once (the server's default burst is
    ``max(2, ceil(limit / period_ms) + 1)``). Over any span of
    ``d`` ms at most ``burst + floor(d * limit / period_ms)`` deliveries
    start."""

    limit: int
    period_ms: int = 1000
    burst: Optional[int] = None

    def to_json(self) -> Dict[str, Any]:
        body: Dict[str, Any] = {"limit": self.limit, "period_ms": self.period_ms}
        if self.burst is not None:
            body["burst"] = self.burst
        return body

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Rate":
        return cls(int(obj["limit"]), int(obj["period_ms"]), _opt_int(obj, "burst"))


def _opt_rate(obj: Mapping[str, Any], key: str) -> Optional[Rate]:
    value = obj.get(key)
    return None if value is None else Rate.from_json(value)


@dataclass(frozen=True)
class Flow:
    """A queue's flow control (docs/flow.md): ``rate``/``key_rate`` token
    buckets for the queue and for each key, ``concurrency``/
    ``key_concurrency`` messages leased at once, ``ordered`` keys (one at a
    time, a failed message holds its key) and ``max_deferrals`` in a row
    before a message is dead. ``None`` limits are not set. A queue ``put``
    replaces the whole ``flow``; the server answers with the defaults
    filled in."""

    rate: Optional[Rate] = None
    key_rate: Optional[Rate] = None
    concurrency: Optional[int] = None
    key_concurrency: Optional[int] = None
    ordered: bool = False
    max_deferrals: int = 100

    def to_json(self) -> Dict[str, Any]:
        body: Dict[str, Any] = {
            "rate": self.rate.to_json() if self.rate else None,
            "key_rate": self.key_rate.to_json() if self.key_rate else None,
            "concurrency": self.concurrency,
            "key_concurrency": self.key_concurrency,
            "ordered": self.ordered,
            "max_deferrals": self.max_deferrals,
        }
        return {k: v for k, v in body.items() if v is not None}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Flow":
        return cls(
            rate=_opt_rate(obj, "rate"),
            key_rate=_opt_rate(obj, "key_rate"),
            concurrency=_opt_int(obj, "concurrency"),
            key_concurrency=_opt_int(obj, "key_concurrency"),
            ordered=bool(obj.get("ordered", False)),
            max_deferrals=int(obj.get("max_deferrals", 100)),
        )


@dataclass(frozen=True)
class QueueConfig:
    lease_ms: int
    max_attempts: int
    retry: Retry
    push: Optional[Push] = None
    flow: Optional[Flow] = None
    """``None``: no flow control (servers before it never send one)."""
    retain_ms: int = 0
    """How long a message that ended (acked or cancelled) is kept without
    its payload; 0: not kept (servers before retention never send it)."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "QueueConfig":
        push = obj.get("push")
        flow = obj.get("flow")
        return cls(
            lease_ms=int(obj["lease_ms"]),
            max_attempts=int(obj["max_attempts"]),
            retry=Retry.from_json(obj["retry"]),
            push=Push.from_json(push) if push else None,
            flow=Flow.from_json(flow) if flow is not None else None,
            retain_ms=int(obj.get("retain_ms") or 0),
        )


@dataclass(frozen=True)
class QueueStats:
    scheduled: int
    ready: int
    leased: int
    dead: int
    flow_keys: Optional[int] = None
    """Flow keys whose state the server keeps now (``None``: not reported)."""
    cooling_keys: Optional[int] = None
    """Of those, the keys cooling down after a deferral."""

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "QueueStats":
        return cls(
            int(obj["scheduled"]),
            int(obj["ready"]),
            int(obj["leased"]),
            int(obj["dead"]),
            flow_keys=_opt_int(obj, "flow_keys"),
            cooling_keys=_opt_int(obj, "cooling_keys"),
        )


@dataclass(frozen=True)
class KeyInfo:
    """A flow key of a queue: its live messages by state, and until when it
    cools down after a deferral (``None`` when it does not). A key with no
    live message answers zeros."""

    key: str
    scheduled: int
    ready: int
    leased: int
    dead: int
    cooling_until: Optional[int] = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "KeyInfo":
        return cls(
            key=str(obj["key"]),
            scheduled=int(obj["scheduled"]),
            ready=int(obj["ready"]),
            leased=int(obj["leased"]),
            dead=int(obj["dead"]),
            cooling_until=_opt_int(obj, "cooling_until"),
        )


EventType = Literal[
    "enqueued",
    "replaced",
    "rescheduled",
    "leased",
    "acked",
    "nacked",
    "deferred",
    "expired",
    "push_failed",
    "dead",
    "redriven",
    "cancelled",
]
"""An event's ``type``. :attr:`Event.type` is a plain ``str``, so a type a
newer server adds still reads (with its fields in :attr:`Event.fields`)."""

_EVENT_OWN = ("at", "type", "attempt")


@dataclass(frozen=True)
class Event:
    """One transition of a message (its history: ``Queue.events``).

    ``at``: when (epoch ms); ``type``: one of :data:`EventType`;
    ``attempt``: the message's attempt number after the event. The other
    attributes are the type's fields, ``None`` for a type without them:
    ``replaced`` has ``after_lease``; ``leased`` ``lease_until`` and ``via``
    (``http``, ``beanstalk`` or ``push``); ``nacked`` ``delay_ms`` and
    ``error`` (each ``None`` when the nack gave none); ``deferred``
    ``until`` and ``reason`` (``nack``, ``push_429`` or ``push_503``);
    ``push_failed`` ``status`` (``None`` for a transport error), ``error``
    and ``duration_ms``; ``dead`` ``reason`` (``max_attempts``,
    ``max_deferrals`` or ``buried``). ``fields`` holds every field of the
    event but ``at``, ``type`` and ``attempt``, as sent (also those of a
    type or field this client does not know)."""

    at: int
    type: str
    attempt: int
    after_lease: Optional[bool] = None
    lease_until: Optional[int] = None
    via: Optional[str] = None
    delay_ms: Optional[int] = None
    error: Optional[str] = None
    until: Optional[int] = None
    reason: Optional[str] = None
    status: Optional[int] = None
    duration_ms: Optional[int] = None
    fields: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Event":
        after_lease = obj.get("after_lease")
        return cls(
            at=int(obj["at"]),
            type=str(obj["type"]),
            attempt=int(obj["attempt"]),
            after_lease=None if after_lease is None else bool(after_lease),
            lease_until=_opt_int(obj, "lease_until"),
            via=_opt_str(obj, "via"),
            delay_ms=_opt_int(obj, "delay_ms"),
            error=_opt_str(obj, "error"),
            until=_opt_int(obj, "until"),
            reason=_opt_str(obj, "reason"),
            status=_opt_int(obj, "status"),
            duration_ms=_opt_int(obj, "duration_ms"),
            fields={k: v for k, v in obj.items() if k not in _EVENT_OWN},
        )


@dataclass(frozen=True)
class History:
    """A message's history: its last 32 events, oldest first, and how many
    older ones were ``dropped``."""

    events: List[Event]
    dropped: int = 0

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "History":
        events = [Event.from_json(e) for e in obj["events"]]
        return cls(events, int(obj.get("dropped") or 0))


@dataclass(frozen=True)
class QueueInfo:
    """The queue object: ``{name, config, paused, stats}``."""

    name: str
    config: QueueConfig
    paused: bool
    stats: QueueStats
    paused_until: Optional[int] = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "QueueInfo":
        return cls(
            name=str(obj["name"]),
            config=QueueConfig.from_json(obj["config"]),
            paused=bool(obj["paused"]),
            stats=QueueStats.from_json(obj["stats"]),
            paused_until=_opt_int(obj, "paused_until"),
        )


@dataclass(frozen=True)
class AckResult:
    """One item of a batch ack: ``acked`` or the item's own ``error``."""

    id: str
    acked: bool
    error: Optional[Exception] = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "AckResult":
        from .errors import error_from_body

        if "error" in obj:
            return cls(str(obj["id"]), False, error_from_body(obj, None))
        return cls(str(obj["id"]), bool(obj.get("acked", True)))


@dataclass(frozen=True)
class Histogram:
    """Scheduled messages counted by due time; bucket ``i`` covers
    ``[start + i * bucket_ms, start + (i + 1) * bucket_ms)``."""

    start: int
    end: int
    bucket_ms: int
    counts: List[int]
    truncated: bool

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Histogram":
        return cls(
            start=int(obj["from"]),
            end=int(obj["to"]),
            bucket_ms=int(obj["bucket_ms"]),
            counts=[int(c) for c in obj["counts"]],
            truncated=bool(obj["truncated"]),
        )


@dataclass(frozen=True)
class ScheduleMessage(_HasPayload):
    """What each fire of a schedule enqueues."""

    payload: bytes
    priority: Optional[int] = None
    headers: Dict[str, str] = field(default_factory=dict)
    max_attempts: Optional[int] = None
    key: Optional[str] = None

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "ScheduleMessage":
        return cls(
            payload=payload_bytes(obj),
            priority=_opt_int(obj, "priority"),
            headers=dict(obj.get("headers") or {}),
            max_attempts=_opt_int(obj, "max_attempts"),
            key=_opt_str(obj, "key"),
        )


@dataclass(frozen=True)
class Schedule:
    """A recurring schedule: its definition (defaults filled in) and its
    progress (``fires`` so far, ``next_fire_at``, ``None`` once finished)."""

    id: str
    queue: str
    revision: int
    message: ScheduleMessage
    cron: Optional[str] = None
    every_ms: Optional[int] = None
    tz: Optional[str] = None
    start_at: Optional[int] = None
    end_at: Optional[int] = None
    max_fires: Optional[int] = None
    catchup: str = "latest"
    catchup_window_ms: int = 3_600_000
    overlap: str = "allow"
    jitter_ms: int = 0
    paused: bool = False
    fires: int = 0
    last_fire_at: Optional[int] = None
    next_fire_at: Optional[int] = None
    next_fires: List[int] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Schedule":
        return cls(
            id=str(obj["id"]),
            queue=str(obj["queue"]),
            revision=int(obj["revision"]),
            message=ScheduleMessage.from_json(obj.get("message") or {}),
            cron=obj.get("cron"),
            every_ms=_opt_int(obj, "every_ms"),
            tz=obj.get("tz"),
            start_at=_opt_int(obj, "start_at"),
            end_at=_opt_int(obj, "end_at"),
            max_fires=_opt_int(obj, "max_fires"),
            catchup=str(obj.get("catchup", "latest")),
            catchup_window_ms=int(obj.get("catchup_window_ms", 3_600_000)),
            overlap=str(obj.get("overlap", "allow")),
            jitter_ms=int(obj.get("jitter_ms", 0)),
            paused=bool(obj.get("paused", False)),
            fires=int(obj.get("fires", 0)),
            last_fire_at=_opt_int(obj, "last_fire_at"),
            next_fire_at=_opt_int(obj, "next_fire_at"),
            next_fires=[int(t) for t in obj.get("next_fires") or []],
        )


@runtime_checkable
class Leased(Protocol):
    """Anything that names a held lease: :class:`LeasedMessage`, a worker's
    delivery."""

    @property
    def id(self) -> str: ...

    @property
    def lease_id(self) -> str: ...


class LeasedView:
    """The fields of a held :class:`LeasedMessage`, for the worker's
    delivery objects (which add ack, nack and extend)."""

    message: LeasedMessage

    @property
    def id(self) -> str:
        return self.message.id

    @property
    def lease_id(self) -> str:
        return self.message.lease_id

    @property
    def attempt(self) -> int:
        """1 for the first delivery."""
        return self.message.attempt

    @property
    def payload(self) -> bytes:
        return self.message.payload

    @property
    def text(self) -> str:
        return self.message.text

    @property
    def headers(self) -> Dict[str, str]:
        return self.message.headers

    @property
    def deliver_at(self) -> int:
        return self.message.deliver_at

    @property
    def priority(self) -> int:
        return self.message.priority

    @property
    def key(self) -> Optional[str]:
        """The flow key, ``None`` when the message has none."""
        return self.message.key

    def json(self) -> Any:
        return self.message.json()
