"""A client generated from the served ``/openapi.json`` with
openapi-python-client has every operation of the document, each with its
JSON response models, and works against the server (the document's payload
description must stay in a form common generators understand)."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
from conftest import Server
from openapi_check import operations

import delayd


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_openapi_python_client_generates_every_operation(server: Server, tmp_path: Path) -> None:
    generator = shutil.which("openapi-python-client")
    if generator is None:
        pytest.fail("openapi-python-client is not installed (scripts/test-python installs it)")
    with delayd.Client(server.url) as c:
        doc: Dict[str, Any] = c.openapi()
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(doc))
    out = tmp_path / "delayd_generated"
    run = subprocess.run(
        [generator, "generate", "--path", str(spec), "--output-path", str(out), "--meta", "none"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    modules = {p.stem: p.read_text() for p in (out / "api").rglob("*.py") if p.stem != "__init__"}
    missing, no_model = [], []
    for (method, path), op in operations(doc).items():
        name = snake(op["operationId"])
        if name not in modules:
            missing.append(f"{method} {path} ({name})")
            continue
        for status, resp in op["responses"].items():
            ref = resp.get("content", {}).get("application/json", {}).get("schema", {}).get("$ref")
            if status.startswith("2") and ref:
                model = ref.rsplit("/", 1)[-1]
                if f"response_{status} = {model}.from_dict(" not in modules[name]:
                    no_model.append(f"{name} {status} {model}")
    assert missing == [] and no_model == []
    use_the_generated_client(out, server.url)


def use_the_generated_client(package: Path, url: str) -> None:
    """The generated models carry the payload both ways: an enqueue with
    ``payload_base64`` and the message read back with its payload."""
    sys.path.insert(0, str(package.parent))
    try:
        gen = importlib.import_module(package.name)
        enqueue = importlib.import_module(f"{package.name}.api.messages.enqueue")
        get_message = importlib.import_module(f"{package.name}.api.messages.get_message")
        models = importlib.import_module(f"{package.name}.models")
        with gen.Client(base_url=url) as client:
            body = models.EnqueueBody(payload_base64="/wA=", id="generated", delay_ms=60_000)
            created = enqueue.sync(queue="generated", client=client, body=body)
            assert isinstance(created, models.EnqueueResult) and created.id == "generated"
            msg = get_message.sync(queue="generated", id="generated", client=client)
            assert isinstance(msg, models.MessageDto)
            assert (msg.state, msg.payload_base64) == ("scheduled", "/wA=")
    finally:
        sys.path.remove(str(package.parent))
