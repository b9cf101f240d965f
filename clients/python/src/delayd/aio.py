"""The asyncio client: :class:`AsyncClient` and :class:`AsyncQueue`, the
same methods as ``delayd.Client`` and ``delayd.Queue`` as coroutines, over
``httpx.AsyncClient``.

This is the one written by hand: ``delayd.client`` is generated from it by
``tools/gen_sync.py`` (``async def`` becomes ``def``, ``await`` goes,
``AsyncQueue`` becomes ``Queue``, ...), and a test fails when the two
differ. Change this file, then run ``python tools/gen_sync.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, TypeVar, Union

import httpx

from . import _ops as ops
from . import models as m
from ._ops import UNSET, AckItem, BatchResult, Duration, EnqueueItem, Instant, PushConfig, Unset
from ._transport import (
    DEFAULT_RETRY,
    RetryPolicy,
    TlsVerify,
    build_request,
    check,
    default_headers,
    retryable_exception,
    retryable_status,
    ssl_verify,
    transport_error,
)
from .aio_worker import AsyncConsumer, AsyncDelivery, run_async_workers

T = TypeVar("T")


class AsyncClient:
    """A connection pool to one delayd server.

    ``base_url``: e.g. ``http://127.0.0.1:7070``. ``token``: the bearer token
    when the server runs with ``--token``. ``timeout``: seconds per request
    (lease calls add their wait). ``http2=True`` needs ``pip install
    delayd[http2]``. ``verify``: ``True`` (system CAs), a CA bundle path, an
    ``ssl.SSLContext`` or ``False``. ``httpx_client`` replaces the pool (its base URL and
    headers are used as given).
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:7070",
        *,
        token: Optional[str] = None,
        timeout: float = 10.0,
        retry: RetryPolicy = DEFAULT_RETRY,
        http2: bool = False,
        verify: TlsVerify = True,
        httpx_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self.timeout = timeout
        self.retry = retry
        self._http = httpx_client or httpx.AsyncClient(
            base_url=base_url,
            headers=default_headers(token),
            timeout=timeout,
            http2=http2,
            verify=ssl_verify(verify),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, call: ops.Call[T]) -> T:
        retry = 0
        while True:
            retry += 1
            last = retry >= self.retry.attempts
            try:
                resp = await self._http.send(build_request(self._http, call, self.timeout))
            except httpx.HTTPError as exc:
                if last or not retryable_exception(call, exc):
                    raise transport_error(exc) from exc
            else:
                if last or not retryable_status(call, resp.status_code):
                    check(resp)
                    return call.parse(resp)
            await asyncio.sleep(self.retry.pause(retry))

    def queue(self, name: str) -> "AsyncQueue":
        """A handle on queue ``name`` (no request is made)."""
        return AsyncQueue(self, name)

    async def health(self) -> Dict[str, Any]:
        """``GET /healthz``: the process is up."""
        return await self._run(ops.health("healthz"))

    async def ready(self) -> Dict[str, Any]:
        """``GET /readyz``: the store is reachable and accepting writes."""
        return await self._run(ops.health("readyz"))

    async def metrics(self) -> str:
        """``GET /metrics``: Prometheus text."""
        return await self._run(ops.metrics())

    async def openapi(self) -> Dict[str, Any]:
        """``GET /openapi.json``."""
        return await self._run(ops.openapi())

    async def whoami(self) -> Dict[str, Any]:
        """``GET /v1/whoami``: this client's token, ``{name, scopes, auth}``
        (``scopes`` as ``VERB:QUEUE_GLOB`` strings; ``["*:*"]`` for a
        full-access token or a server without tokens)."""
        return await self._run(ops.whoami())

    async def queues(self) -> List[m.QueueInfo]:
        """Every queue, by name."""
        return await self._run(ops.list_queues())

    async def preview_schedule(
        self,
        *,
        cron: Optional[str] = None,
        every: Optional[Duration] = None,
        tz: Optional[str] = None,
        start_at: Optional[Instant] = None,
        count: Optional[int] = None,
    ) -> List[int]:
        """The next fire times (epoch ms) of a ``cron`` or ``every``
        schedule, computed exactly as a schedule would; stores nothing."""
        return await self._run(ops.preview_schedule(cron, every, tz, start_at, count))


