"""Key-value buckets (results, workflow state, workers, cancels, progress): reads, writes,
compare-and-set, history and watching.

Where the server keeps a bucket (`KV_<bucket>`, subjects `$KV.<bucket>.<key>`) is known only
here, so callers never build those names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Protocol

from nats.aio.client import Client
from nats.js import JetStreamContext, api
from nats.js.errors import (
    BadRequestError,
    BucketNotFoundError,
    KeyWrongLastSequenceError,
    NoKeysError,
)

from taskq.errors import NotFound, NotProvisioned, PermissionDenied, TaskqError, TransientError
from taskq.nats.errors import STREAM_NAME_IN_USE, Guard
from taskq.nats.messages import Messages
from taskq.nats.types import KVEntry, PubAck, StoredMessage
from taskq.retrying import ELECTION, patiently, retry_transient
from taskq.topology.specs import BucketSpec

Publish = Callable[[str, bytes], Awaitable[Awaitable[PubAck]]]
PublishAtomic = Callable[
    [str, list[tuple[str, bytes, dict[str, str]]]], Awaitable["asyncio.Future[PubAck] | None"]
]
PublishMany = Callable[
    [list[tuple[str, bytes, dict[str, str] | None]]], Awaitable[list["asyncio.Future[PubAck]"]]
]
Subscribe = Callable[[str, Callable[[str, bytes], Awaitable[None]]], Awaitable[Any]]


class Opened(Protocol):
    async def __call__(
        self, data: bytes, subject: str, headers: None = None, *, strict: bool = False
    ) -> bytes: ...


class KeyValue:
    """Key-value operations on one connection; a bucket is looked up once per connection."""

    def __init__(
        self,
        js: JetStreamContext,
        guard: Guard,
        publish: Publish,
        subscribe: Subscribe,
        seal: Callable[[str, bytes], bytes],
        opened: Opened,
        messages: Messages,
        publish_atomic: PublishAtomic,
        nc: Client,
        publish_many: PublishMany,
    ) -> None:
        self._js = js
        self._nc = nc  # raw API requests (what nats-py's calls cannot ask)
        self._publish_atomic = publish_atomic  # a batch of puts, stored all or none
        self._messages = messages  # batched direct gets: a bucket read by sequence
        self._guard = guard
        self._publish = publish  # seals what it publishes to a sealed bucket
        self._publish_many = publish_many  # the same, for many puts in one write
        self._subscribe = subscribe  # opens what it receives
        self._seal = seal
        self._opened = opened  # a value as plaintext: claim fetched, seal opened
        self._buckets: dict[str, Any] = {}
        self._direct: set[str] = set()  # buckets known to answer batched direct gets

    async def ensure(self, spec: BucketSpec) -> None:
        """Create a bucket (file storage, TTL, history) unless it exists; a user that may
        not create it (readers, the shipped worker role) is told in one line when it is
        missing (`NotProvisioned`)."""
        if spec.name in self._buckets:  # checked once per connection, not per use
            return
        config = api.KeyValueConfig(
            bucket=spec.name,
            history=spec.history,
            ttl=spec.ttl,
            replicas=spec.replicas,
            storage=api.StorageType.FILE,
            direct=spec.direct,
        )
        creating = False
        try:
            with self._guard, self._guard.refusal_expected(f"$JS.API.STREAM.CREATE.KV_{spec.name}"):
                try:  # look first: readers (producers) may not have the right to create
                    self._buckets[spec.name] = await self._js.key_value(spec.name)
                    return
                except BucketNotFoundError:
                    creating = True
                try:
                    self._buckets[spec.name] = await self._js.create_key_value(config)
                except BadRequestError as exc:
                    if exc.err_code != STREAM_NAME_IN_USE:
                        raise
                    self._buckets[spec.name] = await self._js.key_value(spec.name)
        except PermissionDenied:
            if not creating:
                raise
            raise NotProvisioned("bucket", spec.name) from None
        if creating:
            await self.upgrade(spec)

    async def upgrade(self, spec: BucketSpec) -> None:
        """Turn on what the spec asks of the bucket's stream beyond nats-py's bucket config:
        atomic batches of puts, per-message TTLs. Done when `ensure` makes a bucket, and by
        `taskq provision` for one made earlier (a user that may change streams)."""
        with self._guard:
            config = (await self._js.stream_info(stream(spec.name))).config
            wanted = (spec.atomic and not config.allow_atomic) or (
                spec.msg_ttl and not config.allow_msg_ttl
            )
            if wanted:
                config.allow_atomic = config.allow_atomic or spec.atomic or None
                config.allow_msg_ttl = config.allow_msg_ttl or spec.msg_ttl or None
                await self._js.update_stream(config)

    async def put_batch(
        self, bucket: str, items: list[tuple[str, bytes]]
    ) -> asyncio.Future[PubAck] | None:
        """Send puts of many keys as one atomic batch (stored all or none, with one write
        to disk); the future holds the batch's ack. None, sending nothing, when the bucket
        refused one before or a value is too large for one message."""
        items_at: list[tuple[str, bytes, dict[str, str]]] = [
            (subject(bucket, k), v, {}) for k, v in items
        ]
        return await self._publish_atomic(stream(bucket), items_at)

    async def put(self, bucket: str, key: str, value: bytes) -> int:
        """Store `value` under `key`; returns the revision (pipelined, no wait_for task)."""
        ack = await (await self._publish(subject(bucket, key), value))
        return ack.seq

    async def put_nowait(self, bucket: str, key: str, value: bytes) -> Awaitable[PubAck]:
        """Send a put now; the future holds the server's ack (writes of many keys pipelined,
        awaited together)."""
        return await self._publish(subject(bucket, key), value)

    async def put_many_nowait(
        self, bucket: str, items: list[tuple[str, bytes]]
    ) -> list[asyncio.Future[PubAck]]:
        """`put_nowait` for many keys, sent with one write: per item, its ack's future."""
        return await self._publish_many([(subject(bucket, k), v, None) for k, v in items])

    async def get(self, bucket: str, key: str) -> tuple[bytes, int] | None:
        """The current value and revision of `key`, or None if absent (or deleted)."""
        store = await self._bucket(bucket)
        try:
            with self._guard:
                entry = await store.get(key)
        except NotFound:
            return None
        if entry.value is None or entry.operation in ("DEL", "PURGE"):
            return None
        opened = await self._opened(bytes(entry.value), subject(bucket, key), strict=True)
        return opened, int(entry.revision or 0)

    async def create(self, bucket: str, key: str, value: bytes) -> int | None:
        """Store `value` only if `key` does not exist; None when it already did."""
        store = await self._bucket(bucket)
        with self._guard:
            try:
                return int(await store.create(key, self._seal(subject(bucket, key), value)))
            except KeyWrongLastSequenceError:
                return None

    async def count(self, bucket: str, pattern: str) -> int:
        """How many keys matching `pattern` (e.g. `chord.r.*`) hold a value."""
        return await self._messages.count(stream(bucket), subject(bucket, pattern))

    async def keys(self, bucket: str, pattern: str) -> list[str]:
        """The keys matching `pattern` (e.g. `flow.*`) that hold a value, sorted."""

        async def read() -> api.StreamInfo:
            with self._guard:
                return await self._js.stream_info(
                    stream(bucket), subjects_filter=subject(bucket, pattern)
                )

        info = await patiently(read)
        start = len(subject(bucket, ""))
        return sorted(name[start:] for name in getattr(info.state, "subjects", None) or {})

    async def watch(
        self, bucket: str, key: str, on_update: Callable[[str, bytes], Awaitable[None]]
    ) -> Callable[[], Awaitable[None]]:
        """Call `on_update(subject, value)` for every new write of `key`; returns the
        function that stops watching. Open it before a first read, so no write is missed."""
        unsubscribe: Callable[[], Awaitable[None]] = await self._subscribe(
            subject(bucket, key), on_update
        )
        return unsubscribe

    async def delete(self, bucket: str, key: str) -> None:
        """Delete `key` (a delete marker: watchers see it go)."""
        store = await self._bucket(bucket)
        with self._guard:
            await store.delete(key)

    async def history(self, bucket: str, key: str) -> list[KVEntry]:
        """Every value `key` still has in the bucket's history, oldest first."""
        store = await self._bucket(bucket)
        with self._guard:
            try:
                found = await store.history(key)
            except NoKeysError:
                return []
        return [await self._entry(e, strict=True) for e in found]

    async def entries(self, bucket: str, deadline: float = 60.0) -> list[KVEntry]:
        """The current value of every key that has one; TransientError when they do not all
        arrive within `deadline` seconds (a watcher waits for its end marker forever)."""
        store = await self._bucket(bucket)
        with self._guard:
            watcher = await store.watchall()  # delete markers too: the last may be one
        found: list[KVEntry] = []
        try:
            async with asyncio.timeout(deadline):
                await self._current(store, watcher, found)
        except TimeoutError:
            raise TransientError(f"reading bucket {bucket} took over {deadline:g}s") from None
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()
        return found

    async def _current(self, store: Any, watcher: Any, found: list[KVEntry]) -> None:
        """Every current value into `found`, up to the last (nothing pending after it).
        nats-py's end marker (None) can come first: its consumer's info may say all was sent
        before its callback took any (300 values read as none, on a loaded machine)."""
        seen = False
        async for entry in watcher:
            if entry is None:
                with self._guard:
                    if seen or (await store.status()).values == 0:
                        return
                continue
            seen = True
            if entry.operation not in ("DEL", "PURGE"):
                found.append(await self._entry(entry))
            if entry.delta == 0:
                return

    async def follow(
        self, bucket: str, on_entry: Callable[[KVEntry], None]
    ) -> Callable[[], Awaitable[None]]:
        """Call `on_entry` for the current value of every key, then for every change
        (deletes and expiries included, as `deleted` entries), until the returned function
        is awaited; returns once the current values were seen. An ordered consumer:
        nothing is missed between the two."""
        watcher = await self._watch_all(bucket)
        loaded = asyncio.Event()

        async def pump() -> None:
            async for entry in watcher:
                if entry is None:  # the current values are all in
                    loaded.set()
                else:
                    on_entry(await self._entry(entry))

        task = asyncio.create_task(pump())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(loaded.wait(), 10.0)

        async def stop() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TaskqError, Exception):
                await watcher.stop()
                await task

        return stop

    async def _watch_all(self, bucket: str) -> Any:
        """A watcher of every key of `bucket`. A bucket just made on a fresh cluster may be
        "not found" for a moment by the node that takes the watcher's consumer: waited out
        as an election is (bounded)."""

        async def watch() -> Any:
            store = await self._bucket(bucket)
            with self._guard:
                return await store.watchall()

        return await retry_transient(
            watch,
            deadline=ELECTION,
            what="following a bucket",
            level=logging.DEBUG,
            also=(NotFound,),
        )

    async def span(self, bucket: str) -> tuple[int, int]:
        """The first and last sequence of the bucket's stream: its values, every revision
        of every key, in the order they were written (NotFound without the bucket)."""

        async def read() -> api.StreamInfo:
            with self._guard:
                return await self._js.stream_info(stream(bucket))

        state = (await patiently(read)).state
        return int(state.first_seq or 0), int(state.last_seq or 0)

    async def window(self, bucket: str, start: int, count: int) -> list[KVEntry]:
        """Up to `count` values stored from stream sequence `start` on, oldest first: every
        revision and delete marker of every key (`revision` is the stream sequence). One
        batched direct get; each value opened as `get` opens it (claim fetched, seal
        opened), one that does not open here kept as stored. Needs `allow_direct_reads`."""
        found = await self._messages.batch(stream(bucket), start, count)
        return [await self._stored_entry(bucket, stored) for stored in found]

    async def latest(self, bucket: str, keys: list[str]) -> dict[str, int]:
        """The current revision (stream sequence) of each of `keys` that has one, a delete
        marker's included: one batched direct get. Needs `allow_direct_reads`."""
        start = len(subject(bucket, ""))
        last = await self._messages.latest(stream(bucket), [subject(bucket, k) for k in keys])
        return {name[start:]: seq for name, seq in last.items()}

    async def seq_at(self, bucket: str, when: datetime) -> int | None:
        """The first stream sequence of the bucket stored at or after `when` (None: nothing
        stored since): where a read by time starts, in sequences for `window`. One direct
        get by `start_time` (the server finds it by its per-block times). Needs
        `allow_direct_reads`."""
        return await self._messages.first_seq_at(stream(bucket), when)

    async def allow_direct_reads(self, bucket: str) -> None:
        """Let the bucket's stream answer batched direct gets (`window`, `latest`): buckets
        made with `BucketSpec.direct` do; an older one is updated once, which needs a user
        that may change streams (PermissionDenied otherwise)."""
        if bucket in self._direct:
            return
        with self._guard:
            config = (await self._js.stream_info(stream(bucket))).config
            if not config.allow_direct:
                config.allow_direct = True
                await self._js.update_stream(config)
                self._buckets.pop(bucket, None)  # looked up again: nats-py reads it directly
        self._direct.add(bucket)

    async def _stored_entry(self, bucket: str, stored: StoredMessage) -> KVEntry:
        deleted = stored.headers.get("KV-Operation") in ("DEL", "PURGE")
        value = stored.data
        if not deleted and value[:1] == b"\x00":  # claim-checked (or sealed elsewhere)
            value = await self._opened(value, stored.subject)
        return KVEntry(
            key=stored.subject[len(subject(bucket, "")) :],
            value=value,
            revision=stored.seq,
            created=stored.time,
            deleted=deleted,
        )

    async def _entry(self, entry: Any, *, strict: bool = False) -> KVEntry:
        deleted = entry.operation in ("DEL", "PURGE")
        value = bytes(entry.value or b"")
        where = subject(entry.bucket, entry.key)
        return KVEntry(
            key=entry.key,
            value=value if deleted else await self._opened(value, where, strict=strict),
            revision=int(entry.revision or 0),
            created=getattr(entry, "created", None),
            deleted=deleted,
        )

    async def _bucket(self, bucket: str) -> Any:
        store = self._buckets.get(bucket)
        if store is None:
            with self._guard:
                store = await self._js.key_value(bucket)
            self._buckets[bucket] = store
        return store


def subject(bucket: str, key: str) -> str:
    """The subject a key's values are stored on (keys may be `*`/`>` patterns)."""
    return f"$KV.{bucket}.{key}"


def stream(bucket: str) -> str:
    """The stream that holds a bucket."""
    return f"KV_{bucket}"
