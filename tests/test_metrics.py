"""Prometheus: `taskq worker --metrics-port` serves the OpenTelemetry metrics after real
tasks ran (started, succeeded, retried, dead, duration, in flight, lease extensions), `taskq
exporter` serves queue depth from the server, and the Grafana board asks for nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import urllib.request
from collections.abc import Callable

import click
import pytest
from prometheus_client.parser import text_string_to_metric_families

from taskq.errors import TaskFailed
from taskq.ports import lease_port
from tests.apps import metered
from tests.conftest import ROOT, WorkerProcess, cli_argv, wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, got), v in samples.items() if n == name and wanted <= got)


async def run_tasks(url: str, prefix: str) -> None:
    metered.app.configure(url=url, prefix=prefix)
    try:
        handles = [
            await metered.ok.enqueue(1),
            await metered.flaky.enqueue(),
            await metered.long.enqueue(),
        ]
        for handle in handles:
            await handle.result(timeout=30)
        doomed = await metered.doomed.enqueue()
        with contextlib.suppress(TaskFailed):
            await doomed.result(timeout=30)
        await metered.ok.options(queue="parked").enqueue(2)  # no worker: it waits
    finally:
        await metered.app.aclose()


def test_worker_and_exporter_metrics(
    nats_url: str, prefix: str, worker_process: Callable[..., WorkerProcess]
) -> None:
    worker_port, exporter_port = lease_port(), lease_port()
    worker = worker_process("tests.apps.metered:app", "--metrics-port", str(worker_port))
    exporter = subprocess.Popen(
        cli_argv(nats_url, prefix, "exporter", "--host", "127.0.0.1", "--port", str(exporter_port)),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        asyncio.run(worker.wait_ready())
        asyncio.run(run_tasks(nats_url, prefix))
        samples = scrape(worker_port)
        asyncio.run(wait_until(lambda: b"taskq_queue_waiting" in _raw(exporter_port), 20))
        queues = scrape(exporter_port)
    finally:
        exporter.terminate()
        _, errors = exporter.communicate(timeout=15)
    assert exporter.returncode == 0, errors
    by_task = {task: {"taskq_queue": "default", "taskq_task": task} for task in metered.app.tasks}
    default_group = {"messaging_consumer_group_name": "default"}  # the conventions' labels
    assert value(samples, "taskq_tasks_started_total", **by_task["flaky"]) == 2
    assert value(samples, "taskq_tasks_succeeded_total", **by_task["flaky"]) == 1
    assert value(samples, "taskq_tasks_retried_total", **by_task["flaky"]) == 1
    assert value(samples, "taskq_tasks_dead_lettered_total", **by_task["doomed"]) == 1
    assert value(samples, "taskq_tasks_failed_total", **by_task["doomed"]) == 1
    assert value(samples, "taskq_task_duration_seconds_count", **by_task["ok"]) == 1
    # `long` sleeps 1.2 s: never in the 1 s bucket; its sum is in seconds (1,200 in ms; the
    # 60 only catches the unit, not a slow machine; a timer may read 1.1998 for 1.2)
    assert value(samples, "taskq_task_duration_seconds_bucket", le="1.0", **by_task["long"]) == 0
    assert value(samples, "taskq_task_duration_seconds_count", **by_task["long"]) == 1
    assert 1.0 < value(samples, "taskq_task_duration_seconds_sum", **by_task["long"]) < 60
    assert value(samples, "taskq_task_queue_wait_seconds_count", taskq_queue="default") == 4
    assert value(samples, "taskq_tasks_in_flight", taskq_queue="default") == 0
    assert value(samples, "taskq_lease_extensions_total", taskq_queue="default") >= 2
    assert value(samples, "process_resident_memory_bytes") > 0  # prometheus_client's own
    assert value(samples, "taskq_worker_free_slots") == 16  # -c 16, every task settled
    assert value(samples, "messaging_client_consumed_messages_total", **default_group) >= 5
    parked = {"taskq_prefix": prefix, "taskq_queue": "parked"}
    assert value(queues, "taskq_queue_waiting", **parked) == 1
    assert value(queues, "taskq_queue_runnable", **parked) == 1  # the autoscaling signal
    partition = {**parked, "taskq_partition": "none"}
    assert value(queues, "taskq_queue_partition_runnable", **partition) == 1
    assert value(queues, "taskq_queue_stored", taskq_task="ok", **parked) == 1
    default = {"taskq_prefix": prefix, "taskq_queue": "default"}
    assert value(queues, "taskq_queue_dead_letters", **default) == 1
    assert value(queues, "taskq_queue_in_flight", **default) == 0
    _dashboard_asks_only_for({name for name, _ in samples} | {name for name, _ in queues})


def _raw(port: int) -> bytes:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return bytes(response.read())
    except OSError:
        return b""


def _dashboard_asks_only_for(exported: set[str]) -> None:
    """Every metric a panel of deploy/grafana/taskq.json queries is one taskq exports."""
    board = json.loads((ROOT / "deploy" / "grafana" / "taskq.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8
    asked = {name for expr in exprs for name in re.findall(r"\btaskq_[a-z_]+", expr)}
    asked -= {"taskq_queue", "taskq_task", "taskq_prefix"}  # labels, not metrics
    assert asked and asked <= exported, asked - exported


def test_metrics_port_per_process_and_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `-p N`, worker process i serves PORT+i-1; ports past 65535 and a missing
    extra are usage errors (exit 2, one line)."""
    from taskq.cli import worker as command
    from taskq.workers import otel

    monkeypatch.delenv("TASKQ_WORKER_PROCESS", raising=False)
    assert command._metrics_port(None, 4) is None
    assert command._metrics_port(9464, 1) == 9464  # a plain worker: PORT itself
    monkeypatch.setenv("TASKQ_WORKER_PROCESS", "3")
    assert command._metrics_port(9464, 4) == 9466
    with pytest.raises(click.BadParameter, match=r"ports 65534\.\.65537"):
        command._metrics_port(65534, 4)
    monkeypatch.setattr(otel, "prometheus_installed", lambda: False)
    with pytest.raises(click.UsageError, match=r"pip install 'taskq\[prometheus\]'"):
        command._metrics_port(9464, 1)
