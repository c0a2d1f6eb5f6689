"""Failure branches driven by faults injected around the real connection (tests/faults.py),
against the real nats-server: the settle group's refused and unacknowledged writes, a
connection closed mid-group, the pipeline's close, flow control's admission, per-key slot
renewal, and the dashboard's bulk requeue (page and API) stopping at the sequence it was
confirmed at."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest

from taskq import App, Reject
from taskq.client import Client
from taskq.dashboard.app import create_app
from taskq.dashboard.config import DashboardConfig
from taskq.dlq.browse import list_dead
from taskq.errors import BrokerError, ConnectionLost, StorageFull, TransientError
from taskq.ids import safe_id
from taskq.nats.errors import reply_error
from taskq.records.results import fetch
from taskq.task import Task
from taskq.workers import Worker
from tests.conftest import running_worker, wait_until
from tests.faults import CLOSE, DELAY, LOSE_ACK, PUBLISH, RECORD, REFUSE, inject


def record_subject(app: App, task_id: str) -> str:
    """The subject a task's result record is written on (its KV key)."""
    return f"$KV.{app.names.results_bucket}.{safe_id(task_id)}"


async def queued(client: Client, app: App, queue: str = "default") -> int:
    """Messages still in the queue's stream (a work queue: an acked message is gone)."""
    return (await client.connection.streams.state(app.names.queue_stream(queue))).messages


async def queued_is(client: Client, app: App, count: int) -> bool:
    """For `wait_until`: an ack sent is applied by the server a moment later."""
    return await queued(client, app) == count


# -- the settle group ---------------------------------------------------------------------


async def test_a_refused_record_write_is_written_again_alone_and_acked_only_once_stored(
    app: App,
) -> None:
    gate = asyncio.Event()
    ran: Counter[int] = Counter()

    @app.task
    async def square(n: int) -> int:
        ran[n] += 1
        await gate.wait()
        return n * n

    handles = await square.enqueue_many(range(8))
    victim = handles[3]
    client = await app.client()
    async with running_worker(app, concurrency=8, grace=2.0) as worker:
        assert worker._parts is not None
        group = worker._parts.settler
        with inject(client.connection) as faults:
            # Given the victim's record write refused by the server in its group, and its
            # writes after that failing (transiently) until the test lets them through
            subject = record_subject(app, victim.id)
            faults.refuse(subject, nth=1)
            blocked = faults.refuse(subject, nth=2, times=10**6, error=TransientError("held"))
            await wait_until(lambda: sum(ran.values()) == 8)
            before = group.groups
            # When the eight tasks finish together (one turn of the loop: one group)
            gate.set()
            # Then the other seven settle with their group while the victim's record is
            # written again on its own, over and over
            await wait_until(lambda: worker.stats["succeeded"] >= 7)
            settled = worker.stats["succeeded"]
            await wait_until(lambda: len(faults.seen(subject)) >= 3)
            assert group.groups == before + 1 and group.grouped == 8
            # and meanwhile the victim's message is not acked: it has no record yet
            assert settled == 7 and worker.stats["succeeded"] == 7
            assert await fetch(app, victim.id) is None
            await wait_until(lambda: queued_is(client, app, 1))  # the others' acks landed
            # When its writes go through again
            blocked.stop()
            await wait_until(lambda: worker.stats["succeeded"] == 8)
    # Then it is acked once its record is stored: first write refused, the group's others
    # written once each, the victim's stored by its write on its own
    faults_seen = [c.fault for c in faults.seen(subject)]
    assert faults_seen[0] == REFUSE and faults_seen[-1] is None, faults_seen
    assert set(faults_seen[1:-1]) == {REFUSE}
    for handle in handles:
        if handle is not victim:
            assert [c.fault for c in faults.seen(record_subject(app, handle.id))] == [None]
    for n, handle in enumerate(handles):
        record = await fetch(app, handle.id)
        assert record is not None and (record.state, record.result) == ("succeeded", n * n)
    assert ran == Counter(range(8))  # each ran once: the victim was not handed back
    assert await queued(client, app) == 0


