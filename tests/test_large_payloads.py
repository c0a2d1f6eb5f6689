"""Bodies over the server's max_payload (1 MiB here) go through the object store (claim
check): 5 MB arguments and results round-trip, the task's copy is deleted when it settles,
sealing composes with it, and a large task's dead letter keeps its whole original."""

from __future__ import annotations

import json

from taskq import App
from taskq.dlq.browse import list_dead
from taskq.dlq.oversize import original_bytes
from tests.conftest import running_worker, wait_until
from tests.stored import MARKER, chunks, stored_bodies

FIVE_MB = 5 * 2**20


async def test_five_megabyte_arguments_and_result_round_trip(app: App) -> None:
    @app.task
    def mirror(blob: str) -> str:
        return blob[::-1]

    blob = "ab" * (FIVE_MB // 2)
    handle = await mirror.enqueue(blob)
    assert await chunks(app, app.names.blobs_bucket) > 0  # the arguments wait there
    async with running_worker(app):
        assert await handle.result(timeout=30) == blob[::-1]
        # the task's copy goes once it settled; the result's stays with the result
        await wait_until(lambda: _no_chunks(app, app.names.blobs_bucket), timeout=10)
    assert await chunks(app, f"{app.names.prefix.upper()}_RESULT_BLOBS") > 0


async def _no_chunks(app: App, bucket: str) -> bool:
    return await chunks(app, bucket) == 0


async def test_sealed_and_claim_checked_nothing_in_clear(keyed: App, app: App) -> None:
    @keyed.task
    def size(blob: str) -> int:
        return len(blob)

    blob = (MARKER + " ") * (2 * 2**20 // (len(MARKER) + 1))
    handle = await size.enqueue(blob)
    bodies = await stored_bodies(app)  # the reference in the queue, the chunks of the object
    assert sum(len(b) for b in bodies) > 2 * 2**20
    assert not [b for b in bodies if MARKER.encode() in b]
    async with running_worker(keyed):
        assert await handle.result(timeout=30) == len(blob)


async def test_a_large_task_s_dead_letter_keeps_its_original(app: App) -> None:
    @app.task(max_retries=0)
    def refuse(blob: str) -> None:
        raise ValueError("no")

    blob = "z" * (2 * 2**20)
    await refuse.enqueue(blob)
    async with running_worker(app) as worker:
        await wait_until(lambda: worker.stats["dead"] == 1, timeout=30)
    [record] = await list_dead(app)
    assert record.reason == "exhausted" or record.reason == "permanent"
    assert json.loads(await original_bytes(app, record))["args"] == [blob]


async def test_a_result_over_the_payload_limit_fails_once_permanently(
    nats_url: str, prefix: str
) -> None:
    """Too large to store even by claim check: one attempt, a permanent dead letter naming
    the size and the limit (it used to be retried, then dead-lettered as `crashed`)."""
    limit = 2 * 2**20
    small = App(url=nats_url, prefix=prefix, payload_limit=limit)
    runs: list[int] = []

    @small.task(max_retries=3)
    def huge(n: int) -> str:
        runs.append(n)
        return "h" * (3 * 2**20)

    try:
        async with running_worker(small) as worker:
            handle = await huge.enqueue(1)
            await wait_until(lambda: worker.stats["dead"] == 1, timeout=30)
            assert worker.stats["retried"] == 0
        assert runs == [1]
        [record] = await list_dead(small)
        assert record.reason == "permanent" and record.attempts == 1
        assert record.error.type == "PayloadTooLarge"
        assert str(limit) in record.error.message and "bytes" in record.error.message
        assert await handle.status() == "dead"
    finally:
        await small.aclose()


async def test_a_result_over_max_payload_under_the_limit_is_claim_checked(
    nats_url: str, prefix: str
) -> None:
    small = App(url=nats_url, prefix=prefix, payload_limit=4 * 2**20)

    @small.task
    def big(n: int) -> str:
        return "b" * (3 * 2**20)

    try:
        async with running_worker(small):
            handle = await big.enqueue(1)
            assert len(await handle.result(timeout=30)) == 3 * 2**20
    finally:
        await small.aclose()
