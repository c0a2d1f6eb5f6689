"""The Client: one connection to NATS for one event loop, and what it has learned.

An App (its task registry) hands out one Client per running event loop; tools that need no
task registry (the CLI, the DLQ commands) connect a Client from settings alone. Everything that
talks to the server (tasks, handles, results, workflows, schedules, the worker) goes through
a Client, so its caches (queues ensured, partition layouts) live and die with its connection.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from taskq.clock import Clock
from taskq.errors import ConnectError
from taskq.ids import safe_id
from taskq.nats import Connection
from taskq.records.codec import Codec, connect
from taskq.records.envelope import MSG_ID, TASK_HEADER, Envelope
from taskq.records.result_buckets import ResultBuckets
from taskq.retrying import retry_transient
from taskq.settings import Settings
from taskq.topology.names import Names
from taskq.topology.partitions import Part, Placement, layout, partitions_by_probe
from taskq.topology.specs import check_owner, queue_stream
from taskq.tracing import carry

log = logging.getLogger("taskq")
C = TypeVar("C")


class ClientSource(Protocol):
    """Anything that gives the Client of the running loop: an App, or a Client itself."""

    async def client(self) -> Client: ...


@dataclass(frozen=True)
class Published:
    """A task message the server stored (`duplicate`: its id was already in the window)."""

    id: str
    task: str
    queue: str
    seq: int
    duplicate: bool


class Client:
    """A connection plus the queue layouts it has ensured; made with `Client.connect`."""

    def __init__(
        self,
        connection: Connection,
        codec: Codec,
        settings: Settings,
        declared: Mapping[str, int],
        clock: Clock | None = None,
    ) -> None:
        self.connection = connection
        self.codec = codec  # the connection's: sealing and claim checks (taskq.records.codec)
        self.clock = clock or Clock()  # the App's: what "now" is (taskq.clock)
        self.settings = settings
        self.names = Names(settings.prefix)
        self.results = ResultBuckets(self.names, settings.results_partitions, connection)
        self._declared = declared  # queue -> partitions, as declared in code (live view)
        self._ready: set[tuple[str, Part]] = set()  # streams ensured on this connection
        self._partitions: dict[str, int] = {}  # learned from the server
        self._laid_out: dict[str, int] = {}  # every stream of the layout ensured
        self._placement = Placement()
        self.ensured: set[str] = set()  # other objects made on this connection (flow control)
        # the server's JetStream domain, read by a starting worker: an edge site's name,
        # which its dead letters carry (docs/edge.md); None elsewhere
        self.site: str | None = None
        # caches a feature keeps for this connection and prefix, under its name (never
        # process-wide: two apps in one process must not share them)
        self.kept: dict[str, object] = {}

    def cached(self, name: str, kind: type[C]) -> C:
        """The cache `name` a feature keeps on this client (a new `kind()` at first use)."""
        found = self.kept.get(name)
        if not isinstance(found, kind):
            found = self.kept[name] = kind()
        return found

    @classmethod
    async def connect(
        cls,
        settings: Settings,
        declared: Mapping[str, int] | None = None,
        clock: Clock | None = None,
    ) -> Client:
        """Connect (ConnectError names the URL when no server answers)."""
        connection, codec = await connect(settings)
        return cls(connection, codec, settings, {} if declared is None else declared, clock)

    async def client(self) -> Client:
        """Itself: a Client is a ClientSource, so APIs taking an App take a Client too."""
        return self

    async def close(self) -> None:
        await self.connection.close()

    async def queue_partitions(self, queue: str) -> int:
        """How many partitions `queue` has: as declared, else as found on the server."""
        declared = self._declared.get(queue)
        if declared is not None:
            return declared
        if queue not in self._partitions:
            self._partitions[queue] = await partitions_by_probe(self.connection, self.names, queue)
        return self._partitions[queue]

    async def ensure_queue(self, queue: str, partition: Part = None) -> None:
        """Create a queue's stream (or one partition's) if missing, once per connection."""
        if (queue, partition) in self._ready:
            return
        spec = queue_stream(self.names, self.settings, queue, partition)
        # Look before creating: a producer may lack stream-create rights (workers and
        # operators create streams and apply config drift); a missing stream is created.
        subjects = await self.connection.streams.subjects(spec.name)
        check_owner(spec, subjects)
        if subjects is None or not set(spec.subjects) <= set(subjects):
            # missing, or made by an older taskq without some of our subjects (lanes)
            await self.connection.streams.ensure(spec)
        self._ready.add((queue, partition))

    async def place(self, queue: str, key: str | None = None) -> Part:
        """The partition (None: unpartitioned) a new message of `queue` goes to. `key`
        picks a partition by hash, so the same key always meets the same stream's dedup
        window; no key: round robin."""
        return (await self.spread(queue, 1, key))[0]

    async def spread(self, queue: str, count: int, key: str | None = None) -> list[Part]:
        """Partitions for `count` new messages: round robin, or all in the one `key` picks.
        Every partition's stream is made on first use, so the layout on the server is
        whole for workers and `taskq queues` that learn it from there."""
        partitions = self._laid_out.get(queue)
        if partitions is None:  # once per connection: the hot path is the lookup above
            partitions = await self._lay_out(queue)
        return [self._placement.pick(queue, partitions, key) for _ in range(count)]

    async def _lay_out(self, queue: str) -> int:
        partitions = await retry_transient(
            lambda: self.queue_partitions(queue), what="queue set-up"
        )
        for part in layout(partitions):
            await retry_transient(
                lambda p=part: self.ensure_queue(queue, p),  # type: ignore[misc]
                what="queue set-up",
            )
        self._laid_out[queue] = partitions
        return partitions

    async def place_message(
        self, queue: str, msg_id: str, key: str | None = None, fresh: bool = False
    ) -> Part:
        """The partition for one message: `key` picks it; without one, the message id does
        (a message published again lands in the same dedup window), or round robin when the
        id is `fresh` (never published before)."""
        return await self.place(queue, key if key is not None else None if fresh else msg_id)

    def placed(
        self, envelope: Envelope, queue: str, part: Part, lane: bool = False, level: int = 5
    ) -> Envelope:
        """`envelope` addressed to `queue` (and partition `part`): `queue` and `subject` set.
        `lane`: to the task's concurrency lane (a task with `max_concurrency`); `level`: a
        priority other than the default 5 goes to that level's subject."""
        if lane:
            subject = self.names.lane_subject(queue, envelope.task, part)
        elif level != 5:
            subject = self.names.level_subject(queue, level, envelope.task, part)
        else:
            subject = self.names.queue_subject(queue, envelope.task, part)
        return envelope.addressed(queue, subject)

    async def publish_envelope(
        self,
        envelope: Envelope,
        queue: str,
        msg_id: str | None = None,
        key: str | None = None,
        fresh: bool = False,
    ) -> Published:
        """Place a ready envelope in `queue` (see `place_message`) and publish it (workflow
        steps, chord callbacks)."""
        msg_id = msg_id or envelope.id
        part = await self.place_message(queue, msg_id, key, fresh)
        # in the trace of the task that caused it (taskq.tracing; none when tracing is off)
        carried = carry(envelope.headers)
        if carried is not envelope.headers:
            envelope = replace(envelope, headers=carried)
        return await self.publish_placed(self.placed(envelope, queue, part), msg_id)

    async def publish_placed(self, envelope: Envelope, msg_id: str | None = None) -> Published:
        """Publish an envelope to its `subject`, retrying transient failures (safe: the
        message id makes a repeat a duplicate)."""
        headers = {
            **envelope.headers,
            MSG_ID: safe_id(msg_id or envelope.id),
            TASK_HEADER: envelope.task,
        }
        body = envelope.encode()
        ack = await retry_transient(
            lambda: self.connection.publish(envelope.subject, body, headers),
            what=f"enqueue of {envelope.task}",
        )
        return Published(envelope.id, envelope.task, envelope.queue, ack.seq, ack.duplicate)


async def wait_for_server(settings: Settings, seconds: float) -> None:
    """Return once a server answers at `settings.url`; ConnectError after `seconds` (a
    worker started before its server, as a pod may be, waits instead of exiting at once).
    Says so at the first refusal, then every 30 s; credentials refused end it at once."""
    deadline = time.monotonic() + seconds
    pause, told = 0.25, -math.inf
    while True:
        try:
            await (await Client.connect(settings)).close()
            return
        except ConnectError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            if time.monotonic() - told >= 30.0:
                told = time.monotonic()
                log.warning("waiting for NATS at %s (%.0f s more at most)", settings.url, left)
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 5.0)