async def test_a_record_refused_again_alone_hands_its_message_back_to_run_again(
    app: App,
) -> None:
    gate = asyncio.Event()
    ran: Counter[int] = Counter()

    @app.task
    async def square(n: int) -> int:
        ran[n] += 1
        await gate.wait()
        return n * n

    handles = await square.enqueue_many(range(4))
    victim = handles[1]
    client = await app.client()
    async with running_worker(app, concurrency=4, grace=2.0) as worker:
        with inject(client.connection) as faults:
            # Given the victim's record refused in its group and again on its own
            subject = record_subject(app, victim.id)
            refusal = faults.refuse(subject, times=2)  # a BrokerError: not retried
            await wait_until(lambda: sum(ran.values()) == 4)
            gate.set()
            # When the four finish together: three settle, the victim's writes are refused
            await wait_until(lambda: worker.stats["succeeded"] == 3 and refusal.hits == 2)
            # Then its message is handed back, not acked: no record, still in the queue
            assert await fetch(app, victim.id) is None
            await wait_until(lambda: queued_is(client, app, 1))
            # and it comes back (the hand-back's 5 s delay) and runs again, then settles
            await wait_until(lambda: worker.stats["succeeded"] == 4, timeout=15)
    assert ran[1] == 2 and all(ran[n] == 1 for n in (0, 2, 3)), ran
    assert [c.fault for c in faults.seen(subject)] == [REFUSE, REFUSE, None]
    # its record is the second run's (the hand-back, a NAK, cost it an attempt)
    record = await fetch(app, victim.id)
    assert record is not None and (record.state, record.result, record.attempts) == (
        "succeeded",
        1,
        2,
    )
    assert await queued(client, app) == 0


async def test_a_record_whose_ack_is_lost_is_written_again_and_the_task_runs_once(
    app: App,
) -> None:
    gate = asyncio.Event()
    ran: Counter[int] = Counter()

    @app.task
    async def square(n: int) -> int:
        ran[n] += 1
        await gate.wait()
        return n * n

    handles = await square.enqueue_many(range(4))
    victim = handles[2]
    client = await app.client()
    async with running_worker(app, concurrency=4, grace=2.0) as worker:
        with inject(client.connection) as faults:
            # Given the victim's record stored in its group but its ack lost
            subject = record_subject(app, victim.id)
            faults.lose_ack(subject)
            await wait_until(lambda: sum(ran.values()) == 4)
            gate.set()
            await wait_until(lambda: worker.stats["succeeded"] == 4)
    # Then (what the settle group guarantees) the record is written again on its own and
    # the message acked after that second write's ack: the task ran once, it was not
    # redelivered, and its record's two stored values are the same succeeded record (but
    # for the time it was written)
    assert [c.fault for c in faults.seen(subject)] == [LOSE_ACK, None]
    assert ran == Counter(range(4))
    history = await client.connection.kv.history(app.names.results_bucket, safe_id(victim.id))
    values = [json.loads(e.value) for e in history if not e.deleted]
    assert len(values) == 2, values
    for value in values:
        del value["updated_at"]
    assert values[0] == values[1] and values[0]["state"] == "succeeded", values
    record = await fetch(app, victim.id)
    assert record is not None and (record.state, record.result, record.attempts) == (
        "succeeded",
        4,
        1,
    )
    assert await queued(client, app) == 0


async def test_a_copy_sent_while_the_event_loop_stalled_is_settled_not_run(app: App) -> None:
    """Given bodies that stall the worker's event loop past their ack_wait (no lease beat
    goes out: a starved loop on an overloaded machine), the server sends each message again
    before it has the worker's settle, and the copy arrives after the settle. Then the copy
    is settled as its message ended (acked, or TERMed for a dead letter), never run."""
    ran: Counter[str] = Counter()

    @app.task(ack_wait=0.3)
    async def stall(n: int) -> int:
        ran[f"ok{n}"] += 1
        time.sleep(0.8)  # blocks the loop on purpose
        return n

    @app.task(ack_wait=0.3, max_retries=0)
    async def stall_and_fail(n: int) -> int:
        ran[f"bad{n}"] += 1
        time.sleep(0.8)
        raise ValueError(f"bad {n}")

    async with running_worker(app, concurrency=1) as worker:
        good = [await stall.enqueue(n) for n in range(2)]
        bad = await stall_and_fail.enqueue(9)
        assert [await h.result(timeout=20) for h in good] == [0, 1]
        await wait_until(lambda: worker.stats["dead"] == 1)
        # the copies the stalls let the server send have arrived and been settled
        await wait_until(lambda: worker.stats["redelivered_here"] >= 3)
    assert ran == Counter({"ok0": 1, "ok1": 1, "bad9": 1})
    assert (worker.stats["succeeded"], worker.stats["dead"]) == (2, 1)
    assert [d.message.id for d in await list_dead(app)] == [bad.id]
    assert await queued(await app.client(), app) == 0


