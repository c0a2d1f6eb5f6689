"""Running a dashboard: listen (refusing an unprotected bind beyond loopback), connect to
NATS with the CLI's settings, serve with uvicorn until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator

import uvicorn

from taskq.client import Client
from taskq.dashboard.app import create_app
from taskq.dashboard.config import DashboardConfig, DashboardError, check_bind

GRACE = 2  # seconds requests in progress get to finish when the dashboard stops


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on `host:port` (port 0: any free one); DashboardError when the
    address is taken or cannot be used."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise DashboardError(500, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def address(sock: socket.socket, host: str) -> str:
    """The URL a browser opens for a dashboard listening on `sock` (for a bind to every
    address: its loopback address, one whose `Host` it answers to)."""
    port = sock.getsockname()[1]
    bare = host.strip("[]")
    everywhere = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}
    shown = everywhere.get(bare) or (f"[{bare}]" if ":" in bare else bare)
    return f"http://{shown}:{port}/"


class _Server(uvicorn.Server):
    """uvicorn's server, except that a stop signal (SIGINT, SIGTERM) ends `serve()`
    normally instead of being raised again once it returned: the dashboard then closes
    its NATS connection and exits 0. A second SIGINT stops at once."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event) -> None:
        super().__init__(config)
        self.stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()  # open pages' live streams end now, their connections close
        await super().shutdown(sockets=sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        stops = (signal.SIGINT, signal.SIGTERM)
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


async def serve(config: DashboardConfig, client: Client, sock: socket.socket) -> None:
    """Serve the dashboard on the listening `sock` through `client` until uvicorn is told
    to stop (SIGINT/SIGTERM, when run in the main thread)."""
    app = create_app(config, client)
    server = _Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=GRACE,
        ),
        app.state.stopping,
    )
    await server.serve(sockets=[sock])


async def run(config: DashboardConfig, announce: Callable[[str], None]) -> None:
    """`taskq dashboard`: check the bind, listen, connect, then serve; `announce(url)` once
    it listens (a browser's request waits in the socket's backlog until served).
    UnsafeBind, DashboardError or ConnectError before that."""
    check_bind(config.host, config.token)
    sock = listen(config.host, config.port)
    try:
        client = await Client.connect(config.settings)
    except BaseException:
        sock.close()
        raise
    try:
        announce(address(sock, config.host))
        await serve(config, client, sock)
    finally:
        await client.close()
        sock.close()
