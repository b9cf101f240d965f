"""Push verification: the signature rules as unit tests, and a real push
from delayd to the WSGI example receiver."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Tuple
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import wsgi_receiver  # examples/ is on pytest's pythonpath (pyproject.toml)

import delayd
from delayd.push import SignatureError, sign, verify

Headers = Dict[str, str]


def headers(ts: int, body: bytes, secret: str = "k") -> Headers:
    return {
        "Delayd-Signature": sign(secret, ts, body),
        "delayd-timestamp": str(ts),
        "delayd-id": "m",
        "delayd-queue": "q",
        "delayd-attempt": "2",
        "delayd-deliver-at": "1000",
    }


def test_valid_signature() -> None:
    now = 1_700_000_000
    got = verify("k", headers(now, b"body"), b"body", now=now + 10)
    assert (got.id, got.queue, got.attempt, got.deliver_at, got.text) == ("m", "q", 2, 1000, "body")


def test_signature_is_hmac_sha256_of_timestamp_dot_body() -> None:
    import hashlib
    import hmac

    assert sign("k", 1, b"x") == "v1=" + hmac.new(b"k", b"1.x", hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    "mutate",
    [
        lambda h, b: (dict(h, **{"Delayd-Signature": sign("other", 1_700_000_000, b)}), b),
        lambda h, b: (h, b + b"!"),
        lambda h, b: ({k: v for k, v in h.items() if k != "Delayd-Signature"}, b),
        lambda h, b: (dict(h, **{"delayd-timestamp": "soon"}), b),
    ],
)
def test_tampered_requests_are_refused(mutate: Callable[[Headers, bytes], Tuple[Headers, bytes]]) -> None:
    h, b = mutate(headers(1_700_000_000, b"body"), b"body")
    with pytest.raises(SignatureError):
        verify("k", h, b, now=1_700_000_000)


def test_timestamp_tolerance() -> None:
    h = headers(1_700_000_000, b"x")
    verify("k", h, b"x", now=1_700_000_000 + 299)
    with pytest.raises(SignatureError, match="tolerance"):
        verify("k", h, b"x", now=1_700_000_000 + 301)
    with pytest.raises(SignatureError, match="tolerance"):
        verify("k", h, b"x", now=1_700_000_000 - 301)


def test_asgi_style_byte_pairs() -> None:
    h = [(k.lower().encode(), v.encode()) for k, v in headers(5, b"x").items()]
    assert verify("k", h, b"x", now=5).id == "m"


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_real_push_reaches_the_wsgi_example(queue: delayd.Queue) -> None:
    got: List[delayd.PushDelivery] = []
    app = wsgi_receiver.make_app("s3cret", got.append)
    wrong = wsgi_receiver.make_app("not-the-secret", got.append)
    httpd = make_server("127.0.0.1", 0, app, handler_class=_Quiet)
    bad = make_server("127.0.0.1", 0, wrong, handler_class=_Quiet)
    for srv in (httpd, bad):
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_port}/hook"
        queue.put(push=delayd.PushConfig(url, secret="s3cret"))
        queue.enqueue("pushed", id="p1", headers={"x-tenant": "t1"})
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [d.id for d in got] == ["p1"] and got[0].text == "pushed"
        assert got[0].headers["x-tenant"] == "t1" and got[0].queue == queue.name
        # Acked by the 204.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                queue.get("p1")
            except delayd.MessageNotFound:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the 2xx answer did not ack the message")
        # A receiver with another secret answers 401: delayd retries, here
        # up to death. (Another queue: a changed push target takes effect
        # at the push dispatcher's next discovery, up to 1 s later.)
        other = queue.client.queue(queue.name + "-bad")
        bad_url = f"http://127.0.0.1:{bad.server_port}/hook"
        other.put(max_attempts=1, push=delayd.PushConfig(bad_url, secret="s3cret"))
        other.enqueue("refused", id="p2")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and other.get("p2").state != "dead":
            time.sleep(0.05)
        assert other.get("p2").state == "dead" and len(got) == 1
    finally:
        httpd.shutdown()
        bad.shutdown()
