"""Moving what a queue's schedules fired into the queue.

A schedule's target must be in its own stream (ADR-51), and schedules live in the queue's
timer stream (taskq.records.schedules), so the server fires a task onto its fired subject there;
every worker of the queue runs this loop on one shared durable consumer, which publishes
each fired task to its queue subject and then acknowledges it. The publish carries
`Nats-Msg-Id` `fired:<stream>:<seq>`: a move retried after a crash is deduplicated, so a
fired task enters its queue once. Moving needs no task slot: it runs beside the tasks,
each firing moved the moment it arrives (a periodic run's lateness is judged then).

A periodic schedule's firing is published under its run's id instead (taskq.records.firings:
`periodic:<queue>:<task>:<due time>`), so two firings for one due time make one run. A
firing that is late (its next run was due already: no worker moved it in its period)
follows its schedule's `catch_up`: `all` moves it; `skip` drops it (acknowledged, counted
as `missed` in the worker's stats, and logged per pull with how many runs of which task);
`one` moves the first late firing of a schedule a worker sees and drops the others, one
catch-up run per period (and per minute at least), decided by a create-only record
`<prefix>.limit.catchup.<queue>.<task>`. A dropped run writes no result record of its own:
measured with 1,000 one-second schedules after 14 s with no worker, a record per dropped
run held the mover below the firing rate (it never caught up), while plain drops cleared
the backlog (docs/results-workflows-schedules.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter

from taskq.client import Client
from taskq.errors import NotFound, TaskqError
from taskq.flowcontrol.held import FIRED, HELD, carried, dropped_told
from taskq.flowcontrol.keys import task_token
from taskq.flowcontrol.store import ensure_limits
from taskq.nats import Delivery, Puller
from taskq.records.envelope import MSG_ID
from taskq.records.firings import Firing, firing
from taskq.records.heartbeats import COPIED_IN
from taskq.retrying import retry_transient

log = logging.getLogger("taskq.worker")
BATCH = 256
CATCH_UP_WINDOW = 60.0  # `catch_up="one"`: at most one catch-up run per this, or per period


async def run_mover(
    client: Client,
    queue: str,
    stopping: asyncio.Event,
    stats: Counter[str] | None = None,
    linger: float = 1.0,
) -> None:
    """Move fired tasks of `queue` until `stopping` is set (late periodic runs dropped are
    counted in `stats["missed"]`); a pull request waits `linger` seconds for fired tasks (the
    worker's fetch timeout: stopping waits for it)."""
    names = client.names
    stream, durable = names.timer_stream(queue), names.timer_consumer(queue)
    puller: Puller | None = None
    tally = stats if stats is not None else Counter()
    while not stopping.is_set():
        try:
            if puller is None:
                puller = await client.connection.pull(stream, durable)
            await _move_batch(client, puller, tally, linger, queue)
        except TaskqError as exc:
            log.warning("moving fired tasks of queue %s failed: %s", queue, exc)
            if isinstance(exc, NotFound) and puller is not None:
                await puller.close()
                puller = None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stopping.wait(), client.settings.timings.loop_retry)
    if puller is not None:
        await puller.close()


async def _move_batch(
    client: Client, puller: Puller, tally: Counter[str], linger: float, queue: str
) -> None:
    """One pull request's firings, each moved as it arrives."""
    moving = [
        asyncio.create_task(move(client, d, tally, queue))
        async for d in puller.stream(BATCH, linger)
    ]
    dropped = Counter(run.task for run in await asyncio.gather(*moving) if run is not None)
    if dropped:
        shown = ", ".join(f"{task} ({n})" for task, n in dropped.most_common(10))
        log.info("dropped late periodic runs (their catch_up): %s", shown)


async def move(
    client: Client, d: Delivery, tally: Counter[str] | None = None, queue: str = ""
) -> Firing | None:
    """Publish one fired task to its queue subject, then acknowledge it (a failure leaves
    it to come back after the consumer's ack_wait); the run, when it was a late periodic
    run its catch-up policy dropped. A held task back in `queue` is tallied as a copy (no
    new task: `taskq queues`' IN/s leaves it out, counted the moment it re-enters)."""
    target = client.names.unfired(d.subject)
    if target is None:  # nothing a schedule of ours fires: nowhere to move it
        log.warning("dropping %s from %s: not a fired task subject", d.subject[:100], d.stream)
        await d.term("not a fired task subject")
        return None
    fired = {FIRED: str(d.seq), MSG_ID: f"fired:{d.stream}:{d.seq}"}
    headers = {**carried(d.raw_headers, dropped_told(client)), **fired}
    run = firing(client.names.prefix, d.raw_headers)
    if run is not None:
        if not await catch_up(client, run):
            await d.ack()
            if tally is not None:
                tally["missed"] += 1
            return run
        headers[MSG_ID] = run.run_id  # the run's id, one run per due time (taskq.records.firings)
    try:
        await client.connection.publish(target, d.data, headers)
    except TaskqError as exc:
        log.warning("moving a fired task to %s failed (it comes back): %s", target, exc)
        return None
    if tally is not None and HELD in (d.raw_headers or {}):
        tally[f"{COPIED_IN}{queue}"] += 1
    await d.ack()
    return None


async def catch_up(client: Client, run: Firing) -> bool:
    """Whether periodic `run` goes to its queue: on time, or late and its policy takes it."""
    if run.catch_up == "all" or not run.late(client.clock.time()):
        return True
    return run.catch_up == "one" and await _first_late(client, run)


async def _first_late(client: Client, run: Firing) -> bool:
    """True for the first late run of its schedule a worker sees within max(period, 60 s):
    the one catch-up run of `catch_up="one"` (a create-only record decides)."""
    await ensure_limits(client)
    subject = client.names.limit_subject("catchup", run.queue, task_token(run.task))
    records = client.connection.records
    ttl = max(run.period, CATCH_UP_WINDOW)
    created = await retry_transient(lambda: records.create(subject, run.run_id.encode(), ttl))
    return created is not None
