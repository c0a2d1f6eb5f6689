"""Reading what the server stores, for tests that check what is (not) in it: every body of
a prefix's streams, an object store's chunk count, and a marker no stored byte may hold."""

from __future__ import annotations

from taskq import App

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
