"""The DLQ catches everything, and its CLI inspects, requeues, purges, exports and imports."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from taskq import App, Reject
from taskq.dlq.browse import Filters, list_dead
from taskq.dlq.requeue import requeue
from taskq.errors import ResultTimeout
from taskq.operate.story import story
from taskq.records.results import fetch
from tests.apps import crashy
from tests.conftest import (
    HANG,
    ROOT,
    WorkerProcess,
    cli_argv,
    run_cli,
    running_worker,
    wait_until,
)


async def make_dead_letters(app: App, n: int = 3) -> None:
    """n `permanent` dead letters from task `bad`, one `exhausted` from `flaky`."""

    @app.task(max_retries=0)
    async def bad(i: int) -> None:
        raise Reject(f"bad {i}")

    @app.task(max_retries=1, backoff=0.05, jitter=0)
    async def flaky() -> None:
        raise ValueError("always")

    async with running_worker(app) as worker:
        await bad.enqueue_many(range(n))
        await flaky.enqueue()
        await wait_until(lambda: worker.stats["dead"] == n + 1)


async def test_every_reason_is_produced(app: App, prefix: str) -> None:
    app.configure(unknown_task_grace=0)  # an unknown task dead at once (no rolling deploy)

    @app.task(max_retries=1, backoff=0.05, jitter=0)
    async def fails() -> None:
        raise ValueError("nope")

    @app.task
    async def rejects() -> None:
        raise Reject("not today")

    @app.task(give_up_on=(KeyError,))
    async def gives_up() -> None:
        raise KeyError("k")

    @app.task
    async def typed(n: int) -> None: ...

    broker = (await app.client()).connection
    await typed.options(expires=0.001).enqueue(1)
    await asyncio.sleep(0.01)  # the expiry itself: past it before the worker starts
    async with running_worker(app) as worker:
        await fails.enqueue()
        await rejects.enqueue()
        await gives_up.enqueue()
        await broker.publish(f"{prefix}.q.default.typed", b'{"args": ["x"]}')
        await broker.publish(f"{prefix}.q.default.typed", b"\x00\xff")
        await broker.publish(f"{prefix}.q.default.ghost", b'{"args": []}')
        await wait_until(lambda: worker.stats["dead"] == 7)
    records = await list_dead(app)
    reasons = sorted(r.reason for r in records)
    assert reasons == sorted(
        [
            "exhausted",
            "permanent",
            "permanent",
            "permanent",
            "undecodable",
            "unknown_task",
            "expired",
        ]
    )
    exhausted = next(r for r in records if r.reason == "exhausted")
    assert exhausted.attempts == 2 and exhausted.error.type == "ValueError"
    assert "raise ValueError" in exhausted.error.traceback
    assert exhausted.queue == "default" and exhausted.original_seq > 0 and ":" in exhausted.worker


async def test_crashed_worker_dies_on_every_attempt(
    nats_url: str, prefix: str, worker_process: Callable[..., WorkerProcess]
) -> None:
    crashy.app.configure(url=nats_url, prefix=prefix)
    await crashy.explode.enqueue(1)
    spec = "tests.apps.crashy:app"
    # attempt 1 and 2 each kill a worker; the third delivery is judged without running
    for _ in range(3):
        proc = worker_process(spec)
        # no wait_ready(): a worker may die on the task right after it says it is ready
        await wait_until(
            lambda p=proc: p.proc.poll() is not None or "dead-lettered" in p.output(), timeout=30
        )
        if "dead-lettered" in proc.output():
            break
    records = await list_dead(crashy.app)
    assert [r.reason for r in records] == ["crashed"], [r.reason for r in records]
    assert records[0].attempts == 3
    await crashy.app.aclose()


async def test_sweeper_moves_messages_past_max_deliver(nats_url: str, prefix: str) -> None:
    """A consumer backstop below the task's attempts: the server stops delivering, emits a
    MAX_DELIVERIES advisory, and the sweeper moves the message into the DLQ."""
    app = App(url=nats_url, prefix=prefix, max_deliver=2)
    runs: list[int] = []

    @app.task(max_retries=5, backoff=0.05, jitter=0)
    async def stubborn() -> None:
        runs.append(1)
        raise ValueError("again")

    async with running_worker(app):
        await stubborn.enqueue()
        await wait_until(lambda: len(runs) == 2)

        async def swept() -> bool:
            return len(await list_dead(app)) == 1

        await wait_until(swept, timeout=20)
    [record] = await list_dead(app)
    assert record.reason == "crashed" and record.error.type == "MaxDeliveriesReached"
    queue = await ((await app.client()).connection).streams.state(app.names.queue_stream("default"))
    assert queue.messages == 0 and len(runs) == 2
    await app.aclose()


async def test_requeue_runs_the_task_again(app: App) -> None:
    calls: list[int] = []

    @app.task(max_retries=0)
    async def once_broken(n: int) -> int:
        calls.append(n)
        if len(calls) == 1:
            raise RuntimeError("first time fails")
        return n

    async with running_worker(app) as worker:
        await once_broken.enqueue(7)
        await wait_until(lambda: worker.stats["dead"] == 1)
        records = await list_dead(app)
        result = await requeue(app, records)
        assert result.requeued == 1 and not result.failed
        await wait_until(lambda: worker.stats["succeeded"] == 1)
    assert calls == [7, 7]
    assert await list_dead(app) == []


async def test_a_requeued_task_waits_for_its_new_run(app: App) -> None:
    """Given two dead tasks (one with store_result=False), when they are requeued with no
    worker running, then each record says `queued` at once, `result()` waits for the new
    run rather than returning the dead record, and each run's end replaces the mark (the
    story: two attempts, the mark none)."""
    calls: list[str] = []

    @app.task(max_retries=0)
    async def flaky(n: int) -> int:
        calls.append("flaky")
        if calls.count("flaky") == 1:
            raise RuntimeError("first time fails")
        return n * 2

    @app.task(max_retries=0, store_result=False)
    async def quiet(n: int) -> None:
        calls.append("quiet")
        if calls.count("quiet") == 1:
            raise RuntimeError("first time fails")

    handles = [await flaky.enqueue(21), await quiet.enqueue(1)]
    async with running_worker(app) as worker:
        await wait_until(lambda: worker.stats["dead"] == 2)
    assert (await requeue(app, await list_dead(app))).requeued == 2
    for handle in handles:
        record = await fetch(app, handle.id)
        assert record is not None and record.state == "queued", record
    with pytest.raises(ResultTimeout):
        await handles[0].result(timeout=0.2)
    async with running_worker(app):
        assert await handles[0].result(timeout=HANG) == 42
        assert await handles[1].result(timeout=HANG) is None  # its end, no value kept
    told = await story(app, handles[0].id)
    assert told is not None and told.state == "succeeded" and len(told.attempts) == 2


async def test_cli_ls_json_show_and_filters(app: App, nats_url: str, prefix: str) -> None:
    await make_dead_letters(app, 3)
    out = run_cli(nats_url, prefix, "dlq", "ls", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 4
    for row in rows:
        assert {"id", "seq", "task", "queue", "reason", "attempts", "error", "failed_at"} <= set(
            row
        )
        assert set(row["error"]) == {"type", "message"}
    assert [r["seq"] for r in rows] == sorted((r["seq"] for r in rows), reverse=True)
    only = json.loads(
        run_cli(nats_url, prefix, "dlq", "ls", "--json", "--reason", "exhausted").stdout
    )
    assert [r["task"] for r in only] == ["flaky"]
    by_task = json.loads(
        run_cli(
            nats_url,
            prefix,
            "dlq",
            "ls",
            "--json",
            "--task",
            "bad",
            "--since",
            "1h",
            "--limit",
            "2",
        ).stdout
    )
    assert len(by_task) == 2 and {r["task"] for r in by_task} == {"bad"}
    table = run_cli(nats_url, prefix, "dlq", "ls")
    assert "REASON" in table.stdout and "permanent" in table.stdout
    shown = run_cli(nats_url, prefix, "dlq", "show", str(only[0]["seq"]))
    assert shown.returncode == 0 and "Traceback" in shown.stdout and "ValueError" in shown.stdout
    assert run_cli(nats_url, prefix, "dlq", "show", only[0]["id"]).returncode == 0
    assert run_cli(nats_url, prefix, "dlq", "show", "999999").returncode == 2
    assert run_cli(nats_url, prefix, "dlq", "ls", "--since", "soon").returncode == 2


async def test_cli_purge_with_filters_and_confirmation(
    app: App, nats_url: str, prefix: str
) -> None:
    await make_dead_letters(app, 3)
    refused = run_cli(nats_url, prefix, "dlq", "purge", "--reason", "permanent")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    done = run_cli(nats_url, prefix, "dlq", "purge", "--reason", "permanent", "--yes")
    assert done.returncode == 0 and "purged 3" in done.stdout
    assert [r.reason for r in await list_dead(app)] == ["exhausted"]
    everything = run_cli(nats_url, prefix, "dlq", "purge", "--yes")
    assert "purged 1" in everything.stdout and await list_dead(app) == []


async def test_cli_export_import_round_trip_is_byte_exact(
    app: App, nats_url: str, prefix: str, tmp_path: Path
) -> None:
    await make_dead_letters(app, 2)
    broker = (await app.client()).connection
    await broker.publish(f"{prefix}.q.default.bad", b"\x00raw\xffbytes")
    async with running_worker(app) as worker:
        await wait_until(lambda: worker.stats["dead"] == 1)
    before = await list_dead(app)
    dump = tmp_path / "dead.jsonl"
    out = run_cli(nats_url, prefix, "dlq", "export", "-o", str(dump))
    assert out.returncode == 0 and len(dump.read_text().splitlines()) == 4
    other = prefix + "x"
    loaded = run_cli(nats_url, other, "dlq", "import", str(dump))
    assert loaded.returncode == 0 and "imported 4" in loaded.stdout, loaded.stderr
    target = App(url=nats_url, prefix=other)
    after = await list_dead(target)
    strip = [r.model_dump(exclude={"seq"}) for r in before]
    assert [r.model_dump(exclude={"seq"}) for r in after] == strip
    again = run_cli(nats_url, other, "dlq", "import", str(dump))
    assert "imported 0" in again.stdout  # same message ids: deduplicated
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert run_cli(nats_url, other, "dlq", "import", str(bad)).returncode == 2
    await target.aclose()


@pytest.mark.heavy
async def test_requeue_killed_halfway_then_rerun_enqueues_each_once(
    app: App, nats_url: str, prefix: str
) -> None:
    @app.task(max_retries=0)
    async def bad(i: int) -> None:
        raise Reject("no")

    async with running_worker(app) as worker:
        await bad.enqueue_many(range(1000))
        await wait_until(lambda: worker.stats["dead"] == 1000, timeout=60)
    broker = (await app.client()).connection
    cmd = cli_argv(nats_url, prefix, "dlq", "requeue", "--all")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )

    async def halfway() -> bool:
        state = await broker.streams.state(app.names.dlq_stream)
        return state.messages < 800 or proc.poll() is not None

    await wait_until(halfway, timeout=60, every=0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    left = (await broker.streams.state(app.names.dlq_stream)).messages
    rerun = run_cli(nats_url, prefix, "dlq", "requeue", "--all")
    assert rerun.returncode == 0, rerun.stderr
    assert (await broker.streams.state(app.names.dlq_stream)).messages == 0
    queue = await broker.streams.state(app.names.queue_stream("default"))
    assert queue.messages == 1000, (left, queue.messages)
    ids = []
    seq = queue.first_seq
    while (
        stored := await broker.messages.next(app.names.queue_stream("default"), seq)
    ) is not None:
        ids.append(json.loads(stored.data)["id"])
        seq = stored.seq + 1
    assert len(ids) == len(set(ids)) == 1000
    assert stored is None  # the loop read every message: nothing stored past the last
    assert Filters().empty


async def test_cli_on_a_prefix_with_no_dead_letters_yet(nats_url: str, prefix: str) -> None:
    assert "no dead letters" in run_cli(nats_url, prefix, "dlq", "ls").stdout
    exported = run_cli(nats_url, prefix, "dlq", "export")
    assert exported.returncode == 0 and exported.stdout == ""
    assert "exported 0" in exported.stderr
