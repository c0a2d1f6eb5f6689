"""Opening a NATS connection from taskq's settings: servers, credentials, TLS, callbacks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from typing import Any

import nats.errors
from nats.aio.client import Client

from taskq.errors import ConnectError, PermissionDenied
from taskq.nats.errors import Guard
from taskq.nats.wire import Wire, wire_for
from taskq.settings import Settings

log = logging.getLogger("taskq.nats")
CANCEL_TRIES, CANCEL_WAIT = 10, 0.5  # cancelling a first connect past its budget


class Events:
    """Connection callbacks that stay quiet while connecting for the first time and closing."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.live = False
        self.refused = False
        self.lost = asyncio.Event()  # closed for good while live (not by us): no reconnect
        self.last: Exception | None = None  # while connecting: why the last attempt failed
        self.outage = Outage()  # while disconnected: its errors, told less and less often

    async def error(self, exc: Exception) -> None:
        self.last = exc  # while connecting: why the last attempt failed
        if not self.live and isinstance(exc, ssl.SSLError):
            raise exc  # a TLS failure will not pass on retry: end the first connect now
        text = str(exc)
        if isinstance(exc, nats.errors.AuthorizationError) or "authorization" in text.lower():
            self.refused = True  # wrong credentials: reported as PermissionDenied at connect
        if "permissions violation" in text.lower():
            self.guard.violation(text.strip().strip("'"))
            if self.guard.expected(text):
                return  # a probe's answer (taskq doctor), not a problem to report
        if self.live and self.outage.tell():
            log.warning("NATS: %s%s", text or type(exc).__name__, self.outage.untold())

    async def disconnected(self) -> None:
        if self.live:
            self.outage.start()
            log.warning("NATS: disconnected, reconnecting")

    async def reconnected(self) -> None:
        if self.live:
            log.info("NATS: reconnected%s", self.outage.end())

    async def closed(self) -> None:
        # nats-py closes for good on some server errors (a protocol violation): nothing on
        # this connection works any more, and it never reconnects
        if self.live:
            log.error("NATS: connection closed for good: %s", self.last or "no reason given")
            self.lost.set()


class Outage:
    """A disconnection's errors (one each failed reconnect, every half second): the first
    is told, then one a second, two, four... up to a minute, each saying how many it
    stood for, so a long outage is a handful of lines rather than two a second."""

    def __init__(self) -> None:
        self.since: float | None = None  # when the connection went down (None: it is up)
        self._next = 0.0  # the next error told no sooner than this (monotonic)
        self._gap = 1.0
        self._quiet = 0  # errors not told since the last one that was

    def start(self) -> None:
        self.since, self._next, self._gap, self._quiet = time.monotonic(), 0.0, 1.0, 0

    def tell(self) -> bool:
        """Whether to tell this error (always while the connection is up)."""
        now = time.monotonic()
        if self.since is None or now >= self._next:
            self._next, self._gap = now + self._gap, min(self._gap * 2, 60.0)
            return True
        self._quiet += 1
        return False

    def untold(self) -> str:
        quiet, self._quiet = self._quiet, 0
        return f" ({quiet} more like it not shown)" if quiet else ""

    def end(self) -> str:
        """The outage's length, as the reconnected line tells it."""
        since, self.since = self.since, None
        return f" after {time.monotonic() - since:.1f} s" if since is not None else ""


FLUSH_TIMEOUT = 10.0  # seconds a forced flush of queued commands may take
# bytes nats-py buffers while reconnecting before a publish is refused (its default, said
# here so that taskq's batched writes keep the same limit)
PENDING_SIZE = 2 * 1024 * 1024


