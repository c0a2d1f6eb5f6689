"""Time skipping: a workflow that sleeps two weeks, waits a day for a signal and retries a
step after ten minutes runs in about a second. `worker(app, time_skipping=True)` moves the
app's clock to the next thing due whenever nothing else can run."""

from __future__ import annotations

from datetime import timedelta

from tasks import app, price, trial

from taskq.testing import worker


async def test_a_trial_nobody_upgrades_ends_with_a_reminder(taskq_server):
    async with worker(app, time_skipping=True) as w:
        start = w.now()
        run = await trial.start("ada")
        await w.drain()  # two weeks, a day and ten minutes, skipped
        assert await run.result(timeout=5) == "reminded ada"
        assert w.now() - start >= timedelta(days=15, minutes=10)


async def test_a_delayed_task_runs_when_its_hour_is_skipped(taskq_server):
    async with worker(app, time_skipping=True) as w:
        handle = await price.options(countdown=3600).enqueue("pear", 2)
        await w.advance(timedelta(minutes=59))
        assert handle.id not in w.results  # not due yet
        await w.advance(timedelta(minutes=1))
    assert w.results[handle.id].result == 1.5