async def test_a_settle_slower_than_the_lease_keeps_it_and_runs_the_task_once(app: App) -> None:
    ran: Counter[int] = Counter()

    @app.task(ack_wait=0.3)
    async def square(n: int) -> int:
        ran[n] += 1
        return n * n

    handle = await square.enqueue(3)
    client = await app.client()
    async with running_worker(app, concurrency=2) as worker:
        with inject(client.connection) as faults:
            # Given a store slow enough that the task's record takes four leases to write
            subject = record_subject(app, handle.id)
            faults.delay(subject, seconds=1.2)
            await wait_until(lambda: worker.stats["succeeded"] == 1)
    # Then the worker kept its lease while the settle group waited: the server never
    # redelivered the message (not even to this worker), and the task ran once
    assert [c.fault for c in faults.seen(subject)] == [DELAY]
    assert worker.stats["redelivered_here"] == 0 and ran == Counter({3: 1})
    record = await fetch(app, handle.id)
    assert record is not None and (record.state, record.attempts) == ("succeeded", 1)
    assert await queued(client, app) == 0


async def test_a_record_refused_for_a_full_store_is_dropped_visibly_and_the_task_settles(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    gate = asyncio.Event()
    ran: Counter[int] = Counter()

    @app.task
    async def square(n: int) -> int:
        ran[n] += 1
        await gate.wait()
        return n * n

    handles = await square.enqueue_many(range(4))
    victim = handles[0]
    client = await app.client()
    async with running_worker(app, concurrency=4, grace=2.0) as worker:
        with inject(client.connection) as faults:
            # Given the victim's record refused because the server's storage is used up
            subject = record_subject(app, victim.id)
            full = StorageFull("the stream's max_bytes", "maximum bytes exceeded", 10077, 500)
            faults.refuse(subject, error=full)
            await wait_until(lambda: sum(ran.values()) == 4)
            gate.set()
            await wait_until(lambda: worker.stats["succeeded"] == 4)
    # Then (the one exception to "acked after its record", settle.py) a full store
    # does not stop the drain: the task is settled without its record, with a warning,
    # and its record is not written again (that would only meet the full store again)
    assert [c.fault for c in faults.seen(subject)] == [REFUSE]
    assert await fetch(app, victim.id) is None
    assert f"result of task {victim.id} not stored: storage full" in caplog.text
    assert ran == Counter(range(4)) and await queued(client, app) == 0


# -- the connection closed in the middle of a group ---------------------------------------


def declare_square(app: App, ran: Counter[int], gate: asyncio.Event) -> Task[[int], int]:
    """`square` on `app`: notes each run, waits for `gate`; a 1 s lease, so a message its
    worker can no longer settle comes back within a second."""

    @app.task(name="square", ack_wait=1.0)
    async def square(n: int) -> int:
        ran[n] += 1
        await gate.wait()
        return n * n

    return square


async def test_a_connection_closed_mid_group_loses_no_task(
    nats_url: str, prefix: str, app: App
) -> None:
    ran: Counter[int] = Counter()
    gate = asyncio.Event()
    first_app = App(url=nats_url, prefix=prefix)  # the first worker's own connection
    square = declare_square(app, ran, gate)
    declare_square(first_app, ran, gate)
    handles = await square.enqueue_many(range(6))
    first = Worker(first_app, concurrency=6)
    running = asyncio.create_task(first.run())
    try:
        await first.wait_ready()
        connection = (await first_app.client()).connection
        with inject(connection) as faults:
            # Given the first worker's connection closed for good at its group's third write
            faults.close(f"$KV.{app.names.results_bucket}.*", nth=3)
            await wait_until(lambda: sum(ran.values()) == 6)
            gate.set()
            # Then the worker learns its connection is lost (it stops fetching)
            await wait_until(lambda: first.lost is not None and first.stopping, timeout=10)
            assert isinstance(first.lost, ConnectionLost)
            assert not connection.connected
            # and a write on it now fails at once (as the group's writes do) rather than
            # hang (TransientError today: see the next test)
            with pytest.raises(BrokerError):
                await connection.publish_nowait(record_subject(app, handles[0].id), b"{}")
        results = f"$KV.{app.names.results_bucket}.*"
        assert [c.fault for c in faults.seen(results)][:3] == [None, None, CLOSE]
        assert first._parts is not None  # the six were one group, cut off at its 3rd write
        assert (first._parts.settler.groups, first._parts.settler.grouped) == (1, 6)
        # When a new worker starts on a new connection
        async with running_worker(app, concurrency=6):
            # Then every task ends with its record: those whose writes or acks the close
            # cut off come back (their 1 s lease) and run again
            for n, handle in enumerate(handles):
                assert await handle.result(timeout=15) == n * n
        # each ran twice: the first worker acked none of them (the two records written
        # before the close never had their acks read, the rest were never written)
        assert ran == Counter({n: 2 for n in range(6)}), ran
        assert await queued(await app.client(), app) == 0
    finally:
        running.cancel()  # its shutdown may still be retrying writes (see the next test)
        await asyncio.gather(running, return_exceptions=True)
        await first_app.aclose()


async def test_a_worker_whose_connection_closed_mid_group_stops_promptly(
    nats_url: str, prefix: str
) -> None:
    ran: Counter[int] = Counter()
    gate = asyncio.Event()
    worker_app = App(url=nats_url, prefix=prefix)
    square = declare_square(worker_app, ran, gate)
    await square.enqueue_many(range(6))
    worker = Worker(worker_app, concurrency=6)
    running = asyncio.create_task(worker.run())
    try:
        await worker.wait_ready()
        with inject((await worker_app.client()).connection) as faults:
            faults.close(f"$KV.{worker_app.names.results_bucket}.*", nth=3)
            await wait_until(lambda: sum(ran.values()) == 6)
            gate.set()
            await wait_until(lambda: worker.lost is not None)
            # Then it stops at once, as Worker._watch_connection intends ("nothing could
            # settle"), and run() raises ConnectionLost so its supervisor restarts it:
            # well within 10 s (the ack deadline of its pending writes is 5 s)
            await wait_until(running.done, timeout=10)
        assert isinstance(running.exception(), ConnectionLost)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await worker_app.aclose()


# -- the pipeline's close -------------------------------------------------------------------


async def test_publishes_waiting_for_their_ack_fail_at_once_when_the_pipeline_closes(
    nats_url: str, prefix: str
) -> None:
    # Given three publishes that will never be answered: a core subscriber takes them (so
    # the server reports no "no responders") and answers nothing; the ack deadline is 60 s
    own = App(url=nats_url, prefix=prefix)
    connection = (await own.client()).connection
    subject = f"{prefix}.silent"
    heard: list[bytes] = []

    async def silent(_subject: str, data: bytes) -> None:
        heard.append(data)

    await connection.subscribe(subject, silent)
    await connection.flush()
    waiting = [await connection.publish_nowait(subject, b"%d" % n, None, 60.0) for n in range(3)]
    await wait_until(lambda: len(heard) == 3)
    assert not any(f.done() for f in waiting)
    # When the connection closes (closing its pipeline)
    await own.aclose()
    # Then each of them has already failed, as transient (the message's fate is unknown),
    # rather than hang for its 60 s
    for future in waiting:
        assert future.done()
        with pytest.raises(TransientError, match="closed before the ack"):
            await future


# -- flow control's admission ---------------------------------------------------------------


async def test_a_refused_slot_record_hands_the_task_back_unrun(app: App) -> None:
    ran: list[str] = []

    @app.task(concurrency_key="k", max_per_key=1, ack_wait=2.0)
    async def keyed(k: str, label: str) -> str:
        ran.append(label)
        return label

    client = await app.client()
    async with running_worker(app) as worker:
        with inject(client.connection) as faults:
            # Given the server refusing the write that takes a per-key slot, once
            slots = app.names.limit_subject("slot", "acme.*", "*")
            refusal = faults.refuse(slots, kind=RECORD)
            handle = await keyed.enqueue("acme", "only")
            # Then the task does not run: its message is handed back (not acked)
            await wait_until(lambda: refusal.hits == 1)
            assert ran == [] and await queued(client, app) == 1
            assert await fetch(app, handle.id) is None
            # and it comes back (the hand-back's 5 s), takes its slot and runs once
            assert await handle.result(timeout=15) == "only"
    assert ran == ["only"] and worker.stats["dead"] == 0
    assert [c.fault for c in faults.seen(slots) if c.method == "create"] == [REFUSE, None]
    assert await queued(client, app) == 0
    assert await slot_records(client, app) == 0  # given back after it settled


async def slot_records(client: Client, app: App) -> int:
    state = await client.connection.streams.state(
        app.names.limits_stream, subjects_filter=app.names.limit_subject("slot", "*.*", ">")
    )
    return len(state.subjects)


async def test_a_refused_held_copy_hands_the_task_back_and_it_never_exceeds_its_limit(
    app: App,
) -> None:
    gate = asyncio.Event()
    ran: list[str] = []
    running: list[str] = []
    most = 0

    @app.task(concurrency_key="k", max_per_key=1, ack_wait=2.0)
    async def keyed(k: str, label: str) -> str:
        nonlocal most
        ran.append(label)
        running.append(label)
        most = max(most, len(running))
        if label == "first":
            await gate.wait()
        running.remove(label)
        return label

    client = await app.client()
    async with running_worker(app, concurrency=4, grace=2.0) as worker:
        with inject(client.connection) as faults:
            # Given a task holding key acme's only slot
            first = await keyed.enqueue("acme", "first")
            await wait_until(lambda: ran == ["first"])
            # When a second task of acme comes, and the server refuses its held copy
            held = re.compile(r"\.held\.[^.]+\.slot\.")
            refusal = faults.refuse(held, kind=PUBLISH)
            second = await keyed.enqueue("acme", "second")
            await wait_until(lambda: refusal.hits == 1)
            # Then it is not run, not acked: handed back, still in the queue
            assert ran == ["first"] and await queued(client, app) == 2
            # and when it comes back (5 s) it is held (its copy stored, then acked)
            await wait_until(lambda: worker.stats["held"] == 1, timeout=15)
            await wait_until(lambda: queued_is(client, app, 1))
            assert ran == ["first"]
            # When the first settles, the second is woken and runs
            gate.set()
            assert await first.result(timeout=10) == "first"
            assert await second.result(timeout=10) == "second"
    assert ran == ["first", "second"] and most == 1
    # the held copy's writes: refused, then stored on the second delivery (then the waker
    # claimed it: a compare-and-set record write on the same subject; the release's waker
    # and a recheck after the park may both try, and one wins)
    writes = [(c.kind, c.method, c.fault) for c in faults.seen(held)]
    assert writes[:3] == [
        (PUBLISH, "send", REFUSE),
        (PUBLISH, "send", None),
        (RECORD, "replace", None),
    ]
    assert set(writes[3:]) <= {(RECORD, "replace", None)}
    assert worker.stats["dead"] == 0 and await queued(client, app) == 0


# -- per-key slot renewal -------------------------------------------------------------------


async def test_a_long_task_keeps_its_slot_past_the_lease_by_renewing_it(app: App) -> None:
    gate = asyncio.Event()
    ran: list[str] = []

    @app.task(concurrency_key="k", max_per_key=1, ack_wait=2.0)  # the slot's lease: 2 s
    async def keyed(k: str, label: str) -> str:
        ran.append(label)
        if label == "long":
            await gate.wait()
        return label

    client = await app.client()
    async with running_worker(app, concurrency=4, grace=2.0) as worker:
        with inject(client.connection) as faults:  # no faults: it notes the slot writes
            long = await keyed.enqueue("acme", "long")
            await wait_until(lambda: ran == ["long"])
            # Given a second task of the key, parked (its held copy fires after lease + 1 s: 3 s)
            other = await keyed.enqueue("acme", "other")
            await wait_until(lambda: worker.stats["held"] == 1)
            # When its held copy comes back, past the first task's lease, while the first
            # task still runs: it is held again (or, were the slot lost, it would run)
            await wait_until(lambda: worker.stats["held"] >= 2 or "other" in ran, timeout=10)
            # Then the slot was still the first task's: renewed (compare-and-set) meanwhile
            assert ran == ["long"]
            slot = app.names.limit_subject("slot", "acme.*", "*")
            renewals = [c for c in faults.seen(slot) if c.method == "replace" and c.fault is None]
            assert len(renewals) >= 2  # a 2 s lease renewed every 2/3 s (or so), for 3 s
            assert await slot_records(client, app) == 1
            gate.set()
            assert await long.result(timeout=10) == "long"
            assert await other.result(timeout=10) == "other"
    assert ran == ["long", "other"]


# -- the dashboard's bulk requeue stops at the sequence it was confirmed at -----------------


@contextlib.asynccontextmanager
async def dashboard(app: App) -> AsyncIterator[httpx.AsyncClient]:
    """The dashboard's application in this process, on the app's connection, reached over
    ASGI as a script with its token would (no Origin or CSRF check for a bearer token)."""
    board = create_app(DashboardConfig(settings=app.settings, token="t0ken"), await app.client())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=board),
        base_url="http://127.0.0.1:8787",  # the dashboard's own address: its Host check
        headers={"authorization": "Bearer t0ken"},
    ) as http:
        yield http


