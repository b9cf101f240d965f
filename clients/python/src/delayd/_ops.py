"""Request builders shared by the sync and asyncio clients.

Each function turns Python arguments into a :class:`Call` (route, path
parameters, body, query, how to read the answer); the two clients only
differ in how they send it. Python-side durations are seconds (``float``
or ``timedelta``) and times are ``datetime`` or epoch milliseconds, as the
API's own ``*_at`` fields are.
"""

from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    Final,
    Generic,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)
from urllib.parse import quote

import httpx

from . import models as m
from .errors import DelaydError, error_from_body
from .routes import ROUTES, Route

T = TypeVar("T")

Duration = Union[float, int, _dt.timedelta]
"""Seconds, or a ``timedelta``."""
Instant = Union[int, _dt.datetime]
"""Epoch milliseconds, or an aware ``datetime`` (naive ones are taken as UTC)."""


@dataclass
class Call(Generic[T]):
    route: Route
    parse: Callable[[httpx.Response], T]
    path: Dict[str, str] = field(default_factory=dict)
    body: Optional[Dict[str, Any]] = None
    query: Dict[str, Any] = field(default_factory=dict)
    retry_safe: bool = False
    """Whether a lost answer may be retried (an idempotent route, or an
    enqueue whose ids make it idempotent)."""
    extra_timeout: float = 0.0
    """Seconds the server may legitimately hold the request (a lease's wait)."""

    def url_path(self) -> str:
        return self.route.path.format(**{k: quote(v, safe="") for k, v in self.path.items()})


def to_ms(value: Optional[Duration]) -> Optional[int]:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, _dt.timedelta) else float(value)
    if seconds < 0:
        raise ValueError("durations are not negative")
    return int(round(seconds * 1000))


def to_epoch_ms(value: Optional[Instant]) -> Optional[int]:
    if value is None or isinstance(value, int):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return int(value.timestamp() * 1000)


def _json(resp: httpx.Response) -> Any:
    return resp.json()


def _none(_: httpx.Response) -> None:
    return None


def call(name: str, parse: Callable[[httpx.Response], T], **kw: Any) -> Call[T]:
    route = ROUTES[name]
    kw.setdefault("retry_safe", route.idempotent)
    return Call(route=route, parse=parse, **kw)


# ---- operations -----------------------------------------------------------


def health(name: str = "healthz") -> Call[Dict[str, Any]]:
    return call(name, _json)


def metrics() -> Call[str]:
    return call("metrics", lambda r: r.text)


def openapi() -> Call[Dict[str, Any]]:
    return call("openapi", _json)


def whoami() -> Call[Dict[str, Any]]:
    return call("whoami", _json)


def list_queues() -> Call[List[m.QueueInfo]]:
    return call("list_queues", lambda r: [m.QueueInfo.from_json(q) for q in r.json()["queues"]])


def get_queue(queue: str) -> Call[m.QueueInfo]:
    return call("get_queue", _queue_info, path={"queue": queue})


def _queue_info(resp: httpx.Response) -> m.QueueInfo:
    return m.QueueInfo.from_json(resp.json())


