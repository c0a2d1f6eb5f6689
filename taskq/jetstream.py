"""The one module that imports `nats`: a thin broker over NATS JetStream.

Everything else in taskq (and `workers`, `dlq`) speaks the types defined here and in
`taskq.topology`. NATS client exceptions are translated into the `TaskqError` tree at this
boundary so they never leak to users.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from taskq.errors import (
    BrokerError,
    ConnectError,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    TaskqError,
    TransientError,
)
from taskq.settings import Settings
from taskq.topology import BucketSpec, ConsumerSpec, StreamSpec

log = logging.getLogger("taskq.jetstream")
T = TypeVar("T")

# JetStream API error codes we react to (nats-server `server/errors.json`)
_STREAM_NOT_FOUND = 10059
_CONSUMER_NOT_FOUND = 10014
_MESSAGE_NOT_FOUND = 10037
_STREAM_NAME_IN_USE = 10058


@dataclass(frozen=True)
class PubAck:
    stream: str
    seq: int
    duplicate: bool


@dataclass(frozen=True)
class StoredMessage:
    """A message read directly from a stream by sequence."""

    subject: str
    seq: int
    data: bytes
    headers: dict[str, str]
    time: datetime | None


@dataclass(frozen=True)
class StreamState:
    name: str
    messages: int
    bytes: int
    first_seq: int
    last_seq: int
    consumers: int
    subjects: dict[str, int]
    config_subjects: tuple[str, ...]
    replicas: int = 1


@dataclass(frozen=True)
class ConsumerState:
    name: str
    pending: int  # not yet delivered
    ack_pending: int  # delivered, not yet acked: in flight
    redelivered: int
    waiting: int  # pull requests waiting: a rough count of idle workers
    ack_wait: float
    max_deliver: int


class translated:  # used like a function: `with translated():`
    """Turn NATS client errors raised inside the block into taskq errors.

    A class rather than a generator-based context manager: it wraps every ack and publish,
    and this form costs a fraction of `contextlib.contextmanager`'s set-up per use.
    """

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc is None or isinstance(exc, TaskqError) or not isinstance(exc, Exception):
            return
        error = _translate(exc)
        if error is not None:
            raise error from None


# Reads and admin calls that are safe to repeat ride out a leader election (a few seconds
# in a cluster after a node dies) instead of failing on its first timed-out request.
_ELECTION_PAUSES = (0.25, 0.5, 1.0, 2.0, 4.0)


async def _patiently(call: Callable[[], Awaitable[T]]) -> T:
    """`call()` with NATS errors translated, retried on TransientError (bounded, ~8 s)."""
    for pause in _ELECTION_PAUSES:
        try:
            with translated():
                return await call()
        except TransientError as exc:
            log.debug("retrying after %s (pause %.2fs)", exc, pause)
            await asyncio.sleep(pause)
    with translated():
        return await call()


def _translate(exc: Exception) -> TaskqError | None:
    """The taskq error for a NATS client exception (or a timeout)."""
    if isinstance(exc, nats.js.errors.NotFoundError):
        text = getattr(exc, "description", None) or "not found"
        return NotFound(text, getattr(exc, "err_code", None), getattr(exc, "code", None))
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return TransientError(exc.description or "JetStream unavailable", exc.err_code, 503)
    if isinstance(exc, nats.js.errors.NoStreamResponseError):
        return TransientError("no stream answered the publish (is it being elected?)")
    if isinstance(exc, nats.js.errors.APIError):
        # some subclasses (KV errors) skip APIError.__init__: read attributes defensively
        text = getattr(exc, "description", None) or str(exc)
        code, err_code = getattr(exc, "code", None), getattr(exc, "err_code", None)
        if code == 403 or "permission" in text.lower():
            return PermissionDenied(text, err_code, code)
        return BrokerError(text, err_code, code)
    if isinstance(exc, nats.errors.MaxPayloadError):
        return BrokerError(f"message over the server's max_payload: {exc}")
    if isinstance(exc, nats.errors.TimeoutError | asyncio.TimeoutError | TimeoutError):
        refused = _recent_violation()
        if refused:
            return PermissionDenied(f"NATS refused it: {refused}", None, 403)
        return TransientError("NATS request timed out")
    if isinstance(exc, nats.errors.NoRespondersError):
        return TransientError("no responders (JetStream not ready?)")
    if isinstance(exc, nats.errors.ConnectionClosedError | nats.errors.ConnectionReconnectingError):
        return TransientError(f"NATS connection not ready: {type(exc).__name__}")
    if isinstance(exc, nats.errors.Error):
        return BrokerError(str(exc) or type(exc).__name__)
    return None  # not a NATS error: let it propagate as it is


def _stream_config(spec: StreamSpec) -> api.StreamConfig:
    return api.StreamConfig(
        name=spec.name,
        description=spec.description or None,
        subjects=list(spec.subjects),
        retention=(
            api.RetentionPolicy.WORK_QUEUE
            if spec.retention == "workqueue"
            else api.RetentionPolicy.LIMITS
        ),
        storage=api.StorageType.FILE,
        num_replicas=spec.replicas,
        max_age=spec.max_age,
        duplicate_window=spec.duplicate_window,
        allow_msg_schedules=True if spec.schedules else None,
        allow_msg_ttl=True if spec.msg_ttl else None,
        allow_direct=True,
    )


def _consumer_config(spec: ConsumerSpec) -> api.ConsumerConfig:
    return api.ConsumerConfig(
        durable_name=spec.durable,
        deliver_policy=api.DeliverPolicy.ALL,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=spec.ack_wait,
        max_deliver=spec.max_deliver,
        max_ack_pending=spec.max_ack_pending,
        filter_subject=spec.filter_subject or None,
        max_waiting=512,
    )


class Delivery:
    """One delivery of a stream message to a consumer, with its settle operations."""

    __slots__ = ("_client", "_msg", "num_delivered", "seq", "stream")

    def __init__(self, msg: Msg, client: Client) -> None:
        self._msg = msg
        self._client = client
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
        with translated():
            await self._msg.ack()

    async def ack_sync(self, timeout: float = 5.0) -> None:
        with translated():
            await self._msg.ack_sync(timeout=timeout)

    async def nak(self, delay: float = 0.0) -> None:
        with translated():
            await self._msg.nak(delay=delay if delay > 0 else None)

    async def in_progress(self) -> None:
        with translated():
            await self._msg.in_progress()

    async def term(self, reason: str = "") -> None:
        """Terminate with a reason: nats-py's `term()` sends none, the server accepts `+TERM r`."""
        reply = self._msg.reply
        payload = b"+TERM" + (b" " + reason.encode()[:200] if reason else b"")
        with translated():
            await self._client.publish(reply, payload)
        self._msg._ackd = True


