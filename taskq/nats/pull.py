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
from datetime import datetime
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from taskq.errors import BrokerError, DecodeError, NotFound, TransientError
from taskq.nats.codec import BodyCodec, Checked
from taskq.nats.errors import Guard
from taskq.nats.types import StoredMessage
from taskq.nats.wire import Wire


class Delivery:
    """One delivery of a stream message to a consumer, with its settle operations."""

    __slots__ = (
        "_claim",
        "_client",
        "_codec",
        "_data",
        "_guard",
        "_msg",
        "_pending",
        "_settled",
        "num_delivered",
        "sealed",
        "seq",
        "stream",
        "unreadable",
    )

    def __init__(self, msg: Msg, client: Client, guard: Guard, codec: BodyCodec) -> None:
        self._msg = msg
        self._client = client
        self._guard = guard
        self._codec = codec
        self._claim: Checked | None = None  # a claim-checked body: released once settled
        self.unreadable: str | None = None
        self._settled = False  # an ack, NAK or TERM sent (some as raw writes nats-py never saw)
        self._take(msg.data)
        self.stream, self.num_delivered, self.seq, self._pending = _ack_subject(msg)

    def _take(self, data: bytes) -> None:
        """Keep `data` as the body, opened once here (by the codec) when sealed; a body
        this process cannot open keeps its bytes and says why (the worker dead-letters it)."""
        self._data = data
        # plain JSON: one comparison
        self.sealed = data[:1] == b"\x00" and self._codec.is_sealed(data)
        if self.sealed:
            try:
                self._data = self._codec.open(self._msg.subject, self._msg.headers, data)
            except DecodeError as exc:
                self.unreadable = exc.reason

    async def check_out(self) -> None:
        """Fetch a claim-checked body (then opened like any other) when the reference is
        this message's own; else the delivery is unreadable and nothing is read."""
        msg, codec = self._msg, self._codec
        try:
            claim, body = await codec.check_out(msg.data, msg.subject, msg.headers)
        except DecodeError as exc:
            self.sealed, self.unreadable = False, exc.reason
            return
        if not codec.shares_its_object(msg.headers):  # a periodic firing's is the schedule's
            self._claim = claim
        self._take(body)

    async def _release(self) -> None:
        if self._claim is not None:
            await self._codec.release(self._claim)

    @property
    def data(self) -> bytes:
        """The body, opened when it was sealed (unless `unreadable`)."""
        return self._data

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
    def ack_subject(self) -> str:
        """Where this delivery is settled: the server's `$JS.ACK...` reply subject."""
        return self._msg.reply

    def same_message(self, ack_subject: str) -> bool:
        """Whether another delivery of this stream sequence, settled at `ack_subject`, was
        of this very message: the same stored time stamp (a message that reuses the number,
        its stream made again, has another). Parsed only when a copy is suspected."""
        return _stamp(self.ack_subject) == _stamp(ack_subject)

    @property
    def pending(self) -> int:
        """Messages still pending for this consumer after this one (from the ack subject)."""
        return self._pending

    def stored(self) -> StoredMessage:
        """This delivery as a stream message (for readers that do not settle), with when the
        server stored it (a dead letter too sealed to read says no other time)."""
        return StoredMessage(self.subject, self.seq, self.data, self.headers, _stored_at(self._msg))

    async def ack(self) -> None:
        with self._guard:
            await self._msg.ack()
        self._settled = True
        if self._claim is not None:
            await self._release()

    @property
    def settled(self) -> bool:
        """True once an ack, NAK or TERM was sent for this delivery."""
        return self._settled

    async def acked_by_write(self) -> None:
        """Note an ack the connection wrote for this delivery (`Connection.ack_all`)."""
        self._settled = True
        if self._claim is not None:
            await self._release()

    async def ack_sync(self, timeout: float = 5.0) -> None:
        with self._guard:
            await self._msg.ack_sync(timeout=timeout)
        self._settled = True
        if self._claim is not None:
            await self._release()

    async def nak(self, delay: float = 0.0) -> None:
        with self._guard:
            await self._msg.nak(delay=delay if delay > 0 else None)
        self._settled = True

    async def in_progress(self) -> None:
        with self._guard:
            await self._msg.in_progress()

    async def term(self, reason: str = "") -> None:
        """Terminate with a reason: nats-py's `term()` sends none, the server accepts `+TERM r`."""
        payload = b"+TERM" + (b" " + reason.encode()[:200] if reason else b"")
        with self._guard:
            await self._client.publish(self._msg.reply, payload)
        self._settled = True
        if self._claim is not None:
            await self._release()  # the dead letter keeps its own copy of the original


