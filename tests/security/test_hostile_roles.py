"""Each shipped role (deploy/nats/accounts.conf) as a hostile member: every subscribe,
publish and JetStream API call it might try to read, stop, wipe or take what is not its
own is refused by the server, and its legitimate uses still work (tests/security/
test_roles.py runs them end to end)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.js.errors import APIError

from taskq import App
from taskq.records.schedules import list_schedules
from taskq.server import EmbeddedServer
from tests.conftest import HANG, running_worker, wait_until
from tests.roles import credentials, provisioned, raw_connection, role

# a hang guard past the `waiting` fixture's set-up bound (2 * HANG)
pytestmark = pytest.mark.timeout(4 * HANG)


class Hostile:
    """A raw NATS client connected as one shipped role; `refused(...)` is True once the
    server said that action violates the role's permissions."""

    def __init__(self, url: str, user: str) -> None:
        self.url, self.user = url, user
        self.errors: list[str] = []
        self.nc: Any = None

    async def __aenter__(self) -> Hostile:
        given = credentials(self.user)

        async def error(exc: Exception) -> None:
            self.errors.append(str(exc).lower())

        self.nc = await nats.connect(
            self.url,
            user=given["user"],
            password=given["password"],
            inbox_prefix=given.get("inbox_prefix", "_INBOX"),
            error_cb=error,
            max_reconnect_attempts=0,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()

    async def _violated(self, what: str, subject: str) -> bool:
        wanted = f'permissions violation for {what} to "{subject.lower()}"'
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if any(wanted in e for e in self.errors):
                return True
            await asyncio.sleep(0.02)
        return False

    async def refused_subscribe(self, subject: str) -> bool:
        await self.nc.subscribe(subject)
        await self.nc.flush()
        return await self._violated("subscription", subject)

    async def refused_publish(self, subject: str, body: bytes = b"{}") -> bool:
        await self.nc.publish(subject, body)
        await self.nc.flush()
        return await self._violated("publish", subject)


@pytest.fixture
async def waiting(secure_server: EmbeddedServer) -> AsyncIterator[App]:
    """The operator's app, with three tasks waiting in `default` and a delayed one kept by
    a worker as a schedule (the streams exist, as in a running deployment)."""
    operator = role(secure_server, "operator")
    worker_app = role(secure_server, "worker")
    for app in (operator, worker_app):

        @app.task(name="hold")
        async def hold(n: int) -> int:
            return n

    await provisioned(secure_server.url, worker_app, ["default"])
    async with running_worker(worker_app, queues=["default"]) as worker:
        delayed = await operator.tasks["hold"].options(countdown=3600).enqueue(0)

        async def kept() -> bool:  # this task held as a schedule: the shared server's queue
            # may hold other tests' tasks, which this worker hands back (held too)
            return f"task.{delayed.id}" in {k.name for k in await list_schedules(operator)}

        try:
            await wait_until(kept, timeout=2 * HANG, every=0.1)
        except AssertionError:
            raise AssertionError(await why_not_held(secure_server, worker.stats)) from None
    for n in (1, 2, 3):
        await operator.tasks["hold"].enqueue(n)
    yield operator
    await operator.purge_queue("default")
    for app in (operator, worker_app):
        await app.aclose()


async def why_not_held(server: EmbeddedServer, stats: object) -> str:
    """The worker's counts and what the server says of the queue (a failure's message)."""
    nc = await raw_connection(server, "operator")
    try:
        said = []
        for what in ("STREAM.INFO.TASKQ_Q_DEFAULT", "CONSUMER.INFO.TASKQ_Q_DEFAULT.default"):
            reply = await nc.request(f"$JS.API.{what}", b"", timeout=5)
            said.append(f"{what}: {reply.data.decode()[:1500]}")
        operator = role(server, "operator")
        try:
            kept = [(k.name, k.expression, k.queue) for k in await list_schedules(operator)]
        finally:
            await operator.aclose()
        return f"not held; worker stats {stats}; schedules {kept[:40]}; " + "; ".join(said)
    finally:
        await nc.close()


PRODUCER_MAY_NOT_SUBSCRIBE = [
    "_INBOX.>",  # everyone's replies, with nats-py's default prefix
    "_INBOX_worker.>",  # the workers' pull deliveries: task arguments
    "taskq.q.>",  # tasks as they are published
    "taskq.dlq.>",
    "$KV.TASKQ_CANCELS.>",
    "taskq.wf.>",  # durable runs' journals: their steps' arguments and results
    ">",
]
PRODUCER_MAY_NOT_PUBLISH = [
    "taskq.wf.run1.w.1",  # forging a durable run's step outcome or decision
    "taskq.wf.run1.o.1",  # resuming a failed run (an operator's retry)
    "taskq.wf.g1.k.g-0.0",  # marking a group's or chord's member done (its marks)
    "$KV.TASKQ_RUNS.run1",  # rewriting a run's summary
    "$JS.API.DIRECT.GET.TASKQ_WORKFLOWS",  # reading runs' journals
    "$JS.API.STREAM.MSG.GET.TASKQ_WORKFLOWS",
    "taskq.s.default.task.x",  # a schedule (its stream lets a publish purge it)
    "taskq.f.default.q.hold",  # a fired task
    "taskq.dlq.default.hold",  # a forged dead letter
    "$KV.TASKQ_CANCELS.anything",  # cancelling someone's task
    "$KV.TASKQ_RESULTS.anything",  # forging a result
    "$KV.TASKQ_WORKERS.anything",
    "taskq.limit.slot.k.hold",  # taking a per-key slot
    "taskq.limit.claim.t.hold",
    "taskq.limit.rate._all.hold",  # a rate limit's record of planned starts
    "taskq.h.f.1.a",  # a history window (forged counts on every dashboard)
    "$O.TASKQ_BLOBS.M.anything",  # the object store lets any writer purge it
    "$JS.API.STREAM.DELETE.TASKQ_Q_DEFAULT",
    "$JS.API.STREAM.PURGE.TASKQ_Q_DEFAULT",
    "$JS.API.STREAM.UPDATE.TASKQ_DLQ",
    "$JS.API.STREAM.CREATE.TASKQ_ROGUE",
    "$JS.API.STREAM.MSG.DELETE.TASKQ_Q_DEFAULT",
    "$JS.API.STREAM.MSG.GET.TASKQ_Q_DEFAULT",  # reading queued tasks' arguments
    "$JS.API.DIRECT.GET.TASKQ_Q_DEFAULT",
    "$JS.API.DIRECT.GET.TASKQ_DLQ",
    "$JS.API.CONSUMER.CREATE.TASKQ_Q_DEFAULT.spy",  # pulling others' tasks
    "$JS.API.CONSUMER.MSG.NEXT.TASKQ_Q_DEFAULT.default",
    "$JS.API.CONSUMER.PAUSE.TASKQ_Q_DEFAULT.default",
    "$JS.API.CONSUMER.CREATE.KV_TASKQ_RESULTS.spy",  # a watch on every result
    "$JS.API.STREAM.LIST",
]


@pytest.mark.parametrize("subject", PRODUCER_MAY_NOT_SUBSCRIBE)
async def test_a_producer_cannot_listen_where_it_does_not_belong(
    secure_server: EmbeddedServer, subject: str
) -> None:
    async with Hostile(secure_server.url, "producer") as producer:
        assert await producer.refused_subscribe(subject)


@pytest.mark.parametrize("subject", PRODUCER_MAY_NOT_PUBLISH)
async def test_a_producer_cannot_publish_where_it_does_not_belong(
    secure_server: EmbeddedServer, subject: str
) -> None:
    async with Hostile(secure_server.url, "producer") as producer:
        assert await producer.refused_publish(subject)


async def test_a_producer_cannot_roll_a_queue_up(waiting: App) -> None:
    """Finding: one publish with `Nats-Rollup: all` left 1 of 3 waiting tasks and no
    schedules. Queue streams allow no roll-ups now (schedules live in timer streams)."""
    server_url = waiting.settings.url
    async with Hostile(server_url, "producer") as producer:
        js = producer.nc.jetstream()
        for rollup in ("all", "sub"):
            with pytest.raises(APIError) as refused:
                await js.publish("taskq.q.default.hold", b"{}", headers={"Nats-Rollup": rollup})
            assert "rollup" in str(refused.value).lower()
    client = await waiting.client()
    state = await client.connection.streams.state(waiting.names.queue_stream("default"))
    assert state.messages == 3  # the three waiting tasks, untouched
    # and the delayed task's schedule (the timer stream is shared by the tests on this
    # server: other tests' runs leave their expiry timers there)
    hold = waiting.names.queue_subject("default", "hold")
    assert [s.target for s in await list_schedules(client, ["default"])].count(hold) == 1


# the LIMITS stream's subjects a producer may publish to (its unique/throttle/debounce records)
PRODUCER_LIMIT_RECORDS = ["unique", "throttle", "debounce"]


async def test_a_producer_cannot_roll_up_the_limits_stream(
    secure_server: EmbeddedServer,
) -> None:
    """A producer may write its own gate records in the LIMITS stream; a roll-up there
    would purge every other record (slots, rate windows, declared limits, others' unique
    windows). The stream allows none: refused, and every record is still there."""
    operator, producer, worker_app = (
        role(secure_server, u) for u in ("operator", "producer", "worker")
    )
    for app in (producer, worker_app):

        @app.task(name="metered", queue="metered", rate_limit="100/h")
        async def metered(n: int) -> int:
            return n

    try:
        await provisioned(secure_server.url, worker_app, ["metered"])  # declares its limit
        async with running_worker(worker_app, queues=["metered"]):
            once = producer.tasks["metered"].options(unique_for=3600)
            await (await once.enqueue(1)).result(timeout=20)  # a unique window, a rate window
        stream, names = operator.names.limits_stream, operator.names
        broker = (await operator.client()).connection
        mine = names.limit_subject("*", "*", "metered")  # not other tests' (they may expire)
        before = (await broker.streams.state(stream, subjects_filter=mine)).subjects
        kinds = {subject.split(".")[2] for subject in before}
        assert {"decl", "rate", "unique"} <= kinds, before  # records of others, to lose
        async with Hostile(secure_server.url, "producer") as hostile:
            js = hostile.nc.jetstream()
            for kind in PRODUCER_LIMIT_RECORDS:
                for rollup in ("all", "sub"):
                    subject = names.limit_subject(kind, "hostile", "metered")
                    with pytest.raises(APIError) as refused:
                        await js.publish(subject, b"{}", headers={"Nats-Rollup": rollup})
                    assert "rollup" in str(refused.value).lower(), (kind, rollup)
        after = (await broker.streams.state(stream, subjects_filter=mine)).subjects
        assert after == before  # every record survives, and no hostile one was stored
    finally:
        await operator.purge_queue("metered")
        for app in (operator, producer, worker_app):
            await app.aclose()


WORKER_MAY_NOT_SUBSCRIBE = ["_INBOX.>", "_INBOX_producer.>", ">"]
WORKER_MAY_NOT_PUBLISH = [
    "$JS.API.STREAM.UPDATE.TASKQ_DLQ",  # cutting the DLQ's limits
    "$JS.API.STREAM.UPDATE.TASKQ_Q_DEFAULT",
    "$JS.API.STREAM.DELETE.TASKQ_DLQ",
    "$JS.API.STREAM.DELETE.TASKQ_Q_DEFAULT",
    "$JS.API.STREAM.PURGE.TASKQ_DLQ",
    "$JS.API.STREAM.PURGE.TASKQ_Q_DEFAULT",
    "$JS.API.STREAM.MSG.DELETE.TASKQ_DLQ",  # removing a dead letter
    "$JS.API.STREAM.MSG.GET.TASKQ_DLQ",
    "$JS.API.DIRECT.GET.TASKQ_DLQ",
    "$JS.API.CONSUMER.CREATE.TASKQ_DLQ",
    "$JS.API.CONSUMER.CREATE.TASKQ_DLQ.spy",
    "$JS.API.CONSUMER.DURABLE.CREATE.TASKQ_DLQ.spy",
    "$JS.API.CONSUMER.PAUSE.TASKQ_Q_DEFAULT.default",  # an operator's right
    "$KV.TASKQ_CANCELS.anything",  # likewise
    # a stream of its own could source the DLQ (the server checks the name, not the
    # sources): no stream may be created, nor a KV bucket or object store (streams too)
    "$JS.API.STREAM.CREATE.TASKQ_SPY",
    "$JS.API.STREAM.CREATE.KV_TASKQ_SPY",
    # a queue's consumer updated with `pause_until` pauses the queue: no consumer may be
    # created or changed on a queue, timer or advisory stream (an operator provisions them)
    "$JS.API.CONSUMER.CREATE.TASKQ_Q_DEFAULT.default",
    "$JS.API.CONSUMER.CREATE.TASKQ_Q_DEFAULT.default.taskq.q.default.>",
    "$JS.API.CONSUMER.DURABLE.CREATE.TASKQ_Q_DEFAULT.default",
    "$JS.API.CONSUMER.CREATE.TASKQ_Q_DEFAULT",
    "$JS.API.CONSUMER.CREATE.TASKQ_T_DEFAULT.default-timers",
    "$JS.API.CONSUMER.CREATE.TASKQ_EVENTS.sweeper",
    "$JS.API.CONSUMER.DELETE.TASKQ_Q_DEFAULT.default",
    "$JS.API.CONSUMER.MSG.NEXT.TASKQ_DLQ.spy",
]


@pytest.mark.parametrize("subject", WORKER_MAY_NOT_SUBSCRIBE)
async def test_a_worker_cannot_listen_to_other_roles(
    secure_server: EmbeddedServer, subject: str
) -> None:
    async with Hostile(secure_server.url, "worker") as worker:
        assert await worker.refused_subscribe(subject)


@pytest.mark.parametrize("subject", WORKER_MAY_NOT_PUBLISH)
async def test_a_worker_cannot_change_streams_or_touch_dead_letters(
    secure_server: EmbeddedServer, subject: str
) -> None:
    async with Hostile(secure_server.url, "worker") as worker:
        assert await worker.refused_publish(subject, json.dumps({"seq": 1}).encode())


async def test_a_worker_cannot_source_the_dlq_nor_pause_its_queue(waiting: App) -> None:
    """The two ways a worker that may create streams and consumers had past its role: a
    stream of its own sourcing the dead letters, and its queue's consumer updated with
    `pause_until`. Both refused; the queue is not paused and no such stream exists."""
    broker = (await waiting.client()).connection
    async with Hostile(waiting.settings.url, "worker") as worker:
        spy = {"name": "TASKQ_SPY", "sources": [{"name": "TASKQ_DLQ"}], "storage": "memory"}
        with pytest.raises(Exception) as refused:  # the request is never answered
            await worker.nc.request("$JS.API.STREAM.CREATE.TASKQ_SPY", json.dumps(spy).encode(), 2)
        assert await worker._violated("publish", "$JS.API.STREAM.CREATE.TASKQ_SPY"), refused
        state = await broker.streams.consumer_state("TASKQ_Q_DEFAULT", "default")
        paused = {"stream_name": "TASKQ_Q_DEFAULT", "config": {
            "durable_name": "default", "ack_policy": "explicit", "ack_wait": 30_000_000_000,
            "filter_subject": "taskq.q.default.>", "pause_until": "2099-01-01T00:00:00Z",
        }}  # fmt: skip
        subject = "$JS.API.CONSUMER.CREATE.TASKQ_Q_DEFAULT.default.taskq.q.default.>"
        assert await worker.refused_publish(subject, json.dumps(paused).encode())
    assert await broker.streams.subjects("TASKQ_SPY") is None  # never made
    after = await broker.streams.consumer_state("TASKQ_Q_DEFAULT", "default")
    assert not after.paused and after.ack_wait == state.ack_wait


async def test_a_worker_cannot_roll_up_the_dlq(waiting: App) -> None:
    async with Hostile(waiting.settings.url, "worker") as worker:
        js = worker.nc.jetstream()
        with pytest.raises(APIError) as refused:
            await js.publish("taskq.dlq.default.hold", b"{}", headers={"Nats-Rollup": "all"})
        assert "rollup" in str(refused.value).lower()


async def test_the_operator_may_do_what_the_others_may_not(waiting: App) -> None:
    """The refusals above are the roles', not the server's: the operator pauses, reads
    and purges."""
    assert (await waiting.pause_queue("default")).paused
    assert not (await waiting.resume_queue("default")).paused
    client = await waiting.client()
    [stored] = await client.connection.messages.batch(waiting.names.queue_stream("default"), 1, 1)
    assert json.loads(stored.data)["task"] == "hold"  # a waiting task's body, read


async def test_the_exporter_runs_as_the_worker_role_the_manifest_gives_it(
    waiting: App, secure_server: EmbeddedServer
) -> None:
    """deploy/k8s/worker.yaml runs `taskq exporter` with the worker's credentials: what a
    scrape reads (every queue's figures, runnable among them, and the relays' reports)
    is readable by that role."""
    from taskq.operate.queue_stats import snapshot
    from taskq.records.relays import RelayReport, list_relays, write_report

    exporter = role(secure_server, "worker")
    try:
        (default,) = [s for s in await snapshot(exporter, None, 0) if s.queue == "default"]
        assert (default.waiting, default.runnable) == (3, 3)
        # a relay's report (relays run as the worker role too); the shared server's prefix
        # may hold other tests' reports, so what the exporter reads is compared with what
        # the operator reads
        report = RelayReport(
            relay="probe", database="sqlite://", backlog=2, oldest_age=1.5, published=7,
            dead=0, reported_at="2026-11-30T00:00:00Z",
        )  # fmt: skip
        await write_report(await exporter.client(), report)
        read = await list_relays(exporter)
        assert report in read and read == await list_relays(waiting)
    finally:
        await exporter.aclose()