class Puller:
    """Pull requests on one inbox for a shared durable consumer (the ADR-37 pull protocol).

    `stream(n, expires)` sends one lingering request for exactly `n` messages and yields each
    delivery the moment it arrives, so a worker starts a task without waiting for a batch to
    fill; the request ends when `n` arrived, or with the server's 408 at expiry. Unlike
    nats-py's `fetch` there is no `no_wait` probe round trip and no task per message.
    """

    def __init__(self, client: Client, stream: str, durable: str) -> None:
        self._client = client
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._inbox = client.new_inbox()
        self._sub: Any = None
        self._queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def open(self) -> Puller:
        with translated():
            self._sub = await self._client.subscribe(self._inbox)
        # Read the subscription's own queue, as nats-py's fetch does: a callback would add a
        # task hop per message, `next_msg` a wait_for task per message.
        self._queue = self._sub._pending_queue
        return self

    def _taken(self, msg: Msg) -> Msg:
        # keep nats-py's slow-consumer accounting right when reading its queue directly
        self._sub._pending_size -= len(msg.data)
        return msg

    async def stream(self, batch: int, expires: float) -> AsyncIterator[Delivery]:
        """Yield up to `batch` deliveries as they arrive, for at most `expires` seconds."""
        request = json.dumps({"batch": batch, "expires": int(expires * 1e9)}).encode()
        with translated():
            await self._client.publish(self._next, request, reply=self._inbox)
        loop = asyncio.get_running_loop()
        # the server answers 408 at expiry; past this client deadline the request is lost
        deadline = loop.time() + expires + 1.0
        remaining = batch
        while remaining > 0:
            msg = await self._get(deadline)
            if msg is None:
                return
            status = msg.headers.get("Status") if msg.headers else None
            if status is None:
                remaining -= 1
                yield Delivery(msg, self._client)
            elif status != "100" and _request_over(status, msg):  # 100: idle heartbeat
                return

    async def _get(self, deadline: float) -> Msg | None:
        if not self._queue.empty():
            return self._taken(self._queue.get_nowait())
        try:
            async with asyncio.timeout_at(deadline):
                return self._taken(await self._queue.get())
        except TimeoutError:
            return None

    async def close(self) -> None:
        """Stop listening; deliveries that arrived unprocessed go back at once (NAK)."""
        with contextlib.suppress(Exception):
            if self._sub is not None:
                await self._sub.unsubscribe()
        while not self._queue.empty():
            msg = self._taken(self._queue.get_nowait())
            if not (msg.headers and msg.headers.get("Status")):
                with contextlib.suppress(Exception):
                    await msg.nak()


