"""Flow control against a real server: ``flow`` on a queue, ``key`` on
messages (enqueue, batch, schedule template), ``get_key``, nack ``defer``
and the workers' :class:`delayd.Defer`."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import List

import pytest
from conftest import Server

import delayd


def test_flow_is_stored_with_defaults_and_removed_with_none(queue: delayd.Queue) -> None:
    info = queue.put(flow=delayd.Flow(rate=delayd.Rate(50, 1000), key_concurrency=2, max_deferrals=5))
    assert info.config.flow == delayd.Flow(
        # api.md's default burst: max(2, ceil(limit / period_ms) + 1).
        rate=delayd.Rate(50, 1000, burst=2),
        key_concurrency=2,
        ordered=False,
        max_deferrals=5,
    )
    # Other settings leave flow alone; `flow=None` removes it.
    assert queue.put(max_attempts=3).config.flow is not None
    assert queue.put(flow=None).config.flow is None
    assert queue.info().config.flow is None


def test_bad_flow_is_invalid_argument_naming_the_field(queue: delayd.Queue) -> None:
    with pytest.raises(delayd.InvalidArgument, match="key_concurrency"):
        queue.put(flow=delayd.Flow(ordered=True, key_concurrency=2))
    with pytest.raises(delayd.InvalidArgument, match="limit"):
        queue.put(flow=delayd.Flow(rate=delayd.Rate(0)))


def test_keys_at_enqueue_in_a_batch_and_in_a_schedule_template(queue: delayd.Queue) -> None:
    queue.enqueue("a", id="a", key="tenant-1")
    results = queue.enqueue_many(
        [delayd.EnqueueItem("b", id="b", key="tenant-1", delay=60), delayd.EnqueueItem("c", id="c")]
    )
    assert all(isinstance(r, delayd.EnqueueResult) for r in results)
    assert queue.get("a").key == "tenant-1"
    assert queue.get("c").key is None
    assert queue.get_key("tenant-1") == delayd.KeyInfo("tenant-1", scheduled=1, ready=1, leased=0, dead=0)
    assert queue.get_key("nobody") == delayd.KeyInfo("nobody", 0, 0, 0, 0, None)

    schedule = queue.put_schedule("s", "t", every=3600, key="tenant-2")
    assert schedule.message.key == "tenant-2"
    fired = queue.trigger_schedule("s")
    assert queue.get(fired.id).key == "tenant-2"


def test_a_key_with_odd_characters_round_trips(queue: delayd.Queue) -> None:
    key = "tenant/42 ü?#"
    queue.enqueue("x", key=key)
    [leased] = queue.lease()
    assert leased.key == key
    assert queue.get_key(key).leased == 1


def test_key_concurrency_holds_a_keys_second_message(queue: delayd.Queue) -> None:
    queue.put(flow=delayd.Flow(key_concurrency=1))
    queue.enqueue_many([delayd.EnqueueItem(str(i), key="k") for i in range(2)] + [delayd.EnqueueItem("o", key="o")])
    leased = queue.lease(max=10)
    assert sorted(m.key or "" for m in leased) == ["k", "o"]
    assert queue.get_key("k").ready == 1, "the held message stays ready"


def test_nack_defer_spends_no_attempt_and_cools_the_key(queue: delayd.Queue) -> None:
    queue.put(flow=delayd.Flow())
    queue.enqueue("x", id="d", key="k2")
    [msg] = queue.lease()
    assert (msg.key, msg.attempt) == ("k2", 1)
    queue.nack(msg.id, msg.lease_id, delay=60, defer=True)
    key = queue.get_key("k2")
    assert key.cooling_until is not None and key.cooling_until > time.time() * 1000 + 50_000
    assert queue.get("d").attempts == 0
    assert queue.info().stats.cooling_keys in (None, 1)


def test_defer_on_a_queue_without_flow_is_invalid_argument(queue: delayd.Queue) -> None:
    queue.enqueue("x")
    [msg] = queue.lease()
    with pytest.raises(delayd.InvalidArgument):
        queue.nack(msg.id, msg.lease_id, defer=True)


def test_a_handler_raising_defer_defers_its_message(queue: delayd.Queue) -> None:
    queue.put(flow=delayd.Flow(), max_attempts=1)
    queue.enqueue("x", id="d", key="k3")
    attempts = []
    stop = threading.Event()

    def handler(msg: delayd.Delivery) -> None:
        attempts.append(msg.attempt)
        if len(attempts) == 1:
            raise delayd.Defer(0.2)
        stop.set()

    timeout = threading.Timer(20, stop.set)  # a failing server must not hang the suite
    timeout.start()
    queue.work(handler, concurrency=1, wait=1, stop_on_signal=False, stop_event=stop)
    timeout.cancel()
    # With max_attempts 1 a failed attempt would have made it dead.
    assert attempts == [1, 1], "a deferral is not an attempt"


def test_defer_raised_in_a_consume_block_defers_the_message_in_hand(queue: delayd.Queue) -> None:
    queue.put(flow=delayd.Flow())
    queue.enqueue("x", id="d", key="k4")
    with pytest.raises(delayd.Defer):
        with queue.consume(wait=1, stop_on_signal=False) as consumer:
            for _msg in consumer:
                raise delayd.Defer(30)
    message = queue.get("d")
    assert (message.state, message.attempts) == ("scheduled", 0)
    assert queue.get_key("k4").cooling_until is not None


def test_async_worker_defers_on_defer(server: Server) -> None:
    async def scenario() -> List[int]:
        async with delayd.AsyncClient(server.url) as client:
            q = client.queue(f"flow/{uuid.uuid4().hex[:8]}")
            await q.put(flow=delayd.Flow(), max_attempts=1)
            await q.enqueue("x", key="k")
            attempts: List[int] = []
            stop = asyncio.Event()

            async def handler(msg: delayd.AsyncDelivery) -> None:
                attempts.append(msg.attempt)
                if len(attempts) == 1:
                    raise delayd.Defer(0.2)
                stop.set()

            await asyncio.wait_for(q.work(handler, concurrency=1, wait=1, stop_on_signal=False, stop_event=stop), 30)
            return attempts

    assert asyncio.run(scenario()) == [1, 1]
