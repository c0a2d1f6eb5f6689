"""OpenTelemetry for taskq, as a middleware every App installs first (outermost).

The library uses only the OpenTelemetry API: without a configured SDK every call is a cheap
no-op. `taskq worker` configures the SDK from the standard `OTEL_*` environment
(`taskq.workers.otel`). Spans follow the messaging semantic conventions: a PRODUCER span per
enqueue whose context travels in the message's `traceparent`/`tracestate` headers, and a
CONSUMER span per run, parented to it. Metrics: enqueued, succeeded, failed, retried,
dead-lettered, run time and queue wait.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from taskq.context import TaskContext
from taskq.envelope import Envelope, parse_time
from taskq.middleware import Middleware, Run, Send
from taskq.policy import Ack, Failure, Nak, Success, decide

_tracer = trace.get_tracer("taskq")  # a proxy: picks up a provider configured later
_meter = metrics.get_meter("taskq")

ENQUEUED = _meter.create_counter(
    "taskq.tasks.enqueued", unit="{task}", description="tasks stored in a queue"
)
SUCCEEDED = _meter.create_counter("taskq.tasks.succeeded", unit="{task}")
FAILED = _meter.create_counter(
    "taskq.tasks.failed", unit="{attempt}", description="attempts that raised (retried or not)"
)
RETRIED = _meter.create_counter("taskq.tasks.retried", unit="{task}")
DEAD = _meter.create_counter("taskq.tasks.dead_lettered", unit="{task}")
RUN_TIME = _meter.create_histogram(
    "taskq.task.duration", unit="s", description="run time of one attempt"
)
QUEUE_WAIT = _meter.create_histogram(
    "taskq.task.queue_wait", unit="s", description="enqueue to start of the first attempt"
)


def tracing() -> bool:
    """True once a real tracer provider is installed. Until then the API's spans do nothing
    but still cost a context attach/detach per message, which the hot path skips."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _attributes(envelope: Envelope) -> dict[str, Any]:
    return {
        "messaging.system": "nats",
        "messaging.destination.name": envelope.subject,
        "messaging.message.id": envelope.id,
        "taskq.queue": envelope.queue,
        "taskq.task": envelope.task,
    }


class Telemetry(Middleware):
    """Spans and metrics for every enqueue and every attempt."""

    async def enqueue(self, envelope: Envelope, call_next: Send) -> None:
        if tracing():
            attributes = _attributes(envelope)
            attributes["messaging.operation.type"] = "publish"
            with _tracer.start_as_current_span(
                f"publish {envelope.queue}", kind=SpanKind.PRODUCER, attributes=attributes
            ):
                propagate.inject(envelope.headers)
                await call_next(envelope)
        else:
            await call_next(envelope)
        ENQUEUED.add(1, {"taskq.queue": envelope.queue, "taskq.task": envelope.task})

    async def process(self, ctx: TaskContext, call_next: Run) -> Any:
        labels = {"taskq.queue": ctx.queue, "taskq.task": ctx.task}
        if ctx.attempt == 1 and ctx.envelope.enqueued_at:
            wait = ctx.started - parse_time(ctx.envelope.enqueued_at).timestamp()
            QUEUE_WAIT.record(max(0.0, wait), labels)
        if not tracing():
            return await _measured(ctx, call_next, labels, None)
        parent = propagate.extract(dict(ctx.headers))
        attributes = _attributes(ctx.envelope)
        attributes.update(
            {
                "messaging.operation.type": "process",
                "messaging.consumer.group.name": ctx.queue,
                "taskq.delivery_count": ctx.attempt,
            }
        )
        with _tracer.start_as_current_span(
            f"process {ctx.queue}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        ) as span:
            return await _measured(ctx, call_next, labels, span)


async def _measured(
    ctx: TaskContext, call_next: Run, labels: dict[str, str], span: Span | None
) -> Any:
    started = time.monotonic()
    try:
        value = await call_next()
    except Exception as exc:
        _settled(ctx, Failure(exc), labels, time.monotonic() - started, span)
        raise
    _settled(ctx, Success(value), labels, time.monotonic() - started, span)
    return value


def _settled(
    ctx: TaskContext,
    outcome: Success | Failure,
    labels: dict[str, str],
    seconds: float,
    span: Span | None,
) -> None:
    """Count a finished attempt by the verdict the worker will reach (`decide` is pure in
    its kind: the same policy, attempt and outcome give the same verdict)."""
    RUN_TIME.record(seconds, labels)
    decision = decide(ctx.policy, ctx.attempt, outcome)
    verdict = "ack" if isinstance(decision, Ack) else "nak" if isinstance(decision, Nak) else "dead"
    if isinstance(outcome, Failure):
        FAILED.add(1, labels)
        if span is not None:
            span.record_exception(outcome.error)
            span.set_status(Status(StatusCode.ERROR, str(outcome.error)[:200]))
    {"ack": SUCCEEDED, "nak": RETRIED, "dead": DEAD}[verdict].add(1, labels)
    if span is not None:
        span.set_attribute("taskq.verdict", verdict)
