"""A wait for a result rides out reads the server does not answer (issue 41, item 5: under
load `handle.result(timeout=120)` ended after 8 s with "NATS request timed out", a transient
error the wait should have outlasted). Faults are injected around the real connection."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from taskq import App
from taskq.errors import TransientError
from taskq.records import results
from tests.conftest import running_worker


async def test_a_result_wait_outlasts_reads_that_time_out(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = asyncio.Event()

    @app.task
    async def slow() -> str:
        await release.wait()
        return "done"

    client = await app.client()
    kv = client.connection.kv
    real_get = kv.get
    failed: list[str] = []

    async def flaky_get(bucket: str, key: str) -> Any:
        if "RESULTS" in bucket and len(failed) < 6:  # the next six reads time out
            failed.append(key)
            raise TransientError("NATS request timed out")
        return await real_get(bucket, key)

    async def once(call: Any) -> Any:  # no retry inside a read: the wait must ride it out
        return await call()

    monkeypatch.setattr(kv, "get", flaky_get)
    monkeypatch.setattr(results, "patiently", once)
    async with running_worker(app):
        handle = await slow.enqueue()
        waiting = asyncio.create_task(handle.result(timeout=60))
        while len(failed) < 3 and not waiting.done():  # bounded by the reads' own pace
            await asyncio.sleep(0.05)
        release.set()
        assert await waiting == "done"
    assert len(failed) >= 3  # reads did time out while it waited
