"""The sync client against a real server: every queue, message, consuming
and dead-letter call, and the errors as exceptions."""

from __future__ import annotations

import datetime as dt
import inspect
import re
import time
from pathlib import Path

import pytest

import delayd
from delayd import EnqueueItem


def test_health_ready_metrics_openapi(client: delayd.Client) -> None:
    assert client.health() == {"status": "ok"}
    assert client.ready() == {"status": "ready"}
    assert "delayd" in client.metrics()
    assert client.openapi()["openapi"].startswith("3.")


def test_put_sends_push_and_flow_only_when_given() -> None:
    from delayd import _ops

    assert _ops.put_queue("q").body == {}
    assert _ops.put_queue("q", push=delayd.UNSET, flow=delayd.UNSET).body == {}
    assert _ops.put_queue("q", push=None, flow=None).body == {"push": None, "flow": None}
    body = _ops.put_queue("q", push=delayd.PushConfig("http://h/x"), flow=delayd.Flow(key_concurrency=1)).body
    assert body is not None and body["push"]["url"] == "http://h/x" and body["flow"]["key_concurrency"] == 1
    assert repr(delayd.UNSET) == "delayd.UNSET"


@pytest.mark.parametrize("cls", [delayd.Client, delayd.Queue, delayd.AsyncClient, delayd.AsyncQueue])
def test_public_signatures_name_no_private_types(cls: type) -> None:
    """What a user sees in a signature is importable from ``delayd``: no
    ``_module._NAME`` annotations, no anonymous ``object()`` defaults."""
    for name, method in vars(cls).items():
        if name.startswith("_") or not callable(method):
            continue
        for param in inspect.signature(method).parameters.values():
            where = f"{cls.__name__}.{name}({param.name})"
            if param.annotation is not inspect.Parameter.empty:
                assert not re.search(r"(^|[.\[ ])_[A-Za-z]", str(param.annotation)), where
            assert not repr(param.default).startswith("<object"), where


def test_queue_lifecycle(queue: delayd.Queue, client: delayd.Client) -> None:
    with pytest.raises(delayd.QueueNotFound) as err:
        queue.info()
    assert (err.value.code, err.value.status) == ("queue_not_found", 404)
    created = queue.put(lease=2.5, max_attempts=3, retry=delayd.Retry(500, 10_000, 3.0))
    assert created.config.lease_ms == 2500
    assert created.config.retry == delayd.Retry(500, 10_000, 3.0)
    # PUT merges: max_attempts alone keeps the lease.
    assert queue.put(max_attempts=5).config.lease_ms == 2500
    assert queue.name in [q.name for q in client.queues()]
    assert queue.pause().paused and not queue.resume().paused
    push = queue.put(push=delayd.PushConfig("http://127.0.0.1:9/hook", secret="s3"))
    assert push.config.push is not None and push.config.push.secret_set
    # UNSET (the default) leaves push as it is; None removes it.
    assert queue.put(max_attempts=4, push=delayd.UNSET).config.push is not None
    assert queue.put(push=None).config.push is None
    queue.delete()
    with pytest.raises(delayd.QueueNotFound):
        queue.delete()


def test_enqueue_get_cancel(queue: delayd.Queue) -> None:
    first = queue.enqueue("hello", id="m1", delay=60, priority=5, headers={"x-k": "v"})
    assert first.created and first.id == "m1"
    again = queue.enqueue("other", id="m1")
    assert not again.created and again.seq == first.seq
    msg = queue.get("m1")
    assert (msg.state, msg.text, msg.priority, msg.headers) == ("scheduled", "hello", 5, {"x-k": "v"})
    assert msg.deliver_at - msg.enqueued_at >= 59_000
    binary = queue.enqueue(b"\xff\x00\x01")
    assert queue.get(binary.id).payload == b"\xff\x00\x01"
    queue.cancel("m1")
    with pytest.raises(delayd.MessageNotFound):
        queue.get("m1")
    with pytest.raises(delayd.MessageNotFound):
        queue.cancel("m1")


def test_deliver_at_and_reschedule(queue: delayd.Queue) -> None:
    at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    res = queue.enqueue("later", deliver_at=at)
    assert abs(res.deliver_at - int(at.timestamp() * 1000)) <= 1
    moved = queue.reschedule(res.id, delay=0, priority=7)
    assert moved.state == "ready" and moved.priority == 7
    [leased] = queue.lease(max=1)
    with pytest.raises(delayd.InvalidState):
        queue.reschedule(leased.id, delay=10)
    with pytest.raises(ValueError):
        queue.enqueue("x", delay=1, deliver_at=at)


def test_invalid_argument_names_the_problem(queue: delayd.Queue) -> None:
    with pytest.raises(delayd.InvalidArgument) as err:
        queue.enqueue("x", id="not valid")
    assert err.value.status == 400 and "id" in err.value.message
    with pytest.raises(delayd.InvalidArgument):
        queue.enqueue("x", headers={"delayd-id": "spoof"})


def test_batch_enqueue_one_bad_item(queue: delayd.Queue) -> None:
    results = queue.enqueue_many(["a", EnqueueItem(b"\x00", id="b"), EnqueueItem("c", id="bad id")])
    assert isinstance(results[0], delayd.EnqueueResult) and results[0].created
    assert isinstance(results[1], delayd.EnqueueResult) and results[1].id == "b"
    assert isinstance(results[2], delayd.InvalidArgument)
    assert queue.info().stats.ready == 2


