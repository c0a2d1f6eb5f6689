"""Queue partitions: N streams per queue, placement by key hash or round robin, workers
consuming every partition, and nothing stranded when a queue's layout changes."""

from __future__ import annotations

import asyncio
import json

import pytest

from taskq import App
from taskq.dlq.browse import list_dead
from taskq.dlq.requeue import requeue
from taskq.errors import ConfigError
from taskq.records.schedules import list_schedules
from taskq.topology.names import Names
from taskq.topology.partitions import key_hash, partition_for
from tests.conftest import run_cli, running_worker, wait_until


async def stored(app: App, stream: str) -> int:
    broker = (await app.client()).connection
    return (await broker.streams.state(stream)).messages


def test_partition_names_and_parsing() -> None:
    names = Names("tq")
    assert names.queue_stream("mail", 2) == "TQ_Q_MAIL_P2"
    assert names.queue_subject("mail", "send.now", 2) == "tq.p.mail.2.send.now"
    # schedules are per queue, in its timer stream; a fired task names its partition
    assert names.schedule_subject("mail", "periodic.nightly") == "tq.s.mail.periodic.nightly"
    assert names.timer_stream("mail") == "TQ_T_MAIL"
    fired = names.fired_subject("tq.p.mail.2.send.now")
    assert fired == "tq.f.mail.p.2.send.now" and names.unfired(fired) == "tq.p.mail.2.send.now"
    assert names.parse_queue_subject("tq.p.mail.2.send.now") == ("mail", "send.now")
    assert names.parse_queue_subject("tq.q.mail.send") == ("mail", "send")
    assert names.parse_queue_subject("tq.p.mail.x.send") is None
    assert names.parse_queue_filter("tq.p.mail.2.>") == ("mail", 2)
    assert names.parse_queue_filter("tq.q.mail.>") == ("mail", None)


def test_key_hash_is_fnv1a_and_stable() -> None:
    assert key_hash("a") == 0xE40C292C  # the published FNV-1a 32 test vector
    assert key_hash("") == 0x811C9DC5
    assert {partition_for("order-42", 5) for _ in range(3)} == {partition_for("order-42", 5)}


def test_invalid_or_conflicting_partitions_are_config_errors() -> None:
    app = App(prefix="x")
    for bad in (0, 65, True, 2.5):
        with pytest.raises(ConfigError, match="partitions must be"):
            app.declare_queue("q", partitions=bad)  # type: ignore[arg-type]
    app.declare_queue("q", partitions=3)
    app.declare_queue("q", partitions=3)  # the same again is fine
    with pytest.raises(ConfigError, match="already declared with 3"):

        @app.task(queue="q", partitions=2)
        async def t() -> None: ...


async def test_round_robin_spreads_evenly_and_a_key_stays_put(app: App) -> None:
    @app.task(queue="mail", partitions=3)
    async def send(n: int) -> None: ...

    await send.enqueue_many(range(30))
    for n in range(6):
        await send.enqueue(n)
    streams = [app.names.queue_stream("mail", p) for p in range(3)]
    assert [await stored(app, s) for s in streams] == [12, 12, 12]
    broker = (await app.client()).connection
    subjects = await broker.streams.subjects(streams[1])
    assert subjects is not None and f"{app.names.prefix}.p.mail.1.>" in subjects

    for n in range(9):
        await send.options(partition_key="customer-7").enqueue(n)
    home = partition_for("customer-7", 3)
    assert await stored(app, streams[home]) == 12 + 9
    await send.options(partition_key="customer-7").enqueue_many(range(3))
    assert await stored(app, streams[home]) == 12 + 12


async def test_idempotency_key_dedups_across_partitions(app: App) -> None:
    @app.task(queue="orders", partitions=4)
    async def charge(amount: int) -> None: ...

    first = await charge.options(key="order-42").enqueue(10)
    again = [await charge.options(key="order-42").enqueue(10) for _ in range(5)]
    assert not first.duplicate and all(h.duplicate for h in again)
    counts = [await stored(app, app.names.queue_stream("orders", p)) for p in range(4)]
    assert sorted(counts) == [0, 0, 0, 1]


