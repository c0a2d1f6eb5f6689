"""OpenTelemetry for taskq, as a middleware every App installs first (outermost).

The library uses only the OpenTelemetry API: without a configured SDK every call is a cheap
no-op. `taskq worker` configures the SDK from the standard `OTEL_*` environment
(`taskq.workers.otel`). Spans and metrics follow the messaging semantic conventions: a
`send` PRODUCER span per enqueue whose context travels in the message's
`traceparent`/`tracestate` headers, a `process` CONSUMER span per attempt, parented to it,
and `settle` CLIENT spans for the acks, NAKs and TERMs (`settling`); the conventions' four
metrics (sent and consumed messages, operation and process durations) beside taskq's own:
enqueued, started, in flight, succeeded, failed, retried, dead-lettered, lease extensions,
run time and queue wait (`taskq worker --metrics-port` serves them to Prometheus;
docs/operations.md lists them).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import metrics, propagate, trace
from opentelemetry.environment_variables import (
    OTEL_PYTHON_METER_PROVIDER,
    OTEL_PYTHON_TRACER_PROVIDER,
)
from opentelemetry.metrics import CallbackOptions, Histogram, Observation
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from taskq.context import TaskContext
from taskq.middleware import Middleware, Run, Send
from taskq.policy import Ack, Failure, Nak, Success, decide
from taskq.records.clock import parse_time
from taskq.records.envelope import Envelope
from taskq.tracing import CAUSE

_tracer = trace.get_tracer("taskq")  # a proxy: picks up a provider configured later
_meter = metrics.get_meter("taskq")

Key = tuple[str, str]  # (queue, task)
Headers = Mapping[str, str]  # a message's headers (its trace context among them)
SYSTEM = "nats"  # `messaging.system`: no well-known value of the conventions, a custom one


def _task_labels(key: Any) -> dict[str, str]:
    queue, task = key
    return {"taskq.queue": queue, "taskq.task": task}


class Tally:
    """A per-(queue, task) count kept in a plain dict on the task path and read by
    OpenTelemetry only when a reader collects (a Prometheus scrape, an OTLP export).

    An SDK instrument's `add` costs about 5 µs (it hashes the attribute set and takes a
    lock); a worker adds to several counts per task, which cost 20% of a no-op drain with
    `--metrics-port` (bench/observability.py). A dict update costs a fraction of a µs, with
    or without an SDK installed."""

    def __init__(
        self,
        name: str,
        unit: str,
        description: str,
        up_down: bool = False,
        labels: Callable[[Any], dict[str, str]] = _task_labels,
    ) -> None:
        self.counts: dict[Any, int] = {}
        self._labels = labels  # a key's attributes, made when a reader collects
        create = (
            _meter.create_observable_up_down_counter
            if up_down
            else _meter.create_observable_counter
        )
        create(name, callbacks=[self._observe], unit=unit, description=description)

    def add(self, key: Any, amount: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + amount

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        # a copy (atomic under the GIL): a scrape runs on the exporter's thread while
        # tasks keep counting on the event loop's
        counts = self.counts.copy()
        return [Observation(n, self._labels(key)) for key, n in counts.items()]


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


def _seconds(name: str, description: str, buckets: Sequence[float]) -> Histogram:
    """A histogram of seconds with its bucket boundaries."""
    return _meter.create_histogram(
        name, unit="s", description=description, explicit_bucket_boundaries_advisory=buckets
    )


RUN_TIME = _seconds("taskq.task.duration", "run time of one attempt", SECONDS_BUCKETS)
QUEUE_WAIT = _seconds(
    "taskq.task.queue_wait", "enqueue to start of the first attempt", SECONDS_BUCKETS
)


class FreeSlots:
    """`taskq.worker.free_slots`: the slots of this process's workers not running an attempt
    (Temporal's scale signal: a pool of workers with none free is saturated), read when a
    reader collects. Workers watch themselves in while they run (`watch`, `forget`)."""

    def __init__(self) -> None:
        self._workers: weakref.WeakSet[Any] = weakref.WeakSet()  # each with `free_slots`
        _meter.create_observable_gauge(
            "taskq.worker.free_slots",
            callbacks=[self._observe],
            unit="{slot}",
            description="worker slots not running an attempt",
        )

    def watch(self, worker: Any) -> None:
        self._workers.add(worker)

    def forget(self, worker: Any) -> None:
        self._workers.discard(worker)

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        workers = list(self._workers)
        return [Observation(sum(w.free_slots for w in workers))] if workers else []


FREE_SLOTS = FreeSlots()


# The messaging semantic conventions' four metrics (docs/operations.md, "Telemetry"), with
# the queue as the destination and the consumer group (bounded: the declared queues). The
# attribute sets are made once per queue (never changed by the SDK, which only reads them).
@functools.lru_cache(maxsize=1024)
def _sent_labels(queue: str) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.name": "send",
        "messaging.destination.name": queue,
    }


@functools.lru_cache(maxsize=1024)
def _consumed_labels(queue: str) -> dict[str, str]:
    receive = {"messaging.operation.name": "receive", "messaging.consumer.group.name": queue}
    return {**_sent_labels(queue), **receive}


SENT_MESSAGES = Tally(
    "messaging.client.sent.messages", "{message}", "messages sent", labels=_sent_labels
)
CONSUMED_MESSAGES = Tally(
    "messaging.client.consumed.messages",
    "{message}",
    "messages a worker received",
    labels=_consumed_labels,
)
# the conventions' advised boundaries
OPERATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
OPERATION_DURATION = _seconds(
    "messaging.client.operation.duration",
    "duration of a send (publish and its ack) or a settle (ack, nak, term)",
    OPERATION_BUCKETS,
)
PROCESS_DURATION = _seconds(
    "messaging.process.duration",
    "duration of processing one message (one attempt)",
    OPERATION_BUCKETS,
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


def metering() -> bool:
    """True once a meter provider is installed. Until then a histogram's `record` is a no-op
    reached through the API's proxies (a few µs for each of a task's four), which the hot
    path skips; the counts (Tally) cost nothing until a reader collects them anyway."""
    # the API's global, as `tracing` reads it; an API without it: recorded always
    provider = getattr(_METER_STATE, "_METER_PROVIDER", _UNKNOWN)
    return provider is not None or _ENV_METER


# set once at start-up by deployments (opentelemetry-instrument); read once, not per message
_ENV_PROVIDER = bool(os.environ.get(OTEL_PYTHON_TRACER_PROVIDER))
_ENV_METER = bool(os.environ.get(OTEL_PYTHON_METER_PROVIDER))
_METER_STATE = getattr(metrics, "_internal", None)
_UNKNOWN = object()


def _attributes(envelope: Envelope, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": envelope.subject,
        "messaging.message.id": envelope.id,
        "taskq.queue": envelope.queue,
        "taskq.task": envelope.task,
    }


def _carried(headers: Mapping[str, str]) -> Any:
    """The context a message carries from where it was written, when nothing is traced
    here (an outbox row relayed: the request that wrote it in its transaction); None: the
    current one."""
    if "traceparent" not in headers or trace.get_current_span().get_span_context().is_valid:
        return None
    return propagate.extract(headers)


class Telemetry(Middleware):
    """Spans and metrics for every enqueue and every attempt, named as OpenTelemetry's
    messaging conventions name them: a `send <queue>` PRODUCER span per enqueue, a
    `process <queue>` CONSUMER span per attempt (its parent the send span, through the
    message's `traceparent`), and `settle <queue>` CLIENT spans (`settling`)."""

    async def enqueue(self, envelope: Envelope, call_next: Send) -> None:
        began = time.monotonic()
        if tracing():
            with _tracer.start_as_current_span(
                f"send {envelope.queue}",
                context=_carried(envelope.headers),
                kind=SpanKind.PRODUCER,
                attributes=_attributes(envelope, "send"),
            ):
                propagate.inject(envelope.headers)
                await call_next(envelope)
        else:
            await call_next(envelope)
        SENT_MESSAGES.add(envelope.queue)
        if metering():
            OPERATION_DURATION.record(time.monotonic() - began, _sent_labels(envelope.queue))
            ENQUEUED.add(1, {"taskq.queue": envelope.queue, "taskq.task": envelope.task})

    async def process(self, ctx: TaskContext, call_next: Run) -> Any:
        labels = {"taskq.queue": ctx.queue, "taskq.task": ctx.task}
        if ctx.attempt == 1 and ctx.envelope.enqueued_at and metering():
            wait = ctx.started - parse_time(ctx.envelope.enqueued_at).timestamp()
            QUEUE_WAIT.record(max(0.0, wait), labels)
        if not tracing():
            return await _measured(ctx, call_next, labels, None)
        parent = propagate.extract(dict(ctx.headers))
        attributes = _attributes(ctx.envelope, "process")
        attributes["messaging.consumer.group.name"] = ctx.queue
        attributes["taskq.delivery_count"] = ctx.attempt
        with _tracer.start_as_current_span(
            f"process {ctx.queue}", context=parent, kind=SpanKind.CONSUMER, attributes=attributes
        ) as span:
            _remember()  # what the job publishes later (a next step) joins this trace
            return await _measured(ctx, call_next, labels, span)


def _remember() -> None:
    """Keep the running (process) span's context for what its job publishes after the
    span ended (taskq.tracing.carry); here, not there: a traced delivery passes no module
    more than an untraced one."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    CAUSE.set(carrier or None)


def settling(
    operation: str, by_queue: Callable[[], Mapping[str, Sequence[Headers]]]
) -> contextlib.AbstractContextManager[None]:
    """Around settling messages (`operation`: ack, nak, term; `by_queue()`: by queue, the
    headers of each): the settle's duration per queue and, when tracing, a `settle <queue>`
    CLIENT span per queue, linked to each message's send span (the parent, for one
    message). Nothing at all while neither tracing nor metering."""
    if not (tracing() or metering()):
        return contextlib.nullcontext()
    return _settling(operation, by_queue())


@contextlib.contextmanager
def _settling(operation: str, by_queue: Mapping[str, Sequence[Headers]]) -> Iterator[None]:
    began = time.monotonic()
    with contextlib.ExitStack() as spans:
        if tracing():
            for queue, headers in by_queue.items():
                spans.enter_context(_settle_span(operation, queue, headers))
        yield
    if metering():
        took = time.monotonic() - began
        for queue in by_queue:
            OPERATION_DURATION.record(took, _consumer_labels(queue, operation, ""))


def _settle_span(operation: str, queue: str, headers: Sequence[Headers]) -> Any:
    contexts = [propagate.extract(dict(h)) for h in headers]
    links = []
    for context in contexts:
        linked = trace.get_current_span(context).get_span_context()
        if linked.is_valid:
            links.append(Link(linked))
    # the settle's metric attributes (operation name, destination, group), and its type
    attributes: dict[str, Any] = {
        **_consumer_labels(queue, operation, ""),
        "messaging.operation.type": "settle",
    }
    if len(headers) > 1:
        attributes["messaging.batch.message_count"] = len(headers)
    return _tracer.start_as_current_span(
        f"settle {queue}",
        context=contexts[0] if len(contexts) == 1 else None,
        kind=SpanKind.CLIENT,
        attributes=attributes,
        links=links,
    )


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
    if metering():
        RUN_TIME.record(seconds, labels)
        # the conventions' `error.type` of a failure: its exception's class
        error = type(outcome.error).__qualname__[:100] if isinstance(outcome, Failure) else ""
        PROCESS_DURATION.record(seconds, _consumer_labels(ctx.queue, "process", error))
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


@functools.lru_cache(maxsize=1024)
def _consumer_labels(queue: str, operation: str, error: str) -> dict[str, str]:
    labels = {**_consumed_labels(queue), "messaging.operation.name": operation}
    if error:
        labels["error.type"] = error
    return labels
