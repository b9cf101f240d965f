"""A push receiver as a plain WSGI app (works under any WSGI server:
gunicorn, uWSGI, waitress, or ``python wsgi_receiver.py`` with the
standard library's wsgiref).

Configure the queue to push here with the same secret:

    client.queue("emails").put(push=delayd.PushConfig("http://127.0.0.1:8000/hook", secret=SECRET))

and start delayd with ``--push-allow 127.0.0.1``. A 2xx answer acks the
message; anything else makes delayd retry it with the queue's backoff.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterable, List, Tuple

from delayd.push import PushDelivery, SignatureError, verify, wsgi_headers

SECRET = os.environ.get("DELAYD_PUSH_SECRET", "change-me")

Environ = Dict[str, Any]
StartResponse = Callable[[str, List[Tuple[str, str]]], object]
App = Callable[[Environ, StartResponse], Iterable[bytes]]


def handle(delivery: PushDelivery) -> None:
    """Your work goes here; raising makes delayd retry."""
    print(f"{delivery.queue}/{delivery.id} attempt {delivery.attempt}: {delivery.text}")


def make_app(secret: str, on_delivery: Callable[[PushDelivery], object] = handle) -> App:
    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        try:
            delivery = verify(secret, wsgi_headers(environ), body)
        except SignatureError as err:
            start_response("401 Unauthorized", [("content-type", "text/plain")])
            return [str(err).encode()]
        try:
            on_delivery(delivery)
        except Exception:
            start_response("500 Internal Server Error", [("content-type", "text/plain")])
            return [b"failed; delayd will retry"]
        start_response("204 No Content", [])
        return []

    return app


app = make_app(SECRET)

if __name__ == "__main__":
    from wsgiref.simple_server import make_server

    with make_server("127.0.0.1", 8000, app) as httpd:
        print("listening on http://127.0.0.1:8000")
        httpd.serve_forever()
