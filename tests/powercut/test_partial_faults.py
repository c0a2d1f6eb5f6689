"""Partial faults: one node of three loses power, a disk is lost, a store file is corrupted.

The power-cut rig (tests/powercut/rig.py) again, but the fault hits one server, not all:

* one node of an R3 cluster loses power while a producer enqueues (SIGKILL, then its mount
  keeps only what was fsynced); it comes back, catches up, and is made the queue stream's
  leader, so what is read back is what *its* store holds;
* a lost disk: one node's store is replaced by an empty one (same `server_name`), on R3 the
  cluster re-replicates to it, on R1 everything is gone (the loss is visible to the test);
* a corrupted file: on R1, 16 bytes of one record in the middle of the middle message block
  of a queue stream are inverted while the server is down; what the server makes of it on
  restart, and that every task outside that block is intact and runs.

Every test here is slow (`-m slow`): each builds FUSE mounts and, for R3, waits out elections.
The figures each prints are the ones docs/operations.md ("Durability") quotes.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import struct
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import Error as NatsError
from nats.js.errors import NotFoundError

from taskq import App
from taskq.errors import TaskqError
from tests.apps import reliable
from tests.conftest import running_worker, wait_until
from tests.powercut.mount import PowerCutMount
from tests.powercut.rig import Rig
from tests.powercut.streams import enqueue_some, stored_ids

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MakeRig = Callable[..., Awaitable[Rig]]


# -- one node's faults on an R3 cluster ------------------------------------------------------


def cut_one(servers: Rig, name: str) -> None:
    """Power loss of node `name` alone: SIGKILL it, then keep only what it had fsynced."""
    assert servers.cluster is not None
    servers.cluster.kill(name)
    servers.mounts[name].cut()


def replace_disk(mount: PowerCutMount) -> None:
    """The node's disk is lost and a blank one put in (its server already stopped)."""
    mount.unmount()
    shutil.rmtree(mount.live)
    shutil.rmtree(mount.durable)
    mount.mount()


async def stream_info(url: str, stream: str) -> dict[str, Any]:
    """`$JS.API.STREAM.INFO` as the server sends it (the cluster's replicas and their lag)."""
    nc = await nats.connect(servers=url.split(","), allow_reconnect=False)
    try:
        reply = await nc.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout=5)
        return dict(json.loads(reply.data))
    finally:
        await nc.close()


async def caught_up(url: str, stream: str, node: str) -> bool:
    """Whether `node`'s replica of `stream` is current with the leader (or leads it)."""
    try:
        cluster = (await stream_info(url, stream)).get("cluster") or {}
    except (NatsError, OSError, ValueError):
        return False
    if cluster.get("leader") == node:
        return True
    replicas = {r.get("name"): r for r in cluster.get("replicas") or []}
    mine = replicas.get(node) or {}
    return bool(mine.get("current")) and not mine.get("lag")


async def lead_from(url: str, stream: str, node: str) -> None:
    """Make `node` the leader of `stream`: reads (STREAM.MSG.GET) are then served from its
    store."""
    body = json.dumps({"placement": {"preferred": node}}).encode()

    async def leads() -> bool:
        try:
            info = await stream_info(url, stream)
        except (NatsError, OSError, ValueError):
            return False
        if (info.get("cluster") or {}).get("leader") == node:
            return True
        nc = await nats.connect(servers=url.split(","), allow_reconnect=False)
        try:
            await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{stream}", body, timeout=5)
        except NatsError:
            pass  # an election under way: asked again on the next round
        finally:
            await nc.close()
        return False

    await wait_until(leads, timeout=60, every=0.5)


async def enqueue_each(ids: list[str], acked: list[str], refused: list[str]) -> None:
    """Enqueue `ids` one by one; an id is in `acked` once the server acknowledged it, in
    `refused` when the enqueue raised (it may or may not be stored: not counted as lost)."""
    for tid in ids:
        try:
            await reliable.echo.enqueue(tid)
        except TaskqError:
            refused.append(tid)
        else:
            acked.append(tid)


