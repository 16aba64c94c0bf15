"""KubeApi's connection stack (adapters/kubernetes/pool.py `StackPool`) at its edges, against a
small HTTP/1.1 server on a local socket that numbers its connections: a connection is reused
only when its last response was read to the end; one that errors, is cut, is cancelled
mid-request or is closed early is closed, never reused; the stack keeps at most `max_idle`
connections; and `KubeApi.from_config` puts the pool under lightkube's SSL context and auth."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx2 as httpx
import pytest
import yaml
from lightkube.config.kubeconfig import KubeConfig

from runlane.adapters.kubernetes.api import KubeApi
from runlane.adapters.kubernetes.pool import StackPool
from runlane.errors import TemporaryExecutorError


@dataclass
class Server:
    """Answers `GET /ok` (a small JSON body, kept alive), `/slow` (once `release` is set),
    `/cut` (closes the connection with no answer), `/close` (answers `Connection: close`),
    `/hangup` (answers as if kept alive, then closes), `/big` (a body of 256 KiB). Records which connection served what, and which closed."""

    port: int = 0
    served: list[tuple[int, str]] = field(default_factory=list)
    closed: set[int] = field(default_factory=set)
    headers: list[dict[str, str]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    slow_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    accepted: int = 0
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        self.accepted += 1
        conn = self.accepted
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                path = lines[0].split()[1]
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                self.headers.append(headers)
                if int(headers.get("content-length", "0")):
                    await reader.readexactly(int(headers["content-length"]))
                self.served.append((conn, path))
                if path == "/cut":
                    return
                if path == "/slow":
                    self.slow_arrived.set()
                    await self.release.wait()
                body = b"x" * (256 * 1024) if path == "/big" else b'{"ok": true}'
                extra = "Connection: close\r\n" if path == "/close" else ""
                writer.write(
                    f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{extra}"
                    f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                if path in ("/close", "/hangup"):
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed.add(conn)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def connections(self) -> list[int]:
        return [conn for conn, _ in self.served]


async def until(predicate: Callable[[], bool]) -> None:
    """Until the server has seen it (a close on the client's side is a FIN away)."""
    for _ in range(400):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the server never saw it")


@contextlib.asynccontextmanager
async def serving(tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        server.release.set()
        listener.close()
        await listener.wait_closed()
        for writer in server.writers:
            writer.close()
        await until(lambda: len(server.closed) == server.accepted)  # every handler ended


@contextlib.asynccontextmanager
async def client_for(
    server: Server, *, max_idle: int = 4, keepalive_expiry: float | None = 5.0
) -> AsyncIterator[tuple[httpx.AsyncClient, StackPool]]:
    pool = StackPool(ssl_context=None, max_idle=max_idle, keepalive_expiry=keepalive_expiry)
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", transport=pool)
    try:
        yield client, pool
    finally:
        await client.aclose()


async def test_a_connection_read_to_the_end_is_reused_most_recent_first() -> None:
    async with serving() as server, client_for(server) as (client, pool):
        for _ in range(3):
            assert (await client.get("/ok")).json() == {"ok": True}
        assert server.connections() == [1, 1, 1]
        assert pool.opened == 1
        assert (pool.idle_count(), pool.in_use_count()) == (1, 0)
        # Two at once need two connections; then the one returned last is taken first.
        first = asyncio.create_task(client.get("/slow"))
        await server.slow_arrived.wait()
        await client.get("/ok")  # on connection 2 while 1 is busy with /slow
        server.release.set()
        await first
        assert pool.opened == 2
        await client.get("/ok")
        assert server.served[-1][0] == 1  # /slow's connection came back last: LIFO


async def test_a_connection_that_errors_is_closed_not_reused() -> None:
    async with serving() as server, client_for(server) as (client, pool):
        await client.get("/ok")
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get("/cut")  # connection 1: the server hangs up without an answer
        assert (pool.idle_count(), pool.in_use_count()) == (0, 0)
        assert (await client.get("/ok")).status_code == 200
        assert server.connections() == [1, 1, 2]
        assert pool.opened == 2


async def test_a_connection_the_server_closes_is_not_reused() -> None:
    async with serving() as server, client_for(server) as (client, pool):
        resp = await client.get("/close")  # answered with Connection: close
        assert resp.status_code == 200
        assert pool.idle_count() == 0
        await until(lambda: 1 in server.closed)
        await client.get("/ok")
        assert server.connections() == [1, 2]


async def test_an_idle_connection_the_server_closed_meanwhile_is_dropped_when_taken() -> None:
    async with serving() as server, client_for(server) as (client, pool):
        # Kept alive as far as the client knows; then the server ends it.
        await client.get("/hangup")
        assert pool.idle_count() == 1
        await until(lambda: 1 in server.closed)
        # Taken from the stack, found readable (the server's FIN): closed, and a fresh one opened.
        assert (await client.get("/ok")).status_code == 200
        assert pool.opened == 2
        assert server.connections() == [1, 2]


async def test_a_request_cancelled_on_the_wire_closes_its_connection() -> None:
    async with serving() as server, client_for(server) as (client, pool):
        await client.get("/ok")
        slow = asyncio.create_task(client.get("/slow"))
        await server.slow_arrived.wait()
        assert pool.in_use_count() == 1
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        # Its answer never came: the connection is closed, not put back mid-exchange.
        assert (pool.idle_count(), pool.in_use_count()) == (0, 0)
        await client.get("/ok")
        assert server.connections() == [1, 1, 2]
        assert pool.opened == 2


async def test_a_cancelled_request_gives_back_a_connection_already_read_to_the_end() -> None:
    async with serving() as server, client_for(server) as (client, pool):
        async with client.stream("GET", "/ok") as resp:
            await resp.aread()
            # Cancelled after the body was read (e.g. the caller's timeout fires as the
            # response is being closed): the connection is clean, so it is kept.
        assert (pool.idle_count(), pool.in_use_count()) == (1, 0)

        gate = asyncio.Event()

        async def read_then_wait() -> None:
            async with client.stream("GET", "/ok") as r:
                await r.aread()
                gate.set()
                await asyncio.Event().wait()  # cancelled here, inside the stream

        task = asyncio.create_task(read_then_wait())
        await gate.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (pool.idle_count(), pool.in_use_count()) == (1, 0)
        assert pool.opened == 1


async def test_a_response_closed_before_its_end_closes_its_connection() -> None:
    async with serving() as server, client_for(server) as (client, pool):
        async with client.stream("GET", "/big") as resp:
            async for _chunk in resp.aiter_raw():
                break  # a watch stopped, a followed log left: the rest is never read
        assert (pool.idle_count(), pool.in_use_count()) == (0, 0)
        await until(lambda: 1 in server.closed)
        await client.get("/ok")
        assert server.connections() == [1, 2]


async def test_the_stack_keeps_at_most_max_idle_connections() -> None:
    async with serving() as server, client_for(server, max_idle=2) as (client, pool):
        server.release.clear()
        slow = [asyncio.create_task(client.get("/slow")) for _ in range(5)]
        for _ in range(200):
            if len(server.served) == 5:
                break
            await asyncio.sleep(0.005)
        assert pool.in_use_count() == 5  # nothing bounds the connections in use
        server.release.set()
        await asyncio.gather(*slow)
        assert (pool.opened, pool.idle_count(), pool.in_use_count()) == (5, 2, 0)
        await until(lambda: len(server.closed) == 3)
        for _ in range(4):
            await client.get("/ok")
        assert pool.opened == 5  # served by the two kept


async def test_connections_idle_past_the_keepalive_expiry_are_closed() -> None:
    async with serving() as server, client_for(server, keepalive_expiry=0.0) as (client, pool):
        await client.get("/ok")
        await asyncio.sleep(0.01)
        await client.get("/ok")
        assert pool.opened == 2
        assert server.connections() == [1, 2]
        await until(lambda: 1 in server.closed)


async def test_closing_the_pool_closes_every_connection() -> None:
    async with serving() as server:
        pool = StackPool(ssl_context=None, max_idle=4)
        client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.port}", transport=pool)
        await asyncio.gather(*(client.get("/ok") for _ in range(3)))
        assert pool.idle_count() == 3
        await client.aclose()
        assert pool.idle_count() == 0
        await until(lambda: len(server.closed) == 3)


# ---------------------------------------------------------------- KubeApi.from_config


def _tls_material(tmp: Path) -> tuple[ssl.SSLContext, bytes]:
    """A server context for 127.0.0.1 with a self-signed certificate, and that certificate."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "runlane-test-api")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp / "cert.pem").write_bytes(cert_pem)
    (tmp / "key.pem").write_bytes(key_pem)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    return ctx, cert_pem


def _kubeconfig(tmp: Path, server: str, ca: bytes | None) -> KubeConfig:
    cluster: dict[str, object] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "secret-token"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return KubeConfig.from_file(path)


async def test_from_config_sends_over_the_stack_with_lightkubes_tls_and_auth(
    tmp_path: Path,
) -> None:
    server_tls, cert = _tls_material(tmp_path)
    async with serving(tls=server_tls) as server:
        config = _kubeconfig(tmp_path, f"https://127.0.0.1:{server.port}", cert).get()
        assert config is not None
        api = KubeApi.from_config(config, qps=0)
        try:
            assert isinstance(api._client._transport, StackPool)
            assert await api.request("GET", "/ok") == {"ok": True}
            assert await api.request("POST", "/ok", body={"kind": "Job"}) == {"ok": True}
        finally:
            await api.aclose()
        # The token from the kubeconfig, on the one kept-alive TLS connection.
        assert [h.get("authorization") for h in server.headers] == ["Bearer secret-token"] * 2
        assert server.connections() == [1, 1]

        # Without the CA the same server is refused: the context is the configured one.
        untrusted = _kubeconfig(tmp_path, f"https://127.0.0.1:{server.port}", None).get()
        assert untrusted is not None
        api = KubeApi.from_config(untrusted, qps=0)
        try:
            with pytest.raises(TemporaryExecutorError) as refused:
                await api.request("GET", "/ok")
            assert refused.value.code == "api_unavailable"
        finally:
            await api.aclose()


async def test_from_config_keeps_httpx_transports_when_a_proxy_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _kubeconfig(tmp_path, "http://127.0.0.1:1", None).get()
    assert config is not None
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    api = KubeApi.from_config(config)
    try:
        assert not isinstance(api._client._transport, StackPool)
    finally:
        await api.aclose()
    monkeypatch.setenv("NO_PROXY", "*")
    api = KubeApi.from_config(config)
    try:
        assert isinstance(api._client._transport, StackPool)
    finally:
        await api.aclose()
