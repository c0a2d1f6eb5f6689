"""What every queue is doing: waiting, in flight, redelivered, per task, dead, throughput."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from taskq.client import Client, ClientSource
from taskq.errors import NotFound, PermissionDenied
from taskq.flowcontrol.held import held_limit
from taskq.operate.queue_control import FOREVER, ends
from taskq.records.clock import format_time, parse_time
from taskq.records.heartbeats import WorkerRecord, list_workers
from taskq.records.schedules import DELAYED
from taskq.topology.partitions import Part, parts_on_server, queues_on_server


@dataclass
class QueueStats:
    queue: str
    waiting: int  # stored, not yet delivered
    in_flight: int  # delivered, not yet acknowledged
    redelivered: int  # delivered more than once and not yet settled
    pulls_waiting: int  # open pull requests: roughly, idle worker fetch loops
    consumers: int
    dead: int  # records in the DLQ for this queue
    partitions: int = 1  # streams the queue is stored in (more than one while re-laid out)
    per_task: dict[str, int] = field(default_factory=dict)  # waiting + in flight, by task
    enqueued_per_s: float = 0.0
    settled_per_s: float = 0.0
    paused: bool = False  # workers receive nothing new (`taskq queues pause`)
    paused_until: str | None = None  # when the pause ends by itself (None: until resumed)
    # what a new worker could start now (the autoscaling signal): waiting, in a stream that
    # is not paused; not what runs, waits out a retry delay, is held or scheduled
    runnable: int = 0
    runnable_by_partition: dict[str, int] = field(default_factory=dict)  # "0".., "none"
    held: int = 0  # tasks held back by a flow-control limit (docs/flow-control.md)
    delayed: int = 0  # tasks whose eta is to come, held by the server as schedules
    held_by: dict[str, int] = field(default_factory=dict)  # ...per limit: `rate_limit notify`
    bytes: int = 0  # what the queue's streams store
    storage_used: int = 0  # what the whole account stores (every queue, results, DLQ...)
    storage_limit: int | None = None  # the account's storage limit (None: none of its own)
    sites: dict[str, int] = field(
        default_factory=dict
    )  # at an edge hub: tasks each site has yet to store
    _last_seq: int = 0
    _messages: int = 0
    _pause_end: datetime | None = None  # FOREVER for a pause until resumed

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


async def queue_stats(
    source: ClientSource, queue: str, parts: list[Part] | None = None
) -> QueueStats:
    """One queue's figures, summed over every stream it has (all its partitions)."""
    client = await source.client()
    if parts is None:
        parts = await parts_on_server(client.connection, client.names, queue)
    total = QueueStats(queue, 0, 0, 0, 0, 0, dead=await _dead(client, queue), partitions=0)
    for part in parts or [None]:
        with contextlib.suppress(NotFound):  # a stream removed meanwhile counts as empty
            one = await _stream_stats(client, queue, part)
            _add(total, one)
            runnable = 0 if one.paused else one.waiting
            total.runnable_by_partition["none" if part is None else str(part)] = runnable
    total.runnable = sum(total.runnable_by_partition.values())
    with contextlib.suppress(NotFound):  # no timer stream: no worker set the queue up yet
        total.held_by, total.delayed = await _timers(client, queue)
        total.held = sum(total.held_by.values())
    total.partitions = max(1, len(parts))
    end = ends(total._pause_end)
    total.paused_until = None if end is None else format_time(end)
    total.per_task = dict(sorted(total.per_task.items()))
    return total


async def _stream_stats(client: Client, queue: str, part: Part) -> QueueStats:
    streams, names = client.connection.streams, client.names
    stream = names.queue_stream(queue, part)
    # one look at every subject of the stream: its tasks (queue, lanes, priority levels)
    state = await streams.state(stream, subjects_filter=">")
    per_task: Counter[str] = Counter()
    tasks = 0
    for subject, count in state.subjects.items():
        parsed = names.parse_queue_subject(subject)
        if parsed is not None:
            per_task[parsed[1]] += count
            tasks += count
    stats = QueueStats(queue, tasks, 0, 0, 0, state.consumers, 0, per_task=dict(per_task))
    await _consumers(client, stream, queue, stats)
    stats.bytes = state.bytes
    stats._last_seq, stats._messages = state.last_seq, state.messages
    return stats


