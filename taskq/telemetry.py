"""OpenTelemetry for taskq, as a middleware every App installs first (outermost).

The library uses only the OpenTelemetry API: without a configured SDK every call is a cheap
no-op. `taskq worker` configures the SDK from the standard `OTEL_*` environment
(`taskq.workers.otel`). Spans follow the messaging semantic conventions: a PRODUCER span per
enqueue whose context travels in the message's `traceparent`/`tracestate` headers, and a
CONSUMER span per run, parented to it. Metrics: enqueued, started, in flight, succeeded,
failed, retried, dead-lettered, lease extensions, run time and queue wait (`taskq worker
--metrics-port` serves them to Prometheus; docs/operations.md lists their names there).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from taskq.context import TaskContext
from taskq.middleware import Middleware, Run, Send
from taskq.policy import Ack, Failure, Nak, Success, decide
from taskq.records.clock import parse_time
from taskq.records.envelope import Envelope

_tracer = trace.get_tracer("taskq")  # a proxy: picks up a provider configured later
_meter = metrics.get_meter("taskq")

Key = tuple[str, str]  # (queue, task)


class Tally:
    """A per-(queue, task) count kept in a plain dict on the task path and read by
    OpenTelemetry only when a reader collects (a Prometheus scrape, an OTLP export).

    An SDK instrument's `add` costs about 5 µs (it hashes the attribute set and takes a
    lock); a worker adds to several counts per task, which cost 20% of a no-op drain with
    `--metrics-port` (bench/observability.py). A dict update costs a fraction of a µs, with
    or without an SDK installed."""

    def __init__(self, name: str, unit: str, description: str, up_down: bool = False) -> None:
        self.counts: dict[Key, int] = {}
        create = (
            _meter.create_observable_up_down_counter
            if up_down
            else _meter.create_observable_counter
        )
        create(name, callbacks=[self._observe], unit=unit, description=description)

    def add(self, key: Key, amount: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + amount

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        # a copy (atomic under the GIL): a scrape runs on the exporter's thread while
        # tasks keep counting on the event loop's
        counts = self.counts.copy()
        return [Observation(n, {"taskq.queue": q, "taskq.task": t}) for (q, t), n in counts.items()]


ENQUEUED = _meter.create_counter(
    "taskq.tasks.enqueued", unit="{task}", description="tasks stored in a queue"
)
STARTED = Tally("taskq.tasks.started", "{attempt}", "attempts that began to run")
IN_FLIGHT = Tally("taskq.tasks.in_flight", "{attempt}", "attempts running now", up_down=True)
SUCCEEDED = Tally("taskq.tasks.succeeded", "{task}", "tasks that succeeded")
FAILED = Tally("taskq.tasks.failed", "{attempt}", "attempts that raised (retried or not)")
RETRIED = Tally("taskq.tasks.retried", "{task}", "failed attempts that will be retried")
DEAD = Tally("taskq.tasks.dead_lettered", "{task}", "tasks written to the dead-letter queue")
LEASE_EXTENSIONS = _meter.create_counter(
    "taskq.lease.extensions",
    unit="{extension}",
    description="in-progress acks that kept a running task's lease (taskq.workers.lease)",
)
# Seconds from a millisecond to an hour: the SDK's default buckets (0..10000) suit
# milliseconds, and would put every task run in the first few buckets.
SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0,
)  # fmt: skip
RUN_TIME = _meter.create_histogram(
    "taskq.task.duration",
    unit="s",
    description="run time of one attempt",
    explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
)
QUEUE_WAIT = _meter.create_histogram(
    "taskq.task.queue_wait",
    unit="s",
    description="enqueue to start of the first attempt",
    explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
)


def tracing() -> bool:
    """True once a real tracer provider is installed. Until then the API's spans do nothing
    but still cost a context attach/detach per message, which the hot path skips."""
    # The API's lookup reads the environment on every call while no provider is set (about
    # 3 µs, per message); its global says the same at the cost of one attribute read. The
    # environment is consulted the API's way only while that global is unset.
    if getattr(trace, "_TRACER_PROVIDER", None) is None and not _ENV_PROVIDER:
        return False
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


# set once at start-up by deployments (opentelemetry-instrument); read once, not per message
_ENV_PROVIDER = bool(os.environ.get(OTEL_PYTHON_TRACER_PROVIDER))


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
    key = (ctx.queue, ctx.task)
    STARTED.add(key)
    IN_FLIGHT.add(key)
    started = time.monotonic()
    try:
        value = await call_next()
    except Exception as exc:
        _settled(ctx, Failure(exc), labels, time.monotonic() - started, span)
        raise
    finally:
        IN_FLIGHT.add(key, -1)  # cancelled attempts (shutdown past grace) included
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
    key = (ctx.queue, ctx.task)
    if isinstance(outcome, Failure):
        FAILED.add(key)
        if span is not None:
            span.record_exception(outcome.error)
            span.set_status(Status(StatusCode.ERROR, str(outcome.error)[:200]))
    {"ack": SUCCEEDED, "nak": RETRIED, "dead": DEAD}[verdict].add(key)
    if span is not None:
        span.set_attribute("taskq.verdict", verdict)
