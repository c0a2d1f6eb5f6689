"""OpenTelemetry for taskq: spans linking enqueue to run, and task metrics.

The library uses only the OpenTelemetry API: without a configured SDK every call is a cheap
no-op. `taskq worker` configures the SDK from the standard `OTEL_*` environment
(`workers/otel.py`). Spans follow the messaging semantic conventions: a PRODUCER span per
enqueue whose context travels in the message's `traceparent`/`tracestate` headers, and a
CONSUMER span per run, parented to it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from taskq.envelope import Envelope, parse_time

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


def _tracing() -> bool:
    """True once a real tracer provider is installed. Until then the API's spans do nothing
    but still cost a context attach/detach per message, which the hot path skips."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _attributes(subject: str, queue: str, envelope: Envelope) -> dict[str, Any]:
    return {
        "messaging.system": "nats",
        "messaging.destination.name": subject,
        "messaging.message.id": envelope.id,
        "taskq.queue": queue,
        "taskq.task": envelope.task,
    }


@contextlib.contextmanager
def producing(
    subject: str, queue: str, envelope: Envelope, headers: dict[str, str]
) -> Iterator[None]:
    """A PRODUCER span around a publish; injects its context into `headers`."""
    if not _tracing():
        yield
    else:
        attributes = _attributes(subject, queue, envelope)
        attributes["messaging.operation.type"] = "publish"
        with _tracer.start_as_current_span(
            f"publish {queue}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            propagate.inject(headers)
            yield
    ENQUEUED.add(1, {"taskq.queue": queue, "taskq.task": envelope.task})


@contextlib.contextmanager
def processing(
    subject: str,
    queue: str,
    envelope: Envelope,
    headers: dict[str, str] | None,
    delivery_count: int,
    consumer: str,
) -> Iterator[Span | None]:
    """A CONSUMER span around one run, parented to the producer's context (None while no
    tracer provider is installed)."""
    if delivery_count == 1 and envelope.enqueued_at:
        wait = time.time() - parse_time(envelope.enqueued_at).timestamp()
        QUEUE_WAIT.record(max(0.0, wait), {"taskq.queue": queue, "taskq.task": envelope.task})
    if not _tracing():
        yield None
        return
    parent = propagate.extract(headers or {})
    attributes = _attributes(subject, queue, envelope)
    attributes.update(
        {
            "messaging.operation.type": "process",
            "messaging.consumer.group.name": consumer,
            "taskq.delivery_count": delivery_count,
        }
    )
    with _tracer.start_as_current_span(
        f"process {queue}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
    ) as span:
        yield span


def settled(
    span: Span | None,
    verdict: str,
    queue: str,
    task: str,
    seconds: float,
    error: BaseException | None,
) -> None:
    """Count a settled attempt and mark its span (verdict: ack, nak or dead)."""
    labels = {"taskq.queue": queue, "taskq.task": task}
    RUN_TIME.record(seconds, labels)
    if error is not None:
        FAILED.add(1, labels)
        if span is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, str(error)[:200]))
    if verdict == "ack":
        SUCCEEDED.add(1, labels)
    elif verdict == "nak":
        RETRIED.add(1, labels)
    else:
        DEAD.add(1, labels)
    if span is not None:
        span.set_attribute("taskq.verdict", verdict)
