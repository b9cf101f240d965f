"""Fixtures: a real ``delayd serve`` per test session, started from the
binary in ``DELAYD_BIN`` (default ``target/debug/delayd`` of the repository,
the one ``cargo build`` and ``cargo test`` make), on a free port with a
temporary data directory and the beanstalkd listener off.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import httpx
import pytest

import delayd

REPO = Path(__file__).resolve().parents[3]


def delayd_bin() -> str:
    path = os.environ.get("DELAYD_BIN") or str(REPO / "target" / "debug" / "delayd")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no delayd binary at {path}: run `cargo build` or set DELAYD_BIN")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    data: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=15)


def start_server(data: Path, log: Path, extra: Optional[List[str]] = None, scheme: str = "http") -> Server:
    """Starts ``delayd serve`` and waits until it answers ``/readyz``
    (``scheme="https"`` when ``extra`` has ``--tls-cert``/``--tls-key``)."""
    for _ in range(3):  # a free port can be taken between probe and bind
        port = free_port()
        args = [delayd_bin(), "serve", "--http", f"127.0.0.1:{port}", "--beanstalk", "off"]
        args += ["--data", str(data), "--disk-reserve", "0"] + (extra or [])
        out = open(log, "ab")
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        url = f"{scheme}://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(url + "/readyz", timeout=1, verify=False).status_code == 200:
                    return Server(url, data, proc, log)
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    pytest.fail(f"delayd serve did not start; log:\n{log.read_text(errors='replace')[-2000:]}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("delayd")
    srv = start_server(base / "data", base / "serve.log", ["--push-allow", "127.0.0.1"])
    yield srv
    assert srv.stop() == 0, "delayd serve did not exit 0 on SIGTERM"


@pytest.fixture
def client(server: Server) -> Iterator[delayd.Client]:
    with delayd.Client(server.url) as c:
        yield c


@pytest.fixture
def queue(client: delayd.Client) -> delayd.Queue:
    """A fresh queue per test (names with `/` test the path encoding)."""
    return client.queue(f"test/{uuid.uuid4().hex[:12]}")