async def test_worker_runs_every_partition_and_the_queue_stats_add_up(
    app: App, nats_url: str, prefix: str
) -> None:
    done: list[int] = []

    @app.task(queue="work", partitions=3)
    def job(n: int) -> int:
        done.append(n)
        return n * 2

    await job.enqueue_many(range(20))
    out = run_cli(nats_url, prefix, "queues", "--json", "--interval", "0")
    assert out.returncode == 0, out.stderr
    [stats] = json.loads(out.stdout)
    assert stats["queue"] == "work" and stats["partitions"] == 3
    assert stats["waiting"] == 20 and stats["per_task"] == {"job": 20}
    assert "PARTS" in run_cli(nats_url, prefix, "queues", "--interval", "0").stdout

    async with running_worker(app, queues=["work"], concurrency=4) as worker:
        handles = [await job.enqueue(n) for n in range(20, 40)]
        await wait_until(lambda: worker.stats["succeeded"] == 40)
        assert await handles[-1].result(timeout=10) == 78
    assert sorted(done) == list(range(40))


async def test_delays_periodics_and_requeue_on_a_partitioned_queue(app: App) -> None:
    ran: list[str] = []

    @app.task(queue="timed", partitions=2, max_retries=0)
    async def stamp(label: str) -> None:
        ran.append(label)
        if label == "fails-once" and ran.count(label) == 1:
            raise RuntimeError("first time")

    @app.periodic(every=1, args=("tick",), queue="timed")
    async def tick(label: str) -> None:
        ran.append(label)

    async with running_worker(app, queues=["timed"]) as worker:
        await stamp.options(countdown=1).enqueue("later")
        await stamp.options(countdown=1, partition_key="k").enqueue("later-keyed")
        await stamp.enqueue("fails-once")
        await wait_until(lambda: {"later", "later-keyed", "tick"} <= set(ran))
        await wait_until(lambda: worker.stats["dead"] == 1)
        schedules = await list_schedules(app, ["timed"])
        assert [s.name for s in schedules] == ["periodic.tick"]
        result = await requeue(app, await list_dead(app))
        assert result.requeued == 1
        await wait_until(lambda: ran.count("fails-once") == 2)


async def test_changing_the_layout_strands_nothing(nats_url: str, prefix: str) -> None:
    before = App(url=nats_url, prefix=prefix)
    after = App(url=nats_url, prefix=prefix)
    other = App(url=nats_url, prefix=prefix)
    done: list[int] = []

    @before.task(queue="grow")
    async def old(n: int) -> None: ...

    @after.task(queue="grow", name="old", partitions=3)
    async def new(n: int) -> None:
        done.append(n)

    await old.enqueue_many(range(5))  # on the unpartitioned stream
    await new.enqueue_many(range(5, 11))  # on three partitions
    try:
        async with running_worker(after, queues=["grow"]) as worker:
            await wait_until(lambda: worker.stats["succeeded"] == 11)
        assert sorted(done) == list(range(11))
        # an undeclared producer learns the layout: the unpartitioned stream wins while it
        # exists, so producers that do not declare keep one place to publish
        assert await (await other.client()).queue_partitions("grow") == 1
    finally:
        await asyncio.gather(before.aclose(), after.aclose(), other.aclose())


async def test_a_queue_whose_stream_name_meets_a_partition_is_refused(app: App) -> None:
    @app.task(queue="a_p1")
    async def plain() -> None: ...

    await plain.enqueue()
    app.declare_queue("a", partitions=2)

    @app.task(queue="a")
    async def parted() -> None: ...

    # partition 1 of queue `a` would be stream <P>_Q_A_P1, which queue `a_p1` owns
    for _ in range(4):  # round robin reaches partition 1 within two publishes
        try:
            await parted.enqueue()
        except ConfigError as exc:
            assert "already belongs" in str(exc)
            break
    else:
        raise AssertionError("no ConfigError")


async def test_a_periodic_moves_with_its_queue_instead_of_firing_twice(
    nats_url: str, prefix: str
) -> None:
    one, three = App(url=nats_url, prefix=prefix), App(url=nats_url, prefix=prefix)
    for app, parts in ((one, None), (three, 3)):

        @app.periodic(cron="0 0 3 * * *", queue="nightly", partitions=parts, name="report")
        async def report() -> None: ...

    try:
        async with running_worker(one):
            pass
        async with running_worker(three):
            pass
        schedules = await list_schedules(three, ["nightly"])
        assert [(s.name, s.target.split(".")[1]) for s in schedules] == [("periodic.report", "p")]
    finally:
        await asyncio.gather(one.aclose(), three.aclose())


async def test_cli_enqueue_partition_key(app: App, nats_url: str, prefix: str) -> None:
    for n in range(3):
        out = run_cli(
            nats_url,
            prefix,
            "enqueue",
            "tests.apps.partitioned:app",
            "tag",
            f"[{n}]",
            "--partition-key",
            "k-1",
        )
        assert out.returncode == 0, out.stderr
    home = app.names.queue_stream("split", partition_for("k-1", 3))
    assert await stored(app, home) == 3
