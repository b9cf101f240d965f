"""Synchronous workers: :class:`Consumer` (``for msg in queue.consume()``),
:func:`run_workers` (``queue.work(handler, concurrency=N)``), and the
:class:`LeaseKeeper` thread that extends the leases of messages in hand.

Settling rules, the same in ``delayd.aio_worker``:
- a message is acked when the handler returns (for a loop: when the loop
  asks for the next message), unless the handler acked or nacked it;
- when the handler raises, it is nacked (the queue's backoff applies);
- when it raises :class:`Defer` (a downstream said "slow down"), it is
  deferred instead: nacked with ``defer=True`` and the exception's delay,
  so the delivery is not counted as an attempt and its flow key cools down
  (the queue needs a ``flow`` config);
- messages leased but not yet handed out when the worker stops are nacked
  with no delay, so another worker gets them at once;
- a lease lost meanwhile (``LeaseMismatch``: it expired, e.g. the process
  was paused longer than the lease) is logged, not raised: the message is
  someone else's now.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Deque, Generator, Iterator, List, Optional, Set, Type

from . import _stop
from ._ops import Duration, to_ms
from .errors import DelaydError, LeaseMismatch, MessageNotFound
from .models import LeasedMessage, LeasedView

if TYPE_CHECKING:
    from .client import Queue

log = logging.getLogger("delayd.worker")


class Defer(Exception):
    """Raised by a handler to defer its message rather than fail it: the
    worker nacks it with ``defer=True``, so the delivery is not an attempt,
    and the message (and its flow key) waits ``delay`` seconds (``None``:
    the queue's backoff for the deferral). Part of flow control: the queue
    needs a ``flow`` config, else the server refuses the deferral.

        def handle(msg):
            resp = send(msg.json())
            if resp.status_code == 429:
                raise delayd.Defer(float(resp.headers.get("retry-after", 1)))
    """

    def __init__(self, delay: Optional[Duration] = None, message: str = "deferred") -> None:
        super().__init__(message)
        self.delay = delay


MAX_ERROR_BYTES = 1024
"""The longest ``error`` a nack may carry, in bytes of UTF-8 (api.md)."""


def error_text(exc: BaseException) -> str:
    """What a failed handler's nack says: the exception's type and text, cut
    to :data:`MAX_ERROR_BYTES` at a character boundary."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text.encode("utf-8")[:MAX_ERROR_BYTES].decode("utf-8", "ignore")


class Delivery(LeasedView):
    """A leased message in a worker's hands: the message's fields plus
    ``ack``, ``nack`` and ``extend``. Settling twice is a no-op."""

    def __init__(self, queue: "Queue", message: LeasedMessage) -> None:
        self.queue = queue
        self.message = message
        self.lease_until = message.lease_until
        self.renewed = time.monotonic()
        self.done = False
        self.lost = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Delivery(id={self.id!r}, attempt={self.attempt}, done={self.done})"

    def _take(self) -> bool:
        with self._lock:
            if self.done:
                return False
            self.done = True
            return True

    def ack(self) -> None:
        if self._take():
            self.queue.ack(self.id, self.lease_id)

    def nack(self, *, delay: Optional[Duration] = None, error: Optional[str] = None) -> None:
        if self._take():
            self.queue.nack(self.id, self.lease_id, delay=delay, error=error)

    def defer(self, *, delay: Optional[Duration] = None) -> None:
        """Gives the message back without spending an attempt (see :class:`Defer`)."""
        if self._take():
            self.queue.nack(self.id, self.lease_id, delay=delay, defer=True)

    def extend(self, *, lease: Optional[Duration] = None) -> int:
        self.lease_until = self.queue.extend(self.id, self.lease_id, lease=lease)
        self.renewed = time.monotonic()
        return self.lease_until

    def settle(
        self, ok: bool, *, delay: Optional[Duration] = None, defer: bool = False, error: Optional[str] = None
    ) -> None:
        """Acks (``ok``), nacks or defers, logging rather than raising: used
        where the worker, not the user, settles."""
        try:
            if ok:
                self.ack()
            elif defer:
                self.defer(delay=delay)
            else:
                self.nack(delay=delay, error=error)
        except (LeaseMismatch, MessageNotFound) as err:
            log.warning("message %s of %s: lease lost before it was settled: %s", self.id, self.queue.name, err)
        except DelaydError as err:
            log.error("message %s of %s: could not settle: %s", self.id, self.queue.name, err)


class LeaseKeeper:
    """A thread extending the leases of the messages in hand, each once a
    third of its lease has passed (timed on the local monotonic clock, so
    clock skew with the server does not matter)."""

    def __init__(self, queue: "Queue", lease: Optional[Duration]) -> None:
        self.queue = queue
        self.lease_ms = to_ms(lease)
        self._held: Set[Delivery] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _lease_seconds(self) -> float:
        if self.lease_ms is None:
            # The messages' lease is the queue's; the queue exists once one was leased.
            self.lease_ms = self.queue.info().config.lease_ms
        return self.lease_ms / 1000

    def add(self, delivery: Delivery) -> None:
        with self._lock:
            self._held.add(delivery)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="delayd-lease-keeper", daemon=True)
                self._thread.start()

    def discard(self, delivery: Delivery) -> None:
        with self._lock:
            self._held.discard(delivery)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        try:
            lease_s = self._lease_seconds()
        except DelaydError as err:
            log.error("queue %s: cannot read its lease time, leases will not be extended: %s", self.queue.name, err)
            return
        period = max(0.02, min(1.0, lease_s / 10))
        while not self._stop.wait(period):
            with self._lock:
                due = [d for d in self._held if not d.done and time.monotonic() - d.renewed >= lease_s / 3]
            for delivery in due:
                self._renew(delivery)

    def _renew(self, delivery: Delivery) -> None:
        try:
            delivery.extend(lease=None if self.lease_ms is None else self.lease_ms / 1000)
        except (LeaseMismatch, MessageNotFound) as err:
            if not delivery.done:
                delivery.lost = True
                log.warning("message %s of %s: lease lost: %s", delivery.id, self.queue.name, err)
            self.discard(delivery)
        except DelaydError as err:
            log.warning("message %s of %s: extend failed, will retry: %s", delivery.id, self.queue.name, err)


