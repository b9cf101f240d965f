"""Retry rules, with a scripted transport (no server): what is retried and
what is not."""

from __future__ import annotations

from typing import List

import httpx
import pytest

import delayd

FAST = delayd.RetryPolicy(attempts=3, initial_backoff=0.001, max_backoff=0.002)


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


def ok_enqueue() -> httpx.Response:
    return httpx.Response(201, json={"id": "a", "seq": 1, "deliver_at": 5, "created": True})


def unavailable() -> httpx.Response:
    return httpx.Response(503, json={"error": {"code": "unavailable", "message": "shutting down"}})


def test_503_is_retried_even_without_id() -> None:
    seen: List[httpx.Request] = []
    q = scripted([unavailable(), ok_enqueue()], seen).queue("q")
    assert q.enqueue("x").created and len(seen) == 2


def test_read_error_retried_only_when_idempotent() -> None:
    seen: List[httpx.Request] = []
    q = scripted([httpx.ReadError("reset"), ok_enqueue()], seen).queue("q")
    assert q.enqueue("x", id="a").created and len(seen) == 2
    seen.clear()
    q = scripted([httpx.ReadError("reset"), ok_enqueue()], seen).queue("q")
    with pytest.raises(delayd.TransportError):
        q.enqueue("x")  # without an id a repeat could enqueue twice
    assert len(seen) == 1


def test_connect_error_always_retried_and_gives_up() -> None:
    seen: List[httpx.Request] = []
    q = scripted([httpx.ConnectError("refused")] * 3, seen).queue("q")
    with pytest.raises(delayd.TransportError):
        q.lease()
    assert len(seen) == 3


def test_errors_are_not_retried_and_carry_the_code() -> None:
    seen: List[httpx.Request] = []
    body = {"error": {"code": "lease_mismatch", "message": "superseded"}}
    q = scripted([httpx.Response(409, json=body)], seen).queue("q")
    with pytest.raises(delayd.LeaseMismatch) as err:
        q.ack("a", "l")
    assert (err.value.code, err.value.status, err.value.message) == ("lease_mismatch", 409, "superseded")
    assert len(seen) == 1


def test_unknown_code_is_a_plain_delayd_error() -> None:
    body = {"error": {"code": "brand_new", "message": "m"}}
    q = scripted([httpx.Response(418, json=body)], []).queue("q")
    with pytest.raises(delayd.DelaydError) as err:
        q.info()
    assert type(err.value) is delayd.DelaydError and err.value.code == "brand_new"


def test_request_shape() -> None:
    seen: List[httpx.Request] = []
    q = scripted([ok_enqueue()], seen).queue("a/b")
    q.enqueue(b"\xff", delay=1.5, headers={"h": "v"})
    assert seen[0].url.raw_path == b"/v1/queues/a%2Fb/messages"
    import json

    assert json.loads(seen[0].content) == {"payload_base64": "/w==", "delay_ms": 1500, "headers": {"h": "v"}}
