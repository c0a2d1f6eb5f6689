"""Delayed tasks in bulk: `enqueue_many` and `taskq enqueue --from FILE` honour
countdown and eta, each run no earlier than its time (they ran at once before)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from taskq import App
from taskq.records.results import fetch
from tests.apps import ledger
from tests.conftest import run_cli, running_worker, wait_until


async def test_enqueue_many_honours_countdown_and_eta(app: App) -> None:
    """Given runs enqueued in bulk with a countdown, an eta, and none, when a worker
    starts, then the undelayed run goes first and each delayed one no earlier than due."""
    ran: dict[str, float] = {}

    @app.task
    async def stamp(label: str) -> None:
        ran[label] = time.time()

    start = time.time()
    counted = await stamp.options(countdown=2).enqueue_many([["c1"], ["c2"]])
    due = datetime.now(UTC) + timedelta(seconds=3)
    timed = await stamp.options(eta=due).enqueue_many([{"label": "e1"}])
    await stamp.enqueue_many(["now"])
    assert len(counted) == 2 and len(timed) == 1
    async with running_worker(app):
        await wait_until(lambda: len(ran) == 4, timeout=20)
    assert ran["now"] < min(ran["c1"], ran["c2"])
    assert min(ran["c1"], ran["c2"]) - start >= 2 - 0.05
    assert ran["e1"] >= due.timestamp() - 0.05


async def test_enqueue_from_file_honours_countdown(
    nats_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`taskq enqueue --from FILE --countdown 3`: every line is delayed, none starts early."""
    source = tmp_path / "tasks.jsonl"
    source.write_text('["a"]\n["b"]\n')
    monkeypatch.setenv("TASKQ_TEST_LEDGER", str(tmp_path / "ledger"))
    before = datetime.now(UTC)
    done = run_cli(
        nats_url, prefix, "enqueue", "tests.apps.ledger:app", "quick",
        "--from", str(source), "--countdown", "3", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ids = [json.loads(line)["id"] for line in done.stdout.splitlines()]
    assert len(ids) == 2
    app = ledger.app
    app.configure(url=nats_url, prefix=prefix)
    try:
        async with running_worker(app):
            for task_id in ids:
                await app.handle(task_id).result(timeout=20)
        for task_id in ids:
            record = await fetch(app, task_id)
            assert record is not None and record.started_at is not None
            started = datetime.fromisoformat(record.started_at)
            assert started - before >= timedelta(seconds=3 - 0.05), (started, before)
    finally:
        await app.aclose()
