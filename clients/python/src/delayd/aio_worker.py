"""asyncio workers: :class:`AsyncConsumer` (``async for msg in
queue.consume()``), :func:`run_async_workers` (``await queue.work(handler,
concurrency=N)``) and the lease-extending task. The settling rules are
``delayd.worker``'s.

A stop (``stop()``, or SIGTERM/SIGINT through the loop's signal handlers
where the loop supports them) cancels a lease call that is waiting, so a
worker stops at once rather than after the server's long poll.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import signal
import time
from types import TracebackType
from typing import TYPE_CHECKING, AsyncGenerator, AsyncIterator, Awaitable, Callable, Deque, List, Optional, Set, Type

from ._ops import Duration, to_ms
from .errors import DelaydError, LeaseMismatch, MessageNotFound
from .models import LeasedMessage, LeasedView
from .worker import Defer, error_text

if TYPE_CHECKING:
    from .aio import AsyncQueue

log = logging.getLogger("delayd.worker")


class AsyncDelivery(LeasedView):
    """A leased message in an async worker's hands; see ``delayd.Delivery``."""

    def __init__(self, queue: "AsyncQueue", message: LeasedMessage) -> None:
        self.queue = queue
        self.message = message
        self.lease_until = message.lease_until
        self.renewed = time.monotonic()
        self.done = False
        self.lost = False

    def __repr__(self) -> str:
        return f"AsyncDelivery(id={self.id!r}, attempt={self.attempt}, done={self.done})"

    def _take(self) -> bool:
        # No lock: the event loop runs one coroutine step at a time.
        if self.done:
            return False
        self.done = True
        return True

    async def ack(self) -> None:
        if self._take():
            await self.queue.ack(self.id, self.lease_id)

    async def nack(self, *, delay: Optional[Duration] = None, error: Optional[str] = None) -> None:
        if self._take():
            await self.queue.nack(self.id, self.lease_id, delay=delay, error=error)

    async def defer(self, *, delay: Optional[Duration] = None) -> None:
        """Gives the message back without spending an attempt (see ``delayd.Defer``)."""
        if self._take():
            await self.queue.nack(self.id, self.lease_id, delay=delay, defer=True)

    async def extend(self, *, lease: Optional[Duration] = None) -> int:
        self.lease_until = await self.queue.extend(self.id, self.lease_id, lease=lease)
        self.renewed = time.monotonic()
        return self.lease_until

    async def settle(
        self, ok: bool, *, delay: Optional[Duration] = None, defer: bool = False, error: Optional[str] = None
    ) -> None:
        try:
            if ok:
                await self.ack()
            elif defer:
                await self.defer(delay=delay)
            else:
                await self.nack(delay=delay, error=error)
        except (LeaseMismatch, MessageNotFound) as err:
            log.warning("message %s of %s: lease lost before it was settled: %s", self.id, self.queue.name, err)
        except DelaydError as err:
            log.error("message %s of %s: could not settle: %s", self.id, self.queue.name, err)


class AsyncLeaseKeeper:
    """A task extending held leases once a third of the lease has passed."""

    def __init__(self, queue: "AsyncQueue", lease: Optional[Duration]) -> None:
        self.queue = queue
        self.lease_ms = to_ms(lease)
        self._held: Set[AsyncDelivery] = set()
        self._task: Optional["asyncio.Task[None]"] = None

    def add(self, delivery: AsyncDelivery) -> None:
        self._held.add(delivery)
        if self._task is None:
            self._task = asyncio.ensure_future(self._loop())

    def discard(self, delivery: AsyncDelivery) -> None:
        self._held.discard(delivery)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    async def _loop(self) -> None:
        if self.lease_ms is None:
            try:
                self.lease_ms = (await self.queue.info()).config.lease_ms
            except DelaydError as err:
                log.error("queue %s: cannot read its lease time, leases will not be extended: %s", self.queue.name, err)
                return
        lease_s = self.lease_ms / 1000
        period = max(0.02, min(1.0, lease_s / 10))
        while True:
            await asyncio.sleep(period)
            due = [d for d in self._held if not d.done and time.monotonic() - d.renewed >= lease_s / 3]
            await asyncio.gather(*(self._renew(d, lease_s) for d in due))

    async def _renew(self, delivery: AsyncDelivery, lease_s: float) -> None:
        try:
            await delivery.extend(lease=lease_s)
        except (LeaseMismatch, MessageNotFound) as err:
            if not delivery.done:
                delivery.lost = True
                log.warning("message %s of %s: lease lost: %s", delivery.id, self.queue.name, err)
            self.discard(delivery)
        except DelaydError as err:
            log.warning("message %s of %s: extend failed, will retry: %s", delivery.id, self.queue.name, err)


