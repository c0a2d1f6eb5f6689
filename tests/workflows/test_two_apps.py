"""State belongs to the Client, none to the process (issue 40, item 2): two Apps with
different prefixes in one process (as any suite on `taskq.testing` has) each start a
workflow under the same key, and both complete (a replay cache keyed by run id alone once
handed the second run the first one's finished replayer: it never advanced)."""

from __future__ import annotations

import asyncio
import contextlib

from taskq import App, Workflow
from tests.conftest import running_worker


def _app(url: str, prefix: str, label: str) -> App:
    app = App(url=url, prefix=prefix)

    @app.task
    async def step(n: int) -> str:
        return f"{label}-{n}"

    @app.workflow(name="order")
    async def order(wf: Workflow, n: int) -> list[str]:
        first = await wf.run(step, n)
        await wf.sleep(0.2)  # a second decision: the replayer is looked up again
        return [first, await wf.run(step, n + 1)]

    return app


async def test_two_apps_in_one_process_run_the_same_key_each_to_its_end(
    nats_url: str, prefix: str
) -> None:
    one, two = _app(nats_url, f"{prefix}a", "one"), _app(nats_url, f"{prefix}b", "two")
    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(running_worker(one))
            await stack.enter_async_context(running_worker(two))
            first = await one.workflows["order"].options(key="same").start(1)
            assert await first.result(timeout=30) == ["one-1", "one-2"]
            second = await two.workflows["order"].options(key="same").start(5)
            assert await second.result(timeout=30) == ["two-5", "two-6"]
            both = await asyncio.gather(
                one.workflows["order"].options(key="again").start(7),
                two.workflows["order"].options(key="again").start(8),
            )
            results = [await run.result(timeout=30) for run in both]
        assert results == [["one-7", "one-8"], ["two-8", "two-9"]]
    finally:
        await one.aclose()
        await two.aclose()
