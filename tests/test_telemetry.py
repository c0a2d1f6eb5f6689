"""OpenTelemetry: a producer span per enqueue, a consumer span per run, linked through the
message's traceparent; metrics for enqueued, succeeded, retried, dead-lettered, run time."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from taskq import App
from tests.conftest import ROOT, cli_argv, running_worker, wait_until

SPANS = InMemorySpanExporter()
READER = InMemoryMetricReader()


@pytest.fixture(scope="module", autouse=True)
def providers() -> Iterator[None]:
    # The global providers can be set once per process: the first caller wins.
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(SPANS))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
    yield
    SPANS.clear()
    SPANS.shutdown()  # later tests in this process keep the provider but store nothing


def metric_points() -> dict[str, float]:
    totals: dict[str, float] = {}
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = getattr(point, "count", 0)
                    totals[metric.name] = totals.get(metric.name, 0) + value
    return totals


async def test_enqueue_and_run_spans_are_linked(app: App, prefix: str) -> None:
    SPANS.clear()

    @app.task
    async def traced(x: int) -> int:
        return x

    @app.task(max_retries=1, backoff=0.05, jitter=0)
    async def failing() -> None:
        raise ValueError("traced failure")

    async with running_worker(app) as worker:
        handle = await traced.enqueue(1)
        await failing.enqueue()
        await wait_until(lambda: worker.stats["succeeded"] == 1 and worker.stats["dead"] == 1)
    spans = SPANS.get_finished_spans()
    producer = next(
        s
        for s in spans
        if s.kind == SpanKind.PRODUCER and s.attributes["messaging.message.id"] == handle.id
    )
    consumer = next(
        s
        for s in spans
        if s.kind == SpanKind.CONSUMER and s.attributes["messaging.message.id"] == handle.id
    )
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert producer.attributes["messaging.system"] == "nats"
    assert producer.attributes["messaging.destination.name"] == f"{prefix}.q.default.traced"
    assert consumer.attributes["taskq.delivery_count"] == 1
    assert consumer.attributes["taskq.verdict"] == "ack"
    failed = [
        s for s in spans if s.kind == SpanKind.CONSUMER and s.attributes["taskq.task"] == "failing"
    ]
    assert [s.attributes["taskq.verdict"] for s in failed] == ["nak", "dead"]
    assert failed[-1].status.status_code.name == "ERROR"
    points = metric_points()
    assert points["taskq.tasks.enqueued"] >= 2 and points["taskq.tasks.succeeded"] >= 1
    assert points["taskq.tasks.retried"] >= 1 and points["taskq.tasks.dead_lettered"] >= 1
    assert points["taskq.task.duration"] >= 3 and points["taskq.task.queue_wait"] >= 2


def test_worker_configures_sdk_from_env(nats_url: str, prefix: str, tmp_path) -> None:
    """`taskq worker` with OTEL_TRACES_EXPORTER=console prints spans."""
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "taskq-test"}
    proc = subprocess.Popen(
        cli_argv(nats_url, prefix, "worker", "tests.apps.ledger:app"),
        cwd=ROOT,
        env={**env, "TASKQ_TEST_LEDGER": str(tmp_path / "l")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        from tests.apps import ledger

        ledger.app.configure(url=nats_url, prefix=prefix)
        import asyncio

        async def go() -> None:
            await ledger.quick.enqueue("otel")
            await ledger.app.aclose()

        asyncio.run(go())
        deadline_ok = False
        import time

        end = time.monotonic() + 20
        while time.monotonic() < end:
            if (tmp_path / "l").exists():
                deadline_ok = True
                break
            time.sleep(0.05)
        assert deadline_ok
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert '"name": "process default"' in out and "taskq-test" in out
