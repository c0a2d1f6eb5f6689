"""Hostile volume costs a bounded amount: cancelling an id nobody knows reads what the
server indexes, not the backlog (the finding: 100 cancels behind 3,000 waiting tasks took
16 s, each a full scan), and rate-limit counters age out with their period's horizon (the
finding: kept 49 hours whatever the window)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskq import App
from taskq.records.cancels import UNKNOWN, cancel
from taskq.server import EmbeddedServer
from tests.conftest import running_worker


@pytest.fixture
def monitored(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A server of this test's own, with its monitoring port (to count API requests)."""
    server = EmbeddedServer(store_dir=tmp_path, extra_args=("-m", "-1")).start()
    yield server
    server.stop()


def _monitor(server: EmbeddedServer, endpoint: str) -> dict[str, Any]:
    port = server.port_of("monitoring")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{endpoint}", timeout=10) as answer:
        found: dict[str, Any] = json.loads(answer.read())
        return found


def cost_so_far(server: EmbeddedServer) -> tuple[int, int]:
    """JetStream API requests the server answered (`/jsz`; a direct get is not one), and
    messages it delivered to its clients (`/connz` out_msgs, summed: this test's app is the
    server's only client): every message a read of the backlog brings back counts there."""
    requests = int(_monitor(server, "jsz")["api"]["total"])
    connections = _monitor(server, "connz?limit=1024")["connections"] or []
    return requests, sum(int(c["out_msgs"]) for c in connections)


async def test_cancelling_an_unknown_id_costs_the_same_whatever_the_backlog(
    monitored: EmbeddedServer,
) -> None:
    """A cancel of an id nobody knows, with 0 tasks waiting and then 3,000: the same number
    of API requests and the same number of messages delivered to the cancelling client."""
    app = App(url=monitored.url, prefix="cost")

    @app.task
    async def work(n: int) -> None: ...

    try:
        await cancel(app, "warm-up")  # the first cancel also sets up the cancels bucket
        await work.enqueue_many(range(1))  # the queue stream exists from here on
        await app.purge_queue("default")
        costs = []
        for waiting in (0, 3000):
            await work.enqueue_many(range(waiting))
            client = await app.client()
            state = await client.connection.streams.state(app.names.queue_stream("default"))
            assert state.messages == waiting
            before = cost_so_far(monitored)
            report = await cancel(app, f"no-such-task-{waiting:04}")
            after = cost_so_far(monitored)
            costs.append((after[0] - before[0], after[1] - before[1]))
            assert report.outcome == UNKNOWN
        # a backlog scan would bring back 3,000 more messages (a few more requests, if any)
        assert costs[0] == costs[1], costs
        assert costs[0][1] > 0, costs  # the count sees the cancel's own replies
    finally:
        await app.aclose()


async def test_a_rate_limit_s_record_expires_with_its_window(app: App) -> None:
    """Per-message TTL: a rate limit's record lives a window (plus a minute) past its last
    planned start, whatever the period; hostile volume (a key per call) stores records that
    vanish on their own."""

    @app.task(rate_limit="5/s", rate_limit_key="who")
    async def fast(who: str) -> None: ...

    @app.task(rate_limit="5/h")
    async def slow(n: int) -> None: ...

    async with running_worker(app):
        await (await fast.enqueue("k1")).result(timeout=20)
        await (await slow.enqueue(1)).result(timeout=20)
    client = await app.client()
    ttl = {}
    for task, key in (("fast", "k1"), ("slow", "_all")):
        subject = app.names.limit_subject("rate", key, task)
        stored = await client.connection.messages.last(app.names.limits_stream, subject)
        assert stored is not None
        ttl[task] = int(stored.headers["Nats-TTL"].rstrip("s"))
    assert ttl["fast"] <= 1 + 60 + 1 and ttl["slow"] <= 3600 + 60 + 1, ttl
