"""Flow control is visible: `taskq limits`, `taskq queues` and `taskq task ID` say which
limit holds which task, and how much of each limit is in use."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from taskq import App, TaskCancelled
from tests.conftest import cli, running_worker, wait_until


def by_kind(limits: list[dict[str, Any]], task: str) -> dict[str, dict[str, Any]]:
    return {u["kind"]: u for u in limits if u["task"] == task}


async def test_limits_queues_and_task_show_what_holds_a_task(
    app: App, nats_url: str, prefix: str
) -> None:
    release = asyncio.Event()

    # parked tasks are looked at again after their lease (+1 s): a long one keeps them
    # parked, where a cancel finds them, through the CLI calls of a busy machine
    @app.task(concurrency_key="tenant", max_per_key=1, ack_wait=60.0)
    async def report(tenant: str, n: int) -> None:
        await release.wait()

    @app.task(max_concurrency=1, ack_wait=5.0)
    async def export(n: int) -> None:
        await release.wait()

    sent: list[int] = []

    @app.task(rate_limit="2/h")  # one window for the whole test
    async def notify(n: int) -> None:
        sent.append(n)

    async with running_worker(app, concurrency=8) as worker:
        running = await report.enqueue("acme", 0)
        parked = [await report.enqueue("acme", n) for n in (1, 2)]
        await export.enqueue_many([[n] for n in range(3)])
        await notify.enqueue_many([[n] for n in range(5)])
        await notify.options(unique_for=60).enqueue(99)
        # held: 2 reports (their key is busy) and 4 of the 6 notifications (2 an hour);
        # the exports wait in their lane, undelivered
        # (a start that slips on a busy machine gives its reservation back and takes a
        # fresh one now: still 2 run, taskq.flowcontrol.start_gate)
        await wait_until(lambda: worker.stats["held"] >= 2 + 4 and len(sent) == 2, timeout=15)
        rated = 4
        # taskq limits: every limit, its use, and what it holds back
        listed = await cli(nats_url, prefix, "limits", "--json")
        assert listed.returncode == 0, listed.stderr
        limits = json.loads(listed.stdout)
        per_key = by_kind(limits, "report")["max_per_key"]
        assert (per_key["limit"], per_key["keys"], per_key["held"]) == (
            "1 per tenant",
            {"acme": 1},
            2,
        )
        lane = by_kind(limits, "export")["max_concurrency"]
        assert (lane["in_use"], lane["waiting"]) == (1, 2)
        rate = by_kind(limits, "notify")
        assert rate["rate_limit"]["limit"] == "2/h" and rate["rate_limit"]["held"] == rated
        assert rate["unique_for"]["in_use"] == 1  # one open window
        text = await cli(nats_url, prefix, "limits")
        assert "max_per_key" in text.stdout and "acme=1" in text.stdout
        # taskq queues: how many are held, and by which limit
        stats = json.loads(
            (await cli(nats_url, prefix, "queues", "--json", "--interval", "0")).stdout
        )
        (default,) = stats
        assert default["held_by"]["max_per_key report (acme)"] == 2
        assert default["held_by"]["rate_limit notify"] == rated
        assert default["held"] == 2 + rated and default["in_flight"] >= 2
        # the two commands count the same held tasks (`limits` read 2 above `queues` once)
        assert sum(u.get("held", 0) for u in limits) == default["held"]
        # taskq task ID: a held task says so, and which limit holds it
        told = json.loads((await cli(nats_url, prefix, "task", parked[0].id, "--json")).stdout)
        assert told["state"] == "held" and "max_per_key 1" in told["held_by"]
        shown = (await cli(nats_url, prefix, "task", parked[0].id)).stdout
        assert "held by" in shown and "no attempt spent" in shown
        # a held task can be cancelled like a waiting one
        report = await parked[1].cancel()
        assert (report.outcome, report.state) == ("cancelled", "held")
        release.set()
        await running.result(timeout=10)
        await parked[0].result(timeout=20)
        with pytest.raises(TaskCancelled):
            await parked[1].result(timeout=20)


async def test_limits_with_nothing_declared(nats_url: str, prefix: str) -> None:
    listed = await cli(nats_url, prefix, "limits")
    assert listed.returncode == 0 and listed.stdout.startswith("no limits")
    assert json.loads((await cli(nats_url, prefix, "limits", "--json")).stdout) == []
    bad = await cli(nats_url, prefix, "limits", "--nope")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
