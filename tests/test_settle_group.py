"""The batching settle path: verdicts that finish together settle together, each message
only after its own writes; what cannot be grouped settles alone."""

from __future__ import annotations

from taskq import App, Middleware, Settled
from taskq.dlq.browse import list_dead
from taskq.records.results import fetch
from tests.conftest import running_worker, wait_until


async def test_tasks_finishing_together_settle_in_groups_each_after_its_record(
    app: App,
) -> None:
    @app.task
    async def square(n: int) -> int:
        return n * n

    missing: list[str] = []  # tasks whose record was not stored when their ack was sent

    class RecordedFirst(Middleware):
        async def after_settle(self, settled: Settled) -> None:  # runs after the ack
            record = await fetch(app, settled.task_id)
            if record is None or record.state != "succeeded":
                missing.append(settled.task_id)

    app.add_middleware(RecordedFirst())

    handles = await square.enqueue_many(range(300))
    async with running_worker(app, concurrency=32) as worker:
        await wait_until(lambda: worker.stats["succeeded"] == 300, timeout=30)
        assert worker._parts is not None
        group = worker._parts.settler
        # Then they were settled in fewer groups than tasks (several per loop turn) ...
        assert group.grouped == 300 and group.groups < 300, (group.groups, group.grouped)
    # ... each acked only once its own record was stored (after_settle runs after the ack) ...
    assert missing == []
    # ... and every task's record holds its value
    for n, handle in enumerate(handles):
        record = await fetch(app, handle.id)
        assert record is not None and (record.state, record.result) == ("succeeded", n * n)
    connection = (await app.client()).connection
    assert (await connection.streams.state(app.names.queue_stream("default"))).messages == 0


async def test_retries_and_dead_letters_settle_in_groups_too(app: App) -> None:
    @app.task(max_retries=1, backoff=0.05, backoff_max=0.05, jitter=0)
    async def broken(n: int) -> None:
        raise ValueError(f"broken {n}")

    handles = await broken.enqueue_many(range(40))
    async with running_worker(app, concurrency=16) as worker:
        await wait_until(lambda: worker.stats["dead"] == 40, timeout=30)
        assert worker._parts is not None
        assert worker._parts.settler.grouped == 80  # 40 NAKs, then 40 TERMs
        assert worker.stats["retried"] == 40
    # each TERM came after its dead letter and its `dead` record were stored
    dead = await list_dead(app)
    assert sorted(r.message.id for r in dead) == sorted(h.id for h in handles)
    for handle in handles:
        record = await fetch(app, handle.id)
        assert record is not None and record.state == "dead"


async def test_ack_sync_tasks_settle_alone(app: App) -> None:
    @app.task(ack_sync=True)
    async def exact(n: int) -> int:
        return n

    handles = await exact.enqueue_many(range(20))
    async with running_worker(app) as worker:
        await wait_until(lambda: worker.stats["succeeded"] == 20, timeout=30)
        assert worker._parts is not None
        assert worker._parts.settler.grouped == 0
    assert [await h.result(timeout=5) for h in handles] == list(range(20))


async def test_no_more_verdicts_wait_for_their_writes_than_the_window(app: App) -> None:
    @app.task
    async def square(n: int) -> int:
        return n * n

    async with running_worker(app, concurrency=32) as worker:
        assert worker._parts is not None
        group = worker._parts.settler
        group.window = 4  # before any task: the default (512) is what a drain can fill
        handles = await square.enqueue_many(range(400))
        await wait_until(lambda: worker.stats["succeeded"] == 400, timeout=60)
    # Then the tasks that finished meanwhile waited, holding their slots, for room ...
    assert group.peak == 4 and group.unsettled == 0
    # ... and each still settled after its record, with its value
    for n, handle in enumerate(handles):
        record = await fetch(app, handle.id)
        assert record is not None and (record.state, record.result) == ("succeeded", n * n)


async def test_a_group_s_records_go_as_one_batch_or_one_by_one_and_all_are_stored(
    app: App, nats_url: str
) -> None:
    """Given a results bucket that takes atomic batches, then one an operator made without
    them, when tasks settle in groups, then every record is stored either way, and the
    bucket that refused a batch is sent none again (its records go one by one)."""
    import nats

    @app.task
    async def square(n: int) -> int:
        return n * n

    for refusing in (False, True):
        if refusing:
            nc = await nats.connect(nats_url)
            js = nc.jetstream()
            config = (await js.stream_info(f"KV_{app.names.results_bucket}")).config
            assert config.allow_atomic  # made by this taskq: it takes them
            config.allow_atomic = False
            await js.update_stream(config)
            await nc.close()
        handles = await square.enqueue_many(range(200))
        async with running_worker(app, concurrency=32) as worker:
            assert worker._parts is not None
            worker._parts.settler.batches.cost = {True: 0.0, False: 1.0}  # batches, please
            await wait_until(lambda: worker.stats["succeeded"] == 200, timeout=30)
            connection = worker._parts.settler.client.connection
            refused = connection.batches_refused(f"KV_{app.names.results_bucket}")
            assert refused is refusing
        for n, handle in enumerate(handles):
            record = await fetch(app, handle.id)
            assert record is not None and record.result == n * n


async def test_a_group_s_dead_letters_go_as_one_batch_or_pipelined_and_each_is_stored_once(
    app: App, nats_url: str
) -> None:
    """Given a DLQ stream that takes atomic batches, then one made without them, when many
    tasks die in the same groups, then every dead letter is stored exactly once either way
    (a batch the stream refused is sent again letter by letter)."""
    import nats

    @app.task(max_retries=0)
    async def doomed(n: int) -> None:
        raise ValueError(f"doomed {n}")

    seen = 0
    for refusing, batches in ((False, True), (True, True), (False, False)):
        async with running_worker(app, concurrency=32) as worker:
            if refusing:  # after the worker's start, which brings the stream up to its spec
                nc = await nats.connect(nats_url)
                js = nc.jetstream()
                config = (await js.stream_info(app.names.dlq_stream)).config
                assert config.allow_atomic  # made by this taskq: it takes them
                config.allow_atomic = False
                await js.update_stream(config)
                await nc.close()
            assert worker._parts is not None
            settler = worker._parts.settler
            settler.batches.cost = {True: 0.0, False: 1.0} if batches else {True: 1.0, False: 0.0}
            handles = await doomed.enqueue_many(range(60))
            await wait_until(lambda: worker.stats["dead"] == 60, timeout=30)
            assert settler.grouped == 60 and settler.groups < 60  # some died together
        seen += 60
        dead = await list_dead(app)
        assert len(dead) == seen  # none lost, none twice
        assert {h.id for h in handles} <= {r.message.id for r in dead}
        batched = await _stored_in_batches(nats_url, app.names.dlq_stream, seen - 59, seen)
        assert (batched > 0) is (batches and not refusing), batched


async def _stored_in_batches(url: str, stream: str, first: int, last: int) -> int:
    """How many of the stream's messages `first`..`last` were stored by an atomic batch
    (a stored message keeps its batch's `Nats-Batch-Id`)."""
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        found = [await js.get_msg(stream, seq) for seq in range(first, last + 1)]
        return sum(1 for msg in found if "Nats-Batch-Id" in (msg.headers or {}))
    finally:
        await nc.close()
