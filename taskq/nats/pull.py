"""Pulling from a shared durable consumer (the ADR-37 pull protocol), and the deliveries.

`Puller.stream(n, expires)` sends one lingering request for exactly `n` messages and yields
each delivery the moment it arrives, so a worker starts a task without waiting for a batch
to fill; the request ends when `n` arrived, or with the server's 408 at expiry. Unlike
nats-py's `fetch` there is no `no_wait` probe round trip and no task per message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from taskq.errors import BrokerError, NotFound, TransientError
from taskq.nats import internals
from taskq.nats.errors import Guard
from taskq.nats.types import StoredMessage


class Delivery:
    """One delivery of a stream message to a consumer, with its settle operations."""

    __slots__ = ("_client", "_guard", "_msg", "num_delivered", "seq", "stream")

    def __init__(self, msg: Msg, client: Client, guard: Guard) -> None:
        self._msg = msg
        self._client = client
        self._guard = guard
        meta = msg.metadata
        self.seq: int = meta.sequence.stream
        self.num_delivered: int = meta.num_delivered
        self.stream: str = meta.stream

    @property
    def data(self) -> bytes:
        return self._msg.data

    @property
    def subject(self) -> str:
        return self._msg.subject

    @property
    def headers(self) -> dict[str, str]:
        return dict(self._msg.headers or {})

    @property
    def raw_headers(self) -> dict[str, str] | None:
        """The headers as received (not copied): for read-only use such as trace context."""
        return self._msg.headers

    def header(self, name: str) -> str | None:
        headers = self._msg.headers
        return headers.get(name) if headers else None

    @property
    def pending(self) -> int:
        """Messages still pending for this consumer after this one (from the ack subject)."""
        return int(self._msg.metadata.num_pending or 0)

    def stored(self) -> StoredMessage:
        """This delivery as a stream message (for readers that do not settle)."""
        return StoredMessage(self.subject, self.seq, self.data, self.headers, None)

    async def ack(self) -> None:
        with self._guard:
            await self._msg.ack()

    async def ack_sync(self, timeout: float = 5.0) -> None:
        with self._guard:
            await self._msg.ack_sync(timeout=timeout)

    async def nak(self, delay: float = 0.0) -> None:
        with self._guard:
            await self._msg.nak(delay=delay if delay > 0 else None)

    async def in_progress(self) -> None:
        with self._guard:
            await self._msg.in_progress()

    async def term(self, reason: str = "") -> None:
        """Terminate with a reason: nats-py's `term()` sends none, the server accepts `+TERM r`."""
        payload = b"+TERM" + (b" " + reason.encode()[:200] if reason else b"")
        with self._guard:
            await self._client.publish(self._msg.reply, payload)
        internals.mark_settled(self._msg)


class Puller:
    """Pull requests on one inbox for one durable consumer."""

    def __init__(self, client: Client, guard: Guard, stream: str, durable: str) -> None:
        self._client = client
        self._guard = guard
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._inbox = client.new_inbox()
        self._sub: Any = None
        self._queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def open(self) -> Puller:
        with self._guard:
            self._sub = await self._client.subscribe(self._inbox)
        internals.check_subscription(self._sub)
        self._queue = internals.pending_queue(self._sub)
        return self

    async def stream(self, batch: int, expires: float) -> AsyncIterator[Delivery]:
        """Yield up to `batch` deliveries as they arrive, for at most `expires` seconds."""
        request = json.dumps({"batch": batch, "expires": int(expires * 1e9)}).encode()
        with self._guard:
            await self._client.publish(self._next, request, reply=self._inbox)
        # the server answers 408 at expiry; past this client deadline the request is lost
        deadline = asyncio.get_running_loop().time() + expires + 1.0
        remaining = batch
        while remaining > 0:
            msg = await self._get(deadline)
            if msg is None:
                return
            status = msg.headers.get("Status") if msg.headers else None
            if status is None:
                remaining -= 1
                yield Delivery(msg, self._client, self._guard)
            elif status != "100" and request_over(status, msg):  # 100: idle heartbeat
                return

    async def _get(self, deadline: float) -> Msg | None:
        if not self._queue.empty():
            return internals.taken(self._sub, self._queue.get_nowait())
        try:
            async with asyncio.timeout_at(deadline):
                return internals.taken(self._sub, await self._queue.get())
        except TimeoutError:
            return None

    async def close(self) -> None:
        """Stop listening; deliveries that arrived unprocessed go back at once (NAK)."""
        with contextlib.suppress(Exception):
            if self._sub is not None:
                await self._sub.unsubscribe()
        while not self._queue.empty():
            msg = internals.taken(self._sub, self._queue.get_nowait())
            if not (msg.headers and msg.headers.get("Status")):
                with contextlib.suppress(Exception):
                    await msg.nak()


def request_over(status: str, msg: Msg) -> bool:
    """True when a status ends the pull request; raises for a consumer that is gone."""
    description = (msg.headers or {}).get("Description", "")
    if status in ("404", "408"):  # no messages / request expired
        return True
    if status == "409":
        if "deleted" in description.lower():
            raise NotFound(f"consumer deleted: {description}", None, 409)
        return True  # leadership change, max waiting exceeded...: ask again
    if status == "503":
        raise TransientError(f"JetStream unavailable: {description}", None, 503)
    raise BrokerError(f"pull request failed: {status} {description}", None, int(status))
