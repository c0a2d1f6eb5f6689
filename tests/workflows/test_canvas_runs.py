"""Chains, groups and chords in the runs list beside durable runs (`taskq workflows ls`, the
dashboard's `/workflows`): listed running once a task of theirs settled, then with their
end; a forged canvas message under a durable run's id leaves that run's summary alone."""

from __future__ import annotations

import json
from dataclasses import replace

from taskq import App, Signature
from taskq.task import CallOptions
from taskq.workflows import store
from taskq.workflows.canvas import chain, chord, group
from taskq.workflows.state import ChainState
from tests.apps import orders
from tests.conftest import cli, running_worker, wait_until


def declare(app: App) -> tuple[object, object, object]:
    @app.task
    async def add(x: int, y: int) -> int:
        return x + y

    @app.task
    async def total(values: list[int]) -> int:
        return sum(values)

    @app.task(max_retries=0)
    async def boom(x: int) -> int:
        raise RuntimeError(f"boom {x}")

    return add, total, boom


async def listed(nats_url: str, prefix: str, *args: str) -> dict[str, dict[str, object]]:
    out = await cli(nats_url, prefix, "workflows", "ls", "--json", *args)
    assert out.returncode == 0, out.stderr
    return {str(r["id"]): r for r in json.loads(out.stdout)}


async def test_chains_groups_and_chords_are_listed_with_their_end(
    app: App, nats_url: str, prefix: str
) -> None:
    add, total, boom = declare(app)
    sig = Signature
    # Given a chain, a group and a chord that succeed, and a chain that fails midway
    done_chain = await chain(sig(add, (1, 2)), sig(add, (10,)), sig(add, (100,))).enqueue()  # type: ignore[arg-type]
    done_group = await group(*(sig(add, (i, i)) for i in range(5))).enqueue()  # type: ignore[arg-type]
    done_chord = await chord(group(*(sig(add, (i, 1)) for i in range(4))), sig(total)).enqueue()  # type: ignore[arg-type]
    failed = await chain(sig(add, (1, 1)), sig(boom), sig(add, (1,))).enqueue()  # type: ignore[arg-type]
    # When a worker runs them
    async with running_worker(app, concurrency=4):
        assert await done_chain.result(timeout=30) == 113
        assert await done_group.result(timeout=30) == [0, 2, 4, 6, 8]
        assert await done_chord.result(timeout=30) == 10
        ids = {done_chain.id.split(".")[0], done_group.id, done_chord.id.split(".")[0]}
        bad = failed.id.split(".")[0]

        async def ended() -> bool:
            runs = await listed(nats_url, prefix)
            return all(runs.get(i, {}).get("state") == "succeeded" for i in ids) and (
                runs.get(bad, {}).get("state") == "dead"
            )

        await wait_until(ended, timeout=30)
    # Then `taskq workflows ls` lists each with its kind as its name, by state and name too
    runs = await listed(nats_url, prefix)
    kinds = {runs[i]["name"] for i in ids}
    assert kinds == {"chain", "group", "chord"} and runs[bad]["name"] == "chain"
    assert set(await listed(nats_url, prefix, "--state", "dead")) == {bad}
    # `failed`, an earlier taskq's word for it, still finds it
    assert set(await listed(nats_url, prefix, "--state", "failed")) == {bad}
    chains = await listed(nats_url, prefix, "--name", "chain")
    assert set(chains) == {done_chain.id.split(".")[0], bad}
    # and `workflows show` tells a canvas's tasks (the dashboard's page for it too)
    shown = await cli(nats_url, prefix, "workflows", "show", bad, "--json")
    assert shown.returncode == 0, shown.stderr
    story = json.loads(shown.stdout)
    assert story["kind"] == "chain" and story["state"] == "dead"
    # one view of every kind: a run's object (its summary's fields, steps of kind `run`)
    # that keeps what a canvas's always had (final; each task's task, queue and role)
    assert story["name"] == "chain" and story["final"] == f"{bad}.2" and story["queue"]
    first = story["steps"][0]
    assert {"id", "task", "queue", "state", "role"} <= set(first) and first["kind"] == "run"
    assert (first["role"], first["target"], first["id"]) == ("step", "add", f"{bad}.0")
    assert [(s["task"], s["state"]) for s in story["steps"]][:2] == [
        ("add", "succeeded"),
        ("boom", "dead"),
    ]
    text = await cli(nats_url, prefix, "workflows", "show", done_group.id)
    assert text.stdout.startswith(f"group {done_group.id}  succeeded"), text.stdout


async def test_a_forged_canvas_message_under_a_durable_run_s_id_leaves_its_summary(
    nats_url: str, prefix: str
) -> None:
    # Given a durable run waiting for a signal, listed `waiting`
    orders.app.configure(url=nats_url, prefix=prefix)
    try:
        async with running_worker(orders.app) as worker:
            run = await orders.order.options(key="o-9").start("o-9", 900)

            async def waiting() -> bool:
                return await run.status() == "waiting"

            await wait_until(waiting, timeout=30)
            settled = worker.stats["succeeded"]
            # When a producer enqueues a chain step naming the run's id as its chain's
            # (a task any producer may enqueue), and a worker runs it
            charge = orders.app.tasks["charge"]
            envelope = charge.build_envelope(["x", 1], {}, CallOptions())
            forged = ChainState(id=run.id, step=0, final=f"{run.id}.0")
            handle = await charge.send(replace(envelope, workflow=forged), charge.queue)
            await handle.result(timeout=30)
            await wait_until(lambda: worker.stats["succeeded"] > settled)  # settled: acked
            # Then the run's summary is still the run's, waiting, and the run goes on
            summary = await store.load_summary(await orders.app.client(), run.id)
            assert summary is not None and summary.kind == "workflow"
            assert summary.state == "waiting" and summary.name == "order"
            await run.signal("approved", {"by": "ann"})
            assert (await run.result(timeout=30))["approval"] == {"by": "ann"}
    finally:
        await orders.app.aclose()


async def test_a_group_of_several_shards_ends_succeeded_once(
    app: App, nats_url: str, prefix: str
) -> None:
    from taskq.workflows.marks import SHARD

    add, _, _ = declare(app)
    # Given a group of two and a half shards of members (each shard counted on its own)
    size = 2 * SHARD + SHARD // 2
    handle = await group(*(Signature(add, (i, 0)) for i in range(size))).enqueue()  # type: ignore[arg-type]
    # When a worker runs them
    async with running_worker(app, concurrency=16):
        assert await handle.result(timeout=60) == list(range(size))

        async def ended() -> bool:
            summary = (await listed(nats_url, prefix)).get(handle.id, {})
            return summary.get("state") == "succeeded"

        # Then its summary ends succeeded, which only the last shard's last member can tell
        await wait_until(ended, timeout=30)
    client = await app.client()
    complete = app.names.canvas_filter(handle.id, "g-d")
    assert await client.connection.messages.count(app.names.workflows_stream, complete) == 3
