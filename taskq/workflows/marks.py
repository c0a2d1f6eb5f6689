"""A group's or chord's bookkeeping: the mark each member leaves once it succeeded, counted
by the server, and a chord's members' results, read back by whoever publishes its callback.

They live in the workflows stream beside durable runs' journals (one store for every
composition), each mark on a subject of its own, `<prefix>.wf.<flow id>.k.<part>.<key>`:
the stream keeps one message per subject, so a mark is written once however often its
member is redelivered, and each expires `results_ttl` after it was written. Marks are
counted per shard of `SHARD` members, then the shards complete: a member's count reads at
most `SHARD` marks (a count of every mark by every member made a 10,000-member group four
times slower). A group's parts are `g-<shard>` and `g-d` (its complete shards), a chord's
`c<digest>-<shard>` and `c<digest>-d`, the digest of the chord's secret
(taskq.workflows.state.ChordState): a message naming the chord's id without its token
marks other subjects.

A canvas an earlier taskq enqueued (its members' state has no `store`) keeps its marks in
the `<PREFIX>_FLOWS` bucket, as that taskq did, until it ends (`BucketMarks`), so a worker
of this version finishes it where it began; this taskq makes no FLOWS bucket otherwise.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic_core import to_json

from taskq.client import Client
from taskq.errors import NotProvisioned, PayloadTooLarge
from taskq.nats import StoredMessage
from taskq.retrying import retry_transient
from taskq.topology.specs import JOURNAL_EVENT_BYTES, flows_bucket
from taskq.workflows.state import ChordState, GroupState, Store
from taskq.workflows.store import ensure_workflows

SHARD = 100  # a group's or chord's members whose marks one count reads
READING = 16  # shards of a chord's results read at once
JOURNAL: Store = "journal"  # a canvas whose marks are in the workflows stream
Member = GroupState | ChordState


class Marks(Protocol):
    """Where one canvas keeps its members' marks."""

    async def settle(self, value: Any) -> bool:
        """Mark this member succeeded (keeping `value`, a chord's); True when every
        member of the canvas has."""
        ...

    async def results(self) -> list[Any]:
        """A chord's members' results, in order (None for one not stored)."""
        ...


def marks_of(client: Client, flow: Member) -> Marks:
    """The store the canvas's producer chose (`flow.store`)."""
    return JournalMarks(client, flow) if flow.store == JOURNAL else BucketMarks(client, flow)


async def store_for_new(client: Client) -> Store | None:
    """The `store` a canvas enqueued now names: the workflows stream once it allows
    per-message TTLs (every stream this taskq makes, or `taskq provision` updates); until
    then (a stream an earlier taskq made, which this process's user may not update),
    None: the FLOWS bucket, as before."""
    kept = client.cached("canvas store", dict)
    if "store" not in kept:
        try:
            await ensure_workflows(client)
            state = await client.connection.streams.state(client.names.workflows_stream)
            kept["store"] = JOURNAL if state.msg_ttl else None
        except NotProvisioned:
            kept["store"] = None
    store: Store | None = kept["store"]
    if store is None:
        await ensure_flows(client)
    return store


async def ensure_flows(client: Client) -> None:
    spec = flows_bucket(client.names, client.settings)
    await retry_transient(lambda: client.connection.kv.ensure(spec), what="flows bucket set-up")


def _value(value: Any) -> bytes:
    return to_json(value, fallback=repr)


