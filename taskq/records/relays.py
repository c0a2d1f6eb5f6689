"""Outbox relay reports: each running relay (`taskq outbox relay`, `taskq worker
--outbox`) writes its table's backlog every heartbeat into the workers bucket, under an
`outbox_` key, so the dashboard and `taskq exporter` show it without the database. The
bucket's TTL removes the report of a relay that stopped."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, ValidationError

from taskq.client import Client, ClientSource
from taskq.records.heartbeats import ensure_workers, worker_key, worker_name

KEY_PREFIX = "outbox_"


class RelayReport(BaseModel):
    """One relay's view of its outbox at its last report."""

    relay: str  # `host:pid`
    database: str  # its URL, password hidden
    backlog: int  # rows of this prefix waiting
    oldest_age: float  # seconds since the oldest waiting row was written (0: none)
    published: int  # rows this relay published since it started
    dead: int  # rows it dead-lettered
    reported_at: str
    # the oldest row is older than the dedup window: a relay that published it and died
    # before deleting it would publish it again unnoticed (docs/outbox.md)
    beyond_dedup: bool = False

    def to_dict(self) -> dict[str, object]:
        return self.model_dump()


def relay_key() -> str:
    return KEY_PREFIX + worker_key(worker_name())


async def write_report(client: Client, report: RelayReport) -> None:
    await ensure_workers(client)
    bucket = client.names.workers_bucket
    await client.connection.kv.put(bucket, relay_key(), report.model_dump_json().encode())


async def list_relays(source: ClientSource) -> list[RelayReport]:
    """Every live relay's last report."""
    client = await source.client()
    await ensure_workers(client)
    kv, bucket = client.connection.kv, client.names.workers_bucket
    keys = [k for k in await kv.keys(bucket, ">") if k.startswith(KEY_PREFIX)]
    found = []
    for value in await asyncio.gather(*(kv.get(bucket, key) for key in keys)):
        if value is None:
            continue
        try:
            found.append(RelayReport.model_validate_json(value[0]))
        except ValidationError:
            continue
    return sorted(found, key=lambda r: r.relay)
