"""Enqueue → run, validation, idempotency, retries, leases, bad input: against a real server."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import nats
import pytest

import taskq
from taskq import App, ArgumentsError, ConfigError, Reject, Retry, ValidationError
from taskq.workers import Worker
from taskq.workers.lease import Leases
from tests.conftest import run_cli, running_worker, wait_until


async def test_async_and_sync_tasks_run(app: App) -> None:
    seen: list[object] = []

    @app.task
    async def add(a: int, b: int) -> int:
        seen.append(("add", a, b))
        return a + b

    @app.task
    def shout(word: str) -> str:  # sync: must run off the event loop, in a thread
        import threading

        seen.append(("shout", word, threading.current_thread().name))
        return word.upper()

    async with running_worker(app, concurrency=4) as worker:
        handle = await add.enqueue(1, "2")  # "2" is coerced to int by the signature
        await shout.enqueue(word="hi")
        await wait_until(lambda: worker.stats["succeeded"] == 2)
    assert handle.id and handle.seq >= 1 and not handle.duplicate
    assert ("add", 1, 2) in seen
    shout_call = next(s for s in seen if s[0] == "shout")
    assert shout_call[1] == "hi" and str(shout_call[2]).startswith("taskq-task")


async def test_sync_delay_from_plain_code(app: App) -> None:
    @app.task
    async def echo(x: int) -> int:
        return x

    handle = await asyncio.to_thread(echo.delay, 5)
    state = await ((await app.client()).connection).streams.state(app.names.queue_stream("default"))
    assert state.messages == 1 and handle.task == "echo"


async def test_foreign_producer_raw_nats_py(app: App, nats_url: str, prefix: str) -> None:
    """Any NATS client can enqueue: only args/kwargs are required (wire format v1)."""
    got: list[tuple[int, int]] = []

    @app.task
    async def add(a: int, b: int) -> int:
        got.append((a, b))
        return a + b

    async with running_worker(app) as worker:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        await js.publish(f"{prefix}.q.default.add", json.dumps({"args": [1, 2]}).encode())
        await js.publish(
            f"{prefix}.q.default.add",
            b'{"kwargs": {"a": 3, "b": 4}}',
            headers={"Nats-Msg-Id": "foreign-1"},
        )
        await nc.close()
        await wait_until(lambda: worker.stats["succeeded"] == 2)
    assert sorted(got) == [(1, 2), (3, 4)]


async def test_invalid_arguments_rejected_at_enqueue(app: App) -> None:
    @app.task
    async def charge(order: int, amount: float) -> None: ...

    with pytest.raises(ArgumentsError) as info:
        await charge.enqueue("not-a-number", 9.99)
    assert info.value.task == "charge" and "order" in str(info.value)
    assert isinstance(info.value, ValidationError) and isinstance(info.value, ValueError)
    with pytest.raises(ArgumentsError):
        await charge.enqueue(1)  # missing argument
    with pytest.raises(ArgumentsError):
        await charge.enqueue(1, 2.0, 3)  # too many
    broker = (await app.client()).connection
    assert await broker.streams.subjects(app.names.queue_stream("default")) is None or (
        (await broker.streams.state(app.names.queue_stream("default"))).messages == 0
    )


def test_invalid_names_rejected_at_declaration() -> None:
    app = App(prefix="p")
    with pytest.raises(ConfigError):
        app.task(queue="bad queue")(lambda: None)
    with pytest.raises(ConfigError):
        app.task(name="a..b")(lambda: None)
    with pytest.raises(ConfigError):
        App(prefix="has.dot")


async def test_idempotency_key_stores_one_message(app: App) -> None:
    @app.task
    async def charge(order: int) -> None: ...

    first = await charge.options(key="order-42").enqueue(42)
    second = await charge.options(key="order-42").enqueue(42)
    assert first.id == second.id == "order-42"
    assert not first.duplicate and second.duplicate
    state = await ((await app.client()).connection).streams.state(app.names.queue_stream("default"))
    assert state.messages == 1


async def test_retries_are_delayed_by_the_policy_and_not_repeated(app: App) -> None:
    times: list[float] = []

    @app.task(max_retries=2, backoff=0.3, jitter=0.0)
    async def flaky() -> None:
        times.append(time.monotonic())
        raise ConnectionError("down")

    async with running_worker(app) as worker:
        await flaky.enqueue()
        await wait_until(lambda: worker.stats["dead"] == 1, timeout=20)
        await asyncio.sleep(0.5)  # room for any (wrong) extra delivery to show up
    assert len(times) == 3  # 1 + max_retries, no extra deliveries
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[0] >= 0.3 - 0.02 and gaps[1] >= 0.6 - 0.02, gaps
    assert worker.stats["dead:exhausted"] == 1 and worker.stats["retried"] == 2


async def test_retry_and_reject_raised_by_task_code(app: App) -> None:
    calls: list[str] = []

    @app.task(max_retries=5)
    async def steer(mode: str) -> None:
        calls.append(mode)
        if mode == "retry" and calls.count("retry") == 1:
            raise Retry(delay=0.1)
        if mode == "reject":
            raise Reject("bad order")

    @app.task(give_up_on=(KeyError,))
    async def lookup() -> None:
        calls.append("lookup")
        raise KeyError("missing")

    async with running_worker(app) as worker:
        await steer.enqueue("retry")
        await steer.enqueue("reject")
        await lookup.enqueue()
        await wait_until(lambda: worker.stats["succeeded"] == 1 and worker.stats["dead"] == 2)
    assert calls.count("retry") == 2 and calls.count("reject") == 1 and calls.count("lookup") == 1
    assert worker.stats["dead:permanent"] == 2


async def test_task_running_three_times_its_ack_wait_runs_once(app: App) -> None:
    runs: list[float] = []

    @app.task(ack_wait=1.0)
    async def long_job() -> None:
        runs.append(time.monotonic())
        await asyncio.sleep(3.0)

    async with running_worker(app) as worker:
        await long_job.enqueue()
        await wait_until(lambda: worker.stats["succeeded"] == 1, timeout=20)
        await asyncio.sleep(1.5)  # longer than ack_wait: a lost lease would redeliver now
    assert len(runs) == 1


async def test_a_redelivery_of_a_message_still_running_here_is_not_run_again(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lease beats that come late (an event loop starved on a loaded machine) let the server
    redeliver a message to the worker still running it: it runs once, and is settled."""
    ran: list[int] = []
    release = asyncio.Event()

    @app.task(ack_wait=0.5)
    async def slow() -> str:
        ran.append(1)
        await release.wait()
        return "done"

    late = asyncio.Event()  # until set, no lease beat reaches the server
    beat = Leases._beat

    async def starved(delivery: Any, queue: str) -> None:
        if late.is_set():
            await beat(delivery, queue)

    starts: list[int] = []  # each delivery the worker was handed: its delivery count
    start = Worker._start

    def counted(self: Worker, setup: Any, delivery: Any) -> None:
        starts.append(delivery.num_delivered)
        start(self, setup, delivery)

    monkeypatch.setattr(Leases, "_beat", staticmethod(starved))
    monkeypatch.setattr(Worker, "_start", counted)
    async with running_worker(app, concurrency=2):
        handle = await slow.enqueue()
        await wait_until(lambda: 2 in starts, timeout=20)  # redelivered past ack_wait
        late.set()
        release.set()
        assert await handle.result(timeout=20) == "done"
        client = await app.client()
        stream = app.names.queue_stream("default")

        async def emptied() -> bool:
            return (await client.connection.streams.state(stream)).messages == 0

        await wait_until(emptied, timeout=20)
    assert ran == [1]