async def test_a_bulk_requeue_leaves_dead_letters_that_arrived_after_its_confirmation(
    app: App,
) -> None:
    @app.task(max_retries=0)
    async def doomed(n: int) -> None:
        raise Reject(f"doomed {n}")

    async with dashboard(app) as http:
        async with running_worker(app) as worker:
            # Given three dead letters
            early = await doomed.enqueue_many(range(3))
            await wait_until(lambda: worker.stats["dead"] == 3)
            # When an operator asks to requeue all of them: the confirmation page carries
            # the DLQ's last sequence now
            asked = await http.post("/dlq/requeue", data={"task": "doomed"})
            assert asked.status_code == 200 and "Requeue the 3 dead letter(s)" in asked.text
            (max_seq,) = re.findall(r'name="max_seq" value="(\d+)"', asked.text)
            # and two more tasks die while the confirmation is on screen
            late = await doomed.enqueue_many(range(3, 5))
            await wait_until(lambda: worker.stats["dead"] == 5)
        # and the operator confirms
        form = {"task": "doomed", "confirm": "yes", "max_seq": max_seq}
        done = await http.post("/dlq/requeue", data=form)
        assert done.status_code == 303 and "n=3" in done.headers["location"]
    # Then only the three confirmed went back to the queue; the late two are still dead
    left = await list_dead(app)
    assert sorted(r.id for r in left) == sorted(h.id for h in late)
    assert all(r.seq > int(max_seq) for r in left)
    assert await queued(await app.client(), app) == len(early)