class Consumer:
    """``for msg in queue.consume(...)``: see :meth:`Queue.consume`.

    ``stop()`` (or SIGTERM/SIGINT, with ``stop_on_signal``) ends the loop
    after the message in hand."""

    def __init__(
        self,
        queue: "Queue",
        *,
        max: int,
        wait: Duration,
        lease: Optional[Duration],
        stop_on_signal: bool,
        stop_event: Optional[threading.Event] = None,
        keeper: Optional[LeaseKeeper] = None,
    ) -> None:
        self.queue = queue
        self.max = max
        self.wait = wait
        self.lease = lease
        self.stop_on_signal = stop_on_signal
        self._stop = stop_event or threading.Event()
        self._keeper = keeper
        self._in_lease = False
        self._gen: Optional[Generator[Delivery, None, None]] = None
        self._current: Optional[Delivery] = None

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def __iter__(self) -> Iterator[Delivery]:
        if self._gen is None:
            self._gen = self._run()
        return self._gen

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        # A Defer raised by the body defers the message in hand (the
        # generator cannot see the exception, only that it is closed).
        if isinstance(exc, Defer) and self._current is not None:
            self._current.settle(False, delay=exc.delay, defer=True)
        # Settles the message in hand now rather than when the generator is
        # garbage collected.
        if self._gen is not None:
            self._gen.close()

    def _lease(self) -> List[LeasedMessage]:
        self._in_lease = True
        try:
            return self.queue.lease(max=self.max, wait=self.wait, lease=self.lease)
        except _stop.Interrupted:
            return []
        finally:
            self._in_lease = False

    def _run(self) -> Generator[Delivery, None, None]:
        keeper = self._keeper or LeaseKeeper(self.queue, self.lease)
        restore = _stop.install(self.stop, lambda: self._in_lease) if self.stop_on_signal else (lambda: None)
        buffer: Deque[Delivery] = collections.deque()
        current: Optional[Delivery] = None
        try:
            while not self._stop.is_set():
                if not buffer:
                    buffer.extend(Delivery(self.queue, msg) for msg in self._lease())
                    continue
                current = self._current = buffer.popleft()
                keeper.add(current)
                yield current
                keeper.discard(current)
                current.settle(True)
                current = self._current = None
        finally:
            restore()
            if current is not None:
                # The loop body raised (or broke out) before finishing it.
                keeper.discard(current)
                current.settle(False)
            for unhandled in buffer:
                unhandled.settle(False, delay=0)
            if self._keeper is None:
                keeper.close()


def run_workers(
    queue: "Queue",
    handler: Callable[[Delivery], object],
    *,
    concurrency: int,
    max: Optional[int],
    wait: Duration,
    lease: Optional[Duration],
    stop_on_signal: bool,
    stop_event: Optional[threading.Event] = None,
) -> None:
    """``queue.work(...)``: ``concurrency`` threads, each leasing ``max``
    (default 1) messages at a time and running ``handler`` on each."""
    stop = stop_event or threading.Event()
    keeper = LeaseKeeper(queue, lease)
    # Worker threads cannot be interrupted by a signal, so they poll in
    # short waits to notice a stop promptly.
    poll = min(to_ms(wait) or 0, 2000) / 1000

    def one_worker() -> None:
        consumer = Consumer(
            queue, max=max or 1, wait=poll, lease=lease, stop_on_signal=False, stop_event=stop, keeper=keeper
        )
        for delivery in consumer:
            try:
                handler(delivery)
            except Defer as defer:
                log.info("message %s of %s: deferred by the handler", delivery.id, queue.name)
                delivery.settle(False, delay=defer.delay, defer=True)
            except Exception as exc:
                log.exception("message %s of %s: handler failed, nacked", delivery.id, queue.name)
                delivery.settle(False, error=error_text(exc))

    threads = [threading.Thread(target=one_worker, name=f"delayd-worker-{i}", daemon=True) for i in range(concurrency)]
    restore = _stop.install(stop.set, lambda: False) if stop_on_signal else (lambda: None)
    try:
        for t in threads:
            t.start()
        for t in threads:
            # join with a timeout, so the main thread keeps running signal handlers.
            while t.is_alive():
                t.join(timeout=0.2)
    finally:
        stop.set()
        restore()
        keeper.close()