def _request_over(status: str, msg: Msg) -> bool:
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


def _tls_context(settings: Settings) -> ssl.SSLContext | None:
    if not (settings.tls_ca or settings.tls_cert):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.tls_ca)
    if settings.tls_cert:
        ctx.load_cert_chain(settings.tls_cert, settings.tls_key)
    return ctx


_VIOLATIONS: list[tuple[float, str]] = []  # (when, server's text), newest last


def _recent_violation(within: float = 15.0) -> str | None:
    """The text of a permissions violation seen in the last `within` s (consumed once)."""
    now = time.monotonic()
    while _VIOLATIONS:
        when, text = _VIOLATIONS.pop()
        if now - when <= within:
            return text
    return None


class _Events:
    """Connection callbacks that stay quiet while connecting for the first time and closing."""

    def __init__(self) -> None:
        self.live = False
        self.refused = False
        self.last: Exception | None = None  # while connecting: why the last attempt failed

    async def error(self, exc: Exception) -> None:
        if not self.live:
            self.last = exc
            if isinstance(exc, ssl.SSLError):
                raise exc  # a TLS failure will not pass on retry: end the first connect now
        text = str(exc)
        if isinstance(exc, nats.errors.AuthorizationError) or "authorization" in text.lower():
            self.refused = True  # wrong credentials: reported as PermissionDenied at connect
        if "permissions violation" in text.lower():
            # the server refuses a publish asynchronously; the request then only times out,
            # so remember the refusal for the timeout to be reported as what it is
            _VIOLATIONS.append((time.monotonic(), text.strip().strip("'")))
            del _VIOLATIONS[:-16]
        if self.live:
            log.warning("NATS: %s", text or type(exc).__name__)

    async def disconnected(self) -> None:
        if self.live:
            log.warning("NATS: disconnected, reconnecting")

    async def reconnected(self) -> None:
        if self.live:
            log.info("NATS: reconnected")


def _describe(exc: BaseException) -> str:
    """One line for a connect failure (ssl errors carry the useful part in `reason`)."""
    if isinstance(exc, ssl.SSLError):
        return f"{exc.reason or type(exc).__name__}: {getattr(exc, 'verify_message', '') or exc}"
    return str(exc) or type(exc).__name__


def _connect_options(settings: Settings, name: str, events: _Events) -> dict[str, Any]:
    options: dict[str, Any] = {
        "servers": [u.strip() for u in settings.url.split(",")],
        "name": name,
        "connect_timeout": settings.connect_timeout,
        "allow_reconnect": True,
        # bounded for the first connect (fail fast with ConnectError); unbounded afterwards
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0.5,
        "error_cb": events.error,
        "disconnected_cb": events.disconnected,
        "reconnected_cb": events.reconnected,
    }
    if settings.user:
        options["user"] = settings.user
        options["password"] = settings.password
    if settings.token:
        options["token"] = settings.token
    if settings.nkey_seed:
        options["nkeys_seed_str"] = settings.nkey_seed
    if settings.creds:
        options["user_credentials"] = settings.creds
    tls = _tls_context(settings)
    if tls is not None:
        options["tls"] = tls
    return options