def test_lease_ack_nack_extend(queue: delayd.Queue) -> None:
    queue.put(retry=delayd.Retry(initial_ms=100, max_ms=100, multiplier=1.0))
    queue.enqueue("job", id="j")
    assert queue.lease(max=5, wait=0) != []
    assert queue.lease(max=5, wait=0.2) == []  # waited, nothing more
    [msg] = queue.messages("leased")
    queue.enqueue("job2", id="j2")
    [second] = queue.lease()
    assert second.attempt == 1 and second.text == "job2"
    until = queue.extend(second.id, second.lease_id, lease=120)
    assert until >= second.lease_until
    with pytest.raises(delayd.LeaseMismatch) as err:
        queue.ack(second.id, "0" * 32)
    assert err.value.status == 409
    queue.nack(second.id, second.lease_id, delay=0)
    [again] = queue.lease(wait=5)
    assert again.id == "j2" and again.attempt == 2
    queue.ack(again.id, again.lease_id)
    with pytest.raises(delayd.MessageNotFound):
        queue.ack(again.id, again.lease_id)
    assert msg.id == "j"


def test_nack_error_is_the_last_error(queue: delayd.Queue) -> None:
    queue.enqueue("job", id="e")
    [msg] = queue.lease()
    assert queue.get("e").last_error is None
    with pytest.raises(delayd.InvalidArgument) as err:
        queue.nack(msg.id, msg.lease_id, delay=0, error="x" * 1025)
    assert "error" in str(err.value)
    queue.nack(msg.id, msg.lease_id, delay=0, error="billing answered 504")
    got = queue.get("e")
    assert (got.last_error, got.ended_at) == ("billing answered 504", None)


def test_batch_ack(queue: delayd.Queue) -> None:
    queue.enqueue_many(["1", "2", "3"])
    leased = queue.lease(max=3)
    results = queue.ack_many(leased[:2] + [(leased[2].id, "0" * 32), ("gone", "0" * 32)])
    assert [r.acked for r in results] == [True, True, False, False]
    assert isinstance(results[2].error, delayd.LeaseMismatch)
    assert isinstance(results[3].error, delayd.MessageNotFound)


def test_dead_letters_and_redrive(queue: delayd.Queue) -> None:
    queue.put(max_attempts=1)
    for i in range(3):
        queue.enqueue(f"p{i}", id=f"d{i}")
    for leased in queue.lease(max=3):
        queue.nack(leased.id, leased.lease_id)
    dead = queue.dead()
    assert [m.id for m in dead] == ["d0", "d1", "d2"] or sorted(m.id for m in dead) == ["d0", "d1", "d2"]
    assert all(m.state == "dead" and m.died_at for m in dead)
    page = queue.dead(limit=1, after=dead[0].id)
    assert [m.id for m in page] == [dead[1].id]
    assert queue.redrive([dead[0].id, "not-dead"]) == 1
    assert queue.redrive() == 2
    assert queue.info().stats.ready == 3 and queue.get("d1").attempts == 0


def test_listing_and_histogram(queue: delayd.Queue) -> None:
    now = int(time.time() * 1000)
    for i in range(3):
        queue.enqueue(str(i), deliver_at=now + 60_000 + i)
    assert len(queue.messages("scheduled", limit=2)) == 2
    hist = queue.histogram(start=now, end=now + 120_000, buckets=2)
    assert hist.counts == [0, 3] and not hist.truncated
    with pytest.raises(delayd.InvalidArgument):
        queue.messages("bogus")


def test_names_that_need_encoding(client: delayd.Client) -> None:
    q = client.queue("a/b;c$(d)+e.f")
    q.enqueue("x", id="id:with:colons")
    assert q.get("id:with:colons").queue == "a/b;c$(d)+e.f"
    q.delete()


def test_token_auth(tmp_path: Path) -> None:
    from conftest import start_server

    srv = start_server(tmp_path / "data", tmp_path / "log", ["--token", "s3cret"])
    try:
        with delayd.Client(srv.url) as anon:
            assert anon.health()["status"] == "ok"  # stays open
            with pytest.raises(delayd.Unauthorized) as err:
                anon.queues()
            assert err.value.status == 401
        with delayd.Client(srv.url, token="s3cret") as authed:
            assert authed.queues() == []
    finally:
        assert srv.stop() == 0


def test_scoped_token_without_the_scope_is_forbidden(tmp_path: Path) -> None:
    import hashlib

    from conftest import start_server

    secret = "publisher-secret"
    digest = hashlib.sha256(secret.encode()).hexdigest()
    tokens = tmp_path / "tokens.toml"
    tokens.write_text(f'[[token]]\nname = "orders"\nsha256 = "{digest}"\nscopes = ["publish:orders"]\n')
    srv = start_server(tmp_path / "data", tmp_path / "log", ["--token-file", str(tokens)])
    try:
        with delayd.Client(srv.url, token=secret) as scoped:
            scoped.queue("orders").enqueue("x")
            with pytest.raises(delayd.Forbidden) as err:
                scoped.queue("billing").enqueue("x")
            assert err.value.status == 403
            assert "publish" in err.value.message and '"billing"' in err.value.message
            assert scoped.whoami() == {"name": "orders", "scopes": ["publish:orders"], "auth": True}
    finally:
        assert srv.stop() == 0


def test_transport_error_when_nothing_listens() -> None:
    from conftest import free_port

    retry = delayd.RetryPolicy(attempts=2, initial_backoff=0.01)
    with delayd.Client(f"http://127.0.0.1:{free_port()}", retry=retry) as c:
        with pytest.raises(delayd.TransportError):
            c.health()
