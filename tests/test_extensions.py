"""Extension points: middleware around runs and enqueues, worker lifecycle hooks, and the
task context `taskq.current()`, against a real server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import taskq
from taskq import App, ConfigError, HookError, Middleware, NoTaskContext, Settled, TaskContext
from taskq.records.envelope import Envelope
from tests.conftest import run_cli, running_worker, wait_until


class Recorder(Middleware):
    """Adds metadata and a header at enqueue, times and observes each run."""

    def __init__(self, name: str, seen: list[str]) -> None:
        self.name = name
        self.seen = seen

    async def enqueue(self, envelope: Envelope, call_next: Any) -> None:
        self.seen.append(f"{self.name}:enqueue:{envelope.task}")
        envelope.headers["X-Recorder"] = self.name
        await call_next(envelope.with_meta(**{self.name: "yes"}))

    async def process(self, ctx: TaskContext, call_next: Any) -> Any:
        self.seen.append(f"{self.name}:before:{ctx.task}")
        try:
            value = await call_next()
        except Exception as exc:
            self.seen.append(f"{self.name}:raised:{type(exc).__name__}")
            raise
        self.seen.append(f"{self.name}:after:{value}")
        return value


async def test_middleware_wraps_enqueue_and_run_in_order(nats_url: str, prefix: str) -> None:
    seen: list[str] = []
    app = App(url=nats_url, prefix=prefix, middleware=[Recorder("outer", seen)])
    app.add_middleware(Recorder("inner", seen))
    got: dict[str, Any] = {}

    @app.task
    async def double(x: int) -> int:
        ctx = taskq.current()
        got["meta"], got["header"] = dict(ctx.meta), ctx.headers.get("X-Recorder")
        return 2 * x

    try:
        async with running_worker(app) as worker:
            handle = await double.enqueue(21)
            assert await handle.result(timeout=10) == 42
            await wait_until(lambda: worker.stats["succeeded"] == 1)
    finally:
        await app.aclose()
    assert seen == [
        "outer:enqueue:double",
        "inner:enqueue:double",
        "outer:before:double",
        "inner:before:double",
        "inner:after:42",
        "outer:after:42",
    ]
    assert got == {"meta": {"outer": "yes", "inner": "yes"}, "header": "inner"}


async def test_middleware_raising_fails_the_attempt_by_the_policy(app: App) -> None:
    class Refuse(Middleware):
        async def process(self, ctx: TaskContext, call_next: Any) -> Any:
            raise taskq.Reject("refused by middleware")

    app.add_middleware(Refuse())
    ran: list[int] = []

    @app.task
    async def never(x: int) -> None:
        ran.append(x)

    async with running_worker(app) as worker:
        handle = await never.enqueue(1)
        await wait_until(lambda: worker.stats["dead"] == 1)
    with pytest.raises(taskq.TaskFailed, match="refused by middleware"):
        await handle.result(timeout=5)
    assert ran == []


async def test_enqueue_middleware_can_refuse_and_nothing_is_published(app: App) -> None:
    class Gate(Middleware):
        async def enqueue(self, envelope: Envelope, call_next: Any) -> None:
            if envelope.args == [13]:
                raise ValueError("unlucky")
            await call_next(envelope)

    app.add_middleware(Gate())

    @app.task
    async def lucky(x: int) -> int:
        return x

    with pytest.raises(ValueError, match="unlucky"):
        await lucky.enqueue(13)
    with pytest.raises(ValueError, match="unlucky"):
        await lucky.enqueue_many([1, 13, 2])  # one refused: none of the batch is published
    handles = await lucky.enqueue_many([1, 2])
    state = await (await app.client()).connection.streams.state(app.names.queue_stream("default"))
    assert state.messages == 2 and len(handles) == 2


def test_a_middleware_without_hooks_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="has none of"):
        App(middleware=[object()])

    class Sync:
        def process(self, ctx: Any, call_next: Any) -> Any: ...

    with pytest.raises(ConfigError, match="async def"):
        App(middleware=[Sync()])


async def test_context_in_async_and_thread_tasks(app: App) -> None:
    seen: dict[str, Any] = {}

    @app.task(max_retries=2, timeout=30, backoff=0.05, jitter=0)
    async def flaky() -> str:
        ctx = taskq.current()
        seen["async"] = (ctx.task, ctx.queue, ctx.attempt, ctx.max_attempts, ctx.id)
        seen["deadline"] = ctx.remaining()
        seen["enqueued"] = ctx.enqueued_at
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")
        ctx.logger.info("second try")
        return "ok"

    @app.task
    def in_thread() -> str:
        ctx = taskq.current()
        seen["thread"] = (ctx.task, ctx.attempt, ctx.deadline)
        return ctx.id

    async with running_worker(app) as worker:
        first = await flaky.enqueue()
        second = await in_thread.enqueue()
        assert await first.result(timeout=10) == "ok"
        assert await second.result(timeout=10) == second.id
        await wait_until(lambda: worker.stats["succeeded"] == 2)
    assert seen["async"] == ("flaky", "default", 2, 3, first.id)
    assert 25 < seen["deadline"] <= 30 and seen["enqueued"] is not None
    assert seen["thread"] == ("in_thread", 1, None)
    with pytest.raises(NoTaskContext):
        taskq.current()


async def test_task_logger_is_bound_to_the_task(caplog: pytest.LogCaptureFixture) -> None:
    from taskq.context import TaskContext, enter, leave
    from taskq.policy import RetryPolicy

    ctx = TaskContext(Envelope(id="abc", task="t"), "default", 1, RetryPolicy(), None, 0.0)
    token = enter(ctx)
    try:
        with caplog.at_level(logging.INFO, logger="taskq.task"):
            taskq.current().logger.info("hello %s", "there")
    finally:
        leave(token)
    record = caplog.records[-1]
    assert record.getMessage() == "t[abc] hello there"
    assert record.taskq_id == "abc"  # type: ignore[attr-defined]


async def test_worker_hooks_run_once_each(app: App) -> None:
    calls: list[str] = []

    @app.on_worker_start
    async def open_pool() -> None:
        calls.append("start")

    @app.on_worker_stop
    def close_pool() -> None:
        calls.append("stop")

    @app.task
    async def work() -> None:
        calls.append("task")

    async with running_worker(app) as worker:
        assert calls == ["start"]
        await work.enqueue()
        await wait_until(lambda: worker.stats["succeeded"] == 1)
    assert calls == ["start", "task", "stop"]


async def test_a_failing_start_hook_stops_the_worker(app: App) -> None:
    from taskq.workers import Worker

    @app.on_worker_start
    def broken() -> None:
        raise RuntimeError("database down")

    with pytest.raises(HookError, match=r"start hook .*broken failed: RuntimeError: database down"):
        await asyncio.wait_for(Worker(app).run(), 30)


def test_failing_start_hook_is_one_line_from_the_cli(nats_url: str, prefix: str) -> None:
    # fresh: a worker sets signal handlers, which only a main thread can
    result = run_cli(nats_url, prefix, "worker", "tests.apps.hooked:app", timeout=60, fresh=True)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("taskq: error: worker start hook") and "no pool" in lines[-1]
    assert "Traceback" not in result.stderr


class Observer(Middleware):
    """After each settle: what it was, and what the server held at that moment."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.seen: list[tuple[str, str, int, str]] = []

    async def after_settle(self, settled: Settled) -> None:
        state = await self.app.handle(settled.task_id).status()
        self.seen.append((settled.task, type(settled.verdict).__name__, settled.attempt, state))


