"""The schedule list shows the user's schedules (issue 39, 7): a durable run's timers
(its sleeps, its deadline, its expiry) are taskq's own, listed with `--all` only, and those
of a run that has ended are gone with it (but its expiry, which removes it later)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from taskq import App, Workflow
from tests.conftest import cli, running_worker, wait_until


async def test_a_runs_timers_are_taskq_s_own_and_go_when_it_ends(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task
    async def report() -> str:
        return "done"

    @app.periodic(every=timedelta(hours=1))
    async def hourly() -> None: ...

    @app.workflow(timeout=timedelta(days=1))
    async def nap(wf: Workflow) -> Any:
        await wf.sleep(timedelta(hours=1))
        return await wf.run(report)

    async def listed(*flags: str) -> list[dict[str, Any]]:
        done = await cli(nats_url, prefix, "schedules", "ls", "--json", *flags)
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout))

    async with running_worker(app):
        run = await nap.start()

        async def sleeping() -> bool:
            return await run.status() == "sleeping"

        await wait_until(sleeping, timeout=30)
        mine = await listed()
        assert [s["name"] for s in mine] == ["periodic.hourly"]
        everything = await listed("--all")
        timers = [s for s in everything if s["internal"]]
        assert len(timers) == 2, everything  # the sleep's and the deadline's
        assert all(run.id in s["name"] for s in timers)
        await run.cancel()

        async def ended() -> bool:
            return await run.status() == "cancelled"

        await wait_until(ended, timeout=30)

        async def expiry_only() -> bool:  # the run's end writes its summary, then these
            left = [s["name"] for s in await listed("--all") if s["internal"]]
            return len(left) == 1 and ".dx0." in left[0]

        await wait_until(expiry_only, timeout=30)