class Broker:
    """A connection to NATS with the JetStream operations taskq uses."""

    def __init__(self, client: Client, settings: Settings, events: _Events) -> None:
        self._nc = client
        self._js = client.jetstream(timeout=5.0)
        self._events = events
        self._buckets: dict[str, Any] = {}
        self.settings = settings

    @classmethod
    async def connect(cls, settings: Settings, name: str = "taskq") -> Broker:
        """Connect, or raise ConnectError naming the URL when no server answers."""
        events = _Events()
        client = Client()
        options = _connect_options(settings, name, events)
        # nats-py can wait forever on a socket closed after a failed TLS handshake: bound
        # the first connect (each server, tried twice) and report the error seen last
        budget = 2 * len(options["servers"]) * (settings.connect_timeout + 1.0) + 1.0
        try:
            async with asyncio.timeout(budget):
                await client.connect(**options)
        except nats.errors.AuthorizationError as exc:
            raise PermissionDenied(
                f"NATS at {settings.url} refused the credentials: {exc}"
            ) from None
        except (TimeoutError, nats.errors.Error, OSError) as exc:  # ssl.SSLError is an OSError
            last = events.last or getattr(client, "_err", None) or exc
            if events.refused or isinstance(last, nats.errors.AuthorizationError):
                raise PermissionDenied(f"NATS at {settings.url} refused the credentials") from None
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await client.close()
            raise ConnectError(settings.url, _describe(last)) from None
        client.options["max_reconnect_attempts"] = -1  # from now on, never give up
        events.live = True
        return cls(client, settings, events)

    @property
    def max_payload(self) -> int:
        return int(self._nc.max_payload)

    @property
    def connected(self) -> bool:
        return bool(self._nc.is_connected)

    async def close(self) -> None:
        self._events.live = False
        # flush (settles and publishes reach the server), then close: `drain()` would wait
        # out its 30 s timeout on the inboxes of expired pull requests.
        with contextlib.suppress(Exception):
            await self._nc.flush(timeout=2)
        with contextlib.suppress(Exception):
            await self._nc.close()

    async def flush(self, timeout: float = 5.0) -> None:
        with translated():
            await self._nc.flush(timeout=int(max(1, timeout)))

    # -- topology ---------------------------------------------------------------------------
    async def ensure_stream(self, spec: StreamSpec) -> None:
        """Create the stream, or update it when its config drifted from `spec`."""
        config = _stream_config(spec)
        with translated():
            try:
                await self._js.add_stream(config)
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code != _STREAM_NAME_IN_USE:
                    raise
                await self._js.update_stream(config)

    async def ensure_consumer(self, spec: ConsumerSpec) -> None:
        """Create or update a durable consumer with the whole intended config."""
        with translated():
            await self._js.add_consumer(spec.stream, _consumer_config(spec))

    async def stream_subjects(self, stream: str) -> tuple[str, ...] | None:
        """The configured subjects of `stream`, or None when it does not exist."""
        try:
            info = await _patiently(lambda: self._js.stream_info(stream))
        except NotFound:
            return None
        return tuple(info.config.subjects or ())

    async def stream_state(self, stream: str, subjects_filter: str | None = None) -> StreamState:
        info = await _patiently(
            lambda: self._js.stream_info(stream, subjects_filter=subjects_filter)
        )
        state = info.state
        return StreamState(
            name=stream,
            messages=state.messages,
            bytes=state.bytes,
            first_seq=state.first_seq,
            last_seq=state.last_seq,
            consumers=state.consumer_count,
            subjects=dict(getattr(state, "subjects", None) or {}),
            config_subjects=tuple(info.config.subjects or ()),
            replicas=int(info.config.num_replicas or 1),
        )

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState:
        info = await _patiently(lambda: self._js.consumer_info(stream, durable))
        return ConsumerState(
            name=durable,
            pending=info.num_pending or 0,
            ack_pending=info.num_ack_pending or 0,
            redelivered=info.num_redelivered or 0,
            waiting=info.num_waiting or 0,
            ack_wait=float(info.config.ack_wait or 0),
            max_deliver=int(info.config.max_deliver or -1),
        )

    async def streams_subjects(self) -> dict[str, tuple[str, ...]]:
        """Every stream's configured subjects, by stream name (one listing request)."""
        infos = await _patiently(self._js.streams_info)
        return {i.config.name: tuple(i.config.subjects or ()) for i in infos if i.config.name}

    async def delete_stream(self, stream: str) -> None:
        with translated():
            await self._js.delete_stream(stream)

    # -- messages ---------------------------------------------------------------------------
    async def publish(
        self,
        subject: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        *,
        timeout: float = 5.0,
    ) -> PubAck:
        """Publish and wait for the server to store it; raises PayloadTooLarge before sending."""
        size = len(body) + sum(len(k) + len(v) + 4 for k, v in (headers or {}).items())
        if size > self.max_payload:
            raise PayloadTooLarge(size, self.max_payload)
        with translated():
            ack = await self._js.publish(subject, body, timeout=timeout, headers=headers)
        return PubAck(ack.stream, ack.seq, bool(ack.duplicate))

    async def publish_nowait(
        self,
        subject: str,
        body: bytes,
        headers: dict[str, str] | None = None,
        ack_timeout: float = 5.0,
    ) -> asyncio.Future[PubAck]:
        """Send now; returns a future of the server's ack (pipelined publishing).

        The future holds a PubAck or a taskq error; it is chained with a callback rather than
        a wrapper task, which would cost a task per message.
        """
        size = len(body) + sum(len(k) + len(v) + 4 for k, v in (headers or {}).items())
        if size > self.max_payload:
            raise PayloadTooLarge(size, self.max_payload)
        with translated():
            # no wait_stall: asyncio.wait_for with a timeout costs a task and a loop turn per call
            inner = await self._js.publish_async(subject, body, headers=headers)
        loop = asyncio.get_running_loop()
        outer: asyncio.Future[PubAck] = loop.create_future()
        # An ack can be lost for good (a stream leader killed between storing and answering):
        # without a deadline the waiter would hang forever. One timer handle, not a task.
        timer = loop.call_later(ack_timeout, _ack_overdue, inner, outer, ack_timeout)
        inner.add_done_callback(lambda done: _settle_ack(done, outer, timer))
        return outer

    async def pull(self, stream: str, durable: str) -> Puller:
        """A puller for an existing durable consumer (NotFound is raised on first use)."""
        return await Puller(self._nc, stream, durable).open()

    async def get_msg(self, stream: str, seq: int) -> StoredMessage | None:
        """Read one message by sequence; None when it is gone."""
        return await self._read_one(stream, seq, following=False, subject=None)

    async def next_msg(
        self, stream: str, seq: int, subject: str | None = None
    ) -> StoredMessage | None:
        """The first message at or after `seq` (optionally on `subject`); None past the end."""
        return await self._read_one(stream, seq, following=True, subject=subject)

    async def _read_one(
        self, stream: str, seq: int, *, following: bool, subject: str | None
    ) -> StoredMessage | None:
        try:
            raw = await _patiently(
                lambda: self._js.get_msg(stream, seq=seq, next=following, subject=subject)
            )
        except NotFound:
            return None
        except BrokerError as exc:
            if exc.code == _MESSAGE_NOT_FOUND:
                return None
            raise
        return StoredMessage(
            subject=raw.subject or "",
            seq=raw.seq or seq,
            data=raw.data or b"",
            headers=dict(raw.headers or {}),
            time=None,
        )

    async def delete_msg(self, stream: str, seq: int) -> bool:
        """Delete one message; False when it was already gone.

        `no_erase`: nats-py's delete asks the server to overwrite the bytes first, which
        costs milliseconds per message on a file store; removal is what we need.
        """
        request = json.dumps({"seq": seq, "no_erase": True}).encode()
        with translated():
            raw = await self._nc.request(f"$JS.API.STREAM.MSG.DELETE.{stream}", request, timeout=10)
        reply = json.loads(raw.data)
        error = reply.get("error")
        if not error:
            return True
        if error.get("err_code") == _MESSAGE_NOT_FOUND or error.get("code") == 404:
            return False
        raise BrokerError(
            error.get("description", "delete failed"), error.get("err_code"), error.get("code")
        )

    # -- object store: payloads too large for one message ----------------------------------
    async def put_blob(self, bucket: str, name: str, data: bytes, replicas: int = 1) -> None:
        """Store `data` under `name` in an object-store bucket (created on first use)."""
        with translated():
            try:
                store = await self._js.object_store(bucket)
            except nats.js.errors.BucketNotFoundError:
                store = await self._js.create_object_store(
                    bucket, api.ObjectStoreConfig(replicas=replicas, storage=api.StorageType.FILE)
                )
            await store.put(name, data)

    async def get_blob(self, bucket: str, name: str) -> bytes | None:
        """The object's bytes, or None when the bucket or object does not exist."""
        try:
            with translated():
                store = await self._js.object_store(bucket)
                result = await store.get(name)
        except (NotFound, BrokerError):
            return None
        return bytes(result.data or b"")

    async def delete_blob(self, bucket: str, name: str) -> None:
        with contextlib.suppress(NotFound, BrokerError), translated():
            store = await self._js.object_store(bucket)
            await store.delete(name)

    # -- dlq reads and bulk operations (issue 3) ------------------------------------------
    async def read_stream(
        self, stream: str, subject: str | None = None, batch: int = 1000
    ) -> AsyncIterator[StoredMessage]:
        """Every message of `stream` (on `subject`), oldest first, without consuming any.

        An ephemeral, unacknowledged pull consumer reads in batches: far fewer round trips
        than a direct get per message. It is deleted afterwards (and expires by itself).
        """
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            deliver_policy=api.DeliverPolicy.ALL,
            filter_subject=subject,
            inactive_threshold=30.0,  # a retried create that did land cleans itself up
            mem_storage=True,
            num_replicas=1,
        )
        info = await _patiently(lambda: self._js.add_consumer(stream, config))
        name = info.name or ""
        if not info.num_pending:
            await self._drop_consumer(stream, name)
            return
        puller = await Puller(self._nc, stream, name).open()
        try:
            while True:
                got = 0
                async for delivery in puller.stream(batch, 2.0):
                    got += 1
                    yield delivery.stored()
                    if delivery.pending == 0:
                        return
                if got == 0:  # nothing within the expiry: the stream changed under us
                    return
        finally:
            await puller.close()
            await self._drop_consumer(stream, name)

    async def _drop_consumer(self, stream: str, name: str) -> None:
        with contextlib.suppress(TaskqError), translated():
            await self._js.delete_consumer(stream, name)

    async def purge_stream(
        self, stream: str, subject: str | None = None, before_seq: int | None = None
    ) -> int:
        """Remove messages (on `subject`, with sequence below `before_seq`); returns how many."""
        request: dict[str, Any] = {}
        if subject:
            request["filter"] = subject
        if before_seq:
            request["seq"] = before_seq
        with translated():
            raw = await self._nc.request(
                f"$JS.API.STREAM.PURGE.{stream}", json.dumps(request).encode(), timeout=10
            )
        reply = json.loads(raw.data)
        if "error" in reply:
            raise BrokerError(
                reply["error"].get("description", "purge failed"),
                reply["error"].get("err_code"),
                reply["error"].get("code"),
            )
        return int(reply.get("purged", 0))

    # -- key-value buckets: results and workflow state (issue 5) ----------------------------
    async def ensure_bucket(self, spec: BucketSpec) -> None:
        """Create a KV bucket (file storage, TTL, history) unless it exists."""
        config = api.KeyValueConfig(
            bucket=spec.name,
            history=spec.history,
            ttl=spec.ttl,
            replicas=spec.replicas,
            storage=api.StorageType.FILE,
        )
        if spec.name in self._buckets:  # checked once per connection, not per use
            return
        with translated():
            try:  # look first: readers (producers) may not have the right to create
                self._buckets[spec.name] = await self._js.key_value(spec.name)
                return
            except nats.js.errors.BucketNotFoundError:
                pass
            try:
                self._buckets[spec.name] = await self._js.create_key_value(config)
            except nats.js.errors.BadRequestError as exc:
                if exc.err_code != _STREAM_NAME_IN_USE:
                    raise
                self._buckets[spec.name] = await self._js.key_value(spec.name)

    async def _bucket(self, bucket: str) -> Any:
        store = self._buckets.get(bucket)
        if store is None:
            with translated():
                store = await self._js.key_value(bucket)
            self._buckets[bucket] = store
        return store

    async def kv_put(self, bucket: str, key: str, value: bytes) -> int:
        """Store `value` under `key`; returns the revision (pipelined, no wait_for task)."""
        ack = await (await self.publish_nowait(f"$KV.{bucket}.{key}", value))
        return ack.seq

    async def kv_get(self, bucket: str, key: str) -> tuple[bytes, int] | None:
        """The current value and revision of `key`, or None if absent (or deleted)."""
        store = await self._bucket(bucket)
        try:
            with translated():
                entry = await store.get(key)
        except NotFound:
            return None
        if entry.value is None or entry.operation in ("DEL", "PURGE"):
            return None
        return bytes(entry.value), int(entry.revision or 0)

    async def kv_create(self, bucket: str, key: str, value: bytes) -> int | None:
        """Store `value` only if `key` does not exist; None when it already did."""
        store = await self._bucket(bucket)
        with translated():
            try:
                return int(await store.create(key, value))
            except nats.js.errors.KeyWrongLastSequenceError:
                return None

    # -- message schedules (issue 5) --------------------------------------------------------
    async def last_on_subject(self, stream: str, subject: str) -> StoredMessage | None:
        """The last message stored on `subject`, or None."""
        try:
            with translated():
                raw = await self._js.get_last_msg(stream, subject)
        except (NotFound, BrokerError):
            return None
        return StoredMessage(
            subject=raw.subject or subject,
            seq=raw.seq or 0,
            data=raw.data or b"",
            headers=dict(raw.headers or {}),
            time=None,
        )


    # -- statistics and operations (issue 6) ------------------------------------------------
    async def stream_leader(self, stream: str) -> str | None:
        """The server name leading `stream` in a cluster (None on a single server)."""
        info = await _patiently(lambda: self._js.stream_info(stream))
        cluster = getattr(info, "cluster", None)
        return getattr(cluster, "leader", None) if cluster is not None else None


    async def subscribe(
        self, subject: str, handler: Callable[[str, bytes], Awaitable[None]]
    ) -> Callable[[], Awaitable[None]]:
        """Core NATS subscription; returns an async unsubscribe function."""

        async def on_msg(msg: Msg) -> None:
            await handler(msg.subject, msg.data)

        with translated():
            sub = await self._nc.subscribe(subject, cb=on_msg)
        return sub.unsubscribe


def _ack_overdue(
    inner: asyncio.Future[api.PubAck], outer: asyncio.Future[PubAck], after: float
) -> None:
    if not outer.done():
        outer.set_exception(TransientError(f"no acknowledgement from the server in {after:g}s"))
    inner.cancel()  # nats-py forgets the pending publish (and frees its slot)


def _settle_ack(
    done: asyncio.Future[api.PubAck], outer: asyncio.Future[PubAck], timer: asyncio.TimerHandle
) -> None:
    timer.cancel()
    if outer.done():
        return
    if done.cancelled():
        outer.set_exception(TransientError("publish cancelled before the server acknowledged"))
        return
    try:
        with translated():
            ack = done.result()
    except TaskqError as exc:
        outer.set_exception(exc)
        return
    outer.set_result(PubAck(ack.stream, ack.seq, bool(ack.duplicate)))
