"""The JetStream objects taskq needs, as plain specs (docs/wire-format.md, "Names").

`taskq.nats` turns these into server configs; nothing here talks to NATS. Specs are
complete on purpose: the server's create-or-update falls back to defaults for fields left
out, so the whole intended config is always sent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from taskq.errors import ConfigError
from taskq.settings import Settings
from taskq.topology.names import Names

# the ack_wait of taskq's own consumers (the timer mover, the advisory sweeper): a failed
# move or sweep comes back after it
INTERNAL_ACK_WAIT = 30.0


@dataclass(frozen=True)
class SourceSpec:
    """A stream another stream copies from: in another JetStream domain (`domain`: over a
    leaf connection), through a durable consumer of the source (`consumer`, pushing to
    `deliver`: ADR-60 durable sourcing, so a work-queue source deletes a message only once
    this side stored it), its subjects renamed `transform` (src, dest)."""

    name: str
    domain: str
    consumer: str | None = None
    deliver: str | None = None
    transform: tuple[str, str] | None = None


@dataclass(frozen=True)
class StreamSpec:
    name: str
    subjects: tuple[str, ...]
    retention: Literal["workqueue", "limits"]
    replicas: int = 1
    max_age: float = 0.0  # seconds, 0 = forever
    duplicate_window: float = 120.0
    schedules: bool = False
    msg_ttl: bool = False
    description: str = ""
    max_msgs_per_subject: int = -1  # 1: a subject holds one record (flow control's streams)
    counters: bool = False  # ADR-49 counters: every subject is a `Nats-Incr` counter
    # a subject at max_msgs_per_subject refuses new messages (instead of dropping its oldest)
    refuse_when_full: bool = False
    max_msg_size: int = -1  # bytes one message may have, at most (-1: the server's max)
    max_bytes: int = -1  # bytes the stream holds, at most (-1: no bound of its own)
    # messages it holds, at most (-1: no bound): unlike max_bytes, reserves no storage
    max_msgs: int = -1
    atomic: bool = False  # atomic batch publishes (ADR-50): bulk enqueue, one fsync a batch
    sources: tuple[SourceSpec, ...] = ()  # streams it copies from (edge sites)


@dataclass(frozen=True)
class ConsumerSpec:
    stream: str
    durable: str
    filter_subject: str
    ack_wait: float
    max_deliver: int
    max_ack_pending: int


@dataclass(frozen=True)
class BucketSpec:
    name: str
    ttl: float
    history: int = 1
    replicas: int = 1
    direct: bool = False  # batched direct gets (reading the bucket by sequence: listings)
    atomic: bool = False  # atomic batch publishes: a worker's settle group, one fsync a batch
    msg_ttl: bool = False  # per-message TTLs (`Nats-TTL`): a chain's summary expires by itself


def queue_stream(
    names: Names, settings: Settings, queue: str, partition: int | None = None
) -> StreamSpec:
    """The work-queue stream holding a queue's tasks, its concurrency lanes and its
    priority levels (or one partition's). Producers publish here, so it allows no message
    schedules: nats-server turns roll-ups (a publish that purges) on with them. Schedules
    are in the queue's timer stream."""
    where = "" if partition is None else f", partition {partition}"
    return StreamSpec(
        name=names.queue_stream(queue, partition),
        subjects=(
            names.queue_filter(queue, partition),
            names.lane_filter(queue, partition),
            names.levels_filter(queue, partition),
        ),
        retention="workqueue",
        replicas=settings.replicas,
        duplicate_window=settings.duplicate_window,
        description=f"taskq queue {queue!r}{where}",
        atomic=True,
    )


def timer_stream(names: Names, settings: Settings, queue: str) -> StreamSpec:
    """A queue's message schedules (ADR-51) and what they fire, which workers move into
    the queue's stream. Only workers publish here (roll-ups are on: schedules need them)."""
    return StreamSpec(
        name=names.timer_stream(queue),
        subjects=(names.schedule_filter(queue), names.fired_filter(queue)),
        retention="workqueue",
        replicas=settings.replicas,
        duplicate_window=settings.duplicate_window,
        schedules=True,
        msg_ttl=True,
        description=f"taskq timers of queue {queue!r}",
    )


def timer_consumer(names: Names, settings: Settings, queue: str) -> ConsumerSpec:
    """The shared consumer that moves fired tasks from a timer stream into their queue
    (a failed move comes back after `ack_wait`; nothing stops retrying it)."""
    return ConsumerSpec(
        stream=names.timer_stream(queue),
        durable=names.timer_consumer(queue),
        filter_subject=names.fired_filter(queue),
        ack_wait=INTERNAL_ACK_WAIT,
        max_deliver=-1,
        max_ack_pending=settings.max_ack_pending,
    )


def check_owner(spec: StreamSpec, subjects: tuple[str, ...] | None) -> None:
    """Refuse a queue stream whose name is already another queue's: names are upper-cased,
    so queue `a_p1` and partition 1 of queue `a` would share one. Re-pointing the existing
    stream at our subjects would take it from its queue. `subjects`: what the server has
    under `spec.name` (None: no such stream)."""
    if subjects is not None and spec.subjects[0] not in subjects:
        raise ConfigError(
            f"stream {spec.name} already belongs to other subjects {list(subjects)}: "
            "rename the queue"
        )


def queue_consumer(
    names: Names,
    settings: Settings,
    queue: str,
    ack_wait: float,
    attempts: int,
    partition: int | None = None,
) -> ConsumerSpec:
    """The shared durable pull consumer workers of `queue` (or of one partition) fetch from.

    `max_deliver` is only a backstop: workers dead-letter a task after its own number of
    attempts; the backstop stops a message that kills every worker before it can be judged.
    """
    return ConsumerSpec(
        stream=names.queue_stream(queue, partition),
        durable=names.consumer(queue),
        filter_subject=names.queue_filter(queue, partition),
        ack_wait=ack_wait,
        max_deliver=settings.max_deliver or max(settings.max_deliver_floor, attempts + 1),
        max_ack_pending=settings.max_ack_pending,
    )


def lane_consumer(
    names: Names,
    settings: Settings,
    queue: str,
    task: str,
    limit: int,
    ack_wait: float,
    attempts: int,
    partition: int | None = None,
) -> ConsumerSpec:
    """A concurrency lane: the consumer of one task's lane subject, whose `max_ack_pending`
    is the task's `max_concurrency` across every worker (the server enforces it; a dead
    worker's deliveries come back after `ack_wait`, and with them the slots)."""
    return ConsumerSpec(
        stream=names.queue_stream(queue, partition),
        durable=names.lane_consumer(queue, task),
        filter_subject=names.lane_subject(queue, task, partition),
        ack_wait=ack_wait,
        max_deliver=settings.max_deliver or max(settings.max_deliver_floor, attempts + 1),
        max_ack_pending=limit,
    )


def level_consumer(
    names: Names, base: ConsumerSpec, queue: str, level: int, partition: int | None = None
) -> ConsumerSpec:
    """The consumer of one priority level of a queue (or partition): the queue consumer's
    settings (`base`) on the level's subjects."""
    return ConsumerSpec(
        stream=base.stream,
        durable=names.level_consumer(queue, level),
        filter_subject=names.level_subject(queue, level, ">", partition),
        ack_wait=base.ack_wait,
        max_deliver=base.max_deliver,
        max_ack_pending=base.max_ack_pending,
    )


def dlq_stream(names: Names, settings: Settings) -> StreamSpec:
    """Dead letters: limits retention so they stay browsable until `dlq_max_age`."""
    return StreamSpec(
        name=names.dlq_stream,
        subjects=(names.dlq_filter,),
        retention="limits",
        replicas=settings.replicas,
        max_age=settings.dlq_max_age,
        duplicate_window=settings.duplicate_window,
        description="taskq dead letters",
        atomic=True,  # a settle group's dead letters are one batch (workers/writes.py)
    )


def events_stream(names: Names, settings: Settings, queue_streams: tuple[str, ...]) -> StreamSpec:
    """Durable capture of MAX_DELIVERIES advisories for the sweeper, one subject per stream."""
    return StreamSpec(
        name=names.events_stream,
        subjects=tuple(sorted(names.max_deliveries_subject(s) for s in queue_streams)),
        retention="workqueue",
        replicas=settings.replicas,
        max_age=7 * 86400.0,
        description="taskq advisories (crash-looped messages)",
    )


def events_consumer(names: Names) -> ConsumerSpec:
    return ConsumerSpec(
        stream=names.events_stream,
        durable=names.events_consumer,
        filter_subject="",
        ack_wait=INTERNAL_ACK_WAIT,
        max_deliver=-1,
        max_ack_pending=1000,
    )


RESULT_HISTORY = 16  # a retried task's earlier records are its attempts (`taskq task ID`)


def results_bucket(names: Names, settings: Settings, bucket: str | None = None) -> BucketSpec:
    """The results bucket (or one of a partitioned layout's, `bucket`)."""
    return BucketSpec(
        bucket or names.results_bucket,
        ttl=settings.results_ttl,
        history=RESULT_HISTORY,
        replicas=settings.replicas,
        direct=True,  # recent tasks are listed by reading it by sequence (taskq.operate.task_list)
        atomic=True,  # a settle group's records are one batch (workers/writes.py)
    )


def results_buckets(names: Names, settings: Settings) -> list[BucketSpec]:
    """Every bucket of the configured results layout (taskq.records.result_buckets)."""
    buckets = names.results_buckets(settings.results_partitions)
    return [results_bucket(names, settings, bucket) for bucket in buckets]


def workers_bucket(names: Names, settings: Settings) -> BucketSpec:
    """Live workers: a heartbeat per worker process; a killed one ages out in 3 beats."""
    return BucketSpec(names.workers_bucket, ttl=3 * settings.heartbeat, replicas=settings.replicas)


def cancels_bucket(names: Names, settings: Settings) -> BucketSpec:
    """Cancel requests, kept as long as results: a task delivered later still sees them."""
    return BucketSpec(names.cancels_bucket, ttl=settings.results_ttl, replicas=settings.replicas)


def progress_bucket(names: Names, settings: Settings) -> BucketSpec:
    return BucketSpec(names.progress_bucket, ttl=settings.results_ttl, replicas=settings.replicas)


def flows_bucket(names: Names, settings: Settings) -> BucketSpec:
    return BucketSpec(names.flows_bucket, ttl=settings.results_ttl, replicas=settings.replicas)


JOURNAL_EVENTS = 20_000  # events in one durable run's journal, at most (decisions check)
JOURNAL_EVENT_BYTES = 256 * 1024  # one journal event's JSON, at most
# all of one run's journal events, at most: what a deciding worker holds of it in memory
JOURNAL_BYTES = 32 * 1024 * 1024


def workflows_stream(names: Names, settings: Settings) -> StreamSpec:
    """Durable workflow runs' journals, one subject per event (limits retention: a journal
    stays until its run has ended and its results expired, taskq.workflows.decide), and
    chains', groups' and chords' entries, each expiring `results_ttl` after it was written."""
    return StreamSpec(
        name=names.workflows_stream,
        subjects=(names.journals_filter,),
        retention="limits",
        replicas=settings.replicas,
        duplicate_window=settings.duplicate_window,
        description="taskq durable workflow journals",
        # one message per subject, each event's own: a second message on a subject (a
        # producer re-publishing a run's start) is refused by the server, not stored
        max_msgs_per_subject=1,
        refuse_when_full=True,
        max_msg_size=2 * JOURNAL_EVENT_BYTES,  # room for sealing and headers
        max_bytes=settings.workflows_max_bytes or -1,
        msg_ttl=True,  # a chain's, group's or chord's entries expire (taskq.workflows.marks)
    )


def runs_bucket(names: Names, settings: Settings) -> BucketSpec:
    """One summary per durable workflow run (name, state, times), and per chain, group and
    chord (which expires `results_ttl` after its last change): `taskq workflows ls`."""
    return BucketSpec(
        names.runs_bucket, ttl=0.0, replicas=settings.replicas, direct=True, msg_ttl=True
    )


def limits_stream(names: Names, settings: Settings) -> StreamSpec:
    """Flow-control records (uniqueness and throttle windows, concurrency slots, declared
    limits): one message per subject, each with its own TTL (ADR-43)."""
    description = "taskq flow control: windows, slots, declared limits"
    return _records(names.limits_stream, names.limits_filter, settings, description)


def _records(name: str, subjects: str, settings: Settings, description: str) -> StreamSpec:
    """A stream of records: one message per subject, each with its own TTL."""
    return StreamSpec(
        name=name,
        subjects=(subjects,),
        retention="limits",
        replicas=settings.replicas,
        duplicate_window=settings.duplicate_window,
        msg_ttl=True,
        max_msgs_per_subject=1,
        description=description,
    )


def history_stream(names: Names, settings: Settings) -> StreamSpec:
    """The history's windows (taskq.records.history): one message per subject, each kept
    for its resolution's span by its own TTL, the whole bounded by `history_max_windows`
    (the oldest windows go first) and each window's size. A bound in messages, not bytes:
    nats-server reserves a stream's max_bytes against its store when it makes the stream
    (one per prefix would take 64 MiB each from every server's budget, and a small store
    would refuse it)."""
    description = "taskq history: tasks settled and run times, by window"
    records = _records(names.history_stream, names.history_filter, settings, description)
    return replace(
        records,
        max_msgs=settings.history_max_windows,
        max_msg_size=HISTORY_MAX_RECORD,
        max_age=HISTORY_MAX_AGE,
    )


def site_stream(names: Names, settings: Settings, site: str, queue: str) -> StreamSpec:
    """At the hub, the tasks for `site`'s `queue` until the site has stored them (a
    work-queue stream: its durable consumer's flow control deletes each once stored)."""
    return StreamSpec(
        name=names.site_stream(site, queue),
        subjects=(names.site_filter(site, queue),),
        retention="workqueue",
        replicas=settings.replicas,
        duplicate_window=settings.duplicate_window,
        description=f"taskq tasks for site {site}, queue {queue}",
    )


def site_source(names: Names, hub: str, site: str, queue: str) -> SourceSpec:
    """The source entry of `site`'s queue stream: the hub's outbox for it (domain `hub`),
    its subjects renamed to the queue's own."""
    return SourceSpec(
        name=names.site_stream(site, queue),
        domain=hub,
        consumer=site,
        deliver=names.site_deliver(site, queue),
        transform=(names.site_filter(site, queue), names.queue_filter(queue)),
    )


HISTORY_MAX_AGE = 90000.0  # a day and an hour: past any window's own TTL
HISTORY_MAX_RECORD = 4096  # bytes a window's record may take (taskq.records.history.MAX_RECORD)


RATE_HORIZON = 86400.0  # rate-limited starts reserved at most this far ahead (seconds)
RATE_WINDOWS_AHEAD = 600  # ...and at most this many windows ahead


def rate_horizon(period: float) -> float:
    """How far ahead a held task may reserve a start under a `period`-long limit: 10
    minutes for `/s` limits, 10 hours for `/m`, a day for `/h`."""
    return min(RATE_HORIZON, RATE_WINDOWS_AHEAD * period)