async def test_sync_task_lease_is_kept_too(app: App) -> None:
    runs: list[int] = []

    @app.task(ack_wait=1.0)
    def long_sync() -> None:
        runs.append(1)
        time.sleep(3.0)

    async with running_worker(app) as worker:
        await long_sync.enqueue()
        await wait_until(lambda: worker.stats["succeeded"] == 1, timeout=20)
        await asyncio.sleep(1.5)  # longer than ack_wait: a lost lease would redeliver now
    assert runs == [1]


async def test_timeout_fails_the_attempt(app: App) -> None:
    @app.task(timeout=0.3, max_retries=1, backoff=0.1, jitter=0)
    async def stuck() -> None:
        await asyncio.sleep(30)

    async with running_worker(app) as worker:
        await stuck.enqueue()
        await wait_until(lambda: worker.stats["dead"] == 1, timeout=20)
    assert worker.stats["retried"] == 1 and worker.stats["dead:exhausted"] == 1


async def test_unknown_task_and_bad_bytes_go_to_dlq_worker_stays_up(app: App, prefix: str) -> None:
    app.configure(unknown_task_grace=0)  # an unknown task dead at once (no rolling deploy)

    @app.task
    async def ok() -> None: ...

    broker = (await app.client()).connection
    async with running_worker(app) as worker:
        subject = f"{prefix}.q.default"
        await broker.publish(f"{subject}.nope", b'{"args": []}')
        await broker.publish(f"{subject}.ok", b"\xff\xfe\x00garbage")
        await broker.publish(f"{subject}.ok", b"[1, 2]")
        await broker.publish(f"{subject}.ok", b'{"args": "not-a-list"}')
        await broker.publish(f"{subject}.ok", b'{"args": [1, 2, 3]}')  # wrong arity
        await ok.enqueue()
        await wait_until(lambda: worker.stats["dead"] == 5 and worker.stats["succeeded"] == 1)
    assert worker.stats["dead:unknown_task"] == 1
    assert worker.stats["dead:undecodable"] == 3
    assert worker.stats["dead:permanent"] == 1
    queue = await broker.streams.state(app.names.queue_stream("default"))
    dlq = await broker.streams.state(app.names.dlq_stream)
    assert queue.messages == 0 and dlq.messages == 5


