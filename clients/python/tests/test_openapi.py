"""The client cannot drift from the server: every operation of the served
``/openapi.json`` is in the client's route table, with the same query
parameters and request-body fields (both ways: nothing the client sends is
unknown to the server, nothing the server takes is unreachable from the
client)."""

from __future__ import annotations

from typing import Any, Dict

import pytest
from conftest import Server
from openapi_check import client_routes, field_problems, operations, uncovered

import delayd
from delayd.routes import ROUTES


@pytest.fixture(scope="module")
def doc(server: Server) -> Dict[str, Any]:
    with delayd.Client(server.url) as c:
        return c.openapi()


def test_every_document_operation_is_in_the_client(doc: Dict[str, Any]) -> None:
    assert uncovered(doc) == set()


def test_client_routes_exist_in_the_document(doc: Dict[str, Any]) -> None:
    served = operations(doc)
    missing = {k: n for k, n in client_routes().items() if k not in served}
    assert missing == {}


def test_fields_match_the_document(doc: Dict[str, Any]) -> None:
    served = operations(doc)
    problems = []
    for name, route in ROUTES.items():
        op = served.get((route.method, route.path))
        if op is not None:
            problems += field_problems(doc, name, route, op)
    assert problems == []


def test_the_check_catches_drift(doc: Dict[str, Any]) -> None:
    """The comparison above is not vacuous: a renamed field or a dropped
    route is reported."""
    from delayd.routes import Route

    route = ROUTES["enqueue"]
    op = operations(doc)[(route.method, route.path)]
    typo = Route(route.method, route.path, fields=tuple(f if f != "delay_ms" else "dealy_ms" for f in route.fields))
    assert any("dealy_ms" in p for p in field_problems(doc, "enqueue", typo, op))
    doc2 = dict(doc, paths=dict(doc["paths"], **{"/v1/new": {"get": {}}}))
    assert uncovered(doc2) == {("GET", "/v1/new")}
