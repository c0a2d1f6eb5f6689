"""Hostile volume costs a bounded amount: cancelling an id nobody knows reads what the
server indexes, not the backlog (the finding: 100 cancels behind 3,000 waiting tasks took
16 s, each a full scan), and rate-limit counters age out with their period's horizon (the
finding: kept 49 hours whatever the window)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from taskq import App
from taskq.cancels import UNKNOWN, cancel
from taskq.server import EmbeddedServer
from tests.conftest import running_worker


@pytest.fixture
def monitored(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A server of this test's own, with its monitoring port (to count API requests)."""
    server = EmbeddedServer(store_dir=tmp_path, extra_args=("-m", "-1")).start()
    yield server
    server.stop()


def api_requests(server: EmbeddedServer) -> int:
    port = server.port_of("monitoring")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/jsz", timeout=10) as answer:
        return int(json.loads(answer.read())["api"]["total"])


async def test_cancelling_an_unknown_id_costs_the_same_whatever_the_backlog(
    monitored: EmbeddedServer,
) -> None:
    app = App(url=monitored.url, prefix="cost")

    @app.task
    async def work(n: int) -> None: ...

    try:
        await cancel(app, "warm-up")  # the first cancel also sets up the cancels bucket
        costs = []
        for more in (30, 2970):  # 30 waiting, then 3,000
            await work.enqueue_many(range(more))
            before = api_requests(monitored)
            report = await cancel(app, f"no-such-task-{more}")
            costs.append(api_requests(monitored) - before)
            assert report.outcome == UNKNOWN
        assert costs[0] == costs[1], costs  # a backlog scan would read 100 times more
    finally:
        await app.aclose()


async def test_rate_counters_age_out_with_their_period(app: App) -> None:
    @app.task(rate_limit="5/s")
    async def fast(n: int) -> None: ...

    @app.task(rate_limit="5/h")
    async def slow(n: int) -> None: ...

    async with running_worker(app):
        await (await fast.enqueue(1)).result(timeout=20)
        await (await slow.enqueue(1)).result(timeout=20)
    nc = await nats.connect(app.settings.url)
    try:
        ages = {}
        for period in (1, 3600):
            info = await nc.jetstream().stream_info(app.names.rates_stream(period))
            assert info.state.messages == 1  # this limit's one window
            ages[period] = float(info.config.max_age or 0)
    finally:
        await nc.close()
    assert ages[1] <= 15 * 60  # 10 minutes of reservations, two windows and a minute
    assert ages[3600] <= 27 * 3600
