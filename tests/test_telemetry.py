"""OpenTelemetry by the messaging conventions: a `send` PRODUCER span per enqueue, a
`process` CONSUMER span per run, linked through the message's traceparent, `settle` CLIENT
spans; the conventions' four metrics beside taskq's own; a workflow's steps in the trace of
the task that caused them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import taskq
from taskq import App, Workflow, chain
from tests.conftest import HANG, ROOT, cli_argv, running_worker, wait_until

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
    assert (producer.name, consumer.name) == ("send default", "process default")
    assert producer.attributes["messaging.operation.type"] == "send"
    assert consumer.attributes["messaging.operation.type"] == "process"
    assert consumer.attributes["messaging.consumer.group.name"] == "default"
    assert producer.attributes["messaging.system"] == "nats"
    assert producer.attributes["messaging.destination.name"] == f"{prefix}.q.default.traced"
    # its ack: a settle span linked to the message's send span
    settles = [s for s in spans if s.kind == SpanKind.CLIENT and s.name == "settle default"]
    acked = [s for s in settles if producer.context.span_id in _linked(s)]
    assert acked and acked[0].attributes["messaging.operation.type"] == "settle"
    assert acked[0].attributes["messaging.operation.name"] == "ack"
    # the retry's NAK and the dead letter's TERM, each settled alone: children of its send
    failing_send = next(
        s for s in spans if s.kind == SpanKind.PRODUCER and s.attributes["taskq.task"] == "failing"
    )
    alone = [s for s in settles if s.parent and s.parent.span_id == failing_send.context.span_id]
    assert sorted(s.attributes["messaging.operation.name"] for s in alone) == ["nak", "term"]
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
    # the conventions' four, beside taskq's own
    assert points["messaging.client.sent.messages"] >= 2
    assert points["messaging.client.consumed.messages"] >= 3  # two attempts of `failing`
    assert points["messaging.process.duration"] >= 3
    assert points["messaging.client.operation.duration"] >= 2 + 3  # sends, then settles
    operations = _attribute_values(
        "messaging.client.operation.duration", "messaging.operation.name"
    )
    assert {"send", "ack", "nak", "term"} <= operations
    assert "ValueError" in _attribute_values("messaging.process.duration", "error.type")


async def test_a_chains_steps_join_the_trace_of_its_first(app: App) -> None:
    """A step taskq publishes itself (a chain's next step, after the previous one ran)
    carries the context of the step that caused it: one trace, each step's process span the
    parent of the next one's."""
    SPANS.clear()

    @app.task
    async def first(x: int) -> int:
        return x + 1

    @app.task
    async def second(x: int) -> int:
        return x * 2

    async with running_worker(app) as worker:
        handle = await chain(first.s(1), second.s()).enqueue()
        assert await handle.result(timeout=HANG) == 4
        await wait_until(lambda: worker.stats["succeeded"] == 2)
    spans = SPANS.get_finished_spans()
    runs = {s.attributes["taskq.task"]: s for s in spans if s.kind == SpanKind.CONSUMER}
    assert runs["second"].context.trace_id == runs["first"].context.trace_id
    assert runs["second"].parent is not None
    assert runs["second"].parent.span_id == runs["first"].context.span_id


async def test_a_durable_runs_steps_join_the_trace_of_its_start(app: App) -> None:
    """A durable run started inside the caller's span: its decisions and its steps (which
    taskq publishes itself) are in the caller's trace."""
    SPANS.clear()

    @app.task
    async def step(n: int) -> int:
        return n + 1

    @app.workflow
    async def flow(wf: Workflow, n: int) -> int:
        return await wf.run(step, await wf.run(step, n))

    tracer = trace.get_tracer("tests")
    async with running_worker(app) as worker:
        with tracer.start_as_current_span("caller") as caller:
            run = await flow.start(1)
        assert await run.result(timeout=HANG) == 3
        await wait_until(lambda: worker.stats["succeeded"] >= 2)
    runs = [s for s in SPANS.get_finished_spans() if s.kind == SpanKind.CONSUMER]
    steps = [s for s in runs if s.attributes["taskq.task"] == "step"]
    assert len(steps) == 2 and len(runs) > 2  # the steps and the run's decisions
    assert {s.context.trace_id for s in runs} == {caller.get_span_context().trace_id}


async def test_an_outbox_task_joins_the_trace_of_the_request_that_wrote_it(
    app: App, tmp_path: Any
) -> None:
    """`enqueue_in` inside the request's span, committed, relayed later by a relay that
    traces nothing of its own: the send span's parent is the request's span, the task's
    process span is in the request's trace; the carried context is not left in the task's
    meta. A row carrying a malformed context is published without one."""
    from sqlalchemy import create_engine

    from taskq.outbox.database import create_table
    from tests.outbox.conftest import running_relay

    SPANS.clear()
    url = f"sqlite:///{tmp_path / 'app.db'}"
    await create_table(url)
    seen: list[dict[str, Any]] = []

    @app.task
    async def receipt(order: int) -> int:
        seen.append(dict(taskq.current().meta))
        return order

    made = create_engine(url)
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("POST /orders") as request, made.begin() as db:
        handle = receipt.enqueue_in(db, 7)
    with made.begin() as db:  # a hostile row: a context that is no W3C traceparent
        forged = receipt.options(meta={"taskq.trace": {"traceparent": "00-x\r\n-bad"}})
        other = forged.enqueue_in(db, 8)
    made.dispose()
    async with running_worker(app), running_relay(app, url, poll=0.05):
        assert await handle.result(timeout=HANG) == 7
        assert await other.result(timeout=HANG) == 8
    spans = SPANS.get_finished_spans()
    trace_id = request.get_span_context().trace_id
    sends = [s for s in spans if s.kind == SpanKind.PRODUCER and s.context.trace_id == trace_id]
    assert len(sends) == 1 and sends[0].parent is not None
    assert sends[0].parent.span_id == request.get_span_context().span_id
    runs = [s for s in spans if s.kind == SpanKind.CONSUMER]
    assert {s.context.trace_id == trace_id for s in runs} == {True, False}
    assert all("taskq.trace" not in meta for meta in seen)


def _linked(span: Any) -> set[int]:
    return {link.context.span_id for link in span.links}


def _attribute_values(metric_name: str, attribute: str) -> set[str]:
    found: set[str] = set()
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == metric_name:
                    for point in metric.data.data_points:
                        value = point.attributes.get(attribute)
                        if value is not None:
                            found.add(str(value))
    return found


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