async def test_expired_task_is_dead_lettered_without_running(app: App) -> None:
    ran: list[int] = []

    @app.task
    async def late() -> None:
        ran.append(1)

    await late.options(expires=0.01).enqueue()
    await asyncio.sleep(0.05)  # the expiry itself: past it before any worker sees the task
    async with running_worker(app) as worker:
        await wait_until(lambda: worker.stats["dead:expired"] == 1)
    assert ran == []


async def test_config_drift_is_applied_as_update(app: App) -> None:
    @app.task(ack_wait=5.0)
    async def job() -> None: ...

    async with running_worker(app):
        pass
    job.ack_wait = 2.0
    async with running_worker(app):
        pass
    broker = (await app.client()).connection
    state = await broker.streams.consumer_state(app.names.queue_stream("default"), "default")
    assert state.ack_wait == pytest.approx(2.0)


async def test_grace_expiry_hands_running_task_back_at_once(app: App) -> None:
    starts: list[float] = []

    @app.task(ack_wait=30.0)
    async def long_job() -> None:
        starts.append(time.monotonic())
        await asyncio.sleep(2.0 if len(starts) == 1 else 0)

    async with running_worker(app, grace=0.2) as worker:
        await long_job.enqueue()
        await wait_until(lambda: len(starts) == 1)
    assert worker.stats["interrupted"] == 1
    async with running_worker(app) as second:
        # redelivered at once (NAK), not after the 30 s ack_wait
        await wait_until(lambda: second.stats["succeeded"] == 1, timeout=10)


async def test_an_attempt_interrupted_past_grace_does_not_count(
    app: App, nats_url: str, prefix: str
) -> None:
    """Given a task with a single attempt running when its worker stops past `--grace`,
    when another worker takes it, then it runs again as attempt 1 (not dead-lettered as
    crashed), and `taskq task` lists the interrupted attempt and the one that succeeded."""
    attempts: list[int] = []

    @app.task(max_retries=0, ack_wait=30.0)
    async def once(n: int) -> int:
        attempts.append(taskq.current().attempt)
        await asyncio.sleep(60 if len(attempts) == 1 else 0)
        return n

    async with running_worker(app, grace=0.2) as worker:
        handle = await once.enqueue(7)
        await wait_until(lambda: len(attempts) == 1)
    assert worker.stats["interrupted"] == 1
    async with running_worker(app):
        assert await handle.result(timeout=20) == 7
    assert attempts == [1, 1]
    told = json.loads(run_cli(nats_url, prefix, "task", handle.id, "--json").stdout)
    assert [(a["number"], a["state"]) for a in told["attempts"]] == [
        (1, "interrupted"),
        (1, "succeeded"),
    ]
    assert told["attempts"][0]["error"]["type"] == "Interrupted"


def test_an_unknown_task_option_is_a_config_error() -> None:
    app = App(prefix="p")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['max_retry'\]"):
        app.task(name="typo", max_retry=3)(lambda: None)
    with pytest.raises(ConfigError, match="max_retries is a whole number >= 0"):
        app.task(name="neg", max_retries=-1)(lambda: None)
    task = app.task(name="ok", ack_wait=5, retry_for=[ValueError])(lambda: None)
    assert (task.ack_wait, task.policy.retry_for, task.store_result) == (5.0, (ValueError,), True)