class Puller:
    """Pull requests on one inbox for one durable consumer."""

    def __init__(
        self,
        client: Client,
        guard: Guard,
        wire: Wire,
        stream: str,
        durable: str,
        codec: BodyCodec,
        claims: bool = False,
    ) -> None:
        self._client = client
        self._guard = guard
        self._wire = wire
        self._codec = codec
        self._claims = claims  # False: claim-check references are yielded as they are
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._inbox = client.new_inbox()
        self._sub: Any = None
        self._queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def open(self) -> Puller:
        with self._guard:
            self._sub = await self._client.subscribe(self._inbox, cb=self._arrived)
        return self

    async def _arrived(self, msg: Msg) -> None:
        self._queue.put_nowait(msg)

    async def stream(self, batch: int, expires: float) -> AsyncIterator[Delivery]:
        """Yield up to `batch` deliveries as they arrive, for at most `expires` seconds."""
        request = json.dumps({"batch": batch, "expires": int(expires * 1e9)}).encode()
        try:  # no guard entered unless it fails: this runs for every pull
            await self._client.publish(self._next, request, reply=self._inbox)
        except BaseException as exc:
            self._guard.reraise(exc)
            raise
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
                delivery = Delivery(msg, self._client, self._guard, self._codec)
                data = msg.data
                if self._claims and data[:1] == b"\x00" and self._codec.is_reference(data):
                    await delivery.check_out()
                yield delivery
            elif status != "100" and request_over(status, msg):  # 100: idle heartbeat
                return

    async def _get(self, deadline: float) -> Msg | None:
        if not self._queue.empty():
            return self._queue.get_nowait()
        try:
            async with asyncio.timeout_at(deadline):
                return await self._queue.get()
        except TimeoutError:
            return None

    async def close(self) -> None:
        """Stop listening; deliveries that arrived unprocessed go back at once (NAK)."""
        with contextlib.suppress(Exception):
            if self._sub is not None:
                await self._sub.unsubscribe()
        while not self._queue.empty():
            msg = self._queue.get_nowait()
            if not (msg.headers and msg.headers.get("Status")):
                with contextlib.suppress(Exception):
                    await msg.nak()


def _ack_subject(msg: Msg) -> tuple[str, int, int, int]:
    """(stream, times delivered, stream sequence, pending) from a delivery's ack subject,
    read directly: nats-py's `metadata` also builds two dataclasses and a datetime per
    message, which the worker never reads."""
    tokens = (msg.reply or "").split(".")
    at = _layout(tokens)
    if at is not None:
        return tokens[at], int(tokens[at + 2]), int(tokens[at + 3]), int(tokens[at + 6])
    meta = msg.metadata  # anything else: nats-py says what it is, or why not
    return meta.stream, meta.num_delivered, meta.sequence.stream, int(meta.num_pending or 0)


def _stamp(ack_subject: str) -> str:
    """An ack subject's time stamp token (when the server stored the message); "" when
    there is none."""
    tokens = ack_subject.split(".")
    at = _layout(tokens)
    return tokens[at + 5] if at is not None else ""


def _layout(tokens: list[str]) -> int | None:
    """Where the stream's token stands in an ack subject (ADR-15:
    `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`, or the 12-token
    form with domain and account hash before the stream), or None for any other shape."""
    return 2 if len(tokens) == 9 else 4 if len(tokens) >= 12 else None


def _stored_at(msg: Msg) -> datetime | None:
    """When the server stored a delivered message: its ack subject's time stamp (ADR-15),
    or None when the subject has none."""
    try:
        return msg.metadata.timestamp
    except (nats.errors.Error, ValueError, IndexError):
        return None


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
