"""What the server says about itself, and what this connection's identity may do: for
`taskq doctor`, which must find out without changing anything on the server.

A request the server refuses for permissions gets no reply, only an asynchronous
`-ERR 'Permissions Violation for Publish to "..."'`. The server handles a client's protocol
lines in order, so once the publish is written and a PING/PONG round trip follows it, that
error has been read if it was sent: a probe never waits out a timeout to learn it was
refused.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

import nats.errors
from nats.aio.client import Client

from taskq.errors import PermissionDenied
from taskq.nats.errors import Guard
from taskq.nats.wire import Wire


@dataclass(frozen=True)
class Probe:
    """One probe's answer: `allowed` is False when the server refused it for permissions;
    `reply` is the JSON reply (None: none came, or it was not JSON); `sent`/`received`
    bracket the request on this host's clock (time.time())."""

    allowed: bool
    reply: dict[str, Any] | None
    sent: float = 0.0
    received: float = 0.0


class Probes:
    """Harmless questions to the server on one connection."""

    def __init__(self, client: Client, guard: Guard, wire: Wire) -> None:
        self._nc = client
        self._guard = guard
        self._wire = wire

    def server_info(self) -> dict[str, Any]:
        """The INFO the connected server sent: version, name, cluster, TLS and auth."""
        return self._wire.server_info(self._nc)

    def connected_url(self) -> str | None:
        """The URL of the server this connection uses now."""
        url = self._nc.connected_url
        return url.geturl() if url is not None else None

    async def api(self, what: str, body: dict[str, Any] | None = None) -> Probe:
        """Send `body` to `$JS.API.<what>`; the server's JSON answer (errors included)."""
        payload = json.dumps(body).encode() if body is not None else b""
        return await self.request(f"$JS.API.{what}", payload)

    async def request(
        self,
        subject: str,
        payload: bytes = b"",
        headers: dict[str, str] | None = None,
        timeout: float = 5.0,
    ) -> Probe:
        """Publish with a reply subject and wait for the answer, or learn it was refused."""
        inbox = self._nc.new_inbox()
        sent = time.time()
        with self._guard:
            self._guard.expect(inbox)
            sub = await self._nc.subscribe(inbox, max_msgs=1)
            try:
                self._guard.expect(subject)
                await self._nc.publish(subject, payload, reply=inbox, headers=headers)
                await self._round_trip(timeout)
                if self._guard.violated(inbox):
                    raise PermissionDenied(
                        f"this identity may not receive replies on {inbox.rsplit('.', 1)[0]}.>: "
                        "set TASKQ_INBOX_PREFIX to its role's reply prefix",
                        None,
                        403,
                    )
                if self._guard.violated(subject):
                    return Probe(False, None, sent, time.time())
                data = await _answer(sub, timeout)
            finally:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
        return Probe(True, _json(data), sent, time.time())

    async def subscribe(self, subject: str) -> bool:
        """Whether this identity may subscribe to `subject` (unsubscribed at once)."""
        with self._guard:
            self._guard.expect(subject)
            sub = await self._nc.subscribe(subject)
            try:
                await self._round_trip(5.0)
            finally:
                with contextlib.suppress(nats.errors.Error):
                    await sub.unsubscribe()
        return not self._guard.violated(subject)

    async def _round_trip(self, timeout: float) -> None:
        """Return once the server has read everything sent so far, and we its answers
        to it (the server handles a client's lines in order: its PONG comes after them)."""
        await self._wire.write_pending(self._nc)
        await self._nc.flush(timeout=int(max(1, timeout)))


async def _answer(sub: Any, timeout: float) -> bytes | None:
    try:
        msg = await sub.next_msg(timeout=timeout)
    except (TimeoutError, nats.errors.TimeoutError):
        return None
    data: bytes = msg.data
    return data


def _json(data: bytes | None) -> dict[str, Any] | None:
    if not data:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
