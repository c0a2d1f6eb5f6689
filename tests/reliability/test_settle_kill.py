"""A worker and its server killed between a task's result write and its message's ack.

A proxy between the worker and the server freezes the link the moment the worker sends the
first of the two settle steps of the task (its record's publish or its message's ack): those
bytes reach the server, nothing after them does. Once the server has acted on them, the
server and the worker are SIGKILLed, the server restarts on its store, a new worker starts.
The promise: the record is there, or the task runs again and writes it; never a message
acked without its record. (Were a worker to ack first, the freeze would let the ack through
and hold back the record: the task would be gone with no record, and this test fails.)
"""

from __future__ import annotations

from pathlib import Path

from taskq import App, TaskHandle
from taskq.ids import safe_id
from taskq.ports import lease_port
from taskq.records.results import fetch
from taskq.server import EmbeddedServer
from tests.apps import reliable
from tests.conftest import WorkerProcess, wait_until
from tests.proxy import Proxy
from tests.reliability.ledger import runs

SPEC = "tests.apps.reliable:app"
ACK = b"PUB $JS.ACK."  # an ack (with or without headers: PUB or HPUB)


async def test_killed_between_the_result_write_and_the_ack_the_record_is_there_or_it_reruns(
    tmp_path: Path,
) -> None:
    port = lease_port()
    store = tmp_path / "store"
    server = EmbeddedServer(port=port, store_dir=store).start()
    link = await Proxy(port).start()
    ledger = tmp_path / "ledger"
    env = {"TASKQ_TEST_LEDGER": str(ledger)}
    app = _producer(server.url, f"k{port}")
    workers: list[WorkerProcess] = []
    try:
        # Given a worker whose link to the server freezes right after its first settle step
        workers.append(WorkerProcess(link.url, f"k{port}", SPEC, env=env))
        await workers[0].wait_ready()
        handle = await _enqueue_frozen(app, link, "settle-kill-1")
        # When the server has taken that step, and both processes are killed
        await wait_until(lambda: link.tripped is not None, timeout=15)
        await wait_until(lambda: _step_landed(app, handle.id), timeout=10)
        step = "the record" if link.tripped != ACK else "the ack"
        workers[0].kill()
        server.kill()
        server = EmbeddedServer(port=port, store_dir=store).start()
        link.restore()
        workers.append(WorkerProcess(server.url, f"k{port}", SPEC, env=env))
        # Then the queue empties and the task's record holds its value
        await wait_until(lambda: _queue_empty(app), timeout=30)
        record = await fetch(app, handle.id)
        ran = runs(ledger)["settle-kill-1"]
        print(f"frozen after {step}; the task ran {ran} time(s)")
        assert record is not None, f"acked without its record (frozen after {step}, ran {ran})"
        assert (record.state, record.result) == ("succeeded", "SETTLE-KILL-1"), record
        assert ran >= 1
    finally:
        await app.aclose()
        for worker in workers:
            worker.close()
        await link.close()
        server.stop()


def _producer(url: str, prefix: str) -> App:
    reliable.app.configure(url=url, prefix=prefix)
    return reliable.app


async def _enqueue_frozen(app: App, link: Proxy, tid: str) -> TaskHandle:
    """Enqueue `tid` (as its own id) with the proxy set to freeze after its record's publish
    or any ack (the task's own: nothing else is acked on this fresh queue meanwhile)."""
    record = f"PUB $KV.{app.names.results_bucket}.{safe_id(tid)} ".encode()
    link.freeze_after(record, ACK)
    return await reliable.echo.options(key=tid).enqueue(tid)


async def _step_landed(app: App, task_id: str) -> bool:
    """The server took the frozen step: the record is stored, or the message is gone."""
    return await fetch(app, task_id) is not None or await _queue_empty(app)


async def _queue_empty(app: App) -> bool:
    connection = (await app.client()).connection
    return (await connection.streams.state(app.names.queue_stream("default"))).messages == 0
