"""The asyncio client: the same calls as the sync one (signatures checked
here), and the async worker helpers against a real server."""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from typing import Any, Coroutine, Set, TypeVar

import pytest
from conftest import Server

import delayd

T = TypeVar("T")


@pytest.mark.parametrize(
    "sync_cls, async_cls", [(delayd.Client, delayd.AsyncClient), (delayd.Queue, delayd.AsyncQueue)]
)
def test_async_api_mirrors_the_sync_one(sync_cls: type, async_cls: type) -> None:
    def public(cls: type) -> Set[str]:
        return {n for n, f in vars(cls).items() if callable(f) and not n.startswith("_")}

    renamed = {"close": "aclose"}
    assert {renamed.get(n, n) for n in public(sync_cls)} == public(async_cls)
    for name in public(sync_cls):
        s, a = getattr(sync_cls, name), getattr(async_cls, renamed.get(name, name))
        assert list(inspect.signature(s).parameters) == list(inspect.signature(a).parameters), name
        sync_only = name in ("queue", "consume")
        assert inspect.iscoroutinefunction(a) != sync_only, name


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_async_calls(server: Server) -> None:
    async def scenario() -> None:
        async with delayd.AsyncClient(server.url) as client:
            q = client.queue(f"async/{uuid.uuid4().hex[:8]}")
            assert (await client.health())["status"] == "ok"
            res = await q.enqueue("hi", id="a", delay=30)
            assert res.created and not (await q.enqueue("hi", id="a")).created
            assert (await q.get("a")).state == "scheduled"
            assert (await q.reschedule("a", delay=0)).state == "ready"
            results = await q.enqueue_many(["b", delayd.EnqueueItem("c", id="bad id")])
            assert isinstance(results[1], delayd.InvalidArgument)
            leased = await q.lease(max=5, wait=1)
            assert sorted(m.text for m in leased) == ["b", "hi"]
            acks = await q.ack_many(leased)
            assert all(r.acked for r in acks)
            with pytest.raises(delayd.MessageNotFound):
                await q.cancel("a")
            assert (await q.info()).stats.ready == 0
            await q.delete()

    run(scenario())


def test_async_consume_and_nack_on_raise(server: Server) -> None:
    async def scenario() -> None:
        async with delayd.AsyncClient(server.url) as client:
            q = client.queue(f"async/{uuid.uuid4().hex[:8]}")
            await q.put(lease=1.5, retry=delayd.Retry(initial_ms=50, max_ms=50, multiplier=1.0))
            await q.enqueue_many(["slow", "boom"])
            seen = []
            with pytest.raises(RuntimeError):
                async with q.consume(max=1, wait=1, stop_on_signal=False) as consumer:
                    async for msg in consumer:
                        seen.append(msg.text)
                        if msg.text == "slow":
                            await asyncio.sleep(3.5)  # over 2 leases: extended meanwhile
                        else:
                            raise RuntimeError("boom")
            assert seen == ["slow", "boom"]
            [again] = await q.lease(wait=5)
            assert again.text == "boom" and again.attempt == 2  # nacked; "slow" was acked
            assert (await q.info()).stats.ready == 0

    run(scenario())


def test_async_work_concurrency_and_stop(server: Server) -> None:
    async def scenario() -> None:
        async with delayd.AsyncClient(server.url) as client:
            q = client.queue(f"async/{uuid.uuid4().hex[:8]}")
            await q.enqueue_many([str(i) for i in range(8)])
            stop = asyncio.Event()
            done = []

            async def handler(msg: delayd.AsyncDelivery) -> None:
                await asyncio.sleep(0.2)
                done.append(msg.text)
                if len(done) == 8:
                    stop.set()

            t0 = time.monotonic()
            await q.work(handler, concurrency=8, wait=20, stop_on_signal=False, stop_event=stop)
            # Concurrent, and the stop cancelled the other workers' 20 s long polls.
            assert time.monotonic() - t0 < 10
            assert sorted(done) == [str(i) for i in range(8)]
            stats = (await q.info()).stats
            assert (stats.ready, stats.leased) == (0, 0)

    run(scenario())