@pytest.mark.parametrize("sync", ["always", None], ids=["sync-always", "default-sync"])
async def test_one_node_of_three_loses_power_mid_enqueue(
    rig: MakeRig, prefix: str, sync: str | None
) -> None:
    """R3: the queue stream's leader loses power (unsynced writes dropped) while a producer
    enqueues 300 tasks one by one; the other two go on acknowledging. Once it is back,
    caught up and leading the stream again, its store holds every acknowledged task."""
    servers = await rig("cluster", sync)
    assert servers.cluster is not None
    app = servers.app(prefix, reliable.app)
    stream = app.names.queue_stream("default")
    ids = [f"n{i:04d}" for i in range(300)]
    acked: list[str] = []
    refused: list[str] = []
    await enqueue_each(ids[:1], acked, refused)  # the stream exists: it has a leader
    victim = (await stream_info(servers.url, stream))["cluster"]["leader"]
    producing = asyncio.create_task(enqueue_each(ids[1:], acked, refused))
    await wait_until(lambda: len(acked) >= 100, timeout=60)
    cut_one(servers, victim)
    at_cut = len(acked)
    await wait_until(lambda: len(acked) >= at_cut + 50 or producing.done(), timeout=60)
    while_down = len(acked) - at_cut
    servers.cluster.start_node(victim)
    await producing
    await app.aclose()
    await servers.ready()
    await wait_until(lambda: caught_up(servers.url, stream, victim), timeout=60, every=0.25)
    await lead_from(servers.url, stream, victim)
    kept = await stored_ids(app)
    await app.aclose()
    lost = set(acked) - kept
    synced = servers.mounts[victim].cuts[-1]
    print(
        f"R3 sync={sync or 'default'}: {victim} (leader) cut after {at_cut} acks; "
        f"{while_down} acked while it was down; {len(acked)} acked, {len(refused)} refused, "
        f"{len(lost)} lost; its mount before the cut: {synced}"
    )
    assert while_down > 0  # two of three kept acknowledging
    assert lost == set()


async def test_a_lost_disk_on_one_node_of_three_is_refilled_from_the_others(
    rig: MakeRig, prefix: str
) -> None:
    """R3, sync always: the queue stream's leader loses its disk; the other two acknowledge
    more enqueues meanwhile; the node restarts on an empty store under the same name. The
    cluster re-replicates every stream to it: leading the queue stream, it serves all."""
    servers = await rig("cluster", "always")
    assert servers.cluster is not None
    app = servers.app(prefix, reliable.app)
    stream = app.names.queue_stream("default")
    before = await enqueue_some(app, 200)
    victim = (await stream_info(servers.url, stream))["cluster"]["leader"]
    servers.cluster.kill(victim)
    replace_disk(servers.mounts[victim])
    acked: list[str] = []
    refused: list[str] = []
    await enqueue_each([f"m{i:04d}" for i in range(100)], acked, refused)
    await app.aclose()
    store = servers.mounts[victim].path / "store"
    assert not store.exists()  # a blank disk
    servers.cluster.start_node(victim)
    await servers.ready()
    await wait_until(lambda: caught_up(servers.url, stream, victim), timeout=60, every=0.25)
    await lead_from(servers.url, stream, victim)
    kept = await stored_ids(app)
    await app.aclose()
    lost = (set(before) | set(acked)) - kept
    print(
        f"R3 lost disk on {victim} (leader): {len(before)} acked before, {len(acked)} while "
        f"it was down ({len(refused)} refused); {len(lost)} lost after it was refilled"
    )
    assert len(acked) == 100  # two of three kept acknowledging
    assert lost == set()
    assert (store / "jetstream" / "$G" / "streams" / stream / "msgs").is_dir()


async def test_a_lost_disk_on_a_single_node_loses_everything(rig: MakeRig, prefix: str) -> None:
    """R1, sync always: a lost disk is every task gone, the stream with them (the test
    sees the loss: nothing else holds a copy; restore from `nats stream backup`)."""
    servers = await rig("single", "always")
    assert servers.single is not None
    app = servers.app(prefix, reliable.app)
    ids = await enqueue_some(app, 200)
    assert await stored_ids(app) == set(ids)
    await app.aclose()
    servers.single.kill()
    replace_disk(servers.mounts["n1"])
    servers.single.start()
    kept = await stored_ids(app)
    await app.aclose()
    print(f"R1 lost disk: {len(ids)} acknowledged, {len(set(ids) - kept)} lost")
    assert kept == set()


# -- a corrupted message block on R1 ----------------------------------------------------------

PAD = 30_000  # bytes per task: 300 tasks fill three 4 MB blocks
HBIT = 1 << 31  # a record's length word flags that it has headers
SEQ_FLAGS = (1 << 63) | (1 << 62)  # a record's sequence word flags (erased, tombstone)


def records(block: Path) -> list[tuple[int, int, int]]:
    """(offset, length, sequence) of every record of a nats-server message block, read as
    its file store writes them: a little-endian length word (with the headers flag), the
    sequence, the time stamp, the subject... and a hash, `length` bytes in all."""
    data = block.read_bytes()
    found, offset = [], 0
    while offset < len(data):
        length, seq = struct.unpack_from("<IQ", data, offset)
        length &= ~HBIT
        assert 22 < length <= len(data) - offset, f"{block}: no record at {offset}"
        found.append((offset, length, seq & ~SEQ_FLAGS))
        offset += length
    return found


