"""`taskq worker --log-format json`: one JSON object per line with the task's fields, from
the same log calls as the text format (workers/logs.py JsonFormatter)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys
from collections.abc import Callable

from taskq import TaskFailed
from taskq.workers.logs import SETTLED, JsonFormatter
from tests.apps import metered
from tests.conftest import WorkerProcess, wait_until


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("taskq.worker", logging.INFO, __file__, 1, message, (), None)
    made.__dict__.update(extra)
    made.created, made.msecs = 1_795_000_000.25, 250.0
    return made


def test_formatter_fields() -> None:
    formatter = JsonFormatter()
    settled = (
        "billing.charge",
        "01J",
        2,
        "billing",
        0.0123456789,
        "dead",
        "exhausted",
    )
    line = json.loads(formatter.format(record('dead-lettered "x"', **{SETTLED: settled})))
    assert line == {
        "time": "2026-11-18T11:06:40.250Z",
        "level": "INFO",
        "logger": "taskq.worker",
        "message": 'dead-lettered "x"',
        "task": "billing.charge",
        "id": "01J",
        "attempt": 2,
        "queue": "billing",
        "duration": 0.012346,
        "outcome": "dead",
        "reason": "exhausted",
        "worker": f"{socket.gethostname()}:{line['worker'].rsplit(':', 1)[1]}",
    }
    # a task's own lines (taskq.current().logger) carry its id, name and attempt
    own = json.loads(
        formatter.format(record("hi", taskq_id="01K", taskq_task="t", taskq_attempt=1))
    )
    assert (own["id"], own["task"], own["attempt"]) == ("01K", "t", 1) and "outcome" not in own
    try:
        raise ValueError("boom")
    except ValueError:
        failing = record("failed")
        failing.exc_info = sys.exc_info()
    assert "ValueError: boom" in json.loads(formatter.format(failing))["error"]


async def test_worker_writes_json_lines(
    nats_url: str, prefix: str, worker_process: Callable[..., WorkerProcess]
) -> None:
    worker = worker_process("tests.apps.metered:app", "--log-format", "json")
    await worker.wait_ready()
    metered.app.configure(url=nats_url, prefix=prefix)
    try:
        ok = await metered.ok.enqueue(7)
        flaky = await metered.flaky.enqueue()
        doomed = await metered.doomed.enqueue()
        await ok.result(timeout=20)
        await flaky.result(timeout=20)
        with contextlib.suppress(TaskFailed):
            await doomed.result(timeout=20)
    finally:
        await metered.app.aclose()
    worker.signal(15)
    assert await worker.wait_exit() == 0
    lines = [json.loads(text) for text in worker.output().splitlines() if text.strip()]
    settled = {(line["id"], line["attempt"]): line for line in lines if "outcome" in line}
    assert settled[(ok.id, 1)]["outcome"] == "succeeded"
    assert settled[(ok.id, 1)]["queue"] == "default" and settled[(ok.id, 1)]["task"] == "ok"
    assert settled[(flaky.id, 1)]["outcome"] == "retried"
    assert settled[(flaky.id, 2)]["outcome"] == "succeeded"
    assert (settled[(doomed.id, 1)]["outcome"], settled[(doomed.id, 1)]["reason"]) == (
        "dead",
        "permanent",
    )
    assert all({"time", "level", "logger", "message", "worker"} <= line.keys() for line in lines)
    assert any(line["message"].startswith("worker ready") for line in lines)
    # issue 39 (8): a dead letter's traceback, and with -v a retry's, the user's frame first
    for line in (settled[(doomed.id, 1)], settled[(flaky.id, 1)]):
        trace = line["traceback"]
        assert "tests/apps/metered.py" in trace.splitlines()[1], trace  # under the header
        assert "hidden (taskq dlq show ID -v shows them)" in trace
    assert "traceback" not in settled[(ok.id, 1)]


async def test_a_dead_letter_s_traceback_follows_its_line_in_the_text_log(
    nats_url: str, prefix: str, worker_process: Callable[..., WorkerProcess]
) -> None:
    worker = worker_process("tests.apps.metered:app")
    await worker.wait_ready()
    metered.app.configure(url=nats_url, prefix=prefix)
    try:
        doomed = await metered.doomed.enqueue()
        with contextlib.suppress(TaskFailed):
            await doomed.result(timeout=20)
    finally:
        await metered.app.aclose()
    # its record is stored before its message settles, and its line is logged after
    await wait_until(lambda: "dead-lettered doomed" in worker.output(), timeout=20)
    await wait_until(lambda: "raise Reject" in worker.output(), timeout=20)
    lines = worker.output().splitlines()
    at = next(i for i, text in enumerate(lines) if "dead-lettered doomed" in text)
    assert lines[at + 1] == "Traceback (most recent call last):"
    assert "tests/apps/metered.py" in lines[at + 2] and "raise Reject" in lines[at + 3]
    await asyncio.sleep(0)
