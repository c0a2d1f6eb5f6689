"""`taskq workflows` as a user runs it: start, ls, show, signal, cancel (with --json)."""

from __future__ import annotations

import asyncio
import json

import pytest

from taskq import App
from taskq.errors import RunEnded
from taskq.workflows import store
from taskq.workflows.run_lists import runs_page
from tests.apps import orders
from tests.conftest import cli, running_worker, wait_until

APP = "tests.apps.orders:app"


async def test_start_list_show_and_signal_a_run_from_the_command_line(
    nats_url: str, prefix: str
) -> None:
    orders.app.configure(url=nats_url, prefix=prefix)
    async with running_worker(orders.app):
        started = await cli(
            nats_url,
            prefix,
            "workflows",
            "start",
            APP,
            "order",
            '["o-5", 500]',
            "--key",
            "o-5",
            "--json",
        )
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["id"] == "o-5"
        run = orders.app.workflow_run("o-5")

        async def waiting() -> bool:
            return await run.status() == "waiting"

        await wait_until(waiting, timeout=30)
        listed = await cli(nats_url, prefix, "workflows", "ls", "--state", "waiting", "--json")
        assert [r["id"] for r in json.loads(listed.stdout)] == ["o-5"]
        assert json.loads(listed.stdout)[0]["seq"] >= 1  # its place: the pages' cursor
        shown = await cli(nats_url, prefix, "workflows", "show", "o-5", "--json")
        steps = json.loads(shown.stdout)["steps"]
        assert [(s["kind"], s["target"], s["state"]) for s in steps] == [
            ("run", "charge", "succeeded"),
            ("wait", "approved", "pending"),
        ]
        assert steps[0]["id"] == "o-5.0" and steps[0]["result"] == "receipt-o-5-500"
        sent = await cli(
            nats_url, prefix, "workflows", "signal", "o-5", "approved", '{"by": "ann"}'
        )
        assert sent.returncode == 0, sent.stderr
        assert await run.result(timeout=30) == {
            "receipt": "receipt-o-5-500",
            "approval": {"by": "ann"},
        }
        text = await cli(nats_url, prefix, "workflows", "show", "o-5")
        assert "succeeded" in text.stdout.splitlines()[0] and "signal approved" in text.stdout
        assert 'input args=["o-5", 500]' in text.stdout and "result {" in text.stdout
        # issue 39 (6): the run's inputs, result, end and duration; times RFC 3339 throughout
        shown = json.loads(
            (await cli(nats_url, prefix, "workflows", "show", "o-5", "--json")).stdout
        )
        assert (shown["args"], shown["kwargs"]) == (["o-5", 500], {})
        assert shown["result"] == {"receipt": "receipt-o-5-500", "approval": {"by": "ann"}}
        assert shown["ended_at"].endswith("Z") and shown["duration"] >= 0
        charge = shown["steps"][0]
        assert charge["made_at"].endswith("Z") and charge["duration"] >= 0
        # issue 39 (6): an ended run refuses signals and cancels; a second start says so
        for late in (("signal", "o-5", "approved"), ("cancel", "o-5")):
            refused = await cli(nats_url, prefix, "workflows", *late)
            assert refused.returncode == 1 and refused.stdout == ""
            assert "run o-5 already succeeded" in refused.stderr, refused.stderr
        again = await cli(
            nats_url, prefix, "workflows", "start", APP, "order", '["o-5", 500]', "--key", "o-5"
        )
        assert again.returncode == 0
        assert again.stdout == "run o-5 of order exists already (--key o-5): not started again\n"
        again = await cli(
            nats_url,
            prefix,
            "workflows",
            "start",
            APP,
            "order",
            '["o-5", 1]',
            "--key",
            "o-5",
            "--json",
        )
        assert json.loads(again.stdout)["created"] is False
        with pytest.raises(RunEnded, match="already succeeded") as ended:
            await run.signal("approved", 1)
        assert (ended.value.run_id, ended.value.state) == ("o-5", "succeeded")
    await orders.app.aclose()


async def test_bad_arguments_are_one_line_and_exit_2(nats_url: str, prefix: str) -> None:
    bad_args = await cli(nats_url, prefix, "workflows", "start", APP, "order", '["only-one"]')
    assert bad_args.returncode == 2 and "JSON_ARGS" in bad_args.stderr
    unknown = await cli(nats_url, prefix, "workflows", "start", APP, "nope")
    assert unknown.returncode == 2 and "no workflow 'nope'" in unknown.stderr
    missing = await cli(nats_url, prefix, "workflows", "cancel", "no-such-run")
    assert missing.returncode != 0 and "no workflow run no-such-run" in missing.stderr


async def test_retry_of_a_run_that_did_not_fail_is_refused_with_exit_2(
    nats_url: str, prefix: str
) -> None:
    orders.app.configure(url=nats_url, prefix=prefix)
    run = await orders.order.options(key="o-6").start("o-6", 600)  # waiting: no worker
    refused = await cli(nats_url, prefix, "workflows", "retry", run.id)
    assert refused.returncode == 2 and "only a dead run can be retried" in refused.stderr
    gone = await cli(nats_url, prefix, "workflows", "retry", "no-such-run")
    assert gone.returncode == 1 and "no workflow run no-such-run" in gone.stderr
    await orders.app.aclose()


async def test_ls_pages_with_a_more_line_and_before(nats_url: str, prefix: str) -> None:
    app = App(url=nats_url, prefix=prefix)
    client = await app.client()
    await store.ensure_workflows(client)
    for n in range(3):
        await store.update_summary(
            client, f"r{n}", lambda _, n=n: store.RunSummary(id=f"r{n}", name="order", queue="q")
        )
    cursor = (await runs_page(client, limit=2)).older
    await app.aclose()
    first, rest = await asyncio.gather(
        cli(nats_url, prefix, "workflows", "ls", "--limit", "2"),
        cli(nats_url, prefix, "workflows", "ls", "--before", str(cursor), "--json"),
    )
    lines = first.stdout.splitlines()
    assert [line.split()[3] for line in lines[1:3]] == ["r2", "r1"]
    assert lines[3] == f"more: taskq workflows ls --limit 2 --before {cursor}"
    assert [r["id"] for r in json.loads(rest.stdout)] == ["r0"]
