"""A hostile member of the shipped producer role against other producers' durable runs and
chords (issue 38), on a server of deploy/nats/accounts.conf's roles: every attack here is
a publish the producer role may make. None may wedge a run, choose a child's result,
replace a run's result, forge a chord member, squat a cancel, or make a worker hold
unbounded journal bytes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from taskq import App, TaskFailed, Workflow, chord, group
from taskq.ids import new_id
from taskq.records.clock import now_iso
from taskq.records.envelope import Envelope
from taskq.server import EmbeddedServer
from taskq.workflows import decide, store
from taskq.workflows.state import ChordState, Step
from taskq.workflows.steps import digest
from taskq.workflows.views import show_run
from tests.conftest import running_worker, wait_until
from tests.roles import provisioned, raw_connection, role


def _declare(app: App, ran: list[str]) -> dict[str, Any]:
    @app.task(name="wfhostile.charge")
    async def charge(order_id: str) -> str:
        ran.append(order_id)
        return f"receipt-{order_id}"

    @app.task(name="wfhostile.label")
    async def label(text: str, seconds: float = 0.0) -> str:
        await asyncio.sleep(seconds)
        return text

    @app.task(name="wfhostile.collect")
    async def collect(results: list[str]) -> list[str]:
        return results

    @app.workflow(name="wfhostile.ship")
    async def ship(wf: Workflow, order_id: str) -> str:
        return str(await wf.run(charge, order_id))

    @app.workflow(name="wfhostile.order")
    async def order(wf: Workflow, order_id: str) -> dict[str, Any]:
        receipt = await wf.run(charge, order_id)
        approval = await wf.wait_for("approved")
        return {"receipt": receipt, "approval": approval}

    @app.workflow(name="wfhostile.parent")
    async def parent(wf: Workflow, order_id: str) -> str:
        return str(await wf.child(ship, order_id))

    return {"order": order, "parent": parent, "label": label, "collect": collect}


@dataclass
class Roles:
    worker: App
    producer: App
    declared: dict[str, Any]  # the producer's declarations
    ran: list[str]  # what the worker's charge step ran for


@pytest.fixture
async def roles(secure_server: EmbeddedServer) -> AsyncIterator[Roles]:
    ran: list[str] = []
    worker_app, producer = role(secure_server, "worker"), role(secure_server, "producer")
    _declare(worker_app, ran)
    declared = _declare(producer, [])
    await provisioned(secure_server.url, worker_app, ["default"])
    yield Roles(worker_app, producer, declared, ran)
    await worker_app.aclose()
    await producer.aclose()


async def hostile(server: EmbeddedServer) -> Any:
    """A raw nats-py connection as the shipped producer role."""
    return await raw_connection(server, "producer")


async def test_a_deep_or_surrogate_signal_cannot_wedge_a_run(
    secure_server: EmbeddedServer, roles: Roles
) -> None:
    run = await roles.declared["order"].options(key=f"deep-{new_id()}").start("o-1")
    nc = await hostile(secure_server)
    js = nc.jetstream()
    # a signal nested 5,000 deep, one with a lone surrogate, one that is no JSON at all
    deep = b'{"e":"signal","name":"approved","payload":' + b"[" * 5000 + b"]" * 5000 + b"}"
    surrogate = b'{"e":"signal","name":"approved","payload":"\\ud800"}'
    for key, body in (("deep", deep), ("surrogate", surrogate), ("junk", b"\xff{")):
        await js.publish(f"taskq.wf.{run.id}.u.{key}", body)
    await nc.close()
    await run.signal("approved", {"by": "ann"})
    async with running_worker(roles.worker, queues=["default"]):
        assert await run.result(timeout=30) == {
            "receipt": "receipt-o-1",
            "approval": {"by": "ann"},
        }
        view = await show_run(await roles.worker.client(), run.id)  # no traceback
    assert [s["payload"] for s in view.signals] == [{"by": "ann"}]


async def test_a_producer_cannot_start_a_parents_child_first(
    secure_server: EmbeddedServer, roles: Roles
) -> None:
    run = await roles.declared["parent"].options(key=f"par-{new_id()}").start("o-2")
    # the child ids a parent's first child had before: a start under each, naming the
    # parent, with the producer's own workflow and arguments
    nc = await hostile(secure_server)
    js = nc.jetstream()
    for child in (f"{run.id}-c0", f"{run.id}-c0r1"):
        start = {
            "e": "start",
            "workflow": "wfhostile.ship",
            "queue": "default",
            "args": ["EVIL-0"],
            "kwargs": {},
            "parent": {
                "kind": "run",
                "id": run.id,
                "n": 0,
                "workflow": "wfhostile.parent",
                "queue": "default",
            },
        }
        await js.publish(f"taskq.wf.{child}.s.0", json.dumps(start).encode())
    await nc.close()
    async with running_worker(roles.worker, queues=["default"], concurrency=8):
        assert await run.result(timeout=30) == "receipt-o-2"


async def test_a_task_under_a_runs_id_cannot_replace_its_result(
    secure_server: EmbeddedServer, roles: Roles
) -> None:
    run = await roles.declared["order"].options(key=f"res-{new_id()}").start("o-3")
    await run.signal("approved", "yes")
    async with running_worker(roles.worker, queues=["default"]):
        real = await run.result(timeout=30)
        # a producer enqueues a task under the run's id now the run has ended
        label = roles.declared["label"]
        forged = await label.options(key=run.id).enqueue("EVIL")
        assert await forged.result(timeout=30) == "EVIL"
        assert await run.result(timeout=5) == real == {"receipt": "receipt-o-3", "approval": "yes"}


async def test_a_forged_member_is_no_member_of_another_producers_chord(
    secure_server: EmbeddedServer, roles: Roles
) -> None:
    label, collect = roles.declared["label"], roles.declared["collect"]
    handle = await chord(group(label.s("real-0"), label.s("real-1", 1.0)), collect.s()).enqueue()
    flow_id = handle.id.rpartition(".")[0]  # what anyone reads in the runs list
    # a member 1 of that chord, as a producer may enqueue it (it knows no token), which
    # finishes first: real member 1 takes a second
    client = await roles.producer.client()
    for final in (f"{flow_id}.cb", handle.id):
        forged = Envelope(
            id=new_id(),
            task="wfhostile.label",
            args=["FORGED"],
            enqueued_at=now_iso(),
            workflow=ChordState(
                id=flow_id,
                size=2,
                index=1,
                final=final,
                callback=Step(task="wfhostile.collect", queue="default"),
            ),
        )
        await client.publish_envelope(forged, "default")
    async with running_worker(roles.worker, queues=["default"], concurrency=8):
        assert await handle.result(timeout=30) == ["real-0", "real-1"]


async def test_a_squatted_cancel_subject_and_junk_before_a_start_change_nothing(
    secure_server: EmbeddedServer, roles: Roles
) -> None:
    key = f"squat-{new_id()}"
    nc = await hostile(secure_server)
    js = nc.jetstream()
    # the cancel's subject as it was computable from the run id, and other junk, all
    # written before the run starts
    old_cancel = hashlib.sha256(f"{key}.cancel".encode()).hexdigest()[:24]
    await js.publish(f"taskq.wf.{key}.u.{old_cancel}", b'{"e":"junk"}')
    await js.publish(f"taskq.wf.{key}.u.x", b'{"e":"signal","name":"approved","payload":1}')
    await nc.close()
    run = await roles.declared["order"].options(key=key).start("o-4")
    async with running_worker(roles.worker, queues=["default"]):
        await wait_until(lambda: roles.ran.count("o-4") == 1, timeout=30)
        await wait_until(_state_is(run, "waiting"), timeout=30)
        await run.cancel()
        with pytest.raises(Exception, match="cancel"):
            await run.result(timeout=30)
    assert await run.status() == "cancelled"


async def test_a_runs_decision_and_step_ids_cannot_be_taken_first(
    secure_server: EmbeddedServer, roles: Roles
) -> None:
    key = f"ids-{new_id()}"
    # the message ids a keyed run's first decision and first step had, computable from
    # its key and its call: taken first, the server would drop the real ones as duplicates
    called = digest("wfhostile.charge", ["o-8"], {})
    nc = await hostile(secure_server)
    js = nc.jetstream()
    for msg_id in (f"{key}.d0", f"{key}.0.{called}"):
        await js.publish(
            "taskq.q.default.wfhostile.label",
            json.dumps({"args": ["squat"]}).encode(),
            headers={"Nats-Msg-Id": msg_id},
        )
    await nc.close()
    run = await roles.declared["order"].options(key=key).start("o-8")
    await run.signal("approved", "ok")
    async with running_worker(roles.worker, queues=["default"]):
        assert await run.result(timeout=30) == {"receipt": "receipt-o-8", "approval": "ok"}


async def test_raw_signals_beyond_an_events_bound_are_left_out_and_journal_bytes_bounded(
    secure_server: EmbeddedServer, roles: Roles, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a journal bound of 1 MiB (the shipped one is 32 MiB): what the worker holds of it
    monkeypatch.setattr(decide, "MAX_JOURNAL_BYTES", 1024 * 1024)
    monkeypatch.setattr(store, "MAX_JOURNAL_BYTES", 1024 * 1024)
    big = await roles.declared["order"].options(key=f"big-{new_id()}").start("o-5")
    flooded = await roles.declared["order"].options(key=f"flood-{new_id()}").start("o-6")
    nc = await hostile(secure_server)
    js = nc.jetstream()
    # one raw signal over an event's 256 KiB (the stream takes up to 512 KiB)
    oversized = {"e": "signal", "name": "approved", "payload": "x" * 300_000}
    await js.publish(f"taskq.wf.{big.id}.u.big", json.dumps(oversized).encode())
    # and 1.2 MiB of signals a run never waits for, each within an event's bound
    for i in range(6):
        body = {"e": "signal", "name": "noise", "payload": "y" * 200_000}
        await js.publish(f"taskq.wf.{flooded.id}.u.n{i}", json.dumps(body).encode())
    await nc.close()
    await big.signal("approved", "small")
    async with running_worker(roles.worker, queues=["default"]):
        assert (await big.result(timeout=30))["approval"] == "small"
        with pytest.raises(TaskFailed) as failed:
            await flooded.result(timeout=30)
    assert failed.value.type == "JournalFull"
    assert "bytes" in failed.value.message


async def test_junk_fails_a_run_with_journal_full_instead_of_hiding_its_events(
    secure_server: EmbeddedServer,
    roles: Roles,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 200 events at most (the shipped bound is 20,000): 1,100 junk messages are past it,
    # and past what one multi_last read answers, so the journal is read in stream order
    monkeypatch.setattr(decide, "MAX_EVENTS", 200)
    monkeypatch.setattr(store, "MAX_EVENTS", 200)
    run = await roles.declared["order"].options(key=f"junk-{new_id()}").start("o-7")
    nc = await hostile(secure_server)
    for i in range(1100):
        await nc.publish(f"taskq.wf.{run.id}.u.j{i}", b"\x00")
    await nc.flush()
    await nc.close()
    await run.signal("approved", "late")
    caplog.set_level(logging.WARNING, logger="taskq")
    async with running_worker(roles.worker, queues=["default"]):
        with pytest.raises(TaskFailed) as failed:
            await run.result(timeout=60)
    assert failed.value.type == "JournalFull"
    lines = [r for r in caplog.records if run.id in r.getMessage() and "left out" in r.getMessage()]
    assert 0 < len(lines) < 20  # one line a read, not one per junk message


def _state_is(run: Any, state: str) -> Any:
    async def check() -> bool:
        return bool(await run.status() == state)

    return check


async def test_junk_on_ids_that_never_started_is_swept_and_runs_keep_theirs(
    secure_server: EmbeddedServer, roles: Roles
) -> None:
    from taskq.workflows.janitor import Janitor

    run = await roles.declared["order"].options(key=f"kept-{new_id()}").start("o-9")
    await run.signal("approved", "kept")
    nobody = f"nobody-{new_id()}"
    nc = await hostile(secure_server)
    js = nc.jetstream()
    for i in range(5):
        await js.publish(f"taskq.wf.{nobody}.u.j{i}", b'{"e":"signal","name":"x"}')
    await nc.close()
    client = await roles.worker.client()
    janitor = Janitor(client)
    assert await janitor.sweep() == 0  # seen once: not yet
    assert len(await store.read(client, nobody)) == 5
    assert await janitor.sweep() == 5  # seen twice without a start: gone
    assert await store.read(client, nobody) == []
    kinds = [e.kind for e in await store.read(client, run.id)]
    assert kinds == ["start", "signal"]
    async with running_worker(roles.worker, queues=["default"]):
        assert (await run.result(timeout=30))["approval"] == "kept"
