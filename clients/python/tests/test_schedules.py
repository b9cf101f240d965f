"""Schedules through the client against a real server (their routes and
fields are checked against the served document with the others, in
test_openapi.py)."""

from __future__ import annotations

import time

import pytest

import delayd


def test_put_get_list_pause_resume_delete(queue: delayd.Queue) -> None:
    start = int(time.time() * 1000) + 3_600_000
    made = queue.put_schedule("b-hourly", "tick", cron="0 * * * *", tz="Europe/Paris", start_at=start)
    assert (made.id, made.queue, made.cron, made.tz) == ("b-hourly", queue.name, "0 * * * *", "Europe/Paris")
    assert not made.paused
    assert made.message.text == "tick" and made.fires == 0
    assert len(made.next_fires) == 5 and made.next_fire_at == made.next_fires[0] >= start
    gaps = [b - a for a, b in zip(made.next_fires, made.next_fires[1:])]  # noqa: B905 (3.9 has no strict=)
    assert gaps == [3_600_000] * 4
    # The same definition again changes nothing (a deploy may re-apply it).
    again = queue.put_schedule("b-hourly", "tick", cron="0 * * * *", tz="Europe/Paris", start_at=start)
    assert again.revision == made.revision
    changed = queue.put_schedule("b-hourly", "tock", cron="0 * * * *", tz="Europe/Paris", start_at=start)
    assert changed.revision > made.revision and changed.message.text == "tock"
    queue.put_schedule("a-every", b"\x00\xff", every=60, overlap="skip", catchup="all", jitter=0.5)
    assert [s.id for s in queue.schedules()] == ["a-every", "b-hourly"]
    got = queue.schedule("a-every")
    assert (got.every_ms, got.overlap, got.catchup, got.jitter_ms, got.message.payload) == (
        60_000,
        "skip",
        "all",
        500,
        b"\x00\xff",
    )
    paused = queue.pause_schedule("a-every")
    assert paused.paused
    assert not queue.resume_schedule("a-every").paused
    queue.delete_schedule("a-every")
    with pytest.raises(delayd.ScheduleNotFound) as err:
        queue.schedule("a-every")
    assert (err.value.code, err.value.status) == ("schedule_not_found", 404)
    with pytest.raises(delayd.ScheduleNotFound):
        queue.delete_schedule("a-every")


def test_trigger_enqueues_from_the_template(queue: delayd.Queue) -> None:
    queue.put_schedule("report", "make it", cron="@yearly", priority=3, headers={"x-kind": "report"})
    res = queue.trigger_schedule("report")
    assert res.created and res.id.startswith("report:manual:")
    msg = queue.get(res.id)
    assert (msg.text, msg.priority, msg.headers.get("x-kind")) == ("make it", 3, "report")
    assert queue.schedule("report").fires == 0
    # Without a payload each fire enqueues an empty one.
    queue.put_schedule("bare", cron="@yearly")
    assert queue.get(queue.trigger_schedule("bare").id).payload == b""


def test_an_every_schedule_fires(queue: delayd.Queue) -> None:
    sched = queue.put_schedule("tick", "t", every=1)
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline and queue.info().stats.ready < 2:
        time.sleep(0.1)
    msgs = queue.lease(max=10)
    assert len(msgs) >= 2
    for msg in msgs:
        at = int(msg.id.split(":")[1])
        assert msg.id == f"tick:{at}" and (at - sched.next_fires[0]) % 1000 == 0
        assert msg.headers["delayd-schedule"] == "tick" and msg.headers["delayd-scheduled-for"] == str(at)
    assert queue.schedule("tick").fires >= 2


def test_preview_and_invalid_definitions(client: delayd.Client, queue: delayd.Queue) -> None:
    fires = client.preview_schedule(every=2.5, start_at=1_000_000, count=3)
    assert fires == [1_000_000, 1_002_500, 1_005_000]
    hourly = client.preview_schedule(cron="0 * * * *", start_at=0, count=2)
    assert hourly == [0, 3_600_000]
    with pytest.raises(delayd.InvalidArgument) as err:
        queue.put_schedule("bad", "x", cron="not a cron")
    assert "cron" in err.value.message
    with pytest.raises(delayd.InvalidArgument):
        queue.put_schedule("bad", "x", every=0.5)
    with pytest.raises(delayd.InvalidArgument):
        client.preview_schedule(cron="* * * * *", every=60)
