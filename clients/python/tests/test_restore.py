"""The backup and restore procedure of docs/operations.md: stop the server,
copy its data directory, start a server on the copy, and every message is
there (scheduled ones still scheduled, dead ones still dead)."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import start_server

import delayd


def test_a_copied_data_directory_restores_everything(tmp_path: Path) -> None:
    original = start_server(tmp_path / "data", tmp_path / "a.log")
    with delayd.Client(original.url) as c:
        q = c.queue("orders")
        q.put(max_attempts=1)
        q.enqueue("later", id="later", delay=3600)
        q.enqueue(b"\xffnow", id="now")
        q.enqueue("dies", id="dies", priority=0)
        [dying] = q.lease()
        q.nack(dying.id, dying.lease_id)
    assert original.stop() == 0

    shutil.copytree(tmp_path / "data", tmp_path / "restored")
    restored = start_server(tmp_path / "restored", tmp_path / "b.log")
    try:
        with delayd.Client(restored.url) as c:
            q = c.queue("orders")
            assert q.info().config.max_attempts == 1
            assert q.get("later").state == "scheduled"
            assert q.get("now").payload == b"\xffnow" and q.get("now").state == "ready"
            assert [m.id for m in q.dead()] == ["dies"]
            # and the restored server takes new writes
            assert q.enqueue("after", id="after").created
    finally:
        assert restored.stop() == 0
