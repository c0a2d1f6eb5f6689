"""With encryption on, no body taskq stores holds plaintext, whatever kind it is: every
stream, KV bucket and object store of the prefix is scanned for a marker that every
argument, result, progress message and error carries. Debounced tasks then run."""

from __future__ import annotations

import asyncio

import taskq
from taskq import App, chain, chord, group
from taskq.handle import TaskHandle
from taskq.nats import StoredMessage
from tests.conftest import running_worker, wait_until
from tests.stored import MARKER

BIG = 2 * 2**20


async def stored_messages(reader: App) -> list[StoredMessage]:
    """Every message stored for this prefix — queues, schedules, DLQ, flow-control records,
    KV buckets, object stores (`KV_*`, `OBJ_*` streams) — read by an app without a key."""
    broker = (await reader.client()).connection
    found: list[StoredMessage] = []
    for name in await broker.streams.listing():
        if reader.settings.prefix.upper() not in name:
            continue
        state = await broker.streams.state(name)
        for seq in range(max(1, state.first_seq), state.last_seq + 1 if state.messages else 0):
            stored = await broker.messages.get(name, seq)
            if stored is not None:
                found.append(stored)
    return found


async def plaintext(reader: App) -> list[str]:
    """Where the marker shows in the clear (body, header or subject), if anywhere."""
    marker = MARKER.encode()
    seen = []
    for m in await stored_messages(reader):
        if marker in m.data or MARKER in m.subject or MARKER in repr(m.headers):
            seen.append(f"{m.subject} {m.headers} {m.data[:80]!r}")
    return seen


async def any_succeeded(handles: list[TaskHandle]) -> bool:
    return "succeeded" in [await h.status() for h in handles]


async def test_every_kind_of_body_is_sealed(keyed: App, app: App) -> None:
    release = asyncio.Event()
    debounced: list[str] = []

    @keyed.task(max_retries=0)
    async def echo(text: str, fail: bool = False) -> str:
        taskq.current().progress(0.5, f"at {text}")
        if fail:
            raise ValueError(f"refused {text}")
        return text

    @keyed.task
    async def join(parts: list[str]) -> str:
        return "+".join(parts)

    @keyed.task
    async def settle(text: str) -> str:
        debounced.append(text)
        return text

    @keyed.task(rate_limit="1/h")
    async def rated(text: str) -> str:
        return text

    @keyed.task(concurrency_key="tenant", max_per_key=1)
    async def slotted(tenant: str, text: str) -> str:
        await release.wait()
        return text

    @keyed.periodic(every=3600, args=(MARKER,))
    async def hourly(text: str) -> str:
        return text

    # Given every kind of body a producer stores
    plain = await echo.enqueue(MARKER)
    await echo.options(countdown=3600).enqueue(MARKER)
    await settle.options(debounce=1, key="d").enqueue(MARKER)
    await echo.options(unique_for=60).enqueue(MARKER + "u")
    await echo.options(throttle=60, key="t").enqueue(MARKER + "t1")
    dropped = await echo.options(throttle=60, key="t").enqueue(MARKER + "t2")
    assert dropped.dropped
    dead = await echo.enqueue(MARKER, fail=True)
    large = await echo.enqueue(MARKER * (BIG // len(MARKER)))
    flows = [
        await chain(echo.s(MARKER), echo.s()).enqueue(),
        await group(echo.s(MARKER), echo.s(MARKER)).enqueue(),
        await chord(group(echo.s(MARKER), echo.s(MARKER)), join.s()).enqueue(),
    ]
    rates = [await rated.enqueue(MARKER), await rated.enqueue(MARKER)]
    slots = [await slotted.enqueue("acme", MARKER) for _ in range(3)]
    assert await plaintext(app) == []

    # When a worker runs them (results, progress, workflow state, dead letter, held tasks)
    async with running_worker(keyed, concurrency=8) as worker:
        assert await plain.result(timeout=20) == MARKER
        assert len(await large.result(timeout=30)) >= BIG - len(MARKER)
        for handle in flows:
            await handle.result(timeout=20)
        # one of the two ran (either: the other is held until the next hour)
        await wait_until(lambda: any_succeeded(rates), timeout=20)
        await wait_until(lambda: worker.stats["held"] >= 3, timeout=20)  # a rate, two slots
        await wait_until(lambda: debounced == [MARKER], timeout=20)  # and it ran
        await wait_until(lambda: worker.stats["dead"] == 1, timeout=20)
        assert await plaintext(app) == []
        release.set()
        for handle in slots:
            assert await handle.result(timeout=20) == MARKER
        await wait_until(lambda: worker.stats["dead"] == 1, timeout=1)
    assert await dead.status() == "dead"
    # Then none of it is readable without the key
    assert await plaintext(app) == []
