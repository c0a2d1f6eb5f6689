"""Durable workflow runs are bounded: a workflow's `timeout`, the journal's size limit, and
finished runs expiring with `results_ttl` (their journal and summary removed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from taskq import App, TaskFailed, Workflow
from taskq.errors import ConfigError, NotFound
from taskq.workflows import decide, store
from taskq.workflows.end import expire_run
from taskq.workflows.views import show_run
from tests.conftest import running_worker, wait_until


async def test_a_run_past_its_timeout_fails_with_workflow_timeout(app: App) -> None:
    started: list[int] = []

    @app.task
    async def slow(n: int) -> None:
        started.append(n)
        await asyncio.sleep(60)  # runs until the run's end cancels it

    @app.workflow(timeout=timedelta(seconds=1))
    async def hurried(wf: Workflow) -> Any:
        await wf.gather(wf.run(slow, 1), wf.wait_for("never"))

    async with running_worker(app, concurrency=4):
        run = await hurried.start()
        with pytest.raises(TaskFailed) as failed:
            await run.result(timeout=30)
        assert failed.value.type == "WorkflowTimeout"
        assert "timeout of 1s" in failed.value.message
        assert await run.status() == "dead"
        # its running step is cancelled with it
        view = await show_run(await app.client(), run.id)
        step = next(s for s in view.steps if s.kind == "run")
        await wait_until(_step_state(app, run.id, step.n, "cancelled"), timeout=30)
    assert started == [1]


def _step_state(app: App, run_id: str, n: int, state: str) -> Any:
    async def check() -> bool:
        view = await show_run(await app.client(), run_id)
        return any(s.n == n and s.state == state for s in view.steps)

    return check


@pytest.mark.parametrize("timeout", [0, -1, "1h", True])
def test_a_bad_workflow_timeout_is_a_config_error(app: App, timeout: Any) -> None:
    async def flow(wf: Workflow) -> None:
        return None

    with pytest.raises(ConfigError, match="timeout"):
        app.workflow(timeout=timeout)(flow)


def test_an_unknown_workflow_option_is_a_config_error(app: App) -> None:
    async def flow(wf: Workflow) -> None:
        return None

    with pytest.raises(ConfigError, match="not retries"):
        app.workflow(retries=3)(flow)


async def test_a_run_that_would_pass_the_journal_limit_fails_before_it_records_more(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decide, "MAX_EVENTS", 30)

    @app.task
    async def one(n: int) -> int:
        return n

    @app.workflow
    async def endless(wf: Workflow) -> None:
        for n in range(100):
            await wf.run(one, n)

    async with running_worker(app, concurrency=4):
        run = await endless.start()
        with pytest.raises(TaskFailed) as failed:
            await run.result(timeout=60)
    assert failed.value.type == "JournalFull"
    assert "limits are 30 events" in failed.value.message
    events = await store.read(await app.client(), run.id)
    commands = sum(len(e.details.get("commands", [])) for e in events if e.kind == "decided")
    assert commands <= 30  # the command that would pass it was never recorded


@pytest.fixture
async def short_lived(nats_url: str, prefix: str) -> AsyncIterator[App]:
    """An app whose results (and ended runs) expire after two seconds."""
    application = App(url=nats_url, prefix=prefix, results_ttl=2.0)
    yield application
    await application.aclose()


async def test_an_ended_run_expires_with_its_results(short_lived: App) -> None:
    app = short_lived

    @app.workflow
    async def quick(wf: Workflow, n: int) -> int:
        return n + 1

    async with running_worker(app):
        run = await quick.start(41)
        assert await run.result(timeout=30) == 42
        client = await app.client()
        assert (await show_run(client, run.id)).summary.state == "succeeded"

        async def gone() -> bool:
            try:
                await show_run(client, run.id)
            except NotFound:
                return True
            return False

        await wait_until(gone, timeout=30)
    assert await store.read(client, run.id) == []
    assert await store.load_summary(client, run.id) is None


async def test_an_early_expiry_request_removes_nothing(app: App) -> None:
    @app.workflow
    async def quick(wf: Workflow) -> str:
        return "done"

    async with running_worker(app):
        run = await quick.start()
        assert await run.result(timeout=30) == "done"
    client = await app.client()
    # a decision message asking to expire the run now (anyone who may enqueue can send one)
    await expire_run(client, run.id)
    assert (await store.load_summary(client, run.id)) is not None
    assert len(await store.read(client, run.id)) >= 2


async def test_the_journal_stream_bounds_each_writer_s_subject_and_message(app: App) -> None:
    import nats

    await store.ensure_workflows(await app.client())
    nc = await nats.connect(app.settings.url)
    try:
        info = await nc.jetstream().stream_info(app.names.workflows_stream)
    finally:
        await nc.close()
    config = info.config
    # one message a subject (each event's own): a second one is refused, nothing replaced
    assert config.max_msgs_per_subject == 1
    assert config.discard_new_per_subject and str(config.discard) in ("new", "DiscardPolicy.NEW")
    assert config.max_msg_size == 2 * store.MAX_EVENT_BYTES


async def test_a_nan_is_refused_at_the_call_never_journaled_as_none(app: App) -> None:
    """Issue 38 (12): a non-finite float in a run's start, a step's call or a signal is
    refused where it is made, never carried as null."""
    from taskq.errors import ArgumentsError
    from taskq.workflows.replay import Replayer

    @app.task
    async def echo(value: Any) -> Any:
        return value

    @app.workflow
    async def passes(wf: Workflow, value: Any) -> Any:
        try:
            return await wf.run(echo, {"x": [1.0, value]})
        except ArgumentsError as exc:
            return f"refused: {exc}"

    with pytest.raises(ArgumentsError, match="nan"):
        await passes.start(float("nan"))
    async with running_worker(app):
        run = await passes.start("x")
        assert await run.result(timeout=30) == {"x": [1.0, "x"]}
        run = await passes.options(key=f"inf-{run.id}").start({"inner": "ok"})
        with pytest.raises(ConfigError, match="inf"):
            await run.signal("go", {"v": float("inf")})
    inside = Workflow("r", Replayer("r"))
    with pytest.raises(ArgumentsError, match=r"\['x'\]\[1\] is nan"):
        inside.run(echo, {"x": [1.0, float("nan")]})


def test_the_journals_byte_bound_is_a_setting_of_at_least_64_mib() -> None:
    """Issue 38 (7): the workflows stream may be bounded in bytes (0: no bound of its own)."""
    from taskq.settings import Settings
    from taskq.topology.names import Names
    from taskq.topology.specs import workflows_stream

    bounded = Settings(workflows_max_bytes=64 * 1024**2)
    assert workflows_stream(Names("t"), bounded).max_bytes == 64 * 1024**2
    assert workflows_stream(Names("t"), Settings()).max_bytes == -1
    with pytest.raises(ConfigError, match="64 MiB"):
        App(workflows_max_bytes=1000).settings  # noqa: B018