async def test_after_settle_sees_each_verdict_once_its_record_is_stored(
    nats_url: str, prefix: str
) -> None:
    """`after_settle` runs once a verdict is final: a success's record says succeeded, a
    retry's says failed (the message handed back), a dead letter's says dead; an
    after_settle that raises changes nothing (logged; the next still sees its verdict)."""
    app = App(url=nats_url, prefix=prefix)
    observer = Observer(app)

    class Broken(Middleware):
        async def after_settle(self, settled: Settled) -> None:
            raise RuntimeError("an observer's bug")

    app.add_middleware(Broken())
    app.add_middleware(observer)

    @app.task
    async def fine() -> int:
        return 1

    @app.task(max_retries=1, backoff=0.05, jitter=0)
    async def doomed() -> None:
        raise ValueError("no")

    try:
        async with running_worker(app):
            ok = await fine.enqueue()
            dead = await doomed.enqueue()
            assert await ok.result(timeout=20) == 1
            with pytest.raises(taskq.TaskFailed):
                await dead.result(timeout=20)
            await wait_until(lambda: len(observer.seen) == 3)
    finally:
        await app.aclose()
    assert sorted(observer.seen) == [
        ("doomed", "Dead", 2, "dead"),
        ("doomed", "Nak", 1, "failed"),
        ("fine", "Ack", 1, "succeeded"),
    ]


class Alerting(Middleware):
    """Declares an option of its own: `@app.task(alert_channel="#ops")`."""

    task_options = frozenset({"alert_channel"})

    def __init__(self) -> None:
        self.during: list[object] = []
        self.after: list[object] = []

    async def process(self, ctx: TaskContext, call_next: Any) -> Any:
        self.during.append(ctx.middleware_options.get("alert_channel"))
        return await call_next()

    async def after_settle(self, settled: Settled) -> None:
        self.after.append(settled.middleware_options.get("alert_channel"))


async def test_middleware_declares_the_task_options_it_accepts(nats_url: str, prefix: str) -> None:
    alerting = Alerting()
    app = App(url=nats_url, prefix=prefix, middleware=[alerting])

    @app.task(alert_channel="#ops")
    async def watched() -> None: ...

    @app.task
    async def plain() -> None: ...

    assert watched.middleware_options == {"alert_channel": "#ops"}
    try:
        async with running_worker(app):
            for handle in (await watched.enqueue(), await plain.enqueue()):
                await handle.result(timeout=20)
            await wait_until(lambda: len(alerting.after) == 2)
    finally:
        await app.aclose()
    assert sorted(alerting.during, key=str) == ["#ops", None]
    assert sorted(alerting.after, key=str) == ["#ops", None]
    # an option nobody declared is still an error, naming how to declare one
    with pytest.raises(ConfigError, match=r"unknown option.*task_options"):
        app.task(name="typo", alert_chanel="#ops")(plain.fn)


def test_a_middleware_may_not_declare_an_option_taskq_or_another_has() -> None:
    class Greedy(Middleware):
        task_options = frozenset({"max_retries"})

        async def process(self, ctx: TaskContext, call_next: Any) -> Any:
            return await call_next()

    with pytest.raises(ConfigError, match=r"task option\(s\) \['max_retries'\] are taken"):
        App(middleware=[Greedy()])
    with pytest.raises(ConfigError, match="alert_channel"):
        App(middleware=[Alerting(), Alerting()])