async def open_client(settings: Settings, name: str, events: Events) -> tuple[Client, Wire]:
    """Connect, or raise ConnectError naming the URL when no server answers; the client,
    and how the transport meets it below the public API (`nats_fast_paths`)."""
    client = Client()
    events.guard.watch(client)
    options = connect_options(settings, name, events)
    # nats-py can wait forever on a socket closed after a failed TLS handshake: bound
    # the first connect (each server, tried twice) and report the error seen last
    budget = 2 * len(options["servers"]) * (settings.connect_timeout + 1.0) + 1.0
    try:
        await _within(asyncio.ensure_future(client.connect(**options)), budget)
    except nats.errors.AuthorizationError as exc:
        raise PermissionDenied(f"NATS at {settings.url} refused the credentials: {exc}") from None
    except (TimeoutError, nats.errors.Error, OSError) as exc:  # ssl.SSLError is an OSError
        last = events.last or client.last_error or exc
        if events.refused or isinstance(last, nats.errors.AuthorizationError):
            raise PermissionDenied(f"NATS at {settings.url} refused the credentials") from None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(1.0):
                await client.close()
        raise ConnectError(settings.url, _describe(last)) from None
    wire = wire_for(client, settings.nats_fast_paths, PENDING_SIZE)
    client.options["max_reconnect_attempts"] = -1  # from now on, never give up
    events.live = True
    return client, wire


async def _within(connecting: asyncio.Future[None], seconds: float) -> None:
    """Wait for nats-py's first connect at most `seconds`, then cancel it until it ends
    (TimeoutError). Cancelled again and again, not once: its server loop awaits
    `asyncio.wait_for`, which in Python 3.11 can swallow a cancellation that meets its
    inner result, and `doctor` was seen waiting in that loop past 90 s."""
    try:
        done, _ = await asyncio.wait({connecting}, timeout=seconds)
    except asyncio.CancelledError:
        connecting.cancel()
        raise
    if done:
        return connecting.result()
    for _ in range(CANCEL_TRIES):
        connecting.cancel()
        done, _ = await asyncio.wait({connecting}, timeout=CANCEL_WAIT)
        if done:
            break
    if connecting.done() and not connecting.cancelled():
        connecting.exception()  # retrieved: the timeout is what is reported
    raise TimeoutError(f"no connection within {seconds:g}s")


def connect_options(settings: Settings, name: str, events: Events) -> dict[str, Any]:
    options: dict[str, Any] = {
        "servers": [u.strip() for u in settings.url.split(",")],
        "name": name,
        "connect_timeout": settings.connect_timeout,
        "allow_reconnect": True,
        # bounded for the first connect (fail fast with ConnectError); unbounded afterwards
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": settings.timings.reconnect_wait,
        # a forced flush (FastWire.write_pending) waits for nats-py's flusher task; one
        # that exits on a disconnect leaves the wait unresolved, and nats-py's default
        # (None) waits forever: bound it (past it, nats-py reports FlushTimeoutError)
        "flush_timeout": FLUSH_TIMEOUT,
        "error_cb": events.error,
        "disconnected_cb": events.disconnected,
        "reconnected_cb": events.reconnected,
        "closed_cb": events.closed,
        "inbox_prefix": settings.inbox_prefix,
        "pending_size": PENDING_SIZE,
    }
    options.update(_credentials(settings))
    tls = _tls_context(settings)
    if tls is not None:
        options["tls"] = tls
    return options


def _credentials(settings: Settings) -> dict[str, Any]:
    given = {
        "user": settings.user,
        "password": settings.password if settings.user else None,
        "token": settings.token,
        "nkeys_seed_str": settings.nkey_seed,
        "user_credentials": settings.creds,
    }
    return {key: value for key, value in given.items() if value}


def _tls_context(settings: Settings) -> ssl.SSLContext | None:
    if not (settings.tls_ca or settings.tls_cert):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.tls_ca)
    if settings.tls_cert:
        ctx.load_cert_chain(settings.tls_cert, settings.tls_key)
    return ctx


def _describe(exc: BaseException) -> str:
    """One line for a connect failure (ssl errors carry the useful part in `reason`)."""
    if isinstance(exc, ssl.SSLError):
        return f"{exc.reason or type(exc).__name__}: {getattr(exc, 'verify_message', '') or exc}"
    return str(exc) or type(exc).__name__
