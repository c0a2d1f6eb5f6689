"""The relay under the shipped roles (deploy/nats/accounts.conf): as the worker role it
publishes rows and dead-letters the bad ones; as a producer, which may not write dead
letters, a row it must dead-letter stops it with a clear error instead of a pass retried
forever behind that row."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine, insert

from taskq.errors import PermissionDenied
from taskq.outbox.relay import Relay
from taskq.outbox.table import outbox
from taskq.server import EmbeddedServer
from tests.conftest import wait_until
from tests.outbox.conftest import running_relay
from tests.roles import provisioned, role


def write(url: str, task: object, order: int) -> str:
    """A committed row for `task(order)` and a hostile one naming no task of the app."""
    engine = create_engine(url)
    with engine.begin() as connection:
        handle = task.enqueue_in(connection, order)  # type: ignore[attr-defined]
        body = json.dumps({"v": 1, "id": f"nobody-{order}", "task": "no.such.task", "args": []})
        connection.execute(
            insert(outbox),
            [
                dict(
                    prefix="taskq",
                    task_id=f"nobody-{order}",
                    queue="default",
                    body=body.encode(),
                    created_at=datetime.now(UTC),
                )
            ],
        )
    engine.dispose()
    return str(handle.id)


async def test_the_relay_runs_as_a_worker_and_stops_clearly_as_a_producer(
    secure_server: EmbeddedServer, sqlite_url: str
) -> None:
    worker = role(secure_server, "worker")

    @worker.task
    async def receipt(order: int) -> int:
        return order

    await provisioned(secure_server.url, worker)
    try:
        write(sqlite_url, receipt, 1)
        async with running_relay(worker, sqlite_url, poll=0.05) as relay:
            await wait_until(lambda: relay.stats["published"] == 1 and relay.stats["dead"] == 1)
        producer = role(secure_server, "producer")
        producer.tasks.update(worker.tasks)
        write(sqlite_url, receipt, 2)
        with pytest.raises(PermissionDenied, match="runs as the worker role"):
            await Relay(producer, sqlite_url, poll=0.05).run()
        await producer.aclose()
    finally:
        await worker.aclose()