def _shards(size: int) -> int:
    return -(-size // SHARD)


def _in_shard(size: int, shard: int) -> int:
    return min(SHARD, size - shard * SHARD)


Mark = Callable[[str, int, bytes], Awaitable[object]]  # write (part, key, body), once
Count = Callable[[str], Awaitable[int]]  # the marks in a part


async def _sharded(index: int, size: int, body: bytes, mark: Mark, count: Count) -> bool:
    """Mark member `index` in its shard (part `<shard>`); once that shard is complete, mark
    it in part `d`; True when every shard is. Both stores count this way."""
    shard = index // SHARD
    await mark(str(shard), index, body)
    if await count(str(shard)) < _in_shard(size, shard):
        return False
    await mark("d", shard, b"1")  # this shard is complete
    return await count("d") >= _shards(size)


class JournalMarks:
    """A canvas's marks in the workflows stream."""

    def __init__(self, client: Client, flow: Member) -> None:
        self._client = client
        self._flow = flow
        self._tag = "g" if isinstance(flow, GroupState) else f"c{flow.secret_digest}"

    def _subject(self, part: str, key: int) -> str:
        return self._client.names.canvas_subject(self._flow.id, f"{self._tag}-{part}", str(key))

    def _filter(self, part: str) -> str:
        return self._client.names.canvas_filter(self._flow.id, f"{self._tag}-{part}")

    async def settle(self, value: Any) -> bool:
        flow, client = self._flow, self._client
        if flow.index is None or flow.size is None:
            return False
        body = _value(value) if isinstance(flow, ChordState) else b"1"
        if len(body) > JOURNAL_EVENT_BYTES:  # what a durable workflow's step may return
            raise PayloadTooLarge(len(body), JOURNAL_EVENT_BYTES, "a chord member's result")
        await ensure_workflows(client)
        return await _sharded(flow.index, flow.size, body, self._mark, self._count)

    async def _mark(self, part: str, key: int, body: bytes) -> None:
        """Write the mark, once: None back from a create means a redelivery wrote it."""
        ttl, subject = self._client.settings.results_ttl, self._subject(part, key)
        await self._client.connection.records.create(subject, body, ttl=ttl)

    async def _count(self, part: str) -> int:
        stream = self._client.names.workflows_stream
        return await self._client.connection.messages.count(stream, self._filter(part))

    async def results(self) -> list[Any]:
        size = self._flow.size or 0
        found: list[Any] = [None] * size
        shards = list(range(_shards(size)))
        for start in range(0, len(shards), READING):
            parts = shards[start : start + READING]
            for stored in await asyncio.gather(*(self._shard(s) for s in parts)):
                for message in stored:
                    index = _index(message.subject, size)
                    if index is not None:
                        found[index] = json.loads(message.data)
        return found

    async def _shard(self, shard: int) -> list[StoredMessage]:
        """One shard's results: one `multi_last` direct get (a batched read when a role
        wrote more subjects there than it answers)."""
        messages, stream = self._client.connection.messages, self._client.names.workflows_stream
        within = self._filter(str(shard))
        found = await messages.lasts(stream, within)
        return found if found is not None else await messages.batch(stream, 1, SHARD, within)


def _index(subject: str, size: int) -> int | None:
    key = subject.rsplit(".", 1)[-1]
    index = int(key) if key.isdigit() and len(key) <= 6 else None
    return index if index is not None and index < size else None


class BucketMarks:
    """An earlier taskq's canvas: its marks in the FLOWS bucket, as that taskq kept them
    (a chord's results under `<members>.r.<i>`, counted all at once; a group's in shards
    under `<id>.g.<shard>.<i>` and `<id>.s.<shard>`)."""

    def __init__(self, client: Client, flow: Member) -> None:
        self._client = client
        self._flow = flow

    async def settle(self, value: Any) -> bool:
        flow, kv, bucket = self._flow, self._client.connection.kv, self._client.names.flows_bucket
        if flow.index is None or flow.size is None:
            return False  # a group enqueued by a still earlier taskq: its size is not known
        await ensure_flows(self._client)
        if isinstance(flow, ChordState):
            await kv.create(bucket, f"{flow.members}.r.{flow.index}", _value(value))
            return await kv.count(bucket, f"{flow.members}.r.*") >= flow.size
        return await _sharded(flow.index, flow.size, b"1", self._mark, self._count)

    def _part(self, part: str) -> str:
        return f"{self._flow.id}.s" if part == "d" else f"{self._flow.id}.g.{part}"

    async def _mark(self, part: str, key: int, body: bytes) -> None:
        bucket = self._client.names.flows_bucket
        await self._client.connection.kv.create(bucket, f"{self._part(part)}.{key}", body)

    async def _count(self, part: str) -> int:
        bucket = self._client.names.flows_bucket
        return await self._client.connection.kv.count(bucket, f"{self._part(part)}.*")

    async def results(self) -> list[Any]:
        flow, kv, bucket = self._flow, self._client.connection.kv, self._client.names.flows_bucket
        assert isinstance(flow, ChordState)
        keys = [f"{flow.members}.r.{i}" for i in range(flow.size)]
        found = await asyncio.gather(*(kv.get(bucket, key) for key in keys))
        return [json.loads(item[0]) if item else None for item in found]