def damage(mount: PowerCutMount, file: Path, at: int) -> None:
    """Invert 16 bytes of `file` (relative to the mount) at `at`, as a bad sector would:
    in the page cache and on the disk alike (both images, written with the mount down)."""
    mount.unmount()
    for image in (mount.live, mount.durable):
        with open(image / file, "r+b") as block:
            block.seek(at)
            damaged = bytes(b ^ 0xFF for b in block.read(16))
            block.seek(at)
            block.write(damaged)
    mount.mount()


async def by_seq(app: App, stream: str) -> dict[int, str]:
    """The task id of every message of `stream` the server still gives out, by sequence."""
    nc = await nats.connect(servers=app.settings.url.split(","), allow_reconnect=False)
    try:
        js, found, seq = nc.jetstream(), {}, 1
        while True:
            try:
                msg = await js.get_msg(stream, seq=seq, subject=">", next=True)
            except NotFoundError:
                return found
            found[msg.seq] = str(json.loads(msg.data or b"{}")["kwargs"]["tid"])
            seq = msg.seq + 1
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("stop", "where"),
    [("stopped", "body"), ("stopped", "length"), ("killed", "body")],
    ids=["stopped-body", "stopped-length", "killed-body"],
)
async def test_a_corrupted_block_loses_only_tasks_in_that_block(
    rig: MakeRig, prefix: str, stop: str, where: str
) -> None:
    """R1, sync always: 300 tasks of 30 KB (three message blocks). The server is stopped
    (SIGTERM, or SIGKILL), 16 bytes of the record in the middle of the middle block are
    inverted (in its body, or its length word), and the server started again.

    It starts; every task of the other two blocks, and of the corrupted block before the
    damaged record, is intact and runs once; new tasks are taken and run. What the server
    does with the rest, as observed on nats-server 2.15.1: after a clean stop, a damaged
    body loses that one task, still counted in the stream but never delivered (the queue
    never empties); a damaged length word, or a damaged body after a crash (the server
    then reads its blocks through as it starts), truncates the block there: that task and
    the ones after it in that block are dropped, uncounted."""
    servers = await rig("single", "always")
    assert servers.single is not None
    app = servers.app(prefix)
    ran: Counter[str] = Counter()

    @app.task(name="padded")
    async def padded(tid: str, pad: str) -> None:
        ran[tid] += 1

    ids = [f"c{i:04d}" for i in range(300)]
    await padded.enqueue_many([{"tid": t, "pad": "p" * PAD} for t in ids])
    stream = app.names.queue_stream("default")
    stored = await by_seq(app, stream)
    assert sorted(stored.values()) == ids
    await app.aclose()
    if stop == "stopped":
        servers.single.stop()
    else:
        servers.single.kill()

    mount = servers.mounts["n1"]
    folder = Path("store") / "jetstream" / "$G" / "streams" / stream / "msgs"
    blocks = sorted((mount.path / folder).glob("*.blk"), key=lambda p: int(p.stem))
    assert len(blocks) == 3, blocks
    middle = records(blocks[1])
    offset, length, victim = middle[len(middle) // 2]
    damage(mount, folder / blocks[1].name, offset + length // 2 if where == "body" else offset)
    in_block = {seq for _, _, seq in middle}
    tail = {stored[s] for s in in_block if s >= victim}  # the damaged record, those after

    servers.single.start()
    readable = await by_seq(app, stream)
    state = await (await app.client()).connection.streams.state(stream)
    unreadable = set(ids) - set(readable.values())
    assert all(stored[s] == t for s, t in readable.items())  # nothing read back altered
    assert stored[victim] in unreadable and unreadable <= tail
    after = ["after1", "after2"]
    await padded.enqueue_many([{"tid": t, "pad": ""} for t in after])
    async with running_worker(app, concurrency=8):
        await wait_until(lambda: set(ran) >= set(readable.values()) | set(after), timeout=60)
        await wait_until(lambda: _drained(app, stream), timeout=30)
    final = await (await app.client()).connection.streams.state(stream)
    await app.aclose()
    print(
        f"corrupted {where} of seq {victim} ({stop}): {len(tail)} tasks from it to the end of "
        f"block {blocks[1].name}; at restart {state.messages} of 300 reported, "
        f"{len(readable)} readable, {len(unreadable)} lost; {len(ran)} ran; "
        f"{final.messages} left in the queue"
    )
    assert set(ran) == set(readable.values()) | set(after)
    assert all(n == 1 for n in ran.values())
    if stop == "stopped" and where == "body":
        assert unreadable == {stored[victim]}  # that task alone
        assert state.messages == 300 and final.messages == 1  # counted, never delivered
    else:
        assert unreadable == tail  # the block cut at the damage
        assert state.messages == 300 - len(tail) and final.messages == 0


async def _drained(app: App, stream: str) -> bool:
    """The queue's consumer has nothing left to deliver and nothing in flight."""
    consumer = await (await app.client()).connection.streams.consumer_state(
        stream, app.names.consumer("default")
    )
    return consumer.pending == 0 and consumer.ack_pending == 0
