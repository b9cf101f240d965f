"""``on_conflict`` (replace and debounce, api.md "Retention, replace and
debounce"): the request the client sends, what it refuses before sending,
its retry rule, the answer's ``replaced``/``after_lease``, and the whole
behaviour against a real server: a waiting message replaced, debounce's
cap, a leased message's successor (after an ack, a nack, a death), a
dead message refused, batches, and the asyncio client."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import List

import httpx
import pytest
from conftest import Server

import delayd
from delayd import EnqueueItem, EnqueueResult

FAST = delayd.RetryPolicy(attempts=3, initial_backoff=0.001, max_backoff=0.002)


def now_ms() -> int:
    return int(time.time() * 1000)


# ---- the request, without a server -----------------------------------------


def test_on_conflict_is_sent_only_when_given() -> None:
    assert "on_conflict" not in EnqueueItem("p", id="a").to_json()
    assert EnqueueItem("p", id="a", on_conflict="keep").to_json() == {"id": "a", "on_conflict": "keep", "payload": "p"}
    body = EnqueueItem("p", id="a", delay=600, on_conflict="debounce", debounce_max=3600).to_json()
    assert body == {
        "id": "a",
        "delay_ms": 600_000,
        "on_conflict": "debounce",
        "debounce_max_ms": 3_600_000,
        "payload": "p",
    }


def test_argument_mistakes_are_refused_before_sending() -> None:
    with pytest.raises(ValueError, match="debounce_max"):
        EnqueueItem("p", id="a", debounce_max=60).to_json()
    with pytest.raises(ValueError, match="debounce_max"):
        EnqueueItem("p", id="a", on_conflict="replace", debounce_max=60).to_json()
    for mode in ("replace", "debounce"):
        with pytest.raises(ValueError, match="needs an id"):
            EnqueueItem("p", on_conflict=mode).to_json()
    with pytest.raises(ValueError):
        EnqueueItem("p", id="a", on_conflict="debounce", debounce_max=-1).to_json()


def test_result_fields_default_to_false() -> None:
    plain = EnqueueResult.from_json({"id": "a", "seq": 1, "deliver_at": 5, "created": True})
    assert (plain.replaced, plain.after_lease) == (False, False)
    wire = {"id": "a", "seq": 1, "deliver_at": 5, "created": False, "replaced": True, "after_lease": True}
    assert (EnqueueResult.from_json(wire).replaced, EnqueueResult.from_json(wire).after_lease) == (True, True)


def scripted(answers: List[object], seen: List[httpx.Request]) -> delayd.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, httpx.Response)
        return answer

    http = httpx.Client(base_url="http://delayd.test", transport=httpx.MockTransport(handler))
    return delayd.Client(httpx_client=http, retry=FAST)


def test_a_replace_is_not_repeated_after_a_lost_answer() -> None:
    """With ``keep`` a repeat changes nothing; a repeated replace or
    debounce would move the due time (or enqueue the content again after
    the message ended), so only a request that surely did not arrive is
    sent again."""
    duplicate = {"id": "a", "seq": 1, "deliver_at": 5, "created": False}
    answer = dict(duplicate, replaced=True)
    seen: List[httpx.Request] = []
    q = scripted([httpx.ReadError("reset"), httpx.Response(200, json=duplicate)], seen).queue("q")
    assert not q.enqueue("x", id="a", on_conflict="keep").replaced and len(seen) == 2
    for mode in ("replace", "debounce"):
        seen.clear()
        q = scripted([httpx.ReadError("reset")], seen).queue("q")
        with pytest.raises(delayd.TransportError):
            q.enqueue("x", id="a", on_conflict=mode)
        assert len(seen) == 1
    seen.clear()
    q = scripted([httpx.ConnectError("refused"), httpx.Response(200, json=answer)], seen).queue("q")
    got = q.enqueue("x", id="a", on_conflict="replace", delay=10)
    assert (got.replaced, got.after_lease, len(seen)) == (True, False, 2)
    assert json.loads(seen[0].content) == {"id": "a", "delay_ms": 10_000, "on_conflict": "replace", "payload": "x"}
    seen.clear()
    batch = [EnqueueItem("x", id="a"), EnqueueItem("y", id="b", on_conflict="replace")]
    q = scripted([httpx.ReadError("reset")], seen).queue("q")
    with pytest.raises(delayd.TransportError):
        q.enqueue_many(batch)
    assert len(seen) == 1


# ---- against the server ----------------------------------------------------


def test_replace_a_waiting_message(queue: delayd.Queue) -> None:
    first = queue.enqueue("v1", id="r", delay=60, priority=9, headers={"v": "1"})
    assert first.created and not first.replaced
    before = now_ms()
    r = queue.enqueue("v2", id="r", delay=120, priority=3, headers={"v": "2"}, on_conflict="replace")
    assert (r.created, r.replaced, r.after_lease, r.seq) == (False, True, False, first.seq)
    assert before + 119_000 <= r.deliver_at <= now_ms() + 121_000
    msg = queue.get("r")
    assert (msg.state, msg.text, msg.priority, msg.headers) == ("scheduled", "v2", 3, {"v": "2"})
    assert (msg.seq, msg.deliver_at, msg.attempts) == (first.seq, r.deliver_at, 0)

    kept = queue.enqueue("v3", id="r", on_conflict="keep")
    assert (kept.created, kept.replaced, kept.deliver_at) == (False, False, r.deliver_at)
    assert queue.get("r").text == "v2", "keep changes nothing"

    # A replace due now makes it ready; an unknown id is simply created.
    now = queue.enqueue("v4", id="r", on_conflict="replace")
    assert now.replaced and queue.get("r").state == "ready"
    fresh = queue.enqueue("n", id="new", on_conflict="replace")
    assert (fresh.created, fresh.replaced) == (True, False)
    history = [(e.type, e.after_lease) for e in queue.events("r").events]
    assert history == [("enqueued", None), ("replaced", False), ("replaced", False)]
    queue.delete()


def test_debounce_moves_the_due_time_up_to_the_cap(queue: delayd.Queue) -> None:
    first = queue.enqueue("change 1", id="digest", delay=60, on_conflict="debounce", debounce_max=90)
    assert first.created
    enqueued_at = queue.get("digest").enqueued_at
    second = queue.enqueue("change 2", id="digest", delay=60, on_conflict="debounce", debounce_max=90)
    assert second.replaced and second.deliver_at >= first.deliver_at
    # Past the cap: due at enqueued_at + debounce_max, not later.
    third = queue.enqueue("change 3", id="digest", delay=600, on_conflict="debounce", debounce_max=90)
    assert (third.replaced, third.deliver_at, third.seq) == (True, enqueued_at + 90_000, first.seq)
    # Without debounce_max there is no cap.
    fourth = queue.enqueue("change 4", id="digest", delay=600, on_conflict="debounce")
    assert fourth.deliver_at >= enqueued_at + 599_000
    msg = queue.get("digest")
    assert (msg.text, msg.deliver_at, msg.enqueued_at) == ("change 4", fourth.deliver_at, enqueued_at)
    queue.delete()


def test_a_leased_message_gets_a_successor_enqueued_after_its_ack(queue: delayd.Queue) -> None:
    first = queue.enqueue("old", id="l")
    (leased,) = queue.lease(max=1)
    r = queue.enqueue("new", id="l", delay=60, on_conflict="replace")
    assert (r.created, r.replaced, r.after_lease, r.seq) == (False, True, True, first.seq)
    # Later requests overwrite the successor; the leased message is untouched.
    r2 = queue.enqueue("newer", id="l", delay=30, on_conflict="replace")
    assert r2.after_lease
    msg = queue.get("l")
    assert (msg.state, msg.text) == ("leased", "old")
    queue.ack(leased.id, leased.lease_id)
    after = queue.get("l")
    assert (after.text, after.state) == ("newer", "scheduled")
    assert after.seq > first.seq, "a new message, with its own seq"
    assert after.deliver_at == r2.deliver_at
    queue.delete()


def test_a_successor_after_a_retry_and_after_a_death(queue: delayd.Queue) -> None:
    queue.put(max_attempts=2)
    first = queue.enqueue("old", id="s")
    (leased,) = queue.lease(max=1)
    r = queue.enqueue("new", id="s", delay=60, on_conflict="replace", priority=4)
    assert r.after_lease
    queue.nack(leased.id, leased.lease_id, delay=1)
    msg = queue.get("s")
    # The successor's content, the later of the retry time and its due time.
    assert (msg.text, msg.priority, msg.seq, msg.attempts) == ("new", 4, first.seq, 1)
    assert msg.deliver_at == r.deliver_at

    # A death: the successor takes its place, attempts back to 0.
    queue.reschedule("s", delay=0)
    (again,) = queue.lease(max=1)
    assert again.attempt == 2
    queue.enqueue("after death", id="s", on_conflict="replace", delay=60)
    queue.nack(again.id, again.lease_id)
    msg = queue.get("s")
    assert (msg.state, msg.text, msg.attempts) == ("scheduled", "after death", 0)
    assert queue.dead() == []
    queue.delete()


def test_a_cancel_drops_the_successor(queue: delayd.Queue) -> None:
    queue.enqueue("old", id="c")
    (leased,) = queue.lease(max=1)
    assert queue.enqueue("new", id="c", on_conflict="debounce", delay=60).after_lease
    queue.cancel("c")
    with pytest.raises(delayd.MessageNotFound):
        queue.get("c")
    assert queue.lease(max=1) == []
    queue.delete()


def test_a_dead_message_is_not_replaced(queue: delayd.Queue) -> None:
    queue.enqueue("x", id="d", max_attempts=1)
    (leased,) = queue.lease(max=1)
    queue.nack(leased.id, leased.lease_id)
    assert queue.get("d").state == "dead"
    for mode in ("replace", "debounce"):
        with pytest.raises(delayd.InvalidState) as err:
            queue.enqueue("y", id="d", on_conflict=mode)
        assert (err.value.code, err.value.status) == ("invalid_state", 409)
    assert not queue.enqueue("y", id="d").created, "keep: a duplicate, as before"
    assert queue.get("d").text == "x"
    queue.delete()


def test_the_server_names_the_field_it_refuses(queue: delayd.Queue) -> None:
    with pytest.raises(delayd.InvalidArgument, match="on_conflict"):
        queue.enqueue("x", id="a", on_conflict="overwrite")  # type: ignore[arg-type]


def test_batch_items_replace_one_by_one(queue: delayd.Queue) -> None:
    queue.enqueue("a1", id="a", delay=60)
    queue.enqueue("d1", id="d", max_attempts=1)
    (leased,) = queue.lease(max=1)
    queue.nack(leased.id, leased.lease_id)
    results = queue.enqueue_many(
        [
            EnqueueItem("a2", id="a", delay=120, on_conflict="replace"),
            EnqueueItem("b1", id="b", on_conflict="debounce", delay=60, debounce_max=120),
            EnqueueItem("d2", id="d", on_conflict="replace"),
            EnqueueItem("a3", id="a", on_conflict="keep"),
        ]
    )
    a2, b1, d2, a3 = results
    assert isinstance(a2, EnqueueResult) and (a2.created, a2.replaced) == (False, True)
    assert isinstance(b1, EnqueueResult) and (b1.created, b1.replaced) == (True, False)
    assert isinstance(d2, delayd.InvalidState)
    assert isinstance(a3, EnqueueResult) and (a3.created, a3.replaced) == (False, False)
    assert queue.get("a").text == "a2"
    queue.delete()


def test_async_replace(server: Server) -> None:
    async def scenario() -> None:
        async with delayd.AsyncClient(server.url) as client:
            q = client.queue(f"async/{uuid.uuid4().hex[:8]}")
            await q.enqueue("old", id="x")
            (leased,) = await q.lease(max=1)
            r = await q.enqueue("new", id="x", on_conflict="debounce", delay=60, debounce_max=120)
            assert (r.replaced, r.after_lease) == (True, True)
            await q.ack(leased.id, leased.lease_id)
            assert (await q.get("x")).text == "new"
            await q.delete()

    asyncio.run(scenario())
