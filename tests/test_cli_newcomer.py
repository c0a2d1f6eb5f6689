"""What a newcomer trips on at the command line (issue 27): an app module that fails to
import, an unknown id, a bad URL, an unknown queue, the worker's start line."""

from __future__ import annotations

import asyncio
import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from taskq import App
from taskq.workers.setup import QueueSetup, described
from tests import forked
from tests.conftest import cli, run_cli, running_worker, wait_until

BROKEN = {
    "syntax": ("x = 1\ndef broken(:\n    pass\n", 2, "SyntaxError"),
    "key": ("import os\n\nsetting = {}['missing']\n", 3, "KeyError"),
    "value": (
        "from taskq import App\n\napp = App()\nraise ValueError('no config')\n",
        4,
        "ValueError",
    ),
}


def _run_in(cwd: Path, url: str, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`taskq` with `cwd` as the current directory (where MODULE is imported from), as a
    process of its own (forked: tests/forked.py)."""
    return forked.run(["--url", url, "--prefix", prefix, *args], cwd)


@pytest.mark.parametrize("kind", sorted(BROKEN))
@pytest.mark.parametrize("command", ["worker", "enqueue"])
def test_an_app_module_failing_to_import_is_one_line_naming_file_and_line(
    tmp_path: Path, nats_url: str, prefix: str, kind: str, command: str
) -> None:
    """Given a module that raises at import (not ImportError), when `taskq worker` or
    `taskq enqueue` loads it, then one line names the file, the line and the error, exit 2;
    `-v` shows the traceback."""
    source, line, error = BROKEN[kind]
    (tmp_path / f"broken_{kind}.py").write_text(source)
    args = [command, f"broken_{kind}:app"] + (["work"] if command == "enqueue" else [])
    done = _run_in(tmp_path, nats_url, prefix, *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"broken_{kind}.py, line {line}" in lines[0] and error in lines[0], lines[0]
    verbose = _run_in(tmp_path, nats_url, prefix, "-v", *args)
    assert verbose.returncode == 2 and "Traceback (most recent call last)" in verbose.stderr


def test_result_of_an_unknown_id_exits_1(nats_url: str, prefix: str) -> None:
    done = run_cli(nats_url, prefix, "result", "NOPE")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout.strip() == "NOPE: unknown"


def test_result_wait_on_an_id_never_enqueued_says_unknown(nats_url: str, prefix: str) -> None:
    done = run_cli(nats_url, prefix, "result", "NEVER", "--wait", "--timeout", "1")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "taskq: task NEVER: no result within 1s (state: unknown)"
    ]


@pytest.mark.parametrize("url", ["foo://bar", "nats://host:port", "nats://", "http://x:4222"])
def test_an_invalid_url_is_a_usage_error(prefix: str, url: str) -> None:
    done = run_cli(url, prefix, "result", "X")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "invalid URL" in lines[0] and "cannot reach" not in lines[0]


def test_several_urls_and_bare_host_port_stay_valid() -> None:
    app = App(url="nats://a:4222, tls://b:4223,c:4224,ws://d", prefix="p")
    assert app.settings.url.startswith("nats://a:4222")


def test_limits_of_an_unknown_queue_is_a_usage_error(nats_url: str, prefix: str) -> None:
    # fresh: a usage error's line and exit 2 as the real interpreter ends with them
    done = run_cli(nats_url, prefix, "limits", "-q", "nosuch", fresh=True)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [
        "taskq limits: Invalid value for '-q' / '--queue': no queue 'nosuch' on the server"
    ]


def test_the_start_line_counts_streams_not_consumers() -> None:
    """A queue with a concurrency lane is one stream (two consumers); a partitioned one is
    several; queues are separated so the sentence reads."""

    def setup(queue: str, stream: str, durable: str) -> QueueSetup:
        return QueueSetup(queue, None, stream, durable, 30.0)

    setups = [
        setup("default", "Q_DEFAULT", "default"),
        setup("default", "Q_DEFAULT", "default-lane"),
        setup("thumbs", "Q_THUMBS_P0", "thumbs"),
        setup("thumbs", "Q_THUMBS_P1", "thumbs"),
    ]
    assert described(["default", "thumbs"], setups) == "default, thumbs (2 streams)"
    assert described(["default"], setups[:2]) == "default"


async def test_taskq_workers_counts_cancelled_tasks(nats_url: str, prefix: str) -> None:
    """The CANCELLED column docs/cli.md promises: a task cancelled while it runs is counted
    in the worker's next heartbeat, in the table and in `--json`."""
    app = App(url=nats_url, prefix=prefix, heartbeat=0.3)
    started = asyncio.Event()

    @app.task
    async def long() -> None:
        started.set()
        await asyncio.sleep(60)

    try:
        async with running_worker(app) as worker:
            handle = await long.enqueue()
            await asyncio.wait_for(started.wait(), 20)
            await handle.cancel()
            await wait_until(lambda: worker.stats["cancelled"] == 1)

            async def cancelled_listed() -> bool:
                listed = json.loads((await cli(nats_url, prefix, "workers", "--json")).stdout)
                return [w["counts"].get("cancelled") for w in listed] == [1]

            await wait_until(cancelled_listed, timeout=20)
            shown = (await cli(nats_url, prefix, "workers")).stdout
            header, row, *_ = [*shown.splitlines(), "", ""]
            column = header.split().index("CANCELLED")
            assert row.split()[column] == "1", shown
    finally:
        await app.aclose()


async def test_schedules_ls_shows_each_schedules_next_run(nats_url: str, prefix: str) -> None:
    """`taskq schedules ls` has a NEXT RUN column: a daily cron's next 03:00:00 UTC, and a
    delayed task's eta (the `--json` twin says the same)."""
    app = App(url=nats_url, prefix=prefix)

    @app.periodic(cron="0 0 3 * * *")
    async def nightly() -> None: ...

    @app.task
    async def later() -> None: ...

    try:
        async with running_worker(app):
            await later.options(countdown=3600).enqueue()

            async def both_listed() -> list[dict[str, Any]]:
                listed = await cli(nats_url, prefix, "schedules", "ls", "--json")
                found = json.loads(listed.stdout)
                return found if len(found) == 2 else []

            await wait_until(both_listed, timeout=20)
            listed = {s["name"].split(".")[0]: s for s in await both_listed()}
        now = datetime.now(UTC)
        three = now.replace(hour=3, minute=0, second=0, microsecond=0)
        nightly_at = three if three > now else three + timedelta(days=1)
        assert datetime.fromisoformat(listed["periodic"]["next_run"]) == nightly_at
        eta = datetime.fromisoformat(listed["task"]["next_run"])
        # a schedule fires to the second: the eta is rounded up to the next one
        assert timedelta(minutes=55) < eta - now <= timedelta(hours=1, seconds=1)
        header, *rows = run_cli(nats_url, prefix, "schedules", "ls").stdout.splitlines()
        assert "NEXT RUN" in header
        at = header.index("NEXT RUN")
        shown = {row.split()[1].split(".")[0]: row[at : at + 24].strip() for row in rows}
        assert shown == {k: s["next_run"] for k, s in listed.items()}, rows
    finally:
        await app.aclose()
