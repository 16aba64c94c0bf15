"""Serving the app over HTTP: uvicorn's server in the caller's event loop (beside the launcher in
`runlane serve`, alone in `runlane web`), on a socket bound here so that an address in use is one
clear line before anything else starts.

The server installs no signal handlers: the process owns SIGTERM (the launcher stops on it, and
`stop` is set for this server). Access logs are off (`runlane` logs its own events); uvicorn's
own records go through the root logger, which `runlane.cli.logging` formats.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import structlog
import uvicorn
from starlette.applications import Starlette

from runlane.errors import ConfigError, RunlaneError
from runlane.service.config import Settings, parse_http_addr

if TYPE_CHECKING:
    from runlane.service.metrics import LauncherMetrics

__all__ = [
    "ListenError",
    "bind_socket",
    "parse_http_addr",
    "serve_http",
    "serve_web",
    "serve_with_http",
    "shown_addr",
]

log = structlog.get_logger("runlane.http")

# How long a stopping server waits for requests in flight (a followed log streams until the
# run ends) before it cancels them: well inside the launcher's own shutdown grace.
SHUTDOWN_GRACE_SECONDS = 5


class ListenError(ConfigError):
    """The HTTP address cannot be listened on (in use, not this host's, a privileged port)."""


def shown_addr(host: str, port: int) -> str:
    """`127.0.0.1:8080`, `[::1]:8080`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_socket(
    host: str, port: int, *, setting: str = "RUNLANE_HTTP_ADDR / --http-addr"
) -> socket.socket:
    """A listening TCP socket on (host, port), or one `ListenError` line naming the address and
    the settings that chose it (`setting`)."""
    where = shown_addr(host, port)
    try:
        infos = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE | socket.AI_NUMERICSERV
        )
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ListenError(f"cannot listen on {where}: {reason} ({setting})") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        # Like every server: a restart may bind while the last one's connections time out.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise ListenError(
            f"cannot listen on {where}: {(reason or str(exc)).lower()} ({setting})"
        ) from None
    sock.set_inheritable(False)  # a job the launcher spawns does not hold the port open
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: whoever runs it owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve_http(
    app: Starlette,
    host: str,
    port: int,
    *,
    stop: asyncio.Event,
    started: asyncio.Event | None = None,
    sock: socket.socket | None = None,
    login_link: bool = False,
) -> None:
    """Serve `app` on host:port in this event loop until `stop` is set, then shut down
    gracefully (requests in flight get SHUTDOWN_GRACE_SECONDS) and return.

    The app's lifespan runs here, around the server, rather than through uvicorn's lifespan
    protocol: a failure to start (no database at that path, an invalid catalog) is then the
    app's own error, which the CLI prints in one line, not a traceback in uvicorn's log.
    `started` is set once the app has started and the socket listens, and `serving
    http://HOST:PORT` is logged. An address that cannot be listened on raises `ListenError`
    before the app starts. `sock`: a socket already bound by `bind_socket`. `login_link`: on
    a database that has no token yet, make the first admin token and print a one-time login
    link for it (`runlane serve`, `runlane web`; docs/ui.md)."""
    sock = sock if sock is not None else bind_socket(host, port)
    app.state.http_stopping = stop  # followed logs end when it is set (routes/logs.py)
    try:
        async with app.router.lifespan_context(app):
            await _serve(app, sock, stop, started, login_link)
    finally:
        sock.close()


def browser_url(host: str, port: int) -> str:
    """The URL a person on this machine opens: an address that means every interface
    (`0.0.0.0`, `::`) is reached as 127.0.0.1 (or [::1])."""
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)  # noqa: S104
    return f"http://{shown_addr(shown, port)}"


async def print_login_link(app: Starlette, base_url: str) -> None:
    """On a database that has never had a token, make the first admin token (its secret is
    shown to nobody) and print a one-time link that opens a UI session for it: usable once,
    for `LOGIN_CODE_TTL`. Nothing on a database with tokens (`runlane token create`), or one
    whose schema is not current (the readiness probe says so)."""
    from runlane.service.operations import sessions

    try:
        link = await sessions.first_admin_login(app.state.runtime)
    except RunlaneError as exc:
        log.warning("http.login_link_failed", error=exc.code, message=exc.message)
        return
    if link is None:
        log.info("http.no_login_link", reason="the database has API tokens")
        return
    minutes = int(link.ttl_seconds // 60)
    # For the person at the terminal, not for the log (whose format may be JSON).
    sys.stderr.write(
        f"runlane: no API token existed, so an admin token {link.token!r} was made; log in to "
        f"the web UI with this one-time link (valid {minutes} minutes, once):\n"
        f"    {link.url(base_url)}\n"
    )
    sys.stderr.flush()


async def _serve(
    app: Starlette,
    sock: socket.socket,
    stop: asyncio.Event,
    started: asyncio.Event | None,
    login_link: bool = False,
) -> None:
    bound_host, bound_port = sock.getsockname()[:2]
    config = uvicorn.Config(
        app,
        lifespan="off",  # run by `serve_http`
        loop="none",
        http="httptools",
        ws="none",
        log_config=None,
        access_log=False,
        server_header=False,
        # Never rewrite the peer from X-Forwarded-For: uvicorn trusts it from loopback by
        # default, so any local process could pose as a trusted proxy (runlane.api.auth) and
        # forge the audit's remote address. runlane's own trusted-proxy mode reads the peer.
        proxy_headers=False,
        forwarded_allow_ips=[],
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    server = _Server(config)

    async def watch() -> None:
        await stop.wait()
        server.should_exit = True

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.02)
        # The one line that says where (with port 0, the port the system chose).
        log.info(f"serving http://{shown_addr(bound_host, bound_port)}")
        if login_link:
            await print_login_link(app, browser_url(bound_host, bound_port))
        if started is not None:
            started.set()

    watcher = asyncio.create_task(watch())
    announcer = asyncio.create_task(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        watcher.cancel()
        announcer.cancel()


async def serve_with_http(settings: Settings, listen: tuple[str, int] | None) -> None:
    """`runlane serve`: the launcher and, unless `listen` is None, the HTTP app in this one
    event loop; and the metrics listener when `RUNLANE_METRICS_ADDR` gives it an address. The
    addresses are bound and the apps started first, so an address in use stops the command
    before the launcher claims anything; the launcher's SIGTERM/SIGINT stop them all (the
    launcher first: it lets its runs finish, while HTTP keeps answering until it has). Should
    a server stop by itself, the launcher stops too: never one without the other."""
    from runlane.service.metrics import LauncherMetrics
    from runlane.service.runtime import serve as serve_launcher

    metrics = LauncherMetrics()
    wanted: list[tuple[Starlette, tuple[str, int], str]] = []
    if listen is not None:
        wanted.append((_app(settings, metrics), listen, "RUNLANE_HTTP_ADDR / --http-addr"))
    metrics_listen = settings.metrics_listen if settings.metrics_enabled else None
    if metrics_listen is not None:
        from runlane.api.metrics import create_metrics_app

        wanted.append(
            (create_metrics_app(settings, metrics), metrics_listen, "RUNLANE_METRICS_ADDR")
        )
    if not wanted:
        await serve_launcher(settings, freeze_gc=True, metrics=metrics)
        return
    socks: list[socket.socket] = []
    try:
        for _, (host, port), setting in wanted:
            socks.append(bind_socket(host, port, setting=setting))
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    http_stop = asyncio.Event()
    launcher_stop = asyncio.Event()
    servers: list[asyncio.Task[None]] = []
    ready: list[asyncio.Event] = []
    for (app, (host, port), setting), sock in zip(wanted, socks, strict=True):
        started = asyncio.Event()
        task = asyncio.create_task(
            serve_http(
                app,
                host,
                port,
                stop=http_stop,
                started=started,
                sock=sock,
                login_link=setting.startswith("RUNLANE_HTTP_ADDR"),  # the UI's, not metrics'
            )
        )
        task.add_done_callback(lambda _: launcher_stop.set())
        servers.append(task)
        ready.append(started)
    up = asyncio.create_task(_all_set(ready))
    try:
        await asyncio.wait({*servers, up}, return_when=asyncio.FIRST_COMPLETED)
        if not up.done():
            http_stop.set()
            for task in servers:
                await task  # one ended before it served: its error is the command's
            return
        await serve_launcher(settings, stop=launcher_stop, freeze_gc=True, metrics=metrics)
    except BaseException:
        http_stop.set()
        for task in servers:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
        raise
    finally:
        up.cancel()
    http_stop.set()
    for task in servers:
        await task  # a server that failed while the launcher ran: its error is the command's


async def _all_set(events: list[asyncio.Event]) -> None:
    for event in events:
        await event.wait()


async def serve_web(settings: Settings, listen: tuple[str, int]) -> None:
    """`runlane web`: the HTTP app alone (no launcher) until SIGTERM or SIGINT."""
    host, port = listen
    sock = bind_socket(host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await serve_http(_app(settings), host, port, stop=stop, sock=sock, login_link=True)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _app(settings: Settings, metrics: LauncherMetrics | None = None) -> Starlette:
    from runlane.api.app import create_app

    return create_app(settings, launcher_metrics=metrics)
