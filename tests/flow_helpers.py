"""Helpers of the flow-control tests: the ledger of runs, worker processes, the test app."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from taskq import App
from tests.apps import flowctl
from tests.conftest import WorkerProcess

SPEC = "tests.apps.flowctl:app"


def events(path: Path) -> list[tuple[str, str, float, int, int]]:
    """(event, token, time, attempt, pid) per ledger line."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        event, token, at, attempt, pid = line.split()
        found.append((event, token, float(at), int(attempt), int(pid)))
    return found


def most_at_once(rows: list[tuple[str, str, float, int, int]], prefix: str = "") -> int:
    """The largest number of runs (of tokens starting with `prefix`) overlapping in time."""
    edges = sorted(
        (at, 1 if event == "start" else -1)
        for event, token, at, _, _ in rows
        if token.startswith(prefix)
    )
    live = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start
        live += step
        peak = max(peak, live)
    return peak


@pytest.fixture
def flow_app(nats_url: str, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> App:
    monkeypatch.setenv("TASKQ_TEST_LEDGER", str(tmp_path / "ledger"))
    flowctl.app.configure(url=nats_url, prefix=prefix)
    return flowctl.app


async def start_workers(
    worker_process: Callable[..., WorkerProcess], ledger: Path, count: int, concurrency: int = 8
) -> list[WorkerProcess]:
    env = {"TASKQ_TEST_LEDGER": str(ledger)}
    procs = [worker_process(SPEC, "-c", str(concurrency), env=env) for _ in range(count)]
    for proc in procs:
        await proc.wait_ready()
    return procs
