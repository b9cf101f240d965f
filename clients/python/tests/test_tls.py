"""HTTPS with a private CA (``verify=`` a CA bundle) and the optional
HTTP/2 (``http2=True``, negotiated by ALPN), sync and async."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, Tuple

import pytest
from conftest import Server, start_server

import delayd


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tuple[Server, Path]]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the test certificate")
    base = tmp_path_factory.mktemp("tls")
    cert, key = base / "cert.pem", base / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=delayd test"]
        + ["-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
    )
    srv = start_server(base / "data", base / "log", ["--tls-cert", str(cert), "--tls-key", str(key)], "https")
    yield srv, cert
    assert srv.stop() == 0


def test_https_with_a_private_ca_and_http2(tls_server: Tuple[Server, Path]) -> None:
    srv, cert = tls_server
    with delayd.Client(srv.url, verify=str(cert), http2=True) as client:
        q = client.queue("tls")
        assert q.enqueue("over h2", id="h").created
        assert client._http.get("/healthz").http_version == "HTTP/2"
        assert q.get("h").text == "over h2"
    with delayd.Client(srv.url, verify=str(cert)) as h1:
        assert h1._http.get("/healthz").http_version == "HTTP/1.1"
    with delayd.Client(srv.url, retry=delayd.NO_RETRY) as untrusted:
        with pytest.raises(delayd.TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.health()


def test_async_http2(tls_server: Tuple[Server, Path]) -> None:
    srv, cert = tls_server

    async def scenario() -> None:
        async with delayd.AsyncClient(srv.url, verify=str(cert), http2=True) as client:
            await asyncio.gather(*(client.queue("tls-async").enqueue(str(i)) for i in range(20)))
            assert (await client.queue("tls-async").info()).stats.ready == 20
            assert (await client._http.get("/healthz")).http_version == "HTTP/2"

    asyncio.run(scenario())
