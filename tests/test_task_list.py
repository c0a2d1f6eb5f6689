"""Recent tasks (issue 27): the results bucket's records listed newest first, each task
once by its current record, filtered by task name, queue, state and id prefix, paged by
sequence cursors with a bounded read per page; `app.recent_tasks` and `taskq tasks ls`."""

from __future__ import annotations

import asyncio
import json

import pytest

from taskq import App
from taskq.errors import ConfigError
from taskq.operate.task_list import TaskFilters, TaskPage, recent
from taskq.records.results import ResultRecord, store
from tests.conftest import run_cli, running_worker, wait_until
from tests.stored import write_records


async def walk(app: App, filters: TaskFilters, limit: int) -> list[str]:
    """Every page, cursor after cursor: the ids seen, in order."""
    seen: list[str] = []
    before = None
    while True:
        found = await recent(app, filters, limit=limit, before=before)
        seen += [t.id for t in found.tasks]
        if found.older is None:
            return seen
        before = found.older


async def current(app: App) -> list[tuple[str, ResultRecord]]:
    """The truth: every key's current record, newest first (read the slow way)."""
    client = await app.client()
    entries = await client.connection.kv.entries(client.names.results_bucket)
    entries.sort(key=lambda e: e.revision, reverse=True)
    return [(e.key, ResultRecord.model_validate_json(e.value)) for e in entries]


async def test_each_task_once_by_its_current_record_newest_first(app: App) -> None:
    ids = await write_records(app, 300)
    # rewrite some: a task retried (failed, then succeeded) moves up, listed once
    client = await app.client()
    rewritten = ids[10:300:37]
    for task_id in rewritten:
        await store(client, task_id, ResultRecord(state="succeeded", task="t9", queue="q0"))
    truth = await current(app)
    assert len(truth) == 300
    assert await walk(app, TaskFilters(), 23) == [key for key, _ in truth]
    for filters in (
        TaskFilters(name="t1"),
        TaskFilters(queue="q1"),
        TaskFilters(state="dead"),
        TaskFilters(name="t9"),  # the rewritten ones only: their old records never show
        TaskFilters(name="t2", queue="q0", state="succeeded"),
        TaskFilters(id_prefix="id0001"),
    ):
        expected = [
            key
            for key, r in truth
            if filters.accepts(r) and key.startswith(filters.id_prefix or "")
        ]
        assert expected, filters
        assert await walk(app, filters, 7) == expected, filters
    first = await recent(app, limit=10)
    assert first.newer is None and [t.id for t in first.tasks] == [k for k, _ in truth[:10]]
    top = first.tasks[0]
    assert (top.task, top.queue, top.state, top.seq) == (
        "t9",
        "q0",
        "succeeded",
        300 + len(rewritten),
    )
    # `after` pages newer: back from the second page to the first
    second = await recent(app, limit=10, before=first.older)
    back = await recent(app, limit=10, after=second.tasks[0].seq)
    assert [t.id for t in back.tasks] == [t.id for t in first.tasks]
    assert back.newer is None and back.older == first.tasks[-1].seq


async def test_a_task_rewritten_between_pages_is_never_listed_twice(app: App) -> None:
    ids = await write_records(app, 30)
    first = await recent(app, limit=10)
    assert [t.id for t in first.tasks] == ids[::-1][:10]
    client = await app.client()
    moved = ids[5]  # on a later page: it moves to the top, and its old place stays empty
    await store(client, moved, ResultRecord(state="dead", task="t0", queue="q1"))
    rest = await walk_from(app, first.older)
    assert moved not in rest and len(rest) == 19
    again = await recent(app, limit=1)
    assert [(t.id, t.state) for t in again.tasks] == [(moved, "dead")]


async def walk_from(app: App, before: int | None) -> list[str]:
    seen: list[str] = []
    while before is not None:
        found = await recent(app, limit=10, before=before)
        seen += [t.id for t in found.tasks]
        before = found.older
    return seen


