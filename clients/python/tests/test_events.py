"""Message history (``GET .../messages/{id}/events``) against a real
server: a message's events with their fields, read through the sync and
the asyncio client; an unknown id is ``MessageNotFound``; an event type a
newer server adds still reads."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid

import pytest
from conftest import Server

import delayd


def test_a_life_in_events(queue: delayd.Queue) -> None:
    queue.put(retain=dt.timedelta(days=1))
    before = int(time.time() * 1000)
    queue.enqueue("work", id="m")
    (first,) = queue.lease(max=1)
    queue.nack(first.id, first.lease_id, delay=0, error="disk full")
    (second,) = queue.lease(max=1, wait=5)
    queue.ack(second.id, second.lease_id)

    history = queue.events("m")
    assert history.dropped == 0
    types = [e.type for e in history.events]
    assert types == ["enqueued", "leased", "nacked", "leased", "acked"]
    assert [e.attempt for e in history.events] == [0, 1, 1, 2, 2]
    ats = [e.at for e in history.events]
    assert ats == sorted(ats) and ats[0] >= before - 1000
    leased, nacked = history.events[1], history.events[2]
    assert (leased.via, leased.lease_until) == ("http", first.lease_until)
    assert (nacked.delay_ms, nacked.error) == (0, "disk full")
    assert nacked.fields == {"delay_ms": 0, "error": "disk full"}
    assert history.events[0].fields == {}

    with pytest.raises(delayd.MessageNotFound):
        queue.events("nope")


def test_async_events(server: Server) -> None:
    async def main() -> delayd.History:
        async with delayd.AsyncClient(server.url) as client:
            q = client.queue(f"test/{uuid.uuid4().hex[:12]}")
            await q.enqueue("x", id="a", delay=60)
            await q.reschedule("a", delay=120)
            return await q.events("a")

    history = asyncio.run(main())
    assert [(e.type, e.attempt) for e in history.events] == [("enqueued", 0), ("rescheduled", 0)]


def test_event_types_a_newer_server_adds_still_read() -> None:
    event = delayd.Event.from_json({"at": 5, "type": "teleported", "attempt": 0, "to": "mars"})
    assert (event.type, event.fields) == ("teleported", {"to": "mars"})
    failed = delayd.Event.from_json(
        {"at": 1, "type": "push_failed", "attempt": 1, "status": None, "error": "timeout", "duration_ms": 9}
    )
    assert (failed.status, failed.error, failed.duration_ms) == (None, "timeout", 9)
    history = delayd.History.from_json({"events": [], "dropped": 3})
    assert (history.events, history.dropped) == ([], 3)
