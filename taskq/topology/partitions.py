"""Queue partitions: which partition a task goes to, and which partition streams exist.

A queue declared with `partitions=N` is N work-queue streams (`<PREFIX>_Q_<QUEUE>_P<i>`,
docs/wire-format.md, "Names"). Producers place a task by hashing its key (its partition key
or idempotency key, so that a key always meets the same stream's dedup window) or, without
a key, round robin.
Workers consume every partition stream that exists, so nothing is stranded when N changes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from taskq.errors import ConfigError
from taskq.nats import Connection
from taskq.topology.names import Names

Part = int | None  # a partition number, or None for a queue's unpartitioned stream

MAX_PARTITIONS = 64
_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def key_hash(key: str) -> int:
    """32-bit FNV-1a of the key's UTF-8 bytes: the hash nats-server's `partition()` subject
    mapping uses, and stable across processes (unlike Python's `hash`)."""
    value = _FNV_OFFSET
    for byte in key.encode():
        value = ((value ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return value


def partition_for(key: str, partitions: int) -> int:
    return key_hash(key) % partitions


class Placement:
    """Chooses a partition per publish: by key hash, else round robin per queue."""

    def __init__(self) -> None:
        self._turns: dict[str, Iterator[int]] = {}

    def pick(self, queue: str, partitions: int, key: str | None) -> Part:
        if partitions <= 1:
            return None
        if key is not None:
            return partition_for(key, partitions)
        turns = self._turns.get(queue)
        if turns is None:
            turns = self._turns[queue] = itertools.count()
        return next(turns) % partitions


def check_partitions(queue: str, partitions: object) -> int:
    if (
        not isinstance(partitions, int)
        or isinstance(partitions, bool)
        or not 1 <= partitions <= MAX_PARTITIONS
    ):
        raise ConfigError(
            f"queue {queue!r}: partitions must be a whole number from 1 to {MAX_PARTITIONS}"
        )
    return partitions


async def queues_on_server(connection: Connection, names: Names) -> dict[str, list[Part]]:
    """Every queue of this prefix with the streams it has on the server: None for the
    unpartitioned stream, numbers for partitions (read from the streams' subjects)."""
    return queues_in(await connection.streams.listing(names.every_subject), names)


def queues_in(listing: dict[str, tuple[str, ...]], names: Names) -> dict[str, list[Part]]:
    """`queues_on_server` for a stream listing already in hand."""
    found: dict[str, set[Part]] = {}
    head = f"{names.prefix.upper()}_Q_"
    for stream, subjects in listing.items():
        if not stream.startswith(head):
            continue
        for subject in subjects:
            parsed = names.parse_queue_filter(subject)
            if parsed is not None and names.queue_stream(*parsed) == stream:
                found.setdefault(parsed[0], set()).add(parsed[1])
    return {queue: _ordered(parts) for queue, parts in sorted(found.items())}


async def parts_on_server(connection: Connection, names: Names, queue: str) -> list[Part]:
    """The streams `queue` has on the server (see `queues_on_server`)."""
    return (await queues_on_server(connection, names)).get(queue, [])


async def partitions_by_probe(connection: Connection, names: Names, queue: str) -> int:
    """How many partitions `queue` has, by looking up stream names one by one: producers
    may read a stream's info but not list the account's streams. The unpartitioned stream
    (or none at all) means 1: the default layout."""
    if await connection.streams.subjects(names.queue_stream(queue)) is not None:
        return 1
    count = 0
    while (
        count < MAX_PARTITIONS
        and await connection.streams.subjects(names.queue_stream(queue, count)) is not None
    ):
        count += 1
    return max(1, count)


def _ordered(parts: set[Part]) -> list[Part]:
    return sorted(parts, key=lambda p: -1 if p is None else p)


def layout(partitions: int) -> list[Part]:
    """The streams a queue with `partitions` partitions is made of."""
    return [None] if partitions <= 1 else list(range(partitions))