async def test_a_page_reads_a_bounded_number_of_records(app: App) -> None:
    await write_records(app, 3000)
    found = await recent(app, TaskFilters(name="nothing.like.it"), limit=50, budget=1000)
    assert found.tasks == [] and 1000 <= found.scanned < 1000 + 1024
    assert found.older is not None  # where to go on looking
    rest = await recent(app, TaskFilters(name="nothing.like.it"), before=found.older)
    assert rest.scanned <= 3000 - found.scanned + 1024


async def test_real_tasks_their_states_and_the_app_api(app: App) -> None:
    tries: list[int] = []

    @app.task(queue="mail", max_retries=2, backoff=0.05, jitter=0)
    async def flaky(n: int) -> int:
        tries.append(n)
        if len(tries) == 1:
            raise ConnectionError("try again")
        return n

    @app.task(max_retries=0)
    async def boom(n: int) -> None:
        raise ValueError(f"boom {n}")

    async with running_worker(app) as worker:
        retried = await flaky.enqueue(1)
        dead = await boom.enqueue(2)
        assert await retried.result(timeout=10) == 1
        await wait_until(lambda: worker.stats["dead"] == 1)
    page = await app.recent_tasks()
    assert isinstance(page, TaskPage)
    assert sorted((t.id, t.task, t.queue, t.state) for t in page.tasks) == sorted(
        [(dead.id, "boom", "default", "dead"), (retried.id, "flaky", "mail", "succeeded")]
    )
    assert page.tasks[0].seq > page.tasks[1].seq  # newest first
    listed = {t.id: t for t in page.tasks}
    assert listed[retried.id].attempts == 2 and listed[dead.id].error == {
        "type": "ValueError",
        "message": "boom 2",
    }
    assert [t.id for t in (await app.recent_tasks(state="dead")).tasks] == [dead.id]
    assert [t.id for t in (await app.recent_tasks(queue="mail")).tasks] == [retried.id]
    assert [t.id for t in (await app.recent_tasks(id_prefix=dead.id[:20])).tasks] == [dead.id]
    with pytest.raises(ConfigError):
        await app.recent_tasks(state="sleeping")


async def test_taskq_tasks_ls(app: App, nats_url: str, prefix: str) -> None:
    await write_records(app, 12)

    async def cli(*args: str) -> tuple[int, str, str]:
        done = await asyncio.to_thread(run_cli, nats_url, prefix, "tasks", "ls", *args)
        return done.returncode, done.stdout, done.stderr

    code, out, err = await cli("--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [t["id"] for t in listed] == [f"id{n:06d}" for n in range(11, -1, -1)]
    assert listed[0] == (await recent(app, limit=1)).tasks[0].to_dict()
    assert set(listed[0]) == {
        "id", "task", "queue", "state", "attempts", "updated_at", "enqueued_at",
        "worker", "reason", "error", "seq",
    }  # fmt: skip
    code, out, _ = await cli("--name", "t1", "--queue", "q1", "--json")
    assert [t["id"] for t in json.loads(out)] == ["id000007", "id000001"]
    code, out, _ = await cli("--name", "t1", "--queue", "q1", "--state", "dead", "--json")
    assert [t["id"] for t in json.loads(out)] == ["id000001"]
    code, out, _ = await cli("--limit", "3", "--id", "id00000")
    lines = out.splitlines()
    assert lines[0].split() == ["UPDATED", "STATE", "QUEUE", "TASK", "ID", "TRIES", "ERROR"]
    assert [line.split()[4] for line in lines[1:4]] == ["id000009", "id000008", "id000007"]
    assert lines[4] == "more: taskq tasks ls --id id00000 --limit 3 --before 8"
    code, out, _ = await cli("--before", "8", "--limit", "3", "--id", "id00000", "--json")
    assert [t["id"] for t in json.loads(out)] == ["id000006", "id000005", "id000004"]
    code, _, err = await cli("--state", "sleeping")
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, out, _ = await cli("--name", "nothing.like.it")
    assert code == 0 and out.strip() == "no tasks"
