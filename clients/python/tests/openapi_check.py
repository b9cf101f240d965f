"""Comparing the client's route table (``delayd.routes.ROUTES``) with an
OpenAPI document: operations, query parameters and request-body fields,
nested objects included."""

from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

from delayd.routes import ROUTES, Route

METHODS = ("get", "put", "post", "delete", "patch")


def operations(doc: Dict[str, Any]) -> Dict[Tuple[str, str], Dict[str, Any]]:
    return {
        (method.upper(), path): op
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def resolve(doc: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = doc["components"]["schemas"][name]
    return schema


def properties(doc: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
    """Every property an object schema allows, through ``allOf``/``oneOf``/
    ``anyOf``, a nullable wrapper and array items."""
    schema = resolve(doc, schema)
    props: Dict[str, Any] = {}
    if schema.get("type") == "array" or "items" in schema:
        return properties(doc, schema.get("items", {}))
    for key in ("allOf", "oneOf", "anyOf"):
        for part in schema.get(key, []):
            props.update(properties(doc, part))
    props.update(schema.get("properties", {}))
    return props


def body_schema(op: Dict[str, Any]) -> Dict[str, Any]:
    schema: Dict[str, Any] = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    return schema


def field_problems(doc: Dict[str, Any], name: str, route: Route, op: Dict[str, Any]) -> List[str]:
    """Fields the client sends that the document lacks, and document
    fields the client cannot send."""
    problems = []
    query = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
    if query != set(route.query):
        problems.append(f"{name}: query {sorted(route.query)} != document {sorted(query)}")
    props = properties(doc, body_schema(op))
    if set(props) != set(route.fields):
        problems.append(f"{name}: body fields {sorted(route.fields)} != document {sorted(props)}")
    for field, sub in route.nested.items():
        if field not in props:
            continue
        nested = set(properties(doc, props[field]))
        if nested != set(sub):
            problems.append(f"{name}: {field}.{{{sorted(sub)}}} != document {sorted(nested)}")
    return problems


def client_routes() -> Dict[Tuple[str, str], str]:
    return {(r.method, r.path): name for name, r in ROUTES.items()}


def uncovered(doc: Dict[str, Any]) -> Set[Tuple[str, str]]:
    """Operations of the document the client has no route for."""
    return set(operations(doc)) - set(client_routes())
