"""Power loss: what an acknowledged task is worth when every machine loses power at once.

Method. A process crash (SIGKILL) loses nothing a server had written: the kernel's page
cache survives it and writes the data out later. A power cut or an OS crash loses what sat
in that cache, i.e. everything not fsynced, and JetStream fsyncs only every
`sync_interval` (2 minutes by default). To test that on one machine, each server's store
lives on a FUSE filesystem (tests/powercut/fs.py) that passes reads and writes through but
keeps a second, durable image holding only what was fsynced: a file's written bytes reach
it on fsync/fdatasync (or with O_SYNC), namespace changes in order at the next fsync, as
the journals of ext4 and XFS commit them. The power cut SIGKILLs every server and worker
of the rig in one go, so nothing more reaches the filesystem, then restarts the servers on
the durable image alone. That is the worst case a real disk allows (it would often have
written some pages back meanwhile), which is the case to design for. Not modelled: a disk
that lies about flushing its cache, torn sector writes, and filesystems stricter than a
journal, on which a new file's name survives only once its own directory is fsynced.

Each test checks what the producers were told: a task whose enqueue was acknowledged must
run (at least once), and a task whose message was acknowledged must have its result record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from taskq import App, chord, group
from taskq.dlq.browse import list_dead
from taskq.records.heartbeats import list_workers
from taskq.records.results import fetch
from taskq.records.schedules import delayed_name, list_schedules
from tests.apps import powered, reliable
from tests.conftest import wait_until
from tests.powercut.rig import Rig
from tests.powercut.streams import enqueue_some, stored_ids, task_ids_in_stream
from tests.reliability.ledger import all_done, runs

# a cluster's restart elects a leader per stream: slower, so run with `-m slow`
CLUSTER = pytest.param("cluster", marks=[pytest.mark.slow, pytest.mark.timeout(300)])
TOPOLOGIES = ["single", CLUSTER]
RELIABLE = "tests.apps.reliable:app"
POWERED = "tests.apps.powered:app"


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("sync", [None, "always"], ids=["default-sync", "sync-always"])
async def test_acknowledged_enqueues_after_a_power_cut(
    rig: Callable[..., Awaitable[Rig]], prefix: str, topology: str, sync: str | None
) -> None:
    """Given 200 acknowledged enqueues, when the power goes a moment later (well within the
    default 2-minute sync interval), then: with the default, the tasks are lost (this
    harness sees the loss); with `sync_interval: always`, every one is there."""
    servers = await rig(topology, sync)
    app = servers.app(prefix, reliable.app)
    ids = await enqueue_some(app, 200)
    await app.aclose()
    servers.power_cut()
    await servers.power_on()
    kept = await stored_ids(app)
    lost = set(ids) - kept
    print(f"{topology} sync={sync or 'default'}: {len(ids)} acknowledged, {len(lost)} lost")
    await app.aclose()
    if sync is None:
        assert lost, "the default sync interval lost nothing: the harness cannot see loss"
    else:
        assert lost == set()


@pytest.mark.parametrize("topology", TOPOLOGIES)
async def test_a_draining_worker_cut_mid_run_loses_nothing(
    rig: Callable[..., Awaitable[Rig]], prefix: str, tmp_path: Path, topology: str
) -> None:
    """With `sync_interval: always`: the power goes while a worker drains 300 tasks. After
    it, no task is acknowledged without its result record, and once a worker runs again
    every acknowledged task has run at least once and has its record."""
    servers = await rig(topology, "always")
    ledger = tmp_path / "ledger.txt"  # on the real disk: what ran, whatever the cut
    app = servers.app(prefix, reliable.app)
    ids = [f"d{i:04d}" for i in range(300)]
    handles = await reliable.awork.enqueue_many([{"tid": t, "seconds": 0.02} for t in ids])
    task_id = {t: h.id for t, h in zip(ids, handles, strict=True)}
    worker = servers.start_worker(prefix, RELIABLE, "-c", "4", TASKQ_TEST_LEDGER=str(ledger))
    await worker.wait_ready()
    broker = (await app.client()).connection
    stream = app.names.queue_stream("default")

    async def settled(count: int) -> bool:  # by the server's count: a run is not a settle,
        return (await broker.streams.state(stream)).messages <= len(ids) - count  # slow store

    await wait_until(lambda: settled(100), timeout=60)
    servers.power_cut()
    ran_before = set(runs(ledger))
    await app.aclose()
    await servers.power_on()
    waiting = await stored_ids(app)
    unrecorded = [t for t in ids if t not in waiting and await fetch(app, task_id[t]) is None]
    print(f"{topology}: ran {len(ran_before)} before the cut, {len(waiting)} still queued")
    assert 0 < len(waiting) < len(ids)  # the cut came mid-run
    assert unrecorded == []  # acknowledged (gone from the queue) only with its record
    servers.start_worker(prefix, RELIABLE, "-c", "8", TASKQ_TEST_LEDGER=str(ledger))
    await wait_until(lambda: all_done(ledger, ids), timeout=120)

    async def recorded() -> bool:  # the body ran (the ledger) a moment before its record
        records = await asyncio.gather(*(fetch(app, task_id[t]) for t in ids))
        return all(r is not None and r.state == "succeeded" for r in records)

    await wait_until(recorded, timeout=60)
    await app.aclose()


async def snapshot(app: App) -> dict[str, tuple[int, int]]:
    """(messages, last sequence) of every stream of the app's prefix: queues, DLQ, limits,
    the workflows stream and the buckets (results, cancels, workers...)."""
    broker = (await app.client()).connection
    names = [n for n in await broker.streams.listing() if app.settings.prefix.upper() in n]
    states = await asyncio.gather(*(broker.streams.state(n) for n in names))
    return {s.name: (s.messages, s.last_seq) for s in states}


async def set_up_state(app: App) -> dict[str, str]:
    """A dead letter, a delayed task, a half-done chord, a cancelled task, a unique_for
    record; the worker (default queue only) has registered the periodic schedule."""
    made = {
        "dead": (await powered.doomed.enqueue("d1")).id,
        # the worker keeps it as a schedule in the default queue's timer stream
        "delayed": (await powered.add.options(countdown=3600).enqueue(0, 0)).id,
        "unique": (await powered.add.options(unique_for=3600).enqueue(7, 8)).id,
    }
    members = group(powered.add.s(1, 2), powered.add.s(3, 4), powered.add_later.s(5, 6))
    made["chord"] = (await chord(members, powered.total.s()).enqueue()).id
    cancelled = await powered.later.enqueue("to-cancel")
    await cancelled.cancel()
    made["cancelled"] = cancelled.id
    broker = (await app.client()).connection
    queue, tasks = app.names.queue_stream("default"), app.names.queue_filter("default")

    async def settled() -> bool:  # the default queue's tasks done, the dead letter written
        empty = not (await broker.streams.state(queue, subjects_filter=tasks)).subjects
        kept = {s.name for s in await list_schedules(app)}
        return (
            empty
            and delayed_name(made["delayed"]) in kept
            and len(await list_dead(app)) == 1
            and await fetch(app, made["unique"]) is not None
        )

    await wait_until(settled, timeout=60)
    return made


@pytest.mark.parametrize("topology", TOPOLOGIES)
async def test_stored_state_survives_a_power_cut(
    rig: Callable[..., Awaitable[Rig]], prefix: str, topology: str
) -> None:
    """With `sync_interval: always`, a power cut keeps every stream and bucket as it was
    (message counts and sequences), and taskq reads it back: the dead letter, the delayed
    and periodic schedules, the worker registry, the cancel request, the unique_for
    record, and the half-done chord, which completes once a worker runs again."""
    servers = await rig(topology, "always")
    app = servers.app(prefix, powered.app)
    worker = servers.start_worker(prefix, POWERED, "-q", "default", TASKQ_HEARTBEAT="60")
    await worker.wait_ready()
    made = await set_up_state(app)
    before = await snapshot(app)
    at = app.names
    kept = [at.dlq_stream, at.limits_stream, at.queue_stream("later"), at.workflows_stream]
    kept += [f"KV_{b}" for b in (at.cancels_bucket, at.workers_bucket)]
    assert all(before.get(stream, (0, 0))[0] > 0 for stream in kept), before
    servers.power_cut()
    await app.aclose()
    await servers.power_on()
    after, queue = await snapshot(app), at.queue_stream("default")
    # the history is written in the background (every `history_every`): windows may have
    # been added between the snapshot and the cut; none acknowledged before it is lost
    history = at.history_stream
    assert after.get(history, (0, 0))[1] >= before.get(history, (0, 0))[1]
    moving = {queue, history}
    assert {k: v for k, v in after.items() if k not in moving} == {
        k: v for k, v in before.items() if k not in moving
    }
    # The default queue's last ack emptied its stream: nats-server (by our reading of its
    # filestore.go) then deletes the emptied block file after the fsync that records its
    # last sequence, and that unlink reaches the disk only with the next fsync of anything,
    # so the cut may bring the last acknowledged message back. It is a task that ran: it
    # runs again (at least once, docs/operations.md), and nothing new appears
    assert after[queue][1] == before[queue][1]
    for task_id in await task_ids_in_stream(app, queue):
        assert await fetch(app, task_id) is not None, task_id  # it had run
    assert [r.message.id for r in await list_dead(app)] == [made["dead"]]
    names = {s.name for s in await list_schedules(app)}
    assert {"periodic.nightly", delayed_name(made["delayed"])} <= names, names
    assert len(await list_workers(app)) == 1  # the record of the worker that lost power
    again = await powered.add.options(unique_for=3600).enqueue(7, 8)
    assert again.id == made["unique"]  # the unique_for record held
    servers.start_worker(prefix, POWERED, "-q", "default", "-q", "later")
    assert await app.handle(made["chord"]).result(timeout=60) == 21  # 3 + 7 + 11
    final = await fetch(app, made["cancelled"])
    assert final is not None and final.state == "cancelled"
    await app.aclose()