async def test_a_scripts_bulk_requeue_leaves_dead_letters_that_arrived_after_its_409(
    app: App,
) -> None:
    @app.task(max_retries=0)
    async def doomed(n: int) -> None:
        raise Reject(f"doomed {n}")

    async with dashboard(app) as http:
        async with running_worker(app) as worker:
            await doomed.enqueue_many(range(3))
            await wait_until(lambda: worker.stats["dead"] == 3)
            # When a script asks first: the 409 counts them and gives the fields to send
            # back with confirm=yes (docs/dashboard.md), the sequence it counted up to
            asked = await http.post("/api/dlq/requeue", data={"task": "doomed"})
            assert asked.status_code == 409 and asked.json()["count"] == 3
            fields = asked.json()["fields"]
            assert int(fields["max_seq"]) == max(r.seq for r in await list_dead(app))
            # and two more tasks die before it confirms
            late = await doomed.enqueue_many(range(3, 5))
            await wait_until(lambda: worker.stats["dead"] == 5)
        done = await http.post("/api/dlq/requeue", data={**fields, "confirm": "yes"})
    # Then it requeued the three it was told of, not the two that died after the 409
    assert done.json() == {"requeued": 3, "failed": []}
    assert sorted(r.id for r in await list_dead(app)) == sorted(h.id for h in late)


def test_an_api_reply_s_error_is_told_by_kind() -> None:
    """A raw JetStream API reply's error, as the server words them (nats-server 2.15): 503
    "temporarily unavailable" (no meta leader yet) is transient, so the reads that send raw
    requests retry it through an election; a full store's 503 is not; others are refusals."""

    def error(code: int, err_code: int, text: str) -> BrokerError | None:
        body = {"error": {"code": code, "err_code": err_code, "description": text}}
        return reply_error(body, "list streams")

    unavailable = error(503, 10008, "JetStream system temporarily unavailable")
    assert isinstance(unavailable, TransientError) and unavailable.status == 503
    full = error(503, 10023, "insufficient resources")
    assert isinstance(full, StorageFull) and not isinstance(full, TransientError)
    missing = error(404, 10059, "stream not found")
    assert type(missing) is BrokerError and missing.code == 10059
    assert reply_error({"streams": []}, "list streams") is None
