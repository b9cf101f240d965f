"""Retention (``retain_ms``) against a real server: the queue setting, an
acked and a cancelled message read back as retained (state, ``ended_at``,
no payload), their ids taken, every other call seeing them as absent."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid

import pytest
from conftest import Server

import delayd

DAY = dt.timedelta(days=1)


def test_put_sends_retain_ms_only_when_given() -> None:
    from delayd import _ops

    assert _ops.put_queue("q").body == {}
    assert _ops.put_queue("q", retain=DAY).body == {"retain_ms": 86_400_000}
    assert _ops.put_queue("q", retain=0).body == {"retain_ms": 0}
    with pytest.raises(ValueError):
        _ops.put_queue("q", retain=-1)


def test_retained_messages(queue: delayd.Queue) -> None:
    assert queue.put(retain=DAY).config.retain_ms == 86_400_000
    assert queue.put(max_attempts=3).config.retain_ms == 86_400_000, "kept by a put without it"

    first = queue.enqueue("secret", id="a", priority=7, headers={"h": "v"})
    before = int(time.time() * 1000)
    (leased,) = queue.lease(max=1)
    queue.ack(leased.id, leased.lease_id)
    acked = queue.get("a")
    assert (acked.state, acked.ended) == ("acked", True)
    assert acked.ended_at is not None and acked.ended_at >= before - 1000
    assert acked.payload == b""
    assert (acked.seq, acked.attempts, acked.priority, acked.headers) == (first.seq, 1, 7, {"h": "v"})

    queue.enqueue("x", id="c", delay=60)
    queue.cancel("c")
    cancelled = queue.get("c")
    assert (cancelled.state, cancelled.ended) == ("cancelled", True)
    assert cancelled.ended_at is not None

    # Not counted, not listed, never delivered; the id is a duplicate.
    stats = queue.info().stats
    assert (stats.scheduled, stats.ready, stats.leased, stats.dead) == (0, 0, 0, 0)
    assert queue.messages("ready") == []
    with pytest.raises(delayd.InvalidArgument, match="state"):
        queue.messages("acked")
    assert queue.lease(max=10) == []
    again = queue.enqueue("new", id="a")
    assert (again.created, again.seq) == (False, first.seq)

    # Every other call: absent.
    with pytest.raises(delayd.MessageNotFound):
        queue.cancel("a")
    with pytest.raises(delayd.MessageNotFound):
        queue.ack("a", leased.lease_id)
    with pytest.raises(delayd.MessageNotFound):
        queue.reschedule("a", priority=1)
    assert queue.get("a").state == "acked"
    queue.delete()


def test_retain_ms_above_30_days_is_refused(queue: delayd.Queue) -> None:
    queue.put(retain=60)
    with pytest.raises(delayd.InvalidArgument, match="retain_ms"):
        queue.put(retain=dt.timedelta(days=31))
    assert queue.info().config.retain_ms == 60_000, "unchanged"
    live = queue.enqueue("p", id="m")
    got = queue.get(live.id)
    assert (got.state, got.ended, got.ended_at) == ("ready", False, None)
    queue.delete()


def test_async_retain(server: Server) -> None:
    async def scenario() -> None:
        async with delayd.AsyncClient(server.url) as client:
            q = client.queue(f"async/{uuid.uuid4().hex[:8]}")
            assert (await q.put(retain=DAY)).config.retain_ms == 86_400_000
            await q.enqueue("x", id="c", delay=60)
            await q.cancel("c")
            got = await q.get("c")
            assert (got.state, got.ended, got.payload) == ("cancelled", True, b"")
            await q.delete()

    asyncio.run(scenario())