class AsyncQueue:
    """One queue of a :class:`AsyncClient`: enqueue, consume, inspect, configure."""

    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client = client
        self.name = name

    def __repr__(self) -> str:
        return f"AsyncQueue({self.name!r})"

    async def _run(self, call: ops.Call[T]) -> T:
        return await self.client._run(call)

    # ---- the queue itself -------------------------------------------------

    async def put(
        self,
        *,
        lease: Optional[Duration] = None,
        max_attempts: Optional[int] = None,
        retry: Optional[m.Retry] = None,
        push: Union[PushConfig, None, Unset] = UNSET,
        flow: Union[m.Flow, None, Unset] = UNSET,
        retain: Optional[Duration] = None,
    ) -> m.QueueInfo:
        """Creates the queue or merges these settings into it. ``push``: a
        :class:`PushConfig`, or ``None`` to turn push off. ``flow``: a
        :class:`Flow` (replaces the whole flow config), or ``None`` to turn
        flow control off. Left out (:data:`delayd.UNSET`), a setting stays
        as it is. ``retain``: how long a message that ended (acked or
        cancelled) is kept without its payload (``retain_ms``, at most 30
        days; ``0`` keeps none); ``get`` then shows it as ``acked`` or
        ``cancelled`` (:attr:`Message.ended`). Left out: unchanged."""
        return await self._run(
            ops.put_queue(
                self.name, lease=lease, max_attempts=max_attempts, retry=retry, push=push, flow=flow, retain=retain
            )
        )

    async def info(self) -> m.QueueInfo:
        """The queue object (config, paused, stats); ``QueueNotFound`` if absent."""
        return await self._run(ops.get_queue(self.name))

    async def delete(self) -> None:
        """Deletes the queue with all its messages and schedules."""
        return await self._run(ops.delete_queue(self.name))

    async def pause(self) -> m.QueueInfo:
        """Stops handing out leases and pushing (enqueues still work)."""
        return await self._run(ops.queue_action("pause", self.name))

    async def resume(self) -> m.QueueInfo:
        return await self._run(ops.queue_action("resume", self.name))

    async def histogram(
        self, *, start: Optional[Instant] = None, end: Optional[Instant] = None, buckets: Optional[int] = None
    ) -> m.Histogram:
        """Scheduled messages counted by due time."""
        return await self._run(ops.histogram(self.name, start, end, buckets))

    # ---- messages ---------------------------------------------------------

    async def enqueue(
        self,
        payload: m.PayloadLike,
        *,
        id: Optional[str] = None,
        delay: Optional[Duration] = None,
        deliver_at: Optional[Instant] = None,
        priority: Optional[int] = None,
        headers: Optional[Mapping[str, str]] = None,
        max_attempts: Optional[int] = None,
        key: Optional[str] = None,
        on_conflict: Optional[m.OnConflict] = None,
        debounce_max: Optional[Duration] = None,
    ) -> m.EnqueueResult:
        """Enqueues one message, delivered after ``delay`` seconds or at
        ``deliver_at`` (neither: now). With an ``id`` the call is idempotent
        (``created`` False when that id is live) and retried safely.
        ``key``: the message's flow key (see :class:`Flow`).

        ``on_conflict`` (with an ``id``): ``"keep"`` (the default) leaves a
        live message with that id as it is; ``"replace"`` gives a waiting one
        this payload, headers, priority, key, max_attempts and due time
        (``replaced`` True; its ``seq`` stays); ``"debounce"`` does the same
        with the due time capped at the message's ``enqueued_at`` plus
        ``debounce_max`` seconds. A leased message becomes ``after_lease``:
        the request is its successor, applied when the lease ends. A dead
        one: :class:`InvalidState`. A replace or debounce is not retried
        after a lost answer."""
        item = EnqueueItem(
            payload, id, delay, deliver_at, priority, headers, max_attempts, key, on_conflict, debounce_max
        )
        return await self._run(ops.enqueue(self.name, item))

    async def enqueue_many(self, items: Iterable[Union[EnqueueItem, m.PayloadLike]]) -> List[BatchResult]:
        """Enqueues up to 1000 messages in one request; each result is an
        :class:`EnqueueResult` or the item's own :class:`DelaydError`."""
        return await self._run(ops.batch(self.name, items))

    async def get(self, id: str) -> m.Message:
        return await self._run(ops.get_message(self.name, id))

    async def events(self, id: str) -> m.History:
        """The message's history, oldest first: its last 32 events and how
        many older ones were dropped. A live or retained message only
        (``MessageNotFound`` otherwise)."""
        return await self._run(ops.events(self.name, id))

    async def cancel(self, id: str) -> None:
        """Cancels a message in any state; ``MessageNotFound`` if unknown."""
        return await self._run(ops.cancel(self.name, id))

    async def reschedule(
        self,
        id: str,
        *,
        delay: Optional[Duration] = None,
        deliver_at: Optional[Instant] = None,
        priority: Optional[int] = None,
    ) -> m.Message:
        """Moves a scheduled or ready message (``InvalidState`` when leased or dead)."""
        return await self._run(ops.reschedule(self.name, id, delay, deliver_at, priority))

    async def messages(
        self, state: str, *, limit: Optional[int] = None, after: Optional[str] = None
    ) -> List[m.Message]:
        """One page of the messages in ``state`` (``scheduled``, ``ready``, ``leased``, ``dead``;
        retained messages are never listed)."""
        return await self._run(ops.list_messages(self.name, state, limit, after))

    # ---- consuming --------------------------------------------------------

    async def lease(
        self, *, max: int = 1, wait: Optional[Duration] = None, lease: Optional[Duration] = None
    ) -> List[m.LeasedMessage]:
        """Up to ``max`` ready messages, waiting up to ``wait`` seconds for one."""
        return await self._run(ops.lease(self.name, max, wait, lease))

    async def ack(self, id: str, lease_id: str) -> None:
        return await self._run(ops.ack(self.name, id, lease_id))

    async def ack_many(self, acks: Sequence[AckItem]) -> List[m.AckResult]:
        """Acks leased messages (or ``(id, lease_id)`` pairs) in one request."""
        return await self._run(ops.ack_many(self.name, acks))

    async def nack(
        self,
        id: str,
        lease_id: str,
        *,
        delay: Optional[Duration] = None,
        defer: bool = False,
        error: Optional[str] = None,
    ) -> None:
        """Gives a message back: retried after ``delay`` (default: the queue's
        backoff). ``defer=True`` (queues with ``flow``): the delivery was not
        an attempt; the message and its key wait ``delay`` (default: the
        queue's backoff for the deferral). ``error`` (at most 1024 bytes of
        UTF-8) says why: it becomes the message's ``last_error``."""
        return await self._run(ops.nack(self.name, id, lease_id, delay, defer, error))

    async def extend(self, id: str, lease_id: str, *, lease: Optional[Duration] = None) -> int:
        """Extends a lease to now + ``lease``; returns the new ``lease_until``."""
        return await self._run(ops.extend(self.name, id, lease_id, lease))

    # ---- flow control -----------------------------------------------------

    async def get_key(self, key: str) -> m.KeyInfo:
        """A flow key's live messages by state and its cool-down (zeros for
        a key with no live message)."""
        return await self._run(ops.get_key(self.name, key))

    # ---- dead letters -----------------------------------------------------

    async def dead(self, *, limit: Optional[int] = None, after: Optional[str] = None) -> List[m.Message]:
        """One page of dead messages, oldest death first."""
        return await self._run(ops.list_dead(self.name, limit, after))

    async def redrive(self, ids: Optional[Sequence[str]] = None) -> int:
        """Sends dead messages (all, or ``ids``) back to ready; returns how many."""
        return await self._run(ops.redrive(self.name, ids))

    # ---- schedules --------------------------------------------------------

    async def put_schedule(
        self,
        id: str,
        payload: Optional[m.PayloadLike] = None,
        *,
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
    ) -> m.Schedule:
        """Creates or replaces schedule ``id`` (``cron`` or ``every``
        seconds); each fire enqueues ``payload`` (default: empty). The same
        definition again changes nothing."""
        return await self._run(
            ops.put_schedule(
                self.name,
                id,
                payload=payload,
                cron=cron,
                every=every,
                tz=tz,
                start_at=start_at,
                end_at=end_at,
                max_fires=max_fires,
                priority=priority,
                headers=headers,
                max_attempts=max_attempts,
                key=key,
                catchup=catchup,
                catchup_window=catchup_window,
                overlap=overlap,
                jitter=jitter,
                paused=paused,
            )
        )

    async def schedule(self, id: str) -> m.Schedule:
        return await self._run(ops.schedule_call("get_schedule", self.name, id))

    async def schedules(self) -> List[m.Schedule]:
        """The queue's schedules, by id."""
        return await self._run(ops.list_schedules(self.name))

    async def delete_schedule(self, id: str) -> None:
        """Deletes a schedule (messages it already enqueued stay)."""
        return await self._run(ops.delete_schedule(self.name, id))

    async def pause_schedule(self, id: str) -> m.Schedule:
        return await self._run(ops.schedule_call("pause_schedule", self.name, id))

    async def resume_schedule(self, id: str) -> m.Schedule:
        return await self._run(ops.schedule_call("resume_schedule", self.name, id))

    async def trigger_schedule(self, id: str) -> m.EnqueueResult:
        """Enqueues one message from the schedule's template now (not a fire)."""
        return await self._run(ops.trigger_schedule(self.name, id))

    # ---- workers ----------------------------------------------------------

    def consume(
        self,
        *,
        max: int = 10,
        wait: Duration = 20.0,
        lease: Optional[Duration] = None,
        stop_on_signal: bool = True,
    ) -> AsyncConsumer:
        """``async for``: yields leased messages forever (until SIGTERM/SIGINT or
        :meth:`AsyncConsumer.stop`). A message is acked when the loop asks for
        the next one, unless the body acked or nacked it itself; its lease
        is extended in the background meanwhile. If the body raises, the
        message is nacked and the exception propagates (a :class:`Defer`
        raised inside a ``with`` block defers it instead; in a loop,
        ``msg.defer(delay=...)`` and go on)."""
        return AsyncConsumer(self, max=max, wait=wait, lease=lease, stop_on_signal=stop_on_signal)

    async def work(
        self,
        handler: Callable[[AsyncDelivery], Awaitable[object]],
        *,
        concurrency: int = 4,
        max: Optional[int] = None,
        wait: Duration = 20.0,
        lease: Optional[Duration] = None,
        stop_on_signal: bool = True,
        stop_event: Optional[asyncio.Event] = None,
    ) -> None:
        """Runs ``handler`` on each message in ``concurrency`` tasks until
        SIGTERM/SIGINT: ack when it returns, nack when it raises (the
        exception is logged), defer when it raises :class:`Defer`, lease
        extended while it runs. Returns after
        the handlers in flight finish (or ``stop_event`` is set)."""
        await run_async_workers(
            self,
            handler,
            concurrency=concurrency,
            max=max,
            wait=wait,
            lease=lease,
            stop_on_signal=stop_on_signal,
            stop_event=stop_event,
        )