class Unset(enum.Enum):
    """The type of :data:`UNSET`, the default of an argument where ``None``
    means something (``Queue.put(push=None)`` turns push off): left out or
    ``UNSET``, the setting is not sent and stays as it is. A one-member enum,
    so type checkers narrow ``x is UNSET`` and ``Union[T, None, Unset]``."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "delayd.UNSET"


UNSET: Final = Unset.UNSET
"""An argument not given (see :class:`Unset`)."""


def put_queue(
    queue: str,
    *,
    lease: Optional[Duration] = None,
    max_attempts: Optional[int] = None,
    retry: Optional[m.Retry] = None,
    push: Union[PushConfig, None, Unset] = UNSET,
    flow: Union[m.Flow, None, Unset] = UNSET,
    retain: Optional[Duration] = None,
) -> Call[m.QueueInfo]:
    """``push``: a :class:`PushConfig`, or ``None`` to remove push; ``flow``:
    a :class:`Flow` (replaces the queue's whole flow config), or ``None`` to
    remove flow control (either :data:`UNSET`: unchanged). ``retain``: how
    long an ended message is kept (``retain_ms``; ``0`` keeps none)."""
    route = ROUTES["put_queue"]
    body = route.body(lease_ms=to_ms(lease), max_attempts=max_attempts, retain_ms=to_ms(retain))
    assert body is not None
    if retry is not None:
        body["retry"] = route.check_nested(
            "retry", {"initial_ms": retry.initial_ms, "max_ms": retry.max_ms, "multiplier": retry.multiplier}
        )
    if push is not UNSET:
        body["push"] = None if push is None else route.check_nested("push", push.to_json())
    if flow is not UNSET:
        body["flow"] = None if flow is None else route.check_nested("flow", flow.to_json())
    return call("put_queue", _queue_info, path={"queue": queue}, body=body)


def queue_action(name: str, queue: str) -> Call[m.QueueInfo]:
    return call(name, _queue_info, path={"queue": queue})


def delete_queue(queue: str) -> Call[None]:
    return call("delete_queue", _none, path={"queue": queue})


def histogram(
    queue: str, start: Optional[Instant] = None, end: Optional[Instant] = None, buckets: Optional[int] = None
) -> Call[m.Histogram]:
    query = _query({"from": to_epoch_ms(start), "to": to_epoch_ms(end), "buckets": buckets})
    return call("histogram", lambda r: m.Histogram.from_json(r.json()), path={"queue": queue}, query=query)


@dataclass
class PushConfig:
    """A queue's push target as ``put`` sets it; ``secret`` signs each
    request (``delayd-signature``), ``headers`` (e.g. ``Authorization``) are
    sent with each."""

    url: str
    timeout_ms: Optional[int] = None
    concurrency: Optional[int] = None
    secret: Optional[str] = None
    headers: Optional[Dict[str, str]] = None

    def to_json(self) -> Dict[str, Any]:
        return {
            "url": self.url,
            "timeout_ms": self.timeout_ms,
            "concurrency": self.concurrency,
            "secret": self.secret,
            "headers": self.headers,
        }


@dataclass
class EnqueueItem:
    """One message of a batch (also what :meth:`Queue.enqueue` sends)."""

    payload: m.PayloadLike
    id: Optional[str] = None
    delay: Optional[Duration] = None
    deliver_at: Optional[Instant] = None
    priority: Optional[int] = None
    headers: Optional[Mapping[str, str]] = None
    max_attempts: Optional[int] = None
    key: Optional[str] = None
    """The flow key (queues with ``flow``: limits per key, deferral cools the key)."""
    on_conflict: Optional[m.OnConflict] = None
    """What happens when ``id`` names a live message (:data:`OnConflict`):
    ``keep`` (the server's default when left out), ``replace`` or
    ``debounce``; the last two need an ``id``."""
    debounce_max: Optional[Duration] = None
    """With ``on_conflict="debounce"`` only: the due time is capped at the
    message's ``enqueued_at`` plus this (``debounce_max_ms``); no cap
    without it."""

    def to_json(self) -> Dict[str, Any]:
        if self.delay is not None and self.deliver_at is not None:
            raise ValueError("give delay or deliver_at, not both")
        if self.debounce_max is not None and self.on_conflict != "debounce":
            raise ValueError('debounce_max needs on_conflict="debounce"')
        if self.replaces and self.id is None:
            raise ValueError(f"on_conflict={self.on_conflict!r} needs an id")
        body = ROUTES["enqueue"].body(
            id=self.id,
            delay_ms=to_ms(self.delay),
            deliver_at=to_epoch_ms(self.deliver_at),
            priority=self.priority,
            headers=dict(self.headers) if self.headers is not None else None,
            max_attempts=self.max_attempts,
            key=self.key,
            # Sent only when given: an older server refuses fields it does not know.
            on_conflict=self.on_conflict,
            debounce_max_ms=to_ms(self.debounce_max),
        )
        assert body is not None
        body.update(m.payload_fields(self.payload))
        return body

    @property
    def replaces(self) -> bool:
        """Whether it may change a live message (``replace`` or ``debounce``)."""
        return self.on_conflict is not None and self.on_conflict != "keep"

    @property
    def retry_safe(self) -> bool:
        """Whether sending it again after a lost answer is harmless: with
        an id and ``keep``, a repeat is answered ``created: false`` and
        changes nothing. A repeated replace or debounce would not be the
        same request (its ``delay`` counts from its arrival, and after the
        message ended it enqueues the content again), so it is not retried."""
        return self.id is not None and not self.replaces


def enqueue(queue: str, item: EnqueueItem) -> Call[m.EnqueueResult]:
    return call(
        "enqueue",
        lambda r: m.EnqueueResult.from_json(r.json()),
        path={"queue": queue},
        body=item.to_json(),
        retry_safe=item.retry_safe,
    )


BatchResult = Union[m.EnqueueResult, DelaydError]


def batch(queue: str, items: Iterable[Union[EnqueueItem, m.PayloadLike]]) -> Call[List[BatchResult]]:
    whole = [i if isinstance(i, EnqueueItem) else EnqueueItem(i) for i in items]
    route = ROUTES["batch"]
    messages = [route.check_nested("messages", i.to_json()) for i in whole]
    return call(
        "batch",
        _batch_results,
        path={"queue": queue},
        body=route.body(messages=messages),
        retry_safe=all(i.retry_safe for i in whole),
    )


def _batch_results(resp: httpx.Response) -> List[BatchResult]:
    out: List[BatchResult] = []
    for item in resp.json()["results"]:
        out.append(error_from_body(item, None) if "error" in item else m.EnqueueResult.from_json(item))
    return out


def get_message(queue: str, id: str) -> Call[m.Message]:
    return call("get_message", _message, path={"queue": queue, "id": id})


def events(queue: str, id: str) -> Call[m.History]:
    return call("events", _history, path={"queue": queue, "id": id})


def _history(resp: httpx.Response) -> m.History:
    return m.History.from_json(resp.json())


def _message(resp: httpx.Response) -> m.Message:
    return m.Message.from_json(resp.json())


def _messages(resp: httpx.Response) -> List[m.Message]:
    return [m.Message.from_json(x) for x in resp.json()["messages"]]


def cancel(queue: str, id: str) -> Call[None]:
    return call("cancel", _none, path={"queue": queue, "id": id})


def reschedule(
    queue: str, id: str, delay: Optional[Duration], deliver_at: Optional[Instant], priority: Optional[int]
) -> Call[m.Message]:
    if delay is not None and deliver_at is not None:
        raise ValueError("give delay or deliver_at, not both")
    body = ROUTES["reschedule"].body(delay_ms=to_ms(delay), deliver_at=to_epoch_ms(deliver_at), priority=priority)
    return call("reschedule", _message, path={"queue": queue, "id": id}, body=body)


def list_messages(queue: str, state: str, limit: Optional[int], after: Optional[str]) -> Call[List[m.Message]]:
    query = _query({"state": state, "limit": limit, "after": after})
    return call("list_messages", _messages, path={"queue": queue}, query=query)


def lease(queue: str, max: int, wait: Optional[Duration], lease: Optional[Duration]) -> Call[List[m.LeasedMessage]]:
    wait_ms = to_ms(wait)
    body = ROUTES["lease"].body(max=max, wait_ms=wait_ms, lease_ms=to_ms(lease))
    return call(
        "lease",
        lambda r: [m.LeasedMessage.from_json(x) for x in r.json()["messages"]],
        path={"queue": queue},
        body=body,
        extra_timeout=(wait_ms or 0) / 1000,
    )


def ack(queue: str, id: str, lease_id: str) -> Call[None]:
    return call("ack", _none, path={"queue": queue, "id": id}, body=ROUTES["ack"].body(lease_id=lease_id))


AckItem = Union[m.Leased, Tuple[str, str]]
"""What ``ack_many`` takes: a leased message (:class:`LeasedMessage`, a
worker's :class:`Delivery`, anything with ``id`` and ``lease_id``) or an
``(id, lease_id)`` pair."""


def ack_many(queue: str, acks: Sequence[AckItem]) -> Call[List[m.AckResult]]:
    route = ROUTES["ack_many"]
    items = []
    for a in acks:
        id, lease_id = (a.id, a.lease_id) if isinstance(a, m.Leased) else a
        items.append(route.check_nested("acks", {"id": id, "lease_id": lease_id}))
    return call(
        "ack_many",
        lambda r: [m.AckResult.from_json(x) for x in r.json()["results"]],
        path={"queue": queue},
        body=route.body(acks=items),
    )


def nack(
    queue: str, id: str, lease_id: str, delay: Optional[Duration], defer: bool = False, error: Optional[str] = None
) -> Call[None]:
    # `defer` and `error` are sent only when set: an older server refuses
    # fields it does not know.
    body = ROUTES["nack"].body(lease_id=lease_id, delay_ms=to_ms(delay), defer=True if defer else None, error=error)
    return call("nack", _none, path={"queue": queue, "id": id}, body=body)


def extend(queue: str, id: str, lease_id: str, lease: Optional[Duration]) -> Call[int]:
    body = ROUTES["extend"].body(lease_id=lease_id, lease_ms=to_ms(lease))
    return call("extend", lambda r: int(r.json()["lease_until"]), path={"queue": queue, "id": id}, body=body)


def list_dead(queue: str, limit: Optional[int], after: Optional[str]) -> Call[List[m.Message]]:
    return call("list_dead", _messages, path={"queue": queue}, query=_query({"limit": limit, "after": after}))


def redrive(queue: str, ids: Optional[Sequence[str]]) -> Call[int]:
    body = ROUTES["redrive"].body(ids=list(ids) if ids is not None else None)
    return call("redrive", lambda r: int(r.json()["redriven"]), path={"queue": queue}, body=body)


def get_key(queue: str, key: str) -> Call[m.KeyInfo]:
    return call("get_key", lambda r: m.KeyInfo.from_json(r.json()), path={"queue": queue, "key": key})


def _query(values: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


# ---- schedules ------------------------------------------------------------


def _schedule(resp: httpx.Response) -> m.Schedule:
    return m.Schedule.from_json(resp.json())


def put_schedule(
    queue: str,
    id: str,
    *,
    payload: Optional[m.PayloadLike] = None,
    cron: Optional[str] = None,
    every: Optional[Duration] = None,
    tz: Optional[str] = None,
    start_at: Optional[Instant] = None,
    end_at: Optional[Instant] = None,
    max_fires: Optional[int] = None,
    priority: Optional[int] = None,
    headers: Optional[Mapping[str, str]] = None,
    max_attempts: Optional[int] = None,
    key: Optional[str] = None,
    catchup: Optional[str] = None,
    catchup_window: Optional[Duration] = None,
    overlap: Optional[str] = None,
    jitter: Optional[Duration] = None,
    paused: Optional[bool] = None,
) -> Call[m.Schedule]:
    route = ROUTES["put_schedule"]
    message: Optional[Dict[str, Any]] = None
    if payload is not None or priority is not None or headers or max_attempts is not None or key is not None:
        # Without a `message` the server fires an empty payload.
        fields: Dict[str, Any] = {
            "priority": priority,
            "headers": dict(headers) if headers else None,
            "max_attempts": max_attempts,
            "key": key,
        }
        fields.update(m.payload_fields("" if payload is None else payload))
        message = route.check_nested("message", fields)
    body = route.body(
        cron=cron,
        every_ms=to_ms(every),
        tz=tz,
        start_at=to_epoch_ms(start_at),
        end_at=to_epoch_ms(end_at),
        max_fires=max_fires,
        message=message,
        catchup=catchup,
        catchup_window_ms=to_ms(catchup_window),
        overlap=overlap,
        jitter_ms=to_ms(jitter),
        paused=paused,
    )
    return call("put_schedule", _schedule, path={"queue": queue, "id": id}, body=body)


def schedule_call(name: str, queue: str, id: str) -> Call[m.Schedule]:
    return call(name, _schedule, path={"queue": queue, "id": id})


def list_schedules(queue: str) -> Call[List[m.Schedule]]:
    return call(
        "list_schedules",
        lambda r: [m.Schedule.from_json(s) for s in r.json()["schedules"]],
        path={"queue": queue},
    )


def delete_schedule(queue: str, id: str) -> Call[None]:
    return call("delete_schedule", _none, path={"queue": queue, "id": id})


def trigger_schedule(queue: str, id: str) -> Call[m.EnqueueResult]:
    return call("trigger_schedule", lambda r: m.EnqueueResult.from_json(r.json()), path={"queue": queue, "id": id})


def preview_schedule(
    cron: Optional[str], every: Optional[Duration], tz: Optional[str], start_at: Optional[Instant], count: Optional[int]
) -> Call[List[int]]:
    body = ROUTES["preview_schedule"].body(
        cron=cron, every_ms=to_ms(every), tz=tz, start_at=to_epoch_ms(start_at), count=count
    )
    return call("preview_schedule", lambda r: [int(t) for t in r.json()["fires"]], body=body)