async def _timers(client: Client, queue: str) -> tuple[dict[str, int], int]:
    """The queue's held tasks per limit holding them, and its delayed tasks (its timer
    stream's schedules: a periodic schedule is no task yet, and counts as neither)."""
    names = client.names
    root = names.schedule_subject(queue, "")
    state = await client.connection.streams.state(
        names.timer_stream(queue), subjects_filter=names.schedule_filter(queue)
    )
    held: Counter[str] = Counter()
    delayed = 0
    for subject, count in state.subjects.items():
        if (limit := held_limit(root, subject)) is not None:
            held[limit] += count
        elif subject.startswith(f"{root}{DELAYED}."):
            delayed += count
    return dict(held), delayed


async def _consumers(client: Client, stream: str, queue: str, stats: QueueStats) -> None:
    """Sum what the stream's consumers say: the queue's own, its concurrency lanes, its
    priority levels (all deliver from this stream). Without any (no worker has run),
    everything stored is waiting, as counted from the subjects."""
    streams, main = client.connection.streams, client.names.consumer(queue)
    try:
        names = await streams.consumer_names(stream)
    except NotFound:
        return
    except PermissionDenied:  # a role that may read a consumer but not list them
        names = [main]
    durables = [d for d in names if d == main or d.startswith(f"{queue}-")]
    if durables:
        stats.waiting = 0
    for durable in durables:
        with contextlib.suppress(NotFound):
            consumer = await streams.consumer_state(stream, durable)
            stats.waiting += consumer.pending
            stats.in_flight += consumer.ack_pending
            stats.redelivered += consumer.redelivered
            stats.pulls_waiting += consumer.waiting
            if durable == main and consumer.paused:
                stats.paused = True
                stats._pause_end = consumer.pause_until or FOREVER


def _add(total: QueueStats, part: QueueStats) -> None:
    total.waiting += part.waiting
    total.in_flight += part.in_flight
    total.redelivered += part.redelivered
    total.pulls_waiting += part.pulls_waiting
    total.bytes += part.bytes
    total.consumers = max(total.consumers, part.consumers)  # one shared durable per stream
    # sequences of different streams do not compare, but their sum grows by what was added
    total._last_seq += part._last_seq
    total._messages += part._messages
    for task, count in part.per_task.items():
        total.per_task[task] = total.per_task.get(task, 0) + count
    if part._pause_end is not None:  # partitions pause together: show the latest end
        total.paused = True
        total._pause_end = max(total._pause_end or part._pause_end, part._pause_end)


async def _dead(client: Client, queue: str) -> int:
    names = client.names
    try:
        state = await client.connection.streams.state(
            names.dlq_stream, subjects_filter=names.dlq_filter_for(queue)
        )
    except NotFound:
        return 0
    return sum(state.subjects.values())


async def snapshot(
    source: ClientSource, queues: list[str] | None, interval: float
) -> list[QueueStats]:
    """Stats of each queue, with rates measured over `interval` seconds (0: no rates)."""
    client = await source.client()
    on_server = await queues_on_server(client.connection, client.names)
    names = queues or list(on_server)
    first = [await queue_stats(client, q, on_server.get(q, [])) for q in names]
    await _storage(client, first)
    await _sites(client, first)
    if interval <= 0:
        return first
    started, earlier = time.monotonic(), await _workers(client)
    await asyncio.sleep(interval)
    second = [await queue_stats(client, q, on_server.get(q, [])) for q in names]
    elapsed = time.monotonic() - started
    later = _seen(earlier, await _workers(client))
    rates = _worker_rates(later)
    for queue, copied in _copied_between(earlier, later).items():
        rates.setdefault(queue, {})["copied"] = copied
    for before, after in zip(first, second, strict=True):
        _rates(before, after, elapsed, rates)
    await _storage(client, second)
    await _sites(client, second)
    return second


