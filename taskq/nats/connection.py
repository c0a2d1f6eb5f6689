"""A connection to NATS: publishing, pulling, subscribing, and the JetStream facets.

`Connection.streams`, `.messages`, `.kv`, `.blobs` and `.records` group the operations by
what they act on; the connection itself publishes (acknowledged or pipelined), pulls and
subscribes.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Sequence

from nats.aio.client import Client
from nats.aio.msg import Msg

from taskq.errors import BrokerError, DecodeError
from taskq.nats.codec import BodyCodec, Headers
from taskq.nats.connect import Events, open_client
from taskq.nats.errors import ATOMIC_DISABLED, Guard
from taskq.nats.kv import KeyValue
from taskq.nats.messages import Messages
from taskq.nats.objects import Objects
from taskq.nats.pipeline import Pipeline
from taskq.nats.probes import Probes
from taskq.nats.pull import Delivery, Puller
from taskq.nats.records import Records
from taskq.nats.sourcing import Sourcing
from taskq.nats.streams import Streams
from taskq.nats.types import PubAck
from taskq.nats.wire import Wire
from taskq.settings import Settings

Handler = Callable[[str, bytes], Awaitable[None]]
# an atomic batch's headers (ADR-50): its id, each message's place in it, and its commit
BATCH_ID, BATCH_SEQUENCE, BATCH_COMMIT = "Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit"
CLOSE_WITHIN = 5.0  # seconds nats-py's close may take before it is given up on
HEADROOM = 1024  # room for the subject, headers and protocol framing around a body


class Connection:
    """One nats-py client with the JetStream operations taskq uses."""

    def __init__(
        self,
        client: Client,
        settings: Settings,
        events: Events,
        wire: Wire,
        codec: Callable[[Objects], BodyCodec],
    ) -> None:
        self._nc, self._wire, self._events, self._guard = client, wire, events, events.guard
        self.settings = settings
        js = client.jetstream(timeout=5.0)
        self.blobs = Objects(js, self._guard)
        # what bodies become on their way out and in (the layer above's: encryption at rest
        # and claim checks, taskq.records.codec); the transport itself moves bytes
        self.codec = codec(self.blobs)
        self.streams = Streams(client, js, self._guard)
        self.sourcing = Sourcing(js, self._guard)  # edge sites (docs/edge.md)
        self.messages = Messages(client, js, self._guard, self.codec, wire)
        self.kv = KeyValue(
            js,
            self._guard,
            self.publish_nowait,
            self.subscribe,
            self.seal,
            self.opened,
            self.messages,
            self.publish_atomic,
            client,
            self.publish_many_nowait,
        )
        self._pipeline = Pipeline(client, self._guard, wire)
        self._dropping: set[asyncio.Future[None]] = set()  # orphaned objects being deleted
        self._unbatched: set[str] = set()  # streams that refused an atomic batch
        self.records = Records(js, self._guard, self.seal)
        self.probes = Probes(client, self._guard, wire)  # taskq doctor: harmless questions
        # closed for good (not by `close`): what waits for an ack fails now, not at its
        # deadline, so a worker stops at once instead of draining writes that cannot land
        self._loss = asyncio.get_running_loop().create_task(self._fail_pending_on_loss())

    async def _fail_pending_on_loss(self) -> None:
        await self._events.lost.wait()
        await self._pipeline.close()

    @classmethod
    async def connect(
        cls, settings: Settings, name: str, codec: Callable[[Objects], BodyCodec]
    ) -> Connection:
        """Connect, or raise ConnectError naming the URL when no server answers; bodies go
        through the codec `codec` makes (given the connection's object store)."""
        events = Events(Guard())
        client, wire = await open_client(settings, name, events)
        return cls(client, settings, events, wire, codec)

    @property
    def max_payload(self) -> int:
        return int(self._nc.max_payload)

    @property
    def connected(self) -> bool:
        return bool(self._nc.is_connected)

    async def wait_lost(self) -> None:
        """Return when the connection is closed for good, by anything but `close()`."""
        await self._events.lost.wait()

    async def close(self) -> None:
        self._events.live = False
        self._loss.cancel()
        # flush (settles and publishes reach the server), then close: `drain()` would wait
        # out its 30 s timeout on the inboxes of expired pull requests.
        with contextlib.suppress(Exception):
            await self._nc.flush(timeout=2)
        # bounded: nats-py's close waits for its reader and flusher tasks and the socket's
        # end, and a caller (doctor trying a password, a test's teardown) must never hang on it
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_WITHIN):
                await self._nc.close()
        await self._pipeline.close()

    async def flush(self, timeout: float = 5.0) -> None:
        with self._guard:
            await self._nc.flush(timeout=int(max(1, timeout)))

    async def publish(
        self,
        subject: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        timeout: float = 5.0,
    ) -> PubAck:
        """Publish and wait for the server to store it (through the pipeline: no task per
        request, unlike nats-py's request path)."""
        return await (await self.publish_nowait(subject, body, headers, timeout))

    async def publish_nowait(
        self,
        subject: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        ack_timeout: float = 5.0,
    ) -> asyncio.Future[PubAck]:
        """Send now; returns a future of the server's ack (pipelined publishing): a PubAck,
        or a taskq error (the server's refusal; TransientError when no ack came in time)."""
        body = self.seal(subject, body, headers)
        if len(body) + HEADROOM <= self.max_payload:
            return await self._pipeline.send(subject, body, headers, ack_timeout)
        fitted, headers = await self._fit(subject, body, headers)
        acked = await self._pipeline.send(subject, fitted, headers, ack_timeout)
        if fitted is not body:  # claim-checked: a duplicate keeps its first copy's object
            acked.add_done_callback(
                lambda done: self._drop_if_duplicate(done, fitted, subject, headers)
            )
        return acked

    async def publish_many_nowait(
        self, messages: list[tuple[str, bytes, dict[str, str] | None]], ack_timeout: float = 5.0
    ) -> list[asyncio.Future[PubAck]]:
        """`publish_nowait` for many messages, written as one buffer: per message its ack's
        future. Bodies too large for one message go one by one (claim-checked)."""
        if not messages:
            return []  # nothing to write: no empty write to the socket
        sealed = [(s, self.seal(s, body, headers), headers) for s, body, headers in messages]
        if all(len(body) + HEADROOM <= self.max_payload for _, body, _ in sealed):
            return await self._pipeline.send_many(sealed, ack_timeout)
        return [await self.publish_nowait(s, b, h, ack_timeout) for s, b, h in messages]

    async def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge deliveries of this connection with one socket write: each ack an
        empty publish on its ack subject, as nats-py's `ack` sends it, but encoded here for
        all of them at once (nats-py builds and queues a publish per message). Those
        settled already are left out; nothing is sent when the write is refused."""
        waiting = [d for d in deliveries if not d.settled]
        if not waiting:
            return
        try:  # no guard entered unless it fails: this runs for every settle
            await self._wire.write_many(self._nc, [(d.ack_subject, "", b"", None) for d in waiting])
        except BaseException as exc:
            self._guard.reraise(exc)
            raise
        for delivery in waiting:
            await delivery.acked_by_write()

    async def publish_atomic(
        self,
        stream: str,
        messages: list[tuple[str, bytes, dict[str, str]]],
        ack_timeout: float = 5.0,
    ) -> asyncio.Future[PubAck] | None:
        """Send `messages` (subject, body, headers; all bound for `stream`) as one atomic
        batch (ADR-50): the server stores all or none, with one write to disk. The future
        holds the commit's ack (its `seq` the last message's; they are consecutive) or the
        refusal. None, sending nothing, when a body is too large for one message (claim
        checks are for single publishes) or `stream` refused a batch for not allowing
        them (it is sent none again on this connection)."""
        if stream in self._unbatched or not messages:
            return None
        sealed = [self.seal(subject, body, headers) for subject, body, headers in messages]
        if any(len(body) + HEADROOM > self.max_payload for body in sealed):
            return None
        batch = uuid.uuid4().hex
        marked = [
            (subject, body, {**headers, BATCH_ID: batch, BATCH_SEQUENCE: str(n)})
            for n, ((subject, _, headers), body) in enumerate(zip(messages, sealed, strict=True), 1)
        ]
        subject, body, commit = marked.pop()
        commit[BATCH_COMMIT] = "1"
        await self._pipeline.send_unanswered(marked)
        acked = await self._pipeline.send(subject, body, commit, ack_timeout, batched=True)
        acked.add_done_callback(lambda done: self._refused(stream, done))
        return acked

    def batches_refused(self, stream: str) -> bool:
        """Whether `stream` refused an atomic batch on this connection (not allowed there)."""
        return stream in self._unbatched

    def _refused(self, stream: str, acked: asyncio.Future[PubAck]) -> None:
        if acked.cancelled():
            return
        error = acked.exception()
        if isinstance(error, BrokerError) and error.code == ATOMIC_DISABLED:
            self._unbatched.add(stream)

    def _drop_if_duplicate(
        self, acked: asyncio.Future[PubAck], reference: bytes, subject: str, headers: Headers
    ) -> None:
        """A claim-checked publish the server took for a duplicate stored nothing: the
        object made for it is nobody's (a retried move of a fired task made one each)."""
        if acked.cancelled() or acked.exception() is not None or not acked.result().duplicate:
            return
        dropping = asyncio.ensure_future(self.release_claim(reference, subject, headers))
        self._dropping.add(dropping)
        dropping.add_done_callback(self._dropping.discard)

    async def pull(self, stream: str, durable: str) -> Puller:
        """A puller for an existing durable consumer (NotFound is raised on first use)."""
        puller = Puller(self._nc, self._guard, self._wire, stream, durable, self.codec, True)
        return await puller.open()

    async def subscribe(self, subject: str, handler: Handler) -> Callable[[], Awaitable[None]]:
        """Core NATS subscription; returns an async unsubscribe function."""

        async def on_msg(msg: Msg) -> None:
            await handler(msg.subject, await self.opened(msg.data, msg.subject, msg.headers))

        with self._guard:
            sub = await self._nc.subscribe(subject, cb=on_msg)
        return sub.unsubscribe

    def seal(self, subject: str, body: bytes, headers: Headers = None) -> bytes:
        """`body` as the codec stores it on `subject` (sealed for its place when a key is
        set and the place holds users' data)."""
        if not self.codec.sealing:  # no key: nothing to look up per message
            return body
        return self.codec.seal(subject, body, headers)

    async def opened(
        self, data: bytes, subject: str, headers: Headers = None, *, strict: bool = False
    ) -> bytes:
        """A body received on `subject` as the plaintext it stands for: a claim-checked body
        fetched, a sealed one opened. Unless `strict`, a body this process cannot open (or
        whose claim is gone or not this place's) is returned as it came; strictly, that
        raises DecodeError."""
        if data[:1] != b"\x00":
            return data  # plain JSON: the common case costs one comparison
        try:
            if self.codec.is_reference(data):
                data = (await self.codec.check_out(data, subject, headers))[1]
            return self.codec.open(subject, headers, data)
        except DecodeError:
            if strict:
                raise
            return data

    async def release_claim(self, data: bytes, subject: str, headers: Headers = None) -> None:
        """Delete the object a claim-check reference stored on `subject` names, once the
        message holding it is gone (a reference that is not this place's deletes nothing)."""
        codec = self.codec
        if not codec.is_reference(data) or codec.shares_its_object(headers):
            return
        with contextlib.suppress(DecodeError):
            await codec.release(codec.owned(data, subject, headers))

    async def _fit(
        self, subject: str, body: bytes, headers: dict[str, str] | None
    ) -> tuple[bytes, dict[str, str] | None]:
        """`body` and `headers`, or a claim-check reference when the body does not fit in
        one message (with a message id added if it had none: the claim's owner)."""
        limit = self.max_payload
        if len(body) + HEADROOM <= limit:
            return body, headers
        size = len(body) + sum(len(k) + len(v) + 4 for k, v in (headers or {}).items())
        if size + HEADROOM // 2 <= limit:
            return body, headers
        return await self.codec.check_in(subject, headers, body, size, limit)
