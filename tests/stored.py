"""Reading what the server stores, for tests that check what is (not) in it: every body of
a prefix's streams, an object store's chunk count, and a marker no stored byte may hold;
and writing result records straight into the results bucket, for the task-list tests."""

from __future__ import annotations

import asyncio

from taskq import App
from taskq.client import Client
from taskq.records.results import encoded, ensure_results

MARKER = "s3cret-Marker-7x"  # must appear nowhere in the server's stored bytes


async def stored_bodies(reader: App) -> list[bytes]:
    """Every message body stored for this prefix (queues, DLQ, KV buckets' streams), read
    by an app without a key: what someone with the server's disk would see."""
    broker = (await reader.client()).connection
    bodies: list[bytes] = []
    for name in await broker.streams.listing():
        if reader.settings.prefix.upper() not in name:
            continue
        state = await broker.streams.state(name)
        if not state.messages:
            continue
        for seq in range(max(1, state.first_seq), state.last_seq + 1):
            found = await broker.messages.get(name, seq)
            if found is not None:
                bodies.append(found.data)
    return bodies


async def chunks(app: App, bucket: str) -> int:
    """Chunk messages stored in an object-store bucket (0 once its objects are deleted)."""
    broker = (await app.client()).connection
    stream = f"OBJ_{bucket}"
    if stream not in await broker.streams.listing():
        return 0
    state = await broker.streams.state(stream, f"$O.{bucket}.C.>")
    return sum(state.subjects.values())


async def write_records(app: App, count: int, start: int = 0) -> list[str]:
    """`count` result records, pipelined, ids `id<n:06d>` from `start`: task `t<n % 3>`,
    queue `q<n % 2>`, state by `n % 4` (succeeded, dead, failed, succeeded)."""
    client: Client = await app.client()
    await ensure_results(client)
    states = ("succeeded", "dead", "failed", "succeeded")
    ids, acks = [], []
    for n in range(start, start + count):
        task_id = f"id{n:06d}"
        body = encoded({"state": states[n % 4], "task": f"t{n % 3}", "queue": f"q{n % 2}"})
        ids.append(task_id)
        acks.append(
            await client.connection.kv.put_nowait(client.names.results_bucket, task_id, body)
        )
    await asyncio.gather(*acks)
    return ids