def install_signals(stop: Callable[[], None]) -> Callable[[], None]:
    """SIGTERM/SIGINT call ``stop`` (where the running loop supports signal
    handlers: the main thread on Unix); returns the undo."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass

    def restore() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return restore


class AsyncConsumer:
    """``async for msg in queue.consume(...)``; ``async with`` closes it
    deterministically (recommended: without it, a loop body that raises
    has its message nacked only when the generator is finalized)."""

    def __init__(
        self,
        queue: "AsyncQueue",
        *,
        max: int,
        wait: Duration,
        lease: Optional[Duration],
        stop_on_signal: bool,
        stop_event: Optional[asyncio.Event] = None,
        keeper: Optional[AsyncLeaseKeeper] = None,
    ) -> None:
        self.queue = queue
        self.max = max
        self.wait = wait
        self.lease = lease
        self.stop_on_signal = stop_on_signal
        self._stop = stop_event
        self._keeper = keeper
        self._gen: Optional[AsyncGenerator[AsyncDelivery, None]] = None
        self._current: Optional[AsyncDelivery] = None

    def _event(self) -> asyncio.Event:
        if self._stop is None:
            self._stop = asyncio.Event()
        return self._stop

    def stop(self) -> None:
        self._event().set()

    def __aiter__(self) -> AsyncIterator[AsyncDelivery]:
        if self._gen is None:
            self._gen = self._run()
        return self._gen

    async def __aenter__(self) -> "AsyncConsumer":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        # A Defer raised by the body defers the message in hand.
        if isinstance(exc, Defer) and self._current is not None:
            await self._current.settle(False, delay=exc.delay, defer=True)
        if self._gen is not None:
            await self._gen.aclose()

    async def _lease(self) -> List[LeasedMessage]:
        stop = asyncio.ensure_future(self._event().wait())
        lease = asyncio.ensure_future(self.queue.lease(max=self.max, wait=self.wait, lease=self.lease))
        try:
            await asyncio.wait({stop, lease}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not lease.done():
            lease.cancel()
            return []
        return lease.result()

    async def _run(self) -> AsyncGenerator[AsyncDelivery, None]:
        keeper = self._keeper or AsyncLeaseKeeper(self.queue, self.lease)
        stop = self._event()
        restore = install_signals(stop.set) if self.stop_on_signal else (lambda: None)
        buffer: Deque[AsyncDelivery] = collections.deque()
        current: Optional[AsyncDelivery] = None
        try:
            while not stop.is_set():
                if not buffer:
                    buffer.extend(AsyncDelivery(self.queue, msg) for msg in await self._lease())
                    continue
                current = self._current = buffer.popleft()
                keeper.add(current)
                yield current
                keeper.discard(current)
                await current.settle(True)
                current = self._current = None
        finally:
            restore()
            if current is not None:
                keeper.discard(current)
                await current.settle(False)
            for unhandled in buffer:
                await unhandled.settle(False, delay=0)
            if self._keeper is None:
                await keeper.close()


async def run_async_workers(
    queue: "AsyncQueue",
    handler: Callable[[AsyncDelivery], Awaitable[object]],
    *,
    concurrency: int,
    max: Optional[int],
    wait: Duration,
    lease: Optional[Duration],
    stop_on_signal: bool,
    stop_event: Optional[asyncio.Event] = None,
) -> None:
    """``await queue.work(...)``: ``concurrency`` tasks, each leasing ``max``
    (default 1) messages at a time and awaiting ``handler`` on each."""
    stop = stop_event or asyncio.Event()
    keeper = AsyncLeaseKeeper(queue, lease)

    async def one_worker() -> None:
        consumer = AsyncConsumer(
            queue, max=max or 1, wait=wait, lease=lease, stop_on_signal=False, stop_event=stop, keeper=keeper
        )
        async with consumer:
            async for delivery in consumer:
                try:
                    await handler(delivery)
                except Defer as defer:
                    log.info("message %s of %s: deferred by the handler", delivery.id, queue.name)
                    await delivery.settle(False, delay=defer.delay, defer=True)
                except Exception as exc:
                    log.exception("message %s of %s: handler failed, nacked", delivery.id, queue.name)
                    await delivery.settle(False, error=error_text(exc))

    restore = install_signals(stop.set) if stop_on_signal else (lambda: None)
    try:
        await asyncio.gather(*(one_worker() for _ in range(concurrency)))
    finally:
        stop.set()
        restore()
        await keeper.close()
