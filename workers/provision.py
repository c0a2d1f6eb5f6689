"""Provisioning: every stream, consumer and bucket the workers of an app's queues use,
created ahead by an operator (`taskq provision MODULE:APP`).

The shipped worker role may not create streams or consumers (docs/security.md): a user that
may create a stream may make one that sources the dead-letter stream and read it there, and
one that may create a queue's consumer may update it with `pause_until` (the same API
request), pausing the queue. Such a worker finds what it needs here, goes on with it, and
names anything missing in one line (`NotProvisioned`).
"""

from __future__ import annotations

from dataclasses import dataclass

from taskq.app import App
from taskq.client import Client
from taskq.flowcontrol.options import DEFAULT_PRIORITY, PRIORITIES
from taskq.records.cancels import ensure_cancels
from taskq.records.heartbeats import ensure_workers
from taskq.records.progress import ensure_progress
from taskq.topology.specs import events_consumer, history_stream, results_buckets, runs_bucket
from taskq.workers.setup import QueueSetup, ensure_level, prepare
from taskq.workflows.store import ensure_workflows


@dataclass(frozen=True)
class Provisioned:
    """What `provision` made sure of: each queue's streams, the consumers on them, the
    buckets beside them."""

    queues: list[str]
    streams: list[str]
    consumers: list[str]
    buckets: list[str]

    def to_dict(self) -> dict[str, list[str]]:
        return {
            "queues": self.queues,
            "streams": self.streams,
            "consumers": self.consumers,
            "buckets": self.buckets,
        }


async def provision(app: App, client: Client, queues: list[str]) -> Provisioned:
    """Create (or bring up to date) what a worker of `queues` creates at start-up, plus
    what it would create later on first use: every priority level's consumer, the dead
    letter sweeper's consumer, the history's stream, and the workflow, worker heartbeat,
    progress, cancel and large-body buckets."""
    setups = list((await prepare(app, client, queues)).values())
    for main in [s for s in setups if s.lane is None]:
        setups += [
            await ensure_level(app, client, main, level)
            for level in PRIORITIES
            if level != DEFAULT_PRIORITY
        ]
    names = client.names
    await client.connection.streams.ensure_consumer(events_consumer(names))
    await client.connection.streams.ensure(history_stream(names, client.settings))
    await _buckets(client)
    blobs = await client.codec.claims.provision()
    return Provisioned(
        queues=list(queues),
        streams=sorted(
            {s.stream for s in setups}
            | {names.dlq_stream, names.events_stream, names.limits_stream, names.history_stream}
            | ({names.workflows_stream} if app.workflows else set())
        ),
        consumers=sorted(_consumers(setups) | {f"{names.events_stream} {names.events_consumer}"}),
        buckets=sorted(
            {
                *client.results.configured,
                names.flows_bucket,
                names.workers_bucket,
                names.progress_bucket,
                names.cancels_bucket,
                names.runs_bucket,
                *blobs,
            }
        ),
    )


async def _buckets(client: Client) -> None:
    """The buckets a worker makes on first use, brought up to date if an earlier taskq
    made them; the workflows stream and the runs bucket (every app: chains, groups and
    chords keep their marks and summaries there too)."""
    for ensure in (ensure_workers, ensure_progress, ensure_cancels, ensure_workflows):
        await ensure(client)
    names, settings = client.names, client.settings
    for spec in (*results_buckets(names, settings), runs_bucket(names, settings)):
        await client.connection.kv.upgrade(spec)


def _consumers(setups: list[QueueSetup]) -> set[str]:
    return {f"{s.stream} {s.durable}" for s in setups}
