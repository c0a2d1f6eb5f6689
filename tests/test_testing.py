"""taskq.testing and its pytest plugin, as a user's suite meets them: a module-level app
pointed at the session's server and the test's prefix by `worker()` alone, `drain()` over
retries, workflows and schedules, outcome records, and the example suite run by pytest."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from taskq import App, HookError, chain
from taskq.records.clock import parse_time
from taskq.records.schedules import list_schedules
from taskq.server import EmbeddedServer
from taskq.testing import DrainTimeout, configure, worker
from taskq.testing.environment import activated
from tests.apps import shop
from tests.conftest import ROOT, wait_until


async def test_worker_points_the_app_at_the_test_server_and_drains(
    taskq_server: EmbeddedServer, taskq_prefix: str
) -> None:
    # Given a module-level app configured nowhere
    assert shop.app.settings.url != taskq_server.url
    async with worker(shop.app) as w:
        # When tasks, a retry, a dead letter, a chain and a delayed task are enqueued
        assert (shop.app.settings.url, shop.app.settings.prefix) == (
            taskq_server.url,
            taskq_prefix,
        )
        added = await shop.add.enqueue(1, 2)
        retried = await shop.flaky.enqueue()
        refused = await shop.refund.enqueue("o-7")
        flow = await chain(shop.add.s(2, 3), shop.mul.s(10)).enqueue()
        later = await shop.add.options(countdown=3).enqueue(20, 22)
        # the worker keeps it as a schedule until it is due (a task due within 2 s waits in
        # the worker instead)
        await wait_until(lambda: list_schedules(shop.app), timeout=20)
        [schedule] = await list_schedules(shop.app)
        due = parse_time(schedule.expression.removeprefix("@at "))
        # until it is due (a time, not an event: drain runs what is due when it is called)
        await asyncio.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
        # Then drain returns once everything due has run, and says how each ended
        await w.drain(timeout=20)
    assert w.results[added.id].result == 3
    assert (w.results[retried.id].state, w.results[retried.id].attempts) == ("succeeded", 2)
    assert w.results[flow.id].result == 50
    assert w.results[later.id].result == 42
    assert w.dead[refused.id].reason == "permanent"
    assert w.results[refused.id].state == "dead"
    assert w.stats["retried"] == 1 and w.stats["dead"] == 1


async def test_drain_gives_up_with_what_is_left(taskq_server: EmbeddedServer) -> None:
    async with worker(shop.app, grace=0.05) as w:
        await shop.nap.enqueue(30)
        with pytest.raises(DrainTimeout) as caught:
            await w.drain(timeout=0.3)
    assert caught.value.in_flight == 1 and "not drained within 0.3s" in str(caught.value)


async def test_a_failing_start_hook_raises_from_the_block(taskq_server: EmbeddedServer) -> None:
    app = App()

    @app.on_worker_start
    def broken() -> None:
        raise RuntimeError("no database")

    with pytest.raises(HookError):
        async with worker(app):
            pytest.fail("the block must not run")


def test_apps_get_their_settings_back_after_the_test() -> None:
    app = App(url="nats://example.invalid:4222", prefix="mine")
    with activated("nats://127.0.0.1:1", "ttest") as environment:
        configure(app)
        configure(app)  # once is enough: the original settings are kept, not these
        assert (app.settings.url, app.settings.prefix) == ("nats://127.0.0.1:1", "ttest")
        assert environment.adopt(app) is False
    assert (app.settings.url, app.settings.prefix) == ("nats://example.invalid:4222", "mine")
    configure(app)  # outside a test that uses taskq_server: nothing
    assert app.settings.prefix == "mine"


@pytest.mark.heavy
@pytest.mark.timeout(330)
@pytest.mark.parametrize("processes", ["0", "2"])
def test_example_suite_runs_as_a_user_would(processes: str) -> None:
    """examples/testing/ has no conftest.py: the fixtures come from the installed plugin.
    With xdist (`-n 2`), two processes each start their session's server at once: each
    binds its own port, neither races the other for it (two show it as well as three did,
    for three quarters of the interpreters and servers)."""
    folder = ROOT / "examples" / "testing"
    assert not (folder / "conftest.py").exists()
    # a test of the example stuck past 40 s prints every thread's stack (faulthandler), and
    # what the run printed is reported here, with each test's time, before this test's own
    # timeout (a CI run under a stall of the whole machine took 114 s for 7 passing tests)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", processes]
    argv += ["--durations=7"]
    try:
        result = subprocess.run(
            [*argv, "-o", "faulthandler_timeout=40"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,  # a hang guard: ~5 s alone, 25 s in the suite beside a CPU burner
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
    except subprocess.TimeoutExpired as late:
        pytest.fail(f"the example suite hung: {_text(late.stdout)}{_text(late.stderr)}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "7 passed" in result.stdout and "failed" not in result.stdout


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""
