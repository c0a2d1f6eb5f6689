"""Trace context across taskq's own hops: the context a message taskq publishes by itself
carries (a workflow's next step, a decision, a chord's callback), so a run's steps join
the trace of the task that caused them.

A user's enqueue passes the enqueue middleware (`taskq.telemetry`), which injects the
current context. taskq's own publishes do not: they happen while a worker settles a task
(after its process span ended) or inside a decision's attempt. Within a worker's job the
`process` span's context is kept (`CAUSE`, by taskq.telemetry) for what the job publishes later,
and `carry` puts the current span's context, else the remembered one, on the message.
"""

from __future__ import annotations

from contextvars import ContextVar

from opentelemetry import propagate, trace

# a job's process span's context, set by taskq.telemetry (a context variable: each job is
# its own asyncio task)
CAUSE: ContextVar[dict[str, str] | None] = ContextVar("taskq_trace_cause", default=None)


def carry(headers: dict[str, str]) -> dict[str, str]:
    """`headers` with the trace context of the span running now, else of the job's process
    span; unchanged when there is neither (always, when tracing is off: no span is valid
    then, and `CAUSE` is set only while tracing)."""
    if trace.get_current_span().get_span_context().is_valid:
        carried = dict(headers)
        propagate.inject(carried)
        return carried
    cause = CAUSE.get()
    return {**headers, **cause} if cause else headers