def _rates(
    before: QueueStats, after: QueueStats, elapsed: float, rates: dict[str, dict[str, float]]
) -> None:
    """IN/s: tasks added to the queue, less the copies workers published while holding
    tasks (a held task is stored again: it is no new task); DONE/s: tasks settled, as the
    workers count them over their last 10 s of heartbeats. With no worker's figures (a role that
    may not read them, or none running), what left the stream stands for what settled."""
    added = (after._last_seq - before._last_seq) / elapsed
    mine = rates.get(after.queue)
    if mine is None:
        left = added - (after._messages - before._messages) / elapsed
        after.enqueued_per_s, after.settled_per_s = added, max(0.0, left)
        return
    after.enqueued_per_s = max(0.0, added - mine.get("copied", 0.0))
    after.settled_per_s = mine.get("settled", 0.0)


async def _workers(client: Client) -> list[WorkerRecord]:
    """The live workers' records (none for a role that may not read them)."""
    try:
        return await list_workers(client)
    except (NotFound, PermissionDenied):
        return []


def _seen(earlier: list[WorkerRecord], later: list[WorkerRecord]) -> list[WorkerRecord]:
    """The workers of either read, each with its latest record: a worker whose beat came
    late (past its record's TTL of three beats, on a loaded machine) is missing from one
    read, and its copies would count as new tasks."""
    latest = {w.id: w for w in earlier} | {w.id: w for w in later}
    return list(latest.values())


def _worker_rates(workers: list[WorkerRecord]) -> dict[str, dict[str, float]]:
    """Per queue, the workers' settled and copied tasks per second, summed."""
    summed: dict[str, dict[str, float]] = {}
    for worker in workers:
        for queue, figures in worker.rates.items():
            into = summed.setdefault(queue, {})
            for kind, rate in figures.items():
                into[kind] = into.get(kind, 0.0) + rate
    return summed


def _copied_between(earlier: list[WorkerRecord], later: list[WorkerRecord]) -> dict[str, float]:
    """Per queue, the copies workers put back in it per second between two reads of their
    records, from each worker's tallies at its two beats: about IN/s's own window, where
    the records' 10 s rates would mix in copies from before it. A worker whose beat did not
    move between the reads (or that is new) counts with its record's rate."""
    before = {w.id: w for w in earlier}
    copied: dict[str, float] = {}
    for worker in later:
        for queue, rate in _copy_rates(before.get(worker.id), worker).items():
            copied[queue] = copied.get(queue, 0.0) + rate
    return copied


def _copy_rates(old: WorkerRecord | None, new: WorkerRecord) -> dict[str, float]:
    span = 0.0
    if old is not None and old.tallies and new.tallies:
        span = (parse_time(new.heartbeat_at) - parse_time(old.heartbeat_at)).total_seconds()
    if old is None or span <= 0:
        return {q: figures.get("copied", 0.0) for q, figures in new.rates.items()}
    rates: dict[str, float] = {}
    for key, count in new.tallies.items():
        kind, _, queue = key.partition(":")
        if kind == "copied":
            rates[queue] = (count - old.tallies.get(key, 0)) / span
    return rates


async def _storage(client: Client, stats: list[QueueStats]) -> None:
    """Note the account's storage use and limit on each queue's figures (a full store
    refuses enqueues with StorageFull: this is how close it is)."""
    if not stats:
        return
    try:
        used, limit = await client.connection.streams.account_storage()
    except PermissionDenied:  # a role without account info: the queues' own bytes still show
        return
    for one in stats:
        one.storage_used, one.storage_limit = used, limit


async def _sites(client: Client, stats: list[QueueStats]) -> None:
    """At an edge hub: what each site's outbox of each queue holds, the tasks sent to the
    site it has not stored yet (docs/edge.md). One listing; nothing more without sites."""
    names, streams = client.names, client.connection.streams
    try:
        outboxes = await streams.listing(names.site_filter("*", "*"))
    except PermissionDenied:  # a role that may not list streams: no sites shown
        return
    for one in stats:
        for stream, subjects in outboxes.items():
            parts = subjects[0].split(".") if subjects else []
            if (
                len(parts) == 5
                and parts[3] == one.queue
                and stream == names.site_stream(parts[2], one.queue)
            ):
                with contextlib.suppress(NotFound):
                    one.sites[parts[2]] = (await streams.state(stream)).messages


def size(count: int) -> str:
    """Bytes as people read them: 512 B, 9.8 KiB, 2.9 MiB, 1.2 GiB."""
    amount, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if amount < 1024 or unit == "TiB":
            break
        amount /= 1024
    return f"{count} B" if unit == "B" else f"{amount:.1f} {unit}"
